//! Replays the fuzz corpus and the saved crashing inputs through the same
//! entry points the fuzz targets in `fuzz/` call, so CI checks every input
//! the fuzzers kept without needing cargo-fuzz or a nightly toolchain.
//!
//! `fuzz/corpus/<target>/` holds the seeds (named `seed-*`, written by the
//! ignored `regenerate_seed_corpus` test below) and the minimised entries
//! libFuzzer added; `fuzz/regressions/<target>/` holds inputs that once
//! crashed a target. See `docs/fuzzing.md`.

use gemm_audit::fuzzing;
use gemm_audit::trace::codec;
use std::path::{Path, PathBuf};

/// A fuzz target's entry point.
type Entry = fn(&[u8]);

/// Each fuzz target and the entry point it calls.
const TARGETS: &[(&str, Entry)] = &[
    ("decode_trace", fuzzing::decode_trace),
    ("decode_payload", decode_payload),
    ("plan_from_routes", fuzzing::plan_from_routes),
    ("parse_workload", fuzzing::parse_workload),
    ("diff_traces", fuzzing::diff_traces),
    ("guard_alone", fuzzing::guard_alone),
    ("recorder_ops", fuzzing::recorder_ops),
    ("route_builder", fuzzing::route_builder),
    ("import_profile", fuzzing::import_profile),
];

/// Seeds of `import_profile`: profiles the recorder and torch wrote (a
/// trimmed H200 profile, a CPU sweep), and a bound GEMM op with a split-K
/// pair, a copy beside it and a graph replay, as Kineto writes them.
const PROFILE_SEEDS: &[(&str, &str)] = &[
    (
        "seed-h200-recorder",
        "python/tests/fixtures/torch-profile-h200.json",
    ),
    ("seed-cpu-sweep", "tests/data/profiles/cpu-sweep.json.gz"),
    ("seed-bound", ""),
];

/// The `seed-bound` profile: an addmm whose C is copied by a child op,
/// launching a split-K GEMM and its reduce, then a graph replay.
const BOUND_PROFILE: &str = r#"{"deviceProperties":[{"id":0,"name":"NVIDIA H200","computeMajor":9,"computeMinor":0,"numSms":132}],"traceEvents":[
{"ph":"X","cat":"cpu_op","name":"aten::addmm","pid":1,"tid":1,"ts":10.0,"dur":50.0,"args":{"Input Dims":[[8,32],[8,64],[64,32]],"Input Strides":[[32,1],[64,1],[1,64]],"Input type":["c10::BFloat16","c10::BFloat16","c10::BFloat16"],"Concrete Inputs":["","","","1","1"]}},
{"ph":"X","cat":"cpu_op","name":"aten::copy_","pid":1,"tid":1,"ts":11.0,"dur":5.0},
{"ph":"X","cat":"cuda_runtime","name":"cudaMemcpyAsync","pid":1,"tid":1,"ts":12.0,"dur":1.0,"args":{"correlation":1}},
{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoD (Device -> Device)","pid":0,"tid":7,"ts":30.0,"dur":1.0,"args":{"correlation":1,"device":0}},
{"ph":"X","cat":"cuda_driver","name":"cuLaunchKernelEx","pid":1,"tid":1,"ts":20.0,"dur":2.0,"args":{"correlation":2}},
{"ph":"X","cat":"kernel","name":"nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT","pid":0,"tid":7,"ts":40.0,"dur":3.0,"args":{"correlation":2,"device":0,"grid":[4,1,4],"block":[384,1,1],"shared memory":164308}},
{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":25.0,"dur":2.0,"args":{"correlation":3}},
{"ph":"X","cat":"kernel","name":"splitKreduce_kernel","pid":0,"tid":7,"ts":44.0,"dur":1.0,"args":{"correlation":3,"device":0,"grid":[1,1,1],"block":[256,1,1]}},
{"ph":"f","cat":"ac2g","name":"ac2g","id":3,"pid":0,"tid":7,"ts":44.0,"bp":"e"},
{"ph":"X","cat":"cuda_runtime","name":"cudaGraphLaunch","pid":1,"tid":1,"ts":100.0,"dur":5.0,"args":{"correlation":4}},
{"ph":"X","cat":"kernel","name":"nvjet_sm90_graph","pid":0,"tid":7,"ts":110.0,"dur":2.0,"args":{"correlation":4,"device":0}}
]}"#;

/// Seeds of the guard, recorder and route-builder targets, written by
/// `regenerate_seed_corpus`: (target, name, bytes).
const SMALL_SEEDS: &[(&str, &str, &[u8])] = &[
    // guard_alone: route, field tag, then `by` (little-endian).
    ("guard_alone", "seed-dtype", &[0, 2, 0]),
    ("guard_alone", "seed-splits-wide", &[5, 5, 7, 0, 0, 0, 1]),
    ("guard_alone", "seed-ownership", &[3, 10, 1]),
    ("guard_alone", "seed-vendor-block", &[1, 45, 4]),
    ("guard_alone", "seed-arguments", &[2, 39, 9]),
    // recorder_ops: one operation a byte (b % 6), capacity from b / 6.
    ("recorder_ops", "seed-eager", &[0, 2, 2, 3]),
    ("recorder_ops", "seed-capture-over", &[7, 2, 2, 4]),
    (
        "recorder_ops",
        "seed-nested-wrong-finish",
        &[0, 0, 2, 4, 2, 5],
    ),
    ("recorder_ops", "seed-drop-then-idle-push", &[1, 5, 2, 0, 3]),
    // route_builder: symbol, op, dtype, contract, splits, shape, grid, block, tensor cores.
    (
        "route_builder",
        "seed-scalar",
        &[1, 0, 0, 0, 1, 8, 0, 64, 0, 64, 0, 1, 1, 1, 64, 0],
    ),
    (
        "route_builder",
        "seed-split-k",
        &[2, 0, 0, 1, 4, 8, 0, 64, 0, 64, 0, 1, 1, 4, 64, 0],
    ),
    (
        "route_builder",
        "seed-mma",
        &[0, 0, 1, 2, 1, 8, 0, 64, 0, 64, 0, 1, 1, 1, 64, 1],
    ),
];

/// Seeds of the two decode targets (whole files, and their payloads).
const DECODE_SEEDS: &[&str] = &[
    "seed-sample-1",
    "seed-sample-2",
    "seed-sample-5",
    "seed-vendor-2",
];

/// Seeds of `plan_from_routes`: byte 0 picks the route count (`b % 16 + 1`),
/// then each 3 bytes are one mutation (kind, i, j; see `mutation::apply_bytes`).
const ROUTE_SEEDS: &[(&str, &[u8])] = &[
    ("seed-count1-unchanged", &[0]),
    ("seed-count4-swap-equal", &[3, 1, 2, 2]),
    ("seed-count4-remove", &[3, 0, 2, 1]),
    ("seed-count4-symbol", &[3, 2, 1, 0]),
    ("seed-count8-remove-field", &[7, 0, 40, 1, 7, 5, 9]),
    ("seed-count8-remove-swap", &[7, 0, 40, 1, 5, 9]),
    ("seed-count8-swap-back", &[7, 1, 0, 3, 1, 3, 0]),
    (
        "seed-count16-every-kind",
        &[
            15, 0, 1, 0, 1, 2, 3, 2, 4, 0, 3, 5, 0, 4, 6, 0, 5, 7, 0, 6, 8, 0, 7, 9, 20,
        ],
    ),
];

/// The seed names `target`'s corpus must hold.
fn seeds(target: &str) -> Vec<&'static str> {
    match target {
        "plan_from_routes" => ROUTE_SEEDS.iter().map(|(name, _)| *name).collect(),
        "guard_alone" | "recorder_ops" | "route_builder" => SMALL_SEEDS
            .iter()
            .filter(|(t, _, _)| *t == target)
            .map(|(_, name, _)| *name)
            .collect(),
        "parse_workload" => vec!["seed-tiny-toml", "seed-m-sweep-toml", "seed-json"],
        "import_profile" => PROFILE_SEEDS.iter().map(|(name, _)| *name).collect(),
        "diff_traces" => vec![
            "seed-sample-1-vs-2",
            "seed-sample-2-vs-vendor-2",
            "seed-v1-vs-v2",
        ],
        _ => DECODE_SEEDS.to_vec(),
    }
}

/// Corpus files must stay small (see docs/fuzzing.md).
const MAX_FILE_BYTES: u64 = 64 << 10;
const MAX_CORPUS_BYTES: u64 = 1 << 20;

/// The `decode_payload` fuzz target: arbitrary bytes as the payload of a
/// correctly sealed file, so mutations reach the decoder past the checksum.
fn decode_payload(data: &[u8]) {
    fuzzing::decode_trace(&codec::seal(data))
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Regular files in `dir`, sorted; empty when `dir` does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn corpus_and_regressions_replay_without_panicking() {
    let mut corpus_bytes = 0u64;
    let mut replayed = 0usize;
    let mut failures = Vec::new();
    for &(target, run) in TARGETS {
        let corpus = fuzz_dir().join("corpus").join(target);
        let regressions = fuzz_dir().join("regressions").join(target);
        let corpus_files = files_in(&corpus);
        for seed in seeds(target) {
            assert!(
                corpus_files
                    .iter()
                    .any(|p| p.file_name().is_some_and(|n| n == seed)),
                "seed {seed} missing from {}; regenerate with \
                 `cargo test --test it fuzz_corpus:: -- --ignored regenerate_seed_corpus`",
                corpus.display()
            );
        }
        for path in corpus_files.iter().chain(&files_in(&regressions)) {
            let data =
                std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            if path.starts_with(&corpus) {
                assert!(
                    data.len() as u64 <= MAX_FILE_BYTES,
                    "{} is {} bytes, over the {MAX_FILE_BYTES}-byte corpus file limit",
                    path.display(),
                    data.len()
                );
                corpus_bytes += data.len() as u64;
            }
            // Keep going after a panic, so one run reports every failing input.
            if let Err(panic) = std::panic::catch_unwind(|| run(&data)) {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(non-string panic payload)");
                failures.push(format!("{target}: {}: {message}", path.display()));
            }
            replayed += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {replayed} fuzz inputs panicked:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        corpus_bytes <= MAX_CORPUS_BYTES,
        "fuzz corpus is {corpus_bytes} bytes, over {MAX_CORPUS_BYTES}"
    );
}

/// The decode seeds must still be real traces of the current format:
/// otherwise the fuzzers start from inputs the decoder refuses at once and
/// the replay above only exercises the refusal path.
#[test]
fn decode_seeds_are_current_traces() {
    let limits = codec::Limits::default();
    for seed in DECODE_SEEDS {
        let path = fuzz_dir().join("corpus/decode_trace").join(seed);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let decoded = codec::decode_trace(&bytes, &limits);
        assert!(
            decoded.is_ok(),
            "{} no longer decodes ({:?}): the trace format changed; regenerate with \
             `cargo test --test it fuzz_corpus:: -- --ignored regenerate_seed_corpus`",
            path.display(),
            decoded.err()
        );
        let payload = fuzz_dir().join("corpus/decode_payload").join(seed);
        let payload =
            std::fs::read(&payload).unwrap_or_else(|e| panic!("read {}: {e}", payload.display()));
        assert_eq!(
            codec::seal(&payload),
            bytes,
            "decode_payload/{seed} is the payload of decode_trace/{seed}"
        );
    }
}

/// Files of older versions kept in the `decode_trace` corpus, so the
/// fuzzers keep exercising the readers of the older formats.
const OLD_SEEDS: &[(u16, &str)] = &[
    (1, "v1-seed-sample-1"),
    (1, "v1-seed-vendor-2"),
    (2, "v2-seed-sample-1"),
    (2, "v2-seed-vendor-2"),
    (4, "v4-seed-sample-1"),
    (4, "v4-seed-vendor-2"),
    (6, "v6-seed-sample-1"),
    (6, "v6-seed-vendor-2"),
];

/// The version-1, -2, -4 and -6 seeds still decode, through the upgrades,
/// and their plans build: routes are framed the same in every version.
#[test]
fn older_version_seeds_still_decode() {
    for &(want, seed) in OLD_SEEDS {
        let path = fuzz_dir().join("corpus/decode_trace").join(seed);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let (version, _) = codec::open_versioned(&bytes, &codec::Limits::default()).unwrap();
        assert_eq!(version, want, "{seed}");
        let trace = codec::decode_trace(&bytes, &codec::Limits::default())
            .unwrap_or_else(|e| panic!("{seed}: {e}"));
        assert!(gemm_audit::CapturedGemmGraphPlan::from_trace(&trace).is_ok());
        // Before format 3 every fingerprint was strong.
        assert_eq!(trace.fingerprint_mode, gemm_audit::FingerprintMode::Strong);
        fuzzing::decode_trace(&bytes);
    }
}

/// `fuzz/regressions/{decode_trace,decode_payload}/` name of the input below.
const BLOCK_OVERFLOW: &str = "block-threads-overflow";

/// A one-route trace whose launch block is `[u32::MAX; 3]`: 2^96 threads,
/// which overflowed `LaunchConfig::block_threads` (a `u64` product) while
/// the plan was built: a panic under overflow checks, a wrapped count in
/// release builds. Fixed by a saturating product (commit e129816).
fn block_threads_overflow_trace() -> gemm_audit::RecordedGemmTrace {
    let mut trace = gemm_audit::testkit::sample_trace(1);
    trace.routes[0].launch.block = [u32::MAX; 3];
    trace
}

/// The block-thread overflow stays refused, both as the saved file and
/// rebuilt from the testkit (so a format change cannot retire it silently).
#[test]
fn block_threads_overflow_is_refused() {
    use gemm_audit::{CapturedGemmGraphPlan, build_resolved_gemm_launch_set};

    let path = fuzz_dir()
        .join("regressions/decode_trace")
        .join(BLOCK_OVERFLOW);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let saved = codec::decode_trace(&bytes, &codec::Limits::default()).unwrap_or_else(|e| {
        panic!(
            "{} no longer decodes ({e}); regenerate with \
             `cargo test --test it fuzz_corpus:: -- --ignored regenerate_seed_corpus`",
            path.display()
        )
    });
    assert!(saved.routes.iter().any(|r| r.launch.block == [u32::MAX; 3]));
    for trace in [saved, block_threads_overflow_trace()] {
        fuzzing::decode_trace(&trace.to_bytes().expect("encodes"));
        assert!(CapturedGemmGraphPlan::from_trace(&trace).is_err());
    }
    // 2^22 * 2^22 * 2^20 = 2^64 wraps to 0 in a wrapping product, which would
    // match a route claiming 0 threads.
    let mut routes = gemm_audit::testkit::sample_routes(1);
    routes[0].launch.block = [1 << 22, 1 << 22, 1 << 20];
    routes[0].threads = 0;
    assert!(build_resolved_gemm_launch_set(&routes).is_err());
}

/// Writes the seed corpus, and the regression inputs that can be rebuilt
/// from the testkit. Seeds are overwritten in place; entries libFuzzer
/// added are left alone. Real CPU-backend traces in `traces/cpu-x86_64/*.gat` (when
/// present and small) become seeds too.
#[test]
#[ignore = "regenerates the fuzz seed corpus"]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
fn regenerate_seed_corpus() {
    use gemm_audit::testkit;

    let mut traces: Vec<(String, gemm_audit::RecordedGemmTrace)> = [1, 2, 5]
        .into_iter()
        .map(|n| (format!("seed-sample-{n}"), testkit::sample_trace(n)))
        .collect();
    let mut vendor = testkit::sample_trace(2);
    vendor.routes[1] = testkit::sample_vendor_route(1);
    vendor.launch_set =
        gemm_audit::build_resolved_gemm_launch_set(&vendor.routes).expect("vendor launch set");
    traces.push(("seed-vendor-2".into(), vendor));

    let mut files: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for (name, trace) in &traces {
        let payload = codec::encode_payload(trace).expect("seed trace encodes");
        let file = codec::seal(&payload);
        assert_eq!(file, trace.to_bytes().expect("seed trace encodes"));
        files.push(("decode_trace", name.clone(), file));
        files.push(("decode_payload", name.clone(), payload));
    }
    let cpu = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/cpu-x86_64");
    for path in files_in(&cpu)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "gat"))
    {
        let bytes = std::fs::read(&path).expect("read a CPU trace");
        if bytes.len() as u64 > MAX_FILE_BYTES {
            eprintln!("skipping {}: {} bytes", path.display(), bytes.len());
            continue;
        }
        let stem = path
            .file_stem()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        let name = format!("trace-cpu-{stem}");
        if let Ok(payload) = codec::open(&bytes, &codec::Limits::default()) {
            files.push(("decode_payload", name.clone(), payload.to_vec()));
        }
        files.push(("decode_trace", name, bytes));
    }
    for (name, bytes) in ROUTE_SEEDS {
        files.push(("plan_from_routes", name.to_string(), bytes.to_vec()));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, path) in PROFILE_SEEDS {
        let bytes = if path.is_empty() {
            BOUND_PROFILE.as_bytes().to_vec()
        } else {
            gemm_audit::profile::read_profile(&root.join(path), MAX_FILE_BYTES)
                .expect("a profile seed")
        };
        files.push(("import_profile", name.to_string(), bytes));
    }
    for (target, name, bytes) in SMALL_SEEDS {
        files.push((target, name.to_string(), bytes.to_vec()));
    }
    // diff_traces: a 4-byte little-endian length, then two trace files.
    let file_of = |name: &str| {
        files
            .iter()
            .find(|(t, n, _)| *t == "decode_trace" && n == name)
            .map(|(_, _, b)| b.clone())
            .expect("a decode seed")
    };
    let v1 = std::fs::read(fuzz_dir().join("corpus/decode_trace/v1-seed-sample-1"))
        .expect("the version-1 seed");
    for (name, a, b) in [
        (
            "seed-sample-1-vs-2",
            file_of("seed-sample-1"),
            file_of("seed-sample-2"),
        ),
        (
            "seed-sample-2-vs-vendor-2",
            file_of("seed-sample-2"),
            file_of("seed-vendor-2"),
        ),
        ("seed-v1-vs-v2", v1, file_of("seed-sample-1")),
    ] {
        let mut bytes = (a.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&a);
        bytes.extend_from_slice(&b);
        files.push(("diff_traces", name.to_string(), bytes));
    }
    // The regression inputs that can be built from the testkit.
    let overflow = block_threads_overflow_trace();
    let payload = codec::encode_payload(&overflow).expect("the overflow trace encodes");
    let mut regressions = vec![
        ("decode_trace", BLOCK_OVERFLOW, codec::seal(&payload)),
        ("decode_payload", BLOCK_OVERFLOW, payload),
    ];
    for (target, name, bytes) in regressions.drain(..) {
        let dir = fuzz_dir().join("regressions").join(target);
        std::fs::create_dir_all(&dir).expect("create the regression directory");
        std::fs::write(dir.join(name), &bytes).expect("write a regression input");
        eprintln!(
            "wrote fuzz/regressions/{target}/{name} ({} bytes)",
            bytes.len()
        );
    }

    for (target, name, bytes) in files {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        assert!(
            bytes.len() as u64 <= MAX_FILE_BYTES,
            "{target}/{name} is {} bytes",
            bytes.len()
        );
        std::fs::write(dir.join(&name), &bytes).expect("write a seed");
        eprintln!("wrote fuzz/corpus/{target}/{name} ({} bytes)", bytes.len());
    }
}
