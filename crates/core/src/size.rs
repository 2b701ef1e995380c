//! Byte sizes as people write them (`64MiB`, `1GB`, `4096`), the one parser behind every size
//! option: shard sizes, cache limits.

/// Why a byte size could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}")]
pub struct ByteSizeError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses `64MiB`, `1GB`, `1.5GiB`, `4096` (bytes). Units: B, KB/MB/GB/TB (powers of 1000),
/// KiB/MiB/GiB/TiB (powers of 1024); case-insensitive; at least one byte.
pub fn parse_byte_size(s: &str) -> Result<u64, ByteSizeError> {
    let err = |reason| ByteSizeError {
        input: s.to_string(),
        reason,
    };
    let t = s.trim();
    if t.starts_with('-') {
        return Err(err("a size is a positive number of bytes, such as 64MiB"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(err("unknown unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| err("expected a number such as 64MiB"))?;
    let bytes = value * mult as f64;
    if !(1.0..1.8e19).contains(&bytes) {
        return Err(err("out of range: at least 1 byte, under 16 EiB"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_every_unit() {
        assert_eq!(parse_byte_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_byte_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert_eq!(parse_byte_size("1.5kib"), Ok(1536));
        assert_eq!(parse_byte_size(" 2 TiB "), Ok(2 << 40));
        for bad in ["", "MiB", "12 parsecs", "-1", "0", "1e3", "99999999TB"] {
            let e = parse_byte_size(bad).unwrap_err();
            assert_eq!(e.input, bad);
            assert!(e.to_string().contains("invalid size"), "{e}");
        }
    }
}
