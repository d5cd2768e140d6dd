//! The kernel part of a sample: its callchain's kernel addresses, the
//! profiler's own leading frames trimmed (`trim`), turned into frames, and
//! the kernel symbols they fall in written once each.
//!
//! Trimming needs the kernel's symbol table, which takes tens of
//! milliseconds to read at start; until it is in ([`KernelFrames::is_ready`]),
//! the state keeps samples waiting. This module owns only the table and
//! what it decides; it never holds samples.

use std::collections::HashSet;
use std::io;

use flamerec_convert::Converter;
use flamerec_format::Frame;
use flamerec_symbolize::kallsyms::{AddressRanges, Kallsyms};

use crate::trim::{is_sampling_path, is_scheduler};

/// What trimming keeps or drops, as the options say.
pub(crate) struct TrimRules {
    /// Kernel code is sampled at all.
    pub sampled: bool,
    /// `--keep-profiler-frames`.
    pub keep_profiler_frames: bool,
    /// `--trim SYMBOL`s.
    pub extra: Vec<String>,
    /// Off-CPU samples: the scheduler's frames are trimmed too.
    pub off_cpu: bool,
}

/// The kernel's symbol table, once read, and the trim ranges it gives.
pub(crate) struct KernelFrames {
    rules: TrimRules,
    kallsyms: Option<Kallsyms>,
    trim: AddressRanges,
    trim_sched: AddressRanges,
    /// Kernel addresses already turned into frames.
    seen: HashSet<u64>,
    /// Symbols (by index in `kallsyms`) already written.
    written: HashSet<usize>,
}

impl KernelFrames {
    pub(crate) fn new(rules: TrimRules) -> Self {
        KernelFrames {
            rules,
            kallsyms: None,
            trim: AddressRanges::default(),
            trim_sched: AddressRanges::default(),
            seen: HashSet::new(),
            written: HashSet::new(),
        }
    }

    /// Whether the symbol table is in (samples may be finished).
    pub(crate) fn is_ready(&self) -> bool {
        self.kallsyms.is_some()
    }

    /// The symbol table is in: trimming can start. Returns a warning when
    /// kernel code is sampled but the table shows no addresses.
    pub(crate) fn set_kallsyms(&mut self, kallsyms: Kallsyms) -> Option<String> {
        let warning = (self.rules.sampled && kallsyms.is_empty()).then(|| {
            "kernel symbols are hidden (/proc/kallsyms shows no addresses: check kernel.kptr_restrict); kernel frames will show as addresses"
                .to_string()
        });
        let keep = self.rules.keep_profiler_frames;
        let extra = &self.rules.extra;
        self.trim =
            kallsyms.ranges(|n| (!keep && is_sampling_path(n)) || extra.iter().any(|e| e == n));
        self.trim_sched = kallsyms.ranges(|n| !keep && is_scheduler(n));
        self.kallsyms = Some(kallsyms);
        warning
    }

    /// Appends the frames of a kernel callchain (leaf first), its leading
    /// profiler frames trimmed.
    pub(crate) fn frames<W: io::Write>(
        &mut self,
        conv: &mut Converter<W>,
        addrs: &[u64],
        out: &mut Vec<Frame>,
    ) {
        let mut trimming = true;
        for &addr in addrs {
            if trimming && self.trimmed(addr) {
                continue;
            }
            trimming = false;
            out.push(self.frame(conv, addr));
        }
    }

    /// Whether a leading kernel frame belongs to the profiler, not the workload.
    fn trimmed(&self, addr: u64) -> bool {
        self.trim.contains(addr) || (self.rules.off_cpu && self.trim_sched.contains(addr))
    }

    /// A kernel frame; the first time an address is seen, the symbol it
    /// falls in is written too.
    pub(crate) fn frame<W: io::Write>(&mut self, conv: &mut Converter<W>, addr: u64) -> Frame {
        if self.seen.insert(addr) {
            if let Some(k) = &self.kallsyms {
                if let Some(i) = k.lookup(addr) {
                    if self.written.insert(i) {
                        conv.writer_mut().kernel_symbol(&k.symbol(i));
                    }
                }
            }
        }
        conv.kernel_frame(addr)
    }
}
