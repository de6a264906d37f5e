//! Helpers shared by the test modules: the binary under test, the
//! repository root and scratch directories.

use std::path::{Path, PathBuf};

/// The `gemm-audit` binary built for these tests.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_gemm-audit");

/// The repository root (the committed goldens are under `traces/`).
pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory under the system temp dir, named after the test
/// binary, the process and the test, and removed on drop.
pub(crate) struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh, empty directory for `test`.
    pub(crate) fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "gemm-audit-{}-{}-{test}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    /// `name` inside the directory.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `bytes` to `name`; returns its path.
    pub(crate) fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).expect("write scratch file");
        p
    }

    /// Names in the directory that look like leftover temporary files.
    pub(crate) fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .expect("read scratch dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|n| n.contains(".tmp"))
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The golden folder of the CPU reference on this machine: `cpu-<arch>`,
/// e.g. `cpu-x86_64` (the architecture is part of the device identity).
pub(crate) fn cpu_key() -> String {
    format!("cpu-{}", std::env::consts::ARCH)
}

/// `g/<cpu key>/<rest>`: a path under a test's golden folder `g`.
pub(crate) fn g_cpu(rest: &str) -> String {
    format!("g/{}/{rest}", cpu_key())
}
