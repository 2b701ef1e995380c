//! Fetching from HTTP(S) and S3 through `object_store`: whole objects, streamed to a file, with
//! stall timeouts, retries with exponential backoff and jitter, and resumption by range.

use crate::attempt::{classify, http_status, AttemptError};
use crate::location::RemoteUrl;
use crate::metrics::Recorder;
use crate::writeback;
use crate::CacheError;
use futures::StreamExt;
use object_store::path::{Path as StorePath, PathPart};
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use shardtool_core::{Checksum, ChecksumHasher};
use std::io::{Seek, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How hard to try before giving up on an object.
#[derive(Debug, Clone)]
pub struct FetchPolicy {
    /// Attempts per object, the first included (default 5).
    pub attempts: u32,
    /// Backoff before the second attempt; doubles each time (default 200 ms).
    pub backoff: Duration,
    /// Longest backoff (default 10 s).
    pub max_backoff: Duration,
    /// An attempt fails when no byte (or no response) arrives for this long (default 30 s).
    pub stall_timeout: Duration,
    /// Connection timeout (default 10 s).
    pub connect_timeout: Duration,
    /// Once set, every fetch of a client built with this policy ends, saying it was stopped,
    /// within [`STOP_POLL`]: for a caller stopped by a signal while a server stalls.
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl FetchPolicy {
    /// This policy with [`FetchPolicy::stop`] set to `stop`.
    pub fn with_stop(self, stop: Option<Arc<std::sync::atomic::AtomicBool>>) -> Self {
        Self { stop, ..self }
    }
}

/// Why a fetch ended early.
pub(crate) const STOPPED: &str =
    "stopped before it ended (the reader was closed, or the run was interrupted)";

/// How often a fetch looks at [`FetchPolicy::stop`].
pub const STOP_POLL: Duration = Duration::from_millis(50);

impl Default for FetchPolicy {
    fn default() -> Self {
        Self {
            attempts: 5,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            stop: None,
        }
    }
}

/// `name` (stored names joined by `/`) as the store's path. Each part is kept as stored: the
/// store escapes it once in the request's URL (`StorePath::from` escapes `%`, `#` and others
/// itself, so the URL would escape them twice and name another object). A part the store refuses
/// (`.`, `..`, control characters) is escaped its way: no stored name holds one.
fn store_path(name: &str) -> StorePath {
    (name.split('/').filter(|p| !p.is_empty()))
        .map(|p| PathPart::parse(p).unwrap_or_else(|_| PathPart::from(p)))
        .collect()
}

/// A listed object's name relative to `base`, as stored, and size. Listed paths hold stored
/// names: WebDAV's are unescaped from the answer's URLs, S3's keys are given as they are.
fn listed(meta: &object_store::ObjectMeta, base: &str) -> (String, u64) {
    let full = meta.location.as_ref();
    let name = full.strip_prefix(base).unwrap_or(full);
    (name.to_string(), meta.size)
}

/// What the cache knows the remote dataset `url` by ([`RemoteUrl::cache_key`]), with the S3
/// endpoint the standard AWS variables name, as the S3 client reads them.
pub fn cache_key(url: &RemoteUrl) -> String {
    let endpoint = (url.scheme == "s3")
        .then(|| {
            object_store::aws::AmazonS3Builder::from_env()
                .get_config_value(&object_store::aws::AmazonS3ConfigKey::Endpoint)
        })
        .flatten();
    url.cache_key(endpoint.as_deref())
}

/// Why an S3 endpoint (`AWS_ENDPOINT`, `AWS_ENDPOINT_URL`) is none, if it is not an
/// `http(s)://` URL with a host: the client would take it and fail at its first request.
fn bad_endpoint(endpoint: &str) -> Option<String> {
    let parsed = url::Url::parse(endpoint).ok();
    // Judged as written, not as the URL parser mends it (spaces trimmed, `http:///x` taken for
    // host `x`): the client is handed the text itself.
    let plain = !endpoint
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
        && endpoint
            .split_once("://")
            .is_some_and(|(_, rest)| !rest.starts_with('/'));
    let web = parsed.filter(|u| {
        let bare = u.query().is_none() && u.fragment().is_none();
        plain && bare && matches!(u.scheme(), "http" | "https") && u.has_host()
    });
    web.is_none().then(|| {
        format!(
            "the S3 endpoint {:?} (AWS_ENDPOINT or AWS_ENDPOINT_URL) is no http(s):// URL with a \
             host, such as http://127.0.0.1:9000",
            shardtool_core::redact_urls(endpoint)
        )
    })
}

/// A remote dataset folder and the client that reads it.
pub(crate) struct Remote {
    pub url: RemoteUrl,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// What listed names start with besides their name in the folder (its path, with `/`).
    listed_base: String,
    rt: tokio::runtime::Runtime,
    pub policy: FetchPolicy,
    pub metrics: Arc<Recorder>,
    /// Set by [`Remote::cancel`]: no attempt starts, and one under way ends.
    cancelled: std::sync::atomic::AtomicBool,
    cancel: tokio::sync::Notify,
}

impl Remote {
    /// Builds the client. Endpoint, region and credentials of S3 come from the standard AWS
    /// environment variables (`AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, …), so
    /// S3-compatible stores work.
    pub fn connect(
        url: RemoteUrl,
        policy: FetchPolicy,
        metrics: Arc<Recorder>,
    ) -> Result<Self, CacheError> {
        let bad = |e: object_store::Error| CacheError::BadLocation {
            location: url.folder.to_string(),
            message: e.to_string(),
        };
        // rustls needs one process-wide crypto provider; an error means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let options = object_store::ClientOptions::new()
            .with_connect_timeout(policy.connect_timeout)
            // Whole shards can take minutes; stalls are caught per chunk instead.
            .with_timeout_disabled()
            .with_allow_http(true);
        // Our loop owns retries, so each one is counted and resumes by range.
        let retry = object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        };
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match url.scheme.as_str() {
            "s3" => {
                let bucket = url.folder.host_str().unwrap_or_default();
                let s3 = object_store::aws::AmazonS3Builder::from_env();
                let endpoint = s3.get_config_value(&object_store::aws::AmazonS3ConfigKey::Endpoint);
                if let Some(message) = endpoint.as_deref().and_then(bad_endpoint) {
                    return Err(CacheError::BadLocation {
                        location: url.folder.to_string(),
                        message,
                    });
                }
                let s3 = s3
                    .with_bucket_name(bucket)
                    .with_client_options(options)
                    .with_retry(retry)
                    .build()
                    .map_err(bad)?;
                (Arc::new(s3), url.stored_prefix())
            }
            _ => {
                let http = object_store::http::HttpBuilder::new()
                    // The store joins paths with "/" itself.
                    .with_url(url.folder.as_str().trim_end_matches('/'))
                    .with_client_options(options)
                    .with_retry(retry)
                    .build()
                    .map_err(bad)?;
                (Arc::new(http), String::new())
            }
        };
        // Two workers and a thread for name lookups, with room left for the prefetchers and a
        // reader; where a thread limit (`ulimit -u`) leaves less, the threads that wait on a
        // fetch drive it (tokio panics when its first worker cannot start, and hangs when a
        // later one cannot).
        let mut rt = match shardtool_core::can_start_threads(8) {
            true => tokio::runtime::Builder::new_multi_thread(),
            false => tokio::runtime::Builder::new_current_thread(),
        };
        let rt = rt
            .worker_threads(2)
            .thread_name("shardtool-fetch")
            .enable_all()
            .build()
            .map_err(CacheError::io("tokio runtime"))?;
        // The folder's path as stored: an S3 folder's prefix; WebDAV answers with paths from
        // the server's root, so over HTTP too.
        let listed_base = match url.stored_prefix() {
            p if p.is_empty() => p,
            p => format!("{p}/"),
        };
        Ok(Self {
            url,
            store,
            prefix,
            listed_base,
            rt,
            policy,
            metrics,
            cancelled: std::sync::atomic::AtomicBool::new(false),
            cancel: tokio::sync::Notify::new(),
        })
    }

    /// Ends every fetch of this client: attempts under way stop at once, none starts after
    /// (each fails saying it was stopped). For a reader that is closed while a fetch stalls.
    pub fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.cancel.notify_waiters();
    }

    /// Whether [`Remote::cancel`] or the policy's stop flag ended this client's fetches.
    pub(crate) fn stopped(&self) -> bool {
        let flag = |f: &std::sync::atomic::AtomicBool| f.load(std::sync::atomic::Ordering::SeqCst);
        flag(&self.cancelled) || self.policy.stop.as_deref().is_some_and(flag)
    }

    /// Returns once the policy's stop flag is set (never without one).
    async fn stop_flag_set(&self) {
        let Some(stop) = self.policy.stop.as_deref() else {
            return std::future::pending().await;
        };
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(STOP_POLL).await;
        }
    }

    fn path(&self, name: &str) -> StorePath {
        store_path(&format!("{}/{name}", self.prefix))
    }

    /// Fetches a small object (the manifest) into memory, refusing more than `limit` bytes.
    pub fn get_small(&self, name: &str, limit: u64) -> Result<Vec<u8>, CacheError> {
        self.get_small_or_missing(name, limit, false)
            .map(|got| got.unwrap_or_default())
    }

    /// Like [`Remote::get_small`], with a missing object as `Ok(None)`, whichever attempt
    /// finds it missing (one after a connection failed too: a 404 then says "not there", as on
    /// the first).
    pub fn get_small_opt(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, CacheError> {
        self.get_small_or_missing(name, limit, true)
    }

    /// [`Remote::get_small`]; a missing object is `Ok(None)` when `missing_ok`, a 404 error
    /// otherwise.
    fn get_small_or_missing(
        &self,
        name: &str,
        limit: u64,
        missing_ok: bool,
    ) -> Result<Option<Vec<u8>>, CacheError> {
        let path = self.path(name);
        self.with_retries(name, (), |()| async {
            let r = async {
                let res = tokio::time::timeout(
                    self.policy.stall_timeout,
                    self.store.get_opts(&path, GetOptions::default()),
                )
                .await
                .map_err(|_| AttemptError::retry("no response (stalled)"))?;
                let res = match res {
                    Err(object_store::Error::NotFound { .. }) if missing_ok => return Ok(None),
                    res => res.map_err(classify)?,
                };
                if res.meta.size > limit {
                    return Err(AttemptError::fatal(format!(
                        "{} bytes, more than the {limit}-byte limit",
                        res.meta.size
                    )));
                }
                let mut out = Vec::with_capacity(res.meta.size as usize);
                let mut stream = res.into_stream();
                while let Some(chunk) = self.next_chunk(&mut stream).await? {
                    if out.len() as u64 + chunk.len() as u64 > limit {
                        return Err(AttemptError::fatal(format!(
                            "more than the {limit}-byte limit"
                        )));
                    }
                    Recorder::add(&self.metrics.bytes, chunk.len() as u64);
                    out.extend_from_slice(&chunk);
                }
                Ok(Some(out))
            }
            .await;
            ((), r)
        })
        .map(|((), v)| v)
    }

    async fn next_chunk(
        &self,
        stream: &mut futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    ) -> Result<Option<bytes::Bytes>, AttemptError> {
        match tokio::time::timeout(self.policy.stall_timeout, stream.next()).await {
            Err(_) => Err(AttemptError::retry(format!(
                "stalled: no data for {:?}",
                self.policy.stall_timeout
            ))),
            Ok(None) => Ok(None),
            Ok(Some(Err(e))) => Err(classify(e)),
            Ok(Some(Ok(b))) => Ok(Some(b)),
        }
    }

    /// Streams object `name` into `file` (which must be empty), checking that it is exactly
    /// `size` bytes with checksum `sum`. An interrupted body resumes from the last byte written
    /// when the server honours ranges, and starts over when it does not.
    pub fn download(
        &self,
        name: &str,
        size: u64,
        sum: Checksum,
        file: &mut std::fs::File,
    ) -> Result<(), CacheError> {
        self.download_checked(name, size, Some(sum), Some(file))
    }

    /// Streams object `name` and checks that it is exactly `size` bytes with checksum `sum`,
    /// keeping nothing (retried and resumed by range like [`Remote::download`]).
    pub fn check(&self, name: &str, size: u64, sum: Checksum) -> Result<(), CacheError> {
        self.download_checked(name, size, Some(sum), None)
    }

    /// The size of object `name`, by one HEAD request (retried like a download).
    pub fn size_of(&self, name: &str) -> Result<u64, CacheError> {
        self.head(name).map(|(size, _)| size)
    }

    /// The objects under the folder (recursively): their names relative to it and sizes, sorted
    /// by name.
    pub fn list(&self) -> Result<Vec<(String, u64)>, CacheError> {
        let prefix = (!self.prefix.is_empty()).then(|| store_path(&self.prefix));
        let base = &self.listed_base;
        let (_, mut out) = self
            .with_retries("", (), |()| {
                let prefix = prefix.clone();
                async move {
                    let mut out = Vec::new();
                    let r = match self.list_deep(prefix.as_ref(), base, &mut out).await {
                        // WebDAV servers refuse a listing of unbounded depth by default
                        // (lighttpd, Apache: 403, DAV:propfind-finite-depth): folder by folder.
                        Err(e)
                            if e.message.contains("PROPFIND")
                                && http_status(&e.message) == Some(403) =>
                        {
                            out.clear();
                            self.list_by_folder(prefix.as_ref(), base, &mut out, true)
                                .await
                        }
                        r => r,
                    };
                    ((), r.map(|()| out))
                }
            })
            .map_err(|e| match e {
                CacheError::Fetch {
                    url,
                    attempts,
                    message,
                } if message.contains("PROPFIND")
                    && matches!(http_status(&message), Some(405 | 501)) =>
                {
                    CacheError::Fetch {
                        url,
                        attempts,
                        message: format!(
                        "{message} (this HTTP server does not list folders: only WebDAV servers \
                         do; name the files instead, e.g. with a brace pattern such as \
                         shard-{{000000..000099}}.tar)"
                    ),
                    }
                }
                e => e,
            })?;
        out.sort();
        Ok(out)
    }

    /// The objects directly in the folder, not in its subfolders: their names and sizes, sorted
    /// by name. One listing of the folder however many objects lie below it.
    pub fn list_top(&self) -> Result<Vec<(String, u64)>, CacheError> {
        let prefix = (!self.prefix.is_empty()).then(|| store_path(&self.prefix));
        let base = &self.listed_base;
        let (_, mut out) = self.with_retries("", (), |()| {
            let prefix = prefix.clone();
            async move {
                let mut out = Vec::new();
                let r = (self.list_by_folder(prefix.as_ref(), base, &mut out, false)).await;
                ((), r.map(|()| out))
            }
        })?;
        out.sort();
        Ok(out)
    }

    /// Lists every object under `prefix` in one listing (for WebDAV, a PROPFIND of depth
    /// infinity) into `out`: names relative to `base`, and sizes.
    async fn list_deep(
        &self,
        prefix: Option<&StorePath>,
        base: &str,
        out: &mut Vec<(String, u64)>,
    ) -> Result<(), AttemptError> {
        let mut stream = self.store.list(prefix);
        loop {
            let next = tokio::time::timeout(self.policy.stall_timeout, stream.next()).await;
            match next {
                Err(_) => return Err(AttemptError::retry("listing stalled")),
                Ok(None) => return Ok(()),
                Ok(Some(Err(e))) => return Err(classify(e)),
                Ok(Some(Ok(meta))) => out.push(listed(&meta, base)),
            }
        }
    }

    /// [`Remote::list_deep`] one folder at a time (PROPFIND of depth 1), for servers that
    /// refuse the deep listing; with `recurse` off, only the objects directly in `prefix`.
    async fn list_by_folder(
        &self,
        prefix: Option<&StorePath>,
        base: &str,
        out: &mut Vec<(String, u64)>,
        recurse: bool,
    ) -> Result<(), AttemptError> {
        // Listed folders are named from the server's root, the store's paths from the folder:
        // a listed folder below it is listed in turn, by its parts past `base`'s.
        let base_parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
        let depth = base_parts.len();
        let mut folders = vec![prefix.cloned()];
        let mut seen = std::collections::HashSet::new();
        while let Some(folder) = folders.pop() {
            // A server listing a folder inside itself must not make this endless.
            if !seen.insert(folder.clone()) {
                continue;
            }
            let listing = self.store.list_with_delimiter(folder.as_ref());
            let listing = tokio::time::timeout(self.policy.stall_timeout, listing)
                .await
                .map_err(|_| AttemptError::retry("listing stalled"))?
                .map_err(classify)?;
            out.extend(listing.objects.iter().map(|meta| listed(meta, base)));
            if !recurse {
                break;
            }
            // (The folder itself is among the listed ones: it is not below it.)
            for sub in listing.common_prefixes {
                let parts: Vec<_> = sub.parts().collect();
                let under = (parts.iter().take(depth))
                    .map(|p| p.as_ref())
                    .eq(base_parts.iter().copied());
                if under && parts.len() > depth {
                    let rel: StorePath = parts[depth..].iter().cloned().collect();
                    let path = match &prefix {
                        Some(p) => p.parts().chain(rel.parts()).collect(),
                        None => rel,
                    };
                    folders.push(Some(path));
                }
            }
        }
        Ok(())
    }

    /// Streams object `name` (of `size` bytes, as [`Remote::size_of`] found) into `file`,
    /// resuming by range like [`Remote::download`]; without a checksum to compare, the size is
    /// checked.
    pub fn download_unchecked(
        &self,
        name: &str,
        size: u64,
        file: &mut std::fs::File,
    ) -> Result<(), CacheError> {
        self.download_checked(name, size, None, Some(file))
    }

    /// Streams object `name` into `file` (or only through the checks, with none).
    fn download_checked(
        &self,
        name: &str,
        size: u64,
        sum: Option<Checksum>,
        file: Option<&mut std::fs::File>,
    ) -> Result<(), CacheError> {
        let path = self.path(name);
        let started = Instant::now();
        // Bytes written and their running hash live across attempts, so a retry resumes.
        let file = file.map(|f| &*f);
        self.with_retries(
            name,
            (0u64, ChecksumHasher::new(), None),
            |(mut written, mut hasher, mut tag)| {
                let path = &path;
                async move {
                    let at = (&mut written, &mut hasher, &mut tag);
                    let r = self.attempt_download(path, size, sum, file, at).await;
                    ((written, hasher, tag), r)
                }
            },
        )?;
        self.metrics.fetched(started.elapsed());
        Ok(())
    }

    /// One download attempt, from `written` bytes on, of the version whose entity tag was `tag`
    /// when the bytes written so far arrived (a resume of another version starts over).
    async fn attempt_download(
        &self,
        path: &StorePath,
        size: u64,
        sum: Option<Checksum>,
        mut file: Option<&std::fs::File>,
        (written, hasher, tag): (&mut u64, &mut ChecksumHasher, &mut Option<String>),
    ) -> Result<(), AttemptError> {
        if *written >= size {
            // A whole body whose checksum failed: start over.
            *written = 0;
        }
        if *written == 0 {
            *hasher = ChecksumHasher::new();
            if let Some(mut file) = file {
                file.set_len(0)
                    .map_err(|e| AttemptError::fatal(e.to_string()))?;
                file.rewind()
                    .map_err(|e| AttemptError::fatal(e.to_string()))?;
            }
        }
        let resuming = *written > 0;
        // Versions are told apart by entity tag only where no checksum would catch a splice
        // (replicas behind a balancer may tag one content differently). A weak tag never
        // matches (RFC 9110's strong comparison): it is only compared.
        let tag_checked = sum.is_none();
        let options = GetOptions {
            range: resuming.then_some(GetRange::Offset(*written)),
            if_match: (tag.clone()).filter(|t| tag_checked && resuming && !t.starts_with("W/")),
            ..Default::default()
        };
        let res = tokio::time::timeout(
            self.policy.stall_timeout,
            self.store.get_opts(path, options),
        )
        .await
        .map_err(|_| AttemptError::retry("no response (stalled)"))?
        .map_err(|e| {
            let unsupported = matches!(e, object_store::Error::NotSupported { .. });
            let changed = matches!(e, object_store::Error::Precondition { .. });
            let mut e = classify(e);
            if resuming {
                // A server refusing the range (4xx, 501) is asked for the whole object again;
                // one that failed for a moment (a 5xx while restarting, no connection) keeps
                // what arrived, resumed after it on the next try.
                let refused = unsupported
                    || changed
                    || http_status(&e.message).is_some_and(|s| (400..500).contains(&s) || s == 501);
                if refused {
                    *written = 0;
                }
                e.permanent = false;
            }
            e
        })?;
        if res.meta.size != size {
            return Err(AttemptError::fatal(format!(
                "the remote object is {} bytes, not the {size} its manifest (or listing) \
                 states: it changed on the server (a dataset packed again while this ran: \
                 start again; or a file changed since it was packed: verify on the server)",
                res.meta.size
            )));
        }
        if res.range.start != *written {
            // The server sent something else than the range asked for: start over.
            *written = 0;
            return Err(AttemptError::retry("the server did not honour the range"));
        }
        let other_tag = (tag.as_ref().zip(res.meta.e_tag.as_ref())).is_some_and(|(a, b)| a != b);
        if !resuming {
            *tag = res.meta.e_tag.clone();
        } else if tag_checked && other_tag {
            // Replaced since the bytes kept arrived (a server ignoring If-Match): splicing two
            // versions would go unnoticed where no checksum is known.
            *written = 0;
            return Err(AttemptError::retry("the object changed between attempts"));
        }
        let mut stream = res.into_stream();
        // Body chunks are small (kilobytes). Batched into aligned 2 MiB writes they cost fewer
        // system calls, and the page cache keeps the shard in large folios, which makes reading
        // it from a warm cache as cheap as from a local dataset packed by shardtool.
        let mut out = file.as_mut().map(|file| {
            shardtool_core::BlockWriter::with_offset(file, *written, shardtool_core::WRITE_BLOCK)
        });
        // Write-back of whole steps starts as they complete, overlapping the disk with the
        // network; the fsync before publishing then only waits for the tail.
        let mut flushing = *written - *written % writeback::STEP;
        let received = async {
            while let Some(chunk) = self.next_chunk(&mut stream).await? {
                if *written + chunk.len() as u64 > size {
                    *written = 0;
                    return Err(AttemptError::retry("the body is longer than the object"));
                }
                if let Some(out) = out.as_mut() {
                    out.write_all(&chunk)
                        .map_err(|e| AttemptError::fatal(format!("writing the cache: {e}")))?;
                }
                hasher.update(&chunk);
                *written += chunk.len() as u64;
                Recorder::add(&self.metrics.bytes, chunk.len() as u64);
                let whole = *written - *written % writeback::STEP;
                if let Some(out) = out.as_ref().filter(|_| whole > flushing) {
                    writeback::start(out.get_ref(), flushing, whole - flushing);
                    flushing = whole;
                }
            }
            Ok(())
        }
        .await;
        // Whatever arrived is on disk before a retry resumes after it.
        if let Some(out) = out.as_mut() {
            out.flush()
                .map_err(|e| AttemptError::fatal(format!("writing the cache: {e}")))?;
        }
        received?;
        if *written != size {
            return Err(AttemptError::retry(format!(
                "the body ended after {} of {size} bytes",
                *written
            )));
        }
        let got = hasher.checksum();
        if let Some(sum) = sum.filter(|&s| s != got) {
            return Err(AttemptError::retry(format!(
                "checksum {got} does not match the manifest's {sum}"
            )));
        }
        Ok(())
    }

    /// Runs `attempt` until it succeeds, fails permanently, or the attempts run out, sleeping
    /// an exponentially growing, jittered backoff between attempts.
    /// `state` is handed from one attempt to the next.
    /// Writes `bytes` as object `name`. With `create_only`, an existing object is left as it is
    /// and `Ok(false)` returned (S3's conditional create, `If-None-Match: *`).
    pub fn put(
        &self,
        name: &str,
        bytes: bytes::Bytes,
        create_only: bool,
    ) -> Result<bool, CacheError> {
        let path = self.path(name);
        let opts = || object_store::PutOptions {
            mode: if create_only {
                object_store::PutMode::Create
            } else {
                object_store::PutMode::Overwrite
            },
            ..Default::default()
        };
        self.with_retries(name, (), |()| {
            let (path, bytes) = (&path, bytes.clone());
            async move {
                let r = tokio::time::timeout(
                    self.policy.stall_timeout,
                    self.store.put_opts(path, bytes.into(), opts()),
                )
                .await
                .map_err(|_| AttemptError::retry("no response (stalled)"))
                .and_then(|r| match r {
                    Ok(_) => Ok(true),
                    Err(object_store::Error::AlreadyExists { .. }) if create_only => Ok(false),
                    Err(e) => Err(classify(e)),
                });
                ((), r)
            }
        })
        .map(|((), created)| created)
    }

    /// Uploads the file at `local` as object `name` in parts of `part` bytes (a multipart upload,
    /// for objects too large to hold in memory). The whole upload is retried on failure.
    pub fn put_multipart(
        &self,
        name: &str,
        local: &std::path::Path,
        part: usize,
    ) -> Result<(), CacheError> {
        use std::io::Read;
        let path = self.path(name);
        self.with_retries(name, (), |()| {
            let path = &path;
            async move {
                let r = async {
                    let fail = |e: std::io::Error| {
                        AttemptError::fatal(format!("{}: {e}", local.display()))
                    };
                    let mut file = std::fs::File::open(local).map_err(fail)?;
                    let upload = self.store.put_multipart(path).await.map_err(classify)?;
                    let mut w = object_store::WriteMultipart::new_with_chunk_size(upload, part);
                    let mut buf = vec![0u8; part.min(8 << 20)];
                    loop {
                        let n = file.read(&mut buf).map_err(fail)?;
                        if n == 0 {
                            break;
                        }
                        w.wait_for_capacity(4).await.map_err(classify)?;
                        w.write(&buf[..n]);
                    }
                    tokio::time::timeout(self.policy.stall_timeout * 4, w.finish())
                        .await
                        .map_err(|_| AttemptError::retry("no response (stalled)"))?
                        .map_err(classify)?;
                    Ok(())
                }
                .await;
                ((), r)
            }
        })
        .map(|((), ())| ())
    }

    /// The size and entity tag (when the server gives one) of object `name`, by one HEAD.
    pub fn head(&self, name: &str) -> Result<(u64, Option<String>), CacheError> {
        self.head_or_missing(name, false)
            .map(|got| got.unwrap_or_default())
    }

    /// [`Remote::head`]; a missing object is `Ok(None)` when `missing_ok` (on any attempt,
    /// never retried), a 404 error otherwise.
    fn head_or_missing(
        &self,
        name: &str,
        missing_ok: bool,
    ) -> Result<Option<(u64, Option<String>)>, CacheError> {
        let path = self.path(name);
        self.with_retries(name, (), |()| {
            let path = &path;
            async move {
                let r = tokio::time::timeout(self.policy.stall_timeout, self.store.head(path))
                    .await
                    .map_err(|_| AttemptError::retry("no response (stalled)"))
                    .and_then(|r| match r {
                        Ok(m) => Ok(Some((m.size, m.e_tag))),
                        Err(object_store::Error::NotFound { .. }) if missing_ok => Ok(None),
                        Err(e) => Err(classify(e)),
                    });
                ((), r)
            }
        })
        .map(|((), v)| v)
    }

    /// Deletes object `name`; one already gone is no error.
    pub fn delete(&self, name: &str) -> Result<(), CacheError> {
        let path = self.path(name);
        self.with_retries(name, (), |()| {
            let path = &path;
            async move {
                let r = tokio::time::timeout(self.policy.stall_timeout, self.store.delete(path))
                    .await
                    .map_err(|_| AttemptError::retry("no response (stalled)"))
                    .and_then(|r| match r {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                        Err(e) => Err(classify(e)),
                    });
                ((), r)
            }
        })
        .map(|((), ())| ())
    }

    /// The size of object `name`, or `None` when there is none.
    pub fn size_opt(&self, name: &str) -> Result<Option<u64>, CacheError> {
        Ok(self.head_opt(name)?.map(|(size, _)| size))
    }

    /// The size and entity tag of object `name`, or `None` when there is none.
    pub fn head_opt(&self, name: &str) -> Result<Option<(u64, Option<String>)>, CacheError> {
        self.head_or_missing(name, true)
    }

    fn with_retries<S, T, F, Fut>(
        &self,
        name: &str,
        mut state: S,
        mut attempt: F,
    ) -> Result<(S, T), CacheError>
    where
        F: FnMut(S) -> Fut,
        Fut: std::future::Future<Output = (S, Result<T, AttemptError>)>,
    {
        let attempts = self.policy.attempts.max(1);
        let mut jitter = crate::jitter::Jitter::new();
        let mut backoff = self.policy.backoff;
        // The first failure's reason: a retry may fail otherwise (a resume the server refuses
        // after a stall), and the stall is what the user must hear of.
        let mut first: Option<String> = None;
        for n in 1..=attempts {
            let stopped = || CacheError::Fetch {
                url: self.url.file_url(name),
                attempts: n,
                message: STOPPED.into(),
            };
            let run = self.rt.block_on(async {
                // Registered before the flag is read, so a cancel in between is not missed.
                let cancelled = self.cancel.notified();
                tokio::pin!(cancelled);
                cancelled.as_mut().enable();
                if self.stopped() {
                    return None;
                }
                tokio::select! {
                    r = attempt(state) => Some(r),
                    () = &mut cancelled => None,
                    () = self.stop_flag_set() => None,
                }
            });
            let Some((next, result)) = run else {
                return Err(stopped());
            };
            state = next;
            match result {
                Ok(v) => return Ok((state, v)),
                Err(e) if e.permanent || n == attempts => {
                    Recorder::add(&self.metrics.failures, 1);
                    let message = match first {
                        Some(f) if f != e.message => format!("{} (first: {f})", e.message),
                        _ => e.message,
                    };
                    return Err(CacheError::Fetch {
                        url: self.url.file_url(name),
                        attempts: n,
                        message,
                    });
                }
                Err(e) => {
                    first.get_or_insert(e.message);
                    Recorder::add(&self.metrics.retries, 1);
                    // Equal jitter: at least half the backoff, so retries do spread out but
                    // never hammer a struggling server.
                    let half = backoff / 2;
                    let wait = half + half.mul_f64(jitter.next_unit());
                    let until = Instant::now() + wait;
                    while !self.stopped() {
                        match until.checked_duration_since(Instant::now()) {
                            Some(left) => std::thread::sleep(left.min(STOP_POLL)),
                            None => break,
                        }
                    }
                    backoff = (backoff * 2).min(self.policy.max_backoff);
                }
            }
        }
        unreachable!("the loop returns on the last attempt")
    }
}
