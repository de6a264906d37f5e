//! Building the route of an engine's own GEMM launch from what the engine
//! knows (the symbol it launched, the problem, the launch geometry and the
//! argument values), with everything else taken from the live context.

use crate::declaration::BkRule;
use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::identity::{GemmRouteIdentity, ModuleIdentity, Service};
use crate::route::{
    GemmShape, GemmStrides, LaunchConfig, NumericContract, ResolvedGemmRoute, TensorMapIdentity,
    TileShape, VendorRoute,
};
use crate::vocab::{ContractKind, DType, GemmOp, OperandConversion, OutputOwnership};

/// Domain of [`ArgumentsDigest`].
pub const ARGUMENTS_DOMAIN: &str = "gemm-audit/kernel-arguments/v1";

/// A pointer-free digest of a kernel's arguments: scalars by value, buffers
/// by their role, dtype and length, never by address (addresses change from
/// run to run; what they point to is the output fingerprint's business).
///
/// ```
/// use gemm_audit_model::ArgumentsDigest;
/// let d = ArgumentsDigest::new("my_gemm_bf16")
///     .buffer("a", "bf16", 8 * 256)
///     .buffer("b", "bf16", 256 * 768)
///     .buffer("c", "bf16", 8 * 768)
///     .u64("m", 8)
///     .u64("k", 256)
///     .u64("n", 768)
///     .f32("alpha", 1.0)
///     .finish();
/// assert!(!d.is_zero());
/// ```
pub struct ArgumentsDigest {
    w: DigestWriter,
    count: u64,
}

impl std::fmt::Debug for ArgumentsDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgumentsDigest")
            .field("arguments", &self.count)
            .finish_non_exhaustive()
    }
}

impl ArgumentsDigest {
    /// Starts the digest of a launch of `symbol`.
    pub fn new(symbol: &str) -> Self {
        let mut w = DigestWriter::new(ARGUMENTS_DOMAIN);
        w.field("symbol", FieldValue::Str(symbol));
        ArgumentsDigest { w, count: 0 }
    }

    fn arg(mut self, name: &str, kind: &'static str, value: FieldValue<'_>) -> Self {
        self.w.field("arg.index", FieldValue::U64(self.count));
        self.w.field("arg.name", FieldValue::Str(name));
        self.w.field("arg.kind", FieldValue::Str(kind));
        self.w.field("arg.value", value);
        self.count += 1;
        self
    }

    /// An unsigned integer argument.
    pub fn u64(self, name: &str, v: u64) -> Self {
        self.arg(name, "u64", FieldValue::U64(v))
    }

    /// A signed integer argument.
    pub fn i64(self, name: &str, v: i64) -> Self {
        self.arg(name, "i64", FieldValue::I64(v))
    }

    /// A float argument, by its bits (so `-0.0` and `0.0` differ, as they
    /// can in the output).
    pub fn f32(self, name: &str, v: f32) -> Self {
        self.arg(name, "f32", FieldValue::U32(v.to_bits()))
    }

    /// A buffer argument: its role, element dtype and length in elements.
    pub fn buffer(self, name: &str, dtype: &str, elements: u64) -> Self {
        let described = format!("{dtype}[{elements}]");
        self.arg(name, "buffer", FieldValue::Str(&described))
    }

    /// Raw bytes of an argument (e.g. a kernel-parameter struct without
    /// pointers).
    pub fn bytes(self, name: &str, bytes: &[u8]) -> Self {
        self.arg(name, "bytes", FieldValue::Bytes(bytes))
    }

    /// The digest.
    pub fn finish(mut self) -> Digest {
        self.w.field("arg.count", FieldValue::U64(self.count));
        self.w.finish()
    }
}

/// Why a route could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RouteBuildError {
    /// The live context loads no such module.
    #[error("no module {kind} {digest} is loaded in the live context")]
    UnknownModule {
        /// The module kind asked for.
        kind: String,
        /// The module digest asked for.
        digest: Digest,
    },
    /// The module does not export the symbol.
    #[error("module {module} does not serve symbol {symbol:?}")]
    UnknownSymbol {
        /// The module kind.
        module: String,
        /// The symbol asked for.
        symbol: String,
    },
    /// The symbol does not serve this (op, dtype, contract, tensor cores).
    #[error("symbol {symbol:?} does not serve {service}")]
    NotServed {
        /// The symbol.
        symbol: String,
        /// What the route asked of it.
        service: String,
    },
    /// The symbol declares nothing about what it launches.
    #[error("symbol {symbol:?} has no declaration (SymbolEntry::declaring)")]
    Undeclared {
        /// The symbol.
        symbol: String,
    },
    /// The route contradicts what its symbol declares.
    #[error("the route contradicts what {symbol:?} declares: {contradiction}")]
    Contradicts {
        /// The symbol.
        symbol: String,
        /// The first contradicting field.
        contradiction: String,
    },
    /// A required part was not given.
    #[error("route {gemm:?}: {what} was not set")]
    Missing {
        /// The GEMM name.
        gemm: String,
        /// What is missing.
        what: &'static str,
    },
}

/// Builds the route of one launch of an engine's kernel.
///
/// Identity that the live context already knows (backend, module kind and
/// digest, compiler, compilation target, resources, device, revisions) is
/// taken from it; the engine says what it launched: the symbol, the
/// problem, the contract, the launch geometry and the argument values.
/// [`GemmRouteBuilder::build`] refuses a symbol the module does not serve
/// for this problem, so a dispatcher bug shows at record time.
///
/// ```
/// use gemm_audit_model::{ArgumentsDigest, GemmRouteBuilder};
/// use gemm_audit_model::route::GemmShape;
/// use gemm_audit_model::vocab::{ContractKind, DType, GemmOp};
/// use gemm_audit_model::testkit;
///
/// let live = testkit::context();
/// let module = &live.modules[0];
/// let shape = GemmShape { m: 8, k: 256, n: 768 };
/// let route = GemmRouteBuilder::new(&live, module, "synthetic_tiled", "qkv@b8")
///     .problem(GemmOp::Nn, DType::Bf16, shape)
///     .contract(ContractKind::ScalarFma, 1)
///     .launch([12, 1, 1], [128, 1, 1], 0, ArgumentsDigest::new("synthetic_tiled").u64("m", 8).finish())
///     .build()
///     .unwrap();
/// assert_eq!(route.threads, 128);
/// assert_eq!(route.compiler, module.compiler);
/// ```
#[derive(Debug, Clone)]
pub struct GemmRouteBuilder<'a> {
    live: &'a GemmRouteIdentity,
    module: &'a ModuleIdentity,
    symbol: String,
    gemm: String,
    problem: Option<(GemmOp, DType, GemmShape)>,
    strides: Option<GemmStrides>,
    contract: Option<NumericContract>,
    tensor_cores: bool,
    instruction: Option<(String, String)>,
    conversion: OperandConversion,
    ownership: Option<OutputOwnership>,
    tile: Option<(TileShape, u32, u32)>,
    launch: Option<LaunchConfig>,
    capabilities: Option<Vec<String>>,
    tensor_map: Option<TensorMapIdentity>,
    resources: Option<Digest>,
    vendor: Option<VendorRoute>,
}

impl<'a> GemmRouteBuilder<'a> {
    /// The route of `gemm` (the engine's name for this GEMM, e.g.
    /// `layer0.up@b8`) served by `symbol` of `module`, under `live`.
    pub fn new(
        live: &'a GemmRouteIdentity,
        module: &'a ModuleIdentity,
        symbol: impl Into<String>,
        gemm: impl Into<String>,
    ) -> Self {
        GemmRouteBuilder {
            live,
            module,
            symbol: symbol.into(),
            gemm: gemm.into(),
            problem: None,
            strides: None,
            contract: None,
            tensor_cores: false,
            instruction: None,
            conversion: OperandConversion::ExactWiden,
            ownership: None,
            tile: None,
            launch: None,
            capabilities: None,
            tensor_map: None,
            resources: None,
            vendor: None,
        }
    }

    /// Op, dtype and shape (required). Strides default to the dense
    /// row-major layout of the op.
    pub fn problem(mut self, op: GemmOp, dtype: DType, shape: GemmShape) -> Self {
        self.problem = Some((op, dtype, shape));
        self
    }

    /// Leading dimensions, when not dense.
    pub fn strides(mut self, strides: GemmStrides) -> Self {
        self.strides = Some(strides);
        self
    }

    /// The numeric contract (required) and the number of k-splits.
    pub fn contract(mut self, kind: ContractKind, splits: u32) -> Self {
        self.contract = Some(NumericContract { kind, splits });
        self
    }

    /// Whether the kernel uses tensor cores (default: no).
    pub fn tensor_cores(mut self, on: bool) -> Self {
        self.tensor_cores = on;
        self
    }

    /// Instruction family and shape, e.g. `("wgmma", "m64n128k16")`
    /// (default: the symbol's declaration).
    pub fn instruction(mut self, family: impl Into<String>, shape: impl Into<String>) -> Self {
        self.instruction = Some((family.into(), shape.into()));
        self
    }

    /// Operand conversion and output ownership (defaults: exact widening,
    /// and the ownership the symbol declares).
    pub fn numerics(mut self, conversion: OperandConversion, ownership: OutputOwnership) -> Self {
        self.conversion = conversion;
        self.ownership = Some(ownership);
        self
    }

    /// Block tile, k step and pipeline stages (default: what the symbol
    /// declares; a k block of one split when it declares that rule).
    pub fn tile(mut self, tile: TileShape, bk: u32, stages: u32) -> Self {
        self.tile = Some((tile, bk, stages));
        self
    }

    /// Launch geometry and the arguments digest (required; see
    /// [`ArgumentsDigest`]). The route's thread count is the block's.
    pub fn launch(
        mut self,
        grid: [u32; 3],
        block: [u32; 3],
        dynamic_shared_bytes: u32,
        arguments_digest: Digest,
    ) -> Self {
        self.launch = Some(LaunchConfig {
            grid,
            block,
            dynamic_shared_bytes,
            arguments_digest,
        });
        self
    }

    /// Launch geometry as a [`LaunchConfig`].
    pub fn launch_config(mut self, launch: LaunchConfig) -> Self {
        self.launch = Some(launch);
        self
    }

    /// Device capabilities the kernel relies on (default: the symbol's
    /// declaration).
    pub fn capabilities(mut self, caps: &[&str]) -> Self {
        let mut c: Vec<String> = caps.iter().map(|s| s.to_string()).collect();
        c.sort();
        self.capabilities = Some(c);
        self
    }

    /// The TMA tensor map the launch used; its revision is the live
    /// context's tensor-map revision.
    pub fn tensor_map(mut self, digest: Digest) -> Self {
        self.tensor_map = Some(TensorMapIdentity {
            revision: self.live.revisions.tensor_map,
            digest,
        });
        self
    }

    /// The resources digest, when the module's symbol declares none.
    pub fn resources(mut self, digest: Digest) -> Self {
        self.resources = Some(digest);
        self
    }

    /// What a vendor library exposes about its choice (cuBLASLt algorithm
    /// attributes, ...).
    pub fn vendor(mut self, vendor: VendorRoute) -> Self {
        self.vendor = Some(vendor);
        self
    }

    /// The route. Refused when a required part is missing, when the module
    /// is not loaded in the live context, or when the symbol does not serve
    /// this (op, dtype, contract, tensor cores).
    // Over 100 lines: the route literal names each of the route's fields
    // once, next to where its value comes from (the call, the live context
    // or the declaration); splitting it would scatter that table.
    pub fn build(self) -> Result<ResolvedGemmRoute, RouteBuildError> {
        let missing = |what| RouteBuildError::Missing {
            gemm: self.gemm.clone(),
            what,
        };
        let (op, dtype, shape) = self.problem.ok_or_else(|| missing("problem"))?;
        let contract = self.contract.clone().ok_or_else(|| missing("contract"))?;
        let launch = self.launch.ok_or_else(|| missing("launch"))?;
        let module = self.module;
        if self.live.module(&module.kind, &module.digest).is_none() {
            return Err(RouteBuildError::UnknownModule {
                kind: module.kind.to_string(),
                digest: module.digest,
            });
        }
        let entry = module
            .symbol(&self.symbol)
            .ok_or_else(|| RouteBuildError::UnknownSymbol {
                module: module.kind.to_string(),
                symbol: self.symbol.clone(),
            })?;
        let service = Service {
            op,
            dtype,
            contract: contract.kind.clone(),
            tensor_cores: self.tensor_cores,
            conversion: self.conversion,
        };
        if !entry.serves(&service) {
            return Err(RouteBuildError::NotServed {
                symbol: self.symbol.clone(),
                service: format!(
                    "{op} {dtype} {} tensor-cores={} {}",
                    contract.kind, self.tensor_cores, self.conversion
                ),
            });
        }
        let declared = entry
            .declaration
            .as_ref()
            .ok_or_else(|| RouteBuildError::Undeclared {
                symbol: self.symbol.clone(),
            })?;
        let (instruction_family, instruction_shape) =
            self.instruction.clone().unwrap_or_else(|| {
                (
                    declared.instruction_family.clone(),
                    declared.instruction_shape.clone(),
                )
            });
        let (tile, bk, stages) = self.tile.unwrap_or_else(|| {
            let bk = match declared.bk {
                BkRule::Fixed(b) => b,
                BkRule::PerSplit => shape
                    .k
                    .div_ceil(contract.splits.max(1) as u64)
                    .min(u32::MAX as u64) as u32,
            };
            (
                declared.tile.unwrap_or(TileShape { m: 0, n: 0, k: 0 }),
                bk,
                declared.stages.unwrap_or(0),
            )
        });
        let strides = self
            .strides
            .unwrap_or_else(|| GemmStrides::dense(op, shape));
        let resources = entry
            .resources_digest
            .or(self.resources)
            .unwrap_or_else(|| {
                // No resources known (a vendor call): frame the launch's own
                // geometry, so the field is never the all-zero placeholder.
                let mut w = DigestWriter::new("gemm-audit/declared-resources/v1");
                w.field("block", FieldValue::U32x3(launch.block));
                w.field("shared", FieldValue::U32(launch.dynamic_shared_bytes));
                w.finish()
            });
        let threads = u32::try_from(launch.block_threads()).unwrap_or(u32::MAX);
        // A vendor call is set up one of the ways its entry point declares
        // for this dtype and contract: claim that one.
        let mut compiler = module.compiler.clone();
        if let Some(d) = declared.configuration(dtype, &contract.kind) {
            compiler.options_digest = *d;
        }
        let route = ResolvedGemmRoute {
            gemm: self.gemm,
            op,
            dtype,
            backend: module.backend.clone(),
            contract,
            instruction_family,
            instruction_shape,
            uses_tensor_cores: self.tensor_cores,
            operand_conversion: self.conversion,
            output_ownership: self.ownership.unwrap_or(declared.output_ownership),
            kernel_symbol: self.symbol,
            module_kind: module.kind.clone(),
            compilation_target: module.target.clone(),
            artifact_digest: module.digest,
            compiler,
            device: self.live.device.clone(),
            device_capabilities: self
                .capabilities
                .unwrap_or_else(|| declared.device_capabilities.clone()),
            shape,
            strides,
            tile,
            bk,
            stages,
            threads,
            launch,
            tensor_map: self.tensor_map,
            resources_digest: resources,
            tuning_table_revision: self.live.revisions.tuning_table,
            schedule_revision: self.live.revisions.schedule,
            vendor: self.vendor,
        };
        // A route the symbol's declaration contradicts would be refused at
        // every replay: say so now, at record time, where the bug is.
        match declared.contradiction(&route) {
            Some(c) => Err(RouteBuildError::Contradicts {
                symbol: route.kernel_symbol,
                contradiction: c.to_string(),
            }),
            None => Ok(route),
        }
    }
}
