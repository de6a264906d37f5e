#![allow(unsafe_code)]
//! NVRTC: compile a kernel source to a cubin for one architecture.

use crate::error::CudaError;
use crate::kernel_cache::{self, CacheKey, KernelCache, Outcome};
use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString};
use std::sync::{Mutex, OnceLock};

/// The NVRTC library's version (major, minor).
fn version() -> Result<(i32, i32), CudaError> {
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
    let nvrtc_version = nvrtc_version()?;
    let nvrtc_build = nvrtc_build()?;
    let target = options
        .iter()
        .find_map(|o| o.strip_prefix("--gpu-architecture="))
        .unwrap_or("");
    let key = CacheKey {
        source,
        options,
        target,
        nvrtc_version: &nvrtc_version,
        nvrtc_build: &nvrtc_build,
    };
    let (cache, log) = cache();
    let (cubin, outcome) = cache.get_or_compile(&key, |why| {
        kernel_cache::notify_compile(&format!(
            "compiling {name} for {target} with NVRTC {nvrtc_build} ({why}); \
             once per node and kernel cache, a minute or more for wgmma.cu"
        ));
        compile_uncached(source, name, options)
    })?;
    log.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((name.to_string(), outcome));
    Ok(cubin)
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
