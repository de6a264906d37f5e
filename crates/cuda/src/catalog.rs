//! The NVRTC kernel catalog: kernel families, their symbols, numeric
//! contracts and launch geometry. Pure logic (no device), so the mapping
//! between routes and kernels is tested without a GPU.

use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::identity::{GemmRouteIdentity, ModuleIdentity};
use crate::kernels::KernelFamily;
use crate::route::builder::GemmRouteBuilder;
use crate::route::{DType, GemmOp, GemmShape, GemmStrides, ResolvedGemmRoute, TileShape};
use crate::route::{LaunchConfig, OperandConversion};

/// The GEMM kernels' source (`kernels/gemm.cu`): its digest is the
/// compiler identity's source digest.
pub const GEMM_SOURCE: &str = include_str!("../kernels/gemm.cu");
/// The fingerprint kernel's source (`kernels/sha256.cu`).
pub const SHA256_SOURCE: &str = include_str!("../kernels/sha256.cu");
/// The fast (NH) chunk hash kernel's source (`kernels/nh128.cu`).
pub const NH128_SOURCE: &str = include_str!("../kernels/nh128.cu");
/// The seeded-operand kernel's source (`kernels/seed.cu`).
pub const SEED_SOURCE: &str = include_str!("../kernels/seed.cu");
/// The Hopper (TMA + wgmma) GEMM kernels' source (`kernels/wgmma.cu`),
/// compiled into a module of its own for `sm_90a`.
pub const WGMMA_SOURCE: &str = include_str!("../kernels/wgmma.cu");

/// Revision of the kernels' work schedule (tile shapes, thread mapping).
pub const SCHEDULE_REVISION: u32 = 1;
/// Revision of how the wgmma kernels' TMA tensor maps are encoded (what
/// [`TensorMapSpec`] holds and how it is digested).
pub const TENSOR_MAP_REVISION: u32 = 1;

/// The split-K thresholds are every backend's (see [`crate::kernels`]),
/// so the CPU and CUDA dispatchers pick the same contract for the same shape
/// (f32, or halves without tensor cores).
/// So are the mma-size threshold and the revision of the whole table.
pub use crate::kernels::{
    DISPATCH_MMA_LARGE_MIN_M, DISPATCH_SPLIT_K_MAX_M, DISPATCH_SPLIT_K_MIN_K, DISPATCH_SPLITS,
    TUNING_TABLE_REVISION,
};

/// A shape every family serves, to read the geometry facts that do not
/// depend on the shape (tile, stages, fixed k block) for declarations.
const DECLARATION_SHAPE: GemmShape = GemmShape {
    m: 128,
    k: 64,
    n: 256,
};

/// Largest grid y and z dimension CUDA accepts.
const MAX_GRID_YZ: u64 = 65_535;

/// The NVRTC kernel families: every [`KernelFamily`] has a kernel here.
/// What a family promises is the model's; what the CUDA module adds
/// (symbols, geometry, declarations) is [`CudaFamily`].
pub type CudaKernel = KernelFamily;

/// Which NVRTC module holds a kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaModule {
    /// kernels/gemm.cu, compiled for the device's own `sm_XY`.
    Gemm,
    /// kernels/wgmma.cu, compiled for `sm_90a` on compute capability 9.0.
    Wgmma,
}

impl CudaModule {
    /// The families the module exports.
    pub fn families(&self) -> &'static [CudaKernel] {
        match self {
            CudaModule::Gemm => &KernelFamily::ALL[..6],
            CudaModule::Wgmma => &KernelFamily::ALL[6..],
        }
    }

    /// The module's source.
    pub fn source(&self) -> &'static str {
        match self {
            CudaModule::Gemm => GEMM_SOURCE,
            CudaModule::Wgmma => WGMMA_SOURCE,
        }
    }

    /// The source's file name (under `kernels/`), as NVRTC reports it.
    pub fn file_name(&self) -> &'static str {
        match self {
            CudaModule::Gemm => "gemm.cu",
            CudaModule::Wgmma => "wgmma.cu",
        }
    }
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
    /// Dynamic shared memory per block, in bytes (the wgmma stage ring).
    pub dynamic_shared_bytes: u32,
    /// Pipeline stages (shared-memory buffers in flight; 1 when the kernel
    /// does not pipeline).
    pub stages: u32,
}

/// The wgmma kernels' block tile rows and k step (kernels/wgmma.cu `BM`,
/// `BK`).
pub const WGMMA_BM: u32 = 128;
/// See [`WGMMA_BM`].
pub const WGMMA_BK: u32 = 64;
/// Shared memory the wgmma stage ring may use (kernels/wgmma.cu
/// `RING_BYTES`).
const WGMMA_RING_BYTES: u32 = 192 * 1024;

/// What the CUDA module adds to a [`KernelFamily`]: the module that
/// exports it, its symbols, instruction, launch geometry and declaration.
pub trait CudaFamily: Sized {
    /// The module that exports this family.
    fn module(&self) -> CudaModule;
    /// The family part of the symbol (`scalar_fma`, `wgmma_256`).
    fn symbol_family(&self) -> &'static str;
    /// The kernel symbol for one op and dtype (`gemm_<family>_<op>_<dtype>`).
    fn symbol(&self, op: GemmOp, dtype: DType) -> String;
    /// Instruction family and shape.
    fn instruction(&self) -> (&'static str, &'static str);
    /// Device capabilities the kernel relies on (sorted).
    fn capabilities(&self, dtype: DType) -> Vec<String>;
    /// What the family's symbol for `dtype` launches: its instruction,
    /// ownership, split rule, k block, tile and stages (the same on every
    /// shape), tensor maps and device capabilities.
    fn declaration(&self, dtype: DType) -> crate::declaration::SymbolDeclaration;
    /// Launch geometry on `shape`; refused when a dimension does not fit.
    fn geometry(&self, shape: GemmShape) -> Result<Geometry, String>;
    /// Whether the family can serve `op` on `shape`: the wgmma kernels read
    /// their operands with TMA, which needs every row stride to be a
    /// multiple of 16 bytes (8 elements) and no dimension to be empty. The
    /// error names what fails; other families serve every shape.
    fn serves_shape(&self, op: GemmOp, shape: GemmShape) -> Result<(), String>;
    /// The kernel a stored route names: its symbol must be this catalog's
    /// symbol for the route's contract, op and dtype, and its geometry the
    /// one this catalog computes. Anything else is refused.
    fn from_route(route: &ResolvedGemmRoute) -> Result<Self, String>;
}

impl CudaFamily for KernelFamily {
    fn module(&self) -> CudaModule {
        if self.is_wgmma() {
            CudaModule::Wgmma
        } else {
            CudaModule::Gemm
        }
    }

    fn symbol_family(&self) -> &'static str {
        match self {
            CudaKernel::ScalarFma => "scalar_fma",
            CudaKernel::Tiled => "tiled",
            CudaKernel::SplitKFixed(_) => "split_k_fixed",
            CudaKernel::SplitKAtomic(_) => "split_k_atomic",
            CudaKernel::MmaLarge => "mma_large",
            CudaKernel::MmaSmall => "mma_small",
            CudaKernel::WgmmaLarge => "wgmma_256",
            CudaKernel::WgmmaSmall => "wgmma_128",
            CudaKernel::WgmmaMedium => "wgmma_192",
            CudaKernel::LadderDecode(_) => "ladder_64x64_split",
            CudaKernel::LadderMid(_) => "ladder_128x128_split",
            CudaKernel::LadderWide(_) => "ladder_128x128_fold",
            CudaKernel::LadderBand(_) => "ladder_64x128_fold",
            CudaKernel::LadderNarrow(_) => "ladder_64x32_fold",
        }
    }

    fn symbol(&self, op: GemmOp, dtype: DType) -> String {
        format!("gemm_{}_{}_{}", self.symbol_family(), op, dtype)
    }

    fn instruction(&self) -> (&'static str, &'static str) {
        match self {
            CudaKernel::WgmmaLarge => return ("wgmma.mma_async", "m64n256k16"),
            CudaKernel::WgmmaMedium => return ("wgmma.mma_async", "m64n192k16"),
            CudaKernel::WgmmaSmall
            | CudaKernel::LadderMid(_)
            | CudaKernel::LadderWide(_)
            | CudaKernel::LadderBand(_) => {
                return ("wgmma.mma_async", "m64n128k16");
            }
            CudaKernel::LadderDecode(_) => return ("wgmma.mma_async", "m64n64k16"),
            CudaKernel::LadderNarrow(_) => return ("wgmma.mma_async", "m64n32k16"),
            _ => {}
        }
        if self.is_mma() {
            ("mma.sync", "m16n8k16")
        } else {
            ("fma.rn.f32", "1x1x1")
        }
    }

    fn capabilities(&self, dtype: DType) -> Vec<String> {
        let mut caps = vec!["f32-fused-multiply-add".to_string()];
        match self {
            CudaKernel::SplitKAtomic(_) => caps.push("global-atomic-add-f32".into()),
            CudaKernel::MmaLarge | CudaKernel::MmaSmall => {
                caps = vec![format!("mma.sync.m16n8k16.{dtype}")];
            }
            _ if self.is_wgmma() => {
                caps = vec![
                    "cp.async.bulk.tensor.2d.tile".to_string(),
                    "mbarrier.expect_tx".to_string(),
                    format!("wgmma.mma_async.{}.{dtype}", self.instruction().1),
                ];
                if self.ladder_splits_on_grid() {
                    // The tile's last block is found by counting finished chunks.
                    caps.push("atom.global.add.u32".into());
                }
            }
            _ => {}
        }
        if dtype.is_half() && !self.is_mma() {
            caps.push(format!("cvt.rn.{dtype}.f32"));
        }
        caps.sort();
        caps
    }

    fn declaration(&self, dtype: DType) -> crate::declaration::SymbolDeclaration {
        use crate::declaration::{BkRule, SplitRule, SymbolDeclaration};
        let (family, shape) = self.instruction();
        let (_, ownership) = self.contract();
        let splits = match self {
            CudaKernel::SplitKFixed(_) => SplitRule::KBlock,
            CudaKernel::SplitKAtomic(_) => SplitRule::GridZ,
            // The 128x128 folding rung has wgmma-small's tile: one chunk
            // would make it that kernel under another name.
            CudaKernel::LadderWide(_) => SplitRule::LadderFoldChunks,
            _ if self.is_ladder() => SplitRule::LadderChunks,
            _ => SplitRule::Unsplit,
        };
        // What the declaration says holds on every shape; a ladder rung's
        // chunk count is the declaration shape's (the split rule covers it).
        let g = self
            .for_shape(DECLARATION_SHAPE.k, DECLARATION_SHAPE.n)
            .geometry(DECLARATION_SHAPE)
            .expect("every family serves the declaration shape");
        let bk = match self {
            CudaKernel::ScalarFma | CudaKernel::SplitKFixed(_) | CudaKernel::SplitKAtomic(_) => {
                BkRule::PerSplit
            }
            _ => BkRule::Fixed(g.bk),
        };
        let d = SymbolDeclaration::new(family, shape, ownership, splits, bk)
            .with_tile(g.tile, g.stages)
            .with_capabilities(self.capabilities(dtype));
        if self.is_wgmma() {
            d.with_tensor_map()
        } else {
            d
        }
    }

    fn geometry(&self, shape: GemmShape) -> Result<Geometry, String> {
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
            CudaKernel::WgmmaLarge
            | CudaKernel::WgmmaSmall
            | CudaKernel::WgmmaMedium
            | CudaKernel::LadderDecode(_)
            | CudaKernel::LadderMid(_)
            | CudaKernel::LadderWide(_)
            | CudaKernel::LadderBand(_)
            | CudaKernel::LadderNarrow(_) => return wgmma_geometry(*self, shape),
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
            dynamic_shared_bytes: 0,
            stages: 1,
        })
    }

    fn serves_shape(&self, op: GemmOp, shape: GemmShape) -> Result<(), String> {
        serves(*self, op, shape, true)
    }

    fn from_route(route: &ResolvedGemmRoute) -> Result<CudaKernel, String> {
        if route.backend != crate::route::PhysicalBackend::CudaNvrtc {
            return Err(format!("backend {} is not NVRTC", route.backend));
        }
        let kernel = KernelFamily::of_route(&KernelFamily::ALL, route, |f, op, dtype| {
            f.symbol(op, dtype)
        })?;
        kernel.serves_shape(route.op, route.shape)?;
        let g = kernel.geometry(route.shape)?;
        if route.launch.grid != g.grid
            || route.launch.block != g.block
            || route.launch.dynamic_shared_bytes != g.dynamic_shared_bytes
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
        match (&route.tensor_map, kernel.is_wgmma()) {
            (None, false) => {}
            (Some(t), true) => {
                let want =
                    tensor_map_digest(&tensor_maps(kernel, route.op, route.dtype, route.shape));
                if t.digest != want {
                    return Err(format!(
                        "tensor-map digest {} is not the {} maps this build encodes ({})",
                        t.digest.short(),
                        kernel.symbol_family(),
                        want.short()
                    ));
                }
            }
            (None, true) => {
                return Err(format!(
                    "{} route has no tensor-map identity",
                    kernel.symbol_family()
                ));
            }
            (Some(_), false) => {
                return Err(format!(
                    "{} uses no tensor map, but the route records one",
                    kernel.symbol_family()
                ));
            }
        }
        Ok(kernel)
    }
}

/// [`CudaFamily::serves_shape`], for operands stored dense or (`dense`
/// false) with leading dimensions [`wgmma_strides`] checks: then TN's A
/// rows are lda elements long, whatever m is.
fn serves(kernel: CudaKernel, op: GemmOp, shape: GemmShape, dense: bool) -> Result<(), String> {
    if !kernel.is_wgmma() {
        return Ok(());
    }
    let GemmShape { m, k, n } = shape;
    if m == 0 || k == 0 || n == 0 {
        return Err(format!(
            "{} needs m, k and n of at least 1 (TMA tensor maps cannot be empty), not {m}x{k}x{n}",
            kernel.symbol_family()
        ));
    }
    let mut strided = vec![("k", k), ("n", n)];
    if op == GemmOp::Tn && dense {
        // A is stored k x m: its dense rows are m elements long.
        strided.push(("m", m));
    }
    for (what, v) in strided {
        if v % 8 != 0 {
            return Err(format!(
                "{} {op} needs {what} to be a multiple of 8 (TMA row strides are multiples of 16 bytes), not {v}",
                kernel.symbol_family()
            ));
        }
    }
    if matches!(kernel, CudaKernel::LadderWide(_)) && crate::kernels::ladder_chunks(k, n) == 1 {
        // With one chunk there is nothing to fold: the rung would be
        // wgmma_128 under another name, which no route could tell
        // apart. (The band rung's 64x128 tile is no other kernel's.)
        return Err(format!(
            "ladder-wide folds chunks, and k = {k} n = {n} has one: its kernel is wgmma-small's (take ladder-mid or wgmma-large, the batch-invariant route's picks there)"
        ));
    }
    Ok(())
}

/// Rows and columns of a wgmma block tile ([`KernelFamily::wgmma_tile`]).
fn wgmma_tile(kernel: KernelFamily) -> (u32, u32) {
    kernel.wgmma_tile().unwrap_or((WGMMA_BM, 256))
}

/// One block per BM x BN output tile (a 1-D grid: the kernel orders
/// tiles itself; the ladder's decode rung adds one grid z slice per k
/// chunk), a producer warpgroup and one consumer per 64 rows, the stage
/// ring in dynamic shared memory. A ladder rung must carry its shape's
/// [`crate::kernels::ladder_chunks`].
fn wgmma_geometry(kernel: KernelFamily, shape: GemmShape) -> Result<Geometry, String> {
    let (bm, bn) = wgmma_tile(kernel);
    let tiles = kernel
        .wgmma_tiles(shape.m, shape.n)
        .ok_or_else(|| format!("{} is not a wgmma family", kernel.name()))?;
    if tiles > i32::MAX as u64 {
        return Err(format!(
            "{tiles} output tiles exceed CUDA's grid limit (m = {} is too large for this kernel)",
            shape.m
        ));
    }
    let mut z = 1;
    if kernel.is_ladder() {
        let chunks = crate::kernels::ladder_chunks(shape.k, shape.n);
        if kernel.splits() != chunks {
            return Err(format!(
                "{} folds k = {} n = {} in {chunks} chunks, not {}",
                kernel.name(),
                shape.k,
                shape.n,
                kernel.splits()
            ));
        }
        if kernel.ladder_splits_on_grid() {
            z = chunks;
        }
    }
    // A stage holds one, two or four k blocks (the tile's staging depth);
    // the k step stays one block.
    let stage_k = WGMMA_BK * kernel.wgmma_k_blocks_per_stage();
    let stage = (bm + bn) * stage_k * 2;
    let stages = WGMMA_RING_BYTES / stage;
    let block = [128 * (1 + bm / 64), 1, 1];
    Ok(Geometry {
        grid: [tiles.max(1) as u32, 1, z],
        block,
        tile: TileShape {
            m: bm,
            n: bn,
            k: stage_k,
        },
        bk: WGMMA_BK,
        threads: block.iter().product(),
        // The ring, 1 KiB to align it for the 128-byte swizzle, and a
        // full and an empty mbarrier per stage.
        dynamic_shared_bytes: stages * stage + 1024 + 16 * stages,
        stages,
    })
}

/// Every symbol the GEMM module exports, with what it serves and its
/// resources digest (from `resources`, keyed by symbol, where known).
pub fn module_entries(
    module: CudaModule,
    resources: &std::collections::HashMap<String, Digest>,
) -> Vec<crate::identity::SymbolEntry> {
    let mut out = Vec::new();
    for &k in module.families() {
        let (contract, _) = k.contract();
        for op in GemmOp::ALL {
            for dtype in DType::ALL {
                if k.supports(*dtype) {
                    let name = k.symbol(*op, *dtype);
                    let mut e = crate::identity::SymbolEntry::new(name.clone())
                        .serving(&[*op], &[*dtype], &contract, k.is_mma())
                        .declaring(k.declaration(*dtype));
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

/// The most dynamic shared memory any launch of `module`'s kernels asks
/// for (0 when none needs more than the default).
pub fn max_dynamic_shared_bytes(module: CudaModule) -> u32 {
    let any = GemmShape { m: 1, k: 8, n: 8 };
    module
        .families()
        .iter()
        .filter_map(|k| k.geometry(any).ok())
        .map(|g| g.dynamic_shared_bytes)
        .max()
        .unwrap_or(0)
}

/// Every symbol `module` exports, sorted.
pub fn module_symbols(module: CudaModule) -> Vec<String> {
    let mut out = Vec::new();
    for &k in module.families() {
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
    GemmStrides::dense(op, shape)
}

/// One TMA tensor map as the wgmma kernels read an operand: everything
/// `cuTensorMapEncodeTiled` is given except the base address (which is a
/// device address, so neither digested nor recorded). Every map is
/// two-dimensional, 2-byte elements, element strides 1, no interleave,
/// 128-byte swizzle, 256-byte L2 promotion and zero fill out of bounds
/// (rows past m and the k tail read as +0.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorMapSpec {
    /// `"A"` or `"B"`.
    pub operand: &'static str,
    /// Element type (bf16 or f16).
    pub dtype: DType,
    /// Extent of the contiguous dimension, then of the strided one, in
    /// elements.
    pub dims: [u64; 2],
    /// Bytes from one row (step of the strided dimension) to the next.
    pub row_stride_bytes: u64,
    /// The box one TMA load copies: elements of the contiguous dimension
    /// (64 = one 128-byte swizzle row; 32, the narrow rung's MN-major B,
    /// one 64-byte row; TN's A on a 64-row rung at m <= 32 8, 16 or 32,
    /// see [`tn_a_box_cols`]), then rows.
    pub box_dims: [u32; 2],
}

/// The encoding settings every wgmma tensor map shares (digested with
/// each map, so a change of them changes every route's tensor-map digest).
pub const TENSOR_MAP_SETTINGS: [&str; 5] = [
    "element-strides=1,1",
    "interleave=none",
    "swizzle=box-row-bytes",
    "l2-promotion=256B",
    "oob-fill=zero",
];

impl TensorMapSpec {
    /// Bytes of one box row, which is also the map's swizzle span (128,
    /// 64 or 32; 16 is no swizzle; the kernels' shared-memory descriptors
    /// assume the same).
    pub fn swizzle_bytes(&self) -> u64 {
        self.box_dims[0] as u64 * crate::kernels::element_size(self.dtype) as u64
    }
}

/// The two tensor maps (A then B) a wgmma kernel reads on one problem.
/// A K-major operand (A of nn/nt, B of nt) is loaded as boxes of 64 k x
/// rows; an MN-major one (A of tn, B of nn/tn) as boxes of 64 m or n x 64 k
/// (kernels/wgmma.cu issues several per stage).
pub fn tensor_maps(
    kernel: CudaKernel,
    op: GemmOp,
    dtype: DType,
    shape: GemmShape,
) -> [TensorMapSpec; 2] {
    tensor_maps_strided(kernel, op, dtype, shape, strides(op, shape))
}

/// [`tensor_maps`] over operands stored with leading dimensions
/// `strides.lda` and `strides.ldb` (elements from one stored row to the
/// next; dense storage gives the same maps as [`tensor_maps`]). The
/// strides are not checked here: [`wgmma_strides`] does.
pub fn tensor_maps_strided(
    kernel: CudaKernel,
    op: GemmOp,
    dtype: DType,
    shape: GemmShape,
    strides: GemmStrides,
) -> [TensorMapSpec; 2] {
    let GemmShape { m, k, n } = shape;
    let map = |operand, dims: [u64; 2], box_dims| TensorMapSpec {
        operand,
        dtype,
        dims,
        row_stride_bytes: if operand == "A" {
            strides.lda
        } else {
            strides.ldb
        } * 2,
        box_dims,
    };
    let (bm, bn) = wgmma_tile(kernel);
    let a = if op == GemmOp::Tn {
        map("A", [m, k], [tn_a_box_cols(kernel, m), 64])
    } else if kernel.is_ladder() && m < bm as u64 {
        // The ladder loads only the rows below one tile, rounded up to 8
        // (kernels/wgmma.cu `a_rows`).
        map("A", [k, m], [64, m.next_multiple_of(8) as u32])
    } else {
        map("A", [k, m], [64, bm])
    };
    let b = if op == GemmOp::Nt {
        map("B", [k, n], [64, bn])
    } else {
        // MN-major B: 64-wide boxes, or one 32-wide box (64-byte rows).
        map("B", [n, k], [bn.min(64), 64])
    };
    [a, b]
}

/// m values per k row of TN's A box: 8, 16 or 32 on the ladder's 64-row
/// rungs where the problem has no more rows (16-, 32- or 64-byte rows,
/// that swizzle, none for 16), else 64 (128-byte rows). A 64-wide box at
/// m = 8 is seven eighths TMA zero fill, which cost the rung as much as
/// full boxes. kernels/wgmma.cu `ladder_entry` picks the same width.
pub fn tn_a_box_cols(kernel: CudaKernel, m: u64) -> u32 {
    match (kernel.is_ladder(), wgmma_tile(kernel).0, m) {
        (true, 64, ..=8) => 8,
        (true, 64, 9..=16) => 16,
        (true, 64, 17..=32) => 32,
        _ => 64,
    }
}

/// Checks leading dimensions for the wgmma kernels: A, B and C may be
/// stored with rows further apart than dense (a view into a wider buffer).
/// A and B: each at least its stored row's extent and a multiple of 8
/// elements (TMA row strides are multiples of 16 bytes). C: at least n and
/// even (the kernels store 2 elements, 4 bytes, at a time).
pub fn wgmma_strides(op: GemmOp, shape: GemmShape, strides: GemmStrides) -> Result<(), String> {
    let dense = GemmStrides::dense(op, shape);
    if strides.ldc < dense.ldc || strides.ldc % 2 != 0 || strides.ldc > u64::from(u32::MAX) {
        return Err(format!(
            "ldc = {} must be at least n = {} and even (the wgmma kernels store two elements at a time, {}-bit row strides)",
            strides.ldc, dense.ldc, 32
        ));
    }
    for (what, ld, extent) in [
        ("lda", strides.lda, dense.lda),
        ("ldb", strides.ldb, dense.ldb),
    ] {
        if ld < extent {
            return Err(format!(
                "{what} = {ld} is less than the stored row's {extent} elements ({op})"
            ));
        }
        if ld % 8 != 0 {
            return Err(format!(
                "{what} = {ld} is not a multiple of 8 (TMA row strides are multiples of 16 bytes)"
            ));
        }
    }
    Ok(())
}

/// The tensor-map identity of a wgmma route: a digest of both maps'
/// encoding parameters and [`TENSOR_MAP_SETTINGS`].
pub fn tensor_map_digest(maps: &[TensorMapSpec; 2]) -> Digest {
    let mut w = DigestWriter::new("gemm-audit/tensor-map/v1");
    let settings: Vec<String> = TENSOR_MAP_SETTINGS.iter().map(|s| s.to_string()).collect();
    w.field("settings", FieldValue::StrList(&settings));
    for t in maps {
        w.field("operand", FieldValue::Str(t.operand));
        w.field("dtype", FieldValue::Str(&t.dtype.to_string()));
        w.field("dims.0", FieldValue::U64(t.dims[0]));
        w.field("dims.1", FieldValue::U64(t.dims[1]));
        w.field("row_stride_bytes", FieldValue::U64(t.row_stride_bytes));
        w.field("box", FieldValue::U32x3([t.box_dims[0], t.box_dims[1], 1]));
    }
    w.finish()
}

/// Digest of a kernel launch's argument values (device addresses excluded).
pub fn arguments_digest(
    symbol: &str,
    shape: GemmShape,
    strides: GemmStrides,
    splits: u32,
) -> Digest {
    crate::kernels::gemm_arguments_digest(
        "gemm-audit/cuda-arguments/v1",
        symbol,
        shape,
        strides,
        splits,
    )
}

/// The route of `kernel` on one problem, served by `module` (with the
/// symbol's `resources` digest) under `live`. The module's declaration of
/// the symbol fills in the instruction, tile, k block, stages and
/// capabilities; the builder refuses a route that contradicts it. Pure, so
/// the routes stored in the H200 goldens are rebuilt without a device.
pub fn nvrtc_route(
    live: &GemmRouteIdentity,
    module: &ModuleIdentity,
    resources: Digest,
    gemm: &str,
    (op, dtype, shape): (GemmOp, DType, GemmShape),
    kernel: CudaKernel,
) -> Result<ResolvedGemmRoute, String> {
    nvrtc_route_strided(
        live,
        module,
        resources,
        gemm,
        (op, dtype, shape),
        kernel,
        strides(op, shape),
    )
}

/// [`nvrtc_route`] of operands stored with `strides` (a wgmma kernel only,
/// within [`wgmma_strides`]; every other family is dense). The CUDA
/// backend launches dense routes only: this is the route of an engine's
/// strided views (`InvariantGemms`).
pub fn nvrtc_route_strided(
    live: &GemmRouteIdentity,
    module: &ModuleIdentity,
    resources: Digest,
    gemm: &str,
    (op, dtype, shape): (GemmOp, DType, GemmShape),
    kernel: CudaKernel,
    strides: GemmStrides,
) -> Result<ResolvedGemmRoute, String> {
    let dense = strides == GemmStrides::dense(op, shape);
    serves(kernel, op, shape, dense)?;
    if !dense {
        if !kernel.is_wgmma() {
            return Err(format!(
                "{} reads dense operands only",
                kernel.symbol_family()
            ));
        }
        wgmma_strides(op, shape, strides)?;
    }
    let g = kernel.geometry(shape)?;
    let symbol = kernel.symbol(op, dtype);
    let (kind, ownership) = kernel.contract();
    let mut route = GemmRouteBuilder::new(live, module, &symbol, gemm)
        .problem(op, dtype, shape)
        .strides(strides)
        .contract(kind, kernel.splits())
        .tensor_cores(kernel.is_mma())
        .numerics(OperandConversion::ExactWiden, ownership)
        .launch_config(LaunchConfig {
            grid: g.grid,
            block: g.block,
            dynamic_shared_bytes: g.dynamic_shared_bytes,
            arguments_digest: arguments_digest(&symbol, shape, strides, kernel.splits()),
        })
        .resources(resources);
    if kernel.is_wgmma() {
        route = route.tensor_map(tensor_map_digest(&tensor_maps_strided(
            kernel, op, dtype, shape, strides,
        )));
    }
    route.build().map_err(|e| e.to_string())
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
    } else if crate::kernels::dispatch_split_k(m, k, split_ok) {
        CudaKernel::SplitKFixed(DISPATCH_SPLITS)
    } else {
        CudaKernel::Tiled
    }
}

/// Environment variables that change what cuBLAS and cuBLASLt compute or
/// choose: `NVIDIA_TF32_OVERRIDE` (`0` turns TF32 off for every f32 GEMM,
/// whatever the math mode), `CUBLAS_WORKSPACE_CONFIG` (the workspace cuBLAS
/// may split a GEMM into, and so whether results repeat across streams) and
/// `CUBLASLT_WORKSPACE_SIZE` (the workspace the cuBLASLt heuristic may
/// use, and so its pick). Users set them for determinism; the ones that are
/// set are part of the library's identity ([`version_with_knobs`]).
pub const VENDOR_DETERMINISM_ENV: [&str; 3] = [
    "CUBLAS_WORKSPACE_CONFIG",
    "CUBLASLT_WORKSPACE_SIZE",
    "NVIDIA_TF32_OVERRIDE",
];

/// Longest value of a knob kept in a version string.
const KNOB_VALUE_CHARS: usize = 64;

/// A vendor library's version string with the [`VENDOR_DETERMINISM_ENV`]
/// knobs that `lookup` finds set (the process environment, in use):
/// unchanged when none is, so traces recorded without them keep their
/// identity; else e.g. `cuBLAS 13.1.0 [NVIDIA_TF32_OVERRIDE=0]`. The
/// version is in the library's module digest and in every vendor route,
/// so flipping a knob is an identity change the guard refuses and `diff`
/// names. Values keep printable ASCII only (`?` for anything else), at
/// most 64 characters.
pub fn version_with_knobs(version: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let set: Vec<String> = VENDOR_DETERMINISM_ENV
        .iter()
        .filter_map(|&k| {
            lookup(k).map(|v| {
                let v: String = v
                    .chars()
                    .take(KNOB_VALUE_CHARS)
                    .map(|c| if c.is_ascii_graphic() { c } else { '?' })
                    .collect();
                format!("{k}={v}")
            })
        })
        .collect();
    if set.is_empty() {
        version.to_string()
    } else {
        format!("{version} [{}]", set.join(", "))
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
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/nvidia-h200");
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

    /// Every wgmma route of the H200 golden carries the tensor-map digest
    /// and launch geometry this build computes from its op, dtype and shape.
    #[test]
    fn wgmma_routes_of_the_h200_golden_match_this_catalog() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../traces/nvidia-h200/wgmma-sweep.gat");
        let t = crate::RecordedGemmTrace::read(&path).unwrap();
        let mut checked = 0;
        for r in &t.routes {
            let kernel = CudaKernel::from_route(r).unwrap_or_else(|e| panic!("{}: {e}", r.gemm));
            if kernel.is_wgmma() {
                let want = tensor_map_digest(&tensor_maps(kernel, r.op, r.dtype, r.shape));
                assert_eq!(
                    r.tensor_map.as_ref().map(|t| t.digest),
                    Some(want),
                    "{}",
                    r.gemm
                );
                checked += 1;
            }
        }
        assert!(checked >= 60, "{checked}");
    }
    use super::*;

    /// Unset knobs leave the version as it was (recorded identities stay
    /// valid); each set knob is named with its value, in a fixed order,
    /// and hostile values cannot forge text.
    #[test]
    fn set_determinism_knobs_are_part_of_the_version() {
        let none = |_: &str| None;
        assert_eq!(version_with_knobs("cuBLAS 13.1.0", none), "cuBLAS 13.1.0");
        let tf32 = |k: &str| (k == "NVIDIA_TF32_OVERRIDE").then(|| "0".to_string());
        assert_eq!(
            version_with_knobs("cuBLAS 13.1.0", tf32),
            "cuBLAS 13.1.0 [NVIDIA_TF32_OVERRIDE=0]"
        );
        let all = |k: &str| {
            Some(match k {
                "CUBLAS_WORKSPACE_CONFIG" => ":4096:8".to_string(),
                "CUBLASLT_WORKSPACE_SIZE" => "1024".to_string(),
                _ => "0\n]\u{202e}".to_string() + &"x".repeat(100),
            })
        };
        let v = version_with_knobs("cuBLASLt 13.1.0", all);
        assert!(v.starts_with(
            "cuBLASLt 13.1.0 [CUBLAS_WORKSPACE_CONFIG=:4096:8, CUBLASLT_WORKSPACE_SIZE=1024, NVIDIA_TF32_OVERRIDE=0?]?"
        ), "{v}");
        assert!(!v.contains('\n') && !v.contains('\u{202e}'), "{v}");
        assert_eq!(v.matches('x').count(), 64 - 4, "{v}");
        assert_ne!(version_with_knobs("v", tf32), version_with_knobs("v", none));
    }

    /// Every route of every H200 golden is what its symbol's declaration
    /// (this catalog's for NVRTC kernels, the vendor entry point's for
    /// cuBLAS and cuBLASLt) says it launches, and is served with its
    /// operand conversion: the declarations describe real launches. (The
    /// vendor declarations live in the CUDA build; run with `--features cuda`.)
    #[cfg(feature = "cuda")]
    #[test]
    fn every_h200_golden_route_satisfies_its_symbols_declaration() {
        use crate::route::PhysicalBackend;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/nvidia-h200");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let t = crate::RecordedGemmTrace::read(&entry.unwrap().path()).unwrap();
            for r in &t.routes {
                let declared = match &r.backend {
                    PhysicalBackend::CudaNvrtc => CudaKernel::from_route(r)
                        .unwrap_or_else(|e| panic!("{}: {e}", r.gemm))
                        .declaration(r.dtype),
                    b => super::super::vendor::vendor_declaration(
                        b,
                        &r.vendor.as_ref().unwrap().library_version,
                        &r.kernel_symbol,
                    ),
                };
                assert_eq!(declared.contradiction(r), None, "{} {}", t.workload, r.gemm);
                if r.backend.is_vendor() {
                    let fast = r.contract.kind == crate::route::ContractKind::VendorFast;
                    let n = super::super::vendor::Numerics::of(r.dtype, fast);
                    assert_eq!(n.conversion, r.operand_conversion, "{}", r.gemm);
                    assert_eq!(n.tensor_cores, r.uses_tensor_cores, "{}", r.gemm);
                }
                checked += 1;
            }
        }
        assert!(checked > 250, "{checked}");
    }

    /// Every NVRTC route of every H200 golden is exactly what this catalog
    /// builds for its problem from the golden's own module identity: the
    /// route construction (geometry, declaration, digests) is unchanged.
    #[test]
    fn nvrtc_routes_of_the_h200_goldens_are_rebuilt_exactly() {
        use crate::route::PhysicalBackend;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/nvidia-h200");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let t = crate::RecordedGemmTrace::read(&entry.unwrap().path()).unwrap();
            for r in t
                .routes
                .iter()
                .filter(|r| r.backend == PhysicalBackend::CudaNvrtc)
            {
                let kernel = CudaKernel::from_route(r).unwrap();
                let module = t
                    .context
                    .module(&r.module_kind, &r.artifact_digest)
                    .expect("module of the route");
                let rebuilt = nvrtc_route(
                    &t.context,
                    module,
                    r.resources_digest,
                    &r.gemm,
                    (r.op, r.dtype, r.shape),
                    kernel,
                )
                .unwrap_or_else(|e| panic!("{} {}: {e}", t.workload, r.gemm));
                assert_eq!(&rebuilt, r, "{} {}", t.workload, r.gemm);
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
    }

    #[test]
    fn symbols_cover_every_family_op_and_dtype() {
        let s = module_symbols(CudaModule::Gemm);
        // 4 SIMT families x 3 ops x 3 dtypes + 2 mma families x 3 ops x 2 dtypes.
        assert_eq!(s.len(), 36 + 12);
        assert!(s.contains(&"gemm_scalar_fma_nn_f32".to_string()));
        assert!(s.contains(&"gemm_mma_small_nt_bf16".to_string()));
        assert!(
            !s.iter()
                .any(|x| x.starts_with("gemm_mma") && x.ends_with("f32"))
        );
        for &k in CudaModule::Gemm.families() {
            let entry = format!("gemm_{}_##opname##_##dtname", k.symbol_family());
            assert!(GEMM_SOURCE.contains(&entry), "{entry}");
        }
        // The wgmma module: 3 tile variants and 5 ladder rungs x 3 ops x
        // 2 dtypes, each instantiated in kernels/wgmma.cu.
        let w = module_symbols(CudaModule::Wgmma);
        assert_eq!(w.len(), 48);
        for &k in CudaModule::Wgmma.families() {
            let Some(rung) = k.symbol_family().strip_prefix("ladder_") else {
                let bn = k.symbol_family().strip_prefix("wgmma_").unwrap();
                for dt in ["f16", "bf16"] {
                    let entry = format!("ALL_OPS({bn}, {dt},");
                    assert!(WGMMA_SOURCE.contains(&entry), "{entry}");
                }
                assert_eq!(wgmma_tile(k), (128, bn.parse().unwrap()), "{k}");
                continue;
            };
            let (tile, how) = rung.split_once('_').unwrap();
            let (tbm, bn) = tile.split_once('x').unwrap();
            for dt in ["f16", "bf16"] {
                let on_grid = if how == "split" { "true" } else { "false" };
                let kps = k.wgmma_k_blocks_per_stage();
                let entry = format!("LADDER_OPS({tbm}, {bn}, {how}, {on_grid}, {kps}, {dt},");
                assert!(WGMMA_SOURCE.contains(&entry), "{entry}");
            }
            assert_eq!(how == "split", k.ladder_splits_on_grid(), "{k}");
            assert_eq!(wgmma_tile(k), (tbm.parse().unwrap(), bn.parse().unwrap()));
        }
        assert!(w.contains(&"gemm_wgmma_256_tn_bf16".to_string()));
        assert!(w.contains(&"gemm_ladder_64x64_split_nt_f16".to_string()));
        assert!(w.contains(&"gemm_ladder_128x128_split_tn_bf16".to_string()));
        assert!(w.contains(&"gemm_ladder_128x128_fold_nn_bf16".to_string()));
        assert!(WGMMA_SOURCE.contains("gemm_wgmma_##bn##_##opname##_##dtname"));
        assert!(WGMMA_SOURCE.contains("gemm_ladder_##tbm##x##bn##_##how##_##opname##_##dtname"));
        for dt in ["f16", "bf16"] {
            for bn in ["256", "128"] {
                assert!(
                    WGMMA_SOURCE.contains(&format!("ALL_OPS({bn}, {dt},")),
                    "{bn} {dt}"
                );
            }
            // The decode rung puts its chunks on the grid; the wide one
            // folds them in registers.
            for rung in [
                "64, 64, split, true, 2",
                "128, 128, split, true, 1",
                "128, 128, fold, false, 1",
            ] {
                assert!(
                    WGMMA_SOURCE.contains(&format!("LADDER_OPS({rung}, {dt},")),
                    "{rung} {dt}"
                );
            }
        }
        assert!(w.iter().all(|x| !s.contains(x)));
        assert_eq!(
            CudaModule::Gemm.families().len() + CudaModule::Wgmma.families().len(),
            KernelFamily::ALL.len()
        );
        // Each module's slice of the families holds exactly its own.
        for m in [CudaModule::Gemm, CudaModule::Wgmma] {
            assert!(m.families().iter().all(|k| k.module() == m), "{m:?}");
        }
    }

    #[test]
    fn wgmma_geometry_matches_the_kernel_source() {
        // The constants the host computes launches from must be the ones
        // kernels/wgmma.cu is compiled with.
        for (name, v) in [("BM", WGMMA_BM), ("BK", WGMMA_BK)] {
            assert!(
                WGMMA_SOURCE.contains(&format!("#define {name} {v}\n")),
                "{name}"
            );
        }
        assert!(WGMMA_SOURCE.contains("#define RING_BYTES (192 * 1024)"));
        assert!(WGMMA_SOURCE.contains("#define THREADS 384"));
        let s = GemmShape {
            m: 1000,
            k: 4096,
            n: 520,
        };
        let large = CudaKernel::WgmmaLarge.geometry(s).unwrap();
        // 8 row tiles x 3 column tiles of 256, one block each.
        assert_eq!(large.grid, [8 * 3, 1, 1]);
        assert_eq!(large.block, [384, 1, 1]);
        assert_eq!((large.tile.m, large.tile.n, large.tile.k), (128, 256, 64));
        // 4 stages of 48 KiB + alignment slack + barriers, under 227 KiB.
        assert_eq!(large.stages, 4);
        assert_eq!(large.dynamic_shared_bytes, 4 * 49152 + 1024 + 64);
        let small = CudaKernel::WgmmaSmall.geometry(s).unwrap();
        assert_eq!(small.grid, [8 * 5, 1, 1]);
        assert_eq!(small.stages, 6);
        assert!(small.dynamic_shared_bytes <= 227 * 1024);
        // The ladder: 4 chunks for n = 520 (9 column tiles of 64).
        assert_eq!(crate::kernels::ladder_chunks(s.k, s.n), 4);
        let decode = CudaKernel::LadderDecode(4).geometry(s).unwrap();
        assert_eq!(decode.grid, [16 * 9, 1, 4]);
        assert_eq!(decode.block, [256, 1, 1]);
        assert_eq!((decode.tile.m, decode.tile.n), (64, 64));
        // Stages of two k blocks (32 KiB).
        assert_eq!((decode.stages, decode.tile.k), (6, 128));
        let wide = CudaKernel::LadderWide(4).geometry(s).unwrap();
        assert_eq!(wide.grid, [8 * 5, 1, 1]);
        assert_eq!((wide.block, wide.stages), ([384, 1, 1], 6));
        let mid = CudaKernel::LadderMid(4).geometry(s).unwrap();
        assert_eq!(mid.grid, [8 * 5, 1, 4]);
        assert_eq!((mid.block, mid.stages), ([384, 1, 1], 6));
        // The band rung: 64x128 tiles, one consumer, chunks in registers.
        let band = CudaKernel::LadderBand(4).geometry(s).unwrap();
        assert_eq!(band.grid, [16 * 5, 1, 1]);
        assert_eq!((band.block, band.stages), ([256, 1, 1], 8));
        assert_eq!((band.tile.m, band.tile.n), (64, 128));
        // The narrow rung: 64x32 tiles, stages of four k blocks (48 KiB).
        let narrow = CudaKernel::LadderNarrow(4).geometry(s).unwrap();
        assert_eq!(narrow.grid, [16 * 17, 1, 1]);
        assert_eq!((narrow.block, narrow.stages), ([256, 1, 1], 4));
        assert_eq!((narrow.tile.k, narrow.bk), (256, 64));
        assert_eq!(narrow.dynamic_shared_bytes, 4 * 49152 + 1024 + 64);
        assert_eq!(band.tile.k, 64);
        // The model's block count (what the batch-invariant policy weighs)
        // is the grid the catalog launches.
        for f in CudaModule::Wgmma.families() {
            let f = f.for_shape(s.k, s.n);
            let g = f.geometry(s).unwrap();
            let grid = g.grid[0] as u64 * g.grid[1] as u64 * g.grid[2] as u64;
            assert_eq!(f.wgmma_blocks(s.m, s.n), Some(grid), "{f}");
        }
        // A rung with another shape's chunk count is refused.
        let e = CudaKernel::LadderWide(2).geometry(s).unwrap_err();
        assert!(e.contains("in 4 chunks, not 2"), "{e}");
        for g in [large, small, decode, wide, band, narrow] {
            // Under 227 KiB with the decode rung's 16 bytes of static shared memory.
            assert!(g.dynamic_shared_bytes + 16 <= 227 * 1024, "{g:?}");
        }
        assert_eq!(max_dynamic_shared_bytes(CudaModule::Gemm), 0);
        assert_eq!(
            max_dynamic_shared_bytes(CudaModule::Wgmma),
            [large, small, decode, wide, band, narrow]
                .iter()
                .map(|g| g.dynamic_shared_bytes)
                .max()
                .unwrap()
        );
    }

    #[test]
    fn wgmma_refuses_what_tma_cannot_read() {
        // A folding ladder rung with nothing to fold is refused.
        let one = GemmShape {
            m: 4096,
            k: 4096,
            n: 6144,
        };
        let e = CudaKernel::LadderWide(1)
            .serves_shape(GemmOp::Nn, one)
            .unwrap_err();
        assert!(e.contains("its kernel is wgmma-small's"), "{e}");
        // The band rung's tile is no other kernel's: it serves one chunk.
        assert!(
            CudaKernel::LadderBand(1)
                .serves_shape(GemmOp::Nn, one)
                .is_ok()
        );
        assert!(
            CudaKernel::LadderMid(1)
                .serves_shape(GemmOp::Nn, one)
                .is_ok()
        );
        let k = CudaKernel::WgmmaLarge;
        let ok = GemmShape {
            m: 3,
            k: 4096,
            n: 4096,
        };
        assert!(k.serves_shape(GemmOp::Nn, ok).is_ok());
        assert!(k.serves_shape(GemmOp::Nt, ok).is_ok());
        // TN's A is m-contiguous: m = 3 gives 6-byte rows.
        let e = k.serves_shape(GemmOp::Tn, ok).unwrap_err();
        assert!(e.contains("m to be a multiple of 8"), "{e}");
        let e = k
            .serves_shape(
                GemmOp::Nn,
                GemmShape {
                    m: 8,
                    k: 100,
                    n: 64,
                },
            )
            .unwrap_err();
        assert!(
            e.contains("k to be a multiple of 8") && e.ends_with("not 100"),
            "{e}"
        );
        let e = k
            .serves_shape(GemmOp::Nt, GemmShape { m: 8, k: 64, n: 12 })
            .unwrap_err();
        assert!(e.contains("n to be a multiple of 8"), "{e}");
        let e = k
            .serves_shape(GemmOp::Nn, GemmShape { m: 0, k: 64, n: 64 })
            .unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
        // The other families serve any shape.
        assert!(CudaKernel::MmaLarge.serves_shape(GemmOp::Tn, ok).is_ok());
        assert!(!k.supports(DType::F32) && k.supports(DType::Bf16));
    }

    #[test]
    fn strided_operands_change_only_the_row_strides_and_are_checked() {
        let s = GemmShape {
            m: 200,
            k: 136,
            n: 264,
        };
        for op in GemmOp::ALL.iter().copied() {
            let dense = GemmStrides::dense(op, s);
            let k = CudaKernel::WgmmaLarge;
            assert_eq!(
                tensor_maps_strided(k, op, DType::Bf16, s, dense),
                tensor_maps(k, op, DType::Bf16, s),
                "{op}: dense strides give the dense maps"
            );
            assert!(wgmma_strides(op, s, dense).is_ok());
            let wide = GemmStrides {
                lda: dense.lda + 64,
                ldb: dense.ldb + 8,
                ldc: dense.ldc,
            };
            assert!(wgmma_strides(op, s, wide).is_ok());
            let [a, b] = tensor_maps_strided(k, op, DType::Bf16, s, wide);
            let [da, db] = tensor_maps(k, op, DType::Bf16, s);
            assert_eq!(
                (a.row_stride_bytes, b.row_stride_bytes),
                (wide.lda * 2, wide.ldb * 2)
            );
            assert_eq!(
                (a.dims, b.dims, a.box_dims),
                (da.dims, db.dims, da.box_dims)
            );
            assert_ne!(tensor_map_digest(&[a, b]), tensor_map_digest(&[da, db]));
            // C may be wider than dense, by an even count.
            for ldc in [dense.ldc + 2, dense.ldc + 8, 3 * dense.ldc] {
                assert!(wgmma_strides(op, s, GemmStrides { ldc, ..dense }).is_ok());
            }
            for (bad, why) in [
                (
                    GemmStrides {
                        ldc: dense.ldc + 1,
                        ..dense
                    },
                    "must be at least n",
                ),
                (
                    GemmStrides {
                        ldc: dense.ldc - 2,
                        ..dense
                    },
                    "must be at least n",
                ),
                (
                    GemmStrides {
                        lda: dense.lda + 4,
                        ..dense
                    },
                    "not a multiple of 8",
                ),
                (
                    GemmStrides {
                        ldb: dense.ldb - 8,
                        ..dense
                    },
                    "less than the stored row",
                ),
            ] {
                let e = wgmma_strides(op, s, bad).unwrap_err();
                assert!(e.contains(why), "{op}: {e}");
            }
        }
    }

    #[test]
    fn tensor_maps_describe_the_dense_operands() {
        let s = GemmShape {
            m: 200,
            k: 136,
            n: 264,
        };
        let [a, b] = tensor_maps(CudaKernel::WgmmaLarge, GemmOp::Nn, DType::Bf16, s);
        assert_eq!(
            (a.dims, a.row_stride_bytes, a.box_dims),
            ([136, 200], 272, [64, 128])
        );
        assert_eq!(
            (b.dims, b.row_stride_bytes, b.box_dims),
            ([264, 136], 528, [64, 64])
        );
        let [a, _] = tensor_maps(CudaKernel::WgmmaLarge, GemmOp::Tn, DType::Bf16, s);
        assert_eq!(
            (a.dims, a.row_stride_bytes, a.box_dims),
            ([200, 136], 400, [64, 64])
        );
        let [_, b] = tensor_maps(CudaKernel::WgmmaSmall, GemmOp::Nt, DType::F16, s);
        assert_eq!(
            (b.dims, b.row_stride_bytes, b.box_dims),
            ([136, 264], 272, [64, 128])
        );
        // The ladder loads A rows below one tile as boxes of m rounded up
        // to 8 (K-major A only), its B as boxes of its tile's columns.
        let small = GemmShape { m: 3, ..s };
        for (k, rows) in [
            (CudaKernel::LadderDecode(1), 8),
            (CudaKernel::LadderMid(1), 8),
            (CudaKernel::LadderWide(1), 8),
            (CudaKernel::WgmmaLarge, 128),
        ] {
            let [a, _] = tensor_maps(k, GemmOp::Nt, DType::Bf16, small);
            assert_eq!(a.box_dims, [64, rows], "{k}");
        }
        let [a, b] = tensor_maps(CudaKernel::LadderDecode(1), GemmOp::Nt, DType::Bf16, s);
        assert_eq!((a.box_dims, b.box_dims), ([64, 64], [64, 64]));
        let [a, _] = tensor_maps(CudaKernel::LadderMid(1), GemmOp::Nn, DType::Bf16, s);
        assert_eq!(a.box_dims, [64, 128]);
        // The narrow rung's MN-major B is one box of 32 columns: 64-byte
        // rows, so a 64-byte swizzle; its K-major B keeps 128-byte rows.
        for op in [GemmOp::Nn, GemmOp::Tn] {
            let [_, b] = tensor_maps(CudaKernel::LadderNarrow(1), op, DType::F16, s);
            assert_eq!((b.box_dims, b.swizzle_bytes()), ([32, 64], 64), "{op}");
        }
        let [a, b] = tensor_maps(CudaKernel::LadderNarrow(1), GemmOp::Nt, DType::Bf16, s);
        assert_eq!((b.box_dims, b.swizzle_bytes()), ([64, 32], 128));
        assert_eq!((a.box_dims, a.swizzle_bytes()), ([64, 64], 128));
        // TN's A on a 64-row rung at m <= 32: one box of 8, 16 or 32 m
        // values (16-, 32- or 64-byte rows and swizzle, none for 16 bytes);
        // 64 on every other kernel.
        for (m, cols) in [
            (1, 8),
            (8, 8),
            (9, 16),
            (16, 16),
            (17, 32),
            (32, 32),
            (40, 64),
        ] {
            for k in [
                CudaKernel::LadderNarrow(1),
                CudaKernel::LadderDecode(1),
                CudaKernel::LadderBand(1),
            ] {
                let [a, _] = tensor_maps(k, GemmOp::Tn, DType::Bf16, GemmShape { m, ..s });
                assert_eq!((a.dims, a.box_dims), ([m, 136], [cols, 64]), "{k} m = {m}");
                assert_eq!(a.swizzle_bytes(), 2 * cols as u64, "{k} m = {m}");
            }
            for k in [CudaKernel::LadderMid(1), CudaKernel::WgmmaSmall] {
                let [a, _] = tensor_maps(k, GemmOp::Tn, DType::Bf16, GemmShape { m, ..s });
                assert_eq!(a.box_dims, [64, 64], "{k} m = {m}");
            }
            // K-major A keeps its 64-value rows.
            let [a, _] = tensor_maps(
                CudaKernel::LadderNarrow(1),
                GemmOp::Nn,
                DType::Bf16,
                GemmShape { m, ..s },
            );
            assert_eq!(a.box_dims[0], 64);
        }
        // The digest follows every parameter: shape, op, dtype, variant.
        let d = |k, op, dt, s| tensor_map_digest(&tensor_maps(k, op, dt, s));
        let base = d(CudaKernel::WgmmaLarge, GemmOp::Nn, DType::Bf16, s);
        assert_eq!(base, d(CudaKernel::WgmmaLarge, GemmOp::Nn, DType::Bf16, s));
        for other in [
            d(
                CudaKernel::WgmmaLarge,
                GemmOp::Nn,
                DType::Bf16,
                GemmShape { m: 208, ..s },
            ),
            d(CudaKernel::WgmmaLarge, GemmOp::Nt, DType::Bf16, s),
            d(CudaKernel::WgmmaLarge, GemmOp::Nn, DType::F16, s),
            d(CudaKernel::WgmmaSmall, GemmOp::Nt, DType::Bf16, s),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn geometry_covers_the_output() {
        let shape = GemmShape {
            m: 65,
            k: 48,
            n: 257,
        };
        for k in KernelFamily::ALL {
            let g = k.geometry(shape).unwrap();
            // The wgmma kernels number their tiles along one grid axis.
            let tiles = g.grid[0] as u64 * g.grid[1] as u64;
            let needed = shape.n.div_ceil(g.tile.n as u64) * shape.m.div_ceil(g.tile.m as u64);
            assert!(tiles >= needed, "{}", k.symbol_family());
            assert!(g.grid[0] as u64 * g.tile.n as u64 >= shape.n);
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
