//! A loaded NVRTC module: its identity, its functions and a digest of each
//! function's resources (registers, shared/local/const bytes, ...).

use crate::catalog;
use crate::error::{CudaError, cuda_err};
use crate::nvrtc;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use gemm_audit_model::CompilerIdentity;
use gemm_audit_model::Result;
use gemm_audit_model::digest::{Digest, DigestWriter, FieldValue};
use gemm_audit_model::identity::ModuleIdentity;
use gemm_audit_model::vocab::{ModuleKind, PhysicalBackend};
use std::collections::HashMap;
use std::sync::Arc;

/// One compiled NVRTC module: identity, functions and their resources.
#[derive(Debug)]
pub(crate) struct LoadedModule {
    pub identity: ModuleIdentity,
    functions: HashMap<String, (CudaFunction, Digest)>,
    _module: Arc<CudaModule>,
}

impl LoadedModule {
    /// Compiles `which`'s source with NVRTC (`nvrtc_version`) for `target`
    /// under the pinned options and loads it: the compiler identity every
    /// route of the module carries is built here, once for both modules.
    pub(crate) fn compile(
        ctx: &Arc<CudaContext>,
        which: catalog::CudaModule,
        target: &str,
        nvrtc_version: &str,
    ) -> std::result::Result<LoadedModule, CudaError> {
        let options = catalog::compile_options(target);
        let compiler = CompilerIdentity {
            name: "nvrtc".into(),
            version: nvrtc_version.to_string(),
            options_digest: catalog::options_digest(&options),
            source_digest: Digest::sha256(which.source().as_bytes()),
        };
        let cubin = nvrtc::compile_cubin(which.source(), which.file_name(), &options)?;
        Self::load(ctx, which, cubin, &compiler, target)
    }

    /// Loads `cubin` (compiled from `which`'s source) into `ctx` and looks
    /// up every symbol the module exports. Functions that need more than
    /// the default 48 KiB of dynamic shared memory (the wgmma stage ring)
    /// are allowed the most any of their launches asks for.
    fn load(
        ctx: &Arc<CudaContext>,
        which: catalog::CudaModule,
        cubin: Vec<u8>,
        compiler: &CompilerIdentity,
        arch: &str,
    ) -> std::result::Result<LoadedModule, CudaError> {
        let symbols = catalog::module_symbols(which);
        let digest = Digest::sha256(&cubin);
        let module = ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(CudaError::with("loading the cubin"))?;
        let mut functions = HashMap::new();
        let max_shared = catalog::max_dynamic_shared_bytes(which);
        for s in &symbols {
            let f = module
                .load_function(s)
                .map_err(|e| CudaError::new(format!("kernel {s} is missing from the module"), e))?;
            if max_shared > 0 {
                f.set_attribute(
                    cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    max_shared as i32,
                )
                .map_err(|e| CudaError::new(format!("allowing {s} {max_shared} bytes of shared memory"), e))?;
            }
            let resources = resources_digest(s, &f)?;
            functions.insert(s.clone(), (f, resources));
        }
        let resources: HashMap<String, Digest> = functions
            .iter()
            .map(|(s, (_, d))| (s.clone(), *d))
            .collect();
        Ok(LoadedModule {
            identity: ModuleIdentity::new(
                PhysicalBackend::CudaNvrtc,
                ModuleKind::Nvrtc,
                digest,
                compiler.clone(),
                arch,
                catalog::module_entries(which, &resources),
            ),
            functions,
            _module: module,
        })
    }

    /// The function `symbol` and its resources digest.
    pub(crate) fn function(&self, symbol: &str) -> Result<&(CudaFunction, Digest)> {
        self.functions
            .get(symbol)
            .ok_or_else(|| cuda_err(format!("kernel {symbol:?} is not in the loaded module")))
    }
}

/// The digest of what the driver reports about the function `symbol`:
/// registers, static shared, local and constant bytes, the most threads per
/// block and the binary version (what a symbol declares as its resources).
pub(crate) fn resources_digest(
    symbol: &str,
    f: &CudaFunction,
) -> std::result::Result<Digest, CudaError> {
    let mut w = DigestWriter::new("gemm-audit/cuda-resources/v1");
    for (tag, v) in [
        ("registers", f.num_regs()),
        ("static_shared_bytes", f.shared_size_bytes()),
        ("local_bytes", f.local_size_bytes()),
        ("const_bytes", f.const_size_bytes()),
        ("max_threads_per_block", f.max_threads_per_block()),
        ("binary_version", f.binary_version()),
    ] {
        let v = v.map_err(|e| CudaError::new(format!("attributes of {symbol}"), e))?;
        w.field(tag, FieldValue::U64(v as i64 as u64));
    }
    Ok(w.finish())
}
