//! perf.data import: turns a `perf record` file into an in-memory `.frec`
//! recording, so the rest of folding (filters, symbolization, outputs) is
//! the same for both inputs.
//!
//! Supported: frame-pointer callchains (`perf record -g`), DWARF samples
//! (`--call-graph dwarf`: registers and a stack copy, unwound with the
//! `unwind` crate against the binaries on disk, like the recorder does), and
//! samples without a callchain (the sample IP alone). User addresses are resolved to
//! (binary, file offset) through the process's MMAP/MMAP2 records (inherited
//! on fork, replaced by overlapping mappings), with build ids from the file's
//! build-id table. Kernel symbols come from `flamerec_symbolize::kallsyms`:
//! the kallsyms or System.map file given, else this machine's
//! `/proc/kallsyms` when the recording is of the kernel running here; a
//! recording of another kernel says so once and keeps its kernel frames as
//! addresses. File mode and pipe mode (`perf record -o -`) are read by
//! `linux-perf-data`, pipe mode as a stream.
//!
//! Every sample counts 1, as `perf script | stackcollapse-perf` counts.

mod check;
mod importer;

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flamerec_format::{Metadata, Totals, Writer};
use linux_perf_data::linux_perf_event_reader::{AttrFlags, SampleFormat, SamplingPolicy};
use linux_perf_data::{PerfFile, PerfFileReader, PerfFileRecord, PerfRecordIter};

use crate::error::FoldError;
use crate::input::{Input, InputKind};
use flamerec_symbolize::kallsyms::Kallsyms;
use importer::Importer;

/// The recording converted, and what the user should hear about it.
pub(crate) struct Imported {
    /// A complete `.frec` file.
    pub bytes: Vec<u8>,
    /// One line each.
    pub warnings: Vec<String>,
}

/// Reads perf.data (file or pipe mode) into a `.frec` recording. Kernel
/// symbols come from `kallsyms` when given, else from this machine's
/// `/proc/kallsyms` when the recording is of the kernel running here.
pub(crate) fn import(input: Input, kallsyms: Option<&Path>) -> Result<Imported, FoldError> {
    let path = input.label().to_path_buf();
    let bad = |reason: String| FoldError::PerfData {
        path: path.clone(),
        reason,
    };
    if input.kind() == InputKind::PerfPipe {
        let mut stream = input.into_reader();
        let prefix = check::pipe_prefix(&mut stream).map_err(&bad)?;
        let cut = Arc::new(AtomicBool::new(false));
        let records = check::Framer::new(
            io::Cursor::new(&prefix[check::PIPE_HEADER..]).chain(stream),
            cut.clone(),
        );
        let stream = BufReader::with_capacity(
            1 << 20,
            io::Cursor::new(&prefix[..check::PIPE_HEADER]).chain(records),
        );
        // Checked above as far as the parser allocates; a panic left in
        // it is one more malformed input.
        let parsed = panic::catch_unwind(AssertUnwindSafe(|| PerfFileReader::parse_pipe(stream)))
            .map_err(|_| bad("malformed metadata records".into()))?
            .map_err(|e| bad(e.to_string()))?;
        let mut imported = convert(parsed, &path, kallsyms)?;
        if cut.load(Ordering::Relaxed) {
            imported.warnings.push(format!(
                "{}: perf.data stream ends inside a record (cut short, or other output mixed into it); folded what came before",
                path.display()
            ));
        }
        return Ok(imported);
    }
    let mut file = input.into_seekable().map_err(|source| FoldError::Read {
        path: path.clone(),
        source,
    })?;
    prevalidate(&mut file).map_err(&bad)?;
    let parsed = PerfFileReader::parse_file(BufReader::with_capacity(1 << 20, file))
        .map_err(|e| bad(e.to_string()))?;
    convert(parsed, &path, kallsyms)
}

/// The import proper, the same for both modes once the parser has read
/// the attributes and feature sections.
fn convert<R: Read>(
    parsed: PerfFileReader<R>,
    path: &Path,
    kallsyms_path: Option<&Path>,
) -> Result<Imported, FoldError> {
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = parsed;

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
        event: event_name(attr.and_then(|a| a.name()).unwrap_or("unknown")),
        frequency_hz: match attr.map(|a| &a.attr.sampling_policy) {
            Some(SamplingPolicy::Frequency(f)) => *f,
            _ => 0,
        },
        call_graph: match attr.map(|a| a.attr.sample_format.contains(SampleFormat::STACK_USER)) {
            Some(true) => "dwarf",
            _ => "fp",
        }
        .into(),
        weight_unit: "samples".into(),
        flamerec_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let kernel_release = meta.kernel_release.clone();
    let meta_dwarf = meta.call_graph == "dwarf";
    // Only lives in memory until folded: fast beats small.
    let w = Writer::with_level(Vec::new(), &meta, 1).map_err(|e| FoldError::PerfData {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let build_ids = perf_file
        .build_ids()
        .map(|m| m.into_values().map(|d| (d.path, d.build_id)).collect())
        .unwrap_or_default();
    let mut imp = Importer::new(w, build_ids, meta_dwarf);

    let wants_kernel = perf_file
        .event_attributes()
        .iter()
        .any(|a| !a.attr.flags.contains(AttrFlags::EXCLUDE_KERNEL));
    let source = KernelSymbols::choose(kallsyms_path, &kernel_release);
    // Kernel symbols take a while to read: overlap them with the records.
    let (mut warnings, kallsyms) = std::thread::scope(|sc| {
        let ksyms = match (&source, wants_kernel) {
            (KernelSymbols::File(p), true) => {
                Some(sc.spawn(move || Kallsyms::load_from(p).unwrap_or_default()))
            }
            _ => None,
        };
        let warnings = read_records(&mut imp, &mut record_iter, &mut perf_file, path);
        let ksyms = ksyms.and_then(|h| h.join().ok()).unwrap_or_default();
        (warnings, ksyms)
    });

    let mut addrs = std::mem::take(&mut imp.kernel_addrs);
    addrs.sort_unstable();
    addrs.dedup();
    if !addrs.is_empty() {
        // Kernel addresses in a recording that excluded the kernel (skid
        // at the boundary) were not foreseen: read the symbols now.
        let kallsyms = match (&source, wants_kernel) {
            (KernelSymbols::File(p), false) => Kallsyms::load_from(p).unwrap_or_default(),
            _ => kallsyms,
        };
        // A System.map lists link-time addresses: shift by how far the
        // kernel was moved (0 for a kallsyms of the recorded boot).
        let slide = match (&source, &imp.kernel_reloc) {
            (KernelSymbols::File(p), Some((symbol, ran_at))) if kallsyms_path.is_some() => {
                symbol_address(p, symbol).map_or(0, |linked| ran_at.wrapping_sub(linked))
            }
            _ => 0,
        };
        let linked: Vec<u64> = addrs.iter().map(|a| a.wrapping_sub(slide)).collect();
        let mut ksyms = kallsyms.covering(&linked);
        for s in &mut ksyms {
            s.start = s.start.wrapping_add(slide);
        }
        for s in &ksyms {
            imp.conv.writer_mut().kernel_symbol(s);
        }
        let unnamed = "kernel frames shown as [kernel.kallsyms]+0xADDR";
        match &source {
            KernelSymbols::OtherKernel { running } => warnings.push(format!(
                "recorded on Linux {kernel_release}, this machine runs {running}: {unnamed}; \
                 give that kernel's kallsyms or System.map (--kallsyms PATH) to name them"
            )),
            KernelSymbols::File(p) if ksyms.is_empty() && kallsyms_path.is_none() => {
                warnings.push(format!(
                    "no kernel symbols in {} (run as root or lower kernel.kptr_restrict); {unnamed}",
                    p.display()
                ))
            }
            KernelSymbols::File(p) if ksyms.is_empty() => warnings.push(format!(
                "no symbol in {} covers the sampled kernel addresses; {unnamed}",
                p.display()
            )),
            KernelSymbols::File(_) => {}
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
        truncated_stacks: imp.conv.unwinder().map_or(0, |u| u.stats().truncated),
        ..Default::default()
    };
    let bytes = imp
        .conv
        .into_writer()
        .finish(totals)
        .map_err(|e| FoldError::PerfData {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    Ok(Imported { bytes, warnings })
}

/// perf's name of an event without its precision modifiers (`p`, `P`):
/// perf adds `:ppp` to its default `cpu-clock`, and how little skid a
/// counter was asked for does not change what it counts, so
/// `cpu-clock:ppp` compares and merges with a recording of `cpu-clock`.
/// Modifiers that do change it (`u`, `k`, …) stay.
fn event_name(name: &str) -> String {
    // A tracepoint's `system:name` is no modifier list.
    let is_modifiers = |m: &str| !m.is_empty() && m.chars().all(|c| "ukhIGHpPSDWe".contains(c));
    match name.rsplit_once(':') {
        Some((event, mods)) if is_modifiers(mods) => {
            let kept: String = mods.chars().filter(|c| !matches!(c, 'p' | 'P')).collect();
            if kept.is_empty() {
                event.to_string()
            } else {
                format!("{event}:{kept}")
            }
        }
        _ => name.to_string(),
    }
}

/// The address of `symbol` in a kallsyms or System.map file (read up to
/// its first 256 MiB, as the symbols are).
fn symbol_address(path: &Path, symbol: &str) -> Option<u64> {
    let file = File::open(path).ok()?;
    BufReader::new(file.take(256 << 20))
        .split(b'\n')
        .map_while(Result::ok)
        .find_map(|line| {
            let line = String::from_utf8_lossy(&line).into_owned();
            let mut it = line.split_ascii_whitespace();
            let (addr, _kind, name) = (it.next()?, it.next()?, it.next()?);
            (name == symbol).then(|| u64::from_str_radix(addr, 16).ok())?
        })
}

/// Where the names of a perf.data's kernel frames come from.
#[derive(Debug, PartialEq, Eq)]
enum KernelSymbols {
    /// This file: the one given, or this machine's `/proc/kallsyms` for a
    /// recording of the kernel running here.
    File(PathBuf),
    /// Nowhere: the recording is of another kernel (release `running` here)
    /// and no symbols of that kernel were given.
    OtherKernel { running: String },
}

impl KernelSymbols {
    /// The choice for a recording of kernel `recorded` (empty when the
    /// file does not say), with `given` symbols if any.
    fn choose(given: Option<&Path>, recorded: &str) -> KernelSymbols {
        if let Some(p) = given {
            return KernelSymbols::File(p.to_path_buf());
        }
        let running = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let running = running.trim();
        if !recorded.is_empty() && !running.is_empty() && running != recorded {
            return KernelSymbols::OtherKernel {
                running: running.to_string(),
            };
        }
        KernelSymbols::File(PathBuf::from("/proc/kallsyms"))
    }
}

/// Feeds every record to `imp`; returns a warning when the file ends in damage.
fn read_records<R: Read>(
    imp: &mut Importer,
    record_iter: &mut PerfRecordIter<R>,
    perf_file: &mut PerfFile,
    path: &Path,
) -> Vec<String> {
    let mut warnings = Vec::new();
    // Records of kinds the parser does not know (a newer perf's) or cannot
    // read: skipped, and counted for a warning.
    let mut unreadable = 0u64;
    loop {
        // The record parser does unchecked arithmetic on lengths from the
        // file (a panic in debug builds): a record it cannot survive ends
        // the import like a damaged tail does.
        let step = panic::catch_unwind(AssertUnwindSafe(|| {
            let Some(record) = record_iter.next_record(perf_file)? else {
                return Ok(false);
            };
            if let PerfFileRecord::EventRecord { record, .. } = record {
                let time = record.timestamp();
                match record.parse() {
                    Ok(event) => imp.event(event, time),
                    Err(_) => unreadable += 1,
                }
            }
            Ok::<bool, linux_perf_data::Error>(true)
        }));
        let why = match step {
            Ok(Ok(true)) => {
                if imp.conv.writer().wants_flush() {
                    let _ = imp.conv.writer_mut().flush();
                }
                continue;
            }
            Ok(Ok(false)) => break,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "malformed record".to_string(),
        };
        warnings.push(format!(
            "{}: perf.data damaged ({why}); folded what came before",
            path.display()
        ));
        break;
    }
    if unreadable > 0 {
        warnings.push(format!(
            "{}: skipped {unreadable} records this reader cannot parse",
            path.display()
        ));
    }
    warnings
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

#[cfg(test)]
mod tests {
    use super::event_name;

    #[test]
    fn precision_modifiers_leave_the_event_name() {
        assert_eq!(event_name("cpu-clock:ppp"), "cpu-clock");
        assert_eq!(event_name("cycles:P"), "cycles");
        assert_eq!(event_name("cycles:Pu"), "cycles:u");
        assert_eq!(event_name("cpu-clock"), "cpu-clock");
        assert_eq!(event_name("sched:sched_switch"), "sched:sched_switch");
        assert_eq!(event_name("sched:sched_switch:p"), "sched:sched_switch");
    }
}
