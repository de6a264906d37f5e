//! The report model people and CI systems read (what the audit found, its
//! environment and provenance, the drift against goldens) and where its
//! renderings are written. The renderings themselves are [`crate::render`]:
//! Markdown, the self-contained HTML page, JUnit XML and the JSON envelope.

use crate::audit::AuditReport;
use crate::diff::TraceDiff;
use crate::{Error, Result};
use std::path::Path;

/// Everything a report shows.
#[derive(Debug, Clone)]
pub struct ReportInput<'a> {
    /// The audit whose verdicts, matrices and timings are shown.
    pub audit: &'a AuditReport,
    /// Route drift of each audited workload against its golden, when goldens were given.
    pub drift: Vec<(String, TraceDiff)>,
}

/// When, where and from what a report was made: the UTC time, the host
/// (`HOSTNAME` or `/etc/hostname`) and the commit when CI says it
/// (`GITHUB_SHA`, `CI_COMMIT_SHA`, or `GEMM_AUDIT_COMMIT`).
pub fn provenance() -> String {
    let secs = now_secs();
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unknown host".into());
    let commit = ["GEMM_AUDIT_COMMIT", "GITHUB_SHA", "CI_COMMIT_SHA"]
        .iter()
        .find_map(|k| std::env::var(k).ok())
        .map(|c| format!(", commit {}", c.chars().take(40).collect::<String>()))
        .unwrap_or_default();
    format!(
        "Generated {} UTC on {host}{commit}, gemm-audit {}",
        utc(secs),
        env!("CARGO_PKG_VERSION")
    )
}

/// Today's date, `YYYY-MM-DD` (UTC).
pub fn today_utc() -> String {
    utc(now_secs())[..10].to_string()
}

/// Seconds since the UNIX epoch (0 on a clock set before it).
fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `YYYY-MM-DD HH:MM` of a UNIX time (proleptic Gregorian, UTC).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (h, m) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}")
}

/// What the timings include, e.g. `CUDA events around the kernels`.
pub(crate) fn clocks(a: &AuditReport) -> String {
    let mut seen: Vec<String> = Vec::new();
    for t in &a.timings {
        let c = t.clock.to_string();
        if !seen.contains(&c) {
            seen.push(c);
        }
    }
    seen.join("; ")
}

/// `identical`, or `differs (3 of 256 elements, max 2 ulp)`.
pub(crate) fn cell_text(c: &crate::audit::MatrixCell) -> String {
    match &c.difference {
        None if c.identical => "identical".into(),
        Some(d) => format!("differs ({d})"),
        None => "differs".into(),
    }
}

/// The environment of an audit, for people and CI systems: tool version,
/// backend, device, compute capability, driver, and the toolkit and library
/// versions the traces' volatile metadata recorded.
pub fn environment(a: &AuditReport) -> Vec<(String, String)> {
    let mut out = vec![
        (
            "tool.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("backend".to_string(), a.backend.clone()),
    ];
    if let Some(t) = a.traces.first() {
        let d = &t.context.device;
        out.push(("device".into(), d.class.clone()));
        if let Some([x, y]) = d.compute_capability {
            out.push(("device.compute_capability".into(), format!("{x}.{y}")));
        }
        out.push(("device.driver".into(), d.driver.clone()));
        // The policy is said in every output: f32 "tf32" admits
        // deterministic non-exact contracts (TF32, fixed split-K), which a
        // PyTorch user (allow_tf32 = False) would not expect by default.
        out.push(("policy".into(), t.context.policy.to_string()));
        for key in [
            "cuda.driver_api_version",
            "cuda.nvrtc_version",
            "cuda.nvrtc_build",
            "cuda.cublas_version",
            "cuda.cublaslt_version",
            "cpu.model",
        ] {
            if let Some(v) = t.volatile.get(key) {
                out.push((key.to_string(), v.clone()));
            }
        }
    }
    out
}

/// Writes `report.md` and `report.html` into `dir` (created if needed).
pub fn write_report(dir: &Path, input: &ReportInput<'_>) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    crate::util::write_atomic(
        &dir.join("report.md"),
        crate::render::markdown::markdown(input).as_bytes(),
        true,
    )?;
    crate::util::write_atomic(
        &dir.join("report.html"),
        crate::render::html::html(input).as_bytes(),
        true,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_civil() {
        assert_eq!(utc(0), "1970-01-01 00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13");
        assert!(provenance().starts_with("Generated "));
    }
}
