//! The benchmarks' std-only harness: warm-up, timed samples (median, min
//! and this thread's on-CPU time), interleaved pairs for every reported
//! ratio, the results table and a temporary folder. See
//! `docs/performance.md`.

// Each bench uses part of it.
#![allow(dead_code)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Repetition counts for one run.
#[derive(Clone, Copy)]
pub(crate) struct Config {
    pub quick: bool,
    /// Warm-up calls before timing.
    pub warmup: usize,
    /// Timed samples.
    pub samples: usize,
}

impl Config {
    pub(crate) fn from_args() -> (Config, Vec<String>) {
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
    pub(crate) fn small_samples(&self) -> usize {
        if self.quick { 5 } else { 31 }
    }
}

/// This thread's on-CPU time, from `/proc/thread-self/schedstat` (Linux;
/// `None` elsewhere). On a shared machine it leaves out the time the thread
/// waited for a core, which wall time includes (it still includes slowdowns
/// from caches and memory bandwidth shared with other processes).
pub(crate) fn thread_cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The kernel updates a running thread's schedstat at scheduler ticks (4 ms
/// at 250 Hz), so on-CPU time is only reported for samples at least this
/// long (error under ~8% per sample, less on the median).
pub(crate) const MIN_CPU_SPAN: Duration = Duration::from_millis(50);

/// One timed sample, per call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub wall: Duration,
    pub cpu: Option<Duration>,
}

/// Median and minimum wall time of one call, and the median on-CPU time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stats {
    pub median: Duration,
    pub min: Duration,
    pub cpu_median: Option<Duration>,
}

pub(crate) fn median_of(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

impl Stats {
    pub(crate) fn from_samples(samples: Vec<Sample>) -> Stats {
        assert!(!samples.is_empty());
        let wall: Vec<Duration> = samples.iter().map(|s| s.wall).collect();
        let cpu: Option<Vec<Duration>> = samples.iter().map(|s| s.cpu).collect();
        Stats {
            min: wall.iter().copied().min().unwrap_or_default(),
            median: median_of(wall),
            cpu_median: cpu.map(median_of),
        }
    }

    pub(crate) fn median_s(&self) -> f64 {
        self.median.as_secs_f64()
    }

    pub(crate) fn min_s(&self) -> f64 {
        self.min.as_secs_f64()
    }

    pub(crate) fn cpu_s(&self) -> Option<f64> {
        self.cpu_median.map(|d| d.as_secs_f64())
    }
}

/// Times one sample: `inner` calls of `f`, divided by `inner`. With one
/// call, its result is dropped after the clock stops; with several (only
/// used for small results), each is dropped as it comes.
pub(crate) fn sample<R>(inner: u32, f: &mut impl FnMut() -> R) -> Sample {
    let cpu0 = thread_cpu_time();
    let start = Instant::now();
    let (wall, cpu1);
    if inner == 1 {
        let r = black_box(f());
        wall = start.elapsed();
        cpu1 = thread_cpu_time();
        drop(r);
    } else {
        for _ in 0..inner {
            drop(black_box(f()));
        }
        wall = start.elapsed() / inner;
        cpu1 = thread_cpu_time();
    }
    let cpu = match (cpu0, cpu1) {
        (Some(a), Some(b)) if wall * inner >= MIN_CPU_SPAN => Some(b.saturating_sub(a) / inner),
        _ => None,
    };
    Sample { wall, cpu }
}

/// Warms up, then takes `samples` timed samples of `inner` calls each.
pub(crate) fn measure<R>(
    warmup: usize,
    samples: usize,
    inner: u32,
    mut f: impl FnMut() -> R,
) -> Stats {
    for _ in 0..warmup {
        drop(black_box(f()));
    }
    Stats::from_samples((0..samples).map(|_| sample(inner, &mut f)).collect())
}

/// Like [`measure`] for two closures, alternating their samples so drift on
/// a shared machine affects both alike. Used wherever a ratio is reported.
pub(crate) fn measure_pair<A, B>(
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

/// Like [`measure_pair`], but `b` consumes a fresh input from `setup`,
/// made outside the timed region (e.g. the owned routes a plan takes).
pub(crate) fn measure_pair_setup<A, S, B>(
    warmup: usize,
    samples: usize,
    mut a: impl FnMut() -> A,
    mut setup: impl FnMut() -> S,
    mut b: impl FnMut(S) -> B,
) -> (Stats, Stats) {
    let (mut sa, mut sb) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for i in 0..warmup + samples {
        let input = setup();
        let mut once = Some(input);
        let mut run_b = || b(once.take().expect("one call per sample"));
        let (x, y) = if i % 2 == 0 {
            let x = sample(1, &mut a);
            (x, sample(1, &mut run_b))
        } else {
            let y = sample(1, &mut run_b);
            (sample(1, &mut a), y)
        };
        if i >= warmup {
            sa.push(x);
            sb.push(y);
        }
    }
    (Stats::from_samples(sa), Stats::from_samples(sb))
}

/// One line of the results table.
pub(crate) struct Row {
    pub name: String,
    pub stats: Stats,
    /// Throughput or other derived figures, already formatted.
    pub note: String,
}

impl Row {
    pub(crate) fn new(name: impl Into<String>, stats: Stats, note: impl Into<String>) -> Row {
        Row {
            name: name.into(),
            stats,
            note: note.into(),
        }
    }
}

/// What a section hands back: table rows and summary lines.
#[derive(Default)]
pub(crate) struct Report {
    pub rows: Vec<Row>,
    pub summary: Vec<String>,
}

pub(crate) fn fmt_time(d: Duration) -> String {
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

pub(crate) fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

/// MB/s (1 MB = 10^6 bytes) at the median and at the minimum time.
pub(crate) fn mbps(bytes: usize, s: &Stats) -> (f64, f64) {
    (mb(bytes) / s.median_s(), mb(bytes) / s.min_s())
}

pub(crate) fn print_table(rows: &[Row]) {
    let w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(9);
    println!(
        "  {:<w$}  {:>11}  {:>11}  {:>11}  throughput (median / best)",
        "benchmark", "median", "min", "on-CPU med"
    );
    println!(
        "  {}  {}  {}  {}  {}",
        "-".repeat(w),
        "-".repeat(11),
        "-".repeat(11),
        "-".repeat(11),
        "-".repeat(26)
    );
    for r in rows {
        println!(
            "  {:<w$}  {:>11}  {:>11}  {:>11}  {}",
            r.name,
            fmt_time(r.stats.median),
            fmt_time(r.stats.min),
            r.stats.cpu_median.map_or("-".to_string(), fmt_time),
            r.note
        );
    }
}

/// A temporary directory removed (with its contents) when dropped.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
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
