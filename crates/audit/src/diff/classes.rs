//! The classes a difference is sorted into, and the class of a changed field.

use serde::Serialize;
use std::fmt;

/// What kind of difference a change is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiffClass {
    /// Driver, toolkit, library, compiler, device or artifact identity changed.
    Identity,
    /// The kernel, tile, split, launch geometry or vendor algorithm changed.
    Route,
    /// Output fingerprints changed.
    Numeric,
    /// Launch count, order, GEMM set, shapes or the workload changed.
    Structural,
    /// The policy or a numeric contract changed.
    Policy,
}

impl DiffClass {
    /// Every class.
    pub const ALL: [DiffClass; 5] = [
        DiffClass::Identity,
        DiffClass::Route,
        DiffClass::Numeric,
        DiffClass::Structural,
        DiffClass::Policy,
    ];

    /// The class's stable name, as `--allow` takes it and JSON writes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            DiffClass::Identity => "identity",
            DiffClass::Route => "route",
            DiffClass::Numeric => "numeric",
            DiffClass::Structural => "structural",
            DiffClass::Policy => "policy",
        }
    }

    /// Bit of this class in `diff`'s exit status (see the CLI's `--help`).
    pub fn exit_bit(&self) -> u8 {
        match self {
            DiffClass::Identity => 1,
            DiffClass::Route => 2,
            DiffClass::Numeric => 4,
            DiffClass::Structural => 8,
            DiffClass::Policy => 16,
        }
    }

    /// The class of a changed field, by its tag.
    pub fn of_field(tag: &str) -> DiffClass {
        let prefix = tag.split('.').next().unwrap_or(tag);
        if tag == "contract.splits" {
            return DiffClass::Route;
        }
        match prefix {
            "policy"
            | "permitted_backends"
            | "permitted_contracts"
            | "contract"
            | "operand_conversion" => DiffClass::Policy,
            "compiler"
            | "device"
            | "artifact_digest"
            | "module"
            | "modules"
            | "compilation_target"
            | "device_capabilities"
            | "revisions" => DiffClass::Identity,
            "vendor" if tag == "vendor.library_version" => DiffClass::Identity,
            "gemm" | "op" | "dtype" | "shape" | "strides" => DiffClass::Structural,
            _ => DiffClass::Route,
        }
    }
}

impl fmt::Display for DiffClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
