//! How paired GEMMs were launched: eagerly, or replayed from a CUDA graph
//! (trace format 7's `ObservedRoute::graph`).
//!
//! Informational only: a GEMM replayed from a graph serves the same route
//! as the same GEMM launched eagerly, so launching it the other way is
//! never a difference, never a class for `--allow` and never changes an
//! exit code. It is what a person diffing an eager trace against a replay
//! trace wants confirmed: which side replayed, and that nothing else
//! moved. Two graph replays with different labels are not counted.

use super::compare::Pairs;
use crate::trace::RecordedGemmTrace;
use serde::Serialize;

/// Paired GEMMs launched eagerly on one side and replayed from a CUDA
/// graph on the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LaunchChange {
    /// Eager in the golden, replayed from a graph in the candidate.
    pub eager_to_graph: usize,
    /// Replayed from a graph in the golden, eager in the candidate.
    pub graph_to_eager: usize,
}

impl LaunchChange {
    /// The paired GEMMs of two traces that were launched differently;
    /// `None` when every pair was launched the same way.
    pub(super) fn of(
        golden: &RecordedGemmTrace,
        candidate: &RecordedGemmTrace,
        pairs: &Pairs,
    ) -> Option<LaunchChange> {
        let mut change = LaunchChange {
            eager_to_graph: 0,
            graph_to_eager: 0,
        };
        for &(g, c) in &pairs.matched {
            match (replayed(golden, g), replayed(candidate, c)) {
                (false, true) => change.eager_to_graph += 1,
                (true, false) => change.graph_to_eager += 1,
                _ => {}
            }
        }
        (change.eager_to_graph + change.graph_to_eager > 0).then_some(change)
    }

    /// One line per direction: `3 GEMMs eager in the golden are replayed
    /// from a CUDA graph in the candidate`.
    pub fn lines(&self) -> Vec<String> {
        let gemms = |n: usize| match n {
            1 => "1 GEMM eager".to_string(),
            n => format!("{n} GEMMs eager"),
        };
        let verb = |n: usize| if n == 1 { "is" } else { "are" };
        let mut out = Vec::new();
        if self.eager_to_graph > 0 {
            let n = self.eager_to_graph;
            out.push(format!(
                "{} in the golden {} replayed from a CUDA graph in the candidate",
                gemms(n),
                verb(n)
            ));
        }
        if self.graph_to_eager > 0 {
            let n = self.graph_to_eager;
            out.push(format!(
                "{} in the candidate {} replayed from a CUDA graph in the golden",
                gemms(n),
                verb(n)
            ));
        }
        out
    }
}

/// Whether GEMM `i` of `t` was replayed from a CUDA graph.
fn replayed(t: &RecordedGemmTrace, i: usize) -> bool {
    t.observation
        .as_ref()
        .and_then(|o| o.gemms.get(i))
        .is_some_and(|g| g.graph.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::TraceDiff;
    use crate::trace::{Observation, ObservedRoute};

    fn with_graphs(graphs: &[Option<&str>]) -> RecordedGemmTrace {
        let mut t = crate::testkit::sample_trace(graphs.len() as u64);
        t.observation = Some(Observation {
            gemms: graphs
                .iter()
                .map(|g| ObservedRoute {
                    graph: g.map(str::to_string),
                    ..ObservedRoute::default()
                })
                .collect(),
            ..Observation::default()
        });
        t
    }

    /// Eager against graph replay is counted both ways and is no
    /// difference; two replays of different graphs are not counted.
    #[test]
    fn eager_against_replay_is_counted_and_is_no_difference() {
        let golden = with_graphs(&[None, None, Some("g0"), Some("g0")]);
        let candidate = with_graphs(&[Some("g1"), None, None, Some("g2")]);
        let d = TraceDiff::between(&golden, &candidate);
        assert!(d.is_empty(), "{:?}", d.differences);
        assert_eq!(
            d.launch,
            Some(LaunchChange {
                eager_to_graph: 1,
                graph_to_eager: 1
            })
        );
        assert_eq!(
            d.launch.unwrap().lines(),
            [
                "1 GEMM eager in the golden is replayed from a CUDA graph in the candidate",
                "1 GEMM eager in the candidate is replayed from a CUDA graph in the golden"
            ]
        );
        // The same launches on both sides, or no observation: nothing said.
        assert_eq!(TraceDiff::between(&golden, &golden).launch, None);
        let plain = crate::testkit::sample_trace(4);
        assert_eq!(TraceDiff::between(&plain, &plain).launch, None);
        let replays = with_graphs(&[Some("a"); 4]);
        let d = TraceDiff::between(&plain, &replays);
        assert_eq!(d.launch.map(|l| l.eager_to_graph), Some(4));
        assert!(d.render().contains(
            "launch: 4 GEMMs eager in the golden are replayed from a CUDA graph in the candidate"
        ));
    }

    /// Beside real differences the launch line is one overview line: it
    /// adds no class, no difference and nothing to the headline.
    #[test]
    fn the_overview_says_it_beside_real_differences() {
        let golden = with_graphs(&[None, None]);
        let mut candidate = with_graphs(&[Some("g"), Some("g")]);
        candidate.routes[1].kernel_symbol = "other_kernel".into();
        candidate.launch_set = crate::build_resolved_gemm_launch_set(&candidate.routes).unwrap();
        let d = TraceDiff::between(&golden, &candidate);
        let without = TraceDiff {
            launch: None,
            ..d.clone()
        };
        let o = d.overview();
        assert_eq!(o.classes, without.overview().classes);
        assert_eq!(o.headline(), without.overview().headline());
        assert_eq!(
            o.lines()
                .into_iter()
                .filter(|l| !without.overview().lines().contains(l))
                .collect::<Vec<_>>(),
            [
                "  launch    2 GEMMs eager in the golden are replayed from a CUDA graph in the candidate"
            ]
        );
        assert_eq!(
            serde_json::to_value(&o).unwrap()["launch"],
            serde_json::json!({"eager_to_graph": 2, "graph_to_eager": 0})
        );
        assert!(serde_json::to_value(without.overview()).unwrap()["launch"].is_null());
    }
}
