//! clap value parsers for the library's types (library types derive no
//! clap traits): `--backend`, `--allow`, `--fingerprint`.

use gemm_audit::FingerprintMode;
use gemm_audit::backend::BackendKind;
use gemm_audit::diff::DiffClass;

/// `--backend auto|cpu|cuda` as the library's kind (library types derive
/// no clap traits).
pub fn backend_kind() -> impl clap::builder::TypedValueParser<Value = BackendKind> {
    use clap::builder::{PossibleValue, TypedValueParser};
    clap::builder::PossibleValuesParser::new([
        PossibleValue::new("auto").help("CUDA when a device is present, else the CPU reference"),
        PossibleValue::new("cpu").help("The CPU reference backend"),
        PossibleValue::new("cuda").help("NVIDIA GPUs through CUDA"),
    ])
    .map(|s| match s.as_str() {
        "cpu" => BackendKind::Cpu,
        "cuda" => BackendKind::Cuda,
        _ => BackendKind::Auto,
    })
}

/// `--allow CLASS,...`: the difference classes by their stable names.
pub fn diff_class() -> impl clap::builder::TypedValueParser<Value = DiffClass> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(DiffClass::ALL.iter().map(|c| c.as_str())).map(|s| {
        *DiffClass::ALL
            .iter()
            .find(|c| c.as_str() == s)
            .expect("the parser admits only the classes' names")
    })
}

/// `--fingerprint strong|fast` as the library's mode (library types derive
/// no clap traits).
pub fn fingerprint_mode() -> impl clap::builder::TypedValueParser<Value = FingerprintMode> {
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
