//! The vocabulary routes, modules and policies are written in: logical op,
//! dtype, physical backend, module kind, numeric contract, operand
//! conversion and output ownership.
//!
//! `GemmOp` and `DType` are closed: a new dtype (fp8, int8) is a new variant
//! appended at the end, so stored values keep their encoding (see
//! `docs/design.md`). Their `ALL` lists what the backends run; `RECORDED`
//! adds what is only read from other frameworks' profiles (fp8, `tt`, an
//! unrecorded layout or type). [`PhysicalBackend`], [`ModuleKind`] and
//! [`ContractKind`] are open: besides the built-ins, an engine declares its
//! own (CUTLASS, Triton, nvcc-built code, cuDNN) under a validated [`Name`],
//! without claiming to be one of ours. Built-ins frame exactly as before the
//! vocabulary was opened, so stored digests stay valid; an engine variant
//! frames with an `engine:` prefix that no built-in name has.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident => $s:literal),+ $(,)? }) => {
        named_enum!($(#[$m])* $name { $($(#[$vm])* $var => $s),+ } recorded {});
    };
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident => $s:literal),+ $(,)? }
     recorded { $($(#[$rm:meta])* $rvar:ident => $rs:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum $name { $($(#[$vm])* $var,)+ $($(#[$rm])* $rvar),* }
        impl $name {
            /// Every variant a backend runs, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$var),+];
            /// Every variant, those only recorded from other frameworks'
            /// profiles included.
            pub const RECORDED: &'static [$name] = &[$($name::$var,)+ $($name::$rvar),*];
            /// The stable name used in digests, files and the command line.
            pub fn as_str(&self) -> &'static str {
                match self { $($name::$var => $s,)+ $($name::$rvar => $rs),* }
            }
            /// Parses the stable name.
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$var),)+ $($rs => Some($name::$rvar),)* _ => None }
            }
            /// Whether a backend here runs it (it is one of [`Self::ALL`]);
            /// the others are only read from profiles.
            pub fn is_runnable(&self) -> bool {
                Self::ALL.contains(self)
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }
    };
}

named_enum!(
    /// Logical operation: which operand is stored transposed (row-major storage).
    GemmOp {
        /// `C[m,n] = A[m,k] * B[k,n]`; A stored m x k, B stored k x n.
        Nn => "nn",
        /// A stored transposed (k x m).
        Tn => "tn",
        /// B stored transposed (n x k).
        Nt => "nt",
    }
    recorded {
        /// Both operands stored transposed (seen in profiles: cuBLAS
        /// serves it, no kernel here does).
        Tt => "tt",
        /// The profile did not record the operands' strides.
        Unrecorded => "unrecorded",
    }
);

named_enum!(
    /// Storage dtype of A, B and C. Accumulation is f32 in every contract here.
    DType {
        /// IEEE binary32.
        F32 => "f32",
        /// IEEE binary16.
        F16 => "f16",
        /// bfloat16.
        Bf16 => "bf16",
    }
    recorded {
        /// IEEE binary64 (seen in profiles).
        F64 => "f64",
        /// 8-bit float, 4 exponent and 3 mantissa bits (`float8_e4m3fn`).
        F8e4m3 => "f8e4m3",
        /// 8-bit float, 5 exponent and 2 mantissa bits (`float8_e5m2`).
        F8e5m2 => "f8e5m2",
        /// Signed 8-bit integer.
        I8 => "i8",
        /// The profile did not record the operands' type, or recorded one
        /// this vocabulary does not name.
        Unrecorded => "unrecorded",
    }
);

impl DType {
    /// True for the 16-bit storage types.
    pub fn is_half(&self) -> bool {
        matches!(self, DType::F16 | DType::Bf16)
    }
}

named_enum!(
    /// How operands are converted before the multiply.
    OperandConversion {
        /// Exact widening to f32 (bf16/f16/f32 -> f32 is exact).
        ExactWiden => "exact-widen",
        /// f32 rounded to TF32.
        Tf32Round => "tf32-round",
        /// Whatever the vendor library does.
        VendorDefined => "vendor-defined",
    }
);

named_enum!(
    /// Who owns (writes) each output element.
    OutputOwnership {
        /// One thread/worker computes and stores each element.
        OneOwnerPerElement => "one-owner-per-element",
        /// One worker owns each output tile.
        OneOwnerPerTile => "one-owner-per-tile",
        /// Split-K partials folded in a fixed order by one owner.
        FixedSplitKFold => "fixed-split-k-fold",
        /// Several writers accumulate atomically, in arrival order.
        AtomicAccumulate => "atomic-accumulate",
        /// Decided inside a vendor library.
        VendorDefined => "vendor-defined",
    }
);

/// An engine-declared name: 1 to 64 bytes of lowercase ASCII letters,
/// digits and `.`, `-`, `_`, `+`, starting with a letter or digit.
///
/// Validated on construction and on deserialization. Engine variants frame
/// as `engine:NAME` (and `~`, `:` are not name characters), so a declared
/// name can never frame the same bytes as a built-in, even when it spells
/// one (`engine:cublas` is not `cublas`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Name(String);

/// Longest [`Name`], in bytes.
pub const MAX_NAME_BYTES: usize = 64;

impl Name {
    /// Validates `name`.
    pub fn new(name: impl Into<String>) -> Result<Name, InvalidName> {
        let name = name.into();
        let ok_char = |c: char| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_' | '+')
        };
        let first_ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        if name.len() > MAX_NAME_BYTES || !first_ok || !name.chars().all(ok_char) {
            return Err(InvalidName(name));
        }
        Ok(Name(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Name {
    type Error = InvalidName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Name::new(s)
    }
}

impl From<Name> for String {
    fn from(n: Name) -> String {
        n.0
    }
}

/// A declared name that is not a valid [`Name`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a valid declared name (1 to 64 bytes of a-z, 0-9, '.', '-', '_', '+', starting with a letter or digit)"
)]
pub struct InvalidName(pub String);

/// The physical backend that executed a launch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhysicalBackend {
    /// The CPU reference backend (Rust kernels).
    CpuReference,
    /// Custom CUDA kernels compiled with NVRTC.
    CudaNvrtc,
    /// cuBLAS (sgemm / GemmEx).
    Cublas,
    /// cuBLASLt matmul.
    CublasLt,
    /// A backend an engine declares (CUTLASS, Triton, nvcc-built, cuDNN).
    /// `vendor` says a library picks the kernels (as in cuBLAS or cuDNN),
    /// so it is permitted by the vendor policy modes; otherwise the engine
    /// picks fixed kernels and the deterministic mode permits it.
    Engine {
        /// The declared name.
        name: Name,
        /// True when a library picks the kernels.
        vendor: bool,
    },
}

impl PhysicalBackend {
    /// The built-in backends, in declaration order.
    pub const ALL: &'static [PhysicalBackend] = &[
        PhysicalBackend::CpuReference,
        PhysicalBackend::CudaNvrtc,
        PhysicalBackend::Cublas,
        PhysicalBackend::CublasLt,
    ];

    /// An engine-declared backend.
    pub fn engine(name: &str, vendor: bool) -> Result<PhysicalBackend, InvalidName> {
        Ok(PhysicalBackend::Engine {
            name: Name::new(name)?,
            vendor,
        })
    }

    /// The stable name used in digests and files: the built-in name, or
    /// `engine:NAME` / `engine-vendor:NAME`.
    pub fn as_str(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            PhysicalBackend::CpuReference => "cpu-reference",
            PhysicalBackend::CudaNvrtc => "cuda-nvrtc",
            PhysicalBackend::Cublas => "cublas",
            PhysicalBackend::CublasLt => "cublas-lt",
            PhysicalBackend::Engine { name, vendor } => {
                let prefix = if *vendor { "engine-vendor" } else { "engine" };
                return Cow::Owned(format!("{prefix}:{name}"));
            }
        })
    }

    /// Parses a built-in name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|b| b.as_str() == s).cloned()
    }

    /// The module kind that serves a built-in backend's kernels; `None` for
    /// an engine backend, whose modules declare their own kind.
    pub fn module_kind(&self) -> Option<ModuleKind> {
        match self {
            PhysicalBackend::CpuReference => Some(ModuleKind::CpuReference),
            PhysicalBackend::CudaNvrtc => Some(ModuleKind::Nvrtc),
            PhysicalBackend::Cublas => Some(ModuleKind::Cublas),
            PhysicalBackend::CublasLt => Some(ModuleKind::CublasLt),
            PhysicalBackend::Engine { .. } => None,
        }
    }

    /// True for vendor libraries, whose kernels are chosen by the library.
    pub fn is_vendor(&self) -> bool {
        match self {
            PhysicalBackend::Cublas | PhysicalBackend::CublasLt => true,
            PhysicalBackend::Engine { vendor, .. } => *vendor,
            _ => false,
        }
    }
}

impl fmt::Display for PhysicalBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// Where a kernel symbol comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModuleKind {
    /// The CPU reference module (Rust kernels in this crate).
    CpuReference,
    /// A cubin compiled at run time by NVRTC.
    Nvrtc,
    /// cuBLAS.
    Cublas,
    /// cuBLASLt.
    CublasLt,
    /// A module kind an engine declares (e.g. `nvcc-cubin`, `triton`).
    Engine(Name),
}

impl ModuleKind {
    /// The built-in module kinds, in declaration order.
    pub const ALL: &'static [ModuleKind] = &[
        ModuleKind::CpuReference,
        ModuleKind::Nvrtc,
        ModuleKind::Cublas,
        ModuleKind::CublasLt,
    ];

    /// An engine-declared module kind.
    pub fn engine(name: &str) -> Result<ModuleKind, InvalidName> {
        Ok(ModuleKind::Engine(Name::new(name)?))
    }

    /// The stable name: the built-in name, or `engine:NAME`.
    pub fn as_str(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            ModuleKind::CpuReference => "cpu-reference",
            ModuleKind::Nvrtc => "nvrtc",
            ModuleKind::Cublas => "cublas",
            ModuleKind::CublasLt => "cublas-lt",
            ModuleKind::Engine(name) => return Cow::Owned(format!("engine:{name}")),
        })
    }

    /// Parses a built-in name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|k| k.as_str() == s).cloned()
    }
}

impl fmt::Display for ModuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// Kind of numeric contract: how each output's reduction is ordered and rounded.
///
/// An engine contract's `like` decodes only as a built-in kind, so the
/// "never itself `Engine`" rule holds for every decoded value too and a
/// hostile file cannot nest engine contracts deep enough to exhaust the stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContractKind {
    /// One ascending-k `fma` chain from zero per output, RNE output rounding.
    /// The numeric reference: equal bits on every device that honours it.
    ScalarFma,
    /// Contiguous k-chunks, each an ascending fma chain, folded in fixed chunk order.
    SplitKFixed,
    /// Tensor-core tiles whose per-element order is independent of the tile family.
    TensorCoreTileParity,
    /// Deterministic TF32 rounding of f32 operands.
    Tf32,
    /// Vendor library, pedantic f32 compute.
    VendorPedantic,
    /// Vendor library, fast math (TF32) allowed.
    VendorFast,
    /// Split-K partials folded in completion order: nondeterministic by design.
    AtomicUnordered,
    /// Vendor library, fast math, run in one configuration pinned per
    /// problem family (op, dtype, k, n): no split-K, no reduction scheme,
    /// at most [`crate::pin::VENDOR_INVARIANT_MAX_WORKSPACE_BYTES`] of
    /// workspace, so each output's reduction runs in one block in the
    /// kernel's k order whatever m is. The guard checks the promise against
    /// the route's vendor block and the configuration against the live
    /// context's pin ([`crate::pin::VendorPin`]).
    VendorInvariant,
    /// A contract an engine declares. `like` is the built-in kind whose
    /// policy rules it follows (e.g. a CUTLASS stream-K kernel with a fixed
    /// fold is `like` [`ContractKind::SplitKFixed`]); two engine contracts
    /// with different names are different contracts for every comparison.
    Engine {
        /// The declared name.
        name: Name,
        /// The built-in kind whose policy rules apply. Never itself `Engine`.
        #[serde(deserialize_with = "builtin_like")]
        like: Box<ContractKind>,
    },
}

/// The built-in contract kinds, in [`ContractKind`]'s order (so they
/// decode from the same bytes and index [`ContractKind::ALL`]).
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
enum BuiltinContractKind {
    ScalarFma,
    SplitKFixed,
    TensorCoreTileParity,
    Tf32,
    VendorPedantic,
    VendorFast,
    AtomicUnordered,
    VendorInvariant,
}

/// Decodes an engine contract's `like`: a built-in kind, never `Engine`.
fn builtin_like<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Box<ContractKind>, D::Error> {
    let k = BuiltinContractKind::deserialize(d)?;
    Ok(Box::new(ContractKind::ALL[k as usize].clone()))
}

impl ContractKind {
    /// The built-in kinds, in declaration order.
    pub const ALL: &'static [ContractKind] = &[
        ContractKind::ScalarFma,
        ContractKind::SplitKFixed,
        ContractKind::TensorCoreTileParity,
        ContractKind::Tf32,
        ContractKind::VendorPedantic,
        ContractKind::VendorFast,
        ContractKind::AtomicUnordered,
        ContractKind::VendorInvariant,
    ];

    /// An engine-declared contract that follows `like`'s policy rules.
    /// Refused when `like` is itself an engine contract.
    pub fn engine(name: &str, like: ContractKind) -> Result<ContractKind, InvalidName> {
        if matches!(like, ContractKind::Engine { .. }) {
            return Err(InvalidName(format!(
                "{name} (like must be a built-in kind)"
            )));
        }
        Ok(ContractKind::Engine {
            name: Name::new(name)?,
            like: Box::new(like),
        })
    }

    /// The stable name: the built-in name, or `engine:NAME~LIKE`.
    pub fn as_str(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            ContractKind::ScalarFma => "scalar-fma",
            ContractKind::SplitKFixed => "split-k-fixed",
            ContractKind::TensorCoreTileParity => "tensor-core-tile-parity",
            ContractKind::Tf32 => "tf32",
            ContractKind::VendorPedantic => "vendor-pedantic",
            ContractKind::VendorFast => "vendor-fast",
            ContractKind::AtomicUnordered => "atomic-unordered",
            ContractKind::VendorInvariant => "vendor-invariant",
            ContractKind::Engine { name, like } => {
                return Cow::Owned(format!("engine:{name}~{}", like.as_str()));
            }
        })
    }

    /// Parses a built-in name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|k| k.as_str() == s).cloned()
    }

    /// The built-in kind whose policy rules apply: itself, or an engine
    /// contract's `like`.
    pub fn class(&self) -> &ContractKind {
        match self {
            ContractKind::Engine { like, .. } => like.class(),
            other => other,
        }
    }
}

impl fmt::Display for ContractKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `like` is never an engine contract, decoded or not, and nesting is
    /// refused at its first level: a trace of any depth is an error, never
    /// a stack overflow.
    #[test]
    fn decoded_engine_contracts_follow_a_built_in_kind() {
        // The decode-only list indexes `ALL`: same names, same order.
        for (i, k) in ContractKind::ALL.iter().enumerate() {
            let json = serde_json::to_string(k).unwrap();
            let b: BuiltinContractKind = serde_json::from_str(&json).unwrap();
            assert_eq!(b as usize, i, "{k}");
        }
        let one = ContractKind::engine("fold", ContractKind::SplitKFixed).unwrap();
        let json = serde_json::to_string(&one).unwrap();
        assert_eq!(serde_json::from_str::<ContractKind>(&json).unwrap(), one);
        let nested = |depth: usize| {
            let mut k = ContractKind::ScalarFma;
            for _ in 0..depth {
                k = ContractKind::Engine {
                    name: Name::new("x").unwrap(),
                    like: Box::new(k),
                };
            }
            k
        };
        let e = serde_json::from_str::<ContractKind>(&serde_json::to_string(&nested(2)).unwrap());
        assert!(e.is_err(), "{e:?}");
        // The binary trace format, through the file codec.
        let mut t = crate::testkit::sample_trace(1);
        for depth in [2, 500] {
            t.routes[0].contract.kind = nested(depth);
            // The writer refuses what the reader would; bytes made past it
            // are refused by the reader.
            assert!(t.to_bytes().is_err(), "depth {depth} written");
            let codec = crate::trace::codec::encode_payload(&t).unwrap();
            let bytes = crate::trace::codec::seal(&codec);
            assert!(
                crate::RecordedGemmTrace::from_bytes(&bytes).is_err(),
                "depth {depth}"
            );
        }
        t.routes[0].contract.kind = nested(1);
        let bytes = t.to_bytes().unwrap();
        assert!(crate::RecordedGemmTrace::from_bytes(&bytes).is_ok());
    }

    #[test]
    fn names_are_validated() {
        assert!(Name::new("cutlass-3.5").is_ok());
        assert!(Name::new("nvcc_cubin+sm90a").is_ok());
        for bad in ["", "-x", "Cutlass", "a b", "a:b", "é", &"x".repeat(65)] {
            assert!(Name::new(bad).is_err(), "{bad:?} accepted");
        }
        // Deserialization validates too.
        assert!(serde_json::from_str::<Name>("\"ok\"").is_ok());
        assert!(serde_json::from_str::<Name>("\"Not:ok\"").is_err());
    }

    #[test]
    fn engine_variants_never_frame_as_builtins() {
        let builtin_names: Vec<String> = PhysicalBackend::ALL
            .iter()
            .map(|b| b.as_str().into_owned())
            .chain(ModuleKind::ALL.iter().map(|k| k.as_str().into_owned()))
            .chain(ContractKind::ALL.iter().map(|k| k.as_str().into_owned()))
            .collect();
        for name in ["cublas", "cuda-nvrtc", "scalar-fma", "nvrtc"] {
            let b = PhysicalBackend::engine(name, false).unwrap();
            let v = PhysicalBackend::engine(name, true).unwrap();
            let m = ModuleKind::engine(name).unwrap();
            let c = ContractKind::engine(name, ContractKind::ScalarFma).unwrap();
            for s in [b.as_str(), v.as_str(), m.as_str(), c.as_str()] {
                assert!(!builtin_names.contains(&s.to_string()), "{s} collides");
            }
            assert_ne!(b.as_str(), v.as_str());
        }
        for b in PhysicalBackend::ALL {
            assert_eq!(PhysicalBackend::parse(&b.as_str()).as_ref(), Some(b));
        }
    }

    #[test]
    fn engine_contracts_follow_their_class() {
        let c = ContractKind::engine("cutlass-streamk", ContractKind::SplitKFixed).unwrap();
        assert_eq!(c.class(), &ContractKind::SplitKFixed);
        assert_eq!(c.as_str(), "engine:cutlass-streamk~split-k-fixed");
        assert!(ContractKind::engine("x", c).is_err());
    }
}
