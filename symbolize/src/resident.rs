//! Naming the frames of a recording while it grows, for the recorder to
//! embed: a [`Namer`] takes the frames new since its last call and names
//! them, keeping each binary open between calls, so the end of a recording
//! only names what appeared last — and a binary deleted while the command
//! ran (a build's scratch executables) was read while it was there.
//!
//! Each binary is served by a thread of its own that opens it at its first
//! address the symbol cache lacks and keeps it open (its parsed symbol
//! table, its DWARF units as far as read) while it answers. At most
//! [`MAX_OPEN`] binaries stay open; the one asked least recently closes
//! first and opens again when asked again. What a binary's thread looks up
//! goes to the symbol cache as it grows and when it closes.

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flamerec_format::{Frame, FrameId, Module, ModuleId, ModuleKind};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::cache::{AddressTable, SymbolCache};
use crate::lookup::{cache_write_failed, with_binary, ModuleNames};
use crate::types::RawName;
use crate::{Embedding, Located, NameOptions};

/// Most binaries kept open at once (each holds its symbol table and the
/// DWARF read so far, and a thread).
const MAX_OPEN: usize = 16;

/// Names frames of file modules as they are added (always with inlined
/// frames), for embedding; see the module docs.
pub struct Namer {
    opts: NameOptions,
    modules: Vec<Module>,
    /// Where modules whose recorded path does not reach them are read.
    located: FxHashMap<ModuleId, Located>,
    open: FxHashMap<ModuleId, Resident>,
    /// Modules whose binary cannot be used (missing, unreadable, another build).
    unusable: FxHashSet<ModuleId>,
    /// Calls so far (each open binary remembers the last that asked it).
    calls: u64,
    out: Embedding,
}

/// One open binary's thread.
struct Resident {
    ask: Sender<Vec<(FrameId, u64)>>,
    answers: Receiver<Answer>,
    thread: JoinHandle<Option<String>>,
    last_asked: u64,
}

/// What a binary's thread answers to one batch of its frames.
enum Answer {
    /// Per frame, its names (demangled, outermost first; empty where the
    /// binary has none).
    Names(Vec<(FrameId, Vec<String>)>),
    /// The binary cannot be used.
    Unusable,
}

impl Namer {
    /// A namer finding binaries and their debug files as `opts` says
    /// (`opts.inline` is taken as true).
    pub fn new(opts: &NameOptions) -> Self {
        Namer {
            opts: NameOptions {
                inline: true,
                ..opts.clone()
            },
            modules: Vec::new(),
            located: FxHashMap::default(),
            open: FxHashMap::default(),
            unusable: FxHashSet::default(),
            calls: 0,
            out: Embedding::default(),
        }
    }

    /// Names `frames`, whose ids are `first`, `first + 1`, …, after
    /// learning `modules` (the modules new since the last call, whose ids
    /// follow on from the ones it knows). Frames of other than file
    /// modules are left out, as are those of unusable binaries (counted).
    pub fn add(&mut self, modules: &[Module], first: FrameId, frames: &[Frame]) {
        self.calls += 1;
        self.modules.extend_from_slice(modules);
        let mut by_module: FxHashMap<ModuleId, Vec<(FrameId, u64)>> = FxHashMap::default();
        for (id, f) in (first..).zip(frames) {
            let is_file = self
                .modules
                .get(f.module as usize)
                .is_some_and(|m| m.kind == ModuleKind::File);
            if !is_file {
                continue;
            }
            if self.unusable.contains(&f.module) {
                self.out.unusable_frames += 1;
                continue;
            }
            by_module.entry(f.module).or_default().push((id, f.address));
        }
        // Every binary is asked first, then the answers are taken: the
        // binaries work at once, each on its thread.
        let mut asked = Vec::with_capacity(by_module.len());
        for (module, frames) in by_module {
            let n = frames.len();
            if self.ask(module, frames) {
                asked.push((module, n));
            } else {
                self.left_out(module, n);
            }
        }
        for (module, n) in asked {
            let answer = self.open.get(&module).and_then(|r| r.answers.recv().ok());
            match answer {
                Some(Answer::Names(names)) => self.out.names.extend(names),
                Some(Answer::Unusable) | None => {
                    self.left_out(module, n);
                    self.close(module);
                }
            }
        }
        while self.open.len() > MAX_OPEN {
            let Some((&oldest, _)) = self.open.iter().min_by_key(|(_, r)| r.last_asked) else {
                break;
            };
            self.close(oldest);
        }
    }

    /// Module `module`'s binary is read as `at` says, not at its recorded
    /// path (told before its frames are added).
    pub fn locate(&mut self, module: ModuleId, at: Located) {
        self.located.insert(module, at);
    }

    /// The names found since the last call (the rest of the [`Embedding`]
    /// stays for [`Namer::finish`]).
    pub fn take_names(&mut self) -> Vec<(FrameId, Vec<String>)> {
        std::mem::take(&mut self.out.names)
    }

    /// Closes every binary (writing the symbol cache) and returns the names.
    pub fn finish(mut self) -> Embedding {
        // Every thread is told first, so they write the cache at once.
        let threads: Vec<_> = self.open.drain().map(|(_, r)| r.thread).collect();
        for t in threads {
            self.joined(t);
        }
        self.out
    }

    /// Sends `frames` to the thread of `module`, starting it if needed;
    /// false when that is not possible.
    fn ask(&mut self, module: ModuleId, frames: Vec<(FrameId, u64)>) -> bool {
        let calls = self.calls;
        if !self.open.contains_key(&module) {
            let Some(m) = self.modules.get(module as usize).cloned() else {
                return false;
            };
            let at = self.located.get(&module).cloned();
            match Resident::start(m, at, &self.opts) {
                Some(r) => self.open.insert(module, r),
                None => return false,
            };
        }
        let Some(r) = self.open.get_mut(&module) else {
            return false;
        };
        r.last_asked = calls;
        r.ask.send(frames).is_ok()
    }

    fn left_out(&mut self, module: ModuleId, frames: usize) {
        if self.unusable.insert(module) {
            self.out.unusable_modules += 1;
        }
        self.out.unusable_frames += frames;
    }

    fn close(&mut self, module: ModuleId) {
        let Some(r) = self.open.remove(&module) else {
            return;
        };
        drop(r.ask);
        self.joined(r.thread);
    }

    /// Waits for a binary's thread whose batches ended.
    fn joined(&mut self, thread: JoinHandle<Option<String>>) {
        if let Ok(Some(warning)) = thread.join() {
            if !self.out.warnings.contains(&warning) {
                self.out.warnings.push(warning);
            }
        }
    }
}

impl Resident {
    fn start(m: Module, at: Option<Located>, opts: &NameOptions) -> Option<Self> {
        let (ask, asked) = mpsc::channel();
        let (answer, answers) = mpsc::channel();
        let opts = opts.clone();
        let thread = std::thread::Builder::new()
            .name("flamerec-names".into())
            .spawn(move || serve(&m, at.as_ref(), &opts, asked, &answer))
            .ok()?;
        Some(Resident {
            ask,
            answers,
            thread,
            last_asked: 0,
        })
    }
}

/// A binary's thread: answers each batch of `(frame, file offset)` from
/// the symbol cache while it can, then opens the binary and keeps it open
/// until the batches end. Returns the warning of a failed cache write.
fn serve(
    m: &Module,
    at: Option<&Located>,
    opts: &NameOptions,
    asked: Receiver<Vec<(FrameId, u64)>>,
    answer: &Sender<Answer>,
) -> Option<String> {
    let cache = opts.cache_dir.clone().map(SymbolCache::new);
    let dirs = &opts.debug_dirs;
    let mut names = ModuleNames::cached(m, cache.as_ref(), dirs, true);
    let mut demangled = FxHashMap::default();
    let mut batches = asked.iter();
    let mut first_miss = None;
    for frames in batches.by_ref() {
        if frames
            .iter()
            .all(|(_, o)| names.table.entries.contains_key(o))
        {
            let _ = answer.send(Answer::Names(chains(&names.table, &frames, &mut demangled)));
        } else {
            first_miss = Some(frames);
            break;
        }
    }
    let first_miss = first_miss?;
    let mut saver = Saver::default();
    let opened = with_binary(
        m,
        at,
        dirs,
        true,
        |_| None,
        |binary| {
            names.opened(binary);
            binary.index_symbols();
            for frames in std::iter::once(first_miss).chain(batches.by_ref()) {
                let missing = names.lacks(frames.iter().map(|&(_, o)| o));
                if !missing.is_empty() {
                    names.look_up(binary, missing);
                    saver.grew(&names);
                }
                let _ = answer.send(Answer::Names(chains(&names.table, &frames, &mut demangled)));
                binary.release_pages();
            }
        },
    );
    if opened.is_err() {
        let _ = answer.send(Answer::Unusable);
        for _ in batches {
            let _ = answer.send(Answer::Unusable);
        }
        return None;
    }
    saver.finish(&names)
}

/// Writes a binary's names to the symbol cache as they grow: at once the
/// first time, then at most every [`SAVE_EVERY`], and when its batches end
/// (a recorder killed midway still leaves the cache its folds can use),
/// with the index of its DWARF functions.
#[derive(Default)]
struct Saver {
    saved: Option<Instant>,
    unsaved: bool,
    error: Option<String>,
}

/// Least time between two writes of one binary's cache file. Each write
/// is the binary's whole table: every 2 s it was a tenth of an always-on
/// recorder's naming (a table growing over hours, written again and
/// again); a recorder killed loses at most this much of its lookups, which
/// its folds then do again.
const SAVE_EVERY: Duration = Duration::from_secs(10);

impl Saver {
    fn grew(&mut self, names: &ModuleNames<'_>) {
        self.unsaved = true;
        if self.saved.is_none_or(|t| t.elapsed() >= SAVE_EVERY) {
            self.saved = Some(Instant::now());
            self.unsaved = false;
            if let Err(e) = names.store_names() {
                self.error.get_or_insert_with(|| cache_write_failed(&e));
            }
        }
    }

    /// Writes what is unsaved; the warning of a failed write, if any.
    fn finish(mut self, names: &ModuleNames<'_>) -> Option<String> {
        let stored = if self.unsaved {
            names.store()
        } else {
            names.store_dies()
        };
        if let Err(e) = stored {
            self.error.get_or_insert_with(|| cache_write_failed(&e));
        }
        self.error
    }
}

/// The demangled names of `frames` from `table`, each distinct name
/// demangled once for the binary's whole recording (`demangled` lives as
/// long as its thread: later batches name the same functions again).
fn chains(
    table: &AddressTable,
    frames: &[(FrameId, u64)],
    demangled: &mut FxHashMap<RawName, String>,
) -> Vec<(FrameId, Vec<String>)> {
    frames
        .iter()
        .map(|&(frame, offset)| {
            let chain = table
                .entries
                .get(&offset)
                .map(|names| {
                    names
                        .iter()
                        .map(|r| match demangled.get(r) {
                            Some(d) => d.clone(),
                            None => {
                                let d = r.demangle();
                                demangled.insert(r.clone(), d.clone());
                                d
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            (frame, chain)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> Module {
        Module {
            kind: ModuleKind::File,
            path: path.into(),
            build_id: Vec::new(),
        }
    }

    /// The file offset of `exe`'s executable mapping in this process, and
    /// a step that spreads 50 offsets over it.
    fn code_of(exe: &std::path::Path) -> (u64, u64) {
        let code = flamerec_testkit::maps::own_code_mapping(exe);
        (code.pgoff, (code.end - code.start) / 50)
    }

    fn sorted(mut e: Embedding) -> Vec<(FrameId, Vec<String>)> {
        e.names.sort();
        e.names
    }

    #[test]
    fn frames_named_in_batches_get_the_names_of_one_batch() {
        let exe = std::env::current_exe().expect("the test binary");
        let modules = vec![
            file(exe.to_str().expect("utf-8 path")),
            Module {
                kind: ModuleKind::Kernel,
                path: "[kernel.kallsyms]".into(),
                build_id: Vec::new(),
            },
            file("/nonexistent/flamerec-test-binary"),
        ];
        // Offsets spread over the test binary's code (some repeated across
        // batches), a kernel frame (never embedded) and a missing binary.
        let (code, step) = code_of(&exe);
        let mut frames: Vec<Frame> = (0..40u64)
            .map(|i| Frame {
                module: 0,
                address: code + i * step,
            })
            .collect();
        frames.push(Frame {
            module: 1,
            address: 0xffff_ffff_8100_0000,
        });
        frames.extend((0..3).map(|i| Frame {
            module: 2,
            address: 0x1000 + i,
        }));
        frames.extend((0..10u64).map(|i| Frame {
            module: 0,
            address: code + i * step + 1,
        }));
        let opts = NameOptions::default();

        let mut one = Namer::new(&opts);
        one.add(&modules, 0, &frames);
        let one = one.finish();

        let mut many = Namer::new(&opts);
        many.add(&modules[..1], 0, &frames[..7]);
        many.add(&modules[1..], 7, &frames[7..42]);
        many.add(&[], 42, &frames[42..]);
        let many = many.finish();

        assert_eq!((one.unusable_modules, one.unusable_frames), (1, 3));
        assert_eq!((many.unusable_modules, many.unusable_frames), (1, 3));
        let (one, many) = (sorted(one), sorted(many));
        assert_eq!(one.len(), 50, "every file frame of a usable binary");
        assert!(one.iter().any(|(_, names)| !names.is_empty()), "{one:?}");
        assert_eq!(one, many);
    }
}
