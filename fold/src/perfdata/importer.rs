//! The record-by-record conversion of perf.data into `.frec` events: process
//! mappings, callchains (and DWARF unwinding of stack copies) into frames.

use std::collections::HashMap;

use flamerec_format::{Frame, FrameId, Module, ModuleId, ModuleKind, Sample, Writer};
use flamerec_unwind::callchain::{self, Side};
use flamerec_unwind::{StackUnwinder, UserRegs};
use linux_perf_data::linux_perf_event_reader::constants::{
    PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP,
};
use linux_perf_data::linux_perf_event_reader::{CpuMode, EventRecord, Mmap2FileId, SampleRecord};

/// `PROT_EXEC` in an MMAP2 record's protection.
const PROT_EXEC: u32 = 4;

/// A mapping of a process: [start, end) of `module`, file offset of start.
#[derive(Debug, Clone, Copy)]
struct Map {
    start: u64,
    end: u64,
    pgoff: u64,
    module: ModuleId,
    kind: ModuleKind,
}

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
}

/// Conversion state: the writer, what it has interned, and every process's mappings.
pub(super) struct Importer {
    /// The in-memory recording being written.
    pub(super) w: Writer<Vec<u8>>,
    modules: HashMap<(u8, String), ModuleId>,
    build_ids: HashMap<Vec<u8>, Vec<u8>>,
    maps: HashMap<u32, Vec<Map>>,
    kernel: ModuleId,
    unknown: ModuleId,
    /// Every kernel address used (symbols are looked up at the end).
    pub(super) kernel_addrs: Vec<u64>,
    frames: Vec<FrameId>,
    base_time: Option<u64>,
    /// Time of the latest sample.
    pub(super) last_time_ns: u64,
    /// Samples converted.
    pub(super) samples: u64,
    /// Samples the kernel lost.
    pub(super) lost: u64,
    /// tid → pid of every sampled thread.
    pub(super) threads: HashMap<u32, u32>,
    /// Some samples carry a user stack copy to unwind.
    dwarf: bool,
    /// DWARF unwinding of user stack copies.
    pub(super) unwinder: StackUnwinder,
    user_addrs: Vec<u64>,
    /// User frames pushed for the current sample.
    user_pushed: usize,
}

impl Importer {
    /// An importer writing to `w`; `build_ids` by path from the perf.data
    /// header; `dwarf` when samples carry stack copies to unwind.
    pub(super) fn new(
        mut w: Writer<Vec<u8>>,
        build_ids: HashMap<Vec<u8>, Vec<u8>>,
        dwarf: bool,
    ) -> Self {
        let kernel = w.module(&Module {
            kind: ModuleKind::Kernel,
            path: "[kernel.kallsyms]".into(),
            build_id: Vec::new(),
        });
        let unknown = w.module(&Module {
            kind: ModuleKind::Anonymous,
            path: "[unknown]".into(),
            build_id: Vec::new(),
        });
        Importer {
            w,
            modules: HashMap::new(),
            build_ids,
            maps: HashMap::new(),
            kernel,
            unknown,
            kernel_addrs: Vec::new(),
            frames: Vec::new(),
            base_time: None,
            last_time_ns: 0,
            samples: 0,
            lost: 0,
            threads: HashMap::new(),
            dwarf,
            unwinder: StackUnwinder::new(),
            user_addrs: Vec::new(),
            user_pushed: 0,
        }
    }

    fn rel(&mut self, time: Option<u64>) -> u64 {
        match (time, self.base_time) {
            (Some(t), Some(b)) => t.saturating_sub(b),
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
                self.frames.clear();
                self.user_pushed = 0;
                match &s.callchain {
                    Some(chain) => {
                        let entries = (0..chain.len()).map_while(|i| chain.get(i));
                        for (side, addr) in callchain::frames(entries, Some(Side::User)) {
                            match side {
                                Side::Kernel => self.push_kernel(addr),
                                Side::User => self.push_user(pid, addr),
                            }
                        }
                    }
                    None => {
                        if let Some(ip) = s.ip {
                            match s.cpu_mode {
                                CpuMode::Kernel => self.push_kernel(ip),
                                _ => self.push_user(pid, ip),
                            }
                        }
                    }
                }
                // `--call-graph dwarf`: the kernel gave registers and a stack
                // copy instead of user frames.
                if self.user_pushed == 0 {
                    self.unwind_user(pid, &s);
                }
                self.frames.reverse();
                let stack = self.w.stack(&self.frames);
                self.w.sample(Sample {
                    time_ns: t,
                    pid,
                    tid,
                    stack,
                    weight: 1,
                });
                self.samples += 1;
            }
            EventRecord::Comm(c) => {
                if c.is_execve {
                    self.unwinder.exec(id(c.pid));
                }
                let t = self.rel(time);
                let name = String::from_utf8_lossy(&c.name.as_slice()).into_owned();
                self.w.comm(t, id(c.pid), id(c.tid), &name, c.is_execve);
            }
            EventRecord::Fork(f) => {
                let t = self.rel(Some(f.timestamp));
                let (pid, ppid) = (id(f.pid), id(f.ppid));
                if pid != ppid {
                    if let Some(parent) = self.maps.get(&ppid).cloned() {
                        self.maps.insert(pid, parent);
                    }
                    self.unwinder.fork(ppid, pid);
                }
                self.w.fork(t, pid, ppid, id(f.tid), id(f.ptid));
            }
            EventRecord::Exit(f) => {
                if f.pid == f.tid {
                    self.unwinder.exit(id(f.pid));
                }
                let t = self.rel(Some(f.timestamp));
                self.w.exit(t, id(f.pid), id(f.tid));
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
                });
            }
            EventRecord::Lost(l) => {
                self.lost = self.lost.saturating_add(l.count);
                let t = self.rel(time);
                self.w.lost(t, l.count);
            }
            _ => {}
        }
    }

    fn push_kernel(&mut self, addr: u64) {
        self.kernel_addrs.push(addr);
        let f = self.w.frame(Frame {
            module: self.kernel,
            address: addr,
        });
        self.frames.push(f);
    }

    fn unwind_user(&mut self, pid: u32, s: &SampleRecord<'_>) {
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
        let mut addrs = std::mem::take(&mut self.user_addrs);
        addrs.clear();
        self.unwinder.unwind(
            pid,
            UserRegs {
                ip,
                sp,
                bp,
                bx: None,
            },
            &bytes[..len],
            &mut addrs,
        );
        for (i, &a) in addrs.iter().enumerate() {
            // Return addresses step back into the call instruction.
            self.push_user(pid, if i == 0 { a } else { a.wrapping_sub(1) });
        }
        self.user_addrs = addrs;
    }

    fn push_user(&mut self, pid: u32, addr: u64) {
        self.user_pushed += 1;
        let frame = self
            .maps
            .get(&pid)
            .and_then(|maps| {
                let i = maps.partition_point(|m| m.start <= addr).checked_sub(1)?;
                let m = maps.get(i).filter(|m| addr < m.end)?;
                let address = match m.kind {
                    ModuleKind::File => (addr - m.start).checked_add(m.pgoff)?,
                    ModuleKind::Vdso => addr - m.start,
                    _ => addr,
                };
                Some(Frame {
                    module: m.module,
                    address,
                })
            })
            .unwrap_or(Frame {
                module: self.unknown,
                address: addr,
            });
        let f = self.w.frame(frame);
        self.frames.push(f);
    }

    fn map(&mut self, m: NewMap<'_>) {
        let NewMap {
            pid,
            start,
            len,
            pgoff,
            path,
            build_id: bid,
            exec,
        } = m;
        let Some(end) = start.checked_add(len).filter(|&e| e > start) else {
            return;
        };
        let text = String::from_utf8_lossy(path).into_owned();
        let kind = if text == "[vdso]" {
            ModuleKind::Vdso
        } else if text.starts_with('/')
            && !text.starts_with("//anon")
            && !text.starts_with("/memfd:")
        {
            ModuleKind::File
        } else {
            ModuleKind::Anonymous
        };
        let key_path = if kind == ModuleKind::Anonymous {
            "[anon]".to_string()
        } else {
            text
        };
        let build_id = bid
            .or_else(|| self.build_ids.get(path).cloned())
            .unwrap_or_default();
        if self.dwarf && kind == ModuleKind::File && exec {
            self.unwinder
                .add_mapping(pid, start, end, pgoff, &key_path, &build_id);
        }
        let code = kind_code(kind);
        let module = match self.modules.get(&(code, key_path.clone())) {
            Some(&m) => m,
            None => {
                let m = self.w.module(&Module {
                    kind,
                    path: key_path.clone(),
                    build_id,
                });
                self.modules.insert((code, key_path), m);
                m
            }
        };
        let maps = self.maps.entry(pid).or_default();
        // A new mapping replaces whatever it overlaps.
        maps.retain(|m| m.end <= start || m.start >= end);
        let at = maps.partition_point(|m| m.start < start);
        maps.insert(
            at,
            Map {
                start,
                end,
                pgoff,
                module,
                kind,
            },
        );
    }
}

fn kind_code(k: ModuleKind) -> u8 {
    match k {
        ModuleKind::File => 0,
        ModuleKind::Kernel => 1,
        ModuleKind::Vdso => 2,
        _ => 3,
    }
}

/// perf's -1 (unknown) and other negative ids become 0 (the idle task's).
fn id(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}
