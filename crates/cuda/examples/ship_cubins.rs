//! Makes the cubins `gemm-audit-cuda` ships
//! (`kernels/cubin/nvrtc-<version>/<module>.<target>`): every module a
//! compute-capability-9.0 device compiles, compiled from the committed
//! sources with the pinned options by the NVRTC this process loads (no GPU
//! is needed), each written as a kernel-cache entry under its key.
//!
//! ```sh
//! LD_LIBRARY_PATH=<dir of libnvrtc.so.13> \
//!   cargo run --release -p gemm-audit-cuda --features cuda --example ship_cubins
//! ```
//!
//! A new NVRTC release then needs its five `shipped!` lines in
//! `src/shipped.rs` (the example prints the release and build they name).
//! Patch releases of one NVRTC version compile different cubins, and the
//! key tells them apart (docs/gpu-validation.md says which release made
//! the shipped ones and how that was checked).

use gemm_audit_cuda::catalog;
use gemm_audit_cuda::kernel_cache::{CacheKey, encode};
use gemm_audit_cuda::shipped::HOPPER_MODULES;
use gemm_audit_model::digest::Digest;
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let (nvrtc_version, nvrtc_build) = match gemm_audit_cuda::nvrtc_version()
        .and_then(|v| Ok((v, gemm_audit_cuda::nvrtc_build()?)))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ship_cubins: NVRTC could not be loaded: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "NVRTC {nvrtc_build}: in src/shipped.rs, shipped!(\"{nvrtc_version}\", \"{nvrtc_build}\", MODULE, TARGET)"
    );
    let out = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("kernels/cubin")
        .join(format!("nvrtc-{nvrtc_version}"));
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("ship_cubins: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    for (module, source, target) in HOPPER_MODULES {
        let options = catalog::compile_options(target);
        let cubin = match gemm_audit_cuda::nvrtc_compile(source, module, &options) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("ship_cubins: {module} for {target}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let key = CacheKey::of_compile(source, &options, &nvrtc_version, &nvrtc_build).digest();
        let dest = out.join(format!("{module}.{target}"));
        if let Err(e) = std::fs::write(&dest, encode(&key, &cubin)) {
            eprintln!("ship_cubins: {}: {e}", dest.display());
            return ExitCode::FAILURE;
        }
        println!(
            "{module} {target} NVRTC {nvrtc_build}: {} bytes, cubin SHA-256 {} -> {}",
            cubin.len(),
            Digest::sha256(&cubin).to_hex(),
            dest.display()
        );
    }
    ExitCode::SUCCESS
}
