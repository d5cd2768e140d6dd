//! The frame walk as a BPF program, for reading a thread's Python frames
//! at the moment it is sampled: attached to the sampling event, it runs in
//! the kernel on the sampled thread's CPU before the sample is written, so
//! the frames it reads are the ones running then — what a read from user
//! space afterwards cannot prove for the frames the thread was running.
//!
//! One attached program serves every layout this crate knows: user space
//! says, per process, which one ([`WalkerMaps::add_process`], which loads
//! that layout's walk, its offsets as immediates, the first time) and, per
//! thread, where its thread state is ([`WalkerMaps::add_thread`]); the
//! attached program hands each sample of a known process to its layout's
//! walk (a tail call). For each sample of a known thread the walk writes
//! a [`Record`] into a per-CPU buffer: the thread, then per frame (innermost
//! first, at most [`MAX_BPF_FRAMES`]) its address, code object, instruction
//! word and marker word, which user space turns into runs and names
//! ([`Record::runs`]) as it does for frames it reads itself.

use std::os::fd::AsRawFd;

use flamerec_bpf::asm::{self, helper, Code, Size, FP, R0, R1, R2, R3, R6};
use flamerec_bpf::{BpfError, Map, MapKind, Program, RingBuffer};

use crate::chain::{Chain, Seen};
use crate::code::captured_str;
use crate::layout::{debug_offsets_3130, FrameModel, Layout, RUNTIME_SIZE_3130};
use crate::Run;

mod emit;
mod offline;

use emit::walk_code;
pub use offline::{walk_in_user_space, OfflineError};

/// Frames one sample's walk reads at most.
pub const MAX_BPF_FRAMES: usize = 192;
/// Bytes of a record's head: the thread (`tgid << 32 | tid`), the count of
/// frames, the time of the walk (CLOCK_MONOTONIC ns: the kernel takes the
/// sample's own time a few µs before it runs the program) and the sampled
/// instruction pointer (the sample's own IP), which tell the walk's sample
/// apart.
const HEAD: usize = 32;
/// Where `struct bpf_perf_event_data` holds the sampled registers' `ip`
/// (x86-64 `pt_regs`: the 17th word).
const CTX_IP: i16 = 128;
/// Bytes per frame in a record.
const ENTRY: usize = 32;
/// Where a record's head says the walk reached the chain's end (a null
/// older-frame pointer): the count word's upper half, 1 then.
const ENDED_AT: i16 = 12;
/// A frame's marker word: its code's identity above two marker bytes
/// (`is_entry` or `owner`; 3.11's `owner`).
const IDENTITY_SHIFT: i32 = 16;
/// A record's bytes.
pub const RECORD_LEN: usize = HEAD + MAX_BPF_FRAMES * ENTRY;
/// Bytes of a frame read at once: every field the walk needs, in every layout.
pub(crate) const FRAME_READ: i32 = 112;
/// Where the frame read goes on the program's stack.
const FRAME_AT: i16 = -128;
/// Where the code object's file name and name pointers go (at most 32
/// bytes, from its file name on).
const NAMES_AT: i16 = -160;
/// Where a name record is built on the program's stack: the 352 bytes
/// below [`NAMES_AT`] (the stack is 512 bytes).
const NAME_REC_AT: i16 = -512;
/// A name record: a word of ones (no walk's thread word), the process
/// ([`REC_TGID`]), the code object ([`REC_CODE`]), its identity word
/// ([`REC_IDENTITY`]), then for its name and its file name the string
/// object's length, hash and state ([`STR_HEADER`] bytes each, read from
/// the object's [`STR_LENGTH`]th byte on), then the name's and the file
/// name's ASCII bytes up to their NUL ([`NAME_BYTES`], [`FILE_BYTES`]).
const NAME_REC_LEN: usize = 352;
const REC_TGID: usize = 8;
const REC_CODE: usize = 16;
const REC_IDENTITY: usize = 24;
const STR_HEADER: usize = 24;
const NAME_HEADER_AT: usize = 32;
const FILE_HEADER_AT: usize = NAME_HEADER_AT + STR_HEADER;
const NAME_CHARS_AT: usize = FILE_HEADER_AT + STR_HEADER;
const FILE_CHARS_AT: usize = NAME_CHARS_AT + NAME_BYTES;
/// The bytes a name record holds of a name, its NUL included.
pub const NAME_BYTES: usize = 64;
/// The bytes a name record holds of a file name, its NUL included.
pub const FILE_BYTES: usize = NAME_REC_LEN - FILE_CHARS_AT;
/// Where the file name's last 8 characters are read to.
const TAIL_AT: i16 = -16;
/// The innermost frames whose code's names the walk reads.
pub const NAMED_FRAMES: usize = 32;
/// Code objects whose names were sent, per process.
const KNOWN_CODES: u32 = 65_536;
/// The most distinct layouts one recording walks (each its own program;
/// a process map value indexes them): every minor version 3.8–3.15 with
/// room for builds of one version that publish other offsets.
const MAX_LAYOUTS: usize = 16;

/// The layouts met, by walk index.
#[derive(Debug, Default)]
struct Layouts(Vec<Layout>);

impl Layouts {
    /// `layout`'s index: the one it has, or the next (`None` past
    /// [`MAX_LAYOUTS`], or for a layout the walk cannot read: validated
    /// here, before any walk is built).
    fn index_of(&mut self, layout: &Layout) -> Option<u32> {
        if !emit::fits(layout) {
            return None;
        }
        if let Some(i) = self.0.iter().position(|l| l == layout) {
            return Some(i as u32);
        }
        if self.0.len() >= MAX_LAYOUTS {
            return None;
        }
        self.0.push(layout.clone());
        Some(self.0.len() as u32 - 1)
    }
}

/// The layout a minor version's command is walked with before its process
/// is found: 3.8–3.12 from the tables, 3.13 as 3.13.0 publishes it. Later
/// versions are known once their process publishes its offsets.
fn known(minor: u8) -> Option<Layout> {
    Layout::for_version(3, minor).or_else(|| {
        (minor == 13)
            .then(|| Layout::from_debug_offsets(&debug_offsets_3130(), RUNTIME_SIZE_3130))
            .flatten()
    })
}

/// The maps a walker program reads and writes, and its programs: a
/// dispatcher attached to the events, which hands each sample of a known
/// process to the walk of its layout (a tail call), and one walk program
/// per layout, loaded when the first process of that layout is added (the
/// verifier takes ≈ 20 ms over one; a recording without Python pays for
/// none of them).
#[derive(Debug)]
pub struct WalkerMaps {
    /// tgid → layout index.
    processes: Map,
    /// tid → thread state address.
    threads: Map,
    /// The per-CPU record of the last walk.
    pub records: Map,
    /// (process, code object) → identity of the code whose names the
    /// program sent last: sent again only for code it has not sent.
    known: Map,
    /// Layout index → its walk program.
    walks: Map,
    /// The walk programs loaded, by layout index.
    loaded: Vec<Option<Program>>,
    /// The layouts met, by index.
    layouts: Layouts,
    /// The layouts of the processes added.
    wanted: Vec<u32>,
    /// The ring each walk goes to, once the dispatcher is made (`None`
    /// inside: the per-CPU record only).
    ring: Option<Option<i32>>,
}

/// The maps a walk program names (by descriptor: they stay open while
/// walks are loaded).
#[derive(Debug, Clone, Copy)]
struct WalkFds {
    threads: i32,
    records: i32,
    known: i32,
    ring: Option<i32>,
}

impl WalkerMaps {
    /// New, empty maps for up to `processes` processes and `threads` threads.
    pub fn new(processes: u32, threads: u32) -> Result<WalkerMaps, BpfError> {
        Ok(WalkerMaps {
            processes: Map::new(MapKind::Hash, 4, 4, processes)?,
            threads: Map::new(MapKind::Hash, 4, 8, threads)?,
            records: Map::new(MapKind::PerCpuArray, 4, RECORD_LEN as u32, 1)?,
            known: Map::new(MapKind::LruHash, 16, 8, KNOWN_CODES)?,
            walks: Map::new(MapKind::ProgArray, 4, 4, MAX_LAYOUTS as u32)?,
            loaded: Vec::new(),
            layouts: Layouts::default(),
            wanted: Vec::new(),
            ring: None,
        })
    }

    /// The index of `layout`'s walk: the layouts met so far keep theirs, a
    /// new one takes the next (`None` past [`MAX_LAYOUTS`]). Any layout
    /// the tables or a runtime's published offsets give is walked: a patch
    /// release that moves a field gets its own walk, not a refusal.
    pub fn layout_index(&mut self, layout: &Layout) -> Option<u32> {
        let i = self.layouts.index_of(layout)?;
        self.loaded.resize_with(self.layouts.0.len(), || None);
        Some(i)
    }

    /// Process `tgid` runs a CPython of layout `layout` (an index from
    /// [`WalkerMaps::layout_index`]): the walk of that layout is loaded if
    /// it was not.
    pub fn add_process(&mut self, tgid: u32, layout: u32) -> Result<(), BpfError> {
        if !self.wanted.contains(&layout) {
            self.wanted.push(layout);
        }
        self.load_walks()?;
        self.processes
            .set(&tgid.to_ne_bytes(), &layout.to_ne_bytes())
    }

    /// Thread `tid`'s thread state is at `tstate`.
    pub fn add_thread(&self, tid: u32, tstate: u64) -> Result<(), BpfError> {
        self.threads.set(&tid.to_ne_bytes(), &tstate.to_ne_bytes())
    }

    /// Process `tgid` exited or exec'd: the program forgets it.
    pub fn remove_process(&self, tgid: u32) -> Result<(), BpfError> {
        self.processes.remove(&tgid.to_ne_bytes()).map(drop)
    }

    /// Thread `tid` exited: the program forgets it.
    pub fn remove_thread(&self, tid: u32) -> Result<(), BpfError> {
        self.threads.remove(&tid.to_ne_bytes()).map(drop)
    }

    /// The records every CPU holds now.
    pub fn records(&self) -> Result<Vec<Record>, BpfError> {
        let all = self.records.get(&0u32.to_ne_bytes())?.unwrap_or_default();
        let stride = RECORD_LEN.div_ceil(8) * 8;
        Ok(all.chunks(stride).filter_map(Record::parse).collect())
    }

    /// The program to attach: the dispatcher. With `ring`, each walk's
    /// record is also written there (as long as its frames need) with the
    /// names of code it meets first. The walks of the processes added are
    /// loaded now, and `first`'s (a minor version: the command's CPython,
    /// whose first samples find it); another layout's when a process of it
    /// is added. Loading all of them ahead on a thread cost ≈ 100 ms of CPU
    /// beside every recorded command.
    pub fn program(
        &mut self,
        ring: Option<&RingBuffer>,
        first: Option<u8>,
    ) -> Result<Program, BpfError> {
        self.ring = Some(ring.map(RingBuffer::fd));
        let program = Program::perf_event(&self.dispatcher().ok_or(BpfError::Build)?)?;
        if let Some(i) = first.and_then(known).and_then(|l| self.layout_index(&l)) {
            self.wanted.push(i);
        }
        self.load_walks()?;
        Ok(program)
    }

    /// Loads the walks of the layouts wanted not loaded yet, once the ring
    /// is known.
    fn load_walks(&mut self) -> Result<(), BpfError> {
        let Some(ring) = self.ring else {
            return Ok(());
        };
        let fds = WalkFds {
            threads: self.threads.fd(),
            records: self.records.fd(),
            known: self.known.fd(),
            ring,
        };
        for &i in &self.wanted {
            let i = i as usize;
            let Some(layout) = self.layouts.0.get(i).cloned() else {
                continue;
            };
            if !matches!(self.loaded.get(i), Some(None)) {
                continue;
            }
            let code = walk_code(&layout, &fds).ok_or(BpfError::Build)?;
            let program = Program::perf_event(&code)?;
            let fd = u32::try_from(program.fd().as_raw_fd()).map_err(|_| BpfError::Build)?;
            self.walks
                .set(&(i as u32).to_ne_bytes(), &fd.to_ne_bytes())?;
            self.loaded[i] = Some(program);
        }
        Ok(())
    }

    /// The dispatcher: the sampled process's layout, then a tail call to
    /// that layout's walk (which returns to no one); a process not known,
    /// or a layout not loaded, ends here.
    fn dispatcher(&self) -> Option<Vec<asm::Insn>> {
        let mut c = Code::new();
        let out = c.label();
        c.push([asm::mov(R6, R1), asm::call(helper::GET_CURRENT_PID_TGID)]);
        c.push([asm::rsh_imm(R0, 32), asm::store(Size::W, FP, -4, R0)]);
        c.lookup(self.processes.fd(), -4);
        c.jump(asm::jeq_imm(R0, 0, 0), out);
        c.push([asm::load(Size::W, R3, R0, 0), asm::mov(R1, R6)]);
        c.push(asm::load_map(R2, self.walks.fd()));
        c.push([asm::call(helper::TAIL_CALL)]);
        c.bind(out);
        c.push([asm::mov_imm(R0, 1), asm::exit()]);
        c.finish()
    }
}

/// What the program writes to its ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A walk: one per sample of a known thread.
    Walk(Record),
    /// The names of a code object the walk of a sample met, read then.
    Names(CodeNames),
}

impl Entry {
    /// An entry from its bytes; `None` for a malformed one.
    pub fn parse(b: &[u8]) -> Option<Entry> {
        if b.len() == NAME_REC_LEN && b.get(..8) == Some(&[0xff; 8][..]) {
            return CodeNames::parse(b).map(Entry::Names);
        }
        Record::parse(b).map(Entry::Walk)
    }
}

/// A code object's name and file name, read by the walk at a sample
/// (only the code objects it had not sent before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeNames {
    /// The process.
    pub tgid: u32,
    /// The code object's address.
    pub code: u64,
    /// Its identity, as [`PyFrame::identity`].
    pub identity: u64,
    /// `co_qualname` (3.11+), else `co_name`; `None` where it was not a
    /// compact ASCII string of fewer than 64 characters.
    pub name: Option<String>,
    /// `co_filename`; `None` as for the name (fewer than 208 characters).
    pub file: Option<String>,
}

impl CodeNames {
    fn parse(b: &[u8]) -> Option<CodeNames> {
        let string = |header: usize, chars: usize, len: usize| {
            captured_str(
                b.get(header..header + STR_HEADER)?,
                b.get(chars..chars + len)?,
            )
        };
        Some(CodeNames {
            tgid: u32::try_from(word(b, REC_TGID)?).ok()?,
            code: word(b, REC_CODE)?,
            identity: word(b, REC_IDENTITY)? >> IDENTITY_SHIFT,
            name: string(NAME_HEADER_AT, NAME_CHARS_AT, NAME_BYTES),
            file: string(FILE_HEADER_AT, FILE_CHARS_AT, FILE_BYTES),
        })
    }
}

/// The native-endian word of `b` at `at`, if `b` holds it.
fn word(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// One walk, as the program wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The sampled process.
    pub tgid: u32,
    /// The sampled thread.
    pub tid: u32,
    /// When the walk ran (CLOCK_MONOTONIC ns).
    pub time: u64,
    /// The sampled instruction pointer.
    pub ip: u64,
    /// Per frame, innermost first: (address, code object, instruction word,
    /// marker word: the code object's identity above two marker bytes —
    /// 3.11's `is_entry` then `owner`, 3.12+'s `owner`).
    pub frames: Vec<[u64; 4]>,
    /// The walk reached the chain's end (else it stopped at
    /// [`MAX_BPF_FRAMES`], or at a read that failed).
    pub ended: bool,
}

impl Record {
    /// A record from its bytes; `None` for an empty or malformed one.
    pub fn parse(b: &[u8]) -> Option<Record> {
        let word = |at: usize| word(b, at);
        let who = word(0)?;
        let count = word(8)?;
        let n = usize::try_from(count & 0xffff_ffff)
            .ok()?
            .min(MAX_BPF_FRAMES);
        if who == 0 {
            return None;
        }
        let frames = (0..n)
            .map(|i| {
                let at = HEAD + i * ENTRY;
                Some([word(at)?, word(at + 8)?, word(at + 16)?, word(at + 24)?])
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Record {
            tgid: (who >> 32) as u32,
            tid: who as u32,
            time: word(16)?,
            ip: word(24)?,
            frames,
            ended: count >> 32 != 0,
        })
    }

    /// Whether the walk stopped before the end of the thread's frames (at
    /// [`MAX_BPF_FRAMES`], or a read that failed): its runs are then the
    /// innermost ones.
    pub fn is_cut(&self) -> bool {
        !self.ended
    }

    /// Whether the walk stopped at [`MAX_BPF_FRAMES`], short of the
    /// chain's end.
    pub fn is_full(&self) -> bool {
        !self.ended && self.frames.len() >= MAX_BPF_FRAMES
    }

    /// Frame `i` as the chain's rules take it ([`chain`](crate::chain)).
    pub fn seen(&self, layout: &Layout, i: usize) -> Option<Seen> {
        let &[addr, code, instr, marker] = self.frames.get(i)?;
        let model = layout.model;
        Some(Seen {
            addr,
            code,
            instr,
            entry: model == FrameModel::EntryFlag && marker & 0xff != 0,
            owner: match model {
                FrameModel::Objects { .. } => 0,
                FrameModel::EntryFlag => (marker >> 8) as u8,
                FrameModel::EntryShim { .. } => marker as u8,
            },
            identity: marker >> IDENTITY_SHIFT,
            oldest: self.ended && i + 1 == self.frames.len(),
        })
    }

    /// The frames cut into runs by the chain's rules, as
    /// [`crate::Interpreter::stack`] cuts those it reads; incomplete frames
    /// are kept here (their code's first traceable instruction is in the
    /// code object, which user space reads when it names them, and asks
    /// [`chain::is_incomplete`](crate::chain::is_incomplete)). A
    /// [cut](Record::is_cut) walk's frames after its last complete run are
    /// the innermost of a run whose rest was not read: that run is
    /// [cut](Run::cut).
    pub fn runs(&self, layout: &Layout) -> Vec<Run> {
        let mut chain = Chain::default();
        for i in 0..self.frames.len() {
            if let Some(seen) = self.seen(layout, i) {
                chain.push(layout, &seen, true);
            }
        }
        chain.finish(self.is_cut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name record as the program writes it: the code's names taken
    /// when whole, left out when cut short or not ASCII.
    #[test]
    fn name_records_give_whole_ascii_names_only() {
        let mut b = vec![0u8; NAME_REC_LEN];
        b[..8].copy_from_slice(&[0xff; 8]);
        b[REC_TGID..REC_TGID + 8].copy_from_slice(&42u64.to_ne_bytes());
        b[REC_CODE..REC_CODE + 8].copy_from_slice(&0x1000u64.to_ne_bytes());
        b[REC_IDENTITY..REC_IDENTITY + 8]
            .copy_from_slice(&(0xabcdu64 << IDENTITY_SHIFT).to_ne_bytes());
        let put =
            |b: &mut Vec<u8>, header: usize, chars: usize, text: &[u8], length: u64, state: u32| {
                b[header..header + 8].copy_from_slice(&length.to_le_bytes());
                b[header + 16..header + 20].copy_from_slice(&state.to_le_bytes());
                b[chars..chars + text.len()].copy_from_slice(text);
            };
        put(
            &mut b,
            NAME_HEADER_AT,
            NAME_CHARS_AT,
            b"Class.method",
            12,
            0x60 | 1 << 2,
        );
        put(
            &mut b,
            FILE_HEADER_AT,
            FILE_CHARS_AT,
            b"/a/b.py",
            9,
            0x60 | 1 << 2,
        );
        let Some(Entry::Names(n)) = Entry::parse(&b) else {
            panic!("not a name record");
        };
        assert_eq!((n.tgid, n.code, n.identity), (42, 0x1000, 0xabcd));
        assert_eq!(n.name.as_deref(), Some("Class.method"));
        // 7 characters read where the length says 9: cut short.
        assert_eq!(n.file, None);
        // Not ASCII: its characters are not where the record has them.
        put(
            &mut b,
            NAME_HEADER_AT,
            NAME_CHARS_AT,
            b"Class.method",
            12,
            0x20 | 2 << 2,
        );
        let Some(Entry::Names(n)) = Entry::parse(&b) else {
            panic!("not a name record");
        };
        assert_eq!(n.name, None);
        // A walk is not taken for a name record.
        assert!(matches!(
            Entry::parse(&b[..NAME_REC_LEN - 8]),
            None | Some(Entry::Walk(_))
        ));
    }

    #[test]
    fn each_layout_met_has_its_own_walk() {
        let mut maps = Layouts::default();
        // `from_debug_offsets` of 3.13.0's published values gives the
        // table a 3.13 command is walked with from its start.
        let l = known(13).expect("3.13.0's layout");
        assert_eq!(maps.index_of(&l), Some(0));
        assert_eq!(maps.index_of(&l), Some(0));
        let mut other = l.clone();
        other.frame_back = 16;
        assert_eq!(maps.index_of(&other), Some(1), "another build's own walk");
        for minor in 8..=12u8 {
            let t = Layout::for_version(3, minor).unwrap();
            assert_eq!(maps.index_of(&t), Some(u32::from(minor) - 6));
        }
        for n in 0..u64::from(MAX_LAYOUTS as u32) {
            other.frame_instr = 40 + n;
            maps.index_of(&other);
        }
        other.frame_instr = 1;
        assert_eq!(maps.index_of(&other), None, "past {MAX_LAYOUTS}");
        // A layout whose frame fields lie past what the walk reads of a
        // frame gets no walk.
        let mut far = l.clone();
        far.frame_back = FRAME_READ as u64 - 4;
        assert_eq!(Layouts::default().index_of(&far), None);
        let mut eleven = Layout::for_version(3, 11).unwrap();
        eleven.frame_marker = FRAME_READ as u64 - 1;
        assert_eq!(
            Layouts::default().index_of(&eleven),
            None,
            "3.11's owner after is_entry"
        );
    }
}
