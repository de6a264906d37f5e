//! The NVRTC kernel catalog: kernel families, their symbols, numeric
//! contracts and launch geometry. Pure logic (no device), so the mapping
//! between routes and kernels is tested without a GPU.

use gemm_audit_model::GemmRouteBuilder;
use gemm_audit_model::digest::{Digest, DigestWriter, FieldValue};
use gemm_audit_model::identity::{GemmRouteIdentity, ModuleIdentity};
use gemm_audit_model::kernels::KernelFamily;
use gemm_audit_model::route::LaunchConfig;
use gemm_audit_model::route::{GemmShape, GemmStrides, ResolvedGemmRoute, TileShape};
use gemm_audit_model::vocab::OperandConversion;
use gemm_audit_model::vocab::{DType, GemmOp};

mod error;
mod tensor_map;
pub use error::{
    CudaRouteError, FamilyUnavailable, GeometryError, LaunchMismatch, NvrtcRouteError, ShapeError,
    WgmmaUnavailable,
};
pub use tensor_map::{
    StrideError, TENSOR_MAP_SETTINGS, TensorMapSpec, tensor_map_digest, tensor_maps,
    tensor_maps_strided, tn_a_box_cols, wgmma_strides,
};

/// The GEMM kernels' source (`kernels/gemm.cu`): its digest is the
/// compiler identity's source digest.
pub const GEMM_SOURCE: &str = include_str!("../../kernels/gemm.cu");
/// The fingerprint kernel's source (`kernels/sha256.cu`).
pub const SHA256_SOURCE: &str = include_str!("../../kernels/sha256.cu");
/// The fast (NH) chunk hash kernel's source (`kernels/nh128.cu`).
pub const NH128_SOURCE: &str = include_str!("../../kernels/nh128.cu");
/// The seeded-operand kernel's source (`kernels/seed.cu`).
pub const SEED_SOURCE: &str = include_str!("../../kernels/seed.cu");
/// The Hopper (TMA + wgmma) GEMM kernels' source (`kernels/wgmma.cu`),
/// compiled into a module of its own for `sm_90a`.
pub const WGMMA_SOURCE: &str = include_str!("../../kernels/wgmma.cu");

/// Revision of the kernels' work schedule (tile shapes, thread mapping).
pub const SCHEDULE_REVISION: u32 = 1;
/// Revision of how the wgmma kernels' TMA tensor maps are encoded (what
/// [`TensorMapSpec`] holds and how it is digested).
pub const TENSOR_MAP_REVISION: u32 = 1;

/// The split-K thresholds are every backend's (see [`gemm_audit_model::kernels`]),
/// so the CPU and CUDA dispatchers pick the same contract for the same shape
/// (f32, or halves without tensor cores).
/// So are the mma-size threshold and the revision of the whole table.
pub use gemm_audit_model::kernels::{
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
/// Shared memory a persistent wgmma kernel holds after its stage ring's
/// barriers (kernels/wgmma.cu `PERSISTENT_BYTES`): the epilogue's mbarriers,
/// the split choice's word and, where the epilogue is handed over to the
/// producer warpgroup, the two slots it is handed over in; a multiple of 16
/// to keep 16-byte steps.
const WGMMA_PERSISTENT_SHARED_BYTES: u32 = 64;

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
    fn declaration(&self, dtype: DType) -> gemm_audit_model::declaration::SymbolDeclaration;
    /// Launch geometry on `shape`, one block per output tile; refused when
    /// a dimension does not fit.
    fn geometry(&self, shape: GemmShape) -> Result<Geometry, GeometryError>;
    /// Launch geometry on `shape` on a device of `multiprocessors` SMs:
    /// the persistent wgmma kernels ([`KernelFamily::wgmma_persistent`])
    /// launch one block per SM where there are more tiles than SMs; every
    /// other family (and 0 SMs) as [`CudaFamily::geometry`].
    fn geometry_on(
        &self,
        shape: GemmShape,
        multiprocessors: u32,
    ) -> Result<Geometry, GeometryError>;
    /// Whether the family can serve `op` on `shape`: the wgmma kernels read
    /// their operands with TMA, which needs every row stride to be a
    /// multiple of 16 bytes (8 elements) and no dimension to be empty. The
    /// error names what fails; other families serve every shape.
    fn serves_shape(&self, op: GemmOp, shape: GemmShape) -> Result<(), ShapeError>;
    /// The kernel a stored route names: its symbol must be this catalog's
    /// symbol for the route's contract, op and dtype, and its geometry the
    /// one this catalog computes. Anything else is refused.
    fn from_route(route: &ResolvedGemmRoute) -> Result<Self, CudaRouteError>;
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

    fn declaration(&self, dtype: DType) -> gemm_audit_model::declaration::SymbolDeclaration {
        use gemm_audit_model::declaration::{BkRule, SplitRule, SymbolDeclaration};
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

    fn geometry(&self, shape: GemmShape) -> Result<Geometry, GeometryError> {
        let GemmShape { m, k, n } = shape;
        for (dim, value) in [("m", m), ("k", k), ("n", n)] {
            if value > u32::MAX as u64 {
                return Err(GeometryError::IndexOverflow { dim, value });
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
            return Err(GeometryError::GridTooLarge {
                grid: [gx, gy, z],
                m,
            });
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

    fn geometry_on(
        &self,
        shape: GemmShape,
        multiprocessors: u32,
    ) -> Result<Geometry, GeometryError> {
        let mut g = self.geometry(shape)?;
        if self.wgmma_persistent() && multiprocessors > 0 {
            g.grid[0] = g.grid[0].min(multiprocessors);
        }
        Ok(g)
    }

    fn serves_shape(&self, op: GemmOp, shape: GemmShape) -> Result<(), ShapeError> {
        serves(*self, op, shape, true)
    }

    fn from_route(route: &ResolvedGemmRoute) -> Result<CudaKernel, CudaRouteError> {
        if route.backend != gemm_audit_model::vocab::PhysicalBackend::CudaNvrtc {
            return Err(CudaRouteError::Backend(route.backend.clone()));
        }
        let kernel = KernelFamily::of_route(&KernelFamily::ALL, route, |f, op, dtype| {
            f.symbol(op, dtype)
        })?;
        kernel.serves_shape(route.op, route.shape)?;
        let g = kernel.geometry_on(route.shape, route.device.multiprocessors)?;
        if route.launch.grid != g.grid
            || route.launch.block != g.block
            || route.launch.dynamic_shared_bytes != g.dynamic_shared_bytes
            || route.threads != g.threads
        {
            return Err(CudaRouteError::Launch(Box::new(LaunchMismatch {
                grid: route.launch.grid,
                block: route.launch.block,
                dynamic_shared_bytes: route.launch.dynamic_shared_bytes,
                threads: route.threads,
                geometry: g,
            })));
        }
        if route.strides != strides(route.op, route.shape) {
            return Err(CudaRouteError::Strides(route.strides));
        }
        match (&route.tensor_map, kernel.is_wgmma()) {
            (None, false) => {}
            (Some(t), true) => {
                let want =
                    tensor_map_digest(&tensor_maps(kernel, route.op, route.dtype, route.shape));
                if t.digest != want {
                    return Err(CudaRouteError::TensorMapDigest {
                        found: t.digest,
                        family: kernel.symbol_family(),
                        want,
                    });
                }
            }
            (None, true) => {
                return Err(CudaRouteError::NoTensorMap(kernel.symbol_family()));
            }
            (Some(_), false) => {
                return Err(CudaRouteError::UnexpectedTensorMap(kernel.symbol_family()));
            }
        }
        Ok(kernel)
    }
}

/// [`CudaFamily::serves_shape`], for operands stored dense or (`dense`
/// false) with leading dimensions [`wgmma_strides`] checks: then TN's A
/// rows are lda elements long, whatever m is.
fn serves(kernel: CudaKernel, op: GemmOp, shape: GemmShape, dense: bool) -> Result<(), ShapeError> {
    if !kernel.is_wgmma() {
        return Ok(());
    }
    let GemmShape { m, k, n } = shape;
    if m == 0 || k == 0 || n == 0 {
        return Err(ShapeError::Empty {
            family: kernel.symbol_family(),
            shape,
        });
    }
    let mut strided = vec![("k", k), ("n", n)];
    if op == GemmOp::Tn && dense {
        // A is stored k x m: its dense rows are m elements long.
        strided.push(("m", m));
    }
    for (dim, value) in strided {
        if value % 8 != 0 {
            return Err(ShapeError::Unaligned {
                family: kernel.symbol_family(),
                op,
                dim,
                value,
            });
        }
    }
    if matches!(kernel, CudaKernel::LadderWide(_))
        && gemm_audit_model::kernels::ladder_chunks(k, n) == 1
    {
        // With one chunk there is nothing to fold: the rung would be
        // wgmma_128 under another name, which no route could tell
        // apart. (The band rung's 64x128 tile is no other kernel's.)
        return Err(ShapeError::NothingToFold { k, n });
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
/// [`gemm_audit_model::kernels::ladder_chunks`].
fn wgmma_geometry(kernel: KernelFamily, shape: GemmShape) -> Result<Geometry, GeometryError> {
    let (bm, bn) = wgmma_tile(kernel);
    let tiles = kernel
        .wgmma_tiles(shape.m, shape.n)
        .ok_or(GeometryError::NotWgmma(kernel.name()))?;
    if tiles > i32::MAX as u64 {
        return Err(GeometryError::TooManyTiles { tiles, m: shape.m });
    }
    let mut z = 1;
    if kernel.is_ladder() {
        let chunks = gemm_audit_model::kernels::ladder_chunks(shape.k, shape.n);
        if kernel.splits() != chunks {
            return Err(GeometryError::ChunkMismatch {
                family: kernel.name(),
                k: shape.k,
                n: shape.n,
                chunks,
                splits: kernel.splits(),
            });
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
        // The ring, 1 KiB to align it for the 128-byte swizzle, a full and
        // an empty mbarrier per stage, and the persistent kernels' bytes
        // after them (their epilogue's barriers and slots, the choice word).
        dynamic_shared_bytes: stages * stage
            + 1024
            + 16 * stages
            + if kernel.wgmma_persistent() {
                WGMMA_PERSISTENT_SHARED_BYTES
            } else {
                0
            },
        stages,
    })
}

/// The u32 words after a persistent wgmma kernel's tail flags where a
/// launch publishes whether it splits its last wave (the choice, how many
/// of its blocks' threads have read it, and a forced choice no launch
/// writes; kernels/wgmma.cu, `tail_publish`). Zero at rest, like the flags.
pub const TAIL_CHOICE_WORDS: u64 = 3;

/// The f32 elements and u32 flags or counters a wgmma launch of `kernel`
/// on `shape` with `geometry` reads besides its operands, zeroed before
/// its first launch; `None` where it reads none (it is then passed null):
/// - a ladder rung that puts k chunks on the grid (more than one chunk):
///   one m x n partial plane per chunk, one counter per output tile;
/// - a persistent wgmma kernel with more tiles than blocks: one BM x BN
///   partial and one flag per tile of the last, partial wave
///   (tiles % blocks; kernels/wgmma.cu, the schedule), then
///   [`TAIL_CHOICE_WORDS`] words for the launch's choice whether to split
///   that wave.
///
/// Both reset their counters or flags themselves, so one workspace serves
/// any number of launches that follow one another (eager or replayed).
pub fn wgmma_workspace(
    kernel: CudaKernel,
    shape: GemmShape,
    geometry: &Geometry,
) -> Option<(u64, u64)> {
    if kernel.ladder_splits_on_grid() && kernel.splits() > 1 {
        let tiles = u64::from(geometry.grid[0]);
        return Some((shape.m * shape.n * u64::from(kernel.splits()), tiles));
    }
    if !kernel.wgmma_persistent() {
        return None;
    }
    let (bm, bn) = wgmma_tile(kernel);
    let tiles = kernel.wgmma_tiles(shape.m, shape.n)?;
    let tail = tiles % u64::from(geometry.grid[0].max(1));
    (tail > 0).then(|| (tail * u64::from(bm * bn), tail + TAIL_CHOICE_WORDS))
}

/// Every symbol the GEMM module exports, with what it serves and its
/// resources digest (from `resources`, keyed by symbol, where known).
pub fn module_entries(
    module: CudaModule,
    resources: &std::collections::HashMap<String, Digest>,
) -> Vec<gemm_audit_model::identity::SymbolEntry> {
    let mut out = Vec::new();
    for &k in module.families() {
        let (contract, _) = k.contract();
        for op in GemmOp::ALL {
            for dtype in DType::ALL {
                if k.supports(*dtype) {
                    let name = k.symbol(*op, *dtype);
                    let mut e = gemm_audit_model::identity::SymbolEntry::new(name.clone())
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

/// Digest of a kernel launch's argument values (device addresses excluded).
pub fn arguments_digest(
    symbol: &str,
    shape: GemmShape,
    strides: GemmStrides,
    splits: u32,
) -> Digest {
    gemm_audit_model::kernels::gemm_arguments_digest(
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
) -> Result<ResolvedGemmRoute, NvrtcRouteError> {
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
) -> Result<ResolvedGemmRoute, NvrtcRouteError> {
    let dense = strides == GemmStrides::dense(op, shape);
    serves(kernel, op, shape, dense)?;
    if !dense {
        if !kernel.is_wgmma() {
            return Err(NvrtcRouteError::DenseOnly(kernel.symbol_family()));
        }
        wgmma_strides(op, shape, strides)?;
    }
    let g = kernel.geometry_on(shape, live.device.multiprocessors)?;
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
    Ok(route.build()?)
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
    } else if gemm_audit_model::kernels::dispatch_split_k(m, k, split_ok) {
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

/// The target the wgmma module is compiled for on a device of `arch`:
/// `sm_90a` on compute capability 9.0 (its TMA and wgmma instructions
/// exist only there), none elsewhere.
pub fn wgmma_target(arch: &str) -> Option<&'static str> {
    (arch == "sm_90").then_some("sm_90a")
}

/// Digest of the compile options (part of the compiler identity).
pub fn options_digest(options: &[String]) -> Digest {
    let mut w = DigestWriter::new("gemm-audit/nvrtc-options/v1");
    w.field("options", FieldValue::StrList(options));
    w.finish()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod error_tests {
    use super::*;

    /// A wgmma route of the H200 golden, and the golden's context.
    fn golden_wgmma_route() -> (gemm_audit_model::RecordedGemmTrace, ResolvedGemmRoute) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../traces/nvidia-h200/wgmma-sweep.gat");
        let t = gemm_audit_model::RecordedGemmTrace::read(&path).unwrap();
        let r = t
            .routes
            .iter()
            .find(|r| CudaKernel::from_route(r).is_ok_and(|k| k.is_wgmma()))
            .expect("a wgmma route")
            .clone();
        (t, r)
    }

    #[test]
    fn geometry_errors_name_the_bad_value() {
        let huge = GemmShape {
            m: 1 << 33,
            k: 64,
            n: 64,
        };
        let e = CudaKernel::Tiled.geometry(huge).unwrap_err();
        assert_eq!(
            e,
            GeometryError::IndexOverflow {
                dim: "m",
                value: 1 << 33
            }
        );
        assert!(e.to_string().starts_with("m = 8589934592 "), "{e}");
        let tall = GemmShape {
            m: 16 * 65_536 + 1,
            k: 64,
            n: 64,
        };
        let e = CudaKernel::ScalarFma
            .geometry(tall)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("grid 4x65537x1 ") && e.contains("m = 1048577 "),
            "{e}"
        );
    }

    #[test]
    fn shape_errors_name_the_bad_value() {
        let s = GemmShape {
            m: 8,
            k: 100,
            n: 64,
        };
        let e = CudaKernel::WgmmaLarge
            .serves_shape(GemmOp::Nn, s)
            .unwrap_err();
        assert_eq!(
            e,
            ShapeError::Unaligned {
                family: "wgmma_256",
                op: GemmOp::Nn,
                dim: "k",
                value: 100
            }
        );
        assert!(e.to_string().ends_with("not 100"), "{e}");
        let empty = GemmShape { m: 0, k: 64, n: 64 };
        let e = CudaKernel::WgmmaSmall
            .serves_shape(GemmOp::Nn, empty)
            .unwrap_err();
        assert!(e.to_string().ends_with("not 0x64x64"), "{e}");
    }

    #[test]
    fn route_errors_name_the_bad_value() {
        let (_, r) = golden_wgmma_route();
        let mut other = r.clone();
        other.backend = gemm_audit_model::vocab::PhysicalBackend::CpuReference;
        let e = CudaKernel::from_route(&other).unwrap_err();
        assert!(matches!(e, CudaRouteError::Backend(_)), "{e:?}");
        assert_eq!(e.to_string(), "backend cpu-reference is not NVRTC");
        let mut renamed = r.clone();
        renamed.kernel_symbol = "gemm_nosuch_nn_bf16".into();
        let e = CudaKernel::from_route(&renamed).unwrap_err();
        assert!(matches!(e, CudaRouteError::Family(_)), "{e:?}");
        assert!(e.to_string().contains("\"gemm_nosuch_nn_bf16\""), "{e}");
        let mut threads = r.clone();
        threads.threads += 1;
        let e = CudaKernel::from_route(&threads).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} threads differs", r.threads + 1)),
            "{e}"
        );
    }

    #[test]
    fn nvrtc_route_errors_name_the_bad_value() {
        let (t, r) = golden_wgmma_route();
        let module = t
            .context
            .module(&r.module_kind, &r.artifact_digest)
            .expect("module of the route");
        let strided = |kernel, strides| {
            nvrtc_route_strided(
                &t.context,
                module,
                r.resources_digest,
                &r.gemm,
                (r.op, r.dtype, r.shape),
                kernel,
                strides,
            )
        };
        let dense = GemmStrides::dense(r.op, r.shape);
        let wide = GemmStrides {
            ldc: dense.ldc + 8,
            ..dense
        };
        let e = strided(CudaKernel::Tiled, wide).unwrap_err();
        assert_eq!(e, NvrtcRouteError::DenseOnly("tiled"));
        assert_eq!(e.to_string(), "tiled reads dense operands only");
        let odd = GemmStrides {
            ldc: dense.ldc + 1,
            ..dense
        };
        let kernel = CudaKernel::from_route(&r).unwrap();
        let e = strided(kernel, odd).unwrap_err();
        assert!(matches!(e, NvrtcRouteError::Strides(_)), "{e:?}");
        assert!(
            e.to_string().starts_with(&format!("ldc = {} ", odd.ldc)),
            "{e}"
        );
    }
}
