//! Format version 6, read and converted to the current model: the same
//! trace whose observed GEMMs say nothing of how they were launched.
//! Version 7 added [`super::ObservedRoute::graph`] (a GEMM replayed from a
//! CUDA graph, and which graph and replay); a version-6 GEMM reads as
//! launched eagerly (`graph: None`) unless it is an imported profile's
//! GEMM of a graph-launch region, which says it was replayed. The frozen
//! [`Observation`] below is also what formats 5 and older embed
//! ([`super::v5`]).

use super::{FingerprintMode, OutputFingerprint, RecordedGemmTrace};
use crate::digest::Digest;
use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::launch_set::ResolvedGemmLaunchSet;
use crate::physical::PhysicalNode;
use crate::route::ResolvedGemmRoute;
use serde::{Deserialize, Serialize};

/// `Observation` as formats 5 and 6 wrote it: its GEMMs without `graph`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Observation {
    source: String,
    file: String,
    rank: Option<u64>,
    world_size: Option<u64>,
    events: u64,
    bound_kernels: u64,
    beside_gemms: u64,
    unowned_gemm_kernels: u64,
    non_gemm: u64,
    unbound: u64,
    unbound_listed: Vec<String>,
    gemms: Vec<ObservedRoute>,
    notes: Vec<String>,
}

/// `ObservedRoute` as formats 5 and 6 wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ObservedRoute {
    device: String,
    region: Option<String>,
    shapes_recorded: bool,
    batch: u64,
    beside: Vec<String>,
}

impl From<Observation> for super::Observation {
    fn from(o: Observation) -> Self {
        super::Observation {
            source: o.source,
            file: o.file,
            rank: o.rank,
            world_size: o.world_size,
            events: o.events,
            bound_kernels: o.bound_kernels,
            beside_gemms: o.beside_gemms,
            unowned_gemm_kernels: o.unowned_gemm_kernels,
            non_gemm: o.non_gemm,
            unbound: o.unbound,
            unbound_listed: o.unbound_listed,
            gemms: o.gemms.into_iter().map(Into::into).collect(),
            notes: o.notes,
        }
    }
}

impl From<ObservedRoute> for super::ObservedRoute {
    fn from(r: ObservedRoute) -> Self {
        // Formats 5 and 6 did not say which GEMMs a graph replayed; an
        // imported profile's graph-launch region still does.
        let graph = r
            .region
            .clone()
            .filter(|l| super::observation::graph_launch_region(l));
        super::ObservedRoute {
            device: r.device,
            region: r.region,
            shapes_recorded: r.shapes_recorded,
            batch: r.batch,
            beside: r.beside,
            graph,
        }
    }
}

impl Observation {
    /// The older form of `o`; `None` when a GEMM says it was replayed from
    /// a graph where its region does not (formats 5 and 6 cannot say it).
    /// For the tests of the older readers.
    #[cfg(test)]
    pub(super) fn of(o: &super::Observation) -> Option<Observation> {
        Some(Observation {
            source: o.source.clone(),
            file: o.file.clone(),
            rank: o.rank,
            world_size: o.world_size,
            events: o.events,
            bound_kernels: o.bound_kernels,
            beside_gemms: o.beside_gemms,
            unowned_gemm_kernels: o.unowned_gemm_kernels,
            non_gemm: o.non_gemm,
            unbound: o.unbound,
            unbound_listed: o.unbound_listed.clone(),
            gemms: o
                .gemms
                .iter()
                .map(|g| {
                    let derived = g
                        .region
                        .clone()
                        .filter(|l| super::observation::graph_launch_region(l));
                    (g.graph == derived).then(|| ObservedRoute {
                        device: g.device.clone(),
                        region: g.region.clone(),
                        shapes_recorded: g.shapes_recorded,
                        batch: g.batch,
                        beside: g.beside.clone(),
                    })
                })
                .collect::<Option<_>>()?,
            notes: o.notes.clone(),
        })
    }
}

/// The older form of an optional observation (for tests of the older
/// readers): `None` when it cannot be said, `Some(None)` for none.
#[cfg(test)]
pub(super) fn observation_of(o: &Option<super::Observation>) -> Option<Option<Observation>> {
    match o {
        None => Some(None),
        Some(o) => Observation::of(o).map(Some),
    }
}

/// Converts an older optional observation.
pub(super) fn observation(o: Option<Observation>) -> Option<super::Observation> {
    o.map(Into::into)
}

#[derive(Serialize, Deserialize)]
pub(super) struct TraceV6 {
    workload: String,
    workload_digest: Digest,
    context: GemmRouteIdentity,
    launch_set: ResolvedGemmLaunchSet,
    routes: Vec<ResolvedGemmRoute>,
    fingerprints: Vec<OutputFingerprint>,
    #[serde(deserialize_with = "crate::bounded::volatile")]
    volatile: VolatileMetadata,
    physical: Vec<PhysicalNode>,
    fingerprint_mode: FingerprintMode,
    observation: Option<Observation>,
}

/// The current model of a version-6 trace: every GEMM launched eagerly.
pub(super) fn upgrade(t: TraceV6) -> RecordedGemmTrace {
    RecordedGemmTrace {
        workload: t.workload,
        workload_digest: t.workload_digest,
        context: t.context,
        launch_set: t.launch_set,
        routes: t.routes,
        fingerprints: t.fingerprints,
        volatile: t.volatile,
        physical: t.physical,
        fingerprint_mode: t.fingerprint_mode,
        observation: observation(t.observation),
    }
}

/// The version-6 form of a trace (for tests of the reader): refused when
/// a GEMM was replayed from a graph.
#[cfg(test)]
pub(super) fn downgrade(t: &RecordedGemmTrace) -> Option<TraceV6> {
    Some(TraceV6 {
        workload: t.workload.clone(),
        workload_digest: t.workload_digest,
        context: t.context.clone(),
        launch_set: t.launch_set,
        routes: t.routes.clone(),
        fingerprints: t.fingerprints.clone(),
        volatile: t.volatile.clone(),
        physical: t.physical.clone(),
        fingerprint_mode: t.fingerprint_mode,
        observation: observation_of(&t.observation)?,
    })
}

/// A sample trace with an observation of `n` GEMMs, the last from a graph
/// launch's region (for tests of the readers).
#[cfg(test)]
pub(super) fn observed(n: usize) -> RecordedGemmTrace {
    let mut t = crate::testkit::sample_trace(n as u64);
    let gemm = |i: usize| super::ObservedRoute {
        device: "cuda:0".into(),
        region: (i + 1 == n).then(|| "cudaGraphLaunch in step".to_string()),
        shapes_recorded: i + 1 != n,
        batch: 1,
        beside: vec![format!("memcpy: copy {i}")],
        // As an import writes it today: the graph launch's region.
        graph: (i + 1 == n).then(|| "cudaGraphLaunch in step".to_string()),
    };
    t.observation = Some(super::Observation {
        source: "pytorch-profiler".into(),
        file: "step.json".into(),
        rank: Some(1),
        world_size: Some(2),
        events: 40,
        bound_kernels: n as u64,
        gemms: (0..n).map(gemm).collect(),
        notes: vec!["a note".into()],
        ..super::Observation::default()
    });
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::codec;

    /// A version-6 payload reads as the same trace, every GEMM eager but
    /// the one of a graph-launch region, and is not a version-7 payload
    /// (each GEMM's `graph` is missing).
    #[test]
    fn a_version_6_payload_reads_its_graph_launch_regions_as_replayed() {
        let t = observed(3);
        let v6 = codec::encode(&downgrade(&t).expect("no graph")).unwrap();
        let read = codec::decode_payload_version(6, &v6, &codec::Limits::default()).unwrap();
        assert_eq!(read, t);
        let o = read.observation.as_ref().unwrap();
        let graphs: Vec<Option<&str>> = o.gemms.iter().map(|g| g.graph.as_deref()).collect();
        assert_eq!(graphs, [None, None, Some("cudaGraphLaunch in step")]);
        assert!(codec::decode_payload(&v6, &codec::Limits::default()).is_err());
        // The current payload of the same trace holds each GEMM's `graph`,
        // and is no version-6 payload.
        let v7 = codec::encode_payload(&t).unwrap();
        assert!(v7.len() > v6.len() + 3);
        assert!(codec::decode_payload_version(6, &v7, &codec::Limits::default()).is_err());
    }

    /// A GEMM replayed from a graph has no version-6 form, and its label
    /// round-trips through the current format.
    #[test]
    fn a_graph_label_round_trips_and_has_no_older_form() {
        let mut t = observed(2);
        let label = "graph 0 (captured in decode@b8), replay 0";
        t.observation.as_mut().unwrap().gemms[1].graph = Some(label.into());
        assert!(downgrade(&t).is_none());
        let back = RecordedGemmTrace::from_bytes(&t.to_bytes().unwrap()).unwrap();
        assert_eq!(back, t);
        let gemms = &back.observation.as_ref().unwrap().gemms;
        assert_eq!(gemms[0].graph, None);
        assert_eq!(gemms[1].graph.as_deref(), Some(label));
    }

    /// A trace with no observation reads the same from formats 6 and 7
    /// apart from the version: nothing else changed.
    #[test]
    fn without_an_observation_formats_6_and_7_encode_alike() {
        let t = crate::testkit::sample_trace(2);
        let v6 = codec::encode(&downgrade(&t).unwrap()).unwrap();
        assert_eq!(v6, codec::encode_payload(&t).unwrap());
        let read = codec::decode_payload_version(6, &v6, &codec::Limits::default()).unwrap();
        assert_eq!(read, t);
    }
}
