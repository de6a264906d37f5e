//! CUDA-graph replays bound to the GEMMs captured in them.
//!
//! A replay is one `cudaGraphLaunch`: every kernel, copy and fill of the
//! graph carries that one call's correlation id, so the profile cannot say
//! which op launched which kernel. The capture can: while a graph is being
//! captured the kernels do not run, but every launching call (a kernel
//! launch, an async copy or fill) is still made, inside the ranges of the
//! ops that made it. A graph captured on one stream replays its nodes in
//! capture order, so the replay's `p`-th GPU activity is the node the
//! capture's `p`-th launching call added: it is bound to the GEMM that
//! call was launched from, by the same rule as an eager launch (a kernel
//! the GEMM op launched itself is its launch; a copy, a fill or a child
//! op's kernel is kept beside it).
//!
//! The recorder (`gemm_audit.torch.capture`) profiles the capture with
//! each GEMM op in a `PREFIX<index>` range and each capture in a
//! `CAPTURE_PREFIX<index>` range ([`captured_launches`]), then profiles
//! the replays, each in a `REPLAY_PREFIX<index>` range
//! ([`replayed_activities`]), and pairs them ([`bind_replay`]).

use super::bind::{self, Launches, OwnerKey, Owners};
use super::kineto::{self, Cat, Event, Parsed};
use super::{BoundRange, KernelClass, MAX_PROFILE_EVENTS, ProfileError};
use crate::observed::{ActivityKind, ObservedKernel};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Why a replay could not be bound to its capture.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The profile could not be read or bound.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// The replay ran another number of GPU activities than the capture
    /// launched, so its kernels cannot be paired with the captured ops.
    #[error(
        "the replay ran {replayed} GPU activities but the capture launched {captured}: the graph was changed after capture (an exec update), it was captured on more than one stream, or the profiler missed a launch"
    )]
    Mismatch {
        /// Launching calls the capture made.
        captured: usize,
        /// GPU activities the replay ran.
        replayed: usize,
    },
}

/// One launching call a capture made: the node a replay runs in its place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedLaunch {
    /// The runtime or driver call (`cudaLaunchKernel`, `cudaMemsetAsync`).
    pub call: String,
    /// The recorder's GEMM range it was launched from, if any (its index).
    pub owner: Option<u64>,
    /// Launched by that GEMM op itself, not by a child op (an `addmm`
    /// copying its C first launches the copy from `aten::copy_`).
    pub direct: bool,
}

/// What one replay ran, bound to the captured GEMMs.
#[derive(Debug, Clone, Default)]
pub struct ReplayBinding {
    /// Per captured GEMM (the recorder's index): its kernels and what ran
    /// beside them.
    pub gemms: BTreeMap<u64, BoundRange>,
    /// GEMM-family kernels no captured GEMM op launched (a Triton template
    /// of a compiled graph: no aten op was dispatched for it).
    pub unowned_gemm_kernels: Vec<ObservedKernel>,
    /// Convolution kernels no captured GEMM op launched, by name.
    pub convolution_kernels: Vec<String>,
    /// Other activities no captured GEMM op launched, by name.
    pub other: Vec<String>,
}

/// Whether a runtime or driver call adds a graph node that runs as a GPU
/// activity on replay: a kernel launch, or an asynchronous copy or fill.
/// (`cudaGraphLaunch` and host functions do not.)
fn adds_activity(call: &str) -> bool {
    let kernel = call.contains("Launch") && call.contains("Kernel");
    let copy = (call.contains("Memcpy") || call.contains("Memset")) && call.contains("Async");
    kernel || copy
}

fn parse(text: &[u8]) -> Result<Parsed<'_>, ProfileError> {
    kineto::parse(
        text,
        kineto::ParseLimits {
            max_events: MAX_PROFILE_EVENTS,
        },
    )
}

/// The index of the innermost `prefix<index>` annotation around the call
/// at `launch` (on its thread), if any.
fn enclosing_annotation(
    threads: &[bind::Thread],
    events: &[Event<'_>],
    launch: &Event<'_>,
    prefix: &str,
) -> Option<u64> {
    let t = &threads[launch.thread as usize];
    let mut cur = t.innermost(launch.ts);
    while let Some(r) = cur {
        let e = &events[t.ranges[r].event];
        if e.cat == Cat::Annotation
            && let Some(i) = bind::annotation_index(&e.name, prefix)
        {
            return Some(i);
        }
        cur = t.ranges[r].parent;
    }
    None
}

/// Per capture (the index of its `capture_prefix<index>` range), the
/// launching calls made while capturing, in order, each with the GEMM
/// range (`op_prefix<index>`) it was launched from.
pub fn captured_launches(
    text: &[u8],
    op_prefix: &str,
    capture_prefix: &str,
) -> Result<BTreeMap<u64, Vec<CapturedLaunch>>, ProfileError> {
    let parsed = parse(text)?;
    let events = &parsed.events;
    let threads = bind::threads_of(&parsed);
    let windows = capture_windows(&threads, events, capture_prefix);
    let mut calls: BTreeMap<u64, Vec<(f64, usize, CapturedLaunch)>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if e.cat != Cat::Runtime || !adds_activity(&e.name) {
            continue;
        }
        let Some(capture) = enclosing_annotation(&threads, events, e, capture_prefix) else {
            continue;
        };
        if let Some(&(from, to)) = windows.get(&capture)
            && (e.ts < from || e.ts > to)
        {
            continue;
        }
        let t = &threads[e.thread as usize];
        let owner = match t.innermost(e.ts) {
            Some(r) => bind::find_owner(t, r, e, events, Owners::Annotations(op_prefix))?,
            None => None,
        };
        let (owner, direct) = match owner.map(|f| (f.key, f.direct)) {
            Some((OwnerKey::Annotation(index), direct)) => (Some(index), direct),
            _ => (None, false),
        };
        calls.entry(capture).or_default().push((
            e.ts,
            i,
            CapturedLaunch {
                call: crate::observed::bounded_name(&e.name).into_owned(),
                owner,
                direct,
            },
        ));
    }
    Ok(calls
        .into_iter()
        .map(|(j, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            (j, v.into_iter().map(|(_, _, c)| c).collect())
        })
        .collect())
}

/// Per capture range, when its stream capture began and ended (the
/// `cudaStreamBeginCapture` and `cudaStreamEndCapture` calls inside it),
/// where the profile holds both: a launch in the range outside them (torch
/// fills its RNG seed and offset before the capture begins) adds no node.
fn capture_windows(
    threads: &[bind::Thread],
    events: &[Event<'_>],
    capture_prefix: &str,
) -> BTreeMap<u64, (f64, f64)> {
    let mut begins: BTreeMap<u64, f64> = BTreeMap::new();
    let mut ends: BTreeMap<u64, f64> = BTreeMap::new();
    for e in events.iter().filter(|e| e.cat == Cat::Runtime) {
        let which = if e.name.contains("BeginCapture") {
            &mut begins
        } else if e.name.contains("EndCapture") {
            &mut ends
        } else {
            continue;
        };
        if let Some(j) = enclosing_annotation(threads, events, e, capture_prefix) {
            let at = which.entry(j).or_insert(e.ts);
            *at = at.min(e.ts);
        }
    }
    begins
        .into_iter()
        .filter_map(|(j, from)| Some((j, (from, *ends.get(&j)?))))
        .filter(|(_, (from, to))| from <= to)
        .collect()
}

/// One GPU activity a replay ran, and its device.
pub type ReplayedActivity = (ObservedKernel, Option<i64>);

/// Per replay (the index of its `replay_prefix<index>` range), the GPU
/// activities its graph launches ran, in the order they started.
pub fn replayed_activities(
    text: &[u8],
    replay_prefix: &str,
) -> Result<BTreeMap<u64, Vec<ReplayedActivity>>, ProfileError> {
    let parsed = parse(text)?;
    let events = &parsed.events;
    let threads = bind::threads_of(&parsed);
    let launches = Launches::of(events)?;
    let mut out: BTreeMap<u64, Vec<(f64, usize, ReplayedActivity)>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if !e.cat.is_activity() {
            continue;
        }
        let (_, Some(li)) = launches.of_activity(e) else {
            continue;
        };
        let launch = &events[li];
        if !launch.name.contains("GraphLaunch") {
            continue;
        }
        let Some(replay) = enclosing_annotation(&threads, events, launch, replay_prefix) else {
            continue;
        };
        let activity = (bind::observed_kernel(e), e.activity().device);
        out.entry(replay).or_default().push((e.ts, i, activity));
    }
    Ok(out
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            (k, v.into_iter().map(|(_, _, a)| a).collect())
        })
        .collect())
}

/// Binds one replay's activities to the capture's launching calls, the
/// `p`-th to the `p`-th.
pub fn bind_replay(
    captured: &[CapturedLaunch],
    replayed: &[ReplayedActivity],
) -> Result<ReplayBinding, GraphError> {
    if captured.len() != replayed.len() {
        return Err(GraphError::Mismatch {
            captured: captured.len(),
            replayed: replayed.len(),
        });
    }
    let mut out = ReplayBinding::default();
    for (call, (kernel, device)) in captured.iter().zip(replayed) {
        let is_kernel = kernel.kind == ActivityKind::Kernel;
        let class = if is_kernel {
            KernelClass::of(&kernel.name)
        } else {
            KernelClass::Other
        };
        match call.owner {
            Some(i) => {
                let g = out.gemms.entry(i).or_default();
                let launch = call.direct && is_kernel;
                bind::place(
                    launch,
                    kernel.clone(),
                    *device,
                    &mut g.kernels,
                    &mut g.beside,
                    &mut g.device,
                );
            }
            None if class.is_gemm_family() => out.unowned_gemm_kernels.push(kernel.clone()),
            None if class == KernelClass::Convolution => {
                out.convolution_kernels.push(kernel.name.clone());
            }
            None => out.other.push(kernel.name.clone()),
        }
    }
    Ok(out)
}

/// A capture found in an imported profile: the launching calls made
/// between a thread's `cudaStreamBeginCapture` and `cudaStreamEndCapture`,
/// in order, each with the GEMM op it was launched from.
struct ProfileCapture {
    end: f64,
    calls: Vec<CapturedCall>,
}

/// A call a capture made: its event, and its owner (a GEMM op) if any.
type CapturedCall = (usize, Option<bind::Found>);

/// The replays of an imported profile bound through their captures: per
/// GPU activity of a matched graph launch, the GEMM op of the captured
/// call in its place.
#[derive(Debug, Default)]
pub(super) struct ProfileReplays {
    /// Activity event index -> (graph launch event index, the captured
    /// call's owner).
    by_activity: HashMap<usize, (usize, Option<bind::Found>)>,
    /// GEMM op events captured into a graph that a launch in the profile
    /// replayed: their replays are their GEMMs.
    pub(super) replayed_ops: HashSet<usize>,
    /// What could not be bound, for the trace's notes.
    pub notes: Vec<String>,
}

impl ProfileReplays {
    /// The graph launch and captured owner of an activity, where its
    /// launch was matched to a capture.
    pub(super) fn of(&self, activity: usize) -> Option<(usize, Option<bind::Found>)> {
        self.by_activity.get(&activity).copied()
    }
}

/// Whether a replayed activity can stand in the place of a captured call:
/// a kernel for a kernel launch, a copy or fill for a copy or fill, and a
/// GEMM-family kernel only where a GEMM op made the call.
fn fits(call: &Event<'_>, owner: Option<bind::Found>, activity: &Event<'_>) -> bool {
    let kernel_call = call.name.contains("Kernel");
    let kernel = activity.cat == Cat::Kernel;
    kernel_call == kernel
        && (!kernel || owner.is_some() || !KernelClass::of(&activity.name).is_gemm_family())
}

/// Binds the graph launches of an imported profile to the captures it
/// holds. A launch is bound to the one capture that ended before it and
/// whose calls its activities fit one for one ([`fits`]); where several
/// captures fit (graphs of one step captured at several batch sizes), or
/// none, its GEMMs stay GEMMs of its region, and a note says why.
pub(super) fn profile_replays(
    events: &[Event<'_>],
    threads: &[bind::Thread],
    launches: &Launches,
) -> Result<ProfileReplays, ProfileError> {
    let mut out = ProfileReplays::default();
    // Most profiles hold no capture: they pay one pass over the events.
    let captured = events
        .iter()
        .any(|e| e.cat == Cat::Runtime && e.name.contains("BeginCapture"));
    if !captured {
        return Ok(out);
    }
    let captures = profile_captures(events, threads)?;
    if captures.is_empty() {
        return Ok(out);
    }
    let mut by_launch: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if let (true, (_, Some(li))) = (e.cat.is_activity(), launches.of_activity(e))
            && events[li].name.contains("GraphLaunch")
        {
            by_launch.entry(li).or_default().push(i);
        }
    }
    let mut ambiguous = 0usize;
    for (li, mut acts) in by_launch {
        acts.sort_by(|a, b| events[*a].ts.total_cmp(&events[*b].ts).then(a.cmp(b)));
        let launch = &events[li];
        let fitting: Vec<&ProfileCapture> = captures
            .iter()
            .filter(|c| c.end <= launch.ts && c.calls.len() == acts.len())
            .filter(|c| {
                c.calls
                    .iter()
                    .zip(&acts)
                    .all(|((call, owner), a)| fits(&events[*call], *owner, &events[*a]))
            })
            .collect();
        match fitting.as_slice() {
            [one] => {
                for ((_, owner), a) in one.calls.iter().zip(&acts) {
                    out.by_activity.insert(*a, (li, *owner));
                    if let Some(f) = owner {
                        out.replayed_ops.insert(f.event);
                    }
                }
            }
            [] => {}
            _ => ambiguous += 1,
        }
    }
    if ambiguous > 0 {
        out.notes.push(format!(
            "{ambiguous} graph launches fit more than one capture in the profile (graphs of the same ops, e.g. at several batch sizes): their GEMMs are named after their region, without the captured ops' shapes"
        ));
    }
    Ok(out)
}

/// The captures an imported profile holds, in order.
fn profile_captures(
    events: &[Event<'_>],
    threads: &[bind::Thread],
) -> Result<Vec<ProfileCapture>, ProfileError> {
    let mut runtime: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].cat == Cat::Runtime)
        .collect();
    runtime.sort_by(|a, b| {
        (events[*a].thread, events[*a].ts.to_bits())
            .cmp(&(events[*b].thread, events[*b].ts.to_bits()))
            .then(a.cmp(b))
    });
    let mut out = Vec::new();
    let mut open: Option<(u32, Vec<CapturedCall>)> = None;
    for i in runtime {
        let e = &events[i];
        if e.name.contains("BeginCapture") {
            open = Some((e.thread, Vec::new()));
        } else if e.name.contains("EndCapture") {
            if let Some((t, calls)) = open.take()
                && t == e.thread
            {
                out.push(ProfileCapture { end: e.ts, calls });
            }
        } else if let Some((t, calls)) = open.as_mut()
            && *t == e.thread
            && adds_activity(&e.name)
        {
            let thread = &threads[e.thread as usize];
            let owner = match thread.innermost(e.ts) {
                Some(r) => bind::find_owner(thread, r, e, events, Owners::Ops)?,
                None => None,
            };
            calls.push((i, owner.filter(|f| !f.composite)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn profile(events: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({"traceEvents": events})).unwrap()
    }

    fn range(cat: &str, name: &str, ts: f64, dur: f64) -> Value {
        json!({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}})
    }

    fn call(name: &str, ts: f64, correlation: u64) -> Value {
        json!({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts,
               "dur": 1.0, "args": {"correlation": correlation}})
    }

    fn activity(cat: &str, name: &str, ts: f64, correlation: u64) -> Value {
        json!({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 1.0,
               "args": {"correlation": correlation, "device": 0, "grid": [4, 1, 1], "block": [128, 1, 1]}})
    }

    /// An addmm whose C is copied first by a child op, a relu, and an mm,
    /// captured; then launches outside the capture that must not count.
    fn capture() -> Vec<u8> {
        profile(vec![
            range("user_annotation", "cap:0", 100.0, 100.0),
            // torch fills its RNG seed and offset before the capture
            // begins: launches in the range that add no node.
            call("cudaLaunchKernel", 101.0, 20),
            call("cudaLaunchKernel", 102.0, 21),
            call("cudaStreamBeginCapture", 103.0, 22),
            call("cudaStreamEndCapture", 190.0, 23),
            range("user_annotation", "gemm:0", 110.0, 20.0),
            range("cpu_op", "aten::addmm", 111.0, 18.0),
            range("cpu_op", "aten::copy_", 112.0, 3.0),
            call("cudaMemcpyAsync", 113.0, 1),
            call("cudaLaunchKernel", 120.0, 2),
            range("cpu_op", "aten::relu", 140.0, 5.0),
            call("cudaLaunchKernel", 141.0, 3),
            call("cudaStreamIsCapturing", 146.0, 4),
            range("user_annotation", "gemm:1", 150.0, 20.0),
            call("cuLaunchKernel", 155.0, 5),
            call("cuLaunchKernel", 160.0, 6),
            call("cudaLaunchKernel", 300.0, 7),
        ])
    }

    fn replay(kernels: &[(&str, &str)]) -> Vec<u8> {
        let mut events = vec![
            range("user_annotation", "rep:0", 1000.0, 50.0),
            call("cudaGraphLaunch", 1001.0, 90),
        ];
        for (p, (cat, name)) in kernels.iter().enumerate() {
            events.push(activity(cat, name, 1100.0 + 10.0 * p as f64, 90));
        }
        // An eager kernel outside the replay range.
        events.push(call("cudaLaunchKernel", 2000.0, 91));
        events.push(activity("kernel", "eager_kernel", 2001.0, 91));
        profile(events)
    }

    #[test]
    fn replayed_activities_take_the_captured_calls_owners() {
        let captured = captured_launches(&capture(), "gemm:", "cap:").unwrap();
        assert_eq!(captured.len(), 1);
        let calls = &captured[&0];
        let owners: Vec<(Option<u64>, bool)> = calls.iter().map(|c| (c.owner, c.direct)).collect();
        assert_eq!(
            owners,
            [
                (Some(0), false),
                (Some(0), true),
                (None, false),
                (Some(1), true),
                (Some(1), true)
            ]
        );
        let replayed = replayed_activities(
            &replay(&[
                ("gpu_memcpy", "Memcpy DtoD"),
                ("kernel", "nvjet_hsh_64x8_addmm"),
                ("kernel", "vectorized_elementwise_relu"),
                ("kernel", "sm90_xmma_gemm_bf16_splitK"),
                ("kernel", "cublasLt::splitKreduce_kernel"),
            ]),
            "rep:",
        )
        .unwrap();
        assert_eq!(replayed.len(), 1, "the eager kernel is no replay's");
        let b = bind_replay(calls, &replayed[&0]).unwrap();
        let names = |v: &[ObservedKernel]| v.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&b.gemms[&0].kernels), ["nvjet_hsh_64x8_addmm"]);
        assert_eq!(names(&b.gemms[&0].beside), ["Memcpy DtoD"]);
        assert_eq!(
            names(&b.gemms[&1].kernels),
            [
                "sm90_xmma_gemm_bf16_splitK",
                "cublasLt::splitKreduce_kernel"
            ]
        );
        assert_eq!(b.gemms[&1].kernels[0].grid, [4, 1, 1]);
        assert_eq!(b.gemms[&1].device, Some(0));
        assert_eq!(b.other, ["vectorized_elementwise_relu"]);
    }

    #[test]
    fn a_replay_of_another_length_is_refused() {
        let captured = captured_launches(&capture(), "gemm:", "cap:").unwrap();
        let replayed = replayed_activities(&replay(&[("kernel", "nvjet_only")]), "rep:").unwrap();
        let e = bind_replay(&captured[&0], &replayed[&0]).unwrap_err();
        assert!(
            matches!(
                e,
                GraphError::Mismatch {
                    captured: 5,
                    replayed: 1
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("ran 1 GPU activities but the capture launched 5")
        );
    }

    #[test]
    fn a_gemm_kernel_no_captured_op_launched_is_unowned() {
        let p = profile(vec![
            range("user_annotation", "cap:3", 0.0, 100.0),
            range("cpu_op", "Torch-Compiled Region: 0/0", 1.0, 50.0),
            call("cuLaunchKernel", 2.0, 1),
        ]);
        let captured = captured_launches(&p, "gemm:", "cap:").unwrap();
        assert_eq!(captured[&3][0].owner, None);
        let replayed = vec![(
            ObservedKernel {
                name: "triton_tem_fused_mm_0".into(),
                kind: ActivityKind::Kernel,
                grid: [1; 3],
                block: [1; 3],
                shared_memory: 0,
            },
            Some(0),
        )];
        let b = bind_replay(&captured[&3], &replayed).unwrap();
        assert!(b.gemms.is_empty());
        assert_eq!(b.unowned_gemm_kernels[0].name, "triton_tem_fused_mm_0");
    }
}
