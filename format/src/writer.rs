//! Streaming writer: interns strings, modules, frames and stacks, buffers
//! records of the current chunk and writes each chunk compressed, with its
//! length and checksum, so a file cut off anywhere keeps every earlier chunk.

use std::collections::HashMap;
use std::io::Write;

use crate::codec::{put_bytes, put_i64, put_u64};
use crate::error::FormatError;
use crate::layout::{tag, CHUNK_MAGIC, MAGIC, MAX_CHUNK_BYTES, VERSION_MAJOR, VERSION_MINOR};
use crate::types::{
    Frame, FrameId, KernelSymbol, Mapping, Metadata, Module, ModuleId, Sample, StackId, StringId,
    Totals,
};

/// Chunks are cut once this much is buffered, well below [`MAX_CHUNK_BYTES`].
const SOFT_CHUNK_BYTES: usize = 1 << 20;

/// Writes a `.frec` stream. Definitions (strings, modules, frames, stack
/// nodes, kernel symbols) are emitted the first time they are used, always
/// before the record that uses them.
pub struct Writer<W: Write> {
    out: W,
    level: i32,
    buf: Vec<u8>,
    strings: HashMap<String, StringId>,
    modules: HashMap<Module, ModuleId>,
    frames: HashMap<Frame, FrameId>,
    nodes: HashMap<(StackId, FrameId), StackId>,
    next_node: StackId,
    pending: Vec<Sample>,
    samples: u64,
    weight: u64,
    bytes_written: u64,
    chunks: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the file header and the metadata chunk.
    pub fn new(mut out: W, meta: &Metadata) -> Result<Self, FormatError> {
        let mut header = Vec::with_capacity(16);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&VERSION_MAJOR.to_le_bytes());
        header.extend_from_slice(&VERSION_MINOR.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        out.write_all(&header)?;
        let mut w = Writer {
            out,
            level: 3,
            buf: Vec::with_capacity(SOFT_CHUNK_BYTES),
            strings: HashMap::new(),
            modules: HashMap::new(),
            frames: HashMap::new(),
            nodes: HashMap::new(),
            next_node: 1,
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
        self.buf.push(tag::STRING);
        put_bytes(&mut self.buf, s.as_bytes());
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
        self.buf.push(tag::MODULE);
        self.buf.push(m.kind.code());
        put_u64(&mut self.buf, u64::from(path));
        put_bytes(&mut self.buf, &m.build_id);
        self.modules.insert(m.clone(), id);
        id
    }

    /// Interns a frame, writing it on first use. `module` must come from [`Writer::module`].
    pub fn frame(&mut self, f: Frame) -> FrameId {
        if let Some(&id) = self.frames.get(&f) {
            return id;
        }
        let id = self.frames.len() as FrameId;
        self.buf.push(tag::FRAME);
        put_u64(&mut self.buf, u64::from(f.module));
        put_u64(&mut self.buf, f.address);
        self.frames.insert(f, id);
        id
    }

    /// Interns a stack given root first, returning its leaf node.
    pub fn stack(&mut self, root_first: &[FrameId]) -> StackId {
        let mut node: StackId = 0;
        for &frame in root_first {
            node = match self.nodes.get(&(node, frame)) {
                Some(&n) => n,
                None => {
                    let id = self.next_node;
                    self.next_node += 1;
                    self.buf.push(tag::NODE);
                    // Children are usually written right after their parent:
                    // the distance back is small.
                    put_u64(&mut self.buf, u64::from(id - node));
                    put_u64(&mut self.buf, u64::from(frame));
                    self.nodes.insert((node, frame), id);
                    id
                }
            };
        }
        node
    }

    /// Records the kernel symbol that some kernel frame falls into.
    pub fn kernel_symbol(&mut self, sym: &KernelSymbol) {
        let name = self.string(&sym.name);
        let module = self.string(&sym.module);
        self.buf.push(tag::KSYM);
        put_u64(&mut self.buf, sym.start);
        put_u64(&mut self.buf, sym.size);
        put_u64(&mut self.buf, u64::from(name));
        put_u64(&mut self.buf, u64::from(module));
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
        self.buf.len() + self.pending.len() * 8 >= SOFT_CHUNK_BYTES
    }

    /// Compresses and writes the buffered records as one chunk.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.emit_samples();
        if self.buf.is_empty() {
            return Ok(());
        }
        debug_assert!(self.buf.len() <= MAX_CHUNK_BYTES);
        let compressed = zstd::bulk::compress(&self.buf, self.level)?;
        let mut header = [0u8; 16];
        header[0..4].copy_from_slice(&CHUNK_MAGIC);
        header[4..8].copy_from_slice(&(compressed.len() as u32).to_le_bytes());
        header[8..12].copy_from_slice(&(self.buf.len() as u32).to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&header[4..12]);
        crc.update(&compressed);
        header[12..16].copy_from_slice(&crc.finalize().to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(&compressed)?;
        self.out.flush()?;
        self.bytes_written += (header.len() + compressed.len()) as u64;
        self.chunks += 1;
        self.buf.clear();
        Ok(())
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
        b.push(tag::SAMPLES);
        put_u64(b, self.pending.len() as u64);
        let mut prev_us = self.pending[0].time_ns / 1000;
        put_u64(b, prev_us);
        for s in &self.pending {
            let us = s.time_ns / 1000;
            put_i64(b, us as i64 - prev_us as i64);
            prev_us = us;
        }
        for s in &self.pending {
            put_u64(b, u64::from(s.pid));
        }
        for s in &self.pending {
            put_i64(b, i64::from(s.tid) - i64::from(s.pid));
        }
        for s in &self.pending {
            put_u64(b, u64::from(s.stack));
        }
        for s in &self.pending {
            put_u64(b, s.weight);
        }
        self.pending.clear();
    }
}
