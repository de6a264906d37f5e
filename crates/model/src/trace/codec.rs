//! The trace file envelope and its payload codec.
//!
//! Layout (all integers little-endian):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `GEMMAUDT` |
//! | 8 | 2 | format version |
//! | 10 | 2 | reserved, zero |
//! | 12 | 8 | payload length |
//! | 20 | n | payload: bincode 2 (standard config) of the trace |
//! | 20+n | 32 | SHA-256 of the payload |
//!
//! bincode (unmaintained, RUSTSEC-2025-0141) is used only in this module,
//! always behind the checksummed envelope. It accepts trailing bytes and
//! overlong varints, so decoding requires every byte consumed and that
//! re-encoding gives the same bytes: one trace, one encoding.

use super::RecordedGemmTrace;
use crate::digest::Digest;
use crate::error::{FormatError, Result};

/// File magic.
pub const MAGIC: [u8; 8] = *b"GEMMAUDT";
/// The format version this build writes.
pub const FORMAT_VERSION: u16 = 7;
/// The oldest format version this build reads (and converts on reading).
pub const OLDEST_READ_VERSION: u16 = 1;
/// Header size: magic, version, reserved, payload length.
pub const HEADER_LEN: usize = 20;
/// Trailer size: SHA-256 of the payload.
pub const TRAILER_LEN: usize = 32;
/// Hard ceiling on a file, and on what the decoder may claim to allocate.
pub const MAX_FILE_BYTES: u64 = 512 << 20;

/// Limits checked while decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file accepted (at most [`MAX_FILE_BYTES`]).
    pub max_file_bytes: u64,
    /// Most routes in one trace.
    pub max_routes: u64,
    /// Longest string (symbol, name, version) in bytes.
    pub max_string_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: MAX_FILE_BYTES,
            max_routes: 1 << 20,
            max_string_bytes: 4096,
        }
    }
}

type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<{ MAX_FILE_BYTES as usize }>,
>;

fn config() -> Config {
    bincode::config::standard().with_limit::<{ MAX_FILE_BYTES as usize }>()
}

/// Decodes with an allocation limit tiered to the payload's size: no
/// legitimate string or sequence is longer than the payload, so a hostile
/// length claim is refused before bincode allocates more than a small
/// multiple of the input (8x the tier's largest payload: at most 16x the
/// payload, at least 512 KiB).
fn decode_tiered<T: serde::de::DeserializeOwned>(
    payload: &[u8],
) -> Result<(T, usize), FormatError> {
    fn with<T: serde::de::DeserializeOwned, const N: usize>(
        payload: &[u8],
    ) -> Result<(T, usize), FormatError> {
        bincode::serde::decode_from_slice(payload, bincode::config::standard().with_limit::<N>())
            .map_err(|e| FormatError::Decode(e.to_string()))
    }
    // Decoded structures are larger than their varint encoding (a route's
    // few hundred bytes become kilobytes of Strings and Vecs): every tier
    // allows 8x its largest payload, and tiers double, so no payload may
    // claim more than 16x its own size (at least 512 KiB).
    match payload.len() {
        n if n <= 0x10000 => with::<T, 0x80000>(payload),
        n if n <= 0x20000 => with::<T, 0x100000>(payload),
        n if n <= 0x40000 => with::<T, 0x200000>(payload),
        n if n <= 0x80000 => with::<T, 0x400000>(payload),
        n if n <= 0x100000 => with::<T, 0x800000>(payload),
        n if n <= 0x200000 => with::<T, 0x1000000>(payload),
        n if n <= 0x400000 => with::<T, 0x2000000>(payload),
        n if n <= 0x800000 => with::<T, 0x4000000>(payload),
        n if n <= 0x1000000 => with::<T, 0x8000000>(payload),
        n if n <= 0x2000000 => with::<T, 0x10000000>(payload),
        n if n <= 0x4000000 => with::<T, 0x20000000>(payload),
        n if n <= 0x8000000 => with::<T, 0x40000000>(payload),
        n if n <= 0x10000000 => with::<T, 0x80000000>(payload),
        _ => with::<T, { 8 * MAX_FILE_BYTES as usize }>(payload),
    }
}

/// [`decode_tiered`], then refuses trailing bytes and non-canonical input
/// (one value, one encoding).
fn decode_bounded<T: serde::de::DeserializeOwned + serde::Serialize>(
    payload: &[u8],
) -> Result<T, FormatError> {
    let (value, used) = decode_tiered::<T>(payload)?;
    if used != payload.len() {
        return Err(FormatError::TrailingBytes((payload.len() - used) as u64));
    }
    // bincode accepts overlong varints: one value, one encoding.
    if encode(&value)? != payload {
        return Err(FormatError::NonCanonical);
    }
    Ok(value)
}

pub(super) fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, FormatError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| FormatError::Encode(e.to_string()))
}

/// Encodes the payload (no envelope).
pub fn encode_payload(trace: &RecordedGemmTrace) -> Result<Vec<u8>, FormatError> {
    encode(trace)
}

/// Wraps a payload in the envelope.
pub fn seal(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&Digest::sha256(payload).0);
    out
}

/// Encodes a trace as a complete file image. A trace the reader would
/// refuse (a string, list or file over its limits) is refused here, before
/// anything is written.
pub fn encode_trace(trace: &RecordedGemmTrace) -> Result<Vec<u8>, FormatError> {
    let limits = Limits::default();
    check_limits(trace, &limits)?;
    trace.check_shape()?;
    let payload = encode_payload(trace)?;
    // What the reader decodes within its allocation limit, and nothing
    // else, is written: the writer never makes a file the reader refuses.
    decode_tiered::<RecordedGemmTrace>(&payload).map_err(|e| match e {
        FormatError::Decode(why) => {
            FormatError::Encode(format!("the reader would refuse the file: {why}"))
        }
        other => other,
    })?;
    let image = seal(&payload);
    if image.len() as u64 > limits.max_file_bytes {
        return Err(FormatError::TooLarge {
            size: image.len() as u64,
            limit: limits.max_file_bytes,
        });
    }
    Ok(image)
}

fn need(bytes: &[u8], offset: usize, n: usize) -> Result<&[u8], FormatError> {
    bytes.get(offset..offset + n).ok_or(FormatError::Truncated {
        offset: offset as u64,
        needed: n as u64,
        len: bytes.len() as u64,
    })
}

/// Checks the envelope and returns the payload, before any decoding.
pub fn open<'a>(bytes: &'a [u8], limits: &Limits) -> Result<&'a [u8], FormatError> {
    open_versioned(bytes, limits).map(|(_, payload)| payload)
}

/// Checks the envelope and returns the format version and the payload.
pub fn open_versioned<'a>(
    bytes: &'a [u8],
    limits: &Limits,
) -> Result<(u16, &'a [u8]), FormatError> {
    let max = limits.max_file_bytes.min(MAX_FILE_BYTES);
    if bytes.len() as u64 > max {
        return Err(FormatError::TooLarge {
            size: bytes.len() as u64,
            limit: max,
        });
    }
    let magic = need(bytes, 0, 8)?;
    if magic != MAGIC {
        return Err(FormatError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let v = need(bytes, 8, 2)?;
    let version = u16::from_le_bytes([v[0], v[1]]);
    if version > FORMAT_VERSION {
        return Err(FormatError::NewerVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if version < OLDEST_READ_VERSION {
        return Err(FormatError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let r = need(bytes, 10, 2)?;
    let reserved = u16::from_le_bytes([r[0], r[1]]);
    if reserved != 0 {
        return Err(FormatError::Reserved { found: reserved });
    }
    let l = need(bytes, 12, 8)?;
    let declared = u64::from_le_bytes(l.try_into().expect("8 bytes"));
    let actual = (bytes.len() - HEADER_LEN) as u64;
    // Compare without adding to `declared`, which may be hostile.
    if actual < TRAILER_LEN as u64 || declared != actual - TRAILER_LEN as u64 {
        return Err(FormatError::LengthMismatch {
            declared,
            actual: actual.saturating_sub(TRAILER_LEN as u64),
        });
    }
    let payload = &bytes[HEADER_LEN..bytes.len() - TRAILER_LEN];
    let stored = &bytes[bytes.len() - TRAILER_LEN..];
    let found = Digest::sha256(payload);
    if found.0 != stored {
        let mut expected = [0u8; 32];
        expected.copy_from_slice(stored);
        return Err(FormatError::Checksum {
            expected: Digest(expected).to_hex(),
            found: found.to_hex(),
        });
    }
    Ok((version, payload))
}

/// Decodes a payload of the current version: every byte consumed,
/// canonical, within the limits.
pub fn decode_payload(payload: &[u8], limits: &Limits) -> Result<RecordedGemmTrace, FormatError> {
    decode_payload_version(FORMAT_VERSION, payload, limits)
}

/// Decodes a payload of format `version`, converting an older version to
/// the current model (see `docs/trace-format.md`).
pub fn decode_payload_version(
    version: u16,
    payload: &[u8],
    limits: &Limits,
) -> Result<RecordedGemmTrace, FormatError> {
    let trace = match version {
        1 => super::v1::upgrade(decode_bounded::<super::v1::TraceV1>(payload)?)?,
        2 => super::v2::upgrade(decode_bounded::<super::v2::TraceV2>(payload)?),
        3 => super::v3::upgrade(decode_bounded::<super::v3::TraceV3>(payload)?),
        4 => super::v4::upgrade(decode_bounded::<super::v4::TraceV4>(payload)?),
        5 => super::v5::upgrade(decode_bounded::<super::v5::TraceV5>(payload)?),
        6 => super::v6::upgrade(decode_bounded::<super::v6::TraceV6>(payload)?),
        FORMAT_VERSION => decode_bounded::<RecordedGemmTrace>(payload)?,
        found => {
            return Err(FormatError::UnsupportedVersion {
                found,
                supported: FORMAT_VERSION,
            });
        }
    };
    check_limits(&trace, limits)?;
    trace.check_shape()?;
    Ok(trace)
}

fn check_limits(trace: &RecordedGemmTrace, limits: &Limits) -> Result<(), FormatError> {
    let routes = trace.routes.len() as u64;
    if routes > limits.max_routes {
        return Err(FormatError::LimitExceeded {
            what: "route count",
            found: routes,
            limit: limits.max_routes,
        });
    }
    // The reader caps a route's short lists (`bounded::route_list`); the
    // writer refuses what the reader would.
    let list = trace
        .routes
        .iter()
        .flat_map(|r| {
            let kernels = r.vendor.as_ref().map_or(0, |v| v.physical_kernels.len());
            [r.device_capabilities.len(), kernels]
        })
        .max()
        .unwrap_or(0) as u64;
    if list > crate::bounded::MAX_ROUTE_LIST as u64 {
        return Err(FormatError::LimitExceeded {
            what: "entries of a route's list",
            found: list,
            limit: crate::bounded::MAX_ROUTE_LIST as u64,
        });
    }
    // Every string the trace holds, walked through its `Serialize` impl so
    // no field can be left out (pins, declarations, vendor permits...).
    match super::strings::check(trace, limits.max_string_bytes) {
        Ok(()) => {}
        Err(super::strings::Stop::TooLong(found)) => {
            return Err(FormatError::LimitExceeded {
                what: "string length",
                found,
                limit: limits.max_string_bytes,
            });
        }
        Err(super::strings::Stop::Failed(why)) => return Err(FormatError::Encode(why)),
    }
    // Framing the context repeats each symbol's name for every service it
    // offers: bound what that builds, whatever the file's size.
    let framed: u64 = trace
        .context
        .modules
        .iter()
        .flat_map(|m| &m.symbols)
        .map(|s| (s.name.len() as u64 + 48).saturating_mul(1 + s.serves.len() as u64))
        .fold(0u64, u64::saturating_add);
    if framed > MAX_CONTEXT_FRAMED_BYTES {
        return Err(FormatError::LimitExceeded {
            what: "context size (symbol names times their services)",
            found: framed,
            limit: MAX_CONTEXT_FRAMED_BYTES,
        });
    }
    if let Some(o) = &trace.observation {
        let longest = o.longest_list() as u64;
        let max = super::observation::MAX_LISTED as u64;
        if longest > max {
            return Err(FormatError::LimitExceeded {
                what: "observation list length",
                found: longest,
                limit: max,
            });
        }
    }
    // A graph holds a handful of nodes per GEMM (a kernel, a memset, a
    // split-K reduction), never thousands.
    let nodes = trace.physical.len() as u64;
    let max_nodes = routes.saturating_mul(MAX_NODES_PER_ROUTE) + MAX_NODES_PER_ROUTE;
    if nodes > max_nodes {
        return Err(FormatError::LimitExceeded {
            what: "graph node count",
            found: nodes,
            limit: max_nodes,
        });
    }
    Ok(())
}

/// Most bytes framing a context's modules may build (see `check_limits`).
pub const MAX_CONTEXT_FRAMED_BYTES: u64 = 16 << 20;

/// Most physical graph nodes per route (plus this many in all).
pub const MAX_NODES_PER_ROUTE: u64 = 16;

/// Decodes a complete file image.
pub fn decode_trace(bytes: &[u8], limits: &Limits) -> Result<RecordedGemmTrace, FormatError> {
    let (version, payload) = open_versioned(bytes, limits)?;
    decode_payload_version(version, payload, limits)
}
