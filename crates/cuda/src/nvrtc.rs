#![allow(unsafe_code)]
//! NVRTC: compile a kernel source to a cubin for one architecture.

use crate::error::CudaError;
use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString};

/// The NVRTC library's version (major, minor).
pub(crate) fn version() -> Result<(i32, i32), CudaError> {
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

/// Compiles `source` (named `name` in diagnostics) with `options` and
/// returns the cubin. A compile error carries NVRTC's log.
pub(crate) fn compile_cubin(
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
