//! Identity of what serves a GEMM: services, symbols, modules, and the live
//! context (`GemmRouteIdentity`) a replay is checked against.

use crate::declaration::SymbolDeclaration;
use crate::digest::{Digest, DigestWriter, FieldValue, FieldVisitor, Framed};
use crate::pin::{PinFamily, VendorPin};
use crate::platform::{CompilerIdentity, DeviceIdentity};
use crate::policy::GemmPolicy;
use crate::vocab::{ContractKind, DType, GemmOp, ModuleKind, OperandConversion, PhysicalBackend};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Domain of [`GemmRouteIdentity::digest`].
pub const CONTEXT_DOMAIN: &str = "gemm-audit/context/v3";

/// What one symbol serves: a logical op and dtype under a numeric
/// contract, with or without tensor cores, converting operands one way. A
/// replay of a route through a symbol that does not serve the route's (op,
/// dtype, contract, tensor cores, conversion) is refused before launch, so
/// relabelling a route to another loaded symbol, or changing its dtype, is
/// caught without a golden.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Service {
    /// Logical op.
    pub op: GemmOp,
    /// Storage dtype.
    pub dtype: DType,
    /// Numeric contract kind.
    pub contract: ContractKind,
    /// Whether the symbol uses tensor cores for it.
    pub tensor_cores: bool,
    /// How it converts operands before multiplying.
    pub conversion: OperandConversion,
}

impl Service {
    /// The service a route asks for.
    pub fn of(route: &crate::route::ResolvedGemmRoute) -> Service {
        Service {
            op: route.op,
            dtype: route.dtype,
            contract: route.contract.kind.clone(),
            tensor_cores: route.uses_tensor_cores,
            conversion: route.operand_conversion,
        }
    }

    fn label(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.op,
            self.dtype,
            self.contract,
            if self.tensor_cores { "tc" } else { "no-tc" },
            self.conversion
        )
    }
}

/// One kernel symbol of a module: what it serves, the digest of its
/// resources (registers, shared memory, ...) where known, and what it
/// declares about what it launches ([`SymbolDeclaration`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SymbolEntry {
    /// The kernel symbol.
    pub name: String,
    /// What the symbol serves, sorted.
    #[serde(deserialize_with = "crate::bounded::services")]
    pub serves: Vec<Service>,
    /// Digest of the kernel's resources; when present, a route through
    /// this symbol must carry the same `resources_digest`. A custom
    /// kernel's symbol must declare it; a vendor entry point may not (the
    /// library picks the kernels per call).
    pub resources_digest: Option<Digest>,
    /// What the symbol declares about what it launches; `None` only in
    /// traces older than format 4, whose routes replay validation refuses
    /// (re-record them).
    pub declaration: Option<SymbolDeclaration>,
}

impl SymbolEntry {
    /// A symbol serving nothing yet; add services with [`SymbolEntry::serving`].
    pub fn new(name: impl Into<String>) -> Self {
        SymbolEntry {
            name: name.into(),
            serves: Vec::new(),
            resources_digest: None,
            declaration: None,
        }
    }

    /// Adds every (op, dtype) pair of `ops` x `dtypes` under `contract`,
    /// with operands widened exactly (see [`SymbolEntry::serving_converted`]).
    pub fn serving(
        self,
        ops: &[GemmOp],
        dtypes: &[DType],
        contract: &ContractKind,
        tensor_cores: bool,
    ) -> Self {
        self.serving_converted(
            ops,
            dtypes,
            contract,
            tensor_cores,
            OperandConversion::ExactWiden,
        )
    }

    /// Adds every (op, dtype) pair of `ops` x `dtypes` under `contract`,
    /// converting operands by `conversion` (TF32 rounding, vendor-defined).
    pub fn serving_converted(
        mut self,
        ops: &[GemmOp],
        dtypes: &[DType],
        contract: &ContractKind,
        tensor_cores: bool,
        conversion: OperandConversion,
    ) -> Self {
        for &op in ops {
            for &dtype in dtypes {
                self.serves.push(Service {
                    op,
                    dtype,
                    contract: contract.clone(),
                    tensor_cores,
                    conversion,
                });
            }
        }
        self.serves.sort();
        self.serves.dedup();
        self
    }

    /// Declares the kernel's resources digest.
    pub fn with_resources(mut self, digest: Digest) -> Self {
        self.resources_digest = Some(digest);
        self
    }

    /// A kernel of the step that serves no GEMM (an RMSNorm, an
    /// activation, a softmax): captured graphs may hold it between the
    /// GEMMs ([`crate::physical::bind`]), and its module's digest and
    /// compiler put it under the context like any kernel. `resources` is
    /// its resources digest (`cuda::function_resources` for a CUDA kernel).
    pub fn auxiliary(name: impl Into<String>, resources: Digest) -> Self {
        SymbolEntry::new(name).with_resources(resources)
    }

    /// True when the symbol serves no GEMM: an auxiliary kernel.
    pub fn is_auxiliary(&self) -> bool {
        self.serves.is_empty()
    }

    /// Declares what the symbol launches.
    pub fn declaring(mut self, declaration: SymbolDeclaration) -> Self {
        self.declaration = Some(declaration);
        self
    }

    /// True when this symbol serves `s`.
    pub fn serves(&self, s: &Service) -> bool {
        // A linear search: lists are short, and decoded ones need not be sorted.
        self.serves.contains(s)
    }

    /// True when this symbol serves what `route` asks ([`Service::of`]),
    /// compared in place: no service is built, so a recorder can check
    /// every push without allocating (an engine contract's name would be
    /// cloned).
    pub fn serves_route(&self, route: &crate::route::ResolvedGemmRoute) -> bool {
        self.serves.iter().any(|s| {
            s.op == route.op
                && s.dtype == route.dtype
                && s.contract == route.contract.kind
                && s.tensor_cores == route.uses_tensor_cores
                && s.conversion == route.operand_conversion
        })
    }
}

/// A loaded module (artifact): which backend it serves, its kind, digest,
/// compiler and compilation target, and the symbols it serves.
///
/// Each module carries its own compiler, so one context can hold modules
/// from several compilers (NVRTC, nvcc, a vendor library).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModuleIdentity {
    /// The backend whose kernels this module holds.
    pub backend: PhysicalBackend,
    /// The module kind.
    pub kind: ModuleKind,
    /// Digest of the artifact (cubin, PTX, library identity).
    pub digest: Digest,
    /// The compiler that built it (for vendor libraries: the library).
    pub compiler: CompilerIdentity,
    /// Compilation target, e.g. `sm_90a` or `x86_64`.
    pub target: String,
    /// Kernel symbols the module serves, sorted by name.
    #[serde(deserialize_with = "crate::bounded::symbols")]
    pub symbols: Vec<SymbolEntry>,
}

impl ModuleIdentity {
    /// A module identified by the digest of its artifact bytes (a cubin,
    /// PTX text, a fatbin). Symbols are sorted by name.
    pub fn from_artifact(
        backend: PhysicalBackend,
        kind: ModuleKind,
        artifact: &[u8],
        compiler: CompilerIdentity,
        target: impl Into<String>,
        symbols: Vec<SymbolEntry>,
    ) -> Self {
        Self::new(
            backend,
            kind,
            Digest::sha256(artifact),
            compiler,
            target,
            symbols,
        )
    }

    /// A module with a given digest. Symbols are sorted by name.
    pub fn new(
        backend: PhysicalBackend,
        kind: ModuleKind,
        digest: Digest,
        compiler: CompilerIdentity,
        target: impl Into<String>,
        mut symbols: Vec<SymbolEntry>,
    ) -> Self {
        symbols.sort_by(|a, b| a.name.cmp(&b.name));
        ModuleIdentity {
            backend,
            kind,
            digest,
            compiler,
            target: target.into(),
            symbols,
        }
    }

    /// The entry of `name`, if the module serves it.
    pub fn symbol(&self, name: &str) -> Option<&SymbolEntry> {
        match self.symbols.binary_search_by(|s| s.name.as_str().cmp(name)) {
            Ok(i) => Some(&self.symbols[i]),
            // Decoded files are not trusted to be sorted.
            Err(_) => self.symbols.iter().find(|s| s.name == name),
        }
    }

    /// The symbol names, in order.
    pub fn symbol_names(&self) -> Vec<String> {
        self.symbols.iter().map(|s| s.name.clone()).collect()
    }
}

impl Framed for ModuleIdentity {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        v.field("module.backend", FieldValue::Str(&self.backend.as_str()));
        v.field("module.kind", FieldValue::Str(&self.kind.as_str()));
        v.field("module.digest", FieldValue::Digest(&self.digest));
        v.field("module.compiler.name", FieldValue::Str(&self.compiler.name));
        v.field(
            "module.compiler.version",
            FieldValue::Str(&self.compiler.version),
        );
        v.field(
            "module.compiler.options_digest",
            FieldValue::Digest(&self.compiler.options_digest),
        );
        v.field(
            "module.compiler.source_digest",
            FieldValue::Digest(&self.compiler.source_digest),
        );
        v.field("module.target", FieldValue::Str(&self.target));
        v.field("module.symbols", FieldValue::StrList(&self.symbol_names()));
        let services: Vec<String> = self
            .symbols
            .iter()
            .flat_map(|s| {
                s.serves
                    .iter()
                    .map(move |x| format!("{} {}", s.name, x.label()))
            })
            .collect();
        v.field("module.services", FieldValue::StrList(&services));
        let resources: Vec<String> = self
            .symbols
            .iter()
            .filter_map(|s| s.resources_digest.map(|d| format!("{} {d}", s.name)))
            .collect();
        v.field("module.resources", FieldValue::StrList(&resources));
        let declared: Vec<String> = self
            .symbols
            .iter()
            .flat_map(|s| {
                let facts = s
                    .declaration
                    .as_ref()
                    .map_or_else(|| vec!["undeclared".to_string()], |d| d.facts());
                facts.into_iter().map(move |f| format!("{} {f}", s.name))
            })
            .collect();
        v.field("module.declarations", FieldValue::StrList(&declared));
    }
}

/// Revisions of the tables that steer route selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Revisions {
    /// Revision of the tuning table (dispatch thresholds).
    pub tuning_table: u32,
    /// Revision of the work schedule (tile order, worker assignment).
    pub schedule: u32,
    /// Revision of the tensor-map encoding.
    pub tensor_map: u32,
}

/// The live context: policy, what it permits, modules (each with its
/// compiler), device and revisions. Two contexts are equal only if all of
/// it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GemmRouteIdentity {
    /// The numeric policy.
    pub policy: GemmPolicy,
    /// Backends this context may replay (derived from the policy and the modules).
    #[serde(deserialize_with = "crate::bounded::permitted")]
    pub permitted_backends: Vec<PhysicalBackend>,
    /// Numeric contracts the policy permits, before per-dtype rules.
    #[serde(deserialize_with = "crate::bounded::permitted")]
    pub permitted_contracts: Vec<ContractKind>,
    /// Loaded modules.
    #[serde(deserialize_with = "crate::bounded::modules")]
    pub modules: Vec<ModuleIdentity>,
    /// The device.
    pub device: DeviceIdentity,
    /// Revisions of the tables that steer route selection.
    pub revisions: Revisions,
    /// The vendor configurations pinned per problem family, sorted: a
    /// `vendor-invariant` route must run its family's. A live context holds
    /// what the backend has pinned so far; a trace's, the pins of its own
    /// routes' families ([`GemmRouteIdentity::pinned_for`]). Absent (and
    /// not framed) where nothing is pinned, so contexts without
    /// `vendor-invariant` routes digest as before.
    #[serde(deserialize_with = "crate::bounded::pins")]
    pub pins: Vec<VendorPin>,
}

/// A context without its pins, as framed fields: what
/// [`GemmRouteIdentity::same_environment`] compares. Comparisons frame this
/// and pair the pins by family ([`crate::pin::pair_by_family`]), so no
/// field list of every pin is ever built.
#[derive(Debug, Clone, Copy)]
pub struct Environment<'a>(&'a GemmRouteIdentity);

impl Framed for GemmRouteIdentity {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        self.environment().visit_fields(v);
        if !self.pins.is_empty() {
            v.field("pins.count", FieldValue::U64(self.pins.len() as u64));
            for p in &self.pins {
                p.visit_fields(v);
            }
        }
    }
}

impl Framed for Environment<'_> {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        let c = self.0;
        c.policy.visit_fields(v);
        let backends: Vec<String> = c.permitted_backends.iter().map(|b| b.to_string()).collect();
        v.field("permitted_backends", FieldValue::StrList(&backends));
        let contracts: Vec<String> = c
            .permitted_contracts
            .iter()
            .map(|k| k.to_string())
            .collect();
        v.field("permitted_contracts", FieldValue::StrList(&contracts));
        v.field("modules.count", FieldValue::U64(c.modules.len() as u64));
        for m in &c.modules {
            m.visit_fields(v);
        }
        c.device.visit_fields(v);
        v.field(
            "revisions.tuning_table",
            FieldValue::U32(c.revisions.tuning_table),
        );
        v.field("revisions.schedule", FieldValue::U32(c.revisions.schedule));
        v.field(
            "revisions.tensor_map",
            FieldValue::U32(c.revisions.tensor_map),
        );
    }
}

impl GemmRouteIdentity {
    /// A context whose permitted backends and contracts are derived from
    /// `policy`: the backends of `modules` that the policy permits (in
    /// module order, each once), and the contract kinds its mode permits.
    pub fn new(
        policy: GemmPolicy,
        modules: Vec<ModuleIdentity>,
        device: DeviceIdentity,
        revisions: Revisions,
    ) -> Self {
        let mut permitted_backends: Vec<PhysicalBackend> = Vec::new();
        for m in &modules {
            if policy.refuse_backend(&m.backend).is_none()
                && !permitted_backends.contains(&m.backend)
            {
                permitted_backends.push(m.backend.clone());
            }
        }
        GemmRouteIdentity {
            policy,
            permitted_backends,
            permitted_contracts: policy.contracts().to_vec(),
            modules,
            device,
            revisions,
            pins: Vec::new(),
        }
    }

    /// The same modules, device, revisions and pins under another policy.
    pub fn with_policy(&self, policy: GemmPolicy) -> Self {
        Self::new(
            policy,
            self.modules.clone(),
            self.device.clone(),
            self.revisions,
        )
        .with_pins(self.pins.clone())
    }

    /// This context with `pins` (sorted, one per family; a later pin of a
    /// family replaces an earlier one).
    pub fn with_pins(mut self, pins: Vec<VendorPin>) -> Self {
        let mut by_family: BTreeMap<PinFamily, VendorPin> = BTreeMap::new();
        for p in pins {
            by_family.insert(p.family.clone(), p);
        }
        self.pins = by_family.into_values().collect();
        self
    }

    /// This context keeping only the pins of the families `routes` run
    /// under the `vendor-invariant` contract: what a trace of `routes`
    /// records, whatever else the process pinned before.
    pub fn pinned_for(mut self, routes: &[crate::route::ResolvedGemmRoute]) -> Self {
        let used: Vec<PinFamily> = routes
            .iter()
            .filter(|r| r.contract.kind.class() == &ContractKind::VendorInvariant)
            .filter_map(PinFamily::of)
            .collect();
        self.pins.retain(|p| used.contains(&p.family));
        self
    }

    /// Whether `other` is this context apart from the pins: the policy,
    /// what it permits, the modules, the device and the revisions. A
    /// replay needs this equality; pins are judged per route.
    pub fn same_environment(&self, other: &GemmRouteIdentity) -> bool {
        self.policy == other.policy
            && self.permitted_backends == other.permitted_backends
            && self.permitted_contracts == other.permitted_contracts
            && self.modules == other.modules
            && self.device == other.device
            && self.revisions == other.revisions
    }

    /// This context without its pins, for comparisons that pair the pins
    /// by family instead of framing them.
    pub fn environment(&self) -> Environment<'_> {
        Environment(self)
    }

    /// Framed digest of the whole context.
    pub fn digest(&self) -> Digest {
        let mut w = DigestWriter::new(CONTEXT_DOMAIN);
        // Field by field, so the framed bytes are hashed as they come: a
        // context of 65,536 pins never sits framed in one buffer (36 MB).
        self.visit_fields(&mut w);
        w.finish()
    }

    /// The loaded module declaring `symbol` as an auxiliary kernel (one
    /// that serves no GEMM), if any.
    pub fn auxiliary_kernel(&self, symbol: &str) -> Option<&ModuleIdentity> {
        self.modules
            .iter()
            .find(|m| m.symbol(symbol).is_some_and(SymbolEntry::is_auxiliary))
    }

    /// The module of `kind` whose digest is `digest`, if loaded.
    pub fn module(&self, kind: &ModuleKind, digest: &Digest) -> Option<&ModuleIdentity> {
        self.modules
            .iter()
            .find(|m| &m.kind == kind && &m.digest == digest)
    }
}

/// Per-machine facts kept for people, never digested or compared: CPU model,
/// core count, runtime CPU features, GPU UUID, host name of the recording.
pub type VolatileMetadata = BTreeMap<String, String>;
