//! Recorded traces, capture manifests and their files.

pub mod codec;

use crate::digest::Digest;
use crate::error::{Error, FormatError, Result};
use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::launch_set::{ResolvedGemmLaunchSet, build_resolved_gemm_launch_set};
use crate::route::ResolvedGemmRoute;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What one launch produced: the seed its inputs were generated from, and
/// the SHA-256 of its output bytes (plain SHA-256, no framing, so any tool
/// can recompute it from a dump of the output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutputFingerprint {
    /// Seed of the launch's inputs (see `backend::cpu::kernels::seeded_value`),
    /// so `check --replay` can regenerate them.
    pub input_seed: u64,
    /// Output size in bytes.
    pub bytes: u64,
    pub sha256: Digest,
}

impl OutputFingerprint {
    /// Fingerprint of an output buffer computed from inputs seeded by `input_seed`.
    pub fn of(input_seed: u64, bytes: &[u8]) -> Self {
        OutputFingerprint {
            input_seed,
            bytes: bytes.len() as u64,
            sha256: Digest::sha256(bytes),
        }
    }
}

/// One eager run of a workload: context, launch set, the routes in enqueue
/// order, and the output fingerprint of each launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedGemmTrace {
    /// Name of the workload that was recorded.
    pub workload: String,
    /// Digest of the workload definition (shapes, seeds, routes).
    pub workload_digest: Digest,
    pub context: GemmRouteIdentity,
    pub launch_set: ResolvedGemmLaunchSet,
    pub routes: Vec<ResolvedGemmRoute>,
    /// One per route, same order.
    pub fingerprints: Vec<OutputFingerprint>,
    /// Per-machine facts, never compared (CPU model, cores, GPU UUID, ...).
    pub volatile: VolatileMetadata,
}

/// What a capture is prepared from: the context, the launch set, and the
/// route capacity a capture must reserve (equal to the launch count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedGemmCaptureManifest {
    pub context: GemmRouteIdentity,
    pub launch_set: ResolvedGemmLaunchSet,
    pub route_capacity: u64,
}

impl RecordedGemmTrace {
    /// Assembles a trace, building its launch set from `routes`.
    pub fn new(
        workload: impl Into<String>,
        workload_digest: Digest,
        context: GemmRouteIdentity,
        routes: Vec<ResolvedGemmRoute>,
        fingerprints: Vec<OutputFingerprint>,
        volatile: VolatileMetadata,
    ) -> Result<Self> {
        let launch_set = build_resolved_gemm_launch_set(&routes)?;
        let trace = RecordedGemmTrace {
            workload: workload.into(),
            workload_digest,
            context,
            launch_set,
            routes,
            fingerprints,
            volatile,
        };
        trace.check_shape().map_err(|e| Error::Format {
            path: "<new trace>".into(),
            source: e,
        })?;
        Ok(trace)
    }

    /// The manifest a capture of this trace is prepared from.
    pub fn manifest(&self) -> PreparedGemmCaptureManifest {
        PreparedGemmCaptureManifest {
            context: self.context.clone(),
            launch_set: self.launch_set,
            route_capacity: self.launch_set.launch_count,
        }
    }

    /// Structural consistency that does not need hashing: counts agree.
    /// (Whether the routes match the digest is the plan's check.)
    pub fn check_shape(&self) -> Result<(), FormatError> {
        let n = self.routes.len() as u64;
        if self.launch_set.launch_count != n {
            return Err(FormatError::Inconsistent(format!(
                "launch set counts {} launches but the trace holds {n} routes",
                self.launch_set.launch_count
            )));
        }
        if self.fingerprints.len() as u64 != n {
            return Err(FormatError::Inconsistent(format!(
                "{} fingerprints for {n} routes",
                self.fingerprints.len()
            )));
        }
        Ok(())
    }

    /// Encodes the trace as a file image (envelope + payload + checksum).
    pub fn to_bytes(&self) -> Result<Vec<u8>, FormatError> {
        codec::encode_trace(self)
    }

    /// Decodes a file image with the default limits.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, FormatError> {
        codec::decode_trace(bytes, &codec::Limits::default())
    }

    /// Reads a trace file, checking its size against the limits before reading it.
    pub fn read(path: &Path) -> Result<Self> {
        let limits = codec::Limits::default();
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.len() > limits.max_file_bytes {
            return Err(Error::Format {
                path: path.into(),
                source: FormatError::TooLarge {
                    size: meta.len(),
                    limit: limits.max_file_bytes,
                },
            });
        }
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        codec::decode_trace(&bytes, &limits).map_err(|e| Error::Format {
            path: path.into(),
            source: e,
        })
    }

    /// Writes the trace atomically. Refuses to replace an existing file unless `overwrite`.
    pub fn write(&self, path: &Path, overwrite: bool) -> Result<()> {
        let bytes = self.to_bytes().map_err(|e| Error::Format {
            path: path.into(),
            source: e,
        })?;
        codec::write_atomic(path, &bytes, overwrite)
    }

    /// The reviewable text rendering (pretty JSON, digests in hex).
    pub fn to_json(&self) -> String {
        // Serializing plain data to JSON cannot fail (no maps with non-string keys).
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
