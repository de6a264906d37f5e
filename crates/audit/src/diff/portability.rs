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
    /// Of those, how many gave equal fingerprints.
    pub equal: usize,
}

impl Portability {
    /// True when every pair agreed.
    pub fn portable(&self) -> bool {
        self.equal == self.pairs
    }
}

/// For GEMMs (paired by name) that ran under the same numeric contract in
/// both traces, whether their fingerprints agree: the contracts that are
/// device-portable and the ones that are not.
pub fn portability(golden: &RecordedGemmTrace, candidate: &RecordedGemmTrace) -> Vec<Portability> {
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
            equal: 0,
        });
        e.pairs += 1;
        e.equal += (gf.sha256 == cf.sha256) as usize;
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
        s.push_str(&format!(
            "  {:<28} {} ({}/{} GEMMs bit-identical across the two traces)\n",
            x.contract,
            if x.portable() {
                "portable"
            } else {
                "NOT portable"
            },
            x.equal,
            x.pairs
        ));
    }
    s
}
