//! Which launches of a member are which launches of its group's first
//! member (the reference): launch for launch where the launch sets match;
//! where they differ only in GEMMs no GEMM op owns (a profile's region
//! GEMMs: a `torch.compile` region, a CUDA-graph replay, caught a
//! different number of times by each rank's profiling window), the GEMM
//! ops launch for launch and the region GEMMs by name (region and
//! occurrence, e.g. `CompiledFunction#3`); anything else is another
//! launch set.

use super::tally::route_key;
use crate::trace::RecordedGemmTrace;
use crate::{Digest, ResolvedGemmRoute};
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
/// its launches' names, contracts, owners and routes with their digests
/// (one trace's routes, whatever the number of members). A member's route
/// equal to the reference's takes its digest without hashing.
#[derive(Debug)]
pub(super) struct Reference {
    /// Each launch's GEMM name.
    pub(super) names: Vec<String>,
    /// Each launch's contract, in words.
    pub(super) contracts: Vec<String>,
    routes: Vec<ResolvedGemmRoute>,
    keys: Vec<Digest>,
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

/// A member's alignment with the reference, its routes' digests (empty
/// for another launch set) and its summary.
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) alignment: Alignment,
    /// Per launch of the member, its route's digest.
    pub(super) keys: Vec<Digest>,
    /// Eight bytes of a digest of everything a tally takes from the
    /// member: a member read again for the report is the one that was
    /// voted when they are equal.
    pub(super) summary: u64,
}

/// The summary of `t` whose routes' digests are `keys`: its routes,
/// fingerprints, owners and output mode.
fn summary(t: &RecordedGemmTrace, keys: &[Digest]) -> u64 {
    let mut bytes = Vec::with_capacity(keys.len() * 65 + 1);
    for (i, (r, f)) in keys.iter().zip(&t.fingerprints).enumerate() {
        bytes.extend_from_slice(&r.0);
        bytes.extend_from_slice(&f.sha256.0);
        bytes.push(u8::from(region(t, i).is_some()));
    }
    bytes.push(u8::from(t.outputs_observed()));
    let d = Digest::sha256(&bytes);
    let mut head = [0u8; 8];
    head.copy_from_slice(&d.0[..8]);
    u64::from_le_bytes(head)
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
            routes: t.routes.clone(),
            keys: t.routes.iter().map(route_key).collect(),
            owned,
            regions,
        }
    }

    /// `t` aligned with the reference, with its routes' digests (hashed
    /// only where a route is not the reference's) and its summary.
    pub(super) fn prepare(&self, t: &RecordedGemmTrace) -> Prepared {
        let alignment = self.align(t);
        if alignment == Alignment::Other {
            return Prepared {
                alignment,
                keys: Vec::new(),
                summary: 0,
            };
        }
        let mut keys: Vec<Option<Digest>> = vec![None; t.routes.len()];
        for j in 0..self.len() {
            if let Some(i) = alignment.index(j)
                && t.routes[i] == self.routes[j]
            {
                keys[i] = Some(self.keys[j]);
            }
        }
        let keys: Vec<Digest> = keys
            .into_iter()
            .zip(&t.routes)
            .map(|(k, r)| k.unwrap_or_else(|| route_key(r)))
            .collect();
        let summary = summary(t, &keys);
        Prepared {
            alignment,
            keys,
            summary,
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
