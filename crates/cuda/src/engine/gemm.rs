#![allow(unsafe_code)]
//! Vendor GEMMs an engine makes on its own buffers and stream, recorded
//! exactly.
//!
//! [`VendorGemms`] plans cuBLAS (`cublasGemmEx`) and cuBLASLt
//! (`cublasLtMatmul` with one algorithm chosen at plan time and then
//! fixed) calls the way the CUDA backend makes its own: the call is run
//! once and captured once at plan time, so the route it records names the
//! kernels the library launches, and [`VendorGemm::run`] pushes that route
//! and enqueues exactly that call. [`CudarcGemm`] records the calls an
//! engine makes itself through cudarc's safe `Gemm` (`cublasSgemm_v2` for
//! f32, `cublasGemmEx` with `CUBLAS_COMPUTE_32F` for halves), under the
//! contract the handle's math mode, read back at every call, gives.

use crate::blas::{
    self as vendor, Api, CUBLAS_SGEMM_SYMBOL, CUBLAS_SYMBOL, Handles, LtSelection, Numerics,
    Vendor, VendorCall,
};
use crate::error::cuda_err;
use crate::resolve::{VendorParts, planned_route, probe_kernels, vendor_route};
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as blas};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, sys};
use gemm_audit_model::digest::{DigestWriter, FieldValue};
use gemm_audit_model::identity::{GemmRouteIdentity, ModuleIdentity};
use gemm_audit_model::physical::PhysicalNode;
use gemm_audit_model::policy::PolicyMode;
use gemm_audit_model::recorder::GemmRouteRecorder;
use gemm_audit_model::route::{GemmShape, GemmStrides, NumericContract, ResolvedGemmRoute};
use gemm_audit_model::vocab::{DType, GemmOp, ModuleKind};
use gemm_audit_model::{Error, Refusal, RefusalStage, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Which vendor entry point a [`VendorGemm`] calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VendorApi {
    /// `cublasGemmEx`, with the compute type and math mode the policy's
    /// contract requires (the CUDA backend's `cublas` route).
    Cublas,
    /// `cublasLtMatmul` with one algorithm, chosen at plan time as the
    /// selection says and recorded with its attributes.
    CublasLt(LtSelection),
}

/// What every plan of one engine shares: the libraries, handles on the
/// engine's stream, and the live context the routes are made under.
struct Shared {
    stream: Arc<CudaStream>,
    handles: Mutex<Handles>,
    vendor: Vendor,
    live: GemmRouteIdentity,
}

/// cuBLAS and cuBLASLt for an engine: handles bound to the engine's
/// stream (created once, with a 32 MiB cuBLASLt workspace), and plans of
/// single vendor GEMMs on the engine's own buffers. Cheap to clone.
#[derive(Clone)]
pub struct VendorGemms(Arc<Shared>);

impl std::fmt::Debug for VendorGemms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VendorGemms")
            .field("policy", &self.0.live.policy)
            .finish_non_exhaustive()
    }
}

/// The module of `kind` in `live` whose digest is `want`'s, or what is
/// missing.
fn live_module<'a>(
    live: &'a GemmRouteIdentity,
    want: Option<&vendor::Library>,
    kind: ModuleKind,
) -> Result<&'a ModuleIdentity> {
    let lib = want.ok_or_else(|| cuda_err(format!("{kind} is not present on this machine")))?;
    live.modules
        .iter()
        .find(|m| m.kind == kind && m.digest == lib.module.digest)
        .ok_or_else(|| {
            cuda_err(format!(
                "the live context has no {} module: add cuda::vendor_modules(&target) to its modules",
                lib.version
            ))
        })
}

fn refuse_capturing(stream: &CudaStream, what: &str) -> Result<()> {
    let status = stream
        .capture_status()
        .map_err(crate::error::drv("stream capture status"))?;
    if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Err(cuda_err(format!(
            "{what} runs and captures the call once: do it before the stream captures (while recording eagerly)"
        )));
    }
    Ok(())
}

impl VendorGemms {
    /// The libraries on `stream` of `ctx`, for routes made under `live`
    /// (whose modules must include the libraries' pseudo-modules:
    /// [`crate::vendor_modules`]).
    pub fn new(
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        live: &GemmRouteIdentity,
    ) -> Result<VendorGemms> {
        let arch = crate::compilation_target(ctx)?;
        let vendor = Vendor::probe(&arch);
        let handles = Handles::new(ctx, stream, &vendor)?;
        Ok(VendorGemms(Arc::new(Shared {
            stream: stream.clone(),
            handles: Mutex::new(handles),
            vendor,
            live: live.clone(),
        })))
    }

    /// Plans one GEMM: row-major `C[m,n] = A'[m,k] B'[k,n]` of `dtype`,
    /// dense operands, alpha 1 and beta 0, under the live policy's vendor
    /// contract (`cublas-fast`: fast; `cublas-pedantic`: pedantic; refused
    /// under `deterministic`). The call runs once on scratch buffers and is
    /// captured once (never launched), to learn the kernels it launches;
    /// refused while the stream is capturing.
    pub fn plan(
        &self,
        api: VendorApi,
        op: GemmOp,
        dtype: DType,
        shape: GemmShape,
    ) -> Result<VendorGemm> {
        let sh = &self.0;
        let fast = match sh.live.policy.mode {
            PolicyMode::CublasFast => true,
            PolicyMode::CublasPedantic => false,
            PolicyMode::Deterministic => {
                return Err(Refusal::new(
                    RefusalStage::Recording,
                    None,
                    "policy.mode",
                    "cublas-fast or cublas-pedantic (a vendor GEMM)",
                    sh.live.policy,
                )
                .into());
            }
        };
        refuse_capturing(&sh.stream, "planning a vendor GEMM")?;
        let (lib_api, selection, kind) = match api {
            VendorApi::Cublas => (Api::Blas, LtSelection::Heuristic, ModuleKind::Cublas),
            VendorApi::CublasLt(s) => (Api::Lt, s, ModuleKind::CublasLt),
        };
        let want = match lib_api {
            Api::Blas => sh.vendor.cublas.as_ref(),
            Api::Lt => sh.vendor.cublaslt.as_ref(),
        };
        let module = live_module(&sh.live, want, kind)?.clone();
        let handles = sh.handles.lock().unwrap_or_else(|p| p.into_inner());
        let call = VendorCall::new(&handles, lib_api, dtype, op, shape, fast, selection, None)?;
        let route = planned_route(
            &handles,
            &sh.stream,
            &call,
            selection,
            // Named by the problem until `route` names it.
            format!("{dtype} {op} {}x{}x{}", shape.m, shape.k, shape.n),
            &module,
            &sh.live.device,
            &module.target,
        )?;
        drop(handles);
        Ok(VendorGemm {
            shared: self.0.clone(),
            call,
            route,
        })
    }
}

/// One planned vendor GEMM: the call and its exact route.
pub struct VendorGemm {
    shared: Arc<Shared>,
    call: VendorCall,
    route: ResolvedGemmRoute,
}

impl std::fmt::Debug for VendorGemm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VendorGemm")
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

impl VendorGemm {
    /// The route this call records, named `gemm`.
    pub fn route(&self, gemm: impl Into<String>) -> ResolvedGemmRoute {
        ResolvedGemmRoute {
            gemm: gemm.into(),
            ..self.route.clone()
        }
    }

    /// Pushes the route (named `gemm`) to `recorder`, then enqueues the
    /// planned call on the engine's stream: `c = a' b'`. Nothing is
    /// enqueued when the push is refused or an operand is too small (by
    /// bytes, whatever `T` is).
    pub fn run<T>(
        &self,
        recorder: &GemmRouteRecorder,
        gemm: impl Into<String>,
        a: &CudaSlice<T>,
        b: &CudaSlice<T>,
        c: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.call
            .check_operand_bytes([a.num_bytes(), b.num_bytes(), c.num_bytes()])?;
        recorder.push(self.route(gemm))?;
        let sh = &self.shared;
        let handles = sh.handles.lock().unwrap_or_else(|p| p.into_inner());
        let (pa, _ra) = a.device_ptr(&sh.stream);
        let (pb, _rb) = b.device_ptr(&sh.stream);
        let (pc, _rc) = c.device_ptr_mut(&sh.stream);
        // SAFETY: the buffers hold at least the bytes of the planned
        // problem's dense operands (checked above), live on the engine's
        // stream and are held until the call is enqueued.
        unsafe { self.call.enqueue_at(&handles, &sh.stream, pa, pb, pc) }
    }
}

/// An element cudarc's safe `Gemm` multiplies: f32, f16 or bf16.
pub trait CudarcElement:
    Copy + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + private::Sealed
{
    /// The element's dtype.
    const DTYPE: DType;
    /// The scalar's bits, for the arguments digest.
    fn bits(self) -> u64;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

impl CudarcElement for f32 {
    const DTYPE: DType = DType::F32;
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}
impl CudarcElement for half::f16 {
    const DTYPE: DType = DType::F16;
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}
impl CudarcElement for half::bf16 {
    const DTYPE: DType = DType::Bf16;
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}

/// What a probe of one cudarc call is keyed by: everything the library
/// may choose kernels by.
type ProbeKey = (DType, [bool; 2], [i32; 6], [u64; 2], u32);

/// The routes of the cuBLAS calls an engine makes itself through cudarc's
/// safe `Gemm`, named after the entry point cudarc calls
/// (`cublasSgemm_v2` for f32, `cublasGemmEx` for halves).
///
/// cudarc's `GemmConfig` is column-major; the route describes the same
/// call as gemm-audit's row-major problem (`C^T = B^T A^T`: the route's m
/// is the config's n, and its A is the config's second operand). The
/// contract comes from the handle's math mode, read back at every call:
/// pedantic under `CUBLAS_PEDANTIC_MATH`, fast under
/// `CUBLAS_TF32_TENSOR_OP_MATH` (f32) or `CUBLAS_DEFAULT_MATH` (halves);
/// any other mode is refused. Each distinct call is probed once (run and
/// captured on scratch buffers) to learn its kernels; a call first seen
/// while the stream is capturing is refused.
pub struct CudarcGemm {
    blas: CudaBlas,
    stream: Arc<CudaStream>,
    module: ModuleIdentity,
    live: GemmRouteIdentity,
    probed: Mutex<HashMap<ProbeKey, Vec<PhysicalNode>>>,
}

impl std::fmt::Debug for CudarcGemm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudarcGemm")
            .field("module", &self.module.compiler.version)
            .finish_non_exhaustive()
    }
}

impl CudarcGemm {
    /// Takes the engine's cuBLAS handle, made on `stream` (checked), for
    /// routes under `live`, which must hold the cuBLAS module. The handle
    /// stays usable through [`CudarcGemm::blas`]; it cannot be moved to
    /// another stream while held here.
    pub fn new(
        blas: CudaBlas,
        stream: &Arc<CudaStream>,
        live: &GemmRouteIdentity,
    ) -> Result<CudarcGemm> {
        let arch = crate::compilation_target(stream.context())?;
        let vendor = Vendor::probe(&arch);
        let module = live_module(live, vendor.cublas.as_ref(), ModuleKind::Cublas)?.clone();
        check_stream(&blas, stream)?;
        Ok(CudarcGemm {
            blas,
            stream: stream.clone(),
            module,
            live: live.clone(),
            probed: Mutex::new(HashMap::new()),
        })
    }

    /// The engine's handle (to set its math mode, or for other calls).
    pub fn blas(&self) -> &CudaBlas {
        &self.blas
    }

    /// The route of `blas().gemm(cfg, ..)`, named `gemm`, under the
    /// handle's math mode now.
    pub fn route<T: CudarcElement>(
        &self,
        gemm: impl Into<String>,
        cfg: &GemmConfig<T>,
    ) -> Result<ResolvedGemmRoute>
    where
        CudaBlas: Gemm<T>,
    {
        let problem = Problem::of(cfg)?;
        let blas = &self.blas;
        let math = vendor::math_mode(blas)?;
        let fast = [false, true]
            .into_iter()
            .find(|&fast| Numerics::of(T::DTYPE, fast).blas_math == math)
            .ok_or_else(|| {
                Error::from(Refusal::new(
                    RefusalStage::Recording,
                    None,
                    "contract.kind",
                    "a math mode cudarc calls are declared under (cuda::set_blas_math_mode)",
                    format!("the handle's math mode {math:?}"),
                ))
            })?;
        let numerics = Numerics::of(T::DTYPE, fast);
        let symbol = problem.symbol;
        let key: ProbeKey = (
            T::DTYPE,
            [problem.trans[0], problem.trans[1]],
            [cfg.m, cfg.n, cfg.k, cfg.lda, cfg.ldb, cfg.ldc],
            [cfg.alpha.bits(), cfg.beta.bits()],
            math as u32,
        );
        let kernels = self.kernels(key, cfg, &problem)?;
        let mut arguments = DigestWriter::new("gemm-audit/vendor-arguments/cudarc/v1");
        arguments.field("api", FieldValue::Str(symbol));
        arguments.field("dtype", FieldValue::Str(T::DTYPE.as_str()));
        arguments.field("transa", FieldValue::Bool(problem.trans[0]));
        arguments.field("transb", FieldValue::Bool(problem.trans[1]));
        for (name, v) in dims(cfg) {
            arguments.field(name, FieldValue::U64(v as u64));
        }
        arguments.field("alpha", FieldValue::U64(cfg.alpha.bits()));
        arguments.field("beta", FieldValue::U64(cfg.beta.bits()));
        let mut vendor = vendor::blas_vendor_route(&self.module.compiler.version);
        vendor.physical_kernels = kernels.iter().filter_map(|n| n.symbol.clone()).collect();
        vendor_route(VendorParts {
            gemm: gemm.into(),
            op: problem.op,
            dtype: T::DTYPE,
            shape: problem.shape,
            strides: problem.strides,
            module: &self.module,
            symbol,
            contract: NumericContract {
                kind: numerics.contract.clone(),
                splits: 1,
            },
            uses_tensor_cores: numerics.tensor_cores,
            operand_conversion: numerics.conversion,
            options_digest: vendor::cudarc_options_digest(symbol, T::DTYPE, math),
            arguments_digest: arguments.finish(),
            vendor,
            kernels: &kernels,
            device: &self.live.device,
            arch: &self.module.target,
        })
    }

    /// Pushes the route of the call (named `gemm`) to `recorder`, then
    /// makes it: `blas().gemm(cfg, a, b, c)`. The buffers are checked to
    /// hold every element the configuration reads or writes, so the call
    /// is safe; nothing is enqueued when a check or the push is refused.
    pub fn gemm<T: CudarcElement>(
        &self,
        recorder: &GemmRouteRecorder,
        gemm: impl Into<String>,
        cfg: GemmConfig<T>,
        a: &CudaSlice<T>,
        b: &CudaSlice<T>,
        c: &mut CudaSlice<T>,
    ) -> Result<()>
    where
        CudaBlas: Gemm<T>,
    {
        let problem = Problem::of(&cfg)?;
        problem.check_lengths(a.len(), b.len(), c.len())?;
        recorder.push(self.route(gemm, &cfg)?)?;
        // SAFETY: every buffer holds all the elements the column-major
        // configuration addresses (checked above), on the handle's stream.
        unsafe { self.blas.gemm(cfg, a, b, c) }.map_err(crate::error::drv("cudarc Gemm"))
    }

    /// The kernels of one distinct call, probed on first sight.
    fn kernels<T: CudarcElement>(
        &self,
        key: ProbeKey,
        cfg: &GemmConfig<T>,
        problem: &Problem,
    ) -> Result<Vec<PhysicalNode>>
    where
        CudaBlas: Gemm<T>,
    {
        let mut probed = self.probed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = probed.get(&key) {
            return Ok(k.clone());
        }
        refuse_capturing(&self.stream, "the first call of a cuBLAS GEMM")?;
        let [la, lb, lc] = problem.lengths;
        let zeros = |n: usize| {
            self.stream
                .alloc_zeros::<T>(n.max(1))
                .map_err(crate::error::drv("allocating probe operands"))
        };
        let (sa, sb) = (zeros(la)?, zeros(lb)?);
        let sc = Mutex::new(zeros(lc)?);
        let kernels = probe_kernels(
            &self.stream,
            &self.stream,
            problem.symbol,
            "(probe)",
            |_| {
                let mut sc = sc.lock().unwrap_or_else(|p| p.into_inner());
                // SAFETY: the scratch buffers hold every element `cfg` addresses.
                unsafe { self.blas.gemm(*cfg, &sa, &sb, &mut *sc) }
                    .map_err(crate::error::drv("cudarc Gemm"))
            },
        )?;
        probed.insert(key, kernels.clone());
        Ok(kernels)
    }
}

/// Refuses a handle that runs on another stream than `stream`.
fn check_stream(blas: &CudaBlas, stream: &CudaStream) -> Result<()> {
    let mut s: blas::cudaStream_t = std::ptr::null_mut();
    // SAFETY: the handle is live for `blas`'s lifetime; `s` is valid for
    // one write.
    unsafe { blas::cublasGetStream_v2(*blas.handle(), &mut s) }
        .result()
        .map_err(crate::error::drv("cublasGetStream"))?;
    if !std::ptr::eq(s.cast::<()>(), stream.cu_stream().cast::<()>()) {
        return Err(cuda_err(
            "the cuBLAS handle runs on another stream than the one given",
        ));
    }
    Ok(())
}

/// A configuration's extents and leading dimensions, by name.
fn dims<T>(cfg: &GemmConfig<T>) -> [(&'static str, i32); 6] {
    [
        ("m", cfg.m),
        ("n", cfg.n),
        ("k", cfg.k),
        ("lda", cfg.lda),
        ("ldb", cfg.ldb),
        ("ldc", cfg.ldc),
    ]
}

/// A cudarc configuration as gemm-audit's row-major problem.
struct Problem {
    symbol: &'static str,
    /// Whether cuBLAS's first and second operands are transposed.
    trans: [bool; 2],
    op: GemmOp,
    shape: GemmShape,
    strides: GemmStrides,
    /// Elements the first operand, the second and C span.
    lengths: [usize; 3],
}

impl Problem {
    fn of<T: CudarcElement>(cfg: &GemmConfig<T>) -> Result<Problem> {
        let t = |o: blas::cublasOperation_t| match o {
            blas::cublasOperation_t::CUBLAS_OP_N => Ok(false),
            blas::cublasOperation_t::CUBLAS_OP_T => Ok(true),
            other => Err(cuda_err(format!("{other:?}: only N and T are GEMM ops"))),
        };
        let trans = [t(cfg.transa)?, t(cfg.transb)?];
        // cuBLAS's first operand is the row-major B', its second A'.
        let op = match trans {
            [false, false] => GemmOp::Nn,
            [false, true] => GemmOp::Tn,
            [true, false] => GemmOp::Nt,
            [true, true] => {
                return Err(cuda_err(
                    "transa = transb = T has no gemm-audit op (nn, tn, nt): transpose C instead",
                ));
            }
        };
        for (name, v) in dims(cfg) {
            if v <= 0 {
                return Err(cuda_err(format!(
                    "GemmConfig.{name} = {v}: must be positive"
                )));
            }
        }
        let (m, n, k) = (cfg.m as usize, cfg.n as usize, cfg.k as usize);
        // Column-major: an operand of `rows x cols` with leading dimension ld.
        let span = |rows: usize, cols: usize, ld: i32, name: &str| {
            let ld = ld as usize;
            if ld < rows {
                return Err(cuda_err(format!(
                    "GemmConfig.{name} = {ld} is below its {rows} rows"
                )));
            }
            Ok(ld * (cols - 1) + rows)
        };
        let first = if trans[0] {
            span(k, m, cfg.lda, "lda")?
        } else {
            span(m, k, cfg.lda, "lda")?
        };
        let second = if trans[1] {
            span(n, k, cfg.ldb, "ldb")?
        } else {
            span(k, n, cfg.ldb, "ldb")?
        };
        let out = span(m, n, cfg.ldc, "ldc")?;
        Ok(Problem {
            symbol: if T::DTYPE == DType::F32 {
                CUBLAS_SGEMM_SYMBOL
            } else {
                CUBLAS_SYMBOL
            },
            trans,
            op,
            shape: GemmShape {
                m: n as u64,
                k: k as u64,
                n: m as u64,
            },
            strides: GemmStrides {
                lda: cfg.ldb as u64,
                ldb: cfg.lda as u64,
                ldc: cfg.ldc as u64,
            },
            lengths: [first, second, out],
        })
    }

    /// `a`, `b` and `c` are cudarc's (column-major) operands.
    fn check_lengths(&self, a: usize, b: usize, c: usize) -> Result<()> {
        for (what, have, want) in [
            ("a", a, self.lengths[0]),
            ("b", b, self.lengths[1]),
            ("c", c, self.lengths[2]),
        ] {
            if have < want {
                return Err(cuda_err(format!(
                    "{} operand {what}: {have} elements, the configuration addresses {want}",
                    self.symbol
                )));
            }
        }
        Ok(())
    }
}
