//! Walking one stack: framehop steps each frame, reading words from the
//! copied slice and, past its end, from a [`Beyond`]; frames whose CFA is
//! kept in `rbx` are stepped by `fallback`; outer frames are recalled and
//! remembered through the [`Beyond`]; a stack that stops in an ELF entry
//! point counts as whole.

use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, Unwinder as _};

use crate::fallback::{in_ranges, step_by_rbx, CfiModule};
use crate::{Beyond, Cut, FrameState, Outcome, OuterFrames, Process, UserRegs};

/// The copied slice of a stack: `bytes` from address `start` upwards.
pub(crate) struct Copy<'a> {
    pub(crate) start: u64,
    pub(crate) bytes: &'a [u8],
}

impl Copy<'_> {
    pub(crate) fn end(&self) -> u64 {
        self.start.saturating_add(self.bytes.len() as u64)
    }

    pub(crate) fn word(&self, addr: u64) -> Option<u64> {
        let off = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        let bytes = self.bytes.get(off..off.checked_add(8)?)?;
        let mut word = [0u8; 8];
        word.copy_from_slice(bytes);
        Some(u64::from_le_bytes(word))
    }
}

/// The stack's memory: the copy, then what `beyond` gives past its end.
struct Memory<'c, 'b> {
    copy: Copy<'c>,
    beyond: Option<&'b mut dyn Beyond>,
    /// Whether `beyond` accepted this stack (asked once, when first needed).
    entered: Option<bool>,
    /// Memory past the copy was asked for.
    used_beyond: bool,
    /// A read past the copy failed (no `beyond`, or it had nothing).
    missed_past_copy: bool,
}

impl Memory<'_, '_> {
    /// Asks `beyond` once whether it takes this stack; `frame_sp` is the
    /// stack pointer of the frame that needs memory past the copy.
    fn enter(&mut self, frame_sp: u64) -> bool {
        match (&mut self.beyond, self.entered) {
            (_, Some(e)) => e,
            (Some(b), None) => *self.entered.insert(b.enter(frame_sp)),
            (None, None) => false,
        }
    }

    fn read(&mut self, addr: u64, frame_sp: u64) -> Option<u64> {
        if let Some(w) = self.copy.word(addr) {
            return Some(w);
        }
        if addr < self.copy.end() {
            return None;
        }
        self.used_beyond |= self.beyond.is_some();
        let w = if self.enter(frame_sp) {
            self.beyond.as_deref_mut().and_then(|b| b.read(addr))
        } else {
            None
        };
        self.missed_past_copy |= w.is_none();
        w
    }
}

/// How a walk went.
pub(crate) struct Walked {
    pub(crate) outcome: Outcome,
    pub(crate) used_beyond: bool,
    pub(crate) missed_past_copy: bool,
}

/// Unwinds one stack of `proc` from `regs` over `stack` (then `beyond`),
/// appending the ip and then return addresses (not adjusted) to `out`.
pub(crate) fn walk(
    proc: &Process,
    cache: &mut CacheX86_64,
    max_frames: usize,
    regs: UserRegs,
    stack: &[u8],
    beyond: Option<&mut dyn Beyond>,
    out: &mut Vec<u64>,
) -> Walked {
    let mut mem = Memory {
        copy: Copy {
            start: regs.sp,
            bytes: stack,
        },
        beyond,
        entered: None,
        used_beyond: false,
        missed_past_copy: false,
    };
    let start = out.len();
    // The first caller frame entirely past the copy, and where its frames start in `out`.
    let mut memo: Option<(FrameState, usize)> = None;
    // States further out, every CHECKPOINT_EVERY frames, remembered with it.
    let mut checkpoints: Vec<(FrameState, usize)> = Vec::new();
    // Frames stepped so far: their lookup address and CFA (for `fallback`).
    let mut history: Vec<(u64, u64)> = Vec::new();
    let mut uregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
    let mut address = FrameAddress::from_instruction_pointer(regs.ip);
    out.push(regs.ip);
    let outcome = loop {
        if out.len() - start >= max_frames {
            break Outcome::Truncated(Cut::TooDeep);
        }
        let before = uregs;
        let frame_sp = before.sp();
        let mut read = |addr: u64| mem.read(addr, frame_sp).ok_or(());
        let step = match proc.trampoline_at(address.address_for_lookup()) {
            Some((start, shape)) => {
                let first = !address.is_return_address();
                let offset = address.address() - start;
                match shape.step(offset, first, before.sp(), before.bp(), &mut read) {
                    Some((ra, cfa, bp)) => {
                        uregs = UnwindRegsX86_64::new(ra, cfa, bp);
                        Ok(Some(ra))
                    }
                    None => Err(()),
                }
            }
            // framehop would guess these by frame pointer: stepped below.
            None if proc.cfa_elsewhere(address.address_for_lookup()) => Err(()),
            None => proc
                .unwinder
                .unwind_frame(address, &mut uregs, cache, &mut read)
                .map_err(drop),
        };
        let ra = match step {
            Ok(Some(ra)) => ra,
            Ok(None) => break Outcome::Complete,
            Err(()) => {
                let module_of = |a: u64| proc.cfi_module(a);
                let stepped = regs.bx.and_then(|bx| {
                    let mut read = |a: u64| mem.read(a, frame_sp);
                    let lookup = address.address_for_lookup();
                    step_by_rbx(&module_of, &history, bx, lookup, before.bp(), &mut read)
                });
                match stepped {
                    Some((ra, cfa, bp)) => {
                        uregs = UnwindRegsX86_64::new(ra, cfa, bp);
                        ra
                    }
                    None if mem.missed_past_copy => break Outcome::Truncated(Cut::CopyEnded),
                    None => break Outcome::Truncated(Cut::NoRule),
                }
            }
        };
        history.push((address.address_for_lookup(), uregs.sp()));
        let Some(next) = FrameAddress::from_return_address(ra) else {
            break Outcome::Truncated(Cut::NoRule);
        };
        let state = FrameState {
            ip: ra,
            sp: uregs.sp(),
            bp: uregs.bp(),
        };
        let past_copy = state.sp >= mem.copy.end() && mem.beyond.is_some();
        let known = match memo {
            None if past_copy => {
                let accepted = mem.enter(frame_sp);
                let known = match mem.beyond.as_deref_mut() {
                    Some(b) if accepted => b.recall(state),
                    _ => None,
                };
                if known.is_none() {
                    memo = Some((state, out.len()));
                }
                known
            }
            // Further out, once the memory past the copy was accepted: a
            // state an earlier walk went through.
            Some((_, at)) if mem.entered == Some(true) => {
                if (out.len() - at).is_multiple_of(CHECKPOINT_EVERY) {
                    checkpoints.push((state, out.len()));
                }
                mem.beyond.as_deref_mut().and_then(|b| b.recall(state))
            }
            _ => None,
        };
        if let Some(known) = known {
            mem.used_beyond = true;
            out.extend_from_slice(known.outer());
            break if known.complete {
                Outcome::Complete
            } else {
                Outcome::Truncated(Cut::CopyEnded)
            };
        }
        out.push(ra);
        address = next;
    };
    // A stack that stops in an entry point is whole; whatever a
    // frame-pointer guess made of the bytes past it is not a caller.
    let outcome = match outcome {
        Outcome::Truncated(_) => match out[start + 1..].iter().position(|&a| proc.is_entry(a)) {
            Some(i) => {
                out.truncate(start + 2 + i);
                Outcome::Complete
            }
            None => outcome,
        },
        complete => complete,
    };
    if let (Some(first), Some(b)) = (memo, mem.beyond.as_deref_mut()) {
        if first.1 < out.len()
            && mem.entered == Some(true)
            && !matches!(outcome, Outcome::Truncated(Cut::TooDeep))
        {
            remember(
                b,
                first,
                checkpoints,
                &out[..],
                outcome == Outcome::Complete,
            );
        }
    }
    Walked {
        outcome,
        used_beyond: mem.used_beyond,
        missed_past_copy: mem.missed_past_copy,
    }
}

/// Hands `b` the outer frames of the first state past the copy and of the
/// checkpoints further out (those a stack cut back at an entry point still
/// holds), all sharing one list of `out`'s frames from the first on.
fn remember(
    b: &mut dyn Beyond,
    first: (FrameState, usize),
    checkpoints: Vec<(FrameState, usize)>,
    out: &[u64],
    complete: bool,
) {
    let at = first.1;
    let frames: Arc<[u64]> = out[at..].into();
    let states = std::iter::once(first).chain(checkpoints);
    for (state, from) in states.take_while(|&(_, from)| from < out.len()) {
        b.remember(
            state,
            OuterFrames {
                frames: Arc::clone(&frames),
                from: from - at,
                complete,
            },
        );
    }
}

/// How many frames apart the states past the copy are remembered.
const CHECKPOINT_EVERY: usize = 8;

/// A module's DWARF, for `fallback`.
impl Process {
    fn cfi_module(&self, addr: u64) -> Option<CfiModule> {
        let (_, m) = self.ranges.range(..=addr).next_back()?;
        (addr < m.end).then(|| m.cfi.clone()).flatten()
    }

    /// Whether the row of `addr` keeps its CFA where framehop cannot see.
    fn cfa_elsewhere(&self, addr: u64) -> bool {
        let Some((_, m)) = self.ranges.range(..=addr).next_back() else {
            return false;
        };
        match &m.cfi {
            Some(c) if addr < m.end && !c.sections.cfa_elsewhere.is_empty() => {
                in_ranges(&c.sections.cfa_elsewhere, addr.wrapping_sub(c.bias))
            }
            _ => false,
        }
    }
}
