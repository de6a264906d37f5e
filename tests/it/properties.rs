//! Property tests of the core invariants: every route field reaches the
//! ordered digest, every tampering is refused before launch, unchanged
//! routes are accepted, replay validation refuses what the live context
//! cannot serve, the launch-set builder refuses malformed launches, the
//! trace codec round-trips, and the CPU backend replays what it recorded.
//!
//! Failures are persisted in `proptest-regressions/properties.txt` (see the
//! README there); proptest re-runs those seeds first on every run.

use gemm_audit::backend::cpu::CpuBackend;
use gemm_audit::backend::{Backend, GemmBackend};
use gemm_audit::digest::{field_changes, field_list};
use gemm_audit::identity::{SymbolEntry, VolatileMetadata};
use gemm_audit::kernels::{GemmSpec, KernelFamily, RouteChoice};
use gemm_audit::mutation::{self, Mutation, mutate_field, route_field_tags};
use gemm_audit::recorder::{ReplayOutcome, record};
use gemm_audit::route::{
    GemmShape, GemmStrides, LaunchConfig, NumericContract, ResolvedGemmRoute, RouteKind,
    TensorMapIdentity, TileShape, VendorRoute,
};
use gemm_audit::vocab::{
    ContractKind, DType, GemmOp, ModuleKind, OperandConversion, OutputOwnership, PhysicalBackend,
};
use gemm_audit::workload::Workload;
use gemm_audit::{
    CapturedGemmGraphPlan, Digest, F32Policy, GemmPolicy, GemmRouteIdentity, HalfPolicy,
    LaunchSetError, OutputFingerprint, PolicyMode, PreparedGemmCaptureManifest, RecordedGemmTrace,
    Refusal, RefusalStage, ResolvedGemmLaunchSetBuilder, build_resolved_gemm_launch_set, testkit,
};
use gemm_audit::{CompilerIdentity, DeviceIdentity};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::FileFailurePersistence;
use std::cell::Cell;

// ------------------------------------------------------------ configuration

/// Where failing seeds are persisted. `SourceParallel` would look for a
/// `lib.rs`/`main.rs` next to `tests/` and, finding none, fall back to
/// `tests/properties.proptest-regressions`; name the file directly instead.
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/proptest-regressions/properties.txt"
);

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        // Routes are large values: bound shrinking so a failure reports quickly.
        max_shrink_iters: 4096,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------- strategies

/// Arbitrary short strings, any Unicode scalar (NUL and quotes included).
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..10).prop_map(String::from_iter)
}

/// A digest that is never the all-zero placeholder: either dense random
/// bytes, or a single non-zero byte (so low-weight values like `01 00 ..`
/// are generated often, not once in 2^256).
fn nonzero_digest() -> impl Strategy<Value = Digest> {
    prop_oneof![
        8 => any::<[u8; 32]>(),
        1 => Just({
            let mut a = [0u8; 32];
            a[0] = 1;
            a
        }),
        3 => (0usize..32, prop_oneof![Just(1u8), 1u8..=255]).prop_map(|(i, b)| {
            let mut a = [0u8; 32];
            a[i] = b;
            a
        }),
    ]
    .prop_map(|mut a| {
        if a == [0; 32] {
            a[31] = 0x80;
        }
        Digest(a)
    })
}

/// Any `u32`, with the edges (0, 1, MAX) and small values generated often.
fn edge_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        2 => any::<u32>(),
        1 => prop::sample::select(vec![0, 1, u32::MAX - 1, u32::MAX]),
        1 => 0u32..=16,
    ]
}

/// Any `u64`, edges generated often.
fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => any::<u64>(),
        1 => prop::sample::select(vec![0, 1, u64::MAX - 1, u64::MAX]),
        1 => 0u64..=16,
    ]
}

/// Any `i64`, edges generated often.
fn edge_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        2 => any::<i64>(),
        1 => prop::sample::select(vec![i64::MIN, -1, 0, 1, i64::MAX]),
        1 => -16i64..=16,
    ]
}

fn any_digest() -> impl Strategy<Value = Digest> {
    prop_oneof![Just(Digest::ZERO), any::<[u8; 32]>().prop_map(Digest)]
}

/// A small or arbitrary non-zero grid dimension.
fn grid_dim() -> impl Strategy<Value = u32> {
    prop_oneof![3 => 1u32..=1024, 1 => 1u32..=u32::MAX]
}

/// Threads and a launch whose block has exactly that many threads.
fn launch() -> impl Strategy<Value = (u32, LaunchConfig)> {
    (
        (1u32..=64, 1u32..=16, 1u32..=4),
        [grid_dim(), grid_dim(), grid_dim()],
        edge_u32(),
        nonzero_digest(),
    )
        .prop_map(|((x, y, z), grid, smem, args)| {
            (
                x * y * z,
                LaunchConfig {
                    grid,
                    block: [x, y, z],
                    dynamic_shared_bytes: smem,
                    arguments_digest: args,
                },
            )
        })
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 1u64..=1 << 20, 1 => edge_u64()]
}

/// The fields a route may vary without changing what serves it.
#[derive(Debug, Clone)]
struct Common {
    gemm: String,
    compilation_target: String,
    capabilities: Vec<String>,
    shape: GemmShape,
    strides: GemmStrides,
    tile: TileShape,
    bk: u32,
    stages: u32,
    threads: u32,
    launch: LaunchConfig,
    tensor_map: Option<TensorMapIdentity>,
    resources: Digest,
    tuning: u32,
    schedule: u32,
}

fn common() -> impl Strategy<Value = Common> {
    (
        (text(), text(), prop::collection::vec(text(), 0..4)),
        (
            (size(), size(), size()),
            (size(), size(), size()),
            [edge_u32(), edge_u32(), edge_u32()],
            edge_u32(),
            edge_u32(),
        ),
        launch(),
        prop::option::of((edge_u32(), nonzero_digest())),
        nonzero_digest(),
        edge_u32(),
        edge_u32(),
    )
        .prop_map(
            |(
                (gemm, compilation_target, capabilities),
                ((m, k, n), (lda, ldb, ldc), [tm, tn, tk], bk, stages),
                (threads, launch),
                tensor_map,
                resources,
                tuning,
                schedule,
            )| Common {
                gemm,
                compilation_target,
                capabilities,
                shape: GemmShape { m, k, n },
                strides: GemmStrides { lda, ldb, ldc },
                tile: TileShape {
                    m: tm,
                    n: tn,
                    k: tk,
                },
                bk,
                stages,
                threads,
                launch,
                tensor_map: tensor_map
                    .map(|(revision, digest)| TensorMapIdentity { revision, digest }),
                resources,
                tuning,
                schedule,
            },
        )
}

fn apply_common(r: &mut ResolvedGemmRoute, c: Common) {
    r.gemm = c.gemm;
    r.compilation_target = c.compilation_target;
    r.device_capabilities = c.capabilities;
    r.shape = c.shape;
    r.strides = c.strides;
    r.tile = c.tile;
    r.bk = c.bk;
    r.stages = c.stages;
    r.threads = c.threads;
    r.launch = c.launch;
    r.tensor_map = c.tensor_map;
    r.resources_digest = c.resources;
    r.tuning_table_revision = c.tuning;
    r.schedule_revision = c.schedule;
}

/// A route servable under `testkit::context()`: a sample route (its serving
/// identity untouched) with every other field varied.
fn servable_route() -> impl Strategy<Value = ResolvedGemmRoute> {
    (0u64..100_000, common()).prop_map(|(i, c)| {
        let sample = testkit::sample_route(i);
        let mut r = sample.clone();
        apply_common(&mut r, c);
        // What the symbol declares stays declared: capabilities, tile, k
        // block, stages, resources, tensor-map presence and the split
        // rule's grid z; every extent is at least 1.
        r.device_capabilities = sample.device_capabilities.clone();
        (r.tile, r.bk, r.stages) = (sample.tile, sample.bk, sample.stages);
        r.resources_digest = sample.resources_digest;
        if sample.tensor_map.is_none() {
            r.tensor_map = None;
        } else if r.tensor_map.is_none() {
            r.tensor_map = sample.tensor_map;
        }
        r.launch.grid[2] = sample.launch.grid[2];
        r.shape.m = r.shape.m.max(1);
        r.shape.k = r.shape.k.max(1);
        r.shape.n = r.shape.n.max(1);
        // What the replay guard checks against the live context stays at
        // the context's values: the module's target and the revisions.
        let live = testkit::context();
        r.compilation_target = live.modules[0].target.clone();
        r.tuning_table_revision = live.revisions.tuning_table;
        r.schedule_revision = live.revisions.schedule;
        if let Some(t) = &mut r.tensor_map {
            t.revision = live.revisions.tensor_map;
        }
        r
    })
}

fn vendor() -> impl Strategy<Value = VendorRoute> {
    (
        text(),
        [
            edge_i64(),
            edge_i64(),
            edge_i64(),
            edge_i64(),
            edge_i64(),
            edge_i64(),
        ],
        prop::option::of(edge_i64()),
        prop::option::of(edge_i64()),
        edge_u64(),
        prop::collection::vec(text(), 0..3),
    )
        .prop_map(
            |(library_version, [a, t, s, r, st, sw], inner, cluster, ws, kernels)| VendorRoute {
                library_version,
                algorithm_id: a,
                tile_id: t,
                split_k: s,
                reduction_scheme: r,
                stages_id: st,
                swizzle: sw,
                inner_shape_id: inner,
                cluster_shape_id: cluster,
                workspace_bytes: ws,
                physical_kernels: kernels,
            },
        )
}

fn compiler() -> impl Strategy<Value = CompilerIdentity> {
    (text(), text(), any_digest(), any_digest()).prop_map(|(name, version, o, s)| {
        CompilerIdentity {
            name,
            version,
            options_digest: o,
            source_digest: s,
        }
    })
}

fn device() -> impl Strategy<Value = DeviceIdentity> {
    (
        text(),
        prop::option::of([edge_u32(), edge_u32()]),
        edge_u32(),
        text(),
    )
        .prop_map(|(class, cc, mp, driver)| DeviceIdentity {
            class,
            compute_capability: cc,
            multiprocessors: mp,
            driver,
        })
}

/// Overrides of what serves a route, each group present a quarter of the time.
#[derive(Debug, Clone)]
struct Serving {
    kinds: Option<(GemmOp, DType, PhysicalBackend, ModuleKind)>,
    contract: Option<(ContractKind, u32, bool, OperandConversion, OutputOwnership)>,
    names: Option<(String, String, String)>,
    artifact: Option<Digest>,
    compiler: Option<CompilerIdentity>,
    device: Option<DeviceIdentity>,
    vendor: Option<Option<VendorRoute>>,
}

fn serving() -> impl Strategy<Value = Serving> {
    use prop::option::weighted;
    use prop::sample::select;
    (
        weighted(
            0.25,
            (
                select(GemmOp::ALL),
                select(DType::ALL),
                select(PhysicalBackend::ALL),
                select(ModuleKind::ALL),
            ),
        ),
        weighted(
            0.25,
            (
                select(ContractKind::ALL),
                edge_u32(),
                any::<bool>(),
                select(OperandConversion::ALL),
                select(OutputOwnership::ALL),
            ),
        ),
        weighted(0.25, (text(), text(), text())),
        weighted(0.25, nonzero_digest()),
        weighted(0.25, compiler()),
        weighted(0.25, device()),
        weighted(0.25, prop::option::of(vendor())),
    )
        .prop_map(
            |(kinds, contract, names, artifact, compiler, device, vendor)| Serving {
                kinds,
                contract,
                names,
                artifact,
                compiler,
                device,
                vendor,
            },
        )
}

/// Any valid route: a sample or vendor sample route, every field varied,
/// launch consistent with its threads and digests non-zero where required.
fn any_route() -> impl Strategy<Value = ResolvedGemmRoute> {
    (0u64..100_000, any::<bool>(), common(), serving()).prop_map(|(i, is_vendor, c, s)| {
        let mut r = if is_vendor {
            testkit::sample_vendor_route(i)
        } else {
            testkit::sample_route(i)
        };
        apply_common(&mut r, c);
        if let Some((op, dtype, backend, module_kind)) = s.kinds {
            r.op = op;
            r.dtype = dtype;
            r.backend = backend;
            r.module_kind = module_kind;
        }
        if let Some((kind, splits, tc, conv, own)) = s.contract {
            r.contract = NumericContract { kind, splits };
            r.uses_tensor_cores = tc;
            r.operand_conversion = conv;
            r.output_ownership = own;
        }
        if let Some((family, shape, symbol)) = s.names {
            r.instruction_family = family;
            r.instruction_shape = shape;
            r.kernel_symbol = symbol;
        }
        if let Some(d) = s.artifact {
            r.artifact_digest = d;
        }
        if let Some(c) = s.compiler {
            r.compiler = c;
        }
        if let Some(d) = s.device {
            r.device = d;
        }
        if let Some(v) = s.vendor {
            r.vendor = v;
        }
        r
    })
}

fn route_list<S: Strategy<Value = ResolvedGemmRoute>>(
    s: S,
) -> impl Strategy<Value = Vec<ResolvedGemmRoute>> {
    prop::collection::vec(s, 1..=12)
}

/// A route list and the index of one of its routes. Built as
/// `before ++ [target] ++ after` so that shrinking keeps the target route
/// in place while the others shrink away.
fn routes_with_target() -> impl Strategy<Value = (Vec<ResolvedGemmRoute>, usize)> {
    (
        prop::collection::vec(any_route(), 0..=6),
        any_route(),
        prop::collection::vec(any_route(), 0..=5),
    )
        .prop_map(|(mut before, target, after)| {
            let i = before.len();
            before.push(target);
            before.extend(after);
            (before, i)
        })
}

// ------------------------------------------------------------------ helpers

fn fingerprints(n: usize) -> Vec<OutputFingerprint> {
    (0..n as u64)
        .map(|i| OutputFingerprint {
            input_seed: i,
            bytes: 4 * (i + 1),
            sha256: Digest::sha256(&i.to_le_bytes()),
        })
        .collect()
}

fn trace_under(context: GemmRouteIdentity, routes: Vec<ResolvedGemmRoute>) -> RecordedGemmTrace {
    let n = routes.len();
    RecordedGemmTrace::new(
        "properties",
        Digest::sha256(b"properties"),
        context,
        routes,
        fingerprints(n),
        VolatileMetadata::new(),
    )
    .expect("generated routes form a valid launch set")
}

fn golden_of(routes: &[ResolvedGemmRoute]) -> RecordedGemmTrace {
    trace_under(testkit::context(), routes.to_vec())
}

/// `testkit::context()` under another policy, with the permitted backend
/// and contract sets derived from it (as a real backend would).
fn context_with_policy(policy: GemmPolicy) -> GemmRouteIdentity {
    let mut c = testkit::context();
    c.policy = policy;
    c.permitted_backends = policy.backends().to_vec();
    c.permitted_contracts = policy.contracts().to_vec();
    c
}

fn names(changes: &[gemm_audit::digest::FieldChange]) -> Vec<&str> {
    changes.iter().map(|c| c.field.as_str()).collect()
}

/// Calls `with_validated_launch` with a closure that records it ran.
fn guarded_launch(
    plan: &CapturedGemmGraphPlan,
    live: &GemmRouteIdentity,
    label: &str,
) -> (Result<u32, Refusal>, u32) {
    let calls = Cell::new(0u32);
    let r = plan.with_validated_launch(live, label, |_| {
        calls.set(calls.get() + 1);
        7
    });
    (r, calls.get())
}

/// One change of the live context, and the field a refusal must name.
fn change_context(which: usize, c: &mut GemmRouteIdentity) -> &'static str {
    match which % CONTEXT_CHANGES {
        0 => {
            c.policy.tensor_cores = !c.policy.tensor_cores;
            "policy.tensor_cores"
        }
        1 => {
            c.policy.mode = PolicyMode::CublasPedantic;
            "policy.mode"
        }
        2 => {
            c.policy.f32 = F32Policy::Exact;
            "policy.f32"
        }
        3 => {
            c.policy.half = HalfPolicy::Tiled;
            "policy.half"
        }
        4 => {
            c.modules[0].compiler.name.push('+');
            "module.compiler.name"
        }
        5 => {
            c.modules[0].compiler.version.push_str(".1");
            "module.compiler.version"
        }
        6 => {
            c.modules[0].compiler.options_digest.0[7] ^= 0x40;
            "module.compiler.options_digest"
        }
        7 => {
            c.modules[0].compiler.source_digest.0[31] ^= 0x02;
            "module.compiler.source_digest"
        }
        8 => {
            c.device.driver.push_str(".1");
            "device.driver"
        }
        9 => {
            c.device.multiprocessors += 1;
            "device.multiprocessors"
        }
        10 => {
            c.device.compute_capability = Some([10, 0]);
            "device.compute_capability"
        }
        11 => {
            c.revisions.tuning_table += 1;
            "revisions.tuning_table"
        }
        12 => {
            c.revisions.schedule += 1;
            "revisions.schedule"
        }
        13 => {
            c.revisions.tensor_map += 1;
            "revisions.tensor_map"
        }
        14 => {
            c.modules[0].digest.0[0] ^= 0x80;
            "module.digest"
        }
        15 => {
            c.modules[0].target.push('a');
            "module.target"
        }
        16 => {
            // A symbol that now serves one more dtype or contract.
            let s = &mut c.modules[0].symbols[0];
            *s = s
                .clone()
                .serving(&[GemmOp::Nn], &[DType::F32], &ContractKind::Tf32, false);
            "module.services"
        }
        17 => {
            c.modules[0].symbols[1].resources_digest = Some(Digest([9; 32]));
            "module.resources"
        }
        18 => {
            c.modules[0].backend = PhysicalBackend::engine("cutlass", false).unwrap();
            "module.backend"
        }
        _ => {
            c.modules[0]
                .symbols
                .push(SymbolEntry::new("synthetic_new_kernel"));
            "module.symbols"
        }
    }
}

/// How many distinct changes [`change_context`] makes.
const CONTEXT_CHANGES: usize = 20;

const VENDOR_PREFIX: &str = "vendor.";
const TENSOR_MAP_TAGS: [&str; 2] = ["tensor_map.revision", "tensor_map.digest"];

// ---------------------------------------------------------------- properties

proptest! {
    #![proptest_config(config(1000))]

    /// 1a. Every single-field change of any route changes the ordered
    /// digest, or is refused by the builder (launch geometry, or an
    /// arguments digest flipped to the placeholder).
    #[test]
    fn every_field_change_changes_the_ordered_digest(
        (routes, i) in routes_with_target(),
    ) {
        let original = build_resolved_gemm_launch_set(&routes).expect("valid routes build");
        prop_assert_eq!(original.launch_count, routes.len() as u64);
        let tags = route_field_tags();
        // The framing emits the same tags whatever is present or absent.
        let route_tags: Vec<&str> = field_list(&routes[i]).into_iter().map(|(t, _)| t).collect();
        prop_assert_eq!(&route_tags, &tags);
        for &tag in &tags {
            let mut mutated = routes.clone();
            prop_assert!(mutate_field(&mut mutated[i], tag), "mutate_field does not know {}", tag);
            prop_assert_ne!(&mutated[i], &routes[i], "{} left the route unchanged", tag);
            // The Mutation wrapper applies the same change, wrapping its index.
            let mut via_mutation = routes.clone();
            prop_assert!(Mutation::Field(i + routes.len(), tag).apply(&mut via_mutation));
            prop_assert_eq!(&via_mutation, &mutated);

            match build_resolved_gemm_launch_set(&mutated) {
                Ok(set) => {
                    prop_assert_eq!(set.launch_count, original.launch_count);
                    prop_assert_ne!(
                        set.ordered_digest, original.ordered_digest,
                        "changing {} of route {} left the ordered digest unchanged", tag, i
                    );
                }
                Err(e) => {
                    let idx = i as u64;
                    let geometry = matches!(
                        (tag, &e),
                        ("threads" | "launch.block", LaunchSetError::ThreadsMismatch { index, .. })
                        | ("launch.block", LaunchSetError::ZeroBlock { index, .. })
                        | ("launch.grid", LaunchSetError::ZeroGrid { index, .. })
                            if *index == idx
                    );
                    // Flipping one bit of a low-weight arguments digest can
                    // produce the placeholder, which the builder refuses.
                    let placeholder = tag == "launch.arguments_digest"
                        && mutated[i].launch.arguments_digest.is_zero()
                        && e == LaunchSetError::ZeroArgumentsDigest { index: idx };
                    prop_assert!(
                        geometry || placeholder,
                        "changing {} of route {} was refused by the builder: {:?}", tag, i, e
                    );
                }
            }
        }
    }

    /// 1b. The field diff of a single-field change names exactly the field
    /// that was changed (threads and launch.block move together; adding an
    /// absent optional group changes that group only, the named field included).
    #[test]
    fn field_changes_name_exactly_the_mutated_field(
        (routes, i) in routes_with_target(),
    ) {
        for tag in route_field_tags() {
            let mut mutated = routes[i].clone();
            prop_assert!(mutate_field(&mut mutated, tag), "mutate_field does not know {}", tag);
            let changes = field_changes(&routes[i], &mutated);
            let changed = names(&changes);
            prop_assert!(
                changed.contains(&tag),
                "mutating {} of route {} changed {:?} instead", tag, i, changed
            );
            for c in &changes {
                prop_assert_ne!(&c.expected, &c.found);
            }
            match tag {
                "threads" => prop_assert_eq!(changed, vec!["threads", "launch.block"]),
                "launch.block" => {
                    let product_changed =
                        mutated.launch.block_threads() != routes[i].launch.block_threads();
                    let expected = if product_changed {
                        vec!["threads", "launch.block"]
                    } else {
                        vec!["launch.block"]
                    };
                    prop_assert_eq!(changed, expected);
                }
                t if TENSOR_MAP_TAGS.contains(&t) && routes[i].tensor_map.is_none() => {
                    prop_assert_eq!(changed, TENSOR_MAP_TAGS.to_vec());
                }
                t if t.starts_with(VENDOR_PREFIX) && routes[i].vendor.is_none() => {
                    prop_assert!(
                        changed.iter().all(|c| c.starts_with(VENDOR_PREFIX)),
                        "adding a vendor block for {} changed {:?}", t, changed
                    );
                }
                _ => prop_assert_eq!(changed, vec![tag]),
            }
        }
    }

    /// 2. Remove, swap, symbol, module kind, dtype, arguments digest and
    /// tensor-map digest mutations are refused before launch, both through
    /// `mutation::exercise` and through the guarded path re-implemented here.
    #[test]
    // Over 100 lines: one scenario, asserted step by step in the order a user meets it.
    fn named_mutations_are_refused_before_launch(
        routes in route_list(any_route()),
        a in any::<Index>(),
        b in any::<Index>(),
    ) {
        let golden = golden_of(&routes);
        let live = testkit::context();
        let n = routes.len();
        let i = a.index(n);
        let mut kinds = vec![
            Mutation::Remove(i),
            Mutation::Symbol(i),
            Mutation::ModuleKind(i),
            Mutation::DType(i),
            Mutation::ArgumentsDigest(i),
            Mutation::TensorMapDigest(i),
        ];
        if n >= 2 {
            let j = (i + 1 + b.index(n - 1)) % n;
            if routes[i] != routes[j] {
                kinds.push(Mutation::Swap(i.min(j), i.max(j)));
            }
        }
        for m in kinds {
            let mut mutated = routes.clone();
            prop_assert!(m.apply(&mut mutated), "{:?} did not apply", m);
            prop_assert!(routes != mutated, "{:?} changed nothing", m);

            // Through the library's own exercise.
            let outcome = mutation::exercise(&golden, &live, mutated.clone());
            prop_assert!(
                outcome.refused_before_launch(),
                "{:?} not refused before launch: {}", m, outcome.first_refusal()
            );
            prop_assert!(!outcome.launched, "{:?} launched", m);

            // Independently: a plan against the golden manifest is refused...
            let construction = CapturedGemmGraphPlan::new(golden.manifest(), mutated.clone());
            let refusal = construction.expect_err("a tampered list must not build against the golden manifest");
            prop_assert_eq!(refusal.stage, RefusalStage::PlanConstruction);

            // ...and a re-digested one is refused by the golden comparison,
            // and the launch closure never runs.
            let set = match build_resolved_gemm_launch_set(&mutated) {
                Ok(set) => set,
                Err(e) => {
                    match &m {
                        Mutation::Remove(_) => prop_assert_eq!(&e, &LaunchSetError::Empty),
                        Mutation::ArgumentsDigest(k) => {
                            prop_assert!(mutated[*k].launch.arguments_digest.is_zero());
                            prop_assert_eq!(&e, &LaunchSetError::ZeroArgumentsDigest { index: *k as u64 });
                        }
                        _ => prop_assert!(false, "{:?}: builder refused {:?}", m, e),
                    }
                    continue;
                }
            };
            let manifest = PreparedGemmCaptureManifest {
                context: golden.context.clone(),
                launch_set: set,
                route_capacity: set.launch_count,
            };
            let plan = CapturedGemmGraphPlan::new(manifest, mutated.clone())
                .expect("a plan builds against its own re-digested manifest");
            let launched = Cell::new(false);
            let golden_check = plan.check_against_golden_trace(&golden);
            if golden_check.is_ok() {
                let _ = plan.with_validated_launch(&live, "guarded", |_| launched.set(true));
            }
            prop_assert!(!launched.get(), "{:?}: launch closure ran", m);
            let refusal = golden_check.expect_err("golden comparison refuses a tampered list");
            prop_assert_eq!(refusal.stage, RefusalStage::GoldenComparison);
            // The manifest-only comparison refuses it too.
            prop_assert!(plan.check_against_golden(&golden.manifest()).is_err());

            let field_tag = match &m {
                Mutation::Symbol(_) => Some("kernel_symbol"),
                Mutation::ModuleKind(_) => Some("module_kind"),
                Mutation::DType(_) => Some("dtype"),
                Mutation::ArgumentsDigest(_) => Some("launch.arguments_digest"),
                Mutation::TensorMapDigest(_) => Some("tensor_map.digest"),
                _ => None,
            };
            match &m {
                Mutation::Remove(r) => {
                    // The first index where the shifted list differs, if any.
                    let first = (*r..n - 1).find(|&k| routes[k] != routes[k + 1]);
                    match first {
                        Some(k) => {
                            prop_assert_eq!(refusal.route_index, Some(k as u64));
                            prop_assert_eq!(refusal.changes().to_vec(), field_changes(&routes[k], &routes[k + 1]));
                        }
                        None => {
                            prop_assert_eq!(refusal.route_index, None);
                            prop_assert_eq!(refusal.change().field.as_str(), "launch_count");
                        }
                    }
                }
                Mutation::Swap(x, y) => {
                    prop_assert_eq!(refusal.route_index, Some(*x as u64));
                    prop_assert_eq!(refusal.changes().to_vec(), field_changes(&routes[*x], &routes[*y]));
                }
                _ => {
                    let tag = field_tag.expect("field mutation");
                    prop_assert_eq!(refusal.route_index, Some(i as u64), "{:?}", m);
                    let changed = names(refusal.changes());
                    if tag == "tensor_map.digest" && routes[i].tensor_map.is_none() {
                        // Adding a tensor map: its revision is framed first.
                        prop_assert_eq!(changed, TENSOR_MAP_TAGS.to_vec());
                    } else {
                        prop_assert_eq!(refusal.change().field.as_str(), tag);
                        prop_assert_eq!(changed, vec![tag]);
                    }
                }
            }
        }
    }

    /// 3. Unchanged routes are accepted; validated launches run the closure
    /// once per call (also from the cache); another live context is refused
    /// without running it, naming the field.
    #[test]
    fn unchanged_routes_are_accepted(
        routes in route_list(servable_route()),
        flip_tensor_cores in any::<bool>(),
        symbol in prop::sample::select(testkit::SYMBOLS.to_vec()),
    ) {
        let context = testkit::context();
        let golden = golden_of(&routes);
        let n = routes.len() as u64;
        prop_assert_eq!(golden.launch_set, build_resolved_gemm_launch_set(&routes).unwrap());

        let plan = CapturedGemmGraphPlan::new(golden.manifest(), routes.clone())
            .expect("unchanged routes build a plan");
        prop_assert_eq!(plan.routes(), &routes[..]);
        prop_assert_eq!(plan.launch_set(), &golden.launch_set);
        prop_assert!(CapturedGemmGraphPlan::from_trace(&golden).is_ok());
        prop_assert_eq!(plan.validate(&context), Ok(()));
        prop_assert_eq!(plan.check_against_golden_trace(&golden), Ok(()));
        prop_assert_eq!(plan.check_against_golden(&golden.manifest()), Ok(()));
        prop_assert_eq!(plan.check_capture_result(&golden.launch_set), Ok(()));
        prop_assert_eq!(golden.manifest().check_capture_request(n), Ok(()));
        let short = golden.manifest().check_capture_request(n + 1).unwrap_err();
        prop_assert_eq!(short.stage, RefusalStage::CaptureRequest);

        // Once per call: the first validates, the second hits the cache.
        for _ in 0..2 {
            let (r, calls) = guarded_launch(&plan, &context, "accepted");
            prop_assert_eq!(r, Ok(7));
            prop_assert_eq!(calls, 1);
        }

        let mut other = context.clone();
        let expected = if flip_tensor_cores {
            other.policy.tensor_cores = !other.policy.tensor_cores;
            "policy.tensor_cores"
        } else {
            other.modules[0].symbols.retain(|s| s.name != symbol);
            "module.symbols"
        };
        let (r, calls) = guarded_launch(&plan, &other, "other");
        prop_assert_eq!(calls, 0, "closure ran under another context");
        let refusal = r.unwrap_err();
        prop_assert_eq!(refusal.stage, RefusalStage::ReplayValidation);
        prop_assert_eq!(refusal.route_index, None);
        prop_assert_eq!(refusal.label.as_deref(), Some("other"));
        prop_assert_eq!(refusal.change().field.as_str(), expected);
        let again = plan.validate(&other).unwrap_err();
        prop_assert_eq!(again.change().field.as_str(), expected);
        // The refusal did not poison the cache for the original context.
        let (r, calls) = guarded_launch(&plan, &context, "accepted");
        prop_assert_eq!(r, Ok(7));
        prop_assert_eq!(calls, 1);
    }

    /// 4a. A kernel symbol the live module set does not serve is refused at
    /// replay validation, naming `kernel_symbol` and the first route using it.
    #[test]
    fn unserved_symbol_is_refused_before_launch(
        routes in route_list(servable_route()),
        at in any::<Index>(),
    ) {
        let i = at.index(routes.len());
        let symbol = routes[i].kernel_symbol.clone();
        let mut live = testkit::context();
        live.modules[0].symbols.retain(|s| s.name != symbol);
        let first = routes.iter().position(|r| r.kernel_symbol == symbol).unwrap();

        // A plan recorded under the full module set: the context differs.
        let plan = CapturedGemmGraphPlan::from_trace(&golden_of(&routes)).unwrap();
        let (r, calls) = guarded_launch(&plan, &live, "drop-symbol");
        prop_assert_eq!(calls, 0);
        let refusal = r.unwrap_err();
        prop_assert_eq!(refusal.stage, RefusalStage::ReplayValidation);
        prop_assert_eq!(refusal.change().field.as_str(), "module.symbols");

        // A plan recorded under the reduced set: the route itself is refused.
        let plan = CapturedGemmGraphPlan::from_trace(&trace_under(live.clone(), routes.clone())).unwrap();
        let (r, calls) = guarded_launch(&plan, &live, "drop-symbol");
        prop_assert_eq!(calls, 0);
        let refusal = r.unwrap_err();
        prop_assert_eq!(refusal.stage, RefusalStage::ReplayValidation);
        prop_assert_eq!(refusal.route_index, Some(first as u64));
        prop_assert_eq!(refusal.change().field.as_str(), "kernel_symbol");
        prop_assert_eq!(refusal.label.as_deref(), Some("drop-symbol"));
        let again = plan.validate(&live).unwrap_err();
        prop_assert_eq!(&again.label, &None);
        prop_assert_eq!(again.route_index, refusal.route_index);
        prop_assert_eq!(again.changes(), refusal.changes());
    }

    /// 4b. A module kind that no longer matches the backend is refused.
    #[test]
    fn module_kind_mismatch_is_refused_before_launch(
        mut routes in route_list(servable_route()),
        at in any::<Index>(),
        kind in prop::sample::select(
            ModuleKind::ALL.iter().filter(|k| **k != ModuleKind::Nvrtc).cloned().collect::<Vec<_>>()
        ),
    ) {
        let i = at.index(routes.len());
        routes[i].module_kind = kind.clone();
        let live = testkit::context();
        let plan = CapturedGemmGraphPlan::from_trace(&golden_of(&routes)).unwrap();
        let (r, calls) = guarded_launch(&plan, &live, "module-kind");
        prop_assert_eq!(calls, 0);
        let refusal = r.unwrap_err();
        prop_assert_eq!(refusal.stage, RefusalStage::ReplayValidation);
        prop_assert_eq!(refusal.route_index, Some(i as u64));
        prop_assert_eq!(refusal.change().field.as_str(), "module_kind");
        prop_assert_eq!(refusal.change().found.as_str(), &*kind.as_str());
    }

    /// 4c. A dtype or numeric contract the live policy does not permit is
    /// refused at the first offending route (an independent oracle decides
    /// which), naming the field.
    #[test]
    fn unpermitted_contract_is_refused_before_launch(
        mut routes in route_list(servable_route()),
        at in any::<Index>(),
        case in 0usize..5,
        half in prop::sample::select(vec![DType::F16, DType::Bf16]),
        splits in 1u32..=64,
    ) {
        let i = at.index(routes.len());
        let base = testkit::context().policy;
        let r = &mut routes[i];
        // (live context, is-offending oracle, accepted fields)
        let (live, offends, fields): (GemmRouteIdentity, fn(&ResolvedGemmRoute) -> bool, &[&str]) =
            match case {
                0 => {
                    // Half-precision split-K under half policy `tiled`.
                    r.dtype = half;
                    r.contract = NumericContract { kind: ContractKind::SplitKFixed, splits };
                    r.uses_tensor_cores = false;
                    testkit::declared_as(r, testkit::SYMBOLS[2]);
                    (
                        context_with_policy(GemmPolicy { half: HalfPolicy::Tiled, ..base }),
                        |r| r.dtype.is_half() && r.contract.kind == ContractKind::SplitKFixed,
                        &["contract.kind"],
                    )
                }
                1 => {
                    // f32 split-K under f32 policy `exact`.
                    r.dtype = DType::F32;
                    r.contract = NumericContract { kind: ContractKind::SplitKFixed, splits };
                    r.uses_tensor_cores = false;
                    testkit::declared_as(r, testkit::SYMBOLS[2]);
                    (
                        context_with_policy(GemmPolicy { f32: F32Policy::Exact, ..base }),
                        |r| {
                            r.dtype == DType::F32
                                && matches!(r.contract.kind, ContractKind::SplitKFixed | ContractKind::Tf32)
                        },
                        &["contract.kind"],
                    )
                }
                2 => {
                    // A tensor-core route under a policy without tensor cores.
                    r.dtype = half;
                    r.contract = NumericContract { kind: ContractKind::TensorCoreTileParity, splits: 1 };
                    r.uses_tensor_cores = true;
                    testkit::declared_as(r, testkit::SYMBOLS[3]);
                    (
                        context_with_policy(GemmPolicy { tensor_cores: false, ..base }),
                        |r| r.uses_tensor_cores || r.contract.kind == ContractKind::TensorCoreTileParity,
                        &["contract.kind", "uses_tensor_cores"],
                    )
                }
                3 => {
                    // Tensor cores used by a scalar contract, policy flipped alone.
                    r.uses_tensor_cores = true;
                    r.contract = NumericContract { kind: ContractKind::ScalarFma, splits: 1 };
                    testkit::declared_as(r, testkit::SYMBOLS[0]);
                    let mut live = testkit::context();
                    live.policy.tensor_cores = false;
                    (live, |r| r.uses_tensor_cores, &["uses_tensor_cores"])
                }
                _ => {
                    // A dtype the contract does not apply to: f32 tile parity.
                    r.dtype = DType::F32;
                    r.contract = NumericContract { kind: ContractKind::TensorCoreTileParity, splits: 1 };
                    r.uses_tensor_cores = true;
                    testkit::declared_as(r, testkit::SYMBOLS[3]);
                    (
                        testkit::context(),
                        |r| r.dtype == DType::F32 && r.contract.kind == ContractKind::TensorCoreTileParity,
                        &["contract.kind"],
                    )
                }
            };
        let first = routes.iter().position(offends).expect("route i offends");
        prop_assert!(first <= i);
        let plan = CapturedGemmGraphPlan::from_trace(&trace_under(live.clone(), routes.clone())).unwrap();
        let (r, calls) = guarded_launch(&plan, &live, "policy");
        prop_assert_eq!(calls, 0);
        let refusal = r.unwrap_err();
        prop_assert_eq!(refusal.stage, RefusalStage::ReplayValidation);
        prop_assert_eq!(refusal.route_index, Some(first as u64));
        prop_assert!(
            fields.contains(&refusal.change().field.as_str()),
            "case {}: named {:?}", case, refusal.change().field
        );
        // The same routes are servable under the original context unless
        // the contract itself is invalid for the dtype (case 4).
        if case != 4 {
            let plan = CapturedGemmGraphPlan::from_trace(&golden_of(&routes)).unwrap();
            let (r, calls) = guarded_launch(&plan, &testkit::context(), "policy");
            prop_assert_eq!(r, Ok(7));
            prop_assert_eq!(calls, 1);
        }
    }

    /// 4d. A changed live context (policy, compiler, artifacts, device,
    /// revisions) is refused before launch, naming what changed.
    #[test]
    fn changed_context_is_refused_before_launch(
        routes in route_list(servable_route()),
        which in 0usize..CONTEXT_CHANGES,
        accept_first in any::<bool>(),
    ) {
        let context = testkit::context();
        let plan = CapturedGemmGraphPlan::from_trace(&golden_of(&routes)).unwrap();
        if accept_first {
            // A cached acceptance of the original must not leak to the new one.
            prop_assert_eq!(guarded_launch(&plan, &context, "first").1, 1);
        }
        let mut live = context.clone();
        let expected = change_context(which, &mut live);
        prop_assert_ne!(live.digest(), context.digest());
        let (r, calls) = guarded_launch(&plan, &live, "changed");
        prop_assert_eq!(calls, 0, "closure ran under a changed context");
        let refusal = r.unwrap_err();
        prop_assert_eq!(refusal.stage, RefusalStage::ReplayValidation);
        prop_assert_eq!(refusal.route_index, None);
        prop_assert_eq!(refusal.change().field.as_str(), expected);
        let mut all = vec![expected];
        if expected == "module.symbols" {
            // A new symbol is a new (undeclared) declaration too.
            all.push("module.declarations");
        }
        prop_assert_eq!(names(refusal.changes()), all);
    }

    /// 5. The builder refuses malformed launch sets with the specific error,
    /// at the first faulty route.
    #[test]
    fn builder_refuses_malformed_launch_sets(
        routes in route_list(any_route()),
        at in any::<Index>(),
        later in any::<Index>(),
        fault in 0usize..4,
        second_fault in 0usize..4,
        dim in 0usize..3,
        extra in 1u64..=5,
        bad_threads in edge_u32(),
    ) {
        let n = routes.len();
        let set = build_resolved_gemm_launch_set(&routes).unwrap();

        // Empty.
        prop_assert_eq!(ResolvedGemmLaunchSetBuilder::new(0).err(), Some(LaunchSetError::Empty));
        prop_assert_eq!(build_resolved_gemm_launch_set(&[]), Err(LaunchSetError::Empty));

        // More pushes than declared; the refused push leaves the set intact.
        let mut b = ResolvedGemmLaunchSetBuilder::new(n as u64).unwrap();
        for r in &routes {
            b.push(r).unwrap();
        }
        prop_assert_eq!(
            b.push(&routes[at.index(n)]),
            Err(LaunchSetError::TooManyRoutes { declared: n as u64 })
        );
        prop_assert_eq!(b.finish(), Ok(set));

        // Finishing short.
        let mut b = ResolvedGemmLaunchSetBuilder::new(n as u64 + extra).unwrap();
        for r in &routes {
            b.push(r).unwrap();
        }
        prop_assert_eq!(
            b.finish(),
            Err(LaunchSetError::Short { declared: n as u64 + extra, pushed: n as u64 })
        );

        // One fault at p (and maybe another after it): the first is named.
        let p = at.index(n);
        let apply = |r: &mut ResolvedGemmRoute, fault: usize, index: u64| -> LaunchSetError {
            match fault {
                0 => {
                    r.launch.grid[dim] = 0;
                    LaunchSetError::ZeroGrid { index, grid: r.launch.grid }
                }
                1 => {
                    r.launch.block[dim] = 0;
                    LaunchSetError::ZeroBlock { index, block: r.launch.block }
                }
                2 => {
                    let product = r.launch.block_threads();
                    r.threads = if bad_threads as u64 == product { bad_threads.wrapping_add(1) } else { bad_threads };
                    LaunchSetError::ThreadsMismatch {
                        index,
                        block_threads: product,
                        route_threads: r.threads,
                    }
                }
                _ => {
                    r.launch.arguments_digest = Digest::ZERO;
                    LaunchSetError::ZeroArgumentsDigest { index }
                }
            }
        };
        let mut bad = routes.clone();
        let expected = apply(&mut bad[p], fault, p as u64);
        if p + 1 < n {
            let q = p + 1 + later.index(n - p - 1);
            apply(&mut bad[q], second_fault, q as u64);
        }
        prop_assert_eq!(build_resolved_gemm_launch_set(&bad), Err(expected.clone()));
        // Push by push: every route before p is accepted, p is refused.
        let mut b = ResolvedGemmLaunchSetBuilder::new(n as u64).unwrap();
        for r in &bad[..p] {
            prop_assert_eq!(b.push(r), Ok(()));
        }
        prop_assert_eq!(b.push(&bad[p]), Err(expected));
        // A trace of the faulty list cannot be assembled either.
        prop_assert!(RecordedGemmTrace::new(
            "bad", Digest::ZERO, testkit::context(), bad, fingerprints(n), VolatileMetadata::new()
        ).is_err());
    }

    /// 6. encode -> decode is the identity, and re-encoding gives the same bytes.
    #[test]
    fn trace_encoding_round_trips(
        routes in route_list(any_route()),
        volatile in prop::collection::btree_map(text(), text(), 0..6),
        workload in text(),
        workload_digest in any_digest(),
        seeds in prop::collection::vec((edge_u64(), edge_u64(), any_digest()), 12),
        cpu_context in any::<bool>(),
    ) {
        let context = if cpu_context {
            CpuBackend::default().context().clone()
        } else {
            testkit::context()
        };
        let fps = seeds[..routes.len()]
            .iter()
            .map(|&(input_seed, bytes, sha256)| OutputFingerprint { input_seed, bytes, sha256 })
            .collect();
        let trace = RecordedGemmTrace::new(workload, workload_digest, context, routes, fps, volatile)
            .unwrap();
        let bytes = trace.to_bytes().expect("encodes");
        let decoded = RecordedGemmTrace::from_bytes(&bytes).expect("decodes");
        prop_assert_eq!(&decoded, &trace);
        prop_assert_eq!(decoded.to_bytes().expect("re-encodes"), bytes);
        // The decoded routes still rebuild the recorded launch set.
        prop_assert!(CapturedGemmGraphPlan::from_trace(&decoded).is_ok());
    }
}

// ------------------------------------------------------- CPU end to end

fn route_choice() -> impl Strategy<Value = RouteChoice> {
    prop_oneof![
        Just(RouteChoice::Kernel(KernelFamily::ScalarFma)),
        Just(RouteChoice::Kernel(KernelFamily::Tiled)),
        (1u32..=16).prop_map(|s| RouteChoice::Kernel(KernelFamily::SplitKFixed(s))),
        Just(RouteChoice::Policy),
    ]
}

fn workload() -> impl Strategy<Value = Workload> {
    let spec = (
        prop::sample::select(GemmOp::ALL),
        prop::sample::select(DType::ALL),
        1u64..=24,
        // Mostly tiny; sometimes long enough (k >= 256) for the dispatcher's split-K.
        prop_oneof![4 => 1u64..=24, 1 => 256u64..=280],
        1u64..=24,
        route_choice(),
        prop::option::of(any::<u64>()),
    );
    (any::<u64>(), prop::collection::vec(spec, 1..=4)).prop_map(|(seed, specs)| Workload {
        name: "properties".into(),
        description: String::new(),
        seed,
        policy: None,
        gemms: specs
            .into_iter()
            .enumerate()
            .map(|(i, (op, dtype, m, k, n, route, seed))| GemmSpec {
                name: format!("g{i}"),
                op,
                dtype,
                m,
                k,
                n,
                route,
                seed,
            })
            .collect(),
    })
}

fn with_route(spec: &GemmSpec, route: RouteChoice) -> GemmSpec {
    GemmSpec {
        route,
        ..spec.clone()
    }
}

proptest! {
    #![proptest_config(config(1000))]

    /// 7. The CPU backend records and replays bit-identically, and the tiled
    /// route (and one-split fixed split-K) equals scalar FMA bit for bit.
    #[test]
    fn cpu_backend_replays_what_it_recorded(w in workload()) {
        prop_assert_eq!(w.validate(), Ok(()));
        let cpu = CpuBackend::default();
        let backend = Backend::new(cpu.clone());
        let mut progress = Vec::new();
        let rec = record(&backend, &w, &mut |done, total| progress.push((done, total))).unwrap();
        let n = w.gemms.len();
        prop_assert_eq!(&rec.replay, &ReplayOutcome::Identical { launches: n });
        prop_assert_eq!(progress, (1..=n).map(|d| (d, n)).collect::<Vec<_>>());
        prop_assert_eq!(rec.trace.routes.len(), n);
        prop_assert_eq!(rec.outputs.len(), n);
        prop_assert_eq!(rec.trace.launch_set, build_resolved_gemm_launch_set(&rec.trace.routes).unwrap());

        for (spec, (route, out)) in w.gemms.iter().zip(rec.trace.routes.iter().zip(&rec.outputs)) {
            let seed = spec.input_seed(w.seed);
            prop_assert_eq!(route, &cpu.resolve(spec).unwrap());
            prop_assert_eq!(&cpu.run(route, seed).unwrap(), out, "eager run is not repeatable");
            let scalar = cpu.run(&cpu.resolve(&with_route(spec, RouteChoice::Kernel(KernelFamily::ScalarFma))).unwrap(), seed).unwrap();
            let tiled = cpu.run(&cpu.resolve(&with_route(spec, RouteChoice::Kernel(KernelFamily::Tiled))).unwrap(), seed).unwrap();
            let one_split =
                cpu.run(&cpu.resolve(&with_route(spec, RouteChoice::Kernel(KernelFamily::SplitKFixed(1)))).unwrap(), seed).unwrap();
            let elem = if spec.dtype == DType::F32 { 4 } else { 2 };
            prop_assert_eq!(scalar.len() as u64, spec.m * spec.n * elem);
            prop_assert_eq!(&tiled, &scalar, "tiled differs from scalar-fma for {:?}", spec);
            prop_assert_eq!(&one_split, &scalar, "split-k-fixed:1 differs from scalar-fma for {:?}", spec);
            prop_assert_eq!(&gemm_audit::backend::cpu::reference_output(route, seed).unwrap(), &scalar);
            if matches!(spec.route, RouteChoice::Kernel(KernelFamily::ScalarFma) | RouteChoice::Kernel(KernelFamily::Tiled)) {
                prop_assert_eq!(out, &scalar);
            }
        }
    }
}

// ------------------------------------------- the replay guard, without a golden

/// Real routes under their live context: the CPU backend's routes of two
/// built-in workloads, and every committed H200 golden's routes under the
/// golden's own context (as a replay on that card would see them).
fn guarded_corpora() -> Vec<(String, GemmRouteIdentity, Vec<ResolvedGemmRoute>)> {
    let cpu = CpuBackend::default();
    let mut out = Vec::new();
    for name in ["transformer-block", "m-sweep"] {
        let routes: Vec<ResolvedGemmRoute> = Workload::builtin(name)
            .unwrap()
            .gemms
            .iter()
            .filter_map(|g| cpu.resolve(g).ok())
            .collect();
        out.push((format!("cpu/{name}"), cpu.context().clone(), routes));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/nvidia-h200");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in files {
        let t = RecordedGemmTrace::read(&path).unwrap();
        out.push((path.display().to_string(), t.context.clone(), t.routes));
    }
    // The H200 batch-invariant golden (format 6) holds the
    // `cublaslt-invariant` routes under `vendor-invariant` with their
    // families pinned: the guard's vendor-invariant checks are tried on
    // recorded routes and pins.
    let (_, live, routes) = out
        .iter()
        .find(|(name, _, _)| name.ends_with("batch-invariant.gat"))
        .expect("the H200 batch-invariant golden");
    let invariant = routes
        .iter()
        .filter(|r| r.contract.kind == ContractKind::VendorInvariant)
        .count();
    assert!(invariant >= 100, "{invariant} vendor-invariant routes");
    assert!(!live.pins.is_empty(), "the golden's context pins no family");
    out
}

/// Replays `route` alone (a plan of one route, its manifest re-digested as
/// an attacker would) under `live`: the refusal, and how often the launch
/// closure ran.
fn guard_alone(live: &GemmRouteIdentity, route: &ResolvedGemmRoute) -> (Result<u32, Refusal>, u32) {
    let routes = vec![route.clone()];
    // None of the changes tried here is the launch-set builder's to refuse.
    let manifest = PreparedGemmCaptureManifest::from_routes(live.clone(), &routes)
        .expect("the launch-set builder accepts the route");
    let plan = CapturedGemmGraphPlan::new(manifest, routes)
        .expect("a plan builds against its own manifest");
    guarded_launch(&plan, live, "guard-alone")
}

/// Values of `by` each policy-visible field is changed by: small steps,
/// enum cycles, and wide jumps.
const CHANGES: [u64; 7] = [0, 1, 2, 3, 6, 999, (u32::MAX as u64) + 4];

/// Every route of every corpus replays untouched: the mutations below
/// start from routes the guard accepts, so a refusal is the change's.
#[test]
fn every_real_route_is_accepted_by_the_guard_untouched() {
    for (name, live, routes) in guarded_corpora() {
        assert!(!routes.is_empty(), "{name}");
        for (i, r) in routes.iter().enumerate() {
            let (res, calls) = guard_alone(&live, r);
            assert_eq!(
                calls,
                1,
                "{name} route {i} ({}) refused untouched: {:?}",
                r.kernel_symbol,
                res.err()
            );
        }
    }
}

/// The promise of the design card, exhaustively: every policy-visible field
/// (by the classification in `route::classes`, not by what the guard
/// checks) of every real route, changed alone in several ways and
/// re-digested, is refused by replay validation with the launch closure
/// never run.
#[test]
fn the_guard_alone_refuses_every_policy_visible_change_of_every_real_route() {
    let mut tried = 0u64;
    for (name, live, routes) in guarded_corpora() {
        for (i, clean) in routes.iter().enumerate() {
            for tag in gemm_audit::route::policy_visible(RouteKind::of(clean)) {
                for by in CHANGES {
                    let mut r = clean.clone();
                    assert!(
                        mutation::mutate_field_by(&mut r, tag, by),
                        "unknown tag {tag}"
                    );
                    assert_ne!(&r, clean, "{tag} by {by} changed nothing");
                    let (res, calls) = guard_alone(&live, &r);
                    assert_eq!(
                        calls, 0,
                        "{name} route {i} ({}): {tag} changed by {by} reached the launch",
                        clean.kernel_symbol
                    );
                    let refusal = res.unwrap_err();
                    assert_eq!(refusal.route_index, Some(0), "{refusal}");
                    tried += 1;
                }
            }
        }
    }
    println!("{tried} policy-visible changes refused by the guard alone");
    // CPU routes of two workloads and six H200 goldens: thousands of changes.
    assert!(tried > 10_000, "only {tried} changes tried");
}

/// A route relabelled to any other symbol of its module, even one that
/// serves the same (op, dtype, contract), is refused alone: the symbols
/// differ in what they serve or declare.
#[test]
fn a_relabel_to_any_other_symbol_of_the_module_is_refused_alone() {
    let mut tried = 0u64;
    for (name, live, routes) in guarded_corpora() {
        for (i, clean) in routes.iter().enumerate() {
            let module = live
                .module(&clean.module_kind, &clean.artifact_digest)
                .unwrap();
            for other in module
                .symbols
                .iter()
                .filter(|s| s.name != clean.kernel_symbol)
            {
                let mut r = clean.clone();
                r.kernel_symbol = other.name.clone();
                let (res, calls) = guard_alone(&live, &r);
                assert_eq!(
                    calls, 0,
                    "{name} route {i}: relabel {} -> {} reached the launch",
                    clean.kernel_symbol, other.name
                );
                assert!(res.is_err());
                tried += 1;
            }
        }
    }
    println!("{tried} relabels refused by the guard alone");
    assert!(tried > 1_000, "only {tried} relabels tried");
}

/// Bounded fields: the guard refuses what lies outside the declared bound.
#[test]
fn the_guard_alone_refuses_bounded_fields_outside_their_bounds() {
    let refused = |live: &GemmRouteIdentity, r: &ResolvedGemmRoute, what: &str| {
        let (res, calls) = guard_alone(live, r);
        assert_eq!(calls, 0, "{what} reached the launch");
        res.unwrap_err()
    };
    for (name, live, routes) in guarded_corpora() {
        for clean in &routes {
            for field in ["shape.m", "shape.k", "shape.n"] {
                let mut r = clean.clone();
                match field {
                    "shape.m" => r.shape.m = 0,
                    "shape.k" => r.shape.k = 0,
                    _ => r.shape.n = 0,
                }
                let refusal = refused(&live, &r, &format!("{name}: {field} = 0"));
                assert_eq!(refusal.change().field, field, "{refusal}");
            }
            if !clean.backend.is_vendor() {
                // A tensor map added or removed against the declaration.
                let mut r = clean.clone();
                r.tensor_map = match r.tensor_map {
                    Some(_) => None,
                    None => Some(TensorMapIdentity {
                        revision: live.revisions.tensor_map,
                        digest: Digest([9; 32]),
                    }),
                };
                let refusal = refused(&live, &r, &format!("{name}: tensor map flipped"));
                assert_eq!(refusal.change().field, "tensor_map.digest", "{refusal}");
            }
            if let Some(v) = &clean.vendor {
                let mut r = clean.clone();
                r.vendor.as_mut().unwrap().workspace_bytes = u64::MAX;
                let refusal = refused(&live, &r, &format!("{name}: workspace"));
                assert_eq!(
                    refusal.change().field,
                    "vendor.workspace_bytes",
                    "{refusal}"
                );
                let mut r = clean.clone();
                r.vendor.as_mut().unwrap().reduction_scheme =
                    v.reduction_scheme.wrapping_add(3) * 7 + 100;
                let refusal = refused(&live, &r, &format!("{name}: reduction scheme"));
                assert_eq!(
                    refusal.change().field,
                    "vendor.reduction_scheme",
                    "{refusal}"
                );
                // f32 and the halves are served differently by one entry point.
                let mut r = clean.clone();
                r.dtype = if r.dtype == DType::F32 {
                    DType::Bf16
                } else {
                    DType::F32
                };
                refused(&live, &r, &format!("{name}: dtype across f32 and halves"));
            }
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// 6. The replay guard alone refuses every policy-visible change of a
    /// route inside a whole plan, even when the attacker re-digested the
    /// manifest so the plan builds: `with_validated_launch` refuses at the
    /// changed route and never calls the launch closure. A guard that
    /// launched before validating fails here.
    #[test]
    fn replay_guard_refuses_policy_visible_changes_without_a_golden(
        which in any::<Index>(),
        at in any::<Index>(),
        tag_at in any::<Index>(),
        by in any::<u64>(),
    ) {
        let corpora = guarded_corpora();
        let (name, live, clean) = &corpora[which.index(corpora.len())];
        let i = at.index(clean.len());
        let tags: Vec<&str> = gemm_audit::route::policy_visible(RouteKind::of(&clean[i])).collect();
        let tag = tags[tag_at.index(tags.len())];
        let mut routes = clean.clone();
        prop_assert!(mutation::mutate_field_by(&mut routes[i], tag, by), "unknown tag {}", tag);
        prop_assert_ne!(&routes[i], &clean[i]);

        let untouched = PreparedGemmCaptureManifest::from_routes(live.clone(), clean).unwrap();
        let plan = CapturedGemmGraphPlan::new(untouched, clean.clone()).unwrap();
        prop_assert_eq!(guarded_launch(&plan, live, "clean"), (Ok(7), 1));

        let Ok(redigested) = PreparedGemmCaptureManifest::from_routes(live.clone(), &routes) else {
            // The launch-set builder refused the change: before launch too.
            return Ok(());
        };
        let plan = CapturedGemmGraphPlan::new(redigested, routes.clone())
            .expect("a plan builds against its own re-digested manifest");
        let (r, calls) = guarded_launch(&plan, live, "tampered");
        prop_assert_eq!(calls, 0, "{}: {} by {}: the launch closure ran", name, tag, by);
        let refusal = r.unwrap_err();
        prop_assert_eq!(refusal.stage, RefusalStage::ReplayValidation);
        prop_assert_eq!(refusal.route_index, Some(i as u64), "{}: {}", tag, refusal);
    }
}

/// The tag list does not depend on the route: a vendor route with a tensor
/// map frames the same tags, in the same order, as the placeholder.
#[test]
fn field_tags_are_the_same_for_every_route() {
    let mut r = testkit::sample_vendor_route(0);
    r.tensor_map = Some(TensorMapIdentity {
        revision: 1,
        digest: Digest([1; 32]),
    });
    let tags: Vec<&str> = field_list(&r).into_iter().map(|(t, _)| t).collect();
    assert_eq!(tags, route_field_tags());
    let tags: Vec<&str> = field_list(&testkit::sample_route(1))
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(tags, route_field_tags());
}

/// The policy's output-ownership rule decides on its own: a route whose
/// contract and symbol the live context permits, but whose outputs are
/// owned by atomic accumulation, is refused before launch by that rule
/// (no deterministic policy permits atomics), not by a golden.
#[test]
fn atomic_output_ownership_is_refused_by_the_policy_rule_alone() {
    let live = testkit::context();
    let plan_of = |routes: Vec<ResolvedGemmRoute>| {
        let set = build_resolved_gemm_launch_set(&routes).unwrap();
        let manifest = PreparedGemmCaptureManifest {
            context: live.clone(),
            launch_set: set,
            route_capacity: set.launch_count,
        };
        CapturedGemmGraphPlan::new(manifest, routes).and_then(|p| p.validate(&live).map(|()| p))
    };
    let route = testkit::sample_route(0);
    assert_ne!(route.output_ownership, OutputOwnership::AtomicAccumulate);
    assert!(
        plan_of(vec![route.clone()]).is_ok(),
        "the route itself replays"
    );

    let mut atomic = route;
    atomic.output_ownership = OutputOwnership::AtomicAccumulate;
    let refusal = plan_of(vec![atomic]).expect_err("atomic ownership replayed");
    let change = refusal.change();
    assert_eq!(change.field, "output_ownership", "{refusal}");
    assert!(
        change
            .expected
            .contains("atomic accumulation is permitted by no policy"),
        "refused by another rule than the policy's ownership rule: {refusal}"
    );
}

/// No pattern waives output bits by accident: `--allow 'o*'`, `out*` or
/// `output*` lets an output drift through only where the allowance names
/// `output_fingerprint` whole (or the `numeric` class); other fields under
/// a pattern still pass.
#[test]
fn only_a_whole_field_or_the_numeric_class_waives_output_bits() {
    use gemm_audit::diff::{Allowance, DiffClass, TraceDiff};
    let golden = testkit::sample_trace(3);
    let mut drifted = golden.clone();
    drifted.fingerprints[1].sha256 = Digest::sha256(b"another output");
    let d = TraceDiff::between(&golden, &drifted);
    assert!(d.classes().contains(&DiffClass::Numeric), "{}", d.render());
    for pattern in ["o*", "out*", "output*", "output_fingerprint*"] {
        let allow = [Allowance::parse(pattern).unwrap()];
        assert!(
            !d.disallowed_classes(&allow).is_empty(),
            "{pattern} waived an output drift"
        );
    }
    for whole in ["output_fingerprint", "numeric"] {
        let allow = [Allowance::parse(whole).unwrap()];
        assert!(
            d.disallowed_classes(&allow).is_empty(),
            "{whole} did not waive it"
        );
    }
    // A pattern still passes the fields it names.
    let mut moved = golden.clone();
    moved.context.device.driver = "999.0".into();
    let d = TraceDiff::between(&golden, &moved);
    assert!(!d.is_empty());
    let allow = [Allowance::parse("device.*").unwrap()];
    assert!(d.disallowed_classes(&allow).is_empty(), "{}", d.render());
}
