//! Opening backends: which kind and which devices (`--backend`,
//! `--device N|all`), and a label for people naming the device a result
//! came from. The one place that names the built-in backends.

use super::{Backend, GemmBackend, cpu, cuda};
use crate::{Error, Result};
use std::fmt;

/// Which backend to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// CUDA when a device is present, else the CPU reference.
    Auto,
    /// The CPU reference backend.
    Cpu,
    /// NVIDIA GPUs through CUDA.
    Cuda,
}

impl BackendKind {
    /// Every kind, in the order a user is offered them.
    pub const ALL: [BackendKind; 3] = [BackendKind::Auto, BackendKind::Cpu, BackendKind::Cuda];

    /// The kind's name: `auto`, `cpu` or `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }

    /// One line on what the kind opens.
    pub fn help(self) -> &'static str {
        match self {
            BackendKind::Auto => "CUDA when a device is present, else the CPU reference",
            BackendKind::Cpu => "The CPU reference backend",
            BackendKind::Cuda => "NVIDIA GPUs through CUDA",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend name that is not `auto`, `cpu` or `cuda`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend {0:?}: expected \"auto\", \"cpu\" or \"cuda\"")]
pub struct UnknownBackend(pub String);

impl std::str::FromStr for BackendKind {
    type Err = UnknownBackend;

    fn from_str(s: &str) -> std::result::Result<Self, UnknownBackend> {
        BackendKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownBackend(s.to_string()))
    }
}

/// Which device(s) of a backend to run on (`--device N|all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSelection {
    /// One device by ordinal (CUDA device ordinal; the CPU backend has only 0).
    Ordinal(usize),
    /// Every device of the backend, one worker each (the CPU backend: its one device).
    All,
}

impl Default for DeviceSelection {
    fn default() -> Self {
        DeviceSelection::Ordinal(0)
    }
}

impl fmt::Display for DeviceSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelection::Ordinal(n) => write!(f, "{n}"),
            DeviceSelection::All => f.write_str("all"),
        }
    }
}

/// A device selection that is neither `all` nor a device ordinal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected a device ordinal (0, 1, ...) or `all`, got {0:?}")]
pub struct BadDeviceSelection(pub String);

impl std::str::FromStr for DeviceSelection {
    type Err = BadDeviceSelection;

    /// `all`, or a device ordinal (a non-negative integer).
    fn from_str(s: &str) -> std::result::Result<Self, BadDeviceSelection> {
        if s.eq_ignore_ascii_case("all") {
            return Ok(DeviceSelection::All);
        }
        s.parse::<usize>()
            .map(DeviceSelection::Ordinal)
            .map_err(|_| BadDeviceSelection(s.to_string()))
    }
}

/// Which device a result came from, for people: backend, ordinal and, for
/// a GPU, its PCI bus id and UUID (read from the backend's volatile
/// metadata, which is never digested or compared).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct DeviceLabel {
    /// The backend's short name: `cpu`, `cuda` or an engine's.
    pub backend: String,
    /// The device ordinal (CUDA device ordinal; 0 for the CPU).
    pub ordinal: usize,
    /// The PCI bus id, e.g. `0000:19:00.0`, where known.
    pub pci_bus_id: Option<String>,
    /// The device UUID (hex), where known.
    pub uuid: Option<String>,
}

impl DeviceLabel {
    /// The label of `backend` opened as device `ordinal`: bus id and UUID
    /// from its volatile metadata (`cuda.device.pci_bus_id`,
    /// `cuda.device.uuid`) where present.
    pub fn of(backend: &Backend, ordinal: usize) -> DeviceLabel {
        let volatile = backend.volatile();
        DeviceLabel {
            backend: backend.name().to_string(),
            ordinal,
            pci_bus_id: volatile.get("cuda.device.pci_bus_id").cloned(),
            uuid: volatile.get("cuda.device.uuid").cloned(),
        }
    }

    /// A label with only a backend name and an ordinal (no bus id or UUID).
    pub fn new(backend: &str, ordinal: usize) -> DeviceLabel {
        DeviceLabel {
            backend: backend.to_string(),
            ordinal,
            pci_bus_id: None,
            uuid: None,
        }
    }
}

impl fmt::Display for DeviceLabel {
    /// `device 1 (pci 0000:19:00.0, uuid 3f2a...)`, or `device 1` when
    /// neither is known.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.ordinal)?;
        let facts: Vec<String> = [
            self.pci_bus_id.as_ref().map(|b| format!("pci {b}")),
            self.uuid.as_ref().map(|u| format!("uuid {u}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !facts.is_empty() {
            write!(f, " ({})", facts.join(", "))?;
        }
        Ok(())
    }
}

/// Devices opened by [`Backend::open_devices`], each with its label, in
/// ascending ordinal.
pub type OpenedDevices = Vec<(DeviceLabel, Backend)>;

/// The CPU reference backend, which is one device: ordinal 0.
fn cpu_device(ordinal: usize) -> Result<Backend> {
    if ordinal != 0 {
        return Err(Error::NoSuchDevice {
            backend: "cpu".into(),
            requested: ordinal,
            available: "0 (the CPU reference backend is one device)".into(),
        });
    }
    Ok(Backend::new(cpu::CpuBackend::default()))
}

impl Backend {
    /// Opens `kind`. `Auto` falls back to the CPU backend when CUDA is not
    /// available, and says why in the returned note.
    pub fn open(kind: BackendKind) -> Result<(Backend, Option<String>)> {
        match kind {
            BackendKind::Cpu => Ok((Backend::new(cpu::CpuBackend::default()), None)),
            BackendKind::Cuda => Ok((Backend::new(cuda::CudaBackend::open()?), None)),
            BackendKind::Auto => match cuda::CudaBackend::open() {
                Ok(c) => Ok((Backend::new(c), None)),
                Err(e) => Ok((
                    Backend::new(cpu::CpuBackend::default()),
                    Some(format!("{e}; using the CPU reference backend")),
                )),
            },
        }
    }

    /// Opens device `ordinal` of `kind`: a CUDA device ordinal, or the CPU
    /// backend's one device (0). `Auto` falls back to the CPU when CUDA is
    /// not available, and says why in the returned note; an ordinal the
    /// backend does not have is [`Error::NoSuchDevice`], naming those it has.
    pub fn open_device(kind: BackendKind, ordinal: usize) -> Result<(Backend, Option<String>)> {
        match kind {
            BackendKind::Cpu => Ok((cpu_device(ordinal)?, None)),
            BackendKind::Cuda => Ok((
                Backend::new(cuda::CudaBackend::open_ordinal(ordinal)?),
                None,
            )),
            BackendKind::Auto => match cuda::CudaBackend::open_ordinal(ordinal) {
                Ok(c) => Ok((Backend::new(c), None)),
                Err(e @ Error::NoSuchDevice { .. }) => Err(e),
                Err(e) => Ok((
                    cpu_device(ordinal)?,
                    Some(format!("{e}; using the CPU reference backend")),
                )),
            },
        }
    }

    /// Opens the devices `selection` names: one, or every device of the
    /// backend (`All`: every CUDA device, each with its own context and
    /// stream, opened concurrently; the CPU backend's one device). Each comes
    /// with its [`DeviceLabel`], in ascending ordinal.
    pub fn open_devices(
        kind: BackendKind,
        selection: DeviceSelection,
    ) -> Result<(OpenedDevices, Option<String>)> {
        let ordinal = match selection {
            DeviceSelection::Ordinal(n) => n,
            DeviceSelection::All => {
                let count = match kind {
                    BackendKind::Cpu => None,
                    BackendKind::Cuda => Some(cuda::CudaBackend::device_count()?),
                    BackendKind::Auto => cuda::CudaBackend::device_count().ok().filter(|&n| n > 0),
                };
                match count {
                    Some(n) if n > 1 => {
                        let opened: Vec<Result<Backend>> = std::thread::scope(|s| {
                            let workers: Vec<_> = (0..n)
                                .map(|i| {
                                    s.spawn(move || {
                                        cuda::CudaBackend::open_ordinal(i).map(Backend::new)
                                    })
                                })
                                .collect();
                            workers
                                .into_iter()
                                .map(|w| {
                                    w.join().unwrap_or_else(|_| {
                                        Err(Error::backend("cuda", "opening a device panicked"))
                                    })
                                })
                                .collect()
                        });
                        let mut out = Vec::with_capacity(n);
                        for (i, b) in opened.into_iter().enumerate() {
                            let b = b?;
                            out.push((DeviceLabel::of(&b, i), b));
                        }
                        return Ok((out, None));
                    }
                    // One CUDA device, or the CPU: device 0.
                    _ => 0,
                }
            }
        };
        let (b, note) = Backend::open_device(kind, ordinal)?;
        Ok((vec![(DeviceLabel::of(&b, ordinal), b)], note))
    }
}

#[cfg(test)]
mod tests {
    use super::{BackendKind, BadDeviceSelection, DeviceSelection, UnknownBackend};

    #[test]
    fn backend_kinds_parse_from_their_own_names_and_nothing_else() {
        for k in BackendKind::ALL {
            assert_eq!(k.to_string().parse::<BackendKind>(), Ok(k));
        }
        assert_eq!(
            "gpu".parse::<BackendKind>(),
            Err(UnknownBackend("gpu".into()))
        );
        assert_eq!("CPU".parse::<BackendKind>().unwrap_err().0, "CPU");
        let msg = "".parse::<BackendKind>().unwrap_err().to_string();
        assert!(msg.contains("\"auto\", \"cpu\" or \"cuda\""), "{msg}");
    }

    #[test]
    fn a_bad_device_selection_is_named() {
        assert_eq!("ALL".parse::<DeviceSelection>(), Ok(DeviceSelection::All));
        let e = "gpu0".parse::<DeviceSelection>().unwrap_err();
        assert_eq!(e, BadDeviceSelection("gpu0".into()));
        assert!(e.to_string().ends_with("got \"gpu0\""), "{e}");
    }
}
