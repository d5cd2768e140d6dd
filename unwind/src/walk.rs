//! Walking one stack: framehop steps each frame, reading words from the
//! copied slice and, past its end, from a [`Beyond`]; frames whose CFA is
//! kept in `rbx` are stepped by `fallback`; outer frames are recalled and
//! remembered through the [`Beyond`]; a stack that stops in an ELF entry
//! point counts as whole.

use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, Unwinder as _};

use crate::fallback::{in_ranges, rules, step_by_rbx, CfiModule};
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
    let mut w = Walk {
        proc,
        mem: Memory {
            copy: Copy {
                start: regs.sp,
                bytes: stack,
            },
            beyond,
            entered: None,
            used_beyond: false,
            missed_past_copy: false,
        },
        bx: regs.bx,
        uregs: UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
        address: FrameAddress::from_instruction_pointer(regs.ip),
        history: Vec::new(),
        memo: None,
        checkpoints: Vec::new(),
    };
    let start = out.len();
    out.push(regs.ip);
    let outcome = loop {
        if out.len() - start >= max_frames {
            break Outcome::Truncated(Cut::TooDeep);
        }
        let frame_sp = w.uregs.sp();
        let ra = match w.step(cache) {
            Ok(Some(ra)) => ra,
            Ok(None) => break Outcome::Complete,
            Err(cut) => break Outcome::Truncated(cut),
        };
        let Some(next) = FrameAddress::from_return_address(ra) else {
            break Outcome::Truncated(Cut::NoRule);
        };
        let state = FrameState {
            ip: ra,
            sp: w.uregs.sp(),
            bp: w.uregs.bp(),
        };
        if let Some(known) = w.recall(state, frame_sp, out.len()) {
            w.mem.used_beyond = true;
            out.extend_from_slice(known.outer());
            break if known.complete {
                Outcome::Complete
            } else {
                Outcome::Truncated(Cut::CopyEnded)
            };
        }
        out.push(ra);
        w.address = next;
    };
    let outcome = whole_at_entry(proc, outcome, out, start);
    w.remember_outer(outcome, out);
    Walked {
        outcome,
        used_beyond: w.mem.used_beyond,
        missed_past_copy: w.mem.missed_past_copy,
    }
}

/// One walk under way: the memory it reads, the frame it is at, and what
/// it met past the copy.
struct Walk<'p, 'c, 'b> {
    proc: &'p Process,
    mem: Memory<'c, 'b>,
    /// The sample's rbx, for frames whose CFA is kept there.
    bx: Option<u64>,
    uregs: UnwindRegsX86_64,
    address: FrameAddress,
    /// Frames stepped so far: their lookup address and CFA (for `fallback`).
    history: Vec<(u64, u64)>,
    /// The first caller frame entirely past the copy, and where its frames
    /// start in the output.
    memo: Option<(FrameState, usize)>,
    /// States further out, every [`CHECKPOINT_EVERY`] frames, remembered
    /// with it.
    checkpoints: Vec<(FrameState, usize)>,
}

impl Walk<'_, '_, '_> {
    /// Steps from the current frame to its caller: through a perf
    /// trampoline by its shape, by the module's unwind rules (framehop),
    /// or by rbx where the rules keep the CFA there. The return address,
    /// `None` at the stack's end, or where the walk is cut.
    fn step(&mut self, cache: &mut CacheX86_64) -> Result<Option<u64>, Cut> {
        let before = self.uregs;
        let frame_sp = before.sp();
        let lookup = self.address.address_for_lookup();
        let mem = &mut self.mem;
        let mut read = |addr: u64| mem.read(addr, frame_sp).ok_or(());
        let step = match self.proc.trampoline_at(lookup) {
            Some((start, shape)) => {
                let first = !self.address.is_return_address();
                let offset = self.address.address() - start;
                match shape.step(offset, first, before.sp(), before.bp(), &mut read) {
                    Some((ra, cfa, bp)) => {
                        self.uregs = UnwindRegsX86_64::new(ra, cfa, bp);
                        Ok(Some(ra))
                    }
                    None => Err(()),
                }
            }
            // framehop would guess these by frame pointer: stepped below.
            None if self.proc.cfa_elsewhere(lookup) => Err(()),
            None => self
                .proc
                .unwinder
                .unwind_frame(self.address, &mut self.uregs, cache, &mut read)
                .map_err(drop),
        };
        let ra = match step {
            Ok(Some(ra)) => ra,
            // A leaf without unwind rules is stepped by a guess (its return
            // address taken from the top of the stack): an end of the stack
            // found so is not proven (node's builtins have no rules, and a
            // 0 there ended 1,500 of 6,185 stacks at one frame as if whole).
            Ok(None) if self.history.is_empty() && !self.proc.has_rules(lookup) => {
                return Err(Cut::NoRule)
            }
            Ok(None) => return Ok(None),
            Err(()) => {
                let proc = self.proc;
                let module_of = |a: u64| proc.cfi_module(a);
                let mem = &mut self.mem;
                let stepped = self.bx.and_then(|bx| {
                    let mut read = |a: u64| mem.read(a, frame_sp);
                    step_by_rbx(
                        &module_of,
                        &self.history,
                        bx,
                        lookup,
                        before.bp(),
                        &mut read,
                    )
                });
                match stepped {
                    Some((ra, cfa, bp)) => {
                        self.uregs = UnwindRegsX86_64::new(ra, cfa, bp);
                        ra
                    }
                    None if self.mem.missed_past_copy => return Err(Cut::CopyEnded),
                    None => return Err(Cut::NoRule),
                }
            }
        };
        self.history.push((lookup, self.uregs.sp()));
        Ok(Some(ra))
    }

    /// The outer frames of `state` (the caller just stepped to from the
    /// frame at `frame_sp`, to be frame number `at` of the output) as an
    /// earlier walk found them: asked of the first state entirely past the
    /// copy, and further out, once the memory past it was accepted, of
    /// every state (each [`CHECKPOINT_EVERY`]th kept to be remembered).
    fn recall(&mut self, state: FrameState, frame_sp: u64, at: usize) -> Option<OuterFrames> {
        let past_copy = state.sp >= self.mem.copy.end() && self.mem.beyond.is_some();
        match self.memo {
            None if past_copy => {
                let accepted = self.mem.enter(frame_sp);
                let known = match self.mem.beyond.as_deref_mut() {
                    Some(b) if accepted => b.recall(state),
                    _ => None,
                };
                if known.is_none() {
                    self.memo = Some((state, at));
                }
                known
            }
            Some((_, first)) if self.mem.entered == Some(true) => {
                if (at - first).is_multiple_of(CHECKPOINT_EVERY) {
                    self.checkpoints.push((state, at));
                }
                self.mem.beyond.as_deref_mut().and_then(|b| b.recall(state))
            }
            _ => None,
        }
    }

    /// After the walk: the outer frames found past the copy remembered
    /// for later walks (not those of a walk cut for its depth).
    fn remember_outer(&mut self, outcome: Outcome, out: &[u64]) {
        let entered = self.mem.entered == Some(true);
        let checkpoints = std::mem::take(&mut self.checkpoints);
        if let (Some(first), Some(b)) = (self.memo, self.mem.beyond.as_deref_mut()) {
            if first.1 < out.len()
                && entered
                && !matches!(outcome, Outcome::Truncated(Cut::TooDeep))
            {
                remember(b, first, checkpoints, out, outcome == Outcome::Complete);
            }
        }
    }
}

/// A stack that stops in an entry point is whole; whatever a frame-pointer
/// guess made of the bytes past it is not a caller (cut from `out`).
fn whole_at_entry(proc: &Process, outcome: Outcome, out: &mut Vec<u64>, start: usize) -> Outcome {
    match outcome {
        Outcome::Truncated(_) => match out[start + 1..].iter().position(|&a| proc.is_entry(a)) {
            Some(i) => {
                out.truncate(start + 2 + i);
                Outcome::Complete
            }
            None => outcome,
        },
        complete => complete,
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

    /// Whether a module's DWARF has a row for `addr`.
    fn has_rules(&self, addr: u64) -> bool {
        self.cfi_module(addr)
            .is_some_and(|m| rules(&m, addr).is_some())
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
