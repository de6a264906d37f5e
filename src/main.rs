//! The `gemm-audit` command line: the command-line crate
//! (`gemm-audit-cli`) run on the process's arguments.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(gemm_audit_cli::main_with(std::env::args_os()))
}
