//! Importing a PyTorch profiler trace, against Python's `json.load` of the
//! same file, in one interleaved run; and the import's peak memory.
//!
//! ```text
//! cargo bench --bench profile                  # a generated 100,000-event GPU training profile (~35 MB)
//! cargo bench --bench profile -- FILE...       # your profiles (.json or .json.gz)
//! cargo bench --bench profile -- --quick       # fewer samples
//! cargo bench --bench profile -- --write-generated OUT.json   # only write the generated profile
//! ```
//!
//! One import is what `gemm-audit import` does: read (and decompress),
//! parse, bind every activity, build the trace and write it. The baseline
//! is `json.load(open(FILE))` (`gzip.open` for a `.gz`) timed inside one
//! long-lived `python3`, so its start-up is not counted; the two are sampled
//! alternately. Peak memory is the resident high-water mark (`VmHWM`) of a
//! child process that only imports the file, against the file's
//! decompressed size. See `docs/performance.md`.

mod harness;
use harness::*;

use gemm_audit::profile::{self, ImportOptions};
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Events in the generated profile.
const GENERATED_EVENTS: usize = 100_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = args.as_slice() {
        if flag == "--child-import" {
            child_import(Path::new(path));
            return;
        }
        if flag == "--write-generated" {
            std::fs::write(path, generated_profile(GENERATED_EVENTS)).expect("write the profile");
            return;
        }
    }
    let (cfg, _) = Config::from_args();
    let files: Vec<PathBuf> = args
        .iter()
        .filter(|a| !a.starts_with('-') && Path::new(a).is_file())
        .map(PathBuf::from)
        .collect();
    let dir = TempDir::new("profile");
    let inputs = if files.is_empty() {
        let p = dir.0.join("generated-training-step.json");
        std::fs::write(&p, generated_profile(GENERATED_EVENTS)).expect("write the profile");
        vec![p]
    } else {
        files
    };
    println!(
        "gemm-audit profile import vs Python json.load ({} mode, {} samples each, interleaved)",
        if cfg.quick { "quick" } else { "full" },
        cfg.samples
    );
    let mut python = Python::start();
    for input in &inputs {
        run_one(&cfg, &dir, input, &mut python);
    }
}

/// Times and measures one profile.
fn run_one(cfg: &Config, dir: &TempDir, input: &Path, python: &mut Python) {
    let text_len = profile::read_profile(input, profile::MAX_PROFILE_BYTES)
        .expect("a readable profile")
        .len();
    let out = dir.0.join("imported.gat");
    let mut import = || {
        let t = profile::import_file(input, &ImportOptions::default())
            .expect("imports")
            .trace;
        t.write(&out, true).expect("writes");
        t.routes.len()
    };
    let gemms = import();
    let events = profile::import_file(input, &ImportOptions::default())
        .expect("imports")
        .trace
        .observation
        .map_or(0, |o| o.events);
    for _ in 0..cfg.warmup {
        import();
        python.load(input);
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..cfg.samples {
        let rust = |v: &mut Vec<Sample>, f: &mut dyn FnMut() -> usize| {
            v.push(sample(1, &mut || f()));
        };
        if i % 2 == 0 {
            rust(&mut ours, &mut import);
            theirs.push(python.load(input));
        } else {
            theirs.push(python.load(input));
            rust(&mut ours, &mut import);
        }
    }
    let ours = Stats::from_samples(ours);
    theirs.sort();
    let python_median = theirs[theirs.len() / 2];
    let peak = peak_memory(input);
    println!();
    println!(
        "== {} ({:.1} MB of JSON, {events} events, {gemms} GEMMs)",
        input.display(),
        text_len as f64 / 1e6
    );
    let rows = vec![
        Row::new(
            "gemm-audit import (read, bind, write)",
            ours,
            format!("{:.0} MB/s", text_len as f64 / 1e6 / ours.median_s()),
        ),
        Row::new(
            "python3 json.load (in-process time)",
            Stats {
                median: python_median,
                min: theirs[0],
                cpu_median: None,
            },
            format!(
                "{:.0} MB/s",
                text_len as f64 / 1e6 / python_median.as_secs_f64()
            ),
        ),
    ];
    print_table(&rows);
    let mut summary = format!(
        "  import / json.load = {:.2} (median), {:.2} (min)",
        ours.median_s() / python_median.as_secs_f64(),
        ours.min_s() / theirs[0].as_secs_f64()
    );
    if let Some((peak, idle)) = peak {
        let _ = write!(
            summary,
            "\n  peak resident memory of an import: {:.1} MB = {:.2}x the JSON ({:.1} MB of it the process before reading)",
            peak as f64 / 1e6,
            peak as f64 / text_len as f64,
            idle as f64 / 1e6
        );
    }
    println!("{summary}");
}

/// A `python3` that times `json.load` of the paths it is sent, one a line.
struct Python {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

const PYTHON_LOOP: &str = r#"
import gzip, json, sys, time
for line in sys.stdin:
    path = line.rstrip("\n")
    opener = gzip.open if path.endswith(".gz") else open
    t = time.perf_counter()
    with opener(path, "rb") as f:
        json.load(f)
    print(time.perf_counter() - t, flush=True)
"#;

impl Python {
    fn start() -> Python {
        let mut child = Command::new("python3")
            .args(["-c", PYTHON_LOOP])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 on the PATH");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        Python { child, out }
    }

    fn load(&mut self, path: &Path) -> Duration {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{}", path.display()).expect("send a path");
        stdin.flush().expect("flush");
        let mut line = String::new();
        self.out.read_line(&mut line).expect("a time back");
        Duration::from_secs_f64(line.trim().parse().expect("seconds"))
    }
}

impl Drop for Python {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// `VmHWM` of this process, in bytes (Linux).
fn high_water_mark() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// In a child process: the high-water mark before and after importing
/// `path`, printed as two numbers.
fn child_import(path: &Path) {
    let idle = high_water_mark().unwrap_or(0);
    let t = profile::import_file(path, &ImportOptions::default())
        .expect("imports")
        .trace;
    drop(std::hint::black_box(t));
    println!("{} {idle}", high_water_mark().unwrap_or(0));
}

/// The peak resident memory of a fresh process importing `path`, and what
/// it held before it started.
fn peak_memory(path: &Path) -> Option<(u64, u64)> {
    let out = Command::new(std::env::current_exe().ok()?)
        .arg("--child-import")
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut it = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}

/// A GPU training profile as Kineto writes one (the event kinds, fields
/// and proportions of a real `torch.profiler` trace of a transformer
/// step: operators with recorded shapes, their runtime calls, kernels with
/// their launch arguments, flow arrows, backward ops on autograd's thread),
/// of about `events` events.
fn generated_profile(events: usize) -> String {
    let mut s = String::with_capacity(events * 360);
    s.push_str(
        r#"{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150754820096, "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132, "sharedMemPerBlockOptin": 232448}], "cupti_version": 28, "cuda_runtime_version": 13000, "cuda_driver_version": 13000, "record_shapes": 1, "trace_id": "0", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1759000000000000000, "traceEvents": ["#,
    );
    let (mut n, mut ts, mut corr, mut ext) = (0usize, 5_000_000.0f64, 1u64, 1u64);
    let mut first = true;
    let mut push = |s: &mut String, e: &str| {
        if !first {
            s.push_str(",\n");
        }
        first = false;
        s.push_str(e);
    };
    let shapes = [(512, 1536), (512, 512), (512, 2048), (2048, 512)];
    while n < events {
        for (layer, &(k, nn)) in shapes.iter().cycle().take(16).enumerate() {
            for (tid, op_name, seq) in [
                (1001, "aten::linear", layer),
                (
                    1002,
                    "autograd::engine::evaluate_function: AddmmBackward0",
                    layer + 1000,
                ),
            ] {
                let start = ts;
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "X", "cat": "cpu_op", "name": "{op_name}", "pid": 1000, "tid": {tid}, "ts": {start:.3}, "dur": 48.125, "args": {{"External id": {ext}, "Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", "", ""], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"], "Input Strides": [[{k}, 1], [{k}, 1], [1]], "Input Dims": [[8, 64, {k}], [{nn}, {k}], [{nn}]], "Ev Idx": {ext}}}}}"#
                    ),
                );
                ext += 1;
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::t", "pid": 1000, "tid": {tid}, "ts": {:.3}, "dur": 3.211, "args": {{"External id": {ext}, "Record function id": 0, "Concrete Inputs": [""], "Input type": ["c10::BFloat16"], "Input Strides": [[{k}, 1]], "Input Dims": [[{nn}, {k}]], "Ev Idx": {ext}}}}}"#,
                        start + 1.0
                    ),
                );
                ext += 1;
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1000, "tid": {tid}, "ts": {:.3}, "dur": 38.5, "args": {{"External id": {ext}, "Record function id": 0, "Concrete Inputs": ["", "", "", "1", "1"], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"], "Input Strides": [[1], [{k}, 1], [1, {k}], [], []], "Input Dims": [[{nn}], [512, {k}], [{k}, {nn}], [], []], "Ev Idx": {ext}}}}}"#,
                        start + 5.0
                    ),
                );
                let launch = start + 20.0;
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000, "tid": {tid}, "ts": {launch:.3}, "dur": 6.25, "args": {{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}}"#
                    ),
                );
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "s", "id": {corr}, "pid": 1000, "tid": {tid}, "ts": {launch:.3}, "cat": "ac2g", "name": "ac2g"}}"#
                    ),
                );
                let kts = launch + 40.0;
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_coopA_bias_TNT", "pid": 0, "tid": 7, "ts": {kts:.3}, "dur": 14.912, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 168, "shared memory": 213248, "blocks per SM": 1.0, "warps per SM": 12.0, "grid": [{}, 4, 1], "block": [384, 1, 1], "est. achieved occupancy %": 19}}}}"#,
                        nn / 128
                    ),
                );
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {kts:.3}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}"#
                    ),
                );
                corr += 1;
                ext += 1;
                // The activation after it: an op, its launch and kernel.
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::gelu", "pid": 1000, "tid": {tid}, "ts": {:.3}, "dur": 12.0, "args": {{"External id": {ext}, "Record function id": 0, "Concrete Inputs": ["", "none"], "Input type": ["c10::BFloat16", ""], "Input Strides": [[{nn}, 1], []], "Input Dims": [[512, {nn}], []], "Ev Idx": {ext}}}}}"#,
                        start + 50.0
                    ),
                );
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000, "tid": {tid}, "ts": {:.3}, "dur": 4.0, "args": {{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}}"#,
                        start + 52.0
                    ),
                );
                push(
                    &mut s,
                    &format!(
                        r#"{{"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{{lambda()#2}}::operator()() const::{{lambda()#4}}::operator()() const::{{lambda(c10::BFloat16)#1}}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{{lambda()#2}}::operator()() const::{{lambda()#4}}::operator()() const::{{lambda(c10::BFloat16)#1}}, std::array<char*, 2ul>)", "pid": 0, "tid": 7, "ts": {:.3}, "dur": 3.1, "args": {{"External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 24, "shared memory": 0, "blocks per SM": 15.5, "warps per SM": 62.1, "grid": [2048, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 97}}}}"#,
                        start + 100.0
                    ),
                );
                corr += 1;
                ext += 1;
                n += 10;
                ts += 70.0;
            }
        }
    }
    s.push_str("\n]}\n");
    s
}
