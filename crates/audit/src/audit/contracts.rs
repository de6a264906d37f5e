//! The numeric contracts checked on each workload's outputs: eager vs
//! replay, run to run, the CPU scalar-FMA reference, batch invariance and
//! contract parity, with the size of every difference.

use super::*;

pub(super) fn replay_check(
    report: &mut AuditReport,
    w: &Workload,
    outcome: &ReplayOutcome,
    graph: &[crate::physical::PhysicalNode],
) {
    const C: Contract = Contract::EagerVsReplay;
    // What the replayed graph held, every node bound.
    let coverage = match graph.len() {
        0 => String::new(),
        n => format!(
            "; graph of {n} nodes: {}",
            crate::physical::Coverage::of(graph)
        ),
    };
    let (verdict, detail) = match outcome {
        ReplayOutcome::Identical { launches } => (
            Verdict::Pass,
            format!(
                "{launches}/{launches} launches replayed bit-identical through the validated plan{coverage}"
            ),
        ),
        ReplayOutcome::Differs { launches } => (
            Verdict::Fail,
            format!("launches {launches:?} differ from the eager run"),
        ),
        ReplayOutcome::Refused { refusal } => (Verdict::Fail, format!("replay refused: {refusal}")),
    };
    for (i, g) in w.gemms.iter().enumerate() {
        let (v, d) = match outcome {
            ReplayOutcome::Identical { .. } => (Verdict::Pass, "replay bit-identical".to_string()),
            ReplayOutcome::Differs { launches } if !launches.contains(&i) => {
                (Verdict::Pass, "replay bit-identical".to_string())
            }
            ReplayOutcome::Differs { .. } => (
                Verdict::Fail,
                "replay output differs from eager".to_string(),
            ),
            ReplayOutcome::Refused { refusal } => {
                (Verdict::Fail, format!("replay refused: {refusal}"))
            }
        };
        report.case(C, &w.name, &g.name, v, d);
    }
    report.row(C, &w.name, verdict, detail);
}

pub(super) fn run_to_run_check(
    report: &mut AuditReport,
    w: &Workload,
    runs: usize,
    differing: &BTreeMap<usize, UlpStats>,
    partly_kept: &BTreeMap<usize, (usize, usize)>,
) {
    const C: Contract = Contract::RunToRun;
    let n = w.gemms.len();
    for (i, g) in w.gemms.iter().enumerate() {
        let (v, d) = if let Some(st) = differing.get(&i) {
            let part = partly_kept.get(&i).map_or(String::new(), |(kept, len)| {
                format!(
                    "; the fingerprints differ, the statistics cover the first {kept} of {len} bytes \
                     (outputs over {} MiB are kept only as far as a contract compares them)",
                    KEEP_WHOLE_OUTPUT_BYTES >> 20
                )
            });
            (
                Verdict::Fail,
                format!("output bits changed within {runs} runs ({st}{part})"),
            )
        } else {
            (Verdict::Pass, format!("bit-identical over {runs} runs"))
        };
        report.case(C, &w.name, &g.name, v, d);
    }
    let (verdict, detail) = if differing.is_empty() {
        (
            Verdict::Pass,
            format!("{n}/{n} GEMMs bit-identical over {runs} runs"),
        )
    } else {
        let mut names: Vec<&str> = differing
            .keys()
            .map(|&i| w.gemms[i].name.as_str())
            .collect();
        names.sort();
        let worst = differing
            .values()
            .copied()
            .reduce(UlpStats::worst)
            .expect("not empty");
        (
            Verdict::Fail,
            format!(
                "{} of {n} GEMMs changed bits between runs: {} (worst: {worst})",
                names.len(),
                names.join(", ")
            ),
        )
    };
    report.row(C, &w.name, verdict, detail);
}

pub(super) fn reference_check(
    report: &mut AuditReport,
    backend: &Backend,
    w: &Workload,
    routes: &[ResolvedGemmRoute],
    outputs: &[Vec<u8>],
    progress: &mut dyn Progress,
) -> Result<()> {
    const C: Contract = Contract::CpuReference;
    let mut compared = 0;
    let mut other_contract = 0;
    let mut mismatched = Vec::new();
    let mut worst: Option<UlpStats> = None;
    // The references are independent: computed on every host core, then
    // judged in launch order.
    let scalar: Vec<usize> = (0..routes.len().min(outputs.len()))
        .filter(|&i| routes[i].contract.kind == ContractKind::ScalarFma)
        .collect();
    let mut references = crate::util::map_in_order(&scalar, |&i| {
        backend.reference(&routes[i], w.gemms[i].input_seed(w.seed))
    })
    .into_iter();
    for (i, (route, out)) in routes.iter().zip(outputs).enumerate() {
        progress.advance(i + 1);
        if route.contract.kind != ContractKind::ScalarFma {
            other_contract += 1;
            continue;
        }
        compared += 1;
        let reference = references
            .next()
            .expect("one reference per scalar-FMA route")?;
        if &reference != out {
            mismatched.push(route.gemm.clone());
            let st = difference(route.dtype, &reference, out);
            worst = Some(worst.map_or(st, |w| w.worst(st)));
            report.case(
                C,
                &w.name,
                &route.gemm,
                Verdict::Fail,
                format!("differs from the CPU scalar-FMA reference ({st})"),
            );
        } else {
            report.case(
                C,
                &w.name,
                &route.gemm,
                Verdict::Pass,
                "equals the CPU scalar-FMA reference bit for bit",
            );
        }
    }
    if compared == 0 {
        report.row(
            C,
            &w.name,
            Verdict::Info,
            format!("no GEMM under the scalar-FMA contract; {other_contract} under other contracts not compared"),
        );
        return Ok(());
    }
    let (verdict, mut detail) = if mismatched.is_empty() {
        (
            Verdict::Pass,
            format!(
                "{compared}/{compared} scalar-FMA-contract outputs equal the CPU reference bit for bit"
            ),
        )
    } else {
        (
            Verdict::Fail,
            format!(
                "{} of {compared} differ from the CPU reference: {} (worst: {})",
                mismatched.len(),
                mismatched.join(", "),
                worst.expect("a mismatch was counted")
            ),
        )
    };
    if other_contract > 0 {
        detail.push_str(&format!(
            "; {other_contract} under other contracts not compared"
        ));
    }
    report.row(C, &w.name, verdict, detail);
    Ok(())
}

/// An M-sweep's (op, dtype, k, n, route choice).
type SweepKey = (String, String, u64, u64, String);

/// The M-sweeps of `w`: GEMMs that share op, dtype, k, n, route choice and
/// input seed, at two or more distinct m; keyed by (op, dtype, k, n,
/// route), members ordered by m (launch order among equal m).
fn invariance_groups(w: &Workload) -> Vec<(SweepKey, Vec<usize>)> {
    type Key = (String, String, u64, u64, String, u64);
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (i, g) in w.gemms.iter().enumerate() {
        let key = (
            g.op.to_string(),
            g.dtype.to_string(),
            g.k,
            g.n,
            g.route.to_string(),
            g.input_seed(w.seed),
        );
        groups.entry(key).or_default().push(i);
    }
    groups
        .into_iter()
        .filter_map(|((op, dtype, k, n, route, _), mut members)| {
            let distinct_m: HashSet<u64> = members.iter().map(|&i| w.gemms[i].m).collect();
            (distinct_m.len() >= 2).then(|| {
                members.sort_by_key(|&i| w.gemms[i].m);
                ((op, dtype, k, n, route), members)
            })
        })
        .collect()
}

/// The storage bytes of the rows every member of an M-sweep shares with
/// its smallest-m member: the part of each output batch invariance
/// compares.
fn shared_row_bytes(w: &Workload, members: &[usize]) -> usize {
    let base = &w.gemms[members[0]];
    base.m as usize * base.n as usize * crate::kernels::element_size(base.dtype)
}

/// Outputs up to this size are kept whole by the audit (for the
/// statistics of a run-to-run difference); larger ones only as far as a
/// contract compares them.
pub(super) const KEEP_WHOLE_OUTPUT_BYTES: usize = 8 << 20;

/// How many bytes of each launch's output the audit keeps on the host
/// ([`recorder::record_keeping`]): all of it for the CPU reference
/// (scalar-FMA routes), for contract parity and when it is at most
/// [`KEEP_WHOLE_OUTPUT_BYTES`]; else the rows batch invariance compares
/// (none outside an M-sweep). Fingerprints always cover whole outputs.
pub(super) fn kept_bytes(w: &Workload, routes: &[ResolvedGemmRoute]) -> Vec<usize> {
    let mut keep: Vec<usize> = w
        .gemms
        .iter()
        .zip(routes)
        .map(|(g, r)| {
            let len = g.m as usize * g.n as usize * crate::kernels::element_size(g.dtype);
            if r.contract.kind == ContractKind::ScalarFma || len <= KEEP_WHOLE_OUTPUT_BYTES {
                usize::MAX
            } else {
                0
            }
        })
        .collect();
    for (_, members) in invariance_groups(w) {
        let rows = shared_row_bytes(w, &members);
        for i in members {
            keep[i] = keep[i].max(rows);
        }
    }
    for members in parity_groups(w, routes) {
        for i in members {
            keep[i] = usize::MAX;
        }
    }
    keep
}

/// Each member's rows must equal the smallest-m member's rows of its
/// M-sweep ([`invariance_groups`]) if the route promises batch invariance.
pub(super) fn batch_invariance_checks(
    report: &mut AuditReport,
    w: &Workload,
    routes: &[ResolvedGemmRoute],
    outputs: &[Vec<u8>],
) {
    const C: Contract = Contract::BatchInvariance;
    for ((op, dtype, k, n, route), members) in invariance_groups(w) {
        let distinct_m: HashSet<u64> = members.iter().map(|&i| w.gemms[i].m).collect();
        let spec: &GemmSpec = &w.gemms[members[0]];
        // Rows 0..m_min of every member against the smallest-m member (the M=1 case when present).
        let base = members[0];
        let shared = shared_row_bytes(w, &members).min(outputs[base].len());
        let promised = spec.route.promises_batch_invariance();
        let group = format!("{route} {op} {dtype} k={k} n={n}");
        let mut cells = Vec::new();
        let mut first_diff = None;
        for &i in &members {
            let rows = |j: usize| outputs[j].get(..shared).unwrap_or(&outputs[j]);
            let identical = rows(i) == rows(base);
            if !identical && first_diff.is_none() {
                first_diff = Some(w.gemms[i].m);
            }
            let diff = (!identical).then(|| difference(spec.dtype, rows(base), rows(i)));
            cells.push(MatrixCell {
                gemm: w.gemms[i].name.clone(),
                m: w.gemms[i].m,
                identical,
                difference: diff,
                contract: routes[i].contract.to_string(),
                kernel: physical_kernel(&routes[i]),
            });
            let (v, d) = match (identical, promised) {
                (true, _) => (
                    Verdict::Pass,
                    format!("rows equal the m={} rows", w.gemms[base].m),
                ),
                (false, true) => (
                    Verdict::Fail,
                    format!(
                        "rows differ from the m={} rows ({})",
                        w.gemms[base].m,
                        diff.expect("set when not identical")
                    ),
                ),
                (false, false) => (
                    Verdict::Info,
                    format!(
                        "rows differ from the m={} rows ({}; not promised by {route})",
                        w.gemms[base].m,
                        diff.expect("set when not identical")
                    ),
                ),
            };
            report.case(C, &w.name, &w.gemms[i].name, v, d);
        }
        let mut ms: Vec<u64> = distinct_m.into_iter().collect();
        ms.sort();
        let base_m = w.gemms[base].m;
        let (verdict, detail) = group_verdict(
            report, w, &members, &cells, first_diff, promised, &route, base_m,
        );
        report.row(C, format!("{} {group} m={ms:?}", w.name), verdict, detail);
        report.matrices.push(BatchMatrix {
            workload: w.name.clone(),
            group,
            promised,
            cells,
        });
    }
}

/// The verdict of one batch-invariance group: PASS when its rows agree
/// across m (or FAIL when they differ although the route promises
/// invariance); INFO when nothing was promised, saying whether the GEMMs
/// were at least deterministic (never contradicting their run-to-run
/// rows) and which kernel served each m.
#[allow(clippy::too_many_arguments)] // the group's facts, computed once by the caller
fn group_verdict(
    report: &AuditReport,
    w: &Workload,
    members: &[usize],
    cells: &[MatrixCell],
    first_diff: Option<u64>,
    promised: bool,
    route: &str,
    base_m: u64,
) -> (Verdict, String) {
    let mut contracts: Vec<String> = cells.iter().map(|c| c.contract.clone()).collect();
    contracts.dedup();
    match (first_diff, promised) {
        (None, true) => (
            Verdict::Pass,
            format!("rows identical across m ({})", contracts.join(", ")),
        ),
        (None, false) => (
            Verdict::Info,
            format!("rows identical across m, not promised by {route}"),
        ),
        (Some(m), true) => (
            Verdict::Fail,
            format!("rows of m={m} differ from m={base_m} although {route} promises invariance"),
        ),
        (Some(m), false) => {
            let differing: Vec<String> = cells
                .iter()
                .filter(|c| !c.identical)
                .map(|c| c.m.to_string())
                .collect();
            // Call it deterministic only when run-to-run held for every
            // member: a message must not contradict that verdict.
            let unstable: Vec<String> = members
                .iter()
                .filter(|&&i| {
                    report.cases.iter().any(|c| {
                        c.contract == Contract::RunToRun
                            && c.workload == w.name
                            && c.gemm == w.gemms[i].name
                            && c.verdict == Verdict::Fail
                    })
                })
                .map(|&i| w.gemms[i].m.to_string())
                .collect();
            let what = if unstable.is_empty() {
                "deterministic but NOT batch invariant".to_string()
            } else {
                format!(
                    "NOT batch invariant, and not deterministic either (run-to-run differs at m={})",
                    unstable.join(",")
                )
            };
            (
                Verdict::Info,
                format!(
                    "{what}: rows differ from m={base_m} at m={} (first at m={m}); kernels by m: {}",
                    differing.join(","),
                    kernel_runs(cells)
                ),
            )
        }
    }
}

/// How two outputs of `dtype` differ; a size mismatch (which a backend
/// bug could cause) counts every element of the longer one as differing.
pub(super) fn difference(dtype: crate::vocab::DType, a: &[u8], b: &[u8]) -> UlpStats {
    ulp_stats(dtype, a, b).unwrap_or_else(|| {
        let elements = (a.len().max(b.len()) / crate::kernels::element_size(dtype)) as u64;
        UlpStats {
            elements,
            differing: elements,
            max_ulp: u64::MAX,
        }
    })
}

/// A kernel symbol for people: C++ symbols (cuBLAS, CUTLASS) demangled and
/// cut before their parameter list (`cublasLt::splitKreduce_kernel<32, 16,
/// ...>`); anything else as it is. Each of ` + `-joined symbols alike. The
/// head of [`crate::render::kernel_name::KernelName`].
pub fn display_kernel(symbol: &str) -> String {
    crate::render::kernel_name::join_map(symbol, |k| {
        crate::render::kernel_name::KernelName::new(k)
            .head()
            .to_string()
    })
}

/// At most `n` characters of `s`, with `...` when cut (on a character
/// boundary: symbols from files can hold any UTF-8).
pub(super) fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() > n {
        format!(
            "{}...",
            s.chars().take(n.saturating_sub(3)).collect::<String>()
        )
    } else {
        s.to_string()
    }
}

/// Consecutive batch sizes that ran the same kernel(s), e.g.
/// `m=1..16: A + B; m=64..4096: C`, with symbols demangled and shortened.
pub(super) fn kernel_runs(cells: &[MatrixCell]) -> String {
    let short = |k: &str| {
        k.split(" + ")
            .map(|s| shorten(&display_kernel(s), 64))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    let mut runs: Vec<(u64, u64, &str)> = Vec::new();
    for c in cells {
        match runs.last_mut() {
            Some((_, hi, k)) if *k == c.kernel => *hi = c.m,
            _ => runs.push((c.m, c.m, &c.kernel)),
        }
    }
    runs.iter()
        .map(|(lo, hi, k)| {
            if lo == hi {
                format!("m={lo}: {}", short(k))
            } else {
                format!("m={lo}..{hi}: {}", short(k))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The kernel a report names for a route: the physical kernels a vendor
/// call became, or the custom kernel's symbol.
pub(super) fn physical_kernel(r: &ResolvedGemmRoute) -> String {
    match &r.vendor {
        Some(v) if !v.physical_kernels.is_empty() => v.physical_kernels.join(" + "),
        _ => r.kernel_symbol.clone(),
    }
}

/// The contract-parity groups of `w`: GEMMs of one problem (op, dtype,
/// shape, seed) under one portable contract, served by two or more
/// distinct kernels; members in launch order.
fn parity_groups(w: &Workload, routes: &[ResolvedGemmRoute]) -> Vec<Vec<usize>> {
    let portable = |k: &ContractKind| {
        matches!(
            k,
            ContractKind::ScalarFma
                | ContractKind::SplitKFixed
                | ContractKind::TensorCoreTileParity
        )
    };
    // (op, dtype, m, k, n, seed, contract)
    type Problem = (String, String, u64, u64, u64, u64, String);
    let mut groups: BTreeMap<Problem, Vec<usize>> = BTreeMap::new();
    for (i, (g, r)) in w.gemms.iter().zip(routes).enumerate() {
        if !portable(&r.contract.kind) {
            continue;
        }
        let key = (
            g.op.to_string(),
            g.dtype.to_string(),
            g.m,
            g.k,
            g.n,
            g.input_seed(w.seed),
            r.contract.to_string(),
        );
        groups.entry(key).or_default().push(i);
    }
    groups
        .into_values()
        .filter(|members| {
            let distinct: HashSet<&str> = members
                .iter()
                .map(|&i| routes[i].kernel_symbol.as_str())
                .collect();
            members.len() >= 2 && distinct.len() >= 2
        })
        .collect()
}

/// GEMMs of the same problem (op, dtype, shape, seed) served under the same
/// numeric contract by different kernels (tiled vs scalar, the dispatcher's
/// pick vs the fixed route, the large vs the small tensor-core tile family)
/// must give the same bits: the contract, not the kernel, decides them.
pub(super) fn contract_parity_checks(
    report: &mut AuditReport,
    w: &Workload,
    routes: &[ResolvedGemmRoute],
    outputs: &[Vec<u8>],
) {
    const C: Contract = Contract::ContractParity;
    let mut pairs = 0;
    let mut kernels: Vec<String> = Vec::new();
    let mut broken = Vec::new();
    for members in parity_groups(w, routes) {
        let base = members[0];
        for &i in &members[1..] {
            pairs += 1;
            let same = outputs[i] == outputs[base];
            let what = format!(
                "{} vs {}",
                routes[i].kernel_symbol, routes[base].kernel_symbol
            );
            if !kernels.contains(&routes[i].contract.to_string()) {
                kernels.push(routes[i].contract.to_string());
            }
            if same {
                report.case(
                    C,
                    &w.name,
                    &w.gemms[i].name,
                    Verdict::Pass,
                    format!("bit-identical to {} ({what})", w.gemms[base].name),
                );
            } else {
                broken.push(format!("{} vs {}", w.gemms[i].name, w.gemms[base].name));
                report.case(
                    C,
                    &w.name,
                    &w.gemms[i].name,
                    Verdict::Fail,
                    format!("differs from {} ({what})", w.gemms[base].name),
                );
            }
        }
    }
    if pairs == 0 {
        return;
    }
    let (verdict, detail) = if broken.is_empty() {
        (
            Verdict::Pass,
            format!(
                "{pairs}/{pairs} same-problem pairs on different kernels bit-identical under {}",
                kernels.join(", ")
            ),
        )
    } else {
        (
            Verdict::Fail,
            format!(
                "{} of {pairs} pairs differ under one contract: {}",
                broken.len(),
                broken.join(", ")
            ),
        )
    };
    report.row(C, &w.name, verdict, detail);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    /// A batch-invariance row never calls GEMMs deterministic when their
    /// run-to-run check failed.
    #[test]
    fn kernels_are_demangled_and_shortened_on_character_boundaries() {
        assert_eq!(
            display_kernel(
                "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT4_EEPKT2_PKT8_PT7_PT3_PKS2_SF_PKT9_S6_PSG_PvlPS2_PiSL_SL_SF_SF_SF_SF_SF_"
            ),
            "cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>"
        );
        assert_eq!(display_kernel("gemm_tiled_nn_f32"), "gemm_tiled_nn_f32");
        assert_eq!(
            display_kernel(
                "_ZN7cutlass7Kernel2I42cutlass_80_simt_sgemm_128x32_8x5_nn_align1EEvNT_6ParamsE + gemm_x"
            ),
            "cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1> + gemm_x"
        );
        assert_eq!(shorten("ééééé", 4), "é...");
        assert_eq!(shorten("abc", 4), "abc");
    }

    #[test]
    fn batch_invariance_does_not_contradict_run_to_run() {
        let w = Workload::from_json(
            r#"{"name": "w", "gemm": [
                {"name": "a@1", "op": "nn", "dtype": "f32", "m": 1, "k": 64, "n": 4, "route": "split-k-atomic:4"},
                {"name": "a@2", "op": "nn", "dtype": "f32", "m": 2, "k": 64, "n": 4, "route": "split-k-atomic:4"}
            ]}"#,
        )
        .unwrap();
        let cpu = CpuBackend::default();
        let routes: Vec<_> = w.gemms.iter().map(|g| cpu.resolve(g).unwrap()).collect();
        // Row 0 differs between m=1 and m=2.
        let outputs = vec![vec![0u8; 16], vec![1u8; 32]];
        let row = |report: &AuditReport| {
            report
                .checks
                .iter()
                .find(|c| c.contract == Contract::BatchInvariance)
                .unwrap()
                .detail
                .clone()
        };
        let mut report = AuditReport::new("cpu", 2);
        batch_invariance_checks(&mut report, &w, &routes, &outputs);
        assert!(row(&report).starts_with("deterministic but NOT batch invariant"));

        let mut report = AuditReport {
            checks: Vec::new(),
            matrices: Vec::new(),
            ..report
        };
        report.case(
            Contract::RunToRun,
            "w",
            "a@2",
            Verdict::Fail,
            "2 distinct outputs",
        );
        batch_invariance_checks(&mut report, &w, &routes, &outputs);
        let d = row(&report);
        assert!(!d.contains("deterministic but"), "{d}");
        assert!(
            d.contains("not deterministic either (run-to-run differs at m=2)"),
            "{d}"
        );
    }

    /// The audit keeps small outputs whole, the CPU reference's and
    /// contract parity's whole, and of any other large output only the
    /// rows batch invariance compares.
    #[test]
    fn the_audit_keeps_only_what_its_contracts_compare() {
        let w = Workload::from_json(
            r#"{"name": "w", "gemm": [
                {"name": "sweep@1", "op": "nn", "dtype": "f32", "m": 1, "k": 8, "n": 1024, "route": "split-k-fixed:2"},
                {"name": "sweep@4096", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 1024, "route": "split-k-fixed:2"},
                {"name": "lone", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 768, "route": "split-k-fixed:2"},
                {"name": "scalar", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 640, "route": "scalar-fma"},
                {"name": "p1", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 896, "route": "split-k-fixed:2"},
                {"name": "p2", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 896, "route": "split-k-fixed:2"}
            ]}"#,
        )
        .unwrap();
        let cpu = CpuBackend::default();
        let mut routes: Vec<_> = w.gemms.iter().map(|g| cpu.resolve(g).unwrap()).collect();
        // p1 and p2: one problem, one contract, two kernels.
        routes[5].kernel_symbol = "another_kernel".into();
        let keep = kept_bytes(&w, &routes);
        assert_eq!(keep[0], usize::MAX, "4 KiB: kept whole");
        assert_eq!(
            keep[1],
            1024 * 4,
            "16 MiB: only the m=1 rows of its M-sweep"
        );
        assert_eq!(keep[2], 0, "12 MiB, compared by no contract");
        assert_eq!(keep[3], usize::MAX, "the CPU reference compares it whole");
        assert_eq!(
            &keep[4..],
            &[usize::MAX, usize::MAX],
            "contract parity compares them whole"
        );
    }

    /// A run-to-run difference in an output kept in part says so.
    #[test]
    fn a_partly_kept_run_to_run_difference_says_what_it_covers() {
        let w = Workload::from_json(
            r#"{"name": "w", "gemm": [
                {"name": "a", "op": "nn", "dtype": "f32", "m": 4096, "k": 8, "n": 1024, "route": "split-k-fixed:2"}
            ]}"#,
        )
        .unwrap();
        let st = UlpStats {
            elements: 1024,
            differing: 0,
            max_ulp: 0,
        };
        let mut report = AuditReport::new("cpu", 2);
        let differing = BTreeMap::from([(0, st)]);
        run_to_run_check(
            &mut report,
            &w,
            2,
            &differing,
            &BTreeMap::from([(0, (4096, 16 << 20))]),
        );
        let case = report.cases.iter().find(|c| c.gemm == "a").unwrap();
        assert_eq!(case.verdict, Verdict::Fail);
        assert!(
            case.detail
                .contains("the statistics cover the first 4096 of 16777216 bytes"),
            "{}",
            case.detail
        );
    }
}
