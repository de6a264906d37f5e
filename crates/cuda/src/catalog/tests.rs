//! The catalog's facts checked without a device: symbols against the
//! kernel sources, geometry, tensor maps and the H200 goldens' routes.

use super::*;

/// The framing moved to `backend::common`; the digests stored in the
/// H200 goldens must still be what it computes.
#[test]
fn arguments_digests_match_the_h200_goldens() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/nvidia-h200");
    let mut checked = 0;
    for name in ["transformer-block", "m-sweep", "tensor-core-sweep"] {
        let t =
            gemm_audit_model::RecordedGemmTrace::read(&dir.join(format!("{name}.gat"))).unwrap();
        for r in t
            .routes
            .iter()
            .filter(|r| r.backend == gemm_audit_model::vocab::PhysicalBackend::CudaNvrtc)
        {
            let d = arguments_digest(&r.kernel_symbol, r.shape, r.strides, r.contract.splits);
            assert_eq!(d, r.launch.arguments_digest, "{name} {}", r.gemm);
            checked += 1;
        }
    }
    assert!(checked > 50, "{checked}");
}

/// Every wgmma route of the H200 golden carries the tensor-map digest
/// and launch geometry this build computes from its op, dtype and shape.
#[test]
fn wgmma_routes_of_the_h200_golden_match_this_catalog() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces/nvidia-h200/wgmma-sweep.gat");
    let t = gemm_audit_model::RecordedGemmTrace::read(&path).unwrap();
    let mut checked = 0;
    for r in &t.routes {
        let kernel = CudaKernel::from_route(r).unwrap_or_else(|e| panic!("{}: {e}", r.gemm));
        if kernel.is_wgmma() {
            let want = tensor_map_digest(&tensor_maps(kernel, r.op, r.dtype, r.shape));
            assert_eq!(
                r.tensor_map.as_ref().map(|t| t.digest),
                Some(want),
                "{}",
                r.gemm
            );
            checked += 1;
        }
    }
    assert!(checked >= 60, "{checked}");
}

/// A route whose launch geometry differs from the kernel's only in its
/// dynamic shared memory is refused, and the reason names both sizes
/// (grid and block alone read the same on each side).
#[test]
fn a_route_with_other_shared_memory_is_refused_naming_both_sizes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces/nvidia-h200/wgmma-sweep.gat");
    let t = gemm_audit_model::RecordedGemmTrace::read(&path).unwrap();
    let mut r = t
        .routes
        .iter()
        .find(|r| CudaKernel::from_route(r).is_ok_and(|k| k.is_wgmma()))
        .expect("a wgmma route")
        .clone();
    let had = r.launch.dynamic_shared_bytes;
    r.launch.dynamic_shared_bytes = had + 32;
    let e = CudaKernel::from_route(&r).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{} B dynamic shared memory", had + 32)),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "geometry {:?}x{:?}, {had} B",
            r.launch.grid, r.launch.block
        )),
        "{e}"
    );
}

/// Unset knobs leave the version as it was (recorded identities stay
/// valid); each set knob is named with its value, in a fixed order,
/// and hostile values cannot forge text.
#[test]
fn set_determinism_knobs_are_part_of_the_version() {
    let none = |_: &str| None;
    assert_eq!(version_with_knobs("cuBLAS 13.1.0", none), "cuBLAS 13.1.0");
    let tf32 = |k: &str| (k == "NVIDIA_TF32_OVERRIDE").then(|| "0".to_string());
    assert_eq!(
        version_with_knobs("cuBLAS 13.1.0", tf32),
        "cuBLAS 13.1.0 [NVIDIA_TF32_OVERRIDE=0]"
    );
    let all = |k: &str| {
        Some(match k {
            "CUBLAS_WORKSPACE_CONFIG" => ":4096:8".to_string(),
            "CUBLASLT_WORKSPACE_SIZE" => "1024".to_string(),
            _ => "0\n]\u{202e}".to_string() + &"x".repeat(100),
        })
    };
    let v = version_with_knobs("cuBLASLt 13.1.0", all);
    assert!(v.starts_with(
        "cuBLASLt 13.1.0 [CUBLAS_WORKSPACE_CONFIG=:4096:8, CUBLASLT_WORKSPACE_SIZE=1024, NVIDIA_TF32_OVERRIDE=0?]?"
    ), "{v}");
    assert!(!v.contains('\n') && !v.contains('\u{202e}'), "{v}");
    assert_eq!(v.matches('x').count(), 64 - 4, "{v}");
    assert_ne!(version_with_knobs("v", tf32), version_with_knobs("v", none));
}

/// Every route of every H200 golden is what its symbol's declaration
/// (this catalog's for NVRTC kernels, the vendor entry point's for
/// cuBLAS and cuBLASLt) says it launches, and is served with its
/// operand conversion: the declarations describe real launches. (The
/// vendor declarations live in the CUDA build; run with `--features cuda`.)
#[cfg(feature = "cuda")]
#[test]
fn every_h200_golden_route_satisfies_its_symbols_declaration() {
    use gemm_audit_model::vocab::PhysicalBackend;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/nvidia-h200");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let t = gemm_audit_model::RecordedGemmTrace::read(&entry.unwrap().path()).unwrap();
        for r in &t.routes {
            let declared = match &r.backend {
                PhysicalBackend::CudaNvrtc => CudaKernel::from_route(r)
                    .unwrap_or_else(|e| panic!("{}: {e}", r.gemm))
                    .declaration(r.dtype),
                b => crate::blas::vendor_declaration(
                    b,
                    &r.vendor.as_ref().unwrap().library_version,
                    &r.kernel_symbol,
                ),
            };
            assert_eq!(declared.contradiction(r), None, "{} {}", t.workload, r.gemm);
            if r.backend.is_vendor() {
                let fast = r.contract.kind == gemm_audit_model::vocab::ContractKind::VendorFast;
                let n = crate::blas::Numerics::of(r.dtype, fast);
                assert_eq!(n.conversion, r.operand_conversion, "{}", r.gemm);
                assert_eq!(n.tensor_cores, r.uses_tensor_cores, "{}", r.gemm);
            }
            checked += 1;
        }
    }
    assert!(checked > 250, "{checked}");
}

/// Every NVRTC route of every H200 golden is exactly what this catalog
/// builds for its problem from the golden's own module identity: the
/// route construction (geometry, declaration, digests) is unchanged.
#[test]
fn nvrtc_routes_of_the_h200_goldens_are_rebuilt_exactly() {
    use gemm_audit_model::vocab::PhysicalBackend;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/nvidia-h200");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let t = gemm_audit_model::RecordedGemmTrace::read(&entry.unwrap().path()).unwrap();
        for r in t
            .routes
            .iter()
            .filter(|r| r.backend == PhysicalBackend::CudaNvrtc)
        {
            let kernel = CudaKernel::from_route(r).unwrap();
            let module = t
                .context
                .module(&r.module_kind, &r.artifact_digest)
                .expect("module of the route");
            let rebuilt = nvrtc_route(
                &t.context,
                module,
                r.resources_digest,
                &r.gemm,
                (r.op, r.dtype, r.shape),
                kernel,
            )
            .unwrap_or_else(|e| panic!("{} {}: {e}", t.workload, r.gemm));
            assert_eq!(&rebuilt, r, "{} {}", t.workload, r.gemm);
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn symbols_cover_every_family_op_and_dtype() {
    let s = module_symbols(CudaModule::Gemm);
    // 4 SIMT families x 3 ops x 3 dtypes + 2 mma families x 3 ops x 2 dtypes.
    assert_eq!(s.len(), 36 + 12);
    assert!(s.contains(&"gemm_scalar_fma_nn_f32".to_string()));
    assert!(s.contains(&"gemm_mma_small_nt_bf16".to_string()));
    assert!(
        !s.iter()
            .any(|x| x.starts_with("gemm_mma") && x.ends_with("f32"))
    );
    for &k in CudaModule::Gemm.families() {
        let entry = format!("gemm_{}_##opname##_##dtname", k.symbol_family());
        assert!(GEMM_SOURCE.contains(&entry), "{entry}");
    }
    // The wgmma module: 3 tile variants and 5 ladder rungs x 3 ops x
    // 2 dtypes, each instantiated in kernels/wgmma.cu.
    let w = module_symbols(CudaModule::Wgmma);
    assert_eq!(w.len(), 48);
    for &k in CudaModule::Wgmma.families() {
        let Some(rung) = k.symbol_family().strip_prefix("ladder_") else {
            let bn = k.symbol_family().strip_prefix("wgmma_").unwrap();
            for dt in ["f16", "bf16"] {
                let entry = format!("ALL_OPS({bn}, {dt},");
                assert!(WGMMA_SOURCE.contains(&entry), "{entry}");
            }
            assert_eq!(wgmma_tile(k), (128, bn.parse().unwrap()), "{k}");
            continue;
        };
        let (tile, how) = rung.split_once('_').unwrap();
        let (tbm, bn) = tile.split_once('x').unwrap();
        for dt in ["f16", "bf16"] {
            let on_grid = if how == "split" { "true" } else { "false" };
            let kps = k.wgmma_k_blocks_per_stage();
            let entry = format!("LADDER_OPS({tbm}, {bn}, {how}, {on_grid}, {kps}, {dt},");
            assert!(WGMMA_SOURCE.contains(&entry), "{entry}");
        }
        assert_eq!(how == "split", k.ladder_splits_on_grid(), "{k}");
        assert_eq!(wgmma_tile(k), (tbm.parse().unwrap(), bn.parse().unwrap()));
    }
    assert!(w.contains(&"gemm_wgmma_256_tn_bf16".to_string()));
    assert!(w.contains(&"gemm_ladder_64x64_split_nt_f16".to_string()));
    assert!(w.contains(&"gemm_ladder_128x128_split_tn_bf16".to_string()));
    assert!(w.contains(&"gemm_ladder_128x128_fold_nn_bf16".to_string()));
    assert!(WGMMA_SOURCE.contains("gemm_wgmma_##bn##_##opname##_##dtname"));
    assert!(WGMMA_SOURCE.contains("gemm_ladder_##tbm##x##bn##_##how##_##opname##_##dtname"));
    for dt in ["f16", "bf16"] {
        for bn in ["256", "128"] {
            assert!(
                WGMMA_SOURCE.contains(&format!("ALL_OPS({bn}, {dt},")),
                "{bn} {dt}"
            );
        }
        // The decode rung puts its chunks on the grid; the wide one
        // folds them in registers.
        for rung in [
            "64, 64, split, true, 2",
            "128, 128, split, true, 1",
            "128, 128, fold, false, 1",
        ] {
            assert!(
                WGMMA_SOURCE.contains(&format!("LADDER_OPS({rung}, {dt},")),
                "{rung} {dt}"
            );
        }
    }
    assert!(w.iter().all(|x| !s.contains(x)));
    assert_eq!(
        CudaModule::Gemm.families().len() + CudaModule::Wgmma.families().len(),
        KernelFamily::ALL.len()
    );
    // Each module's slice of the families holds exactly its own.
    for m in [CudaModule::Gemm, CudaModule::Wgmma] {
        assert!(m.families().iter().all(|k| k.module() == m), "{m:?}");
    }
}

#[test]
fn wgmma_geometry_matches_the_kernel_source() {
    // The constants the host computes launches from must be the ones
    // kernels/wgmma.cu is compiled with.
    for (name, v) in [("BM", WGMMA_BM), ("BK", WGMMA_BK)] {
        assert!(
            WGMMA_SOURCE.contains(&format!("#define {name} {v}\n")),
            "{name}"
        );
    }
    assert!(WGMMA_SOURCE.contains("#define RING_BYTES (192 * 1024)"));
    assert!(WGMMA_SOURCE.contains("#define THREADS 384"));
    let s = GemmShape {
        m: 1000,
        k: 4096,
        n: 520,
    };
    let large = CudaKernel::WgmmaLarge.geometry(s).unwrap();
    // 8 row tiles x 3 column tiles of 256, one block each.
    assert_eq!(large.grid, [8 * 3, 1, 1]);
    assert_eq!(large.block, [384, 1, 1]);
    assert_eq!((large.tile.m, large.tile.n, large.tile.k), (128, 256, 64));
    // 4 stages of 48 KiB + alignment slack + barriers, under 227 KiB.
    assert_eq!(large.stages, 4);
    // and the persistent kernel's epilogue barriers, choice word and
    // hand-over slots after them, as many bytes as the kernel reserves.
    assert!(WGMMA_SOURCE.contains("const u32 epi = bars + 16 * R::STAGES;"));
    assert!(WGMMA_SOURCE.contains(&format!(
        "\n#define PERSISTENT_BYTES {WGMMA_PERSISTENT_SHARED_BYTES}\n"
    )));
    assert_eq!(WGMMA_PERSISTENT_SHARED_BYTES % 16, 0);
    assert_eq!(large.dynamic_shared_bytes, 4 * 49152 + 1024 + 64 + 64);
    // Fewer tiles than SMs: one block each, no workspace.
    assert_eq!(CudaKernel::WgmmaLarge.geometry_on(s, 132).unwrap(), large);
    assert_eq!(wgmma_workspace(CudaKernel::WgmmaLarge, s, &large), None);
    // More: one block per SM, and a partial and a flag for each tile of the
    // last, partial wave (1792 = 13 x 132 + 76 tiles of 128 x 256), then the
    // words of the launch's choice to split it.
    let up = GemmShape {
        m: 4096,
        k: 4096,
        n: 14336,
    };
    let persistent = CudaKernel::WgmmaLarge.geometry_on(up, 132).unwrap();
    assert_eq!(persistent.grid, [132, 1, 1]);
    assert_eq!(
        wgmma_workspace(CudaKernel::WgmmaLarge, up, &persistent),
        Some((76 * 128 * 256, 76 + 3))
    );
    // No SM count (not a CUDA device): one block per tile, which leaves no
    // wave partial.
    let per_tile = CudaKernel::WgmmaLarge.geometry_on(up, 0).unwrap();
    assert_eq!(per_tile.grid, [1792, 1, 1]);
    assert_eq!(wgmma_workspace(CudaKernel::WgmmaLarge, up, &per_tile), None);
    // The ladder's rungs are not persistent.
    for f in [CudaKernel::LadderNarrow(1), CudaKernel::LadderMid(1)] {
        assert_eq!(
            f.geometry_on(up, 132).unwrap(),
            f.geometry(up).unwrap(),
            "{f}"
        );
    }
    let small = CudaKernel::WgmmaSmall.geometry(s).unwrap();
    assert_eq!(small.grid, [8 * 5, 1, 1]);
    assert_eq!(small.stages, 6);
    assert!(small.dynamic_shared_bytes <= 227 * 1024);
    // The ladder: 4 chunks for n = 520 (9 column tiles of 64).
    assert_eq!(gemm_audit_model::kernels::ladder_chunks(s.k, s.n), 4);
    let decode = CudaKernel::LadderDecode(4).geometry(s).unwrap();
    assert_eq!(decode.grid, [16 * 9, 1, 4]);
    // Its workspace: a partial plane per chunk, a counter per tile.
    assert_eq!(
        wgmma_workspace(CudaKernel::LadderDecode(4), s, &decode),
        Some((4 * 1000 * 520, 16 * 9))
    );
    assert_eq!(decode.block, [256, 1, 1]);
    assert_eq!((decode.tile.m, decode.tile.n), (64, 64));
    // Stages of two k blocks (32 KiB).
    assert_eq!((decode.stages, decode.tile.k), (6, 128));
    let wide = CudaKernel::LadderWide(4).geometry(s).unwrap();
    assert_eq!(wide.grid, [8 * 5, 1, 1]);
    assert_eq!((wide.block, wide.stages), ([384, 1, 1], 6));
    let mid = CudaKernel::LadderMid(4).geometry(s).unwrap();
    assert_eq!(mid.grid, [8 * 5, 1, 4]);
    assert_eq!((mid.block, mid.stages), ([384, 1, 1], 6));
    // The band rung: 64x128 tiles, one consumer, chunks in registers.
    let band = CudaKernel::LadderBand(4).geometry(s).unwrap();
    assert_eq!(band.grid, [16 * 5, 1, 1]);
    assert_eq!((band.block, band.stages), ([256, 1, 1], 8));
    assert_eq!((band.tile.m, band.tile.n), (64, 128));
    // The narrow rung: 64x32 tiles, stages of four k blocks (48 KiB).
    let narrow = CudaKernel::LadderNarrow(4).geometry(s).unwrap();
    assert_eq!(narrow.grid, [16 * 17, 1, 1]);
    assert_eq!((narrow.block, narrow.stages), ([256, 1, 1], 4));
    assert_eq!((narrow.tile.k, narrow.bk), (256, 64));
    assert_eq!(narrow.dynamic_shared_bytes, 4 * 49152 + 1024 + 64);
    assert_eq!(band.tile.k, 64);
    // The model's block count (what the batch-invariant policy weighs)
    // is the grid the catalog launches.
    for f in CudaModule::Wgmma.families() {
        let f = f.for_shape(s.k, s.n);
        let g = f.geometry(s).unwrap();
        let grid = g.grid[0] as u64 * g.grid[1] as u64 * g.grid[2] as u64;
        assert_eq!(f.wgmma_blocks(s.m, s.n), Some(grid), "{f}");
    }
    // A rung with another shape's chunk count is refused.
    let e = CudaKernel::LadderWide(2)
        .geometry(s)
        .unwrap_err()
        .to_string();
    assert!(e.contains("in 4 chunks, not 2"), "{e}");
    for g in [large, small, decode, wide, band, narrow] {
        // Under 227 KiB with the decode rung's 16 bytes of static shared memory.
        assert!(g.dynamic_shared_bytes + 16 <= 227 * 1024, "{g:?}");
    }
    assert_eq!(max_dynamic_shared_bytes(CudaModule::Gemm), 0);
    assert_eq!(
        max_dynamic_shared_bytes(CudaModule::Wgmma),
        [large, small, decode, wide, band, narrow]
            .iter()
            .map(|g| g.dynamic_shared_bytes)
            .max()
            .unwrap()
    );
}

#[test]
fn wgmma_refuses_what_tma_cannot_read() {
    // A folding ladder rung with nothing to fold is refused.
    let one = GemmShape {
        m: 4096,
        k: 4096,
        n: 6144,
    };
    let e = CudaKernel::LadderWide(1)
        .serves_shape(GemmOp::Nn, one)
        .unwrap_err()
        .to_string();
    assert!(e.contains("its kernel is wgmma-small's"), "{e}");
    // The band rung's tile is no other kernel's: it serves one chunk.
    assert!(
        CudaKernel::LadderBand(1)
            .serves_shape(GemmOp::Nn, one)
            .is_ok()
    );
    assert!(
        CudaKernel::LadderMid(1)
            .serves_shape(GemmOp::Nn, one)
            .is_ok()
    );
    let k = CudaKernel::WgmmaLarge;
    let ok = GemmShape {
        m: 3,
        k: 4096,
        n: 4096,
    };
    assert!(k.serves_shape(GemmOp::Nn, ok).is_ok());
    assert!(k.serves_shape(GemmOp::Nt, ok).is_ok());
    // TN's A is m-contiguous: m = 3 gives 6-byte rows.
    let e = k.serves_shape(GemmOp::Tn, ok).unwrap_err().to_string();
    assert!(e.contains("m to be a multiple of 8"), "{e}");
    let e = k
        .serves_shape(
            GemmOp::Nn,
            GemmShape {
                m: 8,
                k: 100,
                n: 64,
            },
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("k to be a multiple of 8") && e.ends_with("not 100"),
        "{e}"
    );
    let e = k
        .serves_shape(GemmOp::Nt, GemmShape { m: 8, k: 64, n: 12 })
        .unwrap_err()
        .to_string();
    assert!(e.contains("n to be a multiple of 8"), "{e}");
    let e = k
        .serves_shape(GemmOp::Nn, GemmShape { m: 0, k: 64, n: 64 })
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least 1"), "{e}");
    // The other families serve any shape.
    assert!(CudaKernel::MmaLarge.serves_shape(GemmOp::Tn, ok).is_ok());
    assert!(!k.supports(DType::F32) && k.supports(DType::Bf16));
}

#[test]
fn strided_operands_change_only_the_row_strides_and_are_checked() {
    let s = GemmShape {
        m: 200,
        k: 136,
        n: 264,
    };
    for op in GemmOp::ALL.iter().copied() {
        let dense = GemmStrides::dense(op, s);
        let k = CudaKernel::WgmmaLarge;
        assert_eq!(
            tensor_maps_strided(k, op, DType::Bf16, s, dense),
            tensor_maps(k, op, DType::Bf16, s),
            "{op}: dense strides give the dense maps"
        );
        assert!(wgmma_strides(op, s, dense).is_ok());
        let wide = GemmStrides {
            lda: dense.lda + 64,
            ldb: dense.ldb + 8,
            ldc: dense.ldc,
        };
        assert!(wgmma_strides(op, s, wide).is_ok());
        let [a, b] = tensor_maps_strided(k, op, DType::Bf16, s, wide);
        let [da, db] = tensor_maps(k, op, DType::Bf16, s);
        assert_eq!(
            (a.row_stride_bytes, b.row_stride_bytes),
            (wide.lda * 2, wide.ldb * 2)
        );
        assert_eq!(
            (a.dims, b.dims, a.box_dims),
            (da.dims, db.dims, da.box_dims)
        );
        assert_ne!(tensor_map_digest(&[a, b]), tensor_map_digest(&[da, db]));
        // C may be wider than dense, by an even count.
        for ldc in [dense.ldc + 2, dense.ldc + 8, 3 * dense.ldc] {
            assert!(wgmma_strides(op, s, GemmStrides { ldc, ..dense }).is_ok());
        }
        for (bad, why) in [
            (
                GemmStrides {
                    ldc: dense.ldc + 1,
                    ..dense
                },
                "must be at least n",
            ),
            (
                GemmStrides {
                    ldc: dense.ldc - 2,
                    ..dense
                },
                "must be at least n",
            ),
            (
                GemmStrides {
                    lda: dense.lda + 4,
                    ..dense
                },
                "not a multiple of 8",
            ),
            (
                GemmStrides {
                    ldb: dense.ldb - 8,
                    ..dense
                },
                "less than the stored row",
            ),
        ] {
            let e = wgmma_strides(op, s, bad).unwrap_err().to_string();
            assert!(e.contains(why), "{op}: {e}");
        }
    }
}

#[test]
fn tensor_maps_describe_the_dense_operands() {
    let s = GemmShape {
        m: 200,
        k: 136,
        n: 264,
    };
    let [a, b] = tensor_maps(CudaKernel::WgmmaLarge, GemmOp::Nn, DType::Bf16, s);
    assert_eq!(
        (a.dims, a.row_stride_bytes, a.box_dims),
        ([136, 200], 272, [64, 128])
    );
    assert_eq!(
        (b.dims, b.row_stride_bytes, b.box_dims),
        ([264, 136], 528, [64, 64])
    );
    let [a, _] = tensor_maps(CudaKernel::WgmmaLarge, GemmOp::Tn, DType::Bf16, s);
    assert_eq!(
        (a.dims, a.row_stride_bytes, a.box_dims),
        ([200, 136], 400, [64, 64])
    );
    let [_, b] = tensor_maps(CudaKernel::WgmmaSmall, GemmOp::Nt, DType::F16, s);
    assert_eq!(
        (b.dims, b.row_stride_bytes, b.box_dims),
        ([136, 264], 272, [64, 128])
    );
    // The ladder loads A rows below one tile as boxes of m rounded up
    // to 8 (K-major A only), its B as boxes of its tile's columns.
    let small = GemmShape { m: 3, ..s };
    for (k, rows) in [
        (CudaKernel::LadderDecode(1), 8),
        (CudaKernel::LadderMid(1), 8),
        (CudaKernel::LadderWide(1), 8),
        (CudaKernel::WgmmaLarge, 128),
    ] {
        let [a, _] = tensor_maps(k, GemmOp::Nt, DType::Bf16, small);
        assert_eq!(a.box_dims, [64, rows], "{k}");
    }
    let [a, b] = tensor_maps(CudaKernel::LadderDecode(1), GemmOp::Nt, DType::Bf16, s);
    assert_eq!((a.box_dims, b.box_dims), ([64, 64], [64, 64]));
    let [a, _] = tensor_maps(CudaKernel::LadderMid(1), GemmOp::Nn, DType::Bf16, s);
    assert_eq!(a.box_dims, [64, 128]);
    // The narrow rung's MN-major B is one box of 32 columns: 64-byte
    // rows, so a 64-byte swizzle; its K-major B keeps 128-byte rows.
    for op in [GemmOp::Nn, GemmOp::Tn] {
        let [_, b] = tensor_maps(CudaKernel::LadderNarrow(1), op, DType::F16, s);
        assert_eq!((b.box_dims, b.swizzle_bytes()), ([32, 64], 64), "{op}");
    }
    let [a, b] = tensor_maps(CudaKernel::LadderNarrow(1), GemmOp::Nt, DType::Bf16, s);
    assert_eq!((b.box_dims, b.swizzle_bytes()), ([64, 32], 128));
    assert_eq!((a.box_dims, a.swizzle_bytes()), ([64, 64], 128));
    // TN's A on a 64-row rung at m <= 32: one box of 8, 16 or 32 m
    // values (16-, 32- or 64-byte rows and swizzle, none for 16 bytes);
    // 64 on every other kernel.
    for (m, cols) in [
        (1, 8),
        (8, 8),
        (9, 16),
        (16, 16),
        (17, 32),
        (32, 32),
        (40, 64),
    ] {
        for k in [
            CudaKernel::LadderNarrow(1),
            CudaKernel::LadderDecode(1),
            CudaKernel::LadderBand(1),
        ] {
            let [a, _] = tensor_maps(k, GemmOp::Tn, DType::Bf16, GemmShape { m, ..s });
            assert_eq!((a.dims, a.box_dims), ([m, 136], [cols, 64]), "{k} m = {m}");
            assert_eq!(a.swizzle_bytes(), 2 * cols as u64, "{k} m = {m}");
        }
        for k in [CudaKernel::LadderMid(1), CudaKernel::WgmmaSmall] {
            let [a, _] = tensor_maps(k, GemmOp::Tn, DType::Bf16, GemmShape { m, ..s });
            assert_eq!(a.box_dims, [64, 64], "{k} m = {m}");
        }
        // K-major A keeps its 64-value rows.
        let [a, _] = tensor_maps(
            CudaKernel::LadderNarrow(1),
            GemmOp::Nn,
            DType::Bf16,
            GemmShape { m, ..s },
        );
        assert_eq!(a.box_dims[0], 64);
    }
    // The digest follows every parameter: shape, op, dtype, variant.
    let d = |k, op, dt, s| tensor_map_digest(&tensor_maps(k, op, dt, s));
    let base = d(CudaKernel::WgmmaLarge, GemmOp::Nn, DType::Bf16, s);
    assert_eq!(base, d(CudaKernel::WgmmaLarge, GemmOp::Nn, DType::Bf16, s));
    for other in [
        d(
            CudaKernel::WgmmaLarge,
            GemmOp::Nn,
            DType::Bf16,
            GemmShape { m: 208, ..s },
        ),
        d(CudaKernel::WgmmaLarge, GemmOp::Nt, DType::Bf16, s),
        d(CudaKernel::WgmmaLarge, GemmOp::Nn, DType::F16, s),
        d(CudaKernel::WgmmaSmall, GemmOp::Nt, DType::Bf16, s),
    ] {
        assert_ne!(base, other);
    }
}

#[test]
fn geometry_covers_the_output() {
    let shape = GemmShape {
        m: 65,
        k: 48,
        n: 257,
    };
    for k in KernelFamily::ALL {
        let g = k.geometry(shape).unwrap();
        // The wgmma kernels number their tiles along one grid axis.
        let tiles = g.grid[0] as u64 * g.grid[1] as u64;
        let needed = shape.n.div_ceil(g.tile.n as u64) * shape.m.div_ceil(g.tile.m as u64);
        assert!(tiles >= needed, "{}", k.symbol_family());
        assert!(g.grid[0] as u64 * g.tile.n as u64 >= shape.n);
        assert_eq!(g.threads, g.block.iter().product::<u32>());
    }
    assert!(
        CudaKernel::ScalarFma
            .geometry(GemmShape {
                m: 1 << 21,
                k: 1,
                n: 1
            })
            .is_err()
    );
    assert_eq!(
        CudaKernel::SplitKAtomic(16).geometry(shape).unwrap().grid[2],
        16
    );
}

#[test]
fn dispatcher_thresholds() {
    assert_eq!(
        dispatch(DType::Bf16, 1, 4096, true, true),
        CudaKernel::MmaSmall
    );
    assert_eq!(
        dispatch(DType::Bf16, 128, 4096, true, true),
        CudaKernel::MmaLarge
    );
    assert_eq!(
        dispatch(DType::F32, 8, 1024, true, true),
        CudaKernel::SplitKFixed(DISPATCH_SPLITS)
    );
    assert_eq!(
        dispatch(DType::F32, 8, 1024, true, false),
        CudaKernel::Tiled
    );
    assert_eq!(
        dispatch(DType::F32, 64, 1024, true, true),
        CudaKernel::Tiled
    );
    assert_eq!(
        dispatch(DType::F16, 8, 1024, false, true),
        CudaKernel::SplitKFixed(DISPATCH_SPLITS)
    );
}

#[test]
fn options_are_pinned() {
    let o = compile_options("sm_90");
    assert!(o.contains(&"--fmad=false".to_string()));
    assert!(!o.iter().any(|x| x.contains("fast_math")));
    assert_ne!(
        options_digest(&o),
        options_digest(&compile_options("sm_80"))
    );
}

/// The tensor-map recompute before launch, on the CPU: `nvrtc_target`
/// runs [`CudaKernel::from_route`] before every NVRTC launch, and it
/// recomputes the maps from the route's op, dtype and shape. A wgmma route
/// of the H200 golden whose recorded digest was changed, whose tensor-map
/// identity was dropped, or a non-wgmma route given one, is refused, each
/// naming why; the golden's own routes pass.
#[test]
fn the_tensor_map_recompute_refuses_a_changed_digest() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces/nvidia-h200/wgmma-sweep.gat");
    let t = gemm_audit_model::RecordedGemmTrace::read(&path).unwrap();
    let wgmma = t
        .routes
        .iter()
        .find(|r| CudaKernel::from_route(r).is_ok_and(|k| k.is_wgmma()))
        .expect("a wgmma route");
    let mut changed = wgmma.clone();
    changed.tensor_map.as_mut().unwrap().digest.0[0] ^= 1;
    let bad = changed.tensor_map.as_ref().unwrap().digest.short();
    let e = CudaKernel::from_route(&changed).unwrap_err().to_string();
    assert!(
        e.contains("is not the") && e.contains("maps this build encodes"),
        "{e}"
    );
    assert!(e.contains(&bad), "{e}");

    let mut dropped = wgmma.clone();
    dropped.tensor_map = None;
    let e = CudaKernel::from_route(&dropped).unwrap_err().to_string();
    assert!(e.contains("has no tensor-map identity"), "{e}");

    let plain = t
        .routes
        .iter()
        .find(|r| CudaKernel::from_route(r).is_ok_and(|k| !k.is_wgmma()));
    if let Some(plain) = plain {
        let mut given = plain.clone();
        given.tensor_map = wgmma.tensor_map;
        let e = CudaKernel::from_route(&given).unwrap_err().to_string();
        assert!(e.contains("uses no tensor map"), "{e}");
    }
}
