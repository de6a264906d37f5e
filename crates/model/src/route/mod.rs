//! `ResolvedGemmRoute`: the full identity of one GEMM launch.
//!
//! A route says everything that can change the output bits of one launch:
//! what was asked (op, dtype, shape), what served it (backend, kernel symbol,
//! module, compiler, device), how the reduction was ordered (numeric contract,
//! output ownership), and how it was launched (grid, block, shared memory,
//! arguments digest). Two launches with equal routes must give equal bits.

use crate::digest::{Digest, FieldValue, FieldVisitor, Framed};
use crate::platform::{CompilerIdentity, DeviceIdentity};
use serde::{Deserialize, Serialize};
use std::fmt;

mod classes;

use crate::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, OperandConversion, OutputOwnership, PhysicalBackend,
};
pub use classes::{
    FIELD_CLASSES, FieldClass, FieldClassification, RouteKind, classify, markdown_table,
    policy_visible,
};

/// The numeric contract of a route.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NumericContract {
    /// How the reduction is ordered and rounded (e.g. `scalar-fma`,
    /// `split-k-fixed`); the policy permits or refuses routes by it.
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
    /// Rows of A and C.
    pub m: u64,
    /// Length of the reduction: columns of A, rows of B.
    pub k: u64,
    /// Columns of B and C.
    pub n: u64,
}

/// Leading dimensions (in elements) of A, B and C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmStrides {
    /// Elements between consecutive rows of A as stored (`k` for dense
    /// `nn`/`nt`, `m` for dense `tn`).
    pub lda: u64,
    /// Elements between consecutive rows of B as stored (`n` for dense
    /// `nn`/`tn`, `k` for dense `nt`).
    pub ldb: u64,
    /// Elements between consecutive rows of C (`n` when dense).
    pub ldc: u64,
}

impl GemmStrides {
    /// The dense leading dimensions of `op`'s row-major storage of `shape`.
    pub fn dense(op: GemmOp, shape: GemmShape) -> GemmStrides {
        GemmStrides {
            lda: if op == GemmOp::Tn { shape.m } else { shape.k },
            ldb: if op == GemmOp::Nt { shape.k } else { shape.n },
            ldc: shape.n,
        }
    }
}

/// The output tile one block (or CPU task) owns, and its k step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileShape {
    /// Rows of C in one tile.
    pub m: u32,
    /// Columns of C in one tile.
    pub n: u32,
    /// Depth in k staged per step of the tile loop (1 when the kernel
    /// does not stage k).
    pub k: u32,
}

/// How the kernel was launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LaunchConfig {
    /// Grid dimensions `[x, y, z]`, in blocks.
    pub grid: [u32; 3],
    /// Block dimensions `[x, y, z]`, in threads.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
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
    /// The tensor-map encoding revision of the context the route was
    /// built in; checked against the live context's before replay.
    pub revision: u32,
    /// Digest of the tensor map the launch used.
    pub digest: Digest,
}

/// What a vendor library (cuBLAS, cuBLASLt) exposes about its choice.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VendorRoute {
    /// Library name and version, e.g. `cublasLt 13.1.0`.
    pub library_version: String,
    /// Algorithm id (cuBLASLt `CUBLASLT_ALGO_CONFIG_ID`; for cuBLAS, the
    /// `cublasGemmAlgo_t` asked for).
    pub algorithm_id: i64,
    /// Tile id (`CUBLASLT_ALGO_CONFIG_TILE_ID`); -1 when not exposed.
    pub tile_id: i64,
    /// Number of k-splits (`CUBLASLT_ALGO_CONFIG_SPLITK_NUM`); -1 when not
    /// exposed.
    pub split_k: i64,
    /// How split-K partial sums are reduced
    /// (`CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME`); -1 when not exposed.
    pub reduction_scheme: i64,
    /// Pipeline stages id (`CUBLASLT_ALGO_CONFIG_STAGES_ID`); -1 when not
    /// exposed.
    pub stages_id: i64,
    /// Block swizzling (`CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING`); -1 when not
    /// exposed.
    pub swizzle: i64,
    /// Inner shape id (`CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID`), when the
    /// library exposes it.
    pub inner_shape_id: Option<i64>,
    /// Cluster shape id (`CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID`), when
    /// the library exposes it.
    pub cluster_shape_id: Option<i64>,
    /// Workspace the algorithm was given, in bytes.
    pub workspace_bytes: u64,
    /// Physical kernel symbols seen in the captured graph for this call.
    #[serde(deserialize_with = "crate::bounded::route_list")]
    pub physical_kernels: Vec<String>,
}

/// The full identity of one GEMM launch. See `docs/design.md`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResolvedGemmRoute {
    /// Workload-level name of the GEMM (e.g. `qkv@b8`), for reports.
    pub gemm: String,
    /// Which operands are stored transposed (row-major storage).
    pub op: GemmOp,
    /// Element type of A, B and C (accumulation is f32).
    pub dtype: DType,
    /// What executed the kernel (CPU reference, NVRTC, cuBLAS, an engine's).
    pub backend: PhysicalBackend,
    /// How the reduction is ordered and rounded, and into how many k-splits.
    pub contract: NumericContract,
    /// Instruction family, e.g. `scalar-fma`, `mma.sync`.
    pub instruction_family: String,
    /// Instruction shape, e.g. `1x1x1`, `m16n8k16`.
    pub instruction_shape: String,
    /// Whether the kernel runs on tensor cores (the policy may forbid them).
    pub uses_tensor_cores: bool,
    /// How inputs are converted before multiplying (exact widening, TF32
    /// rounding, vendor-defined).
    pub operand_conversion: OperandConversion,
    /// Who writes each output element (one owner per element or tile, a
    /// fixed split-K fold, atomics, vendor-defined).
    pub output_ownership: OutputOwnership,
    /// The kernel's symbol in its module (for a vendor library, the entry
    /// point called).
    pub kernel_symbol: String,
    /// Kind of the module the symbol was loaded from.
    pub module_kind: ModuleKind,
    /// Compilation target, e.g. `x86_64` or `sm_90`.
    pub compilation_target: String,
    /// Digest of the module (artifact) the symbol was loaded from.
    pub artifact_digest: Digest,
    /// The compiler that built that module (for a vendor library: the
    /// library).
    pub compiler: CompilerIdentity,
    /// The device class the route runs on.
    pub device: DeviceIdentity,
    /// Device capabilities the kernel relies on (sorted).
    #[serde(deserialize_with = "crate::bounded::route_list")]
    pub device_capabilities: Vec<String>,
    /// Problem size: C is `m x n`, reduced over `k`.
    pub shape: GemmShape,
    /// Leading dimensions of A, B and C, in elements.
    pub strides: GemmStrides,
    /// Output tile each block (or CPU task) owns; all zero when the
    /// backend does not say.
    pub tile: TileShape,
    /// K block: the k extent the kernel reduces per block step (for
    /// kernels that do not block k, the whole `k / splits`); 0 when the
    /// backend does not say.
    pub bk: u32,
    /// Software pipeline stages (1 when not pipelined, 0 when the backend
    /// does not say).
    pub stages: u32,
    /// Threads per block; must equal the launch's block size.
    pub threads: u32,
    /// How the kernel was launched: grid, block, shared memory, arguments.
    pub launch: LaunchConfig,
    /// The TMA tensor map the launch used, if any.
    pub tensor_map: Option<TensorMapIdentity>,
    /// Digest of the resources the kernel was built with (registers, smem carve-out, ...).
    pub resources_digest: Digest,
    /// The tuning-table (dispatch thresholds) revision of the context the
    /// route was resolved in; checked against the live one before replay.
    pub tuning_table_revision: u32,
    /// The work-schedule revision of the context the route was resolved
    /// in; checked against the live one before replay.
    pub schedule_revision: u32,
    /// What the vendor library exposes about its choice; `None` for
    /// kernels that are not a vendor library's.
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

impl ResolvedGemmRoute {
    /// Every identity field tag of a route, in framing order. The list is
    /// the same for every route: absent optional groups (tensor map,
    /// vendor) frame their tags as absent.
    pub fn field_tags() -> Vec<&'static str> {
        struct Tags(Vec<&'static str>);
        impl FieldVisitor for Tags {
            fn field(&mut self, tag: &'static str, _: FieldValue<'_>) {
                self.0.push(tag);
            }
        }
        let compiler = CompilerIdentity {
            name: String::new(),
            version: String::new(),
            options_digest: Digest::default(),
            source_digest: Digest::default(),
        };
        let device = DeviceIdentity {
            class: String::new(),
            compute_capability: None,
            multiprocessors: 0,
            driver: String::new(),
        };
        // Placeholders only: this route is framed for its tags, never
        // digested, stored or launched.
        let template = ResolvedGemmRoute {
            gemm: String::new(),
            op: GemmOp::Nn,
            dtype: DType::F32,
            backend: PhysicalBackend::CpuReference,
            contract: NumericContract {
                kind: ContractKind::ScalarFma,
                splits: 1,
            },
            instruction_family: String::new(),
            instruction_shape: String::new(),
            uses_tensor_cores: false,
            operand_conversion: OperandConversion::ExactWiden,
            output_ownership: OutputOwnership::OneOwnerPerElement,
            kernel_symbol: String::new(),
            module_kind: ModuleKind::CpuReference,
            compilation_target: String::new(),
            artifact_digest: Digest::default(),
            compiler,
            device,
            device_capabilities: Vec::new(),
            shape: GemmShape { m: 0, k: 0, n: 0 },
            strides: GemmStrides {
                lda: 0,
                ldb: 0,
                ldc: 0,
            },
            tile: TileShape { m: 0, n: 0, k: 0 },
            bk: 0,
            stages: 0,
            threads: 0,
            launch: LaunchConfig {
                grid: [0; 3],
                block: [0; 3],
                dynamic_shared_bytes: 0,
                arguments_digest: Digest::default(),
            },
            tensor_map: None,
            resources_digest: Digest::default(),
            tuning_table_revision: 0,
            schedule_revision: 0,
            vendor: None,
        };
        let mut tags = Tags(Vec::new());
        template.visit_fields(&mut tags);
        tags.0
    }
}
