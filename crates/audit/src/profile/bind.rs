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
//! - A GEMM-family kernel ([`KernelClass::of`]: cuBLAS's, CUTLASS's, a
//!   Triton template, an attention library's) launched where no GEMM op
//!   owns it (a `torch.compile` region, a CUDA-graph replay) is recorded as
//!   a GEMM of that region; a reduce kernel right after it joins it.
//! - A convolution kernel (cuDNN's, CUTLASS's implicit-GEMM convolutions
//!   among them) no GEMM op owns is counted as a convolution kernel.
//! - Everything else is counted as non-GEMM work, and an activity whose
//!   launching call the profile does not hold is listed as unbound.
//!
//! A GEMM op that launched no GPU work (a CPU step) is still a GEMM.

use super::ProfileError;
use super::classify::KernelClass;
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
    /// For a GEMM op captured into a CUDA graph, the graph launch whose
    /// replay this is (its label).
    pub replay: Option<String>,
    /// A region GEMM's innermost range around its launch (an index into
    /// the parsed events), where there is one.
    pub range: Option<usize>,
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
    /// Convolution kernels no GEMM op owns, by name: counted apart from
    /// GEMMs and from other work ([`KernelClass::Convolution`]).
    pub convolution_kernels: Vec<String>,
    pub unbound: u64,
    pub unbound_listed: Vec<String>,
    /// Devices GPU activities ran on.
    pub devices: Vec<i64>,
    /// What the trace's notes should say about graph replays.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Range {
    pub event: usize,
    start: f64,
    end: f64,
    pub parent: Option<usize>,
}

/// The ranges of one thread, sorted by start, with parents (indices into
/// `ranges`).
#[derive(Debug, Default)]
pub(super) struct Thread {
    pub ranges: Vec<Range>,
    starts: Vec<f64>,
}

impl Thread {
    /// The innermost range around `ts`.
    pub(super) fn innermost(&self, ts: f64) -> Option<usize> {
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

fn activity_kind(cat: Cat) -> ActivityKind {
    match cat {
        Cat::Memcpy => ActivityKind::Memcpy,
        Cat::Memset => ActivityKind::Memset,
        _ => ActivityKind::Kernel,
    }
}

pub(super) fn observed_kernel(e: &Event<'_>) -> ObservedKernel {
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
pub(super) fn inputs<'e>(a: &'e super::kineto::OpArgs<'_>) -> Inputs<'e> {
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
pub(super) fn annotation_index(name: &str, prefix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.parse().ok()
}

/// Binds the parsed profile: nests each thread's ranges, finds every
/// activity's launching call, binds each activity to its owner or region
/// (or counts it), then adds the GEMM ops that launched nothing.
pub(crate) fn bind(parsed: &Parsed<'_>, owners: Owners<'_>) -> Result<Binding, ProfileError> {
    let events = &parsed.events;
    let threads = threads_of(parsed);
    let launches = Launches::of(events)?;
    let replays = match owners {
        Owners::Ops => super::graph::profile_replays(events, &threads, &launches)?,
        Owners::Annotations(_) => super::graph::ProfileReplays::default(),
    };
    let mut binder = Binder::new(events, &threads, owners);
    binder.out.notes = replays.notes.clone();
    binder.replays = replays;
    for (i, e) in events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.cat.is_activity())
    {
        binder.activity(i, e, &launches)?;
    }
    binder.idle_gemms();
    Ok(binder.finish())
}

/// Every thread's ranges, nested (a thread index is its position).
pub(super) fn threads_of(parsed: &Parsed<'_>) -> Vec<Thread> {
    let mut threads: Vec<Thread> = (0..parsed.threads.len())
        .map(|_| Thread::default())
        .collect();
    for (i, e) in parsed.events.iter().enumerate() {
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
    threads
}

/// The launching calls by correlation id, and the flow arrows by where
/// they end (an activity with no correlation id of its own names its call
/// through the arrow that lands on it).
pub(super) struct Launches {
    by_correlation: HashMap<u64, usize>,
    flows: HashMap<(u32, u64), u64>,
}

impl Launches {
    /// Collects them; two calls with one correlation id are an error.
    pub(super) fn of(events: &[Event<'_>]) -> Result<Launches, ProfileError> {
        let mut by_correlation: HashMap<u64, usize> = HashMap::new();
        let mut flows: HashMap<(u32, u64), u64> = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            match e.cat {
                Cat::Runtime => {
                    let Some(c) = e.correlation else {
                        continue;
                    };
                    if let Some(&first) = by_correlation.get(&c) {
                        let f = &events[first];
                        return Err(ProfileError::DuplicateCorrelation {
                            correlation: c,
                            first: (f.index, super::shorten_name(&f.name)),
                            second: (e.index, super::shorten_name(&e.name)),
                        });
                    }
                    by_correlation.insert(c, i);
                }
                Cat::FlowEnd => {
                    if let Some(id) = e.correlation {
                        flows.insert((e.thread, e.ts.to_bits()), id);
                    }
                }
                _ => {}
            }
        }
        Ok(Launches {
            by_correlation,
            flows,
        })
    }

    /// An activity's correlation id (its own, or its flow arrow's), and
    /// the event index of the call that launched it where the profile
    /// holds that call.
    pub(super) fn of_activity(&self, e: &Event<'_>) -> (Option<u64>, Option<usize>) {
        let correlation = e
            .correlation
            .or_else(|| self.flows.get(&(e.thread, e.ts.to_bits())).copied());
        let launch = correlation.and_then(|c| self.by_correlation.get(&c).copied());
        (correlation, launch)
    }
}

/// Which GEMM-family op ranges hold another GEMM op: they are wrappers,
/// GEMMs of their own only where they launch kernels themselves.
fn wrapping_gemm_ops(threads: &[Thread], events: &[Event<'_>]) -> Vec<bool> {
    let mut wraps_gemm = vec![false; events.len()];
    for t in threads {
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
    wraps_gemm
}

/// The binding under way: what is bound so far, and where each owner's
/// GEMM sits in it.
struct Binder<'a, 'p> {
    events: &'a [Event<'p>],
    threads: &'a [Thread],
    owners: Owners<'a>,
    out: Binding,
    /// Bound GEMMs by owner key: an op's event index, an annotation's
    /// index.
    by_op: HashMap<usize, usize>,
    by_annotation: HashMap<u64, usize>,
    /// Per region instance (its range event, and the graph launch for a
    /// replay), the last region GEMM: a reduce kernel joins it.
    last_in_region: HashMap<(usize, usize), usize>,
    /// Graph launches bound through their captures.
    replays: super::graph::ProfileReplays,
    /// Per (captured GEMM op event, graph launch event): its replay's GEMM.
    by_replay: HashMap<(usize, usize), usize>,
}

impl<'a, 'p> Binder<'a, 'p> {
    fn new(events: &'a [Event<'p>], threads: &'a [Thread], owners: Owners<'a>) -> Self {
        Binder {
            events,
            threads,
            owners,
            out: Binding::default(),
            by_op: HashMap::new(),
            by_annotation: HashMap::new(),
            last_in_region: HashMap::new(),
            replays: super::graph::ProfileReplays::default(),
            by_replay: HashMap::new(),
        }
    }

    /// Binds one GPU activity: to the GEMM that owns its launch, to a GEMM
    /// of its region, to the non-GEMM count, or to the unbound list.
    fn activity(
        &mut self,
        at: usize,
        e: &Event<'_>,
        launches: &Launches,
    ) -> Result<(), ProfileError> {
        let (correlation, launch) = launches.of_activity(e);
        let Some(li) = launch else {
            self.unbound(e, correlation);
            return Ok(());
        };
        let device = e.activity().device;
        if let Some(d) = device
            && !self.out.devices.contains(&d)
        {
            self.out.devices.push(d);
        }
        let events = self.events;
        let launch = &events[li];
        let t = launch.thread as usize;
        let innermost = self.threads[t].innermost(launch.ts).map(|r| (t, r));
        let kernel = observed_kernel(e);
        let is_kernel = kernel.kind == ActivityKind::Kernel;
        let class = if is_kernel {
            KernelClass::of(&e.name)
        } else {
            KernelClass::Other
        };
        if let Some((graph_launch, Some(owner))) = self.replays.of(at)
            && (!owner.composite || class.is_gemm_family())
        {
            let label = match innermost {
                Some((t, r)) => format!(
                    "{} in {}",
                    launch.name, events[self.threads[t].ranges[r].event].name
                ),
                None => format!("{} (no enclosing range)", launch.name),
            };
            self.bind_to_replay(owner, graph_launch, label, is_kernel, kernel, device);
            return Ok(());
        }
        let owner = match innermost {
            Some((t, r)) => find_owner(&self.threads[t], r, launch, events, self.owners)?,
            None => None,
        };
        // A composite op owns only the GEMM kernels it launched itself.
        let owner = owner.filter(|o| !o.composite || class.is_gemm_family());
        if let Some(owner) = owner {
            self.bind_to_owner(owner, is_kernel, kernel, device);
        } else if class.is_gemm_family() {
            let range_event = innermost.map(|(t, r)| self.threads[t].ranges[r].event);
            self.bind_to_region(e, li, range_event, class, kernel, device);
        } else if class == KernelClass::Convolution {
            self.out.convolution_kernels.push(e.name.to_string());
        } else {
            self.out.non_gemm += 1;
            if is_kernel {
                self.out.non_gemm_kernels.push(e.name.to_string());
            }
        }
        Ok(())
    }

    /// Counts and lists an activity whose launching call is not in the
    /// profile.
    fn unbound(&mut self, e: &Event<'_>, correlation: Option<u64>) {
        self.out.unbound += 1;
        if self.out.unbound_listed.len() < crate::trace::MAX_LISTED {
            self.out.unbound_listed.push(format!(
                "{} (event {}{})",
                crate::observed::bounded_name(&e.name),
                e.index,
                match correlation {
                    Some(c) => format!(", correlation {c} has no launching call"),
                    None => ", no correlation id".into(),
                }
            ));
        }
    }

    /// The slot of the GEMM `owner_event` owns (by `key`), made empty on
    /// first use.
    fn slot(&mut self, owner_event: usize, key: OwnerKey) -> usize {
        let existing = match key {
            OwnerKey::Op => self.by_op.get(&owner_event),
            OwnerKey::Annotation(index) => self.by_annotation.get(&index),
        };
        if let Some(&slot) = existing {
            return slot;
        }
        let slot = self.out.gemms.len();
        let owner = match key {
            OwnerKey::Op => {
                self.by_op.insert(owner_event, slot);
                Owner::Op(owner_event)
            }
            OwnerKey::Annotation(index) => {
                self.by_annotation.insert(index, slot);
                Owner::Annotation(index)
            }
        };
        self.out
            .gemms
            .push(empty_gemm(owner, &self.events[owner_event]));
        slot
    }

    /// Adds an activity to its owner's GEMM: as its launch where the owner
    /// launched the kernel itself, beside it otherwise.
    fn bind_to_owner(
        &mut self,
        owner: Found,
        is_kernel: bool,
        kernel: ObservedKernel,
        device: Option<i64>,
    ) {
        let slot = self.slot(owner.event, owner.key);
        self.add(slot, owner.direct && is_kernel, kernel, device);
    }

    /// Adds an activity to the GEMM in `slot` ([`place`]), counting it.
    fn add(&mut self, slot: usize, launch: bool, kernel: ObservedKernel, device: Option<i64>) {
        let g = &mut self.out.gemms[slot];
        if place(
            launch,
            kernel,
            device,
            &mut g.kernels,
            &mut g.beside,
            &mut g.device,
        ) {
            self.out.bound_kernels += 1;
        } else {
            self.out.beside_gemms += 1;
        }
    }

    /// Adds an activity of a graph replay to the replay's instance of the
    /// captured GEMM op in its place, by the eager rule.
    fn bind_to_replay(
        &mut self,
        owner: Found,
        graph_launch: usize,
        label: String,
        is_kernel: bool,
        kernel: ObservedKernel,
        device: Option<i64>,
    ) {
        let slot = match self.by_replay.get(&(owner.event, graph_launch)) {
            Some(&slot) => slot,
            None => {
                let mut g = empty_gemm(Owner::Op(owner.event), &self.events[owner.event]);
                // Replays are ordered by their launch; a replay's GEMMs by
                // their ops (the event index breaks the tie).
                g.start = self.events[graph_launch].ts;
                g.replay = Some(crate::observed::bounded_name(&label).into_owned());
                self.out.gemms.push(g);
                self.by_replay
                    .insert((owner.event, graph_launch), self.out.gemms.len() - 1);
                self.out.gemms.len() - 1
            }
        };
        self.add(slot, owner.direct && is_kernel, kernel, device);
    }

    /// Records a GEMM kernel no GEMM op owns as a GEMM of its region (the
    /// innermost range around its launch, and the graph replay that
    /// launched it); a reduce kernel joins the region's last GEMM.
    fn bind_to_region(
        &mut self,
        e: &Event<'_>,
        launch_index: usize,
        range_event: Option<usize>,
        class: KernelClass,
        kernel: ObservedKernel,
        device: Option<i64>,
    ) {
        let launch = &self.events[launch_index];
        let graph = launch.name.contains("GraphLaunch");
        let label = match (range_event, graph) {
            (Some(r), true) => format!("{} in {}", launch.name, self.events[r].name),
            (Some(r), false) => self.events[r].name.to_string(),
            (None, _) => format!("{} (no enclosing range)", launch.name),
        };
        let label = crate::observed::bounded_name(&label).into_owned();
        let instance = (
            range_event.unwrap_or(usize::MAX),
            if graph { launch_index } else { usize::MAX },
        );
        self.out.unowned_gemm_kernels += 1;
        if class == KernelClass::GemmReduce
            && let Some(&slot) = self.last_in_region.get(&instance)
        {
            self.out.gemms[slot].kernels.push(kernel);
            return;
        }
        self.out.gemms.push(BoundGemm {
            owner: Owner::Region(label),
            start: launch.ts,
            event: e.index,
            kernels: vec![kernel],
            beside: Vec::new(),
            device,
            replay: None,
            range: range_event,
        });
        self.last_in_region
            .insert(instance, self.out.gemms.len() - 1);
    }

    /// Adds the GEMM ops that launched nothing (a CPU step, a GEMM op of
    /// no GPU work): GEMMs too, unless they only wrap another GEMM op.
    fn idle_gemms(&mut self) {
        let events = self.events;
        let wraps_gemm = match self.owners {
            Owners::Ops => wrapping_gemm_ops(self.threads, events),
            Owners::Annotations(_) => Vec::new(),
        };
        for t in self.threads {
            for r in &t.ranges {
                let e = &events[r.event];
                let key = match self.owners {
                    Owners::Ops
                        if matches!(ops::op_kind(&e.name), Some(OpKind::Gemm { .. }))
                            && !wraps_gemm[r.event]
                            && !self.replays.replayed_ops.contains(&r.event) =>
                    {
                        OwnerKey::Op
                    }
                    Owners::Annotations(prefix) if e.cat == Cat::Annotation => {
                        match annotation_index(&e.name, prefix) {
                            Some(index) => OwnerKey::Annotation(index),
                            None => continue,
                        }
                    }
                    _ => continue,
                };
                self.slot(r.event, key);
            }
        }
    }

    /// The binding, its GEMMs in start order.
    fn finish(mut self) -> Binding {
        self.out
            .gemms
            .sort_by(|a, b| a.start.total_cmp(&b.start).then(a.event.cmp(&b.event)));
        self.out.devices.sort_unstable();
        self.out
    }
}

/// The binding rule for an owned activity: a kernel its owner launched
/// itself (`launch`) is part of the GEMM's launch, and the first such
/// kernel's device is the GEMM's; anything else (a copy, a fill, a child
/// op's kernel) is kept beside it. Returns whether it joined the launch.
pub(super) fn place(
    launch: bool,
    kernel: ObservedKernel,
    device: Option<i64>,
    kernels: &mut Vec<ObservedKernel>,
    beside: &mut Vec<ObservedKernel>,
    at: &mut Option<i64>,
) -> bool {
    if launch {
        kernels.push(kernel);
        *at = at.or(device);
    } else {
        beside.push(kernel);
    }
    launch
}

/// A GEMM of `owner`, whose range is event `e`, with nothing bound yet.
fn empty_gemm(owner: Owner, e: &Event<'_>) -> BoundGemm {
    BoundGemm {
        owner,
        start: e.ts,
        event: e.index,
        kernels: Vec::new(),
        beside: Vec::new(),
        device: None,
        replay: None,
        range: None,
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) enum OwnerKey {
    Op,
    Annotation(u64),
}

/// The owner [`find_owner`] found for an activity.
#[derive(Debug, Clone, Copy)]
pub(super) struct Found {
    /// The owner's event index.
    pub event: usize,
    pub key: OwnerKey,
    /// The launch came from the owner itself, not from a child op.
    pub direct: bool,
    /// The owner is a composite op (`linear`, `matmul`) that launched it
    /// with no GEMM op inside.
    pub composite: bool,
}

/// The owner of an activity launched from range `r` of `thread`.
///
/// A range on the way up that has ended before the launch (its child
/// outlived it: ranges that overlap without nesting) is passed over; if it
/// is a GEMM op, which GEMM launched the activity is ambiguous, and that is
/// an error naming both ranges.
pub(super) fn find_owner(
    thread: &Thread,
    r: usize,
    launch: &Event<'_>,
    events: &[Event<'_>],
    owners: Owners<'_>,
) -> Result<Option<Found>, ProfileError> {
    let found = |event, key, direct, composite| {
        Some(Found {
            event,
            key,
            direct,
            composite,
        })
    };
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
                    return Ok(found(ev, OwnerKey::Op, direct, false));
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
                    return Ok(found(ev, OwnerKey::Annotation(index), direct, false));
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
    Ok(composite.and_then(|ev| found(ev, OwnerKey::Op, true, true)))
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
