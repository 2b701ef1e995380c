//! The `shardtool` binary: parses arguments, runs one command, maps the outcome to an exit code
//! (0 success, 1 failed run, 2 usage error).
//!
//! On Linux the binary defines the C `main` itself instead of going through Rust's runtime
//! start-up, which reads all of `/proc/self/maps` to find the main thread's stack guard (glibc's
//! `pthread_getattr_np`): `shardtool --version` went from 1.12 to 0.97 ms on the benchmark
//! machine, which counts for commands as short as `verify` of a small dataset (about 2.5 ms).
//! What that start-up did and is still needed is done here: stdout is flushed at the end and a
//! panic exits with status 101. What is given up: a stack overflow on the main thread ends in a
//! plain SIGSEGV without Rust's one-line message.
//!
//! The process then ends with `_exit`, skipping the C exit handlers and library destructors:
//! nothing registered there has work that outlives the process (Rust registers none, and every
//! file and temporary is closed or removed by `run`'s drops; aws-lc's destructor only frees its
//! random generator's memory). About 0.08 ms less per run on the benchmark VM.
#![cfg_attr(all(target_os = "linux", not(test)), no_main)]

mod args;
mod commands;
mod progress;

use clap::Parser;
#[cfg(not(all(target_os = "linux", not(test))))]
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

/// Restores the default SIGPIPE action, so `shardtool inspect out/ | head` ends quietly like
/// other Unix tools instead of panicking on a failed write to stdout (Rust ignores SIGPIPE).
#[cfg(unix)]
#[allow(unsafe_code)]
fn reset_sigpipe() {
    // SAFETY: called once at start-up, before any thread exists; setting a signal's disposition
    // to SIG_DFL has no memory-safety preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn reset_sigpipe() {}

/// The process entry point called by the C runtime (see the module comment).
#[cfg(all(target_os = "linux", not(test)))]
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    use std::io::Write;
    // `std::env::args` works without the runtime's start-up: glibc passes the arguments to the
    // initialisers std registers. A panic has printed its message through the hook by now.
    let code = std::panic::catch_unwind(run).map_or(101, i32::from);
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` ends the process and never returns; every Rust value of the run has been
    // dropped and stdout flushed above (see the module comment for what is skipped).
    unsafe { libc::_exit(code) }
}

#[cfg(not(all(target_os = "linux", not(test))))]
fn main() -> ExitCode {
    ExitCode::from(run())
}

/// Runs the command line and returns the exit status.
fn run() -> u8 {
    reset_sigpipe();
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Pack(args::Lazy(a)) => commands::pack::run(a),
        args::Command::Verify(args::Lazy(a)) => commands::verify::run(a),
        args::Command::Inspect(args::Lazy(a)) => commands::inspect::run(a),
        args::Command::Preview(args::Lazy(a)) => commands::preview::run(a),
        args::Command::Read(args::Lazy(a)) => commands::read::run(a),
        args::Command::Bench(args::Lazy(a)) => commands::bench::run(a),
        args::Command::Cache(args::Lazy(c)) => commands::cache::run(c),
    };
    match result {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            f.code
        }
    }
}
