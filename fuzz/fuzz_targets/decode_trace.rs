//! Arbitrary bytes as a trace file: see `gemm_audit::fuzzing::decode_trace`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gemm_audit::fuzzing::decode_trace(data));
