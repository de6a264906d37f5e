//! Format version 4, read and converted to the current model: the same
//! trace without `observation`. Version 5 added it, with the
//! `not-observed` fingerprint mode and the dtypes and layouts only read
//! from profiles (appended enum variants, so every version-4 value keeps
//! its encoding and its launch-set digest still verifies).

use super::{FingerprintMode, OutputFingerprint, RecordedGemmTrace};
use crate::digest::Digest;
use crate::identity::{UnpinnedContext, VolatileMetadata};
use crate::launch_set::ResolvedGemmLaunchSet;
use crate::physical::PhysicalNode;
use crate::route::ResolvedGemmRoute;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub(super) struct TraceV4 {
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
}

/// The current model of a version-4 trace: nothing observed elsewhere.
pub(super) fn upgrade(t: TraceV4) -> RecordedGemmTrace {
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
        observation: None,
    }
}

/// The version-4 form of a trace (for tests of the reader).
#[cfg(test)]
pub(super) fn downgrade(t: &RecordedGemmTrace) -> TraceV4 {
    TraceV4 {
        workload: t.workload.clone(),
        workload_digest: t.workload_digest,
        context: UnpinnedContext::of(&t.context),
        launch_set: t.launch_set,
        routes: t.routes.clone(),
        fingerprints: t.fingerprints.clone(),
        volatile: t.volatile.clone(),
        physical: t.physical.clone(),
        fingerprint_mode: t.fingerprint_mode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::codec;

    /// A version-4 payload reads as the same trace with no observation,
    /// and is not a version-5 payload (the observation is missing).
    #[test]
    fn a_version_4_payload_reads_with_no_observation() {
        let t = crate::testkit::sample_trace(3);
        let v4 = codec::encode(&downgrade(&t)).unwrap();
        let read = codec::decode_payload_version(4, &v4, &codec::Limits::default()).unwrap();
        assert_eq!(read, t);
        assert!(read.observation.is_none());
        assert!(codec::decode_payload(&v4, &codec::Limits::default()).is_err());
    }
}
