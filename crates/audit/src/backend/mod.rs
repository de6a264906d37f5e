//! Backends behind one trait, [`GemmBackend`] (the model's: an associated
//! launch type, the capture discipline as provided methods), and one
//! handle, [`Backend`], that holds any of them: the CPU reference (always
//! present), CUDA (a stub that says why it is unavailable when built
//! without `cuda`, so callers need no `cfg`) and an engine's own backend.
//! Only its private `open` module names the built-in backends.

pub mod cpu;
pub mod cuda;
mod open;

pub use open::{
    BackendKind, BadDeviceSelection, DeviceLabel, DeviceSelection, OpenedDevices, UnknownBackend,
};

pub use gemm_audit_model::backend::{
    CapturedLaunches, CheckedRun, GemmBackend, GemmGraph, KeptRun,
};

use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::kernels::GemmSpec;
use crate::kernels::TimedOutput;
use crate::pin::VendorPin;
use crate::policy::GemmPolicy;
use crate::route::ResolvedGemmRoute;
use crate::trace::{FingerprintMode, OutputFingerprint};
use crate::{Error, Result};
use std::any::Any;
use std::borrow::Cow;
use std::fmt;

/// What any backend keeps of a capture, its type erased: only the
/// backend that captured it can launch it.
pub struct ErasedLaunches(Box<dyn AnyLaunches>);

/// `Any` that can also say what it is.
trait AnyLaunches: Any + fmt::Debug {
    fn as_any(&self) -> &dyn Any;
}

impl<L: Any + fmt::Debug> AnyLaunches for L {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl fmt::Debug for ErasedLaunches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl ErasedLaunches {
    /// The launches as their backend made them, if they are `L`.
    pub fn downcast_ref<L: 'static>(&self) -> Option<&L> {
        // Through the trait object, not the box (which is `Any` itself).
        AnyLaunches::as_any(&*self.0).downcast_ref()
    }
}

/// A graph captured by a [`Backend`]; only the backend that captured it
/// replays it.
pub type Graph = GemmGraph<ErasedLaunches>;

/// The backend methods whose signatures do not name the launch type, each
/// written once: [`DynBackend`] declares them, every [`GemmBackend`]
/// implements it by calling its own, and [`Backend`] forwards to the one it
/// holds. The methods that carry launches are written out beside them.
macro_rules! erased_backend {
    ($( fn $m:ident(&self $(, $a:ident: $t:ty)* $(,)?) -> $r:ty; )*) => {
        /// [`GemmBackend`] with its launch type erased, so one [`Backend`]
        /// can hold any backend chosen at run time.
        trait DynBackend: fmt::Debug + Send + Sync {
            $( fn $m(&self $(, $a: $t)*) -> $r; )*
            fn with_policy(&self, policy: GemmPolicy) -> Backend;
            fn capture_launches(
                &self,
                routes: &[ResolvedGemmRoute],
                seeds: &[u64],
            ) -> Result<CapturedLaunches<ErasedLaunches>>;
            fn launch(&self, launches: &ErasedLaunches) -> Result<Vec<Vec<u8>>>;
            fn launch_fingerprinted(
                &self,
                launches: &ErasedLaunches,
                seeds: &[u64],
                mode: FingerprintMode,
            ) -> Result<Vec<OutputFingerprint>>;
            fn as_any(&self) -> &dyn Any;
        }

        impl<B: GemmBackend> DynBackend for B {
            $( fn $m(&self $(, $a: $t)*) -> $r { GemmBackend::$m(self $(, $a)*) } )*
            fn with_policy(&self, policy: GemmPolicy) -> Backend {
                Backend::new(GemmBackend::with_policy(self, policy))
            }
            fn capture_launches(
                &self,
                routes: &[ResolvedGemmRoute],
                seeds: &[u64],
            ) -> Result<CapturedLaunches<ErasedLaunches>> {
                let c = GemmBackend::capture_launches(self, routes, seeds)?;
                Ok(CapturedLaunches {
                    launches: ErasedLaunches(Box::new(c.launches)),
                    routes: c.routes,
                    physical: c.physical,
                })
            }
            fn launch(&self, launches: &ErasedLaunches) -> Result<Vec<Vec<u8>>> {
                GemmBackend::launch(self, own::<B>(GemmBackend::name(self), launches)?)
            }
            fn launch_fingerprinted(
                &self,
                launches: &ErasedLaunches,
                seeds: &[u64],
                mode: FingerprintMode,
            ) -> Result<Vec<OutputFingerprint>> {
                let own = own::<B>(GemmBackend::name(self), launches)?;
                GemmBackend::launch_fingerprinted(self, own, seeds, mode)
            }
            fn as_any(&self) -> &dyn Any {
                self
            }
        }

        impl GemmBackend for Backend {
            type Launches = ErasedLaunches;

            $( fn $m(&self $(, $a: $t)*) -> $r { self.0.$m($($a),*) } )*
            fn with_policy(&self, policy: GemmPolicy) -> Backend {
                self.0.with_policy(policy)
            }
            fn capture_launches(
                &self,
                routes: &[ResolvedGemmRoute],
                seeds: &[u64],
            ) -> Result<CapturedLaunches<ErasedLaunches>> {
                self.0.capture_launches(routes, seeds)
            }
            fn launch(&self, launches: &ErasedLaunches) -> Result<Vec<Vec<u8>>> {
                self.0.launch(launches)
            }
            fn launch_fingerprinted(
                &self,
                launches: &ErasedLaunches,
                seeds: &[u64],
                mode: FingerprintMode,
            ) -> Result<Vec<OutputFingerprint>> {
                self.0.launch_fingerprinted(launches, seeds, mode)
            }
        }
    };
}

erased_backend! {
    fn name(&self) -> &str;
    fn context(&self) -> &GemmRouteIdentity;
    fn live_context(&self) -> Cow<'_, GemmRouteIdentity>;
    fn volatile(&self) -> VolatileMetadata;
    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute>;
    fn adopt_pins(&self, pins: &[VendorPin]) -> usize;
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>>;
    fn run_timed(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<TimedOutput>;
    fn run_checked(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
        mode: FingerprintMode,
        expected: &OutputFingerprint,
    ) -> Result<CheckedRun>;
    fn run_keeping(
        &self,
        route: &ResolvedGemmRoute,
        seed: u64,
        mode: FingerprintMode,
        keep: usize,
    ) -> Result<KeptRun>;
}

/// `launches` as backend `B` made them; an error if another kind of
/// backend captured them.
fn own<'a, B: GemmBackend>(name: &str, launches: &'a ErasedLaunches) -> Result<&'a B::Launches> {
    launches
        .downcast_ref::<B::Launches>()
        .ok_or_else(|| Error::backend(name, "graph was captured by another backend"))
}

/// An open backend, whichever it is: itself a [`GemmBackend`], so what
/// takes a backend takes this, and a wrapper (a planted fault, an engine's
/// instrumentation) can hold one.
#[derive(Debug)]
pub struct Backend(Box<dyn DynBackend>);

impl Backend {
    /// A handle on `backend`: a built-in one or an engine's own.
    pub fn new(backend: impl GemmBackend) -> Backend {
        Backend(Box::new(backend))
    }

    /// The backend itself, if it is a `B` (e.g. the CUDA backend, for what
    /// only it can do).
    pub fn downcast_ref<B: GemmBackend>(&self) -> Option<&B> {
        // Through the trait object, not the box (which is `Any` itself).
        DynBackend::as_any(&*self.0).downcast_ref()
    }

    /// The backend a workload is recorded on: this one, under the
    /// workload's policy mode if it names one.
    pub fn for_workload(&self, w: &crate::workload::Workload) -> Option<Backend> {
        w.policy.map(|mode| {
            GemmBackend::with_policy(self, GemmBackend::context(self).policy.with_mode(mode))
        })
    }

    /// The scalar-FMA reference output of the same problem (computed on the CPU).
    pub fn reference(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        cpu::reference_output(route, seed)
    }
}

#[cfg(test)]
mod tests {
    // Not a glob: the private `DynBackend` would make every call ambiguous.
    use super::{Backend, GemmBackend, cpu, cuda};
    use crate::PreparedGemmCaptureManifest;
    use crate::launch_set::build_resolved_gemm_launch_set;
    use crate::route::ResolvedGemmRoute;
    use crate::workload::Workload;

    fn manifest_of(b: &Backend, routes: &[ResolvedGemmRoute]) -> PreparedGemmCaptureManifest {
        let set = build_resolved_gemm_launch_set(routes).unwrap();
        PreparedGemmCaptureManifest {
            context: b.context().clone(),
            launch_set: set,
            route_capacity: set.launch_count,
        }
    }

    /// The handle reaches the backend it holds, and a graph goes back only
    /// to a backend of the kind that captured it.
    #[test]
    fn handles_downcast_and_graphs_stay_with_their_backend() {
        let cpu = Backend::new(cpu::CpuBackend::default());
        assert!(cpu.downcast_ref::<cpu::CpuBackend>().is_some());
        assert!(cpu.downcast_ref::<cuda::CudaBackend>().is_none());
        let w = Workload::builtin("m-sweep").unwrap();
        let routes: Vec<_> = w.gemms[..3]
            .iter()
            .map(|g| cpu.resolve(g).unwrap())
            .collect();
        let seeds = vec![3u64; routes.len()];
        let manifest = manifest_of(&cpu, &routes);
        let graph = cpu.capture(&manifest, &routes, &seeds).unwrap();
        assert!(
            graph
                .launches()
                .downcast_ref::<cpu::CpuLaunches>()
                .is_some()
        );
        assert_eq!(graph.physical().len(), 3);
        let eager: Vec<_> = routes.iter().map(|r| cpu.run(r, 3).unwrap()).collect();
        assert_eq!(cpu.replay(&graph, "t").unwrap(), eager);
        // A wrapper keeps launches of its own type: the plain CPU backend
        // cannot launch them, even under the same context.
        let faulty = crate::fleet::plant_fault(Backend::new(cpu::CpuBackend::default()), "x");
        let foreign = faulty.capture(&manifest, &routes, &seeds).unwrap();
        let e = cpu.replay(&foreign, "t").unwrap_err().to_string();
        assert!(e.contains("captured by another backend"), "{e}");
        assert_eq!(faulty.replay(&foreign, "t").unwrap(), eager);
        // The discipline: one seed per route.
        let e = cpu
            .capture(&manifest, &routes, &seeds[..2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 input seeds for 3 routes"), "{e}");
    }

    /// A checked run returns nothing for the fingerprint it reproduces and
    /// the output for any other; a fingerprinted replay gives each output's
    /// fingerprint with its own launch's seed, and a graph of another
    /// backend is refused there too.
    #[test]
    fn checked_runs_and_fingerprinted_replays_hold_outputs_to_fingerprints() {
        use crate::trace::{FingerprintMode, OutputFingerprint};
        let cpu = Backend::new(cpu::CpuBackend::default());
        let w = Workload::builtin("m-sweep").unwrap();
        let routes: Vec<_> = w.gemms[..3]
            .iter()
            .map(|g| cpu.resolve(g).unwrap())
            .collect();
        let seeds = [3u64, 4, 5];
        for mode in [FingerprintMode::Strong, FingerprintMode::Fast] {
            let out = cpu.run(&routes[1], 4).unwrap();
            let right = OutputFingerprint::with_mode(mode, 4, &out);
            let run = cpu.run_checked(&routes[1], 4, mode, &right).unwrap();
            assert_eq!(run.differing_output, None);
            let wrong = OutputFingerprint::with_mode(mode, 4, &out[1..]);
            let run = cpu.run_checked(&routes[1], 4, mode, &wrong).unwrap();
            assert_eq!(run.differing_output.as_deref(), Some(&out[..]));
            let graph = cpu
                .capture(&manifest_of(&cpu, &routes), &routes, &seeds)
                .unwrap();
            assert_eq!(graph.seeds(), seeds);
            let want: Vec<_> = routes
                .iter()
                .zip(seeds)
                .map(|(r, s)| OutputFingerprint::with_mode(mode, s, &cpu.run(r, s).unwrap()))
                .collect();
            assert_eq!(cpu.replay_fingerprinted(&graph, "t", mode).unwrap(), want);
            let faulty = crate::fleet::plant_fault(Backend::new(cpu::CpuBackend::default()), "x");
            let e = faulty
                .replay_fingerprinted(&graph, "t", mode)
                .unwrap_err()
                .to_string();
            assert!(e.contains("captured by another backend"), "{e}");
        }
    }
}
