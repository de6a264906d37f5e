#![allow(unsafe_code)]
//! Batch-invariant GEMMs an engine calls on its own buffers and stream:
//! the TMA + wgmma families (`wgmma-large`, `wgmma-small`, and the
//! invariant ladder's rungs `ladder-narrow`, `ladder-decode`, `ladder-mid`, `ladder-band`
//! and `ladder-wide`; Hopper
//! only), whose every output element sums k in one fixed order whatever m
//! is, so a row's bits do not depend on the batch it is computed in (the
//! audit's `wgmma-sweep` and `ladder-sweep` prove it on the device).
//! [`InvariantGemms::plan_batch_invariant`] picks the ladder's fastest
//! rung for m; every rung of one (op, dtype, k, n) gives the same bits.
//!
//! [`InvariantGemms`] compiles the module once into the engine's context;
//! its [`InvariantGemms::module`] is what the engine adds to its live
//! context. [`InvariantGemms::plan`] builds the exact route of one problem
//! (or refuses the shape, saying why), and [`InvariantGemm::run`] pushes
//! that route to the engine's recorder and enqueues the kernel on the
//! engine's stream, eagerly or under the engine's capture.

use crate::catalog::{self, CudaFamily, CudaKernel, CudaModule, Geometry};
use crate::error::{CudaError, cuda_err, drv};
use crate::module::LoadedModule;
use crate::tma;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg,
};
use gemm_audit_model::Result;
use gemm_audit_model::identity::{GemmRouteIdentity, ModuleIdentity};
use gemm_audit_model::kernels::element_size;
use gemm_audit_model::recorder::GemmRouteRecorder;
use gemm_audit_model::route::{GemmShape, GemmStrides, ResolvedGemmRoute};
use gemm_audit_model::vocab::{DType, GemmOp};
use std::sync::Arc;

/// The wgmma module loaded into an engine's context.
pub struct InvariantGemms {
    ctx: Arc<CudaContext>,
    module: LoadedModule,
}

impl std::fmt::Debug for InvariantGemms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvariantGemms")
            .field("module", &self.module.identity.digest)
            .finish_non_exhaustive()
    }
}

impl InvariantGemms {
    /// Compiles the wgmma module (NVRTC, `sm_90a`) and loads it into
    /// `ctx`. Refused, saying why, on a device that is not compute
    /// capability 9.0 or when NVRTC is missing.
    pub fn new(ctx: &Arc<CudaContext>) -> Result<InvariantGemms> {
        crate::nvrtc::ensure_loaded()?;
        let arch = crate::identity::arch(ctx)?;
        let Some(target) = catalog::wgmma_target(&arch) else {
            return Err(cuda_err(format!(
                "the batch-invariant wgmma GEMMs need a compute capability 9.0 (Hopper) device; this one is {arch}"
            )));
        };
        let module = LoadedModule::compile(
            ctx,
            CudaModule::Wgmma,
            target,
            &crate::nvrtc::nvrtc_version()?,
        )?;
        Ok(InvariantGemms {
            ctx: ctx.clone(),
            module,
        })
    }

    /// The module's identity: add it to the engine's live context (its
    /// `modules`) so the routes of [`InvariantGemms::plan`] are permitted.
    pub fn module(&self) -> &ModuleIdentity {
        &self.module.identity
    }

    /// The route of C = A'·B' for one problem (dense, row-major storage
    /// as `op` says, alpha 1, beta 0) with `family` (`wgmma-large` or
    /// `wgmma-small`), under `live`. Refused with the reason when the
    /// family cannot serve the shape or dtype, or when `live` does not
    /// hold this module or permit the route.
    pub fn plan(
        &self,
        live: &GemmRouteIdentity,
        family: CudaKernel,
        op: GemmOp,
        dtype: DType,
        shape: GemmShape,
    ) -> Result<InvariantGemm> {
        self.plan_strided(
            live,
            family,
            op,
            dtype,
            shape,
            GemmStrides::dense(op, shape),
        )
    }

    /// [`InvariantGemms::plan`] of operands stored with leading
    /// dimensions `strides` (views into wider buffers, e.g. one
    /// projection's columns of a fused QKV output): `lda` and `ldb` each at
    /// least its stored row's extent and a multiple of 8 elements (TMA),
    /// `ldc` at least n and even. The kernel, its k order and so the output
    /// bits are those of the dense problem; the route records the strides.
    pub fn plan_strided(
        &self,
        live: &GemmRouteIdentity,
        family: CudaKernel,
        op: GemmOp,
        dtype: DType,
        shape: GemmShape,
        strides: GemmStrides,
    ) -> Result<InvariantGemm> {
        if !family.is_wgmma() {
            let wgmma: Vec<&str> = CudaKernel::ALL
                .iter()
                .filter(|f| f.is_wgmma())
                .map(|f| f.name())
                .collect();
            return Err(cuda_err(format!(
                "{} is not a batch-invariant wgmma family ({})",
                family.name(),
                wgmma.join(", ")
            )));
        }
        let family = family.for_shape(shape.k, shape.n);
        if dtype == DType::F32 {
            return Err(cuda_err(
                "the wgmma families multiply bf16 or f16 operands, not f32",
            ));
        }
        let symbol = family.symbol(op, dtype);
        let (func, resources) = self.module.function(&symbol)?;
        let route = catalog::nvrtc_route_strided(
            live,
            &self.module.identity,
            *resources,
            "planned",
            (op, dtype, shape),
            family,
            strides,
        )
        .map_err(|e| cuda_err(format!("{symbol} cannot serve {op} {dtype} {shape:?}: {e}")))?;
        let geometry = family
            .geometry_on(shape, live.device.multiprocessors)
            .map_err(|e| cuda_err(e.to_string()))?;
        let workspace = match catalog::wgmma_workspace(family, shape, &geometry) {
            Some((floats, flags)) => Some(self.workspace(shape, floats, flags)?),
            None => None,
        };
        Ok(InvariantGemm {
            ctx: self.ctx.clone(),
            family,
            func: func.clone(),
            geometry,
            route,
            workspace,
        })
    }

    /// [`InvariantGemms::plan`] with the rung `route = "batch-invariant"`
    /// serves the problem with ([`gemm_audit_model::kernels::RouteChoice::ladder_rung`]:
    /// a decode-size rung up to [`gemm_audit_model::kernels::LADDER_DECODE_MAX_M`],
    /// larger tiles above). Plans of one (op, dtype, k, n) give the same
    /// bits at every m.
    pub fn plan_batch_invariant(
        &self,
        live: &GemmRouteIdentity,
        op: GemmOp,
        dtype: DType,
        shape: GemmShape,
    ) -> Result<InvariantGemm> {
        self.plan_batch_invariant_strided(live, op, dtype, shape, GemmStrides::dense(op, shape))
    }

    /// [`InvariantGemms::plan_batch_invariant`] of operands stored with
    /// leading dimensions `strides` (as [`InvariantGemms::plan_strided`]):
    /// the same rung and bits as the dense problem. This is how TN serves
    /// m < 8, whose dense A rows (m elements) TMA cannot read: store A with
    /// `lda` a multiple of 8.
    pub fn plan_batch_invariant_strided(
        &self,
        live: &GemmRouteIdentity,
        op: GemmOp,
        dtype: DType,
        shape: GemmShape,
        strides: GemmStrides,
    ) -> Result<InvariantGemm> {
        let rung =
            gemm_audit_model::kernels::RouteChoice::ladder_rung(op, shape.m, shape.k, shape.n);
        self.plan_strided(live, rung, op, dtype, shape, strides)
    }

    /// The partials and flags or counters a launch reads besides its
    /// operands ([`catalog::wgmma_workspace`]), zeroed.
    fn workspace(
        &self,
        shape: GemmShape,
        floats: u64,
        flags: u64,
    ) -> Result<(CudaSlice<f32>, CudaSlice<u32>)> {
        if floats > gemm_audit_model::kernels::MAX_ELEMENTS {
            return Err(cuda_err(format!("the workspace of {shape:?} is too large")));
        }
        let stream = self.ctx.default_stream();
        let ws = crate::launch::zeroed_workspace(&stream, floats as usize, flags as usize)?;
        // Zero before the engine's own stream first reads it.
        stream.synchronize().map_err(drv("zeroing the workspace"))?;
        Ok(ws)
    }
}

/// One planned batch-invariant GEMM: its exact route and its kernel.
pub struct InvariantGemm {
    ctx: Arc<CudaContext>,
    family: CudaKernel,
    func: CudaFunction,
    geometry: Geometry,
    route: ResolvedGemmRoute,
    /// Partials and flags or counters ([`catalog::wgmma_workspace`]): one
    /// launch at a time may use them.
    workspace: Option<(CudaSlice<f32>, CudaSlice<u32>)>,
}

impl std::fmt::Debug for InvariantGemm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvariantGemm")
            .field("symbol", &self.route.kernel_symbol)
            .field("shape", &self.route.shape)
            .finish_non_exhaustive()
    }
}

impl InvariantGemm {
    /// The route [`InvariantGemm::run`] pushes, named `gemm`.
    pub fn route(&self, gemm: impl Into<String>) -> ResolvedGemmRoute {
        ResolvedGemmRoute {
            gemm: gemm.into(),
            ..self.route.clone()
        }
    }

    /// Pushes the route (named `gemm`) to `recorder`, then enqueues
    /// C = A'·B' on `stream` over the engine's buffers (dense storage of
    /// the planned problem; `T` is any 2-byte element, e.g. `half::bf16`).
    /// Nothing is pushed or enqueued when a buffer is too small, `T` is
    /// not 2 bytes, or `stream` is not of the context the module was
    /// loaded into; nothing is enqueued when the push is refused.
    ///
    /// A plan of a ladder rung that puts its k chunks on the grid
    /// (`ladder-decode`, `ladder-mid`, more than one chunk), or of a
    /// persistent wgmma kernel with more tiles than SMs (`wgmma-large`,
    /// `-medium`, `-small`, whose last wave's tiles are summed in series
    /// through partials), owns one workspace and one set of counters or
    /// flags: its launches must follow one another (one stream, or one
    /// graph), never overlap. Counters and flags reset themselves, so
    /// eager runs and graph replays repeat. Make one plan per stream to
    /// run the same problem concurrently. A persistent kernel's pieces wait
    /// for one another, which needs its blocks (at most one per SM) to make
    /// progress together: the same assumption as any stream-K GEMM.
    pub fn run<T: DeviceRepr>(
        &self,
        recorder: &GemmRouteRecorder,
        gemm: impl Into<String>,
        stream: &Arc<CudaStream>,
        a: &CudaSlice<T>,
        b: &CudaSlice<T>,
        c: &mut CudaSlice<T>,
    ) -> Result<()> {
        let GemmShape { m, k, n } = self.route.shape;
        let es = element_size(self.route.dtype);
        if size_of::<T>() != es {
            return Err(cuda_err(format!(
                "{} operands are {es}-byte elements; these buffers hold {}-byte ones",
                self.route.dtype,
                size_of::<T>()
            )));
        }
        // Elements each operand spans: all rows but the last at the
        // leading dimension, the last at its own extent.
        let st = self.route.strides;
        let span =
            |rows: u64, ld: u64, cols: u64| if rows == 0 { 0 } else { (rows - 1) * ld + cols };
        let (a_rows, a_cols) = if self.route.op == GemmOp::Tn {
            (k, m)
        } else {
            (m, k)
        };
        let (b_rows, b_cols) = if self.route.op == GemmOp::Nt {
            (n, k)
        } else {
            (k, n)
        };
        for (what, buf, want) in [
            ("A", a, span(a_rows, st.lda, a_cols)),
            ("B", b, span(b_rows, st.ldb, b_cols)),
            ("C", &*c, span(m, st.ldc, n)),
        ] {
            if (buf.len() as u64) < want {
                return Err(cuda_err(format!(
                    "operand {what} holds {} elements; the planned problem needs {want}",
                    buf.len()
                )));
            }
        }
        if !Arc::ptr_eq(stream.context(), &self.ctx) {
            return Err(cuda_err(
                "the stream is not of the context the invariant GEMMs were loaded into",
            ));
        }
        recorder.push(self.route(gemm))?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let (op, dtype, shape) = (self.route.op, self.route.dtype, self.route.shape);
        let [sa, sb] = catalog::tensor_maps_strided(self.family, op, dtype, shape, st);
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let maps = [tma::encode(&sa, pa)?, tma::encode(&sb, pb)?];
        let g = &self.geometry;
        let cfg = LaunchConfig {
            grid_dim: (g.grid[0], g.grid[1], g.grid[2]),
            block_dim: (g.block[0], g.block[1], g.block[2]),
            shared_mem_bytes: g.dynamic_shared_bytes,
        };
        let (m, k, n) = (m as u32, k as u32, n as u32);
        let chunks = self.family.splits();
        let workspace = self
            .workspace
            .as_ref()
            .map(|(ws, counters)| (ws.device_ptr(stream), counters.device_ptr(stream)));
        // Null where the rung reads no workspace (one chunk, or the
        // register-folding rung).
        let (ws, counters) = workspace
            .as_ref()
            .map_or((0, 0), |((ws, _), (counters, _))| (*ws, *counters));
        let mut lb = stream.launch_builder(&self.func);
        lb.arg(&maps[0]).arg(&maps[1]).arg(&mut *c);
        lb.arg(&ws).arg(&counters);
        let ldc = st.ldc as u32;
        lb.arg(&m).arg(&k).arg(&n).arg(&ldc);
        if self.family.is_ladder() {
            lb.arg(&chunks);
        }
        // SAFETY: the arguments match kernels/wgmma.cu's signature (tensor
        // maps of A and B, C, workspace, counters or flags, m, k, n, ldc;
        // for the ladder also the chunks its geometry was checked for); the
        // workspace and its zeroed counters or flags are the ones
        // catalog::wgmma_workspace sizes for this family, shape and
        // geometry, allocated by the plan, or null where it reads none; the maps were encoded over A and B
        // with the planned problem's dims and leading dimensions, which
        // the buffers span (checked above; TMA zero-fills reads past the dims)
        // and are passed by value; C spans m rows ldc apart of n elements
        // of the dtype (checked above; ldc >= n and even, checked when
        // planned) and the kernel bounds-checks every store against m and n;
        // the function was loaded into this stream's context (checked
        // above) and allowed the geometry's dynamic shared memory when its
        // module was loaded.
        unsafe { lb.launch(cfg) }.map(|_| ()).map_err(|e| {
            CudaError::new(format!("launching {}", self.route.kernel_symbol), e).into()
        })
    }
}
