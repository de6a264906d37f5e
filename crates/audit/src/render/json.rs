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
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
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
