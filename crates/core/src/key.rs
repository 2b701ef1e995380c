//! Sample keys: the names that group a sample's fields in a shard.
//!
//! WebDataset splits a member name into key and field at the first `.` of its last path
//! component, so a key must contain no `.` and (for us) no `/`. We are stricter than that so that
//! every tool (webdataset, DALI, wids, HF datasets) parses our keys the same way.

/// Longest key accepted, in bytes. Keeps `<key>.<field>` within the 100-byte USTAR name field.
pub const MAX_KEY_LEN: usize = 80;

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty.
    #[error("key is empty")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`].
    #[error("key is {len} bytes long, at most {MAX_KEY_LEN} allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The key holds a character outside `[A-Za-z0-9_-]`.
    #[error("key holds {ch:?}; only ASCII letters, digits, '_' and '-' are allowed")]
    BadChar {
        /// The first offending character.
        ch: char,
    },
    /// The key starts with `__`, which WebDataset reserves for metadata members.
    #[error("key starts with \"__\", which WebDataset reserves")]
    Reserved,
}

/// Checks that `key` is a portable sample key: 1..=80 bytes of `[A-Za-z0-9_-]`, not starting `__`.
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong { len: key.len() });
    }
    if let Some(ch) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(KeyError::BadChar { ch });
    }
    if key.starts_with("__") {
        return Err(KeyError::Reserved);
    }
    Ok(())
}

/// The key of the `index`-th sample of a packed dataset: zero-padded to nine digits so that keys
/// sort like their indices (wider once a dataset passes a billion samples).
pub fn index_key(index: u64) -> String {
    format!("{index:09}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_portable_keys() {
        for k in ["a", "000000001", "img_01-x", &"k".repeat(MAX_KEY_LEN)] {
            assert_eq!(validate_key(k), Ok(()), "{k}");
        }
    }

    #[test]
    fn refuses_keys_that_tools_would_split_differently() {
        assert_eq!(validate_key(""), Err(KeyError::Empty));
        assert_eq!(validate_key("a.b"), Err(KeyError::BadChar { ch: '.' }));
        assert_eq!(validate_key("a/b"), Err(KeyError::BadChar { ch: '/' }));
        assert_eq!(validate_key("é"), Err(KeyError::BadChar { ch: 'é' }));
        assert_eq!(validate_key("__meta"), Err(KeyError::Reserved));
        assert!(matches!(
            validate_key(&"k".repeat(MAX_KEY_LEN + 1)),
            Err(KeyError::TooLong { .. })
        ));
    }

    #[test]
    fn index_keys_sort_like_indices_and_are_valid() {
        let keys: Vec<String> = [0u64, 9, 10, 999_999_999].map(index_key).to_vec();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert!(keys.iter().all(|k| validate_key(k).is_ok()));
    }
}
