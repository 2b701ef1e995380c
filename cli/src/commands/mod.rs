//! One module per subcommand, each a thin layer over library calls.

pub mod bench;
pub mod cache;
pub mod inspect;
pub mod pack;
pub mod preview;
pub mod read;
pub mod verify;

/// The document a `--json` run prints on stdout when it stops before its work:
/// `{"ok": false, "error": {"kind": …, "message": …}}`.
pub(crate) fn error_doc(kind: &str, message: &dyn std::fmt::Display) -> serde_json::Value {
    serde_json::json!({ "ok": false, "error": { "kind": kind, "message": message.to_string() } })
}

/// Prints [`error_doc`] when `json` (the error itself goes to stderr as usual).
pub(crate) fn print_error_doc(json: bool, kind: &str, message: &dyn std::fmt::Display) {
    if json {
        outln!("{}", error_doc(kind, message));
    }
}
