//! Why the catalog refuses: a shape it has no launch geometry for, a shape
//! a family does not serve, a stored route it cannot launch, a route it
//! cannot build.

use super::{Geometry, StrideError};
use gemm_audit_model::RouteBuildError;
use gemm_audit_model::digest::Digest;
use gemm_audit_model::kernels::RouteFamilyError;
use gemm_audit_model::route::{GemmShape, GemmStrides};
use gemm_audit_model::vocab::GemmOp;

/// Why a family has no launch geometry on a shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GeometryError {
    /// A dimension over the kernels' 32-bit indices.
    #[error("{dim} = {value} does not fit the kernels' 32-bit indices")]
    IndexOverflow {
        /// `m`, `k` or `n`.
        dim: &'static str,
        /// Its value.
        value: u64,
    },
    /// A grid over CUDA's limits.
    #[error(
        "grid {}x{}x{} exceeds CUDA's limits (m = {m} is too large for this kernel)",
        .grid[0], .grid[1], .grid[2]
    )]
    GridTooLarge {
        /// The grid `[x, y, z]` the shape needs, in blocks.
        grid: [u64; 3],
        /// The shape's m.
        m: u64,
    },
    /// A family that is not a wgmma family asked for a wgmma geometry
    /// (its name).
    #[error("{0} is not a wgmma family")]
    NotWgmma(&'static str),
    /// More output tiles than a wgmma grid holds.
    #[error("{tiles} output tiles exceed CUDA's grid limit (m = {m} is too large for this kernel)")]
    TooManyTiles {
        /// The output tiles the shape needs.
        tiles: u64,
        /// The shape's m.
        m: u64,
    },
    /// A ladder rung whose chunk count is not its shape's.
    #[error("{family} folds k = {k} n = {n} in {chunks} chunks, not {splits}")]
    ChunkMismatch {
        /// The rung's name.
        family: &'static str,
        /// The shape's k.
        k: u64,
        /// The shape's n.
        n: u64,
        /// The chunks the shape folds k in ([`gemm_audit_model::kernels::ladder_chunks`]).
        chunks: u32,
        /// The chunk count the rung carries.
        splits: u32,
    },
}

/// Why a family cannot serve an op on a shape
/// ([`CudaFamily::serves_shape`](super::CudaFamily::serves_shape)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// A wgmma family on a shape with an empty dimension.
    #[error(
        "{family} needs m, k and n of at least 1 (TMA tensor maps cannot be empty), not {}x{}x{}",
        .shape.m, .shape.k, .shape.n
    )]
    Empty {
        /// The family's symbol part (`wgmma_256`).
        family: &'static str,
        /// The shape.
        shape: GemmShape,
    },
    /// A wgmma family on a dimension that is not a multiple of 8.
    #[error(
        "{family} {op} needs {dim} to be a multiple of 8 (TMA row strides are multiples of 16 bytes), not {value}"
    )]
    Unaligned {
        /// The family's symbol part (`wgmma_256`).
        family: &'static str,
        /// The op.
        op: GemmOp,
        /// `m`, `k` or `n`.
        dim: &'static str,
        /// Its value.
        value: u64,
    },
    /// `ladder-wide` on a shape of one chunk: nothing to fold.
    #[error(
        "ladder-wide folds chunks, and k = {k} n = {n} has one: its kernel is wgmma-small's (take ladder-mid or wgmma-large, the batch-invariant route's picks there)"
    )]
    NothingToFold {
        /// The shape's k.
        k: u64,
        /// The shape's n.
        n: u64,
    },
}

/// A stored route's launch against the geometry this catalog computes
/// ([`CudaRouteError::Launch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchMismatch {
    /// The route's grid.
    pub grid: [u32; 3],
    /// The route's block.
    pub block: [u32; 3],
    /// The route's dynamic shared memory, in bytes.
    pub dynamic_shared_bytes: u32,
    /// The route's threads per block.
    pub threads: u32,
    /// The kernel's geometry on the route's shape.
    pub geometry: Geometry,
}

/// Why [`CudaFamily::from_route`](super::CudaFamily::from_route) refused a stored route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaRouteError {
    /// The route was produced by another backend (the route's backend).
    #[error("backend {0} is not NVRTC")]
    Backend(gemm_audit_model::vocab::PhysicalBackend),
    /// The route names no kernel of the catalog, or contradicts its
    /// family's contract, dtype or split count.
    #[error(transparent)]
    Family(#[from] RouteFamilyError),
    /// The family cannot serve the route's op and shape.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// The family has no geometry on the route's shape.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// The route's launch is not the kernel's geometry.
    #[error(
        "launch {:?}x{:?}, {} B dynamic shared memory, {} threads differs from the kernel's geometry {:?}x{:?}, {} B, {} threads",
        .0.grid, .0.block, .0.dynamic_shared_bytes, .0.threads,
        .0.geometry.grid, .0.geometry.block, .0.geometry.dynamic_shared_bytes, .0.geometry.threads
    )]
    Launch(Box<LaunchMismatch>),
    /// The route's strides are not the op's dense layout (the route's
    /// strides).
    #[error("strides differ from the dense layout of the op")]
    Strides(GemmStrides),
    /// A wgmma route whose tensor-map digest is not this build's.
    #[error(
        "tensor-map digest {} is not the {family} maps this build encodes ({})",
        .found.short(), .want.short()
    )]
    TensorMapDigest {
        /// The route's digest.
        found: Digest,
        /// The family's symbol part (`wgmma_256`).
        family: &'static str,
        /// The digest this build encodes.
        want: Digest,
    },
    /// A wgmma route without a tensor-map identity (the family's symbol part).
    #[error("{0} route has no tensor-map identity")]
    NoTensorMap(&'static str),
    /// A route of a family without tensor maps that records one (the
    /// family's symbol part).
    #[error("{0} uses no tensor map, but the route records one")]
    UnexpectedTensorMap(&'static str),
}

/// Why [`nvrtc_route`](super::nvrtc_route) or
/// [`nvrtc_route_strided`](super::nvrtc_route_strided) built no route.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NvrtcRouteError {
    /// The family cannot serve the op and shape.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// Strided operands given to a family that reads dense ones only (the
    /// family's symbol part).
    #[error("{0} reads dense operands only")]
    DenseOnly(&'static str),
    /// Leading dimensions the wgmma kernels cannot read.
    #[error(transparent)]
    Strides(#[from] StrideError),
    /// The family has no geometry on the shape.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// The route builder refused the route.
    #[error(transparent)]
    Build(#[from] RouteBuildError),
}

/// Why the TMA + wgmma kernel families do not run on a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WgmmaUnavailable {
    /// Not a compute capability 9.0 (Hopper) device.
    #[error(
        "TMA + wgmma kernels need a compute capability 9.0 (Hopper) device; this one is {arch}"
    )]
    Architecture {
        /// The device's compilation target (`sm_80`).
        arch: String,
    },
    /// NVRTC could not build the module: its error.
    #[error("{0}")]
    Build(String),
}

/// A kernel family whose module this device did not load, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{family} is unavailable: {why}")]
pub struct FamilyUnavailable {
    /// The family part of the symbol (`wgmma_256`).
    pub family: &'static str,
    /// Why its module is missing.
    pub why: WgmmaUnavailable,
}
