//! The documented exit codes, and the code and one-line message of an
//! error that escaped a subcommand.

use gemm_audit::BudgetLimit;
use gemm_audit::Error;

/// Success: no finding.
pub const EXIT_OK: u8 = 0;
/// A finding: a violated contract, a refused check, a replay that differs.
pub const EXIT_FINDING: u8 = 1;
/// Bad command line (clap's own code).
pub const EXIT_USAGE: u8 = 2;
/// Bad input: unreadable or corrupt trace, unknown or malformed workload,
/// a file that would be overwritten.
pub const EXIT_BAD_INPUT: u8 = 3;
/// The backend is unavailable or failed.
pub const EXIT_BACKEND: u8 = 4;
/// `diff` found disallowed differences: 64 + the sum of their class bits.
pub const EXIT_DIFF_BASE: u8 = 64;

pub const EXIT_CODES: &str = "\
Exit codes:
  0       success: every contract holds, the check passed, no disallowed difference
  1       finding: a contract is violated, a replay was refused or differs
  2       bad command line
  3       bad input: unreadable, corrupt or non-regular file, unknown or
          malformed workload, work over the budget (--max-gflop,
          --max-memory-gib), an output file that exists (pass --force),
          a device the backend does not have (--device)
  4       backend unavailable or failed
  64+N    diff only: disallowed differences were found; N is the sum of
          identity=1, route=2, numeric=4, structural=8, policy=16";

/// The error and its causes on one line, each said once (library errors
/// already name their cause in their message).
pub fn error_message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if !msg.contains(&s) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&s);
        }
    }
    // The library says what is wrong; the command line says which flag fixes it.
    match e.downcast_ref::<Error>() {
        Some(Error::WouldOverwrite { .. }) => msg.push_str("; pass --force to replace it"),
        Some(Error::OverBudget { kind, .. }) => msg.push_str(match kind {
            BudgetLimit::Compute => " (raise it with --max-gflop)",
            BudgetLimit::Memory => " (raise it with --max-memory-gib)",
        }),
        _ => {}
    }
    msg
}

/// The exit code of an error that escaped a subcommand.
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<Error>() {
        Some(Error::Backend { .. }) => EXIT_BACKEND,
        Some(Error::Refused(_)) => EXIT_FINDING,
        Some(_) => EXIT_BAD_INPUT,
        None => EXIT_BAD_INPUT,
    }
}
