//! `ResolvedGemmRoute`: the full identity of one GEMM launch.
//!
//! A route says everything that can change the output bits of one launch:
//! what was asked (op, dtype, shape), what served it (backend, kernel symbol,
//! module, compiler, device), how the reduction was ordered (numeric contract,
//! output ownership), and how it was launched (grid, block, shared memory,
//! arguments digest). Two launches with equal routes must give equal bits.

use crate::digest::{Digest, FieldValue, FieldVisitor, Framed};
use crate::identity::{CompilerIdentity, DeviceIdentity};
use serde::{Deserialize, Serialize};
use std::fmt;

pub mod builder;

pub use crate::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, Name, OperandConversion, OutputOwnership,
    PhysicalBackend,
};
pub use builder::{ArgumentsDigest, GemmRouteBuilder, RouteBuildError};

/// The numeric contract of a route.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NumericContract {
    pub kind: ContractKind,
    /// Number of k-splits the reduction is folded from (1 when not split).
    pub splits: u32,
}

impl fmt::Display for NumericContract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.splits > 1 {
            write!(f, "{}/{}", self.kind, self.splits)
        } else {
            f.write_str(&self.kind.as_str())
        }
    }
}

/// Problem shape: C is m x n, the reduction runs over k.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmShape {
    pub m: u64,
    pub k: u64,
    pub n: u64,
}

/// Leading dimensions (in elements) of A, B and C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmStrides {
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
}

/// The output tile one block (or CPU task) owns, and its k step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

/// How the kernel was launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared_bytes: u32,
    /// Digest of the kernel's argument values (addresses excluded).
    pub arguments_digest: Digest,
}

impl LaunchConfig {
    /// Threads per block.
    pub fn block_threads(&self) -> u64 {
        // Saturating: three u32 dimensions can overflow u64 (found by fuzzing),
        // and any saturated count already differs from a route's u32 threads.
        self.block
            .iter()
            .fold(1u64, |acc, &d| acc.saturating_mul(d as u64))
    }
}

/// A TMA tensor map's identity, where a kernel uses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorMapIdentity {
    pub revision: u32,
    pub digest: Digest,
}

/// What a vendor library (cuBLAS, cuBLASLt) exposes about its choice.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VendorRoute {
    /// Library name and version, e.g. `cublasLt 13.1.0`.
    pub library_version: String,
    pub algorithm_id: i64,
    pub tile_id: i64,
    pub split_k: i64,
    pub reduction_scheme: i64,
    pub stages_id: i64,
    pub swizzle: i64,
    pub inner_shape_id: Option<i64>,
    pub cluster_shape_id: Option<i64>,
    pub workspace_bytes: u64,
    /// Physical kernel symbols seen in the captured graph for this call.
    pub physical_kernels: Vec<String>,
}

/// The full identity of one GEMM launch. See `docs/design.md`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResolvedGemmRoute {
    /// Workload-level name of the GEMM (e.g. `qkv@b8`), for reports.
    pub gemm: String,
    pub op: GemmOp,
    pub dtype: DType,
    pub backend: PhysicalBackend,
    pub contract: NumericContract,
    /// Instruction family, e.g. `scalar-fma`, `mma.sync`.
    pub instruction_family: String,
    /// Instruction shape, e.g. `1x1x1`, `m16n8k16`.
    pub instruction_shape: String,
    pub uses_tensor_cores: bool,
    pub operand_conversion: OperandConversion,
    pub output_ownership: OutputOwnership,
    pub kernel_symbol: String,
    pub module_kind: ModuleKind,
    /// Compilation target, e.g. `x86_64` or `sm_90`.
    pub compilation_target: String,
    /// Digest of the module (artifact) the symbol was loaded from.
    pub artifact_digest: Digest,
    pub compiler: CompilerIdentity,
    pub device: DeviceIdentity,
    /// Device capabilities the kernel relies on (sorted).
    pub device_capabilities: Vec<String>,
    pub shape: GemmShape,
    pub strides: GemmStrides,
    pub tile: TileShape,
    pub bk: u32,
    pub stages: u32,
    pub threads: u32,
    pub launch: LaunchConfig,
    pub tensor_map: Option<TensorMapIdentity>,
    /// Digest of the resources the kernel was built with (registers, smem carve-out, ...).
    pub resources_digest: Digest,
    pub tuning_table_revision: u32,
    pub schedule_revision: u32,
    pub vendor: Option<VendorRoute>,
}

impl Framed for ResolvedGemmRoute {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        use FieldValue as F;
        v.field("gemm", F::Str(&self.gemm));
        v.field("op", F::Str(self.op.as_str()));
        v.field("dtype", F::Str(self.dtype.as_str()));
        v.field("backend", F::Str(&self.backend.as_str()));
        v.field("contract.kind", F::Str(&self.contract.kind.as_str()));
        v.field("contract.splits", F::U32(self.contract.splits));
        v.field("instruction_family", F::Str(&self.instruction_family));
        v.field("instruction_shape", F::Str(&self.instruction_shape));
        v.field("uses_tensor_cores", F::Bool(self.uses_tensor_cores));
        v.field(
            "operand_conversion",
            F::Str(self.operand_conversion.as_str()),
        );
        v.field("output_ownership", F::Str(self.output_ownership.as_str()));
        v.field("kernel_symbol", F::Str(&self.kernel_symbol));
        v.field("module_kind", F::Str(&self.module_kind.as_str()));
        v.field("compilation_target", F::Str(&self.compilation_target));
        v.field("artifact_digest", F::Digest(&self.artifact_digest));
        self.compiler.visit_fields(v);
        self.device.visit_fields(v);
        v.field("device_capabilities", F::StrList(&self.device_capabilities));
        v.field("shape.m", F::U64(self.shape.m));
        v.field("shape.k", F::U64(self.shape.k));
        v.field("shape.n", F::U64(self.shape.n));
        v.field("strides.lda", F::U64(self.strides.lda));
        v.field("strides.ldb", F::U64(self.strides.ldb));
        v.field("strides.ldc", F::U64(self.strides.ldc));
        v.field("tile.m", F::U32(self.tile.m));
        v.field("tile.n", F::U32(self.tile.n));
        v.field("tile.k", F::U32(self.tile.k));
        v.field("bk", F::U32(self.bk));
        v.field("stages", F::U32(self.stages));
        v.field("threads", F::U32(self.threads));
        v.field("launch.grid", F::U32x3(self.launch.grid));
        v.field("launch.block", F::U32x3(self.launch.block));
        v.field(
            "launch.dynamic_shared_bytes",
            F::U32(self.launch.dynamic_shared_bytes),
        );
        v.field(
            "launch.arguments_digest",
            F::Digest(&self.launch.arguments_digest),
        );
        match &self.tensor_map {
            Some(t) => {
                v.field("tensor_map.revision", F::U32(t.revision));
                v.field("tensor_map.digest", F::Digest(&t.digest));
            }
            None => {
                v.field("tensor_map.revision", F::Absent);
                v.field("tensor_map.digest", F::Absent);
            }
        }
        v.field("resources_digest", F::Digest(&self.resources_digest));
        v.field("tuning_table_revision", F::U32(self.tuning_table_revision));
        v.field("schedule_revision", F::U32(self.schedule_revision));
        match &self.vendor {
            Some(x) => {
                v.field("vendor.library_version", F::Str(&x.library_version));
                v.field("vendor.algorithm_id", F::I64(x.algorithm_id));
                v.field("vendor.tile_id", F::I64(x.tile_id));
                v.field("vendor.split_k", F::I64(x.split_k));
                v.field("vendor.reduction_scheme", F::I64(x.reduction_scheme));
                v.field("vendor.stages_id", F::I64(x.stages_id));
                v.field("vendor.swizzle", F::I64(x.swizzle));
                v.field(
                    "vendor.inner_shape_id",
                    x.inner_shape_id.map_or(F::Absent, F::I64),
                );
                v.field(
                    "vendor.cluster_shape_id",
                    x.cluster_shape_id.map_or(F::Absent, F::I64),
                );
                v.field("vendor.workspace_bytes", F::U64(x.workspace_bytes));
                v.field("vendor.physical_kernels", F::StrList(&x.physical_kernels));
            }
            None => {
                for tag in VENDOR_TAGS {
                    v.field(tag, F::Absent);
                }
            }
        }
    }
}

pub(crate) const VENDOR_TAGS: [&str; 11] = [
    "vendor.library_version",
    "vendor.algorithm_id",
    "vendor.tile_id",
    "vendor.split_k",
    "vendor.reduction_scheme",
    "vendor.stages_id",
    "vendor.swizzle",
    "vendor.inner_shape_id",
    "vendor.cluster_shape_id",
    "vendor.workspace_bytes",
    "vendor.physical_kernels",
];

impl ResolvedGemmRoute {
    /// Every string the route holds, for limit checks on decoded files.
    pub fn strings(&self) -> impl Iterator<Item = &str> {
        let vendor = self.vendor.iter().flat_map(|v| {
            std::iter::once(v.library_version.as_str())
                .chain(v.physical_kernels.iter().map(String::as_str))
        });
        [
            self.gemm.as_str(),
            &self.instruction_family,
            &self.instruction_shape,
            &self.kernel_symbol,
            &self.compilation_target,
        ]
        .into_iter()
        .chain(self.compiler.strings())
        .chain(self.device.strings())
        .chain(self.device_capabilities.iter().map(String::as_str))
        .chain(vendor)
    }
}
