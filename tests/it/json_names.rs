//! Every JSON document stays valid JSON and round-trips the exact names it
//! carries, whatever code points those names hold (controls, bidi
//! overrides, line separators, noncharacters, quotes); the terminal never
//! sees such characters raw.

use crate::common::{BIN, Scratch};
use gemm_audit::census::census;
use gemm_audit::compare::{Member, compare};
use gemm_audit::diff::TraceDiff;
use gemm_audit::render::{self, is_unsafe_char};
use gemm_audit::{RecordedGemmTrace, testkit};
use proptest::prelude::*;
use serde_json::Value;
use std::process::Command;

/// Characters of each class a name can hold.
fn name_char() -> impl Strategy<Value = char> {
    prop_oneof![
        prop::char::range('a', 'z'),
        prop::sample::select(vec!['"', '\\', '/', '{', '}', ' ', 'é', '名', '🦀']),
        // C0, DEL and C1 controls.
        prop::char::range('\u{0}', '\u{1f}'),
        prop::char::range('\u{7f}', '\u{9f}'),
        // Bidi marks, embeddings, overrides and isolates; line and
        // paragraph separators.
        prop::sample::select(vec![
            '\u{200e}', '\u{200f}', '\u{061c}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}',
            '\u{2028}', '\u{2029}',
        ]),
        // Noncharacters, in the BMP and above it.
        prop::sample::select(vec![
            '\u{fdd0}',
            '\u{fdef}',
            '\u{fffe}',
            '\u{ffff}',
            '\u{1fffe}',
            '\u{10ffff}'
        ]),
        any::<char>(),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop::collection::vec(name_char(), 1..24).prop_map(|v| v.into_iter().collect())
}

/// Parses `doc` as JSON, failing with the document when it is not, and
/// holds that nothing a terminal must not see is in it raw.
fn parse(kind: &str, doc: &str) -> Value {
    if let Some(c) = doc.chars().find(|&c| c != '\n' && is_unsafe_char(c)) {
        panic!("the {kind} document holds {c:?} raw");
    }
    serde_json::from_str(doc).unwrap_or_else(|e| panic!("the {kind} document is not JSON: {e}"))
}

/// Whether `v` holds the string `s` anywhere, as a value or a key.
fn holds(v: &Value, s: &str) -> bool {
    match v {
        Value::String(x) => x == s,
        Value::Array(a) => a.iter().any(|x| holds(x, s)),
        Value::Object(o) => o.iter().any(|(k, x)| k == s || holds(x, s)),
        _ => false,
    }
}

fn named(name: &str) -> RecordedGemmTrace {
    let mut t = testkit::sample_trace(3);
    t.workload = name.to_string();
    t.volatile.insert("host".into(), name.to_string());
    t
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_document_kind_parses_back_with_the_exact_names(n in name(), symbol in name()) {
        let golden = named(&n);
        let mut candidate = named(&n);
        candidate.routes[1].kernel_symbol = symbol.clone();

        let show = parse("show", &render::json::show_document(&golden));
        prop_assert_eq!(show["trace"]["workload"].as_str(), Some(n.as_str()));
        prop_assert_eq!(show["trace"]["volatile"]["host"].as_str(), Some(n.as_str()));

        let d = TraceDiff::between(&golden, &candidate);
        let diff = parse("diff", &render::json::diff_document(&golden, &candidate, &d, &[]));
        prop_assert!(holds(&diff, &symbol), "the diff names the new symbol exactly");

        let members = [
            Member { label: n.clone(), trace: golden.clone(), device: Some(format!("{n}-a")) },
            Member { label: symbol.clone(), trace: candidate.clone(), device: None },
        ];
        let c = compare(&members);
        let compared = parse("compare", &render::json::json_document("compare", true, &c));
        prop_assert!(holds(&compared, &n), "the compare document names its members exactly");

        let cen = census(&[(n.clone(), &golden)]);
        let counted = parse("census", &render::json::json_document("census", true, &cen));
        prop_assert!(holds(&counted, &n), "the census names its trace exactly");

        for text in [render::terminal_text(&n), render::one_line(&n)] {
            prop_assert!(
                !text.chars().any(|c| c != '\n' && c != '\t' && is_unsafe_char(c)),
                "terminal text of {:?} holds a raw unsafe character", n
            );
        }
    }
}

#[test]
fn the_command_line_prints_valid_json_and_safe_tables_for_hostile_names() {
    let s = Scratch::new("json-names");
    let name = "evil\u{202e}\u{2028}\u{fffe}\u{ffff}\"\\x";
    let workload = serde_json::json!({
        "name": name,
        "gemm": [{"name": format!("g{name}"), "op": "nn", "dtype": "f32", "m": 2, "k": 4, "n": 4,
                  "route": "scalar-fma"}],
    });
    let w = s.write("w.json", workload.to_string());
    let t = s.path("t.gat");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(BIN)
            .args(args)
            .output()
            .expect("run gemm-audit");
        let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
        (out.status.code(), stdout)
    };
    let (rc, _) = run(&[
        "record".as_ref(),
        w.as_os_str(),
        "-o".as_ref(),
        t.as_os_str(),
        "-q".as_ref(),
    ]);
    assert_eq!(rc, Some(0));

    let (rc, show) = run(&[
        "show".as_ref(),
        t.as_os_str(),
        "--format".as_ref(),
        "json".as_ref(),
    ]);
    assert_eq!(rc, Some(0));
    assert_eq!(parse("show", &show)["trace"]["workload"], name);
    for cmd in ["diff", "compare"] {
        let (rc, doc) = run(&[
            cmd.as_ref(),
            t.as_os_str(),
            t.as_os_str(),
            "--format".as_ref(),
            "json".as_ref(),
        ]);
        // Two copies of one trace: nothing to diff, and one vote to compare.
        let expected = if cmd == "diff" { 0 } else { 1 };
        assert_eq!(rc, Some(expected), "{cmd}: {doc}");
        assert!(
            holds(&parse(cmd, &doc), name) || cmd == "diff",
            "{cmd}: {doc}"
        );
    }
    let (rc, check) = run(&[
        "check".as_ref(),
        t.as_os_str(),
        "--golden".as_ref(),
        t.as_os_str(),
        "--format".as_ref(),
        "json".as_ref(),
    ]);
    assert_eq!(rc, Some(0), "{check}");
    parse("check", &check);

    let (rc, table) = run(&["show".as_ref(), t.as_os_str()]);
    assert_eq!(rc, Some(0));
    assert!(
        table.contains("evil\\u{202e}\\u{2028}\\u{fffe}\\u{ffff}"),
        "{table}"
    );
    assert!(
        !table
            .chars()
            .any(|c| c != '\n' && c != '\t' && is_unsafe_char(c)),
        "{table}"
    );
}

#[test]
fn a_workload_with_a_lone_surrogate_is_refused_by_name() {
    let s = Scratch::new("json-surrogate");
    let w = s.write(
        "w.json",
        r#"{"name": "bad\ud800", "gemm": [{"name": "g", "op": "nn", "dtype": "f32", "m": 2, "k": 4, "n": 4}]}"#,
    );
    let out = Command::new(BIN)
        .args([
            "record".as_ref(),
            w.as_os_str(),
            "-o".as_ref(),
            s.path("t.gat").as_os_str(),
        ])
        .output()
        .expect("run gemm-audit");
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("w.json") && err.contains("surrogate"), "{err}");
    assert!(!s.path("t.gat").exists());
}
