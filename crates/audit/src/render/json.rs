//! The envelope of every JSON document the command line prints.

/// Version of the JSON documents `audit`, `check` and `diff` print. Bumped
/// when a field is removed or changes meaning; new fields may appear.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// The envelope of every JSON document the command line prints: schema and
/// tool version, what it is and the overall verdict, then the body's own
/// fields. Keys are snake_case and enum values kebab-case throughout.
#[derive(Debug, serde::Serialize)]
pub struct JsonDocument<'a, T: serde::Serialize> {
    /// [`JSON_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// This build's version.
    pub tool_version: &'static str,
    /// `audit`, `check` or `diff`.
    pub kind: &'static str,
    /// `pass` or `fail`.
    pub verdict: &'static str,
    /// The document's own fields.
    #[serde(flatten)]
    pub body: &'a T,
}

/// Renders `body` as a pretty JSON document of `kind` with the envelope
/// (what [`write_document`] writes, as text).
pub fn json_document<T: serde::Serialize>(kind: &'static str, passed: bool, body: &T) -> String {
    let mut out = Vec::new();
    // Plain data with string keys into memory: writing cannot fail.
    match write_document(&mut out, kind, passed, body) {
        Ok(()) => String::from_utf8(out).unwrap_or_default(),
        Err(e) => serde_json::json!({ "error": e.to_string() }).to_string(),
    }
}

/// Writes `body` as a pretty JSON document of `kind` with the envelope to
/// `w` as it is serialized (a large trace is never held as text). Every
/// character a terminal must not see raw ([`is_unsafe_char`]) is written
/// as a JSON `\uXXXX` escape (a surrogate pair above U+FFFF): the same
/// string to any JSON reader, and safe to print.
///
/// [`is_unsafe_char`]: super::is_unsafe_char
pub fn write_document<W: std::io::Write, T: serde::Serialize>(
    w: W,
    kind: &'static str,
    passed: bool,
    body: &T,
) -> std::io::Result<()> {
    let doc = JsonDocument {
        schema_version: JSON_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        kind,
        verdict: if passed { "pass" } else { "fail" },
        body,
    };
    let mut ser = serde_json::Serializer::with_formatter(w, SafeFormatter::default());
    // An I/O error (a closed pipe) comes back as itself.
    serde::Serialize::serialize(&doc, &mut ser).map_err(std::io::Error::from)
}

/// serde_json's pretty layout, with the characters a terminal must not see
/// raw escaped inside strings (the serializer escapes C0 controls, quotes
/// and backslashes itself).
#[derive(Default)]
struct SafeFormatter(serde_json::ser::PrettyFormatter<'static>);

impl serde_json::ser::Formatter for SafeFormatter {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some((i, c)) = rest.char_indices().find(|&(_, c)| super::is_unsafe_char(c)) {
            w.write_all(&rest.as_bytes()[..i])?;
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(w, "\\u{u:04x}")?;
            }
            rest = &rest[i + c.len_utf8()..];
        }
        w.write_all(rest.as_bytes())
    }
}

/// The body of the `show` document: the trace itself, and the kernel
/// names its table prints short, whole.
#[derive(serde::Serialize)]
struct ShowBody<'a> {
    trace: &'a crate::RecordedGemmTrace,
    kernel_names: Vec<KernelEntry>,
}

impl<'a> ShowBody<'a> {
    fn of(trace: &'a crate::RecordedGemmTrace) -> Self {
        ShowBody {
            trace,
            kernel_names: kernel_entries(trace),
        }
    }
}

/// A kernel name as `show`'s table prints it and as it was recorded.
#[derive(serde::Serialize)]
struct KernelEntry {
    /// The full name.
    name: String,
    /// What tables print ([`super::kernel_name::KernelName::short`]).
    short: String,
    /// The SHA-256 of `name`, hex.
    sha256: String,
}

/// Every distinct kernel name of the trace's routes (symbols and the
/// physical kernels that served them), in order of first appearance.
fn kernel_entries(trace: &crate::RecordedGemmTrace) -> Vec<KernelEntry> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for r in &trace.routes {
        let physical = r.vendor.iter().flat_map(|v| v.physical_kernels.iter());
        for name in std::iter::once(&r.kernel_symbol).chain(physical) {
            if seen.insert(name.as_str()) {
                let k = super::kernel_name::KernelName::new(name);
                out.push(KernelEntry {
                    name: name.clone(),
                    short: k.short(),
                    sha256: k.digest().to_hex(),
                });
            }
        }
    }
    out
}

/// The `show` document of a trace: the envelope, the trace itself and
/// its kernel names (full, short and SHA-256).
pub fn show_document(trace: &crate::RecordedGemmTrace) -> String {
    json_document("show", true, &ShowBody::of(trace))
}

/// Writes the `show` document of `trace` to `w` as it is serialized.
pub fn write_show_document<W: std::io::Write>(
    w: W,
    trace: &crate::RecordedGemmTrace,
) -> std::io::Result<()> {
    write_document(w, "show", true, &ShowBody::of(trace))
}

/// The `diff` document of `golden` against `candidate` (their differences
/// `d`, already annotated as the caller wants): it passes when every
/// difference is of a class or field in `allow`.
pub fn diff_document(
    golden: &crate::RecordedGemmTrace,
    candidate: &crate::RecordedGemmTrace,
    d: &crate::diff::TraceDiff,
    allow: &[crate::diff::Allowance],
) -> String {
    json_document(
        "diff",
        d.disallowed_classes(allow).is_empty(),
        &serde_json::json!({
            "summary": d.overview(),
            "differences": d.differences,
            "numeric": d.numeric,
            "cross_device": golden.context.device != candidate.context.device,
            "portability": crate::diff::portability(golden, candidate),
        }),
    )
}
