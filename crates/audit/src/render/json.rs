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

/// Renders `body` as a pretty JSON document of `kind` with the envelope.
pub fn json_document<T: serde::Serialize>(kind: &'static str, passed: bool, body: &T) -> String {
    let doc = JsonDocument {
        schema_version: JSON_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        kind,
        verdict: if passed { "pass" } else { "fail" },
        body,
    };
    // Plain data with string keys: serialization cannot fail.
    let json = serde_json::to_string_pretty(&doc)
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }).to_string());
    terminal_safe(json)
}

/// `json` with every character a terminal must not see raw
/// ([`is_unsafe_char`](super::is_unsafe_char)) written as a JSON `\uXXXX`
/// escape (a surrogate pair above U+FFFF): the same document to any JSON
/// reader, and safe to print. Such characters can only occur inside JSON
/// strings, where the escape means the same character; the newlines of the
/// pretty layout are the only raw control characters outside them (the
/// serializer escapes them inside strings) and stay.
pub fn terminal_safe(json: String) -> String {
    let unsafe_here = |c: char| c != '\n' && super::is_unsafe_char(c);
    if !json.chars().any(unsafe_here) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 64);
    let mut units = [0u16; 2];
    for c in json.chars() {
        if unsafe_here(c) {
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The `show` document of a trace: the envelope and the trace itself.
pub fn show_document(trace: &crate::RecordedGemmTrace) -> String {
    // The trace's own JSON is valid by construction; keep it as a value so
    // the document is pretty-printed as one.
    let value = serde_json::from_str::<serde_json::Value>(&trace.to_json())
        .unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }));
    json_document("show", true, &serde_json::json!({ "trace": value }))
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
            "differences": d.differences,
            "numeric": d.numeric,
            "cross_device": golden.context.device != candidate.context.device,
            "portability": crate::diff::portability(golden, candidate),
        }),
    )
}
