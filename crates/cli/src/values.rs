//! clap value parsers for the library's types (library types derive no
//! clap traits): `--backend`, `--allow`, `--fingerprint`.

use gemm_audit::FingerprintMode;
use gemm_audit::backend::BackendKind;
use gemm_audit::diff::Allowance;

/// `--backend auto|cpu|cuda` as the library's kind (library types derive
/// no clap traits).
pub(crate) fn backend_kind() -> impl clap::builder::TypedValueParser<Value = BackendKind> {
    use clap::builder::{PossibleValue, TypedValueParser};
    clap::builder::PossibleValuesParser::new(
        BackendKind::ALL.map(|k| PossibleValue::new(k.name()).help(k.help())),
    )
    .map(|s| s.parse().expect("clap offered only the kinds' own names"))
}

/// `--allow CLASS|FIELD,...`: a difference class by its stable name, or a
/// field tag (`device.driver`, `context.module[cublaslt].*`).
pub(crate) fn allowance(s: &str) -> Result<Allowance, gemm_audit::diff::UnknownAllowance> {
    Allowance::parse(s)
}

/// `--fingerprint strong|fast` as the library's mode (library types derive
/// no clap traits).
pub(crate) fn fingerprint_mode() -> impl clap::builder::TypedValueParser<Value = FingerprintMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new([
        clap::builder::PossibleValue::new("strong")
            .help("SHA-256 of every chunk: collision resistant"),
        clap::builder::PossibleValue::new("fast")
            .help("NH chunk hash: memory speed on a GPU, not collision resistant"),
    ])
    .map(|s| match s.as_str() {
        "fast" => FingerprintMode::Fast,
        _ => FingerprintMode::Strong,
    })
}

/// A budget limit: a finite number greater than zero (`nan`, `inf`, zero
/// and negative limits would switch the budget off or refuse everything).
pub(crate) fn budget_limit(s: &str) -> Result<f64, BadBudgetLimit> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| BadBudgetLimit::NotANumber(s.to_string()))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(BadBudgetLimit::NotPositive(s.to_string()));
    }
    Ok(v)
}

/// A budget limit [`budget_limit`] refuses (the text as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BadBudgetLimit {
    /// Not a number at all.
    NotANumber(String),
    /// `nan`, an infinity, zero or a negative number.
    NotPositive(String),
}

impl std::fmt::Display for BadBudgetLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadBudgetLimit::NotANumber(s) => write!(f, "{s:?} is not a number"),
            BadBudgetLimit::NotPositive(s) => {
                write!(f, "{s:?} must be a finite number greater than 0")
            }
        }
    }
}

impl std::error::Error for BadBudgetLimit {}

/// `--arch sm_XY`: a GPU architecture the kernels compile for.
pub(crate) fn gpu_arch(s: &str) -> Result<String, String> {
    match gemm_audit::backend::cuda::shipped::node_modules(s) {
        Some(_) => Ok(s.to_string()),
        None => {
            Err("expected sm_ and a compute capability, e.g. sm_90 (H100, H200) or sm_80".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_limits_are_finite_and_positive() {
        assert_eq!(budget_limit("12.5"), Ok(12.5));
        for bad in ["nan", "NaN", "inf", "-inf", "0", "-1", "x", ""] {
            assert!(budget_limit(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn budget_limit_errors_name_the_value() {
        let e = budget_limit("x1").unwrap_err();
        assert_eq!(e, BadBudgetLimit::NotANumber("x1".into()));
        assert_eq!(e.to_string(), "\"x1\" is not a number");
        let e = budget_limit("-2").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"-2\" must be a finite number greater than 0"
        );
    }
}
