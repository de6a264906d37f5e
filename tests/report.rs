//! Reports: Markdown, the self-contained HTML page rendered in a real
//! headless Chromium, and JUnit XML validated against the JUnit schema.
//!
//! Chromium and xmllint come from Debian's packages (`chromium`,
//! `libxml2-utils`); `.ci/run` installs them. In CI (`CI` set) a missing
//! tool fails the test; elsewhere the test says loudly that it could not run
//! that part.

use gemm_audit::audit::{self, AuditOptions, AuditReport, Case, NoProgress, Verdict};
use gemm_audit::backend::Backend;
use gemm_audit::backend::cpu::CpuBackend;
use gemm_audit::diff::TraceDiff;
use gemm_audit::report::{self, ReportInput};
use gemm_audit::workload::Workload;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn audit() -> &'static AuditReport {
    static REPORT: OnceLock<AuditReport> = OnceLock::new();
    REPORT.get_or_init(|| {
        let opts = AuditOptions {
            runs: 2,
            control_attempts: 32,
            workloads: vec![Workload::builtin("m-sweep").unwrap()],
        };
        audit::run_audit(&Backend::Cpu(CpuBackend::default()), &opts, &mut NoProgress).unwrap()
    })
}

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The tool's path, or None outside CI when it is not installed.
fn tool(name: &str, candidates: &[&str]) -> Option<PathBuf> {
    for c in candidates {
        let p = Path::new(c);
        if p.is_file() {
            return Some(p.to_path_buf());
        }
    }
    if let Ok(out) = Command::new("which").arg(name).output() {
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !s.is_empty() {
            return Some(PathBuf::from(s));
        }
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{name} is required in CI: install it with `apt-get install {}` (.ci/run does)",
        if name == "xmllint" {
            "libxml2-utils"
        } else {
            name
        }
    );
    eprintln!(
        "NOTICE: {name} is not installed; this part of the test did not run (apt-get install it to run it)"
    );
    None
}

fn drift_input(a: &AuditReport) -> Vec<(String, TraceDiff)> {
    // The recorded trace against a golden whose kernel and fingerprint differ,
    // so the drift section has content.
    let t = &a.traces[0];
    let mut golden = t.clone();
    golden.routes[3].kernel_symbol.push_str("_v0");
    golden.fingerprints[3].sha256.0[0] ^= 1;
    vec![(t.workload.clone(), TraceDiff::between(&golden, t))]
}

#[test]
fn markdown_has_every_section() {
    let a = audit();
    let md = report::markdown(&ReportInput {
        audit: a,
        drift: drift_input(a),
    });
    for needle in [
        "# gemm-audit report",
        "## Verdicts",
        "| batch-invariance |",
        "NOT batch invariant",
        "## Batch invariance",
        "| 32 | differs |",
        "## Route drift against goldens",
        "kernel_symbol",
        "output_fingerprint",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
}

#[test]
fn html_is_self_contained_and_renders_in_chromium() {
    let a = audit();
    let input = ReportInput {
        audit: a,
        drift: drift_input(a),
    };
    let dir = artifacts().join("report");
    report::write_report(&dir, &input).unwrap();
    let html_path = dir.join("report.html");
    let html = std::fs::read_to_string(&html_path).unwrap();
    // No network: no external scripts, styles, fonts or images.
    for banned in ["<script", "http://", "https://", "<link", "@import", "url("] {
        let allowed_svg_ns = banned == "http://"
            && html.matches("http://").count()
                == html.matches("http://www.w3.org/2000/svg").count();
        assert!(
            !html.contains(banned) || allowed_svg_ns,
            "report references {banned}"
        );
    }
    assert!(html.contains("id=\"verdict-table\"") && html.contains("id=\"batch-matrix\""));
    assert!(
        html.contains("<svg id=\"tax-chart\""),
        "timings chart is inline SVG"
    );

    let Some(chromium) = tool(
        "chromium",
        &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
    ) else {
        return;
    };
    let profile = artifacts().join(format!("chromium-profile-{}", std::process::id()));
    let shot = dir.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let base = |cmd: &mut Command| {
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    };
    let url = format!("file://{}", html_path.display());

    // The DOM as Chromium parsed and laid it out.
    let mut dump = Command::new(&chromium);
    base(&mut dump);
    let out = dump.arg("--dump-dom").arg(&url).output().unwrap();
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("id=\"verdict-table\""),
        "verdict table not in the rendered DOM"
    );
    let verdict_rows = dom
        .split("id=\"verdict-table\"")
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap();
    assert_eq!(
        verdict_rows.matches("<tr>").count(),
        a.checks.len() + 1,
        "one row per check plus the header"
    );
    let matrix = dom
        .split("id=\"batch-matrix\"")
        .nth(1)
        .expect("batch matrix in the rendered DOM");
    assert!(matrix.contains("class=\"differs\"") && matrix.contains("class=\"same\""));
    assert!(dom.contains("id=\"route-drift\"") && dom.contains("kernel_symbol"));

    // A screenshot, kept as a test artifact.
    let mut snap = Command::new(&chromium);
    base(&mut snap);
    let out = snap
        .arg("--window-size=1400,2400")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium --screenshot failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "screenshot is a PNG");
    assert!(
        png.len() > 20_000,
        "screenshot is suspiciously small ({} bytes)",
        png.len()
    );
    let _ = std::fs::remove_dir_all(&profile);
    eprintln!("screenshot kept at {}", shot.display());
}

#[test]
fn junit_validates_against_the_schema_and_counts_cases() {
    let mut a = audit().clone();
    // One failing case, so the schema also sees a <failure> element.
    a.cases.push(Case {
        contract: "run-to-run".into(),
        workload: "synthetic".into(),
        gemm: "planted <fault> & \"quotes\"".into(),
        verdict: Verdict::Fail,
        detail: "output bits changed within 2 runs".into(),
    });
    let xml = report::junit(&a);
    assert_eq!(xml.matches("<testcase ").count(), a.cases.len());
    assert_eq!(xml.matches("<failure ").count(), 1);
    assert!(xml.contains("planted &lt;fault&gt; &amp; &quot;quotes&quot;"));
    let contracts: std::collections::HashSet<&str> =
        a.cases.iter().map(|c| c.contract.as_str()).collect();
    assert_eq!(
        xml.matches("<testsuite ").count(),
        contracts.len(),
        "one suite per contract"
    );
    for c in [
        "run-to-run",
        "eager-vs-replay",
        "cpu-reference",
        "batch-invariance",
        "nondeterminism-detected",
    ] {
        assert!(contracts.contains(c), "no {c} cases");
    }
    let path = artifacts().join("junit.xml");
    std::fs::write(&path, &xml).unwrap();
    let Some(xmllint) = tool("xmllint", &["/usr/bin/xmllint"]) else {
        return;
    };
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/junit.xsd");
    let out = Command::new(xmllint)
        .arg("--noout")
        .arg("--schema")
        .arg(&schema)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "JUnit XML does not validate:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The schema is strict enough to catch a malformed file.
    let bad = artifacts().join("junit-bad.xml");
    std::fs::write(&bad, xml.replace("<testcase name=", "<testcase nom=")).unwrap();
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&schema)
        .arg(&bad)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a testcase without a name must not validate"
    );
}

/// The JUnit file carries real times (the audit's wall time, each per-GEMM
/// case's eager launch time) and the environment as properties.
#[test]
fn junit_has_times_and_environment_properties() {
    let a = audit();
    let x = report::junit(a);
    assert!(
        x.contains("<property name=\"device\" value=\"cpu/x86_64\"/>")
            || !cfg!(target_arch = "x86_64"),
        "{x}"
    );
    assert!(x.contains(&format!(
        "<property name=\"tool.version\" value=\"{}\"/>",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(x.contains("<property name=\"device.driver\""));
    let total: f64 = x
        .split("<testsuites ")
        .nth(1)
        .and_then(|s| s.split("time=\"").nth(1))
        .and_then(|s| s.split('"').next())
        .and_then(|t| t.parse().ok())
        .expect("a testsuites time");
    assert!(total > 0.0, "the audit took no time?");
    let timed = x
        .lines()
        .filter(|l| l.contains("<testcase") && !l.contains("time=\"0.000000\""))
        .count();
    assert!(timed > 0, "no test case carries a time");
}
