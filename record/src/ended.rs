//! Ids (processes, threads) that ended, each kept `KEEP_NS` after its end
//! for the records that still come about it, then let go.

use std::collections::VecDeque;

/// (end time, id), oldest first.
#[derive(Default)]
pub(crate) struct Ended<const KEEP_NS: u64> {
    queue: VecDeque<(u64, u32)>,
}

impl<const KEEP_NS: u64> Ended<KEEP_NS> {
    /// `id` ended at `time`.
    pub(crate) fn push(&mut self, time: u64, id: u32) {
        self.queue.push_back((time, id));
    }

    /// Takes the ids whose `KEEP_NS` was up at `now`, with their end times,
    /// oldest first.
    pub(crate) fn expired(&mut self, now: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        std::iter::from_fn(move || {
            let &(at, _) = self.queue.front()?;
            if at.saturating_add(KEEP_NS) > now {
                return None;
            }
            self.queue.pop_front()
        })
    }

    /// How many are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// None is kept.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_go_once_their_time_is_up_oldest_first() {
        let mut e = Ended::<10>::default();
        e.push(0, 1);
        e.push(5, 2);
        assert_eq!(e.expired(9).count(), 0);
        assert_eq!(e.expired(10).collect::<Vec<_>>(), [(0, 1)]);
        assert_eq!(e.expired(100).collect::<Vec<_>>(), [(5, 2)]);
        assert_eq!(e.len(), 0);
    }
}
