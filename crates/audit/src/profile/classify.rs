//! The one rule that says what a GPU kernel is, by its name: a GEMM, the
//! reduce kernel of a split-K GEMM, an attention, a convolution, or other
//! work. The importer's binder, the census and the Python recorder (whose
//! profile goes through the same binder, and which exposes this function
//! as `gemm_audit.kernel_class`) all decide with [`KernelClass::of`];
//! docs/profiles.md states the rule.
//!
//! The rule reads the kernel's head ([`KernelName::head`]: demangled,
//! without return type and parameter list, so a parameter type never
//! decides; a symbol the demangler cannot read is read whole), lowercased, and takes the first class whose marks it holds,
//! in this order:
//!
//! 1. attention: `fmha`, `flash_fwd`, `flash_bwd`, `flash_attn`, `sdpa`;
//! 2. convolution: `convol`, `conv1d`, `conv2d`, `conv3d`, `3dconv`,
//!    `fprop`, `dgrad`, `wgrad`, `winograd`, `cutlass_cudnn`, `cask_cudnn`,
//!    or `cudnn` right after a letter or digit (cuDNN's convolution
//!    kernels: `volta_scudnn_...`, `s884cudnn_...`);
//! 3. GEMM reduce: `splitkreduce`, `split_k_reduce`, `reducesplitk`, or
//!    `reduce` with `gemm` or `splitk`;
//! 4. GEMM: `gemm`, `gemv`, `nvjet`, `matmul`, `xmma`, `cutlass`, `wgmma`,
//!    `triton_tem_`, `splitk`, `cijk_` (the `gemm` of the library name
//!    `fbgemm` is no mark: FBGEMM's embedding kernels are not GEMMs);
//! 5. other.
//!
//! Convolutions come before GEMMs because cuDNN's and CUTLASS's
//! implicit-GEMM convolutions carry GEMM marks (`xmma`, `implicit_gemm`,
//! `cutlass`, `splitK`): a convolution is a convolution whichever of them
//! its name happens to hold.

use crate::render::kernel_name::KernelName;
use serde::Serialize;

/// What a kernel computes, as far as its name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelClass {
    /// A matrix multiply: cuBLAS (`sgemm`, `gemv`, cuBLASLt's `nvjet`),
    /// CUTLASS, `xmma` GEMMs, Triton templates (`triton_tem_`), rocBLAS's
    /// Tensile (`Cijk_`).
    Gemm,
    /// The kernel that folds a split-K GEMM's partial sums
    /// (`splitKreduce_kernel`): a second kernel of the GEMM before it.
    GemmReduce,
    /// An attention kernel (flash attention, FMHA, SDPA), whose core is two
    /// GEMMs: GEMM-family, as a GEMM of its region where no GEMM op owns it.
    Attention,
    /// A convolution, implicit GEMM or not (cuDNN's, CUTLASS's, Winograd):
    /// counted as a convolution kernel, never as a GEMM or other work.
    Convolution,
    /// Anything else (elementwise, reductions, copies' kernels,
    /// collectives).
    Other,
}

const ATTENTION: [&str; 5] = ["fmha", "flash_fwd", "flash_bwd", "flash_attn", "sdpa"];
const CONVOLUTION: [&str; 11] = [
    "convol",
    "conv1d",
    "conv2d",
    "conv3d",
    "3dconv",
    "fprop",
    "dgrad",
    "wgrad",
    "winograd",
    "cutlass_cudnn",
    "cask_cudnn",
];
const GEMM_REDUCE: [&str; 3] = ["splitkreduce", "split_k_reduce", "reducesplitk"];
const GEMM: [&str; 10] = [
    "gemm",
    "gemv",
    "nvjet",
    "matmul",
    "xmma",
    "cutlass",
    "wgmma",
    "triton_tem_",
    "splitk",
    "cijk_",
];

impl KernelClass {
    /// The class of the kernel named `name` (see the module's rule).
    pub fn of(name: &str) -> KernelClass {
        // FBGEMM's name holds `gemm`; its embedding and quantization
        // kernels are not GEMMs (its GEMMs are CUTLASS's, and say so).
        let head = KernelName::new(name)
            .head()
            .to_ascii_lowercase()
            .replace("fbgemm", "fb");
        let has = |marks: &[&str]| marks.iter().any(|m| head.contains(m));
        if has(&ATTENTION) {
            KernelClass::Attention
        } else if has(&CONVOLUTION) || cudnn_engine(&head) {
            KernelClass::Convolution
        } else if has(&GEMM_REDUCE)
            || (head.contains("reduce") && (head.contains("gemm") || head.contains("splitk")))
        {
            KernelClass::GemmReduce
        } else if has(&GEMM) {
            KernelClass::Gemm
        } else {
            KernelClass::Other
        }
    }

    /// Whether it is GEMM-family: bound as a GEMM's launch, or recorded as
    /// a GEMM of its region where no GEMM op owns it.
    pub fn is_gemm_family(self) -> bool {
        matches!(
            self,
            KernelClass::Gemm | KernelClass::GemmReduce | KernelClass::Attention
        )
    }

    /// Its name in JSON and messages: `gemm`, `gemm-reduce`, `attention`,
    /// `convolution`, `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            KernelClass::Gemm => "gemm",
            KernelClass::GemmReduce => "gemm-reduce",
            KernelClass::Attention => "attention",
            KernelClass::Convolution => "convolution",
            KernelClass::Other => "other",
        }
    }
}

impl std::fmt::Display for KernelClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `cudnn` right after a letter or digit: the precision prefix of cuDNN's
/// own convolution kernels (`scudnn`, `hcudnn`, `s884cudnn`), where a
/// library prefix (`cudnn_infer_`, `cudnn::`) follows nothing or `_`/`:`.
fn cudnn_engine(lower_head: &str) -> bool {
    lower_head
        .match_indices("cudnn")
        .any(|(i, _)| i > 0 && lower_head.as_bytes()[i - 1].is_ascii_alphanumeric())
}

/// Whether a kernel's name says it splits its reduction (`splitK`,
/// `split_k`) or folds split partials ([`KernelClass::GemmReduce`]): a
/// reduction order that may depend on the problem's size. The census
/// flags a GEMM family served by one.
pub fn splits_k(name: &str) -> bool {
    let head = KernelName::new(name).head().to_ascii_lowercase();
    head.contains("splitk")
        || head.contains("split_k")
        || KernelClass::of(name) == KernelClass::GemmReduce
}

#[cfg(test)]
mod tests {
    use super::*;
    use KernelClass::*;

    #[test]
    fn cudnn_convolutions_are_convolutions_whatever_their_name_holds() {
        // The two kernels of a V100 training step that the old
        // substring rule split: one a GEMM (it says splitK), one other.
        assert_eq!(
            KernelClass::of("cudnn_train_volta_scudnn_128x128_stridedB_splitK_medium_nn_v1"),
            Convolution
        );
        assert_eq!(
            KernelClass::of("cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1"),
            Convolution
        );
        for conv in [
            "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_infer",
            "sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_split_k_kernel_cudnn_train",
            "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x256_16x4_nhwc_align4>(cutlass_tensorop_s1688dgrad_optimized_tf32_64x256_16x4_nhwc_align4::Params)",
            "void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK<cutlass_cudnn_train::MatrixShape<4, 128>, float> >(int)",
            "cask_cudnn_train::computeWgradSplitKOffsetsKernel(cask_cudnn_train::ComputeSplitKOffsetsParams)",
            "cask_cudnn_infer::computeBOffsetsKernel(cask_cudnn_infer::ComputeBOffsetsParams)",
            "cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
            "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)",
            "void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)",
            "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int)",
            "cudnn_infer_volta_scudnn_128x64_3dconv_fprop_medium_nn_v1",
        ] {
            assert_eq!(KernelClass::of(conv), Convolution, "{conv}");
            assert!(!KernelClass::of(conv).is_gemm_family());
        }
        // A mangled CUTLASS convolution (the start of one NVCC wrote,
        // which the demangler cannot read: it is read whole).
        assert_eq!(
            KernelClass::of(
                "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi64ELi128ELi32EEEEEEEEvNT_6ParamsE"
            ),
            Convolution
        );
    }

    #[test]
    fn gemms_reduces_attention_and_other_work() {
        for gemm in [
            "volta_sgemm_128x64_nn",
            "ampere_gcgemm_64x64_nt",
            "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_TNN",
            "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT",
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4::Params)",
            "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, true, false, false, 7, cublasGemvParams<float> >(cublasGemvParams<float>)",
            "void magma_sgemmEx_kernel<float, float, float, false, false, 6, 3, 5, 3, 3>(int, int, int, Tensor, int)",
            "triton_tem_fused_mm_0",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
            "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN",
        ] {
            assert_eq!(KernelClass::of(gemm), Gemm, "{gemm}");
        }
        for reduce in [
            "splitKreduce_kernel",
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasLt::cublasSplitKParams<float>, float const*)",
            "void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>, float const*)",
        ] {
            assert_eq!(KernelClass::of(reduce), GemmReduce, "{reduce}");
            assert!(splits_k(reduce));
        }
        assert_eq!(
            KernelClass::of(
                "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128> >(Flash_fwd_params)"
            ),
            Attention
        );
        for other in [
            "triton_poi_fused_add_cos_sin_0",
            "triton__0d1d2d3d",
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4>)",
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*)",
            "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long, 2ul>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)",
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, int*)",
            // FBGEMM's namespace in a parameter type, which the old
            // substring rule read as a GEMM.
            "void bounds_check_indices_kernel<long, false>(at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>, long, fbgemm_gpu::FixedDivisor)",
            // A GEMM mark in a parameter type does not make a GEMM.
            "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, cudnn::reduced_divisor, cublasGemmParams)",
        ] {
            assert_eq!(KernelClass::of(other), Other, "{other}");
            assert!(!splits_k(other), "{other}");
        }
        assert!(splits_k("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT"));
        assert!(!splits_k("volta_sgemm_128x64_nn"));
    }
}
