//! Golden traces on disk: keyed by device class and workload, found by
//! `check --golden-dir`, written by `bless` (atomically, never replacing one
//! without an explicit flag).
//!
//! Layout: `DIR/<device>/<workload>.gat`, where `<device>` is a slug of the
//! device class: `cpu-<architecture>` for the CPU reference backend
//! (`cpu-x86_64`, `cpu-aarch64`: the architecture is compared as identity,
//! so each has its own goldens) and the GPU's full name for CUDA
//! (`nvidia-h200`, `nvidia-h100-pcie`, `nvidia-a100-80gb-pcie`): the whole
//! name, so two models never share a folder. The compute capability is part
//! of the device identity inside each trace.

use crate::DeviceIdentity;
use crate::diff::TraceDiff;
use crate::trace::RecordedGemmTrace;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// The folder name of a device class: a slug of it (`cpu/x86_64` →
/// `cpu-x86_64`, `NVIDIA H200` → `nvidia-h200`, `NVIDIA A100 80GB PCIe` →
/// `nvidia-a100-80gb-pcie`).
pub fn device_key(device: &DeviceIdentity) -> String {
    sanitize(&device.class)
}

/// Lower-case ASCII letters, digits, `-` and `_`; every other run of
/// characters becomes one `-`, with none at either end (`unnamed` when
/// nothing is left).
fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-');
    if out.is_empty() {
        "unnamed".into()
    } else {
        out.chars().take(96).collect()
    }
}

/// The file stem of a name: the name itself when it is already a file
/// name of lower-case letters, digits, `-` and `_` (every built-in
/// workload's), else its sanitized form and 8 hex digits of its SHA-256, so
/// distinct names (`Tiny`, `TINY`, `tiny.`, `模型`, `数据`) never share a file.
pub fn file_stem(name: &str) -> String {
    let clean = sanitize(name);
    if clean == name {
        return clean;
    }
    let digest = crate::Digest::sha256(name.as_bytes());
    format!("{clean}-{}", &digest.to_string()[..8])
}

/// Where the golden of `trace` lives under `dir`.
pub fn golden_path(dir: &Path, trace: &RecordedGemmTrace) -> PathBuf {
    golden_path_for(dir, &trace.context.device, &trace.workload)
}

/// Where the golden of `workload` recorded on `device` lives under `dir`.
pub fn golden_path_for(dir: &Path, device: &DeviceIdentity, workload: &str) -> PathBuf {
    dir.join(device_key(device))
        .join(format!("{}.gat", file_stem(workload)))
}

/// The goldens under `dir` of `device` that none of `workloads` writes:
/// left behind by a workload no longer run (as insta's unreferenced
/// snapshots). Only golden files (`*.gat`) of that device's folder, sorted;
/// pending candidates are `review`'s.
pub fn unreferenced(dir: &Path, device: &DeviceIdentity, workloads: &[&str]) -> Vec<PathBuf> {
    let folder = dir.join(device_key(device));
    let written: Vec<PathBuf> = workloads
        .iter()
        .map(|w| golden_path_for(dir, device, w))
        .collect();
    let Ok(files) = std::fs::read_dir(&folder) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = files
        .flatten()
        .map(|f| f.path())
        .filter(|p| p.extension().is_some_and(|e| e == "gat"))
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .filter(|p| !written.contains(p))
        .collect();
    out.sort();
    out
}

/// Finds the golden for `trace` under `dir`, or says which is missing and
/// what is there.
pub fn find_golden(dir: &Path, trace: &RecordedGemmTrace) -> Result<PathBuf> {
    let path = golden_path(dir, trace);
    if path.is_file() {
        return Ok(path);
    }
    let mut available: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .flat_map(|d| {
            let device = d.file_name().to_string_lossy().into_owned();
            std::fs::read_dir(d.path())
                .into_iter()
                .flatten()
                .flatten()
                .filter(|f| f.path().extension().is_some_and(|x| x == "gat"))
                .map(move |f| format!("{device}/{}", f.file_name().to_string_lossy()))
        })
        .collect();
    available.sort();
    Err(Error::GoldenMissing {
        path,
        workload: trace.workload.clone(),
        device: device_key(&trace.context.device),
        available: if available.is_empty() {
            "none".into()
        } else {
            available.join(", ")
        },
    })
}

/// What `bless` did or would do.
#[derive(Debug)]
pub struct BlessOutcome {
    /// Where the golden is: `DIR/<device>/<workload>.gat`.
    pub path: PathBuf,
    /// The difference from the golden it replaces (None when there was none).
    pub replaced: Option<TraceDiff>,
    /// Whether the file was written.
    pub written: bool,
}

/// Writes `trace` as the golden under `dir`. An existing golden is replaced
/// only with `force`; either way the outcome carries the diff against it, so
/// the caller can show what changes. An unreadable existing golden is
/// replaced only with `force` too.
pub fn bless(dir: &Path, trace: &RecordedGemmTrace, force: bool) -> Result<BlessOutcome> {
    let path = golden_path(dir, trace);
    let replaced = if path.exists() {
        match RecordedGemmTrace::read(&path) {
            Ok(old) => Some(TraceDiff::between(&old, trace)),
            Err(e) if !force => return Err(e),
            Err(_) => None,
        }
    } else {
        None
    };
    if path.exists() && !force {
        return Ok(BlessOutcome {
            path,
            replaced,
            written: false,
        });
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    trace.write(&path, force)?;
    Ok(BlessOutcome {
        path,
        replaced,
        written: true,
    })
}

/// Where a drifted candidate for the golden at `golden` waits for review:
/// `DIR/<device>/<workload>.gat.pending`.
pub fn pending_path(golden: &Path) -> PathBuf {
    let mut name = golden.as_os_str().to_owned();
    name.push(".pending");
    PathBuf::from(name)
}

/// Keeps `trace` as the pending candidate beside its golden under `dir`
/// (replacing an older pending candidate: pending files are scratch) and
/// returns its path.
pub fn write_pending(dir: &Path, trace: &RecordedGemmTrace) -> Result<PathBuf> {
    let path = pending_path(&golden_path(dir, trace));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    trace.write(&path, true)?;
    Ok(path)
}

/// A candidate waiting for review.
#[derive(Debug)]
pub struct Pending {
    /// The pending file.
    pub path: PathBuf,
    /// The golden it would replace.
    pub golden: PathBuf,
    /// The candidate.
    pub trace: RecordedGemmTrace,
    /// SHA-256 of the pending file's bytes, as read: what `review` shows
    /// and `accept --expect` must see again.
    pub digest: crate::Digest,
    /// The difference from the golden (None when there is no golden yet).
    pub diff: Option<TraceDiff>,
}

/// A pending file that is not a usable candidate, and why. Each is the
/// problem of its own file only: the others are still reviewed, accepted
/// or rejected.
#[derive(Debug)]
pub struct Unusable {
    /// The pending file.
    pub path: PathBuf,
    /// Why it cannot be reviewed or accepted.
    pub error: Error,
}

/// The pending candidates under a golden folder.
#[derive(Debug, Default)]
pub struct PendingSet {
    /// The usable candidates, sorted by path.
    pub candidates: Vec<Pending>,
    /// Pending files that cannot be used (unreadable, not a regular file,
    /// or not the candidate of the golden their name says), sorted by path.
    pub unusable: Vec<Unusable>,
}

/// Every pending candidate under `dir`; `only` keeps those whose workload
/// is named, or whose pending file is named by its path (one candidate of a
/// workload pending on several devices); all when empty. An entry of
/// `only` that selects no candidate is an error naming the candidates
/// there are. A pending file that cannot be
/// used is listed in [`PendingSet::unusable`], never a reason to stop.
pub fn pending(dir: &Path, only: &[String]) -> Result<PendingSet> {
    let mut set = PendingSet::default();
    let mut workloads: Vec<String> = Vec::new();
    let devices = match std::fs::read_dir(dir) {
        Ok(d) => d,
        Err(_) if only.is_empty() => return Ok(set),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for device in devices.flatten().filter(|d| d.path().is_dir()) {
        let Ok(files) = std::fs::read_dir(device.path()) else {
            continue;
        };
        for f in files.flatten() {
            let path = f.path();
            let Some(golden) = path
                .to_str()
                .and_then(|p| p.strip_suffix(".pending"))
                .map(PathBuf::from)
            else {
                continue;
            };
            match candidate(dir, &path, golden) {
                Ok(p) => {
                    workloads.push(p.trace.workload.clone());
                    if only.is_empty() || only.iter().any(|o| selects(o, &p)) {
                        set.candidates.push(p);
                    }
                }
                Err(error) => set.unusable.push(Unusable { path, error }),
            }
        }
    }
    set.candidates.sort_by(|a, b| a.path.cmp(&b.path));
    set.unusable.sort_by(|a, b| a.path.cmp(&b.path));
    let missing: Vec<&String> = only
        .iter()
        .filter(|o| !set.candidates.iter().any(|p| selects(o, p)))
        .collect();
    if let Some(w) = missing.first() {
        workloads.sort();
        workloads.dedup();
        let there = workloads;
        return Err(Error::Candidate {
            path: dir.to_path_buf(),
            reason: format!(
                "no pending candidate for workload {w:?} (pending: {})",
                if there.is_empty() {
                    "none".to_string()
                } else {
                    there.join(", ")
                }
            ),
        });
    }
    Ok(set)
}

/// Whether `only` (a workload name or a pending file's path) names `p`.
fn selects(only: &str, p: &Pending) -> bool {
    if p.trace.workload == only {
        return true;
    }
    let path = Path::new(only);
    path == p.path
        || std::fs::canonicalize(path)
            .ok()
            .is_some_and(|c| std::fs::canonicalize(&p.path).is_ok_and(|q| q == c))
}

/// The candidate in `path`, checked to be what its name says: a regular
/// file (not a link, FIFO or device), a readable trace whose plan rebuilds,
/// and the candidate of exactly the golden its name names (same workload
/// and device folder), so `accept` can only install what was recorded for
/// that golden.
fn candidate(dir: &Path, path: &Path, golden: PathBuf) -> Result<Pending> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.file_type().is_file() {
        return Err(Error::Candidate {
            path: path.to_path_buf(),
            reason: "a pending candidate must be a regular file (not a link, FIFO or device)"
                .into(),
        });
    }
    let limits = crate::trace::codec::Limits::default();
    let bytes = crate::util::read_regular(path, limits.max_file_bytes)?;
    let digest = crate::Digest::sha256(&bytes);
    let trace = crate::trace::codec::decode_trace(&bytes, &limits).map_err(|e| Error::Format {
        path: path.to_path_buf(),
        source: e,
    })?;
    drop(bytes);
    let expected = golden_path(dir, &trace);
    if expected != golden {
        return Err(Error::Candidate {
            path: path.to_path_buf(),
            reason: format!(
                "holds workload {:?} recorded on {:?}, whose golden is {}, not {}",
                trace.workload,
                trace.context.device.class,
                expected.display(),
                golden.display()
            ),
        });
    }
    crate::CapturedGemmGraphPlan::from_trace(&trace).map_err(|r| Error::Candidate {
        path: path.to_path_buf(),
        reason: format!("its plan does not rebuild: {r}"),
    })?;
    let diff = if golden.is_file() {
        Some(TraceDiff::between(
            &RecordedGemmTrace::read(&golden)?,
            &trace,
        ))
    } else {
        None
    };
    Ok(Pending {
        path: path.to_path_buf(),
        golden,
        trace,
        digest,
        diff,
    })
}

/// Makes a pending candidate the golden (atomically) and removes the
/// pending file.
pub fn accept(p: &Pending) -> Result<()> {
    if let Some(parent) = p.golden.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    p.trace.write(&p.golden, true)?;
    std::fs::remove_file(&p.path).map_err(|e| Error::io(&p.path, e))
}

/// Drops a pending candidate; the golden stays.
pub fn reject(p: &Pending) -> Result<()> {
    std::fs::remove_file(&p.path).map_err(|e| Error::io(&p.path, e))
}

/// Drops a pending file that is not a usable candidate (the link itself,
/// never what it points to); the golden stays.
pub fn discard(u: &Unusable) -> Result<()> {
    std::fs::remove_file(&u.path).map_err(|e| Error::io(&u.path, e))
}

/// Removes the candidate of `trace`'s golden under `dir`, if one is left
/// from an earlier run: a run that matches the golden settles it. Returns
/// the removed file.
pub fn remove_stale_pending(dir: &Path, trace: &RecordedGemmTrace) -> Result<Option<PathBuf>> {
    let path = pending_path(&golden_path(dir, trace));
    match std::fs::symlink_metadata(&path) {
        Ok(_) => {
            std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
            Ok(Some(path))
        }
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distinct workload names never share a golden file; canonical names
    /// (every built-in's) keep their plain file name.
    #[test]
    fn distinct_names_get_distinct_files() {
        assert_eq!(file_stem("m-sweep"), "m-sweep");
        assert_eq!(file_stem("transformer-block"), "transformer-block");
        let names = [
            "tiny",
            "Tiny",
            "TINY",
            "tiny.",
            "模型",
            "数据",
            "данные",
            "a b",
            "a/b",
        ];
        let stems: std::collections::BTreeSet<String> =
            names.iter().map(|n| file_stem(n)).collect();
        assert_eq!(stems.len(), names.len(), "{stems:?}");
        assert!(file_stem("Tiny").starts_with("tiny-"));
        assert!(file_stem("模型").starts_with("unnamed-"));
        // Same name, same file, every time.
        assert_eq!(file_stem("Tiny"), file_stem("Tiny"));
        // GEMM output files likewise.
        let outs: std::collections::BTreeSet<String> = ["x/y", "x y", "x:y", "x_y", "..", "."]
            .iter()
            .map(|g| crate::diff::output_file_name(g))
            .collect();
        assert_eq!(outs.len(), 6, "{outs:?}");
        assert_eq!(crate::diff::output_file_name("qkv@b8"), "qkv@b8.bin");
    }
    use crate::testkit;

    #[test]
    fn device_keys() {
        let mut d = testkit::device();
        d.class = "NVIDIA H200".into();
        assert_eq!(device_key(&d), "nvidia-h200");
        // One folder per CPU architecture: it is part of the identity.
        d.class = "cpu/x86_64".into();
        assert_eq!(device_key(&d), "cpu-x86_64");
        d.class = "cpu/aarch64".into();
        assert_eq!(device_key(&d), "cpu-aarch64");
        // Models that share a last word keep apart.
        d.class = "NVIDIA H100 PCIe".into();
        assert_eq!(device_key(&d), "nvidia-h100-pcie");
        d.class = "NVIDIA A100 80GB PCIe".into();
        assert_eq!(device_key(&d), "nvidia-a100-80gb-pcie");
        d.class = "Weird/GPU  Name!".into();
        assert_eq!(device_key(&d), "weird-gpu-name");
        d.class = "../..".into();
        assert_eq!(device_key(&d), "unnamed");
    }

    #[test]
    fn bless_refuses_to_replace_without_force_and_reports_the_diff() {
        let dir = std::env::temp_dir().join(format!("gemm-audit-bless-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t = testkit::sample_trace(3);
        let first = bless(&dir, &t, false).unwrap();
        assert!(first.written && first.replaced.is_none());
        let before = std::fs::read(&first.path).unwrap();

        let mut changed = t.clone();
        changed.fingerprints[1].sha256.0[0] ^= 1;
        let refused = bless(&dir, &changed, false).unwrap();
        assert!(!refused.written);
        assert!(!refused.replaced.as_ref().unwrap().is_empty());
        assert_eq!(
            std::fs::read(&first.path).unwrap(),
            before,
            "golden untouched"
        );

        let forced = bless(&dir, &changed, true).unwrap();
        assert!(forced.written);
        assert_eq!(RecordedGemmTrace::read(&forced.path).unwrap(), changed);
        assert_eq!(find_golden(&dir, &changed).unwrap(), forced.path);

        let mut other = t.clone();
        other.workload = "absent".into();
        let e = find_golden(&dir, &other).unwrap_err().to_string();
        assert!(e.contains("absent") && e.contains("synthetic.gat"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// What to do with pending candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Settle {
    /// Show each with its differences and digest; change nothing.
    Review,
    /// Make each the golden.
    Accept,
    /// Drop each; the goldens stay.
    Reject,
}

/// What became of one candidate.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Reviewed, still pending.
    Pending,
    /// Installed as the golden.
    Accepted,
    /// Removed.
    Rejected,
    /// Not accepted: its digest is not the one asked for (a run replaced
    /// it after it was reviewed), or writing failed; the reason says.
    Refused(String),
}

/// One candidate in a [`Settled`] report.
#[derive(Debug, serde::Serialize)]
pub struct SettledCandidate {
    /// The candidate's workload.
    pub workload: String,
    /// Its device class folder.
    pub device: String,
    /// The pending file.
    pub path: PathBuf,
    /// The golden it replaces or creates.
    pub golden: PathBuf,
    /// SHA-256 of the pending file (`accept --expect` takes it).
    pub digest: String,
    /// Whether accepting creates the golden (there is none yet).
    pub new_golden: bool,
    /// Its differences from the golden (empty for a new golden).
    pub differences: Vec<crate::diff::Difference>,
    /// Whether its outputs were compared with the golden's (`None` for a
    /// new golden): an imported profile's are never observed.
    pub numeric: Option<crate::diff::NumericComparison>,
    /// How many GEMMs' outputs were compared with the golden's.
    pub outputs_compared: usize,
    /// GEMMs launched eagerly on one side and replayed from a CUDA graph
    /// on the other (what `review` says beside the differences).
    #[serde(skip)]
    pub launch: Option<crate::diff::LaunchChange>,
    /// What was done.
    pub outcome: Outcome,
    /// The candidate (to show a new golden's content); not serialized.
    #[serde(skip)]
    pub trace: RecordedGemmTrace,
}

/// A pending file that could not be used, in a [`Settled`] report.
#[derive(Debug, serde::Serialize)]
pub struct SettledUnusable {
    /// The pending file.
    pub path: PathBuf,
    /// Why.
    pub error: String,
    /// Whether `reject` removed it.
    pub removed: bool,
}

/// What `review`, `accept` or `reject` did: the one implementation the
/// command line and the Python package share.
#[derive(Debug, serde::Serialize)]
pub struct Settled {
    /// What was asked.
    pub action: Settle,
    /// The golden folder.
    pub golden_dir: PathBuf,
    /// Every usable candidate named (all when none were), by path.
    pub candidates: Vec<SettledCandidate>,
    /// Pending files that cannot be used.
    pub unusable: Vec<SettledUnusable>,
}

impl Settled {
    /// True when nothing failed and nothing is left pending by a review:
    /// a review of candidates is a finding until they are settled.
    pub fn passed(&self) -> bool {
        let reviewed = self.action == Settle::Review && !self.candidates.is_empty();
        !self.errors() && !reviewed
    }

    /// Whether a file failed (a refused candidate, an unusable file left).
    pub fn errors(&self) -> bool {
        self.candidates
            .iter()
            .any(|c| matches!(c.outcome, Outcome::Refused(_)))
            || self.unusable.iter().any(|u| !u.removed)
    }
}

/// Reviews, accepts or rejects the pending candidates under `dir` whose
/// workload is in `only` (every one when empty). `expect` (accept only):
/// each candidate is installed only when its file's digest is one of
/// these (the digest `review` showed), so a candidate a later run put in
/// its place is refused, not installed unseen. `reject` of everything also
/// removes the unusable files.
pub fn settle(dir: &Path, only: &[String], action: Settle, expect: &[String]) -> Result<Settled> {
    if let Some(bad) = expect
        .iter()
        .find(|e| e.len() < 12 || e.len() > 64 || !e.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(Error::Candidate {
            path: dir.to_path_buf(),
            reason: format!(
                "expected digest {bad:?} is not 12 to 64 hex digits of a digest `review` printed"
            ),
        });
    }
    let set = pending(dir, only)?;
    let mut out = Settled {
        action,
        golden_dir: dir.to_path_buf(),
        candidates: Vec::with_capacity(set.candidates.len()),
        unusable: Vec::new(),
    };
    for p in set.candidates {
        let digest = p.digest.to_hex();
        let outcome = match action {
            Settle::Review => Outcome::Pending,
            Settle::Accept
                if !expect.is_empty()
                    && !expect
                        .iter()
                        .any(|e| digest.starts_with(&e.to_ascii_lowercase())) =>
            {
                Outcome::Refused(format!(
                    "its digest {digest} is not the one reviewed ({}); review it again",
                    expect.join(", ")
                ))
            }
            Settle::Accept => match accept(&p) {
                Ok(()) => Outcome::Accepted,
                Err(e) => Outcome::Refused(e.to_string()),
            },
            Settle::Reject => {
                reject(&p)?;
                Outcome::Rejected
            }
        };
        out.candidates.push(SettledCandidate {
            workload: p.trace.workload.clone(),
            device: device_key(&p.trace.context.device),
            path: p.path,
            golden: p.golden,
            digest,
            new_golden: p.diff.is_none(),
            numeric: p.diff.as_ref().map(|d| d.numeric),
            outputs_compared: p.diff.as_ref().map_or(0, |d| d.outputs_compared),
            launch: p.diff.as_ref().and_then(|d| d.launch),
            differences: p.diff.map(|d| d.differences).unwrap_or_default(),
            outcome,
            trace: p.trace,
        });
    }
    for u in set.unusable {
        let removed = action == Settle::Reject && only.is_empty();
        if removed {
            discard(&u)?;
        }
        out.unusable.push(SettledUnusable {
            path: u.path,
            error: u.error.to_string(),
            removed,
        });
    }
    Ok(out)
}
