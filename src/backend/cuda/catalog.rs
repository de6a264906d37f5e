//! The NVRTC kernel catalog: kernel families, their symbols, numeric
//! contracts and launch geometry. Pure logic (no device), so the mapping
//! between routes and kernels is tested without a GPU.

use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::route::{
    ContractKind, DType, GemmOp, GemmShape, GemmStrides, OutputOwnership, ResolvedGemmRoute,
    TileShape,
};

/// The GEMM kernels' source (`kernels/gemm.cu`): its digest is the
/// compiler identity's source digest.
pub const GEMM_SOURCE: &str = include_str!("../../../kernels/gemm.cu");
/// The fingerprint kernel's source (`kernels/sha256.cu`).
pub const SHA256_SOURCE: &str = include_str!("../../../kernels/sha256.cu");
/// The fast (NH) chunk hash kernel's source (`kernels/nh128.cu`).
pub const NH128_SOURCE: &str = include_str!("../../../kernels/nh128.cu");

/// Revision of the dispatcher's thresholds (see [`dispatch`]).
pub const TUNING_TABLE_REVISION: u32 = 1;
/// Revision of the kernels' work schedule (tile shapes, thread mapping).
pub const SCHEDULE_REVISION: u32 = 1;

/// The split-K thresholds are every backend's (see [`crate::backend::common`]),
/// so the CPU and CUDA dispatchers pick the same contract for the same shape
/// (f32, or halves without tensor cores).
pub use crate::backend::common::{DISPATCH_SPLIT_K_MAX_M, DISPATCH_SPLIT_K_MIN_K, DISPATCH_SPLITS};
/// With tensor cores permitted, halves use the large mma tile family from
/// this m on, the small one below it. Both families are bit-identical, so
/// this threshold never changes an output bit.
pub const DISPATCH_MMA_LARGE_MIN_M: u64 = 128;

/// Largest grid y and z dimension CUDA accepts.
const MAX_GRID_YZ: u64 = 65_535;

/// The NVRTC kernel families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaKernel {
    /// One thread per output, ascending `fma.rn` chain from +0.
    ScalarFma,
    /// 64x64 shared-memory tiles, the same chain per output.
    Tiled,
    /// Fixed-order split-K with this many splits.
    SplitKFixed(u32),
    /// The nondeterministic control (global atomics) with this many splits.
    SplitKAtomic(u32),
    /// `mma.sync` m16n8k16, 128x128 block tiles.
    MmaLarge,
    /// `mma.sync` m16n8k16, 64x64 block tiles.
    MmaSmall,
}

/// How one kernel is launched on one problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Grid dimensions `[x, y, z]`, in blocks: x over column tiles, y over
    /// row tiles, z over splits (atomic split-K only).
    pub grid: [u32; 3],
    /// Block dimensions `[x, y, z]`, in threads.
    pub block: [u32; 3],
    /// Output tile one block owns, and its k staging depth.
    pub tile: TileShape,
    /// The k extent a block reduces per step (all of `k / splits` for the
    /// kernels that do not block k).
    pub bk: u32,
    /// Threads per block (the product of `block`).
    pub threads: u32,
}

impl CudaKernel {
    /// Every family (split counts are placeholders).
    pub const FAMILIES: [CudaKernel; 6] = [
        CudaKernel::ScalarFma,
        CudaKernel::Tiled,
        CudaKernel::SplitKFixed(1),
        CudaKernel::SplitKAtomic(1),
        CudaKernel::MmaLarge,
        CudaKernel::MmaSmall,
    ];

    /// The family part of the symbol.
    pub fn family(&self) -> &'static str {
        match self {
            CudaKernel::ScalarFma => "scalar_fma",
            CudaKernel::Tiled => "tiled",
            CudaKernel::SplitKFixed(_) => "split_k_fixed",
            CudaKernel::SplitKAtomic(_) => "split_k_atomic",
            CudaKernel::MmaLarge => "mma_large",
            CudaKernel::MmaSmall => "mma_small",
        }
    }

    /// Whether the family has a kernel for `dtype` (tensor cores: halves only).
    pub fn supports(&self, dtype: DType) -> bool {
        !self.is_mma() || dtype.is_half()
    }

    /// True for the tensor-core families.
    pub fn is_mma(&self) -> bool {
        matches!(self, CudaKernel::MmaLarge | CudaKernel::MmaSmall)
    }

    /// The kernel symbol for one op and dtype (`gemm_<family>_<op>_<dtype>`).
    pub fn symbol(&self, op: GemmOp, dtype: DType) -> String {
        format!("gemm_{}_{}_{}", self.family(), op, dtype)
    }

    /// Splits of the reduction (1 when not split).
    pub fn splits(&self) -> u32 {
        match *self {
            CudaKernel::SplitKFixed(s) | CudaKernel::SplitKAtomic(s) => s,
            _ => 1,
        }
    }

    /// Numeric contract and output ownership.
    pub fn contract(&self) -> (ContractKind, OutputOwnership) {
        match self {
            CudaKernel::ScalarFma => (ContractKind::ScalarFma, OutputOwnership::OneOwnerPerElement),
            CudaKernel::Tiled => (ContractKind::ScalarFma, OutputOwnership::OneOwnerPerTile),
            CudaKernel::SplitKFixed(_) => {
                (ContractKind::SplitKFixed, OutputOwnership::FixedSplitKFold)
            }
            CudaKernel::SplitKAtomic(_) => (
                ContractKind::AtomicUnordered,
                OutputOwnership::AtomicAccumulate,
            ),
            CudaKernel::MmaLarge | CudaKernel::MmaSmall => (
                ContractKind::TensorCoreTileParity,
                OutputOwnership::OneOwnerPerTile,
            ),
        }
    }

    /// Instruction family and shape.
    pub fn instruction(&self) -> (&'static str, &'static str) {
        if self.is_mma() {
            ("mma.sync", "m16n8k16")
        } else {
            ("fma.rn.f32", "1x1x1")
        }
    }

    /// Device capabilities the kernel relies on (sorted).
    pub fn capabilities(&self, dtype: DType) -> Vec<String> {
        let mut caps = vec!["f32-fused-multiply-add".to_string()];
        match self {
            CudaKernel::SplitKAtomic(_) => caps.push("global-atomic-add-f32".into()),
            CudaKernel::MmaLarge | CudaKernel::MmaSmall => {
                caps = vec![format!("mma.sync.m16n8k16.{dtype}")];
            }
            _ => {}
        }
        if dtype.is_half() && !self.is_mma() {
            caps.push(format!("cvt.rn.{dtype}.f32"));
        }
        caps.sort();
        caps
    }

    /// Launch geometry on `shape`; refused when a dimension does not fit.
    pub fn geometry(&self, shape: GemmShape) -> Result<Geometry, String> {
        let GemmShape { m, k, n } = shape;
        for (what, v) in [("m", m), ("k", k), ("n", n)] {
            if v > u32::MAX as u64 {
                return Err(format!(
                    "{what} = {v} does not fit the kernels' 32-bit indices"
                ));
            }
        }
        let tiles = |x: u64, t: u64| x.div_ceil(t);
        let (tm, tn, bk, block, z) = match *self {
            CudaKernel::ScalarFma => (16, 16, k, [16, 16, 1], 1),
            CudaKernel::SplitKFixed(s) => (16, 16, k.div_ceil(s.max(1) as u64), [16, 16, 1], 1),
            CudaKernel::SplitKAtomic(s) => (
                16,
                16,
                k.div_ceil(s.max(1) as u64),
                [16, 16, 1],
                s.max(1) as u64,
            ),
            CudaKernel::Tiled => (64, 64, 16, [16, 16, 1], 1),
            CudaKernel::MmaLarge => (128, 128, 32, [256, 1, 1], 1),
            CudaKernel::MmaSmall => (64, 64, 32, [128, 1, 1], 1),
        };
        let gx = tiles(n, tn).max(1);
        let gy = tiles(m, tm).max(1);
        if gy > MAX_GRID_YZ || z > MAX_GRID_YZ || gx > i32::MAX as u64 {
            return Err(format!(
                "grid {gx}x{gy}x{z} exceeds CUDA's limits (m = {m} is too large for this kernel)"
            ));
        }
        let tile_k = match self {
            CudaKernel::Tiled => 16,
            CudaKernel::MmaLarge | CudaKernel::MmaSmall => 32,
            _ => 1,
        };
        Ok(Geometry {
            grid: [gx as u32, gy as u32, z as u32],
            block,
            tile: TileShape {
                m: tm as u32,
                n: tn as u32,
                k: tile_k,
            },
            bk: bk.min(u32::MAX as u64) as u32,
            threads: block.iter().product(),
        })
    }

    /// The kernel a stored route names: its symbol must be this catalog's
    /// symbol for the route's contract, op and dtype, and its geometry the
    /// one this catalog computes. Anything else is refused.
    pub fn from_route(route: &ResolvedGemmRoute) -> Result<CudaKernel, String> {
        let splits = route.contract.splits;
        if splits == 0 || splits > crate::workload::MAX_SPLITS {
            return Err(format!("split count {splits} is out of range"));
        }
        let kernel = CudaKernel::FAMILIES
            .iter()
            .map(|k| match k {
                CudaKernel::SplitKFixed(_) => CudaKernel::SplitKFixed(splits),
                CudaKernel::SplitKAtomic(_) => CudaKernel::SplitKAtomic(splits),
                other => *other,
            })
            .find(|k| k.symbol(route.op, route.dtype) == route.kernel_symbol)
            .ok_or_else(|| {
                format!(
                    "symbol {:?} is not an NVRTC GEMM kernel",
                    route.kernel_symbol
                )
            })?;
        if !kernel.supports(route.dtype) {
            return Err(format!("{} has no {} kernel", kernel.family(), route.dtype));
        }
        let (kind, ownership) = kernel.contract();
        if route.contract.kind != kind || route.output_ownership != ownership {
            return Err(format!(
                "symbol {:?} does not serve contract {} with ownership {}",
                route.kernel_symbol, route.contract, route.output_ownership
            ));
        }
        if kernel.splits() != splits {
            return Err(format!("{} is not split {splits} ways", kernel.family()));
        }
        let g = kernel.geometry(route.shape)?;
        if route.launch.grid != g.grid
            || route.launch.block != g.block
            || route.launch.dynamic_shared_bytes != 0
            || route.threads != g.threads
        {
            return Err(format!(
                "launch {:?}x{:?} differs from the kernel's geometry {:?}x{:?}",
                route.launch.grid, route.launch.block, g.grid, g.block
            ));
        }
        if route.strides != strides(route.op, route.shape) {
            return Err("strides differ from the dense layout of the op".into());
        }
        Ok(kernel)
    }
}

/// Every symbol the GEMM module exports, with what it serves and its
/// resources digest (from `resources`, keyed by symbol, where known).
pub fn module_entries(
    resources: &std::collections::HashMap<String, Digest>,
) -> Vec<crate::identity::SymbolEntry> {
    let mut out = Vec::new();
    for k in CudaKernel::FAMILIES {
        let (contract, _) = k.contract();
        for op in GemmOp::ALL {
            for dtype in DType::ALL {
                if k.supports(*dtype) {
                    let name = k.symbol(*op, *dtype);
                    let mut e = crate::identity::SymbolEntry::new(name.clone()).serving(
                        &[*op],
                        &[*dtype],
                        &contract,
                        k.is_mma(),
                    );
                    if let Some(d) = resources.get(&name) {
                        e = e.with_resources(*d);
                    }
                    out.push(e);
                }
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Every symbol the GEMM module exports, sorted.
pub fn module_symbols() -> Vec<String> {
    let mut out = Vec::new();
    for k in CudaKernel::FAMILIES {
        for op in GemmOp::ALL {
            for dtype in DType::ALL {
                if k.supports(*dtype) {
                    out.push(k.symbol(*op, *dtype));
                }
            }
        }
    }
    out.sort();
    out
}

/// Dense leading dimensions of the op's storage layout.
pub fn strides(op: GemmOp, shape: GemmShape) -> GemmStrides {
    GemmStrides {
        lda: if op == GemmOp::Tn { shape.m } else { shape.k },
        ldb: if op == GemmOp::Nt { shape.k } else { shape.n },
        ldc: shape.n,
    }
}

/// Digest of a kernel launch's argument values (device addresses excluded).
pub fn arguments_digest(
    symbol: &str,
    shape: GemmShape,
    strides: GemmStrides,
    splits: u32,
) -> Digest {
    crate::backend::common::gemm_arguments_digest(
        "gemm-audit/cuda-arguments/v1",
        symbol,
        shape,
        strides,
        splits,
    )
}

/// The shape-based dispatcher of `RouteChoice::Policy`:
/// - halves with tensor cores permitted: `mma_large` from m =
///   [`DISPATCH_MMA_LARGE_MIN_M`], `mma_small` below (bit-identical, so
///   batch invariant);
/// - otherwise fixed split-K ([`DISPATCH_SPLITS`]) when m <=
///   [`DISPATCH_SPLIT_K_MAX_M`], k >= [`DISPATCH_SPLIT_K_MIN_K`] and the
///   policy permits split-K for the dtype (deterministic, not batch
///   invariant), else tiled.
pub fn dispatch(dtype: DType, m: u64, k: u64, tensor_cores: bool, split_ok: bool) -> CudaKernel {
    if dtype.is_half() && tensor_cores {
        if m >= DISPATCH_MMA_LARGE_MIN_M {
            CudaKernel::MmaLarge
        } else {
            CudaKernel::MmaSmall
        }
    } else if crate::backend::common::dispatch_split_k(m, k, split_ok) {
        CudaKernel::SplitKFixed(DISPATCH_SPLITS)
    } else {
        CudaKernel::Tiled
    }
}

/// The pinned NVRTC options. Why each:
/// - `--gpu-architecture=sm_XX`: a cubin for exactly this device's compute
///   capability (no driver JIT between the digested artifact and the SASS);
/// - `--fmad=false`: no contraction of separate multiplies and adds (the
///   kernels spell every rounding-relevant operation as PTX anyway);
/// - `--ftz=false`, `--prec-div=true`, `--prec-sqrt=true`: IEEE denormals
///   and rounding, never `--use_fast_math`;
/// - `-default-device`: plain functions are device functions;
/// - `--std=c++17`: a fixed language level.
pub fn compile_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--ftz=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "-default-device".into(),
        "--std=c++17".into(),
    ]
}

/// Digest of the compile options (part of the compiler identity).
pub fn options_digest(options: &[String]) -> Digest {
    let mut w = DigestWriter::new("gemm-audit/nvrtc-options/v1");
    w.field("options", FieldValue::StrList(options));
    w.finish()
}

#[cfg(test)]
mod tests {

    /// The framing moved to `backend::common`; the digests stored in the
    /// H200 goldens must still be what it computes.
    #[test]
    fn arguments_digests_match_the_h200_goldens() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/nvidia-h200");
        let mut checked = 0;
        for name in ["transformer-block", "m-sweep", "tensor-core-sweep"] {
            let t = crate::RecordedGemmTrace::read(&dir.join(format!("{name}.gat"))).unwrap();
            for r in t
                .routes
                .iter()
                .filter(|r| r.backend == crate::route::PhysicalBackend::CudaNvrtc)
            {
                let d = arguments_digest(&r.kernel_symbol, r.shape, r.strides, r.contract.splits);
                assert_eq!(d, r.launch.arguments_digest, "{name} {}", r.gemm);
                checked += 1;
            }
        }
        assert!(checked > 50, "{checked}");
    }
    use super::*;

    #[test]
    fn symbols_cover_every_family_op_and_dtype() {
        let s = module_symbols();
        // 4 SIMT families x 3 ops x 3 dtypes + 2 mma families x 3 ops x 2 dtypes.
        assert_eq!(s.len(), 36 + 12);
        assert!(s.contains(&"gemm_scalar_fma_nn_f32".to_string()));
        assert!(s.contains(&"gemm_mma_small_nt_bf16".to_string()));
        assert!(
            !s.iter()
                .any(|x| x.starts_with("gemm_mma") && x.ends_with("f32"))
        );
        for k in CudaKernel::FAMILIES {
            let entry = format!("gemm_{}_##opname##_##dtname", k.family());
            assert!(GEMM_SOURCE.contains(&entry), "{entry}");
        }
    }

    #[test]
    fn geometry_covers_the_output() {
        let shape = GemmShape {
            m: 65,
            k: 48,
            n: 257,
        };
        for k in CudaKernel::FAMILIES {
            let g = k.geometry(shape).unwrap();
            assert!(g.grid[0] as u64 * g.tile.n as u64 >= shape.n);
            assert!(g.grid[1] as u64 * g.tile.m as u64 >= shape.m);
            assert_eq!(g.threads, g.block.iter().product::<u32>());
        }
        assert!(
            CudaKernel::ScalarFma
                .geometry(GemmShape {
                    m: 1 << 21,
                    k: 1,
                    n: 1
                })
                .is_err()
        );
        assert_eq!(
            CudaKernel::SplitKAtomic(16).geometry(shape).unwrap().grid[2],
            16
        );
    }

    #[test]
    fn dispatcher_thresholds() {
        assert_eq!(
            dispatch(DType::Bf16, 1, 4096, true, true),
            CudaKernel::MmaSmall
        );
        assert_eq!(
            dispatch(DType::Bf16, 128, 4096, true, true),
            CudaKernel::MmaLarge
        );
        assert_eq!(
            dispatch(DType::F32, 8, 1024, true, true),
            CudaKernel::SplitKFixed(DISPATCH_SPLITS)
        );
        assert_eq!(
            dispatch(DType::F32, 8, 1024, true, false),
            CudaKernel::Tiled
        );
        assert_eq!(
            dispatch(DType::F32, 64, 1024, true, true),
            CudaKernel::Tiled
        );
        assert_eq!(
            dispatch(DType::F16, 8, 1024, false, true),
            CudaKernel::SplitKFixed(DISPATCH_SPLITS)
        );
    }

    #[test]
    fn options_are_pinned() {
        let o = compile_options("sm_90");
        assert!(o.contains(&"--fmad=false".to_string()));
        assert!(!o.iter().any(|x| x.contains("fast_math")));
        assert_ne!(
            options_digest(&o),
            options_digest(&compile_options("sm_80"))
        );
    }
}
