//! Streaming reader. It trusts nothing in the file: every length and count is
//! checked against what is left, every id against the tables read so far, and
//! a chunk is applied only once all of it decoded, so a damaged file yields
//! exactly its complete prefix.

use std::fmt;
use std::io::{self, Read};

use rustc_hash::FxHashMap;

use crate::codec::{unzigzag, Cursor, DecodeFail};
use crate::crc;
use crate::error::FormatError;
use crate::layout::{tag, CHUNK_MAGIC, MAGIC, MAX_CHUNK_BYTES, OLDEST_MAJOR, VERSION_MAJOR};
use crate::names::{self, EmbeddedNames, NamesEnd};
use crate::types::{
    Event, Frame, FrameId, KernelSymbol, Mapping, Metadata, Module, ModuleKind, Sample, StackId,
    Totals,
};

/// Why reading stopped before the trailer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// The input ends inside a chunk or before the trailer (recorder killed).
    Truncated {
        /// Byte offset where the last complete chunk ends.
        offset: u64,
    },
    /// A chunk failed its checksum or could not be decoded.
    Corrupt {
        /// Byte offset of the bad chunk.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Truncated { offset } => write!(
                f,
                "recording is truncated (recorder stopped before finishing it); using the complete data up to byte {offset}"
            ),
            Damage::Corrupt { offset, reason } => write!(
                f,
                "recording is damaged at byte {offset} ({reason}); using the complete data before it"
            ),
        }
    }
}

/// The interned tables of a recording, as far as it has been read.
#[derive(Debug, Clone, Default)]
pub struct Tables {
    /// Interned strings.
    pub strings: Vec<String>,
    /// Modules, indexed by [`crate::ModuleId`].
    pub modules: Vec<Module>,
    /// Frames, indexed by [`FrameId`].
    pub frames: Vec<Frame>,
    /// Kernel symbols the kernel frames need, in file order.
    pub kernel_symbols: Vec<KernelSymbol>,
    /// Stack nodes: (parent, frame); index 0 is the empty root.
    nodes: Vec<(StackId, FrameId)>,
    /// Frames some node references: ids below this (format 2 nodes).
    referenced_frames: FrameId,
}

impl Tables {
    fn new() -> Self {
        Tables {
            nodes: vec![(0, 0)],
            ..Default::default()
        }
    }

    /// Number of stack nodes, the root included.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Parent node and frame of a stack node; `None` for the root or an unknown id.
    pub fn node(&self, id: StackId) -> Option<(StackId, FrameId)> {
        if id == 0 {
            return None;
        }
        self.nodes.get(id as usize).copied()
    }

    /// Frames of a stack, leaf first.
    pub fn stack_frames(&self, id: StackId) -> impl Iterator<Item = &Frame> + '_ {
        let mut cur = id;
        std::iter::from_fn(move || {
            let (parent, frame) = self.node(cur)?;
            cur = parent;
            self.frames.get(frame as usize)
        })
    }
}

/// One decoded but not yet applied item of a chunk.
/// One decoded record. Big payloads are boxed: a chunk holds many small
/// items (stack nodes, frames), and each takes the size of the largest.
enum Item {
    Str(String),
    Module(ModuleKind, u32, Vec<u8>),
    /// The frames of one record.
    Frames(Vec<Frame>),
    /// The (parent, frame) pairs of one record: tens of thousands in a
    /// chunk of deep stacks, kept 8 bytes each rather than an item each.
    Nodes(Vec<(StackId, FrameId)>),
    Ksym(u64, u64, u32, u32),
    Meta(Box<Metadata>),
    Comm(u64, u32, u32, u32, bool),
    Event(Box<Event>),
    ReferencedFrames(FrameId),
    Names(std::collections::HashMap<FrameId, Vec<std::sync::Arc<str>>>),
    NamesEnd(NamesEnd),
    NamesThrough(u64),
}

/// Reads a `.frec` stream chunk by chunk.
pub struct Reader<R: Read> {
    input: R,
    offset: u64,
    tables: Tables,
    meta: Metadata,
    totals: Option<Totals>,
    damage: Option<Damage>,
    first: Option<Vec<Event>>,
    /// The trailer was read: what follows is the names section.
    after_totals: bool,
    names: EmbeddedNames,
    done: bool,
    /// One decompression context for every chunk: making one per chunk
    /// (allocating it, probing the CPU) was a tenth of folding an
    /// embedded recording.
    dctx: Option<zstd::bulk::Decompressor<'static>>,
    /// A chunk's compressed and decompressed bytes, reused.
    payload: Vec<u8>,
    data: Vec<u8>,
    /// Bytes checksummed so far (see `crc`).
    checked: u64,
}

impl<R: Read> Reader<R> {
    /// Reads the header and the metadata chunk.
    pub fn new(mut input: R) -> Result<Self, FormatError> {
        let mut header = [0u8; 16];
        let n = read_full(&mut input, &mut header)?;
        if n == 0 {
            return Err(FormatError::Empty);
        }
        if n < MAGIC.len() || header[..8] != MAGIC {
            return Err(FormatError::NotFrec);
        }
        if n < header.len() {
            return Err(FormatError::NoData("the header is cut short".into()));
        }
        let major = u16::from_le_bytes([header[8], header[9]]);
        let minor = u16::from_le_bytes([header[10], header[11]]);
        if !(OLDEST_MAJOR..=VERSION_MAJOR).contains(&major) {
            return Err(FormatError::UnsupportedVersion {
                major,
                minor,
                supported: VERSION_MAJOR,
            });
        }
        let mut r = Reader {
            input,
            offset: header.len() as u64,
            tables: Tables::new(),
            meta: Metadata::default(),
            totals: None,
            damage: None,
            first: None,
            after_totals: false,
            names: EmbeddedNames::default(),
            done: false,
            dctx: None,
            payload: Vec::new(),
            data: Vec::new(),
            checked: 0,
        };
        let mut seen_meta = false;
        match r.read_chunk(&mut seen_meta)? {
            Some(events) if seen_meta => r.first = Some(events),
            _ => {
                let why = match &r.damage {
                    Some(d) => d.to_string(),
                    None => "no metadata chunk".to_string(),
                };
                return Err(FormatError::NoData(why));
            }
        }
        Ok(r)
    }

    /// The recording's metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// The tables read so far; they cover every id in events returned so far.
    pub fn tables(&self) -> &Tables {
        &self.tables
    }

    /// The trailer, once read.
    pub fn totals(&self) -> Option<&Totals> {
        self.totals.as_ref()
    }

    /// Why reading stopped early, once known. Damage in the names section
    /// (after the trailer) is not damage of the recording: see [`Reader::names`].
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// The user-space names embedded after the trailer, complete once
    /// [`Reader::next_events`] returned `None`.
    pub fn names(&self) -> &EmbeddedNames {
        &self.names
    }

    /// Takes the embedded names out of the reader.
    pub fn take_names(&mut self) -> EmbeddedNames {
        std::mem::take(&mut self.names)
    }

    /// Bytes consumed: the end of the last complete chunk.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The events of the next complete chunk, or `None` at the end (clean
    /// or damaged: see [`Reader::damage`]). Only I/O failures are errors.
    pub fn next_events(&mut self) -> Result<Option<Vec<Event>>, FormatError> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        let mut seen_meta = false;
        self.read_chunk(&mut seen_meta)
    }

    fn read_chunk(&mut self, seen_meta: &mut bool) -> Result<Option<Vec<Event>>, FormatError> {
        if self.done {
            return Ok(None);
        }
        let start = self.offset;
        let mut header = [0u8; 16];
        let n = read_full(&mut self.input, &mut header)?;
        if n == 0 {
            self.done = true;
            if self.totals.is_none() {
                self.damage = Some(Damage::Truncated { offset: start });
            }
            return Ok(None);
        }
        if n < header.len() {
            return self.stop(Damage::Truncated { offset: start });
        }
        if header[0..4] != CHUNK_MAGIC {
            return self.corrupt(start, "no chunk header");
        }
        let clen = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let ulen = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
        let crc = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        if clen > MAX_CHUNK_BYTES || ulen > MAX_CHUNK_BYTES {
            return self.corrupt(start, "chunk length out of range");
        }
        // Reading through `take` grows the buffer only as data arrives, so a
        // corrupt length cannot allocate more than the input holds.
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        (&mut self.input)
            .take(clen as u64)
            .read_to_end(&mut payload)?;
        if payload.len() < clen {
            return self.stop(Damage::Truncated { offset: start });
        }
        if crc::chunk(&mut self.checked, &header[4..12], &payload) != crc {
            return self.corrupt(start, "checksum mismatch");
        }
        // The stated length is covered by the checksum and bounded by
        // MAX_CHUNK_BYTES; a chunk decompressing to more fails, as one
        // decompressing to less does below.
        let mut data = std::mem::take(&mut self.data);
        data.clear();
        data.reserve(ulen);
        let mut dctx = match self.dctx.take() {
            Some(d) => d,
            None => zstd::bulk::Decompressor::new()?,
        };
        let decoded = dctx.decompress_to_buffer(&payload[..], &mut data);
        self.dctx = Some(dctx);
        self.payload = payload;
        if decoded.is_err() || data.len() != ulen {
            self.data = data;
            return self.corrupt(start, "chunk does not decompress to its stated length");
        }
        let decoded = self.decode(&data);
        self.data = data;
        let items = match decoded {
            Ok(items) => items,
            Err(DecodeFail(what)) => {
                return self.corrupt(start, &format!("bad record while reading {what}"));
            }
        };
        self.offset = start + 16 + clen as u64;
        Ok(Some(self.apply(items, seen_meta)))
    }

    fn stop(&mut self, d: Damage) -> Result<Option<Vec<Event>>, FormatError> {
        self.done = true;
        if self.after_totals {
            // The recording itself is whole; only its names section is not.
            let why = match d {
                Damage::Truncated { offset } => format!("cut short at byte {offset}"),
                Damage::Corrupt { offset, reason } => {
                    format!("damaged at byte {offset} ({reason})")
                }
            };
            self.names.damage = Some(why);
        } else {
            self.damage = Some(d);
        }
        Ok(None)
    }

    fn corrupt(&mut self, offset: u64, reason: &str) -> Result<Option<Vec<Event>>, FormatError> {
        self.stop(Damage::Corrupt {
            offset,
            reason: reason.to_string(),
        })
    }

    fn decode(&self, data: &[u8]) -> Result<Vec<Item>, DecodeFail> {
        let mut c = Cursor::new(data);
        let mut items = Vec::new();
        let mut strings = self.tables.strings.len() as u64;
        let mut modules = self.tables.modules.len() as u64;
        let mut frames = self.tables.frames.len() as u64;
        let mut nodes = self.tables.nodes.len() as u64;
        let mut referenced = self.tables.referenced_frames;
        let check = |v: u64, limit: u64, what: &'static str| {
            if v < limit {
                u32::try_from(v).map_err(|_| DecodeFail(what))
            } else {
                Err(DecodeFail(what))
            }
        };
        let mut seen_totals = false;
        while !c.is_empty() {
            if seen_totals {
                return Err(DecodeFail("data after the trailer"));
            }
            let t = c.u8("record tag")?;
            if t >= tag::FIRST_OPTIONAL {
                let body = c.bytes("optional record")?;
                match t {
                    tag::NAMES if self.after_totals => {
                        let mut map = std::collections::HashMap::new();
                        names::decode(body, frames, &mut map)?;
                        items.push(Item::Names(map));
                    }
                    tag::OWN_NAMES if !self.after_totals => {
                        let mut map = std::collections::HashMap::new();
                        names::decode(body, frames, &mut map)?;
                        items.push(Item::Names(map));
                    }
                    tag::NAMES_THROUGH if !self.after_totals => {
                        let mut b = Cursor::new(body);
                        let n = b.u64("names through")?;
                        items.push(Item::NamesThrough(n));
                    }
                    tag::IDENTITY if !self.after_totals => {
                        let id =
                            serde_json::from_slice(body).map_err(|_| DecodeFail("identity"))?;
                        items.push(Item::Event(Box::new(Event::Identity(id))));
                    }
                    tag::NAMES_END if self.after_totals => {
                        let end =
                            serde_json::from_slice(body).map_err(|_| DecodeFail("names end"))?;
                        items.push(Item::NamesEnd(end));
                    }
                    // Optional records this reader does not know are skipped.
                    _ => {}
                }
                continue;
            }
            if self.after_totals {
                return Err(DecodeFail("record after the trailer"));
            }
            let item = match t {
                tag::META => {
                    let json = c.bytes("metadata")?;
                    Item::Meta(Box::new(
                        serde_json::from_slice(json).map_err(|_| DecodeFail("metadata"))?,
                    ))
                }
                tag::STRINGS => {
                    // n lengths, then the bytes of all n strings.
                    let n = c.count(1, "strings")?;
                    let mut lens = Vec::with_capacity(n);
                    for _ in 0..n {
                        lens.push(c.count(0, "string length")?);
                    }
                    for len in lens {
                        let b = c.take(len, "string")?;
                        items.push(Item::Str(String::from_utf8_lossy(b).into_owned()));
                    }
                    strings += n as u64;
                    continue;
                }
                tag::MODULES => {
                    let kind = ModuleKind::from_code(c.u8("module kind")?)
                        .ok_or(DecodeFail("module kind"))?;
                    let path = check(c.u64("module path")?, strings, "module path")?;
                    let build_id = c.bytes("build id")?.to_vec();
                    modules += 1;
                    Item::Module(kind, path, build_id)
                }
                tag::FRAMES => {
                    let n = c.count(2, "frames")?;
                    let mut mods = Vec::with_capacity(n);
                    for _ in 0..n {
                        mods.push(check(c.u64("frame module")?, modules, "frame module")?);
                    }
                    let mut last: FxHashMap<u32, u64> = Default::default();
                    let mut out = Vec::with_capacity(n);
                    for module in mods {
                        let delta = c.i64("frame address")?;
                        let prev = last.get(&module).copied().unwrap_or(0);
                        let address = prev.wrapping_add(delta as u64);
                        last.insert(module, address);
                        out.push(Frame { module, address });
                    }
                    items.push(Item::Frames(out));
                    frames += n as u64;
                    continue;
                }
                tag::NODES_V2 => {
                    let n = c.count(2, "stack nodes")?;
                    let mut backs = Vec::with_capacity(n);
                    for _ in 0..n {
                        backs.push(c.u64("stack node parent")?);
                    }
                    let mut out = Vec::with_capacity(n);
                    let mut prev_frame = 0i64;
                    for back in backs {
                        if back == 0 || back > nodes {
                            return Err(DecodeFail("stack node parent"));
                        }
                        let parent = (nodes - back) as StackId;
                        let code = c.u64("stack node frame")?;
                        let frame = if code == 0 {
                            let f = referenced;
                            referenced = referenced
                                .checked_add(1)
                                .ok_or(DecodeFail("stack node frame"))?;
                            i64::from(f)
                        } else {
                            prev_frame
                                .checked_add(unzigzag(code - 1))
                                .ok_or(DecodeFail("stack node frame"))?
                        };
                        prev_frame = frame;
                        let frame =
                            u64::try_from(frame).map_err(|_| DecodeFail("stack node frame"))?;
                        let frame = check(frame, frames, "stack node frame")?;
                        nodes += 1;
                        if nodes > u64::from(u32::MAX) {
                            return Err(DecodeFail("stack node count"));
                        }
                        out.push((parent, frame));
                    }
                    items.push(Item::Nodes(out));
                    items.push(Item::ReferencedFrames(referenced));
                    continue;
                }
                tag::NODES => {
                    let n = c.count(2, "stack nodes")?;
                    let mut backs = Vec::with_capacity(n);
                    for _ in 0..n {
                        backs.push(c.u64("stack node parent")?);
                    }
                    let mut out = Vec::with_capacity(n);
                    let mut prev_frame = 0i64;
                    for back in backs {
                        if back == 0 || back > nodes {
                            return Err(DecodeFail("stack node parent"));
                        }
                        let parent = (nodes - back) as StackId;
                        let frame = prev_frame
                            .checked_add(c.i64("stack node frame")?)
                            .ok_or(DecodeFail("stack node frame"))?;
                        prev_frame = frame;
                        let frame =
                            u64::try_from(frame).map_err(|_| DecodeFail("stack node frame"))?;
                        let frame = check(frame, frames, "stack node frame")?;
                        nodes += 1;
                        if nodes > u64::from(u32::MAX) {
                            return Err(DecodeFail("stack node count"));
                        }
                        out.push((parent, frame));
                    }
                    items.push(Item::Nodes(out));
                    continue;
                }
                tag::KSYMS => {
                    let n = c.count(4, "kernel symbols")?;
                    let mut prev = 0u64;
                    for _ in 0..n {
                        let start = prev.wrapping_add(c.i64("kernel symbol")? as u64);
                        prev = start;
                        let size = c.u64("kernel symbol")?;
                        let name = check(c.u64("kernel symbol")?, strings, "kernel symbol")?;
                        let module = check(c.u64("kernel symbol")?, strings, "kernel symbol")?;
                        items.push(Item::Ksym(start, size, name, module));
                    }
                    continue;
                }
                tag::COMM => {
                    let time = c.u64("comm")?;
                    let pid = c.u32("comm")?;
                    let tid = c.u32("comm")?;
                    let name = check(c.u64("comm")?, strings, "comm")?;
                    let exec = c.u8("comm")? != 0;
                    Item::Comm(time, pid, tid, name, exec)
                }
                tag::FORK => {
                    let time_ns = c.u64("fork")?;
                    Item::Event(Box::new(Event::Fork {
                        time_ns,
                        pid: c.u32("fork")?,
                        ppid: c.u32("fork")?,
                        tid: c.u32("fork")?,
                        ptid: c.u32("fork")?,
                    }))
                }
                tag::EXIT => {
                    let time_ns = c.u64("exit")?;
                    Item::Event(Box::new(Event::Exit {
                        time_ns,
                        pid: c.u32("exit")?,
                        tid: c.u32("exit")?,
                    }))
                }
                tag::MAPPING => {
                    let time_ns = c.u64("mapping")?;
                    let pid = c.u32("mapping")?;
                    let start = c.u64("mapping")?;
                    let len = c.u64("mapping")?;
                    let pgoff = c.u64("mapping")?;
                    let module = check(c.u64("mapping")?, modules, "mapping module")?;
                    Item::Event(Box::new(Event::Mapping(Mapping {
                        time_ns,
                        pid,
                        start,
                        end: start.saturating_add(len),
                        pgoff,
                        module,
                    })))
                }
                tag::SAMPLES => {
                    Item::Event(Box::new(Event::Samples(decode_samples(&mut c, nodes)?)))
                }
                tag::SAMPLES_V2 => {
                    Item::Event(Box::new(Event::Samples(decode_samples_v2(&mut c, nodes)?)))
                }
                tag::LOST => {
                    let time_ns = c.u64("lost")?;
                    Item::Event(Box::new(Event::Lost {
                        time_ns,
                        count: c.u64("lost")?,
                    }))
                }
                tag::TOTALS => {
                    let json = c.bytes("totals")?;
                    seen_totals = true;
                    Item::Event(Box::new(Event::Totals(
                        serde_json::from_slice(json).map_err(|_| DecodeFail("totals"))?,
                    )))
                }
                _ => return Err(DecodeFail("record tag")),
            };
            items.push(item);
        }
        Ok(items)
    }

    fn apply(&mut self, items: Vec<Item>, seen_meta: &mut bool) -> Vec<Event> {
        let mut events = Vec::new();
        // Ids were validated in `decode`, so these lookups always succeed.
        let s = |t: &Tables, id: u32| -> String {
            t.strings.get(id as usize).cloned().unwrap_or_default()
        };
        for item in items {
            match item {
                Item::Str(v) => self.tables.strings.push(v),
                Item::Module(kind, path, build_id) => {
                    let path = s(&self.tables, path);
                    self.tables.modules.push(Module {
                        kind,
                        path,
                        build_id,
                    });
                }
                Item::Frames(f) => append(&mut self.tables.frames, f),
                Item::Nodes(n) => append(&mut self.tables.nodes, n),
                Item::ReferencedFrames(n) => self.tables.referenced_frames = n,
                Item::Ksym(start, size, name, module) => {
                    let k = KernelSymbol {
                        start,
                        size,
                        name: s(&self.tables, name),
                        module: s(&self.tables, module),
                    };
                    self.tables.kernel_symbols.push(k);
                }
                Item::Meta(m) => {
                    *seen_meta = true;
                    self.meta = (*m).clone();
                    events.push(Event::Metadata(*m));
                }
                Item::Comm(time_ns, pid, tid, name, exec) => events.push(Event::Comm {
                    time_ns,
                    pid,
                    tid,
                    name: s(&self.tables, name),
                    exec,
                }),
                Item::Event(e) => {
                    if let Event::Totals(t) = &*e {
                        self.totals = Some(t.clone());
                        self.after_totals = true;
                    }
                    events.push(*e);
                }
                Item::Names(map) => self.names.frames.extend(map),
                Item::NamesThrough(n) => self.names.through = self.names.through.max(n),
                Item::NamesEnd(end) => {
                    self.names.end = Some(end);
                    // Nothing follows the names section's end.
                    self.done = true;
                }
            }
        }
        events
    }
}

/// Appends `more` to `table`, taking it whole when the table is empty.
fn append<T>(table: &mut Vec<T>, mut more: Vec<T>) {
    if table.is_empty() {
        *table = more;
    } else {
        table.append(&mut more);
    }
}

fn decode_samples(c: &mut Cursor<'_>, nodes: u64) -> Result<Vec<Sample>, DecodeFail> {
    // Five columns of at least one byte each.
    let n = c.count(5, "sample count")?;
    let mut time_us = c.u64("sample time")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let d = c.i64("sample time")?;
        time_us = time_us
            .checked_add_signed(d)
            .ok_or(DecodeFail("sample time"))?;
        out.push(Sample {
            time_ns: time_us.saturating_mul(1000),
            pid: 0,
            tid: 0,
            stack: 0,
            weight: 0,
        });
    }
    decode_threads(c, &mut out)?;
    decode_stacks_and_weights(c, &mut out, nodes)?;
    Ok(out)
}

/// The pid and tid columns (tid as a difference from the pid), both formats.
fn decode_threads(c: &mut Cursor<'_>, out: &mut [Sample]) -> Result<(), DecodeFail> {
    for s in out.iter_mut() {
        s.pid = c.u32("sample pid")?;
    }
    for s in out.iter_mut() {
        let d = c.i64("sample tid")?;
        s.tid = u32::try_from(i64::from(s.pid) + d).map_err(|_| DecodeFail("sample tid"))?;
    }
    Ok(())
}

/// The stack column (differences from the highest id so far, each below
/// `nodes`) and the weight column, both formats.
fn decode_stacks_and_weights(
    c: &mut Cursor<'_>,
    out: &mut [Sample],
    nodes: u64,
) -> Result<(), DecodeFail> {
    let mut high = 0i64;
    for s in out.iter_mut() {
        let id = high
            .checked_add(c.i64("sample stack")?)
            .ok_or(DecodeFail("sample stack"))?;
        if id < 0 || id as u64 >= nodes {
            return Err(DecodeFail("sample stack"));
        }
        high = high.max(id);
        s.stack = id as StackId;
    }
    for s in out.iter_mut() {
        s.weight = c.u64("sample weight")?;
    }
    Ok(())
}

/// Samples of format 2: threads first, then times per thread relative to the
/// sampling period (see the writer), stacks, weights.
fn decode_samples_v2(c: &mut Cursor<'_>, nodes: u64) -> Result<Vec<Sample>, DecodeFail> {
    // Five columns of at least one byte each.
    let n = c.count(5, "sample count")?;
    let mut time_us = c.u64("sample time")?;
    let period = i64::try_from(c.u64("sample period")?).map_err(|_| DecodeFail("sample period"))?;
    let mut out = vec![
        Sample {
            time_ns: 0,
            pid: 0,
            tid: 0,
            stack: 0,
            weight: 0,
        };
        n
    ];
    decode_threads(c, &mut out)?;
    // Keyed by thread id, one lookup per sample: a hasher without SipHash's
    // rounds (they were 6% of folding an embedded recording).
    let mut last: FxHashMap<u32, u64> = FxHashMap::default();
    for s in out.iter_mut() {
        let v = c.u64("sample time")?;
        let base = if v & 1 == 0 {
            let t = *last.get(&s.tid).ok_or(DecodeFail("sample time"))?;
            t.checked_add_signed(period)
                .ok_or(DecodeFail("sample time"))?
        } else {
            time_us
        };
        time_us = base
            .checked_add_signed(unzigzag(v >> 1))
            .ok_or(DecodeFail("sample time"))?;
        last.insert(s.tid, time_us);
        s.time_ns = time_us.saturating_mul(1000);
    }
    decode_stacks_and_weights(c, &mut out, nodes)?;
    Ok(out)
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
