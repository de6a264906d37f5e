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
use gemm_audit::render;
use gemm_audit::report::{self, ReportInput};
use gemm_audit::workload::Workload;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub(crate) fn audit() -> &'static AuditReport {
    static REPORT: OnceLock<AuditReport> = OnceLock::new();
    REPORT.get_or_init(|| {
        let opts = AuditOptions {
            runs: 2,
            control_attempts: 32,
            workloads: vec![Workload::builtin("m-sweep").unwrap()],
            fingerprint_mode: gemm_audit::FingerprintMode::Strong,
        };
        audit::run_audit(&Backend::new(CpuBackend::default()), &opts, &mut NoProgress).unwrap()
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
    // Written to the stream itself, not through `eprintln!`, which the test
    // harness captures and hides for a passing test: a skipped check says so.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
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

/// A golden-drift failure's JUnit body lists the differences themselves,
/// not the one-line message again.
#[test]
fn junit_drift_failures_carry_the_differences() {
    let mut a = audit().clone();
    let drift = drift_input(&a);
    let workload = drift[0].0.clone();
    a.cases.push(Case {
        contract: audit::Contract::GoldenDrift,
        workload: workload.clone(),
        gemm: workload,
        verdict: Verdict::Fail,
        detail: "2 differences from the golden".into(),
    });
    let xml = render::junit::junit(&a, &drift);
    let body = xml
        .split("type=\"contract-violated\">")
        .nth(1)
        .and_then(|b| b.split("</failure>").next())
        .expect("a failure body");
    assert!(
        body.contains("[route]") && body.contains("kernel_symbol"),
        "{body}"
    );
    assert!(
        body.contains("[numeric]") && body.contains("output_fingerprint"),
        "{body}"
    );
}

/// The HTML page leads with when and where it was made and a line per
/// workload, lists failures first, says per GEMM what drifted, and folds
/// what passed.
#[test]
fn html_leads_with_the_summary_and_folds_what_passed() {
    let mut a = audit().clone();
    a.checks.push(audit::Check {
        contract: audit::Contract::RunToRun,
        subject: "planted".into(),
        verdict: Verdict::Fail,
        detail: "planted failure".into(),
    });
    let input = ReportInput {
        audit: &a,
        drift: drift_input(&a),
    };
    let html = render::html::html(&input);
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    assert!(at("id=\"provenance\">Generated ") < at("id=\"summary\""));
    assert!(at("id=\"summary\"") < at("id=\"verdict-table\""));
    // The first verdict row is the failure.
    let table = &html[at("id=\"verdict-table\"")..];
    let first_row = table
        .split("<tbody>")
        .nth(1)
        .unwrap()
        .split("</tr>")
        .next()
        .unwrap();
    assert!(first_row.contains("planted failure"), "{first_row}");
    // Drift: what changed per GEMM, then the fields behind a fold.
    let gemm = &a.traces[0].routes[3].gemm;
    let summary = &html[at("class=\"drift-summary\"")..];
    assert!(
        summary.contains(&format!("{gemm}:")) && summary.contains("output changed"),
        "{summary}"
    );
    assert!(html.contains("differences, field by field</summary>"));
    // Identical matrices fold, the charts too.
    assert!(html.contains("<details><summary>") && html.contains("TFLOP/s by m"));
}

#[test]
fn timings_say_what_they_measure() {
    let a = audit();
    assert_eq!(a.timings.len(), a.traces[0].routes.len());
    // The CPU backend times its kernel alone: input seeding is outside.
    assert!(
        a.timings
            .iter()
            .all(|t| t.clock == gemm_audit::kernels::TimingClock::HostKernel)
    );
    let html = render::html::html(&ReportInput {
        audit: a,
        drift: Vec::new(),
    });
    assert!(html.contains("host clock around the kernel, fastest of 2 runs"));
    // TFLOP/s by m: one chart per problem family (op, dtype, k, n), one
    // line per timed M-sweep group of that family, named in its legend.
    let charts: Vec<&str> = html
        .split("<svg id=\"throughput-by-m-")
        .skip(1)
        .map(|c| c.split("</svg>").next().unwrap())
        .collect();
    assert!(!a.matrices.is_empty());
    assert_eq!(
        charts
            .iter()
            .map(|c| c.matches("<polyline class=\"series\"").count())
            .sum::<usize>(),
        a.matrices.len()
    );
    for m in &a.matrices {
        let (route, family) = m.group.split_once(' ').unwrap();
        let chart = charts
            .iter()
            .find(|c| c.contains(&format!("{} / {}: m=", m.workload, m.group)))
            .unwrap_or_else(|| panic!("no chart plots {}", m.group));
        assert!(
            chart.contains(&format!(">{route} ({})</text>", m.workload)),
            "legend names {route}"
        );
        assert!(
            html.contains(&format!("<h3>{family}</h3>")),
            "a heading names {family}"
        );
        // Every line of this chart is of the same family.
        for title in chart.split("<polyline").skip(1) {
            let t = title.split("<title>").nth(1).unwrap();
            assert!(t.contains(family), "{t} in the {family} chart");
        }
        assert_eq!(
            chart
                .matches(&format!("{} / {}: m=", m.workload, m.group))
                .count(),
            m.cells.len(),
            "one point per batch size of {}",
            m.group
        );
    }
}

#[test]
fn markdown_has_every_section() {
    let a = audit();
    let md = render::markdown::markdown(&ReportInput {
        audit: a,
        drift: drift_input(a),
    });
    for needle in [
        "# gemm-audit report",
        "## Verdicts",
        "| batch-invariance |",
        "NOT batch invariant",
        "## Batch invariance",
        "| 32 | differs (",
        "elements differ, max ",
        "## Route drift against goldens",
        "kernel_symbol",
        "output_fingerprint",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
}

#[test]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
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
        .arg("--window-size=1280,2400")
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
        contract: audit::Contract::RunToRun,
        workload: "synthetic".into(),
        gemm: "planted <fault> & \"quotes\"".into(),
        verdict: Verdict::Fail,
        detail: "output bits changed within 2 runs".into(),
    });
    let xml = render::junit::junit(&a, &[]);
    assert_eq!(xml.matches("<testcase ").count(), a.cases.len());
    assert_eq!(xml.matches("<failure ").count(), 1);
    assert!(xml.contains("planted &lt;fault&gt; &amp; &quot;quotes&quot;"));
    let contracts: std::collections::HashSet<audit::Contract> =
        a.cases.iter().map(|c| c.contract).collect();
    let self_checks = contracts.iter().filter(|c| c.is_self_check()).count();
    assert!(self_checks >= 2, "{contracts:?}");
    assert_eq!(
        xml.matches("<testsuite ").count(),
        contracts.len() - self_checks + 1,
        "one suite per GEMM contract, one for the self-checks"
    );
    assert!(xml.contains("<testsuite name=\"self-checks\""));
    for c in [
        "run-to-run",
        "eager-vs-replay",
        "cpu-reference",
        "batch-invariance",
        "nondeterminism-detected",
    ] {
        let c: audit::Contract = c.parse().unwrap();
        assert!(contracts.contains(&c), "no {c} cases");
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
    let x = render::junit::junit(a, &[]);
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

/// A matrix as wide as the H200's M-sweep (m = 1 ... 8192 and the odd
/// sizes), with vendor kernels' long names and a few differing sizes.
fn wide_matrix() -> audit::BatchMatrix {
    use gemm_audit::audit::{BatchMatrix, MatrixCell};
    use gemm_audit::diff::UlpStats;
    let mut ms: Vec<u64> = (0..14).map(|p| 1u64 << p).collect();
    ms.extend([48, 96, 200]);
    ms.sort();
    let cells = ms
        .iter()
        .map(|&m| {
            let identical = !matches!(m, 64 | 200 | 4096);
            MatrixCell {
                gemm: format!("cublas@m{m}"),
                m,
                identical,
                difference: (!identical).then_some(UlpStats {
                    elements: 4096,
                    differing: 1234,
                    max_ulp: 3,
                }),
                contract: "vendor-fast/bf16".into(),
                kernel: "_Z28nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_TNNIN7cutlass10bfloat16_tES1_fLb0ELb1EEvPKT_S5_PS3_iiiffPKfS8_ + _ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb1ELb0ELb1ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT4_EEPKT2_S6_PT3_PKS3_S9_SB_PKS4_PvlPS3_Pi".into(),
            }
        })
        .collect();
    BatchMatrix {
        workload: "vendor-sweep".into(),
        group: "vendor-fast nn bf16 k=4096 n=4096".into(),
        promised: false,
        cells,
    }
}

/// The report at 1280 px wide, laid out by Chromium: nothing wider than the
/// window, and every differing cell of a 17-size matrix on screen in the
/// "differs" colour. The report has no script; the test adds one to a copy
/// that measures the layout and writes it into the DOM Chromium dumps.
#[test]
fn html_reads_at_1280_px_with_differing_cells_visible() {
    let mut a = audit().clone();
    a.matrices.push(wide_matrix());
    let input = ReportInput {
        audit: &a,
        drift: drift_input(&a),
    };
    let html = render::html::html(&input);
    assert!(!html.contains("<script"), "the report itself has no script");
    let probe = r#"<script>
window.addEventListener('load', () => {
  const W = window.innerWidth;
  const bg = (el) => getComputedStyle(el).backgroundColor;
  const diff = [...document.querySelectorAll('#batch-matrix td.differs')];
  const same = document.querySelector('#batch-matrix td.same');
  const off = diff.filter((td) => {
    const r = td.getBoundingClientRect();
    return r.width < 20 || r.height < 8 || r.left < 0 || r.right > W;
  }).length;
  const out = document.createElement('pre');
  out.id = 'layout-probe';
  out.textContent = JSON.stringify({
    width: W,
    page: document.documentElement.scrollWidth,
    differing: diff.length,
    offscreen: off,
    distinct: diff.every((td) => bg(td) !== bg(same)),
  });
  document.body.appendChild(out);
});
</script></body>"#;
    let dir = artifacts().join("layout");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report-1280.html");
    std::fs::write(&path, html.replace("</body>", probe)).unwrap();

    let Some(chromium) = tool(
        "chromium",
        &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
    ) else {
        return;
    };
    let profile = artifacts().join(format!("chromium-layout-{}", std::process::id()));
    let out = Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--hide-scrollbars",
            "--window-size=1280,2000",
            "--virtual-time-budget=2000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", path.display()))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        out.status.success(),
        "chromium --dump-dom failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let probe = dom
        .split("<pre id=\"layout-probe\">")
        .nth(1)
        .and_then(|p| p.split("</pre>").next())
        .expect("the layout probe ran")
        .replace("&quot;", "\"");
    let v: serde_json::Value = serde_json::from_str(&probe).unwrap();
    assert_eq!(v["width"], 1280, "laid out at 1280 px: {v}");
    assert!(
        v["page"].as_u64().unwrap() <= 1280,
        "the page is wider than 1280 px: {v}"
    );
    let planted = wide_matrix().cells.iter().filter(|c| !c.identical).count() as u64;
    assert!(
        v["differing"].as_u64().unwrap() >= planted,
        "every differing cell is rendered: {v}"
    );
    assert_eq!(v["offscreen"], 0, "a differing cell is off screen: {v}");
    assert_eq!(
        v["distinct"], true,
        "differing cells look like the others: {v}"
    );
}
