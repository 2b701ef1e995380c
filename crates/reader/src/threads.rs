//! How many worker threads a loader starts when it is not told: the cores this process may use,
//! shared among the ranks torchrun starts on the node and the consumers that split its batches.

/// `cores` divided by the ranks on this node (`local_ranks`, the text of `LOCAL_WORLD_SIZE`;
/// unset or not a positive number counts as one) and by the consumers sharing this rank's batches
/// (`split`, as DataLoader worker processes): eight ranks each taking every core would run eight
/// times the threads. At least one.
pub(crate) fn default_workers(
    cores: usize,
    local_ranks: Option<&str>,
    split: Option<(u32, u32)>,
) -> usize {
    let ranks = local_ranks
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    let consumers = split.map_or(1, |(_, n)| n.max(1) as usize);
    (cores / ranks.saturating_mul(consumers)).max(1)
}

/// [`default_workers`] for this process: its available cores and its `LOCAL_WORLD_SIZE`.
pub(crate) fn default_workers_here(split: Option<(u32, u32)>) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let local = std::env::var("LOCAL_WORLD_SIZE").ok();
    default_workers(cores, local.as_deref(), split)
}

#[cfg(test)]
mod tests {
    use super::default_workers;

    #[test]
    fn cores_are_shared_among_local_ranks_and_consumers() {
        assert_eq!(default_workers(16, None, None), 16);
        assert_eq!(default_workers(16, Some("8"), None), 2);
        assert_eq!(default_workers(16, Some(" 4 "), Some((1, 2))), 2);
        assert_eq!(default_workers(16, None, Some((0, 4))), 4);
        // More sharers than cores still leaves each one thread.
        assert_eq!(default_workers(16, Some("8"), Some((0, 4))), 1);
        assert_eq!(default_workers(2, Some("64"), None), 1);
        // Unusable values count as one rank.
        for bad in ["", "0", "-2", "eight", "99999999999999999999999"] {
            assert_eq!(default_workers(6, Some(bad), None), 6, "{bad:?}");
        }
    }
}
