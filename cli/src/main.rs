//! The `shardtool` binary: parses arguments, runs one command, maps the outcome to an exit code
//! (0 success, 1 failed run, 2 usage error).

mod args;
mod commands;
mod progress;

use clap::Parser;
use std::process::ExitCode;

/// A failure with the exit code it should produce.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl Failure {
    /// Bad input or options: exit 2.
    pub(crate) fn usage(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 2,
            error: error.into(),
        }
    }

    /// The run started but failed: exit 1.
    pub(crate) fn run(error: impl Into<anyhow::Error>) -> Self {
        Self {
            code: 1,
            error: error.into(),
        }
    }
}

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Pack(a) => commands::pack::run(a),
        args::Command::Verify(a) => commands::verify::run(a),
        args::Command::Inspect(a) => commands::inspect::run(a),
        args::Command::Preview(a) => commands::preview::run(a),
        args::Command::Read(a) => commands::read::run(a),
        args::Command::Bench(a) => commands::bench::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}
