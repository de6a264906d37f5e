//! `sustained-by-m`: the issue-19 goal rows at m >= 1024 under sustained
//! load. An H200 holds its 1.98 GHz boost clock for short bursts, but a run
//! of back-to-back large GEMMs reaches its 700 W cap within about a second
//! and settles near 1.5 GHz (docs/kernels.md), where cuBLAS drops from about 800 to 670 TFLOP/s and the kernels'
//! standing against it changes. `decode-by-m` interleaves its few large
//! routes with hundreds of short decode ones, so it times them at the boost
//! clock; this section times only heavy routes, back to back, after at
//! least [`WARMUP_SECS`] of warm-up, as a prefill or training step runs
//! them, and reads the SM clock and power beside it where `nvidia-smi` is
//! present.

use super::{BEST_CANDIDATES, BEST_ROUNDS, fmt_us, resolve_columns, time_routes};
use super::{Config, DType, GemmOp, Gpu, KernelFamily, Problem, Report, Res, RouteChoice, Table};
use gemm_audit::ResolvedGemmRoute;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Seconds of timed-like rounds before the samples. On the H200 the clock
/// leaves its boost within 0.1 s of back-to-back work and the board power
/// settles at the cap within about a second (docs/kernels.md).
const WARMUP_SECS: f64 = 3.0;

/// The batch sizes of the large-m goal.
const SUSTAINED_M: [u64; 3] = [1024, 4096, 8192];

/// (op, dtype, k, n) of every problem timed at each of [`SUSTAINED_M`],
/// then the two cubes (bf16 NN, m = k = n).
const PROBLEMS: [(GemmOp, DType, u64, u64); 7] = [
    (GemmOp::Nn, DType::Bf16, 4096, 4096),
    (GemmOp::Tn, DType::Bf16, 4096, 4096),
    (GemmOp::Nt, DType::Bf16, 4096, 4096),
    (GemmOp::Nn, DType::F16, 4096, 4096),
    // The d_model-4096 projections: QKV, MLP up, MLP down.
    (GemmOp::Nn, DType::Bf16, 4096, 6144),
    (GemmOp::Nn, DType::Bf16, 4096, 14336),
    (GemmOp::Nn, DType::Bf16, 14336, 4096),
];
const CUBES: [u64; 2] = [4096, 8192];

/// cuBLAS first: every other column is timed against it. The three wgmma
/// rungs each have a column so that the rule `batch-invariant` picks among
/// them by can be read against the cap as well as against the boost clock
/// (`decode-by-m`).
const COLUMNS: [(&str, RouteChoice); 6] = [
    ("cuBLAS", RouteChoice::Cublas),
    ("ladder", RouteChoice::BatchInvariant),
    ("large", RouteChoice::Kernel(KernelFamily::WgmmaLarge)),
    ("medium", RouteChoice::Kernel(KernelFamily::WgmmaMedium)),
    ("small", RouteChoice::Kernel(KernelFamily::WgmmaSmall)),
    ("inv", RouteChoice::CublasLtInvariant),
];

/// The section: every problem and column resolved, timed in one interleaved
/// run with the warm-up stretched to [`WARMUP_SECS`], the clock read
/// beside the samples.
pub(super) fn bench_sustained(gpu: &Gpu, cfg: &Config) -> Res<Report> {
    let mut problems: Vec<Problem> = PROBLEMS
        .iter()
        .flat_map(|&(op, dtype, k, n)| SUSTAINED_M.iter().map(move |&m| (op, dtype, k, n, m)))
        .collect();
    problems.extend(CUBES.iter().map(|&s| (GemmOp::Nn, DType::Bf16, s, s, s)));
    let mut summary = Vec::new();
    let mut routes = Vec::new();
    let mut rows = Vec::new();
    for problem in problems {
        if let Some(cells) = resolve_columns(
            gpu,
            &COLUMNS,
            problem,
            "sustained",
            &mut routes,
            &mut summary,
        ) {
            rows.push((problem, cells));
        }
    }
    // Samples of about 10 ms, back to back; warm-up rounds until
    // WARMUP_SECS have passed (each round is one sample of every route).
    let sample_secs = cfg.sample_secs.min(0.01);
    let round_secs = sample_secs * routes.len() as f64;
    let cfg = &Config {
        samples: if cfg.quick { 5 } else { 9 },
        sample_secs,
        warmup: (WARMUP_SECS / round_secs).ceil().max(1.0) as usize,
        ..*cfg
    };
    let clock = ClockLog::start();
    let (_, stats) = time_routes(gpu, cfg, &routes, "sustained by m")?;
    // cuBLAS best and the ladder, right after, while the card is still at
    // its cap: (best, ladder) seconds of that run.
    let best: Vec<Option<(f64, Option<f64>)>> = rows
        .iter()
        .map(|&((op, dtype, k, n, m), ref cells)| {
            let Some(default) = cells[0].map(|i| &routes[i]) else {
                summary.push(format!(
                    "sustained {op} {dtype} k={k} n={n} m={m}: cuBLAS best left out: no cuBLAS route"
                ));
                return None;
            };
            let beside: Vec<&ResolvedGemmRoute> = cells[1].map(|i| &routes[i]).into_iter().collect();
            match gpu
                .det
                .lt_best_timing(default, &beside, BEST_CANDIDATES, 1, BEST_ROUNDS)
            {
                Ok(t) => Some((t.best_secs, t.beside_secs.first().copied().flatten())),
                Err(e) => {
                    summary.push(format!(
                        "sustained {op} {dtype} k={k} n={n} m={m}: cuBLAS best left out: {e}"
                    ));
                    None
                }
            }
        })
        .collect();
    let clock = clock.stop();
    let mut header = vec!["problem", "cuBLAS us", "cuBLAS TFLOP/s", "best us"];
    header.extend(COLUMNS[1..].iter().map(|(label, _)| *label));
    header.push("ladder/best");
    let mut table = Table::new(&header);
    table.notes.push(format!(
        "median of {} samples of ~{:.0} ms per route after {} warm-up round(s) (>= {WARMUP_SECS} s), heavy routes \
         only, back to back; ladder = route batch-invariant, large/medium/small = wgmma-large/-medium/-small, \
         inv = cublaslt-invariant, each as cuBLAS time / route time (1.00 = vendor speed); best = cuBLAS best, the \
         fastest of cuBLAS's default and cuBLASLt's first {BEST_CANDIDATES} heuristic candidates, timed together right after the run (the card still \
         at its cap), with the ladder in the same rounds; ladder/best = best time / ladder time, both of that run",
        cfg.samples,
        sample_secs * 1e3,
        cfg.warmup
    ));
    table.notes.push(format!("during the run: {clock}"));
    summary.push(format!("sustained: {clock}"));
    for (((op, dtype, k, n, m), cells), best) in rows.iter().zip(&best) {
        let t = |c: usize| cells[c].map(|i| stats[i].median);
        let flops = 2.0 * (*m as f64) * (*k as f64) * (*n as f64);
        let mut row = vec![
            format!("{op} {dtype} k={k} n={n} m={m}"),
            t(0).map_or("-".into(), fmt_us),
            t(0).map_or("-".into(), |s| format!("{:.0}", flops / s / 1e12)),
            best.map_or("-".into(), |(b, _)| fmt_us(b)),
        ];
        for c in 1..COLUMNS.len() {
            row.push(match (t(0), t(c)) {
                (Some(b), Some(x)) => format!("{:.2}", b / x),
                _ => "-".into(),
            });
        }
        row.push(match best {
            Some((b, Some(x))) if *x > 0.0 => format!("{:.2}", b / x),
            _ => "-".into(),
        });
        table.rows.push(row);
    }
    Ok(Report { table, summary })
}

/// `nvidia-smi`'s SM clock, board power and power-cap flag of the first
/// GPU in its order (on a machine of several, not necessarily the one
/// timed), read every 200 ms on a thread of its own while the section's
/// routes are prepared and timed.
struct ClockLog {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(f64, f64, bool)>>,
}

impl ClockLog {
    fn start() -> ClockLog {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut readings = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                match read_clock() {
                    Some(r) => readings.push(r),
                    // No nvidia-smi (or no such fields): stop asking.
                    None => break,
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            readings
        });
        ClockLog { stop, thread }
    }

    /// A line: mean SM clock and power, and how many readings were capped.
    fn stop(self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        let readings = self.thread.join().unwrap_or_default();
        if readings.is_empty() {
            return "SM clock not read (nvidia-smi not found or not answering)".to_string();
        }
        let n = readings.len() as f64;
        let mhz = readings.iter().map(|r| r.0).sum::<f64>() / n;
        let watts = readings.iter().map(|r| r.1).sum::<f64>() / n;
        let capped = readings.iter().filter(|r| r.2).count();
        format!(
            "SM clock {mhz:.0} MHz and board power {watts:.0} W on average over {} nvidia-smi readings, \
             {capped} of them at the software power cap",
            readings.len()
        )
    }
}

/// One `nvidia-smi` reading of the first GPU: (SM MHz, W, power-capped).
fn read_clock() -> Option<(f64, f64, bool)> {
    let out = Command::new("nvidia-smi")
        .args([
            "--id=0",
            "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.sw_power_cap",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_reading(&String::from_utf8_lossy(&out.stdout))
}

/// `1485, 583.21, Active` -> (1485.0, 583.21, true).
fn parse_reading(line: &str) -> Option<(f64, f64, bool)> {
    let mut f = line.trim().split(',').map(str::trim);
    let mhz = f.next()?.parse().ok()?;
    let watts = f.next()?.parse().ok()?;
    let capped = f.next()? == "Active";
    Some((mhz, watts, capped))
}
