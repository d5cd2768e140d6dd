//! The [`Builder`] (every knob with its default), starting a detector (how
//! stalls will be timed is decided here, once), and the [`Detector`]
//! handle that registers threads and stops everything on drop.

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Error;
use crate::guard::{self, ThreadGuard};
use crate::namer::{self, ReportFn};
use crate::proc;
use crate::report::{Clock, Report};
use crate::state::{Config, Mode, Shared};
use crate::sys::{self, signal};
use crate::watch;

/// Default [`Builder::threshold`].
pub const DEFAULT_THRESHOLD: Duration = Duration::from_millis(100);
/// Default [`Builder::max_reports_per_minute`].
pub const DEFAULT_REPORTS_PER_MINUTE: u32 = 6;
/// Default [`Builder::user_stack_bytes`].
pub const DEFAULT_USER_STACK_BYTES: u32 = 8 * 1024;
/// Offset of the default capture signal from SIGRTMIN.
const DEFAULT_SIGNAL_OFFSET: i32 = 5;

/// Configures and starts a [`Detector`]; every setting has a default that
/// works.
pub struct Builder {
    threshold: Duration,
    per_minute: u32,
    clock: Clock,
    kernel_stacks: bool,
    stack_bytes: u32,
    signal: Option<i32>,
    on_report: ReportFn,
    on_warning: Box<dyn FnMut(&str) + Send>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("threshold", &self.threshold)
            .field("max_reports_per_minute", &self.per_minute)
            .field("clock", &self.clock)
            .field("kernel_stacks", &self.kernel_stacks)
            .field("user_stack_bytes", &self.stack_bytes)
            .field("signal", &self.signal)
            .finish_non_exhaustive()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            threshold: DEFAULT_THRESHOLD,
            per_minute: DEFAULT_REPORTS_PER_MINUTE,
            clock: Clock::Cpu,
            kernel_stacks: true,
            stack_bytes: DEFAULT_USER_STACK_BYTES,
            signal: None,
            on_report: Box::new(|r: &Report| eprintln!("flamerec-stall: {r}")),
            on_warning: Box::new(|w: &str| eprintln!("flamerec-stall: warning: {w}")),
        }
    }
}

impl Builder {
    /// How long a thread may go without a tick before it is reported, and
    /// the interval of further reports while the stall lasts. Default 100 ms;
    /// at least 1 ms.
    pub fn threshold(mut self, threshold: Duration) -> Self {
        self.threshold = threshold;
        self
    }

    /// At most this many reports a minute (a token bucket), the rest counted
    /// and announced by the next report. Default 6; 0 reports nothing.
    pub fn max_reports_per_minute(mut self, n: u32) -> Self {
        self.per_minute = n;
        self
    }

    /// Which time counts as stalled. Default [`Clock::Cpu`], which falls
    /// back to [`Clock::Wall`] (and says so once) where perf events cannot
    /// be opened.
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Whether to take kernel stacks where allowed. Default true.
    pub fn kernel_stacks(mut self, on: bool) -> Self {
        self.kernel_stacks = on;
        self
    }

    /// Bytes of user stack each perf sample copies (the rest is read from
    /// the stalled thread's memory when a report is made). Default 8 KiB;
    /// 64 to 61440. Each registered thread maps a ring of about six samples.
    pub fn user_stack_bytes(mut self, bytes: u32) -> Self {
        self.stack_bytes = bytes;
        self
    }

    /// The real-time signal that takes user stacks on the wall-clock path,
    /// and on the CPU-clock path where kernel samples are refused (for a
    /// stall spent in the kernel). Default SIGRTMIN+5. It must have no
    /// handler in the program yet; its handler stays installed for the life
    /// of the process.
    pub fn signal(mut self, signal: i32) -> Self {
        self.signal = Some(signal);
        self
    }

    /// Where reports go; called on the detector's reporter thread, one
    /// report at a time. Default: printed to stderr.
    pub fn on_report(mut self, f: impl FnMut(&Report) + Send + 'static) -> Self {
        self.on_report = Box::new(f);
        self
    }

    /// Where warnings go (each said once: kernel stacks not allowed, perf
    /// events unavailable, a thread that did not take the capture signal).
    /// Default: printed to stderr. [`Detector::warnings`] keeps them too.
    pub fn on_warning(mut self, f: impl FnMut(&str) + Send + 'static) -> Self {
        self.on_warning = Box::new(f);
        self
    }

    /// Starts the detector's watcher and reporter threads.
    pub fn start(self) -> Result<Detector, Error> {
        if self.threshold < Duration::from_millis(1) {
            return Err(Error::Threshold(self.threshold));
        }
        if !(64..=61440).contains(&self.stack_bytes) {
            return Err(Error::StackCopy(self.stack_bytes));
        }
        let stack_bytes = self.stack_bytes & !7;
        let mut warnings = Vec::new();
        let mode = self.decide_mode(stack_bytes, &mut warnings)?;
        let pipe = sys::pipe().map_err(|source| Error::Sys {
            what: "create the stall detector's wake-up pipe",
            source,
        })?;
        let config = Config {
            threshold: self.threshold,
            per_minute: self.per_minute,
            stack_bytes,
            mode,
        };
        let shared = Arc::new(Shared::new(config, pipe, self.on_warning));
        for w in warnings {
            shared.warn(w);
        }
        let (tx, rx) = mpsc::channel();
        let s = Arc::clone(&shared);
        let on_report = self.on_report;
        let reporter = std::thread::Builder::new()
            .name("flamerec-stall-report".into())
            .spawn(move || namer::run(s, rx, on_report))
            .map_err(|source| Error::Sys {
                what: "start the stall detector's reporter thread",
                source,
            })?;
        let s = Arc::clone(&shared);
        // If this fails, `tx` is dropped with the closure and the reporter ends.
        let watcher = std::thread::Builder::new()
            .name("flamerec-stall".into())
            .spawn(move || watch::run(s, tx))
            .map_err(|source| Error::Sys {
                what: "start the stall detector's watcher thread",
                source,
            })?;
        Ok(Detector {
            shared,
            watcher: Some(watcher),
            reporter: Some(reporter),
        })
    }

    fn decide_mode(&self, stack_bytes: u32, warnings: &mut Vec<String>) -> Result<Mode, Error> {
        if self.clock == Clock::Wall {
            let proc_stacks = self.kernel_stacks && proc::kernel_stack(sys::gettid()).is_some();
            return self.wall_mode(proc_stacks);
        }
        let tid = sys::gettid();
        let period = (u64::try_from(self.threshold.as_nanos()).unwrap_or(u64::MAX) / 4).max(1);
        let probe = |kernel| guard::open_perf(tid, period, stack_bytes, kernel).map(drop);
        let kernel_refused = if self.kernel_stacks {
            match probe(true) {
                Ok(()) => {
                    return Ok(Mode::Perf {
                        kernel: true,
                        signal: None,
                    })
                }
                Err(e) => Some(e),
            }
        } else {
            None
        };
        match probe(false) {
            Ok(()) => {
                // A stall inside the kernel leaves no sample then: its user
                // stack is taken with the capture signal, if it is free.
                let signal = self.capture_signal().ok();
                if let Some(e) = kernel_refused {
                    let stacks = if signal.is_some() {
                        "a stall inside the kernel shows its user stack only"
                    } else {
                        "a stall inside the kernel has no stack (the capture signal is taken)"
                    };
                    warnings.push(format!(
                        "kernel sampling is not allowed ({e}; kernel.perf_event_paranoid is {}): \
                         stall reports have user frames only; {stacks}",
                        paranoid()
                    ));
                }
                Ok(Mode::Perf {
                    kernel: false,
                    signal,
                })
            }
            Err(e) => {
                warnings.push(format!(
                    "perf events unavailable ({e}): stalls timed by wall clock, user stacks only"
                ));
                self.wall_mode(false)
            }
        }
    }

    fn wall_mode(&self, proc_stacks: bool) -> Result<Mode, Error> {
        Ok(Mode::Wall {
            signal: self.capture_signal()?,
            proc_stacks,
        })
    }

    /// The capture signal, its handler installed.
    fn capture_signal(&self) -> Result<i32, Error> {
        let (min, max) = sys::realtime_signals();
        let signal = self.signal.unwrap_or(min + DEFAULT_SIGNAL_OFFSET);
        if !(min..=max).contains(&signal) {
            return Err(Error::NotRealtime { signal, min, max });
        }
        signal::install(signal).map_err(|e| match e {
            signal::InstallError::InUse => Error::SignalInUse(signal),
            signal::InstallError::Os(source) => Error::Sigaction { signal, source },
        })?;
        Ok(signal)
    }
}

fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Counts since the detector started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Stalls that passed the threshold.
    pub stalls: u64,
    /// Reports handed to the callback.
    pub reports: u64,
    /// Reports the rate limit dropped.
    pub suppressed: u64,
    /// Perf samples the kernel dropped (a ring was full).
    pub lost_samples: u64,
    /// Threads registered now.
    pub threads: usize,
}

/// A running stall detector. Share it (`&Detector` or `Arc<Detector>`)
/// with the threads that register; dropping it delivers the reports already
/// decided, then stops its threads and closes every event.
pub struct Detector {
    shared: Arc<Shared>,
    watcher: Option<JoinHandle<()>>,
    reporter: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("clock", &self.clock())
            .field("threshold", &self.threshold())
            .field("kernel_stacks", &self.kernel_stacks())
            .finish_non_exhaustive()
    }
}

impl Detector {
    /// A builder with the defaults.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Watches the calling thread until the returned guard is dropped.
    pub fn register_current_thread(&self) -> Result<ThreadGuard, Error> {
        guard::register(&self.shared)
    }

    /// The clock stalls are timed by (after any fallback).
    pub fn clock(&self) -> Clock {
        self.shared.config.clock()
    }

    /// Whether reports can carry kernel frames: sampled kernel stacks
    /// (CPU clock), or, as root, stacks of blocked threads (wall clock).
    pub fn kernel_stacks(&self) -> bool {
        match self.shared.config.mode {
            Mode::Perf { kernel, .. } => kernel,
            Mode::Wall { proc_stacks, .. } => proc_stacks,
        }
    }

    /// The threshold.
    pub fn threshold(&self) -> Duration {
        self.shared.config.threshold
    }

    /// Every warning so far, each once.
    pub fn warnings(&self) -> Vec<String> {
        self.shared.warnings()
    }

    /// Counts so far.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        Stats {
            stalls: c.stalls.load(Ordering::Relaxed),
            reports: c.reports.load(Ordering::Relaxed),
            suppressed: c.suppressed.load(Ordering::Relaxed),
            lost_samples: c.lost.load(Ordering::Relaxed),
            threads: crate::state::lock(&self.shared.registered).len(),
        }
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Release);
        sys::wake(std::os::fd::AsFd::as_fd(&self.shared.wake));
        // Neither thread panics on its own; a panicking report callback
        // only ends the reporter, which is all joining needs to know.
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        if let Some(r) = self.reporter.take() {
            let _ = r.join();
        }
    }
}
