//! Synthetic routes and contexts for tests, benchmarks and fuzzing.
//!
//! Not part of the stable API: hidden from the docs, used by `tests/`,
//! `benches/` and `fuzz/`.

use crate::declaration::{BkRule, SplitRule, SymbolDeclaration};
use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::identity::{GemmRouteIdentity, ModuleIdentity, Revisions, SymbolEntry};
use crate::platform::{CompilerIdentity, DeviceIdentity};
use crate::policy::GemmPolicy;
use crate::route::{
    GemmShape, GemmStrides, LaunchConfig, NumericContract, ResolvedGemmRoute, TensorMapIdentity,
    TileShape, VendorRoute,
};
use crate::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, OperandConversion, OutputOwnership, PhysicalBackend,
};

/// Kernel symbols served by the synthetic module.
pub const SYMBOLS: [&str; 4] = [
    "synthetic_scalar_fma",
    "synthetic_tiled",
    "synthetic_split_k",
    "synthetic_mma",
];

fn tagged(tag: &str, x: u64) -> Digest {
    let mut w = DigestWriter::new("gemm-audit/testkit/v1");
    w.field("tag", FieldValue::Str(tag));
    w.field("x", FieldValue::U64(x));
    w.finish()
}

/// A synthetic compiler identity.
pub fn compiler() -> CompilerIdentity {
    CompilerIdentity {
        name: "synthetic".into(),
        version: "1.0".into(),
        options_digest: tagged("options", 0),
        source_digest: tagged("source", 0),
    }
}

/// A synthetic device identity.
pub fn device() -> DeviceIdentity {
    DeviceIdentity {
        class: "synthetic-gpu".into(),
        compute_capability: Some([9, 0]),
        multiprocessors: 132,
        driver: "580.0".into(),
    }
}

/// The synthetic module's digest.
pub fn module_digest() -> Digest {
    tagged("module", 0)
}

/// A context that serves every [`sample_route`]: deterministic, tensor
/// cores on, split-K permitted.
pub fn context() -> GemmRouteIdentity {
    let policy = GemmPolicy {
        tensor_cores: true,
        f32: crate::F32Policy::Tf32,
        ..GemmPolicy::CPU_DEFAULT
    };
    GemmRouteIdentity::new(
        policy,
        vec![module()],
        device(),
        Revisions {
            tuning_table: 1,
            schedule: 1,
            tensor_map: 1,
        },
    )
}

/// The sample kernels' output tile.
const SAMPLE_TILE: TileShape = TileShape {
    m: 64,
    n: 64,
    k: 32,
};

/// The synthetic module: what each of [`SYMBOLS`] serves and declares.
///
/// `synthetic_scalar_fma` serves scalar FMA (with and without tensor
/// cores) one owner per element,
/// `synthetic_tiled` scalar FMA, `synthetic_split_k` fixed split-K and
/// `synthetic_mma` tensor-core tile parity, each for every op and dtype.
pub fn module() -> ModuleIdentity {
    let (ops, dtypes) = (GemmOp::ALL, DType::ALL);
    let declare = |family: &str, shape: &str, ownership, splits| {
        SymbolDeclaration::new(family, shape, ownership, splits, BkRule::Fixed(32))
            .with_tile(SAMPLE_TILE, 2)
            .with_capabilities(vec!["fma".into()])
    };
    let symbols = vec![
        SymbolEntry::new(SYMBOLS[0])
            .serving(ops, dtypes, &ContractKind::ScalarFma, false)
            .serving(ops, dtypes, &ContractKind::ScalarFma, true)
            .declaring(declare(
                "scalar-fma",
                "1x1x1",
                OutputOwnership::OneOwnerPerElement,
                SplitRule::Unsplit,
            )),
        SymbolEntry::new(SYMBOLS[1])
            .serving(ops, dtypes, &ContractKind::ScalarFma, false)
            .declaring(declare(
                "scalar-fma",
                "1x1x1",
                OutputOwnership::OneOwnerPerTile,
                SplitRule::Unsplit,
            )),
        SymbolEntry::new(SYMBOLS[2])
            .serving(ops, dtypes, &ContractKind::SplitKFixed, false)
            .declaring(declare(
                "scalar-fma",
                "1x1x1",
                OutputOwnership::FixedSplitKFold,
                SplitRule::GridZ,
            )),
        SymbolEntry::new(SYMBOLS[3])
            .serving(ops, dtypes, &ContractKind::TensorCoreTileParity, true)
            .declaring(
                declare(
                    "mma.sync",
                    "m16n8k16",
                    OutputOwnership::OneOwnerPerTile,
                    SplitRule::Unsplit,
                )
                .with_tensor_map(),
            ),
    ]
    .into_iter()
    .map(|s| s.with_resources(tagged("resources", 0)))
    .collect();
    ModuleIdentity::new(
        PhysicalBackend::CudaNvrtc,
        ModuleKind::Nvrtc,
        module_digest(),
        compiler(),
        "sm_90",
        symbols,
    )
}

/// An engine module of auxiliary (non-GEMM) kernels named `symbols`.
pub fn auxiliary_module(symbols: &[&str]) -> ModuleIdentity {
    ModuleIdentity::from_artifact(
        PhysicalBackend::engine("synthetic-step", false).expect("valid name"),
        ModuleKind::engine("synthetic-aux").expect("valid name"),
        symbols.join(",").as_bytes(),
        compiler(),
        "sm_90",
        symbols
            .iter()
            .map(|s| SymbolEntry::auxiliary(*s, tagged("aux-resources", 0)))
            .collect(),
    )
}

/// Moves `r` to `symbol` of [`module`], with every field the symbol
/// declares (instruction, ownership, tile, k block, stages, capabilities,
/// tensor-map presence, the split rule's grid z) set as declared.
pub fn declared_as(r: &mut ResolvedGemmRoute, symbol: &str) {
    use crate::declaration::{BkRule, SplitRule};
    let m = module();
    let d = m
        .symbol(symbol)
        .and_then(|s| s.declaration.clone())
        .expect("a declared testkit symbol");
    r.kernel_symbol = symbol.into();
    r.instruction_family = d.instruction_family;
    r.instruction_shape = d.instruction_shape;
    r.output_ownership = d.output_ownership;
    r.tile = d.tile.unwrap_or(r.tile);
    if let BkRule::Fixed(b) = d.bk {
        r.bk = b;
    }
    r.stages = d.stages.unwrap_or(r.stages);
    r.device_capabilities = d.device_capabilities;
    r.tensor_map = match (d.tensor_map, r.tensor_map) {
        (false, _) => None,
        (true, Some(t)) => Some(t),
        (true, None) => Some(TensorMapIdentity {
            revision: 1,
            digest: tagged("tmap", 0),
        }),
    };
    match d.splits {
        SplitRule::GridZ => r.launch.grid[2] = r.contract.splits.max(1),
        _ => r.launch.grid[2] = 1,
    }
}

/// A deterministic, varied, servable route. `i` picks the variation.
pub fn sample_route(i: u64) -> ResolvedGemmRoute {
    let op = GemmOp::ALL[(i % 3) as usize];
    let dtype = DType::ALL[((i / 3) % 3) as usize];
    let (contract, family, symbol, ownership, tc) = match (i / 9) % 3 {
        0 => (
            ContractKind::ScalarFma,
            "scalar-fma",
            SYMBOLS[0],
            OutputOwnership::OneOwnerPerElement,
            false,
        ),
        1 => (
            ContractKind::ScalarFma,
            "scalar-fma",
            SYMBOLS[1],
            OutputOwnership::OneOwnerPerTile,
            false,
        ),
        _ if dtype.is_half() => (
            ContractKind::TensorCoreTileParity,
            "mma.sync",
            SYMBOLS[3],
            OutputOwnership::OneOwnerPerTile,
            true,
        ),
        _ => (
            ContractKind::SplitKFixed,
            "scalar-fma",
            SYMBOLS[2],
            OutputOwnership::FixedSplitKFold,
            false,
        ),
    };
    let splits = if contract == ContractKind::SplitKFixed {
        4
    } else {
        1
    };
    let m = 1 + (i % 97) * 16;
    let (k, n) = (4096, 1024 + (i % 5) * 256);
    let threads = 128u32;
    ResolvedGemmRoute {
        gemm: format!("gemm{i}"),
        op,
        dtype,
        backend: PhysicalBackend::CudaNvrtc,
        contract: NumericContract {
            kind: contract,
            splits,
        },
        instruction_family: family.into(),
        instruction_shape: if tc {
            "m16n8k16".into()
        } else {
            "1x1x1".into()
        },
        uses_tensor_cores: tc,
        operand_conversion: OperandConversion::ExactWiden,
        output_ownership: ownership,
        kernel_symbol: symbol.into(),
        module_kind: ModuleKind::Nvrtc,
        compilation_target: "sm_90".into(),
        artifact_digest: module_digest(),
        compiler: compiler(),
        device: device(),
        device_capabilities: vec!["fma".into()],
        shape: GemmShape { m, k, n },
        strides: GemmStrides {
            lda: k,
            ldb: n,
            ldc: n,
        },
        tile: SAMPLE_TILE,
        bk: 32,
        stages: 2,
        threads,
        launch: LaunchConfig {
            grid: [n.div_ceil(64) as u32, m.div_ceil(64) as u32, splits],
            block: [threads, 1, 1],
            dynamic_shared_bytes: 16384,
            arguments_digest: tagged("args", i),
        },
        tensor_map: if tc {
            Some(TensorMapIdentity {
                revision: 1,
                digest: tagged("tmap", i),
            })
        } else {
            None
        },
        resources_digest: tagged("resources", 0),
        tuning_table_revision: 1,
        schedule_revision: 1,
        vendor: None,
    }
}

/// `count` sample routes.
pub fn sample_routes(count: u64) -> Vec<ResolvedGemmRoute> {
    (0..count).map(sample_route).collect()
}

/// A vendor (cuBLASLt) route, for encoding tests; not servable by [`context`].
pub fn sample_vendor_route(i: u64) -> ResolvedGemmRoute {
    let mut r = sample_route(i);
    r.backend = PhysicalBackend::CublasLt;
    r.module_kind = ModuleKind::CublasLt;
    r.contract = NumericContract {
        kind: ContractKind::VendorPedantic,
        splits: 1,
    };
    r.operand_conversion = OperandConversion::VendorDefined;
    r.output_ownership = OutputOwnership::VendorDefined;
    r.kernel_symbol = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64".into();
    r.vendor = Some(VendorRoute {
        library_version: "cublasLt 13.1.0".into(),
        algorithm_id: 66,
        tile_id: 20,
        split_k: 1,
        reduction_scheme: 0,
        stages_id: 8,
        swizzle: 0,
        inner_shape_id: Some(1),
        cluster_shape_id: None,
        workspace_bytes: 1 << 20,
        physical_kernels: vec![r.kernel_symbol.clone()],
    });
    r
}

/// A small trace over `count` sample routes, with fingerprints.
pub fn sample_trace(count: u64) -> crate::RecordedGemmTrace {
    let routes = sample_routes(count);
    let fingerprints = (0..count)
        .map(|i| crate::OutputFingerprint {
            input_seed: i,
            bytes: 1024 * (i + 1),
            sha256: tagged("output", i),
        })
        .collect();
    let mut volatile = crate::identity::VolatileMetadata::new();
    volatile.insert("host".into(), "synthetic".into());
    crate::RecordedGemmTrace::new(
        "synthetic",
        tagged("workload", count),
        context(),
        routes,
        fingerprints,
        volatile,
    )
    .expect("sample routes form a valid launch set")
}
