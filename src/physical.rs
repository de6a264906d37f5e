//! Physical traces: what a captured graph really contains (kernel nodes with
//! their symbol and launch geometry, memory nodes), and the binding of those
//! nodes to the declared routes.
//!
//! A route says what was asked to run; the physical trace says what the
//! graph will run. A vendor call that became a split-K kernel plus a reduce
//! kernel, or a custom kernel launched with another grid, is refused here,
//! before any replay.

use crate::error::{Refusal, RefusalStage};
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
/// each node's `route_index`.
///
/// - A custom-kernel route binds exactly one kernel node with its symbol,
///   grid, block and dynamic shared bytes.
/// - A vendor route binds the kernel nodes its `vendor.physical_kernels`
///   lists, in order, with benign memory nodes allowed around them.
/// - Anything else (an extra kernel, a missing one, another symbol or
///   geometry, a host node) is refused, naming the route and the field.
pub fn bind(routes: &[ResolvedGemmRoute], nodes: &mut [PhysicalNode]) -> Result<(), Refusal> {
    let stage = RefusalStage::CaptureResult;
    let mut at = 0usize;
    for (i, route) in routes.iter().enumerate() {
        let idx = Some(i as u64);
        let expected: Vec<&str> = match &route.vendor {
            Some(v) if route.backend.is_vendor() => {
                v.physical_kernels.iter().map(String::as_str).collect()
            }
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
        for (j, want) in expected.iter().enumerate() {
            // Skip benign nodes before the kernel (vendor workspace set-up).
            while at < nodes.len() && nodes[at].kind != NodeKind::Kernel {
                if !(route.backend.is_vendor() && nodes[at].kind.is_benign()) {
                    return Err(Refusal::new(
                        stage,
                        idx,
                        "graph.node",
                        "a kernel node",
                        nodes[at].kind,
                    ));
                }
                nodes[at].route_index = idx;
                at += 1;
            }
            let Some(node) = nodes.get_mut(at) else {
                return Err(Refusal::new(
                    stage,
                    idx,
                    "graph.node",
                    format!("kernel {want:?}"),
                    "end of graph",
                ));
            };
            let found = node.symbol.as_deref().unwrap_or("");
            if found != *want {
                return Err(Refusal::new(
                    stage,
                    idx,
                    "kernel_symbol",
                    format!("{want:?}"),
                    format!("{found:?}"),
                ));
            }
            // Custom kernels: the launch must be the declared one.
            if !route.backend.is_vendor() {
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
            }
            node.route_index = idx;
            at += 1;
            let _ = j;
        }
        // Benign trailing nodes of a vendor call (workspace free).
        if route.backend.is_vendor() {
            while at < nodes.len()
                && nodes[at].kind != NodeKind::Kernel
                && nodes[at].kind.is_benign()
            {
                nodes[at].route_index = idx;
                at += 1;
            }
        }
    }
    if let Some(extra) = nodes.get(at) {
        let what = extra
            .symbol
            .clone()
            .map_or_else(|| extra.kind.to_string(), |s| format!("kernel {s:?}"));
        return Err(Refusal::new(
            stage,
            None,
            "graph.node",
            "end of graph",
            what,
        ));
    }
    Ok(())
}

fn fmt3([x, y, z]: [u32; 3]) -> String {
    format!("{x}x{y}x{z}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;

    fn nodes_for(routes: &[ResolvedGemmRoute]) -> Vec<PhysicalNode> {
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

    #[test]
    fn custom_routes_bind_one_kernel_each() {
        let routes = testkit::sample_routes(5);
        let mut nodes = nodes_for(&routes);
        bind(&routes, &mut nodes).unwrap();
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
        let r = bind(&routes, &mut nodes).unwrap_err();
        assert_eq!(
            (r.route_index, r.change().field.as_str()),
            (Some(1), "launch.grid")
        );

        let mut nodes = nodes_for(&routes);
        nodes[2].symbol = Some("other".into());
        let r = bind(&routes, &mut nodes).unwrap_err();
        assert_eq!(
            (r.route_index, r.change().field.as_str()),
            (Some(2), "kernel_symbol")
        );

        let mut nodes = nodes_for(&routes);
        nodes.push(PhysicalNode::kernel("extra", [1; 3], [1; 3], 0));
        let r = bind(&routes, &mut nodes).unwrap_err();
        assert_eq!(r.change().field, "graph.node");

        let mut nodes = nodes_for(&routes);
        nodes.pop();
        assert!(bind(&routes, &mut nodes).is_err());

        // A custom kernel may not hide behind a memory node.
        let mut nodes = nodes_for(&routes);
        nodes.insert(0, PhysicalNode::other(NodeKind::MemAlloc));
        assert!(bind(&routes, &mut nodes).is_err());
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
        bind(&routes, &mut nodes).unwrap();
        assert!(nodes.iter().all(|n| n.route_index == Some(0)));

        // The same call recorded with one kernel but captured as split-K + reduce: refused.
        let mut one = v.clone();
        if let Some(x) = one.vendor.as_mut() {
            x.physical_kernels = vec![main.clone()];
        }
        let mut nodes2 = nodes.clone();
        let r = bind(&[one], &mut nodes2).unwrap_err();
        assert_eq!(r.change().field, "graph.node");
        assert!(r.to_string().contains("splitKreduce"), "{r}");
    }
}
