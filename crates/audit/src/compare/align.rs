//! Which launches of a member are which launches of its group's first
//! member (the reference): launch for launch where the launch sets match;
//! where they differ only in GEMMs no GEMM op owns (a profile's region
//! GEMMs: a `torch.compile` region, a CUDA-graph replay, caught a
//! different number of times by each rank's profiling window), the GEMM
//! ops launch for launch and the region GEMMs by name (region and
//! occurrence, e.g. `CompiledFunction#3`); anything else is another
//! launch set.

use crate::trace::RecordedGemmTrace;
use std::collections::HashMap;

/// The region that launched route `i` of `t`, where no GEMM op owns it
/// (imported profiles only: `observation.gemms[i].region`).
pub(super) fn region(t: &RecordedGemmTrace, i: usize) -> Option<&str> {
    t.observation
        .as_ref()
        .and_then(|o| o.gemms.get(i))
        .and_then(|g| g.region.as_deref())
}

/// What the group keeps of its first member to align the others with:
/// its launches' names, contracts and owners (bounded by its launch
/// count, whatever the number of members).
#[derive(Debug)]
pub(super) struct Reference {
    /// Each launch's GEMM name.
    pub(super) names: Vec<String>,
    /// Each launch's contract, in words.
    pub(super) contracts: Vec<String>,
    /// The launches a GEMM op owns, in order.
    owned: Vec<usize>,
    /// The launches of a region, by GEMM name (the first of a name).
    regions: HashMap<String, usize>,
}

/// Where a member's launches sit among the reference's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Alignment {
    /// Launch for launch.
    Same,
    /// The reference's launch `j` is the member's `at[j]`, where it holds
    /// it: the GEMM ops launch for launch, region GEMMs by name.
    Shared {
        /// Per reference launch, the member's launch.
        at: Vec<Option<usize>>,
    },
    /// Another launch set: left out of the vote.
    Other,
}

impl Alignment {
    /// The member's launch that is the reference's launch `j`.
    pub(super) fn index(&self, j: usize) -> Option<usize> {
        match self {
            Alignment::Same => Some(j),
            Alignment::Shared { at } => at.get(j).copied().flatten(),
            Alignment::Other => None,
        }
    }
}

impl Reference {
    /// The reference that `t` (a group's first member) is.
    pub(super) fn of(t: &RecordedGemmTrace) -> Reference {
        let mut owned = Vec::new();
        let mut regions = HashMap::new();
        for (i, r) in t.routes.iter().enumerate() {
            if region(t, i).is_some() {
                regions.entry(r.gemm.clone()).or_insert(i);
            } else {
                owned.push(i);
            }
        }
        Reference {
            names: t.routes.iter().map(|r| r.gemm.clone()).collect(),
            contracts: t.routes.iter().map(|r| r.contract.to_string()).collect(),
            owned,
            regions,
        }
    }

    /// Launches in the reference.
    pub(super) fn len(&self) -> usize {
        self.names.len()
    }

    /// Where `t`'s launches sit among the reference's: the same launches
    /// (equal names, or equal counts where the GEMM ops differ: the route
    /// vote then names what differs, as it always has), the shared ones
    /// where only region GEMMs differ, or another launch set.
    pub(super) fn align(&self, t: &RecordedGemmTrace) -> Alignment {
        let n = t.routes.len();
        if n == self.len() && t.routes.iter().zip(&self.names).all(|(r, m)| r.gemm == *m) {
            return Alignment::Same;
        }
        let owned: Vec<usize> = (0..n).filter(|&i| region(t, i).is_none()).collect();
        let has_regions = owned.len() < n || !self.regions.is_empty();
        let same_ops = owned.len() == self.owned.len()
            && owned
                .iter()
                .zip(&self.owned)
                .all(|(&i, &j)| t.routes[i].gemm == self.names[j]);
        if has_regions && same_ops {
            let mut at = vec![None; self.len()];
            for (&i, &j) in owned.iter().zip(&self.owned) {
                at[j] = Some(i);
            }
            for (i, r) in t.routes.iter().enumerate() {
                if region(t, i).is_none() {
                    continue;
                }
                if let Some(&j) = self.regions.get(&r.gemm)
                    && at[j].is_none()
                {
                    at[j] = Some(i);
                }
            }
            return Alignment::Shared { at };
        }
        if n == self.len() {
            Alignment::Same
        } else {
            Alignment::Other
        }
    }
}
