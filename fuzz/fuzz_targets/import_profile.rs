//! Arbitrary bytes as a PyTorch profiler trace: see `gemm_audit::fuzzing::import_profile`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gemm_audit::fuzzing::import_profile(data));
