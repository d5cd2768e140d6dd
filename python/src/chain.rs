//! The rules of a CPython frame chain, written once: which frame is a
//! Python frame, which ends an eval-loop call's run (3.11's entry frame,
//! every frame object before 3.11), which is owned by the C stack (the
//! shim an eval-loop call pushes, 3.12+) or is the thread's base frame
//! (3.15), which is incomplete; and where a run starts and ends.
//!
//! Both walks are built on it: the reader of a thread's frames from user
//! space ([`crate::Interpreter::stack`]) and the runs of the kernel's walk
//! at a sample ([`crate::bpf::Record::runs`]) each turn the frames they
//! read into [`Seen`]s and feed them, innermost first, to a [`Chain`].

use crate::layout::{FrameModel, Layout, OWNED_BY_CSTACK};
use crate::{PyFrame, Run};

/// `_PyInterpreterFrame.owner` of a generator's or coroutine's frame
/// (3.11+).
pub const OWNED_BY_GENERATOR: u8 = 1;

/// One frame of a chain, as a walk read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// Its address.
    pub addr: u64,
    /// Its code object (a tagged reference's flags cleared).
    pub code: u64,
    /// Its instruction word as read: `f_lasti` (3.8–3.10, an int), else the
    /// instruction pointer.
    pub instr: u64,
    /// 3.11: `is_entry`.
    pub entry: bool,
    /// 3.11+: `owner`.
    pub owner: u8,
    /// [`crate::code_identity`] of its code as the walk read it (0: not read).
    pub identity: u64,
    /// Its older-frame pointer is null: the chain ends with it.
    pub oldest: bool,
}

/// What a frame is to the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A Python frame; with `ends`, the outermost of its eval-loop call.
    Python { ends: bool },
    /// The frame an eval-loop call keeps on the C stack below the frames it
    /// runs (3.12+: `owner` 3 — 3.12's and 3.13's `FRAME_OWNED_BY_CSTACK`,
    /// 3.14's and 3.15's `FRAME_OWNED_BY_INTERPRETER`): it ends the run
    /// above it, and is no Python frame.
    Shim,
    /// The base frame a 3.15 thread's chain ends in: no call of its own.
    Base,
    /// Another frame no code runs in (3.14's `FRAME_OWNED_BY_CSTACK`).
    Other,
}

fn role(l: &Layout, f: &Seen) -> Role {
    match l.model {
        FrameModel::Objects { .. } => Role::Python { ends: true },
        FrameModel::EntryFlag => Role::Python { ends: f.entry },
        FrameModel::EntryShim { .. } => match f.owner {
            OWNED_BY_CSTACK if l.base_frame && f.oldest => Role::Base,
            OWNED_BY_CSTACK => Role::Shim,
            o if o > OWNED_BY_CSTACK => Role::Other,
            _ => Role::Python { ends: false },
        },
    }
}

/// Whether `f` is a Python frame (a walk that can tell an incomplete
/// frame asks only of these).
pub(crate) fn is_python(l: &Layout, f: &Seen) -> bool {
    matches!(role(l, f), Role::Python { .. })
}

impl Seen {
    /// The frame as a [`PyFrame`]: its instruction counted as the version
    /// counts it (`f_lasti`; 3.11+ code units from the code's first).
    pub(crate) fn frame(&self, l: &Layout) -> PyFrame {
        let instr = match l.model {
            FrameModel::Objects { .. } => i64::from(self.instr as u32 as i32),
            _ => {
                let start = self.code.wrapping_add(l.code_adaptive.unwrap_or(0));
                (self.instr as i64).wrapping_sub(start as i64) / 2
            }
        };
        PyFrame {
            code: self.code,
            instr,
            identity: self.identity,
            generator: self.owner == OWNED_BY_GENERATOR,
        }
    }
}

/// Whether a 3.11+ frame is incomplete: pushed, not yet past its code's
/// first traceable instruction (`first_traceable`, the code object's
/// `_co_firsttraceable`), and not a generator's (a generator's frame is
/// complete from its creation). CPython's own tracebacks leave such a
/// frame out, and so does flamerec.
pub fn is_incomplete(frame: &PyFrame, first_traceable: i64) -> bool {
    !frame.generator && frame.instr < first_traceable
}

/// Frames cut into runs, innermost first.
#[derive(Debug, Default)]
pub(crate) struct Chain {
    runs: Vec<Run>,
    current: Run,
    /// 3.11: the markers of the eval-loop calls, innermost first (each
    /// call's `_PyCFrame`, read apart from the frames).
    entries: Vec<u64>,
}

impl Chain {
    /// A chain whose 3.11 entry frames are marked by `entries`.
    pub(crate) fn new(entries: Vec<u64>) -> Chain {
        Chain {
            entries,
            ..Chain::default()
        }
    }

    /// Adds `f`, the next older frame; `keep`: a Python frame is kept (a
    /// reader that can tell an incomplete frame leaves it out here, its
    /// role in the chain kept).
    pub(crate) fn push(&mut self, l: &Layout, f: &Seen, keep: bool) {
        match role(l, f) {
            Role::Python { ends } => {
                if keep {
                    self.current.frames.push(f.frame(l));
                }
                if ends {
                    let marker = self.entries.get(self.runs.len()).copied();
                    self.close(marker);
                }
            }
            Role::Shim => self.close(Some(f.addr)),
            Role::Base | Role::Other => {}
        }
    }

    /// Ends the run being read (with its marker, if known); an empty run
    /// that no marker names is no eval-loop call.
    fn close(&mut self, marker: Option<u64>) {
        let mut run = std::mem::take(&mut self.current);
        run.marker = marker;
        if !run.frames.is_empty() || marker.is_some() {
            self.runs.push(run);
        }
    }

    /// The runs. With `cut` (the walk stopped before the chain's end), the
    /// frames after the last run ended are the innermost of a run whose
    /// rest was not read: that run is [cut](Run::cut).
    pub(crate) fn finish(mut self, cut: bool) -> Vec<Run> {
        if !self.current.frames.is_empty() {
            self.current.cut = cut;
            self.runs.push(std::mem::take(&mut self.current));
        }
        self.runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(minor: u8) -> Layout {
        Layout::for_version(3, minor).expect("a table")
    }

    /// A frame at `addr` running code `code`.
    fn frame(addr: u64, code: u64) -> Seen {
        Seen {
            addr,
            code,
            ..Seen::default()
        }
    }

    /// The runs as (codes, marker, cut).
    fn runs(
        l: &Layout,
        frames: &[(Seen, bool)],
        entries: Vec<u64>,
        cut: bool,
    ) -> Vec<(Vec<u64>, Option<u64>, bool)> {
        let mut chain = Chain::new(entries);
        for (f, keep) in frames {
            chain.push(l, f, *keep);
        }
        chain
            .finish(cut)
            .into_iter()
            .map(|r| (r.frames.iter().map(|f| f.code).collect(), r.marker, r.cut))
            .collect()
    }

    #[test]
    fn before_3_11_every_frame_is_its_own_call() {
        let l = layout(10);
        let got = runs(
            &l,
            &[(frame(1, 10), true), (frame(2, 20), true)],
            vec![],
            false,
        );
        assert_eq!(got, [(vec![10], None, false), (vec![20], None, false)]);
    }

    #[test]
    fn in_3_11_an_entry_frame_ends_its_call() {
        let l = layout(11);
        let entry = |addr, code| Seen {
            entry: true,
            ..frame(addr, code)
        };
        let frames = [
            (frame(1, 10), true),
            // Incomplete: left out, but its run still ends with it.
            (entry(2, 20), false),
            (frame(3, 30), true),
            (entry(4, 40), true),
        ];
        let got = runs(&l, &frames, vec![0xa0, 0xb0], false);
        assert_eq!(
            got,
            [
                (vec![10], Some(0xa0), false),
                (vec![30, 40], Some(0xb0), false)
            ]
        );
    }

    #[test]
    fn from_3_12_a_shim_ends_the_call_above_it() {
        let l = layout(12);
        let owned = |addr, code, owner| Seen {
            owner,
            ..frame(addr, code)
        };
        let frames = [
            (frame(1, 10), true),
            (owned(2, 20, OWNED_BY_GENERATOR), true),
            (owned(3, 0, OWNED_BY_CSTACK), true),
            // 3.14's FRAME_OWNED_BY_CSTACK: no code of its own.
            (owned(4, 0, OWNED_BY_CSTACK + 1), true),
            (frame(5, 50), true),
        ];
        let got = runs(&l, &frames, vec![], true);
        assert_eq!(
            got,
            [(vec![10, 20], Some(3), false), (vec![50], None, true)],
            "the run after the last shim was not read whole: cut"
        );
        // 3.15: the oldest frame owned like a shim is the thread's base
        // frame, no call; before 3.15 it is a call's shim.
        let base = [
            (frame(1, 10), true),
            (
                Seen {
                    oldest: true,
                    ..owned(2, 0, OWNED_BY_CSTACK)
                },
                true,
            ),
        ];
        let mut l15 = l.clone();
        l15.base_frame = true;
        assert_eq!(runs(&l15, &base, vec![], false), [(vec![10], None, false)]);
        assert_eq!(runs(&l, &base, vec![], false), [(vec![10], Some(2), false)]);
    }

    #[test]
    fn a_generators_frame_is_never_incomplete() {
        let l = layout(12);
        let mut f = Seen {
            code: 0x1000,
            // Two code units past the code's first instruction.
            instr: 0x1000 + l.code_adaptive.unwrap() + 4,
            ..Seen::default()
        };
        assert!(is_incomplete(&f.frame(&l), 3));
        assert!(!is_incomplete(&f.frame(&l), 2));
        f.owner = OWNED_BY_GENERATOR;
        assert!(!is_incomplete(&f.frame(&l), 3));
    }
}
