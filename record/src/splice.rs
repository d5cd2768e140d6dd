//! Where a sample's Python frames go among its native frames, as pure
//! functions of what the recorder already has: the native stack (leaf
//! first), the positions of its eval-loop calls, and the walk's runs of
//! Python frames (one per eval-loop call, innermost first), each named.
//!
//! The rules: the innermost runs pair with the innermost eval-loop calls,
//! one for one — all of them, or, when the native stack is cut short of its
//! entry, as many runs as it has calls (the outer runs went with the frames
//! not unwound), or, when the walk stopped at its frame limit, as many calls
//! as it has runs (the outer calls keep their native frames). Any other
//! count means the walk is not this stack's, and nothing is spliced. Each
//! run stands where its eval-loop call was (the call kept under it with
//! `--python-interpreter`); the interpreter's frames between two runs are
//! left out (kept with `--python-interpreter`); the native frame right
//! after a run that is the run's own perf trampoline naming the same code
//! is left out.

use flamerec_format::{Frame, ModuleId};

/// How a sample's eval-loop calls and its walk's runs pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pairing {
    /// The innermost `n` calls with the innermost `n` runs.
    Paired(usize),
    /// The walk holds no run (the interpreter starting or ending).
    NoRun,
    /// The counts differ: the walk is not this stack's.
    Unpaired,
}

/// Pairs `evals` eval-loop calls with `runs` runs; `cut`: the native stack
/// ends short of its entry; `full`: the walk stopped at its frame limit.
/// Also whether the walk's limit decided the pairing (for the counts).
pub(crate) fn pair(evals: usize, runs: usize, cut: bool, full: bool) -> (Pairing, bool) {
    let runs = if cut { runs.min(evals) } else { runs };
    let limited = full && evals >= runs;
    let evals = if limited { runs } else { evals };
    let pairing = if evals != runs {
        Pairing::Unpaired
    } else if runs == 0 {
        Pairing::NoRun
    } else {
        Pairing::Paired(runs)
    };
    (pairing, limited)
}

/// One run, named, as it is placed: its frames (innermost first, with the
/// marker of outer frames not read where it was cut) and the code of its
/// outermost frame shown, if any (whose trampoline may follow it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placed<K> {
    pub(crate) frames: Vec<Frame>,
    pub(crate) outermost: Option<K>,
}

/// The interpreter's code right outside a stack's outermost run: the
/// functions through which C calls into the eval loop (`glue`) and its
/// functions (sorted by start), as file-offset ranges in its module.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outside<'a> {
    pub(crate) glue: &'a [(u64, u64)],
    pub(crate) functions: &'a [(u64, u64)],
}

impl Outside<'_> {
    /// Whether `address` is in a function that only calls the eval loop.
    fn is_glue(&self, address: u64) -> bool {
        self.glue.iter().any(|&(a, b)| (a..b).contains(&address))
    }

    /// Where the function holding `address` starts; `None` where no
    /// function the symbol tables size holds it (a stripped static one):
    /// never another function's start.
    fn function_of(&self, address: u64) -> Option<u64> {
        let after = self.functions.partition_point(|&(a, _)| a <= address);
        self.functions[..after]
            .iter()
            .rev()
            .take(4)
            .find(|&&(a, b)| (a..b).contains(&address))
            .map(|&(a, _)| a)
    }
}

/// The sample's frames with `runs` in place of the eval-loop calls at
/// `evals` (positions in `user`, innermost first, one per run). `binary`
/// is the interpreter's module; `interpreter` keeps its frames: between
/// two runs, and, with `outside` (where every eval-loop call paired),
/// right outside the outermost run, where the glue functions are left out
/// and the first other frame of the interpreter is shown as its function
/// alone (at its start: what the call into the eval loop inlined into it,
/// `_PyEval_Vector`, `_PyEval_EvalFrame`, is not named);
/// `trampoline(outermost, frame)` says whether `frame`, right after a run,
/// is a trampoline naming that run's outermost code (`Some(true)`: left
/// out), another trampoline (`Some(false)`: kept), or none (`None`).
pub(crate) fn merge<K: Copy>(
    user: &[Frame],
    evals: &[usize],
    runs: &[Placed<K>],
    binary: Option<ModuleId>,
    outside: Option<Outside<'_>>,
    interpreter: bool,
    mut trampoline: impl FnMut(K, &Frame) -> Option<bool>,
) -> Vec<Frame> {
    let placed: usize = runs.iter().map(|r| r.frames.len()).sum();
    let mut out = Vec::with_capacity(user.len() + placed);
    let mut next = 0;
    let mut outermost: Option<K> = None;
    // Right outside the outermost run, until the first frame kept.
    let mut beyond: Option<Outside<'_>> = None;
    for (i, f) in user.iter().enumerate() {
        if let (Some(&at), Some(run)) = (evals.get(next), runs.get(next)) {
            if at == i {
                if interpreter {
                    out.push(*f);
                }
                out.extend_from_slice(&run.frames);
                outermost = run.outermost;
                next += 1;
                beyond = outside.filter(|_| next == evals.len() && !interpreter);
                continue;
            }
        }
        let between_runs = next > 0 && next < evals.len() && Some(f.module) == binary;
        match outermost.take().and_then(|k| trampoline(k, f)) {
            Some(true) => {}
            Some(false) => {
                out.push(*f);
                beyond = None;
            }
            None if between_runs && !interpreter => {}
            None => match beyond.take() {
                Some(o) if Some(f.module) == binary && o.is_glue(f.address) => beyond = Some(o),
                Some(o) if Some(f.module) == binary => out.push(Frame {
                    address: o.function_of(f.address).unwrap_or(f.address),
                    ..*f
                }),
                _ => out.push(*f),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBC: ModuleId = 1;
    const PY: ModuleId = 2;
    const CODE: ModuleId = 3;
    const JIT: ModuleId = 4;

    fn f(module: ModuleId, address: u64) -> Frame {
        Frame { module, address }
    }

    /// A native stack, leaf first, from a compact spelling: `E` an
    /// eval-loop call, `p` another interpreter frame, `c` libc, `t` a
    /// trampoline; each numbered by its place.
    fn stack(s: &str) -> (Vec<Frame>, Vec<usize>) {
        let mut frames = Vec::new();
        let mut evals = Vec::new();
        for (i, c) in s.chars().enumerate() {
            let a = i as u64;
            frames.push(match c {
                'E' => {
                    evals.push(i);
                    f(PY, 1000 + a)
                }
                'p' => f(PY, a),
                't' => f(JIT, a),
                _ => f(LIBC, a),
            });
        }
        (frames, evals)
    }

    fn run(codes: &[u64]) -> Placed<u64> {
        Placed {
            frames: codes.iter().map(|&c| f(CODE, c)).collect(),
            outermost: codes.last().copied(),
        }
    }

    fn no_trampoline(_: u64, _: &Frame) -> Option<bool> {
        None
    }

    #[test]
    fn pairing() {
        let cases = [
            // evals, runs, cut, full → pairing, limited
            ((2, 2, false, false), (Pairing::Paired(2), false)),
            ((0, 0, false, false), (Pairing::NoRun, false)),
            ((1, 2, false, false), (Pairing::Unpaired, false)),
            ((3, 2, false, false), (Pairing::Unpaired, false)),
            // Cut: the outer runs went with the frames not unwound.
            ((1, 3, true, false), (Pairing::Paired(1), false)),
            ((3, 2, true, false), (Pairing::Unpaired, false)),
            // Full: the outer calls keep their native frames.
            ((5, 2, false, true), (Pairing::Paired(2), true)),
            ((2, 2, false, true), (Pairing::Paired(2), true)),
            ((1, 2, false, true), (Pairing::Unpaired, false)),
            // Cut and full: as many runs as calls, then as many calls.
            ((2, 4, true, true), (Pairing::Paired(2), true)),
            ((0, 3, true, false), (Pairing::NoRun, false)),
        ];
        for ((e, r, cut, full), want) in cases {
            assert_eq!(
                pair(e, r, cut, full),
                want,
                "{e} calls, {r} runs, cut {cut}, full {full}"
            );
        }
    }

    #[test]
    fn the_calls_into_the_eval_loop_go_from_above_the_outermost_run() {
        // leaf: E0 p1 p2 p3 c4; p1 is glue (`_PyEval_Vector` out of line),
        // p2 its C caller (at offset 2, in the function starting at 1).
        let (user, evals) = stack("Epppc");
        let outside = Outside {
            glue: &[(1, 2)],
            functions: &[(0, 1), (1, 3), (3, 4)],
        };
        let runs = [run(&[10])];
        let merged = |user: &[Frame], evals: &[usize], outside, interpreter| {
            merge(
                user,
                evals,
                &runs,
                Some(PY),
                outside,
                interpreter,
                no_trampoline,
            )
        };
        // p1 left out; p2 shown as its function alone (at its start: what
        // was inlined into it is not named); p3 and c4 as they were.
        let got = merged(&user, &evals, Some(outside), false);
        assert_eq!(got, vec![f(CODE, 10), f(PY, 1), user[3], user[4]]);
        // --python-interpreter, or no outside given (a walk that did not
        // pair every call): as they were.
        let kept = merged(&user, &evals, Some(outside), true);
        assert_eq!(kept, [&user[..1], &[f(CODE, 10)], &user[1..]].concat());
        let plain = merged(&user, &evals, None, false);
        assert_eq!(plain, [&[f(CODE, 10)], &user[1..]].concat());
        // A frame of other code right outside (a C extension, libc) stays.
        let (other, other_evals) = stack("Ecp");
        let got = merged(&other, &other_evals, Some(outside), false);
        assert_eq!(got, vec![f(CODE, 10), other[1], other[2]]);
        // A frame in no sized function (a static one stripped of its
        // symbol) stays where it was, not at an earlier function's start.
        let sparse = Outside {
            glue: &[],
            functions: &[(0, 1)],
        };
        let got = merged(&user, &evals, Some(sparse), false);
        assert_eq!(got, [&[f(CODE, 10)], &user[1..]].concat());
    }

    #[test]
    fn runs_stand_where_their_calls_were() {
        // leaf: c0 E1 p2 p3 E4 p5 c6 (libc start)
        let (user, evals) = stack("cEppEpc");
        let runs = [run(&[10, 11]), run(&[20])];
        let got = merge(&user, &evals, &runs, Some(PY), None, false, no_trampoline);
        // The frames between the two runs (p2 p3) are left out; the ones
        // outside every pair (c0, p5, c6) stay.
        let want = vec![
            user[0],
            f(CODE, 10),
            f(CODE, 11),
            f(CODE, 20),
            user[5],
            user[6],
        ];
        assert_eq!(got, want);
        // --python-interpreter keeps every native frame, each call under its run.
        let kept = merge(&user, &evals, &runs, Some(PY), None, true, no_trampoline);
        let want = vec![
            user[0],
            user[1],
            f(CODE, 10),
            f(CODE, 11),
            user[2],
            user[3],
            user[4],
            f(CODE, 20),
            user[5],
            user[6],
        ];
        assert_eq!(kept, want);
    }

    #[test]
    fn a_full_walk_pairs_the_innermost_calls_and_the_rest_stay_native() {
        let (user, evals) = stack("EpEpEc");
        let (pairing, limited) = pair(evals.len(), 1, false, true);
        assert_eq!((pairing, limited), (Pairing::Paired(1), true));
        let runs = [Placed {
            frames: vec![f(CODE, 1), f(0, 99)],
            outermost: None,
        }];
        let got = merge(
            &user,
            &evals[..1],
            &runs,
            Some(PY),
            None,
            false,
            no_trampoline,
        );
        // The cut run's marker (here f(0, 99)) stands above its frames;
        // the outer calls and what is between them stay native.
        let want = vec![
            f(CODE, 1),
            f(0, 99),
            user[1],
            user[2],
            user[3],
            user[4],
            user[5],
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_trampoline_naming_the_same_code_is_left_out() {
        // leaf: E0 t1 E2 t3 c4: each call made by a trampoline (-X perf).
        let (user, evals) = stack("EtEtc");
        let runs = [run(&[10]), run(&[20])];
        // t1 names code 10 (alike); t3 names other code than 20.
        let got = merge(&user, &evals, &runs, Some(PY), None, false, |code, fr| {
            (fr.module == JIT).then_some(code == 10)
        });
        assert_eq!(got, vec![f(CODE, 10), f(CODE, 20), user[3], user[4]]);
        // Without names for trampolines, they stay.
        let got = merge(&user, &evals, &runs, Some(PY), None, false, no_trampoline);
        assert_eq!(
            got,
            vec![f(CODE, 10), user[1], f(CODE, 20), user[3], user[4]]
        );
    }
}
