//! `import` (PyTorch profiler traces to gemm-audit traces) and `census`
//! (which kernels served which m).

use super::*;
use gemm_audit::profile::{self, ImportOptions, ImportedProfile};
use std::path::Path;

/// `gemm-audit import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// PyTorch profiler traces (`export_chrome_trace`,
    /// `tensorboard_trace_handler`): `.json` or `.json.gz`, one per rank.
    #[arg(required = true, value_name = "PROFILE")]
    pub profiles: Vec<PathBuf>,
    /// Where to write: a trace file for one profile; a folder (made if
    /// missing) for several, each written as its profile's name with
    /// `.gat` for its extensions.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// The traces' workload name (default: the profile's file name without
    /// extensions, timestamp and rank marker, so a job's ranks share one).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// A library version the profile does not record, part of every
    /// route's identity (repeatable), e.g. `--library cublas=13.1.0`.
    #[arg(long, value_name = "NAME=VERSION", value_parser = name_value)]
    pub library: Vec<(String, String)>,
    /// The torch version the profile was taken with (it does not record it).
    #[arg(long, value_name = "VERSION")]
    pub torch_version: Option<String>,
    /// Replace existing output files.
    #[arg(long)]
    pub force: bool,
    /// Output format: a table, or JSON (docs/schema/import.schema.json).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `gemm-audit census`.
#[derive(Debug, clap::Args)]
pub struct CensusArgs {
    /// Profiles (`.json`, `.json.gz`) or traces (`.gat`), or folders of
    /// them.
    #[arg(required = true, value_name = "PROFILE_OR_TRACE")]
    pub inputs: Vec<PathBuf>,
    /// Output: a table, JSON (docs/schema/census.schema.json) or Markdown.
    #[arg(long, value_enum, default_value_t = CensusFormat::Table)]
    pub format: CensusFormat,
    /// Also list families no flag applies to (default: flagged ones and a
    /// count of the rest).
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CensusFormat {
    /// Human-readable table.
    Table,
    /// JSON.
    Json,
    /// Markdown (for a pull request or a CI summary).
    Markdown,
}

fn name_value(s: &str) -> Result<(String, String), NotNameValue> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => {
            Ok((k.trim().to_string(), v.trim().to_string()))
        }
        _ => Err(NotNameValue(s.to_string())),
    }
}

/// A library version that is not `NAME=VERSION` (the text as given).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NotNameValue(String);

impl std::fmt::Display for NotNameValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} is not NAME=VERSION", self.0)
    }
}

impl std::error::Error for NotNameValue {}

/// The trace file a profile is written to inside a folder.
fn output_name(profile: &Path) -> String {
    let name = profile
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "profile".into());
    let mut s = name.as_str();
    for ext in [".gz", ".json", ".trace", ".pt"] {
        s = s.strip_suffix(ext).unwrap_or(s);
    }
    format!("{}.gat", if s.is_empty() { "profile" } else { s })
}

fn import_options(a: &ImportArgs) -> ImportOptions {
    ImportOptions {
        workload: a.workload.clone(),
        libraries: a.library.iter().cloned().collect(),
        framework_version: a.torch_version.clone(),
        ..ImportOptions::default()
    }
}

/// One line saying what an import found.
fn summary_line(p: &ImportedProfile) -> String {
    let t = &p.trace;
    let Some(o) = &t.observation else {
        return format!("{} GEMMs", t.routes.len());
    };
    let unowned = o.gemms.iter().filter(|g| g.region.is_some()).count();
    let owned = o.gemms.len() - unowned;
    let unshaped = o
        .gemms
        .iter()
        .filter(|g| g.region.is_none() && !g.shapes_recorded)
        .count();
    let rank = match (o.rank, o.world_size) {
        (Some(r), Some(w)) => format!(", rank {r} of {w}"),
        (Some(r), None) => format!(", rank {r}"),
        _ => String::new(),
    };
    format!(
        "{} GEMMs ({owned} GEMM ops{}, {unowned} in regions no GEMM op owns) on {}{rank}; kernels: {} bound, {} beside GEMMs, {} unowned GEMM kernels, {} convolution kernels, {} other activities, {} unbound",
        t.routes.len(),
        if unshaped > 0 {
            format!(", {unshaped} without shapes")
        } else {
            String::new()
        },
        t.context.device.class,
        o.bound_kernels,
        o.beside_gemms,
        o.unowned_gemm_kernels,
        p.convolution_kernels,
        o.non_gemm,
        o.unbound,
    )
}

pub(super) fn cmd_import(a: ImportArgs) -> Result<u8> {
    let options = import_options(&a);
    let several = a.profiles.len() > 1;
    if several {
        if a.output.exists() && !a.output.is_dir() {
            anyhow::bail!(
                "{}: with several profiles, -o names a folder (this is a file)",
                a.output.display()
            );
        }
        std::fs::create_dir_all(&a.output)
            .with_context(|| format!("making {}", a.output.display()))?;
    }
    let mut failed = 0usize;
    let mut docs = Vec::new();
    let mut written: Vec<PathBuf> = Vec::new();
    for path in &a.profiles {
        let out = if several {
            a.output.join(output_name(path))
        } else {
            a.output.clone()
        };
        if written.contains(&out) {
            errln!(
                "gemm-audit: error: {} and another profile would both be written to {}",
                sanitize(&path.display().to_string()),
                sanitize(&out.display().to_string())
            );
            failed += 1;
            continue;
        }
        let started = std::time::Instant::now();
        let imported = profile::import_file(path, &options).map_err(anyhow::Error::from);
        let result = imported.and_then(|p| {
            p.trace
                .write(&out, a.force)
                .map_err(anyhow::Error::from)
                .map(|()| p)
        });
        match result {
            Ok(p) => {
                written.push(out.clone());
                let secs = started.elapsed().as_secs_f64();
                match a.format {
                    Format::Table => outln!(
                        "{} -> {}: {} ({secs:.2} s)",
                        path.display(),
                        out.display(),
                        summary_line(&p)
                    ),
                    Format::Json => docs.push(serde_json::json!({
                        "profile": path.display().to_string(),
                        "trace": out.display().to_string(),
                        "workload": p.trace.workload,
                        "gemms": p.trace.routes.len(),
                        "device": p.trace.context.device.class,
                        "observation": p.trace.observation,
                    })),
                }
                if let Some(o) = &p.trace.observation {
                    for n in &o.notes {
                        note!("  note: {n}");
                    }
                }
            }
            Err(e) => {
                failed += 1;
                errln!("gemm-audit: error: {}", sanitize(&error_message(&e)));
                if matches!(a.format, Format::Json) {
                    docs.push(serde_json::json!({
                        "profile": path.display().to_string(),
                        "error": error_message(&e),
                    }));
                }
            }
        }
    }
    if matches!(a.format, Format::Json) {
        outln!(
            "{}",
            gemm_audit::render::json::json_document(
                "import",
                failed == 0,
                &serde_json::json!({ "imports": docs })
            )
        );
    }
    Ok(if failed == 0 { EXIT_OK } else { EXIT_BAD_INPUT })
}

/// Profiles and traces named by `inputs` (folders searched for `*.gat`,
/// `*.json` and `*.json.gz`, sorted).
fn census_inputs(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in inputs {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    let n = f.to_string_lossy();
                    f.is_file()
                        && (n.ends_with(".gat") || n.ends_with(".json") || n.ends_with(".json.gz"))
                })
                .collect();
            found.sort();
            if found.is_empty() {
                anyhow::bail!(
                    "{}: no profile (.json, .json.gz) or trace (.gat) in this folder",
                    p.display()
                );
            }
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

pub(super) fn cmd_census(a: CensusArgs) -> Result<u8> {
    let files = census_inputs(&a.inputs)?;
    let mut traces = Vec::with_capacity(files.len());
    for f in &files {
        let is_trace = std::fs::File::open(f)
            .and_then(|mut file| {
                use std::io::Read as _;
                let mut magic = [0u8; 8];
                let n = file.read(&mut magic)?;
                Ok(n == 8 && magic == gemm_audit::trace::codec::MAGIC)
            })
            .unwrap_or(false);
        let trace = if is_trace {
            read_trace(f)?
        } else {
            profile::import_file(f, &ImportOptions::default())?.trace
        };
        traces.push((f.display().to_string(), trace));
    }
    let refs: Vec<(String, &RecordedGemmTrace)> =
        traces.iter().map(|(l, t)| (l.clone(), t)).collect();
    let c = gemm_audit::census::census(&refs);
    let flagged = c.flagged().count();
    match a.format {
        CensusFormat::Json => outln!(
            "{}",
            gemm_audit::render::json::json_document("census", flagged == 0, &c)
        ),
        CensusFormat::Markdown => out!("{}", gemm_audit::render::census::markdown(&c, a.all)),
        CensusFormat::Table => out!(
            "{}",
            gemm_audit::render::census::table(&c, a.all, terminal_width())
        ),
    }
    Ok(if flagged == 0 { EXIT_OK } else { EXIT_FINDING })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_versions_are_name_value_pairs() {
        assert_eq!(
            name_value(" cublas = 13.1.0 "),
            Ok(("cublas".into(), "13.1.0".into()))
        );
        let e = name_value("cublas13").unwrap_err();
        assert_eq!(e, NotNameValue("cublas13".into()));
        assert_eq!(e.to_string(), "\"cublas13\" is not NAME=VERSION");
        assert!(name_value("=13.1.0").is_err());
    }
}
