//! Cubins shipped with the crate, so a fresh Hopper node's first process
//! loads its kernels instead of compiling them (NVRTC takes about a
//! minute and a half on a freshly started machine; the figures are in
//! `docs/performance.md`).
//!
//! Each shipped cubin is a kernel-cache entry ([`crate::kernel_cache`])
//! that NVRTC compiled from the committed `kernels/*.cu` sources with the
//! pinned options (no GPU is needed: the `ship_cubins` example). It is
//! admitted exactly where the node would compile the same source: its
//! header's key must be the node's own key (the source, the options, the
//! architecture, and the version, release and build of the NVRTC the node
//! loaded) and its cubin must match the header's SHA-256. So the kernels a
//! node runs are still the committed sources' compilation by its own
//! NVRTC, and the artifacts the goldens hold; a node of another
//! architecture or NVRTC release compiles as before, and the compile log
//! says why. The shipped ones are those of the release the GPU hosts run
//! (`docs/fleet.md`). The tests below fail when a `.cu` file or the
//! options change without the cubins being regenerated
//! (`docs/gpu-validation.md` says how).

use crate::catalog;
use crate::kernel_cache::{self, CacheKey, Rejected};
use gemm_audit_model::digest::Digest;
use std::fmt;

/// The environment variable that turns the shipped cubins off (`off`), so
/// a node compiles (or uses its disk cache) as if none were shipped.
pub const SHIPPED_KERNELS_ENV: &str = "GEMM_AUDIT_SHIPPED_KERNELS";

/// One cubin shipped with the crate.
#[derive(Clone, Copy)]
pub struct ShippedCubin {
    /// The module's source file under `kernels/`.
    pub module: &'static str,
    /// The architecture it was compiled for (`sm_90`, `sm_90a`).
    pub target: &'static str,
    /// The NVRTC version that compiled it (`13.0`).
    pub nvrtc_version: &'static str,
    /// That NVRTC's release and build (`13.0.88 (CL-36424714)`).
    pub nvrtc_build: &'static str,
    /// The kernel-cache entry: header (key, length, SHA-256) and cubin.
    pub entry: &'static [u8],
}

impl fmt::Debug for ShippedCubin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShippedCubin")
            .field("module", &self.module)
            .field("target", &self.target)
            .field("nvrtc_version", &self.nvrtc_version)
            .field("nvrtc_build", &self.nvrtc_build)
            .field("entry_bytes", &self.entry.len())
            .finish()
    }
}

/// A shipped entry, by NVRTC version and build, module and target: the
/// file is `kernels/cubin/nvrtc-<version>/<module>.<target>`.
macro_rules! shipped {
    ($nvrtc:literal, $build:expr, $module:literal, $target:literal) => {
        ShippedCubin {
            module: $module,
            target: $target,
            nvrtc_version: $nvrtc,
            nvrtc_build: $build,
            entry: include_bytes!(concat!(
                "../kernels/cubin/nvrtc-",
                $nvrtc,
                "/",
                $module,
                ".",
                $target
            )),
        }
    };
}

/// The NVRTC 13.0 release the shipped 13.0 cubins come from (the GPU
/// hosts' own: its cubins are the H200 goldens' module artifacts).
const BUILD_13_0: &str = "13.0.88 (CL-36424714)";

/// Every cubin shipped: the modules a compute-capability-9.0 device
/// (H100, H200) compiles ([`HOPPER_MODULES`]), per supported NVRTC version.
pub static SHIPPED: &[ShippedCubin] = &[
    shipped!("13.0", BUILD_13_0, "gemm.cu", "sm_90"),
    shipped!("13.0", BUILD_13_0, "sha256.cu", "sm_90"),
    shipped!("13.0", BUILD_13_0, "nh128.cu", "sm_90"),
    shipped!("13.0", BUILD_13_0, "seed.cu", "sm_90"),
    shipped!("13.0", BUILD_13_0, "wgmma.cu", "sm_90a"),
];

/// The NVRTC modules a compute-capability-9.0 device compiles: file,
/// source and target (the backend compiles every module for the device's
/// own `sm_90`, and `wgmma.cu` for `sm_90a`).
pub const HOPPER_MODULES: [(&str, &str, &str); 5] = [
    ("gemm.cu", catalog::GEMM_SOURCE, "sm_90"),
    ("sha256.cu", catalog::SHA256_SOURCE, "sm_90"),
    ("nh128.cu", catalog::NH128_SOURCE, "sm_90"),
    ("seed.cu", catalog::SEED_SOURCE, "sm_90"),
    ("wgmma.cu", catalog::WGMMA_SOURCE, "sm_90a"),
];

/// The NVRTC modules a device of architecture `arch` (`sm_90`, `sm_80`)
/// compiles when the backend opens it: file, source and target. Every
/// module is compiled for `arch` itself, and `wgmma.cu` for
/// [`catalog::wgmma_target`] where there is one ([`HOPPER_MODULES`]). `None` for a name
/// that is not `sm_` and a two- or three-digit compute capability.
pub fn node_modules(arch: &str) -> Option<Vec<(&'static str, &'static str, String)>> {
    let digits = arch.strip_prefix("sm_")?;
    if !(2..=3).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut modules: Vec<_> = HOPPER_MODULES
        .iter()
        .filter(|(module, _, _)| *module != "wgmma.cu")
        .map(|&(module, source, _)| (module, source, arch.to_string()))
        .collect();
    if let Some(target) = catalog::wgmma_target(arch) {
        modules.push(("wgmma.cu", catalog::WGMMA_SOURCE, target.to_string()));
    }
    Some(modules)
}

/// Why no shipped cubin was admitted for a key: said in the compile log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotShipped {
    /// Turned off ([`SHIPPED_KERNELS_ENV`]).
    Off,
    /// Nothing shipped for this architecture and NVRTC build.
    NoneFor {
        /// The node's architecture.
        target: String,
        /// The node's NVRTC release and build.
        nvrtc_build: String,
        /// What is shipped: `NVRTC 13.0.88 (CL-36424714) for sm_90, sm_90a`.
        shipped: String,
    },
    /// Cubins are shipped for this architecture and NVRTC build, but none
    /// is of this source and these options.
    OtherSource {
        /// The node's architecture.
        target: String,
        /// The node's NVRTC release and build.
        nvrtc_build: String,
    },
    /// The entry of this key is damaged.
    Rejected(Rejected),
}

impl fmt::Display for NotShipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotShipped::Off => write!(f, "shipped cubins are off ({SHIPPED_KERNELS_ENV})"),
            NotShipped::NoneFor {
                target,
                nvrtc_build,
                shipped,
            } => write!(
                f,
                "no cubin is shipped for {target} with NVRTC {nvrtc_build} (shipped: {shipped})"
            ),
            NotShipped::OtherSource {
                target,
                nvrtc_build,
            } => write!(
                f,
                "the cubins shipped for {target} with NVRTC {nvrtc_build} are not of this source and options"
            ),
            NotShipped::Rejected(r) => write!(f, "the shipped cubin was rejected: {r}"),
        }
    }
}

/// Whether shipped cubins are used, as `getenv` says.
pub fn enabled(getenv: impl Fn(&str) -> Option<String>) -> bool {
    !getenv(SHIPPED_KERNELS_ENV).is_some_and(|v| v.eq_ignore_ascii_case("off"))
}

/// The cubin of `key` among `shipped`, admitted only when an entry's
/// header holds exactly this key and its cubin its SHA-256.
pub fn admit(shipped: &[ShippedCubin], key: &CacheKey<'_>) -> Result<Vec<u8>, NotShipped> {
    admit_digest(shipped, key, &key.digest())
}

/// [`admit`] with the key's digest already made.
pub(crate) fn admit_digest(
    shipped: &[ShippedCubin],
    key: &CacheKey<'_>,
    digest: &Digest,
) -> Result<Vec<u8>, NotShipped> {
    let digest = *digest;
    if let Some(entry) = shipped
        .iter()
        .find(|s| kernel_cache::entry_key(s.entry) == Some(digest))
    {
        return kernel_cache::decode(&digest, entry.entry).map_err(NotShipped::Rejected);
    }
    let same_node = shipped
        .iter()
        .any(|s| s.target == key.target && s.nvrtc_build == key.nvrtc_build);
    if same_node {
        return Err(NotShipped::OtherSource {
            target: key.target.to_string(),
            nvrtc_build: key.nvrtc_build.to_string(),
        });
    }
    Err(NotShipped::NoneFor {
        target: key.target.to_string(),
        nvrtc_build: key.nvrtc_build.to_string(),
        shipped: describe(shipped),
    })
}

/// `NVRTC 13.0.88 (CL-36424714) for sm_90, sm_90a`, one clause per
/// build; `none`.
fn describe(shipped: &[ShippedCubin]) -> String {
    let mut by_version: Vec<(&str, Vec<&str>)> = Vec::new();
    for s in shipped {
        match by_version.iter_mut().find(|(v, _)| *v == s.nvrtc_build) {
            Some((_, targets)) if !targets.contains(&s.target) => targets.push(s.target),
            Some(_) => {}
            None => by_version.push((s.nvrtc_build, vec![s.target])),
        }
    }
    if by_version.is_empty() {
        return "none".into();
    }
    by_version
        .iter()
        .map(|(v, t)| format!("NVRTC {v} for {}", t.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version an NVRTC build reports: `13.0.88 (CL-1)` -> `13.0`.
    fn version_of(build: &str) -> &str {
        build
            .match_indices('.')
            .nth(1)
            .map_or(build, |(i, _)| &build[..i])
    }

    /// The key a node makes compiling `source` with `options` by NVRTC
    /// `build`.
    fn key_of<'a>(source: &'a str, options: &'a [String], build: &'a str) -> CacheKey<'a> {
        CacheKey::of_compile(source, options, version_of(build), build)
    }

    /// Every shipped cubin is the committed source's, under the pinned
    /// options: a `.cu` file or an option changed without regenerating
    /// the cubins fails here, naming the file.
    #[test]
    fn every_shipped_cubin_is_of_the_committed_source() {
        for s in SHIPPED {
            let (_, source, target) = HOPPER_MODULES
                .iter()
                .find(|(m, _, t)| *m == s.module && *t == s.target)
                .unwrap_or_else(|| panic!("{} for {} is not a Hopper module", s.module, s.target));
            let options = catalog::compile_options(target);
            assert_eq!(
                version_of(s.nvrtc_build),
                s.nvrtc_version,
                "{}",
                s.nvrtc_build
            );
            let key = key_of(source, &options, s.nvrtc_build);
            assert_eq!(
                key.target, *target,
                "{}: the options' architecture",
                s.module
            );
            if let Err(why) = admit(std::slice::from_ref(s), &key) {
                panic!(
                    "kernels/cubin/nvrtc-{}/{}.{} is stale ({why}): kernels/{} or the NVRTC options \
                     changed since it was generated; regenerate the shipped cubins with the `ship_cubins` example \
                     (docs/gpu-validation.md, \"Shipped cubins\")",
                    s.nvrtc_version, s.module, s.target, s.module
                );
            }
        }
    }

    /// A Hopper node compiles the shipped modules; another architecture
    /// the same ones but wgmma, for itself; a name that is no
    /// architecture is refused.
    #[test]
    fn the_modules_a_node_compiles_follow_its_architecture() {
        let hopper = node_modules("sm_90").unwrap();
        let shipped: Vec<_> = HOPPER_MODULES
            .iter()
            .map(|&(m, s, t)| (m, s, t.to_string()))
            .collect();
        assert_eq!(hopper, shipped);
        let ampere = node_modules("sm_80").unwrap();
        assert_eq!(
            ampere
                .iter()
                .map(|(m, _, t)| format!("{m}.{t}"))
                .collect::<Vec<_>>(),
            [
                "gemm.cu.sm_80",
                "sha256.cu.sm_80",
                "nh128.cu.sm_80",
                "seed.cu.sm_80"
            ]
        );
        assert_eq!(node_modules("sm_100").unwrap().len(), 4);
        for bad in [
            "",
            "sm_",
            "sm_9",
            "sm_90a",
            "compute_90",
            "sm_1000",
            "sm_x0",
        ] {
            assert!(node_modules(bad).is_none(), "{bad:?}");
        }
    }

    /// Each NVRTC build shipped covers every module a Hopper device
    /// compiles, once: a module added without its cubin fails here.
    #[test]
    fn each_shipped_nvrtc_build_covers_every_hopper_module() {
        let builds: Vec<&str> = SHIPPED.iter().map(|s| s.nvrtc_build).collect();
        assert!(!builds.is_empty(), "no cubin is shipped");
        for v in builds {
            for (module, _, target) in HOPPER_MODULES {
                let n = SHIPPED
                    .iter()
                    .filter(|s| s.nvrtc_build == v && s.module == module && s.target == target)
                    .count();
                assert_eq!(
                    n, 1,
                    "{module} for {target} with NVRTC {v}: {n} shipped cubins"
                );
            }
        }
    }

    /// Every NVRTC module of every committed golden (blessed on a GPU
    /// node that compiled it) whose NVRTC version and architecture are
    /// shipped is exactly the shipped cubin: a node that loads the shipped
    /// cubin runs the artifact its golden holds.
    #[test]
    fn the_goldens_modules_are_the_shipped_cubins() {
        let traces = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces");
        let mut checked = 0;
        for dir in std::fs::read_dir(&traces).unwrap() {
            for entry in std::fs::read_dir(dir.unwrap().path()).unwrap() {
                let path = entry.unwrap().path();
                let t = gemm_audit_model::RecordedGemmTrace::read(&path).unwrap();
                for m in t
                    .context
                    .modules
                    .iter()
                    .filter(|m| m.compiler.name == "nvrtc")
                {
                    let Some(s) = SHIPPED.iter().find(|s| {
                        s.target == m.target
                            && s.nvrtc_version == m.compiler.version
                            && HOPPER_MODULES.iter().any(|(f, src, _)| {
                                *f == s.module
                                    && Digest::sha256(src.as_bytes()) == m.compiler.source_digest
                            })
                    }) else {
                        continue;
                    };
                    let cubin_digest = Digest::sha256(&s.entry[kernel_cache::HEADER_LEN..]);
                    assert_eq!(
                        cubin_digest,
                        m.digest,
                        "{}: its {} module for {} (NVRTC {}) is not the shipped cubin",
                        path.display(),
                        s.module,
                        s.target,
                        s.nvrtc_version
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 7, "{checked} golden modules checked");
    }

    fn fake(
        module: &'static str,
        target: &'static str,
        build: &'static str,
        source: &str,
    ) -> ShippedCubin {
        let options = catalog::compile_options(target);
        let key = key_of(source, &options, build).digest();
        let cubin: Vec<u8> = (0..512u32).map(|i| (i % 253) as u8).collect();
        ShippedCubin {
            module,
            target,
            nvrtc_version: version_of(build),
            nvrtc_build: build,
            entry: Vec::leak(kernel_cache::encode(&key, &cubin)),
        }
    }

    /// Admission is by the node's own key: another NVRTC release of the
    /// same version, another version, another architecture or another
    /// source is compiled, each with its reason; a damaged entry is
    /// rejected.
    #[test]
    fn only_the_nodes_own_key_is_admitted() {
        const B88: &str = "13.0.88 (CL-1)";
        let shipped = [
            fake("gemm.cu", "sm_90", B88, "kernel A"),
            fake("wgmma.cu", "sm_90a", B88, "kernel B"),
        ];
        let o90 = catalog::compile_options("sm_90");
        let o90a = catalog::compile_options("sm_90a");
        let got = admit(&shipped, &key_of("kernel A", &o90, B88)).unwrap();
        assert_eq!(got.len(), 512);
        for other in ["13.0.48 (CL-2)", "13.1.80 (CL-3)"] {
            assert_eq!(
                admit(&shipped, &key_of("kernel A", &o90, other)),
                Err(NotShipped::NoneFor {
                    target: "sm_90".into(),
                    nvrtc_build: other.into(),
                    shipped: "NVRTC 13.0.88 (CL-1) for sm_90, sm_90a".into()
                })
            );
        }
        let o100 = catalog::compile_options("sm_100");
        let e = admit(&shipped, &key_of("kernel A", &o100, B88)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no cubin is shipped for sm_100 with NVRTC 13.0.88 (CL-1) (shipped: NVRTC 13.0.88 (CL-1) for sm_90, sm_90a)"
        );
        assert_eq!(
            admit(&shipped, &key_of("kernel A, edited", &o90, B88)),
            Err(NotShipped::OtherSource {
                target: "sm_90".into(),
                nvrtc_build: B88.into()
            })
        );
        // The same source under the other module's options is another key.
        assert!(admit(&shipped, &key_of("kernel B", &o90, B88)).is_err());
        assert!(admit(&shipped, &key_of("kernel B", &o90a, B88)).is_ok());
        let mut damaged = kernel_cache::encode(&key_of("kernel A", &o90, B88).digest(), &[7u8; 64]);
        *damaged.last_mut().unwrap() ^= 1;
        let bad = [ShippedCubin {
            entry: Vec::leak(damaged),
            ..shipped[0]
        }];
        assert_eq!(
            admit(&bad, &key_of("kernel A", &o90, B88)),
            Err(NotShipped::Rejected(Rejected::Checksum))
        );
        assert_eq!(describe(&[]), "none");
    }

    #[test]
    fn the_environment_turns_them_off() {
        assert!(enabled(|_| None));
        assert!(enabled(|_| Some("on".into())));
        assert!(!enabled(
            |k| (k == SHIPPED_KERNELS_ENV).then(|| "OFF".into())
        ));
    }
}
