//! A CPU stream that can be captured: work launched on it runs at once, or,
//! while capturing, is recorded into a graph that replays it in order.
//!
//! It gives engines without a GPU (and tests, and CI) the same three calls
//! around a step as the CUDA stream: [`crate::recorder::record_eager`],
//! [`crate::recorder::capture`] and [`crate::recorder::Captured::launch_validated`].

use crate::physical::{NodeKind, PhysicalNode};
use crate::recorder::CaptureStream;
use std::cell::{Cell, RefCell};
use std::fmt;

type Op = Box<dyn Fn()>;

/// A CPU stream: [`CpuStream::launch`] runs work now, or records it while
/// the stream is capturing. Like a CUDA stream it belongs to one thread.
#[derive(Default)]
pub struct CpuStream {
    capturing: Cell<bool>,
    ops: RefCell<Vec<Op>>,
    nodes: RefCell<Vec<PhysicalNode>>,
}

impl fmt::Debug for CpuStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuStream")
            .field("capturing", &self.capturing.get())
            .field("recorded", &self.ops.borrow().len())
            .finish()
    }
}

impl CpuStream {
    /// A stream that is not capturing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `op` now, or, while capturing, records it for the graph.
    pub fn launch(&self, op: impl Fn() + 'static) {
        // An anonymous closure is a host node of the graph: it runs, but no
        // binding can say what it is. Name kernels with `launch_kernel`.
        self.record(PhysicalNode::other(NodeKind::Host), op);
    }

    /// Runs (or, while capturing, records) `op` as a kernel named `symbol`
    /// with this geometry: the graph's physical trace
    /// ([`CpuStreamGraph::physical`]) holds it as a kernel node, so a whole
    /// step binds ([`crate::physical::bind`]) like a CUDA graph does.
    pub fn launch_kernel(
        &self,
        symbol: &str,
        grid: [u32; 3],
        block: [u32; 3],
        op: impl Fn() + 'static,
    ) {
        self.record(PhysicalNode::kernel(symbol, grid, block, 0), op);
    }

    fn record(&self, node: PhysicalNode, op: impl Fn() + 'static) {
        if self.capturing.get() {
            self.ops.borrow_mut().push(Box::new(op));
            self.nodes.borrow_mut().push(node);
        } else {
            op();
        }
    }

    /// True between `begin_capture` and `end_capture`.
    pub fn is_capturing(&self) -> bool {
        self.capturing.get()
    }
}

/// A captured CPU graph: the recorded work, replayed in order.
pub struct CpuStreamGraph {
    ops: Vec<Op>,
    nodes: Vec<PhysicalNode>,
}

impl fmt::Debug for CpuStreamGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuStreamGraph")
            .field("nodes", &self.ops.len())
            .finish()
    }
}

impl CpuStreamGraph {
    /// Replays every recorded launch, in order. Call it through
    /// [`crate::recorder::Captured::launch_validated`], never directly.
    pub fn launch(&self) {
        for op in &self.ops {
            op();
        }
    }

    /// Number of recorded launches.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The graph's nodes in capture order, unbound: kernel nodes for
    /// [`CpuStream::launch_kernel`], host nodes for [`CpuStream::launch`].
    pub fn physical(&self) -> Vec<PhysicalNode> {
        self.nodes.clone()
    }
}

/// Misuse of a [`CpuStream`]'s capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CpuStreamError {
    /// `begin_capture` while already capturing.
    #[error("the stream is already capturing")]
    AlreadyCapturing,
    /// `end_capture` while not capturing.
    #[error("the stream is not capturing")]
    NotCapturing,
}

impl CaptureStream for CpuStream {
    type Graph = CpuStreamGraph;
    type Error = CpuStreamError;

    fn begin_capture(&self) -> Result<(), CpuStreamError> {
        // Nothing runs asynchronously on the CPU: there is nothing to sync.
        if self.capturing.replace(true) {
            return Err(CpuStreamError::AlreadyCapturing);
        }
        self.ops.borrow_mut().clear();
        self.nodes.borrow_mut().clear();
        Ok(())
    }

    fn end_capture(&self) -> Result<CpuStreamGraph, CpuStreamError> {
        if !self.capturing.replace(false) {
            return Err(CpuStreamError::NotCapturing);
        }
        Ok(CpuStreamGraph {
            ops: std::mem::take(&mut *self.ops.borrow_mut()),
            nodes: std::mem::take(&mut *self.nodes.borrow_mut()),
        })
    }

    fn upload(&self, _graph: &CpuStreamGraph) -> Result<(), CpuStreamError> {
        Ok(())
    }
}
