#![allow(unsafe_code)]
//! `cublaslt-invariant`'s configuration: one cuBLASLt algorithm for every
//! m of a problem family (op, dtype, k, n), so each output's reduction
//! runs in one CTA in the kernel's fixed k order whatever m is.
//!
//! - **Candidates**: the heuristic's algorithms for the family's
//!   reference problem (m = [`FAMILY_REFERENCE_M`]) with no split-K, each
//!   pinned to one split and the reduction scheme `none`, that need at most
//!   [`FAMILY_MAX_WORKSPACE_BYTES`] at every probe m
//!   (`cublasLtMatmulAlgoCheck`). Under TN cuBLASLt's second operand (our
//!   A) has leading dimension m, and the fast Hopper kernels read it in
//!   16-byte steps: the family asks for that alignment, so it serves dense
//!   TN at m a multiple of 8 and refuses other m with the reason.
//! - **Choice**: each candidate is timed at [`TIMING_M`] (interleaved
//!   rounds, median per m), scored by its mean time relative to the
//!   fastest candidate at each m, and the heuristic's earliest candidate
//!   within `CHOICE_MARGIN` of the best score wins (`lt_choice::choose`): a
//!   configuration is replaced only by one that is clearly faster, so
//!   timing noise between near-equal candidates cannot move the pick.
//!   The heuristic ranks for the reference problem alone; cuBLAS's
//!   heuristic first was 0.82x of cuBLAS on a QKV projection at m = 1024.
//! - **Once per family**: the choice is kept for the handles' lifetime.
//!   A recorded route is not re-timed ([`family_algo`] with `recorded`):
//!   launch checks that its configuration is still one of the family's
//!   candidates under the live library, and runs exactly it. [`adopt`]
//!   makes a recorded configuration the family's choice (a golden pins
//!   it).

use crate::blas::{Api, Handles, LtPlan, LtSelection, Numerics, algo_attribute};
use crate::error::{cuda_err, drv};
pub(crate) use crate::lt_choice::refusal;
#[cfg(feature = "bench")]
use crate::lt_choice::scores;
use crate::lt_choice::{TN_ALIGNMENT_BYTES, choose, half_bits, launches_per_sample, median};
use cudarc::cublaslt::sys as lt;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, sys as cu};
use gemm_audit_model::Result;
use gemm_audit_model::pin::{PinFamily, VendorPin};
use gemm_audit_model::route::{GemmShape, VendorRoute};
use gemm_audit_model::vocab::{DType, GemmOp, PhysicalBackend};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The batch size whose heuristic candidates a family chooses among: a
/// large batch, so they are configurations that run fast where
/// throughput matters.
pub const FAMILY_REFERENCE_M: u64 = 4096;

/// Most workspace the family-fixed selection offers: the
/// `vendor-invariant` contract's bound
/// ([`gemm_audit_model::pin::VENDOR_INVARIANT_MAX_WORKSPACE_BYTES`]).
/// cuBLASLt 13.1's Hopper kernels (nvjet) ask for 4 bytes at larger m even
/// with one split and no reduction scheme: a tile-scheduler counter.
pub const FAMILY_MAX_WORKSPACE_BYTES: usize =
    gemm_audit_model::pin::VENDOR_INVARIANT_MAX_WORKSPACE_BYTES as usize;

/// Batch sizes a family's candidates are timed at: where the route is
/// meant to run at vendor speed.
pub(crate) const TIMING_M: [u64; 2] = [1024, FAMILY_REFERENCE_M];

/// Candidates asked of the heuristic for a family's configuration.
const FAMILY_CANDIDATES: usize = 32;

/// Batch sizes at which a family's configuration must run without split-K
/// or workspace to be a candidate (each actual m is checked as well).
/// 2 and 3 make the leading dimension of a transposed A (TN) as unaligned
/// as it gets, so NN and NT probe them; TN probes multiples of 8.
const PROBE_M: [u64; 7] = [1, 2, 3, 64, 1024, FAMILY_REFERENCE_M, 16384];
const PROBE_M_TN: [u64; 5] = [8, 64, 1024, FAMILY_REFERENCE_M, 16384];

/// Interleaved timing rounds per candidate and m (after one warm-up).
const TIMING_ROUNDS: usize = 11;

/// One problem family; the choices of [`Handles`] are kept by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FamilyKey {
    dtype: DType,
    op: GemmOp,
    k: u64,
    n: u64,
    lt_compute: u32,
}

/// One problem family on one set of handles: what every step of the
/// choice (candidates, timing, adoption) works on. `shape.m` is the
/// caller's; the family is its (op, dtype, k, n) and numerics.
struct Family<'a> {
    h: &'a Handles,
    dtype: DType,
    op: GemmOp,
    shape: GemmShape,
    numerics: &'a Numerics,
}

impl Family<'_> {
    fn key(&self) -> FamilyKey {
        FamilyKey {
            dtype: self.dtype,
            op: self.op,
            k: self.shape.k,
            n: self.shape.n,
            lt_compute: self.numerics.lt_compute as u32,
        }
    }

    /// `nn bf16 k=4096 n=4096`, for messages.
    fn problem(&self) -> String {
        format!(
            "{} {} k={} n={}",
            self.op, self.dtype, self.shape.k, self.shape.n
        )
    }

    /// The family's problem at batch size `m`, described for cuBLASLt.
    fn plan(&self, m: u64) -> Result<LtPlan> {
        LtPlan::described(
            self.dtype,
            self.op,
            GemmShape { m, ..self.shape },
            self.numerics,
        )
    }

    /// The family candidate that is `want`'s configuration, or why none is.
    fn recorded_candidate(&self, want: &VendorRoute) -> Result<lt::cublasLtMatmulAlgo_t> {
        self.candidates()?
            .into_iter()
            .find(|c| matches(&c.algo, want))
            .map(|c| c.algo)
            .ok_or_else(|| {
                cuda_err(format!(
                    "cublaslt-invariant: the recorded configuration (algorithm {} tile {} stages {}) is not one of the split-K-free configurations cuBLASLt offers for {} now",
                    want.algorithm_id, want.tile_id, want.stages_id, self.problem()
                ))
            })
    }

    /// Each candidate's times ([`Family::time_candidates`]) and the index
    /// of the one the choice rule picks among those that ran.
    fn timed_pick(&self, candidates: &[Candidate]) -> Result<(Vec<CandidateTimes>, Option<usize>)> {
        let times = self.time_candidates(candidates)?;
        let (ran, usable): (Vec<usize>, Vec<Vec<f64>>) = times
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((i, t.clone()?)))
            .unzip();
        let pick = choose(&usable).map(|j| ran[j]);
        Ok((times, pick))
    }

    /// The family's split-K-free candidates, in the heuristic's order.
    fn candidates(&self) -> Result<Vec<Candidate>> {
        use lt::cublasLtMatmulAlgoConfigAttributes_t as A;
        let handle = self.h.lt_handle()?;
        let reference = self.plan(FAMILY_REFERENCE_M)?;
        let none = lt::cublasLtReductionScheme_t::CUBLASLT_REDUCTION_SCHEME_NONE as u32;
        let (align, probe_m): (Option<u32>, &[u64]) = match self.op {
            GemmOp::Tn => (Some(TN_ALIGNMENT_BYTES as u32), &PROBE_M_TN),
            _ => (None, &PROBE_M),
        };
        let offered = reference.heuristic(
            handle,
            FAMILY_MAX_WORKSPACE_BYTES as u64,
            Some(none),
            align,
            FAMILY_CANDIDATES,
        )?;
        drop(reference);
        let probes: Vec<(u64, LtPlan)> = probe_m
            .iter()
            .map(|&m| Ok((m, self.plan(m)?)))
            .collect::<Result<_>>()?;
        let mut rejected = Vec::new();
        let mut kept: Vec<Candidate> = Vec::new();
        for offer in offered {
            let mut algo = offer.algo;
            if algo_attribute(&algo, A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM).is_some_and(|s| s > 1) {
                rejected.push(format!("{}: split-K", describe(&algo)));
                continue;
            }
            pin_one_split(&mut algo, none)?;
            // Pinning can make two offers one configuration.
            if kept.iter().any(|c| c.algo == algo) {
                continue;
            }
            let refusal = probes
                .iter()
                .find_map(|(m, p)| match p.check(handle, &algo) {
                    Ok(ws) if ws <= FAMILY_MAX_WORKSPACE_BYTES => None,
                    Ok(ws) => Some(format!("m={m} needs {ws} bytes of workspace")),
                    Err(e) => Some(format!("m={m}: {e}")),
                });
            match refusal {
                None => kept.push(Candidate { algo }),
                Some(why) => rejected.push(format!("{}: {why}", describe(&algo))),
            }
        }
        if kept.is_empty() {
            return Err(cuda_err(format!(
                "cublaslt-invariant: no cuBLASLt algorithm for the family of {problem} runs split-K-free within {FAMILY_MAX_WORKSPACE_BYTES} bytes of workspace at m = {probe_m:?} (candidates: {})",
                if rejected.is_empty() {
                    "none offered".to_string()
                } else {
                    rejected.join("; ")
                },
                problem = self.problem(),
            )));
        }
        Ok(kept)
    }

    /// Seconds per launch of each candidate at each m of [`TIMING_M`]
    /// (median of [`TIMING_ROUNDS`]), or `None` for a candidate that failed
    /// to launch. Operands are filled with finite random values
    /// (`half_bits`): timing on zeros would run the tensor cores cooler than
    /// real data does.
    fn time_candidates(&self, candidates: &[Candidate]) -> Result<Vec<CandidateTimes>> {
        let handle = self.h.lt_handle()?;
        let ctx = self.h.scratch.context().clone();
        let stream = ctx.new_stream().map_err(drv("timing stream"))?;
        let max_m = TIMING_M.iter().copied().max().unwrap_or(FAMILY_REFERENCE_M);
        let (k, n) = (self.shape.k, self.shape.n);
        let a = filled(&stream, max_m * k, 1)?;
        let b = filled(&stream, k * n, 2)?;
        let c = stream
            .alloc_zeros::<u16>((max_m * n) as usize)
            .map_err(drv("timing output"))?;
        let ws = stream
            .alloc_zeros::<u8>(FAMILY_MAX_WORKSPACE_BYTES)
            .map_err(drv("timing workspace"))?;
        let timing = Some(cu::CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx.new_event(timing).map_err(drv("event"))?;
        let end = ctx.new_event(timing).map_err(drv("event"))?;
        let plans: Vec<LtPlan> = TIMING_M
            .iter()
            .map(|&m| self.plan(m))
            .collect::<Result<_>>()?;
        let mut samples = vec![vec![Vec::new(); TIMING_M.len()]; candidates.len()];
        let mut failed = vec![false; candidates.len()];
        let (pa, _ra) = a.device_ptr(&stream);
        let (pb, _rb) = b.device_ptr(&stream);
        let (pc, _rc) = c.device_ptr(&stream);
        let (pw, _rw) = ws.device_ptr(&stream);
        for round in 0..=TIMING_ROUNDS {
            for (mi, (plan, &m)) in plans.iter().zip(&TIMING_M).enumerate() {
                let launches = launches_per_sample(m, k, n);
                // Each round starts at another candidate, so none always
                // follows the same one.
                for step in 0..candidates.len() {
                    let ci = (step + round) % candidates.len();
                    if failed[ci] {
                        continue;
                    }
                    let algo = &candidates[ci].algo;
                    start.record(&stream).map_err(drv("event record"))?;
                    let mut ran = Ok(());
                    for _ in 0..launches {
                        // SAFETY: `algo` passed the check at every probe m
                        // (1024 and 4096 among them) within the workspace's
                        // bytes; a, b and c hold the dense operands of the
                        // largest timed m and live on `stream`'s context
                        // until the stream is synchronized below.
                        ran = unsafe {
                            plan.matmul(
                                handle,
                                algo,
                                [pa, pb, pc],
                                (pw, FAMILY_MAX_WORKSPACE_BYTES),
                                stream.cu_stream() as lt::cudaStream_t,
                            )
                        };
                        if ran.is_err() {
                            break;
                        }
                    }
                    end.record(&stream).map_err(drv("event record"))?;
                    let ms = start.elapsed_ms(&end).map_err(drv("event elapsed"))?;
                    match ran {
                        Err(_) => failed[ci] = true,
                        // Round 0 warms up clocks and caches.
                        Ok(()) if round > 0 => {
                            samples[ci][mi].push(f64::from(ms) / 1e3 / launches as f64)
                        }
                        Ok(()) => {}
                    }
                }
            }
        }
        stream.synchronize().map_err(drv("timing stream"))?;
        Ok(samples
            .into_iter()
            .zip(failed)
            .map(|(per_m, failed)| (!failed).then(|| per_m.into_iter().map(median).collect()))
            .collect())
    }
}

/// The families' chosen algorithms, for one set of handles.
pub(crate) type FamilyChoices = Mutex<HashMap<FamilyKey, lt::cublasLtMatmulAlgo_t>>;

/// A split-K-free configuration of a family, in the heuristic's order.
struct Candidate {
    algo: lt::cublasLtMatmulAlgo_t,
}

/// `algorithm 66 tile 24 stages 35`, for messages.
pub(crate) fn describe(algo: &lt::cublasLtMatmulAlgo_t) -> String {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as A;
    let g = |a: A| algo_attribute(algo, a).unwrap_or(-1);
    format!(
        "algorithm {} tile {} stages {}",
        g(A::CUBLASLT_ALGO_CONFIG_ID),
        g(A::CUBLASLT_ALGO_CONFIG_TILE_ID),
        g(A::CUBLASLT_ALGO_CONFIG_STAGES_ID)
    )
}

/// The family configuration for `shape`'s family: `recorded`'s when
/// given (it must still be one of the family's candidates; the handles'
/// choice is left as it is), else the handles' choice, made by timing the
/// candidates the first time.
pub(crate) fn family_algo(
    h: &Handles,
    dtype: DType,
    op: GemmOp,
    shape: GemmShape,
    numerics: &Numerics,
    recorded: Option<&VendorRoute>,
) -> Result<lt::cublasLtMatmulAlgo_t> {
    let f = Family {
        h,
        dtype,
        op,
        shape,
        numerics,
    };
    let chosen = choices(h)?.get(&f.key()).copied();
    match (recorded, chosen) {
        (None, Some(algo)) => return Ok(algo),
        (Some(want), Some(algo)) if matches(&algo, want) => return Ok(algo),
        (Some(want), _) => return f.recorded_candidate(want),
        (None, None) => {}
    }
    let candidates = f.candidates()?;
    let algo = if candidates.len() == 1 {
        candidates[0].algo
    } else {
        let (_, pick) = f.timed_pick(&candidates)?;
        let pick = pick.ok_or_else(|| {
            cuda_err(format!(
                "cublaslt-invariant: no configuration for {} ran when timed",
                f.problem()
            ))
        })?;
        candidates[pick].algo
    };
    Ok(*choices(h)?.entry(f.key()).or_insert(algo))
}

/// Makes `want`'s configuration the handles' choice for its family (a
/// golden pins it), if it is still one of the family's candidates.
pub(crate) fn adopt(
    h: &Handles,
    dtype: DType,
    op: GemmOp,
    shape: GemmShape,
    numerics: &Numerics,
    want: &VendorRoute,
) -> Result<()> {
    let f = Family {
        h,
        dtype,
        op,
        shape,
        numerics,
    };
    // Routes of one family share a configuration: check it once.
    if choices(h)?
        .get(&f.key())
        .is_some_and(|algo| matches(algo, want))
    {
        return Ok(());
    }
    let algo = f.recorded_candidate(want)?;
    choices(h)?.insert(f.key(), algo);
    Ok(())
}

/// The handles' family choices as the live context's pins: each family's
/// configuration, under cuBLASLt `library_version` and the family-fixed
/// selection's options.
pub(crate) fn pins(h: &Handles, library_version: &str) -> Result<Vec<VendorPin>> {
    let choices = choices(h)?;
    let mut out = Vec::with_capacity(choices.len());
    for (key, algo) in choices.iter() {
        let numerics = Numerics::for_selection(key.dtype, true, LtSelection::FamilyFixed)?;
        let family = PinFamily {
            backend: PhysicalBackend::CublasLt,
            library_version: library_version.to_string(),
            op: key.op,
            dtype: key.dtype,
            k: key.k,
            n: key.n,
            options_digest: numerics.digest(Api::Lt, LtSelection::FamilyFixed),
        };
        out.push(VendorPin::pinning(family, &recorded_as(algo)));
    }
    Ok(out)
}

/// Makes a recorded pin the handles' choice for its family, if its
/// configuration is still one of the family's candidates here.
pub(crate) fn adopt_pin(h: &Handles, pin: &VendorPin) -> Result<()> {
    let f = &pin.family;
    let numerics = Numerics::for_selection(f.dtype, true, LtSelection::FamilyFixed)?;
    if numerics.digest(Api::Lt, LtSelection::FamilyFixed) != f.options_digest {
        return Err(cuda_err(format!(
            "cublaslt-invariant: the pin for {f} was made under other options"
        )));
    }
    let want = pin.vendor_route();
    // The reference m: any m of the family describes it.
    let shape = GemmShape {
        m: FAMILY_REFERENCE_M,
        k: f.k,
        n: f.n,
    };
    adopt(h, f.dtype, f.op, shape, &numerics, &want)
}

/// The handles' family choices, locked.
fn choices(
    h: &Handles,
) -> Result<std::sync::MutexGuard<'_, HashMap<FamilyKey, lt::cublasLtMatmulAlgo_t>>> {
    h.family_choices()
        .lock()
        .map_err(|_| cuda_err("the family choices' lock is poisoned"))
}

/// One candidate of a family as the timed choice saw it (benchmarks).
#[cfg(feature = "bench")]
#[derive(Debug, Clone)]
pub struct LtCandidateTiming {
    /// `algorithm 66 tile 24 stages 35`.
    pub config: String,
    /// Seconds per launch at each m of [`LT_TIMING_M`](crate::LT_TIMING_M); `None` when it
    /// failed to launch.
    pub secs: Option<Vec<f64>>,
    /// Its score: mean over [`LT_TIMING_M`](crate::LT_TIMING_M) of its time over the fastest
    /// candidate's (1.0 = fastest); `None` when it failed to launch.
    pub score: Option<f64>,
    /// Whether the choice rule picks it from these times.
    pub chosen: bool,
    /// Its configuration as a route records it (`algorithm_id`,
    /// `tile_id`, `stages_id`, `swizzle`, `split_k` 1, `reduction_scheme`
    /// none, `inner_shape_id`, `cluster_shape_id`; the other fields empty).
    pub vendor: VendorRoute,
}

/// Every candidate of `shape`'s family, timed afresh (the handles'
/// choice is neither read nor kept), in the heuristic's order.
#[cfg(feature = "bench")]
pub(crate) fn candidate_timings(
    h: &Handles,
    dtype: DType,
    op: GemmOp,
    shape: GemmShape,
    numerics: &Numerics,
) -> Result<Vec<LtCandidateTiming>> {
    let f = Family {
        h,
        dtype,
        op,
        shape,
        numerics,
    };
    let candidates = f.candidates()?;
    let (times, pick) = f.timed_pick(&candidates)?;
    let ran: Vec<Vec<f64>> = times.iter().flatten().cloned().collect();
    let mut ran_scores = scores(&ran).into_iter();
    Ok(candidates
        .iter()
        .zip(times)
        .enumerate()
        .map(|(i, (c, secs))| LtCandidateTiming {
            config: describe(&c.algo),
            score: secs.as_ref().and_then(|_| ran_scores.next()),
            secs,
            chosen: pick == Some(i),
            vendor: recorded_as(&c.algo),
        })
        .collect())
}

/// Seconds per launch at each m of [`TIMING_M`]; `None` for a candidate
/// that failed to launch.
type CandidateTimes = Option<Vec<f64>>;

/// The configuration fields a route records of `algo` (library version,
/// workspace and kernels left empty).
fn recorded_as(algo: &lt::cublasLtMatmulAlgo_t) -> VendorRoute {
    crate::engine::embed::lt_vendor_route(algo, "", 0)
}

/// The fields that name a configuration: algorithm, tile, split-K,
/// reduction, stages, swizzle, inner and cluster shape.
type ConfigFields = (i64, i64, i64, i64, i64, i64, Option<i64>, Option<i64>);

fn config_fields(v: &VendorRoute) -> ConfigFields {
    (
        v.algorithm_id,
        v.tile_id,
        v.split_k,
        v.reduction_scheme,
        v.stages_id,
        v.swizzle,
        v.inner_shape_id,
        v.cluster_shape_id,
    )
}

/// Whether `algo` is the configuration `want` records.
fn matches(algo: &lt::cublasLtMatmulAlgo_t, want: &VendorRoute) -> bool {
    config_fields(&recorded_as(algo)) == config_fields(want)
}

/// Pins `algo` to one split and the reduction scheme `none`.
fn pin_one_split(algo: &mut lt::cublasLtMatmulAlgo_t, none: u32) -> Result<()> {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as A;
    for (attr, v) in [
        (A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1u32),
        (A::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, none),
    ] {
        // SAFETY: `algo` is a valid algorithm; both attributes are uint32.
        unsafe {
            lt::cublasLtMatmulAlgoConfigSetAttribute(
                algo,
                attr,
                (&v as *const u32).cast(),
                size_of::<u32>(),
            )
        }
        .result()
        .map_err(drv("cublasLtMatmulAlgoConfigSetAttribute"))?;
    }
    Ok(())
}

/// `len` half-precision values (bf16 or f16 bit patterns alike, see
/// `half_bits`): a 2 MiB xorshift pattern seeded by `seed`, copied over
/// the buffer, so host memory stays small whatever the operand's size.
pub(crate) fn filled(stream: &Arc<CudaStream>, len: u64, seed: u64) -> Result<CudaSlice<u16>> {
    const PATTERN: usize = 1 << 20;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let pattern: Vec<u16> = (0..PATTERN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            half_bits(x)
        })
        .collect();
    let len = len as usize;
    let mut buf = stream
        .alloc_zeros::<u16>(len)
        .map_err(drv("timing operand"))?;
    for start in (0..len).step_by(PATTERN) {
        let end = (start + PATTERN).min(len);
        stream
            .memcpy_htod(&pattern[..end - start], &mut buf.slice_mut(start..end))
            .map_err(drv("timing operand"))?;
    }
    Ok(buf)
}
