//! Format version 5, read and converted to the current model: the same
//! trace with a context that holds no pins. Version 6 added the context's
//! pinned vendor configurations ([`crate::pin::VendorPin`]), which the
//! `vendor-invariant` contract's routes are judged against.

use super::{FingerprintMode, Observation, OutputFingerprint, RecordedGemmTrace};
use crate::digest::Digest;
use crate::identity::{UnpinnedContext, VolatileMetadata};
use crate::launch_set::ResolvedGemmLaunchSet;
use crate::physical::PhysicalNode;
use crate::route::ResolvedGemmRoute;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub(super) struct TraceV5 {
    workload: String,
    workload_digest: Digest,
    context: UnpinnedContext,
    launch_set: ResolvedGemmLaunchSet,
    routes: Vec<ResolvedGemmRoute>,
    fingerprints: Vec<OutputFingerprint>,
    #[serde(deserialize_with = "crate::bounded::volatile")]
    volatile: VolatileMetadata,
    physical: Vec<PhysicalNode>,
    fingerprint_mode: FingerprintMode,
    observation: Option<Observation>,
}

/// The current model of a version-5 trace: nothing pinned.
pub(super) fn upgrade(t: TraceV5) -> RecordedGemmTrace {
    RecordedGemmTrace {
        workload: t.workload,
        workload_digest: t.workload_digest,
        context: t.context.into(),
        launch_set: t.launch_set,
        routes: t.routes,
        fingerprints: t.fingerprints,
        volatile: t.volatile,
        physical: t.physical,
        fingerprint_mode: t.fingerprint_mode,
        observation: t.observation,
    }
}

/// The version-5 form of a trace (for tests of the reader).
#[cfg(test)]
pub(super) fn downgrade(t: &RecordedGemmTrace) -> TraceV5 {
    TraceV5 {
        workload: t.workload.clone(),
        workload_digest: t.workload_digest,
        context: UnpinnedContext::of(&t.context),
        launch_set: t.launch_set,
        routes: t.routes.clone(),
        fingerprints: t.fingerprints.clone(),
        volatile: t.volatile.clone(),
        physical: t.physical.clone(),
        fingerprint_mode: t.fingerprint_mode,
        observation: t.observation.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::codec;

    /// A version-5 payload reads as the same trace with no pins, and is
    /// not a version-6 payload (the pins are missing).
    #[test]
    fn a_version_5_payload_reads_with_no_pins() {
        let t = crate::testkit::sample_trace(3);
        let v5 = codec::encode(&downgrade(&t)).unwrap();
        let read = codec::decode_payload_version(5, &v5, &codec::Limits::default()).unwrap();
        assert_eq!(read, t);
        assert!(read.context.pins.is_empty());
        assert!(codec::decode_payload(&v5, &codec::Limits::default()).is_err());
    }
}
