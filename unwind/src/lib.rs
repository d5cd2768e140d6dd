//! User stacks from a register set and a copy of the stack: DWARF CFI from
//! the mapped binaries (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`) via
//! framehop, falling back to frame pointers where a binary has no CFI.
//!
//! The crate keeps, per process, the executable mappings the recorder (or a
//! perf.data import) reports, and per file the unwind sections, read lazily
//! on first mapping and shared by every process that maps the file. It
//! never touches another process's memory: all stack bytes come from the
//! caller. Pure Rust, no unsafe.
#![forbid(unsafe_code)]

pub mod callchain;
mod elf;
mod nobp;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _};

pub use elf::{read_unwind_sections, Bytes, Source, UnwindSections};

/// The user registers unwinding starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer (the stack copy starts here).
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
}

/// How an unwind ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Reached the outermost frame.
    Complete,
    /// Stopped early: the stack copy ended, or no rule matched.
    Truncated,
}

/// Running counts, for `info` and the end summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Stacks unwound.
    pub stacks: u64,
    /// Of those, stacks cut short.
    pub truncated: u64,
    /// Files whose unwind sections could not be read.
    pub unreadable_files: u64,
}

type Unwinder = UnwinderX86_64<Bytes>;

struct Process {
    unwinder: Unwinder,
    /// Module start → end, to remove what a new mapping covers.
    ranges: BTreeMap<u64, u64>,
}

impl Process {
    fn new() -> Self {
        Process {
            unwinder: Unwinder::new(),
            ranges: BTreeMap::new(),
        }
    }
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
            .map(Arc::new);
        if s.is_none() {
            self.stats.unreadable_files += 1;
        }
        self.files.insert(key, s.clone());
        s
    }

    /// Registers the unwind data of an in-memory image (the vDSO) under `name`.
    pub fn add_image(&mut self, name: &str, image: &[u8]) {
        let s = read_unwind_sections(image).map(Arc::new);
        self.files.insert((name.to_string(), Vec::new()), s);
    }

    /// An executable mapping of `pid`: `path` (a file, or a name given to
    /// [`StackUnwinder::add_image`]) mapped at `start..end` from file offset `pgoff`.
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
            .filter(|(_, &e)| e > start)
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
        proc.ranges.insert(start, end);
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
        if let Some(p) = self.processes.get(&parent) {
            let copy = Process {
                unwinder: p.unwinder.clone(),
                ranges: p.ranges.clone(),
            };
            self.processes.insert(child, copy);
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
        self.stats.stacks += 1;
        let mut read_stack = stack_reader(regs.sp, stack);
        let empty;
        let unwinder = match self.processes.get(&pid) {
            Some(p) => &p.unwinder,
            None => {
                empty = Unwinder::new();
                &empty
            }
        };
        let mut iter = unwinder.iter_frames(
            regs.ip,
            UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp),
            &mut self.cache,
            &mut read_stack,
        );
        let start = out.len();
        let outcome = loop {
            if out.len() - start >= self.max_frames {
                break Outcome::Truncated;
            }
            match iter.next() {
                Ok(Some(frame)) => out.push(frame.address()),
                Ok(None) => break Outcome::Complete,
                Err(_) => break Outcome::Truncated,
            }
        };
        if outcome == Outcome::Truncated {
            self.stats.truncated += 1;
        }
        outcome
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
            None => Outcome::Truncated,
            Some(p) => {
                let mut read_stack = stack_reader(sp, stack);
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
        if outcome == Outcome::Truncated {
            self.stats.truncated += 1;
        }
        outcome
    }
}

/// Reads 8-byte words of a stack copy that starts at address `sp`.
fn stack_reader(sp: u64, stack: &[u8]) -> impl FnMut(u64) -> Result<u64, ()> + '_ {
    move |addr: u64| {
        let off = addr.checked_sub(sp).ok_or(())?;
        let off = usize::try_from(off).map_err(|_| ())?;
        let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
        let mut word = [0u8; 8];
        word.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(word))
    }
}
