//! The integration tests, one binary (as ripgrep's): each module is one
//! area, `common` the helpers they share. The GPU tests are `tests/gpu.rs`,
//! built only with the `cuda` feature.

mod common;

mod cli;
mod closed_pipe;
mod compare_honest;
mod compare_shared;
// `ulimit -d` limits the data segment on Linux.
#[cfg(target_os = "linux")]
mod compare_stream;
mod cross_device;
mod embedding;
mod fuzz_corpus;
mod golden;
mod graph_launch;
mod graph_profiles;
mod json_names;
mod not_observed;
mod observed;
mod profile;
mod properties;
mod replay_pairing;
mod report;
mod rung_policy;
mod schema;
mod terminal;
mod trace_format;
mod trace_versions;
mod triton_profile;
