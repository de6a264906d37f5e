#![allow(unsafe_code)]
//! Prepared launches: what a launch runs ([`Target`]: an NVRTC kernel or a
//! vendor call), its device buffers ([`Prepared`]), and CUDA-event timing
//! of launches ([`EventTimer`], [`time_launches`]).

use crate::blas::{Api, Handles, LtSelection, VendorCall};
use crate::catalog::{self, CudaFamily, CudaKernel, Geometry};
use crate::error::{CudaError, cuda_err, drv};
use crate::seed::OperandSpec;
use crate::shared::Shared;
use crate::tma::{self, TensorMapArg};
use cudarc::driver::sys;
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaGraph as RawGraph, CudaSlice, CudaStream, DevicePtr,
    LaunchConfig as CuLaunch, PushKernelArg,
};
use gemm_audit_model::Result;
use gemm_audit_model::kernels;
use gemm_audit_model::kernels::Problem;
use gemm_audit_model::route::{GemmShape, ResolvedGemmRoute};
use gemm_audit_model::trace::{FingerprintMode, OutputFingerprint};
use gemm_audit_model::vocab::PhysicalBackend;
use std::sync::Arc;

/// What a prepared launch runs.
#[derive(Debug)]
pub(super) enum Target {
    Nvrtc {
        kernel: CudaKernel,
        func: CudaFunction,
        geometry: Geometry,
        /// A wgmma kernel's tensor maps (A, B), encoded over this launch's
        /// operand buffers once they are uploaded; the kernel takes them
        /// in place of the A and B pointers.
        maps: Option<Box<[TensorMapArg; 2]>>,
    },
    Vendor(Box<VendorCall>),
}

/// One launch with its device buffers: inputs uploaded, output allocated,
/// everything decided, so enqueueing (eagerly or under capture) only
/// launches.
#[derive(Debug)]
pub(super) struct Prepared {
    target: Target,
    shape: GemmShape,
    a: CudaSlice<u8>,
    b: CudaSlice<u8>,
    c: CudaSlice<u8>,
    /// Split-K atomic scratch (f32 per output) and per-tile counters; zero
    /// between launches.
    scratch: Option<(CudaSlice<f32>, CudaSlice<u32>)>,
    out_bytes: usize,
}

/// The vendor call of a vendor route, after checking that the loaded
/// library, the options digest, the arguments and today's heuristic pick
/// are the ones the route recorded.
fn vendor_target(sh: &Shared, h: Option<&Handles>, route: &ResolvedGemmRoute) -> Result<Target> {
    let shape = route.shape;
    let api = match route.backend {
        PhysicalBackend::Cublas => Api::Blas,
        _ => Api::Lt,
    };
    let lib = sh.vendor.library(api)?;
    let want = route.vendor.as_ref().ok_or_else(|| {
        cuda_err(format!(
            "vendor route {:?} has no vendor identity",
            route.gemm
        ))
    })?;
    if route.kernel_symbol != api.symbol()
        || route.artifact_digest != lib.module.digest
        || want.library_version != lib.version
    {
        return Err(cuda_err(format!(
            "route {:?}: {} {} is not the loaded {}",
            route.gemm, route.kernel_symbol, want.library_version, lib.version
        )));
    }
    let fast = match &route.contract.kind {
        gemm_audit_model::vocab::ContractKind::VendorFast
        | gemm_audit_model::vocab::ContractKind::VendorInvariant => true,
        gemm_audit_model::vocab::ContractKind::VendorPedantic => false,
        other => {
            return Err(cuda_err(format!(
                "route {:?}: contract {other} is not a vendor contract",
                route.gemm
            )));
        }
    };
    let h = h.ok_or_else(|| cuda_err("vendor handles are not open"))?;
    // The selection is part of the recorded options: whichever
    // selection's options digest the route carries.
    let numerics = crate::blas::Numerics::of(route.dtype, fast);
    let selection = [LtSelection::Heuristic, LtSelection::FamilyFixed]
        .into_iter()
        .find(|&sel| {
            (api == Api::Lt || sel == LtSelection::Heuristic)
                && numerics.digest(api, sel) == route.compiler.options_digest
        })
        .ok_or_else(|| {
            cuda_err(format!(
                "route {:?}: its vendor options digest {} is none this build sets",
                route.gemm,
                route.compiler.options_digest.short()
            ))
        })?;
    let call = VendorCall::new(
        h,
        api,
        route.dtype,
        route.op,
        shape,
        fast,
        selection,
        Some(want),
    )?;
    if call.arguments_digest() != route.launch.arguments_digest {
        return Err(cuda_err(format!(
            "route {:?}: vendor arguments differ",
            route.gemm
        )));
    }
    let mut now = call.vendor_route(&lib.version);
    now.physical_kernels = want.physical_kernels.clone();
    if &now != want {
        return Err(cuda_err(format!(
            "route {:?}: the {} heuristic now picks algorithm {} tile {} split-k {} (recorded {} tile {} split-k {})",
            route.gemm,
            lib.version,
            now.algorithm_id,
            now.tile_id,
            now.split_k,
            want.algorithm_id,
            want.tile_id,
            want.split_k
        )));
    }
    Ok(Target::Vendor(Box::new(call)))
}

/// The NVRTC kernel of a built-in route, after checking that its module is
/// the loaded one.
fn nvrtc_target(sh: &Shared, route: &ResolvedGemmRoute) -> Result<Target> {
    let shape = route.shape;
    if route.backend != PhysicalBackend::CudaNvrtc {
        return Err(cuda_err(format!(
            "route {:?}: backend {} does not run on CUDA",
            route.gemm, route.backend
        )));
    }
    let kernel = CudaKernel::from_route(route)
        .map_err(|e| cuda_err(format!("route {:?}: {e}", route.gemm)))?;
    let module = sh
        .module_of(kernel)
        .map_err(|e| cuda_err(format!("route {:?}: {e}", route.gemm)))?;
    if route.artifact_digest != module.identity.digest {
        return Err(cuda_err(format!(
            "route {:?}: artifact {} is not the loaded module {}",
            route.gemm,
            route.artifact_digest.short(),
            module.identity.digest.short()
        )));
    }
    let (func, _) = module.function(&route.kernel_symbol)?;
    let geometry = kernel
        .geometry_on(shape, route.device.multiprocessors)
        .map_err(|e| cuda_err(format!("route {:?}: {e}", route.gemm)))?;
    Ok(Target::Nvrtc {
        kernel,
        func: func.clone(),
        geometry,
        maps: None,
    })
}

/// A workspace of `floats` f32 elements and `counters` u32 counters or
/// flags (at least one of each), zeroed in `stream`'s order: a caller that
/// launches on another stream synchronizes `stream` first. The backend's
/// launches and the engines' plans both allocate theirs here.
pub(super) fn zeroed_workspace(
    stream: &Arc<CudaStream>,
    floats: usize,
    counters: usize,
) -> Result<(CudaSlice<f32>, CudaSlice<u32>)> {
    Ok((
        stream
            .alloc_zeros::<f32>(floats.max(1))
            .map_err(drv("allocating the workspace"))?,
        stream
            .alloc_zeros::<u32>(counters.max(1))
            .map_err(drv("allocating the workspace's counters or flags"))?,
    ))
}

impl Prepared {
    /// Checks `route` against the loaded modules and libraries, uploads its
    /// inputs (seeded by `seed`, as on the CPU backend) and allocates its
    /// output.
    pub(super) fn new(
        sh: &Shared,
        h: Option<&Handles>,
        route: &ResolvedGemmRoute,
        seed: u64,
    ) -> Result<Prepared> {
        let shape = route.shape;
        let GemmShape { m, k, n } = shape;
        for (what, x, y) in [("A", m, k), ("B", k, n), ("C", m, n)] {
            if x.checked_mul(y).is_none_or(|e| e > kernels::MAX_ELEMENTS) {
                return Err(cuda_err(format!(
                    "route {:?}: operand {what} is too large ({x} x {y})",
                    route.gemm
                )));
            }
        }
        if route.device != sh.device {
            return Err(cuda_err(format!(
                "route {:?} was resolved for {:?}, this device is {:?}",
                route.gemm, route.device.class, sh.device.class
            )));
        }
        let target = if route.backend.is_vendor() {
            vendor_target(sh, h, route)?
        } else {
            nvrtc_target(sh, route)?
        };
        let problem = Problem {
            op: route.op,
            m: m as usize,
            k: k as usize,
            n: n as usize,
        };
        // Made on the device, bit-identical to the CPU's seeded inputs.
        let [sa, sb] = OperandSpec::of(&problem, route.dtype, seed);
        let a = sh.seeder.operand(&sh.stream, &sa)?;
        let b = sh.seeder.operand(&sh.stream, &sb)?;
        // The wgmma kernels read A and B through tensor maps over exactly
        // these buffers (the specs are what the route's digest covers).
        let mut target = target;
        if let Target::Nvrtc { kernel, maps, .. } = &mut target
            && kernel.is_wgmma()
        {
            let [sa, sb] = catalog::tensor_maps(*kernel, route.op, route.dtype, shape);
            let (pa, _ra) = a.device_ptr(&sh.stream);
            let (pb, _rb) = b.device_ptr(&sh.stream);
            let encode = |spec, base| {
                tma::encode(spec, base)
                    .map_err(|e| e.context(format_args!("route {:?}", route.gemm)))
            };
            *maps = Some(Box::new([encode(&sa, pa)?, encode(&sb, pb)?]));
        }
        let out_bytes = (m * n) as usize * kernels::element_size(route.dtype);
        let c = sh
            .stream
            .alloc_zeros::<u8>(out_bytes.max(4))
            .map_err(drv("allocating the output"))?;
        let scratch = match &target {
            Target::Nvrtc {
                kernel: CudaKernel::SplitKAtomic(_),
                geometry,
                ..
            } => {
                // Atomic split-K accumulates into one plane.
                let tiles = geometry.grid[0] as usize * geometry.grid[1] as usize;
                Some(zeroed_workspace(&sh.stream, (m * n) as usize, tiles)?)
            }
            Target::Nvrtc {
                kernel, geometry, ..
            } => match catalog::wgmma_workspace(*kernel, shape, geometry) {
                Some((floats, flags)) => Some(zeroed_workspace(
                    &sh.stream,
                    floats as usize,
                    flags as usize,
                )?),
                None => None,
            },
            _ => None,
        };
        Ok(Prepared {
            target,
            shape,
            a,
            b,
            c,
            scratch,
            out_bytes,
        })
    }

    /// Enqueues the launch on `stream` (eagerly, or under capture).
    pub(super) fn enqueue(
        &mut self,
        sh: &Shared,
        h: Option<&Handles>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let Prepared {
            target,
            shape,
            a,
            b,
            c,
            scratch,
            ..
        } = self;
        if shape.m == 0 || shape.n == 0 {
            return Ok(());
        }
        match target {
            Target::Vendor(call) => {
                let h = h.ok_or_else(|| cuda_err("vendor handles are not open"))?;
                call.enqueue(h, stream, a, b, c)
            }
            Target::Nvrtc {
                kernel,
                func,
                geometry,
                maps,
            } => {
                let (m, k, n) = (shape.m as u32, shape.k as u32, shape.n as u32);
                let splits = kernel.splits();
                let cfg = CuLaunch {
                    grid_dim: (geometry.grid[0], geometry.grid[1], geometry.grid[2]),
                    block_dim: (geometry.block[0], geometry.block[1], geometry.block[2]),
                    shared_mem_bytes: geometry.dynamic_shared_bytes,
                };
                let mut lb = stream.launch_builder(func);
                match (kernel.is_wgmma(), maps.as_deref()) {
                    (false, _) => lb.arg(&*a).arg(&*b),
                    (true, Some([ma, mb])) => lb.arg(ma).arg(mb),
                    (true, None) => {
                        return Err(cuda_err("wgmma launch without its tensor maps"));
                    }
                };
                lb.arg(&mut *c);
                // The wgmma kernels take their workspace and counters or
                // flags before the dims (null where they read none).
                let null = 0u64;
                if kernel.is_wgmma() {
                    match scratch.as_ref() {
                        Some((s, counters)) => lb.arg(s).arg(counters),
                        None => lb.arg(&null).arg(&null),
                    };
                }
                lb.arg(&m).arg(&k).arg(&n);
                if kernel.is_wgmma() {
                    // C's row stride: the backend's outputs are dense.
                    lb.arg(&n);
                }
                match (*kernel, scratch.as_ref()) {
                    (CudaKernel::SplitKFixed(_), _) => {
                        lb.arg(&splits);
                    }
                    (CudaKernel::SplitKAtomic(_), Some((s, counters))) => {
                        lb.arg(s).arg(counters).arg(&splits);
                    }
                    (CudaKernel::SplitKAtomic(_), None) => {
                        return Err(cuda_err("split-K atomic launch without scratch"));
                    }
                    (k, _) if k.is_ladder() => {
                        lb.arg(&splits);
                    }
                    _ => {}
                }
                let _ = sh;
                // SAFETY: the argument list matches the kernel's signature:
                // kernels/gemm.cu (A, B, C, m, k, n[, scratch, counters][, splits])
                // or kernels/wgmma.cu (tensor maps of A and B, C, workspace,
                // counters or flags, m, k, n, ldc = n[, chunks]).
                // A, B and C hold the dense operands of `shape` for the
                // route's op and dtype; atomic split-K's scratch is m*n f32
                // and one u32 per block tile, a wgmma kernel's the zeroed
                // workspace catalog::wgmma_workspace sizes for its family,
                // shape and geometry, or null where it reads none (counters
                // and flags are zero again after each launch), so every
                // index the kernel computes is in bounds; the tensor maps were encoded over this launch's A
                // and B, which live as long as it does, with the dims of
                // `shape` (TMA zero-fills reads past them), and the wgmma
                // kernels bounds-check every store. A function that needs
                // dynamic shared memory was allowed the geometry's amount when
                // its module was loaded.
                unsafe { lb.launch(cfg) }.map(|_| ()).map_err(|e| {
                    CudaError::new(format!("launching {}", kernel.symbol_family()), e).into()
                })
            }
        }
    }

    /// The output's storage bytes, copied back.
    pub(super) fn download(&self, sh: &Shared) -> Result<Vec<u8>> {
        let mut v = sh.stream.clone_dtoh(&self.c).map_err(drv("download"))?;
        v.truncate(self.out_bytes);
        Ok(v)
    }

    /// The output's first `keep` storage bytes (all of them when it is
    /// shorter), copied back; nothing past them crosses to the host.
    pub(super) fn download_prefix(&self, sh: &Shared, keep: usize) -> Result<Vec<u8>> {
        let keep = keep.min(self.out_bytes);
        if keep == 0 {
            return Ok(Vec::new());
        }
        sh.stream
            .clone_dtoh(&self.c.slice(..keep))
            .map_err(drv("download"))
    }

    /// The output's length in storage bytes.
    pub(super) fn output_len(&self) -> usize {
        self.out_bytes
    }

    /// The output fingerprint in `mode`, computed on the device (the
    /// output is not copied back).
    pub(super) fn fingerprint(
        &self,
        sh: &Shared,
        mode: FingerprintMode,
        input_seed: u64,
    ) -> Result<OutputFingerprint> {
        let out = self.c.slice(..self.out_bytes);
        Ok(sh
            .fingerprinter
            .fingerprint_in(mode, &sh.stream, &out, input_seed)?)
    }
}

/// Two timing events on the backend's stream.
pub(super) struct EventTimer {
    start: CudaEvent,
    end: CudaEvent,
}

impl EventTimer {
    pub(super) fn new(sh: &Shared) -> Result<EventTimer> {
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(EventTimer {
            start: sh.ctx.new_event(timing).map_err(drv("event"))?,
            end: sh.ctx.new_event(timing).map_err(drv("event"))?,
        })
    }

    /// Seconds between events recorded before and after what `enqueue`
    /// puts on the stream; waits for it to finish.
    pub(super) fn time(&self, sh: &Shared, enqueue: impl FnOnce() -> Result<()>) -> Result<f64> {
        self.start.record(&sh.stream).map_err(drv("event record"))?;
        enqueue()?;
        self.end.record(&sh.stream).map_err(drv("event record"))?;
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .map_err(drv("event elapsed"))?;
        Ok(f64::from(ms) / 1e3)
    }
}

/// Seconds per launch of `launch`: one launch of `graph` (which holds
/// `count` launches of it), or `count` eager launches.
pub(super) fn time_launches(
    sh: &Shared,
    timer: &EventTimer,
    h: Option<&Handles>,
    launch: &mut Prepared,
    graph: Option<&RawGraph>,
    count: u32,
) -> Result<f64> {
    let count = count.max(1);
    let secs = match graph {
        Some(g) => timer.time(sh, || g.launch().map_err(drv("graph launch")))?,
        None => timer.time(sh, || {
            for _ in 0..count {
                launch.enqueue(sh, h, &sh.stream)?;
            }
            Ok(())
        })?,
    };
    Ok(secs / f64::from(count))
}
