//! Arbitrary bytes: see `gemm_audit::fuzzing::route_builder`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gemm_audit::fuzzing::route_builder(data));
