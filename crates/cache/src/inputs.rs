//! Remote files that no manifest describes (pack's inputs): list a remote folder and fetch whole
//! objects into local files, with the same client, timeouts and retries as the shard cache.

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
        let (dir, file) = match path.rsplit_once('/') {
            Some((dir, file)) if !file.is_empty() => (format!("{dir}/"), Some(file.to_string())),
            _ => (path.clone(), None),
        };
        let mut folder = parsed.clone();
        folder.set_path(&dir);
        let remote = RemoteUrl {
            scheme,
            folder,
            manifest: String::new(),
        };
        let remote = Remote::connect(remote, policy, Arc::new(Recorder::default()))?;
        Ok((Self { remote }, file))
    }

    /// The URL of `name` in the folder.
    pub fn url_of(&self, name: &str) -> String {
        self.remote.url.file_url(name)
    }

    /// The files under the folder, recursively: names relative to it and sizes, sorted by name.
    pub fn list(&self) -> Result<Vec<(String, u64)>, CacheError> {
        self.remote.list()
    }

    /// Fetches `name` into `file` (empty), refusing objects over `limit` bytes before reading
    /// them; returns its size.
    pub fn fetch(
        &self,
        name: &str,
        limit: u64,
        file: &mut std::fs::File,
    ) -> Result<u64, CacheError> {
        let size = self.remote.size_of(name)?;
        if size > limit {
            return Err(CacheError::Fetch {
                url: self.url_of(name),
                attempts: 1,
                message: format!("{size} bytes, over the {limit}-byte input limit"),
            });
        }
        self.remote.download_unchecked(name, size, file)?;
        Ok(size)
    }
}
