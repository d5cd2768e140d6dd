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
//! build-id table. Kernel symbols come from `flamerec_symbolize::kallsyms`
//! (this machine's `/proc/kallsyms`, right when the recording was made on
//! this machine and kernel: the importer warns when the release differs).
//!
//! Every sample counts 1, as `perf script | stackcollapse-perf` counts.

mod check;
mod importer;

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;

use flamerec_format::{Metadata, Totals, Writer};
use linux_perf_data::linux_perf_event_reader::{AttrFlags, SampleFormat, SamplingPolicy};
use linux_perf_data::{PerfFile, PerfFileReader, PerfFileRecord, PerfRecordIter};

use crate::error::FoldError;
use flamerec_symbolize::kallsyms::Kallsyms;
use importer::Importer;

/// The recording converted, and what the user should hear about it.
pub(crate) struct Imported {
    /// A complete `.frec` file.
    pub bytes: Vec<u8>,
    /// One line each.
    pub warnings: Vec<String>,
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
    // /proc/kallsyms takes a while to read: overlap it with the records.
    let (mut warnings, kallsyms) = std::thread::scope(|sc| {
        let ksyms = wants_kernel
            .then(|| sc.spawn(|| Kallsyms::load_from(kallsyms_path).unwrap_or_default()));
        let warnings = read_records(&mut imp, &mut record_iter, &mut perf_file, path);
        let ksyms = ksyms.and_then(|h| h.join().ok()).unwrap_or_default();
        (warnings, ksyms)
    });

    let mut addrs = std::mem::take(&mut imp.kernel_addrs);
    addrs.sort_unstable();
    addrs.dedup();
    if !addrs.is_empty() {
        let ksyms = kallsyms.covering(&addrs);
        if ksyms.is_empty() {
            warnings.push(format!(
                "no kernel symbols in {} (run as root or lower kernel.kptr_restrict); \
                 kernel frames shown as [kernel.kallsyms]+0xADDR",
                kallsyms_path.display()
            ));
        }
        for s in &ksyms {
            imp.conv.writer_mut().kernel_symbol(s);
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

/// Feeds every record to `imp`; returns a warning when the file ends in damage.
fn read_records<R: Read>(
    imp: &mut Importer,
    record_iter: &mut PerfRecordIter<R>,
    perf_file: &mut PerfFile,
    path: &Path,
) -> Vec<String> {
    let mut warnings = Vec::new();
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
                if let Ok(event) = record.parse() {
                    imp.event(event, time);
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
