//! Arbitrary bytes as route mutations: see `gemm_audit::fuzzing::plan_from_routes`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gemm_audit::fuzzing::plan_from_routes(data));
