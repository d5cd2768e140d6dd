//! A sample's Python frames: its walk spliced into its native stack (the
//! rules are `splice`'s), and one frame per code object (or per line with
//! `--python-lines`), named once from the process's memory.

use std::io;

use flamerec_convert::Converter;
use flamerec_format::{Frame, Module, ModuleId, ModuleKind};
use flamerec_python::bpf::Record;
use flamerec_python::{chain, code_identity, CodeInfo, Memory, Process, PyFrame, Run};

use super::Python;
use crate::pynames::MODULE;
use crate::splice;

/// The name of a Python frame whose code object was freed after the
/// sample, and another made at its address, before it was named.
const GONE: &str = "[Python code freed before it was named]";
/// The frame standing above the innermost Python frames of an eval-loop
/// call whose outer frames one walk could not read (more than
/// [`flamerec_python::bpf::MAX_BPF_FRAMES`] deep).
const DEEPER: &str = "[outer Python frames not read]";

/// A code object's frame.
pub(super) struct CodeFrame {
    frame: Frame,
    /// Its name, file and line table, for frames by line and for telling
    /// the perf trampoline that names it.
    info: CodeInfo,
    /// 3.11+: instructions before this are an incomplete frame's.
    first_traceable: Option<i64>,
}

impl Python {
    /// Splices `walk` into `user` (sample of `pid`, leaf first): each run of
    /// Python frames where its eval-loop call is, the interpreter's frames
    /// between two runs left out. Where `user` is `cut` short of the
    /// thread's entry, its eval-loop calls are the innermost ones and pair
    /// with as many innermost runs; the outer runs go with the native
    /// frames that were not unwound (the stack stays cut). Whether it was
    /// spliced (the walk paired with the stack).
    pub(crate) fn splice<'a, W: io::Write>(
        &mut self,
        conv: &mut Converter<W>,
        pid: u32,
        walk: &Record,
        user: &mut Vec<Frame>,
        cut: bool,
        jit_name: impl Fn(ModuleId) -> Option<&'a str>,
    ) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        if p.binary.is_none() {
            p.place(pid, conv);
        }
        let p = &self.procs[&pid];
        let binary = p.binary;
        let runs = walk.runs(&p.interp.layout);
        let in_eval = |f: &Frame| {
            Some(f.module) == binary && p.eval.iter().any(|&(a, b)| (a..b).contains(&f.address))
        };
        let evals: Vec<usize> = (0..user.len()).filter(|&i| in_eval(&user[i])).collect();
        let (pairing, limited) = splice::pair(evals.len(), runs.len(), cut, walk.is_cut());
        if limited && walk.is_full() {
            self.stats.walks_full += 1;
        }
        let n = match pairing {
            splice::Pairing::Paired(n) => n,
            // Not in Python code (the interpreter starting or ending).
            splice::Pairing::NoRun => return false,
            splice::Pairing::Unpaired => {
                self.stats.unpaired += 1;
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.native_only += 1;
                }
                // The thread's state may have been taken for another's
                // (read while a thread was starting): read the states again.
                self.stale.insert(pid);
                return false;
            }
        };
        let placed: Vec<splice::Placed<(u64, u64)>> = runs[..n]
            .iter()
            .map(|run| self.placed(conv, pid, run))
            .collect();
        let (code_frames, stats) = (&self.code_frames, &mut self.stats);
        // Right outside the outermost call, where every call paired.
        let outside = self
            .procs
            .get(&pid)
            .filter(|_| n == evals.len())
            .map(|p| splice::Outside {
                glue: &p.interp.glue,
                functions: &p.interp.functions,
            });
        *user = splice::merge(
            user,
            &evals[..n],
            &placed,
            binary,
            outside,
            self.shown.interpreter,
            |(code, id), f| {
                let cf = code_frames.get(&(pid, code, id))?;
                let name = jit_name(f.module)?;
                if names_code(name, &cf.info) {
                    stats.trampolines_named_alike += 1;
                    return Some(true);
                }
                if name.starts_with(crate::pynames::PY_PREFIX) {
                    stats.trampolines_named_otherwise += 1;
                }
                Some(false)
            },
        );
        self.stats.spliced += 1;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.shown += 1;
        }
        true
    }

    /// One run of `pid`'s Python frames, named: each frame whose code can
    /// be read (from its first traceable instruction on), and the marker
    /// of outer frames not read where the run was cut.
    fn placed<W: io::Write>(
        &mut self,
        conv: &mut Converter<W>,
        pid: u32,
        run: &Run,
    ) -> splice::Placed<(u64, u64)> {
        let mut frames = Vec::with_capacity(run.frames.len() + 1);
        let mut outermost = None;
        for py in &run.frames {
            let Some((frame_of_code, first_traceable)) =
                self.code_frame(conv, pid, py.code, py.identity)
            else {
                continue;
            };
            if first_traceable.is_some_and(|first| chain::is_incomplete(py, first)) {
                continue;
            }
            let frame = match self.shown.lines {
                true => self.line_frame(conv, pid, py),
                false => None,
            };
            frames.push(frame.unwrap_or(frame_of_code));
            outermost = Some((py.code, py.identity));
        }
        if run.cut {
            // Its outer frames were not read: said, not hidden.
            frames.push(self.marker_frame(conv, DEEPER));
            outermost = None;
        }
        splice::Placed { frames, outermost }
    }

    /// The frame of code object `code` of `pid` (`identity` as the walk
    /// read it at the sample), named the first time, and its first
    /// traceable instruction (3.11+). `None` where the code cannot be read;
    /// the [`GONE`] frame where it is no longer the one the sample ran
    /// (freed since, and another made at its address).
    fn code_frame<W: io::Write>(
        &mut self,
        conv: &mut Converter<W>,
        pid: u32,
        code: u64,
        identity: u64,
    ) -> Option<(Frame, Option<i64>)> {
        if let Some(cf) = self.code_frames.get(&(pid, code, identity)) {
            return Some((cf.frame, cf.first_traceable));
        }
        let p = self.procs.get(&pid)?;
        let mem = Process(pid);
        let layout = &p.interp.layout;
        let at_sample = self.names_read.remove(&(pid, code, identity));
        // Read now: still the code the sample ran? If not, it is named as
        // the walk read it at the sample, or shown as gone — never named
        // after the code there now.
        let now = || {
            let info = CodeInfo::read(&mem, layout, code).ok()?;
            let first_traceable = match layout.code_firsttraceable {
                Some(at) => Some(i64::from(mem.i32(code + at).ok()?)),
                None => None,
            };
            let same = identity == 0 || code_identity(&mem, layout, code).ok()? == identity;
            Some((info, first_traceable, same))
        };
        let (info, first_traceable) = match (now(), at_sample) {
            (Some((info, first, true)), _) => (info, first),
            (_, Some((name, file))) => {
                let info = CodeInfo {
                    name,
                    file,
                    first_line: 0,
                    linetable: Vec::new(),
                };
                (info, None)
            }
            (Some((_, _, false)), None) => {
                self.stats.code_gone += 1;
                return Some((self.marker_frame(conv, GONE), None));
            }
            (None, None) => return None,
        };
        let frame = self.new_frame(conv, format!("{} ({})", info.name, info.file));
        let cf = CodeFrame {
            frame,
            info,
            first_traceable,
        };
        self.code_frames.insert((pid, code, identity), cf);
        Some((frame, first_traceable))
    }

    /// The frame of Python frame `py` of `pid` at its instruction
    /// (`qualname (file:line)`), once its code's frame is made; `None`
    /// where the line table gives the instruction no line.
    fn line_frame<W: io::Write>(
        &mut self,
        conv: &mut Converter<W>,
        pid: u32,
        py: &PyFrame,
    ) -> Option<Frame> {
        let cf = self.code_frames.get(&(pid, py.code, py.identity))?;
        let line = cf
            .info
            .line(&self.procs.get(&pid)?.interp.layout, py.instr)?;
        if let Some(&f) = self.line_frames.get(&(pid, py.code, py.identity, line)) {
            return Some(f);
        }
        let name = format!("{} ({}:{line})", cf.info.name, cf.info.file);
        let frame = self.new_frame(conv, name);
        self.line_frames
            .insert((pid, py.code, py.identity, line), frame);
        Some(frame)
    }

    /// The frame named `text` (one of [`GONE`] and [`DEEPER`]): what is
    /// shown for Python frames that cannot be named.
    fn marker_frame<W: io::Write>(&mut self, conv: &mut Converter<W>, text: &'static str) -> Frame {
        if let Some(&f) = self.markers.get(text) {
            return f;
        }
        let f = self.new_frame(conv, text.to_string());
        self.markers.insert(text, f);
        f
    }

    /// A new frame of the [`MODULE`], named `name`.
    fn new_frame<W: io::Write>(&mut self, conv: &mut Converter<W>, name: String) -> Frame {
        let module = *self.module.get_or_insert_with(|| {
            conv.writer_mut().module(&Module {
                kind: ModuleKind::Anonymous,
                path: MODULE.into(),
                build_id: Vec::new(),
            })
        });
        self.next_address += 1;
        let frame = Frame {
            module,
            address: self.next_address,
        };
        let id = conv.writer_mut().frame(frame);
        self.names.push((id, vec![name]));
        frame
    }
}

/// Whether `name`, a JIT frame's, is the perf trampoline CPython writes for
/// `code`: `py::qualname:file`.
fn names_code(name: &str, code: &CodeInfo) -> bool {
    name.strip_prefix(crate::pynames::PY_PREFIX)
        .and_then(|r| r.strip_suffix(code.file.as_str()))
        .and_then(|r| r.strip_suffix(':'))
        == Some(code.name.as_str())
}
