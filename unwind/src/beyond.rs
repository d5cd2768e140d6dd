//! Memory beyond the copied slice of a stack.
//!
//! A sample carries a copy of the top of the user stack (tens of KiB at
//! most); stacks of compilers, interpreters and deep recursion are deeper.
//! When unwinding runs off the end of the copy, the caller may supply the
//! rest through [`Beyond`]: typically the live thread's memory, read after
//! checking that the frames the copy ended in are still there. This crate
//! never reads another process itself; it only asks.
//!
//! Once the unwinder reaches a frame whose stack pointer lies past the copy,
//! everything further out depends only on that frame's registers (ip, sp,
//! bp) and on memory above sp. [`Beyond`] can remember the frames unwound
//! from such a state ([`Beyond::remember`]) and hand them back for a later
//! sample of the same thread ([`Beyond::recall`]) for as long as it knows
//! that memory to be unchanged, so a long-lived deep stack is unwound once,
//! not per sample. States are remembered every few frames along the walk,
//! not only where it left the copy: a later sample whose innermost frames
//! differ (at a few Hz, most do) still meets the same outer ones soon.

use std::sync::Arc;

/// The registers of a frame, as far as unwinding needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameState {
    /// Instruction pointer (for a caller frame: the return address).
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
}

/// The outer frames unwound from a [`FrameState`], and whether they reach
/// the thread's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OuterFrames {
    /// Return addresses (not adjusted) from `from` on: the state's ip first,
    /// outermost last. One walk's states share one list.
    pub frames: Arc<[u64]>,
    /// Where this state's frames start in `frames`.
    pub from: usize,
    /// They end at the thread's entry.
    pub complete: bool,
}

impl OuterFrames {
    /// The frames from the state outwards.
    pub fn outer(&self) -> &[u64] {
        self.frames.get(self.from..).unwrap_or_default()
    }
}

/// Where words above the copied stack slice come from.
pub trait Beyond {
    /// Unwinding needs memory past the copy for the frame whose stack
    /// pointer is `frame_sp` (the frame the copy ends in): whether the rest
    /// of the stack can be had and is provably the sampled one. Asked before
    /// any [`Beyond::read`] or [`Beyond::recall`] of a sample.
    fn enter(&mut self, frame_sp: u64) -> bool;

    /// The 8-byte word at `addr` (at or above the end of the copy), or
    /// `None` when it cannot be had.
    fn read(&mut self, addr: u64) -> Option<u64>;

    /// Outer frames unwound earlier from `state`, if still valid.
    fn recall(&mut self, state: FrameState) -> Option<OuterFrames>;

    /// Frames unwound from `state` (which lies past the copy), for
    /// [`Beyond::recall`] to hand back later.
    fn remember(&mut self, state: FrameState, outer: OuterFrames);
}
