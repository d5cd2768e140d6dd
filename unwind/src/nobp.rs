//! Unwinding when the frame pointer is not known: a thread blocked in the
//! kernel, whose stack pointer and program counter come from
//! /proc/PID/task/TID/syscall and whose other registers nobody can read
//! without stopping it.
//!
//! Frames unwound by CFI from the stack pointer need no frame pointer (the
//! libc system call wrappers are such frames). The first frame whose rule
//! needs it (code built with frame pointers: CFA = rbp + 16, as Rust's
//! standard library is now) gets it from the stack: that frame's record
//! (saved frame pointer, then its return address) lies above its stack
//! pointer. Candidates are the words there followed by an address in known
//! code; the one from which unwinding reaches the thread's entry, furthest
//! up the stack, is taken (see [`Walk::guess`] for the ties). From there on the frame pointer is
//! the one each frame saved, as in any unwind.
//!
//! This is a guess only at that one frame, and only where no frame pointer
//! was given; stacks with known registers never come here.

use std::collections::BTreeMap;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::{FrameAddress, Unwinder as _};

use crate::{Cut, Outcome, Unwinder};

/// The frame pointer value that stands for "not known". Not a canonical
/// address, so a rule reading through it fails, and no value restored from
/// the stack is ever equal to it.
pub(crate) const UNKNOWN_BP: u64 = 0xdead_0bad_0000_0000;

/// Most candidate frame records tried at the frame that needs one.
const MAX_CANDIDATES: usize = 32;

/// What a walk needs besides registers.
pub(crate) struct Walk<'a, F> {
    pub unwinder: &'a Unwinder,
    /// Executable module ranges (start → end) of the process.
    pub code: &'a BTreeMap<u64, crate::ModuleRange>,
    pub cache: &'a mut CacheX86_64,
    pub read_stack: &'a mut F,
    /// The stack copy: its first address and its length.
    pub sp: u64,
    pub len: u64,
    pub max_frames: usize,
}

impl<F: FnMut(u64) -> Result<u64, ()>> Walk<'_, F> {
    /// Unwinds from the frame at `address` with `regs`, appending return
    /// addresses to `out`; `may_guess`: the frame pointer may still be the
    /// unknown one, to be found once. Returns how it ended and the stack
    /// pointer of the outermost frame reached.
    pub(crate) fn run(
        &mut self,
        mut address: FrameAddress,
        mut regs: UnwindRegsX86_64,
        out: &mut Vec<u64>,
        may_guess: bool,
    ) -> (Outcome, u64) {
        loop {
            if out.len() >= self.max_frames {
                return (Outcome::Truncated(Cut::TooDeep), regs.sp());
            }
            let before = regs;
            let step = self
                .unwinder
                .unwind_frame(address, &mut regs, self.cache, self.read_stack);
            let needed_bp = before.bp() == UNKNOWN_BP && !matches!(step, Ok(Some(_)));
            match step {
                Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                    Some(next) => {
                        out.push(ra);
                        address = next;
                    }
                    None => return (Outcome::Truncated(Cut::NoRule), before.sp()),
                },
                _ if needed_bp && may_guess => return self.guess(address, before, out),
                Ok(None) if !needed_bp => return (Outcome::Complete, before.sp()),
                _ => return (Outcome::Truncated(Cut::NoRule), before.sp()),
            }
        }
    }

    /// The frame at `address` needs the frame pointer: tries the frame
    /// records above its stack pointer and keeps the best walk: one that
    /// ends where unwinding ends (the thread's entry), then the one with the
    /// most frames (a record further up skips the frames in between; a
    /// stale record, left in some frame's locals by an earlier call or lying
    /// past the stack's end in a copy that ran over, ends after a frame or
    /// two), then the one that gets furthest up the stack, then the highest
    /// record (lower ones are stale records of earlier calls).
    /// Records a lower record's saved frame pointer points at are frames
    /// further up and are not tried.
    fn guess(
        &mut self,
        address: FrameAddress,
        regs: UnwindRegsX86_64,
        out: &mut Vec<u64>,
    ) -> (Outcome, u64) {
        let candidates = self.candidates(regs.sp());
        let further_up: Vec<u64> = candidates
            .iter()
            .filter_map(|&c| (self.read_stack)(c).ok())
            .collect();
        let mut best: Option<Tried> = None;
        for bp in candidates {
            if further_up.contains(&bp) {
                continue;
            }
            let mut with_bp = regs;
            with_bp.set_bp(bp);
            let mut frames = Vec::new();
            let (outcome, top) = self.run(address, with_bp, &mut frames, false);
            let tried = Tried {
                outcome,
                top,
                frames,
                bp,
            };
            if !tried.frames.is_empty() && best.as_ref().is_none_or(|b| tried.rank() > b.rank()) {
                best = Some(tried);
            }
        }
        match best {
            Some(mut b) => {
                out.append(&mut b.frames);
                (b.outcome, b.top)
            }
            None => (Outcome::Truncated(Cut::NoRule), regs.sp()),
        }
    }

    /// Addresses at or above `from` (8-aligned, inside the copy) whose next
    /// word is an address in known code: possible frame records.
    fn candidates(&mut self, from: u64) -> Vec<u64> {
        let end = self.sp.saturating_add(self.len);
        let mut x = from.saturating_add(7) & !7;
        let mut found = Vec::new();
        while x.saturating_add(16) <= end && found.len() < MAX_CANDIDATES {
            if let Ok(ra) = (self.read_stack)(x + 8) {
                if is_code(self.code, ra) {
                    found.push(x);
                }
            }
            x += 8;
        }
        found
    }
}

/// One candidate frame record and the walk it gave.
struct Tried {
    outcome: Outcome,
    /// Stack pointer of the outermost frame reached.
    top: u64,
    frames: Vec<u64>,
    bp: u64,
}

impl Tried {
    /// Higher is better; see [`Walk::guess`].
    fn rank(&self) -> (bool, usize, u64, u64) {
        (
            self.outcome == Outcome::Complete,
            self.frames.len(),
            self.top,
            self.bp,
        )
    }
}

fn is_code(code: &BTreeMap<u64, crate::ModuleRange>, addr: u64) -> bool {
    code.range(..=addr)
        .next_back()
        .is_some_and(|(_, m)| addr < m.end)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::time::Duration;

    use crate::{Outcome, StackUnwinder};
    use flamerec_testkit::maps::own_exec_maps;

    #[inline(never)]
    fn nobp_test_sleeper() {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
            std::hint::black_box(());
        }
    }

    #[test]
    fn a_blocked_thread_unwinds_from_ip_and_sp_alone() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let tid: u32 = std::fs::read_link("/proc/thread-self")
                .unwrap()
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            tx.send(tid).unwrap();
            nobp_test_sleeper();
        });
        let tid = rx.recv().unwrap();
        let path = format!("/proc/self/task/{tid}/syscall");
        // Off CPU in clock_nanosleep (230): its ip and sp stay put.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let line = loop {
            let line = std::fs::read_to_string(&path).unwrap();
            if line.starts_with("230 ") {
                break line;
            }
            assert!(std::time::Instant::now() < deadline, "never slept: {line}");
            std::thread::sleep(Duration::from_millis(5));
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let (sp, ip) = (hex(f[7]), hex(f[8]));
        let mut u = StackUnwinder::new();
        let me = std::process::id();
        for m in own_exec_maps() {
            u.add_mapping(me, m.start, m.end, m.pgoff, &m.path, &[]);
        }
        // 64 KiB from sp, as a perf sample copies: it may run past the
        // thread's stack into the next mapping (often a malloc arena, whose
        // words can look like frame records); the guess must not take those.
        let mut stack = vec![0u8; 64 << 10];
        let mem = std::fs::File::open("/proc/self/mem").unwrap();
        let n = mem.read_at(&mut stack, sp).unwrap();
        stack.truncate(n);
        let mut out = Vec::new();
        let outcome = u.unwind_without_bp(me, ip, sp, &stack, &mut out);
        assert_eq!(outcome, Outcome::Complete, "{out:x?}");
        // The sleeper called std's sleep, which (built with frame pointers,
        // as Rust's std now is) needs the frame pointer /proc does not give.
        let f = nobp_test_sleeper as *const () as u64;
        assert!(
            out[1..].iter().any(|&ra| ra > f && ra < f + 0x1000),
            "{f:x}: {out:x?}"
        );
    }
}
