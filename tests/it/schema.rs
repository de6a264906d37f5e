//! Every JSON document the command line prints validates against its
//! schema under `docs/schema/`, and the schemas are strict enough to refuse
//! a document that lost a field or changed a type.
//!
//! The validator here covers the JSON Schema keywords those schemas use
//! (`type`, `const`, `enum`, `required`, `properties`,
//! `additionalProperties`, `items`, `anyOf`, local `$ref`); a schema that
//! uses another keyword fails the test instead of being half-checked.

use crate::common::{BIN, root};
use serde_json::{Value, json};

use std::process::Command;

fn schema(kind: &str) -> Value {
    let path = root().join(format!("docs/schema/{kind}.schema.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

const KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$defs",
    "$ref",
    "title",
    "description",
    "type",
    "const",
    "enum",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "anyOf",
];

/// The errors of `v` against `s` (within the root schema `root`), each
/// naming its JSON path.
fn validate(root: &Value, s: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(s) = s.as_object() else {
        return;
    };
    for k in s.keys() {
        assert!(
            KEYWORDS.contains(&k.as_str()),
            "schema keyword {k} is not checked here"
        );
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        // `#/$defs/name` in this schema, or `other.schema.json#/$defs/name`
        // in a sibling (resolved against `$id`, as validators do).
        let (file, name) = r.split_once("#/$defs/").expect("a $ref to a definition");
        let other;
        let root = if file.is_empty() {
            root
        } else {
            let kind = file.strip_suffix(".schema.json").expect("a sibling schema");
            other = schema(kind);
            &other
        };
        let def = &root["$defs"][name];
        assert!(def.is_object(), "$ref {r} names no definition");
        validate(root, def, v, path, errors);
    }
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => panic!("bad type {t}"),
        };
        let is = |ty: &str| match ty {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            other => panic!("unknown type {other}"),
        };
        if !types.iter().any(|ty| is(ty)) {
            errors.push(format!("{path}: {v} is not {types:?}"));
        }
    }
    if let Some(c) = s.get("const")
        && v != c
    {
        errors.push(format!("{path}: {v} is not {c}"));
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        errors.push(format!("{path}: {v} is not one of {e:?}"));
    }
    if let Some(alts) = s.get("anyOf").and_then(Value::as_array) {
        let any = alts.iter().any(|a| {
            let mut e = Vec::new();
            validate(root, a, v, path, &mut e);
            e.is_empty()
        });
        if !any {
            errors.push(format!("{path}: {v} matches none of anyOf"));
        }
    }
    if let Some(obj) = v.as_object() {
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap();
            if !obj.contains_key(r) {
                errors.push(format!("{path}: missing {r}"));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, x) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(root, ps, x, &format!("{path}.{k}"), errors),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => errors.push(format!("{path}: unexpected {k}")),
                    Some(extra @ Value::Object(_)) => {
                        validate(root, extra, x, &format!("{path}.{k}"), errors)
                    }
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            validate(root, items, x, &format!("{path}[{i}]"), errors);
        }
    }
}

/// The errors of `doc` against `docs/schema/<kind>.schema.json`.
pub(crate) fn errors_of(kind: &str, doc: &Value) -> Vec<String> {
    let s = schema(kind);
    let mut errors = Vec::new();
    validate(&s, &s, doc, "$", &mut errors);
    errors
}

/// Runs the binary at the repository root; returns its stdout as JSON.
fn json_of(args: &[&str]) -> Value {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(root())
        .output()
        .expect("spawn gemm-audit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?} printed no JSON document ({e}): {stderr}"))
}

#[test]
fn every_command_validates_against_its_schema() {
    let cpu = ["--backend", "cpu"];
    let docs: Vec<(&str, Vec<&str>)> = vec![
        (
            "audit",
            [
                &["audit", "--format", "json", "--no-progress", "--runs", "2"][..],
                &cpu,
            ]
            .concat(),
        ),
        (
            "check",
            [
                &[
                    "check",
                    "traces/cpu-x86_64/m-sweep.gat",
                    "--replay",
                    "--format",
                    "json",
                ][..],
                &cpu,
            ]
            .concat(),
        ),
        (
            "check",
            [
                &[
                    "check",
                    "traces/cpu-x86_64/m-sweep.gat",
                    "--golden",
                    "traces/cpu-x86_64/transformer-block.gat",
                    "--format",
                    "json",
                ][..],
                &cpu,
            ]
            .concat(),
        ),
        (
            "diff",
            vec![
                "diff",
                "traces/cpu-x86_64/transformer-block.gat",
                "traces/nvidia-h200/transformer-block.gat",
                "--format",
                "json",
            ],
        ),
        (
            "compare",
            vec![
                "compare",
                "traces/cpu-x86_64",
                "traces/nvidia-h200",
                "--format",
                "json",
            ],
        ),
        (
            "show",
            vec![
                "show",
                "traces/nvidia-h200/vendor-sweep.gat",
                "--format",
                "json",
            ],
        ),
    ];
    // An imported profile through the verbs that read it, and the two
    // verbs of its own.
    let dir = crate::common::Scratch::new("schema-import");
    let imported = dir.path("sweep.gat");
    let imported = imported.to_str().unwrap();
    let sweep = "tests/data/profiles/cpu-sweep.json.gz";
    let docs = docs.into_iter().chain([
        (
            "import",
            vec![
                "import", sweep, "-o", imported, "--force", "--format", "json",
            ],
        ),
        ("census", vec!["census", sweep, "--format", "json"]),
        ("show", vec!["show", imported, "--format", "json"]),
        ("diff", vec!["diff", imported, imported, "--format", "json"]),
        (
            "check",
            vec!["check", imported, "--golden", imported, "--format", "json"],
        ),
        (
            "compare",
            vec!["compare", imported, imported, "--format", "json"],
        ),
    ]);
    for (kind, args) in docs {
        let doc = json_of(&args);
        let errors = errors_of(kind, &doc);
        assert!(
            errors.is_empty(),
            "{args:?} against {kind}.schema.json:\n{}",
            errors.join("\n")
        );
    }
}

/// `review`, `accept` and `reject` print a `settle` document that
/// validates in every outcome: a candidate with differences, a new
/// golden, an unusable file; pending, refused, rejected and accepted.
#[test]
fn the_settle_documents_validate_in_every_outcome() {
    let s = crate::common::Scratch::new("schema-settle");
    let cpu = s.path("g/cpu-x86_64");
    std::fs::create_dir_all(&cpu).unwrap();
    let golden = root().join("traces/cpu-x86_64/m-sweep.gat");
    std::fs::copy(&golden, cpu.join("m-sweep.gat")).unwrap();
    let pending = |dir: &std::path::Path| {
        let fast = dir.join("m-sweep.gat.pending");
        let out = Command::new(BIN)
            .args([
                "record",
                "m-sweep",
                "--backend",
                "cpu",
                "--fingerprint",
                "fast",
                "-q",
                "-o",
            ])
            .arg(&fast)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::copy(
            root().join("traces/cpu-x86_64/transformer-block.gat"),
            dir.join("transformer-block.gat.pending"),
        )
        .unwrap();
    };
    pending(&cpu);
    std::fs::write(
        cpu.join("short.gat.pending"),
        &std::fs::read(&golden).unwrap()[..64],
    )
    .unwrap();
    let dir = s.path("g");
    let dir = dir.to_str().unwrap();
    let mut outcomes = std::collections::BTreeSet::new();
    let mut check = |args: &[&str]| {
        let doc = json_of(&[args, &["--golden-dir", dir, "--format", "json"]].concat());
        let errors = errors_of("settle", &doc);
        assert!(errors.is_empty(), "{args:?}:\n{}", errors.join("\n"));
        for c in doc["candidates"].as_array().unwrap() {
            outcomes.insert(match &c["outcome"] {
                Value::String(o) => o.clone(),
                other => other.as_object().unwrap().keys().next().unwrap().clone(),
            });
        }
        doc
    };
    let review = check(&["review"]);
    assert_eq!(review["unusable"].as_array().unwrap().len(), 1, "{review}");
    let numeric: Vec<&Value> = review["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["numeric"])
        .collect();
    assert_eq!(numeric, [&json!("modes-differ"), &Value::Null], "{review}");
    check(&["accept", "--expect", "000000000000"]);
    check(&["reject"]);
    pending(&cpu);
    check(&["accept"]);
    assert_eq!(
        outcomes.into_iter().collect::<Vec<_>>(),
        ["accepted", "pending", "refused", "rejected"]
    );
}

/// The schemas refuse what a consumer would trip on: a missing field, a
/// value of another type, an unknown verdict, an extra field where none is
/// allowed.
#[test]
fn the_schemas_refuse_broken_documents() {
    let good = json_of(&[
        "diff",
        "traces/cpu-x86_64/transformer-block.gat",
        "traces/cpu-x86_64/m-sweep.gat",
        "--format",
        "json",
    ]);
    assert!(errors_of("diff", &good).is_empty());
    let broken: [fn(&mut Value); 9] = [
        |d| {
            d.as_object_mut().unwrap().remove("differences");
        },
        |d| d["verdict"] = "maybe".into(),
        |d| d["schema_version"] = 2.into(),
        |d| d["differences"][0]["class"] = "cosmic".into(),
        |d| d["differences"][0]["route_index"] = "zero".into(),
        |d| d["differences"][0]["extra"] = true.into(),
        |d| d["cross_device"] = "no".into(),
        |d| {
            d["summary"].as_object_mut().unwrap().remove("launch");
        },
        |d| d["summary"]["launch"] = json!({"eager_to_graph": "three", "graph_to_eager": 0}),
    ];
    // The check schema's two shapes (one report, or one per device) each
    // keep their required parts.
    let check = json_of(&[
        "check",
        "traces/cpu-x86_64/m-sweep.gat",
        "--backend",
        "cpu",
        "--format",
        "json",
    ]);
    assert!(errors_of("check", &check).is_empty());
    let mut no_plan = check.clone();
    no_plan.as_object_mut().unwrap().remove("plan");
    assert!(
        !errors_of("check", &no_plan).is_empty(),
        "a check without its plan step validated"
    );
    let mut bad_device = serde_json::json!({
        "schema_version": 1, "tool_version": "x", "kind": "check", "verdict": "pass",
        "devices": [{"device": {"backend": "cpu", "ordinal": "zero"}, "report": check.clone()}]
    });
    assert!(
        !errors_of("check", &bad_device).is_empty(),
        "a string ordinal validated"
    );
    bad_device["devices"][0]["device"]["ordinal"] = 0.into();
    assert!(
        errors_of("check", &bad_device).is_empty(),
        "{:?}",
        errors_of("check", &bad_device)
    );
    for (i, b) in broken.iter().enumerate() {
        let mut d = good.clone();
        b(&mut d);
        assert!(
            !errors_of("diff", &d).is_empty(),
            "broken document {i} validated"
        );
    }
}

/// A profile with a graph replay, imported: `import`, `show` and `diff`
/// of a real eager profile against a real replay profile of the same step
/// validate, with each GEMM's `graph` and the summary's `launch`; a GEMM
/// without `graph`, or a summary without `launch`, is refused.
#[test]
fn the_graph_launch_fields_are_in_the_schemas() {
    let dir = crate::common::Scratch::new("schema-graph");
    let new = dir.path("new.gat");
    let new = new.to_str().unwrap();
    let profile = "tests/data/v6/profile-graph-replay.json";
    let import = json_of(&["import", profile, "-o", new, "--format", "json"]);
    let show = json_of(&["show", new, "--format", "json"]);
    let (eager, replay) = (dir.path("eager.gat"), dir.path("replay.gat"));
    let (eager, replay) = (eager.to_str().unwrap(), replay.to_str().unwrap());
    for (name, out) in [("gpu-eager", eager), ("gpu-replay", replay)] {
        let profile = format!("tests/data/profiles/{name}.json.gz");
        json_of(&[
            "import",
            &profile,
            "-o",
            out,
            "--workload",
            "step",
            "--format",
            "json",
        ]);
    }
    let diff = json_of(&["diff", eager, replay, "--format", "json"]);
    for (kind, doc) in [("import", &import), ("show", &show), ("diff", &diff)] {
        let errors = errors_of(kind, doc);
        assert!(errors.is_empty(), "{kind}: {}", errors.join("\n"));
    }
    assert_eq!(
        import["imports"][0]["observation"]["gemms"][1]["graph"],
        "cudaGraphLaunch (no enclosing range)"
    );
    assert_eq!(
        diff["summary"]["launch"],
        json!({"eager_to_graph": 3, "graph_to_eager": 0})
    );
    let mut no_graph = import.clone();
    no_graph["imports"][0]["observation"]["gemms"][0]
        .as_object_mut()
        .unwrap()
        .remove("graph");
    assert!(!errors_of("import", &no_graph).is_empty());
    let mut no_graph = show.clone();
    no_graph["trace"]["observation"]["gemms"][1]
        .as_object_mut()
        .unwrap()
        .remove("graph");
    assert!(!errors_of("show", &no_graph).is_empty());
    let mut bad = show.clone();
    bad["trace"]["observation"]["gemms"][1]["graph"] = 7.into();
    assert!(!errors_of("show", &bad).is_empty());
}

/// A compare document's rows of launches not compared keep their fields:
/// a row without its total, or with a count in words, is refused.
#[test]
fn the_compare_schema_checks_not_compared_rows() {
    let mut doc = json_of(&[
        "compare",
        "traces/cpu-x86_64",
        "traces/nvidia-h200",
        "--format",
        "json",
    ]);
    assert!(errors_of("compare", &doc).is_empty());
    doc["groups"][0]["not_compared"] =
        serde_json::json!([{"label": "rank0.gat", "launches": 2, "of": 8}]);
    assert!(
        errors_of("compare", &doc).is_empty(),
        "{:?}",
        errors_of("compare", &doc)
    );
    let broken: [fn(&mut Value); 3] = [
        |d| {
            d["groups"][0]["not_compared"][0]
                .as_object_mut()
                .unwrap()
                .remove("of");
        },
        |d| d["groups"][0]["not_compared"][0]["launches"] = "two".into(),
        |d| {
            d["groups"][0]
                .as_object_mut()
                .unwrap()
                .remove("not_compared");
        },
    ];
    for (i, b) in broken.iter().enumerate() {
        let mut d = doc.clone();
        b(&mut d);
        assert!(
            !errors_of("compare", &d).is_empty(),
            "broken compare document {i} validated"
        );
    }
}
