//! A small CPU "engine" that audits its own GEMM launches with gemm-audit.
//!
//! The engine has its own kernel (a row-dot matmul with one ascending `fma`
//! chain per output), declares it as an engine backend and module, and runs
//! a two-layer MLP decode step at batch 1 and 8. Around each step it makes
//! the three calls of `docs/embedding.md`: record eagerly, capture the same
//! step into a graph, and replay only through the validated plan. It then
//! stores a golden, refuses a tampered golden, and refuses a policy flip
//! before launch.
//!
//! Run: `cargo run --example cpu_engine` (exits non-zero if any check fails).

use gemm_audit::backend::cpu::{CpuStream, device_identity};
use gemm_audit::declaration::{BkRule, SplitRule, SymbolDeclaration};
use gemm_audit::digest::Digest;
use gemm_audit::identity::{
    CompilerIdentity, GemmRouteIdentity, ModuleIdentity, Revisions, SymbolEntry, VolatileMetadata,
};
use gemm_audit::policy::GemmPolicy;
use gemm_audit::recorder::{self, GemmRouteRecorder};
use gemm_audit::route::builder::{ArgumentsDigest, GemmRouteBuilder};
use gemm_audit::route::{
    ContractKind, DType, GemmOp, GemmShape, ModuleKind, OutputOwnership, PhysicalBackend, TileShape,
};
use gemm_audit::{CapturedGemmGraphPlan, OutputFingerprint, RecordedGemmTrace};
use std::cell::RefCell;
use std::rc::Rc;

/// The engine's one kernel symbol.
const SYMBOL: &str = "tiny_rowdot_f32_nn";
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

/// One step's buffers: input, hidden and output activations.
struct Step {
    batch: usize,
    x: Buf,
    h: Buf,
    y: Buf,
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
        let module = ModuleIdentity::from_artifact(
            backend,
            kind,
            source,
            compiler,
            std::env::consts::ARCH,
            vec![symbol],
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
            y: Rc::new(RefCell::new(vec![0.0; batch * D_MODEL])),
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
        let contract = module.symbols[0].serves[0].contract.clone();
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
        stream.launch(move || rowdot(&a.borrow(), &b.borrow(), &mut c.borrow_mut(), m, k, n));
        Ok(())
    }

    /// One decode step: y = relu(x W1) W2.
    fn step(
        &self,
        s: &Step,
        stream: &CpuStream,
        rec: &GemmRouteRecorder,
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
        let h = s.h.clone();
        stream.launch(move || h.borrow_mut().iter_mut().for_each(|v| *v = v.max(0.0)));
        self.gemm(
            stream,
            rec,
            &format!("down@b{b}"),
            &s.h,
            &self.w2,
            &s.y,
            (b, D_HIDDEN, D_MODEL),
        )
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

        // 1. Record the step eagerly.
        let ((), eager) =
            recorder::record_eager(&rec, &engine.live, || engine.step(&s, &stream, &rec))?;
        let manifest = eager.manifest.clone().expect("the step launches GEMMs");
        let y_eager = s.y.borrow().clone();
        println!(
            "  recorded {} GEMM launches, ordered digest {}",
            manifest.launch_set.launch_count,
            manifest.launch_set.ordered_digest.short()
        );

        // 2. Store it as a golden (atomically; never replaced without asking).
        let fingerprints = vec![
            OutputFingerprint::of(3, &bytes(&s.h.borrow())),
            OutputFingerprint::of(
                3,
                &y_eager
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<_>>(),
            ),
        ];
        let trace = RecordedGemmTrace::new(
            format!("mlp-decode@b{batch}"),
            Digest::sha256(format!("mlp {D_MODEL}x{D_HIDDEN} batch {batch}").as_bytes()),
            engine.live.clone(),
            eager.routes.clone(),
            fingerprints,
            VolatileMetadata::new(),
        )?;
        let golden_path = dir.join(format!("mlp-decode-b{batch}.gat"));
        trace.write(&golden_path, false)?;
        let golden = RecordedGemmTrace::read(&golden_path)?;
        check(
            golden == trace,
            "golden stored and read back",
            &mut failures,
        );

        // 3. Capture the same step into a graph, reserved to the manifest.
        s.y.borrow_mut().iter_mut().for_each(|v| *v = f32::NAN);
        let ((), captured) =
            recorder::capture(&stream, &rec, Some(&manifest), &engine.live, || {
                engine.step(&s, &stream, &rec)
            })?;
        check(
            s.y.borrow().iter().all(|v| v.is_nan()),
            "capture recorded the step without running it",
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
            bytes(&s.y.borrow()) == bytes(&y_eager),
            "replay output is bit-identical to the eager run",
            &mut failures,
        );
        let plan = captured.plan.as_ref().expect("GEMM work has a plan");
        check(
            plan.check_against_golden_trace(&golden).is_ok(),
            "captured plan matches the stored golden",
            &mut failures,
        );

        // 5. A tampered golden is refused before anything is launched.
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

        // 6. A policy flip is refused before launch: the closure never runs.
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
