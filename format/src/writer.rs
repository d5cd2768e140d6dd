//! Streaming writer: interns strings, modules, frames and stacks, buffers
//! records of the current chunk and writes each chunk compressed, with its
//! length and checksum, so a file cut off anywhere keeps every earlier chunk.

use std::collections::hash_map::Entry;
use std::io::Write;

use rustc_hash::FxHashMap;

use crate::chunk::write_chunk;
use crate::codec::{put_bytes, put_i64, put_u64, zigzag};
use crate::error::FormatError;
use crate::layout::{tag, MAGIC, MAX_CHUNK_BYTES, VERSION_MAJOR, VERSION_MINOR};
use crate::types::{
    Frame, FrameId, Identity, KernelSymbol, Mapping, Metadata, Module, ModuleId, Sample, StackId,
    StringId, Totals,
};

/// Chunks are cut once this much is buffered, well below [`MAX_CHUNK_BYTES`].
const SOFT_CHUNK_BYTES: usize = 1 << 20;

/// Writes a `.frec` stream. Definitions (strings, modules, frames, stack
/// nodes, kernel symbols) first used in a chunk are written at the head of
/// that chunk, each kind as one column-wise block, so every record of the
/// chunk finds them already defined.
pub struct Writer<W: Write> {
    out: W,
    level: i32,
    /// Events and samples of the current chunk, in stream order.
    buf: Vec<u8>,
    new_strings: Vec<u8>,
    new_string_lens: Vec<u64>,
    new_modules: Vec<u8>,
    new_frames: Vec<Frame>,
    new_ksyms: Vec<(u64, u64, StringId, StringId)>,
    /// (distance back to the parent, frame) of nodes new in this chunk.
    new_nodes: Vec<(u32, FrameId)>,
    strings: FxHashMap<String, StringId>,
    modules: FxHashMap<Module, ModuleId>,
    frames: FxHashMap<Frame, FrameId>,
    /// The same, by id (for readers of the tables while recording).
    module_list: Vec<Module>,
    frame_list: Vec<Frame>,
    nodes: FxHashMap<(StackId, FrameId), StackId>,
    /// The last stack interned, root first: each frame and its node.
    last_path: Vec<(FrameId, StackId)>,
    next_node: StackId,
    /// Frames some node references: ids below this.
    referenced_frames: FrameId,
    /// Sample period in µs (0: none, times are plain deltas).
    period_us: u64,
    pending: Vec<Sample>,
    samples: u64,
    weight: u64,
    bytes_written: u64,
    chunks: u64,
}

/// The zstd level of a recording's chunks. Measured on the chunks of a
/// `cargo build` recording (`format/examples/levels.rs`, bench row
/// `95-zstd.sh`): level 3 compresses at 2.5 ns per payload byte, level 19 at
/// 530 — about 70 µs of the recorder's CPU per sample there, more than all its
/// other work — for 12% fewer bytes. Levels 4–9 cost 3–9× level 3 for 2–7%.
pub const DEFAULT_LEVEL: i32 = 3;

impl<W: Write> Writer<W> {
    /// Writes the file header and the metadata chunk; chunks are compressed
    /// at [`DEFAULT_LEVEL`].
    pub fn new(out: W, meta: &Metadata) -> Result<Self, FormatError> {
        Self::with_level(out, meta, DEFAULT_LEVEL)
    }

    /// Like [`Writer::new`] with another zstd level (1–22): a recording that
    /// only lives in memory, such as an imported perf.data, is better
    /// written fast than small.
    pub fn with_level(mut out: W, meta: &Metadata, level: i32) -> Result<Self, FormatError> {
        let mut header = Vec::with_capacity(16);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&VERSION_MAJOR.to_le_bytes());
        header.extend_from_slice(&VERSION_MINOR.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        out.write_all(&header)?;
        let mut w = Writer {
            out,
            level: level.clamp(1, 22),
            buf: Vec::with_capacity(SOFT_CHUNK_BYTES),
            new_strings: Vec::new(),
            new_string_lens: Vec::new(),
            new_modules: Vec::new(),
            new_frames: Vec::new(),
            new_ksyms: Vec::new(),
            new_nodes: Vec::new(),
            strings: FxHashMap::default(),
            modules: FxHashMap::default(),
            frames: FxHashMap::default(),
            module_list: Vec::new(),
            frame_list: Vec::new(),
            nodes: FxHashMap::default(),
            last_path: Vec::new(),
            next_node: 1,
            referenced_frames: 0,
            period_us: 1_000_000u64.checked_div(meta.frequency_hz).unwrap_or(0),
            pending: Vec::new(),
            samples: 0,
            weight: 0,
            bytes_written: header.len() as u64,
            chunks: 0,
        };
        let json = serde_json::to_vec(meta).map_err(|e| FormatError::Encode(e.to_string()))?;
        w.buf.push(tag::META);
        put_bytes(&mut w.buf, &json);
        w.flush()?;
        Ok(w)
    }

    /// Interns a string, writing it on first use.
    pub fn string(&mut self, s: &str) -> StringId {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as StringId;
        self.new_string_lens.push(s.len() as u64);
        self.new_strings.extend_from_slice(s.as_bytes());
        self.strings.insert(s.to_owned(), id);
        id
    }

    /// Interns a module, writing it on first use.
    pub fn module(&mut self, m: &Module) -> ModuleId {
        if let Some(&id) = self.modules.get(m) {
            return id;
        }
        let path = self.string(&m.path);
        let id = self.modules.len() as ModuleId;
        // Modules are rare: one tagged row each.
        self.new_modules.push(tag::MODULES);
        self.new_modules.push(m.kind.code());
        put_u64(&mut self.new_modules, u64::from(path));
        put_bytes(&mut self.new_modules, &m.build_id);
        self.modules.insert(m.clone(), id);
        self.module_list.push(m.clone());
        id
    }

    /// Interns a frame, writing it on first use. `module` must come from [`Writer::module`].
    pub fn frame(&mut self, f: Frame) -> FrameId {
        if let Some(&id) = self.frames.get(&f) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.new_frames.push(f);
        self.frames.insert(f, id);
        self.frame_list.push(f);
        id
    }

    /// Interns a stack given root first, returning its leaf node.
    pub fn stack(&mut self, root_first: &[FrameId]) -> StackId {
        // Consecutive samples (a thread's, drained together) mostly share
        // their outer frames: those are found on the last stack's path,
        // without a lookup each (they were a sixth of the recorder's CPU
        // on a cargo build's 100-frame stacks).
        let same = root_first
            .iter()
            .zip(&self.last_path)
            .take_while(|(f, (g, _))| *f == g)
            .count();
        let mut node: StackId = match same {
            0 => 0,
            n => self.last_path[n - 1].1,
        };
        self.last_path.truncate(same);
        for &frame in &root_first[same..] {
            node = self.child(node, frame);
            self.last_path.push((frame, node));
        }
        node
    }

    /// The stack `parent` with `frame` called from its leaf.
    fn child(&mut self, parent: StackId, frame: FrameId) -> StackId {
        // One probe finds the node or its place: most of a deep stack's
        // nodes past where it leaves the last stack are new.
        match self.nodes.entry((parent, frame)) {
            Entry::Occupied(e) => *e.get(),
            Entry::Vacant(e) => {
                let id = self.next_node;
                self.next_node += 1;
                // Children usually follow their parent: the distance back is small.
                self.new_nodes.push((id - parent, frame));
                e.insert(id);
                id
            }
        }
    }

    /// Records the kernel symbol that some kernel frame falls into.
    pub fn kernel_symbol(&mut self, sym: &KernelSymbol) {
        let name = self.string(&sym.name);
        let module = self.string(&sym.module);
        self.new_ksyms.push((sym.start, sym.size, name, module));
    }

    /// A thread got a name.
    pub fn comm(&mut self, time_ns: u64, pid: u32, tid: u32, name: &str, exec: bool) {
        let name = self.string(name);
        self.event_header(tag::COMM, time_ns);
        put_u64(&mut self.buf, u64::from(pid));
        put_u64(&mut self.buf, u64::from(tid));
        put_u64(&mut self.buf, u64::from(name));
        self.buf.push(u8::from(exec));
    }

    /// A process or thread was created.
    pub fn fork(&mut self, time_ns: u64, pid: u32, ppid: u32, tid: u32, ptid: u32) {
        self.event_header(tag::FORK, time_ns);
        for v in [pid, ppid, tid, ptid] {
            put_u64(&mut self.buf, u64::from(v));
        }
    }

    /// A thread exited.
    pub fn exit(&mut self, time_ns: u64, pid: u32, tid: u32) {
        self.event_header(tag::EXIT, time_ns);
        put_u64(&mut self.buf, u64::from(pid));
        put_u64(&mut self.buf, u64::from(tid));
    }

    /// Names of frames the recorder named itself, written as they are
    /// learned (an optional record before the trailer: a recording cut
    /// before its names section keeps them; readers of 2.0 skip it).
    pub fn own_names(&mut self, names: &[(FrameId, Vec<String>)]) {
        if names.is_empty() {
            return;
        }
        self.emit_samples();
        let mut refs: Vec<&(FrameId, Vec<String>)> = names.iter().collect();
        // The encoding stores ids as deltas: in order, each once.
        refs.sort_unstable_by_key(|(id, _)| *id);
        refs.dedup_by_key(|(id, _)| *id);
        let body = crate::names::encode(&refs);
        self.buf.push(tag::OWN_NAMES);
        put_bytes(&mut self.buf, &body);
    }

    /// Frames with ids below `frames` have been looked up: each is named by
    /// the names records written so far or has no name the recorder could
    /// give (an optional record: readers that do not know it skip it).
    pub fn names_through(&mut self, frames: u32) {
        self.emit_samples();
        let mut body = Vec::new();
        put_u64(&mut body, u64::from(frames));
        self.buf.push(tag::NAMES_THROUGH);
        put_bytes(&mut self.buf, &body);
    }

    /// A process's identity (an optional record: readers of 2.0 skip it).
    pub fn identity(&mut self, id: &Identity) {
        // Keep stream order with the samples before it.
        self.emit_samples();
        let json = serde_json::to_vec(id).unwrap_or_default();
        self.buf.push(tag::IDENTITY);
        put_bytes(&mut self.buf, &json);
    }

    /// A mapping appeared.
    pub fn mapping(&mut self, m: &Mapping) {
        self.event_header(tag::MAPPING, m.time_ns);
        put_u64(&mut self.buf, u64::from(m.pid));
        put_u64(&mut self.buf, m.start);
        put_u64(&mut self.buf, m.end.saturating_sub(m.start));
        put_u64(&mut self.buf, m.pgoff);
        put_u64(&mut self.buf, u64::from(m.module));
    }

    /// The kernel dropped `count` samples.
    pub fn lost(&mut self, time_ns: u64, count: u64) {
        self.event_header(tag::LOST, time_ns);
        put_u64(&mut self.buf, count);
    }

    /// Adds a sample; `stack` must come from [`Writer::stack`].
    pub fn sample(&mut self, s: Sample) {
        self.samples += 1;
        self.weight = self.weight.saturating_add(s.weight);
        self.pending.push(s);
    }

    /// Samples written so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Bytes that reached the output so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Whether the current chunk is large enough to be cut now.
    pub fn wants_flush(&self) -> bool {
        let defs = self.new_strings.len()
            + self.new_modules.len()
            + (self.new_frames.len() + self.new_nodes.len() + self.new_ksyms.len()) * 8;
        self.buf.len() + defs + self.pending.len() * 8 >= SOFT_CHUNK_BYTES
    }

    /// Compresses and writes the buffered records as one chunk.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.emit_samples();
        let mut chunk = self.take_definitions();
        if chunk.is_empty() && self.buf.is_empty() {
            return Ok(());
        }
        chunk.extend_from_slice(&self.buf);
        debug_assert!(chunk.len() <= MAX_CHUNK_BYTES);
        // A slower level asked for (`with_level`) is capped on large chunks,
        // so the recorder never falls behind its ring buffers.
        let level = if chunk.len() <= 256 << 10 {
            self.level
        } else {
            self.level.min(9)
        };
        self.bytes_written += write_chunk(&mut self.out, &chunk, level)?;
        self.out.flush()?;
        self.chunks += 1;
        self.buf.clear();
        Ok(())
    }

    /// The modules interned since the first `from` (their ids follow on from it).
    pub fn modules_from(&self, from: usize) -> &[Module] {
        self.module_list.get(from..).unwrap_or_default()
    }

    /// The frames interned since the first `from` (their ids follow on from it).
    pub fn frames_from(&self, from: usize) -> &[Frame] {
        self.frame_list.get(from..).unwrap_or_default()
    }

    /// Writes the trailer and returns the output. `totals.samples` and
    /// `totals.weight` are filled in from what was written.
    pub fn finish(mut self, mut totals: Totals) -> Result<W, FormatError> {
        self.emit_samples();
        totals.samples = self.samples;
        totals.weight = self.weight;
        let json = serde_json::to_vec(&totals).map_err(|e| FormatError::Encode(e.to_string()))?;
        self.buf.push(tag::TOTALS);
        put_bytes(&mut self.buf, &json);
        self.flush()?;
        Ok(self.out)
    }

    /// The definition blocks of this chunk, in dependency order: strings,
    /// modules, frames, kernel symbols, stack nodes.
    fn take_definitions(&mut self) -> Vec<u8> {
        let mut b = Vec::new();
        if !self.new_string_lens.is_empty() {
            b.push(tag::STRINGS);
            put_u64(&mut b, self.new_string_lens.len() as u64);
            for &len in &self.new_string_lens {
                put_u64(&mut b, len);
            }
            b.extend_from_slice(&self.new_strings);
            self.new_string_lens.clear();
            self.new_strings.clear();
        }
        if !self.new_modules.is_empty() {
            b.extend_from_slice(&self.new_modules);
            self.new_modules.clear();
        }
        if !self.new_frames.is_empty() {
            b.push(tag::FRAMES);
            put_u64(&mut b, self.new_frames.len() as u64);
            for f in &self.new_frames {
                put_u64(&mut b, u64::from(f.module));
            }
            // Code addresses of one module cluster: store each as the
            // distance from the previous address in the same module.
            let mut last: FxHashMap<ModuleId, u64> = FxHashMap::default();
            for f in &self.new_frames {
                let prev = last.insert(f.module, f.address).unwrap_or(0);
                put_i64(&mut b, f.address.wrapping_sub(prev) as i64);
            }
            self.new_frames.clear();
        }
        if !self.new_ksyms.is_empty() {
            b.push(tag::KSYMS);
            put_u64(&mut b, self.new_ksyms.len() as u64);
            let mut prev = 0u64;
            for &(start, size, name, module) in &self.new_ksyms {
                put_i64(&mut b, start.wrapping_sub(prev) as i64);
                prev = start;
                put_u64(&mut b, size);
                put_u64(&mut b, u64::from(name));
                put_u64(&mut b, u64::from(module));
            }
            self.new_ksyms.clear();
        }
        if !self.new_nodes.is_empty() {
            b.push(tag::NODES_V2);
            put_u64(&mut b, self.new_nodes.len() as u64);
            for &(back, _) in &self.new_nodes {
                put_u64(&mut b, u64::from(back));
            }
            // A frame's first use is by a new node, in frame id order: say
            // "the next new frame" as 0, anything else as a delta from the
            // previous node's frame, plus one.
            let mut prev = 0i64;
            for &(_, frame) in &self.new_nodes {
                let f = i64::from(frame);
                if self.referenced_frames == frame {
                    put_u64(&mut b, 0);
                    self.referenced_frames += 1;
                } else {
                    put_u64(&mut b, zigzag(f - prev) + 1);
                }
                prev = f;
            }
            self.new_nodes.clear();
        }
        b
    }

    fn event_header(&mut self, t: u8, time_ns: u64) {
        // Keep stream order: samples taken before this event are written before it.
        self.emit_samples();
        self.buf.push(t);
        put_u64(&mut self.buf, time_ns);
    }

    /// Writes pending samples as one column-wise block: each column holds
    /// similar values, which compresses far better than interleaved rows.
    fn emit_samples(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let b = &mut self.buf;
        b.push(tag::SAMPLES_V2);
        put_u64(b, self.pending.len() as u64);
        let mut prev_us = self.pending[0].time_ns / 1000;
        put_u64(b, prev_us);
        put_u64(b, self.period_us);
        // Threads first: the times are per thread.
        for s in &self.pending {
            put_u64(b, u64::from(s.pid));
        }
        for s in &self.pending {
            put_i64(b, i64::from(s.tid) - i64::from(s.pid));
        }
        // A thread sampled again after one period: its time is the distance
        // from its own last sample, less the period — jitter, mostly.
        // Otherwise the distance from the previous sample of the block.
        let mut last: FxHashMap<u32, u64> = FxHashMap::default();
        for s in &self.pending {
            let us = s.time_ns / 1000;
            let v = match last.insert(s.tid, us) {
                Some(t) if self.period_us > 0 => {
                    zigzag(us as i64 - t as i64 - self.period_us as i64) << 1
                }
                _ => (zigzag(us as i64 - prev_us as i64) << 1) | 1,
            };
            put_u64(b, v);
            prev_us = us;
        }
        // Stacks relative to the highest stack id so far in the block: a
        // sample that made new nodes names one just above it (small and
        // repetitive); older stacks come out negative.
        let mut high = 0i64;
        for s in &self.pending {
            let id = i64::from(s.stack);
            put_i64(b, id - high);
            high = high.max(id);
        }
        for s in &self.pending {
            put_u64(b, s.weight);
        }
        self.pending.clear();
    }
}
