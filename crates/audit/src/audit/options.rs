//! Audit settings and progress reporting.

use crate::backend::Backend;
use crate::workload::Workload;

/// Audit settings.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Eager runs compared for run-to-run identity (at least 2).
    pub runs: usize,
    /// Most runs of the nondeterministic control before calling it undetected.
    pub control_attempts: usize,
    /// The workloads audited (the control is always run).
    pub workloads: Vec<Workload>,
    /// How the recorded traces' fingerprints hash their chunks.
    pub fingerprint_mode: crate::FingerprintMode,
}

impl AuditOptions {
    /// The suite for a backend: the CPU runs the transformer block and the
    /// M-sweep; CUDA adds the tensor-core tile families, the vendor sweep
    /// and the batch-invariant cuBLASLt route's sweep, and on devices that
    /// run them (compute capability 9.0) the TMA + wgmma families' sweep
    /// and the invariant ladder's.
    pub fn for_backend(backend: &Backend) -> AuditOptions {
        let mut o = AuditOptions::default();
        if let Some(cuda) = backend.downcast_ref::<crate::backend::cuda::CudaBackend>() {
            let mut names = vec!["tensor-core-sweep", "vendor-sweep", "batch-invariant"];
            if cuda.wgmma_available().is_ok() {
                names.extend(["wgmma-sweep", "ladder-sweep"]);
            }
            o.workloads
                .extend(names.iter().filter_map(|n| Workload::builtin(n)));
        }
        o
    }
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            runs: 3,
            control_attempts: 32,
            workloads: ["transformer-block", "m-sweep"]
                .iter()
                .filter_map(|n| Workload::builtin(n))
                .collect(),
            fingerprint_mode: crate::FingerprintMode::Strong,
        }
    }
}

/// Progress of a long audit: a stage name and launches done of total.
pub trait Progress {
    /// The whole run, said once before its first stage: `stages` stages of
    /// `launches` launches in all (for a stage count and an estimate).
    fn plan(&mut self, _stages: usize, _launches: usize) {}
    /// Starts a stage named `name` of `total` steps (launches).
    fn stage(&mut self, name: &str, total: usize);
    /// `done` steps of the current stage are finished (a running count,
    /// not an increment).
    fn advance(&mut self, done: usize);
}

/// A [`Progress`] that shows nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&mut self, _: &str, _: usize) {}
    fn advance(&mut self, _: usize) {}
}
