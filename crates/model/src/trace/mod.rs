//! Recorded traces and their files.

pub mod codec;
pub mod fast;
mod observation;
mod pre6;
mod strings;
mod v1;
mod v2;
mod v3;
mod v4;
mod v5;
mod v6;

use crate::digest::Digest;
use crate::error::{Error, FormatError, Result};
use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::launch_set::{ResolvedGemmLaunchSet, build_resolved_gemm_launch_set};
use crate::physical::{self, PhysicalNode};
use crate::plan::CapturedGemmGraphPlan;
use crate::route::ResolvedGemmRoute;
use serde::{Deserialize, Serialize};
use std::path::Path;

pub use crate::bounded::{
    MAX_MODULES, MAX_PERMITTED, MAX_PINS, MAX_ROUTE_LIST, MAX_SERVICES, MAX_SYMBOLS, MAX_VOLATILE,
};
use crate::plan::PreparedGemmCaptureManifest;
pub use observation::{MAX_LISTED, Observation, ObservedRoute, graph_launch_region};

/// Bytes per chunk of the output fingerprint's tree.
pub const FINGERPRINT_CHUNK_BYTES: usize = 4096;

/// Domain of the output fingerprint.
pub const FINGERPRINT_DOMAIN: &str = "gemm-audit/output-fingerprint/v1";

/// Domain of the fast output fingerprint (NH chunk digests, see [`fast`]).
pub const FAST_FINGERPRINT_DOMAIN: &str = "gemm-audit/output-fingerprint-nh128/v1";

/// How a trace's output fingerprints hash each chunk. Both are finished by
/// SHA-256 over the framed chunk digests; they never compare equal to each
/// other, so a trace says which it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FingerprintMode {
    /// SHA-256 of every chunk: collision resistant, for adversarial use
    /// (and every trace written before format 3).
    #[default]
    Strong,
    /// The NH chunk hash of [`fast`]: finds accidental changes at memory
    /// speed on a GPU; not collision resistant against someone who knows
    /// its keys.
    Fast,
    /// No output was observed (format 5): the GEMMs come from a profile,
    /// which holds no output bits. Every fingerprint is a placeholder
    /// (zero digest, the output's size where known), and `diff`,
    /// `check --golden` and `compare` say numeric "not observed".
    NotObserved,
}

impl std::fmt::Display for FingerprintMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FingerprintMode::Strong => "strong",
            FingerprintMode::Fast => "fast",
            FingerprintMode::NotObserved => "not observed",
        })
    }
}

/// What one launch produced: the seed its inputs were generated from, and
/// the fingerprint of its output bytes.
///
/// The fingerprint is a two-level SHA-256 so a GPU can compute it where the
/// output lives: the output is cut into [`FINGERPRINT_CHUNK_BYTES`] chunks
/// (the last may be shorter), each chunk is hashed with plain SHA-256
/// (independently, in parallel), and the fingerprint is the framed SHA-256,
/// under [`FINGERPRINT_DOMAIN`], of the byte length, the chunk size and the
/// chunk digests in order. Equal bytes give equal fingerprints on every
/// backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutputFingerprint {
    /// Seed of the launch's inputs (see `backend::cpu::kernels::seeded_value`),
    /// so `check --replay` can regenerate them.
    pub input_seed: u64,
    /// Output size in bytes.
    pub bytes: u64,
    /// The chunked, framed SHA-256 described above (not a plain SHA-256
    /// of the bytes).
    pub sha256: Digest,
}

/// Outputs at least this large are hashed on several threads.
const PARALLEL_HASH_BYTES: usize = 4 << 20;

/// `f` of every [`FINGERPRINT_CHUNK_BYTES`] chunk of `bytes`, in order. The
/// chunks are independent, so a large output is split across the host's
/// threads; the result is the same list however it is split.
pub(crate) fn map_chunks<T: Send>(bytes: &[u8], f: impl Fn(&[u8]) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if bytes.len() < PARALLEL_HASH_BYTES || threads < 2 {
        return bytes.chunks(FINGERPRINT_CHUNK_BYTES).map(f).collect();
    }
    // One contiguous part of whole chunks per thread.
    let chunks = bytes.len().div_ceil(FINGERPRINT_CHUNK_BYTES);
    let per_part = chunks.div_ceil(threads) * FINGERPRINT_CHUNK_BYTES;
    let parts: Vec<&[u8]> = bytes.chunks(per_part).collect();
    crate::parallel::map_in_order(&parts, |part| {
        part.chunks(FINGERPRINT_CHUNK_BYTES)
            .map(&f)
            .collect::<Vec<T>>()
    })
    .into_iter()
    .flatten()
    .collect()
}

impl OutputFingerprint {
    /// Fingerprint of an output buffer computed from inputs seeded by `input_seed`.
    pub fn of(input_seed: u64, bytes: &[u8]) -> Self {
        let chunks = map_chunks(bytes, Digest::sha256);
        Self::from_chunk_digests(input_seed, bytes.len() as u64, &chunks)
    }

    /// The fingerprint of `bytes` in `mode` ([`OutputFingerprint::of`] for
    /// [`FingerprintMode::Strong`]).
    pub fn with_mode(mode: FingerprintMode, input_seed: u64, bytes: &[u8]) -> Self {
        match mode {
            FingerprintMode::Strong => Self::of(input_seed, bytes),
            FingerprintMode::Fast => Self::from_fast_chunk_digests(
                input_seed,
                bytes.len() as u64,
                &fast::fast_chunk_digests(bytes),
            ),
            FingerprintMode::NotObserved => Self::not_observed(bytes.len() as u64),
        }
    }

    /// The placeholder of an output nobody observed, `bytes` long where
    /// known (0 where not): input seed 0 and the all-zero digest, which
    /// no fingerprint of real bytes is (it is a SHA-256).
    pub fn not_observed(bytes: u64) -> Self {
        OutputFingerprint {
            input_seed: 0,
            bytes,
            sha256: Digest::ZERO,
        }
    }

    /// The fingerprints in `mode` of `outputs`, the launch `i`'s with
    /// `seeds[i]` (as many as the shorter of the two has).
    pub fn all_with_mode(mode: FingerprintMode, seeds: &[u64], outputs: &[Vec<u8>]) -> Vec<Self> {
        seeds
            .iter()
            .zip(outputs)
            .map(|(&s, o)| Self::with_mode(mode, s, o))
            .collect()
    }

    /// The fast fingerprint from per-chunk NH digests computed elsewhere
    /// (e.g. on a GPU): framed like the strong one, under
    /// [`FAST_FINGERPRINT_DOMAIN`].
    pub fn from_fast_chunk_digests(
        input_seed: u64,
        len: u64,
        chunks: &[[u8; fast::FAST_DIGEST_BYTES]],
    ) -> Self {
        let all: Vec<u8> = chunks.iter().flatten().copied().collect();
        Self::framed(FAST_FINGERPRINT_DOMAIN, input_seed, len, chunks.len(), &all)
    }

    /// The fingerprint from per-chunk SHA-256 digests computed elsewhere
    /// (e.g. on a GPU). `chunks` must hold one digest per chunk, in order.
    pub fn from_chunk_digests(input_seed: u64, len: u64, chunks: &[Digest]) -> Self {
        let all: Vec<u8> = chunks.iter().flat_map(|c| c.0).collect();
        Self::framed(FINGERPRINT_DOMAIN, input_seed, len, chunks.len(), &all)
    }

    /// The framed SHA-256 under `domain` of the output length, the chunk
    /// size, the chunk count and the concatenated chunk digests.
    fn framed(domain: &str, input_seed: u64, len: u64, chunks: usize, all: &[u8]) -> Self {
        use crate::digest::FieldValue;
        let mut w = crate::digest::DigestWriter::new(domain);
        w.field("bytes", FieldValue::U64(len));
        w.field(
            "chunk_bytes",
            FieldValue::U64(FINGERPRINT_CHUNK_BYTES as u64),
        );
        w.field("chunks", FieldValue::U64(chunks as u64));
        w.field("chunk_digests", FieldValue::Bytes(all));
        OutputFingerprint {
            input_seed,
            bytes: len,
            sha256: w.finish(),
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
    /// The live context of the recording.
    pub context: GemmRouteIdentity,
    /// Launch count and ordered digest of `routes`.
    pub launch_set: ResolvedGemmLaunchSet,
    /// The routes, in enqueue order.
    pub routes: Vec<ResolvedGemmRoute>,
    /// One per route, same order.
    pub fingerprints: Vec<OutputFingerprint>,
    /// Per-machine facts, never compared (CPU model, cores, GPU UUID, ...).
    #[serde(deserialize_with = "crate::bounded::volatile")]
    pub volatile: VolatileMetadata,
    /// The captured graph's nodes, bound to the routes (empty when no graph
    /// was captured). See [`crate::physical`].
    pub physical: Vec<PhysicalNode>,
    /// How `fingerprints` hash their chunks (format 3; older files are
    /// [`FingerprintMode::Strong`]).
    pub fingerprint_mode: FingerprintMode,
    /// How the GEMMs were observed, where gemm-audit did not run them
    /// (format 5; `None` for its own recordings and older files).
    pub observation: Option<Observation>,
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
            physical: Vec::new(),
            fingerprint_mode: FingerprintMode::Strong,
            observation: None,
        };
        trace.check_shape().map_err(|e| Error::Format {
            path: "<new trace>".into(),
            source: e,
        })?;
        Ok(trace)
    }

    /// The same trace, saying its fingerprints were computed in `mode`
    /// (the caller computed them so: [`RecordedGemmTrace::new`] assumes
    /// [`FingerprintMode::Strong`]).
    pub fn in_mode(mut self, mode: FingerprintMode) -> Self {
        self.fingerprint_mode = mode;
        self
    }

    /// Whether its outputs were observed (false for an imported profile).
    pub fn outputs_observed(&self) -> bool {
        self.fingerprint_mode != FingerprintMode::NotObserved
    }

    /// Binds a captured graph's nodes to the routes and stores them.
    pub fn set_physical(&mut self, mut nodes: Vec<PhysicalNode>) -> Result<(), crate::Refusal> {
        physical::bind(&self.context, &self.routes, &mut nodes)?;
        self.physical = nodes;
        Ok(())
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
        if let Some(o) = &self.observation
            && o.gemms.len() as u64 != n
        {
            return Err(FormatError::Inconsistent(format!(
                "the observation describes {} GEMMs but the trace holds {n} routes",
                o.gemms.len()
            )));
        }
        crate::pin::check_order(&self.context.pins)?;
        if let Some(bad) = self
            .physical
            .iter()
            .filter_map(|p| p.route_index)
            .find(|&i| i >= n)
        {
            return Err(FormatError::Inconsistent(format!(
                "a graph node is bound to route {bad} of {n}"
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

    /// Reads a trace file: a regular file only (a device or FIFO is
    /// refused before it is opened), and never more than the size limit
    /// (checked on the read itself).
    pub fn read(path: &Path) -> Result<Self> {
        let limits = codec::Limits::default();
        let bytes = match crate::fileio::read_regular(path, limits.max_file_bytes) {
            Err(Error::TooLarge { path, size, limit }) => {
                return Err(Error::Format {
                    path,
                    source: FormatError::TooLarge { size, limit },
                });
            }
            other => other?,
        };
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
        crate::fileio::write_atomic(path, &bytes, overwrite)
    }

    /// The plan this trace's capture may replay: its own manifest and
    /// routes. Refused when the routes do not match the launch set.
    pub fn plan(&self) -> Result<CapturedGemmGraphPlan, crate::Refusal> {
        CapturedGemmGraphPlan::new(self.manifest(), self.routes.clone())
    }

    /// The reviewable text rendering (pretty JSON, digests in hex).
    pub fn to_json(&self) -> String {
        // Serializing plain data to JSON cannot fail (no maps with non-string keys).
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

impl CapturedGemmGraphPlan {
    /// Builds the plan of a recorded trace (its own manifest and routes).
    pub fn from_trace(trace: &RecordedGemmTrace) -> Result<Self, crate::Refusal> {
        trace.plan()
    }

    /// Like [`CapturedGemmGraphPlan::check_against_golden`], but with the
    /// golden routes at hand, so a refusal names the first differing route
    /// and its fields.
    pub fn check_against_golden_trace(
        &self,
        golden: &RecordedGemmTrace,
    ) -> Result<(), crate::Refusal> {
        use crate::error::{Refusal, RefusalStage};
        for (i, (g, c)) in golden.routes.iter().zip(self.routes()).enumerate() {
            if let Some(r) = Refusal::with_changes(
                RefusalStage::GoldenComparison,
                Some(i as u64),
                crate::digest::field_changes(g, c),
            ) {
                return Err(r);
            }
        }
        // Not through the golden's manifest: that would clone its context
        // (which may hold 65,536 pins) only to compare it.
        self.check_against_golden_parts(&golden.context, &golden.launch_set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large output is hashed in parts on several threads; the chunk
    /// digests, and so both fingerprints, are those of one pass in order.
    #[test]
    fn parallel_chunk_hashing_equals_one_pass() {
        let len = 2 * PARALLEL_HASH_BYTES + 3 * FINGERPRINT_CHUNK_BYTES + 123;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let one_pass: Vec<Digest> = bytes
            .chunks(FINGERPRINT_CHUNK_BYTES)
            .map(Digest::sha256)
            .collect();
        assert_eq!(map_chunks(&bytes, Digest::sha256), one_pass);
        assert_eq!(
            OutputFingerprint::of(5, &bytes),
            OutputFingerprint::from_chunk_digests(5, len as u64, &one_pass)
        );
        let keys = fast::fast_keys();
        let fast_one_pass: Vec<_> = bytes
            .chunks(FINGERPRINT_CHUNK_BYTES)
            .map(|c| fast::fast_chunk_digest(&keys, c))
            .collect();
        assert_eq!(fast::fast_chunk_digests(&bytes), fast_one_pass);
        // Below the threshold, and empty: one pass, same answers.
        let small = &bytes[..FINGERPRINT_CHUNK_BYTES + 1];
        assert_eq!(map_chunks(small, Digest::sha256).len(), 2);
        assert!(map_chunks(&[], Digest::sha256).is_empty());
    }
}
