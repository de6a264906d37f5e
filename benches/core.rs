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
//! result is not part of its time. The two sides of every reported ratio are
//! sampled alternately, and samples of 50 ms or more also report this
//! thread's on-CPU time (Linux schedstat), which is steadier than wall time
//! on a shared machine. See `docs/performance.md`.
//!
//! Sections are listed in [`SECTIONS`]; each returns rows for the table and
//! named figures for the summary. Replay overhead is measured by the generic
//! [`replay_overhead`], which takes the replay target and its work as
//! closures, so another replay target (a CPU graph) is one more section that
//! calls it.

use gemm_audit::CapturedGemmGraphPlan;
use gemm_audit::backend::GemmBackend;
use gemm_audit::digest::{FieldValue, FieldVisitor, Framer};
use gemm_audit::launch_set::{LAUNCH_SET_DOMAIN, build_resolved_gemm_launch_set};
use gemm_audit::testkit;
use gemm_audit::trace::codec;
use gemm_audit::{RecordedGemmTrace, ResolvedGemmRoute};
use sha2::{Digest as _, Sha256};
use std::cell::RefCell;
use std::hint::black_box;

/// Routes in the large trace (benchmarks 1 and 2).
const LARGE_ROUTES: u64 = 100_000;
/// Routes in the replay plan (benchmark 3).
const REPLAY_ROUTES: u64 = 128;
/// Side of the square f32 matmul used as fixed replay work.
const MATMUL_N: usize = 64;

mod harness;
use harness::*;
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
    Section {
        name: "replay-cpu-graph",
        title: "3b. Replay overhead: validated vs unvalidated replay of one CPU graph",
        run: bench_replay_cpu_graph,
    },
];

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
    println!(
        "on-CPU med: median on-CPU time of this thread (Linux schedstat, tick granularity), \
         for samples of >= 50 ms"
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

// Over 100 lines: one interleaved sampling loop over every rebuild step, so the ratios share one run.
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

    // The ratio's two sides are sampled alternately. The plan takes its
    // routes by value (as `check` hands over a trace it read); the copy made
    // for each sample is not timed.
    let (sha, full) = measure_pair_setup(
        w,
        s,
        || Sha256::digest(black_box(&bytes)),
        || (trace.manifest(), trace.routes.clone()),
        |(manifest, routes)| {
            let plan = CapturedGemmGraphPlan::new(black_box(manifest), black_box(routes))
                .expect("sample trace rebuilds");
            plan.validate(black_box(&trace.context))
                .expect("sample trace validates");
            plan
        },
    );
    let (sha_b, build) = measure_pair(
        w,
        s,
        1,
        || Sha256::digest(black_box(&bytes)),
        || build_resolved_gemm_launch_set(black_box(&trace.routes)).expect("builds"),
    );
    let plan = CapturedGemmGraphPlan::from_trace(&trace).expect("sample trace rebuilds");
    // Ten walks per sample, so a sample is long enough for on-CPU time.
    let validate = measure(w, s, 10, || {
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
    let ratio_cpu = sha.cpu_s().zip(full.cpu_s()).map(|(a, b)| a / b);
    let build_ratio = sha_b.median_s() / build.median_s();
    let build_ratio_cpu = sha_b.cpu_s().zip(build.cpu_s()).map(|(a, b)| a / b);
    let fmt_opt = |r: Option<f64>| r.map_or("n/a".to_string(), |r| format!("{r:.3}"));
    // The per-route split uses on-CPU time where available (less disturbed
    // by other processes), else wall time.
    let (basis, t) = if [&sha, &full, &frame_only, &clone, &validate]
        .iter()
        .all(|st| st.cpu_median.is_some())
    {
        (
            "on-CPU",
            (|st: &Stats| st.cpu_s().unwrap_or(0.0)) as fn(&Stats) -> f64,
        )
    } else {
        ("wall", (|st: &Stats| st.median_s()) as fn(&Stats) -> f64)
    };
    let per_route = |st: &Stats| t(st) * 1e9 / n as f64;
    let rows = vec![
        Row::new(
            "raw SHA-256 of the framed bytes (baseline)",
            sha,
            note_bytes(&sha),
        ),
        Row::new("plan new + validate", full, note_bytes(&full)),
        Row::new(
            "  raw SHA-256 (paired with the next row)",
            sha_b,
            note_bytes(&sha_b),
        ),
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
            "rebuild: {n} routes, {:.1} MB of framed launch-set bytes ({:.0} B/route); \
             size_of::<ResolvedGemmRoute>() = {} B",
            mb(len),
            len as f64 / n as f64,
            size_of::<ResolvedGemmRoute>()
        ),
        format!(
            "rebuild: plan new+validate {:.0} k routes/s, {:.1} MB/s; raw SHA-256 {:.1} MB/s",
            routes_per_s(&full) / 1e3,
            mbps(len, &full).0,
            mbps(len, &sha).0
        ),
        format!(
            "rebuild: RATIO plan new+validate / raw SHA-256 = {ratio:.3} \
             (min/min {ratio_best:.3}, on-CPU {}); goal >= 0.8: {}",
            fmt_opt(ratio_cpu),
            if ratio >= 0.8 { "met" } else { "NOT met" }
        ),
        format!(
            "rebuild: build_resolved_gemm_launch_set alone / raw SHA-256 = {build_ratio:.3} \
             (on-CPU {})",
            fmt_opt(build_ratio_cpu)
        ),
        format!(
            "rebuild: per route ({basis}): total {:.0} ns = sha {:.0} + framing {:.0} \
             + clone {:.0} + validate {:.0} + rest {:.0}",
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
    let samples = if cfg.quick { 5 } else { 61 };
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
    let overhead_min_ns = (with_gate.min_s() - direct.min_s()) * 1e9;
    let gate_ns = (gate.median_s() - noop.median_s()) * 1e9;
    let ratio = with_gate.median_s() / direct.median_s();
    let ratio_min = with_gate.min_s() / direct.min_s();
    let ratio_gate = (direct.median_s() + gate_ns * 1e-9) / direct.median_s();
    let rows = vec![
        Row::new(
            format!("{label}: direct work(target)"),
            direct,
            String::new(),
        ),
        Row::new(
            format!("{label}: validated replay of the same work"),
            with_gate,
            format!("ratio {ratio:.4} (min/min {ratio_min:.4})"),
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
            "{label}: per-replay overhead of the validated path: {gate_ns:.1} ns (gate alone, \
             {gate_inner} calls per sample) = {:.3} % of the work, ratio {ratio_gate:.5}",
            gate_ns / (direct.median_s() * 1e9) * 100.0
        ),
        format!(
            "{label}: validated/direct with the work = {ratio:.4} (min/min {ratio_min:.4}); \
             difference {overhead_ns:.0} ns of medians, {overhead_min_ns:.0} ns of minima \
             (within run-to-run noise of the work itself)"
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

/// A captured CPU graph of eight real GEMMs (16x256x64, one per route kind
/// and dtype mix): the validated replay `CpuBackend::replay` performs
/// against running the same frozen launches without the gate.
fn bench_replay_cpu_graph(cfg: &Config) -> Report {
    use gemm_audit::backend::{Backend, cpu::CpuBackend};
    let cpu = CpuBackend::default();
    let w = gemm_audit::workload::Workload::from_toml(
        &(0..8)
            .map(|i| {
                let (dtype, route) = [("bf16", "tiled"), ("f32", "split-k-fixed:4"), ("f16", "scalar-fma"), ("f32", "policy")][i % 4];
                format!("[[gemm]]\nname = \"g{i}\"\nop = \"nn\"\ndtype = \"{dtype}\"\nm = 16\nk = 256\nn = 64\nroute = \"{route}\"\n")
            })
            .fold("name = \"bench-graph\"\n".to_string(), |acc, g| acc + &g),
    )
    .expect("bench workload parses");
    let backend = Backend::new(cpu.clone());
    let rec = gemm_audit::recorder::record(&backend, &w, &mut |_, _| {}).expect("records");
    let seeds: Vec<u64> = rec
        .trace
        .fingerprints
        .iter()
        .map(|f| f.input_seed)
        .collect();
    let graph = cpu
        .capture(&rec.trace.manifest(), &rec.trace.routes, &seeds)
        .expect("captures");
    let live = cpu.context().clone();
    replay_overhead(
        cfg,
        "cpu-graph",
        &graph,
        |g, work| {
            g.plan()
                .with_validated_launch(black_box(&live), "bench", |_| work(g))
                .expect("replay accepted")
        },
        |g| {
            black_box(g.launches().replay_unvalidated());
        },
    )
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
