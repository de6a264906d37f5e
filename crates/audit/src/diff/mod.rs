//! Comparing two traces: launch set, context, per-route field changes and
//! fingerprint changes, each sorted into a class that `--allow` can pass.

mod allow;
mod classes;
mod compare;
mod difference;
mod groups;
mod launch;
mod numeric;
mod overview;
mod portability;
mod sequence;
mod waiver;

pub use allow::{Allowance, OUTPUT_FIELDS, UnknownAllowance};
pub use classes::DiffClass;
pub use difference::{Difference, TraceDiff};
pub use launch::LaunchChange;
pub use numeric::{NumericComparison, UlpStats, output_file_name, ulp_stats};
pub use overview::{ContextChange, DiffOverview, KernelChanges, OutputBits};
pub use portability::{Portability, portability, render_portability};
pub use sequence::{LCS_CELLS, SequencePairing, Side};
pub use waiver::{EntryProblem, Waiver, WaiverError};
