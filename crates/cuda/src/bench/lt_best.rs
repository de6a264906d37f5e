#![allow(unsafe_code)]
//! "cuBLAS best": the vendor baseline at its best. cuBLASLt's heuristic is
//! asked for its top candidates for one exact problem (split-K, reduction
//! schemes and the route workspace allowed), and they and cuBLAS's default
//! (`cublasGemmEx`, which the candidates need not include) are timed
//! interleaved with each other (each one's launches captured in a graph,
//! as the routes are timed); the fastest is kept: what a user who
//! autotunes per shape would run, and never slower than the default.
//! Routes to compare with it (the bench's batch-invariant route) are timed
//! in the same rounds, so their ratio to best is one run's, at one clock.
//! Cold timing rotates operand copies, so each launch streams its
//! operands from memory.

use crate::blas::lt_family::filled;
use crate::blas::{Handles, LT_WORKSPACE_BYTES, LtPlan, Numerics};
use crate::error::drv;
use crate::graph;
use crate::launch::Prepared;
use crate::lt_choice::{launches_per_sample, median};
use crate::shared::Shared;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::{CudaGraph as RawGraph, DevicePtr, sys as cu};
use gemm_audit_model::Result;
use gemm_audit_model::route::ResolvedGemmRoute;

/// The fastest of cuBLAS's default and cuBLASLt's top heuristic
/// candidates for one problem.
#[derive(Debug, Clone)]
pub struct LtBestTiming {
    /// Candidates the heuristic offered (at most the count asked for).
    pub offered: usize,
    /// Candidates that ran (an offer can fail to launch).
    pub ran: usize,
    /// Median seconds per launch of the fastest of the default and the
    /// candidates.
    pub best_secs: f64,
    /// Which was fastest: `None` for cuBLAS's default, else the
    /// candidate's rank in the heuristic's order (0: its own pick).
    pub best_rank: Option<usize>,
    /// Median seconds per launch of the heuristic's first candidate, when
    /// it ran.
    pub first_secs: Option<f64>,
    /// Median seconds per launch of cuBLAS's default (the route given),
    /// timed in the same rounds, when it ran.
    pub default_secs: Option<f64>,
    /// Median seconds per launch of each route given beside the default,
    /// in their order, timed in the same rounds, when it ran.
    pub beside_secs: Vec<Option<f64>>,
}

/// Times cuBLAS's `default` route and cuBLASLt's top `count` candidates
/// for its problem under fast numerics, and the `beside` routes (of the
/// same problem), `rounds` interleaved rounds after one warm-up, each
/// launch reading the next of `copies` operand copies.
pub(crate) fn lt_best(
    sh: &Shared,
    h: &Handles,
    default: &ResolvedGemmRoute,
    beside: &[&ResolvedGemmRoute],
    count: usize,
    copies: usize,
    rounds: usize,
) -> Result<LtBestTiming> {
    let (dtype, op, shape) = (default.dtype, default.op, default.shape);
    if let Some(r) = beside
        .iter()
        .find(|r| (r.op, r.dtype, r.shape) != (op, dtype, shape))
    {
        return Err(crate::error::cuda_err(format!(
            "cuBLAS best: route {:?} ({} {} m={} k={} n={}) is not the default's problem ({op} {dtype} m={} k={} n={})",
            r.gemm, r.op, r.dtype, r.shape.m, r.shape.k, r.shape.n, shape.m, shape.k, shape.n
        )));
    }
    let numerics = Numerics::of(dtype, true);
    let plan = LtPlan::described(dtype, op, shape, &numerics)?;
    let handle = h.lt_handle()?;
    let offers = plan.heuristic(handle, LT_WORKSPACE_BYTES as u64, None, None, count)?;
    let ctx = h.scratch.context().clone();
    let stream = ctx.new_stream().map_err(drv("timing stream"))?;
    let (m, k, n) = (shape.m, shape.k, shape.n);
    let copies = copies.max(1);
    let a = (0..copies as u64)
        .map(|c| filled(&stream, m * k, 1 + 2 * c))
        .collect::<Result<Vec<_>>>()?;
    let b = (0..copies as u64)
        .map(|c| filled(&stream, k * n, 2 + 2 * c))
        .collect::<Result<Vec<_>>>()?;
    let c = stream
        .alloc_zeros::<u16>((m * n) as usize)
        .map_err(drv("timing output"))?;
    let ws = stream
        .alloc_zeros::<u8>(LT_WORKSPACE_BYTES)
        .map_err(drv("timing workspace"))?;
    let timing = Some(cu::CUevent_flags::CU_EVENT_DEFAULT);
    let start = ctx.new_event(timing).map_err(drv("event"))?;
    let end = ctx.new_event(timing).map_err(drv("event"))?;
    let pa: Vec<_> = a.iter().map(|x| x.device_ptr(&stream)).collect();
    let pb: Vec<_> = b.iter().map(|x| x.device_ptr(&stream)).collect();
    let (pc, _rc) = c.device_ptr(&stream);
    let (pw, _rw) = ws.device_ptr(&stream);
    let launches = launches_per_sample(m, k, n).max(copies as u32);
    // The default first, then the routes beside it: one launch each per
    // operand copy.
    let mut prepared = std::iter::once(default)
        .chain(beside.iter().copied())
        .map(|r| {
            (0..copies as u64)
                .map(|c| Prepared::new(sh, Some(h), r, 1 + c))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    // Their operands are seeded on the backend's stream (no event
    // tracking): the timing stream must not read them before that is done.
    sh.stream
        .synchronize()
        .map_err(drv("seeding the default's operands"))?;
    // One eager launch each, outside the capture, so cuBLAS sets up its
    // workspace for the timing stream before the capture begins.
    for p in prepared.iter_mut().flatten() {
        p.enqueue(sh, Some(h), &stream)?;
    }
    // Each candidate's launches are captured into one graph and a sample
    // is one graph launch, as the routes are timed: back-to-back plain
    // launches would time cuBLASLt's host-side cost at small m, not its
    // kernels. A candidate whose capture fails is left out.
    let mut graphs: Vec<Option<RawGraph>> = offers
        .iter()
        .map(|offer| {
            graph::capture(&stream, || {
                for l in 0..launches as usize {
                    let j = l % copies;
                    // SAFETY: the heuristic offered this algorithm for this
                    // plan within `LT_WORKSPACE_BYTES`; every copy of A and
                    // B holds the plan's dense operands, C its output, and
                    // all outlive the graph (dropped before them below).
                    unsafe {
                        plan.matmul(
                            handle,
                            &offer.algo,
                            [pa[j].0, pb[j].0, pc],
                            (pw, LT_WORKSPACE_BYTES),
                            stream.cu_stream() as lt::cudaStream_t,
                        )
                    }?;
                }
                Ok::<(), gemm_audit_model::Error>(())
            })
            .ok()
        })
        .collect();
    // cuBLAS's default, then the routes beside it: timed as more
    // candidates.
    for route in &mut prepared {
        graphs.push(
            graph::capture(&stream, || {
                for l in 0..launches as usize {
                    route[l % copies].enqueue(sh, Some(h), &stream)?;
                }
                Ok::<(), gemm_audit_model::Error>(())
            })
            .ok(),
        );
    }
    let timed = graphs.len();
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); timed];
    let mut failed: Vec<bool> = graphs.iter().map(Option::is_none).collect();
    for round in 0..=rounds {
        for step in 0..timed {
            // Each round starts at another candidate.
            let ci = (step + round) % timed;
            let Some(g) = graphs[ci].as_ref().filter(|_| !failed[ci]) else {
                continue;
            };
            start.record(&stream).map_err(drv("event record"))?;
            let ran = g.launch();
            end.record(&stream).map_err(drv("event record"))?;
            let ms = start.elapsed_ms(&end).map_err(drv("event elapsed"))?;
            match ran {
                Err(_) => failed[ci] = true,
                // Round 0 warms up clocks and caches.
                Ok(()) if round > 0 => samples[ci].push(f64::from(ms) / 1e3 / f64::from(launches)),
                Ok(()) => {}
            }
        }
    }
    stream.synchronize().map_err(drv("timing stream"))?;
    drop(graphs);
    drop(prepared);
    let mut medians: Vec<Option<f64>> = samples
        .into_iter()
        .zip(&failed)
        .map(|(s, &f)| (!f && !s.is_empty()).then(|| median(s)))
        .collect();
    let beside_secs = medians.split_off(offers.len() + 1);
    let default_secs = medians.pop().flatten();
    let (best_rank, best_secs) = medians
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|s| (Some(i), s)))
        .chain(default_secs.map(|s| (None, s)))
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .ok_or_else(|| {
            crate::error::cuda_err(format!(
                "cuBLAS best: neither cuBLAS's default nor any of {} cuBLASLt candidates for {op} {dtype} m={m} k={k} n={n} ran",
                offers.len()
            ))
        })?;
    Ok(LtBestTiming {
        offered: offers.len(),
        ran: medians.iter().flatten().count(),
        best_secs,
        best_rank,
        first_secs: medians.first().copied().flatten(),
        default_secs,
        beside_secs,
    })
}
