//! Windows cut from a continuous recording's stream: each a complete
//! `.frec` recording of its own — the samples whose time falls in it, the
//! frames, modules and stack nodes they use, the names of those frames,
//! the names and identities of their threads and processes — that `fold`,
//! `info` and every export read as they read any recording.
//!
//! A window is cut when the stream has gone [`SETTLE_NS`] past its end
//! (samples of several CPUs arrive a little out of order), and handed on
//! once the recorder's lookup of names has covered every frame known when
//! it was cut, or [`NAMES_WAIT`] after, whichever comes first: its frames
//! then carry every name the recorder found.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use flamerec_format::{
    write_names, EmbeddedNames, Event, FormatError, FrameId, Identity, Metadata, ModuleId,
    ModuleKind, Sample, StackId, Tables, Totals, Window, Writer,
};

/// How far past a window's end the stream goes before the window is cut.
pub const SETTLE_NS: u64 = 500_000_000;

/// The longest a cut window waits for the names of its frames.
pub const NAMES_WAIT: Duration = Duration::from_secs(5);

/// A window ready to deliver.
#[derive(Debug, Clone)]
pub struct WindowFile {
    /// Its place in the run, its start and length.
    pub window: Window,
    /// The `.frec` recording.
    pub bytes: Vec<u8>,
    /// Samples in it.
    pub samples: u64,
    /// Samples the kernel dropped in it.
    pub lost: u64,
    /// Processes with samples in it.
    pub processes: Vec<ProcessInfo>,
    /// Frames that went without the names the recorder was still looking
    /// up when the window's wait ran out.
    pub names_late: bool,
}

/// Who a process with samples in a window was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Its pid (the host's).
    pub pid: u32,
    /// Its name (its main thread's, else one of its threads').
    pub name: String,
    /// Its executable's path as it saw it; empty when unknown.
    pub executable: String,
    /// Its container's id; empty on the host or when unknown.
    pub container_id: String,
    /// Its container as `runtime:id12`, `host`, or empty when unknown.
    pub container: String,
}

/// A thread as the stream last named it.
struct Thread {
    pid: u32,
    name: String,
    /// Stream time of its exit, once it exited.
    exited_ns: Option<u64>,
}

/// A window still being filled, or cut and waiting for names.
struct Building {
    index: u64,
    start_ns: u64,
    end_ns: u64,
    samples: Vec<Sample>,
    lost: u64,
    /// When it was cut, and the frame count its names must reach.
    cut: Option<(Instant, u64)>,
}

/// Cuts a stream's events into windows.
pub struct Cutter {
    window_ns: u64,
    run_unix_ns: u64,
    /// Index of the first window of this stream (windows count on across
    /// the recordings of one run).
    first_index: u64,
    /// Where this stream's windows start, in stream time: windows line up
    /// with the run's, so a stream that starts late begins mid-window.
    offset_ns: u64,
    meta: Metadata,
    building: VecDeque<Building>,
    threads: HashMap<u32, Thread>,
    identities: HashMap<u32, Identity>,
    /// The latest time the stream has shown.
    now_ns: u64,
}

impl Cutter {
    /// A cutter for the stream `meta` begins, in windows of `window` laid
    /// from `run_unix_ns` on (the agent's start).
    pub fn new(meta: &Metadata, window: Duration, run_unix_ns: u64) -> Cutter {
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX).max(1);
        let since_run = meta.start_unix_ns.saturating_sub(run_unix_ns);
        Cutter {
            window_ns,
            run_unix_ns,
            first_index: since_run / window_ns,
            offset_ns: since_run % window_ns,
            meta: meta.clone(),
            building: VecDeque::new(),
            threads: HashMap::new(),
            identities: HashMap::new(),
            now_ns: 0,
        }
    }

    /// Takes a chunk's events in.
    pub fn feed(&mut self, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Samples(samples) => {
                    for s in samples {
                        self.now_ns = self.now_ns.max(s.time_ns);
                        self.window_at(s.time_ns).samples.push(s);
                    }
                }
                Event::Comm {
                    time_ns,
                    pid,
                    tid,
                    name,
                    ..
                } => {
                    self.now_ns = self.now_ns.max(time_ns);
                    self.named(pid, tid, name);
                }
                Event::Fork {
                    time_ns,
                    pid,
                    ptid,
                    tid,
                    ..
                } => {
                    self.now_ns = self.now_ns.max(time_ns);
                    // A new thread or process is named as its parent until it says otherwise.
                    let name = self.threads.get(&ptid).map(|t| t.name.clone());
                    if let Some(name) = name {
                        self.named(pid, tid, name);
                    }
                }
                Event::Exit { time_ns, tid, .. } => {
                    self.now_ns = self.now_ns.max(time_ns);
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.exited_ns = Some(time_ns);
                    }
                }
                Event::Identity(id) => {
                    self.identities.insert(id.pid, id);
                }
                Event::Lost { time_ns, count } => {
                    self.now_ns = self.now_ns.max(time_ns);
                    let w = self.window_at(time_ns);
                    w.lost = w.lost.saturating_add(count);
                }
                _ => {}
            }
        }
    }

    /// Thread `tid` of `pid` is called `name` from now on.
    fn named(&mut self, pid: u32, tid: u32, name: String) {
        let t = Thread {
            pid,
            name,
            exited_ns: None,
        };
        self.threads.insert(tid, t);
    }

    /// The window a time falls in; a time before the oldest window still
    /// building (a late sample) counts in that one.
    fn window_at(&mut self, time_ns: u64) -> &mut Building {
        let k = (time_ns + self.offset_ns) / self.window_ns;
        let first = self
            .building
            .front()
            .map_or(k, |b| b.index - self.first_index);
        let k = k.max(first);
        while self
            .building
            .back()
            .is_none_or(|b| b.index - self.first_index < k)
        {
            let next = self
                .building
                .back()
                .map_or(k, |b| b.index - self.first_index + 1);
            let start = (next * self.window_ns).saturating_sub(self.offset_ns);
            self.building.push_back(Building {
                index: self.first_index + next,
                start_ns: start,
                end_ns: (next + 1) * self.window_ns - self.offset_ns,
                samples: Vec::new(),
                lost: 0,
                cut: None,
            });
        }
        let at = (k - first) as usize;
        &mut self.building[at]
    }

    /// Windows that are ready: cut (the stream went past their end, or it
    /// `ended`) and named as far as `names` says or waited long enough.
    pub fn ready(
        &mut self,
        tables: &Tables,
        names: &EmbeddedNames,
        ended: bool,
    ) -> Result<Vec<WindowFile>, FormatError> {
        let frames = tables.frames.len() as u64;
        for b in &mut self.building {
            if b.cut.is_none() && (ended || self.now_ns >= b.end_ns.saturating_add(SETTLE_NS)) {
                b.cut = Some((Instant::now(), frames));
                if ended {
                    // The stream stopped inside it: it lasted this long.
                    b.end_ns = b.end_ns.min(self.now_ns.max(b.start_ns + 1));
                }
            }
        }
        let mut out = Vec::new();
        while let Some(b) = self.building.front() {
            let Some((cut_at, need)) = b.cut else { break };
            // The names section, read at the end, holds the last batch's names.
            let named = names.through >= need || names.end.is_some();
            if !(named || ended || cut_at.elapsed() >= NAMES_WAIT) {
                break;
            }
            let Some(b) = self.building.pop_front() else {
                break;
            };
            out.push(self.write(&b, tables, names, !named)?);
        }
        self.forget_exited();
        Ok(out)
    }

    /// Threads that exited before every window still building are
    /// forgotten (a churn of short processes must not grow the map).
    fn forget_exited(&mut self) {
        let oldest = self.building.front().map_or(self.now_ns, |b| b.start_ns);
        self.threads
            .retain(|_, t| t.exited_ns.is_none_or(|at| at >= oldest));
        let live: std::collections::HashSet<u32> = self.threads.values().map(|t| t.pid).collect();
        self.identities.retain(|pid, _| live.contains(pid));
    }

    fn processes(&self, pids: &BTreeSet<u32>) -> Vec<ProcessInfo> {
        pids.iter()
            .map(|&pid| {
                let name = self
                    .threads
                    .get(&pid)
                    .or_else(|| self.threads.values().find(|t| t.pid == pid))
                    .map(|t| t.name.clone())
                    .unwrap_or_default();
                let id = self.identities.get(&pid);
                ProcessInfo {
                    pid,
                    name,
                    executable: id.map(|i| i.executable.clone()).unwrap_or_default(),
                    container_id: id.map(|i| i.container.clone()).unwrap_or_default(),
                    container: id.map(Identity::container_label).unwrap_or_default(),
                }
            })
            .collect()
    }

    fn write(
        &self,
        b: &Building,
        tables: &Tables,
        names: &EmbeddedNames,
        names_late: bool,
    ) -> Result<WindowFile, FormatError> {
        let window = Window {
            index: b.index,
            start_unix_ns: self.meta.start_unix_ns + b.start_ns,
            duration_ns: b.end_ns - b.start_ns,
            run_unix_ns: self.run_unix_ns,
        };
        let mut meta = self.meta.clone();
        meta.start_unix_ns = window.start_unix_ns;
        meta.window = Some(window);
        let mut w = Writer::new(Vec::new(), &meta)?;
        let copy = Copy::run(&mut w, b, tables, self);
        let totals = Totals {
            samples: b.samples.len() as u64,
            weight: b
                .samples
                .iter()
                .map(|s| s.weight)
                .fold(0u64, u64::saturating_add),
            lost_samples: b.lost,
            duration_ns: window.duration_ns,
            processes: copy.pids.len() as u64,
            threads: copy.threads as u64,
            ..Totals::default()
        };
        let mut bytes = w.finish(totals)?;
        let mut named = Vec::new();
        let mut complete = true;
        for (&global, &local) in &copy.frames {
            match names.frames.get(&global) {
                Some(n) => named.push((local, n.iter().map(|s| s.to_string()).collect())),
                None => complete &= !copy.file_frames.contains(&local),
            }
        }
        write_names(&mut bytes, &named, complete)?;
        Ok(WindowFile {
            window,
            bytes,
            samples: b.samples.len() as u64,
            lost: b.lost,
            processes: self.processes(&copy.pids),
            names_late,
        })
    }
}

/// What one window's copy took from the stream's tables.
struct Copy {
    pids: BTreeSet<u32>,
    threads: usize,
    /// Stream frame id → the window's.
    frames: HashMap<FrameId, FrameId>,
    /// The window's frames of binaries (named by the recorder's lookup).
    file_frames: std::collections::HashSet<FrameId>,
}

impl Copy {
    /// Writes the window's threads, processes and samples into `w`.
    fn run(w: &mut Writer<Vec<u8>>, b: &Building, tables: &Tables, c: &Cutter) -> Copy {
        for k in &tables.kernel_symbols {
            w.kernel_symbol(k);
        }
        let threads: BTreeSet<(u32, u32)> = b.samples.iter().map(|s| (s.pid, s.tid)).collect();
        let pids: BTreeSet<u32> = threads.iter().map(|&(p, _)| p).collect();
        for pid in &pids {
            if let Some(id) = c.identities.get(pid) {
                w.identity(&Identity {
                    time_ns: 0,
                    ..id.clone()
                });
            }
        }
        for &(pid, tid) in &threads {
            if let Some(t) = c.threads.get(&tid).filter(|t| t.pid == pid) {
                w.comm(0, pid, tid, &t.name, false);
            }
        }
        let mut copy = Copy {
            pids,
            threads: threads.len(),
            frames: HashMap::new(),
            file_frames: Default::default(),
        };
        let mut modules: HashMap<ModuleId, ModuleId> = HashMap::new();
        let mut stacks: HashMap<StackId, StackId> = HashMap::new();
        let mut path = Vec::new();
        for s in &b.samples {
            let stack = match stacks.get(&s.stack) {
                Some(&id) => id,
                None => {
                    path.clear();
                    let mut node = s.stack;
                    while let Some((parent, frame)) = tables.node(node) {
                        path.push(copy.frame(w, tables, &mut modules, frame));
                        node = parent;
                    }
                    path.reverse();
                    let id = w.stack(&path);
                    stacks.insert(s.stack, id);
                    id
                }
            };
            w.sample(Sample {
                time_ns: s.time_ns.saturating_sub(b.start_ns),
                stack,
                ..*s
            });
        }
        if b.lost > 0 {
            w.lost(0, b.lost);
        }
        copy
    }

    /// The window's id of stream frame `global`.
    fn frame(
        &mut self,
        w: &mut Writer<Vec<u8>>,
        tables: &Tables,
        modules: &mut HashMap<ModuleId, ModuleId>,
        global: FrameId,
    ) -> FrameId {
        if let Some(&id) = self.frames.get(&global) {
            return id;
        }
        let Some(f) = tables.frames.get(global as usize) else {
            return 0;
        };
        let module = tables.modules.get(f.module as usize);
        let local_module = *modules
            .entry(f.module)
            .or_insert_with(|| module.map_or(0, |m| w.module(m)));
        let id = w.frame(flamerec_format::Frame {
            module: local_module,
            address: f.address,
        });
        if module.is_some_and(|m| m.kind == ModuleKind::File) {
            self.file_frames.insert(id);
        }
        self.frames.insert(global, id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flamerec_format::{Frame, Module, Reader};

    const S: u64 = 1_000_000_000;

    /// A stream of two threads' samples at `times` (ns), one stack each,
    /// and the names of its frames as the recorder writes them.
    fn stream(times: &[(u32, u64)], names_through: bool) -> Vec<u8> {
        let meta = Metadata {
            start_unix_ns: 100 * S,
            event: "cpu-clock".into(),
            frequency_hz: 19,
            weight_unit: "samples".into(),
            ..Metadata::default()
        };
        let mut w = Writer::new(Vec::new(), &meta).unwrap();
        let m = w.module(&Module::mapped("/bin/prog", &[1, 2]));
        let main = w.frame(Frame {
            module: m,
            address: 0x10,
        });
        let work = w.frame(Frame {
            module: m,
            address: 0x20,
        });
        let stack = w.stack(&[main, work]);
        w.comm(0, 7, 7, "prog", true);
        w.comm(0, 7, 8, "worker", false);
        for &(tid, t) in times {
            w.sample(Sample {
                time_ns: t,
                pid: 7,
                tid,
                stack,
                weight: 1,
            });
        }
        w.own_names(&[(main, vec!["main".into()]), (work, vec!["work".into()])]);
        if names_through {
            w.names_through(2);
        }
        w.finish(Totals::default()).unwrap()
    }

    /// Feeds the whole stream, then asks for windows (`ended` as given).
    fn cut(
        bytes: &[u8],
        window: Duration,
        run_unix_ns: u64,
        ended: bool,
    ) -> (Cutter, Reader<&[u8]>, Vec<WindowFile>) {
        let mut r = Reader::new(bytes).unwrap();
        let mut c = Cutter::new(r.metadata(), window, run_unix_ns);
        while let Some(events) = r.next_events().unwrap() {
            c.feed(events);
        }
        let ready = c.ready(r.tables(), r.names(), ended).unwrap();
        (c, r, ready)
    }

    #[test]
    fn samples_fall_in_the_windows_of_their_time() {
        let times = [
            (7, S / 5),
            (8, 4 * S + 9 * S / 10),
            (7, 5 * S + S / 10),
            (8, 12 * S),
        ];
        let bytes = stream(&times, true);
        // The run started 2 s before the stream: windows lie on the run's clock.
        let (_, _, ready) = cut(&bytes, Duration::from_secs(5), 98 * S, false);
        let counts: Vec<(u64, u64, u64)> = ready
            .iter()
            .map(|w| (w.window.index, w.samples, w.window.start_unix_ns))
            .collect();
        // Windows [98, 103) and [103, 108) s: the samples at 100.2, then 104.9 and 105.1.
        assert_eq!(counts, [(0, 1, 100 * S), (1, 2, 103 * S)], "{counts:?}");
        assert_eq!(
            ready[0].window.duration_ns,
            3 * S,
            "the stream began inside window 0"
        );
        // The window of the sample at 112 s is cut once the stream has ended.
        let (_, _, all) = cut(&bytes, Duration::from_secs(5), 98 * S, true);
        assert_eq!(all.len(), 3);
        assert_eq!((all[2].window.index, all[2].samples), (2, 1));
    }

    #[test]
    fn a_window_is_a_recording_with_its_names_and_threads() {
        let bytes = stream(&[(7, S), (8, 2 * S), (8, 7 * S)], true);
        let (_, _, ready) = cut(&bytes, Duration::from_secs(5), 100 * S, false);
        assert_eq!(ready.len(), 1);
        let w = &ready[0];
        assert!(!w.names_late);
        assert_eq!(w.processes[0].pid, 7);
        assert_eq!(w.processes[0].name, "prog");
        let mut r = Reader::new(w.bytes.as_slice()).unwrap();
        assert_eq!(r.metadata().window, Some(w.window));
        let mut samples = 0;
        let mut comms = Vec::new();
        while let Some(events) = r.next_events().unwrap() {
            for e in events {
                match e {
                    Event::Samples(s) => samples += s.len(),
                    Event::Comm { tid, name, .. } => comms.push((tid, name)),
                    _ => {}
                }
            }
        }
        assert_eq!(samples, 2);
        assert_eq!(comms, [(7, "prog".to_string()), (8, "worker".to_string())]);
        let mut named: Vec<String> = r
            .names()
            .frames
            .values()
            .flatten()
            .map(|s| s.to_string())
            .collect();
        named.sort();
        assert_eq!(named, ["main", "work"]);
        assert_eq!(r.names().state(), flamerec_format::NamesState::Embedded);
    }

    #[test]
    fn a_cut_window_waits_for_its_names() {
        let bytes = stream(&[(7, S), (7, 7 * S)], false);
        let (mut c, r, ready) = cut(&bytes, Duration::from_secs(5), 100 * S, false);
        assert!(ready.is_empty(), "handed on before its names came");
        let mut names = r.names().clone();
        names.through = 2;
        let ready = c.ready(r.tables(), &names, false).unwrap();
        assert_eq!(ready.len(), 1);
        assert!(!ready[0].names_late);
    }
}
