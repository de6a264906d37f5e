//! Format version 2, read and converted to the current model: the same
//! trace without `fingerprint_mode` (every version-2 fingerprint is
//! strong, SHA-256 chunks), with version 3's context and contracts in the
//! vocabulary of formats 1 to 5 ([`super::pre6`]).

use super::v3::ContextV3;
use super::{FingerprintMode, OutputFingerprint, RecordedGemmTrace, pre6};
use crate::digest::Digest;
use crate::identity::VolatileMetadata;
use crate::launch_set::ResolvedGemmLaunchSet;
use crate::physical::PhysicalNode;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub(super) struct TraceV2 {
    workload: String,
    workload_digest: Digest,
    context: ContextV3,
    launch_set: ResolvedGemmLaunchSet,
    routes: Vec<pre6::Route>,
    fingerprints: Vec<OutputFingerprint>,
    #[serde(deserialize_with = "crate::bounded::volatile")]
    volatile: VolatileMetadata,
    physical: Vec<PhysicalNode>,
}

/// The current model of a version-2 trace: a version-3 trace whose
/// fingerprints are strong.
pub(super) fn upgrade(t: TraceV2) -> RecordedGemmTrace {
    super::v3::upgrade(super::v3::TraceV3 {
        workload: t.workload,
        workload_digest: t.workload_digest,
        context: t.context,
        launch_set: t.launch_set,
        routes: t.routes,
        fingerprints: t.fingerprints,
        volatile: t.volatile,
        physical: t.physical,
        fingerprint_mode: FingerprintMode::Strong,
    })
}

/// The version-2 form of a trace (for tests of the reader): refused when
/// its fingerprints are not strong, which version 2 cannot say (or a
/// contract has no older form).
#[cfg(test)]
pub(super) fn downgrade(t: &RecordedGemmTrace) -> Option<TraceV2> {
    if t.fingerprint_mode != FingerprintMode::Strong {
        return None;
    }
    Some(TraceV2 {
        workload: t.workload.clone(),
        workload_digest: t.workload_digest,
        context: super::v3::downgrade_context(&t.context)?,
        launch_set: t.launch_set,
        routes: pre6::routes_of(&t.routes)?,
        fingerprints: t.fingerprints.clone(),
        volatile: t.volatile.clone(),
        physical: t.physical.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::codec;

    #[test]
    fn a_version_2_payload_reads_as_a_strong_trace() {
        let t = crate::testkit::sample_trace(3);
        let v2 = codec::encode(&downgrade(&t).expect("strong")).unwrap();
        let read = codec::decode_payload_version(2, &v2, &codec::Limits::default()).unwrap();
        assert_eq!(read.routes, t.routes);
        assert_eq!(read.fingerprints, t.fingerprints);
        assert_eq!(read.fingerprint_mode, FingerprintMode::Strong);
        // The same bytes are not a version-3 payload (the mode is missing).
        assert!(codec::decode_payload(&v2, &codec::Limits::default()).is_err());
        // A fast trace has no version-2 form.
        assert!(downgrade(&t.in_mode(FingerprintMode::Fast)).is_none());
    }
}
