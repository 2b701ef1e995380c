//! Real servers for the remote tests, started on loopback: lighttpd (WebDAV, as object_store's
//! HTTP store needs), s3s-fs (an S3-compatible server that checks signatures), and a small
//! HTTP/1.1 file server that injects 500s, stalls and truncated bodies on request.
//!
//! Shared by crates/cache/tests and cli/tests (through `#[path]`). A missing server binary fails
//! the test with a message saying what to install; `.ci/run` installs both.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn wait_listening(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited with {status} before listening on {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on {port} within 20 s");
}

fn find_binary(env: &str, name: &str, hint: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return p.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([
        PathBuf::from("/usr/sbin"),
        // Where .ci/run installs s3s-fs.
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/shardtool-ci/s3s/bin"),
    ]) {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} is needed by this test and was not found ({env} or PATH): {hint}");
}

/// lighttpd serving `root` with WebDAV, logging every request.
pub struct Lighttpd {
    pub port: u16,
    child: Child,
    _conf: tempfile::TempDir,
    log: PathBuf,
}

impl Lighttpd {
    /// Serving `root`, its WebDAV allowing listings of any depth (as the tests' servers do).
    pub fn start(root: &Path) -> Self {
        Self::start_with(root, true)
    }

    /// Serving `root` with WebDAV as installed: a listing of infinite depth is refused (403).
    pub fn start_stock(root: &Path) -> Self {
        Self::start_with(root, false)
    }

    fn start_with(root: &Path, deep_listings: bool) -> Self {
        let bin = find_binary(
            "LIGHTTPD",
            "lighttpd",
            "apt-get install lighttpd lighttpd-mod-webdav",
        );
        let conf = tempfile::tempdir().unwrap();
        let log = conf.path().join("access.log");
        let port = free_port();
        let text = format!(
            r#"server.document-root = "{root}"
server.bind = "127.0.0.1"
server.port = {port}
server.modules = ("mod_webdav", "mod_accesslog")
webdav.activate = "enable"
{deep}
# A piped logger: lighttpd buffers a plain log file until it exits.
accesslog.filename = "|/bin/sh -c \"exec cat >> {log}\""
accesslog.format = "%r %>s %b"
server.errorlog = "{err}"
# Tests change files between requests: no stat cache serving the old size for a second.
server.stat-cache-engine = "disable"
server.max-connections = 256
"#,
            root = root.display(),
            deep = if deep_listings {
                r#"webdav.opts = ("propfind-depth-infinity" => "enable")"#
            } else {
                ""
            },
            log = log.display(),
            err = conf.path().join("error.log").display(),
        );
        std::fs::write(conf.path().join("lighttpd.conf"), text).unwrap();
        let mut child = Command::new(bin)
            .arg("-D")
            .arg("-f")
            .arg(conf.path().join("lighttpd.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lighttpd");
        wait_listening(port, &mut child, "lighttpd");
        Self {
            port,
            child,
            _conf: conf,
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    /// Successful GETs (200 or 206) per request path, from the access log.
    pub fn gets(&self) -> HashMap<String, usize> {
        // lighttpd writes the log line after the response; give it a moment.
        std::thread::sleep(Duration::from_millis(200));
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut out = HashMap::new();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            if parts.len() >= 4 && parts[0] == "GET" && (parts[3] == "200" || parts[3] == "206") {
                *out.entry(parts[1].to_string()).or_insert(0) += 1;
            }
        }
        out
    }
}

impl Drop for Lighttpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// s3s-fs serving `root` (a bucket is a subdirectory) with fixed test credentials.
pub struct S3 {
    pub port: u16,
    child: Child,
    pub root: tempfile::TempDir,
}

pub const S3_KEY: &str = "shardtooltest";
pub const S3_SECRET: &str = "shardtooltestsecret";

impl S3 {
    pub fn start() -> Self {
        let bin = find_binary(
            "S3S_FS",
            "s3s-fs",
            "cargo install s3s-fs --version 0.14.1 --locked --features binary",
        );
        let root = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", S3_KEY, "--secret-key", S3_SECRET])
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs");
        wait_listening(port, &mut child, "s3s-fs");
        Self { port, child, root }
    }

    /// The environment an object_store S3 client needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", S3_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET.into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the fault server does with one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Serve normally.
    Ok,
    /// Answer 500.
    Error500,
    /// Send the headers, then nothing for this long, then close.
    Stall(Duration),
    /// Send the headers with the full length, then only this many bytes, then close.
    Truncate(usize),
    /// Ignore the Range header and send the whole file with 200.
    IgnoreRange,
    /// Send the body in 2 KiB pieces with this pause after each (a slow link).
    Slow(Duration),
    /// Serve normally, ignoring an `If-Match` header (as some servers do).
    IgnoreIfMatch,
    /// Serve the same bytes under another entity tag, ignoring `If-Match` (another replica).
    OtherTag,
}

/// One request the fault server saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range_start: Option<u64>,
    /// The request's `If-Match` tag.
    pub if_match: Option<String>,
    pub fault: Fault,
}

/// A small HTTP/1.1 file server over `root` with scripted faults: the n-th GET of a path gets
/// `script(path, n)`.
pub struct FaultServer {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

type Script = Arc<dyn Fn(&str, usize) -> Fault + Send + Sync>;

impl FaultServer {
    pub fn start(
        root: &Path,
        script: impl Fn(&str, usize) -> Fault + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let root = root.to_path_buf();
        let script: Script = Arc::new(script);
        let counts = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (root, script, counts, seen) =
                    (root.clone(), script.clone(), counts.clone(), seen2.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &root, &script, &counts, &seen);
                });
            }
        });
        Self { port, seen }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(
    conn: TcpStream,
    root: &Path,
    script: &Script,
    counts: &Mutex<HashMap<String, usize>>,
    seen: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut w = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("/").to_string();
        let (mut range_start, mut if_match) = (None, None);
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("range") {
                    range_start = v
                        .trim()
                        .strip_prefix("bytes=")
                        .and_then(|r| r.split('-').next())
                        .and_then(|s| s.parse::<u64>().ok());
                } else if k.eq_ignore_ascii_case("if-match") {
                    if_match = Some(v.trim().to_string());
                }
            }
        }
        let rel = path.trim_start_matches('/');
        let n = {
            let mut c = counts.lock().unwrap();
            let e = c.entry(format!("{method} {rel}")).or_insert(0);
            *e += 1;
            *e
        };
        // A HEAD is scripted as `NAME (HEAD)`, and may only fail (500).
        let fault = match method.as_str() {
            "GET" => script(rel, n),
            "HEAD" => match script(&format!("{rel} (HEAD)"), n) {
                Fault::Error500 => Fault::Error500,
                _ => Fault::Ok,
            },
            _ => Fault::Ok,
        };
        seen.lock().unwrap().push(Seen {
            method: method.clone(),
            path: rel.to_string(),
            range_start,
            if_match: if_match.clone(),
            fault,
        });
        // Before the file is looked for: a server failing on a missing object too.
        if fault == Fault::Error500 {
            w.write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops!")?;
            continue;
        }
        let file = root.join(rel);
        let Ok(data) = std::fs::read(&file) else {
            w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        };
        // The tag names the content, so a file replaced by one of the same size has another.
        let mut tag = format!("\"{:016x}\"", shardtool_core::Checksum::of(&data).0);
        let ignores = matches!(fault, Fault::IgnoreIfMatch | Fault::OtherTag);
        if !ignores && if_match.is_some_and(|t| t != tag) {
            w.write_all(b"HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        if fault == Fault::OtherTag {
            tag = "\"replica-2\"".into();
        }
        let start = match (range_start, fault) {
            (Some(s), f) if f != Fault::IgnoreRange => s.min(data.len() as u64) as usize,
            _ => 0,
        };
        let body = &data[start..];
        let mut head = if start > 0 || (range_start.is_some() && fault != Fault::IgnoreRange) {
            format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{}\r\n",
                data.len().max(1) - 1,
                data.len()
            )
        } else {
            "HTTP/1.1 200 OK\r\n".to_string()
        };
        head.push_str(&format!(
            "Content-Length: {}\r\nAccept-Ranges: bytes\r\nLast-Modified: Mon, 30 Nov 2026 00:00:00 GMT\r\nETag: {tag}\r\n\r\n",
            body.len(),
        ));
        w.write_all(head.as_bytes())?;
        if method == "HEAD" {
            continue;
        }
        match fault {
            Fault::Stall(d) => {
                w.write_all(&body[..body.len().min(1024)])?;
                w.flush()?;
                std::thread::sleep(d);
                return Ok(());
            }
            Fault::Truncate(k) => {
                w.write_all(&body[..k.min(body.len())])?;
                w.flush()?;
                return Ok(());
            }
            Fault::Slow(d) => {
                for piece in body.chunks(2048) {
                    w.write_all(piece)?;
                    w.flush()?;
                    std::thread::sleep(d);
                }
            }
            _ => w.write_all(body)?,
        }
        // Drain nothing: HTTP/1.1 keep-alive, read the next request.
        let _ = reader.get_ref().read(&mut [])?;
    }
}
