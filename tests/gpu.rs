//! GPU tests of the CUDA backend. Every test needs a CUDA device and is
//! ignored by default; run them on a GPU machine with
//!
//! ```sh
//! LD_LIBRARY_PATH=/usr/local/cuda/lib64 cargo test --release --features cuda --test gpu -- --ignored --test-threads=1 --nocapture
//! ```
//!
//! What they print (kernels per M, drift counts) is recorded in
//! `docs/gpu-validation.md`.
#![cfg(feature = "cuda")]
// Capturing on one stream needs cudarc event tracking off, which cudarc
// makes `unsafe` (each use with a SAFETY comment).
#![allow(unsafe_code)]

use gemm_audit::backend::Backend;
use gemm_audit::backend::GemmBackend;
use gemm_audit::backend::cpu::{CpuBackend, CpuKernel};
use gemm_audit::backend::cuda::catalog::{CudaFamily, CudaKernel};
use gemm_audit::backend::cuda::{CUDA_DEFAULT_POLICY, CudaBackend};
use gemm_audit::kernels::{GemmSpec, KernelFamily, RouteChoice};
use gemm_audit::kernels::{element_size, from_storage_bytes};
use gemm_audit::physical::{self, NodeKind};
use gemm_audit::recorder;
use gemm_audit::route::{GemmShape, VendorRoute};
use gemm_audit::vocab::{ContractKind, PhysicalBackend};
use gemm_audit::workload::Workload;
use gemm_audit::{
    DType, Error, GemmOp, GemmPolicy, OutputFingerprint, PolicyMode, PreparedGemmCaptureManifest,
    ResolvedGemmRoute, build_resolved_gemm_launch_set,
};
use std::collections::HashSet;

const OPS: [GemmOp; 3] = [GemmOp::Nn, GemmOp::Tn, GemmOp::Nt];
/// The wgmma kernel's three tiles (128x256, 128x128, 128x192).
const WGMMA_TILES: [CudaKernel; 3] = [
    CudaKernel::WgmmaLarge,
    CudaKernel::WgmmaSmall,
    CudaKernel::WgmmaMedium,
];
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::Bf16];
const SEED: u64 = 0x6a09_e667;

/// Held by the tests that read or pin `cublaslt-invariant`'s family
/// choices: those live in the vendor handles every backend of the process
/// shares (one device context per process), so a test that adopts another
/// configuration would move the family under a test asserting that it
/// stays one configuration across m, if they ran at once.
static LT_FAMILY_CHOICES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`LT_FAMILY_CHOICES`], also after a test that held it failed.
fn lt_family_choices() -> std::sync::MutexGuard<'static, ()> {
    LT_FAMILY_CHOICES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn gpu() -> CudaBackend {
    CudaBackend::open().expect("a CUDA device (set LD_LIBRARY_PATH to the CUDA lib64)")
}

fn shape(m: u64, k: u64, n: u64) -> GemmShape {
    GemmShape { m, k, n }
}

fn route(
    g: &CudaBackend,
    op: GemmOp,
    dtype: DType,
    s: GemmShape,
    k: CudaKernel,
) -> ResolvedGemmRoute {
    g.nvrtc_route("t", op, dtype, s, k).expect("route")
}

fn cpu_out(op: GemmOp, dtype: DType, s: GemmShape, k: CpuKernel, seed: u64) -> Vec<u8> {
    let cpu = CpuBackend::default();
    cpu.run(&cpu.route("t", op, dtype, s, k).unwrap(), seed)
        .expect("cpu run")
}

fn spec(name: &str, op: GemmOp, dtype: DType, s: GemmShape, route: RouteChoice) -> GemmSpec {
    GemmSpec {
        name: name.into(),
        op,
        dtype,
        m: s.m,
        k: s.k,
        n: s.n,
        route,
        seed: None,
    }
}

fn vendor_backend(g: &CudaBackend, mode: PolicyMode) -> CudaBackend {
    g.with_policy(GemmPolicy {
        mode,
        ..CUDA_DEFAULT_POLICY
    })
}

/// Elements that differ between two outputs of the same dtype.
fn differing(dtype: DType, a: &[u8], b: &[u8]) -> usize {
    let e = element_size(dtype);
    a.chunks(e).zip(b.chunks(e)).filter(|(x, y)| x != y).count()
}

/// `len` pseudo-random bytes from the xorshift64 state `x`.
fn xorshift_bytes(x: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x as u8
        })
        .collect()
}

/// Largest |x - y| / (1 + |y|) between two outputs, widened to f32.
fn max_rel(dtype: DType, got: &[u8], want: &[u8]) -> f32 {
    let g = from_storage_bytes(dtype, got).expect("whole elements");
    let w = from_storage_bytes(dtype, want).expect("whole elements");
    g.iter()
        .zip(&w)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f32::max)
}

#[test]
#[ignore = "needs a CUDA device"]
fn opens_and_describes_the_device() {
    let g = gpu();
    let c = g.context();
    println!("device: {:?}", c.device);
    println!("target {}", g.arch());
    for m in &c.modules {
        println!(
            "module {} {} by {} {} for {} ({} symbols)",
            m.kind,
            m.digest,
            m.compiler.name,
            m.compiler.version,
            m.target,
            m.symbols.len()
        );
    }
    println!("volatile: {:?}", g.volatile());
    assert_eq!(c.policy, CUDA_DEFAULT_POLICY);
    assert_eq!(c.permitted_backends, vec![PhysicalBackend::CudaNvrtc]);
    assert!(c.device.compute_capability.is_some());
    // Opening again reuses the compiled module.
    assert_eq!(gpu().context(), c);
}

#[test]
#[ignore = "needs a CUDA device"]
fn scalar_fma_and_tiled_equal_the_cpu_reference_bit_for_bit() {
    let g = gpu();
    for s in [
        shape(64, 256, 48),
        shape(37, 129, 53),
        shape(1, 7, 1),
        shape(3, 0, 5),
    ] {
        for op in OPS {
            for dtype in DTYPES {
                let want = cpu_out(op, dtype, s, CpuKernel::SCALAR_FMA, SEED);
                for k in [CudaKernel::ScalarFma, CudaKernel::Tiled] {
                    let got = g.run(&route(&g, op, dtype, s, k), SEED).expect("run");
                    assert_eq!(
                        differing(dtype, &got, &want),
                        0,
                        "{} {op} {dtype} {s:?} differs from the CPU reference",
                        k.symbol_family()
                    );
                }
            }
        }
    }
    // The H200 fact, now for the whole product: 256x1024x256 f32.
    let s = shape(256, 1024, 256);
    let want = cpu_out(GemmOp::Nn, DType::F32, s, CpuKernel::SCALAR_FMA, SEED);
    let got = g
        .run(
            &route(&g, GemmOp::Nn, DType::F32, s, CudaKernel::Tiled),
            SEED,
        )
        .unwrap();
    assert_eq!(got, want);
    println!("scalar-fma and tiled: every op x dtype equals the CPU reference bit for bit");
}

#[test]
#[ignore = "needs a CUDA device"]
fn split_k_fixed_equals_the_cpu_fold() {
    let g = gpu();
    for (s, splits) in [
        (shape(64, 256, 48), 4),
        (shape(37, 129, 53), 3),
        (shape(16, 1024, 256), 64),
        (shape(5, 10, 7), 13),
        (shape(8, 1000, 40), 1),
    ] {
        for op in OPS {
            for dtype in DTYPES {
                let want = cpu_out(
                    op,
                    dtype,
                    s,
                    CpuKernel::new(KernelFamily::SplitKFixed(splits)).unwrap(),
                    SEED,
                );
                let got = g
                    .run(
                        &route(&g, op, dtype, s, CudaKernel::SplitKFixed(splits)),
                        SEED,
                    )
                    .unwrap();
                assert_eq!(
                    differing(dtype, &got, &want),
                    0,
                    "split-k-fixed:{splits} {op} {dtype} {s:?}"
                );
            }
        }
    }
    println!("split-k-fixed equals the CPU split_k_fixed bit for bit");
}

#[test]
#[ignore = "needs a CUDA device"]
fn mma_tile_families_are_bit_identical_and_batch_invariant() {
    let g = gpu();
    for dtype in [DType::Bf16, DType::F16] {
        for op in OPS {
            for s in [
                shape(128, 256, 128),
                shape(200, 1000, 264),
                shape(33, 48, 17),
            ] {
                let large = g
                    .run(&route(&g, op, dtype, s, CudaKernel::MmaLarge), SEED)
                    .unwrap();
                let small = g
                    .run(&route(&g, op, dtype, s, CudaKernel::MmaSmall), SEED)
                    .unwrap();
                assert_eq!(large, small, "mma large vs small {op} {dtype} {s:?}");
                // Same problem, scalar FMA on the CPU: close, not equal (the layout is right).
                let reference = cpu_out(op, dtype, s, CpuKernel::SCALAR_FMA, SEED);
                let rel = max_rel(dtype, &large, &reference);
                assert!(
                    rel < 0.02,
                    "mma {op} {dtype} {s:?} is far from the reference: {rel}"
                );
            }
        }
        // One M-sweep (k 1024, n 256): rows of every m equal the rows of m=128, in both families.
        let (k, n) = (1024, 256);
        let full = g
            .run(
                &route(
                    &g,
                    GemmOp::Nn,
                    dtype,
                    shape(128, k, n),
                    CudaKernel::MmaLarge,
                ),
                SEED,
            )
            .unwrap();
        let row = n as usize * element_size(dtype);
        for m in 1..=128u64 {
            for fam in [CudaKernel::MmaLarge, CudaKernel::MmaSmall] {
                let out = g
                    .run(&route(&g, GemmOp::Nn, dtype, shape(m, k, n), fam), SEED)
                    .unwrap();
                assert_eq!(
                    out,
                    full[..m as usize * row],
                    "{} {dtype} m={m}: rows differ from m=128",
                    fam.symbol_family()
                );
            }
        }
    }
    println!("mma_large == mma_small bitwise (bf16, f16, nn/tn/nt); m=1..128 rows batch invariant");
}

/// The TMA + wgmma families (sm_90 only): equal to the mma.sync families
/// bit for bit on every op and dtype (the contract they share), their three
/// tile variants equal, rows batch invariant over m (the m-contiguous TN
/// operand needs m % 8 == 0), shapes TMA cannot serve refused with the
/// reason, and a route whose tensor-map identity was altered refused before
/// launch.
#[test]
#[ignore = "needs a CUDA device"]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
fn wgmma_families_equal_mma_and_are_batch_invariant() {
    let g = gpu();
    if let Err(why) = g.wgmma_available() {
        // Not a Hopper device: every wgmma route is refused with the reason.
        let e = g
            .nvrtc_route(
                "t",
                GemmOp::Nn,
                DType::Bf16,
                shape(128, 64, 64),
                CudaKernel::WgmmaLarge,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains(&why.to_string()), "{e}");
        println!("no wgmma here ({why}); refusal checked");
        return;
    }
    for dtype in [DType::Bf16, DType::F16] {
        for op in OPS {
            // The last three have more tiles than the H200 has SMs, so the
            // persistent kernels cut their last wave's tiles along k (with
            // m, n and k tails, and pieces from the middle of a tile); in
            // the last, every family's segments are over 3/5 of a tile and
            // each launch chooses by its SM clock whether to cut.
            for s in [
                shape(200, 136, 264),
                shape(256, 512, 512),
                shape(1024, 4096, 520),
                shape(2056, 1000, 5000),
                shape(1032, 4096, 8200),
                shape(3592, 2056, 5576),
            ] {
                let mma = g
                    .run(&route(&g, op, dtype, s, CudaKernel::MmaLarge), SEED)
                    .unwrap();
                for fam in WGMMA_TILES {
                    let r = route(&g, op, dtype, s, fam);
                    assert!(
                        r.tensor_map.is_some(),
                        "{} records its tensor maps",
                        fam.symbol_family()
                    );
                    assert_eq!(r.compilation_target, "sm_90a");
                    let out = g.run(&r, SEED).unwrap();
                    assert_eq!(
                        differing(dtype, &out, &mma),
                        0,
                        "{} vs mma_large {op} {dtype} {s:?}",
                        fam.symbol_family()
                    );
                    assert_eq!(
                        out,
                        g.run(&r, SEED).unwrap(),
                        "run to run {op} {dtype} {s:?}"
                    );
                }
            }
        }
    }
    // Batch invariance at k = n = 4096: the rows of every m against m = 1024.
    let (k, n) = (4096, 4096);
    let row = n as usize * element_size(DType::Bf16);
    for op in OPS {
        let full = g
            .run(
                &route(
                    &g,
                    op,
                    DType::Bf16,
                    shape(1024, k, n),
                    CudaKernel::WgmmaLarge,
                ),
                SEED,
            )
            .unwrap();
        for m in [1u64, 2, 3, 8, 48, 64, 96, 200, 1000] {
            if op == GemmOp::Tn && m % 8 != 0 {
                let e = g
                    .nvrtc_route("t", op, DType::Bf16, shape(m, k, n), CudaKernel::WgmmaLarge)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("m to be a multiple of 8"), "{e}");
                continue;
            }
            for fam in WGMMA_TILES {
                let out = g
                    .run(&route(&g, op, DType::Bf16, shape(m, k, n), fam), SEED)
                    .unwrap();
                assert_eq!(
                    out,
                    full[..m as usize * row],
                    "{} {op} bf16 m={m}: rows differ from m=1024",
                    fam.symbol_family()
                );
            }
        }
    }
    // What TMA cannot serve is refused with the reason, not launched.
    let e = g
        .nvrtc_route(
            "t",
            GemmOp::Nn,
            DType::Bf16,
            shape(64, 100, 64),
            CudaKernel::WgmmaLarge,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("k to be a multiple of 8"), "{e}");
    assert!(
        g.nvrtc_route(
            "t",
            GemmOp::Nn,
            DType::F32,
            shape(64, 64, 64),
            CudaKernel::WgmmaLarge
        )
        .is_err()
    );
    // An altered tensor-map identity is refused before anything launches.
    let mut r = route(
        &g,
        GemmOp::Nn,
        DType::Bf16,
        shape(64, 64, 64),
        CudaKernel::WgmmaLarge,
    );
    if let Some(t) = r.tensor_map.as_mut() {
        t.digest = gemm_audit::Digest::sha256(b"another tensor map");
    }
    let e = g.run(&r, SEED).unwrap_err().to_string();
    assert!(e.contains("tensor-map digest"), "{e}");
    println!(
        "wgmma_256 == wgmma_128 == wgmma_192 == mma_large bitwise (bf16, f16, nn/tn/nt); k=n=4096 rows batch invariant; refusals checked"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn atomic_control_drifts() {
    let g = gpu();
    let s = shape(256, 1024, 256);
    let r = route(&g, GemmOp::Nn, DType::F32, s, CudaKernel::SplitKAtomic(64));
    let reference = cpu_out(GemmOp::Nn, DType::F32, s, CpuKernel::SCALAR_FMA, SEED);
    let mut seen = HashSet::new();
    for _ in 0..20 {
        let out = g.run(&r, SEED).unwrap();
        assert!(max_rel(DType::F32, &out, &reference) < 1e-4);
        seen.insert(out);
    }
    println!(
        "split-k-atomic:64 256x1024x256 f32: {} distinct outputs in 20 runs",
        seen.len()
    );
    assert!(seen.len() >= 2, "the atomic control never drifted");
    // The built-in control workload (64x1024x64, 16 splits) too.
    let w = Workload::builtin("nondeterministic-control").unwrap();
    let r = g.resolve(&w.gemms[0]).unwrap();
    let distinct: HashSet<Vec<u8>> = (0..32).map(|_| g.run(&r, w.seed).unwrap()).collect();
    println!(
        "nondeterministic-control: {} distinct outputs in 32 runs",
        distinct.len()
    );
    assert!(distinct.len() >= 2);
}

/// Outputs held to fingerprints on the device agree with the host: a
/// checked run copies back nothing for the right fingerprint and the very
/// output for a wrong one, in both modes; a fingerprinted replay equals the
/// host fingerprints of a plain replay, launch for launch.
#[test]
#[ignore = "needs a CUDA device"]
fn device_checked_runs_and_fingerprinted_replays_match_the_host() {
    use gemm_audit::FingerprintMode;
    let g = gpu();
    let routes: Vec<_> = [
        (
            GemmOp::Nn,
            DType::Bf16,
            shape(96, 512, 200),
            CudaKernel::Tiled,
        ),
        (
            GemmOp::Tn,
            DType::F16,
            shape(33, 256, 17),
            CudaKernel::Tiled,
        ),
        (GemmOp::Nt, DType::F32, shape(7, 64, 5), CudaKernel::Tiled),
    ]
    .into_iter()
    .map(|(op, dt, s, k)| route(&g, op, dt, s, k))
    .collect();
    let seeds = [SEED, SEED + 1, SEED + 2];
    for mode in [FingerprintMode::Strong, FingerprintMode::Fast] {
        for (r, &seed) in routes.iter().zip(&seeds) {
            let out = g.run(r, seed).unwrap();
            let right = OutputFingerprint::with_mode(mode, seed, &out);
            assert_eq!(
                g.run_checked(r, seed, mode, &right)
                    .unwrap()
                    .differing_output,
                None
            );
            let wrong = OutputFingerprint::with_mode(mode, seed ^ 1, &out);
            let run = g.run_checked(r, seed, mode, &wrong).unwrap();
            assert_eq!(run.differing_output.as_deref(), Some(&out[..]));
        }
        let graph = g
            .capture(&manifest_of(&g, &routes), &routes, &seeds)
            .unwrap();
        let host: Vec<_> = g
            .replay(&graph, "t")
            .unwrap()
            .iter()
            .zip(seeds)
            .map(|(o, s)| OutputFingerprint::with_mode(mode, s, o))
            .collect();
        assert_eq!(g.replay_fingerprinted(&graph, "t", mode).unwrap(), host);
    }
}

/// Operands made on the device equal the CPU's seeded inputs bit for bit,
/// for every dtype and op, odd shapes, an empty one, seeds at the ends of
/// the range, and one large enough that the kernel loops (its grid is
/// capped).
#[test]
#[ignore = "needs a CUDA device"]
fn device_made_operands_equal_the_cpu_seeded_inputs() {
    use gemm_audit::kernels::{Problem, seeded_inputs, to_storage_bytes};
    let g = gpu();
    let shapes = [
        (1, 1, 1),
        (0, 8, 8),
        (7, 13, 5),
        (96, 512, 200),
        (33, 4096, 17),
        (2049, 4096, 1024),
    ];
    let mut checked = 0usize;
    for (m, k, n) in shapes {
        for op in OPS {
            for dtype in DTYPES {
                for seed in [0u64, SEED, u64::MAX] {
                    let p = Problem { op, m, k, n };
                    let (a, b) = seeded_inputs(&p, dtype, seed);
                    let (da, db) = g.seeded_operands(&p, dtype, seed).unwrap();
                    let what = format!("{op} {dtype} {m}x{k}x{n} seed {seed:#x}");
                    assert!(da == to_storage_bytes(dtype, &a), "A of {what}");
                    assert!(db == to_storage_bytes(dtype, &b), "B of {what}");
                    checked += da.len() + db.len();
                }
            }
        }
    }
    println!("device-made operands: {checked} bytes equal the CPU's");
}

#[test]
#[ignore = "needs a CUDA device"]
fn device_fingerprint_equals_host_fingerprint() {
    let g = gpu();
    let mut x = 0x1234_5678_9abc_def0u64;
    for len in [
        0usize,
        1,
        55,
        56,
        63,
        64,
        119,
        4095,
        4096,
        4097,
        3 * 4096 + 100,
        (1 << 20) + 7,
    ] {
        let bytes = xorshift_bytes(&mut x, len);
        assert_eq!(
            g.fingerprint(7, &bytes).unwrap(),
            OutputFingerprint::of(7, &bytes),
            "{len} bytes"
        );
    }
    let r = route(
        &g,
        GemmOp::Nn,
        DType::Bf16,
        shape(96, 512, 200),
        CudaKernel::Tiled,
    );
    let out = g.run(&r, SEED).unwrap();
    assert_eq!(
        g.run_fingerprinted(&r, SEED).unwrap(),
        OutputFingerprint::of(SEED, &out)
    );
}

fn manifest_of(g: &CudaBackend, routes: &[ResolvedGemmRoute]) -> PreparedGemmCaptureManifest {
    let set = build_resolved_gemm_launch_set(routes).unwrap();
    PreparedGemmCaptureManifest {
        context: g.context().clone(),
        launch_set: set,
        route_capacity: set.launch_count,
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn capture_binds_physical_nodes_and_replays_eager_bits() {
    let g = gpu();
    let mut routes = Vec::new();
    for (i, (op, dtype, s, k)) in [
        (
            GemmOp::Nn,
            DType::F32,
            shape(64, 1024, 256),
            CudaKernel::ScalarFma,
        ),
        (
            GemmOp::Tn,
            DType::Bf16,
            shape(8, 256, 768),
            CudaKernel::Tiled,
        ),
        (
            GemmOp::Nt,
            DType::F16,
            shape(16, 1024, 256),
            CudaKernel::SplitKFixed(4),
        ),
        (
            GemmOp::Nn,
            DType::Bf16,
            shape(200, 512, 130),
            CudaKernel::MmaLarge,
        ),
        (
            GemmOp::Nn,
            DType::Bf16,
            shape(200, 512, 130),
            CudaKernel::MmaSmall,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        routes.push(g.nvrtc_route(&format!("g{i}"), op, dtype, s, k).unwrap());
    }
    let seeds: Vec<u64> = (0..routes.len() as u64).map(|i| SEED + i).collect();
    let eager: Vec<Vec<u8>> = routes
        .iter()
        .zip(&seeds)
        .map(|(r, &s)| g.run(r, s).unwrap())
        .collect();
    let manifest = manifest_of(&g, &routes);
    let graph = g.capture(&manifest, &routes, &seeds).unwrap();
    let mut nodes = graph.physical().to_vec();
    for n in &nodes {
        println!(
            "node {} {:?} grid {:?} block {:?} smem {}",
            n.kind, n.symbol, n.grid, n.block, n.shared_bytes
        );
    }
    physical::bind(g.context(), &routes, &mut nodes).expect("physical nodes bind to the routes");
    assert_eq!(nodes.len(), routes.len());
    for _ in 0..3 {
        assert_eq!(g.replay(&graph, "test").unwrap(), eager);
    }
    // A capture request short of the manifest is refused.
    assert!(matches!(
        g.capture(&manifest, &routes[..2], &seeds[..2]),
        Err(Error::Refused(_))
    ));
    // A tampered route (another grid) no longer binds.
    let mut tampered = routes.clone();
    tampered[1].launch.grid[0] += 1;
    let mut nodes = graph.physical().to_vec();
    assert!(physical::bind(g.context(), &tampered, &mut nodes).is_err());

    // The whole recorder path on the GPU: eager, trace, capture, bind, validated replay.
    let backend = Backend::new(g.clone());
    for name in ["transformer-block", "m-sweep"] {
        let w = Workload::builtin(name).unwrap();
        let rec = recorder::record(&backend, &w, &mut |_, _| {}).unwrap();
        println!(
            "record {name}: {:?}, {} graph nodes",
            rec.replay,
            rec.trace.physical.len()
        );
        assert!(rec.replay.is_identical(), "{name}: {:?}", rec.replay);
        assert_eq!(rec.trace.physical.len(), w.gemms.len());
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn policy_mutation_refuses_replay_before_launch() {
    let g = gpu();
    let routes = vec![
        route(
            &g,
            GemmOp::Nn,
            DType::Bf16,
            shape(64, 256, 64),
            CudaKernel::MmaSmall,
        ),
        route(
            &g,
            GemmOp::Nn,
            DType::F32,
            shape(64, 256, 64),
            CudaKernel::Tiled,
        ),
    ];
    let seeds = vec![1, 2];
    let graph = g
        .capture(&manifest_of(&g, &routes), &routes, &seeds)
        .unwrap();
    let eager = g.replay(&graph, "ok").unwrap();
    let no_tc = g.with_policy(GemmPolicy {
        tensor_cores: false,
        ..CUDA_DEFAULT_POLICY
    });
    let mut called = false;
    let refused = graph
        .plan()
        .with_validated_launch(no_tc.context(), "mutated", |_| called = true)
        .unwrap_err();
    assert!(!called, "the launch closure ran under a refused policy");
    println!("tensor_cores=false: {refused}");
    match no_tc.replay(&graph, "mutated") {
        Err(Error::Refused(r)) => println!("replay refused: {r}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Validation of the plan's own routes names the tensor-core route.
    let mut live = g.context().clone();
    live.policy.tensor_cores = false;
    live.permitted_contracts = live.policy.contracts().to_vec();
    let mut manifest = manifest_of(&g, &routes);
    manifest.context = live.clone();
    let plan = gemm_audit::CapturedGemmGraphPlan::new(manifest, routes.clone()).unwrap();
    let r = plan.validate(&live).unwrap_err();
    println!("route-level refusal: {r}");
    assert_eq!(r.route_index, Some(0));
    // The graph still replays the eager bits under the original policy.
    assert_eq!(g.replay(&graph, "ok").unwrap(), eager);
    // The atomic control is refused by the default policy.
    let atomic = vec![route(
        &g,
        GemmOp::Nn,
        DType::F32,
        shape(64, 1024, 64),
        CudaKernel::SplitKAtomic(16),
    )];
    let ag = g.capture(&manifest_of(&g, &atomic), &atomic, &[3]).unwrap();
    assert!(matches!(g.replay(&ag, "control"), Err(Error::Refused(_))));
}

fn print_vendor(r: &ResolvedGemmRoute) {
    let v = r.vendor.as_ref().unwrap();
    println!(
        "  {} {} {}x{}x{}: contract {} algo {} tile {} split-k {} reduction {} stages {} swizzle {} inner {:?} cluster {:?} workspace {} launch {:?}x{:?} kernels {:?}",
        r.kernel_symbol,
        r.dtype,
        r.shape.m,
        r.shape.k,
        r.shape.n,
        r.contract,
        v.algorithm_id,
        v.tile_id,
        v.split_k,
        v.reduction_scheme,
        v.stages_id,
        v.swizzle,
        v.inner_shape_id,
        v.cluster_shape_id,
        v.workspace_bytes,
        r.launch.grid,
        r.launch.block,
        v.physical_kernels
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn cublas_routes_capture_bind_and_replay() {
    let g = gpu();
    for mode in [PolicyMode::CublasPedantic, PolicyMode::CublasFast] {
        let v = vendor_backend(&g, mode);
        println!("mode {}", mode.as_str());
        let s = shape(256, 1024, 256);
        let mut routes = Vec::new();
        for (i, (choice, op, dtype)) in [
            (RouteChoice::Cublas, GemmOp::Nn, DType::F32),
            (RouteChoice::CublasLt, GemmOp::Nn, DType::F32),
            (RouteChoice::Cublas, GemmOp::Tn, DType::Bf16),
            (RouteChoice::CublasLt, GemmOp::Nt, DType::Bf16),
            (RouteChoice::Cublas, GemmOp::Nn, DType::F16),
        ]
        .into_iter()
        .enumerate()
        {
            let r = v
                .resolve(&spec(&format!("v{i}"), op, dtype, s, choice))
                .unwrap();
            print_vendor(&r);
            assert!(!r.vendor.as_ref().unwrap().physical_kernels.is_empty());
            routes.push(r);
        }
        let seeds = vec![SEED; routes.len()];
        let eager: Vec<Vec<u8>> = routes.iter().map(|r| v.run(r, SEED).unwrap()).collect();
        for (r, out) in routes.iter().zip(&eager) {
            let reference = cpu_out(r.op, r.dtype, r.shape, CpuKernel::SCALAR_FMA, SEED);
            let rel = max_rel(r.dtype, out, &reference);
            let diff = differing(r.dtype, out, &reference);
            println!(
                "  {} {} vs scalar FMA: {diff} of {} elements differ, max rel {rel:e}",
                r.kernel_symbol,
                r.dtype,
                r.shape.m * r.shape.n
            );
            assert!(rel < 0.02);
        }
        let graph = v
            .capture(&manifest_of(&v, &routes), &routes, &seeds)
            .unwrap();
        let mut nodes = graph.physical().to_vec();
        for n in &nodes {
            println!(
                "  node {} {:?} grid {:?} block {:?}",
                n.kind, n.symbol, n.grid, n.block
            );
        }
        physical::bind(v.context(), &routes, &mut nodes).expect("vendor kernels bind");
        assert!(nodes.iter().all(|n| n.route_index.is_some()));
        assert_eq!(v.replay(&graph, "vendor").unwrap(), eager);
        // The deterministic policy refuses vendor routes before launch.
        assert!(matches!(g.replay(&graph, "vendor"), Err(Error::Refused(_))));
        assert_eq!(
            routes[0].contract.kind,
            if mode == PolicyMode::CublasFast {
                ContractKind::VendorFast
            } else {
                ContractKind::VendorPedantic
            }
        );
    }
    // Through the recorder, with the graph bound and stored.
    let w = Workload {
        name: "vendor".into(),
        description: String::new(),
        seed: SEED,
        policy: Some(PolicyMode::CublasFast),
        gemms: vec![
            spec(
                "sgemm",
                GemmOp::Nn,
                DType::F32,
                shape(256, 1024, 256),
                RouteChoice::Cublas,
            ),
            spec(
                "lt",
                GemmOp::Nn,
                DType::Bf16,
                shape(64, 4096, 256),
                RouteChoice::CublasLt,
            ),
        ],
    };
    let rec = recorder::record(&Backend::new(g.clone()), &w, &mut |_, _| {}).unwrap();
    println!(
        "record vendor: {:?}; {} nodes",
        rec.replay,
        rec.trace.physical.len()
    );
    assert!(rec.replay.is_identical());
    assert!(
        rec.trace
            .physical
            .iter()
            .any(|n| n.kind == NodeKind::Kernel)
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn cublas_bf16_row_zero_across_batch_sizes() {
    let g = gpu();
    let v = vendor_backend(&g, PolicyMode::CublasFast);
    let (k, n) = (4096u64, 4096u64);
    let ms = [1u64, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
    let row = n as usize * element_size(DType::Bf16);
    for choice in [
        RouteChoice::Cublas,
        RouteChoice::CublasLt,
        RouteChoice::Kernel(KernelFamily::MmaSmall),
        RouteChoice::Policy,
    ] {
        let backend = if choice.is_vendor() { &v } else { &g };
        println!("{choice} bf16 nn k={k} n={n}: row 0 against m=1");
        let mut first: Option<Vec<u8>> = None;
        let mut changed = Vec::new();
        for &m in &ms {
            let r = backend
                .resolve(&spec(
                    &format!("m{m}"),
                    GemmOp::Nn,
                    DType::Bf16,
                    shape(m, k, n),
                    choice,
                ))
                .unwrap();
            let out = backend.run(&r, SEED).unwrap();
            let row0 = out[..row].to_vec();
            let diff = first
                .as_ref()
                .map_or(0, |f| differing(DType::Bf16, &row0, f));
            let kernels = r.vendor.as_ref().map_or_else(
                || vec![r.kernel_symbol.clone()],
                |x| x.physical_kernels.clone(),
            );
            let algo = r.vendor.as_ref().map_or(String::new(), |x| {
                format!(
                    " algo {} tile {} split-k {} reduction {}",
                    x.algorithm_id, x.tile_id, x.split_k, x.reduction_scheme
                )
            });
            println!(
                "  m={m:>4}: row 0 {} ({diff} of {n} elements differ){algo}; kernels {kernels:?}",
                if diff == 0 { "same" } else { "CHANGED" }
            );
            if diff > 0 {
                changed.push(m);
            }
            first.get_or_insert(row0);
        }
        println!("  {choice}: row 0 changed bits at m = {changed:?}");
        if !choice.is_vendor() {
            assert!(
                changed.is_empty(),
                "{choice} is not batch invariant at {changed:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn graph_enum_round_trip() {
    // The Backend handle dispatches to the CUDA backend and keeps its graph.
    let g = gpu();
    let backend = Backend::new(g.clone());
    let r = route(
        &g,
        GemmOp::Nn,
        DType::F32,
        shape(32, 64, 32),
        CudaKernel::Tiled,
    );
    let m = manifest_of(&g, std::slice::from_ref(&r));
    let graph = backend.capture(&m, std::slice::from_ref(&r), &[5]).unwrap();
    assert!(
        graph
            .launches()
            .downcast_ref::<gemm_audit::backend::cuda::CudaLaunches>()
            .is_some()
    );
    assert_eq!(
        backend.replay(&graph, "enum").unwrap(),
        vec![g.run(&r, 5).unwrap()]
    );
    assert_eq!(backend.reference(&r, 5).unwrap(), g.run(&r, 5).unwrap());
}

/// cublaslt-invariant: one split-K-free, workspace-free configuration for
/// every m of a family, and the rows shared with the smallest m identical
/// at every m (bf16 and f16, NN/TN/NT, k = n = 4096; TN at multiples of 8,
/// and refused elsewhere with the reason). A route whose recorded
/// configuration the library does not offer is refused at launch. Also
/// says where the route equals the mma-large family bit for bit
/// (printed, not asserted: the contracts differ).
#[test]
#[ignore = "needs a CUDA device"]
fn cublaslt_invariant_is_one_configuration_and_batch_invariant() {
    let _choices = lt_family_choices();
    let g = gpu();
    let v = vendor_backend(&g, PolicyMode::CublasFast);
    let (k, n) = (4096u64, 4096u64);
    let ms = [1u64, 2, 48, 200, 1024, 8192];
    for dtype in [DType::Bf16, DType::F16] {
        let row = n as usize * element_size(dtype);
        for op in OPS {
            let mut config = None;
            let mut base: Option<Vec<u8>> = None;
            let mut changed = Vec::new();
            let mut equal_mma = Vec::new();
            for &m in &ms {
                let m = if op == GemmOp::Tn {
                    m.next_multiple_of(8)
                } else {
                    m
                };
                let r = v
                    .resolve(&spec(
                        &format!("inv@m{m}"),
                        op,
                        dtype,
                        shape(m, k, n),
                        RouteChoice::CublasLtInvariant,
                    ))
                    .unwrap();
                let x = r.vendor.clone().expect("a vendor route");
                assert_eq!(
                    (x.split_k, x.reduction_scheme),
                    (1, 0),
                    "{op} {dtype} m={m}: split-K or a reduction scheme in {x:?}"
                );
                assert!(
                    x.workspace_bytes <= 64,
                    "{op} {dtype} m={m}: workspace {} could hold partial sums",
                    x.workspace_bytes
                );
                let c = (
                    x.algorithm_id,
                    x.tile_id,
                    x.stages_id,
                    x.swizzle,
                    x.inner_shape_id,
                    x.cluster_shape_id,
                );
                assert_eq!(
                    *config.get_or_insert(c),
                    c,
                    "{op} {dtype} m={m}: another configuration"
                );
                let out = v.run(&r, SEED).unwrap();
                let first = base.get_or_insert_with(|| out[..row].to_vec());
                if out[..row] != first[..] {
                    changed.push(m);
                }
                let mma = route(&g, op, dtype, shape(m, k, n), CudaKernel::MmaLarge);
                if g.run(&mma, SEED).unwrap() == out {
                    equal_mma.push(m);
                }
                if m == ms[0] || m == 8192 {
                    println!(
                        "  {op} {dtype} m={m}: algo {} tile {} stages {} swizzle {} cluster {:?} workspace {}; kernels {:?}",
                        x.algorithm_id,
                        x.tile_id,
                        x.stages_id,
                        x.swizzle,
                        x.cluster_shape_id,
                        x.workspace_bytes,
                        x.physical_kernels
                    );
                }
            }
            println!(
                "cublaslt-invariant {op} {dtype} k=n=4096: row 0 changed at m = {changed:?}; bit-identical to mma-large at m = {equal_mma:?}"
            );
            assert!(
                changed.is_empty(),
                "{op} {dtype}: cublaslt-invariant is not batch invariant at m = {changed:?}"
            );
        }
    }
    let refused = v
        .resolve(&spec(
            "inv-tn@m4",
            GemmOp::Tn,
            DType::Bf16,
            shape(4, k, n),
            RouteChoice::CublasLtInvariant,
        ))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("multiple of 8"), "{refused}");
    // A configuration the library does not offer for the family (another
    // tile) is refused before launch, not re-picked.
    let mut r = v
        .resolve(&spec(
            "inv@m64",
            GemmOp::Nn,
            DType::Bf16,
            shape(64, k, n),
            RouteChoice::CublasLtInvariant,
        ))
        .unwrap();
    r.vendor.as_mut().unwrap().tile_id += 1000;
    let stale = v.run(&r, SEED).unwrap_err().to_string();
    assert!(stale.contains("recorded configuration"), "{stale}");
    // Recorded, captured and replayed like every route.
    let mut w = Workload::builtin("batch-invariant").unwrap();
    w.gemms
        .retain(|s| s.name.starts_with("nn-bf16@") && s.m <= 256);
    let rec = recorder::record(&Backend::new(g.clone()), &w, &mut |_, _| {}).unwrap();
    assert!(rec.replay.is_identical(), "{:?}", rec.replay);
}

/// cublaslt-invariant's timed choice is pinned by a recorded route: after
/// adopting a route carrying another of the family's candidates, the
/// backend resolves the family to that candidate and runs it (printed:
/// whether its bits equal the timed choice's); a configuration the library
/// does not offer is not adopted.
#[test]
#[ignore = "needs a CUDA device"]
fn cublaslt_invariant_adopts_a_recorded_configuration() {
    let _choices = lt_family_choices();
    let v = vendor_backend(&gpu(), PolicyMode::CublasFast);
    let (op, dtype, k, n) = (GemmOp::Nn, DType::Bf16, 4096u64, 4096u64);
    let spec = |m| {
        spec(
            &format!("inv@m{m}"),
            op,
            dtype,
            shape(m, k, n),
            RouteChoice::CublasLtInvariant,
        )
    };
    let ms = [8u64, 1024];
    let timed: Vec<_> = ms.map(|m| v.resolve(&spec(m)).unwrap()).into();
    let base: Vec<_> = timed.iter().map(|r| v.run(r, SEED).unwrap()).collect();
    let config = |x: &VendorRoute| (x.algorithm_id, x.tile_id, x.stages_id);
    let t = timed[0].vendor.clone().unwrap();
    let other = v
        .lt_family_timings(op, dtype, k, n)
        .unwrap()
        .into_iter()
        .find(|c| config(&c.vendor) != config(&t))
        .expect("a family with a second candidate");
    let mut pinned = timed[0].clone();
    {
        let p = pinned.vendor.as_mut().unwrap();
        let c = &other.vendor;
        (p.algorithm_id, p.tile_id, p.stages_id) = config(c);
        (p.swizzle, p.inner_shape_id, p.cluster_shape_id) =
            (c.swizzle, c.inner_shape_id, c.cluster_shape_id);
    }
    let mut bogus = timed[0].clone();
    bogus.vendor.as_mut().unwrap().tile_id += 1000;
    let pin_of = |r: &ResolvedGemmRoute| gemm_audit::pin::VendorPin::of(r).unwrap();
    assert_eq!(v.adopt_pins(&[pin_of(&bogus)]), 0);
    assert_eq!(v.adopt_pins(&[pin_of(&pinned)]), 1);
    for (m, base) in ms.into_iter().zip(&base) {
        let r = v.resolve(&spec(m)).unwrap();
        assert_eq!(
            config(r.vendor.as_ref().unwrap()),
            config(&other.vendor),
            "m = {m}: the adopted configuration ({})",
            other.config
        );
        let out = v.run(&r, SEED).unwrap();
        println!(
            "m = {m}: timed {:?}, adopted {}: bits equal: {}",
            config(&t),
            other.config,
            &out == base
        );
    }
    // The process's later tests get the timed choice back.
    assert_eq!(v.adopt_pins(&[pin_of(&timed[0])]), 1);
    assert_eq!(
        config(v.resolve(&spec(64)).unwrap().vendor.as_ref().unwrap()),
        config(&t)
    );
}

/// `--device all` on this host: every CUDA device opens with its own
/// context, its label carries the PCI bus id and UUID, an ordinal past the
/// last is `NoSuchDevice`, the devices agree under `gpu-to-gpu` (when there
/// are two or more of one class), and a fault planted on the last device is
/// named.
#[test]
#[ignore = "needs a CUDA device"]
fn every_device_opens_agrees_and_a_planted_fault_is_named() {
    use gemm_audit::audit::{AuditOptions, NoProgress, Verdict, run_audit};
    use gemm_audit::backend::{BackendKind, DeviceSelection};
    use gemm_audit::fleet;
    let count = CudaBackend::device_count().expect("device count");
    println!("{count} CUDA device(s)");
    assert!(matches!(
        CudaBackend::open_ordinal(count),
        Err(Error::NoSuchDevice { .. })
    ));
    let (mut devices, _) =
        Backend::open_devices(BackendKind::Cuda, DeviceSelection::All).expect("every device");
    assert_eq!(devices.len(), count);
    for (i, (label, b)) in devices.iter().enumerate() {
        println!("{label}");
        assert_eq!(label.ordinal, i);
        assert!(
            label.pci_bus_id.is_some() && label.uuid.is_some(),
            "{label}"
        );
        match b.downcast_ref::<CudaBackend>() {
            Some(c) => assert_eq!(c.ordinal(), i),
            None => panic!("not CUDA: {b:?}"),
        }
    }
    let opts = AuditOptions {
        runs: 2,
        control_attempts: 32,
        workloads: vec![Workload::builtin("transformer-block").expect("built-in")],
        fingerprint_mode: gemm_audit::FingerprintMode::Strong,
    };
    let audit = |devices: &[(gemm_audit::backend::DeviceLabel, Backend)]| {
        let reports = fleet::on_each_device(devices, |_, b| run_audit(b, &opts, &mut NoProgress));
        fleet::FleetReport::new(
            devices
                .iter()
                .map(|(l, _)| l.clone())
                .zip(reports.into_iter().map(|r| r.expect("audit")))
                .collect(),
        )
    };
    let clean = audit(&devices);
    for c in &clean.gpu_to_gpu.checks {
        println!("{} {} {} {}", c.contract, c.subject, c.verdict, c.detail);
    }
    assert!(
        clean.passed(),
        "{}",
        gemm_audit::render::audit::audit_text(&clean.combined())
    );
    if count < 2 {
        return;
    }
    let gemm = opts.workloads[0].gemms[0].name.clone();
    let (label, b) = devices.pop().expect("a device");
    devices.push((label.clone(), fleet::plant_fault(b, &gemm)));
    let faulty = audit(&devices);
    let fail = faulty
        .gpu_to_gpu
        .checks
        .iter()
        .find(|c| c.verdict == Verdict::Fail)
        .expect("gpu-to-gpu FAIL");
    println!("{}", fail.detail);
    assert!(fail.detail.contains(&label.to_string()), "{}", fail.detail);
}

/// The fast (NH) chunk kernel gives the CPU reference's bits
/// (`gemm_audit::trace::fast`), for partial pairs, partial chunks, many
/// chunks, and an unaligned view.
#[test]
#[ignore = "needs a CUDA device"]
fn fast_chunk_hash_on_device_equals_the_cpu_reference() {
    let g = gpu();
    let mut x = 0x0bad_5eed_1234_5678u64;
    for len in [
        1usize,
        15,
        16,
        17,
        511,
        4095,
        4096,
        4097,
        3 * 4096 + 5,
        (1 << 22) + 3,
    ] {
        let bytes = xorshift_bytes(&mut x, len);
        let want = gemm_audit::trace::fast::fast_chunk_digests(&bytes);
        assert_eq!(
            g.fingerprint_in(gemm_audit::FingerprintMode::Fast, 7, &bytes)
                .unwrap(),
            OutputFingerprint::with_mode(gemm_audit::FingerprintMode::Fast, 7, &bytes),
            "fast fingerprint of {len} bytes"
        );
        for offset in [0usize, 4] {
            assert_eq!(
                g.fast_chunk_digests(&bytes, offset).unwrap(),
                want,
                "{len} bytes at offset {offset}"
            );
        }
    }
    assert!(g.fast_chunk_digests(&[], 0).unwrap().is_empty());
}

/// A cuBLAS handle's math mode is read back and checked against a route's
/// contract: set for pedantic f32, a pedantic route passes and a fast one
/// is refused; set for fast, the reverse.
#[test]
#[ignore = "needs a CUDA device"]
fn blas_math_mode_is_read_back_and_checked_against_the_contract() {
    use gemm_audit::backend::cuda;
    use gemm_audit::vocab::{DType, ModuleKind};
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let blas = cudarc::cublas::CudaBlas::new(stream).unwrap();
    let route = |contract: ContractKind| {
        let mut r = gemm_audit::testkit::sample_vendor_route(0);
        r.backend = PhysicalBackend::Cublas;
        r.module_kind = ModuleKind::Cublas;
        r.dtype = DType::F32;
        r.contract.kind = contract;
        r
    };
    let (pedantic, fast) = (
        route(ContractKind::VendorPedantic),
        route(ContractKind::VendorFast),
    );
    cuda::set_blas_math_mode(&blas, DType::F32, &ContractKind::VendorPedantic).unwrap();
    cuda::check_blas_math_mode(&blas, &pedantic).unwrap();
    let e = cuda::check_blas_math_mode(&blas, &fast).unwrap_err();
    println!("fast route on a pedantic handle: {e}");
    assert!(e.to_string().contains("contract.kind"), "{e}");
    cuda::set_blas_math_mode(&blas, DType::F32, &ContractKind::VendorFast).unwrap();
    cuda::check_blas_math_mode(&blas, &fast).unwrap();
    let e = cuda::check_blas_math_mode(&blas, &pedantic).unwrap_err();
    println!("pedantic route on a fast handle: {e}");
    // A handle that allows atomics is refused for any cuBLAS route, and
    // accepted again once they are off.
    let set_atomics = |mode| {
        // SAFETY: the handle is live for `blas`'s lifetime; setting the
        // mode touches no buffer.
        unsafe { cudarc::cublas::sys::cublasSetAtomicsMode(*blas.handle(), mode) }
            .result()
            .unwrap();
    };
    set_atomics(cudarc::cublas::sys::cublasAtomicsMode_t::CUBLAS_ATOMICS_ALLOWED);
    let e = cuda::check_blas_math_mode(&blas, &fast).unwrap_err();
    println!("route on a handle that allows atomics: {e}");
    assert!(e.to_string().contains("allows atomics"), "{e}");
    set_atomics(cudarc::cublas::sys::cublasAtomicsMode_t::CUBLAS_ATOMICS_NOT_ALLOWED);
    cuda::check_blas_math_mode(&blas, &fast).unwrap();
    // A route that is not cuBLAS's has nothing to check.
    cuda::check_blas_math_mode(&blas, &gemm_audit::testkit::sample_route(0)).unwrap();
}

/// A live context of the vendor modules alone, on device 0.
fn vendor_live(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    mode: PolicyMode,
) -> gemm_audit::identity::GemmRouteIdentity {
    use gemm_audit::backend::cuda;
    let (device, _) = cuda::device_identity(ctx).unwrap();
    let target = cuda::compilation_target(ctx).unwrap();
    gemm_audit::identity::GemmRouteIdentity::new(
        GemmPolicy {
            mode,
            ..CUDA_DEFAULT_POLICY
        },
        cuda::vendor_modules(&target),
        device,
        gemm_audit::identity::Revisions {
            tuning_table: 1,
            schedule: 1,
            tensor_map: 0,
        },
    )
}

fn small_floats(len: usize, seed: u64) -> Vec<f32> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.25
        })
        .collect()
}

/// `VendorGemms` plans cuBLASLt and cuBLAS calls on an engine's own
/// buffers: each run pushes the exact route (the kernels the probe saw),
/// the captured step binds to those routes node for node, and replays
/// reproduce the eager bits. A deterministic policy, a short buffer and a
/// plan during capture are refused.
#[test]
#[ignore = "needs a CUDA device"]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
fn vendor_gemms_record_exact_routes_on_engine_buffers() {
    use gemm_audit::backend::cuda::{self, CudaCaptureStream, LtSelection, VendorApi, VendorGemms};
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    // SAFETY: every buffer of this test lives on `stream`.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    let live = vendor_live(&ctx, PolicyMode::CublasPedantic);
    let gemms = VendorGemms::new(&ctx, &stream, &live).unwrap();
    let s = shape(8, 256, 512);
    let plans = [
        (
            VendorApi::CublasLt(LtSelection::Heuristic),
            GemmOp::Nn,
            DType::Bf16,
        ),
        (
            VendorApi::CublasLt(LtSelection::Heuristic),
            GemmOp::Tn,
            DType::F16,
        ),
        (VendorApi::Cublas, GemmOp::Nt, DType::F32),
    ]
    .map(|(api, op, dtype)| (gemms.plan(api, op, dtype, s).unwrap(), dtype));
    // The family-fixed selection is the vendor-invariant contract's: fast
    // math only, so a pedantic engine is refused, naming the policy.
    let e = gemms
        .plan(
            VendorApi::CublasLt(LtSelection::FamilyFixed),
            GemmOp::Tn,
            DType::F16,
            s,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("cublas-fast"), "{e}");
    let a = stream.clone_htod(&small_floats(8 * 256, 1)).unwrap();
    let b = stream.clone_htod(&small_floats(256 * 512, 2)).unwrap();
    let mut c: Vec<_> = (0..3)
        .map(|_| stream.alloc_zeros::<f32>(8 * 512).unwrap())
        .collect();
    let rec = recorder::GemmRouteRecorder::new();
    let step = |c: &mut [cudarc::driver::CudaSlice<f32>]| -> Result<(), Error> {
        for (i, ((plan, _), c)) in plans.iter().zip(c.iter_mut()).enumerate() {
            // Halves read half the bytes of the f32 buffers: enough.
            plan.run(&rec, format!("g{i}"), &a, &b, c)?;
        }
        Ok(())
    };
    let ((), eager) = recorder::record_eager(&rec, &live, || step(&mut c)).unwrap();
    stream.synchronize().unwrap();
    let eager_out: Vec<Vec<f32>> = c.iter().map(|c| stream.clone_dtoh(c).unwrap()).collect();
    for r in &eager.routes {
        let v = r.vendor.as_ref().unwrap();
        println!(
            "{} {} {} {} kernels {:?} split-k {}",
            r.gemm, r.kernel_symbol, r.dtype, r.op, v.physical_kernels, v.split_k
        );
        assert!(!v.physical_kernels.is_empty());
    }
    let manifest = eager.manifest.unwrap();
    let cs = CudaCaptureStream::new(stream.clone());
    let ((), captured) =
        recorder::capture(&cs, &rec, Some(&manifest), &live, || step(&mut c)).unwrap();
    let mut nodes = cuda::introspect(&captured.graph).unwrap();
    physical::bind(&live, &eager.routes, &mut nodes).unwrap();
    println!("bound: {}", physical::Coverage::of(&nodes));
    for c in c.iter_mut() {
        stream.memset_zeros(c).unwrap();
    }
    captured
        .launch_validated(&live, "replay", |g| g.launch())
        .unwrap()
        .unwrap();
    stream.synchronize().unwrap();
    for (c, want) in c.iter().zip(&eager_out) {
        let got = stream.clone_dtoh(c).unwrap();
        assert!(
            got.iter()
                .zip(want)
                .all(|(x, y)| x.to_bits() == y.to_bits())
        );
    }

    // Refusals: no vendor GEMM under the deterministic policy; a short C.
    let det =
        VendorGemms::new(&ctx, &stream, &vendor_live(&ctx, PolicyMode::Deterministic)).unwrap();
    let e = det
        .plan(VendorApi::Cublas, GemmOp::Nn, DType::F32, s)
        .unwrap_err();
    println!("deterministic policy: {e}");
    assert!(e.to_string().contains("policy.mode"), "{e}");
    let mut short = stream.alloc_zeros::<f32>(8).unwrap();
    let guard = rec.begin_eager(&live).unwrap();
    let e = plans[2]
        .0
        .run(&rec, "short", &a, &b, &mut short)
        .unwrap_err();
    println!("short C: {e}");
    assert_eq!(rec.len(), 0, "nothing pushed for a refused call");
    drop(guard);
    // Planning while the stream captures is refused.
    stream
        .begin_capture(
            cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
        .unwrap();
    let e = gemms
        .plan(VendorApi::Cublas, GemmOp::Nn, DType::F32, s)
        .unwrap_err();
    let _ = stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
    println!("plan during capture: {e}");
    assert!(e.to_string().contains("before the stream captures"), "{e}");
}

/// cudarc's safe `Gemm`, recorded by `CudarcGemm` under the entry point
/// cudarc calls: `cublasSgemm_v2` for f32, `cublasGemmEx` (its own
/// configuration) for bf16. The pedantic handle's routes pass the recorder;
/// the step binds and replays its eager bits; the handle flipped to TF32
/// gives a vendor-fast route the pedantic policy refuses at the push, and
/// an undeclared math mode, a T/T call, a short buffer and a first call
/// during capture are refused before anything runs.
#[test]
#[ignore = "needs a CUDA device"]
// Over 100 lines: one scenario, asserted step by step in the order a user meets it.
fn cudarc_gemm_routes_name_the_real_entry_point() {
    use cudarc::cublas::{CudaBlas, GemmConfig, sys::cublasOperation_t as Op};
    use gemm_audit::backend::cuda::{self, CudaCaptureStream, CudarcGemm};
    use half::bf16;
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    // SAFETY: every buffer of this test lives on `stream`.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    let live = vendor_live(&ctx, PolicyMode::CublasPedantic);
    let routes = CudarcGemm::new(CudaBlas::new(stream.clone()).unwrap(), &stream, &live).unwrap();
    let blas = routes.blas();
    cuda::set_blas_math_mode(blas, DType::F32, &ContractKind::VendorPedantic).unwrap();
    // Column-major C (m x n) = A (m x k) B (k x n).
    const M: i32 = 512;
    const N: i32 = 8;
    const K: i32 = 256;
    let (m, n, k) = (M, N, K);
    fn cfg<T>(alpha: T, beta: T) -> GemmConfig<T> {
        GemmConfig {
            transa: Op::CUBLAS_OP_N,
            transb: Op::CUBLAS_OP_N,
            m: M,
            n: N,
            k: K,
            alpha,
            lda: M,
            ldb: K,
            beta,
            ldc: M,
        }
    }
    let af = small_floats((m * k) as usize, 3);
    let bf = small_floats((k * n) as usize, 4);
    let a = stream.clone_htod(&af).unwrap();
    let b = stream.clone_htod(&bf).unwrap();
    let ah: Vec<bf16> = af.iter().map(|&x| bf16::from_f32(x)).collect();
    let bh: Vec<bf16> = bf.iter().map(|&x| bf16::from_f32(x)).collect();
    let (a16, b16) = (
        stream.clone_htod(&ah).unwrap(),
        stream.clone_htod(&bh).unwrap(),
    );
    let mut c = stream.alloc_zeros::<f32>((m * n) as usize).unwrap();
    let mut c16 = stream.alloc_zeros::<bf16>((m * n) as usize).unwrap();
    let rec = recorder::GemmRouteRecorder::new();
    let step = |c: &mut _, c16: &mut _| -> Result<(), Error> {
        routes.gemm(&rec, "f32", cfg(1.0f32, 0.0), &a, &b, c)?;
        routes.gemm(&rec, "bf16", cfg(bf16::ONE, bf16::ZERO), &a16, &b16, c16)
    };
    let ((), eager) = recorder::record_eager(&rec, &live, || step(&mut c, &mut c16)).unwrap();
    stream.synchronize().unwrap();
    let want = stream.clone_dtoh(&c).unwrap();
    for r in &eager.routes {
        println!(
            "{} {} {} {} {:?} kernels {:?}",
            r.gemm,
            r.kernel_symbol,
            r.contract.kind,
            r.op,
            r.shape,
            r.vendor.as_ref().unwrap().physical_kernels
        );
    }
    assert_eq!(eager.routes[0].kernel_symbol, cuda::CUBLAS_SGEMM_SYMBOL);
    assert_eq!(eager.routes[1].kernel_symbol, cuda::CUBLAS_SYMBOL);
    assert_eq!(eager.routes[0].contract.kind, ContractKind::VendorPedantic);
    // The route is the row-major problem: m and n swap.
    assert_eq!(eager.routes[0].shape, shape(n as u64, k as u64, m as u64));
    // Against a host f64 reference.
    let mut worst = 0f64;
    for j in 0..n as usize {
        for i in 0..m as usize {
            let r: f64 = (0..k as usize)
                .map(|p| af[p * m as usize + i] as f64 * bf[j * k as usize + p] as f64)
                .sum();
            worst = worst.max((want[j * m as usize + i] as f64 - r).abs());
        }
    }
    println!("f32 max abs error vs f64: {worst:e}");
    assert!(worst < 1e-4, "{worst}");

    let manifest = eager.manifest.unwrap();
    let cs = CudaCaptureStream::new(stream.clone());
    let ((), captured) =
        recorder::capture(&cs, &rec, Some(&manifest), &live, || step(&mut c, &mut c16)).unwrap();
    let mut nodes = cuda::introspect(&captured.graph).unwrap();
    physical::bind(&live, &eager.routes, &mut nodes).unwrap();
    println!("bound: {}", physical::Coverage::of(&nodes));
    stream.memset_zeros(&mut c).unwrap();
    captured
        .launch_validated(&live, "replay", |g| g.launch())
        .unwrap()
        .unwrap();
    stream.synchronize().unwrap();
    let got = stream.clone_dtoh(&c).unwrap();
    assert!(
        got.iter()
            .zip(&want)
            .all(|(x, y)| x.to_bits() == y.to_bits())
    );

    // The handle flipped to TF32: a vendor-fast route, refused at the push.
    cuda::set_blas_math_mode(blas, DType::F32, &ContractKind::VendorFast).unwrap();
    let e = recorder::record_eager(&rec, &live, || step(&mut c, &mut c16)).unwrap_err();
    println!("math mode flipped to TF32: {e}");
    assert!(e.to_string().contains("f32"), "{e}");
    // A mode no configuration declares is refused when the route is made.
    // (The halves' fast mode is CUBLAS_DEFAULT_MATH: no f32 configuration.)
    cuda::set_blas_math_mode(blas, DType::F16, &ContractKind::VendorFast).unwrap();
    let e = routes.route("f32", &cfg(1.0f32, 0.0)).unwrap_err();
    println!("default math for f32: {e}");
    assert!(e.to_string().contains("math mode"), "{e}");
    cuda::set_blas_math_mode(blas, DType::F32, &ContractKind::VendorPedantic).unwrap();
    // T/T has no op; a short buffer is refused before the call.
    let mut tt = cfg(1.0f32, 0.0);
    tt.transa = Op::CUBLAS_OP_T;
    tt.transb = Op::CUBLAS_OP_T;
    assert!(routes.route("tt", &tt).is_err());
    let guard = rec.begin_eager(&live).unwrap();
    let mut short = stream.alloc_zeros::<f32>(16).unwrap();
    let e = routes
        .gemm(&rec, "short", cfg(1.0f32, 0.0), &a, &b, &mut short)
        .unwrap_err();
    println!("short C: {e}");
    assert_eq!(rec.len(), 0);
    drop(guard);
    // A call first seen during a capture cannot be probed: refused.
    stream
        .begin_capture(
            cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
        .unwrap();
    let e = routes.route("new", &cfg(2.0f32, 0.0)).unwrap_err();
    let _ = stream.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
    println!("first call during capture: {e}");
    assert!(e.to_string().contains("before the stream captures"), "{e}");
}

/// The batch-invariant wgmma GEMM an engine calls on its own buffers and
/// stream: its route is the CUDA backend's route of the same problem
/// (symbol, module, launch), its output the backend's bit for bit, rows
/// of m = 8 equal the first rows of m = 200 (batch invariance), a captured
/// replay reproduces the eager bits, and what it cannot serve is refused
/// with the reason before anything is pushed or launched.
#[test]
#[ignore = "needs a CUDA device"]
fn invariant_gemms_run_on_engine_buffers_like_the_backend() {
    let g = gpu();
    let (stream, inv, live) = engine_invariant_gemms();
    let (k, n) = (512u64, 256u64);
    for (op, dtype) in [
        (GemmOp::Nn, DType::Bf16),
        (GemmOp::Tn, DType::F16),
        (GemmOp::Nt, DType::Bf16),
    ] {
        let mut rows_by_m = Vec::new();
        for m in [8u64, 200] {
            let s = shape(m, k, n);
            let plan = inv
                .plan(&live, CudaKernel::WgmmaLarge, op, dtype, s)
                .unwrap();
            let theirs = route(&g, op, dtype, s, CudaKernel::WgmmaLarge);
            let ours = plan.route("t");
            assert_eq!(ours.kernel_symbol, theirs.kernel_symbol);
            assert_eq!(ours.artifact_digest, theirs.artifact_digest);
            assert_eq!(ours.launch, theirs.launch);
            let out = engine_run_and_replay(&g, &stream, &live, &plan, &theirs, 1);
            rows_by_m.push(out);
        }
        let row_bytes = (n * 2) as usize;
        assert!(
            rows_by_m[0][..8 * row_bytes] == rows_by_m[1][..8 * row_bytes],
            "{op} {dtype}: rows 0..8 differ between m = 8 and m = 200"
        );
        println!(
            "invariant GEMM {op} {dtype} k={k} n={n}: engine = backend, rows identical across m"
        );
    }
    // More tiles than SMs: one block per SM, the last wave's tiles summed
    // in series through the plan's workspace, whose flags must be back at
    // zero after every launch for the replays to repeat the eager bits.
    let sms = live.device.multiprocessors;
    for fam in WGMMA_TILES {
        let s = shape(2056, 1000, 5000);
        let tiles = fam.wgmma_tiles(s.m, s.n).unwrap();
        assert!(
            tiles % u64::from(sms) != 0 && tiles > u64::from(sms),
            "{fam}: {tiles} tiles"
        );
        let plan = inv.plan(&live, fam, GemmOp::Nn, DType::Bf16, s).unwrap();
        assert_eq!(plan.route("t").launch.grid, [sms, 1, 1], "{fam}");
        let theirs = route(&g, GemmOp::Nn, DType::Bf16, s, fam);
        engine_run_and_replay(&g, &stream, &live, &plan, &theirs, 3);
        println!(
            "invariant GEMM {fam} {s:?}: {tiles} tiles on {sms} blocks, engine = backend, 3 replays repeat"
        );
    }
    // Refusals, with the reason; nothing pushed when a buffer is short.
    let e = inv
        .plan(
            &live,
            CudaKernel::WgmmaLarge,
            GemmOp::Tn,
            DType::Bf16,
            shape(7, k, n),
        )
        .unwrap_err();
    println!("tn m=7: {e}");
    let e = inv
        .plan(
            &live,
            CudaKernel::WgmmaLarge,
            GemmOp::Nn,
            DType::F32,
            shape(8, k, n),
        )
        .unwrap_err();
    assert!(e.to_string().contains("not f32"), "{e}");
    let e = inv
        .plan(
            &live,
            CudaKernel::Tiled,
            GemmOp::Nn,
            DType::Bf16,
            shape(8, k, n),
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("not a batch-invariant wgmma family"),
        "{e}"
    );
    let plan = inv
        .plan(
            &live,
            CudaKernel::WgmmaLarge,
            GemmOp::Nn,
            DType::Bf16,
            shape(8, k, n),
        )
        .unwrap();
    let a = stream.alloc_zeros::<u16>((8 * k) as usize).unwrap();
    let b = stream.alloc_zeros::<u16>((k * n) as usize).unwrap();
    let mut short = stream.alloc_zeros::<u16>(8).unwrap();
    let rec = recorder::GemmRouteRecorder::new();
    let (r, eager) = recorder::record_eager(&rec, &live, || {
        Ok::<_, Error>(plan.run(&rec, "short", &stream, &a, &b, &mut short))
    })
    .unwrap();
    let e = r.unwrap_err();
    assert!(e.to_string().contains("operand C holds 8 elements"), "{e}");
    assert!(eager.routes.is_empty(), "a refused run pushed its route");
    let mut wide = stream.alloc_zeros::<u32>((8 * n) as usize).unwrap();
    let a32 = stream.alloc_zeros::<u32>((8 * k) as usize).unwrap();
    let b32 = stream.alloc_zeros::<u32>((k * n) as usize).unwrap();
    let e = plan
        .run(&rec, "wide", &stream, &a32, &b32, &mut wide)
        .unwrap_err();
    assert!(e.to_string().contains("2-byte elements"), "{e}");
}

/// `plan` on the engine's buffers (the seeded operands of its route):
/// recorded eagerly (pushing exactly its route), its output equal to the
/// backend's run of `theirs`, then captured on the engine's stream and
/// replayed `replays` times only through the validated plan, each replay
/// equal to the eager bits. Returns the eager output.
fn engine_run_and_replay(
    g: &CudaBackend,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    live: &gemm_audit::identity::GemmRouteIdentity,
    plan: &gemm_audit::backend::cuda::InvariantGemm,
    theirs: &ResolvedGemmRoute,
    replays: usize,
) -> Vec<u8> {
    use gemm_audit::backend::cuda::CudaCaptureStream;
    use gemm_audit::kernels::Problem;
    let ours = plan.route("t");
    let GemmShape { m, k, n } = ours.shape;
    let what = format!("{} {} {} m={m}", ours.kernel_symbol, ours.op, ours.dtype);
    let p = Problem {
        op: ours.op,
        m: m as usize,
        k: k as usize,
        n: n as usize,
    };
    let (a, b) = g.seeded_operands(&p, ours.dtype, SEED).unwrap();
    let upload = |bytes: &[u8]| stream.clone_htod(&words(bytes)).unwrap();
    let (a, b) = (upload(&a), upload(&b));
    let mut c = stream.alloc_zeros::<u16>((m * n) as usize).unwrap();
    let rec = recorder::GemmRouteRecorder::new();
    let ((), eager) =
        recorder::record_eager(&rec, live, || plan.run(&rec, "t", stream, &a, &b, &mut c)).unwrap();
    assert_eq!(eager.routes, vec![ours.clone()], "{what}");
    let out = download_words(stream, &c);
    assert!(
        out == g.run(theirs, SEED).unwrap(),
        "{what}: the engine's output differs from the backend's"
    );
    let manifest = eager.manifest.unwrap();
    let cs = CudaCaptureStream::new(stream.clone());
    let ((), captured) = recorder::capture(&cs, &rec, Some(&manifest), live, || {
        plan.run(&rec, "t", stream, &a, &b, &mut c)
    })
    .unwrap();
    for replay in 0..replays {
        stream.memset_zeros(&mut c).unwrap();
        captured
            .launch_validated(live, "replay", |g| g.launch())
            .unwrap()
            .unwrap();
        assert!(
            download_words(stream, &c) == out,
            "{what}: replay {replay} differs"
        );
    }
    out
}

/// 2-byte elements from their little-endian storage bytes.
fn words(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// A device buffer of 2-byte elements, copied back as storage bytes.
fn download_words(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    c: &cudarc::driver::CudaSlice<u16>,
) -> Vec<u8> {
    stream
        .clone_dtoh(c)
        .unwrap()
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

/// An engine's side of the invariant GEMMs: its own context (event
/// tracking off) and stream, the module compiled into it, and a live
/// context holding only that module.
fn engine_invariant_gemms() -> (
    std::sync::Arc<cudarc::driver::CudaStream>,
    gemm_audit::backend::cuda::InvariantGemms,
    gemm_audit::identity::GemmRouteIdentity,
) {
    use gemm_audit::backend::cuda::{self, InvariantGemms, catalog};
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    // SAFETY: every buffer of these tests lives on the one stream returned.
    unsafe { ctx.disable_event_tracking() };
    let stream = ctx.new_stream().unwrap();
    let inv = InvariantGemms::new(&ctx).unwrap();
    let (device, _) = cuda::device_identity(&ctx).unwrap();
    let live = gemm_audit::identity::GemmRouteIdentity::new(
        CUDA_DEFAULT_POLICY,
        vec![inv.module().clone()],
        device,
        gemm_audit::identity::Revisions {
            tuning_table: catalog::TUNING_TABLE_REVISION,
            schedule: catalog::SCHEDULE_REVISION,
            tensor_map: catalog::TENSOR_MAP_REVISION,
        },
    );
    (stream, inv, live)
}

/// Memory another library allocated on the device (here cudarc on the
/// primary context, as PyTorch's allocator does) is fingerprinted where it
/// lives, bit-identical to the host's fingerprint of the same bytes, at
/// any offset inside its allocation; a range past the allocation, or an
/// address that is no device memory, is refused.
#[test]
#[ignore = "needs a CUDA device"]
fn foreign_memory_is_fingerprinted_on_the_device_like_on_the_host() {
    use cudarc::driver::DevicePtr;
    use gemm_audit::FingerprintMode;
    use gemm_audit::backend::cuda::ForeignFingerprinter;
    let fp = ForeignFingerprinter::open(0).unwrap();
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let bytes = xorshift_bytes(&mut x, 3 * 4096 + 123);
    let buf = stream.clone_htod(&bytes).unwrap();
    stream.synchronize().unwrap();
    let (base, _sync) = buf.device_ptr(&stream);
    for (offset, len) in [
        (0usize, bytes.len()),
        (5, 4096),
        (4096, 2 * 4096 + 123),
        (7, 0),
    ] {
        let got = fp
            .fingerprint(base + offset as u64, len, FingerprintMode::Strong, 0)
            .unwrap();
        assert_eq!(
            got,
            OutputFingerprint::of(0, &bytes[offset..offset + len]),
            "offset {offset} len {len}"
        );
    }
    let past = fp
        .fingerprint(base, 1 << 40, FingerprintMode::Strong, 0)
        .unwrap_err();
    assert!(
        past.to_string().contains("not inside one allocation"),
        "{past}"
    );
    let host = fp
        .fingerprint(bytes.as_ptr() as u64, 64, FingerprintMode::Strong, 0)
        .unwrap_err();
    println!("past the allocation: {past}\nhost address: {host}");
}

/// Many ranges fingerprinted in one launch give, range by range, what one
/// launch each gives and what the host computes: ranges of two allocations,
/// at an unaligned offset, empty, shorter than a chunk and ending inside
/// one; a range past its allocation refuses the whole call, naming it.
#[test]
#[ignore = "needs a CUDA device"]
fn foreign_ranges_fingerprinted_in_one_launch_are_each_the_hosts() {
    use cudarc::driver::DevicePtr;
    use gemm_audit::FingerprintMode;
    use gemm_audit::backend::cuda::ForeignFingerprinter;
    let fp = ForeignFingerprinter::open(0).unwrap();
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let first = xorshift_bytes(&mut x, 5 * 4096 + 77);
    let second = xorshift_bytes(&mut x, 64 * 4096);
    let (a, b) = (
        stream.clone_htod(&first).unwrap(),
        stream.clone_htod(&second).unwrap(),
    );
    stream.synchronize().unwrap();
    let ((base_a, _ga), (base_b, _gb)) = (a.device_ptr(&stream), b.device_ptr(&stream));
    let ranges = [
        (base_a, 0usize, first.len()),
        (base_b, 0, second.len()),
        (base_a, 5, 4096),
        (base_b, 100, 0),
        (base_a, 4096, 3000),
        (base_b, 8, 2 * 4096 + 1),
    ];
    let want: Vec<_> = ranges
        .iter()
        .map(|&(base, off, len)| {
            let bytes = if base == base_a { &first } else { &second };
            OutputFingerprint::of(7, &bytes[off..off + len])
        })
        .collect();
    let asked: Vec<(u64, usize)> = ranges
        .iter()
        .map(|&(base, off, len)| (base + off as u64, len))
        .collect();
    let many = fp.fingerprint_many(&asked, 7).unwrap();
    assert_eq!(many, want);
    for (&(address, len), w) in asked.iter().zip(&want) {
        assert_eq!(
            &fp.fingerprint(address, len, FingerprintMode::Strong, 7)
                .unwrap(),
            w
        );
    }
    assert!(fp.fingerprint_many(&[], 0).unwrap().is_empty());
    let past = fp
        .fingerprint_many(&[(base_a, 64), (base_b, 1 << 40)], 0)
        .unwrap_err();
    assert!(
        past.to_string().contains("range 1")
            && past.to_string().contains("not inside one allocation"),
        "{past}"
    );
}

/// Operands stored with leading dimensions wider than dense (views into
/// wider buffers, as one projection's slice of a fused output): the same
/// kernel and output bits as the dense problem, the strides in the route,
/// and C that is not dense, or a stride TMA cannot encode, refused.
#[test]
#[ignore = "needs a CUDA device"]
fn invariant_gemms_read_strided_operands_like_dense_ones() {
    use gemm_audit::kernels::Problem;
    use gemm_audit::route::GemmStrides;
    let g = gpu();
    let (stream, inv, live) = engine_invariant_gemms();
    // Spreads dense rows of `cols` elements `ld` apart (the gap holds junk).
    let spread = |dense: &[u16], rows: u64, cols: u64, ld: u64| -> Vec<u16> {
        let mut v = vec![0x7e00u16; ((rows - 1) * ld + cols) as usize];
        for r in 0..rows as usize {
            let (src, dst) = (r * cols as usize, r * ld as usize);
            v[dst..dst + cols as usize].copy_from_slice(&dense[src..src + cols as usize]);
        }
        v
    };
    // C's rows as dense storage bytes, and whether the gaps kept the sentinel.
    let gather = |wide: &[u16], m: u64, ldc: u64, n: u64| {
        let (ldc, n) = (ldc as usize, n as usize);
        let out: Vec<u8> = (0..m as usize)
            .flat_map(|r| wide[r * ldc..r * ldc + n].to_vec())
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let kept = (0..m as usize - 1).all(|r| {
            wide[r * ldc + n..(r + 1) * ldc]
                .iter()
                .all(|&w| w == 0x7e00)
        });
        (out, kept)
    };
    let (m, k, n) = (200u64, 512u64, 256u64);
    for (op, dtype) in [
        (GemmOp::Nn, DType::Bf16),
        (GemmOp::Tn, DType::F16),
        (GemmOp::Nt, DType::Bf16),
    ] {
        let s = shape(m, k, n);
        let dense = GemmStrides::dense(op, s);
        let strides = GemmStrides {
            lda: dense.lda + 64,
            ldb: dense.ldb + 128,
            ldc: dense.ldc + 40,
        };
        let plan = inv
            .plan_strided(&live, CudaKernel::WgmmaLarge, op, dtype, s, strides)
            .unwrap();
        let ours = plan.route("strided");
        assert_eq!(ours.strides, strides);
        let theirs = route(&g, op, dtype, s, CudaKernel::WgmmaLarge);
        assert_eq!(ours.kernel_symbol, theirs.kernel_symbol);
        assert_ne!(
            ours.tensor_map, theirs.tensor_map,
            "the maps' strides are part of the route"
        );
        let p = Problem {
            op,
            m: m as usize,
            k: k as usize,
            n: n as usize,
        };
        let (a, b) = g.seeded_operands(&p, dtype, SEED).unwrap();
        let (a_rows, a_cols) = if op == GemmOp::Tn { (k, m) } else { (m, k) };
        let (b_rows, b_cols) = if op == GemmOp::Nt { (n, k) } else { (k, n) };
        let a = stream
            .clone_htod(&spread(&words(&a), a_rows, a_cols, strides.lda))
            .unwrap();
        let b = stream
            .clone_htod(&spread(&words(&b), b_rows, b_cols, strides.ldb))
            .unwrap();
        // C rows ldc apart; the gaps hold a sentinel the GEMM must not touch.
        let sentinel = vec![0x7e00u16; ((m - 1) * strides.ldc + n) as usize];
        let mut c = stream.clone_htod(&sentinel).unwrap();
        let rec = recorder::GemmRouteRecorder::new();
        let ((), eager) = recorder::record_eager(&rec, &live, || {
            plan.run(&rec, "strided", &stream, &a, &b, &mut c)
        })
        .unwrap();
        assert_eq!(eager.routes, vec![ours]);
        let (out, gaps_kept) = gather(&stream.clone_dtoh(&c).unwrap(), m, strides.ldc, n);
        assert!(gaps_kept, "{op} {dtype}: the GEMM wrote between C's rows");
        assert!(
            out == g.run(&theirs, SEED).unwrap(),
            "{op} {dtype}: strided operands give other bits than dense ones"
        );
        // A buffer one element short of the strided span is refused.
        let short = stream.alloc_zeros::<u16>(a.len() - 1).unwrap();
        let e = plan
            .run(
                &recorder::GemmRouteRecorder::new(),
                "short",
                &stream,
                &short,
                &b,
                &mut c,
            )
            .unwrap_err();
        assert!(e.to_string().contains("operand A holds"), "{e}");
        println!(
            "strided {op} {dtype} lda={} ldb={} ldc={}: bits equal to dense, C's gaps untouched",
            strides.lda, strides.ldb, strides.ldc
        );
    }
    // The ladder's splitting rung stores C rows ldc apart too (its
    // partials stay dense in its own workspace).
    let s2 = shape(40, 1024, 256);
    let d2 = GemmStrides::dense(GemmOp::Nn, s2);
    let st2 = GemmStrides {
        ldc: d2.ldc + 40,
        ..d2
    };
    let fam = CudaKernel::LadderDecode(1);
    let plan = inv
        .plan_strided(&live, fam, GemmOp::Nn, DType::Bf16, s2, st2)
        .unwrap();
    let theirs = route(&g, GemmOp::Nn, DType::Bf16, s2, fam.for_shape(1024, 256));
    assert_eq!(theirs.contract.splits, 2);
    let p = Problem {
        op: GemmOp::Nn,
        m: 40,
        k: 1024,
        n: 256,
    };
    let (a, b) = g.seeded_operands(&p, DType::Bf16, SEED).unwrap();
    let (a, b) = (
        stream.clone_htod(&words(&a)).unwrap(),
        stream.clone_htod(&words(&b)).unwrap(),
    );
    let mut c = stream
        .clone_htod(&vec![0x7e00u16; (39 * st2.ldc + 256) as usize])
        .unwrap();
    let rec = recorder::GemmRouteRecorder::new();
    recorder::record_eager(&rec, &live, || {
        plan.run(&rec, "ldc", &stream, &a, &b, &mut c)
    })
    .unwrap();
    let (out, kept) = gather(&stream.clone_dtoh(&c).unwrap(), 40, st2.ldc, 256);
    assert!(kept, "ladder-decode wrote between C's rows");
    assert!(
        out == g.run(&theirs, SEED).unwrap(),
        "ladder-decode with ldc"
    );
    println!("ladder-decode nn bf16 ldc={}: bits equal to dense", st2.ldc);
    let s = shape(m, k, n);
    let dense = GemmStrides::dense(GemmOp::Nn, s);
    for (bad, why) in [
        (
            GemmStrides {
                ldc: n + 1,
                ..dense
            },
            "must be at least n",
        ),
        (
            GemmStrides {
                lda: k + 4,
                ..dense
            },
            "not a multiple of 8",
        ),
        (
            GemmStrides {
                ldb: n - 8,
                ..dense
            },
            "less than the stored row",
        ),
    ] {
        let e = inv
            .plan_strided(
                &live,
                CudaKernel::WgmmaLarge,
                GemmOp::Nn,
                DType::Bf16,
                s,
                bad,
            )
            .unwrap_err();
        assert!(e.to_string().contains(why), "{why}: {e}");
    }
}

/// The invariant ladder: its grid-splitting rungs (decode 64x64, mid
/// 128x128: chunks on the grid, folded by the tile's last block) and its
/// register-folding rungs (wide 128x128, band 64x128, narrow 64x32) give the same bits
/// on the same problem, the same rows at every m, and with one chunk the
/// bits of wgmma-large; near the CPU's f32 reference.
#[test]
#[ignore = "needs a CUDA device"]
fn ladder_rungs_are_bit_identical_and_batch_invariant() {
    use gemm_audit::kernels::ladder_chunks;
    let g = gpu();
    if let Err(why) = g.wgmma_available() {
        println!("no wgmma here ({why})");
        return;
    }
    let rungs_of = [
        CudaKernel::LadderDecode(1),
        CudaKernel::LadderMid(1),
        CudaKernel::LadderWide(1),
        CudaKernel::LadderBand(1),
        CudaKernel::LadderNarrow(1),
    ];
    for dtype in [DType::Bf16, DType::F16] {
        for op in OPS {
            // 4, 2, 2, 1 and 1 chunks; then one chunk of 11 k blocks, one
            // of 10, and two of 9 and 8: on the narrow rung (four blocks a
            // stage) a chunk's last stage holds three, two, one and four.
            for (k, n) in [
                (4096u64, 520u64),
                (1024, 256),
                (4096, 3072),
                (4096, 4096),
                (512, 8192),
                (704, 1024),
                (640, 2048),
                (1088, 512),
            ] {
                let chunks = ladder_chunks(k, n);
                // One chunk has nothing to fold: wgmma-small stands for the
                // 128x128 folding rung (refused there, checked below).
                let rungs = |m: u64| {
                    let s = shape(m, k, n);
                    rungs_of.map(|f| {
                        let f = match f {
                            CudaKernel::LadderWide(_) if chunks == 1 => CudaKernel::WgmmaSmall,
                            f => f.for_shape(k, n),
                        };
                        let r = route(&g, op, dtype, s, f);
                        assert_eq!(r.contract.splits, chunks);
                        g.run(&r, SEED).unwrap()
                    })
                };
                let big = rungs(1000);
                for r in 1..rungs_of.len() {
                    assert_eq!(
                        differing(dtype, &big[0], &big[r]),
                        0,
                        "decode vs {} {op} {dtype} k={k} n={n}",
                        rungs_of[r]
                    );
                }
                let row = n as usize * element_size(dtype);
                // TN's A at m = 8 and 24 is one box of 8 or 32 m values on
                // the 64-row rungs (64 at 64 and 200).
                for m in [8u64, 24, 64, 200] {
                    let [d, mid, w, band, narrow] = rungs(m);
                    assert!(
                        d == w && d == mid && d == band && d == narrow,
                        "decode vs mid vs wide vs band vs narrow {op} {dtype} k={k} n={n} m={m}"
                    );
                    assert!(
                        d == big[0][..m as usize * row],
                        "{op} {dtype} k={k} n={n}: rows of m={m} differ from m=1000"
                    );
                }
                if chunks == 1 {
                    let s = shape(200, k, n);
                    let large = g
                        .run(&route(&g, op, dtype, s, CudaKernel::WgmmaLarge), SEED)
                        .unwrap();
                    assert!(
                        large == rungs(200)[0],
                        "one chunk: ladder vs wgmma-large {op} {dtype} k={k} n={n}"
                    );
                }
                if k == 1024 {
                    let s = shape(64, k, n);
                    let want = cpu_out(op, dtype, s, CpuKernel::SCALAR_FMA, SEED);
                    let rel = max_rel(dtype, &rungs(64)[0], &want);
                    assert!(rel < 0.02, "{op} {dtype}: {rel} from the f32 reference");
                }
                println!(
                    "ladder {op} {dtype} k={k} n={n} ({chunks} chunks): rungs equal, rows equal across m"
                );
            }
        }
    }
    // The 128x128 folding rung with one chunk is refused, with the reason.
    let e = g
        .nvrtc_route(
            "t",
            GemmOp::Nn,
            DType::Bf16,
            shape(64, 512, 8192),
            CudaKernel::LadderWide(1),
        )
        .unwrap_err();
    assert!(e.to_string().contains("wgmma-small"), "{e}");
    // A rung with another shape's chunk count is refused.
    let e = g
        .nvrtc_route(
            "t",
            GemmOp::Nn,
            DType::Bf16,
            shape(64, 4096, 3072),
            CudaKernel::LadderWide(3),
        )
        .unwrap_err();
    assert!(e.to_string().contains("in 2 chunks, not 3"), "{e}");
}

/// The engine's call of the ladder (`plan_batch_invariant`): the rung for
/// m, the backend's bits, and replays of the captured step that repeat
/// them, rows equal across the rungs. k = n = 4096 (one chunk) runs the
/// narrow, band, wgmma-medium and wgmma-large rungs; the KV projection
/// (n = 1024, four chunks) the narrow, band and folding wide rungs, and,
/// planned by name, the decode rung, whose tile counters must reset
/// themselves between replays.
#[test]
#[ignore = "needs a CUDA device"]
fn batch_invariant_plans_run_in_an_engine_graph() {
    let g = gpu();
    let (stream, inv, live) = engine_invariant_gemms();
    let (op, dtype) = (GemmOp::Nn, DType::Bf16);
    let k = 4096u64;
    for (n, rungs) in [
        (
            4096u64,
            &[
                (1u64, "ladder_64x32_fold"),
                (64, "ladder_64x32_fold"),
                (256, "ladder_64x128_fold"),
                // 110 blocks of 128x192 in one wave against 80 of
                // 128x256 (area 4 to 3) and 160 of 128x128 (two waves).
                (520, "wgmma_192"),
                (1024, "wgmma_256"),
            ][..],
        ),
        (
            1024,
            &[
                (16, "ladder_64x32_fold"),
                (1024, "ladder_64x128_fold"),
                (4096, "ladder_128x128_fold"),
            ][..],
        ),
    ] {
        let mut outs = Vec::new();
        for &(m, rung) in rungs {
            let s = shape(m, k, n);
            let plan = inv.plan_batch_invariant(&live, op, dtype, s).unwrap();
            let ours = plan.route("t");
            assert!(ours.kernel_symbol.contains(rung), "{}", ours.kernel_symbol);
            let theirs = g
                .resolve(&spec("t", op, dtype, s, RouteChoice::BatchInvariant))
                .unwrap();
            assert_eq!(ours.kernel_symbol, theirs.kernel_symbol);
            assert_eq!(ours.launch, theirs.launch);
            assert_eq!(ours.contract, theirs.contract);
            outs.push(engine_run_and_replay(&g, &stream, &live, &plan, &theirs, 3));
        }
        if n == 1024 {
            // The splitting decode rung, by name: its counters reset.
            let s = shape(16, k, n);
            let fam = CudaKernel::LadderDecode(1);
            let plan = inv.plan(&live, fam, op, dtype, s).unwrap();
            let theirs = route(&g, op, dtype, s, fam.for_shape(k, n));
            assert_eq!(plan.route("t").kernel_symbol, theirs.kernel_symbol);
            assert_eq!(theirs.contract.splits, 4);
            let out = engine_run_and_replay(&g, &stream, &live, &plan, &theirs, 3);
            assert!(out == outs[0], "decode vs narrow at m=16, n={n}");
        }
        let row = (n * 2) as usize;
        let last = outs.last().expect("rungs").clone();
        for (i, o) in outs.iter().enumerate() {
            assert!(
                o[..row] == outs[0][..row],
                "n={n}: row 0 differs in plan {i}"
            );
            assert!(
                last[..o.len()] == o[..],
                "n={n}: rows of plan {i} differ from the largest m"
            );
        }
    }
    println!(
        "batch-invariant plans: each rung for its m, engine = backend, replays repeat, rows equal across m"
    );
}

/// TN at m < 8: dense A rows of m elements are refused (TMA reads rows a
/// multiple of 16 bytes apart), A stored with lda a multiple of 8 is
/// served by the batch-invariant rung for m, and every row equals the
/// same row of m = 64 (another rung, A's 64-wide box) bit for bit.
#[test]
#[ignore = "needs a CUDA device"]
fn tn_below_eight_rows_runs_with_a_padded_lda_and_stays_batch_invariant() {
    use gemm_audit::kernels::Problem;
    use gemm_audit::route::GemmStrides;
    let g = gpu();
    let (stream, inv, live) = engine_invariant_gemms();
    let op = GemmOp::Tn;
    for dtype in [DType::Bf16, DType::F16] {
        for (k, n) in [(4096u64, 4096u64), (1024, 256)] {
            // A of m = 64 stored k x 64: its first m columns are A of m rows, lda 64.
            let big = shape(64, k, n);
            let theirs = g
                .resolve(&spec("t", op, dtype, big, RouteChoice::BatchInvariant))
                .unwrap();
            let want = g.run(&theirs, SEED).unwrap();
            let p = Problem {
                op,
                m: 64,
                k: k as usize,
                n: n as usize,
            };
            let (a, b) = g.seeded_operands(&p, dtype, SEED).unwrap();
            let (a, b) = (
                stream.clone_htod(&words(&a)).unwrap(),
                stream.clone_htod(&words(&b)).unwrap(),
            );
            for m in [1u64, 2, 3, 4, 7] {
                let s = shape(m, k, n);
                let e = inv.plan_batch_invariant(&live, op, dtype, s).unwrap_err();
                assert!(e.to_string().contains("m to be a multiple of 8"), "{e}");
                let strides = GemmStrides {
                    lda: 64,
                    ..GemmStrides::dense(op, s)
                };
                let plan = inv
                    .plan_batch_invariant_strided(&live, op, dtype, s, strides)
                    .unwrap();
                let ours = plan.route("t");
                assert!(
                    ours.kernel_symbol.contains("ladder_64x"),
                    "{}",
                    ours.kernel_symbol
                );
                let mut c = stream.alloc_zeros::<u16>((m * n) as usize).unwrap();
                let rec = recorder::GemmRouteRecorder::new();
                let ((), eager) = recorder::record_eager(&rec, &live, || {
                    plan.run(&rec, "t", &stream, &a, &b, &mut c)
                })
                .unwrap();
                assert_eq!(eager.routes, vec![ours.clone()]);
                let out = download_words(&stream, &c);
                let rows = (m * n) as usize * element_size(dtype);
                assert!(
                    out == want[..rows],
                    "{op} {dtype} k={k} n={n}: rows of m={m} (lda 64, {}) differ from m=64 ({})",
                    ours.kernel_symbol,
                    theirs.kernel_symbol
                );
            }
            println!(
                "tn {dtype} k={k} n={n}: m=1..7 with lda=64 equal the rows of m=64 ({})",
                theirs.kernel_symbol
            );
        }
    }
}
