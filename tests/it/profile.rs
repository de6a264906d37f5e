//! Importing PyTorch profiler traces: real CPU profiles made with torch
//! (`tests/data/profiles/make_cpu.py`), an H200 profile the recorder took,
//! and crafted profiles for the binding rules and for bad input.

use crate::common::{BIN, Scratch, root};
use gemm_audit::diff::{NumericComparison, TraceDiff};
use gemm_audit::profile::KernelClass::{self, Attention, Convolution, Gemm, GemmReduce, Other};
use gemm_audit::profile::{self, ImportOptions, ProfileError};
use gemm_audit::{DType, FingerprintMode, GemmOp};
use serde_json::{Value, json};
use std::process::Command;

fn data(name: &str) -> std::path::PathBuf {
    root().join("tests/data/profiles").join(name)
}

fn import(name: &str) -> gemm_audit::RecordedGemmTrace {
    profile::import_file(&data(name), &ImportOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .trace
}

/// The profile's JSON, decompressed.
fn json_of(name: &str) -> Value {
    let bytes = profile::read_profile(&data(name), 1 << 30).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// The leaf GEMM ops of a profile, counted from its JSON by name (an
/// `aten::addmv_` under `aten::mv` is the GEMM; `linear` and `matmul`
/// reach theirs through ops of their own).
fn leaf_gemm_ops(v: &Value) -> usize {
    v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "cpu_op")
        .filter(|e| {
            matches!(
                e["name"].as_str().unwrap_or(""),
                "aten::mm" | "aten::addmm" | "aten::bmm" | "aten::baddbmm" | "aten::addmv_"
            )
        })
        .count()
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_cpu_training_step_imports_every_gemm_op_with_its_layout() {
    let t = import("cpu-block.json.gz");
    let v = json_of("cpu-block.json.gz");
    assert_eq!(t.routes.len(), leaf_gemm_ops(&v));
    assert_eq!(t.fingerprint_mode, FingerprintMode::NotObserved);
    assert!(!t.outputs_observed());
    let o = t.observation.as_ref().unwrap();
    assert_eq!(o.source, "pytorch-profiler");
    assert!(
        o.gemms
            .iter()
            .all(|g| g.device == "cpu" && g.shapes_recorded)
    );
    assert_eq!(t.context.device.class, "cpu");
    // The block's first GEMM: nn.Linear(64, 192) on 2 x 8 tokens, its
    // weight stored transposed.
    let qkv = &t.routes[0];
    assert_eq!(qkv.kernel_symbol, "aten::addmm");
    assert_eq!(
        (qkv.op, qkv.dtype, qkv.shape.m, qkv.shape.k, qkv.shape.n),
        (GemmOp::Nt, DType::F32, 16, 64, 192)
    );
    // Backward: dW = x^T g, A stored transposed.
    assert!(
        t.routes
            .iter()
            .any(|r| r.op == GemmOp::Tn && r.shape.m == 64)
    );
    // Attention's batched GEMMs keep their batch.
    let bmm = t
        .routes
        .iter()
        .position(|r| r.kernel_symbol == "aten::bmm")
        .unwrap();
    assert_eq!(o.gemms[bmm].batch, 8, "2 sequences x 4 heads");
    // The trace writes and reads back.
    let s = Scratch::new("cpu-block");
    t.write(&s.path("b.gat"), false).unwrap();
    assert_eq!(
        gemm_audit::RecordedGemmTrace::read(&s.path("b.gat")).unwrap(),
        t
    );
}

#[test]
fn a_compiled_region_is_imported() {
    let v = json_of("cpu-compile.json.gz");
    let names: Vec<&str> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("Torch-Compiled Region")),
        "a torch.compile region"
    );
    let t = import("cpu-compile.json.gz");
    assert_eq!(t.routes.len(), leaf_gemm_ops(&v));
    assert!(t.routes.len() >= 4);
}

#[test]
fn an_import_diffs_against_itself_with_numeric_not_observed() {
    let t = import("cpu-block.json.gz");
    let d = TraceDiff::between(&t, &t);
    assert!(d.is_empty());
    assert_eq!(d.numeric, NumericComparison::NotObserved);
    assert!(d.render().contains("output bits not observed"));
    // On the command line too, and in JSON.
    let s = Scratch::new("diff-self");
    let p = s.path("a.gat");
    t.write(&p, false).unwrap();
    let a = p.to_str().unwrap();
    let (code, text) = run(&["diff", a, a]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("output bits not observed"), "{text}");
    let (_, json) = run(&["diff", a, a, "--format", "json"]);
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["numeric"], "not-observed");
    // check --golden: compared, not validated, numeric not observed.
    let (code, text) = run(&["check", a, "--golden", a]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("observed by pytorch-profiler"), "{text}");
    assert!(text.contains("numeric      not observed"), "{text}");
}

/// A planted kernel change is named per GEMM with both kernels.
#[test]
fn an_upgrade_diff_names_the_gemm_and_both_kernels() {
    let s = Scratch::new("upgrade");
    let before = crafted(&[("aten::mm", &[8, 64], &[64, 32], &["nvjet_a"])]);
    let after = crafted(&[(
        "aten::mm",
        &[8, 64],
        &[64, 32],
        &["nvjet_b", "splitKreduce_kernel"],
    )]);
    let g = import_text(&before, &s, "before.json");
    let c = import_text(&after, &s, "after.json");
    let d = TraceDiff::between(&g, &c);
    let text = d.render();
    assert!(text.contains("aten::mm#0"), "{text}");
    assert!(
        text.contains("nvjet_a") && text.contains("nvjet_b"),
        "{text}"
    );
    assert!(
        d.differences
            .iter()
            .all(|x| x.class != gemm_audit::diff::DiffClass::Numeric),
        "no numeric difference is made up: {text}"
    );
}

#[test]
fn two_ranks_agree_and_a_disagreeing_rank_is_named() {
    let s = Scratch::new("ranks");
    let ranks: Vec<std::path::PathBuf> = std::fs::read_dir(data("cpu-ranks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(ranks.len(), 2);
    let out = s.path("out");
    let mut args = vec!["import".to_string()];
    args.extend(ranks.iter().map(|p| p.display().to_string()));
    args.extend(["-o".into(), out.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, text) = run(&args);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("rank 0 of 2") && text.contains("rank 1 of 2"),
        "{text}"
    );
    let (code, text) = run(&["compare", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("agree") && text.contains("numeric: not observed"),
        "{text}"
    );

    // A third rank whose first GEMM ran with another kernel.
    let mk = |rank: u64, kernel: &str| {
        let mut p = crafted(&[("aten::mm", &[8, 64], &[64, 32], &[kernel])]);
        p["distributedInfo"] = json!({"backend": "nccl", "rank": rank, "world_size": 3});
        p
    };
    let dir = s.path("three");
    std::fs::create_dir_all(&dir).unwrap();
    for (r, k) in [(0, "nvjet_64x8"), (1, "nvjet_64x8"), (2, "nvjet_128x16")] {
        let t = import_text(&mk(r, k), &s, &format!("job-rank{r}.json"));
        assert_eq!(t.workload, "job", "the ranks share a workload");
        t.write(&dir.join(format!("r{r}.gat")), false).unwrap();
    }
    let (code, text) = run(&["compare", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("aten::mm#0: served another way by 1 of 3"),
        "{text}"
    );
    assert!(text.contains("profile.rank=2"), "{text}");
    assert!(text.contains("nvjet_128x16"), "{text}");
}

/// A census of a real sweep: one family, one row per m, no kernel (CPU).
#[test]
fn a_census_of_a_batch_sweep() {
    let t = import("cpu-sweep.json.gz");
    let c = gemm_audit::census::census(&[("sweep".into(), &t)]);
    assert_eq!(c.families.len(), 1);
    let f = &c.families[0];
    assert_eq!((f.k, f.n, f.layout.as_str()), (64, 32, "nt"));
    let ms: Vec<u64> = f.rows.iter().map(|r| r.m).collect();
    assert_eq!(ms, [1, 2, 4, 8, 16, 32, 64]);
    assert!(!f.flagged());
    assert_eq!(
        f.rows[0].served_by[0].kernels,
        [gemm_audit::census::NO_KERNEL]
    );
}

/// A family whose kernel changes with m, or that splits k, is flagged, in
/// every output format, and the command exits 1.
#[test]
fn the_census_flags_kernel_changes_and_split_k() {
    let s = Scratch::new("census");
    let p = crafted(&[
        (
            "aten::mm",
            &[1, 1024],
            &[1024, 1024],
            &["nvjet_64x8_splitK", "splitKreduce_kernel"],
        ),
        ("aten::mm", &[64, 1024], &[1024, 1024], &["nvjet_64x64"]),
        ("aten::mm", &[128, 1024], &[1024, 1024], &["nvjet_64x64"]),
        ("aten::mm", &[128, 512], &[512, 256], &["nvjet_64x64"]),
        ("aten::mm", &[256, 512], &[512, 256], &["nvjet_64x64"]),
    ]);
    let path = s.write("sweep.json", serde_json::to_vec(&p).unwrap());
    let t = import_text(&p, &s, "sweep2.json");
    let c = gemm_audit::census::census(&[("sweep".into(), &t)]);
    let flagged: Vec<_> = c.flagged().collect();
    assert_eq!(flagged.len(), 1);
    assert!(flagged[0].kernel_changes_with_m && flagged[0].split_or_reduce);
    assert_eq!(flagged[0].k, 1024);
    let path = path.to_str().unwrap();
    let (code, text) = run(&["census", path]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("kernel-changes-with-m") && text.contains("split-k"),
        "{text}"
    );
    assert!(
        text.contains("1 families served one way at every m"),
        "{text}"
    );
    let (_, md) = run(&["census", path, "--format", "markdown", "--all"]);
    assert!(
        md.contains("| flags | family |") && md.contains("k=512"),
        "{md}"
    );
    let (_, json) = run(&["census", path, "--format", "json"]);
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["kind"], "census");
    assert_eq!(doc["verdict"], "fail");
    assert_eq!(doc["families"].as_array().unwrap().len(), 2);
}

// ------------------------------------------------------- binding rules

/// One GEMM op for a crafted profile: its name, the dims of A and B and
/// the kernels it launched.
type Op<'a> = (&'a str, &'a [i64], &'a [i64], &'a [&'a str]);

/// A profile of the given ops on one thread, each op launching its
/// kernels through `cudaLaunchKernel` calls inside it, as Kineto writes.
fn crafted(ops: &[Op<'_>]) -> Value {
    let mut events = Vec::new();
    let mut ts = 1000.0;
    let mut corr = 1;
    for (name, a, b, kernels) in ops {
        let dur = 10.0 + 5.0 * kernels.len() as f64;
        events.push(json!({
            "ph": "X", "cat": "cpu_op", "name": name, "pid": 10, "tid": 10,
            "ts": ts, "dur": dur,
            "args": {
                "Input Dims": [a, b],
                "Input Strides": [[a[1], 1], [b[1], 1]],
                "Input type": ["c10::BFloat16", "c10::BFloat16"],
            }
        }));
        for (i, k) in kernels.iter().enumerate() {
            let at = ts + 2.0 + 5.0 * i as f64;
            events.push(json!({
                "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                "pid": 10, "tid": 10, "ts": at, "dur": 3.0,
                "args": {"correlation": corr}
            }));
            events.push(json!({
                "ph": "X", "cat": "kernel", "name": k, "pid": 0, "tid": 7,
                "ts": at + 20.0, "dur": 4.0,
                "args": {"correlation": corr, "device": 0, "grid": [4, 1, 1],
                         "block": [128, 1, 1], "shared memory": 1024}
            }));
            corr += 1;
        }
        ts += dur + 10.0;
    }
    json!({
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132}],
        "cuda_driver_version": 13000,
        "traceEvents": events,
    })
}

fn import_text(v: &Value, s: &Scratch, name: &str) -> gemm_audit::RecordedGemmTrace {
    let p = s.write(name, serde_json::to_vec(v).unwrap());
    profile::import_file(&p, &ImportOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .trace
}

fn import_err(v: &Value) -> ProfileError {
    profile::import_bytes(
        &serde_json::to_vec(v).unwrap(),
        "x.json",
        &ImportOptions::default(),
    )
    .unwrap_err()
}

#[test]
fn a_split_k_gemm_and_its_reduce_are_one_gemm_and_a_copy_stays_beside() {
    let mut p = crafted(&[(
        "aten::addmm",
        &[8, 64],
        &[64, 32],
        &["nvjet_splitK_NNT", "splitKreduce_kernel"],
    )]);
    // addmm with a full C copies it first, from a child op.
    let ev = p["traceEvents"].as_array_mut().unwrap();
    ev[0]["args"]["Input Dims"] = json!([[8, 32], [8, 64], [64, 32]]);
    ev[0]["args"]["Input Strides"] = json!([[32, 1], [64, 1], [32, 1]]);
    ev[0]["args"]["Input type"] = json!(["float", "float", "float"]);
    ev.push(
        json!({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 10, "tid": 10,
                   "ts": 1001.0, "dur": 0.8, "args": {}}),
    );
    ev.push(
        json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 10,
                   "tid": 10, "ts": 1001.2, "dur": 0.5, "args": {"correlation": 99}}),
    );
    ev.push(
        json!({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)",
                   "pid": 0, "tid": 7, "ts": 1010.0, "dur": 1.0,
                   "args": {"correlation": 99, "device": 0}}),
    );
    let s = Scratch::new("split");
    let t = import_text(&p, &s, "split.json");
    assert_eq!(t.routes.len(), 1);
    let r = &t.routes[0];
    assert_eq!(
        r.vendor.as_ref().unwrap().physical_kernels,
        ["nvjet_splitK_NNT", "splitKreduce_kernel"]
    );
    assert_eq!(
        r.launch.grid,
        [4, 1, 1],
        "the launch is the first kernel's, not the copy's"
    );
    let o = t.observation.as_ref().unwrap();
    assert_eq!((o.bound_kernels, o.beside_gemms), (2, 1));
    assert_eq!(
        o.gemms[0].beside,
        ["memcpy: Memcpy DtoD (Device -> Device)"]
    );
    assert_eq!(o.gemms[0].device, "cuda:0");
    assert_eq!(t.context.device.class, "NVIDIA H200");
    assert_eq!(t.context.device.compute_capability, Some([9, 0]));
}

/// Kernels launched from the backward thread bind to the op on that
/// thread; a GEMM kernel no GEMM op owns is a GEMM of its region; a kernel
/// whose launch is missing is listed, a non-GEMM kernel counted.
#[test]
fn every_activity_is_bound_kept_counted_or_listed() {
    let mut p = crafted(&[("aten::mm", &[8, 64], &[64, 32], &["nvjet_fwd"])]);
    let ev = p["traceEvents"].as_array_mut().unwrap();
    let mut add = |v: Value| ev.push(v);
    // Backward thread 11: its own mm.
    add(
        json!({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11,
               "ts": 1005.0, "dur": 10.0, "args": {"Input Dims": [[64, 8], [8, 32]],
               "Input Strides": [[1, 64], [32, 1]], "Input type": ["float", "float"]}}),
    );
    add(
        json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10,
               "tid": 11, "ts": 1007.0, "dur": 2.0, "args": {"correlation": 50}}),
    );
    add(
        json!({"ph": "X", "cat": "kernel", "name": "nvjet_bwd", "pid": 0, "tid": 7,
               "ts": 1030.0, "dur": 2.0, "args": {"correlation": 50, "device": 0}}),
    );
    // A compiled region launching a Triton template and a pointwise kernel.
    add(
        json!({"ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "pid": 10, "tid": 10,
               "ts": 2000.0, "dur": 50.0, "args": {}}),
    );
    for (c, name, at) in [
        (60, "triton_tem_fused_mm_0", 2001.0),
        (61, "triton_poi_fused_gelu_1", 2010.0),
    ] {
        add(
            json!({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 10,
                   "tid": 10, "ts": at, "dur": 2.0, "args": {"correlation": c}}),
        );
        add(
            json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                   "ts": at + 100.0, "dur": 2.0, "args": {"correlation": c, "device": 0}}),
        );
    }
    // A graph replay's GEMM kernel.
    add(
        json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 10,
               "tid": 10, "ts": 3000.0, "dur": 5.0, "args": {"correlation": 70}}),
    );
    add(
        json!({"ph": "X", "cat": "kernel", "name": "nvjet_graph", "pid": 0, "tid": 7,
               "ts": 3010.0, "dur": 2.0, "args": {"correlation": 70, "device": 0}}),
    );
    // A kernel whose launch is outside the profile.
    add(
        json!({"ph": "X", "cat": "kernel", "name": "lost_kernel", "pid": 0, "tid": 7,
               "ts": 4000.0, "dur": 2.0, "args": {"correlation": 999, "device": 0}}),
    );
    let s = Scratch::new("activities");
    let t = import_text(&p, &s, "acts.json");
    let o = t.observation.as_ref().unwrap();
    let names: Vec<&str> = t.routes.iter().map(|r| r.gemm.as_str()).collect();
    assert_eq!(
        names,
        [
            "aten::mm#0",
            "aten::mm#1",
            "CompiledFunction#0",
            "cudaGraphLaunch (no enclosing range)#0"
        ]
    );
    let bwd = &t.routes[1];
    assert_eq!((bwd.op, bwd.shape.m), (GemmOp::Tn, 64));
    assert_eq!(bwd.vendor.as_ref().unwrap().physical_kernels, ["nvjet_bwd"]);
    assert_eq!(o.gemms[2].region.as_deref(), Some("CompiledFunction"));
    // Only the graph launch's GEMM was replayed from a graph: not the
    // ops' GEMMs, not the compiled region's template.
    let graphs: Vec<Option<&str>> = o.gemms.iter().map(|g| g.graph.as_deref()).collect();
    assert_eq!(
        graphs,
        [
            None,
            None,
            None,
            Some("cudaGraphLaunch (no enclosing range)")
        ]
    );
    assert!(!o.gemms[2].shapes_recorded);
    assert_eq!(t.routes[2].dtype, DType::Unrecorded);
    assert_eq!(
        (
            o.bound_kernels,
            o.unowned_gemm_kernels,
            o.non_gemm,
            o.unbound
        ),
        (2, 2, 1, 1)
    );
    assert!(o.unbound_listed[0].contains("lost_kernel"));
    assert!(o.unbound_listed[0].contains("correlation 999 has no launching call"));
}

/// A list-form Chrome trace (no `traceEvents` object) imports the same.
#[test]
fn a_list_form_trace_imports() {
    let p = crafted(&[("aten::mm", &[8, 64], &[64, 32], &["k"])]);
    let list = p["traceEvents"].clone();
    let t = profile::import_bytes(
        &serde_json::to_vec(&list).unwrap(),
        "list.json",
        &ImportOptions::default(),
    )
    .unwrap()
    .trace;
    assert_eq!(t.routes.len(), 1);
    assert_eq!(
        t.context.device.class, "unrecorded GPU",
        "no deviceProperties"
    );
}

/// A profile without shapes imports, and says which ops have none.
#[test]
fn ops_without_shapes_are_said() {
    let mut p = crafted(&[("aten::mm", &[8, 64], &[64, 32], &["k"])]);
    p["traceEvents"][0]["args"] = json!({});
    let t = profile::import_bytes(
        &serde_json::to_vec(&p).unwrap(),
        "x.json",
        &ImportOptions::default(),
    )
    .unwrap()
    .trace;
    let o = t.observation.as_ref().unwrap();
    assert!(!o.gemms[0].shapes_recorded);
    assert_eq!(
        (t.routes[0].op, t.routes[0].dtype),
        (GemmOp::Unrecorded, DType::Unrecorded)
    );
    assert!(
        o.notes[0].contains("1 of 1 GEMM ops have no recorded shapes"),
        "{:?}",
        o.notes
    );
}

/// A kernel name longer than any reader accepts is cut and keeps its
/// digest; the trace writes and reads back.
#[test]
fn a_huge_kernel_name_is_bounded() {
    let long = format!("k{}", "x".repeat(100_000));
    let p = crafted(&[("aten::mm", &[8, 64], &[64, 32], &[long.as_str()])]);
    let s = Scratch::new("huge");
    let t = import_text(&p, &s, "huge.json");
    let k = &t.routes[0].vendor.as_ref().unwrap().physical_kernels[0];
    assert!(
        k.len() <= gemm_audit::observed::MAX_KEPT_NAME_BYTES,
        "{}",
        k.len()
    );
    assert!(k.contains("100001 bytes, sha256"));
    t.write(&s.path("h.gat"), false).unwrap();
    assert!(gemm_audit::RecordedGemmTrace::read(&s.path("h.gat")).is_ok());
}

// ------------------------------------------------------------ bad input

#[test]
fn bad_profiles_are_clear_errors_and_nothing_is_written() {
    let s = Scratch::new("bad");
    let good = serde_json::to_vec(&crafted(&[("aten::mm", &[8, 64], &[64, 32], &["k"])])).unwrap();
    // Truncated gzip (compressed by the system's gzip).
    let plain = s.write("plain.json", &good);
    let gz = Command::new("gzip")
        .arg("-c")
        .arg(&plain)
        .output()
        .unwrap()
        .stdout;
    assert!(gz.len() > 20);
    let cut = s.write("cut.json.gz", &gz[..gz.len() / 2]);
    let cases: Vec<(std::path::PathBuf, &str)> = vec![
        (cut, "not a readable gzip stream"),
        (
            s.write("text.json", "hello"),
            "not valid JSON at line 1 column 1",
        ),
        (
            s.write("obj.json", r#"{"a": 1}"#),
            "no \"traceEvents\" list",
        ),
        (
            s.write(
                "nan.json",
                r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": NaN}]}"#,
            ),
            "trace event 0",
        ),
        (s.write("empty.json", ""), "not valid JSON"),
        (
            s.write(
                "already.gat",
                std::fs::read(
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("traces/cpu-x86_64/m-sweep.gat"),
                )
                .unwrap(),
            ),
            "not a PyTorch profiler trace: it is a gemm-audit trace already",
        ),
    ];
    for (path, want) in cases {
        let out = s.path("out.gat");
        let (code, text) = run(&[
            "import",
            path.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, 3, "{}: {text}", path.display());
        assert!(text.contains(want), "{}: {text}", path.display());
        assert!(
            text.contains(path.to_str().unwrap()),
            "names the file: {text}"
        );
        assert!(!out.exists(), "nothing written for {}", path.display());
    }
    // A profile that imports is not written over an existing file.
    let ok = s.write("ok.json", &good);
    let out = s.write("exists.gat", b"keep");
    let (code, text) = run(&["import", ok.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("--force"), "{text}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep");
}

#[test]
fn bad_events_name_the_event_and_field() {
    let base = || crafted(&[("aten::mm", &[8, 64], &[64, 32], &["k"])]);
    let with = |edit: &dyn Fn(&mut Vec<Value>)| {
        let mut p = base();
        edit(p["traceEvents"].as_array_mut().unwrap());
        import_err(&p).to_string()
    };
    let e = with(&|ev| {
        ev[0].as_object_mut().unwrap().remove("ts");
    });
    assert!(
        e.contains("trace event 0 (\"aten::mm\"): ts missing"),
        "{e}"
    );
    let e = with(&|ev| ev[0]["ts"] = json!(-5.0));
    assert!(e.contains("ts -5 is not a time"), "{e}");
    let e = with(&|ev| ev[0]["dur"] = json!("long"));
    assert!(
        e.contains("not a PyTorch profiler trace: line 1 column")
            && e.contains("trace event 0: field `dur`: invalid type: string \"long\""),
        "{e}"
    );
    let e = with(&|ev| {
        ev[2].as_object_mut().unwrap().remove("tid");
    });
    assert!(e.contains("trace event 2 (\"k\"): tid missing"), "{e}");
    // Two launching calls with one correlation id.
    let e = with(&|ev| {
        let mut dup = ev[1].clone();
        dup["ts"] = json!(1004.0);
        ev.push(dup);
    });
    assert!(
        e.contains("correlation id 1 is used by two launching calls"),
        "{e}"
    );
    // A child that outlives its GEMM op, with a launch after the op's end.
    let e = with(&|ev| {
        ev.push(
            json!({"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 10,
                       "tid": 10, "ts": 1010.0, "dur": 50.0, "args": {}}),
        );
        ev.push(
            json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": 10, "tid": 10, "ts": 1040.0, "dur": 1.0,
                       "args": {"correlation": 77}}),
        );
        ev.push(
            json!({"ph": "X", "cat": "kernel", "name": "copy_kernel", "pid": 0,
                       "tid": 7, "ts": 1050.0, "dur": 1.0, "args": {"correlation": 77}}),
        );
    });
    assert!(e.contains("ranges overlap without nesting"), "{e}");
    assert!(e.contains("aten::copy_") && e.contains("aten::mm"), "{e}");
    // Duplicate keys in one event.
    let text = r#"{"traceEvents": [{"ph": "X", "ph": "X"}]}"#;
    let e = profile::import_bytes(text.as_bytes(), "d.json", &ImportOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("duplicate field `ph`"), "{e}");
}

/// A million events parse; a limit on events is a clear error.
#[test]
fn a_million_events_and_the_event_limit() {
    let mut text = String::with_capacity(4_000_000);
    text.push_str(r#"{"traceEvents": ["#);
    for i in 0..1_000_000 {
        if i > 0 {
            text.push(',');
        }
        text.push_str("{}");
    }
    text.push_str("]}");
    let e =
        profile::import_bytes(text.as_bytes(), "many.json", &ImportOptions::default()).unwrap_err();
    assert!(
        matches!(
            e,
            ProfileError::NoGemm {
                events: 1_000_000,
                ..
            }
        ),
        "{e}"
    );
    let small = ImportOptions {
        max_events: 1000,
        ..ImportOptions::default()
    };
    let e = profile::import_bytes(text.as_bytes(), "many.json", &small).unwrap_err();
    assert_eq!(e.to_string(), "more events than the limit of 1000");
}

#[test]
fn default_workload_names_drop_extensions_timestamps_and_ranks() {
    use gemm_audit::profile::default_workload;
    assert_eq!(default_workload("decode.json"), "decode");
    assert_eq!(
        default_workload("rank0.1796449539495703404.pt.trace.json.gz"),
        "profile"
    );
    assert_eq!(default_workload("job-rank3.json.gz"), "job");
    assert_eq!(default_workload("train_rank_12_step.json"), "train-step");
    assert_eq!(default_workload("ranking.json"), "ranking");
}

/// The Python recorder's binding (`bind_annotated`): a GEMM op the dispatch
/// mode saw (inside its `gemm_audit:<i>` range) is bound to its index; GEMM
/// kernels of a CUDA-graph replay inside a compiled function, and a Triton
/// matmul template of a compiled region, which no dispatched op launched,
/// are GEMMs of their regions, in launch order, each with its kernel; a
/// pointwise kernel is other work.
#[test]
fn the_recorder_binding_keeps_graph_replay_and_compiled_region_gemms() {
    let mut p = crafted(&[]);
    let ev = p["traceEvents"].as_array_mut().unwrap();
    let mut add = |v: Value| ev.push(v);
    let launch = |corr: i64, at: f64, api: &str| {
        json!({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": 10, "tid": 10,
               "ts": at, "dur": 2.0, "args": {"correlation": corr}})
    };
    let kernel = |corr: i64, at: f64, name: &str| {
        json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": at,
               "dur": 2.0, "args": {"correlation": corr, "device": 0, "grid": [8, 1, 1],
               "block": [256, 1, 1], "shared memory": 0}})
    };
    // The recorder's range 0 around an eager aten::mm.
    add(
        json!({"ph": "X", "cat": "user_annotation", "name": "gemm_audit:0", "pid": 10,
               "tid": 10, "ts": 100.0, "dur": 20.0, "args": {}}),
    );
    add(
        json!({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10,
               "ts": 101.0, "dur": 18.0, "args": {}}),
    );
    add(launch(1, 102.0, "cudaLaunchKernel"));
    add(kernel(1, 150.0, "nvjet_eager"));
    // A compiled function replaying a CUDA graph: two GEMM kernels and a
    // pointwise one, all correlated to the one graph launch.
    add(
        json!({"ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "pid": 10,
               "tid": 10, "ts": 200.0, "dur": 50.0, "args": {}}),
    );
    add(launch(2, 210.0, "cudaGraphLaunch"));
    add(kernel(2, 300.0, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"));
    add(kernel(2, 303.0, "triton_poi_fused_gelu_0"));
    add(kernel(
        2,
        306.0,
        "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT",
    ));
    // A compiled region launching a Triton matmul template directly.
    add(
        json!({"ph": "X", "cat": "cpu_op", "name": "Torch-Compiled Region: 0/0", "pid": 10,
               "tid": 10, "ts": 400.0, "dur": 20.0, "args": {}}),
    );
    add(launch(3, 405.0, "cuLaunchKernel"));
    add(kernel(3, 450.0, "triton_tem_fused_mm_1"));
    let b = profile::bind_annotated(&serde_json::to_vec(&p).unwrap(), "gemm_audit:").unwrap();
    assert_eq!(b.gemms.len(), 1);
    assert_eq!(b.gemms[&0].kernels[0].name, "nvjet_eager");
    let regions: Vec<(&str, &str)> = b
        .regions
        .iter()
        .map(|r| (r.label.as_str(), r.launch.kernels[0].name.as_str()))
        .collect();
    assert_eq!(
        regions,
        [
            (
                "cudaGraphLaunch in CompiledFunction",
                "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"
            ),
            (
                "cudaGraphLaunch in CompiledFunction",
                "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT"
            ),
            ("Torch-Compiled Region: 0/0", "triton_tem_fused_mm_1"),
        ]
    );
    assert!(b.regions.iter().all(|r| r.launch.device == Some(0)));
    assert_eq!(b.other_kernels, ["triton_poi_fused_gelu_0"]);
}

// ------------------------------------------------------- the kernel rule

/// A CUTLASS GEMM, demangled.
const CUTLASS_GEMM: &str = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_32x3_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_32x3_tn_align8::Params)";
/// cuBLASLt's split-K reduce kernel, demangled.
const SPLIT_K_REDUCE: &str = "void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, false, true, false, false>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, void*, long, float*, int*)";

/// Kernel names as cuBLAS, cuBLASLt, CUTLASS, cuDNN, Triton, flash
/// attention, ATen, NCCL, FBGEMM and rocBLAS name their kernels in
/// PyTorch profiles, each with the class the rule must give it. Written
/// for these tests from the libraries' naming schemes; the order matters
/// where a reduce kernel follows the split-K GEMM it joins.
const KERNEL_NAMES: &[(&str, KernelClass)] = &[
    // cuBLAS.
    (
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
        Gemm,
    ),
    (
        "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_nn",
        Gemm,
    ),
    (
        "ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn",
        Gemm,
    ),
    ("ampere_sgemm_128x64_tn", Gemm),
    ("volta_sgemm_64x32_sliced1x4_nt", Gemm),
    (
        "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
        Gemm,
    ),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cgasize1x2x1_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        Gemm,
    ),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)",
        Gemm,
    ),
    (
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
        Gemm,
    ),
    ("ampere_gcgemm_32x32_nt", Gemm),
    // cuBLASLt: a split-K GEMM and the reduce kernel that joins it.
    ("nvjet_tst_192x192_64x4_1x2_h_bz_coopB_NTN", Gemm),
    ("nvjet_tst_128x128_64x4_2x1_v_bz_splitK_TNT", Gemm),
    (SPLIT_K_REDUCE, GemmReduce),
    ("nvjet_hsh_64x64_64x6_2x1_v_bz_TNN", Gemm),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", Gemm),
    // CUTLASS GEMMs, one of them mangled.
    (CUTLASS_GEMM, Gemm),
    (
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8::Params)",
        Gemm,
    ),
    (
        "_ZN7cutlass6KernelI66cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x3_tn_align8EEvNT_6ParamsE",
        Gemm,
    ),
    (
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecialized>, cute::tuple<cute::C<128>, cute::C<128>, cute::C<64> >, cutlass::bfloat16_t, cutlass::bfloat16_t>, cutlass::epilogue::collective::DefaultEpilogue<float>, void> >(cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, void>::Params)",
        Gemm,
    ),
    // Triton: templates are GEMMs, pointwise and reductions are not.
    ("triton_tem_fused_mm_0", Gemm),
    ("triton_tem_fused_addmm_relu_3", Gemm),
    ("triton_poi_fused_native_layer_norm_1", Other),
    ("triton_red_fused__softmax_2", Other),
    ("triton_per_fused_sum_4", Other),
    // Attention, even where CUTLASS types fill the template arguments.
    (
        "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(Flash_fwd_params)",
        Attention,
    ),
    (
        "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 2, false, false, cutlass::half_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::half_t> >, false, false, false, false, false, true, false>(Flash_bwd_params)",
        Attention,
    ),
    (
        "_ZN5flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi128ELi64ELi64ELi4ELb0ELb0EN7cutlass10bfloat16_tEELb1ELb0ELb0EEEv16Flash_fwd_params",
        Attention,
    ),
    (
        "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
        Attention,
    ),
    (
        "void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::half_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::half_t> >, false, false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)",
        Attention,
    ),
    // cuDNN convolutions, implicit-GEMM and split-K ones among them.
    (
        "cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1",
        Convolution,
    ),
    (
        "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1",
        Convolution,
    ),
    (
        "cudnn_infer_ampere_scudnn_128x32_relu_small_nn_v1",
        Convolution,
    ),
    (
        "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel",
        Convolution,
    ),
    (
        "sm80_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x32_stage5_warpsize2x2x1_g1_tensor16x8x16_kernel",
        Convolution,
    ),
    (
        "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)",
        Convolution,
    ),
    (
        "void cudnn::winograd_nonfused::winogradForwardFilter4x4<float, float>(cudnn::winograd_nonfused::WinogradFilterParams<float, float>)",
        Convolution,
    ),
    (
        "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_16x4_nhwc_align4>(cutlass_tensorop_s1688fprop_optimized_tf32_128x128_16x4_nhwc_align4::Params)",
        Convolution,
    ),
    // CUTLASS's own convolution: GEMM marks everywhere, still a convolution.
    (
        "void cutlass::Kernel<cutlass::conv::kernel::ImplicitGemmConvolution<cutlass::conv::threadblock::ImplicitGemmMultistage<cutlass::gemm::GemmShape<128, 128, 32>, cutlass::conv::threadblock::Conv2dFpropActivationTileAccessIteratorOptimized<cutlass::MatrixShape<128, 32>, cutlass::half_t>, cutlass::gemm::GemmShape<64, 64, 32>, 3>, cutlass::epilogue::threadblock::Epilogue<cutlass::gemm::GemmShape<128, 128, 32>, float>, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<1>, (cutlass::conv::Operator)0, cutlass::conv::Conv2dProblemSize, (cutlass::conv::GroupMode)0> >(cutlass::conv::kernel::ImplicitGemmConvolution<cutlass::conv::threadblock::ImplicitGemmMultistage<cutlass::gemm::GemmShape<128, 128, 32>, float>, float>::Params)",
        Convolution,
    ),
    // cuDNN's other work: layouts, batch norm, FFT transforms.
    (
        "void cudnn::ops::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, (cudnnKernelDataType_t)0>(cudnn::ops::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, __nv_bfloat16*)",
        Other,
    ),
    (
        "void cudnn::bn_bw_1C11_singleread<float, 512, true, 1, 2, 0>(float, float, float, float, cudnnTensorStruct, float const*, cudnn::reduced_divisor, int)",
        Other,
    ),
    (
        "void fft2d_r2c_32x32<float, false, 1u, true>(float2*, float const*, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)",
        Other,
    ),
    // ATen's elementwise and reduction kernels, one of them mangled.
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)",
        Other,
    ),
    (
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
        Other,
    ),
    (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})",
        Other,
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)",
        Other,
    ),
    (
        "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
        Other,
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
        Other,
    ),
    (
        "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)",
        Other,
    ),
    // NCCL collectives.
    (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        Other,
    ),
    (
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        Other,
    ),
    (
        "ncclKernel_ReduceScatter_RING_SIMPLE_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        Other,
    ),
    // FBGEMM: its name holds `gemm`, its embedding kernels are no GEMMs.
    (
        "void split_embedding_codegen_forward_weighted_small_kernel<c10::Half, c10::Half, long, 4ul>(at::GenericPackedTensorAccessor<c10::Half, 1ul, at::RestrictPtrTraits, long>, at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>, fbgemm_gpu::FixedDivisor, at::GenericPackedTensorAccessor<c10::Half, 2ul, at::RestrictPtrTraits, int>)",
        Other,
    ),
    (
        "void fbgemm_gpu::batch_index_select_dim0_codegen_forward_small_kernel<float, float, long, 2ul>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>, fbgemm_gpu::FixedDivisor)",
        Other,
    ),
    (
        "_ZN10fbgemm_gpu38_float_to_fused8bitrowwise_cuda_kernelIfEEvPKT_iiPh",
        Other,
    ),
    // rocBLAS's Tensile, a name past the short names' length.
    (
        "Cijk_Alik_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB1_AMAS3_BL1_BS1_DTL0_EPS1_GLVWA8_GLVWB8_GRVW8_GSU1_ISA90a_IU1_K1_KLA_LBSPP128_LPA0_LPB8_LDL1_LRVW16_MIAV0_MDA2_NLCA1_NLCB1_PGR1_PLR1_SIA3_SS1_SU32_SUS128_SVW4_TT4_64_TLDS1_VW4_WG32_4_1_WGM8",
        Gemm,
    ),
];

/// The names of [`KERNEL_NAMES`].
fn kernel_names() -> Vec<&'static str> {
    KERNEL_NAMES.iter().map(|(n, _)| *n).collect()
}

/// A profile whose one `CompiledFunction` range launches each of `names`
/// in turn: no GEMM op owns any of them.
fn region_profile(names: &[&str]) -> Value {
    let mut events = vec![json!({
        "ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "pid": 10, "tid": 10,
        "ts": 1000.0, "dur": 10.0 * names.len() as f64 + 10.0, "args": {}
    })];
    for (i, n) in names.iter().enumerate() {
        let at = 1001.0 + 10.0 * i as f64;
        events.push(json!({
            "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10,
            "tid": 10, "ts": at, "dur": 2.0, "args": {"correlation": i + 1}
        }));
        events.push(json!({
            "ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": at + 5.0,
            "dur": 2.0, "args": {"correlation": i + 1, "device": 0, "grid": [1, 1, 1]}
        }));
    }
    json!({"traceEvents": events})
}

#[test]
fn every_listed_kernel_name_has_the_class_the_rule_must_give_it() {
    for (name, class) in KERNEL_NAMES {
        assert_eq!(KernelClass::of(name), *class, "{name}");
    }
    // The two cuDNN kernels of a V100 training step that a substring once
    // split (one a GEMM for its `splitK`, one other work).
    assert_eq!(
        KernelClass::of("cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1"),
        KernelClass::of("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1")
    );
}

#[test]
fn import_census_and_the_kernel_rule_agree_on_every_listed_kernel_name() {
    let names = kernel_names();
    // What the rule alone says the import must find: a region GEMM per
    // GEMM-family kernel (a reduce kernel joining the one before), the
    // convolutions and the other kernels counted.
    let mut gemms: Vec<Vec<String>> = Vec::new();
    let (mut convolutions, mut other) = (0u64, 0u64);
    for n in &names {
        let kept = gemm_audit::observed::bounded_name(n).into_owned();
        match KernelClass::of(n) {
            GemmReduce if !gemms.is_empty() => gemms.last_mut().unwrap().push(kept),
            c if c.is_gemm_family() => gemms.push(vec![kept]),
            Convolution => convolutions += 1,
            _ => other += 1,
        }
    }
    // Every class is there, and a reduce joins a GEMM.
    assert!(convolutions >= 8 && other >= 15 && gemms.len() >= 20);
    assert!(gemms.iter().any(|g| g.len() == 2));
    let p = region_profile(&names);
    let imported = profile::import_bytes(
        &serde_json::to_vec(&p).unwrap(),
        "listed.json",
        &ImportOptions::default(),
    )
    .unwrap();
    let t = &imported.trace;
    let o = t.observation.as_ref().unwrap();
    let found: Vec<Vec<String>> = t
        .routes
        .iter()
        .map(|r| r.vendor.as_ref().unwrap().physical_kernels.clone())
        .collect();
    assert_eq!(found, gemms);
    assert_eq!(imported.convolution_kernels, convolutions);
    assert_eq!(o.non_gemm, other);
    assert_eq!(
        o.unowned_gemm_kernels,
        gemms.iter().map(|g| g.len() as u64).sum::<u64>()
    );
    let note = format!("{convolutions} convolution kernels");
    assert!(
        o.notes.iter().any(|n| n.starts_with(&note)),
        "{:?}",
        o.notes
    );

    // The census reads the same kernels the same way: no convolution
    // among its GEMMs, and split-K exactly where the rule says.
    let c = gemm_audit::census::census(&[("listed".into(), t)]);
    assert_eq!(c.gemms, gemms.len() as u64);
    let mut split = 0;
    for u in &c.unshaped {
        let kernels: Vec<&String> = u.served_by.iter().flat_map(|s| &s.kernels).collect();
        assert!(
            kernels.iter().all(|k| KernelClass::of(k).is_gemm_family()),
            "{kernels:?}"
        );
        assert_eq!(
            u.split_or_reduce,
            kernels.iter().any(|k| profile::splits_k(k))
        );
        split += usize::from(u.split_or_reduce);
    }
    assert!(split > 0, "some family is split-K");
}

/// An AlexNet-like step on an A100: convolutions through cuDNN (one by
/// its FFT algorithm, whose complex GEMM is cuBLAS's), a pooling, and a
/// classifier GEMM through cuBLAS.
fn a100_convolution_profile() -> Value {
    let layout = "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)";
    let fprop = "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_kernel";
    let scudnn = "cudnn_infer_ampere_scudnn_128x64_relu_interior_nn_v1";
    let r2c = "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)";
    let c2r = "void fft2d_c2r_32x32<float, false, false, 0u, false, false>(float*, float2 const*, int, int, int, int, int, int, int, int, int, float, float, cudnn::reduced_divisor, bool, float*, float*, int2, int, int)";
    let winograd = "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)";
    let relu = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)";
    let pool = "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, long, int, int, int, int, int, int, int, int, int, int, float*, long*)";
    crafted(&[
        (
            "aten::cudnn_convolution",
            &[128, 3, 224, 224],
            &[64, 3, 11, 11],
            &[layout, fprop, scudnn],
        ),
        ("aten::relu_", &[128, 64], &[1, 1], &[relu]),
        (
            "aten::max_pool2d_with_indices",
            &[128, 64],
            &[1, 1],
            &[pool],
        ),
        (
            "aten::cudnn_convolution",
            &[128, 64, 27, 27],
            &[192, 64, 5, 5],
            &[r2c, r2c, "ampere_gcgemm_64x64_nt", c2r],
        ),
        (
            "aten::cudnn_convolution",
            &[128, 192, 13, 13],
            &[384, 192, 3, 3],
            &[winograd, scudnn, "ampere_gcgemm_64x64_nt"],
        ),
        (
            "aten::mm",
            &[128, 9216],
            &[9216, 4096],
            &["ampere_sgemm_128x64_tn"],
        ),
    ])
}

#[test]
fn an_a100_convolution_profile_counts_its_cudnn_convolutions_apart() {
    let s = Scratch::new("a100-conv");
    let p = a100_convolution_profile();
    let path = s.write("a100.json", serde_json::to_vec(&p).unwrap());
    let imported = profile::import_file(&path, &ImportOptions::default()).unwrap();
    // fprop and scudnn, then winograd and scudnn.
    assert_eq!(imported.convolution_kernels, 4);
    let t = &imported.trace;
    for r in &t.routes {
        for k in &r.vendor.as_ref().unwrap().physical_kernels {
            assert_ne!(KernelClass::of(k), Convolution, "{k}");
        }
    }
    // Three GEMMs: the classifier's, shaped by its op, and the complex
    // GEMMs two convolutions ran, GEMMs by their name, of their
    // convolution's region.
    assert_eq!(t.routes.len(), 3);
    let o = t.observation.as_ref().unwrap();
    let mm: Vec<_> = t
        .routes
        .iter()
        .filter(|r| r.kernel_symbol == "aten::mm")
        .collect();
    assert_eq!(mm.len(), 1);
    assert_eq!(
        (mm[0].shape.m, mm[0].shape.k, mm[0].shape.n),
        (128, 9216, 4096)
    );
    assert_eq!(
        mm[0].vendor.as_ref().unwrap().physical_kernels,
        ["ampere_sgemm_128x64_tn"]
    );
    let regions: Vec<(&str, &Vec<String>)> = t
        .routes
        .iter()
        .zip(&o.gemms)
        .filter_map(|(r, g)| Some((g.region.as_deref()?, &r.vendor.as_ref()?.physical_kernels)))
        .collect();
    let gcgemm = vec!["ampere_gcgemm_64x64_nt".to_string()];
    assert_eq!(
        regions,
        [
            ("aten::cudnn_convolution", &gcgemm),
            ("aten::cudnn_convolution", &gcgemm)
        ]
    );
    assert_eq!(o.unowned_gemm_kernels, 2);
    // Other work: the layout change, two FFT forward and one inverse
    // transform, the ReLU and the pooling.
    assert_eq!(o.non_gemm, 6);
    // The command line says how many.
    let (code, text) = run(&[
        "import",
        path.to_str().unwrap(),
        "-o",
        s.path("a.gat").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("4 convolution kernels"), "{text}");
}

// ------------------------------------------------------- kernel names

#[test]
fn tables_print_short_kernel_names_and_json_keeps_them_whole_with_digests() {
    // A CUTLASS GEMM and cuBLASLt's split-K reduce, demangled.
    let (gemm, reduce) = (CUTLASS_GEMM, SPLIT_K_REDUCE);
    let short_gemm =
        "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x256_32x3_tn_align8>";
    let short_reduce = "cublasLt::splitKreduce_kernel<...>";
    let s = Scratch::new("short-names");
    let p = crafted(&[
        ("aten::mm", &[1, 1024], &[1024, 1024], &[gemm, reduce]),
        ("aten::mm", &[64, 1024], &[1024, 1024], &[gemm]),
    ]);
    let path = s.write("sweep.json", serde_json::to_vec(&p).unwrap());
    let path = path.to_str().unwrap();

    let (code, table) = run(&["census", path]);
    assert_eq!(code, 1, "{table}");
    assert!(
        table.contains(&format!("{short_gemm} + {short_reduce} [grid 4x1x1]")),
        "{table}"
    );
    assert!(
        !table.contains("cublasSplitKParams") && !table.contains("void "),
        "{table}"
    );
    let (_, md) = run(&["census", path, "--format", "markdown"]);
    assert!(md.contains("cublasLt::splitKreduce"), "{md}");
    assert!(!md.contains("cublasSplitKParams"), "{md}");
    let (_, json) = run(&["census", path, "--format", "json"]);
    let doc: Value = serde_json::from_str(&json).unwrap();
    let served = &doc["families"][0]["rows"][0]["served_by"][0];
    assert_eq!(served["kernels"], json!([gemm, reduce]));
    let sha = |n: &str| gemm_audit::Digest::sha256(n.as_bytes()).to_hex();
    assert_eq!(served["kernel_digests"], json!([sha(gemm), sha(reduce)]));

    let gat = s.path("sweep.gat");
    let gat = gat.to_str().unwrap();
    let (code, out) = run(&["import", path, "-o", gat]);
    assert_eq!(code, 0, "{out}");
    let (_, show) = run(&["show", gat]);
    assert!(show.contains(&format!("{short_gemm} (+1 more)")), "{show}");
    assert!(!show.contains("::Params)"), "{show}");
    let (_, json) = run(&["show", gat, "--format", "json"]);
    let doc: Value = serde_json::from_str(&json).unwrap();
    let entries = doc["kernel_names"].as_array().unwrap();
    let entry = entries.iter().find(|e| e["name"] == reduce).unwrap();
    assert_eq!(entry["short"], short_reduce);
    assert_eq!(entry["sha256"], sha(reduce));
}

#[test]
fn every_listed_kernel_name_has_a_short_stable_name_and_a_digest() {
    use gemm_audit::render::kernel_name::{KernelName, MAX_SHORT_CHARS};
    let names = kernel_names();
    let mut shorts = std::collections::BTreeSet::new();
    for n in &names {
        let k = KernelName::new(n);
        let short = k.short();
        assert!(
            !short.is_empty() && short.chars().count() <= MAX_SHORT_CHARS,
            "{n} -> {short}"
        );
        assert!(!short.starts_with("void "), "{n} -> {short}");
        // No parameter list: a parenthesis only opens an anonymous
        // namespace.
        assert!(
            !short.replace("(anonymous namespace)", "").contains('('),
            "{n} -> {short}"
        );
        assert_eq!(KernelName::new(n).short(), short, "stable");
        assert_eq!(k.digest(), gemm_audit::Digest::sha256(n.as_bytes()));
        shorts.insert(short);
    }
    // Short, not blind: most kernels keep a name of their own.
    assert!(
        shorts.len() * 2 > names.len(),
        "{} of {}",
        shorts.len(),
        names.len()
    );
}
