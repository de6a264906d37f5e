//! Workloads: named lists of GEMMs with seeded inputs, from built-ins or
//! from TOML/JSON files.

use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::kernels::{GemmSpec, KernelFamily, MAX_ELEMENTS, RouteChoice};
use crate::policy::PolicyMode;
use crate::vocab::{DType, GemmOp};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Most GEMMs in one workload.
pub const MAX_GEMMS: usize = 4096;

/// Longest workload or GEMM name, in bytes: names end up in tables,
/// reports, JUnit files and file names.
pub const MAX_NAME_BYTES: usize = 128;

/// Why a workload definition was refused; each names the GEMM at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    /// Not valid JSON or TOML of a workload (the parser's message).
    #[error("{0}")]
    Syntax(String),
    /// TOML without the `toml` feature.
    #[error("TOML workloads need gemm-audit's `toml` feature (JSON workloads do not)")]
    TomlUnsupported,
    /// A file that is neither `.toml` nor `.json`.
    #[error("workload files must end in .toml or .json")]
    UnknownExtension,
    /// The workload's name is empty.
    #[error("workload name is empty")]
    EmptyName,
    /// The workload lists no GEMM.
    #[error("workload lists no GEMMs")]
    NoGemms,
    /// More GEMMs than [`MAX_GEMMS`].
    #[error("{0} GEMMs, over the limit of {MAX_GEMMS}")]
    TooManyGemms(usize),
    /// A name over [`MAX_NAME_BYTES`] (`what`: `workload name` or `GEMM
    /// name`; `shown`: its first characters).
    #[error("{what} {shown:?}... is {bytes} bytes, over the limit of {MAX_NAME_BYTES}")]
    NameTooLong {
        /// Which name.
        what: &'static str,
        /// Its first 32 characters.
        shown: String,
        /// Its length in bytes.
        bytes: usize,
    },
    /// A name holding control characters (they would reach terminals,
    /// reports and XML).
    #[error("{what} {name:?} holds control characters")]
    ControlCharacters {
        /// Which name.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// A GEMM with an empty name.
    #[error("a GEMM has an empty name")]
    EmptyGemmName,
    /// Two GEMMs of one name.
    #[error("GEMM name {0:?} appears twice")]
    DuplicateGemm(String),
    /// A vendor route without a vendor policy, or the reverse.
    #[error("GEMM {gemm:?}: route {route} needs policy {needs}")]
    PolicyMismatch {
        /// The GEMM.
        gemm: String,
        /// Its route.
        route: String,
        /// The policy it needs.
        needs: &'static str,
    },
    /// A dtype or op only profiles record.
    #[error("GEMM {gemm:?}: {what} is only read from profiles; a workload runs {runs}")]
    NotRunnable {
        /// The GEMM.
        gemm: String,
        /// `dtype bf8` or `op batched`, say.
        what: String,
        /// What a workload may run instead.
        runs: &'static str,
    },
    /// m, k or n of 0.
    #[error("GEMM {gemm:?}: {dim} must be at least 1")]
    ZeroDimension {
        /// The GEMM.
        gemm: String,
        /// `m`, `k` or `n`.
        dim: &'static str,
    },
    /// An operand over [`MAX_ELEMENTS`].
    #[error("GEMM {gemm:?}: {operand} is over {MAX_ELEMENTS} elements")]
    TooLarge {
        /// The GEMM.
        gemm: String,
        /// `A (m*k)`, `B (k*n)` or `C (m*n)`.
        operand: &'static str,
    },
}

/// Refuses a name that is too long or holds control characters (which would
/// reach terminals, reports and XML unescaped).
fn check_name(what: &'static str, name: &str) -> Result<(), WorkloadError> {
    if name.len() > MAX_NAME_BYTES {
        return Err(WorkloadError::NameTooLong {
            what,
            shown: name.chars().take(32).collect(),
            bytes: name.len(),
        });
    }
    if name.chars().any(char::is_control) {
        return Err(WorkloadError::ControlCharacters {
            what,
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Largest workload file read, in bytes.
pub const MAX_WORKLOAD_FILE_BYTES: u64 = 1 << 20;

/// A named list of GEMMs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The workload's name: traces and goldens are keyed by it.
    pub name: String,
    /// Free text for people; not part of the workload's digest.
    #[serde(default)]
    pub description: String,
    /// The default input seed of its GEMMs (a GEMM may set its own).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The policy mode the workload is recorded under; default: the
    /// backend's own (deterministic). Vendor routes need a `cublas-*` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyMode>,
    /// The GEMMs, in launch order (`[[gemm]]` tables in a file).
    #[serde(rename = "gemm")]
    pub gemms: Vec<GemmSpec>,
}

fn default_seed() -> u64 {
    0x6a09_e667
}

/// Names of the built-in workloads.
pub const BUILTINS: [&str; 8] = [
    "transformer-block",
    "m-sweep",
    "nondeterministic-control",
    "tensor-core-sweep",
    "vendor-sweep",
    "batch-invariant",
    "wgmma-sweep",
    "ladder-sweep",
];

impl Workload {
    /// A built-in workload by name.
    pub fn builtin(name: &str) -> Option<Workload> {
        match name {
            "transformer-block" => Some(transformer_block()),
            "m-sweep" => Some(m_sweep()),
            "nondeterministic-control" => Some(control()),
            "tensor-core-sweep" => Some(tensor_core_sweep()),
            "vendor-sweep" => Some(vendor_sweep()),
            "batch-invariant" => Some(batch_invariant()),
            "wgmma-sweep" => Some(wgmma_sweep()),
            "ladder-sweep" => Some(ladder_sweep()),
            _ => None,
        }
    }

    /// A built-in name, or a path to a `.toml` or `.json` workload file.
    pub fn load(name_or_path: &str) -> Result<Workload> {
        if let Some(w) = Workload::builtin(name_or_path) {
            return Ok(w);
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            return Err(Error::workload(
                name_or_path,
                format!("not a built-in ({}) and no such file", BUILTINS.join(", ")),
            ));
        }
        let bytes = crate::util::read_regular(path, MAX_WORKLOAD_FILE_BYTES)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::workload(name_or_path, "the file is not UTF-8 text"))?;
        let w = match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => Workload::from_toml(&text),
            Some("json") => Workload::from_json(&text),
            _ => Err(WorkloadError::UnknownExtension),
        }
        .map_err(|e| Error::workload(name_or_path, e.to_string()))?;
        w.validate()
            .map_err(|e| Error::workload(name_or_path, e.to_string()))?;
        Ok(w)
    }

    /// Parses and validates a TOML workload (needs the `toml` feature,
    /// which brings the TOML parser; the command line enables it).
    #[cfg(feature = "toml")]
    pub fn from_toml(text: &str) -> Result<Workload, WorkloadError> {
        let w: Workload = toml::from_str(text).map_err(|e| WorkloadError::Syntax(e.to_string()))?;
        w.validate()?;
        Ok(w)
    }

    /// Without the `toml` feature there is no TOML parser: JSON workloads
    /// work, TOML ones are refused with a message saying so.
    #[cfg(not(feature = "toml"))]
    pub fn from_toml(_text: &str) -> Result<Workload, WorkloadError> {
        Err(WorkloadError::TomlUnsupported)
    }

    /// Parses and validates a JSON workload.
    pub fn from_json(text: &str) -> Result<Workload, WorkloadError> {
        let w: Workload =
            serde_json::from_str(text).map_err(|e| WorkloadError::Syntax(e.to_string()))?;
        w.validate()?;
        Ok(w)
    }

    /// Checks names, sizes and counts; the message names the GEMM at fault.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.name.trim().is_empty() {
            return Err(WorkloadError::EmptyName);
        }
        check_name("workload name", &self.name)?;
        if self.gemms.is_empty() {
            return Err(WorkloadError::NoGemms);
        }
        if self.gemms.len() > MAX_GEMMS {
            return Err(WorkloadError::TooManyGemms(self.gemms.len()));
        }
        let vendor_policy = matches!(
            self.policy,
            Some(PolicyMode::CublasFast | PolicyMode::CublasPedantic)
        );
        let mut names = std::collections::HashSet::new();
        for g in &self.gemms {
            if g.route.is_vendor() != vendor_policy {
                return Err(WorkloadError::PolicyMismatch {
                    gemm: g.name.clone(),
                    route: g.route.to_string(),
                    needs: if g.route.is_vendor() {
                        "cublas-fast or cublas-pedantic"
                    } else {
                        "deterministic (the default)"
                    },
                });
            }
            if g.name.trim().is_empty() {
                return Err(WorkloadError::EmptyGemmName);
            }
            check_name("GEMM name", &g.name)?;
            if !g.dtype.is_runnable() {
                return Err(WorkloadError::NotRunnable {
                    gemm: g.name.clone(),
                    what: format!("dtype {}", g.dtype),
                    runs: "f32, f16 or bf16",
                });
            }
            if !g.op.is_runnable() {
                return Err(WorkloadError::NotRunnable {
                    gemm: g.name.clone(),
                    what: format!("op {}", g.op),
                    runs: "nn, tn or nt",
                });
            }
            if !names.insert(g.name.as_str()) {
                return Err(WorkloadError::DuplicateGemm(g.name.clone()));
            }
            for (dim, v) in [("m", g.m), ("k", g.k), ("n", g.n)] {
                if v == 0 {
                    return Err(WorkloadError::ZeroDimension {
                        gemm: g.name.clone(),
                        dim,
                    });
                }
            }
            for (operand, a, b) in [
                ("A (m*k)", g.m, g.k),
                ("B (k*n)", g.k, g.n),
                ("C (m*n)", g.m, g.n),
            ] {
                if a.checked_mul(b).is_none_or(|e| e > MAX_ELEMENTS) {
                    return Err(WorkloadError::TooLarge {
                        gemm: g.name.clone(),
                        operand,
                    });
                }
            }
        }
        Ok(())
    }

    /// Framed digest of the definition (what the inputs and routes depend on).
    pub fn digest(&self) -> Digest {
        let mut w = DigestWriter::new("gemm-audit/workload/v1");
        w.field("name", FieldValue::Str(&self.name));
        w.field("seed", FieldValue::U64(self.seed));
        w.field(
            "policy",
            self.policy
                .map_or(FieldValue::Absent, |p| FieldValue::Str(p.as_str())),
        );
        w.field("gemms", FieldValue::U64(self.gemms.len() as u64));
        for g in &self.gemms {
            w.field("gemm.name", FieldValue::Str(&g.name));
            w.field("gemm.op", FieldValue::Str(g.op.as_str()));
            w.field("gemm.dtype", FieldValue::Str(g.dtype.as_str()));
            w.field("gemm.m", FieldValue::U64(g.m));
            w.field("gemm.k", FieldValue::U64(g.k));
            w.field("gemm.n", FieldValue::U64(g.n));
            let route = g.route.to_string();
            w.field("gemm.route", FieldValue::Str(&route));
            w.field("gemm.seed", FieldValue::U64(g.input_seed(self.seed)));
        }
        w.finish()
    }
}

/// A transformer block's projections (QKV, attention output, MLP up and
/// down), d_model 256 and d_ff 1024, at batch sizes 1, 8 and 64, bf16, on
/// the tiled route.
fn transformer_block() -> Workload {
    let (d, ff) = (256, 1024);
    let mut gemms = Vec::new();
    for b in [1u64, 8, 64] {
        for (proj, k, n) in [
            ("qkv", d, 3 * d),
            ("attn-out", d, d),
            ("mlp-up", d, ff),
            ("mlp-down", ff, d),
        ] {
            gemms.push(GemmSpec::new(
                format!("{proj}@b{b}"),
                DType::Bf16,
                b,
                k,
                n,
                RouteChoice::Kernel(KernelFamily::Tiled),
            ));
        }
    }
    Workload {
        name: "transformer-block".into(),
        description: "transformer block projections (qkv, attn-out, mlp-up, mlp-down) at batch 1, 8, 64; bf16, tiled"
            .into(),
        seed: default_seed(),
        policy: None,
        gemms,
    }
}

/// One shape (k 1024, n 256, f32) at m = 1..128 on four routes: scalar
/// FMA, tiled (same contract, other kernel), fixed split-K, and the policy dispatcher (split-K for small m, tiled for
/// large m: deterministic, yet not batch invariant). f32 output, because
/// rounding to bf16 would hide most one-ulp f32 differences.
fn m_sweep() -> Workload {
    let mut gemms = Vec::new();
    for (tag, route) in [
        ("scalar-fma", RouteChoice::Kernel(KernelFamily::ScalarFma)),
        ("tiled", RouteChoice::Kernel(KernelFamily::Tiled)),
        (
            "split-k-fixed",
            RouteChoice::Kernel(KernelFamily::SplitKFixed(4)),
        ),
        ("policy", RouteChoice::Policy),
    ] {
        for m in [1u64, 2, 4, 8, 16, 32, 64, 128] {
            gemms.push(GemmSpec::new(
                format!("{tag}@m{m}"),
                DType::F32,
                m,
                1024,
                256,
                route,
            ));
        }
    }
    Workload {
        name: "m-sweep".into(),
        description:
            "k=1024 n=256 f32 at m=1..128 on scalar-fma, tiled, split-k-fixed:4 and the policy dispatcher"
                .into(),
        seed: default_seed(),
        policy: None,
        gemms,
    }
}

/// The two tensor-core tile families (CUDA only) on one bf16 shape at
/// m = 1..128: every row must be identical across m, and the large and small
/// families must give the same bits for the same problem.
fn tensor_core_sweep() -> Workload {
    let mut gemms = Vec::new();
    for (tag, route) in [
        ("mma-large", RouteChoice::Kernel(KernelFamily::MmaLarge)),
        ("mma-small", RouteChoice::Kernel(KernelFamily::MmaSmall)),
    ] {
        for m in [1u64, 2, 4, 8, 16, 32, 64, 128] {
            gemms.push(GemmSpec::new(
                format!("{tag}@m{m}"),
                DType::Bf16,
                m,
                1024,
                256,
                route,
            ));
        }
        gemms.push(GemmSpec::new(
            format!("{tag}-f16@m64"),
            DType::F16,
            64,
            1024,
            256,
            route,
        ));
    }
    Workload {
        name: "tensor-core-sweep".into(),
        description: "mma.sync m16n8k16 large and small tile families, bf16 k=1024 n=256 at m=1..128 (CUDA only)"
            .into(),
        seed: default_seed(),
        policy: None,
        gemms,
    }
}

/// cuBLAS and cuBLASLt (CUDA only, policy cublas-fast): the sgemm of the
/// semantics note, and bf16 k = n = 4096 at m = 1..4096, where vendor
/// heuristics change kernels (and bits) with the batch size.
fn vendor_sweep() -> Workload {
    let mut gemms = vec![GemmSpec::new(
        "sgemm".into(),
        DType::F32,
        256,
        1024,
        256,
        RouteChoice::Cublas,
    )];
    for (tag, route) in [
        ("cublas", RouteChoice::Cublas),
        ("cublaslt", RouteChoice::CublasLt),
    ] {
        for m in [1u64, 16, 64, 256, 4096] {
            gemms.push(GemmSpec::new(
                format!("{tag}@m{m}"),
                DType::Bf16,
                m,
                4096,
                4096,
                route,
            ));
        }
    }
    Workload {
        name: "vendor-sweep".into(),
        description:
            "cuBLAS sgemm 256x1024x256; cuBLAS and cuBLASLt bf16 k=n=4096 at m=1..4096 (CUDA only)"
                .into(),
        seed: default_seed(),
        policy: Some(PolicyMode::CublasFast),
        gemms,
    }
}

/// Batch sizes of the batch-invariant sweep: powers of two from 1 to 8192
/// and three sizes that are no multiple of any tile (48, 96, 200).
pub const INVARIANT_SWEEP_M: [u64; 17] = [
    1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 200, 256, 512, 1024, 2048, 4096, 8192,
];

/// The cublaslt-invariant route (CUDA only, policy cublas-fast): k = n =
/// 4096 in bf16 and f16, NN and NT at every m of [`INVARIANT_SWEEP_M`],
/// TN at its multiples of 8 (the family reads TN's m-contiguous A in
/// 16-byte steps and refuses other m); and the projections of a d_model 4096 transformer
/// block (grouped-query QKV 4096 -> 6144, attention output, MLP up 4096 ->
/// 14336 and down 14336 -> 4096) in bf16 at m = 1 to 4096. Every group must
/// be batch invariant: the route promises it.
fn batch_invariant() -> Workload {
    let mut gemms = Vec::new();
    for dtype in [DType::Bf16, DType::F16] {
        for op in [GemmOp::Nn, GemmOp::Tn, GemmOp::Nt] {
            for m in INVARIANT_SWEEP_M {
                if op == GemmOp::Tn && m % 8 != 0 {
                    continue;
                }
                let mut g = GemmSpec::new(
                    format!("{op}-{dtype}@m{m}"),
                    dtype,
                    m,
                    4096,
                    4096,
                    RouteChoice::CublasLtInvariant,
                );
                g.op = op;
                gemms.push(g);
            }
        }
    }
    for (proj, k, n) in [
        ("qkv", 4096, 6144),
        ("attn-out", 4096, 4096),
        ("mlp-up", 4096, 14336),
        ("mlp-down", 14336, 4096),
    ] {
        for m in [1u64, 16, 48, 128, 1024, 4096] {
            gemms.push(GemmSpec::new(
                format!("{proj}@m{m}"),
                DType::Bf16,
                m,
                k,
                n,
                RouteChoice::CublasLtInvariant,
            ));
        }
    }
    Workload {
        name: "batch-invariant".into(),
        description: "cublaslt-invariant: k=n=4096 bf16/f16 NN/NT at m=1..8192 (and 48, 96, 200), TN at those that are multiples of 8, and d=4096 transformer projections at m=1..4096 (CUDA only)"
            .into(),
        seed: default_seed(),
        policy: Some(PolicyMode::CublasFast),
        gemms,
    }
}

/// The TMA + wgmma families (CUDA, compute capability 9.0 only), at k =
/// 4096 and n = 4096 (and the d_model 4096 QKV projection, n = 6144):
/// - `wgmma-large` bf16 NN at every m of [`INVARIANT_SWEEP_M`], NT up to
///   m = 4096, TN at the multiples of 8 up to 4096 (its A is
///   m-contiguous and TMA rows are multiples of 16 bytes); f16 at m = 8,
///   200 and 4096 for each op; QKV at m = 1 to 4096;
/// - `wgmma-small`, `wgmma-medium` and `mma-large` on the m = 8 and
///   m = 200 problems of every op and dtype, which the audit's
///   contract-parity rows require to be bit-identical to `wgmma-large`.
///
/// Sized to add about a minute and a half to the H200 audit.
fn wgmma_sweep() -> Workload {
    let mut gemms = Vec::new();
    let mut push = |name: String, op: GemmOp, dtype: DType, m: u64, n: u64, route: RouteChoice| {
        let mut g = GemmSpec::new(name, dtype, m, 4096, n, route);
        g.op = op;
        gemms.push(g);
    };
    for op in [GemmOp::Nn, GemmOp::Nt, GemmOp::Tn] {
        for m in INVARIANT_SWEEP_M {
            let served = op != GemmOp::Tn || m % 8 == 0;
            if served && (op == GemmOp::Nn || m <= 4096) {
                push(
                    format!("{op}-bf16@m{m}"),
                    op,
                    DType::Bf16,
                    m,
                    4096,
                    RouteChoice::Kernel(KernelFamily::WgmmaLarge),
                );
            }
        }
        for m in [8u64, 200, 4096] {
            push(
                format!("{op}-f16@m{m}"),
                op,
                DType::F16,
                m,
                4096,
                RouteChoice::Kernel(KernelFamily::WgmmaLarge),
            );
        }
        for dtype in [DType::Bf16, DType::F16] {
            for (tag, route) in [
                ("wgmma-small", RouteChoice::Kernel(KernelFamily::WgmmaSmall)),
                (
                    "wgmma-medium",
                    RouteChoice::Kernel(KernelFamily::WgmmaMedium),
                ),
                ("mma-large", RouteChoice::Kernel(KernelFamily::MmaLarge)),
            ] {
                for m in [8u64, 200] {
                    push(
                        format!("{tag}:{op}-{dtype}@m{m}"),
                        op,
                        dtype,
                        m,
                        4096,
                        route,
                    );
                }
            }
        }
    }
    for m in [1u64, 16, 128, 1024, 4096] {
        push(
            format!("qkv@m{m}"),
            GemmOp::Nn,
            DType::Bf16,
            m,
            6144,
            RouteChoice::Kernel(KernelFamily::WgmmaLarge),
        );
    }
    Workload {
        name: "wgmma-sweep".into(),
        description: "TMA + wgmma: bf16 k=n=4096 NN at m=1..8192, NT/TN to 4096 (TN at multiples of 8), f16 and a QKV projection, parity with wgmma-small, wgmma-medium and mma-large (CUDA sm_90 only)"
            .into(),
        seed: default_seed(),
        policy: None,
        gemms,
    }
}

/// The batch sizes `ladder-sweep` runs k = n = 4096 at: both sides of
/// each rung's limit ([`LADDER_DECODE_MAX_M`](crate::kernels::LADDER_DECODE_MAX_M), [`LADDER_MID_MAX_M`](crate::kernels::LADDER_MID_MAX_M)).
pub const LADDER_SWEEP_M: [u64; 8] = [1, 8, 64, 72, 256, 264, 1024, 4096];

/// The invariant ladder (`route = "batch-invariant"`): NN/TN/NT bf16 and
/// f16 at k = n = 4096 (one chunk: the narrow, decode, band and wgmma rungs by m,
/// and each ladder rung and `wgmma-large` at the others' batch sizes),
/// every ladder rung on the four-chunk KV projection (k = 4096, n = 1024),
/// and the d_model-4096 projections. Each batch-invariant row group spans
/// several rungs, so its batch-invariance rows prove the rungs agree; the
/// explicit rungs prove it at one m too (contract parity) (CUDA sm_90
/// only).
fn ladder_sweep() -> Workload {
    let mut gemms = Vec::new();
    let bi = RouteChoice::BatchInvariant;
    let mut push = |name: String, op: GemmOp, dtype, m, k, n, route| {
        let mut g = GemmSpec::new(name, dtype, m, k, n, route);
        g.op = op;
        gemms.push(g);
    };
    for op in [GemmOp::Nn, GemmOp::Tn, GemmOp::Nt] {
        // TN's A is m-contiguous: TMA needs m to be a multiple of 8.
        for m in LADDER_SWEEP_M
            .into_iter()
            .filter(|m| op != GemmOp::Tn || m % 8 == 0)
        {
            push(
                format!("{op}-bf16@m{m}"),
                op,
                DType::Bf16,
                m,
                4096,
                4096,
                bi,
            );
        }
        for m in [8u64, 256] {
            push(format!("{op}-f16@m{m}"), op, DType::F16, m, 4096, 4096, bi);
        }
        // Each rung at the others' batch sizes: the one-chunk family
        // (wgmma's k order) and the four-chunk KV projection.
        for (tag, family, m, n) in [
            ("ladder-mid", KernelFamily::LadderMid(1), 64u64, 4096u64),
            ("ladder-band", KernelFamily::LadderBand(1), 64, 4096),
            ("wgmma-large", KernelFamily::WgmmaLarge, 64, 4096),
            ("ladder-decode", KernelFamily::LadderDecode(1), 1024, 4096),
            ("ladder-mid", KernelFamily::LadderMid(1), 1024, 4096),
            ("ladder-band", KernelFamily::LadderBand(1), 1024, 4096),
            ("ladder-band", KernelFamily::LadderBand(1), 8, 4096),
            ("ladder-narrow", KernelFamily::LadderNarrow(1), 256, 4096),
            ("ladder-decode", KernelFamily::LadderDecode(1), 1024, 1024),
            ("ladder-mid", KernelFamily::LadderMid(1), 16, 1024),
        ] {
            push(
                format!("{tag}:{op}-bf16@m{m}n{n}"),
                op,
                DType::Bf16,
                m,
                4096,
                n,
                RouteChoice::Kernel(family),
            );
        }
        // KV (4 chunks): the narrow, band and wide rungs by m.
        for m in [16u64, 1024, 4096] {
            push(
                format!("kv:{op}-bf16@m{m}"),
                op,
                DType::Bf16,
                m,
                4096,
                1024,
                bi,
            );
        }
    }
    // The d_model-4096 projections (NN bf16, one chunk each: wgmma's
    // order, so wgmma-large must agree with the ladder's rungs).
    for (tag, k, n, ms) in [
        ("qkv", 4096u64, 6144u64, &[1u64, 256, 1024][..]),
        ("mlp-up", 4096, 14336, &[16, 2048]),
        ("mlp-down", 14336, 4096, &[1, 64, 256, 1024]),
    ] {
        for &m in ms {
            push(format!("{tag}@m{m}"), GemmOp::Nn, DType::Bf16, m, k, n, bi);
        }
    }
    for m in [1u64, 256] {
        push(
            format!("wgmma-large:qkv@m{m}"),
            GemmOp::Nn,
            DType::Bf16,
            m,
            4096,
            6144,
            RouteChoice::Kernel(KernelFamily::WgmmaLarge),
        );
    }
    Workload {
        name: "ladder-sweep".into(),
        description: "the invariant ladder (batch-invariant route): NN/TN/NT bf16/f16 k=n=4096 (one chunk) across its narrow, decode, band and wgmma rungs, every rung on the 4-chunk KV projection, each rung at the others' m, and the QKV/MLP projections (CUDA sm_90 only)"
            .into(),
        seed: default_seed(),
        policy: None,
        gemms,
    }
}

/// The nondeterministic control: f32 split-K folded in completion order.
fn control() -> Workload {
    Workload {
        name: "nondeterministic-control".into(),
        description:
            "f32 64x1024x64 split-K (16 splits) folded in thread completion order: must drift"
                .into(),
        seed: default_seed(),
        policy: None,
        gemms: vec![GemmSpec::new(
            "atomic-split-k".into(),
            DType::F32,
            64,
            1024,
            64,
            RouteChoice::Kernel(KernelFamily::SplitKAtomic(16)),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_invariant_sweeps_every_m_of_each_family() {
        let w = Workload::builtin("batch-invariant").unwrap();
        assert_eq!(w.policy, Some(PolicyMode::CublasFast));
        for dtype in [DType::Bf16, DType::F16] {
            for op in [GemmOp::Nn, GemmOp::Tn, GemmOp::Nt] {
                let ms: Vec<u64> = w
                    .gemms
                    .iter()
                    .filter(|g| g.name.starts_with(&format!("{op}-{dtype}@")))
                    .inspect(|g| assert_eq!((g.op, g.dtype, g.k, g.n), (op, dtype, 4096, 4096)))
                    .map(|g| g.m)
                    .collect();
                let want: Vec<u64> = INVARIANT_SWEEP_M
                    .into_iter()
                    .filter(|m| op != GemmOp::Tn || m % 8 == 0)
                    .collect();
                assert_eq!(ms, want, "{op} {dtype}");
            }
        }
        assert!(
            w.gemms
                .iter()
                .all(|g| g.route == RouteChoice::CublasLtInvariant)
        );
    }

    #[test]
    fn wgmma_sweep_serves_only_tma_shapes_and_pairs_every_parity_problem() {
        let w = Workload::builtin("wgmma-sweep").unwrap();
        for g in &w.gemms {
            assert!(g.route.promises_batch_invariance(), "{}", g.name);
            assert!(g.k % 8 == 0 && g.n % 8 == 0, "{}", g.name);
            if g.op == GemmOp::Tn {
                assert_eq!(g.m % 8, 0, "{}", g.name);
            }
        }
        // Every wgmma-small, -medium and mma-large problem has its
        // wgmma-large twin.
        for g in w
            .gemms
            .iter()
            .filter(|g| g.route != RouteChoice::Kernel(KernelFamily::WgmmaLarge))
        {
            assert!(
                w.gemms
                    .iter()
                    .any(|t| t.route == RouteChoice::Kernel(KernelFamily::WgmmaLarge)
                        && (t.op, t.dtype, t.m, t.k, t.n) == (g.op, g.dtype, g.m, g.k, g.n)),
                "{} has no wgmma-large twin",
                g.name
            );
        }
        let tn = w
            .gemms
            .iter()
            .filter(|g| {
                g.op == GemmOp::Tn
                    && g.dtype == DType::Bf16
                    && g.route == RouteChoice::Kernel(KernelFamily::WgmmaLarge)
            })
            .count();
        // The multiples of 8 in the sweep up to 4096.
        assert_eq!(tn, 13);
        assert!(w.gemms.iter().any(|g| g.m == 8192 && g.op == GemmOp::Nn));
        assert!(w.gemms.len() < 100, "{}", w.gemms.len());
    }

    #[test]
    fn ladder_sweep_spans_every_rung_and_pairs_them() {
        let w = Workload::builtin("ladder-sweep").unwrap();
        let rung = |g: &GemmSpec| match g.route {
            RouteChoice::BatchInvariant => RouteChoice::ladder_rung(g.op, g.m, g.k, g.n),
            RouteChoice::Kernel(f) => f.for_shape(g.k, g.n),
            other => panic!("{}: route {other}", g.name),
        };
        for g in &w.gemms {
            assert!(g.route.promises_batch_invariance(), "{}", g.name);
            assert!(g.k % 8 == 0 && g.n % 8 == 0, "{}", g.name);
            assert!(g.op != GemmOp::Tn || g.m % 8 == 0, "{}", g.name);
        }
        // Every bf16 group of the batch-invariant route at k = 4096 runs
        // three rungs or more, so its invariance rows compare them.
        for op in GemmOp::ALL {
            for n in [4096, 1024] {
                let rungs: std::collections::HashSet<&str> = w
                    .gemms
                    .iter()
                    .filter(|g| g.op == *op && g.dtype == DType::Bf16 && g.n == n && g.k == 4096)
                    .filter(|g| g.route == RouteChoice::BatchInvariant)
                    .map(|g| rung(g).name())
                    .collect();
                assert!(rungs.len() >= 3, "{op} n={n}: {rungs:?}");
            }
            // Every ladder rung runs on a family of more than one chunk.
            let chunked: std::collections::HashSet<&str> = w
                .gemms
                .iter()
                .filter(|g| g.op == *op)
                .map(rung)
                .filter(|f| f.is_ladder() && f.splits() > 1)
                .map(|f| f.name())
                .collect();
            assert_eq!(chunked.len(), 5, "{op}: {chunked:?}");
        }
        // Every rung of the ladder runs somewhere in the sweep.
        let ran: std::collections::HashSet<&str> = w.gemms.iter().map(|g| rung(g).name()).collect();
        for f in KernelFamily::ALL.iter().filter(|f| f.is_ladder()) {
            assert!(ran.contains(f.name()), "{f} never runs");
        }
        // Each explicit rung has a batch-invariant twin on another rung.
        for g in w
            .gemms
            .iter()
            .filter(|g| g.route != RouteChoice::BatchInvariant)
        {
            assert!(
                w.gemms
                    .iter()
                    .any(|t| t.route == RouteChoice::BatchInvariant
                        && (t.op, t.dtype, t.m, t.k, t.n) == (g.op, g.dtype, g.m, g.k, g.n)
                        && rung(t) != rung(g)),
                "{} has no twin",
                g.name
            );
        }
        // Small enough to stay a few seconds of the GPU audit.
        assert!(w.gemms.len() <= 80, "{}", w.gemms.len());
    }

    #[test]
    fn builtins_validate() {
        for name in BUILTINS {
            let w = Workload::builtin(name).expect("built-in exists");
            w.validate().expect("built-in is valid");
            assert_eq!(w.name, name);
        }
    }

    #[test]
    fn route_choice_round_trips() {
        for s in [
            "policy",
            "scalar-fma",
            "tiled",
            "split-k-fixed:4",
            "split-k-atomic:16",
            "mma-large",
            "mma-small",
            "wgmma-large",
            "wgmma-small",
            "cublas",
            "cublaslt",
            "cublaslt-invariant",
        ] {
            assert_eq!(RouteChoice::parse(s).unwrap().to_string(), s);
        }
        // The fixed-configuration cuBLASLt route promises batch invariance
        // (the audit fails it when rows differ); the heuristic's does not.
        let inv = RouteChoice::parse("cublaslt-invariant").unwrap();
        assert!(inv.is_vendor() && inv.promises_batch_invariance());
        assert!(!RouteChoice::CublasLt.promises_batch_invariance());
        assert!(RouteChoice::parse("split-k-fixed:0").is_err());
        assert!(RouteChoice::parse("split-k-fixed:x").is_err());
        assert!(
            RouteChoice::parse("magic")
                .unwrap_err()
                .to_string()
                .contains("unknown route")
        );
    }

    #[test]
    #[cfg(not(feature = "toml"))]
    fn toml_without_the_feature_is_refused_with_the_reason() {
        let e = Workload::from_toml("name = \"x\"").unwrap_err();
        assert_eq!(e, WorkloadError::TomlUnsupported);
        assert!(e.to_string().contains("`toml` feature"), "{e}");
    }

    #[test]
    #[cfg(feature = "toml")]
    fn toml_and_json_parse() {
        let toml = r#"
            name = "mine"
            seed = 7
            [[gemm]]
            name = "a"
            op = "tn"
            dtype = "f16"
            m = 4
            k = 8
            n = 2
            route = "split-k-fixed:2"
        "#;
        let w = Workload::from_toml(toml).unwrap();
        assert_eq!(w.gemms[0].op, GemmOp::Tn);
        assert_eq!(
            w.gemms[0].route,
            RouteChoice::Kernel(KernelFamily::SplitKFixed(2))
        );
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(Workload::from_json(&json).unwrap(), w);
    }

    #[test]
    #[cfg(feature = "toml")]
    fn bad_workloads_name_the_problem() {
        let e = Workload::from_toml("name = \"x\"\ngemm = []").unwrap_err();
        assert_eq!(e, WorkloadError::NoGemms);
        let e = Workload::from_toml(
            "name='x'\n[[gemm]]\nname='a'\nop='nn'\ndtype='f32'\nm=0\nk=1\nn=1\n",
        )
        .unwrap_err();
        assert_eq!(
            e,
            WorkloadError::ZeroDimension {
                gemm: "a".into(),
                dim: "m"
            }
        );
        assert!(e.to_string().contains("m must be at least 1"), "{e}");
        let e = Workload::from_toml(
            "name='x'\n[[gemm]]\nname='a'\nop='nn'\ndtype='f64'\nm=1\nk=1\nn=1\n",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("dtype f64 is only read from profiles"),
            "{e}"
        );
        let e = Workload::from_toml(
            "name='x'\n[[gemm]]\nname='a'\nop='tt'\ndtype='f32'\nm=1\nk=1\nn=1\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("op tt is only read from profiles"),
            "{e}"
        );
        let e = Workload::from_toml(
            "name='x'\n[[gemm]]\nname='a'\nop='nn'\ndtype='f32'\nm=100000\nk=100000\nn=1\n",
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                WorkloadError::TooLarge {
                    operand: "A (m*k)",
                    ..
                }
            ),
            "{e}"
        );
        let e = Workload::from_toml(
            "name='x'\nbogus=1\n[[gemm]]\nname='a'\nop='nn'\ndtype='f32'\nm=1\nk=1\nn=1\n",
        )
        .unwrap_err();
        assert!(
            matches!(&e, WorkloadError::Syntax(m) if m.contains("bogus")),
            "{e}"
        );
    }

    #[test]
    fn digest_tracks_definition() {
        let a = Workload::builtin("m-sweep").unwrap();
        let mut b = a.clone();
        b.gemms[3].k += 1;
        assert_ne!(a.digest(), b.digest());
        let mut c = a.clone();
        c.description.push('!');
        assert_eq!(
            a.digest(),
            c.digest(),
            "the description is not part of the definition"
        );
    }
}
