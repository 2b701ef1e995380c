//! Where a dataset lives: a local folder (read in place) or a remote folder (`http(s)://`,
//! `s3://`) whose shards go through the cache.

use crate::CacheError;
use std::path::PathBuf;

/// Name of the manifest a dataset folder holds.
const MANIFEST: &str = "manifest.json";

/// A parsed dataset location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local folder or manifest path (`/data/x`, `./x`, `file:///data/x`): read in place, never
    /// copied into the cache and never deleted by it.
    Local(PathBuf),
    /// A remote dataset folder.
    Remote(RemoteUrl),
}

/// A remote dataset: the folder URL (always ending in `/`) and the manifest's file name in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUrl {
    /// `http`, `https` or `s3`.
    pub scheme: String,
    /// The folder, e.g. `https://host/data/imagenet/` or `s3://bucket/imagenet/`.
    pub folder: url::Url,
    /// The manifest's file name inside the folder (normally `manifest.json`).
    pub manifest: String,
}

/// What a name's bytes need escaped to stand in a URL's path (`/` separates its segments).
const PATH_ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// `name` (a path of stored names) as it stands in a URL's path.
fn url_path(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, PATH_ESCAPED).to_string()
}

/// A name as stored, from its spelling in a URL (`s%201.tar` is `s 1.tar`): [`url_path`]'s
/// inverse.
#[cfg(feature = "remote")]
pub(crate) fn unescaped(spelled: &str) -> String {
    percent_encoding::percent_decode_str(spelled)
        .decode_utf8_lossy()
        .into_owned()
}

impl RemoteUrl {
    /// The URL of a file in the dataset folder (`name` as stored: `s 1.tar` is `s%201.tar`).
    pub fn file_url(&self, name: &str) -> String {
        format!("{}{}", self.folder, url_path(name))
    }

    /// The URL of a file in the dataset folder as it may be shown (printed, drawn, stored in a
    /// report): without the user and password a URL may carry.
    pub fn shown(&self, name: &str) -> String {
        format!("{}{name}", self.key())
    }

    /// The folder URL without user and password: what the cache knows the dataset by (its
    /// folder name and `source` file), so credentials are never written to disk.
    pub fn key(&self) -> String {
        let mut u = self.folder.clone();
        // Only URLs with a host can carry credentials; failures leave nothing to remove.
        let _ = u.set_username("");
        let _ = u.set_password(None);
        u.to_string()
    }

    /// What the cache knows the dataset by: [`key`](Self::key), and for S3 the endpoint other
    /// than AWS's that serves it (`AWS_ENDPOINT`), as one bucket path on two stores holds
    /// two datasets. Credentials an endpoint URL carries are masked.
    pub fn cache_key(&self, endpoint: Option<&str>) -> String {
        match endpoint.filter(|e| self.scheme == "s3" && !e.is_empty()) {
            Some(e) => format!(
                "{} (endpoint {})",
                self.key(),
                shardtool_core::redact_urls(e.trim_end_matches('/'))
            ),
            None => self.key(),
        }
    }

    /// The folder's path inside its bucket or server, without leading or trailing `/`.
    pub fn prefix(&self) -> String {
        self.folder.path().trim_matches('/').to_string()
    }

    /// [`prefix`](Self::prefix) as stored (a URL spells `my ds` as `my%20ds`).
    #[cfg(feature = "remote")]
    pub(crate) fn stored_prefix(&self) -> String {
        unescaped(&self.prefix())
    }
}

/// Why a `file://` URL with `?` or `#` is refused: a URL ends its path there, so the file read
/// would not be the one named.
pub const FILE_URL_QUERY: &str = "a file:// URL ends its path at `?` or `#`, so another file \
    would be read: spell them %3F and %23, or give the plain path";

impl Location {
    /// Parses a dataset argument: a path, `file://…`, `http(s)://…` or `s3://bucket/…`, naming
    /// the dataset folder or its manifest.
    pub fn parse(s: &str) -> Result<Self, CacheError> {
        let bad = |why: &str| CacheError::BadLocation {
            location: s.to_string(),
            message: why.to_string(),
        };
        let Some((scheme, _)) = s.split_once("://") else {
            return Ok(Location::Local(PathBuf::from(s)));
        };
        let scheme = scheme.to_ascii_lowercase();
        match scheme.as_str() {
            "file" => {
                let url = url::Url::parse(s).map_err(|e| bad(&e.to_string()))?;
                if url.query().is_some() || url.fragment().is_some() {
                    return Err(bad(FILE_URL_QUERY));
                }
                let path = url
                    .to_file_path()
                    .map_err(|()| bad("not a local file path"))?;
                Ok(Location::Local(path))
            }
            "http" | "https" | "s3" => {
                let mut url = url::Url::parse(s).map_err(|e| bad(&e.to_string()))?;
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(bad(if scheme == "s3" {
                        "no bucket: expected s3://<bucket>/<folder>"
                    } else {
                        "no host"
                    }));
                }
                if url.query().is_some() || url.fragment().is_some() {
                    return Err(bad("query strings and fragments are not supported"));
                }
                let path = url.path().to_string();
                let last = path.rsplit('/').next().unwrap_or("");
                if shardtool_manifest::ShardKind::from_name(last).is_some()
                    || last.ends_with(".tar.gz")
                    || last.ends_with(".tgz")
                {
                    return Err(bad(&format!(
                        "{last} is a shard: a dataset is named by its folder or its \
                         manifest.json"
                    )));
                }
                let (folder, manifest) = match path.rsplit_once('/') {
                    // The manifest's name as stored (`train%20v2.json` is `train v2.json`): the
                    // store escapes it once when it is fetched.
                    Some((dir, file)) if file.ends_with(".json") => {
                        let name = percent_encoding::percent_decode_str(file)
                            .decode_utf8()
                            .ok()
                            .filter(|n| !n.contains('/'))
                            .ok_or_else(|| {
                                bad("the manifest's name escapes a `/` or bytes that are not \
                                     UTF-8 text")
                            })?;
                        (format!("{dir}/"), name.into_owned())
                    }
                    _ if path.ends_with('/') => (path, MANIFEST.to_string()),
                    _ => (format!("{path}/"), MANIFEST.to_string()),
                };
                url.set_path(&folder);
                Ok(Location::Remote(RemoteUrl {
                    scheme,
                    folder: url,
                    manifest,
                }))
            }
            other => Err(bad(&format!(
                "unsupported scheme {other:?}: use a local path, file://, http://, https:// or s3://"
            ))),
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            // Credentials masked, the manifest's name spelled as in a URL.
            Location::Remote(r) => write!(f, "{}{}", r.key(), url_path(&r.manifest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(s: &str) -> RemoteUrl {
        match Location::parse(s).unwrap() {
            Location::Remote(r) => r,
            l => panic!("{s} parsed as {l:?}"),
        }
    }

    #[test]
    fn local_paths_and_file_urls_stay_local() {
        assert_eq!(
            Location::parse("data/x").unwrap(),
            Location::Local("data/x".into())
        );
        assert_eq!(
            Location::parse("file:///data/x/manifest.json").unwrap(),
            Location::Local("/data/x/manifest.json".into())
        );
    }

    #[test]
    fn folder_and_manifest_urls_name_the_same_dataset() {
        let a = remote("http://127.0.0.1:8080/ds");
        let b = remote("http://127.0.0.1:8080/ds/");
        let c = remote("http://127.0.0.1:8080/ds/manifest.json");
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a.folder.as_str(), "http://127.0.0.1:8080/ds/");
        assert_eq!(
            a.file_url("shard-000000.tar"),
            "http://127.0.0.1:8080/ds/shard-000000.tar"
        );
        assert_eq!(a.prefix(), "ds");
        let s = remote("s3://bucket/a/b/other.json");
        assert_eq!(s.manifest, "other.json");
        assert_eq!(s.prefix(), "a/b");
        assert_eq!(s.folder.host_str(), Some("bucket"));
    }

    #[test]
    fn an_s3_dataset_is_cached_by_its_endpoint_too() {
        let s = remote("s3://bucket/ds/");
        assert_eq!(s.cache_key(None), "s3://bucket/ds/");
        let minio = s.cache_key(Some("http://127.0.0.1:9000/"));
        assert_eq!(minio, "s3://bucket/ds/ (endpoint http://127.0.0.1:9000)");
        assert_ne!(minio, s.cache_key(Some("http://10.0.0.2:9000")));
        let masked = s.cache_key(Some("https://user:secret@store.example"));
        assert!(!masked.contains("secret"), "{masked}");
        // An HTTP folder names its server already.
        let h = remote("http://host/ds/");
        assert_eq!(h.cache_key(Some("http://other:9000")), h.key());
    }

    #[test]
    fn bad_locations_say_why() {
        for (s, want) in [
            ("ftp://host/x", "unsupported scheme"),
            ("s3:///x", "no bucket"),
            ("http://host/x?sig=1", "query"),
            (
                "http://host/ds/shard-000001.tar",
                "shard-000001.tar is a shard",
            ),
            ("s3://b/ds/s-000001.tar.zst", "s-000001.tar.zst is a shard"),
            ("https://host/ds/x.safetensors", "x.safetensors is a shard"),
            ("https://host/wds/00001.tar.gz", "00001.tar.gz is a shard"),
        ] {
            let e = Location::parse(s).unwrap_err().to_string();
            assert!(e.contains(want), "{s}: {e}");
        }
    }
}
