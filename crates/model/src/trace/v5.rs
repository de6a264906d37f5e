//! Format version 5, read and converted to the current model: the same
//! trace with a context that holds no pins (version 4's), contracts in the
//! vocabulary of formats 1 to 5 ([`super::pre6`]). Version 6 added the
//! context's pinned vendor configurations ([`crate::pin::VendorPin`]), and
//! the `vendor-invariant` contract, whose routes are judged against them.
//! Its observation is format 6's ([`super::v6`]: no GEMM says it was
//! replayed from a graph).

use super::v4::ContextV4;
use super::{FingerprintMode, OutputFingerprint, RecordedGemmTrace, pre6, v6};
use crate::digest::Digest;
use crate::identity::VolatileMetadata;
use crate::launch_set::ResolvedGemmLaunchSet;
use crate::physical::PhysicalNode;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub(super) struct TraceV5 {
    workload: String,
    workload_digest: Digest,
    context: ContextV4,
    launch_set: ResolvedGemmLaunchSet,
    routes: Vec<pre6::Route>,
    fingerprints: Vec<OutputFingerprint>,
    #[serde(deserialize_with = "crate::bounded::volatile")]
    volatile: VolatileMetadata,
    physical: Vec<PhysicalNode>,
    fingerprint_mode: FingerprintMode,
    observation: Option<v6::Observation>,
}

/// The current model of a version-5 trace: nothing pinned.
pub(super) fn upgrade(t: TraceV5) -> RecordedGemmTrace {
    RecordedGemmTrace {
        workload: t.workload,
        workload_digest: t.workload_digest,
        context: t.context.into(),
        launch_set: t.launch_set,
        routes: pre6::routes(t.routes),
        fingerprints: t.fingerprints,
        volatile: t.volatile,
        physical: t.physical,
        fingerprint_mode: t.fingerprint_mode,
        observation: v6::observation(t.observation),
    }
}

/// The version-5 form of a trace (for tests of the reader).
#[cfg(test)]
pub(super) fn downgrade(t: &RecordedGemmTrace) -> Option<TraceV5> {
    Some(TraceV5 {
        workload: t.workload.clone(),
        workload_digest: t.workload_digest,
        context: super::v4::downgrade_context(&t.context)?,
        launch_set: t.launch_set,
        routes: pre6::routes_of(&t.routes)?,
        fingerprints: t.fingerprints.clone(),
        volatile: t.volatile.clone(),
        physical: t.physical.clone(),
        fingerprint_mode: t.fingerprint_mode,
        observation: v6::observation_of(&t.observation)?,
    })
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
        let v5 = codec::encode(&downgrade(&t).expect("no pins, no vendor-invariant")).unwrap();
        let read = codec::decode_payload_version(5, &v5, &codec::Limits::default()).unwrap();
        assert_eq!(read, t);
        assert!(read.context.pins.is_empty());
        assert!(codec::decode_payload(&v5, &codec::Limits::default()).is_err());
    }

    /// A version-5 observation reads as format 6's does: every GEMM eager
    /// but one of a graph-launch region; a GEMM the recorder replayed
    /// from a graph has no version-5 form.
    #[test]
    fn a_version_5_observation_reads_its_graph_launch_regions_as_replayed() {
        let mut t = v6::observed(3);
        let v5 = codec::encode(&downgrade(&t).unwrap()).unwrap();
        let read = codec::decode_payload_version(5, &v5, &codec::Limits::default()).unwrap();
        assert_eq!(read, t);
        let o = read.observation.unwrap();
        let graphs: Vec<Option<&str>> = o.gemms.iter().map(|g| g.graph.as_deref()).collect();
        assert_eq!(graphs, [None, None, Some("cudaGraphLaunch in step")]);
        assert_eq!(o.gemms[0].beside, ["memcpy: copy 0"]);
        t.observation.as_mut().unwrap().gemms[0].graph = Some("graph 0, replay 0".into());
        assert!(downgrade(&t).is_none());
    }

    /// An engine contract format 5 wrote (index 7, before format 6
    /// inserted `vendor-invariant` there) reads back as that engine
    /// contract, in the routes and in the context's services.
    #[test]
    fn a_version_5_engine_contract_reads_as_written() {
        use crate::vocab::ContractKind;
        let mut t = crate::testkit::sample_trace(2);
        let engine = ContractKind::engine("fold", ContractKind::AtomicUnordered).unwrap();
        t.routes[1].contract.kind = engine.clone();
        t.context.permitted_contracts.push(engine.clone());
        let symbol = &mut t.context.modules[0].symbols[0];
        symbol.serves[0].contract = engine.clone();
        let v5 = codec::encode(&downgrade(&t).unwrap()).unwrap();
        let read = codec::decode_payload_version(5, &v5, &codec::Limits::default()).unwrap();
        assert_eq!(read.routes[1].contract.kind, engine);
        assert_eq!(read.context.permitted_contracts.last(), Some(&engine));
        assert_eq!(
            read.context.modules[0].symbols[0].serves[0].contract,
            engine
        );
        assert_eq!(read, t);
    }
}
