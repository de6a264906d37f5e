#![allow(unsafe_code)]
//! Output fingerprints computed where the output lives: the SHA-256 chunk
//! kernel (`kernels/sha256.cu`, compiled with NVRTC) hashes every
//! [`FINGERPRINT_CHUNK_BYTES`] chunk of a device buffer in parallel, and
//! only the 32-byte chunk digests are copied back.

use crate::catalog;
use crate::error::CudaError;
use crate::identity;
use crate::nvrtc;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, DevicePtr, DeviceRepr, DeviceSlice,
    LaunchConfig as CuLaunch, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use gemm_audit_model::digest::Digest;
use gemm_audit_model::trace::fast::FAST_DIGEST_BYTES;
use gemm_audit_model::trace::{FINGERPRINT_CHUNK_BYTES, FingerprintMode, OutputFingerprint};
use std::fmt;
use std::sync::Arc;

/// Bytes of one chunk digest.
const DIGEST_BYTES: usize = 32;
/// Threads per block of the chunk kernel (one chunk per thread).
const THREADS: u32 = 128;
/// The chunk kernel reads 4-byte words: its input must be this aligned.
const ALIGN: u64 = 4;

/// The fast chunk kernel reads 16-byte pairs: its input must be this aligned.
const FAST_ALIGN: u64 = 16;
/// Threads per block of the fast chunk kernel (one warp per chunk).
const FAST_THREADS: u32 = 256;

/// The SHA-256 chunk kernel (and the fast NH chunk kernel, with its keys
/// on the device), compiled and loaded once for one context.
pub struct DeviceFingerprinter {
    ctx: Arc<CudaContext>,
    /// `sha256_chunks`; it keeps its module loaded.
    func: CudaFunction,
    /// `sha256_chunks_many`, of the same module.
    many: CudaFunction,
    /// `nh128_chunks` (see `gemm_audit_model::trace::fast`).
    fast: CudaFunction,
    /// `gemm_audit_model::trace::fast::fast_keys()`, uploaded once.
    keys: CudaSlice<u64>,
}

impl fmt::Debug for DeviceFingerprinter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceFingerprinter")
            .field("ordinal", &self.ctx.ordinal())
            .finish_non_exhaustive()
    }
}

impl DeviceFingerprinter {
    /// Compiles the chunk kernel with NVRTC for the device of `ctx` (any
    /// ordinal) and loads it into `ctx`.
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self, CudaError> {
        nvrtc::ensure_loaded()?;
        let arch = identity::arch(ctx)?;
        Self::compile(ctx, &catalog::compile_options(&arch))
    }

    /// Compiles the chunk kernel with `options` and loads it into `ctx`.
    pub(crate) fn compile(ctx: &Arc<CudaContext>, options: &[String]) -> Result<Self, CudaError> {
        let cubin = nvrtc::compile_cubin(catalog::SHA256_SOURCE, "sha256.cu", options)?;
        let module = ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(CudaError::with("loading the fingerprint cubin"))?;
        let func = module
            .load_function("sha256_chunks")
            .map_err(CudaError::with("fingerprint kernel"))?;
        let many = module
            .load_function("sha256_chunks_many")
            .map_err(CudaError::with("fingerprint kernel over several buffers"))?;
        let cubin = nvrtc::compile_cubin(catalog::NH128_SOURCE, "nh128.cu", options)?;
        let fast = ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(CudaError::with("loading the fast fingerprint cubin"))?
            .load_function("nh128_chunks")
            .map_err(CudaError::with("fast fingerprint kernel"))?;
        let stream = ctx.default_stream();
        let keys = stream
            .clone_htod(&gemm_audit_model::trace::fast::fast_keys())
            .map_err(CudaError::with("uploading the fast fingerprint keys"))?;
        stream
            .synchronize()
            .map_err(CudaError::with("uploading the fast fingerprint keys"))?;
        Ok(DeviceFingerprinter {
            ctx: ctx.clone(),
            func,
            many,
            fast,
            keys,
        })
    }

    /// The output fingerprint of the bytes of `buf` (`buf.len() *
    /// size_of::<T>()` of them), hashed on the device by work enqueued on
    /// `stream`; waits for it. Only the chunk digests are copied to the
    /// host. Equals `OutputFingerprint::of(input_seed, bytes)` of the same
    /// bytes. `stream` and `buf` must belong to this fingerprinter's
    /// context. A view that is not aligned for the kernel's loads is first
    /// copied to an aligned device buffer.
    pub fn fingerprint<T: DeviceRepr>(
        &self,
        stream: &Arc<CudaStream>,
        buf: &CudaView<'_, T>,
        input_seed: u64,
    ) -> Result<OutputFingerprint, CudaError> {
        self.fingerprint_in(FingerprintMode::Strong, stream, buf, input_seed)
    }

    /// [`DeviceFingerprinter::fingerprint`] in `mode`: SHA-256 chunks, or
    /// NH chunks (`gemm_audit_model::trace::fast`). Equals
    /// `OutputFingerprint::with_mode(mode, input_seed, bytes)`.
    pub fn fingerprint_in<T: DeviceRepr>(
        &self,
        mode: FingerprintMode,
        stream: &Arc<CudaStream>,
        buf: &CudaView<'_, T>,
        input_seed: u64,
    ) -> Result<OutputFingerprint, CudaError> {
        let len = buf
            .len()
            .checked_mul(size_of::<T>())
            .ok_or_else(|| CudaError::msg("buffer too large to fingerprint"))?;
        // SAFETY: the bytes are only read (by the chunk kernel) and every
        // byte value is a valid `u8`; `len` covers exactly the view's bytes,
        // so the byte view stays inside it.
        let bytes = unsafe { buf.transmute::<u8>(len) }
            .ok_or_else(|| CudaError::msg("fingerprint view is larger than its buffer"))?;
        Ok(match mode {
            FingerprintMode::Strong => OutputFingerprint::from_chunk_digests(
                input_seed,
                len as u64,
                &self.chunk_digests(stream, &bytes)?,
            ),
            FingerprintMode::Fast => OutputFingerprint::from_fast_chunk_digests(
                input_seed,
                len as u64,
                &self.fast_chunk_digests(stream, &bytes)?,
            ),
            FingerprintMode::NotObserved => OutputFingerprint::not_observed(len as u64),
        })
    }

    /// The strong fingerprints (input seed `input_seed`) of several device
    /// buffers, in order, each equal to `OutputFingerprint::of(input_seed,
    /// bytes)` of its bytes: the chunks of all of them hashed in one launch
    /// on `stream` (a chunk is hashed serially by one thread, so a small
    /// buffer's launch is mostly latency, and buffers hashed one launch at
    /// a time wait on each other), one copy of their digests back. Every
    /// buffer must belong to this fingerprinter's context; one that is not
    /// 4-byte aligned is first copied to an aligned device buffer.
    pub fn fingerprint_many(
        &self,
        stream: &Arc<CudaStream>,
        bufs: &[CudaView<'_, u8>],
        input_seed: u64,
    ) -> Result<Vec<OutputFingerprint>, CudaError> {
        for buf in bufs {
            self.check_context(stream, buf)?;
        }
        // Aligned copies of unaligned buffers, alive until the digests are back.
        let aligned = bufs
            .iter()
            .map(|buf| aligned_copy(stream, buf, ALIGN))
            .collect::<Result<Vec<_>, _>>()?;
        let views: Vec<CudaView<'_, u8>> = bufs
            .iter()
            .zip(&aligned)
            .map(|(buf, copy)| copy.as_ref().map_or_else(|| buf.slice(..), |c| c.as_view()))
            .collect();
        // The table the kernel reads: addresses, lengths, first chunks. The
        // guards make `stream` wait for each buffer's last write (where the
        // context tracks events) and hold its read until the launch is in.
        let mut firsts = Vec::with_capacity(views.len());
        let mut total = 0u64;
        for v in &views {
            firsts.push(total);
            total += v.len().div_ceil(FINGERPRINT_CHUNK_BYTES) as u64;
        }
        let (addresses, guards): (Vec<u64>, Vec<_>) =
            views.iter().map(|v| v.device_ptr(stream)).unzip();
        let lens = views.iter().map(|v| v.len() as u64);
        let table: Vec<u64> = addresses
            .into_iter()
            .chain(lens)
            .chain(firsts.iter().copied())
            .collect();
        let digests = if total == 0 {
            Vec::new()
        } else {
            let table = stream
                .clone_htod(&table)
                .map_err(CudaError::with("uploading the fingerprint table"))?;
            let mut out = stream
                .alloc_zeros::<u8>(total as usize * DIGEST_BYTES)
                .map_err(CudaError::with("allocating digests"))?;
            let blocks = u32::try_from(total.div_ceil(u64::from(THREADS)))
                .map_err(|_| CudaError::msg("buffers too large to fingerprint"))?;
            let buffers = u32::try_from(views.len())
                .map_err(|_| CudaError::msg("too many buffers to fingerprint in one launch"))?;
            let cfg = CuLaunch {
                grid_dim: (blocks, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let chunk_bytes = FINGERPRINT_CHUNK_BYTES as u32;
            let mut lb = stream.launch_builder(&self.many);
            lb.arg(&table)
                .arg(&buffers)
                .arg(&chunk_bytes)
                .arg(&total)
                .arg(&mut out);
            // SAFETY: matches `sha256_chunks_many(const u64*, u32, u32, u64,
            // u8*)`. The table names, per buffer, the address and length of a
            // view of this context (checked above) that stays alive, with its
            // aligned copy, until the digests are copied back below (a
            // synchronizing copy); every address is 4-byte aligned (copied
            // where not), the first chunks ascend from 0 with `total` after
            // the last, and `out` holds 32 bytes per chunk.
            unsafe { lb.launch(cfg) }.map_err(CudaError::with("launching sha256_chunks_many"))?;
            drop(guards);
            stream
                .clone_dtoh(&out)
                .map_err(CudaError::with("downloading digests"))?
        };
        let mut out = Vec::with_capacity(views.len());
        for (v, first) in views.iter().zip(&firsts) {
            let chunks = v.len().div_ceil(FINGERPRINT_CHUNK_BYTES);
            let start = *first as usize * DIGEST_BYTES;
            out.push(OutputFingerprint::from_chunk_digests(
                input_seed,
                v.len() as u64,
                &sha256_digests(&digests[start..start + chunks * DIGEST_BYTES]),
            ));
        }
        Ok(out)
    }

    /// Per-chunk SHA-256 digests of `data`, computed on the device and
    /// copied back (32 bytes per 4096-byte chunk).
    pub(crate) fn chunk_digests(
        &self,
        stream: &Arc<CudaStream>,
        data: &CudaView<'_, u8>,
    ) -> Result<Vec<Digest>, CudaError> {
        Ok(sha256_digests(&self.digests(
            FingerprintMode::Strong,
            stream,
            data,
        )?))
    }

    /// Per-chunk fast (NH) digests of `data`, computed on the device and
    /// copied back (16 bytes per 4096-byte chunk); equal to
    /// `gemm_audit_model::trace::fast::fast_chunk_digests` of the same bytes
    /// (the GPU tests hold the two equal).
    pub fn fast_chunk_digests(
        &self,
        stream: &Arc<CudaStream>,
        data: &CudaView<'_, u8>,
    ) -> Result<Vec<[u8; FAST_DIGEST_BYTES]>, CudaError> {
        let host = self.digests(FingerprintMode::Fast, stream, data)?;
        Ok(host
            .chunks_exact(FAST_DIGEST_BYTES)
            .map(|c| c.try_into().expect("16 bytes"))
            .collect())
    }

    /// The chunk digests of `data` in `mode`, concatenated, computed on the
    /// device and copied back. A view not aligned for the mode's kernel is
    /// first copied to an aligned device buffer.
    fn digests(
        &self,
        mode: FingerprintMode,
        stream: &Arc<CudaStream>,
        data: &CudaView<'_, u8>,
    ) -> Result<Vec<u8>, CudaError> {
        let chunks = data.len().div_ceil(FINGERPRINT_CHUNK_BYTES);
        if chunks == 0 {
            return Ok(Vec::new());
        }
        self.check_context(stream, data)?;
        let (digest_bytes, align) = kernel_shape(mode)?;
        let mut out = stream
            .alloc_zeros::<u8>(chunks * digest_bytes)
            .map_err(CudaError::with("allocating digests"))?;
        match aligned_copy(stream, data, align)? {
            None => self.launch_in(mode, stream, data, &mut out)?,
            Some(copy) => self.launch_in(mode, stream, &copy.as_view(), &mut out)?,
        }
        stream
            .clone_dtoh(&out)
            .map_err(CudaError::with("downloading digests"))
    }

    /// Enqueues the chunk kernel of `mode` over `data` into `out`, without
    /// waiting (see [`Self::launch`] and [`Self::launch_fast`]).
    pub(crate) fn launch_in(
        &self,
        mode: FingerprintMode,
        stream: &Arc<CudaStream>,
        data: &CudaView<'_, u8>,
        out: &mut CudaSlice<u8>,
    ) -> Result<(), CudaError> {
        match mode {
            FingerprintMode::Strong => self.launch(stream, data, out),
            FingerprintMode::Fast => self.launch_fast(stream, data, out),
            FingerprintMode::NotObserved => Err(not_observed()),
        }
    }

    /// Enqueues the chunk kernel over `data` into `out` (32 bytes per
    /// chunk) on `stream`, without waiting. `data` must be 4-byte aligned.
    pub(crate) fn launch(
        &self,
        stream: &Arc<CudaStream>,
        data: &CudaView<'_, u8>,
        out: &mut CudaSlice<u8>,
    ) -> Result<(), CudaError> {
        let len = data.len();
        let chunks = len.div_ceil(FINGERPRINT_CHUNK_BYTES);
        if chunks == 0 {
            return Ok(());
        }
        self.check_context(stream, data)?;
        if out.len() < chunks * DIGEST_BYTES {
            return Err(CudaError::msg("fingerprint buffers are too small"));
        }
        if !device_address(stream, data).is_multiple_of(ALIGN) {
            return Err(CudaError::msg(
                "the fingerprint kernel needs a 4-byte aligned buffer",
            ));
        }
        let blocks = (chunks as u64).div_ceil(u64::from(THREADS));
        let blocks =
            u32::try_from(blocks).map_err(|_| CudaError::msg("buffer too large to fingerprint"))?;
        let cfg = CuLaunch {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let len64 = len as u64;
        let chunk_bytes = FINGERPRINT_CHUNK_BYTES as u32;
        let chunks64 = chunks as u64;
        let mut lb = stream.launch_builder(&self.func);
        lb.arg(data)
            .arg(&len64)
            .arg(&chunk_bytes)
            .arg(&chunks64)
            .arg(&mut *out);
        // SAFETY: matches `sha256_chunks(const u8*, u64, u32, u64, u8*)`;
        // `data` holds exactly `len` bytes, 4-byte aligned (checked above) for
        // the kernel's word loads, and `out` 32 bytes per chunk; the function
        // was loaded into the context that `stream` and `data` belong to
        // (checked above).
        unsafe { lb.launch(cfg) }
            .map(|_| ())
            .map_err(CudaError::with("launching sha256_chunks"))
    }

    /// Enqueues the fast chunk kernel over `data` into `out` (16 bytes per
    /// chunk) on `stream`, without waiting. `data` must be 16-byte aligned.
    pub(crate) fn launch_fast(
        &self,
        stream: &Arc<CudaStream>,
        data: &CudaView<'_, u8>,
        out: &mut CudaSlice<u8>,
    ) -> Result<(), CudaError> {
        let len = data.len();
        let chunks = len.div_ceil(FINGERPRINT_CHUNK_BYTES);
        if chunks == 0 {
            return Ok(());
        }
        self.check_context(stream, data)?;
        if out.len() < chunks * FAST_DIGEST_BYTES {
            return Err(CudaError::msg("fingerprint buffers are too small"));
        }
        if !device_address(stream, data).is_multiple_of(FAST_ALIGN) {
            return Err(CudaError::msg(
                "the fast fingerprint kernel needs a 16-byte aligned buffer",
            ));
        }
        let warps_per_block = u64::from(FAST_THREADS / 32);
        let blocks = u32::try_from((chunks as u64).div_ceil(warps_per_block))
            .map_err(|_| CudaError::msg("buffer too large to fingerprint"))?;
        let cfg = CuLaunch {
            grid_dim: (blocks, 1, 1),
            block_dim: (FAST_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (len64, chunks64) = (len as u64, chunks as u64);
        let mut lb = stream.launch_builder(&self.fast);
        lb.arg(data)
            .arg(&len64)
            .arg(&chunks64)
            .arg(&self.keys)
            .arg(&mut *out);
        // SAFETY: matches `nh128_chunks(const u8*, u64, u64, const u64*,
        // u8*)`; `data` holds exactly `len` bytes, 16-byte aligned (checked
        // above) for the kernel's pair loads; `keys` holds the 512 keys a
        // full chunk reads; `out` 16 bytes per chunk; the function and the
        // keys live in the context `stream` and `data` belong to (checked).
        unsafe { lb.launch(cfg) }
            .map(|_| ())
            .map_err(CudaError::with("launching nh128_chunks"))
    }

    /// Refuses a stream or buffer of another context than the kernel's.
    fn check_context(
        &self,
        stream: &Arc<CudaStream>,
        data: &CudaView<'_, u8>,
    ) -> Result<(), CudaError> {
        let own = self.ctx.cu_ctx();
        if stream.context().cu_ctx() != own || data.stream().context().cu_ctx() != own {
            return Err(CudaError::msg(format!(
                "fingerprint stream or buffer is not on the fingerprinter's context (device {})",
                self.ctx.ordinal()
            )));
        }
        Ok(())
    }
}

/// Bytes per chunk digest and the input alignment of `mode`'s kernel.
fn kernel_shape(mode: FingerprintMode) -> Result<(usize, u64), CudaError> {
    match mode {
        FingerprintMode::Strong => Ok((DIGEST_BYTES, ALIGN)),
        FingerprintMode::Fast => Ok((FAST_DIGEST_BYTES, FAST_ALIGN)),
        FingerprintMode::NotObserved => Err(not_observed()),
    }
}

/// Why no chunk kernel runs in the `not-observed` mode.
fn not_observed() -> CudaError {
    CudaError::msg("the not-observed fingerprint mode hashes nothing: it is for imported profiles")
}

/// Chunk digests as the SHA-256 kernels write them, 32 bytes each.
fn sha256_digests(bytes: &[u8]) -> Vec<Digest> {
    bytes
        .chunks_exact(DIGEST_BYTES)
        .map(|c| Digest(c.try_into().expect("32 bytes")))
        .collect()
}

/// `None` where `data`'s address is a multiple of `align`, else a copy of
/// it in a fresh (aligned) device buffer, enqueued on `stream`, which the
/// caller keeps alive until the kernel reading it is done.
fn aligned_copy(
    stream: &Arc<CudaStream>,
    data: &CudaView<'_, u8>,
    align: u64,
) -> Result<Option<CudaSlice<u8>>, CudaError> {
    if device_address(stream, data).is_multiple_of(align) {
        return Ok(None);
    }
    let mut copy = stream
        .alloc_zeros::<u8>(data.len())
        .map_err(CudaError::with("allocating an aligned copy to fingerprint"))?;
    stream
        .memcpy_dtod(data, &mut copy)
        .map_err(CudaError::with("copying to an aligned buffer"))?;
    Ok(Some(copy))
}

/// The device address `data` starts at.
fn device_address(stream: &Arc<CudaStream>, data: &CudaView<'_, u8>) -> u64 {
    // The returned guard only records a read event (when the context tracks
    // events); no work is enqueued against the address.
    let (ptr, _read) = data.device_ptr(stream);
    ptr
}
