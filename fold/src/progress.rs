//! How far a fold has come, for a caller that shows progress on long folds.
//!
//! The fold updates plain atomic counters as it goes (per chunk read, per
//! phase); the caller reads them from another thread whenever it likes. No
//! callback runs inside the fold, so showing progress cannot slow it or
//! fail it.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// What the fold is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Reading the recording, summing samples per stack.
    Reading,
    /// Naming the distinct frames (symbol tables, DWARF, caches).
    Symbolizing,
    /// Building folded lines and function totals.
    Folding,
    /// Finished.
    Done,
}

/// Counters of one fold in progress; share it between the fold and a reader.
#[derive(Debug, Default)]
pub struct FoldProgress {
    phase: AtomicU8,
    bytes: AtomicU64,
    samples: AtomicU64,
    frames: AtomicU64,
}

impl FoldProgress {
    /// The current phase.
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Reading,
            1 => Phase::Symbolizing,
            2 => Phase::Folding,
            _ => Phase::Done,
        }
    }

    /// Bytes of the recording read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Samples read so far (those the filters keep).
    pub fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// Distinct frames being named (known once symbolizing starts).
    pub fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }

    pub(crate) fn read(&self, bytes: u64, samples: u64) {
        self.bytes.store(bytes, Ordering::Relaxed);
        self.samples.store(samples, Ordering::Relaxed);
    }

    pub(crate) fn enter(&self, phase: Phase) {
        let code = match phase {
            Phase::Reading => 0,
            Phase::Symbolizing => 1,
            Phase::Folding => 2,
            Phase::Done => 3,
        };
        self.phase.store(code, Ordering::Relaxed);
    }

    pub(crate) fn naming(&self, frames: u64) {
        self.frames.store(frames, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_and_counts_read_back() {
        let p = FoldProgress::default();
        assert_eq!(p.phase(), Phase::Reading);
        p.read(4096, 12);
        p.enter(Phase::Symbolizing);
        p.naming(7);
        assert_eq!((p.bytes(), p.samples(), p.frames()), (4096, 12, 7));
        assert_eq!(p.phase(), Phase::Symbolizing);
        p.enter(Phase::Done);
        assert_eq!(p.phase(), Phase::Done);
    }
}
