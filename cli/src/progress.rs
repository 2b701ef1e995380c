//! Progress display: an indicatif bar on a terminal, plain periodic lines otherwise.

use indicatif::{ProgressBar, ProgressStyle};
use shardtool_pack::{Progress, ProgressSnapshot};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often plain-text progress lines are printed.
const LINE_EVERY: Duration = Duration::from_secs(5);

enum Mode {
    Quiet,
    Bar(ProgressBar),
    Lines {
        start: Instant,
        /// When a line was last printed, and the latest snapshot (printed once more at the end).
        last: Mutex<(Instant, Option<ProgressSnapshot>)>,
    },
}

/// The signal that asked a running pack to stop (0: none).
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(signal, Ordering::Relaxed);
}

/// Makes SIGTERM (`scancel`, a pod's deletion) and SIGINT (Ctrl-C) ask a running pack to stop
/// cleanly: it stops at its next input, removes its temporary files and exits 128 + the
/// signal's number. A second signal of the same kind ends the process at once.
#[allow(unsafe_code)]
pub fn stop_on_signals() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic; SA_RESETHAND restores the default
        // disposition once it has run, so a second signal takes the default action.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Ignores SIGXFSZ, for every command: a write past a file size limit (`ulimit -f`) then fails as
/// an error that names the file, and temporary files are removed, rather than the process being
/// killed silently.
#[allow(unsafe_code)]
pub fn fail_writes_past_the_file_size_limit() {
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory-safety preconditions.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The signal that asked the pack to stop, if one did.
pub fn stopped_by() -> Option<i32> {
    match STOP.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// Progress for `pack`.
pub struct PackProgress {
    mode: Mode,
}

impl PackProgress {
    /// A bar when stderr is a terminal, lines otherwise, nothing when `quiet`.
    pub fn new(quiet: bool) -> Self {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} images  {per_sec:>10}  {msg}  ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            Mode::Bar(bar)
        } else {
            let now = Instant::now();
            Mode::Lines {
                start: now,
                last: Mutex::new((now, None)),
            }
        };
        Self { mode }
    }

    /// Clears the bar, or prints the final line.
    pub fn finish(&self) {
        match &self.mode {
            Mode::Bar(b) => b.finish_and_clear(),
            Mode::Lines { start, last } => {
                if let Some(s) = last.lock().ok().and_then(|l| l.1) {
                    print_line(*start, &s);
                }
            }
            Mode::Quiet => {}
        }
    }
}

impl Progress for PackProgress {
    fn cancelled(&self) -> bool {
        stopped_by().is_some()
    }

    fn update(&self, s: &ProgressSnapshot) {
        match &self.mode {
            Mode::Quiet => {}
            Mode::Bar(bar) => {
                bar.set_length(s.total);
                bar.set_position(s.done);
                let secs = bar.elapsed().as_secs_f64().max(1e-9);
                bar.set_message(format!(
                    "{:.1} MB/s in, {} failed, {} shards",
                    s.bytes_in as f64 / 1e6 / secs,
                    s.failed,
                    s.shards
                ));
            }
            Mode::Lines { start, last } => {
                let Ok(mut last) = last.lock() else { return };
                last.1 = Some(*s);
                if last.0.elapsed() < LINE_EVERY {
                    return;
                }
                last.0 = Instant::now();
                print_line(*start, s);
            }
        }
    }
}

fn print_line(start: Instant, s: &ProgressSnapshot) {
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    errln!(
        "progress: {}/{} images, {:.0} images/s, {:.1} MB/s in, {} failed, {} shards",
        s.done,
        s.total,
        s.done as f64 / secs,
        s.bytes_in as f64 / 1e6 / secs,
        s.failed,
        s.shards
    );
}
