//! The batch-variance census: which kernels served which m.
//!
//! A serving engine is batch invariant only if a GEMM family (one op,
//! dtype, k, n and layout: a layer's weight) is served the same way at
//! every batch size m. The census groups the GEMMs of traces or imported
//! profiles by family and lists, per m, the kernels (with their grids)
//! that served it, flagging every family whose kernel changes with m and
//! every split-K or reduce kernel (a reduction order that may depend on
//! m). It reads kernels, never bits: a family flagged here may still be
//! invariant, and one that is not flagged is not proven invariant (a
//! kernel's own schedule can depend on m); the probe
//! (`gemm_audit.torch`) and the audit's `batch-invariance` contract test
//! the bits.

use crate::trace::RecordedGemmTrace;
use serde::Serialize;
use std::collections::BTreeMap;

/// What served one m of a family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MRow {
    /// Rows of C.
    pub m: u64,
    /// GEMMs of this family at this m.
    pub count: u64,
    /// Each distinct way it was served: the kernels in launch order and
    /// the first kernel's grid, with how many GEMMs were served so.
    pub served_by: Vec<Served>,
}

/// One way a GEMM was served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Served {
    /// Kernels launched, in order, by their full names.
    pub kernels: Vec<String>,
    /// The SHA-256 of each kernel's full name, in the order of `kernels`
    /// (tables print each kernel's short name,
    /// [`crate::render::kernel_name::KernelName::short`]).
    pub kernel_digests: Vec<String>,
    /// The first kernel's grid.
    pub grid: [u32; 3],
    /// GEMMs served so.
    pub count: u64,
}

/// One GEMM family: a layer's weight at every batch size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Family {
    /// The op that served it (`aten::mm`, `aten::addmm`, a kernel
    /// symbol).
    pub op_name: String,
    /// Layout (`nn`, `nt`, ...).
    pub layout: String,
    /// Storage dtype.
    pub dtype: String,
    /// Reduction length.
    pub k: u64,
    /// Columns of C.
    pub n: u64,
    /// Batch count (1 for mm and addmm).
    pub batch: u64,
    /// One row per m, ascending.
    pub rows: Vec<MRow>,
    /// The kernels change with m: a batch-invariance risk.
    pub kernel_changes_with_m: bool,
    /// One m was served more than one way.
    pub several_ways_at_one_m: bool,
    /// A split-K or reduce kernel served some m: a reduction order that
    /// may depend on m.
    pub split_or_reduce: bool,
}

impl Family {
    /// Whether anything about it is flagged.
    pub fn flagged(&self) -> bool {
        self.kernel_changes_with_m || self.several_ways_at_one_m || self.split_or_reduce
    }
}

/// GEMMs whose shapes were not recorded (compiled regions, graph replays,
/// profiles without `record_shapes`), grouped by op or region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unshaped {
    /// The op or region.
    pub op_name: String,
    /// GEMMs seen.
    pub count: u64,
    /// The distinct kernel sequences that served them.
    pub served_by: Vec<Served>,
    /// A split-K or reduce kernel among them.
    pub split_or_reduce: bool,
}

/// The census of a set of traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Census {
    /// The traces read (their labels, e.g. file names).
    pub sources: Vec<String>,
    /// GEMMs counted.
    pub gemms: u64,
    /// Families, flagged ones first, then by op, dtype, k, n.
    pub families: Vec<Family>,
    /// GEMMs without shapes.
    pub unshaped: Vec<Unshaped>,
}

impl Census {
    /// Families flagged as a batch-invariance risk (kernel or split).
    pub fn flagged(&self) -> impl Iterator<Item = &Family> {
        self.families.iter().filter(|f| f.flagged())
    }
}

/// What a census lists for a GEMM no GPU kernel was bound to (it ran on
/// the host, or the profile lost its kernels).
pub const NO_KERNEL: &str = "(no GPU kernel bound)";

type FamilyKey = (String, String, String, u64, u64, u64);

fn add_served(list: &mut Vec<Served>, kernels: Vec<String>, grid: [u32; 3]) {
    match list
        .iter_mut()
        .find(|s| s.kernels == kernels && s.grid == grid)
    {
        Some(s) => s.count += 1,
        None => list.push(Served {
            kernel_digests: kernels
                .iter()
                .map(|k| crate::render::kernel_name::kernel_digest(k))
                .collect(),
            kernels,
            grid,
            count: 1,
        }),
    }
}

/// The census of `traces` (label, trace).
pub fn census(traces: &[(String, &RecordedGemmTrace)]) -> Census {
    let mut families: BTreeMap<FamilyKey, BTreeMap<u64, MRow>> = BTreeMap::new();
    let mut unshaped: BTreeMap<String, Unshaped> = BTreeMap::new();
    let mut gemms = 0u64;
    for (_, t) in traces {
        for (i, r) in t.routes.iter().enumerate() {
            gemms += 1;
            let kernels: Vec<String> = match &r.vendor {
                Some(v) if !v.physical_kernels.is_empty() => v.physical_kernels.clone(),
                // An observed GEMM no GPU kernel was bound to.
                Some(_) if t.observation.is_some() => vec![NO_KERNEL.to_string()],
                _ => vec![r.kernel_symbol.clone()],
            };
            let grid = r.launch.grid;
            let shaped = t
                .observation
                .as_ref()
                .and_then(|o| o.gemms.get(i))
                .is_none_or(|g| g.shapes_recorded)
                && r.shape.m > 0;
            if !shaped {
                let split = kernels.iter().any(|k| crate::profile::splits_k(k));
                let u = unshaped
                    .entry(r.kernel_symbol.clone())
                    .or_insert_with(|| Unshaped {
                        op_name: r.kernel_symbol.clone(),
                        count: 0,
                        served_by: Vec::new(),
                        split_or_reduce: false,
                    });
                u.count += 1;
                u.split_or_reduce |= split;
                add_served(&mut u.served_by, kernels, grid);
                continue;
            }
            let batch = t
                .observation
                .as_ref()
                .and_then(|o| o.gemms.get(i))
                .map_or(1, |g| g.batch);
            let key = (
                r.kernel_symbol.clone(),
                r.op.to_string(),
                r.dtype.to_string(),
                r.shape.k,
                r.shape.n,
                batch,
            );
            let row = families
                .entry(key)
                .or_default()
                .entry(r.shape.m)
                .or_insert_with(|| MRow {
                    m: r.shape.m,
                    count: 0,
                    served_by: Vec::new(),
                });
            row.count += 1;
            add_served(&mut row.served_by, kernels, grid);
        }
    }
    let mut families: Vec<Family> = families
        .into_iter()
        .map(|((op_name, layout, dtype, k, n, batch), rows)| {
            let rows: Vec<MRow> = rows.into_values().collect();
            let first_kernels = |row: &MRow| -> Vec<Vec<String>> {
                row.served_by.iter().map(|s| s.kernels.clone()).collect()
            };
            let kernel_changes_with_m = rows
                .windows(2)
                .any(|w| first_kernels(&w[0]) != first_kernels(&w[1]));
            let several_ways_at_one_m = rows.iter().any(|r| {
                let mut ks = first_kernels(r);
                ks.dedup();
                ks.len() > 1
            });
            let split_or_reduce = rows.iter().any(|r| {
                r.served_by
                    .iter()
                    .any(|s| s.kernels.iter().any(|k| crate::profile::splits_k(k)))
            });
            Family {
                op_name,
                layout,
                dtype,
                k,
                n,
                batch,
                rows,
                kernel_changes_with_m,
                several_ways_at_one_m,
                split_or_reduce,
            }
        })
        .collect();
    families.sort_by_key(|f| !f.flagged());
    Census {
        sources: traces.iter().map(|(l, _)| l.clone()).collect(),
        gemms,
        families,
        unshaped: unshaped.into_values().collect(),
    }
}
