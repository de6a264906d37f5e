//! The `gemm-audit` command line: thin glue over the library. Errors map to
//! the documented exit codes (see `gemm-audit --help`).

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    match cli::run(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!(
                "gemm-audit: error: {}",
                cli::sanitize(&cli::error_message(&e))
            );
            ExitCode::from(cli::exit_code_of(&e))
        }
    }
}
