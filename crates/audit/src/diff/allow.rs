//! What `--allow` lets through: a class or a field.

use super::{DiffClass, Difference};
use std::fmt;

/// What `--allow` lets through: a whole class of differences, or one
/// field wherever it appears (`device.driver` matches the trace's
/// `context.device.driver` and every route's `device.driver`; a trailing
/// `*` matches a prefix, e.g. `context.module[cublaslt].*`). "A driver
/// upgrade only" is `--allow device.driver`; `--allow identity` would also
/// pass a rebuilt kernel or another device class.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Allowance {
    /// Every difference of this class.
    Class(DiffClass),
    /// Differences of this field (see the type's documentation).
    Field(String),
}

/// The fields that carry output bits: only an allowance naming one whole
/// passes its differences.
pub const OUTPUT_FIELDS: [&str; 1] = ["output_fingerprint"];

/// The fields a difference names outside the routes and the context.
const TRACE_FIELDS: [&str; 8] = [
    "workload",
    "workload_digest",
    "fingerprint_mode",
    "launch_count",
    "gemm",
    "launch_order",
    "input_seed",
    "output_fingerprint",
];

/// An `--allow` value that is neither a difference class nor a field a
/// difference names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is neither a difference class (identity, route, numeric, structural, policy) nor a field a difference names (e.g. device.driver, kernel_symbol, context.module[cublaslt].*)"
)]
pub struct UnknownAllowance(pub String);

impl Allowance {
    /// A class name (`identity`, `route`, ...) or a field tag (letters,
    /// digits and `_.-[]`, optionally ending in `*`).
    pub fn parse(s: &str) -> Result<Allowance, UnknownAllowance> {
        if let Some(c) = DiffClass::ALL.iter().find(|c| c.as_str() == s) {
            return Ok(Allowance::Class(*c));
        }
        let body = s.strip_suffix('*').unwrap_or(s);
        let prefix = s.ends_with('*');
        let field_char = |c: char| c.is_ascii_alphanumeric() || "_.-[]#".contains(c);
        // A field is one a difference can name: a route field, anything
        // under the trace's context or its graph, or a trace-level field.
        let known = |tag: &str| {
            let matches = |t: &str| if prefix { t.starts_with(tag) } else { t == tag };
            ["context.", "graph.", "launch_set."]
                .iter()
                .any(|p| tag.starts_with(p))
                || TRACE_FIELDS.iter().any(|t| matches(t))
                || crate::route::ResolvedGemmRoute::field_tags()
                    .iter()
                    .any(|t| matches(t))
        };
        if body.is_empty() || !body.chars().all(field_char) || !known(body) {
            return Err(UnknownAllowance(s.to_string()));
        }
        Ok(Allowance::Field(s.to_string()))
    }

    /// Whether this allowance lets `d` through. Output bits
    /// ([`OUTPUT_FIELDS`]) pass only an allowance that names their field
    /// whole (or the `numeric` class): no pattern (`o*`, `out*`) waives
    /// them by accident.
    pub fn allows(&self, d: &Difference) -> bool {
        match self {
            Allowance::Class(c) => d.class == *c,
            Allowance::Field(f) => {
                // The field itself or any tail of it that starts at a dot:
                // `device.driver` is also the context's `context.device.driver`.
                let field = d.change.field.as_str();
                let tails = || {
                    std::iter::once(field)
                        .chain(field.match_indices('.').map(|(i, _)| &field[i + 1..]))
                };
                match f.strip_suffix('*') {
                    Some(_) if tails().any(|t| OUTPUT_FIELDS.contains(&t)) => false,
                    Some(prefix) => tails().any(|t| t.starts_with(prefix)),
                    None => tails().any(|t| t == f),
                }
            }
        }
    }
}

impl fmt::Display for Allowance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allowance::Class(c) => c.fmt(f),
            Allowance::Field(s) => f.write_str(s),
        }
    }
}
