//! Importing a `torch.compile(mode="max-autotune-no-cudagraphs")` profile
//! (H100, `tests/data/profiles/make_gpu.py`): each Triton template GEMM
//! takes its shape, layout and launch configuration from the launch range
//! inductor wraps around it.

use crate::common::{Scratch, root};
use gemm_audit::diff::TraceDiff;
use gemm_audit::profile::{self, ImportOptions};
use gemm_audit::{DType, GemmOp, RecordedGemmTrace};
use serde_json::{Value, json};

const PROFILE: &str = "tests/data/profiles/gpu-max-autotune.json.gz";

fn json_of(rel: &str) -> Value {
    let bytes = profile::read_profile(&root().join(rel), 1 << 30).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn import_value(v: &Value, name: &str) -> RecordedGemmTrace {
    profile::import_bytes(
        &serde_json::to_vec(v).unwrap(),
        name,
        &ImportOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"))
    .trace
}

/// The launch ranges inductor recorded (`cpu_op` events with a
/// `kernel_backend`), as positions in `traceEvents`.
fn launch_ranges(v: &Value) -> Vec<usize> {
    let events = v["traceEvents"].as_array().unwrap();
    (0..events.len())
        .filter(|&i| {
            events[i]["cat"] == "cpu_op" && events[i]["args"]["kernel_backend"] == "triton"
        })
        .collect()
}

/// (op, dtype, [m, k, n], [lda, ldb, ldc]) of route `i`.
fn layout(t: &RecordedGemmTrace, i: usize) -> (GemmOp, DType, [u64; 3], [u64; 3]) {
    let r = &t.routes[i];
    (
        r.op,
        r.dtype,
        [r.shape.m, r.shape.k, r.shape.n],
        [r.strides.lda, r.strides.ldb, r.strides.ldc],
    )
}

#[test]
fn a_max_autotune_profile_imports_its_triton_templates_with_shapes() {
    let v = json_of(PROFILE);
    assert_eq!(launch_ranges(&v).len(), 6, "two calls of three templates");
    let t = import_value(&v, "gpu-max-autotune.json.gz");
    assert_eq!(t.routes.len(), 6);
    let o = t.observation.as_ref().unwrap();
    for (i, g) in o.gemms.iter().enumerate() {
        let name = &t.routes[i].gemm;
        assert!(g.shapes_recorded, "{name}");
        assert_eq!(g.batch, 1, "{name}");
        let region = g.region.as_deref().unwrap_or_else(|| panic!("{name}"));
        assert!(region.starts_with("triton_tem_"), "{name}: {region}");
        assert!(name.starts_with(region), "{name}: {region}");
    }
    // The head is f32 in the profile: its template's A is a `float`.
    let head = &v["traceEvents"][launch_ranges(&v)[2]]["args"];
    assert_eq!(head["kernel_name"], "triton_tem_fused__to_copy_addmm_t_2");
    assert_eq!(head["Input type"][1], "float");
    let expected = [
        // x [8, 256] times the weight [512, 256]: B transposed.
        (GemmOp::Nt, DType::Bf16, [8, 256, 512], [256, 256, 512]),
        (GemmOp::Nt, DType::Bf16, [8, 512, 256], [512, 512, 256]),
        (GemmOp::Nt, DType::F32, [8, 256, 128], [256, 256, 128]),
    ];
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(layout(&t, i), *e, "{}", t.routes[i].gemm);
        assert_eq!(layout(&t, i + 3), *e, "the second call's {i}");
    }
    // The eager profile's Linear layers give the same GEMMs.
    let eager = import_value(
        &json_of("tests/data/profiles/gpu-eager.json.gz"),
        "eager.json",
    );
    for i in 0..3 {
        assert_eq!(layout(&eager, i), layout(&t, i), "{}", t.routes[i].gemm);
    }
    assert!(
        !o.notes.iter().any(|n| n.contains("Triton")),
        "{:?}",
        o.notes
    );
}

/// A compiled run whose autotuner picked another configuration for one
/// template differs from the original in that GEMM only.
#[test]
fn a_changed_triton_launch_configuration_is_named_by_the_diff() {
    let v = json_of(PROFILE);
    let mut changed = v.clone();
    let first = launch_ranges(&v)[0];
    assert_eq!(changed["traceEvents"][first]["args"]["num_warps"], 4);
    changed["traceEvents"][first]["args"]["num_warps"] = json!(8);
    let before = import_value(&v, "a.json");
    let after = import_value(&changed, "a.json");
    assert!(TraceDiff::between(&before, &before).is_empty());
    let d = TraceDiff::between(&before, &after);
    assert!(!d.is_empty(), "a changed num_warps is a change");
    let named: Vec<&str> = d
        .differences
        .iter()
        .filter_map(|x| x.gemm.as_deref())
        .collect();
    assert!(!named.is_empty(), "{}", d.render());
    assert!(
        named
            .iter()
            .all(|n| *n == "triton_tem_fused_addmm_relu_t_0#0"),
        "{named:?}\n{}",
        d.render()
    );
    // num_stages too.
    let mut staged = v.clone();
    let third = launch_ranges(&v)[2];
    staged["traceEvents"][third]["args"]["num_stages"] = json!(4);
    let d = TraceDiff::between(&before, &import_value(&staged, "a.json"));
    let named: Vec<&str> = d
        .differences
        .iter()
        .filter_map(|x| x.gemm.as_deref())
        .collect();
    assert!(
        !named.is_empty()
            && named
                .iter()
                .all(|n| *n == "triton_tem_fused__to_copy_addmm_t_2#0"),
        "{named:?}"
    );
}

/// A launch range whose arguments are not one GEMM leaves it unrecorded,
/// and the trace's notes say which and why.
#[test]
fn a_triton_launch_with_ambiguous_arguments_stays_unrecorded_with_a_note() {
    let mut v = json_of(PROFILE);
    let first = launch_ranges(&v)[0];
    let args = &mut v["traceEvents"][first]["args"];
    // Two weights that could each be B.
    args["Input Dims"] = json!([[512], [8, 256], [512, 256], [512, 256], [8, 512]]);
    args["Input Strides"] = json!([[1], [256, 1], [256, 1], [256, 1], [512, 1]]);
    args["Input type"] = json!(vec!["c10::BFloat16"; 5]);
    let s = Scratch::new("triton-ambiguous");
    let p = s.write("ambiguous.json", serde_json::to_vec(&v).unwrap());
    let t = profile::import_file(&p, &ImportOptions::default())
        .unwrap()
        .trace;
    let o = t.observation.as_ref().unwrap();
    assert_eq!(t.routes[0].gemm, "triton_tem_fused_addmm_relu_t_0#0");
    assert!(!o.gemms[0].shapes_recorded);
    assert_eq!(
        (t.routes[0].op, t.routes[0].dtype, t.routes[0].shape.m),
        (GemmOp::Unrecorded, DType::Unrecorded, 0)
    );
    assert!(o.gemms[1..].iter().all(|g| g.shapes_recorded));
    assert!(
        o.notes
            .iter()
            .any(|n| n.starts_with("1 of 6 Triton template GEMMs have no shapes")),
        "{:?}",
        o.notes
    );
    assert!(
        o.notes.iter().any(|n| n.starts_with(
            "triton_tem_fused_addmm_relu_t_0#0: 2 readings of (A, B) fit the output [8, 512]"
        )),
        "{:?}",
        o.notes
    );
}
