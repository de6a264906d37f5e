//! A framework's observed step (the Python package's PyTorch recorder)
//! becomes a trace whose routes the diff, the reader and the reports
//! handle like any vendor route.

use gemm_audit::RecordedGemmTrace;

use gemm_audit::diff::TraceDiff;
use gemm_audit::observed::{ObservedError, ObservedStep};

const FIXTURE: &str = include_str!("../data/torch-step.json");

fn step() -> ObservedStep {
    ObservedStep::from_json(FIXTURE).unwrap()
}

fn outputs(step: &ObservedStep) -> Vec<Vec<u8>> {
    step.gemms
        .iter()
        .enumerate()
        .map(|(i, g)| vec![i as u8; (g.m * g.n * g.batch * 2) as usize])
        .collect()
}

#[test]
fn an_observed_step_is_a_trace_of_vendor_routes_that_round_trips() {
    let s = step();
    let t = s.trace(&outputs(&s)).unwrap();
    assert_eq!(t.workload, "block@b8");
    assert_eq!(t.routes.len(), 3);
    let mm = &t.routes[0];
    assert_eq!(mm.gemm, "aten::mm#0");
    assert_eq!(mm.kernel_symbol, "aten::mm");
    assert_eq!(mm.backend.as_str(), "engine-vendor:torch");
    assert_eq!(mm.strides.ldb, 4096);
    assert_eq!(mm.launch.grid, [64, 1, 4], "the first kernel's geometry");
    let v = mm.vendor.as_ref().unwrap();
    assert_eq!(
        v.physical_kernels.len(),
        2,
        "split-K and its reduce: one GEMM"
    );
    assert!(v.library_version.starts_with("torch 2.11.0+cu130"));
    let dir = crate::common::Scratch::new("observed-round-trip");
    let p = dir.path("block.gat");
    t.write(&p, false).unwrap();
    assert_eq!(RecordedGemmTrace::read(&p).unwrap(), t);
    // Writing again over it is refused.
    assert!(t.write(&p, false).is_err());
}

#[test]
fn a_kernel_change_is_drift_naming_the_gemm_and_the_kernels() {
    let s = step();
    let golden = s.trace(&outputs(&s)).unwrap();
    let mut moved = step();
    moved.gemms[0].kernels.truncate(1);
    moved.gemms[0].kernels[0].name = "nvjet_sm90_tst_128x64_64x8_1x1_v_bz_NNT".into();
    let d = TraceDiff::between(&golden, &moved.trace(&outputs(&moved)).unwrap());
    let text = d.render();
    assert!(
        d.differences
            .iter()
            .any(|x| x.gemm.as_deref() == Some("aten::mm#0")),
        "{text}"
    );
    assert!(
        text.contains("nvjet_sm90_tst_128x64_64x8_1x1_v_bz_NNT"),
        "{text}"
    );
    assert!(
        d.differences
            .iter()
            .all(|x| x.gemm.as_deref() != Some("aten::addmm#1")),
        "{text}"
    );
}

#[test]
fn a_state_knob_or_an_output_bit_is_drift() {
    let s = step();
    let golden = s.trace(&outputs(&s)).unwrap();
    let mut tf32 = step();
    tf32.framework
        .state
        .insert("allow_tf32".into(), "True".into());
    let d = TraceDiff::between(&golden, &tf32.trace(&outputs(&tf32)).unwrap());
    let text = d.render();
    assert!(
        text.contains("allow_tf32=False") && text.contains("allow_tf32=True"),
        "flipping allow_tf32 must show, by name: {text}"
    );
    let mut out = outputs(&s);
    out[2][5] ^= 1;
    let d = TraceDiff::between(&golden, &s.trace(&out).unwrap());
    let text = d.render();
    assert!(
        d.differences
            .iter()
            .any(|x| x.gemm.as_deref() == Some("aten::bmm#2")),
        "{text}"
    );
    assert_eq!(
        TraceDiff::between(&golden, &s.trace(&outputs(&s)).unwrap())
            .differences
            .len(),
        0
    );
}

#[test]
fn bad_steps_are_refused_with_the_reason() {
    let s = step();
    let e = s.trace(&outputs(&s)[..2]).unwrap_err();
    assert!(e.to_string().contains("2 outputs for 3 GEMMs"), "{e}");
    let mut empty = step();
    empty.gemms[1].m = 0;
    let e = empty.trace(&outputs(&empty)).unwrap_err();
    assert!(
        e.to_string().contains("aten::addmm#1") && e.to_string().contains("empty shape"),
        "{e}"
    );
    let mut none = step();
    none.gemms.clear();
    assert!(
        none.trace(&[])
            .unwrap_err()
            .to_string()
            .contains("ran no GEMM-family op")
    );
    assert!(matches!(
        ObservedStep::from_json("{\"workload\": 3}"),
        Err(ObservedError::Json(_))
    ));
}

/// A torch upgrade (torch and cuBLAS versions changed, same kernels, same
/// bits) opens with the three facts a person needs: which libraries
/// changed from what to what (once, with the routes they reach), that no
/// kernel changed and that no output bit changed; not a line per route.
#[test]
fn an_upgrade_opens_with_the_libraries_kernels_and_bits() {
    let s = step();
    let golden = s.trace(&outputs(&s)).unwrap();
    let mut up = step();
    up.framework.version = "2.15.0+cu130".into();
    up.framework
        .libraries
        .insert("cublas".into(), "13.2.0".into());
    let candidate = up.trace(&outputs(&up)).unwrap();
    let d = TraceDiff::between(&golden, &candidate);
    let text = d.render();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!(
            "libraries changed: {}; kernels unchanged; output bits identical in {} GEMMs",
            d.overview().libraries[0].what,
            golden.routes.len()
        ),
        "{text}"
    );
    let library = lines[1];
    assert!(library.trim_start().starts_with("library"), "{text}");
    assert!(library.contains("2.11.0+cu130"), "{text}");
    assert!(library.contains("2.15.0+cu130"), "{text}");
    assert!(
        library.contains("13.1.0") && library.contains("13.2.0"),
        "{text}"
    );
    assert!(
        library.ends_with(&format!("({} routes)", golden.routes.len())),
        "{text}"
    );
    // A library that did not change is not listed as changed.
    assert!(!library.contains("cublaslt"), "{text}");
    let per_route = lines.iter().filter(|l| l.contains("route ")).count();
    assert!(per_route <= 1, "{text}");
    // A state knob recorded beside the versions is named alone.
    let mut knob = step();
    knob.framework
        .state
        .insert("allow_tf32".into(), "True".into());
    let d = TraceDiff::between(&golden, &knob.trace(&outputs(&knob)).unwrap());
    let lib = &d.overview().libraries[0];
    assert_eq!(
        (lib.expected.as_str(), lib.found.as_str()),
        ("allow_tf32=False", "allow_tf32=True"),
        "{}",
        d.render()
    );
}
