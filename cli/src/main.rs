//! The `shardtool` binary: parses arguments, runs one command, maps the outcome to an exit code
//! (0 success, 1 failed run, 2 usage error). The work lives in the library crates; this is glue.

// Lints: output goes through `outln!` (see `stdout`), never `println!`.
#![warn(clippy::print_stdout)]

/// `println!` for the command's output: a closed pipe ends the process quietly (see `stdout`).
/// Writes one line to stderr, as `eprintln!` does, but a stderr that cannot be written (a full
/// disk, a closed descriptor) loses the line instead of panicking: the run's outcome stands.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::stdout::err_line(format_args!($($arg)*))
    };
}

macro_rules! outln {
    () => {
        $crate::stdout::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stdout::line(format_args!($($arg)*))
    };
}

mod args;
mod commands;
mod progress;
mod stdout;

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

    /// Stopped cleanly by `signal`: exit 128 + its number, as a shell reports one it ended.
    pub(crate) fn signalled(signal: i32) -> Self {
        Self {
            code: u8::try_from(128 + signal).unwrap_or(1),
            error: anyhow::anyhow!(
                "stopped by signal {signal}; its temporary files are removed (a part, or a pack \
                 with --shard-samples and --resume, goes on from its done shards when run again)"
            ),
        }
    }

    /// Stopped by `signal` with `what` done first: exit 128 + its number.
    pub(crate) fn signalled_after(signal: i32, what: String) -> Self {
        Self {
            code: u8::try_from(128 + signal).unwrap_or(1),
            error: anyhow::anyhow!("stopped by signal {signal}; {what}"),
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
    ExitCode::from(run())
}

/// Runs the command line and returns the exit status.
fn run() -> u8 {
    progress::fail_writes_past_the_file_size_limit();
    let cli = args::Cli::from_process_args();
    let result = match cli.command {
        args::Command::Pack(a) => commands::pack::run(a),
        args::Command::Plan(a) => commands::pack::run_plan(a),
        args::Command::Merge(a) => commands::pack::run_merge(a),
        args::Command::Status(a) => commands::pack::run_status(a),
        args::Command::Verify(a) => commands::verify::run(a),
        args::Command::Inspect(a) => commands::inspect::run(a),
        args::Command::Preview(a) => commands::preview::run(a),
        args::Command::Read(a) => commands::read::run(a),
        args::Command::Bench(a) => commands::bench::run(a),
        args::Command::Cache(c) => commands::cache::run(c),
    };
    match result {
        Ok(()) => 0,
        Err(f) => {
            // Credentials in URLs never reach the terminal or a log, nor do the control
            // characters of a name the message quotes (an escape sequence, a line of its own).
            let message = format!("{:#}", f.error);
            let message = shardtool_core::redact_urls(&message);
            let hint = shardtool_core::fault_hint(&message).unwrap_or_default();
            errln!("error: {}{hint}", stdout::printable(&message));
            f.code
        }
    }
}
