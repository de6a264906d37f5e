#![allow(unsafe_code)]
//! Stream capture with the discipline of the semantics note, and graph
//! introspection into physical nodes.

use crate::error::CudaError;
use cudarc::driver::sys;
use cudarc::driver::{CudaGraph as RawGraph, CudaStream};
use gemm_audit_model::physical::{NodeKind, PhysicalNode};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// Captures what `body` enqueues on `stream` into an instantiated,
/// uploaded graph.
///
/// - The stream is synchronized first (a buffer prepared just before must
///   not race the capture).
/// - `stream` must be one the caller created: the legacy default stream
///   cannot be captured.
/// - The capture is always ended, also when `body` fails or panics; when
///   both the body and the end fail, both errors are reported.
///
/// The body's error (or panic) becomes what failed; a failing driver call
/// comes back as the error's cause.
pub(crate) fn capture<F, E>(stream: &Arc<CudaStream>, body: F) -> Result<RawGraph, CudaError>
where
    F: FnOnce() -> Result<(), E>,
    E: fmt::Display,
{
    if stream.cu_stream().is_null() {
        return Err(CudaError::msg(
            "refusing to capture the legacy default stream",
        ));
    }
    stream
        .synchronize()
        .map_err(CudaError::with("synchronize before capture"))?;
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(CudaError::with("begin capture"))?;
    let body = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!("capture body panicked: {}", panic_message(&panic))),
    };
    let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    let graph = match (body, ended) {
        (Ok(()), Ok(Some(g))) => g,
        (Ok(()), Ok(None)) => return Err(CudaError::msg("the capture produced no graph")),
        (Ok(()), Err(e)) => return Err(CudaError::new("end capture / instantiate", e)),
        (Err(b), Ok(_)) => return Err(CudaError::msg(b)),
        (Err(b), Err(e)) => {
            return Err(CudaError::new(
                format!("{b}; and ending the capture failed too"),
                e,
            ));
        }
    };
    graph.upload().map_err(CudaError::with("graph upload"))?;
    Ok(graph)
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

fn check(r: sys::CUresult, what: &str) -> Result<(), CudaError> {
    r.result().map_err(CudaError::with(what))
}

/// The nodes of `graph` in topological order (capture order for a linear
/// capture; ties broken by the driver's node order), with each kernel
/// node's symbol, grid, block and dynamic shared bytes.
pub(crate) fn introspect(graph: &RawGraph) -> Result<Vec<PhysicalNode>, CudaError> {
    let g = graph.cu_graph();
    let mut count = 0usize;
    // SAFETY: `g` is a live graph owned by `graph`; a null node array asks for the count.
    check(
        unsafe { sys::cuGraphGetNodes(g, std::ptr::null_mut(), &mut count) },
        "cuGraphGetNodes",
    )?;
    let mut nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` has room for `count` handles.
    check(
        unsafe { sys::cuGraphGetNodes(g, nodes.as_mut_ptr(), &mut count) },
        "cuGraphGetNodes",
    )?;
    nodes.truncate(count);
    let order = topological(g, &nodes)?;
    order.into_iter().map(|n| describe(nodes[n])).collect()
}

/// Kahn's algorithm over the graph's edges; ready nodes leave in the
/// driver's node order.
fn topological(g: sys::CUgraph, nodes: &[sys::CUgraphNode]) -> Result<Vec<usize>, CudaError> {
    let mut edges = 0usize;
    // SAFETY: null arrays ask for the edge count.
    check(
        unsafe {
            sys::cuGraphGetEdges_v2(
                g,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut edges,
            )
        },
        "cuGraphGetEdges (count)",
    )?;
    let mut from: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); edges];
    let mut to: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); edges];
    // Edge data must be asked for: without it the driver refuses graphs with
    // programmatic (dependent-launch) edges, which cuBLAS kernels use, as a
    // lossy query. Every edge type orders its nodes the same way here.
    let blank = sys::CUgraphEdgeData {
        from_port: 0,
        to_port: 0,
        type_: 0,
        reserved: [0; 5],
    };
    let mut data: Vec<sys::CUgraphEdgeData> = vec![blank; edges];
    if edges > 0 {
        // SAFETY: `from`, `to` and `data` each have room for `edges` entries.
        check(
            unsafe {
                sys::cuGraphGetEdges_v2(
                    g,
                    from.as_mut_ptr(),
                    to.as_mut_ptr(),
                    data.as_mut_ptr(),
                    &mut edges,
                )
            },
            "cuGraphGetEdges",
        )?;
    }
    let index: HashMap<usize, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (*n as usize, i))
        .collect();
    let mut indegree = vec![0usize; nodes.len()];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (f, t) in from.iter().zip(&to).take(edges) {
        let (Some(&fi), Some(&ti)) = (index.get(&(*f as usize)), index.get(&(*t as usize))) else {
            return Err(CudaError::msg("graph edge names an unknown node"));
        };
        out[fi].push(ti);
        indegree[ti] += 1;
    }
    let mut ready: BTreeSet<usize> = (0..nodes.len()).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &t in &out[i] {
            indegree[t] -= 1;
            if indegree[t] == 0 {
                ready.insert(t);
            }
        }
    }
    if order.len() != nodes.len() {
        return Err(CudaError::msg("graph has a cycle"));
    }
    Ok(order)
}

fn describe(node: sys::CUgraphNode) -> Result<PhysicalNode, CudaError> {
    // Read the type as a plain integer: a driver newer than these bindings
    // may report a type the Rust enum does not list.
    let mut raw: u32 = u32::MAX;
    // SAFETY: the node belongs to a live graph; CUgraphNodeType is a 32-bit enum,
    // written through a pointer to a u32 so that unknown values stay defined.
    check(
        unsafe { sys::cuGraphNodeGetType(node, (&mut raw as *mut u32).cast()) },
        "cuGraphNodeGetType",
    )?;
    let kind = match raw {
        0 => return kernel_node(node),
        1 => NodeKind::Memcpy,
        2 => NodeKind::Memset,
        3 => NodeKind::Host,
        5 => NodeKind::Empty,
        6 => NodeKind::EventWait,
        7 => NodeKind::EventRecord,
        10 => NodeKind::MemAlloc,
        11 => NodeKind::MemFree,
        _ => NodeKind::Other,
    };
    Ok(PhysicalNode::other(kind))
}

fn kernel_node(node: sys::CUgraphNode) -> Result<PhysicalNode, CudaError> {
    // SAFETY: CUDA_KERNEL_NODE_PARAMS is plain data (integers and raw pointers): all-zero is valid.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    // SAFETY: `node` is a kernel node of a live graph; `p` is valid for writes.
    check(
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) },
        "cuGraphKernelNodeGetParams",
    )?;
    let mut name: *const std::ffi::c_char = std::ptr::null();
    if !p.func.is_null() {
        // SAFETY: `p.func` is the node's function handle; `name` is valid for one write.
        check(
            unsafe { sys::cuFuncGetName(&mut name, p.func) },
            "cuFuncGetName",
        )?;
    } else if !p.kern.is_null() {
        // SAFETY: `p.kern` is the node's library kernel handle.
        check(
            unsafe { sys::cuKernelGetName(&mut name, p.kern) },
            "cuKernelGetName",
        )?;
    }
    // SAFETY: the driver returns a NUL-terminated name owned by the function, or null.
    let symbol = unsafe { crate::nvrtc::c_string(name) };
    Ok(PhysicalNode::kernel(
        if symbol.is_empty() {
            "<unnamed>".to_string()
        } else {
            symbol
        },
        [p.gridDimX, p.gridDimY, p.gridDimZ],
        [p.blockDimX, p.blockDimY, p.blockDimZ],
        p.sharedMemBytes,
    ))
}
