//! Physical traces: what a captured graph really contains (kernel nodes with
//! their symbol and launch geometry, memory nodes), and the binding of those
//! nodes to the declared routes.
//!
//! A route says what was asked to run; the physical trace says what the
//! graph will run. A vendor call that became a split-K kernel plus a reduce
//! kernel, or a custom kernel launched with another grid, is refused here,
//! before any replay.

use crate::error::{Refusal, RefusalStage};
use crate::identity::GemmRouteIdentity;
use crate::route::ResolvedGemmRoute;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Kind of a graph node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    /// A kernel launch; the only kind bound to a route.
    Kernel,
    /// A memory fill (e.g. zeroing a split-K workspace); benign.
    Memset,
    /// A memory copy; benign.
    Memcpy,
    /// A graph memory allocation (e.g. a vendor workspace); benign.
    MemAlloc,
    /// A graph memory free; benign.
    MemFree,
    /// A host function call; not benign, so refused among a GEMM's nodes.
    Host,
    /// An empty node (a dependency join); benign.
    Empty,
    /// An event record; not benign.
    EventRecord,
    /// A wait on an event; not benign.
    EventWait,
    /// Any other node type (conditional, child graph, ...).
    Other,
}

impl NodeKind {
    /// Nodes that a vendor call may add around its kernels without changing
    /// numerics (workspace allocation, zeroing, copies).
    pub fn is_benign(&self) -> bool {
        matches!(
            self,
            NodeKind::Memset
                | NodeKind::Memcpy
                | NodeKind::MemAlloc
                | NodeKind::MemFree
                | NodeKind::Empty
        )
    }
}

impl fmt::Display for NodeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeKind::Kernel => "kernel",
            NodeKind::Memset => "memset",
            NodeKind::Memcpy => "memcpy",
            NodeKind::MemAlloc => "mem-alloc",
            NodeKind::MemFree => "mem-free",
            NodeKind::Host => "host",
            NodeKind::Empty => "empty",
            NodeKind::EventRecord => "event-record",
            NodeKind::EventWait => "event-wait",
            NodeKind::Other => "other",
        })
    }
}

/// One node of a captured graph, in capture order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PhysicalNode {
    /// What the node does.
    pub kind: NodeKind,
    /// Kernel symbol (kernel nodes only).
    pub symbol: Option<String>,
    /// Grid dimensions `[x, y, z]`, in blocks (zero for other nodes).
    pub grid: [u32; 3],
    /// Block dimensions `[x, y, z]`, in threads (zero for other nodes).
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes (zero for other nodes).
    pub shared_bytes: u32,
    /// The declared route this node was bound to.
    pub route_index: Option<u64>,
}

impl PhysicalNode {
    /// A kernel node.
    pub fn kernel(
        symbol: impl Into<String>,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
    ) -> Self {
        PhysicalNode {
            kind: NodeKind::Kernel,
            symbol: Some(symbol.into()),
            grid,
            block,
            shared_bytes,
            route_index: None,
        }
    }

    /// One line naming what the node is and every field a graph check
    /// compares but its route binding: `kernel SYMBOL grid XxYxZ block
    /// XxYxZ shared BYTES`, or the kind of a node that is not a kernel.
    pub fn summary(&self) -> String {
        match &self.symbol {
            Some(s) => format!(
                "{} {s} grid {} block {} shared {}",
                self.kind,
                fmt3(self.grid),
                fmt3(self.block),
                self.shared_bytes
            ),
            None => self.kind.to_string(),
        }
    }

    /// A node that is not a kernel.
    pub fn other(kind: NodeKind) -> Self {
        PhysicalNode {
            kind,
            symbol: None,
            grid: [0; 3],
            block: [0; 3],
            shared_bytes: 0,
            route_index: None,
        }
    }
}

/// Binds `nodes` (in capture order) to `routes` (in enqueue order), filling
/// each node's `route_index`. The graph is a whole engine step: GEMMs, the
/// engine's other kernels and its memory operations.
///
/// - A custom-kernel route binds exactly one kernel node with its symbol,
///   grid, block and dynamic shared bytes.
/// - A vendor route binds the kernel nodes its `vendor.physical_kernels`
///   lists, in order, with the memory nodes around them.
/// - Between and around them, a step may hold memory nodes (memset,
///   memcpy, alloc, free, empty) and auxiliary kernels: kernels of a
///   module loaded in `context` that serve no GEMM (an RMSNorm, an
///   activation; see [`crate::identity::SymbolEntry::auxiliary`]). They
///   stay unbound (`route_index` `None`).
/// - Anything else (an undeclared kernel, a missing or extra GEMM kernel,
///   another symbol or geometry, a host or event node) is refused, naming
///   the route and the field.
pub fn bind(
    context: &GemmRouteIdentity,
    routes: &[ResolvedGemmRoute],
    nodes: &mut [PhysicalNode],
) -> Result<(), Refusal> {
    let stage = RefusalStage::CaptureResult;
    let mut at = 0usize;
    for (i, route) in routes.iter().enumerate() {
        let idx = Some(i as u64);
        let vendor = route.backend.is_vendor();
        let expected: Vec<&str> = match &route.vendor {
            Some(v) if vendor => v.physical_kernels.iter().map(String::as_str).collect(),
            _ => vec![route.kernel_symbol.as_str()],
        };
        if expected.is_empty() {
            return Err(Refusal::new(
                stage,
                idx,
                "vendor.physical_kernels",
                "at least one kernel",
                "none",
            ));
        }
        for want in expected {
            // The step's own nodes before this kernel.
            loop {
                let Some(node) = nodes.get_mut(at) else {
                    return Err(Refusal::new(
                        stage,
                        idx,
                        "graph.node",
                        format!("kernel {want:?}"),
                        "end of graph",
                    ));
                };
                if node.kind == NodeKind::Kernel && node.symbol.as_deref() == Some(want) {
                    break;
                }
                step_node(context, node, idx, want)?;
                if vendor && node.kind.is_benign() {
                    node.route_index = idx;
                }
                at += 1;
            }
            let node = &mut nodes[at];
            if !vendor {
                check_geometry(route, node, idx)?;
            }
            node.route_index = idx;
            at += 1;
        }
        if vendor {
            // A vendor call's trailing memory nodes (its workspace free) are its own.
            while nodes.get(at).is_some_and(|n| n.kind.is_benign()) {
                nodes[at].route_index = idx;
                at += 1;
            }
        }
    }
    for node in &mut nodes[at..] {
        if let Some(r) = undeclared(context, node, None, "end of graph") {
            return Err(r);
        }
        node.route_index = None;
    }
    Ok(())
}

/// Accepts a node of the step itself (a memory node or a declared
/// auxiliary kernel) seen while route `idx` waits for its kernel `want`.
fn step_node(
    context: &GemmRouteIdentity,
    node: &mut PhysicalNode,
    idx: Option<u64>,
    want: &str,
) -> Result<(), Refusal> {
    if node.kind == NodeKind::Kernel && !is_auxiliary(context, node) {
        // Another kernel where the route's should be.
        return Err(Refusal::new(
            RefusalStage::CaptureResult,
            idx,
            "kernel_symbol",
            format!("{want:?}"),
            format!(
                "{:?} (neither this route's kernel nor a declared auxiliary kernel)",
                node.symbol.as_deref().unwrap_or("")
            ),
        ));
    }
    if let Some(r) = undeclared(context, node, idx, &format!("kernel {want:?}")) {
        return Err(r);
    }
    node.route_index = None;
    Ok(())
}

/// The refusal of a node no step may hold: a host, event or other node, or
/// a kernel no loaded module declares.
fn undeclared(
    context: &GemmRouteIdentity,
    node: &PhysicalNode,
    idx: Option<u64>,
    expected: &str,
) -> Option<Refusal> {
    let ok =
        node.kind.is_benign() || (node.kind == NodeKind::Kernel && is_auxiliary(context, node));
    (!ok).then(|| {
        let found = match &node.symbol {
            Some(s) => format!("kernel {s:?} (not a declared auxiliary kernel)"),
            None => node.kind.to_string(),
        };
        Refusal::new(
            RefusalStage::CaptureResult,
            idx,
            "graph.node",
            format!("{expected}, a memory node or a declared auxiliary kernel"),
            found,
        )
    })
}

fn is_auxiliary(context: &GemmRouteIdentity, node: &PhysicalNode) -> bool {
    node.symbol
        .as_deref()
        .is_some_and(|s| context.auxiliary_kernel(s).is_some())
}

fn check_geometry(
    route: &ResolvedGemmRoute,
    node: &PhysicalNode,
    idx: Option<u64>,
) -> Result<(), Refusal> {
    let stage = RefusalStage::CaptureResult;
    if node.grid != route.launch.grid {
        return Err(Refusal::new(
            stage,
            idx,
            "launch.grid",
            fmt3(route.launch.grid),
            fmt3(node.grid),
        ));
    }
    if node.block != route.launch.block {
        return Err(Refusal::new(
            stage,
            idx,
            "launch.block",
            fmt3(route.launch.block),
            fmt3(node.block),
        ));
    }
    if node.shared_bytes != route.launch.dynamic_shared_bytes {
        return Err(Refusal::new(
            stage,
            idx,
            "launch.dynamic_shared_bytes",
            route.launch.dynamic_shared_bytes,
            node.shared_bytes,
        ));
    }
    Ok(())
}

/// Refuses a freshly captured graph whose nodes differ from the stored
/// physical trace (a golden's): another, swapped or missing kernel, an
/// auxiliary kernel among them, another geometry or memory node.
pub fn check_against(stored: &[PhysicalNode], captured: &[PhysicalNode]) -> Result<(), Refusal> {
    let stage = RefusalStage::CaptureResult;
    if stored.len() != captured.len() {
        return Err(Refusal::new(
            stage,
            None,
            "graph.nodes",
            stored.len(),
            captured.len(),
        ));
    }
    match stored
        .iter()
        .zip(captured)
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        None => Ok(()),
        Some((i, (a, b))) => Err(Refusal::new(
            stage,
            a.route_index,
            format!("graph.node[{i}]"),
            describe(a),
            describe(b),
        )),
    }
}

fn describe(n: &PhysicalNode) -> String {
    let route = n
        .route_index
        .map_or(String::new(), |r| format!(" (route {r})"));
    format!("{}{route}", n.summary())
}

/// How much of a bound graph runs under an audited GEMM contract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// Kernel nodes in the graph.
    pub kernels: usize,
    /// Kernel nodes bound to a GEMM route.
    pub gemm: usize,
    /// Declared auxiliary kernel nodes (not under a GEMM contract).
    pub auxiliary: usize,
    /// Memory nodes.
    pub memory: usize,
}

impl Coverage {
    /// Counts bound `nodes`.
    pub fn of(nodes: &[PhysicalNode]) -> Coverage {
        let mut c = Coverage::default();
        for n in nodes {
            match (n.kind, n.route_index) {
                (NodeKind::Kernel, Some(_)) => {
                    c.kernels += 1;
                    c.gemm += 1;
                }
                (NodeKind::Kernel, None) => {
                    c.kernels += 1;
                    c.auxiliary += 1;
                }
                (k, _) if k.is_benign() => c.memory += 1,
                _ => {}
            }
        }
        c
    }
}

impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let share = if self.kernels == 0 {
            0.0
        } else {
            100.0 * self.gemm as f64 / self.kernels as f64
        };
        write!(
            f,
            "{} kernels ({} GEMM, {} auxiliary; {share:.0}% under a GEMM contract), {} memory nodes",
            self.kernels, self.gemm, self.auxiliary, self.memory
        )
    }
}

fn fmt3([x, y, z]: [u32; 3]) -> String {
    format!("{x}x{y}x{z}")
}

/// The kernel nodes of `routes` in order: the physical graph of a backend
/// whose "graph" is its launch list (the CPU reference, a test engine).
pub fn kernel_nodes(routes: &[ResolvedGemmRoute]) -> Vec<PhysicalNode> {
    routes
        .iter()
        .map(|r| {
            PhysicalNode::kernel(
                &r.kernel_symbol,
                r.launch.grid,
                r.launch.block,
                r.launch.dynamic_shared_bytes,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    fn nodes_for(routes: &[ResolvedGemmRoute]) -> Vec<PhysicalNode> {
        kernel_nodes(routes)
    }

    #[test]
    fn custom_routes_bind_one_kernel_each() {
        let routes = testkit::sample_routes(5);
        let mut nodes = nodes_for(&routes);
        bind(&testkit::context(), &routes, &mut nodes).unwrap();
        assert!(
            nodes
                .iter()
                .enumerate()
                .all(|(i, n)| n.route_index == Some(i as u64))
        );
    }

    #[test]
    fn geometry_and_symbol_changes_are_refused() {
        let routes = testkit::sample_routes(3);
        let mut nodes = nodes_for(&routes);
        nodes[1].grid[0] += 1;
        let r = bind(&testkit::context(), &routes, &mut nodes).unwrap_err();
        assert_eq!(
            (r.route_index, r.change().field.as_str()),
            (Some(1), "launch.grid")
        );

        let mut nodes = nodes_for(&routes);
        nodes[2].symbol = Some("other".into());
        let r = bind(&testkit::context(), &routes, &mut nodes).unwrap_err();
        assert_eq!(
            (r.route_index, r.change().field.as_str()),
            (Some(2), "kernel_symbol")
        );

        let mut nodes = nodes_for(&routes);
        nodes.push(PhysicalNode::kernel("extra", [1; 3], [1; 3], 0));
        let r = bind(&testkit::context(), &routes, &mut nodes).unwrap_err();
        assert_eq!(r.change().field, "graph.node");

        let mut nodes = nodes_for(&routes);
        nodes.pop();
        assert!(bind(&testkit::context(), &routes, &mut nodes).is_err());

        // A memory node of the step binds to no route; a host node is refused.
        let mut nodes = nodes_for(&routes);
        nodes.insert(0, PhysicalNode::other(NodeKind::Memset));
        bind(&testkit::context(), &routes, &mut nodes).unwrap();
        assert_eq!(nodes[0].route_index, None);
        assert_eq!(nodes[1].route_index, Some(0));
        let mut nodes = nodes_for(&routes);
        nodes.insert(1, PhysicalNode::other(NodeKind::Host));
        let r = bind(&testkit::context(), &routes, &mut nodes).unwrap_err();
        assert_eq!(r.change().field, "graph.node");
    }

    /// A whole step: GEMMs with declared auxiliary kernels and memory nodes
    /// between them binds; an undeclared kernel is refused by name, before
    /// a route's kernel and after the last; a graph without GEMMs binds.
    #[test]
    fn whole_steps_bind_declared_auxiliary_kernels() {
        let mut live = testkit::context();
        live.modules
            .push(testkit::auxiliary_module(&["step_rmsnorm", "step_silu"]));
        let routes = testkit::sample_routes(2);
        let gemm = nodes_for(&routes);
        let aux = |s: &str| PhysicalNode::kernel(s, [4, 1, 1], [256, 1, 1], 0);
        let mut nodes = vec![
            PhysicalNode::other(NodeKind::Memset),
            gemm[0].clone(),
            aux("step_rmsnorm"),
            gemm[1].clone(),
            aux("step_silu"),
        ];
        bind(&live, &routes, &mut nodes).unwrap();
        let bound: Vec<Option<u64>> = nodes.iter().map(|n| n.route_index).collect();
        assert_eq!(bound, vec![None, Some(0), None, Some(1), None]);
        let c = Coverage::of(&nodes);
        assert_eq!((c.kernels, c.gemm, c.auxiliary, c.memory), (4, 2, 2, 1));
        assert_eq!(
            c.to_string(),
            "4 kernels (2 GEMM, 2 auxiliary; 50% under a GEMM contract), 1 memory nodes"
        );

        // An undeclared kernel between the GEMMs names itself.
        let mut bad = nodes.clone();
        bad[2] = aux("eng_rmsnorm_f32");
        let r = bind(&live, &routes, &mut bad).unwrap_err();
        assert_eq!(
            (r.route_index, r.change().field.as_str()),
            (Some(1), "kernel_symbol")
        );
        assert!(r.to_string().contains("eng_rmsnorm_f32"), "{r}");
        // ... and after the last GEMM.
        let mut bad = nodes.clone();
        bad[4] = aux("eng_silu_f32");
        let r = bind(&live, &routes, &mut bad).unwrap_err();
        assert_eq!(r.change().field, "graph.node");
        assert!(r.to_string().contains("eng_silu_f32"), "{r}");
        // Without the auxiliary module, the same step is refused.
        let r = bind(&testkit::context(), &routes, &mut nodes.clone()).unwrap_err();
        assert!(r.to_string().contains("step_rmsnorm"), "{r}");

        // A step without GEMMs binds its auxiliary kernels.
        let mut only = vec![aux("step_rmsnorm"), PhysicalNode::other(NodeKind::Memcpy)];
        bind(&live, &[], &mut only).unwrap();
        assert_eq!(Coverage::of(&only).auxiliary, 1);
    }

    #[test]
    fn vendor_routes_bind_their_kernels_and_benign_nodes() {
        let mut v = testkit::sample_vendor_route(0);
        let main = "cutlass_80_simt_sgemm_128x64_8x5_nn_align1".to_string();
        let reduce = "cublasLt::splitKreduce_kernel".to_string();
        if let Some(x) = v.vendor.as_mut() {
            x.physical_kernels = vec![main.clone(), reduce.clone()];
        }
        let routes = vec![v.clone()];
        let mut nodes = vec![
            PhysicalNode::other(NodeKind::MemAlloc),
            PhysicalNode::kernel(&main, [8, 1, 16], [256, 1, 1], 0),
            PhysicalNode::kernel(&reduce, [4, 1, 1], [128, 1, 1], 0),
            PhysicalNode::other(NodeKind::MemFree),
        ];
        bind(&testkit::context(), &routes, &mut nodes).unwrap();
        assert!(nodes.iter().all(|n| n.route_index == Some(0)));

        // The same call recorded with one kernel but captured as split-K + reduce: refused.
        let mut one = v.clone();
        if let Some(x) = one.vendor.as_mut() {
            x.physical_kernels = vec![main.clone()];
        }
        let mut nodes2 = nodes.clone();
        let r = bind(&testkit::context(), &[one], &mut nodes2).unwrap_err();
        assert_eq!(r.change().field, "graph.node");
        assert!(r.to_string().contains("splitKreduce"), "{r}");
    }

    #[test]
    fn a_node_that_differs_only_in_shared_memory_is_refused_and_says_so() {
        let stored = vec![PhysicalNode::kernel("k", [128, 1, 1], [256, 1, 1], 197_888)];
        let captured = vec![PhysicalNode::kernel("k", [128, 1, 1], [256, 1, 1], 197_760)];
        assert!(check_against(&stored, &stored).is_ok());
        let r = check_against(&stored, &captured).unwrap_err();
        let c = r.change();
        assert_eq!(c.field, "graph.node[0]");
        assert_eq!(
            c.expected,
            "kernel k grid 128x1x1 block 256x1x1 shared 197888"
        );
        assert_eq!(c.found, "kernel k grid 128x1x1 block 256x1x1 shared 197760");
    }
}
