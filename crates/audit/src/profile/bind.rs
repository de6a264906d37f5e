//! Binding a profile's GPU activities to the GEMMs that launched them.
//!
//! A kernel, copy or fill names the runtime or driver call that launched
//! it by correlation id (or, where an activity carries none, by the flow
//! arrow that ends on it). That call ran on one CPU thread, inside a stack
//! of ranges (operators, `record_function` annotations, Python functions):
//! the innermost range around the call's start is where it was launched
//! from, on whichever thread that was (autograd's backward thread too).
//!
//! - Under a GEMM-family op (`aten::mm`, `addmm`, `bmm`, ...): a kernel the
//!   op launched itself is part of its launch (a split-K GEMM and its
//!   reduce kernel are two kernels of one GEMM); a copy, a fill, or a
//!   kernel of a child op (`aten::copy_` inside an `addmm` with a full C)
//!   is kept beside the GEMM's kernels, never as its launch.
//! - A kernel whose name says it is a GEMM (cuBLAS's, CUTLASS's, a Triton
//!   template, an attention library's) launched where no GEMM op owns it (a
//!   `torch.compile` region, a CUDA-graph replay) is recorded as a GEMM of
//!   that region; a reduce kernel right after it joins it.
//! - Everything else is counted as non-GEMM work, and an activity whose
//!   launching call the profile does not hold is listed as unbound.
//!
//! A GEMM op that launched no GPU work (a CPU step) is still a GEMM.

use super::ProfileError;
use super::kineto::{Cat, Event, Parsed};
use super::ops::{self, Inputs, Layout, LayoutError, OpKind};
use crate::observed::{ActivityKind, ObservedKernel};
use std::collections::HashMap;

/// How activities are owned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Owners<'p> {
    /// By GEMM-family ops (an imported profile).
    Ops,
    /// By `record_function` ranges named `PREFIX<index>` (the Python
    /// recorder wraps each GEMM op it sees in one).
    Annotations(&'p str),
}

/// What owns a bound GEMM.
#[derive(Debug, Clone)]
pub(crate) enum Owner {
    /// A GEMM op (or composite op) range: its event index.
    Op(usize),
    /// A recorder annotation: its index.
    Annotation(u64),
    /// A region no GEMM op owns: its label.
    Region(String),
}

/// One bound GEMM, before it becomes an observed GEMM.
#[derive(Debug, Clone)]
pub(crate) struct BoundGemm {
    pub owner: Owner,
    /// When it started (the op's start; the first kernel's launch for a
    /// region's GEMM), for ordering.
    pub start: f64,
    pub event: u64,
    pub kernels: Vec<ObservedKernel>,
    pub beside: Vec<ObservedKernel>,
    /// The device of its first kernel, where one ran.
    pub device: Option<i64>,
}

/// Everything bound, counted and listed.
#[derive(Debug, Default)]
pub(crate) struct Binding {
    pub gemms: Vec<BoundGemm>,
    pub bound_kernels: u64,
    pub beside_gemms: u64,
    pub unowned_gemm_kernels: u64,
    pub non_gemm: u64,
    /// Non-GEMM kernels by name (for the recorder's `other_kernels`).
    pub non_gemm_kernels: Vec<String>,
    pub unbound: u64,
    pub unbound_listed: Vec<String>,
    /// Devices GPU activities ran on.
    pub devices: Vec<i64>,
}

#[derive(Debug, Clone, Copy)]
struct Range {
    event: usize,
    start: f64,
    end: f64,
    parent: Option<usize>,
}

/// The ranges of one thread, sorted by start, with parents (indices into
/// `ranges`).
#[derive(Debug, Default)]
struct Thread {
    ranges: Vec<Range>,
    starts: Vec<f64>,
}

impl Thread {
    /// The innermost range around `ts`.
    fn innermost(&self, ts: f64) -> Option<usize> {
        let i = self.starts.partition_point(|&s| s <= ts);
        let mut cur = i.checked_sub(1)?;
        loop {
            let r = &self.ranges[cur];
            if r.end >= ts {
                return Some(cur);
            }
            cur = r.parent?;
        }
    }
}

/// Whether a kernel's name says it computes a GEMM (or an attention, whose
/// core is two GEMMs): cuBLAS, cuBLASLt, CUTLASS and CUTLASS-built
/// libraries, Triton templates, cuDNN's implicit GEMMs, flash attention.
pub fn gemm_like(name: &str) -> bool {
    const MARKS: [&str; 14] = [
        "gemm",
        "gemv",
        "nvjet",
        "matmul",
        "xmma",
        "cutlass",
        "wgmma",
        "triton_tem_",
        "splitk",
        "fmha",
        "flash_fwd",
        "flash_bwd",
        "flash_attn",
        "sdpa",
    ];
    let lower = name.to_ascii_lowercase();
    MARKS.iter().any(|m| lower.contains(m))
}

/// Whether a kernel folds partial sums of a split reduction (cuBLASLt's
/// `splitKreduce_kernel`, a CUTLASS split-K reduction).
pub fn reduce_kernel(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("splitkreduce")
        || lower.contains("split_k_reduce")
        || (lower.contains("reduce") && (lower.contains("gemm") || lower.contains("splitk")))
}

fn activity_kind(cat: Cat) -> ActivityKind {
    match cat {
        Cat::Memcpy => ActivityKind::Memcpy,
        Cat::Memset => ActivityKind::Memset,
        _ => ActivityKind::Kernel,
    }
}

fn observed_kernel(e: &Event<'_>) -> ObservedKernel {
    let a = e.activity();
    ObservedKernel {
        name: crate::observed::bounded_name(&e.name).into_owned(),
        kind: activity_kind(e.cat),
        grid: a.grid,
        block: a.block,
        shared_memory: a.shared_memory,
    }
}

/// The recorded inputs of a GEMM op's event, parsed.
fn inputs<'e>(a: &'e super::kineto::OpArgs<'_>) -> Inputs<'e> {
    let lists = |l: &Option<super::kineto::IntLists>| {
        l.as_ref()
            .map(|l| l.0.iter().map(|i| i.0.clone()).collect::<Vec<_>>())
    };
    let strs = |s: &'e Option<super::kineto::Strs<'_>>| {
        s.as_ref()
            .map(|s| s.0.iter().map(|c| c.as_ref()).collect::<Vec<&'e str>>())
            .unwrap_or_default()
    };
    Inputs {
        dims: lists(&a.input_dims).unwrap_or_default(),
        strides: lists(&a.input_strides),
        types: strs(&a.input_types),
        concrete: strs(&a.concrete_inputs),
    }
}

/// Why a GEMM op's event has no layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EventLayoutError {
    /// The event's recorded inputs do not parse (the field and the
    /// parser's message).
    #[error("{0}")]
    Inputs(String),
    /// The inputs describe no GEMM.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A composite op whose shapes are not one GEMM (the op's name).
    #[error("{0} of these shapes is not one GEMM")]
    NotOneGemm(String),
    /// An op that is not GEMM-family (its name).
    #[error("{0} is not a GEMM op")]
    NotGemmOp(String),
}

/// The layout of a GEMM op's event, or why there is none.
pub(crate) fn layout_of(e: &Event<'_>) -> Result<Layout, EventLayoutError> {
    let parsed = match e.inputs() {
        Some(raw) => raw.parse().map_err(EventLayoutError::Inputs)?,
        None => super::kineto::OpArgs::default(),
    };
    let inputs = inputs(&parsed);
    match ops::op_kind(&e.name) {
        Some(OpKind::Gemm { a, b, c }) => Ok(ops::gemm_layout(&inputs, a, b, c)?),
        Some(OpKind::Composite) if e.name == "aten::linear" => Ok(ops::linear_layout(&inputs)?),
        Some(OpKind::Composite) => {
            let l = ops::gemm_layout(&inputs, 0, 1, None);
            match l {
                Ok(l) if l.batch == 1 => Ok(l),
                _ => Err(EventLayoutError::NotOneGemm(e.name.to_string())),
            }
        }
        None => Err(EventLayoutError::NotGemmOp(e.name.to_string())),
    }
}

/// The index in `prefix<index>`, for a recorder annotation.
fn annotation_index(name: &str, prefix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.parse().ok()
}

/// Binds the parsed profile.
pub(crate) fn bind(parsed: &Parsed<'_>, owners: Owners<'_>) -> Result<Binding, ProfileError> {
    let events = &parsed.events;
    // Threads and their ranges, nested.
    let mut threads: Vec<Thread> = (0..parsed.threads.len())
        .map(|_| Thread::default())
        .collect();
    for (i, e) in events.iter().enumerate() {
        if !e.cat.is_range() {
            continue;
        }
        threads[e.thread as usize].ranges.push(Range {
            event: i,
            start: e.ts,
            end: e.ts + e.dur,
            parent: None,
        });
    }
    for t in &mut threads {
        nest(t);
    }
    // Launching calls by correlation id, and flow ends by where they land.
    let mut launch_of: HashMap<u64, usize> = HashMap::new();
    let mut flows: HashMap<(u32, u64), u64> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match e.cat {
            Cat::Runtime => {
                let Some(c) = e.correlation else {
                    continue;
                };
                if let Some(&first) = launch_of.get(&c) {
                    let f = &events[first];
                    return Err(ProfileError::DuplicateCorrelation {
                        correlation: c,
                        first: (f.index, super::shorten_name(&f.name)),
                        second: (e.index, super::shorten_name(&e.name)),
                    });
                }
                launch_of.insert(c, i);
            }
            Cat::FlowEnd => {
                if let Some(id) = e.correlation {
                    flows.insert((e.thread, e.ts.to_bits()), id);
                }
            }
            _ => {}
        }
    }
    // Which GEMM-family op ranges hold another GEMM op (they are wrappers,
    // GEMMs of their own only where they launch kernels themselves).
    let mut wraps_gemm = vec![false; events.len()];
    for t in &threads {
        for r in &t.ranges {
            if matches!(
                ops::op_kind(&events[r.event].name),
                Some(OpKind::Gemm { .. })
            ) {
                let mut p = r.parent;
                while let Some(pi) = p {
                    wraps_gemm[t.ranges[pi].event] = true;
                    p = t.ranges[pi].parent;
                }
            }
        }
    }

    let mut out = Binding::default();
    // Bound GEMMs by owner key.
    let mut by_op: HashMap<usize, usize> = HashMap::new();
    let mut by_annotation: HashMap<u64, usize> = HashMap::new();
    // Per region instance, the last region GEMM (to attach a reduce kernel).
    let mut last_in_region: HashMap<(usize, usize), usize> = HashMap::new();
    let mut region_counts: HashMap<String, u64> = HashMap::new();

    for e in events.iter().filter(|e| e.cat.is_activity()) {
        let correlation = e
            .correlation
            .or_else(|| flows.get(&(e.thread, e.ts.to_bits())).copied());
        let Some(li) = correlation.and_then(|c| launch_of.get(&c).copied()) else {
            out.unbound += 1;
            if out.unbound_listed.len() < crate::trace::MAX_LISTED {
                out.unbound_listed.push(format!(
                    "{} (event {}{})",
                    crate::observed::bounded_name(&e.name),
                    e.index,
                    match correlation {
                        Some(c) => format!(", correlation {c} has no launching call"),
                        None => ", no correlation id".into(),
                    }
                ));
            }
            continue;
        };
        let device = e.activity().device;
        if let Some(d) = device
            && !out.devices.contains(&d)
        {
            out.devices.push(d);
        }
        let launch = &events[li];
        let t = launch.thread as usize;
        let innermost = threads[t].innermost(launch.ts).map(|r| (t, r));
        // The owner, and whether the activity came from it directly.
        let kernel = observed_kernel(e);
        let is_kernel = kernel.kind == ActivityKind::Kernel;
        let owner = match innermost {
            Some((t, r)) => find_owner(&threads[t], r, launch, events, owners)?,
            None => None,
        };
        let owner = owner
            // A composite op owns only the GEMM kernels it launched itself.
            .filter(|o| !o.3 || (is_kernel && gemm_like(&e.name)));
        if let Some((owner_event, key, direct, _)) = owner {
            let slot = match key {
                OwnerKey::Op => *by_op.entry(owner_event).or_insert_with(|| {
                    out.gemms.push(BoundGemm {
                        owner: Owner::Op(owner_event),
                        start: events[owner_event].ts,
                        event: events[owner_event].index,
                        kernels: Vec::new(),
                        beside: Vec::new(),
                        device: None,
                    });
                    out.gemms.len() - 1
                }),
                OwnerKey::Annotation(index) => *by_annotation.entry(index).or_insert_with(|| {
                    out.gemms.push(BoundGemm {
                        owner: Owner::Annotation(index),
                        start: events[owner_event].ts,
                        event: events[owner_event].index,
                        kernels: Vec::new(),
                        beside: Vec::new(),
                        device: None,
                    });
                    out.gemms.len() - 1
                }),
            };
            let g = &mut out.gemms[slot];
            if direct && is_kernel {
                g.kernels.push(kernel);
                g.device = g.device.or(device);
                out.bound_kernels += 1;
            } else {
                g.beside.push(kernel);
                out.beside_gemms += 1;
            }
            continue;
        }
        if is_kernel && gemm_like(&e.name) {
            // A GEMM kernel no GEMM op owns: a GEMM of its region.
            let range_event = innermost.map(|(t, r)| threads[t].ranges[r].event);
            let graph = launch.name.contains("GraphLaunch");
            let label = match (range_event, graph) {
                (Some(r), true) => format!("{} in {}", launch.name, events[r].name),
                (Some(r), false) => events[r].name.to_string(),
                (None, _) => format!("{} (no enclosing range)", launch.name),
            };
            let label = crate::observed::bounded_name(&label).into_owned();
            let instance = (
                range_event.unwrap_or(usize::MAX),
                if graph { li } else { usize::MAX },
            );
            out.unowned_gemm_kernels += 1;
            if reduce_kernel(&e.name)
                && let Some(&slot) = last_in_region.get(&instance)
            {
                out.gemms[slot].kernels.push(kernel);
                continue;
            }
            let n = region_counts.entry(label.clone()).or_default();
            *n += 1;
            out.gemms.push(BoundGemm {
                owner: Owner::Region(label),
                start: launch.ts,
                event: e.index,
                kernels: vec![kernel],
                beside: Vec::new(),
                device,
            });
            last_in_region.insert(instance, out.gemms.len() - 1);
            continue;
        }
        out.non_gemm += 1;
        if is_kernel {
            out.non_gemm_kernels.push(e.name.to_string());
        }
    }

    // GEMM ops that launched nothing (a CPU step, a GEMM op of no GPU
    // work) are GEMMs too, unless they only wrap another GEMM op.
    for t in &threads {
        for r in &t.ranges {
            let e = &events[r.event];
            let gemm = match owners {
                Owners::Ops => {
                    matches!(ops::op_kind(&e.name), Some(OpKind::Gemm { .. }))
                        && !wraps_gemm[r.event]
                }
                Owners::Annotations(prefix) => {
                    e.cat == Cat::Annotation && annotation_index(&e.name, prefix).is_some()
                }
            };
            if !gemm {
                continue;
            }
            let owner = match owners {
                Owners::Ops => {
                    if by_op.contains_key(&r.event) {
                        continue;
                    }
                    by_op.insert(r.event, out.gemms.len());
                    Owner::Op(r.event)
                }
                Owners::Annotations(prefix) => {
                    let index = annotation_index(&e.name, prefix).unwrap_or(0);
                    if by_annotation.contains_key(&index) {
                        continue;
                    }
                    by_annotation.insert(index, out.gemms.len());
                    Owner::Annotation(index)
                }
            };
            out.gemms.push(BoundGemm {
                owner,
                start: e.ts,
                event: e.index,
                kernels: Vec::new(),
                beside: Vec::new(),
                device: None,
            });
        }
    }
    out.gemms
        .sort_by(|a, b| a.start.total_cmp(&b.start).then(a.event.cmp(&b.event)));
    out.devices.sort_unstable();
    Ok(out)
}

enum OwnerKey {
    Op,
    Annotation(u64),
}

/// The owner of an activity launched from range `r` of `thread`: the
/// owner's event, its key, and whether the launch came from it directly
/// (not from a child op), and whether it is a composite op (`linear`,
/// `matmul`) that launched it with no GEMM op inside.
///
/// A range on the way up that has ended before the launch (its child
/// outlived it: ranges that overlap without nesting) is passed over; if it
/// is a GEMM op, which GEMM launched the activity is ambiguous, and that is
/// an error naming both ranges.
#[allow(clippy::type_complexity)]
fn find_owner(
    thread: &Thread,
    r: usize,
    launch: &Event<'_>,
    events: &[Event<'_>],
    owners: Owners<'_>,
) -> Result<Option<(usize, OwnerKey, bool, bool)>, ProfileError> {
    let mut cur = Some(r);
    let mut direct = true;
    let mut composite: Option<usize> = None;
    let mut child: Option<usize> = None;
    while let Some(i) = cur {
        let ev = thread.ranges[i].event;
        let e = &events[ev];
        if thread.ranges[i].end < launch.ts {
            if ops::op_kind(&e.name).is_some() {
                let c = child.map_or(e, |c| &events[c]);
                return Err(ProfileError::Overlap {
                    first: (e.index, super::shorten_name(&e.name)),
                    second: (c.index, super::shorten_name(&c.name)),
                    launch: (launch.index, super::shorten_name(&launch.name)),
                });
            }
            cur = thread.ranges[i].parent;
            continue;
        }
        child = Some(ev);
        match owners {
            Owners::Ops => match ops::op_kind(&e.name) {
                Some(OpKind::Gemm { .. }) if e.cat == Cat::CpuOp => {
                    return Ok(Some((ev, OwnerKey::Op, direct, false)));
                }
                Some(OpKind::Composite) if e.cat == Cat::CpuOp && i == r => {
                    composite = Some(ev);
                }
                _ => {}
            },
            Owners::Annotations(prefix) => {
                if e.cat == Cat::Annotation
                    && let Some(index) = annotation_index(&e.name, prefix)
                {
                    return Ok(Some((ev, OwnerKey::Annotation(index), direct, false)));
                }
                if ops::op_kind(&e.name).is_some() {
                    // The GEMM op inside the recorder's range: still direct.
                    cur = thread.ranges[i].parent;
                    continue;
                }
            }
        }
        if e.cat != Cat::Python {
            direct = false;
        }
        cur = thread.ranges[i].parent;
    }
    // A composite op (linear, matmul) that launched a GEMM kernel itself,
    // with no GEMM op inside, owns it.
    Ok(composite.map(|ev| (ev, OwnerKey::Op, true, true)))
}

/// Sorts a thread's ranges and links each to its parent: the latest
/// started range still open when it starts. A range that ends after its
/// parent (real profiles have them: an annotation around a collective, a
/// `detach` that outlives `aten::detach` by a rounding) keeps its end;
/// [`find_owner`] passes over a parent that has ended.
fn nest(t: &mut Thread) {
    t.ranges.sort_by(|a, b| {
        a.start
            .total_cmp(&b.start)
            .then(b.end.total_cmp(&a.end))
            .then(a.event.cmp(&b.event))
    });
    let mut stack: Vec<usize> = Vec::new();
    for i in 0..t.ranges.len() {
        let start = t.ranges[i].start;
        while let Some(&top) = stack.last() {
            if t.ranges[top].end < start
                || (t.ranges[top].end == start && t.ranges[top].start < start)
            {
                stack.pop();
            } else {
                break;
            }
        }
        t.ranges[i].parent = stack.last().copied();
        stack.push(i);
    }
    t.starts = t.ranges.iter().map(|r| r.start).collect();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn op(name: &'static str) -> Event<'static> {
        Event {
            index: 0,
            cat: Cat::CpuOp,
            name: Cow::Borrowed(name),
            thread: 0,
            ts: 0.0,
            dur: 1.0,
            correlation: None,
            extra: None,
        }
    }

    #[test]
    fn event_layout_errors_name_the_op() {
        let e = layout_of(&op("aten::add")).unwrap_err();
        assert_eq!(e, EventLayoutError::NotGemmOp("aten::add".into()));
        assert_eq!(e.to_string(), "aten::add is not a GEMM op");
        let e = layout_of(&op("aten::matmul")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "aten::matmul of these shapes is not one GEMM"
        );
        let e = layout_of(&op("aten::mm")).unwrap_err();
        assert_eq!(e, EventLayoutError::Layout(LayoutError::NoShapes));
        assert!(e.to_string().contains("no shapes"), "{e}");
    }
}
