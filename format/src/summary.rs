//! What a recording holds, in one streaming pass: the figures behind
//! `flamerec info`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;

use crate::{
    Damage, Event, FormatError, Identity, JitFrames, Metadata, NamesState, PythonRead, ReadGap,
    Reader,
};

/// The samples of one container (or of the host) in a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSamples {
    /// As fold shows it: `podman:0123456789ab`, or `host`.
    pub label: String,
    /// The runtime (empty for the host).
    pub runtime: String,
    /// The whole id (empty for the host).
    pub id: String,
    /// Its processes that were sampled.
    pub processes: u64,
    /// Its samples.
    pub samples: u64,
}

/// Figures of one recording.
#[derive(Debug, Clone)]
pub struct Summary {
    /// Metadata.
    pub metadata: Metadata,
    /// Whether the trailer was read and nothing is damaged.
    pub complete: bool,
    /// Why not, when not.
    pub damage: Option<Damage>,
    /// Samples read.
    pub samples: u64,
    /// Sum of sample weights.
    pub weight: u64,
    /// Samples lost while recording.
    pub lost_samples: u64,
    /// Lost per CPU ring, as (CPU, count); empty in files before 2.0 or
    /// without a trailer.
    pub lost_per_cpu: Vec<(u32, u64)>,
    /// Lost while the recorder waited for a CPU.
    pub lost_starved: u64,
    /// The longest interval between two reads of the rings, when recorded.
    pub longest_read_gap: Option<ReadGap>,
    /// The longest interval a lost record can describe, when any was lost.
    pub read_gap_before_loss: Option<ReadGap>,
    /// Length of the recording in seconds.
    pub duration_s: f64,
    /// Distinct processes.
    pub processes: u64,
    /// Distinct threads.
    pub threads: u64,
    /// Stacks known to be cut short.
    pub truncated_stacks: u64,
    /// Stacks deeper than their copy, completed from the live thread.
    pub completed_stacks: u64,
    /// `-g fp,defer`: samples joined with their deferred user part.
    pub deferred_stitched: u64,
    /// `-g fp,defer`: samples whose deferred user part never came.
    pub deferred_unmatched_samples: u64,
    /// `-g fp,defer`: deferred user parts whose samples never came.
    pub deferred_orphan_records: u64,
    /// Bytes of complete chunks.
    pub bytes: u64,
    /// Whether user-space names are embedded.
    pub names: NamesState,
    /// Frames whose names are embedded.
    pub named_frames: u64,
    /// Why the names section could not be read whole, if so.
    pub names_damage: Option<String>,
    /// The CPython versions whose Python frames were read.
    pub python: Vec<PythonRead>,
    /// Frames of JIT code, by where their names came from.
    pub jit_frames: JitFrames,
    /// Samples per container, most first (format 2.1; empty in recordings
    /// without process identities).
    pub containers: Vec<ContainerSamples>,
}

impl Summary {
    /// Reads a whole recording, keeping only counts.
    pub fn read<R: Read>(input: R) -> Result<Self, FormatError> {
        let mut reader = Reader::new(input)?;
        let (mut samples, mut weight, mut lost, mut last_ns) = (0u64, 0u64, 0u64, 0u64);
        let mut pids = HashSet::new();
        let mut tids = HashSet::new();
        let mut by_container = Containers::default();
        while let Some(events) = reader.next_events()? {
            for e in events {
                match e {
                    Event::Samples(s) => {
                        for s in s {
                            samples += 1;
                            weight = weight.saturating_add(s.weight);
                            last_ns = last_ns.max(s.time_ns);
                            pids.insert(s.pid);
                            tids.insert(s.tid);
                            by_container.sample(s.pid);
                        }
                    }
                    Event::Identity(id) => by_container.identity(id),
                    Event::Comm { pid, tid, .. } | Event::Fork { pid, tid, .. } => {
                        pids.insert(pid);
                        tids.insert(tid);
                    }
                    Event::Lost { count, .. } => lost = lost.saturating_add(count),
                    _ => {}
                }
            }
        }
        let damage = reader.damage().cloned();
        let totals = reader.totals().cloned();
        let mut s = Summary {
            metadata: reader.metadata().clone(),
            complete: totals.is_some() && damage.is_none(),
            damage,
            samples,
            weight,
            lost_samples: lost,
            lost_per_cpu: Vec::new(),
            lost_starved: 0,
            longest_read_gap: None,
            read_gap_before_loss: None,
            duration_s: last_ns as f64 / 1e9,
            processes: pids.len() as u64,
            threads: tids.len() as u64,
            truncated_stacks: 0,
            completed_stacks: 0,
            deferred_stitched: 0,
            deferred_unmatched_samples: 0,
            deferred_orphan_records: 0,
            bytes: reader.offset(),
            names: reader.names().state(),
            named_frames: reader.names().frames.len() as u64,
            names_damage: reader.names().damage.clone(),
            python: Vec::new(),
            jit_frames: JitFrames::default(),
            containers: by_container.finish(),
        };
        if let Some(t) = totals {
            s.lost_samples = t.lost_samples;
            s.lost_per_cpu = t.lost_per_cpu;
            s.lost_starved = t.lost_starved;
            s.longest_read_gap = t.longest_read_gap;
            s.read_gap_before_loss = t.read_gap_before_loss;
            s.duration_s = t.duration_ns as f64 / 1e9;
            s.processes = t.processes.max(s.processes);
            s.threads = t.threads.max(s.threads);
            s.truncated_stacks = t.truncated_stacks;
            s.completed_stacks = t.completed_stacks;
            s.deferred_stitched = t.deferred_stitched;
            s.deferred_unmatched_samples = t.deferred_unmatched_samples;
            s.deferred_orphan_records = t.deferred_orphan_records;
            s.python = t.python;
            s.jit_frames = t.jit_frames;
        }
        Ok(s)
    }

    /// How user stacks were obtained, from the call-graph mode:
    /// `deferred`, `copied+dwarf` or `frame-pointers` (`unknown` for a mode
    /// this version does not know).
    pub fn user_stacks(&self) -> &'static str {
        match self.metadata.call_graph.as_str() {
            "fp,defer" => "deferred",
            "dwarf" => "copied+dwarf",
            "fp" => "frame-pointers",
            _ => "unknown",
        }
    }

    /// Deferred user parts left unmatched: samples without theirs plus
    /// user parts without their samples.
    pub fn unmatched_cookies(&self) -> u64 {
        self.deferred_unmatched_samples + self.deferred_orphan_records
    }
}
/// Samples per container as identities come.
#[derive(Default)]
struct Containers {
    /// Each process's container label, as last identified.
    of_pid: HashMap<u32, String>,
    /// Per label.
    totals: BTreeMap<String, Tally>,
    any: bool,
}

/// One container's figures so far.
#[derive(Default)]
struct Tally {
    runtime: String,
    id: String,
    pids: HashSet<u32>,
    samples: u64,
}

impl Containers {
    fn identity(&mut self, id: Identity) {
        self.any = true;
        let label = id.container_label();
        self.totals.entry(label.clone()).or_insert_with(|| Tally {
            runtime: id.runtime,
            id: id.container,
            ..Tally::default()
        });
        self.of_pid.insert(id.pid, label);
    }

    fn sample(&mut self, pid: u32) {
        if !self.any {
            return;
        }
        // A process gone before it was identified is not guessed at.
        let label = self.of_pid.get(&pid).map_or("unknown", String::as_str);
        let t = self.totals.entry(label.to_string()).or_default();
        t.pids.insert(pid);
        t.samples += 1;
    }

    fn finish(self) -> Vec<ContainerSamples> {
        let mut all: Vec<ContainerSamples> = self
            .totals
            .into_iter()
            .filter(|(_, t)| t.samples > 0)
            .map(|(label, t)| ContainerSamples {
                label,
                runtime: t.runtime,
                id: t.id,
                processes: t.pids.len() as u64,
                samples: t.samples,
            })
            .collect();
        all.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.label.cmp(&b.label)));
        all
    }
}
