//! Bounds on what untrusted input may make us allocate.

/// Resource limits applied to every untrusted input (image files, shards, manifests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest decoded image, in pixels (width × height), checked from the header before decoding.
    pub max_pixels: u64,
    /// Largest input file read into memory, in bytes.
    pub max_input_bytes: u64,
    /// Largest manifest or shard header read into memory, in bytes.
    pub max_header_bytes: u64,
}

impl Limits {
    /// 100 megapixels: larger than any camera photo, small enough to stop decompression bombs.
    pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;
    /// 512 MiB per input file.
    pub const DEFAULT_MAX_INPUT_BYTES: u64 = 512 << 20;
    /// 256 MiB per manifest or shard header.
    pub const DEFAULT_MAX_HEADER_BYTES: u64 = 256 << 20;
    /// The most pixels a reader or verify decodes a record of any dataset to (2^30: 3 GiB of
    /// RGB), whatever its manifest says it was packed under.
    pub const READER_MAX_PIXELS: u64 = 1 << 30;

    /// The pixel limit for decoding the records of a dataset packed with `--max-pixels packed`
    /// (its manifest's `pack.max_pixels`): that, when over the default, within
    /// [`Self::READER_MAX_PIXELS`]; a pack cannot have stored a larger image.
    pub fn dataset_max_pixels(packed: Option<u64>) -> u64 {
        let default = Self::DEFAULT_MAX_PIXELS;
        packed
            .unwrap_or(default)
            .clamp(default, Self::READER_MAX_PIXELS)
    }
}

/// What a file that is no regular file is instead, in the words [`open_regular`] refuses it with.
pub fn not_regular_file(meta: &std::fs::Metadata) -> &'static str {
    match meta.is_dir() {
        true => "is a directory",
        false => "not a regular file (a FIFO, device or socket)",
    }
}

/// Opens `path` for reading when it is a regular file (or a link to one): a FIFO would block
/// the open until a writer comes, and a device such as `/dev/zero` never ends. The kind is
/// checked before opening (so a FIFO is never opened) and of the file opened.
pub fn open_regular(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let not_regular = |m: std::fs::Metadata| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, not_regular_file(&m))
    };
    let before = std::fs::metadata(path)?;
    if !before.is_file() {
        return Err(not_regular(before));
    }
    let file = std::fs::File::open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() {
        return Err(not_regular(opened));
    }
    Ok(file)
}

/// [`read_within`] of a regular file only ([`open_regular`]): a dataset's manifest.
pub fn read_regular_within(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    read_file_within(open_regular(path)?, limit)
}

/// Reads a whole file of at most `limit` bytes, holding no more than `limit + 1` of a larger
/// one, which is an [`ErrorKind::FileTooLarge`](std::io::ErrorKind::FileTooLarge) error. Its
/// buffer is reserved fallibly: a file larger than the memory the process may take (`ulimit
/// -v`) is an [`ErrorKind::OutOfMemory`](std::io::ErrorKind::OutOfMemory) error, not an abort.
pub fn read_within(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    read_file_within(std::fs::File::open(path)?, limit)
}

fn read_file_within(file: std::fs::File, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    // Sized from the file system (within the limit), so a file is read in one or two calls
    // rather than in doubling steps.
    let hint = file.metadata().map_or(0, |m| m.len()).min(limit);
    let mut bytes = Vec::new();
    let want = usize::try_from(hint)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    bytes.try_reserve_exact(want).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("no memory to hold its {hint} bytes"),
        )
    })?;
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("over the {limit}-byte limit"),
        ));
    }
    Ok(bytes)
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_pixels: Self::DEFAULT_MAX_PIXELS,
            max_input_bytes: Self::DEFAULT_MAX_INPUT_BYTES,
            max_header_bytes: Self::DEFAULT_MAX_HEADER_BYTES,
        }
    }
}

/// What to do about an error `message` that names a lack of file descriptors, unless it says
/// already: a remote read holds a descriptor (a lock) for every shard it reads or prefetches.
pub fn fault_hint(message: &str) -> Option<&'static str> {
    let descriptors = FAULTS[..2].iter().any(|f| message.contains(f));
    (descriptors && !message.contains("ulimit -n")).then_some(
        " (raise the open-file limit, ulimit -n; a remote read holds one for each shard it reads \
         or prefetches)",
    )
}

/// How an I/O error of this machine's fault reads in a message (as `std::io::Error` prints
/// EMFILE, ENFILE and ENOMEM): whole, with the code, so that a file named "Too many open files"
/// is not taken for one.
const FAULTS: [&str; 3] = [
    "Too many open files (os error 24)",
    "Too many open files in system (os error 23)",
    "Cannot allocate memory (os error 12)",
];

/// Whether `message` (a failure kept as text) names one of this machine's faults.
pub fn names_a_machine_fault(message: &str) -> bool {
    FAULTS.iter().any(|f| message.contains(f))
}

/// Whether `e` is this machine's fault rather than the file's: too many open files (the
/// process's or the system's) or no memory. A run meeting one stops, as a retry may read the file,
/// where a file's own fault (missing, unreadable) is that input's failure.
pub fn machine_fault(e: &std::io::Error) -> bool {
    // EMFILE and ENFILE: 24 and 23 on Linux, macOS and the BSDs.
    e.kind() == std::io::ErrorKind::OutOfMemory || matches!(e.raw_os_error(), Some(23 | 24))
}

#[cfg(test)]
mod tests {
    use super::Limits;

    #[test]
    fn a_dataset_decodes_under_its_packs_limit_within_the_ceiling() {
        let d = Limits::DEFAULT_MAX_PIXELS;
        assert_eq!(Limits::dataset_max_pixels(None), d);
        assert_eq!(Limits::dataset_max_pixels(Some(5)), d);
        assert_eq!(Limits::dataset_max_pixels(Some(2 * d)), 2 * d);
        let ceiling = Limits::READER_MAX_PIXELS;
        assert_eq!(Limits::dataset_max_pixels(Some(u64::MAX)), ceiling);
    }

    #[test]
    fn a_file_over_the_limit_is_refused_and_one_within_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(super::read_within(&path, 5).unwrap(), b"12345");
        let e = super::read_within(&path, 4).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert_eq!(e.to_string(), "over the 4-byte limit");
    }
}
