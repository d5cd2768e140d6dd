//! JIT code in anonymous memory: no file says how to step its frames, so
//! the caller (which reads the runtime's perf map or jitdump) says what
//! each range is.
//!
//! - A CPython perf trampoline (`-X perf` and `-X perf_jit`, 3.12+): a copy
//!   of libpython's `_Py_trampoline_func_start`, a few known instructions
//!   and no unwind tables. It is stepped here, from what each instruction
//!   did to `rsp` (and `rbp`), at every position an instruction pointer or
//!   a return address can have in it.
//! - Code with its own `.eh_frame` (a jitdump's unwinding record: V8's
//!   optimized code, CPython 3.13's `-X perf_jit` trampolines): registered
//!   with framehop as a module of its own, at the addresses the runtime
//!   encoded the tables for.
//!
//! Code the caller names neither way is left to framehop's frame-pointer
//! rule, which is right for runtimes that keep frame pointers (V8, Java
//! with `-XX:+PreserveFramePointer`).

use std::ops::Range;

use crate::elf::Bytes;

/// The instruction sequences CPython's trampoline is built from
/// (`Python/asm_trampoline.S`); an `endbr64` comes first in builds with
/// CET enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrampolineShape {
    /// `sub $8,%rsp; call *%rcx; add $8,%rsp; ret` (11 bytes): 3.12 and
    /// 3.13 as pyenv builds them.
    SubCallAdd {
        /// Starts with `endbr64`.
        endbr: bool,
    },
    /// `push %rbp; mov %rsp,%rbp; call *%rcx; pop %rbp; ret` (8 bytes): the
    /// frame-pointer form.
    PushCallPop {
        /// Starts with `endbr64`.
        endbr: bool,
    },
}

/// Every known shape.
const ALL: [TrampolineShape; 4] = [
    TrampolineShape::SubCallAdd { endbr: false },
    TrampolineShape::SubCallAdd { endbr: true },
    TrampolineShape::PushCallPop { endbr: false },
    TrampolineShape::PushCallPop { endbr: true },
];

const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
const SUB_CALL_ADD: [u8; 11] = [
    0x48, 0x83, 0xec, 0x08, // sub $8,%rsp
    0xff, 0xd1, // call *%rcx
    0x48, 0x83, 0xc4, 0x08, // add $8,%rsp
    0xc3, // ret
];
const PUSH_CALL_POP: [u8; 8] = [
    0x55, // push %rbp
    0x48, 0x89, 0xe5, // mov %rsp,%rbp
    0xff, 0xd1, // call *%rcx
    0x5d, // pop %rbp
    0xc3, // ret
];

/// At each instruction boundary (offset past any `endbr64`): the CFA's
/// distance above `rsp`, and whether the caller's `rbp` is saved at CFA-16.
type At = (u64, u64, bool);

const SUB_CALL_ADD_AT: [At; 4] = [
    (0, 8, false),
    (4, 16, false),
    (6, 16, false),
    (10, 8, false),
];
const PUSH_CALL_POP_AT: [At; 5] = [
    (0, 8, false),
    (1, 16, true),
    (4, 16, true),
    (6, 16, true),
    (7, 8, false),
];

impl TrampolineShape {
    /// The shape of trampoline code `code`, if it is one of the known ones.
    pub fn from_code(code: &[u8]) -> Option<Self> {
        let (endbr, body) = match code.strip_prefix(&ENDBR64) {
            Some(rest) => (true, rest),
            None => (false, code),
        };
        match body {
            b if b == SUB_CALL_ADD => Some(TrampolineShape::SubCallAdd { endbr }),
            b if b == PUSH_CALL_POP => Some(TrampolineShape::PushCallPop { endbr }),
            _ => None,
        }
    }

    /// The shape of the trampoline `code` starts with, if it starts with
    /// one of the known ones (what follows it is not looked at).
    pub fn starting(code: &[u8]) -> Option<Self> {
        ALL.into_iter()
            .find(|s| code.get(..s.byte_len() as usize).and_then(Self::from_code) == Some(*s))
    }

    /// The shape a trampoline of `len` bytes has: each known shape has its
    /// own length (8, 11, 12, 15), which is what a perf map line gives.
    pub fn from_len(len: u64) -> Option<Self> {
        ALL.into_iter().find(|s| s.byte_len() == len)
    }

    /// Its length in bytes.
    pub fn byte_len(self) -> u64 {
        let (endbr, body) = self.parts();
        endbr + body
    }

    fn parts(self) -> (u64, u64) {
        match self {
            TrampolineShape::SubCallAdd { endbr } => (4 * u64::from(endbr), 11),
            TrampolineShape::PushCallPop { endbr } => (4 * u64::from(endbr), 8),
        }
    }

    fn table(self) -> &'static [At] {
        match self {
            TrampolineShape::SubCallAdd { .. } => &SUB_CALL_ADD_AT,
            TrampolineShape::PushCallPop { .. } => &PUSH_CALL_POP_AT,
        }
    }

    /// Steps a frame `offset` bytes into the trampoline: the caller's
    /// (return address, stack pointer, frame pointer). A return address
    /// (`first` false) can only be the one right after the call.
    pub(crate) fn step(
        self,
        offset: u64,
        first: bool,
        sp: u64,
        bp: u64,
        read: &mut dyn FnMut(u64) -> Result<u64, ()>,
    ) -> Option<(u64, u64, u64)> {
        let (prefix, _) = self.parts();
        // The call returns to the instruction after it (offset 6 in both).
        const AFTER_CALL: u64 = 6;
        if !first && offset != prefix + AFTER_CALL {
            return None;
        }
        let at = match offset.checked_sub(prefix) {
            // Inside endbr64: nothing done yet.
            None => &self.table()[0],
            Some(o) => self.table().iter().find(|a| a.0 == o)?,
        };
        let &(_, cfa, saved_bp) = at;
        let cfa = sp.checked_add(cfa)?;
        let ra = read(cfa - 8).ok()?;
        let bp = if saved_bp { read(cfa - 16).ok()? } else { bp };
        Some((ra, cfa, bp))
    }
}

/// The unwind tables of one piece of JIT code, at the addresses the
/// runtime encoded them for.
#[derive(Debug, Clone)]
pub struct JitTables {
    /// The `.eh_frame` bytes and where they belong.
    pub eh_frame: (Range<u64>, Bytes),
    /// The `.eh_frame_hdr` bytes and where they belong, when written.
    pub eh_frame_hdr: Option<(Range<u64>, Bytes)>,
}

/// What a JIT range is to the walker.
#[derive(Debug, Clone)]
pub(crate) enum JitKind {
    Trampoline(TrampolineShape),
    /// Registered with framehop as a module starting at the range's start.
    Tables,
}

/// One JIT range of a process.
#[derive(Debug, Clone)]
pub(crate) struct JitRange {
    pub end: u64,
    pub kind: JitKind,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cut, Outcome, StackUnwinder, UserRegs};
    use std::sync::Arc;

    /// Where the trampoline sits, and the stack.
    const T: u64 = 0x10_0000;
    const LO: u64 = 0x7f00_0000;
    /// A frame-pointer chain at LO+0x100 → LO+0x200 → 0, with return
    /// addresses 0x5001 and 0x5002: the callers above the trampoline's
    /// caller (code without tables, stepped by frame pointers).
    const CHAIN: u64 = LO + 0x100;

    fn stack() -> Vec<u8> {
        let mut m = vec![0u8; 0x300];
        let mut put = |at: u64, v: u64| {
            m[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(0x100, LO + 0x200);
        put(0x108, 0x5001);
        put(0x200, 0);
        put(0x208, 0x5002);
        m
    }

    fn put(m: &mut [u8], at: u64, v: u64) {
        m[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// The stack at `offset` into a trampoline of `shape` called from
    /// 0x5000 (its return address) in a frame whose rbp is `CHAIN`, as the
    /// instructions up to `offset` left it: (stack, sp offset, rbp).
    fn inside(shape: TrampolineShape, offset: u64) -> (Vec<u8>, u64, u64) {
        let mut m = stack();
        // The call into the trampoline pushed 0x5000 at LO+0x58.
        put(&mut m, 0x58, 0x5000);
        let prefix = shape.parts().0;
        let o = offset.checked_sub(prefix);
        let (sp, bp) = match (shape, o) {
            (_, None) | (_, Some(0)) => (0x58, CHAIN),
            (TrampolineShape::SubCallAdd { .. }, Some(10)) => (0x58, CHAIN),
            (TrampolineShape::SubCallAdd { .. }, Some(_)) => (0x50, CHAIN),
            (TrampolineShape::PushCallPop { .. }, Some(7)) => (0x58, CHAIN),
            (TrampolineShape::PushCallPop { .. }, Some(1)) => {
                put(&mut m, 0x50, CHAIN);
                (0x50, CHAIN)
            }
            (TrampolineShape::PushCallPop { .. }, Some(_)) => {
                put(&mut m, 0x50, CHAIN);
                (0x50, LO + 0x50)
            }
        };
        (m, sp, bp)
    }

    fn unwind(u: &mut StackUnwinder, m: &[u8], ip: u64, sp: u64, bp: u64) -> (Outcome, Vec<u64>) {
        let regs = UserRegs {
            ip,
            sp: LO + sp,
            bp,
            bx: None,
        };
        let mut out = Vec::new();
        let o = u.unwind(1, regs, &m[sp as usize..], &mut out);
        (o, out)
    }

    #[test]
    fn a_sample_anywhere_in_a_trampoline_unwinds_to_its_caller() {
        for shape in [
            TrampolineShape::SubCallAdd { endbr: false },
            TrampolineShape::SubCallAdd { endbr: true },
            TrampolineShape::PushCallPop { endbr: false },
            TrampolineShape::PushCallPop { endbr: true },
        ] {
            let (prefix, _) = shape.parts();
            let offsets = (0..prefix).chain(shape.table().iter().map(|a| prefix + a.0));
            for offset in offsets {
                let (m, sp, bp) = inside(shape, offset);
                let mut u = StackUnwinder::new();
                u.add_trampoline(1, T, shape);
                let (o, out) = unwind(&mut u, &m, T + offset, sp, bp);
                assert_eq!(
                    (o, &out[..]),
                    (Outcome::Complete, &[T + offset, 0x5000, 0x5001, 0x5002][..]),
                    "{shape:?} at +{offset}"
                );
            }
        }
    }

    /// A leaf (no tables, frame pointer at LO+0x40) called by the
    /// trampoline, which was called from 0x5000.
    fn called_from(shape: TrampolineShape, ra: u64) -> (Vec<u8>, u64) {
        let (mut m, sp, bp) = inside(shape, shape.parts().0 + 6);
        assert_eq!(sp, 0x50);
        put(&mut m, 0x40, bp);
        put(&mut m, 0x48, ra);
        (m, LO + 0x40)
    }

    #[test]
    fn a_trampoline_calling_the_leaf_unwinds_from_its_return_address() {
        for shape in [
            TrampolineShape::SubCallAdd { endbr: false },
            TrampolineShape::PushCallPop { endbr: true },
        ] {
            let after_call = T + shape.parts().0 + 6;
            let (m, bp) = called_from(shape, after_call);
            let mut u = StackUnwinder::new();
            u.add_trampoline(1, T, shape);
            let (o, out) = unwind(&mut u, &m, 0x4000, 0x30, bp);
            assert_eq!(
                (o, &out[..]),
                (
                    Outcome::Complete,
                    &[0x4000, after_call, 0x5000, 0x5001, 0x5002][..]
                ),
                "{shape:?}"
            );
            // A return address anywhere else in it cannot be: cut, not guessed.
            let (m, bp) = called_from(shape, after_call - 2);
            let (o, out) = unwind(&mut u, &m, 0x4000, 0x30, bp);
            assert_eq!(o, Outcome::Truncated(Cut::NoRule), "{shape:?}: {out:x?}");
        }
    }

    #[test]
    fn without_being_told_the_trampolines_caller_is_lost() {
        // What flamerec did before: the frame-pointer rule skips 0x5000.
        let shape = TrampolineShape::SubCallAdd { endbr: false };
        let (m, sp, bp) = inside(shape, 4);
        let mut u = StackUnwinder::new();
        let (_, out) = unwind(&mut u, &m, T + 4, sp, bp);
        assert!(!out.contains(&0x5000), "{out:x?}");
    }

    /// CPython 3.13's `.eh_frame` and `.eh_frame_hdr` for its 11-byte
    /// trampoline, from jit/fixtures/python313-perf-jit.dump: encoded for
    /// the `.eh_frame` 16 bytes past the code's start.
    const EH_FRAME: &str = "1400000000000000017a5200017810011b0c070890010000\
                            140000001c000000d0ffffff0b00000000440e10460e0800";
    const EH_FRAME_HDR: &str = "011b033bccffffff01000000c0ffffffe8ffffff";

    fn hex(s: &str) -> Bytes {
        let s: String = s.split_whitespace().collect();
        let v = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect();
        Bytes(Arc::new(v))
    }

    #[test]
    fn jit_code_with_its_own_eh_frame_unwinds_by_it() {
        let eh = hex(EH_FRAME);
        let hdr = hex(EH_FRAME_HDR);
        let at = T + 16;
        let tables = JitTables {
            eh_frame: (at..at + eh.len() as u64, eh.clone()),
            eh_frame_hdr: Some((at + eh.len() as u64..at + 68, hdr)),
        };
        let shape = TrampolineShape::SubCallAdd { endbr: false };
        for (offset, with_hdr) in [(0, true), (4, true), (6, true), (10, true), (4, false)] {
            let mut u = StackUnwinder::new();
            let mut t = tables.clone();
            if !with_hdr {
                t.eh_frame_hdr = None;
            }
            u.add_jit_code(1, T..T + 11, t);
            let (m, sp, bp) = inside(shape, offset);
            let (o, out) = unwind(&mut u, &m, T + offset, sp, bp);
            assert_eq!(
                (o, &out[..]),
                (Outcome::Complete, &[T + offset, 0x5000, 0x5001, 0x5002][..]),
                "+{offset}, header {with_hdr}"
            );
        }
        // Code loaded later over part of it replaces the tables: T+4 is
        // then code no one described.
        let mut u = StackUnwinder::new();
        u.add_jit_code(1, T..T + 11, tables);
        u.add_trampoline(1, T + 8, shape);
        let (m, sp, bp) = inside(shape, 4);
        let (_, out) = unwind(&mut u, &m, T + 4, sp, bp);
        assert!(!out.contains(&0x5000), "{out:x?}");
    }

    #[test]
    fn the_known_code_and_lengths_give_the_same_shapes() {
        let sub = TrampolineShape::from_code(&SUB_CALL_ADD).expect("sub/call/add");
        assert_eq!(sub, TrampolineShape::SubCallAdd { endbr: false });
        assert_eq!(TrampolineShape::from_len(11), Some(sub));
        let mut cet = ENDBR64.to_vec();
        cet.extend_from_slice(&PUSH_CALL_POP);
        let push = TrampolineShape::from_code(&cet).expect("endbr push/call/pop");
        assert_eq!(push, TrampolineShape::PushCallPop { endbr: true });
        assert_eq!(TrampolineShape::from_len(12), Some(push));
        assert_eq!(
            TrampolineShape::from_len(8).map(TrampolineShape::byte_len),
            Some(8)
        );
        assert_eq!(
            TrampolineShape::from_len(15).map(TrampolineShape::byte_len),
            Some(15)
        );
        assert_eq!(TrampolineShape::from_len(9), None);
        assert_eq!(TrampolineShape::from_code(&SUB_CALL_ADD[..10]), None);
    }
}
