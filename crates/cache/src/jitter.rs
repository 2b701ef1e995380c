//! Backoff jitter: spreads the retries of processes that failed together.

/// A small xorshift generator for backoff jitter, seeded from the clock and the thread, so
/// processes that failed together do not retry together.
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new() -> Self {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let id = std::process::id() as u64;
        Self((t ^ (id << 32) ^ 0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next_unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}
