//! From perf's records to a `.frec` recording: the part of the sample path
//! that does not depend on where the records come from.
//!
//! Both the recorder (records read live from the kernel's rings) and the
//! perf.data importer (records read from perf's file) drive one
//! [`Converter`]: it keeps each process's mappings, interns a mapped path
//! as a module once, turns a user address into a (module, file offset)
//! frame, unwinds a user stack copy by DWARF when it was given an unwinder,
//! and interns a sample's stack root first. What differs between the two
//! stays with them: the recorder's trimming of its own kernel frames, its
//! live stacks and deferred callchains; the importer's header and file
//! damage handling. Both split callchains into kernel and user parts
//! through [`Converter::split_callchain`] (markers read by
//! `flamerec_unwind::callchain`), which also ends a user part where a
//! frame-pointer walk goes round a loop.

mod maps;

use std::collections::HashMap;
use std::io;

use flamerec_format::{
    Frame, FrameId, Mapping, Module, ModuleId, ModuleKind, Sample, StackId, Writer,
};
use flamerec_unwind::callchain::{self, Side};
use flamerec_unwind::{Cut, Outcome, StackUnwinder, UserRegs};

use maps::Processes;

/// How far back [`Converter::split_callchain`] looks for a repeated
/// non-code address: the longest frame-record loop it recognises.
pub const LOOP_WINDOW: usize = 16;

/// A mapping as an MMAP or MMAP2 record (or a line of /proc/PID/maps)
/// reports it.
#[derive(Debug, Clone, Copy)]
pub struct Mmap<'a> {
    /// The process.
    pub pid: u32,
    /// First address.
    pub start: u64,
    /// Length in bytes; an empty mapping is ignored.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The path as mapped (`[vdso]`, `//anon` and the like for pseudo-files).
    pub path: &'a str,
    /// GNU build id, empty when unknown.
    pub build_id: &'a [u8],
    /// Where the file is read when its path does not reach it from here
    /// (its process's own view of its files; see the recorder's `files`).
    pub read_from: Option<&'a str>,
    /// Mapped executable: its unwind tables are loaded for DWARF unwinding.
    pub exec: bool,
    /// When it was mapped, ns from the recording's start.
    pub time_ns: u64,
}

/// The conversion's state: the recording being written, every process's
/// mappings, and the unwinder that reads their unwind tables.
pub struct Converter<W: io::Write> {
    writer: Writer<W>,
    procs: Processes,
    kernel: ModuleId,
    unknown: ModuleId,
    unwinder: Option<StackUnwinder>,
    /// Per thread, when its name last changed (see [`Converter::comm`]).
    named: HashMap<u32, u64>,
    /// Scratch: a stack's frame ids, root first.
    ids: Vec<FrameId>,
    /// Scratch: addresses an unwind found.
    addrs: Vec<u64>,
}

/// The module of user addresses no mapping holds (it is not code that
/// anything names later: not JIT code).
pub const UNKNOWN_MODULE: &str = "[unknown]";

impl<W: io::Write> Converter<W> {
    /// A converter writing to `writer`, with `[kernel.kallsyms]` and
    /// `[unknown]` as its first modules. `unwinder` is given when samples
    /// carry user stack copies to unwind.
    pub fn new(mut writer: Writer<W>, unwinder: Option<StackUnwinder>) -> Self {
        let kernel = writer.module(&Module {
            kind: ModuleKind::Kernel,
            path: "[kernel.kallsyms]".into(),
            build_id: Vec::new(),
        });
        let unknown = writer.module(&Module {
            kind: ModuleKind::Anonymous,
            path: UNKNOWN_MODULE.into(),
            build_id: Vec::new(),
        });
        Converter {
            writer,
            procs: Processes::default(),
            kernel,
            unknown,
            unwinder,
            named: HashMap::new(),
            ids: Vec::new(),
            addrs: Vec::new(),
        }
    }

    /// The recording being written.
    pub fn writer(&self) -> &Writer<W> {
        &self.writer
    }

    /// The recording being written, for what is not a sample's path
    /// (thread names, forks, exits, losses, kernel symbols).
    pub fn writer_mut(&mut self) -> &mut Writer<W> {
        &mut self.writer
    }

    /// The recording, to finish.
    pub fn into_writer(self) -> Writer<W> {
        self.writer
    }

    /// The DWARF unwinder, when there is one.
    pub fn unwinder(&self) -> Option<&StackUnwinder> {
        self.unwinder.as_ref()
    }

    /// The DWARF unwinder, when there is one (for unwinding past the copy).
    pub fn unwinder_mut(&mut self) -> Option<&mut StackUnwinder> {
        self.unwinder.as_mut()
    }

    /// A new mapping of `m.pid`: its module interned, the mapping recorded
    /// in the file and replacing whatever it overlaps, and, when
    /// executable, its unwind tables made known to the unwinder. A mapping
    /// older than the process's last exec (a record that came late) is of
    /// an image already replaced, and is dropped. Returns the module of a
    /// mapping applied.
    pub fn mmap(&mut self, m: &Mmap<'_>) -> Option<ModuleId> {
        if m.len == 0 {
            return None;
        }
        let end = m.start.saturating_add(m.len);
        let mut module = Module::mapped(m.path, m.build_id);
        // A file found for memory without one at its path (an executable
        // run from a memfd) makes the mapping that file's image.
        if m.read_from.is_some() {
            module.kind = ModuleKind::File;
        }
        let kind = module.kind;
        let id = self.writer.module(&module);
        if !self
            .procs
            .map(m.pid, m.start, m.len, m.pgoff, id, kind, m.time_ns)
        {
            return None;
        }
        if m.exec {
            if let Some(u) = &mut self.unwinder {
                let file = m.read_from.unwrap_or(m.path);
                u.add_mapping(m.pid, m.start, end, m.pgoff, file, m.build_id);
            }
        }
        self.writer.mapping(&Mapping {
            time_ns: m.time_ns,
            pid: m.pid,
            start: m.start,
            end,
            pgoff: m.pgoff,
            module: id,
        });
        Some(id)
    }

    /// Whether a record of `pid` at `time_ns` is older than one already
    /// applied to the process (it came late from its ring; see
    /// `maps`): then an exec must not let go of what the process holds.
    pub fn is_late(&self, pid: u32, time_ns: u64) -> bool {
        self.procs.is_late(pid, time_ns)
    }

    /// `pid` called exec at `time_ns`: its old mappings are gone. Returns
    /// false, changing nothing, when the record came late.
    pub fn exec(&mut self, pid: u32, time_ns: u64) -> bool {
        if !self.procs.exec(pid, time_ns) {
            return false;
        }
        if let Some(u) = &mut self.unwinder {
            u.exec(pid);
        }
        true
    }

    /// A thread's name, set at `time_ns` (by exec when `exec`), written to
    /// the recording unless a newer name of the thread was written already
    /// (the record came late: the newer one stands). Does not apply the
    /// exec itself ([`Converter::exec`]).
    pub fn comm(&mut self, time_ns: u64, pid: u32, tid: u32, name: &str, exec: bool) {
        let last = self.named.entry(tid).or_insert(time_ns);
        if time_ns < *last {
            return;
        }
        *last = time_ns;
        self.writer.comm(time_ns, pid, tid, name, exec);
    }

    /// `child` was forked from `parent` at `time_ns` and starts with its
    /// mappings (not for a thread, or a record that came late).
    pub fn fork(&mut self, parent: u32, child: u32, time_ns: u64) {
        if self.procs.fork(parent, child, time_ns) {
            if let Some(u) = &mut self.unwinder {
                u.fork(parent, child);
            }
        }
    }

    /// Process `pid` exited at `time_ns`: the unwinder lets go of its
    /// tables. Its mappings stay a while, for samples converted after its
    /// exit record ([`maps::EXITED_LINGER_NS`]).
    pub fn exit(&mut self, pid: u32, time_ns: u64) {
        if let Some(u) = &mut self.unwinder {
            u.exit(pid);
        }
        self.procs.exit(pid, time_ns);
    }

    /// A user address as (module, offset) through the process's mappings,
    /// `None` where no mapping holds it (yet).
    pub fn resolve_user(&self, pid: u32, addr: u64) -> Option<Frame> {
        self.procs.resolve(pid, addr)
    }

    /// A user frame: (module, offset) through the process's mappings, or
    /// the bare address in the `[unknown]` module.
    pub fn user_frame(&self, pid: u32, addr: u64) -> Frame {
        self.procs.resolve(pid, addr).unwrap_or(Frame {
            module: self.unknown,
            address: addr,
        })
    }

    /// Splits a kernel callchain (`PERF_SAMPLE_CALLCHAIN` entries, leaf
    /// first, markers included; entries before the first marker are on the
    /// `initial` side, or skipped for `None`): kernel addresses are
    /// appended to `kernel` as they are, user ones to `user` as frames.
    /// The user part ends where the frame-pointer walk goes round a loop
    /// (`push_user` says how one is told); returns whether it did.
    pub fn split_callchain(
        &self,
        pid: u32,
        entries: impl Iterator<Item = u64>,
        initial: Option<Side>,
        kernel: &mut Vec<u64>,
        user: &mut Vec<Frame>,
    ) -> bool {
        let mut looped = false;
        for (side, addr) in callchain::frames(entries, initial) {
            match side {
                Side::Kernel => kernel.push(addr),
                Side::User if looped => {}
                Side::User => looped = !self.push_user(pid, addr, user),
            }
        }
        looped
    }

    /// Appends the user frame of `addr` (an address of a kernel callchain),
    /// unless the frame-pointer walk that found it is going round in a
    /// loop: then returns false, and the user part ends there.
    ///
    /// Code built without frame pointers leaves words in its frames where
    /// the kernel's walk looks for the next frame record; a few such words
    /// pointing at each other make the walk repeat the same addresses until
    /// the callchain cap. In a cargo build's recording, 6% of the samples
    /// ended in such loops (rustc's LLVM threads: 4 addresses, 250 times
    /// over), each costing the cap's 1,024 frames to store and name. A loop
    /// shows as a non-code address (one no mapping holds: no call returns
    /// there) seen again within the last [`LOOP_WINDOW`] frames; a repeated
    /// code address (direct recursion) is never taken for one.
    fn push_user(&self, pid: u32, addr: u64, out: &mut Vec<Frame>) -> bool {
        let f = self.user_frame(pid, addr);
        if f.module == self.unknown && out.iter().rev().take(LOOP_WINDOW).any(|&g| g == f) {
            return false;
        }
        out.push(f);
        true
    }

    /// A kernel frame (the address as is, in `[kernel.kallsyms]`).
    pub fn kernel_frame(&self, addr: u64) -> Frame {
        Frame {
            module: self.kernel,
            address: addr,
        }
    }

    /// Appends the frames of an unwind's addresses (the instruction
    /// pointer first, then return addresses, which step back into their
    /// call instruction). A return address no mapping holds is not a
    /// caller (no call returns into unmapped memory: a rule that read the
    /// wrong word found it): the frames end before it, and false says the
    /// stack was cut there.
    pub fn unwound_frames(&self, pid: u32, addrs: &[u64], out: &mut Vec<Frame>) -> bool {
        for (i, &a) in addrs.iter().enumerate() {
            if i == 0 {
                out.push(self.user_frame(pid, a));
                continue;
            }
            match self.procs.resolve(pid, a.wrapping_sub(1)) {
                Some(f) => out.push(f),
                None => return false,
            }
        }
        true
    }

    /// Unwinds a user stack copy (the bytes from `regs.sp` up) by DWARF and
    /// appends its frames, leaf first; `None` without an unwinder.
    pub fn unwind(
        &mut self,
        pid: u32,
        regs: UserRegs,
        copy: &[u8],
        out: &mut Vec<Frame>,
    ) -> Option<Outcome> {
        let u = self.unwinder.as_mut()?;
        let mut addrs = std::mem::take(&mut self.addrs);
        addrs.clear();
        let outcome = u.unwind(pid, regs, copy, &mut addrs);
        let whole = self.unwound_frames(pid, &addrs, out);
        self.addrs = addrs;
        Some(if whole {
            outcome
        } else {
            Outcome::Truncated(Cut::NoRule)
        })
    }

    /// Interns a stack given leaf first. Frames are interned root first,
    /// the order stack nodes are made in: frames new to the file then get
    /// consecutive ids along the new nodes, which the nodes' frame column
    /// stores as small deltas.
    pub fn stack(&mut self, leaf_first: &[Frame]) -> StackId {
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        ids.extend(leaf_first.iter().rev().map(|&f| self.writer.frame(f)));
        let stack = self.writer.stack(&ids);
        self.ids = ids;
        stack
    }

    /// Writes a sample of `frames` (leaf first).
    pub fn sample(&mut self, time_ns: u64, pid: u32, tid: u32, frames: &[Frame]) {
        let stack = self.stack(frames);
        self.writer.sample(Sample {
            time_ns,
            pid,
            tid,
            stack,
            weight: 1,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flamerec_format::{Event, Metadata, Reader, Totals};

    fn converter() -> Converter<Vec<u8>> {
        let w = Writer::new(Vec::new(), &Metadata::default()).unwrap();
        Converter::new(w, None)
    }

    #[test]
    fn resolves_through_mappings_forks_and_execs() {
        let mut c = converter();
        c.mmap(&Mmap {
            pid: 10,
            start: 0x40_0000,
            len: 0x1000,
            pgoff: 0x2000,
            path: "/usr/bin/true",
            build_id: &[0xab],
            read_from: None,
            exec: true,
            time_ns: 5,
        });
        let f = c.user_frame(10, 0x40_0010);
        assert_eq!(f.address, 0x2010);
        assert_ne!(f.module, c.user_frame(10, 0x50_0000).module, "[unknown]");
        c.fork(10, 11, 5);
        assert_eq!(c.user_frame(11, 0x40_0010), f);
        assert!(c.exec(11, 6));
        assert_eq!(c.user_frame(11, 0x40_0010).address, 0x40_0010);
        // The same path maps to the same module in another process.
        c.mmap(&Mmap {
            pid: 12,
            start: 0x80_0000,
            len: 0x1000,
            pgoff: 0x2000,
            path: "/usr/bin/true",
            build_id: &[0xab],
            read_from: None,
            exec: true,
            time_ns: 6,
        });
        assert_eq!(c.user_frame(12, 0x80_0010), f);
        // Return addresses step back into the call; the ip does not.
        let mut out = Vec::new();
        assert!(c.unwound_frames(10, &[0x40_0010, 0x40_0020], &mut out));
        assert_eq!(
            out.iter().map(|f| f.address).collect::<Vec<_>>(),
            [0x2010, 0x201f]
        );
        // A return address no mapping holds ends the frames before it.
        out.clear();
        assert!(!c.unwound_frames(10, &[0x40_0010, 0x1, 0x40_0020], &mut out));
        assert_eq!(out.iter().map(|f| f.address).collect::<Vec<_>>(), [0x2010]);
        // The instruction pointer is the sample's own: kept wherever it is.
        out.clear();
        assert!(c.unwound_frames(10, &[0x1], &mut out));
        assert_eq!(out.len(), 1);
        let regs = UserRegs {
            ip: 0x40_0010,
            sp: 0,
            bp: 0,
            bx: None,
        };
        assert!(c.unwind(10, regs, &[], &mut out).is_none());
        // A loop of non-code addresses ends the walk where it comes round
        // again; a repeated code address (direct recursion) is not a loop.
        let mut chain = Vec::new();
        let kept: Vec<bool> = [0x40_0010, 0x40_0010, 0x50_0000, 0x60_0000, 0x50_0000]
            .into_iter()
            .map(|a| c.push_user(10, a, &mut chain))
            .collect();
        assert_eq!(kept, [true, true, true, true, false]);
        assert_eq!(chain.len(), 4);
    }

    #[test]
    fn writes_modules_mappings_and_root_first_stacks() {
        let mut c = converter();
        c.mmap(&Mmap {
            pid: 1,
            start: 0x1000,
            len: 0x1000,
            pgoff: 0,
            path: "/bin/x",
            build_id: &[],
            read_from: None,
            exec: true,
            time_ns: 0,
        });
        let (leaf, root) = (
            c.user_frame(1, 0x1100),
            c.kernel_frame(0xffff_ffff_8100_0000),
        );
        c.sample(7, 1, 2, &[leaf, root]);
        let bytes = c.into_writer().finish(Totals::default()).unwrap();
        let mut r = Reader::new(std::io::Cursor::new(bytes)).unwrap();
        let (mut mappings, mut samples) = (0, 0);
        while let Some(events) = r.next_events().unwrap() {
            for e in events {
                match e {
                    Event::Mapping(m) => {
                        assert_eq!((m.start, m.end), (0x1000, 0x2000));
                        mappings += 1;
                    }
                    Event::Samples(s) => {
                        assert_eq!((s[0].pid, s[0].tid), (1, 2));
                        samples += s.len();
                    }
                    _ => {}
                }
            }
        }
        assert_eq!((mappings, samples), (1, 1));
        let t = r.tables();
        // Root first: the kernel frame got the first id after the modules.
        assert_eq!(t.frames[0].module, 0);
        assert_eq!(t.frames[1].address, 0x100);
    }
}
