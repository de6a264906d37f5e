//! What an engine calls on its own buffers and streams: auditing its own
//! launches (`embed`), vendor GEMMs recorded exactly (`gemm`), the
//! batch-invariant wgmma GEMMs (`invariant`) and fingerprints of outputs
//! another framework owns (`foreign`).

pub(crate) mod embed;
pub(crate) mod foreign;
pub(crate) mod gemm;
pub(crate) mod invariant;
