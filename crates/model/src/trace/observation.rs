//! How the GEMMs of a trace were observed, when gemm-audit did not run
//! them: the profile or recorder they came from, and what became of every
//! GPU activity it saw (format 5), and which GEMMs were replayed from a
//! CUDA graph (format 7).
//!
//! None of it is compared by `diff` or digested: it tells a person what
//! the routes stand on (how many kernels were bound, which GEMMs have no
//! recorded shapes, which activities no launching call was found for).
//! What can change a GEMM's bits is in its route.

use serde::{Deserialize, Serialize};

/// Most entries of [`Observation::unbound`] and of each other list of
/// names it keeps (the counts say how many there were).
pub const MAX_LISTED: usize = 64;

/// What observed a trace's GEMMs and what it saw.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Observation {
    /// What observed them: `pytorch-profiler` (an imported profile) or
    /// `gemm-audit-torch` (the Python recorder).
    pub source: String,
    /// The profile's file name, without its folder (empty for the
    /// recorder).
    pub file: String,
    /// The job's rank and world size, where the profile says
    /// (`distributedInfo`).
    pub rank: Option<u64>,
    /// See `rank`.
    pub world_size: Option<u64>,
    /// Events in the profile.
    pub events: u64,
    /// GPU kernels bound to a GEMM op as its launch.
    pub bound_kernels: u64,
    /// Copies, fills and kernels of a GEMM op's children, kept beside its
    /// kernels without becoming its launch.
    pub beside_gemms: u64,
    /// GEMM kernels no GEMM op owns (a compiled region, a graph replay, a
    /// Triton template), each recorded as a GEMM of its region.
    pub unowned_gemm_kernels: u64,
    /// Other GPU activities (kernels, copies, fills) outside every GEMM;
    /// convolution kernels are counted apart (in `notes`).
    pub non_gemm: u64,
    /// GPU activities whose launching call the profile does not hold.
    pub unbound: u64,
    /// The first [`MAX_LISTED`] of those: name and event index.
    pub unbound_listed: Vec<String>,
    /// One per route, in order: where it ran and what sits beside it.
    pub gemms: Vec<ObservedRoute>,
    /// What a reader should know (e.g. the profile recorded no shapes).
    pub notes: Vec<String>,
}

/// What a profile tells about one route beyond its fields.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ObservedRoute {
    /// Where it ran: `cuda:N`, or `cpu` where no GPU activity was bound.
    pub device: String,
    /// The region a GEMM no GEMM op owns was launched from (e.g.
    /// `CompiledFunction`, `cudaGraphLaunch in step`).
    pub region: Option<String>,
    /// Whether the profile recorded the op's shapes, strides and types.
    pub shapes_recorded: bool,
    /// Its batch count (1 for `mm` and `addmm`; a route's shape is one
    /// batch's).
    pub batch: u64,
    /// Copies, fills and child-op kernels beside its kernels, by name.
    pub beside: Vec<String>,
    /// For a GEMM replayed from a CUDA graph, which graph and replay (the
    /// recorder's label, e.g. `graph 0 (captured in decode@b8), replay 0`,
    /// or an imported profile's region, `cudaGraphLaunch in step`); `None`
    /// for a GEMM launched eagerly (format 7; older files: their graph-launch
    /// region, [`graph_launch_region`], else `None`). Never
    /// digested: a replayed GEMM serves the same route as the same GEMM
    /// launched eagerly.
    pub graph: Option<String>,
}

impl Observation {
    /// The largest list it holds, for the reader's count limit.
    pub(crate) fn longest_list(&self) -> usize {
        self.unbound_listed
            .len()
            .max(self.notes.len())
            .max(self.gemms.iter().map(|g| g.beside.len()).max().unwrap_or(0))
    }
}

/// Whether a region label is the one an imported profile gives a GEMM of a
/// CUDA-graph replay: the launch call's name, then where it was launched
/// from (`cudaGraphLaunch in step`, `cuGraphLaunch (no enclosing range)`);
/// any other region's label starts with its range's name.
pub fn graph_launch_region(label: &str) -> bool {
    let (launch, rest) = label.split_once(' ').unwrap_or((label, ""));
    launch.contains("GraphLaunch") && (rest.starts_with("in ") || rest == "(no enclosing range)")
}
