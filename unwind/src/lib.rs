//! User stacks from a register set and a copy of the stack: DWARF CFI from
//! the mapped binaries (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`) via
//! framehop, falling back to frame pointers where a binary has no CFI.
//!
//! The crate keeps, per process, the executable mappings the recorder (or a
//! perf.data import) reports, and per file the unwind sections, read lazily
//! on first mapping and shared by every process that maps the file. It
//! never touches another process's memory: all stack bytes come from the
//! caller, the copied slice and, past its end, whatever a [`Beyond`] gives.
//! Pure Rust, no unsafe.
//!
//! JIT code in anonymous memory is stepped as its caller says it should
//! be (see [`jit`]): CPython's perf trampolines by their known
//! instructions, code with its own `.eh_frame` (a jitdump's unwinding
//! record) with those tables, anything else by frame pointers.
//!
//! A stack counts as whole when its unwind rules say it ends (`_start`,
//! `clone3` and `start_thread` mark their return address undefined), or when
//! unwinding stops in the entry point of an ELF file: the dynamic loader's
//! `_start`, or the entry of a stripped binary, which nothing calls.
#![forbid(unsafe_code)]

mod beyond;
pub mod callchain;
mod elf;
mod fallback;
pub mod jit;
mod nobp;
mod walk;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _};

pub use beyond::{Beyond, FrameState, OuterFrames};
pub use elf::{read_unwind_sections, Bytes, Source, UnwindSections};
pub use jit::{JitTables, TrampolineShape};

/// The user registers unwinding starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer (the stack copy starts here).
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// rbx, when sampled: it lets frames whose CFA is kept in rbx (glibc's
    /// lazy-binding trampoline) be unwound too.
    pub bx: Option<u64>,
}

/// How an unwind ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Reached the thread's entry.
    Complete,
    /// Stopped early.
    Truncated(Cut),
}

/// Why a stack was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// It needed memory past the copied slice that could not be had.
    CopyEnded,
    /// No unwind rule (or a broken one) for some frame's code.
    NoRule,
    /// Longer than the frame limit (a cycle in corrupt frames, or runaway recursion).
    TooDeep,
}

/// Running counts, for `info` and the end summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Stacks unwound.
    pub stacks: u64,
    /// Of those, stacks cut short.
    pub truncated: u64,
    /// Of the cut ones, those that needed memory past the copy.
    pub cut_copy_ended: u64,
    /// Whole stacks that needed memory past the copy (and got it).
    pub completed_beyond: u64,
    /// Files whose unwind sections could not be read.
    pub unreadable_files: u64,
}

type Unwinder = UnwinderX86_64<Bytes>;

#[derive(Clone)]
struct Process {
    unwinder: Unwinder,
    /// Module start → what it covers, to remove what a new mapping covers,
    /// to know entry points and for `fallback`.
    ranges: BTreeMap<u64, ModuleRange>,
    /// JIT code start → what it is (kept apart from `ranges`: the
    /// anonymous mapping holding JIT code is mapped again and again as its
    /// protection changes, which must not drop the code in it).
    jit: BTreeMap<u64, jit::JitRange>,
}

/// One mapped module of a process.
#[derive(Clone)]
struct ModuleRange {
    end: u64,
    /// Its ELF entry point's address, if it has one.
    entry: Option<u64>,
    /// Its DWARF rules, for the frames framehop cannot step.
    cfi: Option<fallback::CfiModule>,
}

impl Process {
    fn new() -> Self {
        Process {
            unwinder: Unwinder::new(),
            ranges: BTreeMap::new(),
            jit: BTreeMap::new(),
        }
    }

    /// Clears the JIT code overlapping `code` for new code there: false
    /// (and nothing cleared) when `code` overlaps a mapped file instead.
    fn take_jit_range(&mut self, code: Range<u64>) -> bool {
        let over_file = self
            .ranges
            .range(..code.end)
            .next_back()
            .is_some_and(|(_, m)| m.end > code.start);
        if over_file {
            return false;
        }
        let covered: Vec<(u64, bool)> = self
            .jit
            .range(..code.end)
            .rev()
            .take_while(|(_, r)| r.end > code.start)
            .map(|(&s, r)| (s, matches!(r.kind, jit::JitKind::Tables)))
            .collect();
        for (s, module) in covered {
            self.jit.remove(&s);
            if module {
                self.unwinder.remove_module(s);
            }
        }
        true
    }

    /// The trampoline holding `addr`: its start and shape.
    fn trampoline_at(&self, addr: u64) -> Option<(u64, TrampolineShape)> {
        let (&start, r) = self.jit.range(..=addr).next_back()?;
        match r.kind {
            jit::JitKind::Trampoline(shape) if addr < r.end => Some((start, shape)),
            _ => None,
        }
    }

    /// Whether `addr` (a return address into its caller's code) lies at
    /// the start of an entry point: the call an entry function makes is
    /// within its first bytes (glibc's `_start` calls at +0x21, the dynamic
    /// loader's at +0x3).
    fn is_entry(&self, addr: u64) -> bool {
        const ENTRY_WINDOW: u64 = 64;
        let Some((_, m)) = self.ranges.range(..=addr).next_back() else {
            return false;
        };
        addr < m.end
            && m.entry
                .is_some_and(|e| addr >= e && addr - e < ENTRY_WINDOW)
    }
}

/// A file's unwind sections as the walk uses them: with the rows framehop
/// cannot step found once.
fn loaded(mut s: UnwindSections) -> Arc<UnwindSections> {
    s.cfa_elsewhere = fallback::cfa_elsewhere(&s);
    Arc::new(s)
}

/// Unwinds user stacks of any number of processes.
pub struct StackUnwinder {
    processes: HashMap<u32, Process>,
    files: HashMap<(String, Vec<u8>), Option<Arc<UnwindSections>>>,
    cache: CacheX86_64,
    stats: Stats,
    /// Longest stack returned, guarding against cycles in corrupt frames.
    max_frames: usize,
}

impl Default for StackUnwinder {
    fn default() -> Self {
        Self::new()
    }
}

impl StackUnwinder {
    /// An unwinder that knows no process yet.
    pub fn new() -> Self {
        StackUnwinder {
            processes: HashMap::new(),
            files: HashMap::new(),
            cache: CacheX86_64::new(),
            stats: Stats::default(),
            max_frames: 1024,
        }
    }

    /// Counts so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Unwind sections of a file, read once per (path, build id).
    fn sections(&mut self, path: &str, build_id: &[u8]) -> Option<Arc<UnwindSections>> {
        let key = (path.to_string(), build_id.to_vec());
        if let Some(s) = self.files.get(&key) {
            return s.clone();
        }
        let s = File::open(path)
            .ok()
            .and_then(|f| read_unwind_sections(&f))
            .map(loaded);
        if s.is_none() {
            self.stats.unreadable_files += 1;
        }
        self.files.insert(key, s.clone());
        s
    }

    /// Registers the unwind data of an in-memory image (the vDSO) under `name`.
    pub fn add_image(&mut self, name: &str, image: &[u8]) {
        let s = read_unwind_sections(image).map(loaded);
        self.files.insert((name.to_string(), Vec::new()), s);
    }

    /// An executable mapping of `pid`: `path` (where its file is read —
    /// the mapped path, or one that reaches the file from here when the
    /// process sees other files — or a name given to
    /// [`StackUnwinder::add_image`]) mapped at `start..end` from file offset
    /// `pgoff`.
    pub fn add_mapping(
        &mut self,
        pid: u32,
        start: u64,
        end: u64,
        pgoff: u64,
        path: &str,
        build_id: &[u8],
    ) {
        let sections = if path.starts_with('/') {
            self.sections(path, build_id)
        } else {
            self.files
                .get(&(path.to_string(), Vec::new()))
                .cloned()
                .flatten()
        };
        let proc = self.processes.entry(pid).or_insert_with(Process::new);
        // Whatever this mapping covers is gone.
        let covered: Vec<u64> = proc
            .ranges
            .range(..end)
            .filter(|(_, m)| m.end > start)
            .map(|(&s, _)| s)
            .collect();
        for s in covered {
            proc.ranges.remove(&s);
            proc.unwinder.remove_module(s);
        }
        let Some(sections) = sections else { return };
        // Bias: where stated address 0 lands in this process.
        let Some(svma) = sections.svma_of_exec_mapping(pgoff) else {
            return;
        };
        let base_avma = start.wrapping_sub(svma);
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: sections.text.clone(),
            got_svma: sections.got.clone(),
            eh_frame_svma: sections.eh_frame.as_ref().map(|e| e.0.clone()),
            eh_frame: sections.eh_frame.as_ref().map(|e| e.1.clone()),
            eh_frame_hdr_svma: sections.eh_frame_hdr.as_ref().map(|e| e.0.clone()),
            eh_frame_hdr: sections.eh_frame_hdr.as_ref().map(|e| e.1.clone()),
            debug_frame: sections.debug_frame.clone(),
            ..Default::default()
        };
        proc.unwinder
            .add_module(Module::new(path.to_string(), start..end, base_avma, info));
        let entry = sections.entry.map(|e| base_avma.wrapping_add(e));
        let cfi = Some(fallback::CfiModule {
            bias: base_avma,
            sections: Arc::clone(&sections),
        });
        proc.ranges.insert(start, ModuleRange { end, entry, cfi });
    }

    /// A CPython perf trampoline of `pid` at `start` (a perf map line or a
    /// jitdump load named `py::…`). Replaces JIT code it overlaps.
    pub fn add_trampoline(&mut self, pid: u32, start: u64, shape: TrampolineShape) {
        let Some(end) = start.checked_add(shape.byte_len()) else {
            return;
        };
        let proc = self.processes.entry(pid).or_insert_with(Process::new);
        if proc.take_jit_range(start..end) {
            proc.jit.insert(
                start,
                jit::JitRange {
                    end,
                    kind: jit::JitKind::Trampoline(shape),
                },
            );
        }
    }

    /// JIT code of `pid` at `code` with its own unwind tables (a jitdump's
    /// unwinding record). Replaces JIT code it overlaps.
    pub fn add_jit_code(&mut self, pid: u32, code: Range<u64>, tables: JitTables) {
        if code.is_empty() {
            return;
        }
        let proc = self.processes.entry(pid).or_insert_with(Process::new);
        if !proc.take_jit_range(code.clone()) {
            return;
        }
        let info = ExplicitModuleSectionInfo {
            // Relative addresses count from the code's start, which keeps
            // them within the 32 bits framehop takes.
            base_svma: code.start,
            text_svma: Some(code.clone()),
            eh_frame_svma: Some(tables.eh_frame.0.clone()),
            eh_frame: Some(tables.eh_frame.1.clone()),
            eh_frame_hdr_svma: tables.eh_frame_hdr.as_ref().map(|h| h.0.clone()),
            eh_frame_hdr: tables.eh_frame_hdr.map(|h| h.1),
            ..Default::default()
        };
        proc.unwinder.add_module(Module::new(
            "[jit]".to_string(),
            code.clone(),
            code.start,
            info,
        ));
        proc.jit.insert(
            code.start,
            jit::JitRange {
                end: code.end,
                kind: jit::JitKind::Tables,
            },
        );
    }

    /// `pid` called exec: its old mappings are gone.
    pub fn exec(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// `child` was forked from `parent` and shares its mappings.
    pub fn fork(&mut self, parent: u32, child: u32) {
        if parent == child {
            return;
        }
        match self.processes.get(&parent) {
            Some(p) => {
                let copy = p.clone();
                self.processes.insert(child, copy);
            }
            // A reused pid: what the process that had it before mapped is gone.
            None => {
                self.processes.remove(&child);
            }
        }
    }

    /// `pid` exited.
    pub fn exit(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Unwinds one user stack of `pid`. `stack` holds the bytes from
    /// `regs.sp` upwards. Appends the instruction pointer, then return
    /// addresses (not adjusted), outermost last.
    pub fn unwind(
        &mut self,
        pid: u32,
        regs: UserRegs,
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> Outcome {
        self.unwind_beyond(pid, regs, stack, None, out)
    }

    /// Like [`StackUnwinder::unwind`], reading what lies past the copy
    /// through `beyond` when unwinding gets there.
    pub fn unwind_beyond(
        &mut self,
        pid: u32,
        regs: UserRegs,
        stack: &[u8],
        beyond: Option<&mut dyn Beyond>,
        out: &mut Vec<u64>,
    ) -> Outcome {
        self.stats.stacks += 1;
        let empty;
        let proc = match self.processes.get(&pid) {
            Some(p) => p,
            None => {
                empty = Process::new();
                &empty
            }
        };
        let walked = walk::walk(
            proc,
            &mut self.cache,
            self.max_frames,
            regs,
            stack,
            beyond,
            out,
        );
        // framehop caches the rule it falls back to (frame pointers) when a
        // frame's own rule could not be evaluated — also when that was only
        // for want of memory past the copy, which later samples may have.
        // Such a rule is wrong for frames that do not keep a frame pointer
        // (rustc's 540 KB compiler frame), so it must not outlive this stack.
        if walked.missed_past_copy {
            self.cache = CacheX86_64::new();
        }
        match walked.outcome {
            Outcome::Complete if walked.used_beyond => self.stats.completed_beyond += 1,
            Outcome::Complete => {}
            Outcome::Truncated(cut) => {
                self.stats.truncated += 1;
                if cut == Cut::CopyEnded {
                    self.stats.cut_copy_ended += 1;
                }
            }
        }
        walked.outcome
    }

    /// Unwinds one user stack of `pid` of which only the instruction and
    /// stack pointers are known (a thread blocked in the kernel, read from
    /// /proc without stopping it). Appends as [`StackUnwinder::unwind`] does.
    /// The first frame that needs the frame pointer gets it from a frame
    /// record found on the stack (see `nobp`): a guess, checked by unwinding
    /// on from it.
    pub fn unwind_without_bp(
        &mut self,
        pid: u32,
        ip: u64,
        sp: u64,
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> Outcome {
        self.stats.stacks += 1;
        out.push(ip);
        let outcome = match self.processes.get(&pid) {
            None => Outcome::Truncated(Cut::NoRule),
            Some(p) => {
                let copy = walk::Copy {
                    start: sp,
                    bytes: stack,
                };
                let mut read_stack = |addr: u64| copy.word(addr).ok_or(());
                let mut walk = nobp::Walk {
                    unwinder: &p.unwinder,
                    code: &p.ranges,
                    cache: &mut self.cache,
                    read_stack: &mut read_stack,
                    sp,
                    len: stack.len() as u64,
                    max_frames: self.max_frames,
                };
                let regs = UnwindRegsX86_64::new(ip, sp, nobp::UNKNOWN_BP);
                // A vector of its own: the walk counts its length against max_frames.
                let mut more = Vec::new();
                let (outcome, _) =
                    walk.run(FrameAddress::InstructionPointer(ip), regs, &mut more, true);
                out.append(&mut more);
                outcome
            }
        };
        if matches!(outcome, Outcome::Truncated(_)) {
            self.stats.truncated += 1;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A frame-pointer stack (code without unwind info falls back to frame
    /// pointers): frame i at `LO + 0x40 + 0x100 * i` holds the next frame
    /// pointer and the return address `0x5000 + i`; the last one links to 0.
    const LO: u64 = 0x7f00_0000;
    const FRAMES: u64 = 40;

    fn memory() -> Vec<u8> {
        let mut m = vec![0u8; (0x40 + 0x100 * FRAMES + 0x100) as usize];
        for i in 0..FRAMES {
            let fp = 0x40 + 0x100 * i;
            let next = if i + 1 == FRAMES { 0 } else { LO + fp + 0x100 };
            m[fp as usize..fp as usize + 8].copy_from_slice(&next.to_le_bytes());
            m[fp as usize + 8..fp as usize + 16].copy_from_slice(&(0x5000 + i).to_le_bytes());
        }
        m
    }

    fn regs() -> UserRegs {
        UserRegs {
            ip: 0x4000,
            sp: LO,
            bp: LO + 0x40,
            bx: None,
        }
    }

    fn expected() -> Vec<u64> {
        std::iter::once(0x4000)
            .chain((0..FRAMES).map(|i| 0x5000 + i))
            .collect()
    }

    /// The rest of `memory()` past a copy, with a memo.
    struct Rest {
        mem: Vec<u8>,
        reads: usize,
        memo: HashMap<FrameState, OuterFrames>,
    }

    impl Beyond for Rest {
        fn enter(&mut self, _frame_sp: u64) -> bool {
            !self.mem.is_empty()
        }
        fn read(&mut self, addr: u64) -> Option<u64> {
            self.reads += 1;
            let off = usize::try_from(addr.checked_sub(LO)?).ok()?;
            Some(u64::from_le_bytes(
                self.mem.get(off..off + 8)?.try_into().ok()?,
            ))
        }
        fn recall(&mut self, state: FrameState) -> Option<OuterFrames> {
            self.memo.get(&state).cloned()
        }
        fn remember(&mut self, state: FrameState, outer: OuterFrames) {
            self.memo.insert(state, outer);
        }
    }

    #[test]
    fn a_stack_inside_the_copy_is_whole() {
        let mut u = StackUnwinder::new();
        let mut out = Vec::new();
        assert_eq!(u.unwind(1, regs(), &memory(), &mut out), Outcome::Complete);
        assert_eq!(out, expected());
        assert_eq!(u.stats().truncated, 0);
    }

    #[test]
    fn a_stack_past_the_copy_is_cut_without_memory_beyond_it() {
        let mut u = StackUnwinder::new();
        let mut out = Vec::new();
        let copy = &memory()[..0x400];
        let o = u.unwind(1, regs(), copy, &mut out);
        assert_eq!(o, Outcome::Truncated(Cut::CopyEnded));
        assert_eq!(out[..], expected()[..out.len()]);
        assert_eq!((u.stats().truncated, u.stats().cut_copy_ended), (1, 1));
    }

    #[test]
    fn memory_beyond_the_copy_completes_it_and_later_samples_recall_it() {
        let mut u = StackUnwinder::new();
        let mem = memory();
        let mut rest = Rest {
            mem: mem.clone(),
            reads: 0,
            memo: HashMap::new(),
        };
        let mut out = Vec::new();
        let o = u.unwind_beyond(1, regs(), &mem[..0x400], Some(&mut rest), &mut out);
        assert_eq!(o, Outcome::Complete);
        assert_eq!(out, expected());
        assert!(rest.reads > 0);
        // The state where it left the copy, and every 8th frame further out.
        assert!(rest.memo.len() > 1, "{} states remembered", rest.memo.len());
        // Same thread, same deep frames: recalled, not read again (only the
        // frame the copy ends in reads past it before the memo applies).
        let reads = rest.reads;
        let mut again = Vec::new();
        let o = u.unwind_beyond(1, regs(), &mem[..0x400], Some(&mut rest), &mut again);
        assert_eq!((o, &again), (Outcome::Complete, &out));
        assert!(rest.reads - reads <= 2, "{} more reads", rest.reads - reads);
        assert_eq!(u.stats().completed_beyond, 2);
        // A sample whose inner frames differ meets the same outer frames:
        // recalled where it reaches a state remembered further out.
        let inner = UserRegs {
            ip: 0x4100,
            sp: LO + 0x100,
            bp: LO + 0x140,
            bx: None,
        };
        let reads = rest.reads;
        let mut merged = Vec::new();
        let o = u.unwind_beyond(1, inner, &mem[0x100..0x500], Some(&mut rest), &mut merged);
        assert_eq!(o, Outcome::Complete);
        assert_eq!(merged[0], 0x4100);
        assert_eq!(merged[1..], expected()[2..]);
        let more = rest.reads - reads;
        assert!(more <= 2 * 8, "{more} reads past the copy: not recalled");
        // What cannot be read past the copy leaves the stack cut.
        let mut none = Rest {
            mem: Vec::new(),
            reads: 0,
            memo: HashMap::new(),
        };
        let mut cut = Vec::new();
        let o = u.unwind_beyond(1, regs(), &mem[..0x400], Some(&mut none), &mut cut);
        assert_eq!(o, Outcome::Truncated(Cut::CopyEnded));
        assert!(cut.len() < out.len());
    }
}
