//! The reader against real CPythons: every CPython on this machine runs
//! `programs/parked.py`, whose threads park under known stacks and write
//! what the interpreter itself says of them (`sys._current_frames()`); the
//! walk from outside must name the same frames, innermost first, with the
//! same lines, and cut them into runs where each eval-loop call begins.
//!
//! Interpreters looked for: pyenv's (`$PYENV_ROOT` or `~/.pyenv`, every
//! `versions/3.X.Y/bin/python3.X`) and the system's `/usr/bin/python3.X`.
//! Every minor version from 3.8 to 3.13 must be among them, or the test
//! fails naming what is missing, unless `FLAMEREC_SKIP_PYTHON_TESTS=1`:
//! then the missing ones are skipped by name and the others still read.
//! Reading another process's memory needs root or the right to trace it.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flamerec_python::{bpf, chain, CodeInfo, FrameModel, Interpreter, Memory, Process, PyFrame};
use flamerec_testkit::pythons_or_skip;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/parked.py");

/// The script running under `python`, with its threads parked, and what it
/// says of their stacks.
struct Parked {
    child: Child,
    _dir: tempfile::TempDir,
    expected: BTreeMap<u32, Vec<(String, i32)>>,
}

impl Parked {
    fn start(python: &Path) -> Parked {
        let dir = tempfile::tempdir().expect("temporary directory");
        let out = dir.path().join("stacks.json");
        let mut child = Command::new(python)
            .arg(SCRIPT)
            .arg(&out)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        // Generous: a busy machine slows the start; a failure shows at once.
        let end = Instant::now() + Duration::from_secs(60);
        while !out.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{} ended ({status}) before its threads parked",
                    python.display()
                );
            }
            assert!(
                Instant::now() < end,
                "{}: threads never parked",
                python.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let text = std::fs::read_to_string(&out).expect("the script's report");
        let raw: HashMap<String, Vec<(String, i32)>> =
            serde_json::from_str(&text).expect("the script's report is JSON");
        let expected = raw
            .into_iter()
            .map(|(tid, stack)| (tid.parse().expect("a native thread id"), stack))
            .collect();
        Parked {
            child,
            _dir: dir,
            expected,
        }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tids(pid: u32) -> Vec<(u32, u32)> {
    let tids = flamerec_python::thread_ids(pid);
    assert!(!tids.is_empty(), "the threads of {pid}");
    tids
}

#[test]
fn every_cpython_here_is_read_as_it_reads_itself() {
    let found = pythons_or_skip(8..=13);
    for (minor, python) in found {
        let what = python.display().to_string();
        let parked = Parked::start(&python);
        let pid = parked.child.id();
        let interp = Interpreter::find(pid)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .unwrap_or_else(|| panic!("{what}: no CPython runtime found in process {pid}"));
        assert_eq!(interp.version.1, minor, "{what}");
        let mem = Process(pid);
        // The exact version, as the interpreter says it (3.8–3.10's binary
        // does not: their runtime's text does).
        let mut interp = interp;
        assert!(interp.learn_micro(&mem), "{what}: its micro version");
        let own = Command::new(&python)
            .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
            .output()
            .expect("its version");
        let (a, b, c) = interp.version;
        assert_eq!(
            format!("{a}.{b}.{c}"),
            String::from_utf8_lossy(&own.stdout).trim(),
            "{what}"
        );
        let threads = interp
            .threads(&mem, &tids(pid))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        for (tid, expected) in &parked.expected {
            let t = threads
                .iter()
                .find(|t| t.tid == Some(*tid))
                .unwrap_or_else(|| panic!("{what}: no thread state for thread {tid}"));
            assert!(!t.cut, "{what}: thread {tid} cut");
            let read: Vec<(String, i32)> = t
                .runs
                .iter()
                .flat_map(|r| &r.frames)
                .map(|f| {
                    let code = CodeInfo::read(&mem, &interp.layout, f.code)
                        .unwrap_or_else(|e| panic!("{what}: code object at {:#x}: {e}", f.code));
                    let line = code.line(&interp.layout, f.instr).unwrap_or(-1);
                    (code.name, line)
                })
                .collect();
            assert_eq!(&read, expected, "{what}: thread {tid}");
            check_runs(&what, &interp, &t.runs, expected);
            walk_as_the_kernel(&what, &interp, &mem, pid, *tid, t);
        }
    }
}

/// A run as compared: per frame (code, instruction, generator's), and
/// whether it was cut.
type Compared = (Vec<(u64, i64, bool)>, bool);

/// The BPF walk the kernel runs at a sample, run in user space over the
/// same parked memory: the same runs, frame for frame (each frame's
/// incomplete-or-not asked of the chain's rule, as the recorder does when
/// it names the walk's frames), each frame's code identity the reader's,
/// and the names it sends those the reader reads. No BPF needed: a machine
/// without it still checks the walk.
fn walk_as_the_kernel(
    what: &str,
    interp: &Interpreter,
    mem: &Process,
    pid: u32,
    tid: u32,
    t: &flamerec_python::PyThread,
) {
    let l = &interp.layout;
    let (record, sent) = bpf::walk_in_user_space(l, mem, pid, tid, t.tstate)
        .unwrap_or_else(|e| panic!("{what}: thread {tid}: {e}"));
    assert!(
        record.ended,
        "{what}: thread {tid}: the walk did not reach the chain's end"
    );
    let complete = |f: &PyFrame| match l.code_firsttraceable {
        Some(at) => {
            let first = mem.i32(f.code + at).expect("_co_firsttraceable");
            !chain::is_incomplete(f, i64::from(first))
        }
        None => true,
    };
    let runs: Vec<Compared> = record
        .runs(l)
        .iter()
        .map(|r| {
            let frames = r.frames.iter().filter(|f| complete(f));
            let frames: Vec<_> = frames.map(|f| (f.code, f.instr, f.generator)).collect();
            (frames, r.cut)
        })
        .filter(|(frames, _)| !frames.is_empty())
        .collect();
    let read: Vec<Compared> = t
        .runs
        .iter()
        .map(|r| {
            let frames = r.frames.iter().map(|f| (f.code, f.instr, f.generator));
            (frames.collect::<Vec<_>>(), r.cut)
        })
        .filter(|(frames, _)| !frames.is_empty())
        .collect();
    assert_eq!(
        runs, read,
        "{what}: thread {tid}: the kernel's walk and the reader's"
    );
    if !matches!(l.model, FrameModel::EntryFlag) {
        let markers = |runs: &[flamerec_python::Run]| -> Vec<Option<u64>> {
            runs.iter().map(|r| r.marker).collect()
        };
        assert_eq!(
            markers(&record.runs(l)),
            markers(&t.runs),
            "{what}: thread {tid}"
        );
    }
    for r in record.runs(l) {
        for f in &r.frames {
            let id = flamerec_python::code_identity(mem, l, f.code).expect("identity");
            assert_eq!(f.identity, id, "{what}: thread {tid}: code {:#x}", f.code);
        }
    }
    let mut named = 0;
    for e in sent {
        // A frame no code runs in (3.13's shim, whose executable is None)
        // has its "names" sent too: not strings, so not taken.
        let bpf::Entry::Names(n) = e else { continue };
        let Some(name) = n.name else { continue };
        let code = CodeInfo::read(mem, l, n.code)
            .unwrap_or_else(|e| panic!("{what}: thread {tid}: sent {name}: {e}"));
        assert_eq!(name, code.name, "{what}: thread {tid}");
        if let Some(file) = n.file {
            assert_eq!(file, code.file, "{what}: thread {tid}");
        }
        named += 1;
    }
    assert!(named > 0, "{what}: thread {tid}: the walk sent no name");
}

/// Runs: one per eval-loop call. 3.8–3.10 call it once per frame; 3.11+
/// run a plain Python call in the caller's call, but a call through C
/// (`map`) starts a new one, and each run is marked by an address in its
/// call's native frame: innermost lowest (the stack grows down).
fn check_runs(
    what: &str,
    interp: &Interpreter,
    runs: &[flamerec_python::Run],
    expected: &[(String, i32)],
) {
    let names: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    match interp.layout.model {
        FrameModel::Objects { .. } => {
            assert!(runs.iter().all(|r| r.frames.len() == 1), "{what}: {runs:?}");
        }
        _ => {
            let markers: Vec<u64> = runs.iter().map(|r| r.marker.expect("a marker")).collect();
            assert!(
                markers.windows(2).all(|w| w[0] < w[1]),
                "{what}: markers not in stack order: {markers:x?}"
            );
            if names.first() == Some(&"park") && names.contains(&"descend") {
                // park and the four descends run in the caller's call.
                assert!(runs[0].frames.len() >= 5, "{what}: {:?}", runs[0]);
            }
            if names.contains(&"through_map") {
                // Three calls through map, each a new eval-loop call, and
                // the thread's own.
                assert!(
                    runs.len() >= 4,
                    "{what}: one run per level through map: {runs:?}"
                );
            }
        }
    }
}
