//! The leaf identities of a platform: which compiler built a kernel and
//! which device runs it. They name nothing of routes or modules, so every
//! other identity can build on them.

use crate::digest::{Digest, DigestWriter, FieldValue, FieldVisitor, Framed};
use serde::{Deserialize, Serialize};

/// Which compiler built a kernel, with which options, from which source.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CompilerIdentity {
    /// e.g. `gemm-audit-cpu` or `nvrtc`.
    pub name: String,
    /// e.g. the crate version, or `13.0`.
    pub version: String,
    /// Digest of the options the compiler ran with.
    pub options_digest: Digest,
    /// Digest of the source it compiled.
    pub source_digest: Digest,
}

impl Framed for CompilerIdentity {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        v.field("compiler.name", FieldValue::Str(&self.name));
        v.field("compiler.version", FieldValue::Str(&self.version));
        v.field(
            "compiler.options_digest",
            FieldValue::Digest(&self.options_digest),
        );
        v.field(
            "compiler.source_digest",
            FieldValue::Digest(&self.source_digest),
        );
    }
}

/// Domain of [`CompilerIdentity::new`]'s options digest.
pub const COMPILER_OPTIONS_DOMAIN: &str = "gemm-audit/compiler-options/v1";

impl CompilerIdentity {
    /// A compiler identity from its name, version, the options it was run
    /// with (framed in order, so reordering them is a change) and the exact
    /// source it compiled.
    ///
    /// Use it for NVRTC (`"nvrtc"`, the version NVRTC reports), a
    /// build-time nvcc (`"nvcc"`, the `--version` release string, the
    /// command-line flags, the `.cu` bytes), Triton, or any other compiler.
    pub fn new(
        name: impl Into<String>,
        version: impl Into<String>,
        options: &[&str],
        source: &[u8],
    ) -> Self {
        let mut w = DigestWriter::new(COMPILER_OPTIONS_DOMAIN);
        w.field("count", FieldValue::U64(options.len() as u64));
        for o in options {
            w.field("option", FieldValue::Str(o));
        }
        CompilerIdentity {
            name: name.into(),
            version: version.into(),
            options_digest: w.finish(),
            source_digest: Digest::sha256(source),
        }
    }

    pub(crate) fn strings(&self) -> impl Iterator<Item = &str> {
        [self.name.as_str(), self.version.as_str()].into_iter()
    }
}

/// The device facts that can change output bits. Per-card facts (UUID, CPU
/// model, core count) are not here: they live in [`VolatileMetadata`](crate::identity::VolatileMetadata), so a
/// golden recorded on one machine checks on another of the same class.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceIdentity {
    /// Device class, e.g. `cpu/x86_64` or `NVIDIA H200`.
    pub class: String,
    /// CUDA compute capability (major, minor); absent on the CPU.
    pub compute_capability: Option<[u32; 2]>,
    /// Streaming multiprocessors; 0 on the CPU (not applicable).
    pub multiprocessors: u32,
    /// Driver version; `none` on the CPU.
    pub driver: String,
}

impl Framed for DeviceIdentity {
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
        v.field("device.class", FieldValue::Str(&self.class));
        match self.compute_capability {
            Some(cc) => v.field("device.compute_capability", FieldValue::Capability(cc)),
            None => v.field("device.compute_capability", FieldValue::Absent),
        }
        v.field(
            "device.multiprocessors",
            FieldValue::U32(self.multiprocessors),
        );
        v.field("device.driver", FieldValue::Str(&self.driver));
    }
}

impl DeviceIdentity {
    pub(crate) fn strings(&self) -> impl Iterator<Item = &str> {
        [self.class.as_str(), self.driver.as_str()].into_iter()
    }
}
