//! A cuBLASLt problem's descriptors and its chosen algorithm ([`LtPlan`]),
//! and the algorithm's configuration attributes as cuBLASLt reports them.

use super::{
    FAMILY_MAX_WORKSPACE_BYTES, Handles, LT_WORKSPACE_BYTES, LtSelection, Numerics, column_major,
};
use crate::error::{cuda_err, drv};
use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys as cu;
use gemm_audit_model::Result;
use gemm_audit_model::route::{GemmShape, VendorRoute};
use gemm_audit_model::vocab::{DType, GemmOp};
use std::ffi::c_void;

fn lt_type(d: DType) -> Result<lt::cudaDataType> {
    Ok(match d {
        DType::F32 => lt::cudaDataType::CUDA_R_32F,
        DType::F16 => lt::cudaDataType::CUDA_R_16F,
        DType::Bf16 => lt::cudaDataType::CUDA_R_16BF,
        other => return Err(super::not_called(other)),
    })
}

/// The algorithm attributes a cuBLASLt heuristic picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LtAlgo {
    pub id: i64,
    pub tile: i64,
    pub split_k: i64,
    pub reduction: i64,
    pub swizzle: i64,
    pub stages: i64,
    pub inner_shape: Option<i64>,
    pub cluster_shape: Option<i64>,
    pub workspace: u64,
}

/// cuBLASLt descriptors and the chosen algorithm of one problem.
pub(crate) struct LtPlan {
    desc: lt::cublasLtMatmulDesc_t,
    layouts: [lt::cublasLtMatrixLayout_t; 3],
    pub(super) algo: lt::cublasLtMatmulAlgo_t,
    pub attrs: LtAlgo,
    /// Workspace bytes offered to the call
    /// ([`FAMILY_MAX_WORKSPACE_BYTES`] for the family-fixed selection).
    pub(super) workspace_limit: usize,
}

impl std::fmt::Debug for LtPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LtPlan")
            .field("attrs", &self.attrs)
            .finish()
    }
}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: every handle was created by cublasLt and is destroyed only here (nulls skipped).
        unsafe {
            for l in self.layouts {
                if !l.is_null() {
                    let _ = lt::cublasLtMatrixLayoutDestroy(l);
                }
            }
            if !self.desc.is_null() {
                let _ = lt::cublasLtMatmulDescDestroy(self.desc);
            }
        }
    }
}

fn lt_check(s: lt::cublasStatus_t, what: &str) -> Result<()> {
    s.result().map_err(drv(what))
}

impl LtPlan {
    /// The descriptors of one problem, with no algorithm chosen yet.
    pub(crate) fn described(
        dtype: DType,
        op: GemmOp,
        shape: GemmShape,
        n: &Numerics,
    ) -> Result<LtPlan> {
        let mut plan = LtPlan {
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            // SAFETY: the algorithm is plain data (u64 words); zero is a valid placeholder.
            algo: unsafe { std::mem::zeroed() },
            attrs: LtAlgo {
                id: 0,
                tile: 0,
                split_k: 0,
                reduction: 0,
                swizzle: 0,
                stages: 0,
                inner_shape: None,
                cluster_shape: None,
                workspace: 0,
            },
            workspace_limit: 0,
        };
        let (ta, tb, lda, ldb) = column_major(op, shape);
        let t = lt_type(dtype)?;
        // SAFETY: every out-pointer is valid for one write; attribute buffers
        // are plain integers of the documented sizes.
        unsafe {
            lt_check(
                lt::cublasLtMatmulDescCreate(
                    &mut plan.desc,
                    n.lt_compute,
                    lt::cudaDataType::CUDA_R_32F,
                ),
                "cublasLtMatmulDescCreate",
            )?;
            for (attr, trans) in [
                (
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                    ta,
                ),
                (
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                    tb,
                ),
            ] {
                // cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1.
                let v: i32 = if trans { 1 } else { 0 };
                lt_check(
                    lt::cublasLtMatmulDescSetAttribute(
                        plan.desc,
                        attr,
                        (&v as *const i32).cast(),
                        size_of::<i32>(),
                    ),
                    "cublasLtMatmulDescSetAttribute",
                )?;
            }
            // "A" is B' (n x k column-major, or k x n transposed), "B" is A', C is n x m.
            let (a_rows, a_cols) = if ta {
                (shape.k, shape.n)
            } else {
                (shape.n, shape.k)
            };
            let (b_rows, b_cols) = if tb {
                (shape.m, shape.k)
            } else {
                (shape.k, shape.m)
            };
            let dims = [
                (a_rows, a_cols, lda),
                (b_rows, b_cols, ldb),
                (shape.n, shape.m, shape.n),
            ];
            for (slot, (r, c, ld)) in plan.layouts.iter_mut().zip(dims) {
                lt_check(
                    lt::cublasLtMatrixLayoutCreate(slot, t, r, c, ld as i64),
                    "cublasLtMatrixLayoutCreate",
                )?;
            }
        }
        Ok(plan)
    }

    /// Up to `count` heuristic results for this plan's problem, best first,
    /// with at most `workspace` bytes and, when given, only the reduction
    /// schemes in `reduction_mask`.
    pub(crate) fn heuristic(
        &self,
        handle: lt::cublasLtHandle_t,
        workspace: u64,
        reduction_mask: Option<u32>,
        min_alignment_b: Option<u32>,
        count: usize,
    ) -> Result<Vec<lt::cublasLtMatmulHeuristicResult_t>> {
        use lt::cublasLtMatmulPreferenceAttributes_t as P;
        // SAFETY: the preference is created, used and destroyed here; the
        // attribute buffers are integers of the documented sizes; `results`
        // has room for `count` entries.
        unsafe {
            let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
            lt_check(
                lt::cublasLtMatmulPreferenceCreate(&mut pref),
                "cublasLtMatmulPreferenceCreate",
            )?;
            // Each attribute as its native bytes: the workspace is a
            // uint64, the masks and alignments uint32.
            let mut attrs: Vec<(P, Vec<u8>)> = vec![(
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                workspace.to_ne_bytes().to_vec(),
            )];
            if let Some(mask) = reduction_mask {
                attrs.push((
                    P::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                    mask.to_ne_bytes().to_vec(),
                ));
            }
            if let Some(bytes) = min_alignment_b {
                attrs.push((
                    P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    bytes.to_ne_bytes().to_vec(),
                ));
            }
            let mut status = lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS;
            for (attr, value) in &attrs {
                if status.result().is_ok() {
                    status = lt::cublasLtMatmulPreferenceSetAttribute(
                        pref,
                        *attr,
                        value.as_ptr().cast(),
                        value.len(),
                    );
                }
            }
            let mut results: Vec<lt::cublasLtMatmulHeuristicResult_t> =
                vec![std::mem::zeroed(); count];
            let mut found = 0i32;
            if status.result().is_ok() {
                status = lt::cublasLtMatmulAlgoGetHeuristic(
                    handle,
                    self.desc,
                    self.layouts[0],
                    self.layouts[1],
                    self.layouts[2],
                    self.layouts[2],
                    pref,
                    count as i32,
                    results.as_mut_ptr(),
                    &mut found,
                );
            }
            let _ = lt::cublasLtMatmulPreferenceDestroy(pref);
            lt_check(status, "cublasLtMatmulAlgoGetHeuristic")?;
            results.truncate(found.clamp(0, count as i32) as usize);
            results.retain(|r| r.state.result().is_ok());
            Ok(results)
        }
    }

    /// `cublasLtMatmulAlgoCheck` of `algo` on this plan's problem: the
    /// workspace bytes it needs, or why it cannot run it.
    pub(crate) fn check(
        &self,
        handle: lt::cublasLtHandle_t,
        algo: &lt::cublasLtMatmulAlgo_t,
    ) -> Result<usize> {
        // SAFETY: plain data, written by the check.
        let mut result: lt::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        // SAFETY: descriptors and layouts are this plan's; `algo` and
        // `result` are valid for reading and one write.
        let status = unsafe {
            lt::cublasLtMatmulAlgoCheck(
                handle,
                self.desc,
                self.layouts[0],
                self.layouts[1],
                self.layouts[2],
                self.layouts[2],
                algo,
                &mut result,
            )
        };
        lt_check(status, "cublasLtMatmulAlgoCheck")?;
        Ok(result.workspaceSize)
    }

    /// Enqueues `cublasLtMatmul` of this plan's problem with `algo`:
    /// row-major `C = A' B'` at `[pa, pb, pc]`, alpha 1, beta 0, with the
    /// workspace `(address, bytes)`, on `stream`.
    ///
    /// # Safety
    /// `algo` must have passed [`LtPlan::check`] on this plan with at most
    /// the workspace's bytes; the three addresses must be live device
    /// allocations of the dense operands of the plan's problem, and the
    /// workspace live, on `stream`'s context, until the call has run.
    pub(crate) unsafe fn matmul(
        &self,
        handle: lt::cublasLtHandle_t,
        algo: &lt::cublasLtMatmulAlgo_t,
        [pa, pb, pc]: [cu::CUdeviceptr; 3],
        (pw, workspace): (cu::CUdeviceptr, usize),
        stream: lt::cudaStream_t,
    ) -> Result<()> {
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        // SAFETY: the caller's contract; "A" is B', "B" is A' (column-major
        // C^T = B'^T A'^T), C is written in place (C and D alias).
        unsafe {
            lt::cublasLtMatmul(
                handle,
                self.desc,
                (&alpha as *const f32).cast(),
                pb as *const c_void,
                self.layouts[0],
                pa as *const c_void,
                self.layouts[1],
                (&beta as *const f32).cast(),
                pc as *const c_void,
                self.layouts[2],
                pc as *mut c_void,
                self.layouts[2],
                algo,
                pw as *mut c_void,
                workspace,
                stream,
            )
        }
        .result()
        .map_err(drv("cublasLtMatmul"))
    }

    /// The plan of one problem with its algorithm chosen as `selection`
    /// says (family-fixed: `recorded`'s configuration when given).
    pub(super) fn new(
        h: &Handles,
        dtype: DType,
        op: GemmOp,
        shape: GemmShape,
        n: &Numerics,
        selection: LtSelection,
        recorded: Option<&VendorRoute>,
    ) -> Result<LtPlan> {
        let handle = h.lt_handle()?;
        let mut plan = LtPlan::described(dtype, op, shape, n)?;
        let problem = format!("{op} {dtype} {}x{}x{}", shape.m, shape.k, shape.n);
        use lt::cublasLtMatmulAlgoConfigAttributes_t as A;
        match selection {
            LtSelection::Heuristic => {
                let best = plan
                    .heuristic(handle, LT_WORKSPACE_BYTES as u64, None, None, 1)?
                    .into_iter()
                    .next()
                    .ok_or_else(|| cuda_err(format!("cuBLASLt has no algorithm for {problem}")))?;
                plan.algo = best.algo;
                plan.attrs.workspace = best.workspaceSize as u64;
                plan.workspace_limit = LT_WORKSPACE_BYTES;
            }
            LtSelection::FamilyFixed => {
                if let Some(why) = crate::blas::lt_family::refusal(op, dtype, shape.m) {
                    return Err(cuda_err(why));
                }
                let algo = crate::blas::lt_family::family_algo(h, dtype, op, shape, n, recorded)?;
                // This m itself, exactly.
                let needed = match plan.check(handle, &algo) {
                    Ok(ws) if ws <= FAMILY_MAX_WORKSPACE_BYTES => ws,
                    Ok(ws) => {
                        return Err(cuda_err(format!(
                            "cublaslt-invariant: the family configuration ({}) needs {ws} bytes of workspace for {problem}",
                            crate::blas::lt_family::describe(&algo)
                        )));
                    }
                    Err(e) => {
                        return Err(cuda_err(format!(
                            "cublaslt-invariant: the family configuration ({}) cannot serve {problem}: {e}",
                            crate::blas::lt_family::describe(&algo)
                        )));
                    }
                };
                plan.algo = algo;
                plan.attrs.workspace = needed as u64;
                plan.workspace_limit = FAMILY_MAX_WORKSPACE_BYTES;
            }
        }
        let get = |attr: A| -> Option<i64> { algo_attribute(&plan.algo, attr) };
        plan.attrs.id = get(A::CUBLASLT_ALGO_CONFIG_ID).unwrap_or(-1);
        plan.attrs.tile = get(A::CUBLASLT_ALGO_CONFIG_TILE_ID).unwrap_or(-1);
        plan.attrs.split_k = get(A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM).unwrap_or(-1);
        plan.attrs.reduction = get(A::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME).unwrap_or(-1);
        plan.attrs.swizzle = get(A::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING).unwrap_or(-1);
        plan.attrs.stages = get(A::CUBLASLT_ALGO_CONFIG_STAGES_ID).unwrap_or(-1);
        plan.attrs.inner_shape = get(A::CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
        plan.attrs.cluster_shape = get(A::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
        Ok(plan)
    }
}

/// One algorithm configuration attribute, read at the size cuBLASLt reports.
pub(crate) fn algo_attribute(
    algo: &lt::cublasLtMatmulAlgo_t,
    attr: lt::cublasLtMatmulAlgoConfigAttributes_t,
) -> Option<i64> {
    let mut size = 0usize;
    // SAFETY: a zero-size query with a null buffer only reports the size.
    let s = unsafe {
        lt::cublasLtMatmulAlgoConfigGetAttribute(algo, attr, std::ptr::null_mut(), 0, &mut size)
    };
    if s.result().is_err() || size == 0 || size > 8 {
        return None;
    }
    let mut buf = [0u8; 8];
    let mut written = 0usize;
    // SAFETY: `buf` has room for `size` (<= 8) bytes.
    let s = unsafe {
        lt::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            buf.as_mut_ptr().cast::<c_void>(),
            size,
            &mut written,
        )
    };
    if s.result().is_err() {
        return None;
    }
    Some(match size {
        1 => buf[0] as i8 as i64,
        2 => i16::from_le_bytes([buf[0], buf[1]]) as i64,
        4 => i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as i64,
        _ => i64::from_le_bytes(buf),
    })
}
