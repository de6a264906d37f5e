//! Core benchmarks of gemm-audit, with a small std-only harness.
//!
//! ```text
//! cargo bench --bench core               # full run
//! cargo bench --bench core -- --quick    # fewer repetitions
//! cargo bench --bench core -- rebuild    # only sections whose name contains "rebuild"
//! ```
//!
//! Each measurement runs its closure a few times to warm up, then takes N
//! timed samples and reports the median and the minimum. A sample may run
//! the closure several times (`inner`) and is divided by that count, so
//! sub-microsecond operations are timed over a measurable span. Whatever a
//! closure returns is dropped after the clock stops, so freeing a large
//! result is not part of its time.
//!
//! Sections are listed in [`SECTIONS`]; each returns rows for the table and
//! named figures for the summary. Replay overhead is measured by the generic
//! [`replay_overhead`], which takes the replay target and its work as
//! closures, so another replay target (a CPU graph) is one more section that
//! calls it.

use gemm_audit::CapturedGemmGraphPlan;
use gemm_audit::digest::{FieldValue, FieldVisitor, Framer};
use gemm_audit::launch_set::{LAUNCH_SET_DOMAIN, build_resolved_gemm_launch_set};
use gemm_audit::testkit;
use gemm_audit::trace::codec;
use gemm_audit::{RecordedGemmTrace, ResolvedGemmRoute};
use sha2::{Digest as _, Sha256};
use std::cell::RefCell;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Routes in the large trace (benchmarks 1 and 2).
const LARGE_ROUTES: u64 = 100_000;
/// Routes in the replay plan (benchmark 3).
const REPLAY_ROUTES: u64 = 128;
/// Side of the square f32 matmul used as fixed replay work.
const MATMUL_N: usize = 64;

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// Repetition counts for one run.
#[derive(Clone, Copy)]
struct Config {
    quick: bool,
    /// Warm-up calls before timing.
    warmup: usize,
    /// Timed samples.
    samples: usize,
}

impl Config {
    fn from_args() -> (Config, Vec<String>) {
        let mut quick = false;
        let mut filters = Vec::new();
        // `cargo bench` passes `--bench`; other flags are ignored too.
        for a in std::env::args().skip(1) {
            if a == "--quick" {
                quick = true;
            } else if !a.starts_with('-') {
                filters.push(a);
            }
        }
        let cfg = if quick {
            Config {
                quick,
                warmup: 1,
                samples: 3,
            }
        } else {
            Config {
                quick,
                warmup: 2,
                samples: 11,
            }
        };
        (cfg, filters)
    }

    /// Samples for sub-millisecond measurements, which are cheap to repeat.
    fn small_samples(&self) -> usize {
        if self.quick { 5 } else { 31 }
    }
}

/// Median and minimum time of one call.
#[derive(Clone, Copy, Debug)]
struct Stats {
    median: Duration,
    min: Duration,
}

impl Stats {
    fn from_samples(mut per_call: Vec<Duration>) -> Stats {
        assert!(!per_call.is_empty());
        per_call.sort();
        let n = per_call.len();
        let median = if n % 2 == 1 {
            per_call[n / 2]
        } else {
            (per_call[n / 2 - 1] + per_call[n / 2]) / 2
        };
        Stats {
            median,
            min: per_call[0],
        }
    }

    fn median_s(&self) -> f64 {
        self.median.as_secs_f64()
    }

    fn min_s(&self) -> f64 {
        self.min.as_secs_f64()
    }
}

/// Times one sample: `inner` calls of `f`, divided by `inner`. With one
/// call, its result is dropped after the clock stops; with several (only
/// used for small results), each is dropped as it comes.
fn sample<R>(inner: u32, f: &mut impl FnMut() -> R) -> Duration {
    if inner == 1 {
        let start = Instant::now();
        let r = black_box(f());
        let elapsed = start.elapsed();
        drop(r);
        return elapsed;
    }
    let start = Instant::now();
    for _ in 0..inner {
        drop(black_box(f()));
    }
    start.elapsed() / inner
}

/// Warms up, then takes `samples` timed samples of `inner` calls each.
fn measure<R>(warmup: usize, samples: usize, inner: u32, mut f: impl FnMut() -> R) -> Stats {
    for _ in 0..warmup {
        drop(black_box(f()));
    }
    Stats::from_samples((0..samples).map(|_| sample(inner, &mut f)).collect())
}

/// Like [`measure`] for two closures, alternating their samples so drift on
/// a shared machine affects both alike.
fn measure_pair<A, B>(
    warmup: usize,
    samples: usize,
    inner: u32,
    mut a: impl FnMut() -> A,
    mut b: impl FnMut() -> B,
) -> (Stats, Stats) {
    for _ in 0..warmup {
        drop(black_box(a()));
        drop(black_box(b()));
    }
    let (mut sa, mut sb) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for i in 0..samples {
        // Swap the order every other sample.
        if i % 2 == 0 {
            sa.push(sample(inner, &mut a));
            sb.push(sample(inner, &mut b));
        } else {
            sb.push(sample(inner, &mut b));
            sa.push(sample(inner, &mut a));
        }
    }
    (Stats::from_samples(sa), Stats::from_samples(sb))
}

/// One line of the results table.
struct Row {
    name: String,
    stats: Stats,
    /// Throughput or other derived figures, already formatted.
    note: String,
}

impl Row {
    fn new(name: impl Into<String>, stats: Stats, note: impl Into<String>) -> Row {
        Row {
            name: name.into(),
            stats,
            note: note.into(),
        }
    }
}

/// What a section hands back: table rows and summary lines.
#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    summary: Vec<String>,
}

/// A benchmark section: name, title, and the function that runs it.
struct Section {
    name: &'static str,
    title: &'static str,
    run: fn(&Config) -> Report,
}

/// Every section, in run order. A new replay target is one more entry whose
/// function calls [`replay_overhead`].
const SECTIONS: &[Section] = &[
    Section {
        name: "rebuild",
        title: "1. Plan rebuild + validation, 100,000 routes",
        run: bench_rebuild,
    },
    Section {
        name: "codec",
        title: "2. Trace encode / decode / load, 100,000 routes",
        run: bench_codec,
    },
    Section {
        name: "replay-plan",
        title: "3. Replay overhead: validated vs direct, plan of 128 routes",
        run: bench_replay_plan,
    },
];

fn fmt_time(d: Duration) -> String {
    let ns = d.as_secs_f64() * 1e9;
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

/// MB/s (1 MB = 10^6 bytes) at the median and at the minimum time.
fn mbps(bytes: usize, s: &Stats) -> (f64, f64) {
    (mb(bytes) / s.median_s(), mb(bytes) / s.min_s())
}

fn print_table(rows: &[Row]) {
    let w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(9);
    println!(
        "  {:<w$}  {:>11}  {:>11}  {}",
        "benchmark", "median", "min", "throughput (median / best)"
    );
    println!(
        "  {}  {}  {}  {}",
        "-".repeat(w),
        "-".repeat(11),
        "-".repeat(11),
        "-".repeat(26)
    );
    for r in rows {
        println!(
            "  {:<w$}  {:>11}  {:>11}  {}",
            r.name,
            fmt_time(r.stats.median),
            fmt_time(r.stats.min),
            r.note
        );
    }
}

fn main() {
    let (cfg, filters) = Config::from_args();
    println!(
        "gemm-audit core benchmarks ({} mode: {} warm-up, {} samples per large measurement, {} per small one)",
        if cfg.quick { "quick" } else { "full" },
        cfg.warmup,
        cfg.samples,
        cfg.small_samples()
    );
    println!(
        "times are per call; MB = 10^6 bytes; throughput shown at the median and at the min time"
    );
    let mut summary = Vec::new();
    for s in SECTIONS {
        if !filters.is_empty() && !filters.iter().any(|f| s.name.contains(f.as_str())) {
            continue;
        }
        println!();
        println!("== {} [{}]", s.title, s.name);
        let report = (s.run)(&cfg);
        print_table(&report.rows);
        summary.extend(report.summary);
    }
    if !summary.is_empty() {
        println!();
        println!("== Summary (median-based unless stated)");
        for line in summary {
            println!("  {line}");
        }
    }
}

// ---------------------------------------------------------------------------
// 1. Plan rebuild + validation
// ---------------------------------------------------------------------------

/// The exact bytes the launch-set builder hashes for `trace`, framed into
/// one buffer the way `ResolvedGemmLaunchSetBuilder` frames them.
fn launch_set_bytes(trace: &RecordedGemmTrace) -> Vec<u8> {
    let mut framer = Framer::new();
    framer.domain(LAUNCH_SET_DOMAIN);
    framer.field("launch_count", FieldValue::U64(trace.routes.len() as u64));
    for (i, route) in trace.routes.iter().enumerate() {
        framer.field("route.index", FieldValue::U64(i as u64));
        framer.frame(route);
    }
    framer.bytes().to_vec()
}

fn bench_rebuild(cfg: &Config) -> Report {
    let trace = testkit::sample_trace(LARGE_ROUTES);
    let n = trace.routes.len();
    let bytes = launch_set_bytes(&trace);
    let raw: [u8; 32] = Sha256::digest(&bytes).into();
    assert_eq!(
        raw, trace.launch_set.ordered_digest.0,
        "the baseline buffer must be exactly the bytes the launch set hashes"
    );
    let len = bytes.len();
    let (w, s) = (cfg.warmup, cfg.samples);

    let sha = measure(w, s, 1, || Sha256::digest(black_box(&bytes)));
    let full = measure(w, s, 1, || {
        let plan =
            CapturedGemmGraphPlan::from_trace(black_box(&trace)).expect("sample trace rebuilds");
        plan.validate(black_box(&trace.context))
            .expect("sample trace validates");
        plan
    });
    let build = measure(w, s, 1, || {
        build_resolved_gemm_launch_set(black_box(&trace.routes)).expect("builds")
    });
    let plan = CapturedGemmGraphPlan::from_trace(&trace).expect("sample trace rebuilds");
    let validate = measure(w, s, 1, || {
        plan.validate(black_box(&trace.context))
            .expect("sample trace validates")
    });
    drop(plan);
    // Diagnostic splits of the rebuild: the route copy `from_trace` makes,
    // and framing alone (a reused buffer cleared per route, no hashing).
    let clone = measure(w, s, 1, || black_box(&trace.routes).clone());
    let mut framer = Framer::new();
    let frame_only = measure(w, s, 1, || {
        framer.clear();
        framer.domain(LAUNCH_SET_DOMAIN);
        framer.field("launch_count", FieldValue::U64(n as u64));
        let mut total = framer.bytes().len();
        for (i, route) in black_box(&trace.routes).iter().enumerate() {
            framer.clear();
            framer.field("route.index", FieldValue::U64(i as u64));
            framer.frame(route);
            total += black_box(framer.bytes()).len();
        }
        assert_eq!(total, len);
        total
    });

    let routes_per_s = |st: &Stats| n as f64 / st.median_s();
    let note_bytes = |st: &Stats| {
        let (m, b) = mbps(len, st);
        format!(
            "{m:8.1} / {b:8.1} MB/s  ({:.0} k routes/s)",
            routes_per_s(st) / 1e3
        )
    };
    let ratio = sha.median_s() / full.median_s();
    let ratio_best = sha.min_s() / full.min_s();
    let build_ratio = sha.median_s() / build.median_s();
    let per_route = |st: &Stats| st.median_s() * 1e9 / n as f64;
    let rows = vec![
        Row::new(
            "raw SHA-256 of the framed bytes (baseline)",
            sha,
            note_bytes(&sha),
        ),
        Row::new("from_trace + validate", full, note_bytes(&full)),
        Row::new(
            "  build_resolved_gemm_launch_set",
            build,
            note_bytes(&build),
        ),
        Row::new(
            "  validate (plan already built)",
            validate,
            note_bytes(&validate),
        ),
        Row::new(
            "  diag: routes.clone() (in from_trace)",
            clone,
            note_bytes(&clone),
        ),
        Row::new(
            "  diag: framing only, no hashing",
            frame_only,
            note_bytes(&frame_only),
        ),
    ];
    let summary = vec![
        format!(
            "rebuild: {n} routes, {:.1} MB of framed launch-set bytes ({:.0} B/route); size_of::<ResolvedGemmRoute>() = {} B",
            mb(len),
            len as f64 / n as f64,
            std::mem::size_of::<ResolvedGemmRoute>()
        ),
        format!(
            "rebuild: from_trace+validate {:.0} k routes/s, {:.1} MB/s; raw SHA-256 {:.1} MB/s",
            routes_per_s(&full) / 1e3,
            mbps(len, &full).0,
            mbps(len, &sha).0
        ),
        format!(
            "rebuild: ratio to raw hashing {ratio:.3} (best-of: {ratio_best:.3}); goal >= 0.8: {}",
            if ratio >= 0.8 { "met" } else { "NOT met" }
        ),
        format!("rebuild: build_resolved_gemm_launch_set alone: ratio {build_ratio:.3}"),
        format!(
            "rebuild: per route: total {:.0} ns = sha {:.0} + framing {:.0} + clone {:.0} + validate {:.0} + rest {:.0}",
            per_route(&full),
            per_route(&sha),
            per_route(&frame_only),
            per_route(&clone),
            per_route(&validate),
            per_route(&full)
                - per_route(&sha)
                - per_route(&frame_only)
                - per_route(&clone)
                - per_route(&validate)
        ),
    ];
    Report { rows, summary }
}

// ---------------------------------------------------------------------------
// 2. Trace encode / decode / load
// ---------------------------------------------------------------------------

/// A temporary directory removed (with its contents) when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("gemm-audit-bench-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bench_codec(cfg: &Config) -> Report {
    let trace = testkit::sample_trace(LARGE_ROUTES);
    let limits = codec::Limits::default();
    let image = codec::encode_trace(&trace).expect("encodes");
    assert_eq!(
        codec::decode_trace(&image, &limits).expect("decodes"),
        trace
    );
    let len = image.len();
    let (w, s) = (cfg.warmup, cfg.samples);

    let encode = measure(w, s, 1, || {
        codec::encode_trace(black_box(&trace)).expect("encodes")
    });
    let decode = measure(w, s, 1, || {
        codec::decode_trace(black_box(&image), &limits).expect("decodes")
    });

    let dir = TempDir::new("codec");
    let path = dir.0.join("trace-100k.gat");
    trace.write(&path, false).expect("writes");
    let on_disk = std::fs::metadata(&path).expect("stat").len() as usize;
    assert_eq!(on_disk, len);
    // The file was just written, so it is in the page cache: this is a warm load.
    let load = measure(w, s, 1, || {
        RecordedGemmTrace::read(black_box(&path)).expect("reads")
    });
    std::fs::remove_file(&path).expect("remove trace file");
    drop(dir);

    let n = trace.routes.len();
    let note = |st: &Stats| {
        let (m, b) = mbps(len, st);
        format!(
            "{m:8.1} / {b:8.1} MB/s  ({:.0} k routes/s)",
            n as f64 / st.median_s() / 1e3
        )
    };
    let rows = vec![
        Row::new("encode_trace", encode, note(&encode)),
        Row::new("decode_trace (default limits)", decode, note(&decode)),
        Row::new(
            "RecordedGemmTrace::read (warm page cache)",
            load,
            note(&load),
        ),
    ];
    let summary = vec![
        format!(
            "codec: file of {n} routes = {:.2} MB ({len} bytes, {:.0} B/route)",
            mb(len),
            len as f64 / n as f64
        ),
        format!(
            "codec: encode {:.1} MB/s, decode {:.1} MB/s, load from disk {} ({:.1} MB/s)",
            mbps(len, &encode).0,
            mbps(len, &decode).0,
            fmt_time(load.median),
            mbps(len, &load).0
        ),
    ];
    Report { rows, summary }
}

// ---------------------------------------------------------------------------
// 3. Replay overhead
// ---------------------------------------------------------------------------

/// Times a replay target two ways: `validated` (through the replay gate) and
/// `direct` (the same work, no gate), each running `work`. Also times the
/// gate alone (`validated` with no work against a no-op). Rows are named
/// after `label`.
///
/// `validated` must call its work argument exactly once when the replay is
/// accepted. `work` consumes its own result (through `black_box`). The
/// validated path reaches the work through one `dyn` call, a few ns that
/// are counted as gate overhead.
fn replay_overhead<T>(
    cfg: &Config,
    label: &str,
    target: &T,
    validated: impl Fn(&T, &mut dyn FnMut(&T)),
    work: impl FnMut(&T),
) -> Report {
    // Both paths borrow the one work closure (a RefCell borrow each: equal cost).
    let work = RefCell::new(work);
    let samples = cfg.small_samples();
    // Replays per sample: enough that one sample spans a few milliseconds.
    let inner = if cfg.quick { 50 } else { 200 };
    let (with_gate, direct) = measure_pair(
        cfg.warmup,
        samples,
        inner,
        || validated(target, &mut |t| (work.borrow_mut())(t)),
        || (work.borrow_mut())(black_box(target)),
    );
    let gate_inner = if cfg.quick { 20_000 } else { 200_000 };
    let (gate, noop) = measure_pair(
        cfg.warmup,
        samples,
        gate_inner,
        || {
            validated(target, &mut |t| {
                black_box(t);
            })
        },
        || {
            black_box(target);
        },
    );
    let overhead_ns = (with_gate.median_s() - direct.median_s()) * 1e9;
    let gate_ns = (gate.median_s() - noop.median_s()) * 1e9;
    let ratio = with_gate.median_s() / direct.median_s();
    let rows = vec![
        Row::new(
            format!("{label}: direct work(target)"),
            direct,
            String::new(),
        ),
        Row::new(
            format!("{label}: validated replay of the same work"),
            with_gate,
            format!("ratio {ratio:.4}"),
        ),
        Row::new(
            format!("{label}: gate alone (validated, no work)"),
            gate,
            String::new(),
        ),
        Row::new(
            format!("{label}: no-op call (reference for the gate)"),
            noop,
            String::new(),
        ),
    ];
    let summary = vec![
        format!(
            "{label}: validated/direct = {ratio:.4}; overhead per replay {overhead_ns:.0} ns from the difference of medians (noisy), {gate_ns:.0} ns measured on the gate alone"
        ),
        format!(
            "{label}: gate overhead relative to the work: {:.3} %",
            gate_ns / (direct.median_s() * 1e9) * 100.0
        ),
    ];
    Report { rows, summary }
}

/// Fixed CPU work: C = A * B for square `MATMUL_N` f32 matrices, naive
/// i-k-j loop. Returns one element so the result is used.
#[inline(never)]
fn matmul(a: &[f32], b: &[f32], c: &mut [f32]) -> f32 {
    let n = MATMUL_N;
    c.fill(0.0);
    for i in 0..n {
        for k in 0..n {
            let aik = a[i * n + k];
            let (row, brow) = (&mut c[i * n..(i + 1) * n], &b[k * n..(k + 1) * n]);
            for (cv, bv) in row.iter_mut().zip(brow) {
                *cv += aik * bv;
            }
        }
    }
    c[n * n - 1]
}

fn bench_replay_plan(cfg: &Config) -> Report {
    let trace = testkit::sample_trace(REPLAY_ROUTES);
    let plan = CapturedGemmGraphPlan::from_trace(&trace).expect("sample trace rebuilds");
    // A separate, equal context: the gate compares it field by field.
    let live = trace.context.clone();
    let n = MATMUL_N;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 17) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 13) as f32 * 0.5).collect();
    let mut c = vec![0f32; n * n];

    // The cold path: the first replay under a context walks every route.
    let cold = measure(cfg.warmup, cfg.small_samples(), 100, || {
        plan.validate(black_box(&live)).expect("validates")
    });

    let mut report = replay_overhead(
        cfg,
        "plan",
        &plan,
        |p, work| {
            p.with_validated_launch(black_box(&live), "bench", |p| work(p))
                .expect("replay accepted")
        },
        |p| {
            black_box(matmul(&a, &b, &mut c) + p.routes().len() as f32);
        },
    );
    report.rows.insert(
        0,
        Row::new(
            format!("plan: validate, {REPLAY_ROUTES} routes (first replay, cold path)"),
            cold,
            format!(
                "{:.1} ns/route",
                cold.median_s() * 1e9 / REPLAY_ROUTES as f64
            ),
        ),
    );
    report.summary.push(format!(
        "plan: the first replay under a new context also pays the full validation walk: {}",
        fmt_time(cold.median)
    ));
    report
}
