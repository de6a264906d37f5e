#![allow(unsafe_code)]
//! NVRTC: compile a kernel source to a cubin for one architecture.

use crate::catalog;
use crate::error::CudaError;
use crate::kernel_cache::{self, CacheKey, KernelCache, Outcome};
use crate::shipped::{self, NotShipped};
use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString};
use std::sync::{Mutex, OnceLock};

/// An error naming the missing library where NVRTC cannot be loaded
/// (cudarc would panic on its first call): checked by every NVRTC entry
/// point here, and by the backends before they create a context.
pub(crate) fn ensure_loaded() -> Result<(), CudaError> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only checks whether the NVRTC library can be loaded.
    if *PRESENT.get_or_init(|| unsafe { sys::is_culib_present() }) {
        Ok(())
    } else {
        Err(CudaError::msg(
            "NVRTC (libnvrtc.so) was not found; add the CUDA toolkit's lib64 to LD_LIBRARY_PATH",
        ))
    }
}

/// The NVRTC library's version (major, minor).
fn version() -> Result<(i32, i32), CudaError> {
    ensure_loaded()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both pointers are valid for writes of one c_int each.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(CudaError::with("nvrtcVersion"))?;
    Ok((major, minor))
}

/// A created NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed only here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

/// Each module compiled so far and how its cubin was obtained.
type CompileLog = Mutex<Vec<(String, Outcome)>>;

/// The process's compiled-kernel cache (where the environment says), and
/// how each module's cubin was obtained so far.
fn cache() -> &'static (KernelCache, CompileLog) {
    static CACHE: OnceLock<(KernelCache, CompileLog)> = OnceLock::new();
    CACHE.get_or_init(|| {
        (
            KernelCache::from_env(|k| std::env::var(k).ok()),
            Mutex::new(Vec::new()),
        )
    })
}

/// The cache's directory (`off` when disabled) and, per module compiled
/// in this process, `cached` or `compiled` (with why a cache entry was
/// rejected or not stored): kept in the run's volatile metadata.
pub(crate) fn cache_report() -> (String, Vec<(String, String)>) {
    let (cache, log) = cache();
    let dir = cache
        .dir()
        .map_or_else(|| "off".to_string(), |d| d.display().to_string());
    let log = log.lock().unwrap_or_else(|p| p.into_inner());
    (
        dir,
        log.iter()
            .map(|(n, o)| (n.clone(), o.to_string()))
            .collect(),
    )
}

/// Compiles `source` (named `name` in diagnostics) with `options` and
/// returns the cubin, through the process's kernel cache
/// ([`crate::kernel_cache`]): a shipped cubin or a whole cache entry of
/// the same key is loaded instead of compiling; anything else is compiled
/// (said through the compile notice first) and stored. A compile error
/// carries NVRTC's log.
pub(crate) fn compile_cubin(
    source: &str,
    name: &str,
    options: &[String],
) -> Result<Vec<u8>, CudaError> {
    let (cache, log) = cache();
    let (cubin, outcome) = through_cache(cache, source, name, options, |build, target, why| {
        kernel_cache::notify_compile(&format!(
            "compiling {name} for {target} with NVRTC {build} ({why}); \
             once per node and kernel cache, a minute or more for wgmma.cu \
             (`gemm-audit compile-kernels` fills a cache ahead of time, no GPU needed)"
        ));
    })?;
    log.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((name.to_string(), outcome));
    Ok(cubin)
}

/// `source`'s cubin under `options` from `cache` (shipped, cached, or
/// compiled and stored), keyed by the loaded NVRTC; `before_compile` is
/// told NVRTC's build, the target and why nothing shipped was admitted.
fn through_cache(
    cache: &KernelCache,
    source: &str,
    name: &str,
    options: &[String],
    before_compile: impl FnOnce(&str, &str, &NotShipped),
) -> Result<(Vec<u8>, Outcome), CudaError> {
    let nvrtc_version = nvrtc_version()?;
    let nvrtc_build = nvrtc_build()?;
    let key = CacheKey::of_compile(source, options, &nvrtc_version, &nvrtc_build);
    cache.get_or_compile(&key, |why| {
        before_compile(&nvrtc_build, key.target, why);
        compile_uncached(source, name, options)
    })
}

/// Compiles, ahead of any run, every module a device of `arch` (`sm_90`)
/// loads ([`crate::shipped::node_modules`]) into the process's kernel
/// cache (where [`kernel_cache::KERNEL_CACHE_ENV`] says), so that a node
/// whose NVRTC release has no shipped cubins compiles nothing in its first
/// process. NVRTC needs no GPU: a CI image can be built with its cache
/// filled by the NVRTC its nodes will load. `before_compile` is told each
/// module it compiles (`wgmma.cu for sm_90a with NVRTC 13.0.48
/// (CL-36260728)`) before the compile. Returns each module
/// (`wgmma.cu.sm_90a`) and how its cubin was obtained: `shipped` ones are
/// not stored (the node admits them from the binary). An architecture name
/// that is none, a cache that is off, a compile error or an entry that
/// could not be stored is an error naming it.
pub fn fill_kernel_cache(
    arch: &str,
    before_compile: impl FnMut(&str),
) -> Result<Vec<(String, Outcome)>, CudaError> {
    fill_kernel_cache_in(&cache().0, arch, before_compile)
}

/// [`fill_kernel_cache`] into `cache` (its shipped cubins, if any, looked
/// up first) rather than the process's.
pub fn fill_kernel_cache_in(
    cache: &KernelCache,
    arch: &str,
    mut before_compile: impl FnMut(&str),
) -> Result<Vec<(String, Outcome)>, CudaError> {
    let modules = shipped::node_modules(arch).ok_or_else(|| {
        CudaError::msg(format!(
            "`{arch}` is not a GPU architecture (expected sm_ and the compute capability, e.g. sm_90)"
        ))
    })?;
    if cache.dir().is_none() {
        return Err(CudaError::msg(format!(
            "the kernel cache is off ({} is `off`, or none of it, XDG_CACHE_HOME and HOME is set): \
             name its directory to fill it",
            kernel_cache::KERNEL_CACHE_ENV
        )));
    }
    let mut filled = Vec::with_capacity(modules.len());
    for (module, source, target) in modules {
        let options = catalog::compile_options(&target);
        let (_, outcome) = through_cache(cache, source, module, &options, |build, target, _| {
            before_compile(&format!("{module} for {target} with NVRTC {build}"));
        })?;
        if let Outcome::Compiled {
            store_failed: Some(e),
            ..
        } = &outcome
        {
            return Err(CudaError::msg(format!(
                "{module} for {target} compiled but could not be stored in the kernel cache: {e}"
            )));
        }
        filled.push((format!("{module}.{target}"), outcome));
    }
    Ok(filled)
}

/// The loaded NVRTC's version as the kernel cache keys it (`13.0`).
pub fn nvrtc_version() -> Result<String, CudaError> {
    let (major, minor) = version()?;
    Ok(format!("{major}.{minor}"))
}

/// The loaded NVRTC's release and build (`13.0.88 (CL-36424714)`), read
/// once per process from the PTX header of a one-line program it compiles
/// (about 20 ms): part of the kernel-cache key, since patch releases of one
/// version compile different cubins. `unknown` where the header says
/// neither (nothing shipped is admitted then; the cache still keys by it).
pub fn nvrtc_build() -> Result<String, CudaError> {
    static BUILD: OnceLock<String> = OnceLock::new();
    if let Some(b) = BUILD.get() {
        return Ok(b.clone());
    }
    let ptx = probe_ptx()?;
    let build = kernel_cache::nvrtc_build_of(&ptx).unwrap_or_else(|| "unknown".into());
    Ok(BUILD.get_or_init(|| build).clone())
}

/// The PTX NVRTC makes of an empty kernel, with its default options.
fn probe_ptx() -> Result<String, CudaError> {
    ensure_loaded()?;
    let src = CString::new("extern \"C\" __global__ void gemm_audit_probe() {}").expect("no NUL");
    let name = CString::new("probe.cu").expect("no NUL");
    let prog = Program(
        result::create_program(&src, Some(&name))
            .map_err(|e| CudaError::new("nvrtcCreateProgram(probe.cu)", e))?,
    );
    // SAFETY: `prog` is a live program; no options.
    unsafe { result::compile_program::<&str>(prog.0, &[]) }
        .map_err(|e| CudaError::new("NVRTC could not compile its version probe", e))?;
    // SAFETY: `prog` compiled successfully.
    let raw = unsafe { result::get_ptx(prog.0) }
        .map_err(|e| CudaError::new("nvrtcGetPTX(probe.cu)", e))?;
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Compiles `source` (named `name` in diagnostics) with NVRTC and
/// `options` to a cubin, bypassing the kernel cache and the shipped
/// cubins. Needs only NVRTC (no GPU): how the shipped cubins are made.
pub fn compile_uncached(
    source: &str,
    name: &str,
    options: &[String],
) -> Result<Vec<u8>, CudaError> {
    ensure_loaded()?;
    let src = CString::new(source)
        .map_err(|_| CudaError::msg(format!("{name}: source holds a NUL byte")))?;
    let cname =
        CString::new(name).map_err(|_| CudaError::msg(format!("{name}: name holds a NUL byte")))?;
    let prog = Program(
        result::create_program(&src, Some(&cname))
            .map_err(|e| CudaError::new(format!("nvrtcCreateProgram({name})"), e))?,
    );
    // SAFETY: `prog` is a live program; the options are plain strings.
    let compiled = unsafe { result::compile_program(prog.0, options) };
    if let Err(e) = compiled {
        // SAFETY: `prog` is a live program.
        let log = unsafe { result::get_program_log(prog.0) }
            .ok()
            .map(|raw| {
                let bytes: Vec<u8> = raw
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        // The message names the NVRTC error, so the backend error's reason
        // does not repeat it.
        return Err(CudaError::new(
            format!("NVRTC failed to compile {name} ({e:?}) with {options:?}:\n{log}"),
            e,
        ));
    }
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; `size` is valid for one write.
    unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(|e| CudaError::new(format!("nvrtcGetCUBINSize({name})"), e))?;
    if size == 0 {
        return Err(CudaError::msg(format!(
            "NVRTC produced no cubin for {name} (is the architecture real?)"
        )));
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` holds exactly the `size` bytes NVRTC reported.
    unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }
        .result()
        .map_err(|e| CudaError::new(format!("nvrtcGetCUBIN({name})"), e))?;
    Ok(cubin)
}

/// A C string from the driver, copied (empty when null).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string that stays valid
/// for the duration of the call.
pub(crate) unsafe fn c_string(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod fill_tests {
    use super::*;
    use crate::shipped::SHIPPED;

    /// A cache filled by the NVRTC this process loads holds every module a
    /// node of the architecture compiles, which a second fill (as the
    /// node's first run) then finds without compiling; a node whose NVRTC
    /// release is shipped is told so and nothing is stored. Needs NVRTC,
    /// no GPU (`LD_LIBRARY_PATH` naming `libnvrtc.so.13`).
    #[test]
    #[ignore = "needs the NVRTC library"]
    fn a_filled_cache_serves_every_module_without_compiling() {
        let dir = std::env::temp_dir().join(format!("gemm-audit-fill-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = KernelCache::at(&dir);
        let mut compiled = Vec::new();
        let first =
            fill_kernel_cache_in(&cache, "sm_80", |m| compiled.push(m.to_string())).unwrap();
        let names: Vec<&str> = first.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(
            names,
            [
                "gemm.cu.sm_80",
                "sha256.cu.sm_80",
                "nh128.cu.sm_80",
                "seed.cu.sm_80"
            ]
        );
        assert_eq!(compiled.len(), 4, "{compiled:?}");
        assert!(first.iter().all(|(_, o)| matches!(
            o,
            Outcome::Compiled {
                store_failed: None,
                ..
            }
        )));
        assert!(std::fs::read_dir(&dir).unwrap().count() > 0);
        let second =
            fill_kernel_cache_in(&cache, "sm_80", |m| panic!("compiled {m} again")).unwrap();
        assert!(second.iter().all(|(_, o)| *o == Outcome::Hit), "{second:?}");

        // Where this NVRTC's release is shipped (run it under 13.0.88 and
        // under another), Hopper's modules are admitted, not stored.
        if SHIPPED
            .iter()
            .any(|s| s.nvrtc_build == nvrtc_build().unwrap())
        {
            let shipped = KernelCache::at(dir.join("hopper")).with_shipped(SHIPPED);
            let hopper =
                fill_kernel_cache_in(&shipped, "sm_90", |m| panic!("compiled {m}")).unwrap();
            assert_eq!(hopper.len(), 5);
            assert!(
                hopper.iter().all(|(_, o)| *o == Outcome::Shipped),
                "{hopper:?}"
            );
            assert!(!dir.join("hopper").exists());
        }
        let err = fill_kernel_cache_in(&cache, "sm_90a", |_| {}).unwrap_err();
        assert!(
            err.to_string()
                .contains("`sm_90a` is not a GPU architecture"),
            "{err}"
        );
        assert!(
            fill_kernel_cache_in(&KernelCache::off(), "sm_90", |_| {})
                .unwrap_err()
                .to_string()
                .contains("the kernel cache is off")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
