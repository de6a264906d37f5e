#![allow(unsafe_code)]
//! Vendor routes: cuBLAS `cublasGemmEx` and cuBLASLt `cublasLtMatmul`.
//!
//! Row-major `C[m,n] = A'[m,k] * B'[k,n]` is computed as the column-major
//! `C^T = B'^T A'^T`, so outputs have the CPU's layout. Numerics per mode:
//!
//! | mode | dtype | cuBLAS compute / math | cuBLASLt compute | contract |
//! | --- | --- | --- | --- | --- |
//! | cublas-fast | f32 | 32F_FAST_TF32 / TF32_TENSOR_OP | 32F_FAST_TF32 | vendor-fast |
//! | cublas-fast | f16, bf16 | 32F / DEFAULT | 32F | vendor-fast |
//! | cublas-pedantic | f32 | 32F_PEDANTIC / PEDANTIC | 32F | vendor-pedantic |
//! | cublas-pedantic | f16, bf16 | 32F_PEDANTIC / PEDANTIC | 32F | vendor-pedantic |
//!
//! cuBLAS exposes no algorithm attributes for `cublasGemmEx` (it is called
//! with `CUBLAS_GEMM_DEFAULT`): its route records algorithm id -1 and -1
//! for the attributes it cannot see; cuBLASLt routes record the heuristic's
//! first algorithm's attributes (`cublasLtMatmulAlgoConfigGetAttribute`).
//! Both record the physical kernels a capture of the single call contains.

use crate::blas::lt_family::FamilyChoices;
use crate::error::{cuda_err, drv};
use crate::shared::Shared;
use cudarc::cublas::{CudaBlas, sys as blas};
use cudarc::cublaslt::sys as lt;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, sys as cu};
use gemm_audit_model::CompilerIdentity;
use gemm_audit_model::Result;
use gemm_audit_model::declaration::{
    BkRule, SplitRule, SymbolDeclaration, VendorConfiguration, VendorPermits,
};
use gemm_audit_model::digest::{Digest, DigestWriter, FieldValue};
use gemm_audit_model::identity::{ModuleIdentity, SymbolEntry};
use gemm_audit_model::pin::VENDOR_INVARIANT_MAX_WORKSPACE_BYTES;
use gemm_audit_model::route::{GemmShape, TileShape, VendorRoute};
use gemm_audit_model::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, OperandConversion, OutputOwnership, PhysicalBackend,
};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) mod lt_family;
mod lt_plan;
pub(crate) use lt_plan::LtPlan;
pub(crate) use lt_plan::algo_attribute;

/// The API-level symbol of cuBLAS routes (listed by its pseudo-module).
pub const CUBLAS_SYMBOL: &str = "cublasGemmEx";
/// The API-level symbol of cuBLASLt routes.
pub const CUBLASLT_SYMBOL: &str = "cublasLtMatmul";
/// The entry point cudarc's safe `Gemm<f32>` calls (its halves call
/// [`CUBLAS_SYMBOL`] with `CUBLAS_COMPUTE_32F`).
pub const CUBLAS_SGEMM_SYMBOL: &str = "cublasSgemm_v2";
/// The symbols of the cuBLAS pseudo-module.
pub(crate) const CUBLAS_SYMBOLS: [&str; 2] = [CUBLAS_SYMBOL, CUBLAS_SGEMM_SYMBOL];
/// cuBLASLt workspace offered to the heuristic (NVIDIA's Hopper recommendation).
pub const LT_WORKSPACE_BYTES: usize = 32 << 20;

/// One vendor library that was found: its version and pseudo-module.
#[derive(Debug, Clone)]
pub(crate) struct Library {
    /// e.g. `cuBLAS 13.1.0`.
    pub version: String,
    pub module: ModuleIdentity,
}

/// cuBLAS and cuBLASLt, where present. Handles are created on first use.
#[derive(Debug)]
pub(crate) struct Vendor {
    pub cublas: Option<Library>,
    pub cublaslt: Option<Library>,
    handles: Mutex<Option<Handles>>,
}

/// Which vendor API a route calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    Blas,
    Lt,
}

impl Api {
    pub(crate) fn symbol(&self) -> &'static str {
        match self {
            Api::Blas => CUBLAS_SYMBOL,
            Api::Lt => CUBLASLT_SYMBOL,
        }
    }
}

/// How a cuBLASLt call's algorithm is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LtSelection {
    /// The heuristic's first algorithm for the exact problem, with up to
    /// [`LT_WORKSPACE_BYTES`] of workspace (split-K allowed): what a user
    /// of cuBLASLt gets, and batch size changes the algorithm.
    Heuristic,
    /// One configuration for every m of a problem family (op, dtype, k, n),
    /// timed once among the heuristic's split-K-free candidates for the
    /// family's reference problem (m = [`FAMILY_REFERENCE_M`]) that need
    /// at most [`FAMILY_MAX_WORKSPACE_BYTES`] of workspace at every probe
    /// size (`crate::lt_family` says how); `cublasLtMatmulAlgoCheck`
    /// checks it again for each m. Each output's reduction then runs in
    /// one CTA in the kernel's fixed k order, whatever m is.
    FamilyFixed,
}

pub use crate::blas::lt_family::{FAMILY_MAX_WORKSPACE_BYTES, FAMILY_REFERENCE_M};

/// The math mode of a cuBLAS handle, read back from the library.
pub(crate) fn math_mode(
    blas: &CudaBlas,
) -> std::result::Result<blas::cublasMath_t, crate::CudaError> {
    let mut mode = blas::cublasMath_t::CUBLAS_DEFAULT_MATH;
    // SAFETY: the handle is live for `blas`'s lifetime; `mode` is valid for
    // one write.
    unsafe { blas::cublasGetMathMode(*blas.handle(), &mut mode) }
        .result()
        .map_err(|e| crate::CudaError::new("cublasGetMathMode", e))?;
    Ok(mode)
}

/// Whether a cuBLAS handle lets its kernels use atomics (which make
/// results depend on the order the atomics land in).
pub(crate) fn atomics_allowed(blas: &CudaBlas) -> std::result::Result<bool, crate::CudaError> {
    let mut mode = blas::cublasAtomicsMode_t::CUBLAS_ATOMICS_NOT_ALLOWED;
    // SAFETY: the handle is live for `blas`'s lifetime; `mode` is valid for
    // one write.
    unsafe { blas::cublasGetAtomicsMode(*blas.handle(), &mut mode) }
        .result()
        .map_err(|e| crate::CudaError::new("cublasGetAtomicsMode", e))?;
    Ok(mode == blas::cublasAtomicsMode_t::CUBLAS_ATOMICS_ALLOWED)
}

/// Sets a cuBLAS handle's math mode.
pub(crate) fn set_math_mode(
    blas: &CudaBlas,
    mode: blas::cublasMath_t,
) -> std::result::Result<(), crate::CudaError> {
    // SAFETY: the handle is live for `blas`'s lifetime; setting the mode
    // touches no buffer.
    unsafe { blas::cublasSetMathMode(*blas.handle(), mode) }
        .result()
        .map_err(|e| crate::CudaError::new("cublasSetMathMode", e))
}

/// The dtypes an entry point serves: `cublasSgemm_v2` only f32.
fn symbol_dtypes(symbol: &str) -> &'static [DType] {
    if symbol == CUBLAS_SGEMM_SYMBOL {
        &[DType::F32]
    } else {
        DType::ALL
    }
}

/// The identity of a vendor library as a module: its digest frames the
/// kind and version; each symbol (an API entry point) serves its dtypes
/// and every op under the vendor contracts, with tensor cores as
/// [`Numerics::of`] sets them. The module's compiler is named after its
/// first symbol.
fn pseudo_module(kind: ModuleKind, version: &str, symbols: &[&str], arch: &str) -> ModuleIdentity {
    let mut w = DigestWriter::new("gemm-audit/vendor-module/v1");
    w.field("kind", FieldValue::Str(&kind.as_str()));
    w.field("version", FieldValue::Str(version));
    let digest = w.finish();
    let backend = match kind {
        ModuleKind::Cublas => PhysicalBackend::Cublas,
        _ => PhysicalBackend::CublasLt,
    };
    let entries = symbols
        .iter()
        .map(|&symbol| {
            let mut entry = SymbolEntry::new(symbol);
            for dtype in symbol_dtypes(symbol) {
                for fast in [false, true] {
                    let n = Numerics::of(*dtype, fast);
                    entry = entry.serving_converted(
                        GemmOp::ALL,
                        &[*dtype],
                        &n.contract,
                        n.tensor_cores,
                        n.conversion,
                    );
                }
                if backend == PhysicalBackend::CublasLt {
                    let n = Numerics::for_selection(*dtype, true, LtSelection::FamilyFixed)
                        .expect("fast math is the family-fixed selection's");
                    entry = entry.serving_converted(
                        GemmOp::ALL,
                        &[*dtype],
                        &n.contract,
                        n.tensor_cores,
                        n.conversion,
                    );
                }
            }
            entry.declaring(vendor_declaration(&backend, version, symbol))
        })
        .collect();
    let compiler = CompilerIdentity {
        name: symbols[0].to_string(),
        version: version.to_string(),
        options_digest: digest,
        source_digest: digest,
    };
    ModuleIdentity::new(backend, kind, digest, compiler, arch, entries)
}

/// The options digest of a call made through cudarc's safe `Gemm`: the
/// entry point, the dtype and the handle's math mode (cudarc passes no
/// compute type to `cublasSgemm_v2`, and `CUBLAS_COMPUTE_32F` to
/// `cublasGemmEx` for halves, so the math mode decides the numerics).
/// alpha and beta are call arguments, in the arguments digest.
pub(crate) fn cudarc_options_digest(
    symbol: &str,
    dtype: DType,
    math: blas::cublasMath_t,
) -> Digest {
    let mut w = DigestWriter::new("gemm-audit/vendor-options/cudarc/v1");
    w.field("api", FieldValue::Str(symbol));
    w.field("dtype", FieldValue::Str(dtype.as_str()));
    if symbol == CUBLAS_SYMBOL {
        w.field(
            "blas_compute",
            FieldValue::U32(blas::cublasComputeType_t::CUBLAS_COMPUTE_32F as u32),
        );
    }
    w.field("blas_math", FieldValue::U32(math as u32));
    w.finish()
}

/// What a vendor entry point's calls may report: the library picks the
/// kernels, tile and split-K per call, so only what this crate's
/// configuration of it fixes is declared. cuBLAS exposes no algorithm
/// attributes (-1); cuBLASLt's split-K and reduction scheme are the
/// heuristic's to pick within the workspace offered.
pub(crate) fn vendor_declaration(
    backend: &PhysicalBackend,
    version: &str,
    symbol: &str,
) -> SymbolDeclaration {
    let (api, selections): (Api, &[LtSelection]) = match backend {
        PhysicalBackend::CublasLt => (Api::Lt, &[LtSelection::Heuristic, LtSelection::FamilyFixed]),
        _ => (Api::Blas, &[LtSelection::Heuristic]),
    };
    // Every (dtype, math mode, selection) this crate sets the entry point
    // up with, then the calls cudarc's safe `Gemm` makes of it.
    let mut configurations = Vec::new();
    if symbol != CUBLAS_SGEMM_SYMBOL {
        for dtype in DType::ALL {
            for fast in [false, true] {
                for &selection in selections {
                    // The family-fixed selection has fast math only.
                    let Ok(n) = Numerics::for_selection(*dtype, fast, selection) else {
                        continue;
                    };
                    configurations.push(VendorConfiguration {
                        dtype: *dtype,
                        contract: n.contract.clone(),
                        options_digest: n.digest(api, selection),
                    });
                }
            }
        }
    }
    if api == Api::Blas {
        for dtype in cudarc_dtypes(symbol) {
            for fast in [false, true] {
                let n = Numerics::of(*dtype, fast);
                configurations.push(VendorConfiguration {
                    dtype: *dtype,
                    contract: n.contract.clone(),
                    options_digest: cudarc_options_digest(symbol, *dtype, n.blas_math),
                });
            }
        }
    }
    let permits = match api {
        Api::Lt => VendorPermits {
            library_version: version.to_string(),
            max_split_k: u32::MAX as i64,
            // CUBLASLT_REDUCTION_SCHEME_NONE, _INPLACE, _COMPUTE_TYPE, _OUTPUT_TYPE.
            reduction_schemes: vec![0, 1, 2, 4],
            max_workspace_bytes: LT_WORKSPACE_BYTES as u64,
            configurations,
        },
        Api::Blas => VendorPermits {
            library_version: version.to_string(),
            max_split_k: -1,
            reduction_schemes: vec![-1],
            max_workspace_bytes: 0,
            configurations,
        },
    };
    SymbolDeclaration::new(
        "vendor-defined",
        "vendor-defined",
        OutputOwnership::VendorDefined,
        SplitRule::Vendor,
        BkRule::Fixed(0),
    )
    .with_tile(TileShape { m: 0, n: 0, k: 0 }, 0)
    .with_capabilities(vec![format!("vendor:{symbol}")])
    .with_vendor(permits)
}

/// The dtypes cudarc's safe `Gemm` sends to `symbol`.
pub(crate) fn cudarc_dtypes(symbol: &str) -> &'static [DType] {
    match symbol {
        CUBLAS_SGEMM_SYMBOL => &[DType::F32],
        CUBLAS_SYMBOL => &[DType::F16, DType::Bf16],
        _ => &[],
    }
}

impl Vendor {
    /// Looks for the libraries (no handle is created).
    pub(crate) fn probe(arch: &str) -> Vendor {
        // SAFETY: only checks whether the shared library can be loaded.
        let cublas = if unsafe { blas::is_culib_present() } {
            let mut v = [0i32; 3];
            let ok = [
                blas::libraryPropertyType::MAJOR_VERSION,
                blas::libraryPropertyType::MINOR_VERSION,
                blas::libraryPropertyType::PATCH_LEVEL,
            ]
            .iter()
            .zip(v.iter_mut())
            // SAFETY: `out` is valid for one write.
            .all(|(p, out)| unsafe { blas::cublasGetProperty(*p, out) }.result().is_ok());
            ok.then(|| {
                let version = crate::catalog::version_with_knobs(
                    &format!("cuBLAS {}.{}.{}", v[0], v[1], v[2]),
                    |k| std::env::var(k).ok(),
                );
                Library {
                    module: pseudo_module(ModuleKind::Cublas, &version, &CUBLAS_SYMBOLS, arch),
                    version,
                }
            })
        } else {
            None
        };
        // SAFETY: only checks whether the shared library can be loaded.
        let cublaslt = if unsafe { lt::is_culib_present() } {
            // SAFETY: takes no arguments.
            let v = unsafe { lt::cublasLtGetVersion() };
            let version = crate::catalog::version_with_knobs(
                &format!("cuBLASLt {}.{}.{}", v / 10000, (v / 100) % 100, v % 100),
                |k| std::env::var(k).ok(),
            );
            Some(Library {
                module: pseudo_module(ModuleKind::CublasLt, &version, &[CUBLASLT_SYMBOL], arch),
                version,
            })
        } else {
            None
        };
        Vendor {
            cublas,
            cublaslt,
            handles: Mutex::new(None),
        }
    }

    /// The library of `api`, or why it is missing.
    pub(crate) fn library(&self, api: Api) -> Result<&Library> {
        match api {
            Api::Blas => self.cublas.as_ref(),
            Api::Lt => self.cublaslt.as_ref(),
        }
        .ok_or_else(|| {
            cuda_err(match api {
                Api::Blas => "cuBLAS (libcublas.so) was not found",
                Api::Lt => "cuBLASLt (libcublasLt.so) was not found",
            })
        })
    }

    /// The handles, created on first use on `stream` (the main stream).
    pub(crate) fn handles(&self, shared: &Shared) -> Result<HandlesGuard<'_>> {
        let mut g = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            *g = Some(Handles::new(&shared.ctx, &shared.stream, self)?);
        }
        Ok(HandlesGuard(g))
    }

    /// The handles if they are open already (nothing is created).
    pub(crate) fn open_handles(&self) -> Option<HandlesGuard<'_>> {
        let g = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        g.is_some().then_some(HandlesGuard(g))
    }
}

/// Locked access to the vendor handles.
pub(crate) struct HandlesGuard<'a>(MutexGuard<'a, Option<Handles>>);

impl HandlesGuard<'_> {
    pub(crate) fn get(&self) -> &Handles {
        // Created by `Vendor::handles` before the guard is handed out.
        self.0
            .as_ref()
            .expect("vendor handles are created before the guard is returned")
    }
}

/// A cuBLASLt handle, destroyed on drop.
#[derive(Debug)]
struct LtHandle(lt::cublasLtHandle_t);

// SAFETY: the handle is only used while the `Vendor::handles` mutex is held,
// so it is never used from two threads at once.
unsafe impl Send for LtHandle {}
// SAFETY: as above; shared references never use the handle concurrently.
unsafe impl Sync for LtHandle {}

impl Drop for LtHandle {
    fn drop(&mut self) {
        // SAFETY: created by cublasLtCreate and destroyed only here.
        let _ = unsafe { lt::cublasLtDestroy(self.0) };
    }
}

/// The live vendor handles.
#[derive(Debug)]
pub(crate) struct Handles {
    blas: Option<CudaBlas>,
    lt: Option<LtHandle>,
    lt_workspace: Option<CudaSlice<u8>>,
    /// Where resolve-time captures happen (never launched).
    pub scratch: Arc<CudaStream>,
    /// The family-fixed selection's choices, once per family.
    families: FamilyChoices,
}

impl Handles {
    /// Handles for the libraries `v` found, on `stream` of `ctx`; the
    /// cuBLASLt workspace is allocated there.
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        v: &Vendor,
    ) -> Result<Handles> {
        let blas = match &v.cublas {
            Some(_) => Some(CudaBlas::new(stream.clone()).map_err(drv("cublasCreate"))?),
            None => None,
        };
        let (lt, lt_workspace) = match &v.cublaslt {
            Some(_) => {
                let mut h: lt::cublasLtHandle_t = std::ptr::null_mut();
                // SAFETY: `h` is valid for one write.
                unsafe { lt::cublasLtCreate(&mut h) }
                    .result()
                    .map_err(drv("cublasLtCreate"))?;
                let handle = LtHandle(h);
                let ws = stream
                    .alloc_zeros::<u8>(LT_WORKSPACE_BYTES)
                    .map_err(drv("cuBLASLt workspace"))?;
                (Some(handle), Some(ws))
            }
            None => (None, None),
        };
        let scratch = ctx.new_stream().map_err(drv("scratch stream"))?;
        Ok(Handles {
            blas,
            lt,
            lt_workspace,
            scratch,
            families: FamilyChoices::default(),
        })
    }

    /// The cuBLASLt handle, or why there is none.
    pub(crate) fn lt_handle(&self) -> Result<lt::cublasLtHandle_t> {
        Ok(self
            .lt
            .as_ref()
            .ok_or_else(|| cuda_err("cuBLASLt is not loaded"))?
            .0)
    }

    /// The family-fixed selection's choices so far.
    pub(crate) fn family_choices(&self) -> &FamilyChoices {
        &self.families
    }
}

/// Compute settings of one vendor route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Numerics {
    pub blas_compute: blas::cublasComputeType_t,
    pub blas_math: blas::cublasMath_t,
    pub lt_compute: lt::cublasComputeType_t,
    pub contract: ContractKind,
    pub tensor_cores: bool,
    pub conversion: OperandConversion,
}

impl Numerics {
    /// The settings of `dtype` under a fast (`VendorFast`) or pedantic mode.
    pub(crate) fn of(dtype: DType, fast: bool) -> Numerics {
        use blas::cublasComputeType_t as C;
        use blas::cublasMath_t as M;
        use lt::cublasComputeType_t as L;
        match (dtype, fast) {
            (DType::F32, true) => Numerics {
                blas_compute: C::CUBLAS_COMPUTE_32F_FAST_TF32,
                blas_math: M::CUBLAS_TF32_TENSOR_OP_MATH,
                lt_compute: L::CUBLAS_COMPUTE_32F_FAST_TF32,
                contract: ContractKind::VendorFast,
                tensor_cores: true,
                conversion: OperandConversion::Tf32Round,
            },
            (DType::F32, false) => Numerics {
                blas_compute: C::CUBLAS_COMPUTE_32F_PEDANTIC,
                blas_math: M::CUBLAS_PEDANTIC_MATH,
                lt_compute: L::CUBLAS_COMPUTE_32F,
                contract: ContractKind::VendorPedantic,
                tensor_cores: false,
                conversion: OperandConversion::ExactWiden,
            },
            (_, true) => Numerics {
                blas_compute: C::CUBLAS_COMPUTE_32F,
                blas_math: M::CUBLAS_DEFAULT_MATH,
                lt_compute: L::CUBLAS_COMPUTE_32F,
                contract: ContractKind::VendorFast,
                tensor_cores: true,
                conversion: OperandConversion::VendorDefined,
            },
            (_, false) => Numerics {
                blas_compute: C::CUBLAS_COMPUTE_32F_PEDANTIC,
                blas_math: M::CUBLAS_PEDANTIC_MATH,
                lt_compute: L::CUBLAS_COMPUTE_32F,
                contract: ContractKind::VendorPedantic,
                tensor_cores: true,
                conversion: OperandConversion::VendorDefined,
            },
        }
    }

    /// The settings of `dtype` under `selection`: the family-fixed
    /// selection runs fast math under the `vendor-invariant` contract (its
    /// promise is the configuration, checked by the guard), and refuses
    /// a pedantic mode.
    pub(crate) fn for_selection(
        dtype: DType,
        fast: bool,
        selection: LtSelection,
    ) -> Result<Numerics> {
        let mut n = Numerics::of(dtype, fast);
        if selection == LtSelection::FamilyFixed {
            if !fast {
                return Err(cuda_err(
                    "cublaslt-invariant runs fast math under the vendor-invariant contract: it needs policy cublas-fast",
                ));
            }
            n.contract = ContractKind::VendorInvariant;
        }
        Ok(n)
    }

    /// Digest of the settings (the vendor compiler identity's options
    /// digest). The heuristic selection frames exactly as before it
    /// existed, so recorded routes keep their digests; the family-fixed
    /// selection adds how its algorithm is chosen.
    pub(crate) fn digest(&self, api: Api, selection: LtSelection) -> Digest {
        let mut w = DigestWriter::new("gemm-audit/vendor-options/v1");
        w.field("api", FieldValue::Str(api.symbol()));
        w.field("blas_compute", FieldValue::U32(self.blas_compute as u32));
        w.field("blas_math", FieldValue::U32(self.blas_math as u32));
        w.field("lt_compute", FieldValue::U32(self.lt_compute as u32));
        w.field("alpha", FieldValue::Str("1"));
        w.field("beta", FieldValue::Str("0"));
        if selection == LtSelection::FamilyFixed {
            w.field("selection", FieldValue::Str("family-fixed"));
            w.field("family_reference_m", FieldValue::U64(FAMILY_REFERENCE_M));
            w.field("split_k", FieldValue::U64(1));
            w.field("reduction_scheme", FieldValue::Str("none"));
            w.field(
                "max_workspace_bytes",
                FieldValue::U64(VENDOR_INVARIANT_MAX_WORKSPACE_BYTES),
            );
            // How the configuration is chosen among the candidates, and
            // TN's alignment: a route chosen another way is another route.
            w.field("choice", FieldValue::Str("timed"));
            let timing_m = lt_family::TIMING_M.map(|m| m.to_string());
            w.field("timing_m", FieldValue::Str(&timing_m.join(",")));
            w.field(
                "choice_margin_permille",
                FieldValue::U64((crate::lt_choice::CHOICE_MARGIN * 1000.0).round() as u64),
            );
            w.field(
                "tn_min_alignment_bytes",
                FieldValue::U64(crate::lt_choice::TN_ALIGNMENT_BYTES),
            );
        }
        w.finish()
    }
}

fn blas_type(d: DType) -> Result<blas::cudaDataType> {
    Ok(match d {
        DType::F32 => blas::cudaDataType::CUDA_R_32F,
        DType::F16 => blas::cudaDataType::CUDA_R_16F,
        DType::Bf16 => blas::cudaDataType::CUDA_R_16BF,
        other => return Err(not_called(other)),
    })
}

/// Why no vendor call is made for `dtype`: it is only read from profiles.
pub(crate) fn not_called(dtype: DType) -> gemm_audit_model::Error {
    cuda_err(format!(
        "dtype {dtype} is only read from profiles: no vendor call is made for it"
    ))
}

/// The column-major call computing row-major C = A' B':
/// (transa, transb, lda, ldb) for the first operand B' and second A'.
pub(crate) fn column_major(op: GemmOp, shape: GemmShape) -> (bool, bool, u64, u64) {
    let trans_first = op == GemmOp::Nt;
    let trans_second = op == GemmOp::Tn;
    let ld_first = if trans_first { shape.k } else { shape.n };
    let ld_second = if trans_second { shape.m } else { shape.k };
    (trans_first, trans_second, ld_first, ld_second)
}

/// The vendor fields of a cuBLAS call (no physical kernels yet): cuBLAS
/// exposes no algorithm attributes, so all but the default algorithm id
/// are -1.
pub(crate) fn blas_vendor_route(library_version: &str) -> VendorRoute {
    VendorRoute {
        library_version: library_version.to_string(),
        algorithm_id: blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT as i64,
        tile_id: -1,
        split_k: -1,
        reduction_scheme: -1,
        stages_id: -1,
        swizzle: -1,
        inner_shape_id: None,
        cluster_shape_id: None,
        workspace_bytes: 0,
        physical_kernels: Vec::new(),
    }
}

/// A vendor call prepared for one problem: everything decided before any
/// capture, so the capture body only enqueues.
#[derive(Debug)]
pub(crate) struct VendorCall {
    pub api: Api,
    pub dtype: DType,
    pub op: GemmOp,
    pub shape: GemmShape,
    pub numerics: Numerics,
    pub lt: Option<LtPlan>,
}

impl VendorCall {
    /// Prepares a call; for cuBLASLt this chooses the algorithm as
    /// `selection` says (cuBLAS has one selection, the heuristic). With a
    /// `recorded` route under the family-fixed selection, its
    /// configuration is adopted (it must still be one of the family's
    /// candidates) instead of the family's timed choice.
    #[allow(clippy::too_many_arguments)] // the problem, its numerics and selection, the recorded route
    pub(crate) fn new(
        h: &Handles,
        api: Api,
        dtype: DType,
        op: GemmOp,
        shape: GemmShape,
        fast: bool,
        selection: LtSelection,
        recorded: Option<&VendorRoute>,
    ) -> Result<VendorCall> {
        if api == Api::Blas && selection != LtSelection::Heuristic {
            return Err(cuda_err(
                "cuBLAS has no algorithm selection of its own: the family-fixed selection is cuBLASLt's",
            ));
        }
        for (what, v) in [("m", shape.m), ("k", shape.k), ("n", shape.n)] {
            if v > i32::MAX as u64 {
                return Err(cuda_err(format!("{what} = {v} is too large for cuBLAS")));
            }
        }
        let numerics = Numerics::for_selection(dtype, fast, selection)?;
        let lt = match api {
            Api::Lt => Some(LtPlan::new(
                h, dtype, op, shape, &numerics, selection, recorded,
            )?),
            Api::Blas => None,
        };
        Ok(VendorCall {
            api,
            dtype,
            op,
            shape,
            numerics,
            lt,
        })
    }

    /// The algorithm fields of the vendor route (without physical kernels).
    pub(crate) fn vendor_route(&self, library_version: &str) -> VendorRoute {
        match &self.lt {
            Some(p) => VendorRoute {
                library_version: library_version.to_string(),
                algorithm_id: p.attrs.id,
                tile_id: p.attrs.tile,
                split_k: p.attrs.split_k,
                reduction_scheme: p.attrs.reduction,
                stages_id: p.attrs.stages,
                swizzle: p.attrs.swizzle,
                inner_shape_id: p.attrs.inner_shape,
                cluster_shape_id: p.attrs.cluster_shape,
                workspace_bytes: p.attrs.workspace,
                physical_kernels: Vec::new(),
            },
            None => blas_vendor_route(library_version),
        }
    }

    /// Digest of the call's argument values (addresses excluded).
    pub(crate) fn arguments_digest(&self) -> Digest {
        let (ta, tb, lda, ldb) = column_major(self.op, self.shape);
        let mut w = DigestWriter::new("gemm-audit/vendor-arguments/v1");
        w.field("api", FieldValue::Str(self.api.symbol()));
        w.field("dtype", FieldValue::Str(self.dtype.as_str()));
        w.field("transa", FieldValue::Bool(ta));
        w.field("transb", FieldValue::Bool(tb));
        w.field("m", FieldValue::U64(self.shape.n));
        w.field("n", FieldValue::U64(self.shape.m));
        w.field("k", FieldValue::U64(self.shape.k));
        w.field("lda", FieldValue::U64(lda));
        w.field("ldb", FieldValue::U64(ldb));
        w.field("ldc", FieldValue::U64(self.shape.n));
        w.field("alpha", FieldValue::Str("1"));
        w.field("beta", FieldValue::Str("0"));
        w.finish()
    }

    /// Refuses operands (A, B, C, in bytes) smaller than the dense operands
    /// of the call's dtype and shape: the bound every enqueue relies on.
    pub(crate) fn check_operand_bytes(&self, bytes: [usize; 3]) -> Result<()> {
        let need = |n: u64| n * gemm_audit_model::kernels::element_size(self.dtype) as u64;
        let s = self.shape;
        for ((what, len), want) in ["A", "B", "C"].into_iter().zip(bytes).zip([
            need(s.m * s.k),
            need(s.k * s.n),
            need(s.m * s.n),
        ]) {
            if (len as u64) < want {
                return Err(cuda_err(format!(
                    "{} operand {what}: {len} bytes, the call reads {want}",
                    self.api.symbol()
                )));
            }
        }
        Ok(())
    }

    /// Enqueues the call on `stream`: `c = a' * b'` (row-major).
    pub(crate) fn enqueue(
        &self,
        h: &Handles,
        stream: &Arc<CudaStream>,
        a: &CudaSlice<u8>,
        b: &CudaSlice<u8>,
        c: &mut CudaSlice<u8>,
    ) -> Result<()> {
        self.check_operand_bytes([a.len(), b.len(), c.len()])?;
        let (pa, _ra) = a.device_ptr(stream);
        let (pb, _rb) = b.device_ptr(stream);
        let (pc, _rc) = c.device_ptr_mut(stream);
        // SAFETY: the three buffers are live allocations of at least the
        // bytes the call reads or writes (checked above), on `stream`'s
        // context, held until the call is enqueued.
        unsafe { self.enqueue_at(h, stream, pa, pb, pc) }
    }

    /// Enqueues the call on `stream` at raw device addresses.
    ///
    /// # Safety
    /// `pa`, `pb` and `pc` must be live device allocations of the dense
    /// operands of the call's dtype and shape (row-major A', B' and C), on
    /// `stream`'s context, valid until the call has run.
    // Over 100 lines: one FFI call per API, each argument in the order of
    // its C signature so the SAFETY argument can be read against it.
    pub(crate) unsafe fn enqueue_at(
        &self,
        h: &Handles,
        stream: &Arc<CudaStream>,
        pa: cu::CUdeviceptr,
        pb: cu::CUdeviceptr,
        pc: cu::CUdeviceptr,
    ) -> Result<()> {
        let (ta, tb, lda, ldb) = column_major(self.op, self.shape);
        let (m, n, k) = (
            self.shape.n as i32,
            self.shape.m as i32,
            self.shape.k as i32,
        );
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        match self.api {
            Api::Blas => {
                let blas_h = h
                    .blas
                    .as_ref()
                    .ok_or_else(|| cuda_err("cuBLAS is not loaded"))?;
                let handle = *blas_h.handle();
                let op = |t: bool| {
                    if t {
                        blas::cublasOperation_t::CUBLAS_OP_T
                    } else {
                        blas::cublasOperation_t::CUBLAS_OP_N
                    }
                };
                let t = blas_type(self.dtype)?;
                // SAFETY: the handle is live and used under the vendor mutex; the
                // buffers hold the dense operands of the declared shape and layout;
                // alpha and beta are host f32 scalars (pointer mode host).
                unsafe {
                    blas::cublasSetStream_v2(handle, stream.cu_stream() as blas::cudaStream_t)
                        .result()
                        .map_err(drv("cublasSetStream"))?;
                    blas::cublasSetMathMode(handle, self.numerics.blas_math)
                        .result()
                        .map_err(drv("cublasSetMathMode"))?;
                    blas::cublasGemmEx(
                        handle,
                        op(ta),
                        op(tb),
                        m,
                        n,
                        k,
                        (&alpha as *const f32).cast(),
                        pb as *const c_void,
                        t,
                        lda as i32,
                        pa as *const c_void,
                        t,
                        ldb as i32,
                        (&beta as *const f32).cast(),
                        pc as *mut c_void,
                        t,
                        self.shape.n as i32,
                        self.numerics.blas_compute,
                        blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                    .result()
                    .map_err(drv("cublasGemmEx"))?;
                }
            }
            Api::Lt => {
                let plan = self
                    .lt
                    .as_ref()
                    .ok_or_else(|| cuda_err("cuBLASLt call without a plan"))?;
                let handle =
                    h.lt.as_ref()
                        .ok_or_else(|| cuda_err("cuBLASLt is not loaded"))?
                        .0;
                let ws = h
                    .lt_workspace
                    .as_ref()
                    .ok_or_else(|| cuda_err("cuBLASLt workspace missing"))?;
                let (pw, _rw) = ws.device_ptr(stream);
                // SAFETY: the plan's descriptors, layouts and algorithm go
                // together; the caller's buffers match the layouts; the
                // workspace holds LT_WORKSPACE_BYTES >= workspace_limit, at
                // least what the algorithm asked for.
                unsafe {
                    plan.matmul(
                        handle,
                        &plan.algo,
                        [pa, pb, pc],
                        (pw, plan.workspace_limit),
                        stream.cu_stream() as lt::cudaStream_t,
                    )?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_major_mapping() {
        let s = GemmShape { m: 3, k: 5, n: 7 };
        assert_eq!(column_major(GemmOp::Nn, s), (false, false, 7, 5));
        assert_eq!(column_major(GemmOp::Tn, s), (false, true, 7, 3));
        assert_eq!(column_major(GemmOp::Nt, s), (true, false, 5, 5));
    }

    #[test]
    fn numerics_follow_the_mode() {
        assert_eq!(
            Numerics::of(DType::F32, true).contract,
            ContractKind::VendorFast
        );
        assert_eq!(
            Numerics::of(DType::F32, false).contract,
            ContractKind::VendorPedantic
        );
        assert!(!Numerics::of(DType::F32, false).tensor_cores);
        assert_ne!(
            Numerics::of(DType::F32, true).digest(Api::Blas, LtSelection::Heuristic),
            Numerics::of(DType::F32, false).digest(Api::Blas, LtSelection::Heuristic)
        );
        assert_ne!(
            Numerics::of(DType::Bf16, true).digest(Api::Blas, LtSelection::Heuristic),
            Numerics::of(DType::Bf16, true).digest(Api::Lt, LtSelection::Heuristic)
        );
        // The family-fixed selection is part of the route's options identity.
        assert_ne!(
            Numerics::of(DType::Bf16, true).digest(Api::Lt, LtSelection::Heuristic),
            Numerics::of(DType::Bf16, true).digest(Api::Lt, LtSelection::FamilyFixed)
        );
    }

    #[test]
    fn pseudo_modules_track_the_version() {
        let a = pseudo_module(
            ModuleKind::Cublas,
            "cuBLAS 13.1.0",
            &CUBLAS_SYMBOLS,
            "sm_90",
        );
        let b = pseudo_module(
            ModuleKind::Cublas,
            "cuBLAS 13.1.1",
            &CUBLAS_SYMBOLS,
            "sm_90",
        );
        assert_ne!(a.digest, b.digest);
        assert_eq!(a.symbol_names(), vec![CUBLAS_SYMBOL, CUBLAS_SGEMM_SYMBOL]);
        // cublasGemmEx: every op and dtype, under both vendor contracts;
        // cublasSgemm_v2: f32 only.
        assert_eq!(a.symbols[0].serves.len(), 3 * 3 * 2);
        assert_eq!(a.symbols[1].serves.len(), 3 * 2);
        // cudarc's calls are configurations of their own: a cudarc bf16
        // call under the pedantic math mode is not this crate's pedantic
        // cublasGemmEx (explicit CUBLAS_COMPUTE_32F_PEDANTIC).
        let permits = |i: usize| {
            a.symbols[i]
                .declaration
                .as_ref()
                .unwrap()
                .vendor
                .clone()
                .unwrap()
        };
        assert_eq!(permits(0).configurations.len(), 3 * 2 + 2 * 2);
        assert_eq!(permits(1).configurations.len(), 2);
        let pedantic = Numerics::of(DType::Bf16, false);
        assert_ne!(
            cudarc_options_digest(CUBLAS_SYMBOL, DType::Bf16, pedantic.blas_math),
            pedantic.digest(Api::Blas, LtSelection::Heuristic)
        );
    }
}
