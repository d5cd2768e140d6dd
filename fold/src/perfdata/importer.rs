//! The record-by-record conversion of perf.data into `.frec` events. The
//! sample path (mappings, modules, frames, DWARF unwinding of stack copies,
//! stacks) is `flamerec_convert`'s, the one the recorder drives too; this
//! module reads perf's records into it.

use std::collections::HashMap;

use flamerec_convert::{Converter, Mmap};
use flamerec_format::{Frame, Writer};
use flamerec_unwind::callchain::Side;
use flamerec_unwind::{StackUnwinder, UserRegs};
use linux_perf_data::linux_perf_event_reader::constants::{
    PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP,
};
use linux_perf_data::linux_perf_event_reader::{CpuMode, EventRecord, Mmap2FileId, SampleRecord};

/// `PROT_EXEC` in an MMAP2 record's protection.
const PROT_EXEC: u32 = 4;

/// A user mapping as MMAP and MMAP2 records report it.
struct NewMap<'p> {
    pid: u32,
    start: u64,
    len: u64,
    pgoff: u64,
    path: &'p [u8],
    /// From MMAP2 with a build id, else looked up in the file's table.
    build_id: Option<Vec<u8>>,
    /// Mapped executable (what the unwinder needs to know about).
    exec: bool,
    /// Its record's time (the converter drops a mapping older than its
    /// process's last exec).
    time: Option<u64>,
}

/// Conversion state: the converter (with the in-memory recording being
/// written) and what perf.data's totals need.
pub(super) struct Importer {
    pub(super) conv: Converter<Vec<u8>>,
    build_ids: HashMap<Vec<u8>, Vec<u8>>,
    /// Every kernel address used (symbols are looked up at the end).
    pub(super) kernel_addrs: Vec<u64>,
    /// The kernel's relocation symbol (`_text`) and the address it ran at,
    /// from the kernel's map record.
    pub(super) kernel_reloc: Option<(String, u64)>,
    /// The sample's frames, leaf first.
    frames: Vec<Frame>,
    base_time: Option<u64>,
    /// Time of the latest sample.
    pub(super) last_time_ns: u64,
    /// Samples converted.
    pub(super) samples: u64,
    /// Samples the kernel lost.
    pub(super) lost: u64,
    /// tid → pid of every sampled thread.
    pub(super) threads: HashMap<u32, u32>,
}

impl Importer {
    /// An importer writing to `w`; `build_ids` by path from the perf.data
    /// header; `dwarf` when samples carry stack copies to unwind.
    pub(super) fn new(
        w: Writer<Vec<u8>>,
        build_ids: HashMap<Vec<u8>, Vec<u8>>,
        dwarf: bool,
    ) -> Self {
        // The recording may come from another machine: no vDSO image of ours.
        let unwinder = dwarf.then(StackUnwinder::new);
        Importer {
            conv: Converter::new(w, unwinder),
            build_ids,
            kernel_addrs: Vec::new(),
            kernel_reloc: None,
            frames: Vec::new(),
            base_time: None,
            last_time_ns: 0,
            samples: 0,
            lost: 0,
            threads: HashMap::new(),
        }
    }

    fn rel(&mut self, time: Option<u64>) -> u64 {
        match (time, self.base_time) {
            (Some(t), Some(b)) => t.saturating_sub(b),
            // perf synthesizes the records of processes that ran before it
            // with time 0: the recording starts at its first real time.
            (Some(0), None) => 0,
            (Some(t), None) => {
                self.base_time = Some(t);
                0
            }
            (None, _) => self.last_time_ns,
        }
    }

    /// Converts one record; `time` is its timestamp when it has one.
    pub(super) fn event(&mut self, event: EventRecord<'_>, time: Option<u64>) {
        match event {
            EventRecord::Sample(s) => {
                let t = self.rel(s.timestamp.or(time));
                self.last_time_ns = self.last_time_ns.max(t);
                let (pid, tid) = (s.pid.map_or(0, id), s.tid.map_or(0, id));
                self.threads.insert(tid, pid);
                let mut frames = std::mem::take(&mut self.frames);
                frames.clear();
                // The user frames go to `frames`, the kernel addresses to
                // `kernel_addrs` (all of them are looked up at the end); the
                // kernel frames then go in front, leaf first.
                let first_kernel = self.kernel_addrs.len();
                match &s.callchain {
                    Some(chain) => {
                        let entries = (0..chain.len()).map_while(|i| chain.get(i));
                        self.conv.split_callchain(
                            pid,
                            entries,
                            Some(Side::User),
                            &mut self.kernel_addrs,
                            &mut frames,
                        );
                    }
                    None => match (s.ip, s.cpu_mode) {
                        (Some(ip), CpuMode::Kernel) => self.kernel_addrs.push(ip),
                        (Some(ip), _) => frames.push(self.conv.user_frame(pid, ip)),
                        (None, _) => {}
                    },
                }
                // `--call-graph dwarf`: the kernel gave registers and a stack
                // copy instead of user frames.
                if frames.is_empty() {
                    self.unwind_user(pid, &s, &mut frames);
                }
                let conv = &self.conv;
                let kernel = self.kernel_addrs[first_kernel..].iter();
                frames.splice(0..0, kernel.map(|&a| conv.kernel_frame(a)));
                self.conv.sample(t, pid, tid, &frames);
                self.frames = frames;
                self.samples += 1;
            }
            EventRecord::Comm(c) => {
                let t = self.rel(time);
                if c.is_execve {
                    self.conv.exec(id(c.pid), t);
                }
                let name = String::from_utf8_lossy(&c.name.as_slice()).into_owned();
                self.conv.comm(t, id(c.pid), id(c.tid), &name, c.is_execve);
            }
            EventRecord::Fork(f) => {
                let t = self.rel(Some(f.timestamp));
                let (pid, ppid) = (id(f.pid), id(f.ppid));
                self.conv.fork(ppid, pid, t);
                self.conv
                    .writer_mut()
                    .fork(t, pid, ppid, id(f.tid), id(f.ptid));
            }
            EventRecord::Exit(f) => {
                let t = self.rel(Some(f.timestamp));
                if f.pid == f.tid {
                    self.conv.exit(id(f.pid), t);
                }
                self.conv.writer_mut().exit(t, id(f.pid), id(f.tid));
            }
            EventRecord::Mmap(m) if m.cpu_mode != CpuMode::Kernel => {
                let path = m.path.as_slice().into_owned();
                self.map(NewMap {
                    pid: id(m.pid),
                    start: m.address,
                    len: m.length,
                    pgoff: m.page_offset,
                    path: &path,
                    build_id: None,
                    exec: m.is_executable,
                    time,
                });
            }
            EventRecord::Mmap2(m) if m.cpu_mode != CpuMode::Kernel => {
                let path = m.path.as_slice().into_owned();
                let build_id = match &m.file_id {
                    Mmap2FileId::BuildId(b) => Some(b.clone()),
                    Mmap2FileId::InodeAndVersion(_) => None,
                };
                self.map(NewMap {
                    pid: id(m.pid),
                    start: m.address,
                    len: m.length,
                    pgoff: m.page_offset,
                    path: &path,
                    build_id,
                    exec: m.protection & PROT_EXEC != 0,
                    time,
                });
            }
            EventRecord::Mmap(m) if self.kernel_reloc.is_none() => {
                // The kernel's map: `[kernel.kallsyms]_text`, its page offset
                // the address `_text` ran at (after address randomization).
                let path = m.path.as_slice();
                if let Some(symbol) = path.strip_prefix(b"[kernel.kallsyms]".as_slice()) {
                    let symbol = String::from_utf8_lossy(symbol).into_owned();
                    if !symbol.is_empty() {
                        self.kernel_reloc = Some((symbol, m.page_offset));
                    }
                }
            }
            EventRecord::Lost(l) => {
                self.lost = self.lost.saturating_add(l.count);
                let t = self.rel(time);
                self.conv.writer_mut().lost(t, l.count);
            }
            _ => {}
        }
    }

    fn unwind_user(&mut self, pid: u32, s: &SampleRecord<'_>, frames: &mut Vec<Frame>) {
        let (Some(regs), Some((stack, dyn_size))) = (&s.user_regs, &s.user_stack) else {
            return;
        };
        let (Some(ip), Some(sp), Some(bp)) = (
            regs.get(PERF_REG_X86_IP),
            regs.get(PERF_REG_X86_SP),
            regs.get(PERF_REG_X86_BP),
        ) else {
            return;
        };
        let bytes = stack.as_slice();
        let len = usize::try_from(*dyn_size).map_or(bytes.len(), |d| d.min(bytes.len()));
        let regs = UserRegs {
            ip,
            sp,
            bp,
            bx: None,
        };
        self.conv.unwind(pid, regs, &bytes[..len], frames);
    }

    fn map(&mut self, m: NewMap<'_>) {
        let time_ns = self.rel(m.time);
        let path = String::from_utf8_lossy(m.path);
        let build_id = m
            .build_id
            .or_else(|| self.build_ids.get(m.path).cloned())
            .unwrap_or_default();
        self.conv.mmap(&Mmap {
            pid: m.pid,
            start: m.start,
            len: m.len,
            pgoff: m.pgoff,
            path: &path,
            build_id: &build_id,
            read_from: None,
            exec: m.exec,
            time_ns,
        });
    }
}

/// perf's -1 (unknown) and other negative ids become 0 (the idle task's).
fn id(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}
