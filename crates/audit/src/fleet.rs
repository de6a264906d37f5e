//! Every device of a host: run the same work on several devices at once
//! (one worker thread and one backend per device, `--device all`) and hold
//! them to the `gpu-to-gpu` contract.
//!
//! **`gpu-to-gpu`**: on every device of one device class (equal
//! [`crate::DeviceIdentity`]: name, compute capability, multiprocessors,
//! driver) every launch must be served by the same route, and where its
//! contract promises the same bits on one class (every contract but
//! `atomic-unordered`: [`crate::compare::promises_same_bits`]) give the same
//! output fingerprint. Each launch is put to a vote
//! ([`crate::compare::compare`], the majority is the truth); a device that
//! disagrees is a FAIL naming the launch and the device (ordinal, PCI bus
//! id, UUID), and a tie is a FAIL naming every side. `atomic-unordered`
//! launches are reported per device as INFO, and so are launches whose
//! outputs were not observed (nothing is said of their bits). Devices are
//! told apart only by their [`DeviceLabel`] and volatile metadata, which
//! never enter a digest or a comparison.
//!
//! Everything here works on [`AuditReport`]s and [`RecordedGemmTrace`]s, so
//! it is tested without a GPU: CPU backends stand in for devices, and
//! [`plant_fault`] perturbs one of them.

use crate::DeviceIdentity;
use crate::RecordedGemmTrace;
use crate::audit::{AuditReport, Case, Check, Contract, Verdict};
use crate::backend::{Backend, CapturedLaunches, DeviceLabel, ErasedLaunches, GemmBackend};
use crate::compare::{self, Comparison, Member};
use crate::identity::{GemmRouteIdentity, VolatileMetadata};
use crate::kernels::GemmSpec;
use crate::kernels::TimedOutput;
use crate::policy::GemmPolicy;
use crate::route::ResolvedGemmRoute;
use crate::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

mod judge;

/// The comparison of the devices of one device class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClassComparison {
    /// The device class, e.g. `NVIDIA H200`.
    pub device_class: String,
    /// The devices of the class that were compared, in ascending ordinal.
    pub devices: Vec<DeviceLabel>,
    /// The vote on every launch of every workload.
    pub comparison: Comparison,
}

/// The `gpu-to-gpu` contract's result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GpuToGpu {
    /// Verdict rows: one per (workload, device class), plus INFO rows per
    /// device for launches without a cross-device promise.
    pub checks: Vec<Check>,
    /// One case per launch per (workload, device class) (JUnit test cases).
    pub cases: Vec<Case>,
    /// The votes behind the rows, one per device class of two or more devices.
    pub classes: Vec<ClassComparison>,
}

impl GpuToGpu {
    /// True when no row failed (also when nothing was compared).
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict != Verdict::Fail)
    }
}

/// The `gpu-to-gpu` contract over per-device audits: the traces each
/// device's audit recorded (`AuditReport::traces`), voted launch by launch
/// within each device class. Empty when fewer than two devices are given.
pub fn gpu_to_gpu(devices: &[(DeviceLabel, AuditReport)]) -> GpuToGpu {
    let traces: Vec<(DeviceLabel, RecordedGemmTrace)> = devices
        .iter()
        .flat_map(|(d, r)| r.traces.iter().map(move |t| (d.clone(), t.clone())))
        .collect();
    gpu_to_gpu_traces(&traces)
}

/// The `gpu-to-gpu` contract over traces, each labelled with the device it
/// was recorded on (any number of workloads per device). Traces are grouped
/// by device class (equal device identity) and workload; in each group
/// every launch is voted on ([`compare::compare`]). Empty when fewer than
/// two distinct devices are given.
pub fn gpu_to_gpu_traces(traces: &[(DeviceLabel, RecordedGemmTrace)]) -> GpuToGpu {
    let mut out = GpuToGpu::default();
    let mut all: Vec<&DeviceLabel> = traces.iter().map(|(d, _)| d).collect();
    all.sort();
    all.dedup();
    if all.len() < 2 {
        return out;
    }
    // Device classes in order of first appearance: equal DeviceIdentity.
    let mut classes: Vec<(&DeviceIdentity, Vec<&(DeviceLabel, RecordedGemmTrace)>)> = Vec::new();
    for entry in traces {
        let id = &entry.1.context.device;
        match classes.iter_mut().find(|(c, _)| *c == id) {
            Some((_, list)) => list.push(entry),
            None => classes.push((id, vec![entry])),
        }
    }
    for (id, entries) in classes {
        let mut labels: Vec<DeviceLabel> = entries.iter().map(|(d, _)| d.clone()).collect();
        labels.sort();
        labels.dedup();
        if labels.len() < 2 {
            out.checks.push(Check {
                contract: Contract::GpuToGpu,
                subject: id.class.clone(),
                verdict: Verdict::Info,
                detail: format!(
                    "{} is the only device of its class (driver {}): nothing to compare it with",
                    labels[0], id.driver
                ),
            });
            continue;
        }
        let members: Vec<Member> = entries
            .iter()
            .map(|(d, t)| Member {
                label: d.to_string(),
                trace: t.clone(),
                device: Some(d.to_string()),
            })
            .collect();
        let comparison = compare::compare(&members);
        for g in &comparison.groups {
            judge::judge_group(&mut out, g, &id.class, &labels);
        }
        out.classes.push(ClassComparison {
            device_class: id.class.clone(),
            devices: labels,
            comparison,
        });
    }
    out
}

/// One device's audit.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceAudit {
    /// The device.
    pub device: DeviceLabel,
    /// Its audit, as `audit --device N` reports it.
    pub report: AuditReport,
}

/// The audit of several devices: each device's own audit and the
/// `gpu-to-gpu` contract across them (`audit --device all`).
#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    /// Per-device audits, in ascending ordinal.
    pub devices: Vec<DeviceAudit>,
    /// The cross-device contract.
    pub gpu_to_gpu: GpuToGpu,
}

impl FleetReport {
    /// The report of `devices`, with the `gpu-to-gpu` contract computed
    /// from their traces.
    pub fn new(devices: Vec<(DeviceLabel, AuditReport)>) -> FleetReport {
        let gpu_to_gpu = gpu_to_gpu(&devices);
        FleetReport {
            devices: devices
                .into_iter()
                .map(|(device, report)| DeviceAudit { device, report })
                .collect(),
            gpu_to_gpu,
        }
    }

    /// True when every device's audit passed and the devices agree.
    pub fn passed(&self) -> bool {
        self.gpu_to_gpu.passed() && self.devices.iter().all(|d| d.report.passed())
    }

    /// One [`AuditReport`] holding every device's rows (subjects prefixed
    /// `devN `, workloads of cases, matrices and timings prefixed `devN.`)
    /// followed by the `gpu-to-gpu` rows and cases: for the verdict table,
    /// the Markdown/HTML report and JUnit.
    pub fn combined(&self) -> AuditReport {
        let backend = self
            .devices
            .first()
            .map(|d| d.device.backend.clone())
            .unwrap_or_default();
        let runs = self.devices.first().map(|d| d.report.runs).unwrap_or(2);
        let mut out = AuditReport::new(
            &format!("{backend} on {} devices", self.devices.len()),
            runs,
        );
        let notes: Vec<String> = self
            .devices
            .iter()
            .filter_map(|d| d.report.note.clone())
            .collect();
        out.note = notes.first().cloned();
        for d in &self.devices {
            let tag = format!("dev{}", d.device.ordinal);
            let r = &d.report;
            out.checks.extend(r.checks.iter().map(|c| Check {
                subject: format!("{tag} {}", c.subject),
                ..c.clone()
            }));
            out.cases.extend(r.cases.iter().map(|c| Case {
                workload: format!("{tag}.{}", c.workload),
                ..c.clone()
            }));
            out.matrices.extend(r.matrices.iter().map(|m| {
                let mut m = m.clone();
                m.workload = format!("{tag}.{}", m.workload);
                m
            }));
            out.timings.extend(r.timings.iter().map(|t| {
                let mut t = t.clone();
                t.workload = format!("{tag}.{}", t.workload);
                t
            }));
            out.traces.extend(r.traces.iter().cloned());
            out.elapsed_seconds = out.elapsed_seconds.max(r.elapsed_seconds);
        }
        out.checks.extend(self.gpu_to_gpu.checks.iter().cloned());
        out.cases.extend(self.gpu_to_gpu.cases.iter().cloned());
        out
    }
}

/// Runs `work` on every device at once: one scoped thread per device, each
/// with its own backend (for CUDA: its own context and stream). Results
/// come back in the order of `devices`; a worker that panicked is an
/// error naming its device.
pub fn on_each_device<T, F>(devices: &[(DeviceLabel, Backend)], work: F) -> Vec<Result<T>>
where
    T: Send,
    F: Fn(&DeviceLabel, &Backend) -> Result<T> + Sync,
{
    let work = &work;
    std::thread::scope(|s| {
        let workers: Vec<_> = devices
            .iter()
            .map(|(label, backend)| (label, s.spawn(move || work(label, backend))))
            .collect();
        workers
            .into_iter()
            .map(|(label, w)| {
                w.join().unwrap_or_else(|_| {
                    Err(Error::backend(
                        &label.backend,
                        format!("the worker for {label} panicked"),
                    ))
                })
            })
            .collect()
    })
}

/// The file of device `ordinal` for `record --device all -o PATH`: PATH
/// with `.dev<N>` inserted before its extension (`run.gat` becomes
/// `run.dev1.gat`; `run` becomes `run.dev1`).
pub fn device_path(path: &Path, ordinal: usize) -> PathBuf {
    let (Some(stem), Some(_)) = (path.file_stem(), path.file_name()) else {
        let mut s = path.as_os_str().to_owned();
        s.push(format!(".dev{ordinal}"));
        return PathBuf::from(s);
    };
    let mut name = stem.to_owned();
    name.push(format!(".dev{ordinal}"));
    if let Some(ext) = path.extension() {
        name.push(".");
        name.push(ext);
    }
    path.with_file_name(name)
}

/// A planted fault (the command line's `--plant-fault`): `backend`, except
/// that every output of the GEMM named `gemm` has its lowest bit flipped
/// before anyone sees it (eager runs and replays alike, so the device is
/// consistently wrong, as a bad card would be). Proves that `gpu-to-gpu`
/// catches a device that disagrees and names it. The result is an engine
/// backend wrapping `backend`, with its name, context and volatile
/// metadata.
pub fn plant_fault(backend: Backend, gemm: &str) -> Backend {
    Backend::new(PlantedFault {
        inner: backend,
        gemm: gemm.to_string(),
    })
}

#[derive(Debug)]
struct PlantedFault {
    inner: Backend,
    gemm: String,
}

impl PlantedFault {
    fn perturb(&self, gemm: &str, output: &mut [u8]) {
        if gemm == self.gemm
            && let Some(b) = output.first_mut()
        {
            *b ^= 1;
        }
    }
}

/// A captured graph of the faulty device: the inner backend's, and the
/// GEMM each output belongs to.
#[derive(Debug)]
struct FaultyLaunches {
    inner: ErasedLaunches,
    gemms: Vec<String>,
}

impl GemmBackend for PlantedFault {
    type Launches = FaultyLaunches;

    fn name(&self) -> &str {
        self.inner.name()
    }
    fn context(&self) -> &GemmRouteIdentity {
        self.inner.context()
    }
    fn live_context(&self) -> std::borrow::Cow<'_, GemmRouteIdentity> {
        self.inner.live_context()
    }
    fn adopt_pins(&self, pins: &[crate::pin::VendorPin]) -> usize {
        self.inner.adopt_pins(pins)
    }
    fn volatile(&self) -> VolatileMetadata {
        self.inner.volatile()
    }
    fn with_policy(&self, policy: GemmPolicy) -> PlantedFault {
        PlantedFault {
            inner: self.inner.with_policy(policy),
            gemm: self.gemm.clone(),
        }
    }
    fn resolve(&self, spec: &GemmSpec) -> Result<ResolvedGemmRoute> {
        self.inner.resolve(spec)
    }
    fn run(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<Vec<u8>> {
        let mut out = self.inner.run(route, seed)?;
        self.perturb(&route.gemm, &mut out);
        Ok(out)
    }
    fn run_timed(&self, route: &ResolvedGemmRoute, seed: u64) -> Result<TimedOutput> {
        let mut t = self.inner.run_timed(route, seed)?;
        self.perturb(&route.gemm, &mut t.output);
        Ok(t)
    }
    fn capture_launches(
        &self,
        routes: &[ResolvedGemmRoute],
        seeds: &[u64],
    ) -> Result<CapturedLaunches<FaultyLaunches>> {
        let c = self.inner.capture_launches(routes, seeds)?;
        Ok(CapturedLaunches {
            launches: FaultyLaunches {
                inner: c.launches,
                gemms: c.routes.iter().map(|r| r.gemm.clone()).collect(),
            },
            routes: c.routes,
            physical: c.physical,
        })
    }
    fn launch(&self, launches: &FaultyLaunches) -> Result<Vec<Vec<u8>>> {
        let mut outs = self.inner.launch(&launches.inner)?;
        for (gemm, out) in launches.gemms.iter().zip(outs.iter_mut()) {
            self.perturb(gemm, out);
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditOptions, NoProgress, run_audit};
    use crate::backend::cpu::CpuBackend;
    use crate::vocab::ContractKind;
    use crate::workload::Workload;

    /// A small workload: three GEMMs under three deterministic routes.
    fn tiny() -> Workload {
        let gemm = |name: &str, op: &str, dtype: &str, [m, k, n]: [u64; 3], route: &str| {
            format!(
                r#"{{"name":"{name}","op":"{op}","dtype":"{dtype}","m":{m},"k":{k},"n":{n},"route":"{route}"}}"#
            )
        };
        let gemms = [
            gemm("a", "nn", "f32", [2, 8, 3], "tiled"),
            gemm("b", "tn", "bf16", [4, 16, 2], "split-k-fixed:2"),
            gemm("c", "nt", "f16", [3, 5, 4], "scalar-fma"),
        ];
        Workload::from_json(&format!(
            r#"{{"name":"tiny","description":"three tiny GEMMs","seed":11,"gemm":[{}]}}"#,
            gemms.join(",")
        ))
        .expect("tiny workload")
    }

    fn cpu() -> Backend {
        Backend::new(CpuBackend::default())
    }

    /// CPU backends standing in for devices 0..n, the one at `faulty`
    /// (if any) with a planted fault in GEMM `a`.
    fn stand_ins(n: usize, faulty: Option<usize>) -> Vec<(DeviceLabel, Backend)> {
        (0..n)
            .map(|i| {
                let b = if Some(i) == faulty {
                    plant_fault(cpu(), "a")
                } else {
                    cpu()
                };
                let mut label = DeviceLabel::new("cpu", i);
                label.uuid = Some(format!("uuid-{i}"));
                (label, b)
            })
            .collect()
    }

    fn audit_all(devices: &[(DeviceLabel, Backend)]) -> FleetReport {
        let opts = AuditOptions {
            runs: 2,
            control_attempts: 8,
            workloads: vec![tiny()],
            fingerprint_mode: crate::FingerprintMode::Strong,
        };
        let reports = on_each_device(devices, |_, b| run_audit(b, &opts, &mut NoProgress));
        FleetReport::new(
            devices
                .iter()
                .map(|(l, _)| l.clone())
                .zip(reports.into_iter().map(|r| r.expect("audit runs")))
                .collect(),
        )
    }

    #[test]
    fn three_agreeing_devices_pass() {
        let fleet = audit_all(&stand_ins(3, None));
        assert!(
            fleet.passed(),
            "{}",
            crate::render::audit::audit_text(&fleet.combined())
        );
        let rows: Vec<&Check> = fleet
            .gpu_to_gpu
            .checks
            .iter()
            .filter(|c| c.verdict == Verdict::Pass)
            .collect();
        assert_eq!(rows.len(), 1, "{:?}", fleet.gpu_to_gpu.checks);
        assert!(
            rows[0].detail.contains("3/3 deterministic launches"),
            "{}",
            rows[0].detail
        );
        assert!(rows[0].detail.contains("devices 0, 1, 2"));
        assert_eq!(fleet.gpu_to_gpu.cases.len(), 3);
        assert_eq!(fleet.gpu_to_gpu.classes.len(), 1);
        assert_eq!(fleet.gpu_to_gpu.classes[0].devices.len(), 3);
    }

    #[test]
    fn a_planted_fault_on_device_1_fails_and_names_device_1() {
        let fleet = audit_all(&stand_ins(3, Some(1)));
        assert!(!fleet.passed());
        let fails: Vec<&Check> = fleet
            .gpu_to_gpu
            .checks
            .iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .collect();
        assert_eq!(fails.len(), 1, "{:?}", fleet.gpu_to_gpu.checks);
        let d = &fails[0].detail;
        assert!(d.contains("launch 0 a"), "{d}");
        assert!(d.contains("device 1 (uuid uuid-1) differs"), "{d}");
        assert!(d.contains("2/3 devices agree"), "{d}");
        assert!(!d.contains("device 0") && !d.contains("device 2"), "{d}");
        // Exactly the planted launch fails; the other two pass.
        let verdicts: Vec<(String, Verdict)> = fleet
            .gpu_to_gpu
            .cases
            .iter()
            .map(|c| (c.gemm.clone(), c.verdict))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                ("a (launch 0)".to_string(), Verdict::Fail),
                ("b (launch 1)".to_string(), Verdict::Pass),
                ("c (launch 2)".to_string(), Verdict::Pass),
            ]
        );
        // The combined report carries every device's rows and the gpu-to-gpu rows.
        let combined = fleet.combined();
        assert!(!combined.passed());
        assert!(
            combined
                .checks
                .iter()
                .any(|c| c.subject.starts_with("dev2 "))
        );
        assert!(
            combined
                .cases
                .iter()
                .any(|c| c.contract == Contract::GpuToGpu && c.verdict == Verdict::Fail)
        );
        // The same function over bare traces (what `bless --device all` uses).
        let traces: Vec<(DeviceLabel, RecordedGemmTrace)> = fleet
            .devices
            .iter()
            .flat_map(|d| {
                d.report
                    .traces
                    .iter()
                    .map(|t| (d.device.clone(), t.clone()))
            })
            .collect();
        assert!(!gpu_to_gpu_traces(&traces).passed());
    }

    #[test]
    fn two_devices_that_disagree_name_both_sides() {
        let fleet = audit_all(&stand_ins(2, Some(0)));
        let fail = fleet
            .gpu_to_gpu
            .checks
            .iter()
            .find(|c| c.verdict == Verdict::Fail)
            .expect("a FAIL row");
        assert!(fail.detail.contains("no majority"), "{}", fail.detail);
        assert!(fail.detail.contains("device 0") && fail.detail.contains("device 1"));
    }

    #[test]
    fn one_device_has_no_gpu_to_gpu_rows() {
        let fleet = audit_all(&stand_ins(1, None));
        assert!(fleet.gpu_to_gpu.checks.is_empty());
        assert!(fleet.passed());
    }

    fn labelled(i: usize, trace: &RecordedGemmTrace) -> (DeviceLabel, RecordedGemmTrace) {
        let mut t = trace.clone();
        // Per-card facts differ; they are volatile and never compared.
        t.volatile
            .insert("cuda.device.ordinal".into(), i.to_string());
        t.volatile
            .insert("cuda.device.uuid".into(), format!("GPU-{i}"));
        t.volatile.insert(
            "cuda.device.pci_bus_id".into(),
            format!("0000:{i:02x}:00.0"),
        );
        let mut l = DeviceLabel::new("cuda", i);
        l.uuid = Some(format!("GPU-{i}"));
        l.pci_bus_id = Some(format!("0000:{i:02x}:00.0"));
        (l, t)
    }

    #[test]
    fn volatile_device_facts_never_enter_the_comparison() {
        let base = crate::testkit::sample_trace(3);
        let traces: Vec<_> = (0..3).map(|i| labelled(i, &base)).collect();
        let r = gpu_to_gpu_traces(&traces);
        assert!(r.passed(), "{:?}", r.checks);
        assert_eq!(r.classes.len(), 1, "one class despite three UUIDs");
        assert!(
            crate::diff::TraceDiff::between(&traces[0].1, &traces[1].1).is_empty(),
            "ordinal, bus id and UUID are not a difference"
        );
    }

    /// `atomic-unordered` promises no bits: its differences are INFO per
    /// device. A vendor route's are a FAIL: cuBLAS promises the same bits
    /// for the same call on one architecture and SM count.
    #[test]
    fn atomic_launches_are_info_per_device_vendor_ones_fail_and_classes_split() {
        let mut base = crate::testkit::sample_trace(3);
        base.routes[2].contract.kind = ContractKind::AtomicUnordered;
        let mut traces: Vec<_> = (0..3).map(|i| labelled(i, &base)).collect();
        traces[2].1.fingerprints[2].sha256.0[0] ^= 1;
        // A fourth device of another class: compared with nobody.
        let mut other = labelled(3, &base);
        other.1.context.device.class = "NVIDIA H100".into();
        traces.push(other);
        let r = gpu_to_gpu_traces(&traces);
        assert!(r.passed(), "atomic-unordered promises no cross-device bits");
        let mut vendor = traces.clone();
        for (_, t) in &mut vendor {
            t.routes[2].contract.kind = ContractKind::VendorFast;
        }
        let v = gpu_to_gpu_traces(&vendor);
        assert!(!v.passed(), "{:?}", v.checks);
        assert!(
            v.cases.iter().any(|c| c.verdict == Verdict::Fail
                && c.detail
                    .contains("device 2 (pci 0000:02:00.0, uuid GPU-2) differs")),
            "{:?}",
            v.cases
        );
        let info: Vec<&Check> = r
            .checks
            .iter()
            .filter(|c| c.verdict == Verdict::Info)
            .collect();
        assert!(
            info.iter().any(|c| c.subject.contains("device 2")
                && c.detail.contains("differs from the majority on 1/1")),
            "{info:?}"
        );
        assert!(
            info.iter()
                .any(|c| c.subject == "NVIDIA H100" && c.detail.contains("only device")),
            "{info:?}"
        );
        // Three devices of the first class get one INFO row each.
        assert_eq!(
            info.iter()
                .filter(|c| c.detail.contains("cross-device promise"))
                .count(),
            3
        );
        // A deterministic disagreement names the PCI bus id and UUID.
        traces[1].1.fingerprints[0].sha256.0[0] ^= 1;
        let r = gpu_to_gpu_traces(&traces);
        let fail = r
            .checks
            .iter()
            .find(|c| c.verdict == Verdict::Fail)
            .unwrap();
        assert!(
            fail.detail
                .contains("device 1 (pci 0000:01:00.0, uuid GPU-1) differs"),
            "{}",
            fail.detail
        );
    }

    #[test]
    fn device_paths_insert_the_ordinal_before_the_extension() {
        assert_eq!(
            device_path(Path::new("out/run.gat"), 1),
            PathBuf::from("out/run.dev1.gat")
        );
        assert_eq!(device_path(Path::new("run"), 0), PathBuf::from("run.dev0"));
        assert_eq!(
            device_path(Path::new("a.b.gat"), 7),
            PathBuf::from("a.b.dev7.gat")
        );
    }

    #[test]
    fn the_cpu_backend_is_device_0_only() {
        use crate::backend::{BackendKind, DeviceSelection};
        let e = Backend::open_device(BackendKind::Cpu, 5).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::NoSuchDevice { requested: 5, .. }));
        assert!(
            msg.contains("no device 5") && msg.contains("available: 0"),
            "{msg}"
        );
        let (all, _) = Backend::open_devices(BackendKind::Cpu, DeviceSelection::All).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].0.ordinal, 0);
        assert_eq!("all".parse::<DeviceSelection>(), Ok(DeviceSelection::All));
        assert_eq!(
            "3".parse::<DeviceSelection>(),
            Ok(DeviceSelection::Ordinal(3))
        );
        assert!("-1".parse::<DeviceSelection>().is_err());
    }
}
