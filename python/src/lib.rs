//! Python frames of a running CPython, read from outside the process:
//! CPython 3.8 to 3.15 on x86-64 Linux, as a shared `libpython3.X.so` or
//! linked statically into `python3.X` (Debian's).
//!
//! [`Interpreter::find`] looks for the binary that holds `_PyRuntime` among
//! a process's mappings and reads its layout (a table per minor version,
//! or what 3.13 and later publish about themselves, [`layout`]). [`Interpreter::threads`]
//! walks the runtime's thread states and each thread's frame chain, cut
//! into runs: one run per call of the eval loop (`_PyEval_EvalFrameDefault`)
//! in the thread's native stack, innermost first, so a caller that holds
//! the native stack can put each run where its eval-loop frame is — by
//! construction, not by counting where the version marks it (3.11+: each
//! run's marker is a local of its eval-loop call, an address on the native
//! stack). [`CodeInfo`] names a frame's code object and finds its line.
//!
//! The process runs on while it is read: what a walk returns is what the
//! memory said at each read, and a frame read twice may differ. Callers
//! that need a frame that was running at a given moment must prove it
//! (a thread that did not run between two looks, for one). Every read is
//! bounded ([`MAX_FRAMES`], [`code::MAX_STR`]); a read that fails ends the
//! walk of that thread with what was read, marked cut.
//!
//! No unsafe code: memory is read through [`Memory`].
#![forbid(unsafe_code)]

pub mod binary;
pub mod bpf;
pub mod chain;
pub mod code;
mod cold;
pub mod layout;
pub mod memory;

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use binary::{BinaryError, PythonBinary};
pub use code::CodeInfo;
pub use layout::{FrameModel, Layout};
pub use memory::{Memory, Process};

use chain::{Chain, Seen};
use layout::{DEBUG_OFFSETS_LEN, OB_TYPE};

/// Most frames read of one thread: a deeper stack is cut there.
pub const MAX_FRAMES: usize = 4096;
/// Most thread states read of a runtime (a list torn into a cycle or a
/// runaway ends there).
pub const MAX_THREADS: usize = 8_192;
/// glibc's `struct pthread` holds the thread's tid here (2.36; checked
/// against the other threads of the process before it is used).
const PTHREAD_TID: u64 = 720;

/// A CPython runtime in a process.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// (major, minor, micro); micro is 0 where the binary does not say (3.8–3.10).
    pub version: (u8, u8, u8),
    /// Where its fields are.
    pub layout: Layout,
    /// The binary holding `_PyRuntime`.
    pub binary: PathBuf,
    /// `_PyRuntime`, in the process.
    pub runtime: u64,
    /// `PyCode_Type`, in the process.
    pub code_type: Option<u64>,
    /// The eval loop's address ranges, in the process.
    pub eval: Vec<(u64, u64)>,
    /// The binary's functions, as file-offset ranges
    /// ([`PythonBinary::functions`]).
    pub functions: Arc<[(u64, u64)]>,
    /// The calls into the eval loop not inlined, as file-offset ranges
    /// ([`PythonBinary::glue`]).
    pub glue: Vec<(u64, u64)>,
    /// 3.8–3.10: where the runtime keeps its version text, until the micro
    /// version is read from it ([`Interpreter::learn_micro`]).
    pub version_text: Option<u64>,
}

/// Why a process's interpreter could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FindError {
    /// The process's binary says it is a CPython this crate has no layout for.
    #[error("CPython {0}.{1} in {2}: no layout known for this version (3.8 to 3.15 are)")]
    UnknownVersion(u8, u8, String),
    /// Its binary could not be read.
    #[error(transparent)]
    Binary(#[from] BinaryError),
    /// Its memory could not be read.
    #[error("reading the runtime of process {pid}: {source}")]
    Memory {
        /// The process.
        pid: u32,
        /// Why.
        source: io::Error,
    },
}

/// One frame: its code object and the instruction it is at (bytes in
/// 3.8/3.9, code units from 3.10; −1 before the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyFrame {
    /// The code object's address.
    pub code: u64,
    /// The instruction offset.
    pub instr: i64,
    /// Which code object was at `code` when the frame was read at the
    /// sample ([`code_identity`] of it, as the kernel's walk read it); 0
    /// where the walk did not read it (walks from user space). A code
    /// object freed and another made at its address is told apart by it.
    pub identity: u64,
    /// A generator's or coroutine's frame (3.11+), never incomplete (see
    /// [`chain::is_incomplete`]).
    pub generator: bool,
}

/// What tells code objects at one address apart: its file name and
/// (qualified) name objects' addresses, the file name's length and the 8
/// bytes before its (ASCII) characters' end, mixed (48 bits), as the
/// kernel's walk reads them ([`bpf`]; a read that fails counts as 0). The
/// characters tell apart a file name made again at a freed one's address
/// with its code (`exec(compile(src, f"gen{i}.py", "exec"))`: one name for
/// every `i` by the addresses alone).
pub fn code_identity(mem: &dyn Memory, layout: &Layout, code: u64) -> io::Result<u64> {
    let file = mem.u64(code.wrapping_add(layout.code_filename))?;
    let name = mem.u64(code.wrapping_add(layout.code_qualname.unwrap_or(layout.code_name)))?;
    let length = mem.u64(file.wrapping_add(layout::STR_LENGTH)).unwrap_or(0);
    let end = file.wrapping_add(length).wrapping_add(layout.ascii_data);
    let tail = mem.u64(end.wrapping_sub(8)).unwrap_or(0);
    Ok(mix_identity(file, name, length, tail))
}

/// [`code_identity`] of a file name and a name object's addresses, the
/// file name's length and last 8 characters (0 where not read).
pub fn mix_identity(file: u64, name: u64, length: u64, tail: u64) -> u64 {
    file.wrapping_add(name << 1)
        .wrapping_add(length << 2)
        .wrapping_add(tail)
        & ((1 << 48) - 1)
}

/// The Python frames one call of the eval loop runs, innermost first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Run {
    /// Its frames.
    pub frames: Vec<PyFrame>,
    /// 3.11+: an address in the native stack frame of the eval-loop call
    /// that runs these frames (its `_PyCFrame` or entry frame, a local).
    pub marker: Option<u64>,
    /// Only the innermost of its frames were read (the walk reached its
    /// frame limit inside this call).
    pub cut: bool,
}

/// A thread state, and the thread it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadState {
    /// Its Linux thread id (`None` where it cannot be told).
    pub tid: Option<u32>,
    /// Its `PyThreadState`.
    pub tstate: u64,
}

/// A thread's Python stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyThread {
    /// Its Linux thread id (`None` where it cannot be told).
    pub tid: Option<u32>,
    /// Its `PyThreadState`.
    pub tstate: u64,
    /// One run per eval-loop call, innermost first.
    pub runs: Vec<Run>,
    /// The walk stopped before the outermost frame (a failed read, or
    /// [`MAX_FRAMES`]).
    pub cut: bool,
}

/// Whether a mapped file is named like a CPython binary (a libpython3.X,
/// or a python3.X executable, which may have the runtime linked in): the
/// only files searched for a runtime.
pub fn is_cpython_binary(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.starts_with("libpython3") || base.starts_with("python3")
}

/// The minor version a CPython's file name says (`python3.12` → 12),
/// after following links (`/usr/bin/python3` → `python3.11`); `None` for
/// any other file (a pyenv shim is a shell script).
pub fn minor_of_binary(path: &std::path::Path) -> Option<u8> {
    let real = std::fs::canonicalize(path).ok()?;
    let base = real.file_name()?.to_str()?;
    base.strip_prefix("python3.")?.parse().ok()
}

/// Clears the thread id of thread states that share one. A new thread's
/// state is made by the thread that starts it, and up to 3.11 carries its
/// maker's ids until the new thread runs and writes its own: read in that
/// window, two states name the maker, and only one of them is its. Neither
/// is trusted until a later read tells them apart.
pub fn disown_shared_ids(threads: &mut [ThreadState]) {
    let mut seen: HashMap<u32, usize> = HashMap::new();
    for t in threads.iter() {
        if let Some(tid) = t.tid {
            *seen.entry(tid).or_default() += 1;
        }
    }
    for t in threads.iter_mut() {
        if t.tid.is_some_and(|tid| seen[&tid] > 1) {
            t.tid = None;
        }
    }
}

impl Interpreter {
    /// The CPython runtime of process `pid`, if one of its mappings holds
    /// `_PyRuntime`: `Ok(None)` for a process that runs no CPython.
    pub fn find(pid: u32) -> Result<Option<Interpreter>, FindError> {
        let maps = flamerec_perf::procfs::exec_maps(pid);
        // Only files named like CPython's are opened: a libpython3.X, or a
        // python3.X executable with the runtime linked in.
        let mut candidates: Vec<&flamerec_perf::procfs::ExecMap> =
            maps.iter().filter(|m| is_cpython_binary(&m.path)).collect();
        candidates.sort_by_key(|m| !m.path.contains("libpython"));
        for m in candidates {
            let path = Path::new(&m.path);
            let binary = match read_mapped(pid, m) {
                Ok(b) => b,
                Err(BinaryError::NoRuntime(_) | BinaryError::NotElf(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let Some(bias) = binary.bias(m.start, m.pgoff) else {
                continue;
            };
            return Self::at(&Process(pid), path, &binary, bias)
                .map(Some)
                .map_err(|e| match e {
                    AtError::Unknown(a, b) => FindError::UnknownVersion(a, b, m.path.clone()),
                    AtError::Memory(source) => FindError::Memory { pid, source },
                });
        }
        Ok(None)
    }

    /// The runtime of `binary`, loaded at `bias` in the process `mem` reads.
    fn at(
        mem: &dyn Memory,
        path: &Path,
        binary: &PythonBinary,
        bias: u64,
    ) -> Result<Interpreter, AtError> {
        let (major, minor, _) = binary.version;
        let runtime = binary.runtime.0.wrapping_add(bias);
        let layout = match Layout::for_version(major, minor) {
            Some(l) => l,
            None if major == 3 && minor >= 13 => {
                let mut head = vec![0; DEBUG_OFFSETS_LEN];
                mem.read(runtime, &mut head).map_err(AtError::Memory)?;
                Layout::from_debug_offsets(&head, binary.runtime.1)
                    .ok_or(AtError::Unknown(major, minor))?
            }
            None => return Err(AtError::Unknown(major, minor)),
        };
        Ok(Interpreter {
            version: binary.version,
            layout,
            binary: path.to_path_buf(),
            runtime,
            code_type: binary.code_type.map(|a| a.wrapping_add(bias)),
            functions: Arc::clone(&binary.functions),
            glue: binary.glue.clone(),
            version_text: binary.version_text.map(|a| a.wrapping_add(bias)),
            eval: binary
                .eval
                .iter()
                .map(|&(a, b)| (a.wrapping_add(bias), b.wrapping_add(bias)))
                .collect(),
        })
    }

    /// 3.8–3.10: the micro version, from the text the runtime makes of its
    /// version as it starts (its binary does not say it); whether it is
    /// known now. A runtime not started yet is asked again later.
    pub fn learn_micro(&mut self, mem: &dyn Memory) -> bool {
        let Some(at) = self.version_text else {
            return true;
        };
        let mut text = [0u8; binary::VERSION_TEXT as usize];
        let (major, minor, _) = self.version;
        let micro = mem
            .read(at, &mut text)
            .ok()
            .and_then(|()| binary::micro_in_text(&text, major, minor));
        if let Some(micro) = micro {
            self.version.2 = micro;
            self.version_text = None;
        }
        micro.is_some()
    }

    /// Every thread state of every interpreter of the runtime, with the
    /// thread it belongs to, without reading any frame (what the recorder
    /// needs to walk a thread at its samples). `tids`: the process's threads
    /// (from /proc, see [`thread_ids`]) as `(id the process knows, id
    /// here)`: they tell a thread id read from its state from a stray value,
    /// and turn the id a process in its own pid namespace knows into the
    /// host's. A thread id two states claim is neither's (see
    /// [`disown_shared_ids`]). A list that comes back to a state already
    /// read (torn memory) ends there.
    pub fn thread_states(
        &self,
        mem: &dyn Memory,
        tids: &[(u32, u32)],
    ) -> io::Result<Vec<ThreadState>> {
        let l = &self.layout;
        let mut out: Vec<ThreadState> = Vec::new();
        let mut read = HashSet::new();
        let mut interp = mem.u64(self.runtime.wrapping_add(l.runtime_interpreters_head))?;
        let mut interps = 0;
        while interp != 0 && interps < 64 {
            interps += 1;
            let mut ts = mem.u64(interp.wrapping_add(l.interp_threads_head))?;
            while ts != 0 && out.len() < MAX_THREADS && read.insert(ts) {
                let tid = self.tid_of(mem, ts, tids);
                out.push(ThreadState { tid, tstate: ts });
                ts = mem.u64(ts.wrapping_add(l.tstate_next))?;
            }
            interp = mem.u64(interp.wrapping_add(l.interp_next))?;
        }
        disown_shared_ids(&mut out);
        Ok(out)
    }

    /// [`Interpreter::thread_states`], each with its Python stack.
    pub fn threads(&self, mem: &dyn Memory, tids: &[(u32, u32)]) -> io::Result<Vec<PyThread>> {
        let states = self.thread_states(mem, tids)?;
        Ok(states
            .into_iter()
            .map(|t| {
                let (runs, cut) = self.stack(mem, t.tstate);
                PyThread {
                    tid: t.tid,
                    tstate: t.tstate,
                    runs,
                    cut,
                }
            })
            .collect())
    }

    fn tid_of(&self, mem: &dyn Memory, ts: u64, tids: &[(u32, u32)]) -> Option<u32> {
        let l = &self.layout;
        let tid = match l.tstate_native_thread_id {
            Some(at) => mem.u64(ts.wrapping_add(at)).ok()? as u32,
            None => {
                let pthread = mem.u64(ts.wrapping_add(l.tstate_thread_id)).ok()?;
                mem.i32(pthread.wrapping_add(PTHREAD_TID)).ok()? as u32
            }
        };
        tids.iter()
            .find(|&&(own, _)| own == tid)
            .map(|&(_, here)| here)
    }

    /// The frame chain of thread state `ts`, cut into runs by the chain's
    /// rules ([`chain`]); whether the walk stopped early.
    pub fn stack(&self, mem: &dyn Memory, ts: u64) -> (Vec<Run>, bool) {
        let l = &self.layout;
        let mut entries = Vec::new();
        let top = match l.model {
            FrameModel::Objects { .. }
            | FrameModel::EntryShim {
                in_thread_state: true,
            } => mem.u64(ts.wrapping_add(l.tstate_frame)),
            FrameModel::EntryFlag
            | FrameModel::EntryShim {
                in_thread_state: false,
            } => mem
                .u64(ts.wrapping_add(l.tstate_frame))
                .and_then(|cframe| match cframe {
                    0 => Ok(0),
                    c => {
                        if l.model == FrameModel::EntryFlag {
                            entries = cframe_chain(mem, c);
                        }
                        mem.u64(c.wrapping_add(l.cframe_current_frame))
                    }
                }),
        };
        let Ok(mut frame) = top else {
            return (Vec::new(), true);
        };
        let mut chain = Chain::new(entries);
        let (mut read, mut cut) = (0, false);
        while frame != 0 {
            read += 1;
            if read > MAX_FRAMES {
                cut = true;
                break;
            }
            match self.read_frame(mem, frame) {
                Ok((seen, back, keep)) => {
                    chain.push(l, &seen, keep);
                    frame = back;
                }
                Err(_) => {
                    cut = true;
                    break;
                }
            }
        }
        (chain.finish(cut), cut)
    }

    /// The frame at `frame`, its older frame's address, and whether it is kept where it is a Python
    /// frame: not an incomplete 3.11+ frame, and (3.13+) its executable a
    /// code object.
    fn read_frame(&self, mem: &dyn Memory, frame: u64) -> io::Result<(Seen, u64, bool)> {
        let l = &self.layout;
        let code = l.code_of(mem.u64(frame.wrapping_add(l.frame_code))?);
        let back = mem.u64(frame.wrapping_add(l.frame_back))?;
        let marker = frame.wrapping_add(l.frame_marker);
        let (instr, entry, owner) = match l.model {
            FrameModel::Objects { .. } => (
                u64::from(mem.i32(frame.wrapping_add(l.frame_instr))? as u32),
                false,
                0,
            ),
            // `owner` follows `is_entry`.
            FrameModel::EntryFlag => (
                mem.u64(frame.wrapping_add(l.frame_instr))?,
                mem.u8(marker)? != 0,
                mem.u8(marker.wrapping_add(1))?,
            ),
            FrameModel::EntryShim { .. } => (
                mem.u64(frame.wrapping_add(l.frame_instr))?,
                false,
                mem.u8(marker)?,
            ),
        };
        let seen = Seen {
            addr: frame,
            code,
            instr,
            entry,
            owner,
            identity: 0,
            oldest: back == 0,
        };
        let keep = chain::is_python(l, &seen) && self.complete(mem, &seen)?;
        Ok((seen, back, keep))
    }

    /// Whether Python frame `f` is complete (3.11+; see
    /// [`chain::is_incomplete`]) and (3.13+) runs a code object.
    fn complete(&self, mem: &dyn Memory, f: &Seen) -> io::Result<bool> {
        let l = &self.layout;
        if matches!(l.model, FrameModel::Objects { .. }) {
            // A frame object's code is a code object, complete.
            return Ok(true);
        }
        if let Some(code_type) = self.code_type {
            if f.code == 0 || mem.u64(f.code.wrapping_add(OB_TYPE))? != code_type {
                return Ok(false);
            }
        }
        match l.code_firsttraceable {
            Some(first) => {
                let first = i64::from(mem.i32(f.code.wrapping_add(first))?);
                Ok(!chain::is_incomplete(&f.frame(l), first))
            }
            None => Ok(true),
        }
    }
}

/// 3.11: the thread's `_PyCFrame`s, innermost first, one per eval-loop
/// call (each a local of that call), up to the thread state's root one
/// (whose current frame is none).
fn cframe_chain(mem: &dyn Memory, first: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut c = first;
    while c != 0 && out.len() < MAX_FRAMES {
        match mem.u64(c.wrapping_add(8)) {
            Ok(0) | Err(_) => break,
            Ok(_) => out.push(c),
        }
        c = mem.u64(c.wrapping_add(16)).unwrap_or(0);
    }
    out
}

enum AtError {
    Unknown(u8, u8),
    Memory(io::Error),
}

/// The threads of `pid` as `(id the process knows, id here)`: the same
/// ids, but for a process in a pid namespace of its own (a container),
/// whose threads know themselves by their `NSpid`.
pub fn thread_ids(pid: u32) -> Vec<(u32, u32)> {
    use flamerec_perf::procfs::{threads_of, view};
    let tids = threads_of(pid).unwrap_or_default();
    if view::ns_pid(pid).is_ok_and(|own| own == pid) {
        return tids.into_iter().map(|t| (t, t)).collect();
    }
    tids.into_iter()
        .filter_map(|t| Some((view::ns_pid(t).ok()?, t)))
        .collect()
}

/// The CPython binary `pid` mapped as `m`, read as the process sees it:
/// the mapping's own file where it can be opened, else the path under the
/// process's root (a container's, a chroot's), else the path here.
fn read_mapped(pid: u32, m: &flamerec_perf::procfs::ExecMap) -> Result<PythonBinary, BinaryError> {
    use flamerec_perf::procfs::view;
    let mapped = view::mapped_file(pid, m.start, m.end);
    let own_root = view::under_root(pid, &m.path);
    let mut last = None;
    for path in [mapped.as_path(), own_root.as_path(), Path::new(&m.path)] {
        match PythonBinary::read_named(path, &m.path) {
            Err(e @ BinaryError::Read { .. }) => last = Some(e),
            found => return found,
        }
    }
    Err(last.unwrap_or_else(|| BinaryError::NotElf(m.path.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: Option<u32>, tstate: u64) -> ThreadState {
        ThreadState { tid, tstate }
    }

    #[test]
    fn a_thread_id_two_states_claim_is_neithers() {
        // The newest state first, as the runtime lists them: a thread
        // started by 7 that has not run yet, then 7's own, then 9's.
        let mut threads = vec![
            thread(Some(7), 0x300),
            thread(Some(7), 0x200),
            thread(Some(9), 0x100),
            thread(None, 0x50),
        ];
        disown_shared_ids(&mut threads);
        let tids: Vec<_> = threads.iter().map(|t| (t.tstate, t.tid)).collect();
        assert_eq!(
            tids,
            [(0x300, None), (0x200, None), (0x100, Some(9)), (0x50, None)]
        );
    }
}
