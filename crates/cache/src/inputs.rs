//! Remote files that no manifest describes: pack's inputs (list a remote folder, fetch whole
//! objects into local files) and a partitioned pack's output folder (small objects read and
//! written whole, shards uploaded once), with the same client, timeouts and retries as the shard
//! cache.

use crate::location::RemoteUrl;
use crate::metrics::Recorder;
use crate::remote::{FetchPolicy, Remote};
use crate::CacheError;
use std::sync::Arc;

/// A remote folder (`http(s)://…/`, `s3://bucket/…/`) whose files are fetched whole.
pub struct RemoteFolder {
    remote: Remote,
}

impl RemoteFolder {
    /// Connects to the folder of `url`. A URL ending in `/` names the folder itself; otherwise
    /// its last segment names a file, returned beside the folder.
    pub fn connect(url: &str, policy: FetchPolicy) -> Result<(Self, Option<String>), CacheError> {
        let (folder, file) = Self::split(url)?;
        let remote = Remote::connect(folder, policy, Arc::new(Recorder::default()))?;
        Ok((Self { remote }, file))
    }

    /// The folder of `url` and the file it names, if any (see [`RemoteFolder::connect`]).
    fn split(url: &str) -> Result<(RemoteUrl, Option<String>), CacheError> {
        let bad = |why: &str| CacheError::BadLocation {
            location: url.to_string(),
            message: why.to_string(),
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        let scheme = parsed.scheme().to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https" | "s3") {
            return Err(bad("expected an http://, https:// or s3:// URL"));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(bad("no host or bucket"));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad("query strings and fragments are not supported"));
        }
        let path = parsed.path().to_string();
        // The file's name as stored (a URL spells `s 1.tar` as `s%201.tar`).
        let (dir, file) = match path.rsplit_once('/') {
            Some((dir, file)) if !file.is_empty() => {
                (format!("{dir}/"), Some(crate::location::unescaped(file)))
            }
            _ => (path.clone(), None),
        };
        let mut folder = parsed.clone();
        folder.set_path(&dir);
        let remote = RemoteUrl {
            scheme,
            folder,
            manifest: String::new(),
        };
        Ok((remote, file))
    }

    /// The URL of `name` in the folder.
    pub fn url_of(&self, name: &str) -> String {
        self.remote.url.file_url(name)
    }

    /// The files under the folder, recursively: names relative to it and sizes, sorted by name.
    pub fn list(&self) -> Result<Vec<(String, u64)>, CacheError> {
        self.remote.list()
    }

    /// The files directly in the folder, not in its subfolders: names and sizes, sorted by name.
    pub fn list_top(&self) -> Result<Vec<(String, u64)>, CacheError> {
        self.remote.list_top()
    }

    /// Fetches `name` into `file` (empty), refusing objects over `limit` bytes before reading
    /// them; returns its size and entity tag (when the server gives one).
    pub fn fetch(
        &self,
        name: &str,
        limit: u64,
        file: &mut std::fs::File,
    ) -> Result<(u64, Option<String>), CacheError> {
        let (size, etag) = self.remote.head(name)?;
        if size > limit {
            return Err(CacheError::Fetch {
                url: self.url_of(name),
                attempts: 1,
                message: format!("{size} bytes, over the {limit}-byte input limit"),
            });
        }
        self.remote.download_unchecked(name, size, file)?;
        Ok((size, etag))
    }
}

/// Connected remote folders, one client each, shared by the threads that fetch many files from
/// them (a pack's URL inputs): a client per file would set up a runtime and TLS roots each time.
#[derive(Default)]
pub struct RemoteFolders {
    policy: FetchPolicy,
    open: std::sync::Mutex<std::collections::HashMap<String, Arc<RemoteFolder>>>,
}

impl std::fmt::Debug for RemoteFolders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteFolders")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl RemoteFolders {
    /// No folder connected yet; each will be with `policy`.
    pub fn new(policy: FetchPolicy) -> Self {
        Self {
            policy,
            open: Default::default(),
        }
    }

    /// Whether the policy's stop flag is set: nothing more should be fetched.
    pub fn stopped(&self) -> bool {
        let stop = self.policy.stop.as_deref();
        stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// [`RemoteFolder::connect`], sharing one client per folder.
    pub fn connect(&self, url: &str) -> Result<(Arc<RemoteFolder>, Option<String>), CacheError> {
        let (folder, file) = RemoteFolder::split(url)?;
        let key = folder.folder.as_str().to_string();
        // A poisoned lock only means another fetch panicked; the map is still whole.
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = open.get(&key) {
            return Ok((f.clone(), file));
        }
        let remote = Remote::connect(folder, self.policy.clone(), Arc::new(Recorder::default()))?;
        let f = Arc::new(RemoteFolder { remote });
        open.insert(key, f.clone());
        Ok((f, file))
    }
}

/// What [`RemoteFolder::publish`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The object was created.
    Created,
    /// An object with the same bytes was there already (a repeated or speculative attempt).
    Existed,
}

/// Objects up to this size are published with one conditional PUT; larger ones by a multipart
/// upload after a HEAD finds none.
const SINGLE_PUT_MAX: u64 = 64 << 20;
/// Multipart part size.
const PART_BYTES: usize = 16 << 20;

impl RemoteFolder {
    /// Reads object `name` whole (at most `limit` bytes), or `None` when there is none.
    pub fn read(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, CacheError> {
        self.remote.get_small_opt(name, limit)
    }

    /// Writes object `name`, replacing any.
    pub fn write(&self, name: &str, bytes: Vec<u8>) -> Result<(), CacheError> {
        self.remote.put(name, bytes.into(), false).map(|_| ())
    }

    /// Deletes object `name` (one already gone is no error).
    pub fn delete(&self, name: &str) -> Result<(), CacheError> {
        self.remote.delete(name)
    }

    /// The size of object `name`, or `None` when there is none.
    pub fn size(&self, name: &str) -> Result<Option<u64>, CacheError> {
        self.remote.size_opt(name)
    }

    /// The size and entity tag (when the server gives one) of object `name`, or `None` when
    /// there is none.
    pub fn head(&self, name: &str) -> Result<Option<(u64, Option<String>)>, CacheError> {
        self.remote.head_opt(name)
    }

    /// Publishes the local file `local` as object `name` once: created when absent; when an
    /// object is there already, accepted only if it holds the same bytes (same size and
    /// checksum), so publishing is idempotent but never replaces other data.
    pub fn publish(&self, name: &str, local: &std::path::Path) -> Result<Published, CacheError> {
        let io = || CacheError::io(local);
        let size = std::fs::metadata(local).map_err(io())?.len();
        if size <= SINGLE_PUT_MAX {
            let bytes = std::fs::read(local).map_err(io())?;
            let sum = shardtool_core::Checksum::of(&bytes);
            if self.remote.put(name, bytes.into(), true)? {
                return Ok(Published::Created);
            }
            return self.same_as(name, size, sum);
        }
        let sum = file_checksum(local).map_err(io())?;
        if self.remote.size_opt(name)?.is_some() {
            return self.same_as(name, size, sum);
        }
        self.remote.put_multipart(name, local, PART_BYTES)?;
        Ok(Published::Created)
    }

    /// Whether object `name` holds `size` bytes with checksum `sum`: [`Published::Existed`] if
    /// so, an error naming it otherwise.
    fn same_as(
        &self,
        name: &str,
        size: u64,
        sum: shardtool_core::Checksum,
    ) -> Result<Published, CacheError> {
        let there = self.remote.size_of(name)?;
        let differs = |what: String| CacheError::Fetch {
            url: self.url_of(name),
            attempts: 1,
            message: format!(
                "another object is already there ({what}); it was not replaced: objects are \
                 never overwritten, so delete it (it is not what this run made) and run again"
            ),
        };
        if there != size {
            return Err(differs(format!("{there} bytes, not {size}")));
        }
        // Compared by downloading it: rare (only a repeated attempt gets here).
        let tmp = std::env::temp_dir().join(format!(
            ".shardtool-compare-{}-{}",
            std::process::id(),
            name.replace('/', "_")
        ));
        let result = (|| {
            let mut f = std::fs::File::options()
                .create_new(true)
                .read(true)
                .write(true)
                .open(&tmp)
                .map_err(CacheError::io(&tmp))?;
            self.remote.download_unchecked(name, size, &mut f)?;
            file_checksum(&tmp).map_err(CacheError::io(&tmp))
        })();
        let _ = std::fs::remove_file(&tmp);
        if result? != sum {
            return Err(differs("other bytes".into()));
        }
        Ok(Published::Existed)
    }
}

fn file_checksum(path: &std::path::Path) -> std::io::Result<shardtool_core::Checksum> {
    Ok(shardtool_core::Checksum::of_reader(std::fs::File::open(path)?)?.1)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    #[test]
    fn one_client_serves_every_file_of_a_folder() {
        let pool = super::RemoteFolders::default();
        let (a, fa) = pool.connect("http://127.0.0.1:9/d/x.tar").unwrap();
        let (b, fb) = pool.connect("http://127.0.0.1:9/d/y%20z.tar").unwrap();
        let (c, _) = pool.connect("http://127.0.0.1:9/e/x.tar").unwrap();
        assert!(Arc::ptr_eq(&a, &b) && !Arc::ptr_eq(&a, &c));
        assert_eq!(fa.as_deref(), Some("x.tar"));
        assert_eq!(fb.as_deref(), Some("y z.tar"));
        assert!(!pool.stopped());
    }
}
