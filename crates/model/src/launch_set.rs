//! `ResolvedGemmLaunchSet`: launch count plus one ordered digest over every
//! route in enqueue order, and the builder that refuses malformed launches.

use crate::digest::{Digest, DigestWriter, FieldValue};
use crate::error::LaunchSetError;
use crate::route::ResolvedGemmRoute;
use serde::{Deserialize, Serialize};

/// Domain of the ordered launch-set digest.
pub const LAUNCH_SET_DOMAIN: &str = "gemm-audit/launch-set/v1";

/// From this many routes on (about 1 MiB of framed bytes), the builder hashes
/// on a second thread.
const PIPELINE_MIN_ROUTES: u64 = 512;

/// Launch count and ordered digest of a sequence of routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResolvedGemmLaunchSet {
    /// Number of launches (routes) in the set; never 0.
    pub launch_count: u64,
    /// Framed SHA-256, under [`LAUNCH_SET_DOMAIN`], of the launch count and
    /// every route with its index, in enqueue order: reordering,
    /// removing or changing any route changes it.
    pub ordered_digest: Digest,
}

/// Builds a launch set route by route, checking each launch as it comes.
///
/// The digest is streamed: each route is framed (with its index, so order
/// matters) into a reused buffer and hashed once.
pub struct ResolvedGemmLaunchSetBuilder {
    declared: u64,
    pushed: u64,
    writer: DigestWriter,
}

impl ResolvedGemmLaunchSetBuilder {
    /// Starts a set of exactly `declared` launches. An empty set is refused.
    pub fn new(declared: u64) -> Result<Self, LaunchSetError> {
        if declared == 0 {
            return Err(LaunchSetError::Empty);
        }
        // Large sets overlap framing with hashing on a second thread.
        let mut writer = if declared >= PIPELINE_MIN_ROUTES {
            DigestWriter::pipelined(LAUNCH_SET_DOMAIN)
        } else {
            DigestWriter::new(LAUNCH_SET_DOMAIN)
        };
        writer.field("launch_count", FieldValue::U64(declared));
        Ok(ResolvedGemmLaunchSetBuilder {
            declared,
            pushed: 0,
            writer,
        })
    }

    /// Checks and appends the next route.
    pub fn push(&mut self, route: &ResolvedGemmRoute) -> Result<(), LaunchSetError> {
        let index = self.pushed;
        if index >= self.declared {
            return Err(LaunchSetError::TooManyRoutes {
                declared: self.declared,
            });
        }
        check_launch(index, route)?;
        self.writer.field("route.index", FieldValue::U64(index));
        self.writer.frame(route);
        self.pushed += 1;
        Ok(())
    }

    /// Finishes the set; refuses one that is short of its declared count.
    pub fn finish(self) -> Result<ResolvedGemmLaunchSet, LaunchSetError> {
        if self.pushed != self.declared {
            return Err(LaunchSetError::Short {
                declared: self.declared,
                pushed: self.pushed,
            });
        }
        Ok(ResolvedGemmLaunchSet {
            launch_count: self.declared,
            ordered_digest: self.writer.finish(),
        })
    }
}

/// The per-launch checks of the builder.
fn check_launch(index: u64, route: &ResolvedGemmRoute) -> Result<(), LaunchSetError> {
    let l = &route.launch;
    if l.grid.contains(&0) {
        return Err(LaunchSetError::ZeroGrid {
            index,
            grid: l.grid,
        });
    }
    if l.block.contains(&0) {
        return Err(LaunchSetError::ZeroBlock {
            index,
            block: l.block,
        });
    }
    if l.block_threads() != route.threads as u64 {
        return Err(LaunchSetError::ThreadsMismatch {
            index,
            block_threads: l.block_threads(),
            route_threads: route.threads,
        });
    }
    if l.arguments_digest.is_zero() {
        return Err(LaunchSetError::ZeroArgumentsDigest { index });
    }
    Ok(())
}

/// Builds the launch set of `routes` in order.
pub fn build_resolved_gemm_launch_set(
    routes: &[ResolvedGemmRoute],
) -> Result<ResolvedGemmLaunchSet, LaunchSetError> {
    let mut b = ResolvedGemmLaunchSetBuilder::new(routes.len() as u64)?;
    for r in routes {
        b.push(r)?;
    }
    b.finish()
}
