//! The labels of the input store, run-length coded or one word per input, whichever costs less.

/// Labels in listing order: runs of equal labels (`(first input, label)`: a folder listing has
/// one per class), or one per input once runs would cost more (labels that change from input to
/// input, as in a WebDataset or a list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Labels {
    Runs(Vec<(u32, u32)>),
    Dense(Vec<u32>),
}

impl Default for Labels {
    fn default() -> Self {
        Self::Runs(Vec::new())
    }
}

impl Labels {
    /// Records the label of input `index` (the next one).
    pub(crate) fn push(&mut self, index: u32, label: u32) {
        match self {
            Self::Runs(runs) => {
                if runs.last().is_some_and(|&(_, l)| l == label) {
                    return;
                }
                runs.push((index, label));
                // A run costs two words, a dense label one: switch when runs outnumber half
                // the inputs.
                if runs.len() > 64 && runs.len() * 2 > index as usize + 1 {
                    let mut dense = Vec::with_capacity((index as usize + 1).next_power_of_two());
                    for (k, &(first, l)) in runs.iter().enumerate() {
                        let end = runs.get(k + 1).map_or(index + 1, |r| r.0);
                        dense.resize(dense.len() + (end - first) as usize, l);
                    }
                    *self = Self::Dense(dense);
                }
            }
            Self::Dense(d) => d.push(label),
        }
    }

    pub(crate) fn get(&self, i: usize) -> u32 {
        match self {
            Self::Runs(runs) => runs[runs.partition_point(|r| r.0 as usize <= i) - 1].1,
            Self::Dense(d) => d[i],
        }
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        match self {
            Self::Runs(r) => r.shrink_to_fit(),
            Self::Dense(d) => d.shrink_to_fit(),
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Self::Runs(r) => r.capacity() * 8,
            Self::Dense(d) => d.capacity() * 4,
        }
    }
}
