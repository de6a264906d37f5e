//! A small CPU "engine" that audits its own GEMM launches with gemm-audit.
//!
//! The engine has its own kernels (a row-dot matmul with one ascending `fma`
//! chain per output, an RMSNorm and a SiLU), declares them as an engine
//! backend and module (the GEMM with what it serves and launches, the other
//! two as auxiliary kernels), and runs a decode step (GEMM, RMSNorm, GEMM,
//! SiLU, unfused) at batch 1 and 8. Around each step it makes the three
//! calls of `docs/embedding.md`: record eagerly, capture the same step into
//! a graph, and replay only through the validated plan. The whole graph,
//! every node, is bound and stored with the golden; an undeclared kernel, a
//! swapped auxiliary kernel, a tampered golden and a policy flip are
//! refused before launch.
//!
//! Run: `cargo run --example cpu_engine` (exits non-zero if any check fails).

use gemm_audit::CompilerIdentity;
use gemm_audit::backend::cpu::{CpuStream, device_identity};
use gemm_audit::declaration::{BkRule, SplitRule, SymbolDeclaration};
use gemm_audit::digest::Digest;
use gemm_audit::identity::{
    GemmRouteIdentity, ModuleIdentity, Revisions, SymbolEntry, VolatileMetadata,
};
use gemm_audit::physical;
use gemm_audit::policy::GemmPolicy;
use gemm_audit::recorder::{self, GemmRouteRecorder};
use gemm_audit::route::{GemmShape, TileShape};
use gemm_audit::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, OutputOwnership, PhysicalBackend,
};
use gemm_audit::{ArgumentsDigest, GemmRouteBuilder};
use gemm_audit::{CapturedGemmGraphPlan, OutputFingerprint, RecordedGemmTrace};
use std::cell::RefCell;
use std::rc::Rc;

/// The engine's GEMM kernel symbol.
const SYMBOL: &str = "tiny_rowdot_f32_nn";
/// Its auxiliary (non-GEMM) kernels.
const RMSNORM: &str = "tiny_rmsnorm_f32";
const SILU: &str = "tiny_silu_f32";
const GELU: &str = "tiny_gelu_f32";
const D_MODEL: usize = 64;
const D_HIDDEN: usize = 256;

type Buf = Rc<RefCell<Vec<f32>>>;

/// The engine's kernel: C[m,n] = A[m,k] * B[k,n], one ascending fma chain
/// per output from +0.
fn rowdot(a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                acc = a[i * k + p].mul_add(b[p * n + j], acc);
            }
            c[i * n + j] = acc;
        }
    }
}

fn seeded(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

struct Engine {
    live: GemmRouteIdentity,
    w1: Buf,
    w2: Buf,
}

/// One step's buffers: input, hidden (raw and normed), output (raw and
/// activated).
struct Step {
    batch: usize,
    x: Buf,
    h: Buf,
    hn: Buf,
    y: Buf,
    z: Buf,
}

/// Which auxiliary kernel ends the step: the real one, a declared other
/// one (a swapped kernel), or one nobody declared.
#[derive(Clone, Copy)]
enum Activation {
    Silu,
    Gelu,
    Undeclared,
}

impl Engine {
    fn new(policy: GemmPolicy) -> Engine {
        // The engine declares its own backend, module kind and contract:
        // nothing here claims to be one of gemm-audit's kernels.
        let backend = PhysicalBackend::engine("tiny-engine", false).expect("valid name");
        let kind = ModuleKind::engine("rust-fn").expect("valid name");
        let contract = ContractKind::engine("tiny-rowdot", ContractKind::ScalarFma).unwrap();
        let source = include_bytes!("cpu_engine.rs");
        let compiler = CompilerIdentity::new("rustc", "stable", &["-C opt-level=3"], source);
        // What the kernel launches, declared once: the replay guard refuses
        // any route that says otherwise, and the route builder fills these in.
        let declaration = SymbolDeclaration::new(
            "scalar-fma",
            "1x1x1",
            OutputOwnership::OneOwnerPerElement,
            SplitRule::Unsplit,
            BkRule::PerSplit,
        )
        .with_tile(TileShape { m: 1, n: 1, k: 1 }, 1)
        .with_capabilities(vec!["f32-fused-multiply-add".into()]);
        let symbol = SymbolEntry::new(SYMBOL)
            .serving(&[GemmOp::Nn], &[DType::F32], &contract, false)
            .with_resources(Digest::sha256(b"one thread per output, no shared memory"))
            .declaring(declaration);
        // The step's other kernels serve no GEMM: declared so that a whole
        // captured step binds, and a kernel nobody declared is refused.
        let aux = [RMSNORM, SILU, GELU]
            .map(|k| SymbolEntry::auxiliary(k, Digest::sha256(b"one thread per row")));
        let module = ModuleIdentity::from_artifact(
            backend,
            kind,
            source,
            compiler,
            std::env::consts::ARCH,
            std::iter::once(symbol).chain(aux).collect(),
        );
        let live = GemmRouteIdentity::new(
            policy,
            vec![module],
            device_identity(),
            Revisions {
                tuning_table: 1,
                schedule: 1,
                tensor_map: 0,
            },
        );
        Engine {
            live,
            w1: Rc::new(RefCell::new(seeded(D_MODEL * D_HIDDEN, 1))),
            w2: Rc::new(RefCell::new(seeded(D_HIDDEN * D_MODEL, 2))),
        }
    }

    fn step_buffers(&self, batch: usize) -> Step {
        Step {
            batch,
            x: Rc::new(RefCell::new(seeded(batch * D_MODEL, 3))),
            h: Rc::new(RefCell::new(vec![0.0; batch * D_HIDDEN])),
            hn: Rc::new(RefCell::new(vec![0.0; batch * D_HIDDEN])),
            y: Rc::new(RefCell::new(vec![0.0; batch * D_MODEL])),
            z: Rc::new(RefCell::new(vec![0.0; batch * D_MODEL])),
        }
    }

    /// The engine's GEMM dispatcher: resolves the route, pushes it, launches.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        stream: &CpuStream,
        rec: &GemmRouteRecorder,
        name: &str,
        a: &Buf,
        b: &Buf,
        c: &Buf,
        (m, k, n): (usize, usize, usize),
    ) -> gemm_audit::Result<()> {
        let module = &self.live.modules[0];
        let args = ArgumentsDigest::new(SYMBOL)
            .buffer("a", "f32", (m * k) as u64)
            .buffer("b", "f32", (k * n) as u64)
            .buffer("c", "f32", (m * n) as u64)
            .u64("m", m as u64)
            .u64("k", k as u64)
            .u64("n", n as u64)
            .finish();
        let contract = module.symbol(SYMBOL).expect("declared").serves[0]
            .contract
            .clone();
        let route = GemmRouteBuilder::new(&self.live, module, SYMBOL, name)
            .problem(
                GemmOp::Nn,
                DType::F32,
                GemmShape {
                    m: m as u64,
                    k: k as u64,
                    n: n as u64,
                },
            )
            .contract(contract, 1)
            .launch([n as u32, m as u32, 1], [1, 1, 1], 0, args)
            .build()
            .map_err(|e| gemm_audit::Error::backend("tiny-engine", e.to_string()))?;
        rec.push(route)?;
        let (a, b, c) = (a.clone(), b.clone(), c.clone());
        stream.launch_kernel(SYMBOL, [n as u32, m as u32, 1], [1, 1, 1], move || {
            rowdot(&a.borrow(), &b.borrow(), &mut c.borrow_mut(), m, k, n)
        });
        Ok(())
    }

    /// One decode step, unfused: h = x W1, hn = rmsnorm(h), y = hn W2,
    /// z = act(y).
    fn step(
        &self,
        s: &Step,
        stream: &CpuStream,
        rec: &GemmRouteRecorder,
        act: Activation,
    ) -> gemm_audit::Result<()> {
        let b = s.batch;
        self.gemm(
            stream,
            rec,
            &format!("up@b{b}"),
            &s.x,
            &self.w1,
            &s.h,
            (b, D_MODEL, D_HIDDEN),
        )?;
        let (h, hn) = (s.h.clone(), s.hn.clone());
        stream.launch_kernel(RMSNORM, [b as u32, 1, 1], [1, 1, 1], move || {
            rmsnorm(&h.borrow(), &mut hn.borrow_mut(), D_HIDDEN)
        });
        self.gemm(
            stream,
            rec,
            &format!("down@b{b}"),
            &s.hn,
            &self.w2,
            &s.y,
            (b, D_HIDDEN, D_MODEL),
        )?;
        let (y, z) = (s.y.clone(), s.z.clone());
        let (symbol, f): (&str, fn(f32) -> f32) = match act {
            Activation::Silu => (SILU, |v| v / (1.0 + (-v).exp())),
            Activation::Gelu => (GELU, |v| 0.5 * v * (1.0 + (0.797_884_6 * v).tanh())),
            Activation::Undeclared => ("tiny_softmax_f32", |v| v.exp()),
        };
        stream.launch_kernel(symbol, [b as u32, 1, 1], [1, 1, 1], move || {
            let y = y.borrow();
            for (o, v) in z.borrow_mut().iter_mut().zip(y.iter()) {
                *o = f(*v);
            }
        });
        Ok(())
    }
}

/// RMSNorm of each row of `x` (rows of `width`), without a learned scale.
fn rmsnorm(x: &[f32], out: &mut [f32], width: usize) {
    for (row, o) in x.chunks(width).zip(out.chunks_mut(width)) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / width as f32;
        let inv = 1.0 / (ms + 1e-6).sqrt();
        for (o, v) in o.iter_mut().zip(row) {
            *o = v * inv;
        }
    }
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn check(ok: bool, what: &str, failures: &mut u32) {
    println!("  [{}] {what}", if ok { "ok" } else { "FAILED" });
    if !ok {
        *failures += 1;
    }
}

// Over 100 lines: the walkthrough a reader follows top to bottom, one step after another.
fn main() -> gemm_audit::Result<()> {
    let engine = Engine::new(GemmPolicy::CPU_DEFAULT);
    let stream = CpuStream::new();
    let rec = GemmRouteRecorder::new();
    let dir = std::env::temp_dir().join(format!("gemm-audit-cpu-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| gemm_audit::Error::Io {
        path: dir.clone(),
        source: e,
    })?;
    let mut failures = 0;

    for batch in [1usize, 8] {
        println!("decode step, batch {batch}");
        let s = engine.step_buffers(batch);
        let step = |act| engine.step(&s, &stream, &rec, act);

        // 1. Record the step eagerly.
        let ((), eager) = recorder::record_eager(&rec, &engine.live, || step(Activation::Silu))?;
        let manifest = eager.manifest.clone().expect("the step launches GEMMs");
        let z_eager = bytes(&s.z.borrow());
        println!(
            "  recorded {} GEMM launches, ordered digest {}",
            manifest.launch_set.launch_count,
            manifest.launch_set.ordered_digest.short()
        );

        // 2. Capture the same step into a graph, reserved to the manifest.
        s.z.borrow_mut().iter_mut().for_each(|v| *v = f32::NAN);
        let ((), captured) =
            recorder::capture(&stream, &rec, Some(&manifest), &engine.live, || {
                step(Activation::Silu)
            })?;
        check(
            s.z.borrow().iter().all(|v| v.is_nan()),
            "capture recorded the step without running it",
            &mut failures,
        );

        // 3. The golden: routes, GEMM output fingerprints and the whole
        //    graph, every node bound (GEMMs to routes, the rest declared).
        let fingerprints = vec![
            OutputFingerprint::of(3, &bytes(&s.h.borrow())),
            OutputFingerprint::of(3, &bytes(&s.y.borrow())),
        ];
        let mut trace = RecordedGemmTrace::new(
            format!("mlp-decode@b{batch}"),
            Digest::sha256(format!("mlp {D_MODEL}x{D_HIDDEN} batch {batch}").as_bytes()),
            engine.live.clone(),
            eager.routes.clone(),
            fingerprints,
            VolatileMetadata::new(),
        )?;
        trace.set_physical(captured.graph.physical())?;
        let coverage = physical::Coverage::of(&trace.physical);
        check(
            (coverage.gemm, coverage.auxiliary) == (2, 2),
            &format!("whole graph bound: {coverage}"),
            &mut failures,
        );
        let golden_path = dir.join(format!("mlp-decode-b{batch}.gat"));
        trace.write(&golden_path, false)?;
        let golden = RecordedGemmTrace::read(&golden_path)?;
        check(
            golden == trace,
            "golden stored and read back",
            &mut failures,
        );

        // 4. Replay only through the validated plan.
        let launched = captured.launch_validated(&engine.live, "decode", |g| g.launch());
        check(
            launched.is_ok(),
            "replay validated and launched",
            &mut failures,
        );
        check(
            bytes(&s.z.borrow()) == z_eager,
            "replay output is bit-identical to the eager run",
            &mut failures,
        );
        let plan = captured.plan.as_ref().expect("GEMM work has a plan");
        check(
            plan.check_against_golden_trace(&golden).is_ok()
                && physical::check_against(&golden.physical, &trace.physical).is_ok(),
            "captured plan and graph match the stored golden",
            &mut failures,
        );

        // 5. A step that launches a kernel nobody declared does not bind.
        let ((), rogue) = recorder::capture(&stream, &rec, Some(&manifest), &engine.live, || {
            step(Activation::Undeclared)
        })?;
        let mut nodes = rogue.graph.physical();
        match physical::bind(&engine.live, &eager.routes, &mut nodes) {
            Err(r) => check(
                r.to_string().contains("tiny_softmax_f32"),
                &format!("undeclared kernel node refused: {r}"),
                &mut failures,
            ),
            Ok(()) => check(false, "undeclared kernel node refused", &mut failures),
        }

        // 6. A swapped auxiliary kernel (GELU for SiLU, both declared) binds,
        //    but is refused against the golden's graph.
        let ((), swapped) =
            recorder::capture(&stream, &rec, Some(&manifest), &engine.live, || {
                step(Activation::Gelu)
            })?;
        let mut nodes = swapped.graph.physical();
        physical::bind(&engine.live, &eager.routes, &mut nodes)?;
        match physical::check_against(&golden.physical, &nodes) {
            Err(r) => check(
                r.to_string().contains(GELU),
                &format!("swapped auxiliary kernel refused: {r}"),
                &mut failures,
            ),
            Ok(()) => check(false, "swapped auxiliary kernel refused", &mut failures),
        }

        // 7. A tampered golden is refused before anything is launched.
        let mut tampered = golden.routes.clone();
        tampered[1].kernel_symbol = "tiny_rowdot_f32_nn_fast".into();
        match CapturedGemmGraphPlan::new(golden.manifest(), tampered) {
            Err(r) => check(
                r.change().field == "ordered_digest",
                &format!("tampered golden refused: {r}"),
                &mut failures,
            ),
            Ok(_) => check(false, "tampered golden refused", &mut failures),
        }

        // 8. A policy flip is refused before launch: the closure never runs.
        let flipped = engine.live.with_policy(GemmPolicy {
            tensor_cores: !engine.live.policy.tensor_cores,
            ..engine.live.policy
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
            Ok(()) => check(false, "policy flip refused before launch", &mut failures),
        }
    }

    // A step with no GEMM work records no plan, and replays without one.
    let ((), empty) =
        recorder::record_eager(&rec, &engine.live, || Ok::<(), gemm_audit::Error>(()))?;
    check(
        empty.manifest.is_none(),
        "a step without GEMMs records no plan",
        &mut failures,
    );

    let _ = std::fs::remove_dir_all(&dir);
    if failures > 0 {
        eprintln!("{failures} checks failed");
        std::process::exit(1);
    }
    println!("all checks passed");
    Ok(())
}
