//! Length-framed, domain-separated SHA-256.
//!
//! Every digest in gemm-audit is SHA-256 over a domain string followed by
//! tagged fields. Each field is written as
//! `tag_len:u64le | tag | presence:u8 | value_len:u64le | value`, so no two
//! different field sequences can produce the same byte stream. Integers are
//! little-endian of fixed width; enums are framed by their stable names, so
//! reordering Rust variants never changes a digest.
//!
//! Fields are produced once, by a type's `visit_fields`, and consumed both by
//! the [`Framer`] (for digests) and by diff renderers (for naming what
//! changed): one list of fields, two uses.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};
use std::fmt;

/// A SHA-256 digest. Prints as lowercase hex.
///
/// All zeros is the placeholder value and is refused wherever a real digest
/// is required.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The all-zero placeholder.
    pub const ZERO: Digest = Digest([0; 32]);

    /// True for the all-zero placeholder.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 32]
    }

    /// Plain SHA-256 of `bytes` (no framing): used for output fingerprints
    /// and file checksums, where the input is already one byte string.
    pub fn sha256(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// Lowercase hex rendering.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from_digit((b >> 4) as u32, 16).unwrap_or('0'));
            s.push(char::from_digit((b & 0xf) as u32, 16).unwrap_or('0'));
        }
        s
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Option<Digest> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Some(Digest(out))
    }

    /// The first 12 hex digits, for tables.
    pub fn short(&self) -> String {
        self.to_hex()[..12].to_string()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

// Hex in human-readable formats (the JSON rendering), 32 raw bytes in binary
// ones (the trace file).
impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_hex())
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let s = String::deserialize(deserializer)?;
            Digest::from_hex(&s)
                .ok_or_else(|| serde::de::Error::custom("expected 64 hex digits for a digest"))
        } else {
            <[u8; 32]>::deserialize(deserializer).map(Digest)
        }
    }
}

/// One field value, as handed to a [`FieldVisitor`].
#[derive(Debug, Clone, Copy)]
pub enum FieldValue<'a> {
    /// An optional field that is not present (framed with presence 0).
    Absent,
    /// A flag, framed as one byte (0 or 1).
    Bool(bool),
    /// An unsigned integer, framed as 4 little-endian bytes.
    U32(u32),
    /// An unsigned integer, framed as 8 little-endian bytes.
    U64(u64),
    /// A signed integer, framed as 8 little-endian bytes.
    I64(i64),
    /// Three `u32`s (grid or block dimensions), framed as 12 little-endian
    /// bytes and rendered as `XxYxZ`.
    U32x3([u32; 3]),
    /// A compute capability `[major, minor]`, framed exactly as
    /// `U32x3([major, minor, 0])` (so digests are unchanged) and rendered
    /// as `major.minor`.
    Capability([u32; 2]),
    /// A string, framed as its UTF-8 bytes.
    Str(&'a str),
    /// A list of strings, framed as a `u64` count and then each string with
    /// its own `u64` length, so no two lists frame alike.
    StrList(&'a [String]),
    /// Raw bytes (rendered as their SHA-256 in diffs).
    Bytes(&'a [u8]),
    /// A digest, framed as its 32 bytes and rendered as hex.
    Digest(&'a Digest),
}

impl fmt::Display for FieldValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::Absent => f.write_str("(absent)"),
            FieldValue::Bool(v) => write!(f, "{v}"),
            FieldValue::U32(v) => write!(f, "{v}"),
            FieldValue::U64(v) => write!(f, "{v}"),
            FieldValue::I64(v) => write!(f, "{v}"),
            FieldValue::U32x3([x, y, z]) => write!(f, "{x}x{y}x{z}"),
            FieldValue::Capability([major, minor]) => write!(f, "{major}.{minor}"),
            FieldValue::Str(s) => write!(f, "{s:?}"),
            FieldValue::StrList(l) => render_list(f, l),
            FieldValue::Bytes(b) => write!(f, "{} bytes, sha256 {}", b.len(), Digest::sha256(b)),
            FieldValue::Digest(d) => write!(f, "{d}"),
        }
    }
}

impl FieldValue<'_> {
    /// The value as typed JSON: numbers as numbers, strings unquoted,
    /// dimensions as arrays, a compute capability as `"9.0"`, a digest as
    /// its hex, raw bytes as their length and SHA-256, absent as `null`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::{Value, json};
        match self {
            FieldValue::Absent => Value::Null,
            FieldValue::Bool(v) => json!(v),
            FieldValue::U32(v) => json!(v),
            FieldValue::U64(v) => json!(v),
            FieldValue::I64(v) => json!(v),
            FieldValue::U32x3(v) => json!(v),
            FieldValue::Capability([major, minor]) => json!(format!("{major}.{minor}")),
            FieldValue::Str(s) => json!(s),
            FieldValue::StrList(l) => json!(l),
            FieldValue::Bytes(b) => {
                json!({ "bytes": b.len(), "sha256": Digest::sha256(b).to_hex() })
            }
            FieldValue::Digest(d) => json!(d.to_hex()),
        }
    }
}

/// Most characters of a list rendered in full; a longer list (a hostile
/// trace's, say) shows its first items, its length and its digest, so a
/// message stays readable and two different lists still read differently.
const LIST_RENDER_CHARS: usize = 512;

fn render_list(f: &mut fmt::Formatter<'_>, l: &[String]) -> fmt::Result {
    let full = format!("{l:?}");
    if full.len() <= LIST_RENDER_CHARS {
        return f.write_str(&full);
    }
    let mut w = DigestWriter::new("gemm-audit/rendered-list/v1");
    w.field("list", FieldValue::StrList(l));
    let head: String = full.chars().take(LIST_RENDER_CHARS).collect();
    write!(
        f,
        "{head}... ({} items, sha256 {})",
        l.len(),
        w.finish().short()
    )
}

/// Receives the fields of a framed value, in a fixed order.
pub trait FieldVisitor {
    /// Receives one field: its stable tag (e.g. `shape.m`) and its value.
    fn field(&mut self, tag: &'static str, value: FieldValue<'_>);
}

/// Types whose identity is a sequence of tagged fields.
pub trait Framed {
    /// Hands every identity field to `v`, always in the same order.
    fn visit_fields<V: FieldVisitor>(&self, v: &mut V);
}

/// Writes fields in the framed byte layout into a reusable buffer.
///
/// Framing into a buffer and hashing it with one `update` is much faster
/// than feeding SHA-256 many tiny slices.
#[derive(Default)]
pub struct Framer {
    buf: Vec<u8>,
}

impl Framer {
    /// An empty framer, with room for a typical route's fields.
    pub fn new() -> Self {
        Framer {
            buf: Vec::with_capacity(2048),
        }
    }

    /// The bytes framed so far.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Empties the buffer, keeping its allocation for the next value.
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    fn raw(&mut self, tag: &str, presence: u8, value: &[u8]) {
        self.buf
            .extend_from_slice(&(tag.len() as u64).to_le_bytes());
        self.buf.extend_from_slice(tag.as_bytes());
        self.buf.push(presence);
        self.buf
            .extend_from_slice(&(value.len() as u64).to_le_bytes());
        self.buf.extend_from_slice(value);
    }

    /// Frames the domain string that starts every digest.
    pub fn domain(&mut self, domain: &str) {
        self.raw("domain", 1, domain.as_bytes());
    }

    /// Frames every field of `value`.
    pub fn frame<T: Framed + ?Sized>(&mut self, value: &T) {
        value.visit_fields(self);
    }
}

impl FieldVisitor for Framer {
    #[inline(always)]
    fn field(&mut self, tag: &'static str, value: FieldValue<'_>) {
        match value {
            FieldValue::Absent => self.raw(tag, 0, &[]),
            FieldValue::Bool(v) => self.raw(tag, 1, &[v as u8]),
            FieldValue::U32(v) => self.raw(tag, 1, &v.to_le_bytes()),
            FieldValue::U64(v) => self.raw(tag, 1, &v.to_le_bytes()),
            FieldValue::I64(v) => self.raw(tag, 1, &v.to_le_bytes()),
            FieldValue::Capability([major, minor]) => {
                self.field(tag, FieldValue::U32x3([major, minor, 0]))
            }
            FieldValue::U32x3([x, y, z]) => {
                let mut b = [0u8; 12];
                b[..4].copy_from_slice(&x.to_le_bytes());
                b[4..8].copy_from_slice(&y.to_le_bytes());
                b[8..].copy_from_slice(&z.to_le_bytes());
                self.raw(tag, 1, &b)
            }
            FieldValue::Str(s) => self.raw(tag, 1, s.as_bytes()),
            FieldValue::StrList(list) => {
                // value = count:u64le, then each item as len:u64le | bytes.
                let len: usize = 8 + list.iter().map(|s| 8 + s.len()).sum::<usize>();
                self.buf
                    .extend_from_slice(&(tag.len() as u64).to_le_bytes());
                self.buf.extend_from_slice(tag.as_bytes());
                self.buf.push(1);
                self.buf.extend_from_slice(&(len as u64).to_le_bytes());
                self.buf
                    .extend_from_slice(&(list.len() as u64).to_le_bytes());
                for s in list {
                    self.buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
                    self.buf.extend_from_slice(s.as_bytes());
                }
            }
            FieldValue::Digest(d) => self.raw(tag, 1, &d.0),
            FieldValue::Bytes(b) => self.raw(tag, 1, b),
        }
    }
}

/// Framed bytes are hashed in chunks of this size: one SHA-256 `update`
/// per chunk instead of one per field.
const HASH_CHUNK: usize = 64 * 1024;

/// Where framed chunks go: hashed on this thread, or handed to a hashing
/// thread so framing and hashing overlap.
enum Sink {
    Inline(Sha256),
    Pipelined {
        full: std::sync::mpsc::SyncSender<Vec<u8>>,
        empty: std::sync::mpsc::Receiver<Vec<u8>>,
        hasher: std::thread::JoinHandle<Sha256>,
    },
}

/// Streaming SHA-256 under a domain string.
pub struct DigestWriter {
    sink: Sink,
    framer: Framer,
}

impl DigestWriter {
    /// Starts a digest under `domain`, hashed on the calling thread.
    pub fn new(domain: &str) -> Self {
        let mut framer = Framer::new();
        framer.domain(domain);
        DigestWriter {
            sink: Sink::Inline(Sha256::new()),
            framer,
        }
    }

    /// Starts a digest whose hashing runs on a second thread while the
    /// caller frames the next chunk. Worth it for large inputs (a launch set
    /// of many routes); falls back to [`DigestWriter::new`] if no thread can
    /// be started. The digest is the same either way.
    pub fn pipelined(domain: &str) -> Self {
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
        let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let spawned = std::thread::Builder::new()
            .name("gemm-audit-sha256".into())
            .spawn(move || {
                let mut h = Sha256::new();
                for chunk in full_rx {
                    h.update(&chunk);
                    // Hand the buffer back for reuse; the writer may be gone already.
                    let _ = empty_tx.send(chunk);
                }
                h
            });
        let mut w = DigestWriter::new(domain);
        if let Ok(hasher) = spawned {
            w.sink = Sink::Pipelined {
                full: full_tx,
                empty: empty_rx,
                hasher,
            };
        }
        w
    }

    /// Frames and hashes one field.
    pub fn field(&mut self, tag: &'static str, value: FieldValue<'_>) {
        self.framer.field(tag, value);
        self.maybe_flush();
    }

    /// Frames and hashes every field of `value`.
    pub fn frame<T: Framed + ?Sized>(&mut self, value: &T) {
        self.framer.frame(value);
        self.maybe_flush();
    }

    #[inline]
    fn maybe_flush(&mut self) {
        if self.framer.buf.len() >= HASH_CHUNK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        match &mut self.sink {
            Sink::Inline(h) => {
                h.update(&self.framer.buf);
                self.framer.buf.clear();
            }
            Sink::Pipelined { full, empty, .. } => {
                let mut next = empty
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(HASH_CHUNK * 2));
                next.clear();
                let chunk = std::mem::replace(&mut self.framer.buf, next);
                if let Err(std::sync::mpsc::SendError(chunk)) = full.send(chunk) {
                    // The hashing thread is gone (it panicked): finish on this
                    // thread; `finish` reports the failure.
                    self.framer.buf = chunk;
                }
            }
        }
    }

    /// Hashes what is left and returns the digest (joining the hashing
    /// thread when pipelined).
    pub fn finish(mut self) -> Digest {
        self.flush();
        let hasher = match self.sink {
            Sink::Inline(h) => h,
            Sink::Pipelined { full, hasher, .. } => {
                drop(full);
                // Hashing plain bytes cannot panic; if the thread died anyway, that is a bug.
                hasher.join().expect("the SHA-256 thread does not panic")
            }
        };
        Digest(hasher.finalize().into())
    }
}

/// A writer takes fields one at a time, hashing every 64 KiB of framed
/// bytes: framing a large value through it never buffers it whole.
impl FieldVisitor for DigestWriter {
    fn field(&mut self, tag: &'static str, value: FieldValue<'_>) {
        DigestWriter::field(self, tag, value);
    }
}

/// Digest of one framed value under `domain`.
pub fn framed_digest<T: Framed + ?Sized>(domain: &str, value: &T) -> Digest {
    let mut w = DigestWriter::new(domain);
    w.frame(value);
    w.finish()
}

/// Collects fields as `(tag, rendered value)` pairs, for naming what changed.
#[derive(Default)]
pub struct FieldList {
    /// Every field received, in order: its tag and its value rendered for
    /// people (see [`FieldValue`]'s `Display`).
    pub fields: Vec<(&'static str, String)>,
}

impl FieldVisitor for FieldList {
    fn field(&mut self, tag: &'static str, value: FieldValue<'_>) {
        self.fields.push((tag, value.to_string()));
    }
}

/// Every field as its rendering and its typed JSON value.
#[derive(Default)]
struct TypedFieldList(Vec<(&'static str, String, serde_json::Value)>);

/// The fields of `value`: tag, rendering and typed JSON value, in order.
pub fn typed_field_list<T: Framed + ?Sized>(
    value: &T,
) -> Vec<(&'static str, String, serde_json::Value)> {
    let mut l = TypedFieldList::default();
    value.visit_fields(&mut l);
    l.0
}

impl FieldVisitor for TypedFieldList {
    fn field(&mut self, tag: &'static str, value: FieldValue<'_>) {
        self.0.push((tag, value.to_string(), value.to_json()));
    }
}

/// The fields of `value`, rendered.
pub fn field_list<T: Framed + ?Sized>(value: &T) -> Vec<(&'static str, String)> {
    let mut l = FieldList::default();
    value.visit_fields(&mut l);
    l.fields
}

/// One field that differs between two framed values.
///
/// In JSON, `expected` and `found` are typed values (numbers, unquoted
/// strings, arrays) where the change came from two framed values, and the
/// rendered text otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FieldChange {
    /// The field's tag, e.g. `kernel_symbol` or `shape.m`.
    pub field: String,
    /// The value expected (from the plan, golden or module), rendered.
    #[serde(deserialize_with = "text_of_json")]
    pub expected: String,
    /// The value found instead, rendered.
    #[serde(deserialize_with = "text_of_json")]
    pub found: String,
    /// The two values as typed JSON, when known.
    #[serde(skip)]
    pub typed: Option<Box<[serde_json::Value; 2]>>,
}

impl FieldChange {
    /// A change known only as text.
    pub fn text(
        field: impl Into<String>,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> Self {
        FieldChange {
            field: field.into(),
            expected: expected.into(),
            found: found.into(),
            typed: None,
        }
    }
}

impl Serialize for FieldChange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (expected, found) = match &self.typed {
            Some(v) => (v[0].clone(), v[1].clone()),
            None => (
                serde_json::Value::String(self.expected.clone()),
                serde_json::Value::String(self.found.clone()),
            ),
        };
        let mut st = s.serialize_struct("FieldChange", 3)?;
        st.serialize_field("field", &self.field)?;
        st.serialize_field("expected", &expected)?;
        st.serialize_field("found", &found)?;
        st.end()
    }
}

/// A JSON value read back as the text it stands for.
fn text_of_json<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    })
}

/// What a field change shows for a field one side does not have.
pub(crate) const ABSENT: &str = "(absent)";

/// Every field that differs between `expected` and `found`, in field order.
///
/// The two field lists are aligned by tag, so a repeated group present on
/// one side only (a module the live context lacks) shows as its own
/// fields `(absent)` instead of shifting every later field against the
/// wrong one.
pub fn field_changes<T: Framed + ?Sized>(expected: &T, found: &T) -> Vec<FieldChange> {
    let mut a = TypedFieldList::default();
    expected.visit_fields(&mut a);
    let mut b = TypedFieldList::default();
    found.visit_fields(&mut b);
    let (a, b) = (a.0, b.0);
    let change = |tag: &str,
                  x: Option<&(&str, String, serde_json::Value)>,
                  y: Option<&(&str, String, serde_json::Value)>| {
        let text = |f: Option<&(&str, String, serde_json::Value)>| {
            f.map_or_else(|| ABSENT.to_string(), |f| f.1.clone())
        };
        let json = |f: Option<&(&str, String, serde_json::Value)>| {
            f.map_or(serde_json::Value::Null, |f| f.2.clone())
        };
        FieldChange {
            field: tag.to_string(),
            expected: text(x),
            found: text(y),
            typed: Some(Box::new([json(x), json(y)])),
        }
    };
    if a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.0 == y.0) {
        return a
            .iter()
            .zip(&b)
            .filter(|(x, y)| x.1 != y.1)
            .map(|(x, y)| change(x.0, Some(x), Some(y)))
            .collect();
    }
    // Longest common subsequence of the tags; the lists are a few hundred
    // fields at most.
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i].0 == b[j].0 {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && a[i].0 == b[j].0 {
            if a[i].1 != b[j].1 {
                out.push(change(a[i].0, Some(&a[i]), Some(&b[j])));
            }
            i += 1;
            j += 1;
        } else if j == m || (i < n && lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(change(a[i].0, Some(&a[i]), None));
            i += 1;
        } else {
            out.push(change(b[j].0, None, Some(&b[j])));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list with a repeated group, as a context's modules.
    struct Groups(Vec<&'static str>, &'static str);

    impl Framed for Groups {
        fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
            v.field("count", FieldValue::U64(self.0.len() as u64));
            for g in &self.0 {
                v.field("group.name", FieldValue::Str(g));
            }
            v.field("tail", FieldValue::Str(self.1));
        }
    }

    #[test]
    fn a_group_missing_on_one_side_does_not_shift_the_fields_after_it() {
        let with = Groups(vec!["wgmma"], "device");
        let without = Groups(vec![], "device");
        let c = field_changes(&with, &without);
        let seen: Vec<(&str, &str, &str)> = c
            .iter()
            .map(|c| (c.field.as_str(), c.expected.as_str(), c.found.as_str()))
            .collect();
        assert_eq!(
            seen,
            [("count", "1", "0"), ("group.name", "\"wgmma\"", ABSENT)],
            "the tail matches itself and is not reported"
        );
        let c = field_changes(&without, &Groups(vec!["a"], "other"));
        assert_eq!(c.len(), 3, "{c:?}");
        assert_eq!(
            (c[1].expected.as_str(), c[1].found.as_str()),
            (ABSENT, "\"a\"")
        );
        assert_eq!(c[2].field, "tail");
        // Same shape: positional, as before.
        let c = field_changes(&Groups(vec!["a"], "x"), &Groups(vec!["b"], "x"));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].field, "group.name");
    }

    struct Two(&'static str, &'static str);
    impl Framed for Two {
        fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
            v.field("a", FieldValue::Str(self.0));
            v.field("b", FieldValue::Str(self.1));
        }
    }

    #[test]
    fn framing_separates_field_boundaries() {
        // Concatenation would make these equal; framing must not.
        let x = framed_digest("t", &Two("ab", "c"));
        let y = framed_digest("t", &Two("a", "bc"));
        assert_ne!(x, y);
    }

    #[test]
    fn domain_separates() {
        assert_ne!(
            framed_digest("t1", &Two("a", "b")),
            framed_digest("t2", &Two("a", "b"))
        );
    }

    #[test]
    fn hex_round_trip() {
        let d = Digest::sha256(b"abc");
        assert_eq!(
            d.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(Digest::from_hex("zz"), None);
    }

    #[test]
    fn absent_differs_from_empty() {
        struct Opt(Option<&'static str>);
        impl Framed for Opt {
            fn visit_fields<V: FieldVisitor>(&self, v: &mut V) {
                v.field("x", self.0.map_or(FieldValue::Absent, FieldValue::Str));
            }
        }
        assert_ne!(
            framed_digest("t", &Opt(None)),
            framed_digest("t", &Opt(Some("")))
        );
    }
}
