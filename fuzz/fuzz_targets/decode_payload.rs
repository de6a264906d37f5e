//! Arbitrary bytes as the payload of a correctly sealed trace file, so that
//! mutations get past the SHA-256 trailer (which `decode_trace` alone can
//! almost never satisfy) and reach the bincode decoder, the canonical-form
//! check and the plan. The assertions are those of
//! `gemm_audit::fuzzing::decode_trace`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    |data: &[u8]| gemm_audit::fuzzing::decode_trace(&gemm_audit::trace::codec::seal(data))
);
