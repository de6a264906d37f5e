//! The classifying diff across machines: CPU vs CPU, CPU vs H200, and H200
//! vs H200 traces derived from the real H200 goldens in `traces/nvidia-h200/` by
//! the changes an upgrade makes (driver, library, kernel choice, numerics).
//! Only one driver version exists on the H200 here, so the upgrade side is
//! derived from recorded traces, never invented from scratch.

use gemm_audit::diff::{DiffClass, TraceDiff, portability};
use gemm_audit::{RecordedGemmTrace, ResolvedGemmRoute};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn traces() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("traces")
}

fn read(rel: &str) -> RecordedGemmTrace {
    let p = traces().join(rel);
    RecordedGemmTrace::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A trace with `f` applied to every route (and the context), re-digested
/// as a recorder on the changed machine would have written it.
fn derive(
    t: &RecordedGemmTrace,
    mut ctx: impl FnMut(&mut gemm_audit::GemmRouteIdentity),
    mut route: impl FnMut(usize, &mut ResolvedGemmRoute),
) -> RecordedGemmTrace {
    let mut context = t.context.clone();
    ctx(&mut context);
    let mut routes = t.routes.clone();
    for (i, r) in routes.iter_mut().enumerate() {
        route(i, r);
    }
    let mut out = RecordedGemmTrace::new(
        t.workload.clone(),
        t.workload_digest,
        context,
        routes,
        t.fingerprints.clone(),
        t.volatile.clone(),
    )
    .expect("derived trace is well formed");
    out.physical = t.physical.clone();
    out
}

fn classes(d: &TraceDiff) -> BTreeSet<DiffClass> {
    d.classes()
}

#[test]
fn cpu_vs_cpu_fresh_recording_has_no_difference() {
    use gemm_audit::backend::{Backend, cpu::CpuBackend};
    let golden = read("cpu-x86_64/transformer-block.gat");
    let w = gemm_audit::workload::Workload::builtin("transformer-block").unwrap();
    let fresh =
        gemm_audit::recorder::record(&Backend::new(CpuBackend::default()), &w, &mut |_, _| {})
            .unwrap()
            .trace;
    let d = TraceDiff::between(&golden, &fresh);
    assert!(d.is_empty(), "{}", d.render());
}

#[test]
fn cpu_vs_h200_reports_identity_and_route_and_portable_contracts() {
    for name in ["transformer-block", "m-sweep"] {
        let cpu = read(&format!("cpu-x86_64/{name}.gat"));
        let gpu = read(&format!("nvidia-h200/{name}.gat"));
        let d = TraceDiff::between(&cpu, &gpu);
        let c = classes(&d);
        assert!(
            c.contains(&DiffClass::Identity),
            "{name}: device/compiler identity must differ:\n{}",
            d.render()
        );
        assert!(
            c.contains(&DiffClass::Route),
            "{name}: kernels differ:\n{}",
            d.render()
        );
        assert!(
            !c.contains(&DiffClass::Structural),
            "{name}: same workload, same GEMMs:\n{}",
            d.render()
        );
        // The CUDA context permits tensor cores, the CPU one does not.
        assert!(c.contains(&DiffClass::Policy), "{name}:\n{}", d.render());
        // The scalar-FMA contract gives the same bits on the CPU and the H200:
        // every fingerprint under it agrees, and the report says so.
        let p = portability(&cpu, &gpu);
        let scalar = p
            .iter()
            .find(|x| x.contract == "scalar-fma")
            .expect("scalar-fma pairs");
        assert!(
            scalar.pairs > 0 && scalar.portable() == Some(true),
            "{name}: {scalar:?}"
        );
        if name == "m-sweep" {
            let split = p
                .iter()
                .find(|x| x.contract == "split-k-fixed/4")
                .expect("split-k pairs");
            assert_eq!(split.portable(), Some(true), "{split:?}");
        }
        // Numeric differences would only come from non-portable contracts: none here.
        assert!(!c.contains(&DiffClass::Numeric), "{name}:\n{}", d.render());
    }
}

#[test]
fn h200_driver_upgrade_is_identity_only() {
    let golden = read("nvidia-h200/transformer-block.gat");
    let upgraded = derive(
        &golden,
        |c| c.device.driver = "590.48.01 (CUDA 13.0)".into(),
        |_, r| r.device.driver = "590.48.01 (CUDA 13.0)".into(),
    );
    let d = TraceDiff::between(&golden, &upgraded);
    assert_eq!(
        classes(&d).into_iter().collect::<Vec<_>>(),
        vec![DiffClass::Identity],
        "{}",
        d.render()
    );
    assert!(
        d.differences
            .iter()
            .all(|x| x.change.field.ends_with("device.driver"))
    );
    assert!(d.disallowed(&[DiffClass::Identity]).is_empty());
    // A plan from the upgraded trace is refused under the old live context:
    // identity still gates replay even when the diff is allowed.
    let plan = gemm_audit::CapturedGemmGraphPlan::from_trace(&upgraded).unwrap();
    let r = plan.validate(&golden.context).unwrap_err();
    assert_eq!(r.change().field, "device.driver", "{r}");
}

#[test]
fn h200_vendor_kernel_change_is_route_drift_and_numeric_drift_is_separate() {
    let golden = read("nvidia-h200/vendor-sweep.gat");
    let i = golden
        .routes
        .iter()
        .position(|r| {
            r.vendor
                .as_ref()
                .is_some_and(|v| !v.physical_kernels.is_empty())
        })
        .expect("a vendor route with physical kernels");
    // The library picked a split-K variant: another split count and a reduce kernel.
    let split = derive(
        &golden,
        |_| {},
        |k, r| {
            if k == i {
                let v = r.vendor.as_mut().unwrap();
                v.split_k = v.split_k.max(1) + 1;
                v.physical_kernels
                    .push("cublasLt::splitKreduce_kernel".into());
            }
        },
    );
    let d = TraceDiff::between(&golden, &split);
    assert_eq!(
        classes(&d).into_iter().collect::<Vec<_>>(),
        vec![DiffClass::Route],
        "{}",
        d.render()
    );
    assert!(d.differences.iter().all(|x| x.route_index == Some(i)));
    assert!(d.render().contains("vendor.split_k") && d.render().contains("splitKreduce"));

    // A library upgrade that also changed the output bits: identity + numeric.
    let mut upgraded = derive(
        &golden,
        |_| {},
        |_, r| {
            if let Some(v) = r.vendor.as_mut() {
                v.library_version = v.library_version.replace("13.1", "13.2");
            }
        },
    );
    upgraded.fingerprints[i].sha256.0[31] ^= 0x80;
    let d = TraceDiff::between(&golden, &upgraded);
    assert_eq!(
        classes(&d).into_iter().collect::<Vec<_>>(),
        vec![DiffClass::Identity, DiffClass::Numeric],
        "{}",
        d.render()
    );
    assert_eq!(
        d.disallowed(&[DiffClass::Identity])
            .into_iter()
            .collect::<Vec<_>>(),
        vec![DiffClass::Numeric]
    );
}

#[test]
fn h200_structural_and_policy_changes_are_classified() {
    let golden = read("nvidia-h200/tensor-core-sweep.gat");
    // A GEMM dropped from the run: structural.
    let mut routes = golden.routes.clone();
    let mut fps = golden.fingerprints.clone();
    routes.remove(2);
    fps.remove(2);
    let dropped = RecordedGemmTrace::new(
        golden.workload.clone(),
        golden.workload_digest,
        golden.context.clone(),
        routes,
        fps,
        golden.volatile.clone(),
    )
    .unwrap();
    let d = TraceDiff::between(&golden, &dropped);
    assert!(
        classes(&d).contains(&DiffClass::Structural),
        "{}",
        d.render()
    );
    assert!(d.render().contains("missing"));

    // Tensor cores switched off by policy: policy class.
    let p = derive(&golden, |c| c.policy.tensor_cores = false, |_, _| {});
    let d = TraceDiff::between(&golden, &p);
    assert_eq!(
        classes(&d).into_iter().collect::<Vec<_>>(),
        vec![DiffClass::Policy],
        "{}",
        d.render()
    );
}

#[test]
fn diff_cli_exit_codes_name_the_classes() {
    let dir = std::env::temp_dir().join(format!("gemm-audit-cross-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let golden = read("nvidia-h200/transformer-block.gat");
    let upgraded = derive(
        &golden,
        |c| c.device.driver = "590.48.01 (CUDA 13.0)".into(),
        |_, r| r.device.driver = "590.48.01 (CUDA 13.0)".into(),
    );
    let (g, u) = (dir.join("golden.gat"), dir.join("upgraded.gat"));
    golden.write(&g, true).unwrap();
    upgraded.write(&u, true).unwrap();
    let bin = env!("CARGO_BIN_EXE_gemm-audit");
    let out = Command::new(bin)
        .arg("diff")
        .arg(&g)
        .arg(&u)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64 + 1),
        "identity only: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("driver 580.159.04 (CUDA 13.0) vs 590.48.01 (CUDA 13.0)")
            && stdout.contains("portable"),
        "{stdout}"
    );
    let out = Command::new(bin)
        .arg("diff")
        .arg(&g)
        .arg(&u)
        .args(["--allow", "identity"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // CPU vs H200 through the CLI: identity + route, with the portability report.
    let out = Command::new(bin)
        .arg("diff")
        .arg(traces().join("cpu-x86_64/m-sweep.gat"))
        .arg(traces().join("nvidia-h200/m-sweep.gat"))
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    assert_eq!(code & 64, 64);
    assert_eq!((code - 64) & (1 | 2), 1 | 2, "identity and route bits set");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("devices differ (cpu/x86_64 vs NVIDIA H200)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("scalar-fma") && stdout.contains("portable"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Contexts with different module sets pair modules by kind, never by
/// position: a CPU trace against an H200 one names the modules each side
/// lacks, and compares no CPU module field with a cuBLAS one.
#[test]
fn context_modules_are_paired_by_kind() {
    let cpu = read("cpu-x86_64/transformer-block.gat");
    let gpu = read("nvidia-h200/transformer-block.gat");
    let d = TraceDiff::between(&cpu, &gpu);
    let fields: Vec<&str> = d
        .differences
        .iter()
        .map(|x| x.change.field.as_str())
        .collect();
    for want in [
        "context.module[cpu-reference]",
        "context.module[nvrtc]",
        "context.module[cublas]",
        "context.module[cublas-lt]",
        "context.device.class",
    ] {
        assert!(fields.contains(&want), "{want} missing from {fields:?}");
    }
    assert!(
        !fields
            .iter()
            .any(|f| f.starts_with("context.module[") && f.contains("].")),
        "no field of one module compared with another's: {fields:?}"
    );
    // Same module set, one compiler changed: named under its module.
    let mut upgraded = gpu.clone();
    upgraded.context.modules[0].compiler.version.push_str(".1");
    let d = TraceDiff::between(&gpu, &upgraded);
    let fields: Vec<&str> = d
        .differences
        .iter()
        .map(|x| x.change.field.as_str())
        .collect();
    assert_eq!(fields, vec!["context.module[nvrtc].compiler.version"]);
    assert_eq!(d.classes(), BTreeSet::from([DiffClass::Identity]));
}

/// A graph node bound to no route (a kernel nobody declared) is a route
/// difference, never "no differences".
#[test]
fn unbound_graph_nodes_are_differences() {
    let g = read("nvidia-h200/transformer-block.gat");
    let mut c = g.clone();
    c.physical.push(gemm_audit::physical::PhysicalNode::kernel(
        "undeclared_kernel",
        [1; 3],
        [32, 1, 1],
        0,
    ));
    let d = TraceDiff::between(&g, &c);
    assert!(!d.is_empty());
    let fields: Vec<&str> = d
        .differences
        .iter()
        .map(|x| x.change.field.as_str())
        .collect();
    assert_eq!(fields, vec!["graph.unbound_node[0]"]);
    assert_eq!(d.classes(), BTreeSet::from([DiffClass::Route]));
    // A trace without a captured graph against one with: named too.
    let mut none = g.clone();
    none.physical.clear();
    let d = TraceDiff::between(&g, &none);
    assert!(
        d.differences
            .iter()
            .any(|x| x.change.field == "graph.nodes")
    );
}

/// The two Hopper classes' committed goldens, H200 against H100 (what
/// docs/fleet.md reports): gemm-audit's kernels and `cublaslt-invariant`
/// give the same bits on both; only cuBLAS's and cuBLASLt's heuristic
/// picks at m = 1 in `vendor-sweep` do not.
#[test]
fn h200_and_h100_goldens_differ_in_bits_only_at_vendor_m1() {
    // Every H200 golden has its H100 twin (each class covers the suite).
    let mut names: Vec<String> = std::fs::read_dir(traces().join("nvidia-h200"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".gat").map(str::to_owned))
        .collect();
    names.sort();
    assert!(names.iter().any(|n| n == "vendor-sweep"), "{names:?}");
    for name in &names {
        let name = name.as_str();
        let h200 = read(&format!("nvidia-h200/{name}.gat"));
        let h100 = read(&format!("nvidia-h100-80gb-hbm3/{name}.gat"));
        assert_ne!(
            h200.context.device.class, h100.context.device.class,
            "{name}: each golden is its own class's"
        );
        let d = TraceDiff::between(&h200, &h100);
        let c = classes(&d);
        assert!(c.contains(&DiffClass::Identity), "{name}:\n{}", d.render());
        for class in [DiffClass::Structural, DiffClass::Policy] {
            assert!(!c.contains(&class), "{name}: {class:?}\n{}", d.render());
        }
        let numeric: BTreeSet<&str> = d
            .differences
            .iter()
            .filter(|x| x.class == DiffClass::Numeric)
            .filter_map(|x| x.gemm.as_deref())
            .collect();
        let expected: BTreeSet<&str> = if name == "vendor-sweep" {
            BTreeSet::from(["cublas@m1", "cublaslt@m1"])
        } else {
            BTreeSet::new()
        };
        assert_eq!(numeric, expected, "{name}:\n{}", d.render());
        let routes_differ = c.contains(&DiffClass::Route);
        assert_eq!(
            routes_differ,
            matches!(name, "vendor-sweep" | "batch-invariant"),
            "{name}:\n{}",
            d.render()
        );
    }
}
