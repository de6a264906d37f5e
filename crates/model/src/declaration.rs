//! What a kernel symbol declares about what it launches, and the check of
//! a route against it.
//!
//! A module's symbols say which (op, dtype, contract, tensor cores,
//! operand conversion) they serve ([`crate::identity::Service`]); a
//! [`SymbolDeclaration`] says the rest that the policy can judge without a
//! golden: the instruction, who owns each output element, how the split
//! count shows in the launch, the tile and k block where they are fixed,
//! whether operands are read through TMA tensor maps, the device
//! capabilities relied on and, for a vendor library's entry point, what
//! the library configuration permits. Replay validation
//! ([`crate::CapturedGemmGraphPlan::with_validated_launch`]) refuses a
//! route that contradicts its symbol's declaration, naming the field.
//!
//! Which route fields this covers, and why the others can only be judged by
//! a golden, is [`crate::route::FIELD_CLASSES`] (and `docs/design.md`).

use crate::digest::Digest;
use crate::route::{ResolvedGemmRoute, TileShape};
use crate::vocab::{ContractKind, DType, OutputOwnership};
use serde::{Deserialize, Serialize};
use std::fmt;

/// How a route's split count (`contract.splits`) shows in its launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SplitRule {
    /// The kernel does not split k: the count is 1.
    Unsplit,
    /// One grid z slice per split: the count equals `launch.grid[2]`.
    GridZ,
    /// Each split reduces one k block: `bk` is `ceil(k / splits)`. Two
    /// counts with the same k block (possible only when k < splits²) are
    /// told apart by the golden.
    KBlock,
    /// A vendor library's split-K: the count is `max(1, vendor.split_k)`.
    Vendor,
    /// The invariant ladder's k chunks: the count is
    /// [`crate::kernels::ladder_chunks`] of the route's k and n, so no
    /// route of one problem family may fold its k in another order.
    LadderChunks,
    /// [`SplitRule::LadderChunks`], and more than one: a rung that folds
    /// the chunks in registers on another kernel's tile (the 128x128
    /// folding rung, `wgmma-small`'s tile) would be that kernel under
    /// another name with one chunk, which no other route field tells
    /// apart.
    LadderFoldChunks,
}

impl SplitRule {
    /// The stable name.
    pub fn as_str(&self) -> &'static str {
        match self {
            SplitRule::Unsplit => "unsplit",
            SplitRule::GridZ => "grid-z",
            SplitRule::KBlock => "k-block",
            SplitRule::Vendor => "vendor",
            SplitRule::LadderChunks => "ladder-chunks",
            SplitRule::LadderFoldChunks => "ladder-fold-chunks",
        }
    }
}

/// The k extent a block reduces per step (`bk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BkRule {
    /// A fixed k block (0: the kernel does not say, as a vendor library).
    Fixed(u32),
    /// The whole of one split: `ceil(k / splits)`.
    PerSplit,
}

/// What a vendor library's configuration permits its calls to choose.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VendorPermits {
    /// The library and version every call reports (`vendor.library_version`).
    pub library_version: String,
    /// Largest split-K count the configuration lets the library pick; -1
    /// when the library does not expose it (cuBLAS): every call must then
    /// report -1.
    pub max_split_k: i64,
    /// Reduction schemes the library may report (cuBLASLt's
    /// `CUBLASLT_REDUCTION_SCHEME_*` values; -1 when not exposed), sorted.
    pub reduction_schemes: Vec<i64>,
    /// Largest workspace a call is given, in bytes.
    pub max_workspace_bytes: u64,
    /// The call configurations (compute type, math mode, algorithm
    /// selection) the entry point is set up with, per dtype and contract:
    /// a vendor route's `compiler.options_digest` must be one declared for
    /// its own dtype and contract, so a pedantic call relabelled fast (or
    /// the reverse) is refused even where the two serve alike. Empty: the
    /// symbol declares none, and the golden alone judges the digest.
    pub configurations: Vec<VendorConfiguration>,
}

/// One call configuration a vendor entry point is set up with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VendorConfiguration {
    /// The dtype it serves.
    pub dtype: DType,
    /// The contract it serves (the math mode: pedantic or fast).
    pub contract: ContractKind,
    /// Digest of the configuration, as the route's `compiler.options_digest`.
    pub options_digest: Digest,
}

/// What a symbol launches, as far as the policy can judge it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SymbolDeclaration {
    /// Instruction family, e.g. `scalar-fma`, `mma.sync`, `vendor-defined`.
    pub instruction_family: String,
    /// Instruction shape, e.g. `1x1x1`, `m16n8k16`.
    pub instruction_shape: String,
    /// Who writes each output element.
    pub output_ownership: OutputOwnership,
    /// How the split count shows in the launch.
    pub splits: SplitRule,
    /// The output tile, where the kernel fixes it.
    pub tile: Option<TileShape>,
    /// The k block.
    pub bk: BkRule,
    /// Pipeline stages, where the kernel fixes them.
    pub stages: Option<u32>,
    /// Whether the kernel reads its operands through TMA tensor maps.
    pub tensor_map: bool,
    /// Device capabilities the kernel relies on, sorted.
    pub device_capabilities: Vec<String>,
    /// For a vendor library's entry point: what its configuration permits.
    pub vendor: Option<VendorPermits>,
}

impl SymbolDeclaration {
    /// A declaration for a custom kernel: instruction, ownership, split
    /// rule and k block; no fixed tile or stages, no tensor map, no device
    /// capabilities, no vendor block. Add the rest with the `with_*`
    /// methods.
    pub fn new(
        instruction_family: impl Into<String>,
        instruction_shape: impl Into<String>,
        output_ownership: OutputOwnership,
        splits: SplitRule,
        bk: BkRule,
    ) -> Self {
        SymbolDeclaration {
            instruction_family: instruction_family.into(),
            instruction_shape: instruction_shape.into(),
            output_ownership,
            splits,
            tile: None,
            bk,
            stages: None,
            tensor_map: false,
            device_capabilities: Vec::new(),
            vendor: None,
        }
    }

    /// Fixes the output tile and pipeline stages.
    pub fn with_tile(mut self, tile: TileShape, stages: u32) -> Self {
        self.tile = Some(tile);
        self.stages = Some(stages);
        self
    }

    /// Declares that operands are read through TMA tensor maps.
    pub fn with_tensor_map(mut self) -> Self {
        self.tensor_map = true;
        self
    }

    /// Declares the device capabilities relied on (sorted here).
    pub fn with_capabilities(mut self, mut caps: Vec<String>) -> Self {
        caps.sort();
        caps.dedup();
        self.device_capabilities = caps;
        self
    }

    /// Declares a vendor library's permits (reduction schemes sorted here).
    pub fn with_vendor(mut self, mut permits: VendorPermits) -> Self {
        permits.reduction_schemes.sort_unstable();
        permits.reduction_schemes.dedup();
        permits.configurations.sort();
        permits.configurations.dedup();
        self.vendor = Some(permits);
        self
    }

    /// One line per declared fact, for framing the context digest and for
    /// people (`show`, `diff`).
    pub fn facts(&self) -> Vec<String> {
        let mut out = vec![
            format!(
                "instruction {} {}",
                self.instruction_family, self.instruction_shape
            ),
            format!("ownership {}", self.output_ownership),
            format!("splits {}", self.splits.as_str()),
            match self.bk {
                BkRule::Fixed(b) => format!("bk {b}"),
                BkRule::PerSplit => "bk per-split".into(),
            },
            format!("tensor-map {}", self.tensor_map),
            format!("capabilities {}", self.device_capabilities.join(",")),
        ];
        if let Some(t) = self.tile {
            out.push(format!("tile {}x{}x{}", t.m, t.n, t.k));
        }
        if let Some(s) = self.stages {
            out.push(format!("stages {s}"));
        }
        if let Some(v) = &self.vendor {
            out.push(format!(
                "vendor {:?} split-k<={} reduction={:?} workspace<={}",
                v.library_version, v.max_split_k, v.reduction_schemes, v.max_workspace_bytes
            ));
            for c in &v.configurations {
                out.push(format!(
                    "configuration {} {} {}",
                    c.dtype, c.contract, c.options_digest
                ));
            }
        }
        out
    }

    /// The first call configuration declared for `dtype` under `contract`.
    pub fn configuration(&self, dtype: DType, contract: &ContractKind) -> Option<&Digest> {
        self.vendor.as_ref().and_then(|v| {
            v.configurations
                .iter()
                .find(|c| c.dtype == dtype && &c.contract == contract)
                .map(|c| &c.options_digest)
        })
    }

    /// The first field of `route` that contradicts this declaration: its
    /// tag, what the declaration expects and what the route holds.
    pub fn contradiction(&self, route: &ResolvedGemmRoute) -> Option<Contradiction> {
        let c = |field: &'static str, expected: String, found: String| {
            Some(Contradiction {
                field,
                expected,
                found,
            })
        };
        if route.instruction_family != self.instruction_family {
            return c(
                "instruction_family",
                format!("{:?}", self.instruction_family),
                format!("{:?}", route.instruction_family),
            );
        }
        if route.instruction_shape != self.instruction_shape {
            return c(
                "instruction_shape",
                format!("{:?}", self.instruction_shape),
                format!("{:?}", route.instruction_shape),
            );
        }
        if route.output_ownership != self.output_ownership {
            return c(
                "output_ownership",
                self.output_ownership.to_string(),
                route.output_ownership.to_string(),
            );
        }
        if let Some(x) = self.split_contradiction(route) {
            return Some(x);
        }
        if let Some(t) = self.tile {
            for (field, want, got) in [
                ("tile.m", t.m, route.tile.m),
                ("tile.n", t.n, route.tile.n),
                ("tile.k", t.k, route.tile.k),
            ] {
                if want != got {
                    return c(field, want.to_string(), got.to_string());
                }
            }
        }
        let bk = match self.bk {
            BkRule::Fixed(b) => b as u64,
            BkRule::PerSplit => route
                .shape
                .k
                .div_ceil(route.contract.splits.max(1) as u64)
                .min(u32::MAX as u64),
        };
        if route.bk as u64 != bk {
            return c("bk", bk.to_string(), route.bk.to_string());
        }
        if let Some(s) = self.stages
            && route.stages != s
        {
            return c("stages", s.to_string(), route.stages.to_string());
        }
        if route.tensor_map.is_some() != self.tensor_map {
            let say = |b: bool| if b { "a tensor map" } else { "no tensor map" };
            return c(
                "tensor_map.digest",
                say(self.tensor_map).into(),
                say(route.tensor_map.is_some()).into(),
            );
        }
        if route.device_capabilities != self.device_capabilities {
            return c(
                "device_capabilities",
                format!("{:?}", self.device_capabilities),
                format!("{:?}", route.device_capabilities),
            );
        }
        self.vendor_contradiction(route)
    }

    fn split_contradiction(&self, route: &ResolvedGemmRoute) -> Option<Contradiction> {
        let splits = route.contract.splits;
        let expected: Option<u64> = match self.splits {
            SplitRule::Unsplit => Some(1),
            SplitRule::GridZ => Some(route.launch.grid[2] as u64),
            // Checked through `bk` (which this rule ties to the count).
            SplitRule::KBlock => None,
            SplitRule::Vendor => Some(
                route
                    .vendor
                    .as_ref()
                    .map_or(1, |v| v.split_k.clamp(1, u32::MAX as i64) as u64),
            ),
            SplitRule::LadderChunks | SplitRule::LadderFoldChunks => Some(u64::from(
                crate::kernels::ladder_chunks(route.shape.k, route.shape.n),
            )),
        };
        let one_fold = self.splits == SplitRule::LadderFoldChunks && expected == Some(1);
        let bad = splits == 0 || one_fold || expected.is_some_and(|e| e != splits as u64);
        bad.then(|| Contradiction {
            field: "contract.splits",
            expected: match expected {
                _ if one_fold => format!(
                    "more than 1 ({} split rule; k = {} n = {} has 1 chunk)",
                    self.splits.as_str(),
                    route.shape.k,
                    route.shape.n
                ),
                Some(e) => format!("{e} ({} split rule)", self.splits.as_str()),
                None => "at least 1".into(),
            },
            found: splits.to_string(),
        })
    }

    fn vendor_contradiction(&self, route: &ResolvedGemmRoute) -> Option<Contradiction> {
        let c = |field: &'static str, expected: String, found: String| {
            Some(Contradiction {
                field,
                expected,
                found,
            })
        };
        let (permits, v) = match (&self.vendor, &route.vendor) {
            (None, None) => return None,
            (Some(p), Some(v)) => (p, v),
            (p, v) => {
                let say = |b: bool| {
                    if b {
                        "a vendor block"
                    } else {
                        "no vendor block"
                    }
                };
                return c(
                    "vendor.library_version",
                    say(p.is_some()).into(),
                    say(v.is_some()).into(),
                );
            }
        };
        if v.library_version != permits.library_version {
            return c(
                "vendor.library_version",
                format!("{:?}", permits.library_version),
                format!("{:?}", v.library_version),
            );
        }
        let split_ok = if permits.max_split_k < 0 {
            v.split_k == -1
        } else {
            (1..=permits.max_split_k).contains(&v.split_k)
        };
        if !split_ok {
            return c(
                "vendor.split_k",
                if permits.max_split_k < 0 {
                    "-1 (not exposed)".into()
                } else {
                    format!("1..={}", permits.max_split_k)
                },
                v.split_k.to_string(),
            );
        }
        if !permits.reduction_schemes.contains(&v.reduction_scheme) {
            return c(
                "vendor.reduction_scheme",
                format!("one of {:?}", permits.reduction_schemes),
                v.reduction_scheme.to_string(),
            );
        }
        if v.workspace_bytes > permits.max_workspace_bytes {
            return c(
                "vendor.workspace_bytes",
                format!("at most {}", permits.max_workspace_bytes),
                v.workspace_bytes.to_string(),
            );
        }
        configuration_contradiction(&permits.configurations, route)
    }
}

/// Whether the route's call configuration is one declared for its dtype
/// and contract; a configuration declared for another contract names the
/// contract (the call was set up for that one).
fn configuration_contradiction(
    configurations: &[VendorConfiguration],
    route: &ResolvedGemmRoute,
) -> Option<Contradiction> {
    if configurations.is_empty() {
        return None;
    }
    let digest = &route.compiler.options_digest;
    let own =
        |c: &&VendorConfiguration| c.dtype == route.dtype && c.contract == route.contract.kind;
    if configurations
        .iter()
        .filter(own)
        .any(|c| &c.options_digest == digest)
    {
        return None;
    }
    let found = format!("{} {} {digest}", route.dtype, route.contract.kind);
    match configurations.iter().find(|c| &c.options_digest == digest) {
        Some(other) => Some(Contradiction {
            field: "contract.kind",
            expected: format!(
                "{} (the call is configured for {} {})",
                other.contract, other.dtype, other.contract
            ),
            found: route.contract.kind.to_string(),
        }),
        None => Some(Contradiction {
            field: "compiler.options_digest",
            expected: format!(
                "a configuration declared for {} {}",
                route.dtype, route.contract.kind
            ),
            found,
        }),
    }
}

/// A route field that contradicts its symbol's declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contradiction {
    /// The route field tag.
    pub field: &'static str,
    /// What the declaration expects.
    pub expected: String,
    /// What the route holds.
    pub found: String,
}

impl fmt::Display for Contradiction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, found {}",
            self.field, self.expected, self.found
        )
    }
}
