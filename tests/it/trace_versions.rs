//! Traces written by the builds of each older format read as they were
//! written. The fixtures under `tests/data/vN/` are genuine files of those
//! builds (which commit, and the command, are in `docs/trace-format.md`);
//! the expectations below are what each build's own `show --format json`
//! printed for its file.

use crate::common::*;
use gemm_audit::RecordedGemmTrace;
use gemm_audit::trace::codec::FORMAT_VERSION;
use std::process::Command;

/// One genuine older trace and what its writer showed for it.
struct Fixture {
    /// Under `tests/data/`.
    path: &'static str,
    version: u16,
    workload: &'static str,
    /// `launch_set.ordered_digest`, as the writer printed it.
    ordered_digest: &'static str,
    /// Each route's contract, as `show` names it (`kind`, or `kind/splits`).
    routes: &'static [&'static str],
    /// The contracts the context's symbols serve, sorted.
    services: &'static [&'static str],
}

const ENGINE: &str = "engine:tiny-rowdot~scalar-fma";
const TINY: &[&str] = &["scalar-fma", "split-k-fixed/2", "scalar-fma"];
const CPU_SERVICES: &[&str] = &["atomic-unordered", "scalar-fma", "split-k-fixed"];

const FIXTURES: &[Fixture] = &[
    Fixture {
        path: "v2/cpu-tiny.gat",
        version: 2,
        workload: "tiny",
        ordered_digest: "b05beb75fb8d55a3fee3df1909870a4808c5388082905ec0fad0d87e24c768ab",
        routes: TINY,
        services: CPU_SERVICES,
    },
    Fixture {
        path: "v2/cpu-engine-mlp-decode-b1.gat",
        version: 2,
        workload: "mlp-decode@b1",
        ordered_digest: "965e8b22e5db0e32f2738237d023f6441e4705a818c75c9dfc260ae458731b71",
        routes: &[ENGINE, ENGINE],
        services: &[ENGINE],
    },
    Fixture {
        path: "v3/cpu-tiny.gat",
        version: 3,
        workload: "tiny",
        ordered_digest: "b05beb75fb8d55a3fee3df1909870a4808c5388082905ec0fad0d87e24c768ab",
        routes: TINY,
        services: CPU_SERVICES,
    },
    Fixture {
        path: "v3/cpu-engine-mlp-decode-b1.gat",
        version: 3,
        workload: "mlp-decode@b1",
        ordered_digest: "965e8b22e5db0e32f2738237d023f6441e4705a818c75c9dfc260ae458731b71",
        routes: &[ENGINE, ENGINE],
        services: &[ENGINE],
    },
    Fixture {
        path: "v4/cpu-tiny.gat",
        version: 4,
        workload: "tiny",
        ordered_digest: "564e00318d38c17a7524d84b6873661b10b00ef46a7df6194afe5815a6029aa5",
        routes: TINY,
        services: CPU_SERVICES,
    },
    Fixture {
        path: "v4/cpu-engine-mlp-decode-b1.gat",
        version: 4,
        workload: "mlp-decode@b1",
        ordered_digest: "7e6cae17dc3eabd602096e8e77dfc9a4a6711c034a2de3891fb67e4f369a7d30",
        routes: &[ENGINE, ENGINE],
        services: &[ENGINE],
    },
    Fixture {
        path: "v5/cpu-tiny.gat",
        version: 5,
        workload: "tiny",
        ordered_digest: "4bbcb9c4508312132f0e1f7c58b97c869c1759003907055c28b08dac2936726a",
        routes: TINY,
        services: CPU_SERVICES,
    },
    Fixture {
        path: "v5/cpu-engine-mlp-decode-b1.gat",
        version: 5,
        workload: "mlp-decode@b1",
        ordered_digest: "b301cb3f9dde9d672134ca558679fcd3d7ce549ae2de3fdb38ac9926b9f27967",
        routes: &[ENGINE, ENGINE],
        services: &[ENGINE],
    },
    Fixture {
        path: "v6/cpu-tiny.gat",
        version: 6,
        workload: "tiny",
        ordered_digest: "4bbcb9c4508312132f0e1f7c58b97c869c1759003907055c28b08dac2936726a",
        routes: TINY,
        services: CPU_SERVICES,
    },
    Fixture {
        path: "v6/cpu-engine-mlp-decode-b1.gat",
        version: 6,
        workload: "mlp-decode@b1",
        ordered_digest: "6e4703a54d9ccc2515797861cf2f7a058c2e204833893f2196484346e3618b4f",
        routes: &[ENGINE, ENGINE],
        services: &[ENGINE],
    },
    Fixture {
        path: "v6/profile-graph-replay.gat",
        version: 6,
        workload: "graph-replay",
        ordered_digest: "b132a670c8c34b0c888c59ca37825e9e3c04efe787fad73d3a4fb89e99a5bcd2",
        routes: &["vendor-fast", "vendor-fast"],
        services: &["vendor-fast"],
    },
];

fn data(path: &str) -> std::path::PathBuf {
    root().join("tests/data").join(path)
}

/// Each fixture reads with its own format's vocabulary: its routes and
/// services carry the contracts its writer showed, engine contracts by
/// name with their `like`, and the routes hash to the launch-set digest
/// the writer stored (the plan rebuilds, so every route field frames as
/// it did).
#[test]
fn every_older_format_reads_as_its_writer_wrote_it() {
    for f in FIXTURES {
        let bytes = std::fs::read(data(f.path)).unwrap();
        assert_eq!(
            u16::from_le_bytes([bytes[8], bytes[9]]),
            f.version,
            "{}",
            f.path
        );
        assert!(bytes.len() < 8 << 10, "{} stays small", f.path);
        let t = RecordedGemmTrace::from_bytes(&bytes)
            .unwrap_or_else(|e| panic!("{} does not read: {e}", f.path));
        assert_eq!(t.workload, f.workload, "{}", f.path);
        assert_eq!(
            t.launch_set.ordered_digest.to_hex(),
            f.ordered_digest,
            "{}",
            f.path
        );
        let routes: Vec<String> = t.routes.iter().map(|r| r.contract.to_string()).collect();
        assert_eq!(routes, f.routes, "{}", f.path);
        let mut services: Vec<String> = t
            .context
            .modules
            .iter()
            .flat_map(|m| &m.symbols)
            .flat_map(|s| &s.serves)
            .map(|s| s.contract.to_string())
            .collect();
        services.sort();
        services.dedup();
        assert_eq!(services, f.services, "{}", f.path);
        assert!(
            gemm_audit::CapturedGemmGraphPlan::from_trace(&t).is_ok(),
            "{}: the routes no longer hash to the stored launch set",
            f.path
        );
        // Re-encoding writes the current format, which reads back equal.
        let again = t.to_bytes().unwrap();
        assert_eq!(u16::from_le_bytes([again[8], again[9]]), FORMAT_VERSION);
        assert_eq!(
            RecordedGemmTrace::from_bytes(&again).unwrap(),
            t,
            "{}",
            f.path
        );
    }
}

/// `show` prints an older engine golden's contract by name with its
/// `like` (the format-5 one failed with exit 3, "payload does not
/// decode: InvalidBooleanValue(11)").
#[test]
fn show_names_an_older_engine_contract() {
    for f in FIXTURES.iter().filter(|f| f.routes.contains(&ENGINE)) {
        let out = Command::new(BIN)
            .arg("show")
            .arg(data(f.path))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}",
            f.path,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.matches(ENGINE).count(), f.routes.len(), "{stdout}");
        assert!(!stdout.contains("vendor-invariant"), "{stdout}");
    }
}

/// A format-6 observation (an imported profile with a graph replay) reads
/// with everything its writer stored; format 6 did not say which GEMMs a
/// graph replayed, but its region names the graph launch, so that GEMM
/// reads as replayed and the others as eager.
#[test]
fn a_version_6_observation_reads_its_graph_launch_region_as_replayed() {
    let t = RecordedGemmTrace::read(&data("v6/profile-graph-replay.gat")).unwrap();
    let o = t.observation.as_ref().expect("an imported profile");
    assert_eq!(
        (o.source.as_str(), o.file.as_str()),
        ("pytorch-profiler", "bound-profile.json")
    );
    assert_eq!(
        (
            o.events,
            o.bound_kernels,
            o.beside_gemms,
            o.unowned_gemm_kernels
        ),
        (11, 2, 1, 1)
    );
    let regions: Vec<Option<&str>> = o.gemms.iter().map(|g| g.region.as_deref()).collect();
    assert_eq!(
        regions,
        [None, Some("cudaGraphLaunch (no enclosing range)")]
    );
    assert_eq!(
        o.gemms[0].beside,
        ["memcpy: Memcpy DtoD (Device -> Device)"]
    );
    let graphs: Vec<Option<&str>> = o.gemms.iter().map(|g| g.graph.as_deref()).collect();
    assert_eq!(graphs, [None, Some("cudaGraphLaunch (no enclosing range)")]);
}
