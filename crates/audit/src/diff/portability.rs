//! Which numeric contracts gave the same bits on two devices.

use super::compare::pair_routes;
use crate::trace::RecordedGemmTrace;
use serde::Serialize;
use std::collections::BTreeMap;

/// Whether one numeric contract gave the same bits on two devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Portability {
    /// The contract, e.g. `scalar-fma` or `split-k-fixed/4`.
    pub contract: String,
    /// GEMMs run under this contract in both traces.
    pub pairs: usize,
    /// Of those, how many gave equal fingerprints; `None` when a trace
    /// holds no observed outputs (an imported profile): its placeholder
    /// fingerprints say nothing about bits, so nothing is counted equal.
    pub equal: Option<usize>,
}

impl Portability {
    /// `Some(true)` when every pair agreed, `None` when the outputs were
    /// not observed.
    pub fn portable(&self) -> Option<bool> {
        self.equal.map(|e| e == self.pairs)
    }
}

/// For GEMMs (paired by name) that ran under the same numeric contract in
/// both traces, whether their fingerprints agree: the contracts that are
/// device-portable and the ones that are not. Where either trace holds no
/// observed outputs, the pairs are counted and `equal` is `None`.
pub fn portability(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> Vec<Portability> {
    let observed = golden.outputs_observed()
        && candidate.outputs_observed()
        && golden.fingerprint_mode == candidate.fingerprint_mode;
    let pairs = pair_routes(golden, candidate);
    let mut by: BTreeMap<String, Portability> = Default::default();
    for (g, c) in pairs.matched {
        let (gr, cr) = (&golden.routes[g], &candidate.routes[c]);
        if gr.contract != cr.contract {
            continue;
        }
        let (Some(gf), Some(cf)) = (golden.fingerprints.get(g), candidate.fingerprints.get(c))
        else {
            continue;
        };
        if gf.input_seed != cf.input_seed
            || gr.shape != cr.shape
            || gr.dtype != cr.dtype
            || gr.op != cr.op
        {
            continue;
        }
        let key = gr.contract.to_string();
        let e = by.entry(key.clone()).or_insert(Portability {
            contract: key,
            pairs: 0,
            equal: observed.then_some(0),
        });
        e.pairs += 1;
        if let Some(equal) = &mut e.equal {
            *equal += (gf.sha256 == cf.sha256) as usize;
        }
    }
    by.into_values().collect()
}

/// Renders a portability report.
pub fn render_portability(p: &[Portability]) -> String {
    if p.is_empty() {
        return "portability: no GEMM ran under the same contract in both traces\n".into();
    }
    let mut s = String::from("portability by numeric contract:\n");
    for x in p {
        let line = match x.equal {
            Some(equal) => format!(
                "{} ({equal}/{} GEMMs bit-identical across the two traces)",
                if equal == x.pairs {
                    "portable"
                } else {
                    "NOT portable"
                },
                x.pairs
            ),
            None => format!(
                "not observed ({} GEMMs under this contract in both traces; no output bits to compare)",
                x.pairs
            ),
        };
        s.push_str(&format!("  {:<28} {line}\n", x.contract));
    }
    s
}
