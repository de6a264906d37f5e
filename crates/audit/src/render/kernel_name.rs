//! Kernel names for people: one GPU kernel's name as it was recorded
//! (`full`), as its signature's head (`head`: demangled, without return
//! type and parameter list) and as the short, stable form tables print
//! (`short`), with the SHA-256 of the full name that JSON and `show` keep
//! beside it.
//!
//! Profilers and traces name a kernel however its library compiled it: a
//! plain C name (`volta_sgemm_128x64_nn`, `nvjet_hsh_...`, `triton_tem_...`),
//! an Itanium-mangled symbol (`_ZN8cublasLt19splitKreduce_kernel...`), or
//! a whole demangled signature (`void cublasLt::splitKreduce_kernel<32,
//! 16, int, ...>(cublasLt::cublasSplitKParams<float>, ...)`). A table row
//! needs the name a reader recognises and that is the same every run; the
//! full name and its digest stay in JSON, so nothing is lost.

use crate::Digest;
use std::borrow::Cow;

/// Longest short name, in characters; a longer one is cut and keeps the
/// first 8 hex digits of its full name's digest, so two cut names never
/// read the same unless their full names are the same.
pub const MAX_SHORT_CHARS: usize = 96;

/// A kernel's name in the forms people and machines read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelName<'a> {
    full: &'a str,
    head: Cow<'a, str>,
    /// The nested name of a symbol the demangler could not read
    /// (`nvjet_...<...>`, `cutlass_cudnn_train::Kernel<...>`).
    mangled_base: Option<String>,
}

impl<'a> KernelName<'a> {
    /// Parses `full` (any of the forms above; never fails: a name it
    /// cannot read is its own head).
    pub fn new(full: &'a str) -> KernelName<'a> {
        let head = head_of(full);
        let mangled_base = match &head {
            Cow::Borrowed(h) if h.starts_with("_Z") => mangled_base(h),
            _ => None,
        };
        KernelName {
            full,
            head,
            mangled_base,
        }
    }

    /// The name as recorded.
    pub fn full(&self) -> &'a str {
        self.full
    }

    /// The signature's head: demangled, without its return type and
    /// parameter list, template arguments kept
    /// (`cublasLt::splitKreduce_kernel<32, 16, int, float, ...>`); a
    /// symbol the demangler cannot read (NVCC writes some) is its own
    /// head.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// The short, stable name for tables: the head with every template
    /// argument list elided to `<...>`, except a list of one type, which is
    /// kept in its own short form (`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4>`,
    /// where the argument is what tells CUTLASS kernels apart); at most
    /// [`MAX_SHORT_CHARS`] characters. A symbol the demangler cannot read
    /// shows its nested name (`cutlass_cudnn_train::Kernel<...>`).
    pub fn short(&self) -> String {
        let s = match &self.mangled_base {
            Some(base) => base.clone(),
            None => elide(&self.head),
        };
        if s.chars().count() <= MAX_SHORT_CHARS {
            return s;
        }
        let keep: String = s.chars().take(MAX_SHORT_CHARS - 14).collect();
        format!("{keep}...[{}]", &self.digest().to_hex()[..8])
    }

    /// The SHA-256 of the full name.
    pub fn digest(&self) -> Digest {
        Digest::sha256(self.full.as_bytes())
    }
}

/// The short name of a kernel, or of kernels joined by ` + ` (a vendor
/// call's kernels): [`KernelName::short`] of each.
pub fn kernel_display_name(name: &str) -> String {
    join_map(name, |k| KernelName::new(k).short())
}

/// The SHA-256 of a kernel's name, in hex, for JSON beside a short name.
pub fn kernel_digest(name: &str) -> String {
    KernelName::new(name).digest().to_hex()
}

/// `f` of each ` + `-joined part of `name`, joined again.
pub(crate) fn join_map(name: &str, f: impl Fn(&str) -> String) -> String {
    if name.contains(" + ") {
        name.split(" + ").map(f).collect::<Vec<_>>().join(" + ")
    } else {
        f(name)
    }
}

const ANONYMOUS: &str = "(anonymous namespace)";

/// The head of a kernel name: demangled where it is an Itanium symbol,
/// then without its return type and parameter list.
fn head_of(full: &str) -> Cow<'_, str> {
    let demangled = full
        .starts_with("_Z")
        .then(|| cpp_demangle::Symbol::new(full).ok()?.demangle().ok())
        .flatten();
    match demangled {
        Some(d) => Cow::Owned(cut_signature(&d).to_string()),
        None => Cow::Borrowed(cut_signature(full)),
    }
}

/// The nested name an Itanium symbol starts with, read without the
/// demangler (`_ZN19cutlass_cudnn_train6KernelI...` is
/// `cutlass_cudnn_train::Kernel<...>`): its source names up to the first
/// template argument list; `None` where it starts otherwise.
fn mangled_base(symbol: &str) -> Option<String> {
    let mut rest = symbol.strip_prefix("_Z")?;
    let nested = rest.starts_with('N');
    if nested {
        rest = &rest[1..];
    }
    let mut parts: Vec<&str> = Vec::new();
    loop {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            break;
        }
        let len: usize = rest[..digits].parse().ok()?;
        let name = rest.get(digits..digits + len)?;
        parts.push(name);
        rest = &rest[digits + len..];
        if !nested {
            break;
        }
    }
    if parts.is_empty() {
        return None;
    }
    let mut out = parts.join("::");
    if rest.starts_with('I') {
        out.push_str("<...>");
    }
    Some(out)
}

/// A demangled signature's name: the text between its return type (the
/// last space outside brackets before the name) and its parameter list
/// (the first `(` outside template arguments that does not open
/// `(anonymous namespace)` or follow `operator`).
fn cut_signature(s: &str) -> &str {
    let bytes = s.as_bytes();
    let mut depth = 0i32;
    let mut start = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => depth += 1,
            b'>' if depth > 0 => depth -= 1,
            b'(' if depth == 0 => {
                if s[i..].starts_with(ANONYMOUS) {
                    i += ANONYMOUS.len();
                    continue;
                }
                if s[..i].ends_with("operator") && s[i..].starts_with("()") {
                    i += 2;
                    continue;
                }
                if i > start {
                    return &s[start..i];
                }
            }
            b' ' if depth == 0 => start = i + 1,
            _ => {}
        }
        i += 1;
    }
    &s[start..]
}

/// `head` with its template argument lists elided (see
/// [`KernelName::short`]).
fn elide(head: &str) -> String {
    let mut out = String::with_capacity(head.len().min(128));
    let mut rest = head;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        let (inner, after) = match matching_close(&rest[open..]) {
            Some(close) => (&rest[open + 1..open + close], &rest[open + close + 1..]),
            None => (&rest[open + 1..], ""),
        };
        if one_type(inner) {
            out.push('<');
            out.push_str(&elide(inner.trim()));
            out.push('>');
        } else {
            out.push_str("<...>");
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Where the `<` that starts `s` closes, if it does.
fn matching_close(s: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'<' => depth += 1,
            b'>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether a template argument list is one type name: no comma or space
/// outside nested brackets (`float const`, `unsigned int` are not kept),
/// and a name (not a number, a `true`/`false`, a cast, a lambda).
fn one_type(inner: &str) -> bool {
    let inner = inner.trim();
    let mut depth = 0i32;
    for b in inner.bytes() {
        match b {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b',' | b' ' if depth == 0 => return false,
            _ => {}
        }
    }
    let first = inner.chars().next();
    first.is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && !matches!(inner, "true" | "false")
        // A function or a lambda's scope is no type name a reader wants.
        && !inner.contains('(')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(s: &str) -> String {
        KernelName::new(s).short()
    }

    #[test]
    fn cublas_signatures_lose_their_return_type_parameters_and_arguments() {
        // cuBLASLt's split-K reduce, as a profile names it.
        let n = "void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, false, true, false, false>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, void*, long, float*, int*)";
        assert_eq!(short(n), "cublasLt::splitKreduce_kernel<...>");
        assert_eq!(
            KernelName::new(n).head(),
            "cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, false, true, false, false>"
        );
        assert_eq!(KernelName::new(n).full(), n);
        // A return type with brackets and parentheses of its own.
        let gemv = "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, true, false, false, 7, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)";
        assert_eq!(short(gemv), "internal::gemvx::kernel<...>");
        // Plain C names stay as they are.
        for plain in [
            "volta_sgemm_128x64_nn",
            "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_TNN",
            "triton_tem_fused_mm_0",
            "triton__0d1d2d3d",
            "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1",
        ] {
            assert_eq!(short(plain), plain);
            assert_eq!(KernelName::new(plain).head(), plain);
        }
    }

    #[test]
    fn a_one_type_argument_is_kept_because_it_names_the_kernel() {
        assert_eq!(
            short(
                "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4::Params)"
            ),
            "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nt_align4>"
        );
        // Demangled, with nested templates: the one argument, elided.
        assert_eq!(
            short(
                "void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::conv::kernel::ImplicitGemmConvolution<cutlass_cudnn_train::gemm::GemmShape<128, 128, 32>, float> >(cutlass_cudnn_train::Params)"
            ),
            "cutlass_cudnn_train::Kernel<cutlass_cudnn_train::conv::kernel::ImplicitGemmConvolution<...>>"
        );
    }

    #[test]
    fn anonymous_namespaces_and_lambdas_do_not_end_the_name() {
        assert_eq!(
            short(
                "void at::native::(anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, bool const*, int, bool)"
            ),
            "at::native::(anonymous namespace)::softmax_warp_forward<...>"
        );
        assert_eq!(
            short("at::cuda::(anonymous namespace)::spin_kernel(long)"),
            "at::cuda::(anonymous namespace)::spin_kernel"
        );
        assert_eq!(
            short(
                "void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}>(int, at::native::arange_cuda_out(c10::Scalar const&)::{lambda(long)#1}, int*)"
            ),
            "(anonymous namespace)::elementwise_kernel_with_index<...>"
        );
        assert_eq!(
            short(
                "cask_cudnn_infer::computeBOffsetsKernel(cask_cudnn_infer::ComputeBOffsetsParams)"
            ),
            "cask_cudnn_infer::computeBOffsetsKernel"
        );
    }

    #[test]
    fn mangled_names_are_demangled_or_read_for_their_nested_name() {
        let reduce = "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT4_EEPKT2_PKT8_PT7_PT3_PKS2_SF_PKT9_S6_PSG_PvlPS2_PiSL_SL_SF_SF_SF_SF_SF_";
        assert_eq!(short(reduce), "cublasLt::splitKreduce_kernel<...>");
        assert!(
            KernelName::new(reduce)
                .head()
                .starts_with("cublasLt::splitKreduce_kernel<32, 16, int")
        );
        // A symbol the demangler does not read: a cuDNN CUTLASS
        // convolution cut short, as the trace's bound cuts the long ones.
        let conv = "_ZN19cutlass_cudnn_infer6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_4gemm9GemmShapeILi256ELi64ELi32EEENS1_";
        assert_eq!(short(conv), "cutlass_cudnn_infer::Kernel<...>");
        assert_eq!(KernelName::new(conv).head(), conv);
        // Not a symbol at all: kept whole.
        assert_eq!(short("_Zgarbage"), "_Zgarbage");
        // Cut by the trace's 1 KiB bound: brackets never close.
        assert_eq!(short("void f<int, g<float"), "f<...>");
    }

    #[test]
    fn long_names_are_cut_and_keep_their_digest() {
        let a = format!("Cijk_Ailk_Bjlk_SB_{}_A", "MT64x16x16_".repeat(20));
        let b = format!("Cijk_Ailk_Bjlk_SB_{}_B", "MT64x16x16_".repeat(20));
        let (sa, sb) = (short(&a), short(&b));
        assert_ne!(sa, sb, "cut names keep their digests apart");
        assert_eq!(sa.chars().count(), MAX_SHORT_CHARS - 14 + 3 + 10);
        assert!(
            sa.ends_with(&format!("[{}]", &kernel_digest(&a)[..8])),
            "{sa}"
        );
        assert_eq!(short(&a), sa, "stable");
    }

    #[test]
    fn joined_names_and_digests() {
        assert_eq!(
            kernel_display_name("nvjet_a + void cublasLt::splitKreduce_kernel<32>(int)"),
            "nvjet_a + cublasLt::splitKreduce_kernel<...>"
        );
        assert_eq!(
            kernel_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
