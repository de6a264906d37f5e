//! Benchmark timing on the CUDA backend: routes against each other, and the
//! device fingerprint against a device-to-device copy. Hidden from the
//! documentation: for `benches/gpu.rs`.

use crate::bench::lt_best::LtBestTiming;
use crate::bench::visit_order::visit_stride;
use crate::blas::lt_family::LtCandidateTiming;
use crate::device::CudaBackend;
use crate::error::drv;
use crate::graph;
use crate::launch::{EventTimer, Prepared, time_launches};
use cudarc::driver::CudaGraph as RawGraph;
use gemm_audit_model::Result;
use gemm_audit_model::route::{GemmShape, ResolvedGemmRoute};
use gemm_audit_model::trace::FINGERPRINT_CHUNK_BYTES;
use gemm_audit_model::vocab::{DType, GemmOp};

impl CudaBackend {
    /// "cuBLAS best": cuBLAS's `default` route (a `cublasGemmEx` route)
    /// and cuBLASLt's top `count` heuristic candidates for its problem
    /// under cublas-fast numerics, each timed (interleaved, `rounds`
    /// rounds, rotating `copies` operand copies), the fastest kept; the
    /// `beside` routes (of the same problem) are timed in the same rounds
    /// (`LtBestTiming::beside_secs`), so their ratio to best is one run's.
    pub fn lt_best_timing(
        &self,
        default: &ResolvedGemmRoute,
        beside: &[&ResolvedGemmRoute],
        count: usize,
        copies: usize,
        rounds: usize,
    ) -> Result<LtBestTiming> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let handles = sh.vendor.handles(sh)?;
        crate::bench::lt_best::lt_best(sh, handles.get(), default, beside, count, copies, rounds)
    }

    /// The device's L2 cache size in bytes (what a cold timing must exceed).
    pub fn l2_cache_bytes(&self) -> Result<u64> {
        let bytes = self
            .shared
            .ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .map_err(drv("reading the L2 cache size"))?;
        Ok(bytes.max(0) as u64)
    }

    /// The device memory free now, in bytes (what one interleaved timing
    /// run may prepare).
    pub fn free_memory_bytes(&self) -> Result<u64> {
        let (free, _total) = self
            .shared
            .ctx
            .mem_get_info()
            .map_err(drv("reading the free device memory"))?;
        Ok(free as u64)
    }

    /// The candidates of cublaslt-invariant's configuration for the
    /// family (op, dtype, k, n) under cublas-fast numerics, each timed at
    /// [`crate::LT_TIMING_M`] as the route's choice times them, and which
    /// one the choice rule picks from these times (benchmarks: how far
    /// apart the candidates are says how stable the pick is).
    pub fn lt_family_timings(
        &self,
        op: GemmOp,
        dtype: DType,
        k: u64,
        n: u64,
    ) -> Result<Vec<LtCandidateTiming>> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let handles = sh.vendor.handles(sh)?;
        let shape = GemmShape {
            m: crate::blas::lt_family::FAMILY_REFERENCE_M,
            k,
            n,
        };
        crate::blas::lt_family::candidate_timings(
            handles.get(),
            dtype,
            op,
            shape,
            &crate::blas::Numerics::of(dtype, true),
        )
    }

    /// Times `routes` against each other, for benchmarks. Each route is
    /// prepared once (inputs seeded by `seed`, buffers allocated), launched
    /// once to warm up and timed over three launches to pick how many
    /// launches make one sample of about `sample_secs` (1 to 1000). With
    /// `graphed`, those launches are captured into one graph and a sample
    /// is one graph launch, so per-launch CPU overhead cannot hide short
    /// kernels; a route whose capture fails falls back to eager launches
    /// (reported in its [`RouteTiming`]). A sample is CUDA events around
    /// its launches, divided by their count. After `warmup` untimed rounds,
    /// `samples` rounds take one sample of every route, each round starting
    /// at the next route and stepping through them with another stride
    /// (`visit_stride`), so drift affects every route alike and no route
    /// always follows the same one.
    pub fn time_routes(
        &self,
        routes: &[ResolvedGemmRoute],
        seed: u64,
        graphed: bool,
        warmup: usize,
        samples: usize,
        sample_secs: f64,
    ) -> Result<Vec<RouteTiming>> {
        self.time_routes_rotating(routes, seed, 1, graphed, warmup, samples, sample_secs)
    }

    /// [`CudaBackend::time_routes`] with each route prepared `copies` times
    /// (inputs seeded by `seed`, `seed + 1`, ...; buffers of their own) and
    /// consecutive launches of a sample rotating through the copies: with
    /// enough copies that their operands overflow the L2 cache, every
    /// launch reads its weights from memory (an L2-cold time, as a decode
    /// step that streams each layer's weights once), where one copy reads
    /// them from L2 after the first launch (hot).
    #[allow(clippy::too_many_arguments)] // time_routes' knobs plus the copy count
    pub fn time_routes_rotating(
        &self,
        routes: &[ResolvedGemmRoute],
        seed: u64,
        copies: usize,
        graphed: bool,
        warmup: usize,
        samples: usize,
        sample_secs: f64,
    ) -> Result<Vec<RouteTiming>> {
        const MAX_LAUNCHES: f64 = 1000.0;
        let copies = copies.max(1);
        let sh = &self.shared;
        let _lock = sh.lock();
        let handles = if routes.iter().any(|r| r.backend.is_vendor()) {
            Some(sh.vendor.handles(sh)?)
        } else {
            None
        };
        let h = handles.as_ref().map(|g| g.get());
        let mut launches = routes
            .iter()
            .map(|r| {
                (0..copies as u64)
                    .map(|c| Prepared::new(sh, h, r, seed.wrapping_add(c)))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        let timer = EventTimer::new(sh)?;
        let mut timings = Vec::with_capacity(launches.len());
        // Declared after `launches`, so dropped first: a graph must not
        // outlive the buffers its launches use.
        let mut graphs: Vec<Option<RawGraph>> = Vec::with_capacity(launches.len());
        for copies_of in &mut launches {
            for launch in copies_of.iter_mut() {
                launch.enqueue(sh, h, &sh.stream)?;
            }
            let per_launch = time_launches(sh, &timer, h, &mut copies_of[0], None, 3)?;
            let count = (sample_secs / per_launch.max(1e-7))
                .round()
                .clamp(copies as f64, MAX_LAUNCHES.max(copies as f64))
                as u32;
            let (graph, capture_error) = if graphed {
                match graph::capture(&sh.stream, || {
                    for j in 0..count as usize {
                        copies_of[j % copies].enqueue(sh, h, &sh.stream)?;
                    }
                    Ok::<(), gemm_audit_model::Error>(())
                }) {
                    Ok(g) => (Some(g), None),
                    Err(e) => (None, Some(e.message())),
                }
            } else {
                (None, None)
            };
            timings.push(RouteTiming {
                launches: count,
                graphed: graph.is_some(),
                capture_error,
                samples: Vec::with_capacity(samples),
            });
            graphs.push(graph);
        }
        let n = launches.len();
        for round in 0..warmup + samples {
            let stride = visit_stride(round, n);
            for j in 0..n {
                let i = (round + j * stride) % n;
                let count = timings[i].launches;
                let secs = match graphs[i].as_ref() {
                    Some(g) => timer.time(sh, || g.launch().map_err(drv("graph launch")))?,
                    None => timer.time(sh, || {
                        for l in 0..count as usize {
                            launches[i][l % copies].enqueue(sh, h, &sh.stream)?;
                        }
                        Ok(())
                    })?,
                } / f64::from(count);
                if round >= warmup {
                    timings[i].samples.push(secs);
                }
            }
        }
        drop(graphs);
        Ok(timings)
    }

    /// Alternating samples of fingerprinting `bytes` device bytes (the
    /// chunk kernel of `mode`: SHA-256, or the NH kernel of
    /// `gemm_audit_model::trace::fast`) and of copying them device to device, for
    /// benchmarks: seconds per operation, each sample CUDA events around
    /// `ops` back-to-back operations, after `warmup` untimed samples of
    /// each. The buffers are allocated once.
    pub fn time_fingerprint_and_copy(
        &self,
        bytes: usize,
        ops: u32,
        warmup: usize,
        samples: usize,
        mode: gemm_audit_model::FingerprintMode,
    ) -> Result<(Vec<f64>, Vec<f64>)> {
        let sh = &self.shared;
        let _lock = sh.lock();
        let bytes = bytes.max(4);
        let src = sh.stream.alloc_zeros::<u8>(bytes).map_err(drv("alloc"))?;
        let mut dst = sh.stream.alloc_zeros::<u8>(bytes).map_err(drv("alloc"))?;
        let chunks = bytes.div_ceil(FINGERPRINT_CHUNK_BYTES);
        let mut out = sh
            .stream
            .alloc_zeros::<u8>(chunks * 32) // room for either mode's digests
            .map_err(drv("alloc"))?;
        let src_view = src.as_view();
        let timer = EventTimer::new(sh)?;
        let ops = ops.max(1);
        let (mut fp, mut copy) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for i in 0..warmup + samples {
            let mut fp_sample = || {
                timer.time(sh, || {
                    for _ in 0..ops {
                        sh.fingerprinter
                            .launch_in(mode, &sh.stream, &src_view, &mut out)?;
                    }
                    Ok(())
                })
            };
            let mut copy_sample = || {
                timer.time(sh, || {
                    for _ in 0..ops {
                        sh.stream
                            .memcpy_dtod(&src, &mut dst)
                            .map_err(drv("memcpy_dtod"))?;
                    }
                    Ok(())
                })
            };
            // Swap the order every other sample.
            let (f, c) = if i % 2 == 0 {
                let f = fp_sample()?;
                (f, copy_sample()?)
            } else {
                let c = copy_sample()?;
                (fp_sample()?, c)
            };
            if i >= warmup {
                fp.push(f / f64::from(ops));
                copy.push(c / f64::from(ops));
            }
        }
        Ok((fp, copy))
    }
}

/// Per-launch times of one route, from [`CudaBackend::time_routes`].
#[derive(Debug, Clone)]
pub struct RouteTiming {
    /// Launches per sample.
    pub launches: u32,
    /// Whether a sample was one launch of a graph of the launches (else
    /// eager back-to-back launches).
    pub graphed: bool,
    /// Why capturing the launches failed, when it did.
    pub capture_error: Option<String>,
    /// Seconds per launch, one entry per sample.
    pub samples: Vec<f64>,
}
