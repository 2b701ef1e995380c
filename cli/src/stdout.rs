//! The CLI's standard output: a reader that goes away (`shardtool inspect out/ | head`) ends the
//! process quietly, as SIGPIPE ends other Unix tools.
//!
//! The process keeps Rust's disposition for SIGPIPE (ignored) instead of the default one: with
//! the default, a write to a socket whose peer has closed kills the process without a word,
//! because the HTTP client writes request bodies with `writev`, which cannot ask the kernel not
//! to signal. An upload the server cuts off must be an error with a message, so only a failed
//! write to stdout turns into SIGPIPE's ending, here.

use std::io::{self, Write};

/// Writes one line to stdout; what `outln!` expands to.
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        failed(&e);
    }
}

/// Writes one line to stderr; what `errln!` expands to. A failed write is ignored.
pub(crate) fn err_line(args: std::fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// `text` from a dataset (a class name, a tool's name) as it may reach a terminal: control
/// characters (escape sequences, newlines) and the bidirectional embeddings, overrides and
/// isolates that reorder what follows them written as escapes, never acted on (the plain
/// direction marks of Arabic and Hebrew text stay).
pub(crate) fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let acts =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(acts) {
        return text.into();
    }
    let escape = |c: char| match acts(c) {
        true => c.escape_default().to_string(),
        false => c.to_string(),
    };
    text.chars().map(escape).collect::<String>().into()
}

/// A name from a dataset (an input's path, a class) as it may reach a terminal, told apart from
/// every other name: as it is when plain; otherwise quoted, with Rust's escapes, when it holds
/// what a terminal would act on or hide (controls, bidirectional overrides, a combining mark, a
/// byte-order mark) or a backslash, has spaces at an end or begins with a quote: `"trail "`,
/// `"cafe\u{301}"` beside `café`, `"new\nline"` beside `"new\\nline"`.
pub(crate) fn name(text: &str) -> std::borrow::Cow<'_, str> {
    let quoted = format!("{text:?}");
    // Escapes only lengthen: a name is plain when only its quotes were escaped.
    let plain = quoted.len() == text.len() + 2 + text.matches('"').count();
    let ends = |c: Option<char>| c.is_some_and(char::is_whitespace);
    match plain && !text.is_empty() && !text.starts_with('"') {
        true if !ends(text.chars().next()) && !ends(text.chars().last()) => text.into(),
        _ => quoted.into(),
    }
}

/// Ends the process after a failed write to stdout: a closed pipe by SIGPIPE's default action
/// (quietly; a shell reports status 141), any other error with its message and exit 1.
pub(crate) fn failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        die_of_sigpipe();
    }
    errln!("error: writing to standard output: {e}");
    std::process::exit(1)
}

#[cfg(unix)]
#[allow(unsafe_code)]
fn die_of_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL and raising it have no memory-safety
    // preconditions; the process ends here whichever thread calls it.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
}

#[cfg(not(unix))]
fn die_of_sigpipe() {
    std::process::exit(141)
}
