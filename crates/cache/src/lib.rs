//! Dataset locations and the local shard cache (placeholder).
