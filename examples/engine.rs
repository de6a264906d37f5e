//! A small CUDA "engine" that audits its own GEMM launches with gemm-audit.
//!
//! The engine compiles its own kernels with NVRTC (a GEMM with one thread
//! per output and one ascending `fma` chain each, an RMSNorm and a SiLU),
//! declares them as an engine backend, module kind and contract (the GEMM
//! with what it serves and launches, the other two as auxiliary kernels),
//! and runs an unfused decode step at batch 1 and 8: its GEMM, RMSNorm, a
//! cuBLASLt GEMM planned by `cuda::VendorGemms`, SiLU, and a cuBLAS GEMM it
//! makes itself through cudarc's safe `Gemm` (recorded by
//! `cuda::CudarcGemm`). Around each step it records eagerly, captures the
//! step on its own stream, binds every node of the graph (GEMMs to routes,
//! the rest as declared), stores the golden with the whole graph, replays
//! only through the validated plan, compares device-side output
//! fingerprints, and refuses an undeclared kernel node, a swapped auxiliary
//! kernel, a tampered golden, a policy flip and a math-mode flip before
//! anything runs.
//!
//! Run on a GPU: `cargo run --release --features cuda --example engine`
//! (exits non-zero if any check fails).
// An engine launches its own kernels and owns its streams: cudarc makes
// both `unsafe`, each use with a SAFETY comment.
#![allow(unsafe_code)]

use cudarc::cublas::{CudaBlas, GemmConfig, sys::cublasOperation_t};
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, PushKernelArg};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use gemm_audit::backend::cuda::{self, CudaCaptureStream, DeviceFingerprinter};
use gemm_audit::declaration::{BkRule, SplitRule, SymbolDeclaration};
use gemm_audit::identity::{GemmRouteIdentity, ModuleIdentity, Revisions, SymbolEntry};
use gemm_audit::physical;
use gemm_audit::recorder::{self, GemmRouteRecorder};
use gemm_audit::route::{GemmShape, TileShape};
use gemm_audit::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, OutputOwnership, PhysicalBackend,
};
use gemm_audit::{ArgumentsDigest, GemmRouteBuilder};
use gemm_audit::{
    CapturedGemmGraphPlan, Digest, Error, F32Policy, GemmPolicy, HalfPolicy, OutputFingerprint,
    PolicyMode, RecordedGemmTrace, Result,
};
use std::sync::Arc;

const D_MODEL: usize = 1024;
const D_HIDDEN: usize = 4096;
const SYMBOL: &str = "mlp_up_f32";
/// The step's auxiliary kernels (declared), and one nobody declares.
const RMSNORM: &str = "eng_rmsnorm_f32";
const SILU: &str = "eng_silu_f32";
const GELU: &str = "eng_gelu_f32";
const UNDECLARED: &str = "eng_softmax_f32";
const SOURCE: &str = r#"
extern "C" __global__ void mlp_up_f32(const float* a, const float* b, float* c,
                                      int m, int k, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y;
    if (i >= m || j >= n) return;
    float acc = 0.0f;
    for (int p = 0; p < k; ++p) acc = __fmaf_rn(a[i * k + p], b[p * n + j], acc);
    c[i * n + j] = acc;
}
// One block of 256 threads per row; a fixed-order tree reduction.
extern "C" __global__ void eng_rmsnorm_f32(const float* x, float* out, int width) {
    __shared__ float part[256];
    const float* row = x + (size_t)blockIdx.x * width;
    float s = 0.0f;
    for (int j = threadIdx.x; j < width; j += 256) s = __fmaf_rn(row[j], row[j], s);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    float inv = rsqrtf(part[0] / width + 1e-6f);
    for (int j = threadIdx.x; j < width; j += 256) out[(size_t)blockIdx.x * width + j] = row[j] * inv;
}
extern "C" __global__ void eng_silu_f32(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] / (1.0f + expf(-x[i]));
}
extern "C" __global__ void eng_gelu_f32(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.5f * x[i] * (1.0f + tanhf(0.7978846f * x[i]));
}
extern "C" __global__ void eng_softmax_f32(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = expf(x[i]);
}
"#;

/// Which elementwise kernel ends the step: the real one, a declared other
/// one (a swapped kernel), or one nobody declared.
#[derive(Clone, Copy)]
enum Activation {
    Silu,
    Gelu,
    Undeclared,
}

/// Maps any error of the engine's own CUDA calls to gemm-audit's error,
/// keeping it as the cause.
fn cu<T, E: std::error::Error + Send + Sync + 'static>(r: Result<T, E>, what: &str) -> Result<T> {
    r.map_err(|e| Error::backend_caused("engine", format!("{what}: {e}"), e))
}

struct Engine {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    live: GemmRouteIdentity,
    func: CudaFunction,
    norm: CudaFunction,
    /// The activation kernels: SiLU, GELU, and the undeclared one.
    acts: [CudaFunction; 3],
    /// cuBLASLt calls planned by gemm-audit on the engine's stream.
    vendor: cuda::VendorGemms,
    /// The engine's own cuBLAS handle (cudarc's safe `Gemm`), held with
    /// the routes of its calls.
    blas: cuda::CudarcGemm,
    w1: CudaSlice<f32>,
    w2: CudaSlice<f32>,
    w3: CudaSlice<f32>,
}

/// One batch size's buffers and its planned cuBLASLt call.
struct Step {
    batch: usize,
    x: CudaSlice<f32>,
    h: CudaSlice<f32>,
    hn: CudaSlice<f32>,
    y: CudaSlice<f32>,
    z: CudaSlice<f32>,
    o: CudaSlice<f32>,
    down: cuda::VendorGemm,
}

fn seeded(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
        })
        .collect()
}

impl Engine {
    // Over 100 lines: every device resource the mini engine owns is made here, in the order its step uses them.
    fn new(policy: GemmPolicy) -> Result<Engine> {
        let ctx = cu(CudaContext::new(0), "context on device 0")?;
        // One stream, work serialized on it: cudarc's cross-stream events
        // would only add event nodes to the captured graph.
        // SAFETY: every buffer below is used on `stream` only.
        unsafe { ctx.disable_event_tracking() };
        let stream = cu(ctx.new_stream(), "stream")?;
        let (device, _volatile) = cuda::device_identity(&ctx)?;
        let target = cuda::compilation_target(&ctx)?;
        let arch: &'static str = Box::leak(target.clone().into_boxed_str());
        let options = [format!("--gpu-architecture={arch}")];
        let ptx = cu(
            compile_ptx_with_opts(
                SOURCE,
                CompileOptions {
                    arch: Some(arch),
                    ..Default::default()
                },
            ),
            "NVRTC",
        )?;
        let artifact = ptx.to_src();
        let module = cu(ctx.load_module(ptx), "load module")?;
        let func = cu(module.load_function(SYMBOL), "load function")?;
        let norm = cu(module.load_function(RMSNORM), "load function")?;
        let acts = [
            cu(module.load_function(SILU), "load function")?,
            cu(module.load_function(GELU), "load function")?,
            cu(module.load_function(UNDECLARED), "load function")?,
        ];
        // The step's other kernels serve no GEMM: declared (with their
        // resources) so that the whole captured step binds. The softmax is
        // deliberately left out, to show an undeclared kernel refused.
        let aux = [(RMSNORM, &norm), (SILU, &acts[0]), (GELU, &acts[1])]
            .into_iter()
            .map(|(name, f)| {
                Ok(SymbolEntry::auxiliary(
                    name,
                    cuda::function_resources(name, f)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;

        // The engine's own backend, module kind and contract.
        let option_refs: Vec<&str> = options.iter().map(String::as_str).collect();
        let compiler = cuda::nvrtc_compiler_identity(&option_refs, SOURCE)?;
        let contract = ContractKind::engine("scalar-fma-rowdot", ContractKind::ScalarFma).unwrap();
        let engine_module = ModuleIdentity::from_artifact(
            PhysicalBackend::engine("mini-engine", false).unwrap(),
            ModuleKind::engine("nvrtc-ptx").unwrap(),
            artifact.as_bytes(),
            compiler,
            target.clone(),
            vec![
                SymbolEntry::new(SYMBOL)
                    .serving(&[GemmOp::Nn], &[DType::F32], &contract, false)
                    .with_resources(cuda::function_resources(SYMBOL, &func)?)
                    .declaring(
                        // One thread per output, 128 outputs of a row per block.
                        SymbolDeclaration::new(
                            "scalar-fma",
                            "1x1x1",
                            OutputOwnership::OneOwnerPerElement,
                            SplitRule::Unsplit,
                            BkRule::PerSplit,
                        )
                        .with_tile(TileShape { m: 1, n: 128, k: 1 }, 1)
                        .with_capabilities(vec!["fma".into()]),
                    ),
            ]
            .into_iter()
            .chain(aux)
            .collect(),
        );
        // cuBLAS and cuBLASLt as modules, with what they declare.
        let mut modules = vec![engine_module];
        modules.extend(cuda::vendor_modules(&target));
        let live = GemmRouteIdentity::new(
            policy,
            modules,
            device,
            Revisions {
                tuning_table: 1,
                schedule: 1,
                tensor_map: 0,
            },
        );
        let vendor = cuda::VendorGemms::new(&ctx, &stream, &live)?;
        let handle = cu(CudaBlas::new(stream.clone()), "cublasCreate")?;
        // The handle's math mode is the route's contract: pedantic here.
        cuda::set_blas_math_mode(&handle, DType::F32, &ContractKind::VendorPedantic)?;
        let blas = cuda::CudarcGemm::new(handle, &stream, &live)?;
        let w1 = cu(stream.clone_htod(&seeded(D_MODEL * D_HIDDEN, 1)), "W1")?;
        let w2 = cu(stream.clone_htod(&seeded(D_HIDDEN * D_MODEL, 2)), "W2")?;
        let w3 = cu(stream.clone_htod(&seeded(D_MODEL * D_MODEL, 4)), "W3")?;
        Ok(Engine {
            ctx,
            stream,
            live,
            func,
            norm,
            acts,
            vendor,
            blas,
            w1,
            w2,
            w3,
        })
    }

    /// Buffers and the cuBLASLt plan of batch `b` (planning runs and
    /// captures the call once, so its route names the kernels it launches).
    fn prepare(&self, b: usize) -> Result<Step> {
        let zeros = |n: usize, what: &str| cu(self.stream.alloc_zeros::<f32>(n), what);
        let down = self.vendor.plan(
            cuda::VendorApi::CublasLt(cuda::LtSelection::Heuristic),
            GemmOp::Nn,
            DType::F32,
            GemmShape {
                m: b as u64,
                k: D_HIDDEN as u64,
                n: D_MODEL as u64,
            },
        )?;
        Ok(Step {
            batch: b,
            x: cu(self.stream.clone_htod(&seeded(b * D_MODEL, 3)), "x")?,
            h: zeros(b * D_HIDDEN, "h")?,
            hn: zeros(b * D_HIDDEN, "hn")?,
            y: zeros(b * D_MODEL, "y")?,
            z: zeros(b * D_MODEL, "z")?,
            o: zeros(b * D_MODEL, "o")?,
            down,
        })
    }

    /// One decode step, unfused: h = x W1 with the engine's kernel,
    /// hn = rmsnorm(h), y = hn W2 with cuBLASLt, z = act(y), o = z W3 with
    /// cuBLAS. The GEMM dispatcher pushes each route, then launches.
    // Over 100 lines: one engine step as an engine writes it, every launch next to the route it pushes.
    fn step(&self, s: &mut Step, rec: &GemmRouteRecorder, act: Activation) -> Result<()> {
        let b = s.batch;
        let (m, k, n) = (b, D_MODEL, D_HIDDEN);
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (n.div_ceil(128) as u32, m as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = ArgumentsDigest::new(SYMBOL)
            .buffer("a", "f32", (m * k) as u64)
            .buffer("b", "f32", (k * n) as u64)
            .buffer("c", "f32", (m * n) as u64)
            .u64("m", m as u64)
            .u64("k", k as u64)
            .u64("n", n as u64)
            .finish();
        let up_contract = self.live.modules[0]
            .symbol(SYMBOL)
            .expect("declared")
            .serves[0]
            .contract
            .clone();
        let up = GemmRouteBuilder::new(
            &self.live,
            &self.live.modules[0],
            SYMBOL,
            format!("up@b{b}"),
        )
        .problem(
            GemmOp::Nn,
            DType::F32,
            GemmShape {
                m: m as u64,
                k: k as u64,
                n: n as u64,
            },
        )
        .contract(up_contract, 1)
        .launch_config(cuda::launch_config(&cfg, args))
        .build()
        .map_err(|e| Error::backend("engine", e.to_string()))?;
        rec.push(up)?;
        let (mi, ki, ni) = (m as i32, k as i32, n as i32);
        let mut launch = self.stream.launch_builder(&self.func);
        launch
            .arg(&s.x)
            .arg(&self.w1)
            .arg(&mut s.h)
            .arg(&mi)
            .arg(&ki)
            .arg(&ni);
        // SAFETY: the kernel's parameters are exactly these, and the
        // buffers hold m*k, k*n and m*n floats.
        cu(unsafe { launch.launch(cfg) }, "launch mlp_up_f32")?;

        let width = D_HIDDEN as i32;
        let mut launch = self.stream.launch_builder(&self.norm);
        launch.arg(&s.h).arg(&mut s.hn).arg(&width);
        let rows = cudarc::driver::LaunchConfig {
            grid_dim: (b as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: (x, out, width) as declared; both hold b rows of D_HIDDEN.
        cu(unsafe { launch.launch(rows) }, "launch eng_rmsnorm_f32")?;

        // cuBLASLt, planned by gemm-audit: pushes its exact route, then runs.
        s.down
            .run(rec, format!("down@b{b}"), &s.hn, &self.w2, &mut s.y)?;

        let f = match act {
            Activation::Silu => &self.acts[0],
            Activation::Gelu => &self.acts[1],
            Activation::Undeclared => &self.acts[2],
        };
        let len = (b * D_MODEL) as i32;
        let mut launch = self.stream.launch_builder(f);
        launch.arg(&s.y).arg(&mut s.z).arg(&len);
        let elems = cudarc::driver::LaunchConfig {
            grid_dim: ((b * D_MODEL).div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: (x, out, n) as declared; both hold b * D_MODEL floats.
        cu(unsafe { launch.launch(elems) }, "launch the activation")?;

        // The engine's own cuBLAS call through cudarc's safe `Gemm`:
        // o = z W3, column-major o^T = W3^T z^T.
        let cfg = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: D_MODEL as i32,
            n: b as i32,
            k: D_MODEL as i32,
            alpha: 1.0f32,
            lda: D_MODEL as i32,
            ldb: D_MODEL as i32,
            beta: 0.0,
            ldc: D_MODEL as i32,
        };
        self.blas
            .gemm(rec, format!("out@b{b}"), cfg, &self.w3, &s.z, &mut s.o)
    }
}

/// The batch-invariant GEMM (the invariant ladder, Hopper only) on the
/// engine's own buffers and stream: a d_model 4096 QKV projection at batch
/// 1, 8, 72 and 300 (the decode and band rungs, and wgmma-large, which
/// serves this one-chunk family above m = 256), each recorded, captured into
/// the engine's graph and replayed only through the validated plan; row 0
/// must be the same bits at every batch, and a live context without the
/// module must refuse the replay before launch.
fn invariant_qkv(failures: &mut u32) -> Result<()> {
    use gemm_audit::backend::cuda::catalog;
    let ctx = cu(CudaContext::new(0), "context on device 0")?;
    // SAFETY: every buffer below is used on `stream` only.
    unsafe { ctx.disable_event_tracking() };
    let stream = cu(ctx.new_stream(), "stream")?;
    let inv = match cuda::InvariantGemms::new(&ctx) {
        Ok(inv) => inv,
        Err(e) => {
            println!("  [skip] invariant GEMM: {e}");
            return Ok(());
        }
    };
    let (device, _volatile) = cuda::device_identity(&ctx)?;
    let modules = vec![inv.module().clone()]; // add it to the live context you build
    let revisions = Revisions {
        tuning_table: catalog::TUNING_TABLE_REVISION,
        schedule: catalog::SCHEDULE_REVISION,
        tensor_map: catalog::TENSOR_MAP_REVISION,
    };
    let live = GemmRouteIdentity::new(
        cuda::CUDA_DEFAULT_POLICY,
        modules,
        device.clone(),
        revisions,
    );
    // A context that never loaded the module: its routes are not permitted.
    let without = GemmRouteIdentity::new(cuda::CUDA_DEFAULT_POLICY, vec![], device, revisions);
    // bf16 bits of seeded values (truncated: any bits do).
    let bf16 = |v: &[f32]| {
        v.iter()
            .map(|x| (x.to_bits() >> 16) as u16)
            .collect::<Vec<_>>()
    };
    let w_qkv = cu(stream.clone_htod(&bf16(&seeded(4096 * 6144, 21))), "upload")?;
    let xs = bf16(&seeded(300 * 4096, 22));
    let mut row0 = Vec::new();
    for batch in [1u64, 8, 72, 300] {
        let x = cu(stream.clone_htod(&xs[..(batch * 4096) as usize]), "upload")?;
        let mut y = cu(stream.alloc_zeros::<u16>((batch * 6144) as usize), "alloc")?;
        let recorder = GemmRouteRecorder::new();
        let shape = GemmShape {
            m: batch,
            k: 4096,
            n: 6144,
        };
        // The ladder's fastest rung for this batch; its exact route.
        let qkv = inv.plan_batch_invariant(&live, GemmOp::Nn, DType::Bf16, shape)?;
        let ((), eager) = recorder::record_eager(&recorder, &live, || {
            qkv.run(&recorder, "qkv", &stream, &x, &w_qkv, &mut y) // push + launch on your stream
        })?;
        let out = cu(stream.clone_dtoh(&y), "download")?;
        let symbol = eager
            .routes
            .first()
            .map_or("no route".to_string(), |r| r.kernel_symbol.clone());
        let manifest = eager
            .manifest
            .clone()
            .expect("an eager recording has a manifest");
        // Captured on the engine's stream, replayed only through the plan.
        let cs = CudaCaptureStream::new(stream.clone());
        let ((), captured) = recorder::capture(&cs, &recorder, Some(&manifest), &live, || {
            qkv.run(&recorder, "qkv", &stream, &x, &w_qkv, &mut y)
        })?;
        cu(stream.memset_zeros(&mut y), "clear y")?;
        let launched = captured.launch_validated(&live, "qkv", |g| g.launch());
        let replayed = cu(stream.clone_dtoh(&y), "download")?;
        check(
            matches!(launched, Ok(Ok(()))) && replayed == out,
            &format!(
                "invariant GEMM at batch {batch} ({symbol}): captured, replayed through the guard, same bits"
            ),
            failures,
        );
        let refused = captured.launch_validated(&without, "qkv", |g| g.launch());
        check(
            refused.is_err(),
            &format!(
                "invariant GEMM at batch {batch}: replay refused without its module ({})",
                refused
                    .err()
                    .map_or("launched".to_string(), |e| e.to_string())
            ),
            failures,
        );
        row0.push(out[..6144].to_vec());
    }
    check(
        row0.iter().all(|r| r == &row0[0]),
        "invariant GEMM: row 0 of the QKV projection is the same bits at batch 1, 8, 72 and 300",
        failures,
    );
    Ok(())
}

fn check(ok: bool, what: &str, failures: &mut u32) {
    println!("  [{}] {what}", if ok { "ok" } else { "FAILED" });
    if !ok {
        *failures += 1;
    }
}

// Over 100 lines: the walkthrough an engine author reads top to bottom (record, store, rebuild, check, refuse), one step after another.
fn main() -> Result<()> {
    let policy = GemmPolicy {
        mode: PolicyMode::CublasPedantic,
        tensor_cores: false,
        f32: F32Policy::Exact,
        half: HalfPolicy::Tiled,
    };
    let engine = Engine::new(policy)?;
    println!(
        "device {} ({}), policy {}",
        engine.live.device.class, engine.live.device.driver, engine.live.policy
    );
    for m in &engine.live.modules {
        println!(
            "  module {} ({}) by {} {}",
            m.kind, m.backend, m.compiler.name, m.compiler.version
        );
    }
    let fp = DeviceFingerprinter::new(&engine.ctx)?;
    let rec = GemmRouteRecorder::new();
    let dir = std::env::temp_dir().join(format!("gemm-audit-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::Io {
        path: dir.clone(),
        source: e,
    })?;
    let mut failures = 0;

    for batch in [1usize, 8] {
        println!("decode step, batch {batch}");
        let mut s = engine.prepare(batch)?;

        // 1. Record eagerly.
        let ((), eager) = recorder::record_eager(&rec, &engine.live, || {
            engine.step(&mut s, &rec, Activation::Silu)
        })?;
        cu(engine.stream.synchronize(), "sync")?;
        let manifest = eager.manifest.clone().expect("GEMM work");
        for r in &eager.routes {
            let v = r.vendor.as_ref();
            println!(
                "  route {:<8} {} {} grid {:?} block {:?}{}",
                r.gemm,
                r.backend,
                r.kernel_symbol,
                r.launch.grid,
                r.launch.block,
                v.map(|v| format!(
                    " algo {} tile {} split-k {} reduction {} stages {} kernels {:?}",
                    v.algorithm_id,
                    v.tile_id,
                    v.split_k,
                    v.reduction_scheme,
                    v.stages_id,
                    v.physical_kernels
                ))
                .unwrap_or_default()
            );
        }
        let h_fp = fp.fingerprint(&engine.stream, &s.h.slice(..), 3)?;
        let y_fp = fp.fingerprint(&engine.stream, &s.y.slice(..), 3)?;
        let o_fp = fp.fingerprint(&engine.stream, &s.o.slice(..), 3)?;
        println!("  eager output fingerprint {}", o_fp.sha256.short());

        // 2. The golden's routes and GEMM output fingerprints.
        let mut trace = RecordedGemmTrace::new(
            format!("mlp-decode@b{batch}"),
            Digest::sha256(format!("mlp {D_MODEL}x{D_HIDDEN} batch {batch}").as_bytes()),
            engine.live.clone(),
            eager.routes.clone(),
            vec![h_fp, y_fp, o_fp],
            Default::default(),
        )?;

        // 3. Capture the same step on the engine's own stream, and bind
        //    every node: GEMMs to the routes, the rest as declared.
        let stream = CudaCaptureStream::new(engine.stream.clone());
        let ((), captured) =
            recorder::capture(&stream, &rec, Some(&manifest), &engine.live, || {
                engine.step(&mut s, &rec, Activation::Silu)
            })?;
        let nodes = cuda::introspect(&captured.graph)?;
        match trace.set_physical(nodes) {
            Ok(()) => check(
                true,
                &format!(
                    "whole graph bound: {} nodes, {}",
                    trace.physical.len(),
                    physical::Coverage::of(&trace.physical)
                ),
                &mut failures,
            ),
            Err(r) => check(false, &format!("whole graph bound: {r}"), &mut failures),
        }
        let golden_path = dir.join(format!("mlp-decode-b{batch}.gat"));
        trace.write(&golden_path, false)?;
        let golden = RecordedGemmTrace::read(&golden_path)?;
        check(
            golden == trace,
            "golden stored and read back",
            &mut failures,
        );

        // 4. Replay only through the validated plan; compare on the device.
        cu(engine.stream.memset_zeros(&mut s.o), "clear o")?;
        let launched = captured.launch_validated(&engine.live, "decode", |g| g.launch());
        check(
            matches!(launched, Ok(Ok(()))),
            "replay validated and launched",
            &mut failures,
        );
        cu(engine.stream.synchronize(), "sync")?;
        let replay_fp: OutputFingerprint = fp.fingerprint(&engine.stream, &s.o.slice(..), 3)?;
        check(
            replay_fp == o_fp,
            "replay output bit-identical to eager (device fingerprint)",
            &mut failures,
        );
        let plan = captured.plan.as_ref().expect("plan");
        check(
            plan.check_against_golden_trace(&golden).is_ok(),
            "plan matches the golden",
            &mut failures,
        );

        // 5. A step that launches a kernel nobody declared does not bind.
        let ((), rogue) = recorder::capture(&stream, &rec, Some(&manifest), &engine.live, || {
            engine.step(&mut s, &rec, Activation::Undeclared)
        })?;
        let mut nodes = cuda::introspect(&rogue.graph)?;
        match physical::bind(&engine.live, &eager.routes, &mut nodes) {
            Err(r) => check(
                r.to_string().contains(UNDECLARED),
                &format!("undeclared kernel node refused: {r}"),
                &mut failures,
            ),
            Ok(()) => check(false, "undeclared kernel node refused", &mut failures),
        }

        // 6. A swapped auxiliary kernel (GELU for SiLU, both declared) binds,
        //    and is refused against the golden's graph.
        let ((), swapped) =
            recorder::capture(&stream, &rec, Some(&manifest), &engine.live, || {
                engine.step(&mut s, &rec, Activation::Gelu)
            })?;
        let mut nodes = cuda::introspect(&swapped.graph)?;
        physical::bind(&engine.live, &eager.routes, &mut nodes)?;
        match physical::check_against(&golden.physical, &nodes) {
            Err(r) => check(
                r.to_string().contains(GELU),
                &format!("swapped auxiliary kernel refused: {r}"),
                &mut failures,
            ),
            Ok(()) => check(false, "swapped auxiliary kernel refused", &mut failures),
        }

        // 7. A tampered golden is refused.
        let mut tampered = golden.routes.clone();
        if let Some(v) = tampered[1].vendor.as_mut() {
            v.split_k += 1;
        }
        match CapturedGemmGraphPlan::new(golden.manifest(), tampered) {
            Err(r) => check(
                true,
                &format!("tampered golden refused: {r}"),
                &mut failures,
            ),
            Ok(_) => check(false, "tampered golden refused", &mut failures),
        }

        // 8. A policy flip is refused before launch.
        let flipped = engine.live.with_policy(GemmPolicy {
            mode: PolicyMode::Deterministic,
            ..policy
        });
        let mut ran = false;
        match captured.launch_validated(&flipped, "decode-flipped", |g| {
            ran = true;
            g.launch()
        }) {
            Err(r) => check(
                !ran,
                &format!("policy flip refused before launch: {r}"),
                &mut failures,
            ),
            Ok(_) => check(false, "policy flip refused before launch", &mut failures),
        }

        // 9. A math-mode flip (the handle set to TF32, as another library
        //    might): the cuBLAS call's route becomes vendor-fast, which the
        //    pedantic policy refuses at the push, before the call is made.
        cuda::set_blas_math_mode(engine.blas.blas(), DType::F32, &ContractKind::VendorFast)?;
        let flipped_step = recorder::record_eager(&rec, &engine.live, || {
            engine.step(&mut s, &rec, Activation::Silu)
        });
        cuda::set_blas_math_mode(
            engine.blas.blas(),
            DType::F32,
            &ContractKind::VendorPedantic,
        )?;
        match flipped_step {
            Err(e) => check(
                e.to_string().contains(&format!("out@b{batch}")),
                &format!("math-mode flip refused before the call: {e}"),
                &mut failures,
            ),
            Ok(_) => check(
                false,
                "math-mode flip refused before the call",
                &mut failures,
            ),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    invariant_qkv(&mut failures)?;
    if failures > 0 {
        eprintln!("{failures} checks failed");
        std::process::exit(1);
    }
    println!("all checks passed");
    Ok(())
}
