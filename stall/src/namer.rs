//! The reporter thread: turns raw captures (registers, stack bytes, kernel
//! addresses) into named frames and hands reports to the callback. All
//! slow work — unwinding, reading symbols and debug info, the callback —
//! happens here, never on a stalled thread or in the watcher.
//!
//! Names are remembered per address. When an address lies outside every
//! known mapping (a library loaded since), the mappings are read again.

use std::collections::HashMap;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use flamerec_symbolize::kallsyms::Kallsyms;
use flamerec_symbolize::live::{exec_maps, name_addresses, AddressSpace};
use flamerec_symbolize::NameOptions;
use flamerec_unwind::{StackUnwinder, UserRegs};

use crate::proc;
use crate::report::{Clock, Frame, Report};
use crate::state::Shared;

/// Kernel frames as captured.
#[derive(Debug, Clone, Default)]
pub(crate) enum KernelStack {
    /// None taken (user code, or not allowed).
    #[default]
    None,
    /// Addresses from a perf callchain, leaf first, return addresses
    /// already moved into their call instruction.
    Addrs(Vec<u64>),
    /// Names from /proc/self/task/TID/stack, leaf first.
    Named(Vec<String>),
}

/// A stack as captured, before naming.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawStack {
    /// User registers, if taken.
    pub(crate) regs: Option<UserRegs>,
    /// User stack bytes from `regs.sp` up.
    pub(crate) stack: Vec<u8>,
    pub(crate) kernel: KernelStack,
}

/// A report as the watcher decided it.
pub(crate) struct RawReport {
    pub(crate) tid: u32,
    pub(crate) name: String,
    pub(crate) stalled_ns: u64,
    pub(crate) new_ns: u64,
    pub(crate) ended: bool,
    pub(crate) clock: Clock,
    pub(crate) suppressed: u64,
    pub(crate) stack: RawStack,
}

/// Callback reports go to.
pub(crate) type ReportFn = Box<dyn FnMut(&Report) + Send>;

/// Runs until the watcher hangs up.
pub(crate) fn run(shared: Arc<Shared>, rx: Receiver<RawReport>, mut on_report: ReportFn) {
    // Symbolization uses rayon; a pool of just this thread keeps rayon's
    // global pool (a thread per CPU) out of the host program.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
        .ok();
    // Made on the first report: a program that never stalls never reads
    // its binaries' unwind tables.
    let mut names: Option<Names> = None;
    for raw in rx {
        let names = names.get_or_insert_with(Names::new);
        let report = match &pool {
            Some(p) => p.install(|| names.report(&raw)),
            None => names.report(&raw),
        };
        shared.count(&shared.counters.reports, 1);
        on_report(&report);
    }
}

/// Unwinding and naming state for this process.
struct Names {
    pid: u32,
    space: AddressSpace,
    unwinder: StackUnwinder,
    user: HashMap<u64, Vec<String>>,
    kernel: HashMap<u64, Vec<String>>,
    kallsyms: Option<Kallsyms>,
    opts: NameOptions,
}

impl Names {
    fn new() -> Self {
        let mut unwinder = StackUnwinder::new();
        if let Some(image) = own_vdso() {
            unwinder.add_image("[vdso]", &image);
        }
        let mut n = Names {
            pid: std::process::id(),
            space: AddressSpace::from_maps(Vec::new()),
            unwinder,
            user: HashMap::new(),
            kernel: HashMap::new(),
            kallsyms: None,
            opts: NameOptions::default(),
        };
        n.refresh();
        n
    }

    /// Reads the mappings again (a library was loaded or unloaded).
    fn refresh(&mut self) {
        let maps = exec_maps(self.pid);
        for m in &maps {
            self.unwinder
                .add_mapping(self.pid, m.start, m.end, m.pgoff, &m.path, &[]);
        }
        self.space = AddressSpace::from_maps(maps);
        self.user.clear();
    }

    fn report(&mut self, raw: &RawReport) -> Report {
        let user = match raw.stack.regs {
            Some(regs) => self.user_frames(regs, &raw.stack.stack),
            None => Vec::new(),
        };
        let kernel = match &raw.stack.kernel {
            KernelStack::None => Vec::new(),
            KernelStack::Addrs(a) => self.kernel_frames(a),
            KernelStack::Named(n) => n
                .iter()
                .map(|name| Frame {
                    name: name.clone(),
                    inlined: false,
                })
                .collect(),
        };
        Report {
            tid: raw.tid,
            thread_name: proc::thread_name(raw.tid).unwrap_or_else(|| raw.name.clone()),
            duration: Duration::from_nanos(raw.stalled_ns),
            new_time: Duration::from_nanos(raw.new_ns),
            ended: raw.ended,
            clock: raw.clock,
            kernel,
            user,
            suppressed: raw.suppressed,
        }
    }

    fn unwind(&mut self, regs: UserRegs, stack: &[u8]) -> Vec<u64> {
        let mut addrs = Vec::new();
        self.unwinder.unwind(self.pid, regs, stack, &mut addrs);
        // Return addresses step back into their call instruction.
        for a in addrs.iter_mut().skip(1) {
            *a = a.wrapping_sub(1);
        }
        addrs
    }

    fn user_frames(&mut self, regs: UserRegs, stack: &[u8]) -> Vec<Frame> {
        let mut addrs = self.unwind(regs, stack);
        if addrs.iter().any(|&a| self.space.resolve(a).is_none()) {
            self.refresh();
            addrs = self.unwind(regs, stack);
        }
        let missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.user.contains_key(a))
            .collect();
        if !missing.is_empty() {
            let (named, _, _) = name_addresses(&self.space, &missing, None, &[], &self.opts);
            self.user.extend(missing.into_iter().zip(named));
        }
        expand(&addrs, &self.user)
    }

    fn kernel_frames(&mut self, addrs: &[u64]) -> Vec<Frame> {
        let missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.kernel.contains_key(a))
            .collect();
        if !missing.is_empty() {
            let k = self
                .kallsyms
                .get_or_insert_with(|| Kallsyms::load().unwrap_or_default());
            let (_, named, _) = name_addresses(&self.space, &[], Some(k), &missing, &self.opts);
            self.kernel.extend(missing.into_iter().zip(named));
        }
        let mut frames = expand(addrs, &self.kernel);
        // The timer interrupt that took the sample is not the stall.
        let sampling = frames
            .iter()
            .take_while(|f| is_sampling_path(&f.name))
            .count();
        frames.drain(..sampling);
        frames
    }
}

/// Frames leaf first: per address its innermost inlined function first,
/// the function holding the code last.
fn expand(addrs: &[u64], names: &HashMap<u64, Vec<String>>) -> Vec<Frame> {
    let mut out = Vec::new();
    for a in addrs {
        let Some(list) = names.get(a) else { continue };
        // The list is outermost first: index 0 holds the code, the rest
        // were inlined into it, each into the one before.
        for (i, name) in list.iter().enumerate().rev() {
            out.push(Frame {
                name: name.clone(),
                inlined: i > 0,
            });
        }
    }
    out
}

/// Kernel functions of taking a sample from the timer interrupt.
fn is_sampling_path(name: &str) -> bool {
    [
        "perf_",
        "__perf_",
        "hrtimer_",
        "__hrtimer_",
        "__run_hrtimer",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || name.contains("sysvec_apic_timer_interrupt")
        || name == "asm_sysvec_apic_timer_interrupt"
}

/// The vDSO image from our own memory, for unwinding through it.
fn own_vdso() -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let m = exec_maps(std::process::id())
        .into_iter()
        .find(|m| m.path == "[vdso]")?;
    let len = usize::try_from(m.end.checked_sub(m.start)?).ok()?;
    if len > 1 << 20 {
        return None;
    }
    let mem = std::fs::File::open("/proc/self/mem").ok()?;
    let mut buf = vec![0u8; len];
    mem.read_exact_at(&mut buf, m.start).ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_functions_come_first_and_are_marked() {
        let mut names = HashMap::new();
        names.insert(1, vec!["outer".to_string(), "mid".into(), "inner".into()]);
        names.insert(2, vec!["main".to_string()]);
        let f = expand(&[1, 2], &names);
        let got: Vec<(&str, bool)> = f.iter().map(|f| (f.name.as_str(), f.inlined)).collect();
        assert_eq!(
            got,
            [
                ("inner", true),
                ("mid", true),
                ("outer", false),
                ("main", false)
            ]
        );
    }

    #[test]
    fn sampling_path_is_recognized() {
        assert!(is_sampling_path("perf_swevent_hrtimer"));
        assert!(is_sampling_path("__sysvec_apic_timer_interrupt"));
        assert!(!is_sampling_path("read_zero"));
    }
}
