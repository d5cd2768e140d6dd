//! perf.data import: turns a `perf record` file into an in-memory `.frec`
//! recording, so the rest of folding (filters, symbolization, outputs) is
//! the same for both inputs.
//!
//! Supported: frame-pointer callchains (`perf record -g`) and samples without
//! a callchain (the sample IP alone). DWARF samples (`--call-graph dwarf`)
//! fold with their kernel part and the leaf user frame only, until the
//! `unwind` crate is available to fold. User addresses are resolved to
//! (binary, file offset) through the process's MMAP/MMAP2 records (inherited
//! on fork, replaced by overlapping mappings), with build ids from the file's
//! build-id table. Kernel symbols come from [`kallsyms`] (this machine's).
//!
//! Every sample counts 1, as `perf script | stackcollapse-perf` counts.

mod check;
mod kallsyms;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use flamerec_format::{
    Frame, FrameId, Metadata, Module, ModuleId, ModuleKind, Sample, Totals, Writer,
};
use linux_perf_data::linux_perf_event_reader::{CpuMode, EventRecord, Mmap2FileId, SamplingPolicy};
use linux_perf_data::{PerfFileReader, PerfFileRecord};

use crate::error::FoldError;
pub(crate) use kallsyms::Kallsyms;

/// Callchain entries at or above this are context markers.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;
const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

/// The recording converted, and what the user should hear about it.
pub(crate) struct Imported {
    /// A complete `.frec` file.
    pub bytes: Vec<u8>,
    /// One line each.
    pub warnings: Vec<String>,
}

/// A mapping of a process: [start, end) of `module`, file offset of start.
#[derive(Debug, Clone, Copy)]
struct Map {
    start: u64,
    end: u64,
    pgoff: u64,
    module: ModuleId,
    kind: ModuleKind,
}

struct Importer {
    w: Writer<Vec<u8>>,
    modules: HashMap<(u8, String), ModuleId>,
    build_ids: HashMap<Vec<u8>, Vec<u8>>,
    maps: HashMap<u32, Vec<Map>>,
    kernel: ModuleId,
    unknown: ModuleId,
    kernel_addrs: Vec<u64>,
    frames: Vec<FrameId>,
    base_time: Option<u64>,
    last_time_ns: u64,
    samples: u64,
    lost: u64,
    threads: HashMap<u32, u32>,
}

/// Reads the perf.data at `path` into a `.frec` recording.
pub(crate) fn import(path: &Path, kallsyms_path: &Path) -> Result<Imported, FoldError> {
    let bad = |e: linux_perf_data::Error| FoldError::PerfData {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut file = File::open(path).map_err(|source| FoldError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    prevalidate(&mut file).map_err(|reason| FoldError::PerfData {
        path: path.to_path_buf(),
        reason,
    })?;
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(BufReader::with_capacity(1 << 20, file)).map_err(bad)?;

    let attr = perf_file.event_attributes().first();
    let meta = Metadata {
        command: perf_file
            .cmdline()
            .ok()
            .flatten()
            .map(|c| c.iter().map(|s| s.to_string()).collect())
            .unwrap_or_default(),
        target: "perf.data".into(),
        host: perf_file
            .hostname()
            .ok()
            .flatten()
            .unwrap_or_default()
            .into(),
        kernel_release: perf_file
            .os_release()
            .ok()
            .flatten()
            .unwrap_or_default()
            .into(),
        event: attr.and_then(|a| a.name()).unwrap_or("unknown").into(),
        frequency_hz: match attr.map(|a| &a.attr.sampling_policy) {
            Some(SamplingPolicy::Frequency(f)) => *f,
            _ => 0,
        },
        call_graph: "fp".into(),
        weight_unit: "samples".into(),
        flamerec_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let kernel_release = meta.kernel_release.clone();
    let mut w = Writer::new(Vec::new(), &meta).map_err(|e| FoldError::PerfData {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
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
    let build_ids = perf_file
        .build_ids()
        .map(|m| m.into_values().map(|d| (d.path, d.build_id)).collect())
        .unwrap_or_default();
    let mut imp = Importer {
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
    };

    let mut warnings = Vec::new();
    loop {
        let record = match record_iter.next_record(&mut perf_file) {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) => {
                warnings.push(format!(
                    "{}: perf.data damaged ({e}); folded what came before",
                    path.display()
                ));
                break;
            }
        };
        let PerfFileRecord::EventRecord { record, .. } = record else {
            continue;
        };
        let time = record.timestamp();
        if let Ok(event) = record.parse() {
            imp.event(event, time);
        }
        if imp.w.wants_flush() {
            let _ = imp.w.flush();
        }
    }

    let mut addrs = std::mem::take(&mut imp.kernel_addrs);
    addrs.sort_unstable();
    addrs.dedup();
    if !addrs.is_empty() {
        let ksyms = Kallsyms::load(kallsyms_path).covering(&addrs);
        if ksyms.is_empty() {
            warnings.push(format!(
                "no kernel symbols in {} (run as root or lower kernel.kptr_restrict); \
                 kernel frames shown as [kernel.kallsyms]+0xADDR",
                kallsyms_path.display()
            ));
        }
        for s in &ksyms {
            imp.w.kernel_symbol(s);
        }
        let running = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        if !kernel_release.is_empty() && running.trim() != kernel_release {
            warnings.push(format!(
                "kernel symbols come from this machine's kernel {}, the recording is of {kernel_release}",
                running.trim()
            ));
        }
    }
    let pids: std::collections::HashSet<u32> = imp.threads.values().copied().collect();
    let totals = Totals {
        samples: imp.samples,
        weight: imp.samples,
        lost_samples: imp.lost,
        duration_ns: imp.last_time_ns,
        processes: pids.len() as u64,
        threads: imp.threads.len() as u64,
        truncated_stacks: 0,
    };
    let bytes = imp.w.finish(totals).map_err(|e| FoldError::PerfData {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(Imported { bytes, warnings })
}

/// Runs [`check::check`] on `file` and rewinds it.
fn prevalidate(file: &mut File) -> Result<(), String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut head = [0u8; 104];
    file.read_exact(&mut head)
        .map_err(|_| "too short for a perf.data header")?;
    check::check(&head, len, |off, size| {
        let mut buf = vec![0; usize::try_from(size).ok()?];
        file.seek(SeekFrom::Start(off)).ok()?;
        file.read_exact(&mut buf).ok()?;
        Some(buf)
    })?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    Ok(())
}

impl Importer {
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

    fn event(&mut self, event: EventRecord<'_>, time: Option<u64>) {
        match event {
            EventRecord::Sample(s) => {
                let t = self.rel(s.timestamp.or(time));
                self.last_time_ns = self.last_time_ns.max(t);
                let (pid, tid) = (s.pid.map_or(0, id), s.tid.map_or(0, id));
                self.threads.insert(tid, pid);
                self.frames.clear();
                match &s.callchain {
                    Some(chain) => {
                        let mut context = PERF_CONTEXT_USER;
                        let mut first = true;
                        for i in 0..chain.len() {
                            let Some(ip) = chain.get(i) else { break };
                            if ip >= PERF_CONTEXT_MAX {
                                context = ip;
                                first = true;
                                continue;
                            }
                            // Callers hold return addresses: step back into the call.
                            let addr = if first { ip } else { ip.wrapping_sub(1) };
                            first = false;
                            if context == PERF_CONTEXT_KERNEL {
                                self.push_kernel(addr);
                            } else if context == PERF_CONTEXT_USER {
                                self.push_user(pid, addr);
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
                }
                self.w.fork(t, pid, ppid, id(f.tid), id(f.ptid));
            }
            EventRecord::Exit(f) => {
                let t = self.rel(Some(f.timestamp));
                self.w.exit(t, id(f.pid), id(f.tid));
            }
            EventRecord::Mmap(m) if m.cpu_mode != CpuMode::Kernel => {
                let path = m.path.as_slice().into_owned();
                self.map(id(m.pid), m.address, m.length, m.page_offset, &path, None);
            }
            EventRecord::Mmap2(m) if m.cpu_mode != CpuMode::Kernel => {
                let path = m.path.as_slice().into_owned();
                let build_id = match &m.file_id {
                    Mmap2FileId::BuildId(b) => Some(b.clone()),
                    Mmap2FileId::InodeAndVersion(_) => None,
                };
                self.map(
                    id(m.pid),
                    m.address,
                    m.length,
                    m.page_offset,
                    &path,
                    build_id,
                );
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

    fn push_user(&mut self, pid: u32, addr: u64) {
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

    fn map(
        &mut self,
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        path: &[u8],
        bid: Option<Vec<u8>>,
    ) {
        let Some(end) = start.checked_add(len).filter(|&e| e > start) else {
            return;
        };
        let text = String::from_utf8_lossy(path).into_owned();
        let kind = if text == "[vdso]" {
            ModuleKind::Vdso
        } else if text.starts_with('/') && !text.starts_with("/memfd:") {
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
