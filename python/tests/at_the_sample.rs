//! The frame walk as a BPF program, at real samples of a real CPython: a
//! thread spinning in `leaf` under a 20-deep recursion is sampled by a
//! `cpu-clock` event with the walker attached, on every CPython 3.8–3.13
//! here; the frames the kernel read at the last sample name exactly the
//! stack the program stands in, innermost first. Needs root (BPF); where
//! BPF is refused the test fails with the cause unless
//! `FLAMEREC_SKIP_BPF_TESTS=1`; a missing CPython fails unless
//! `FLAMEREC_SKIP_PYTHON_TESTS=1` (then the others are still tested).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flamerec_bpf::RingBuffer;
use flamerec_perf::sys::{self, Counter, EventConfig};
use flamerec_python::bpf::{Record, WalkerMaps};
use flamerec_python::{CodeInfo, Interpreter, Process};
use flamerec_testkit::{pythons_or_skip, skip_or_fail, SKIP_BPF};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/busy.py");

struct Busy(Child);

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sampling() -> EventConfig {
    EventConfig {
        frequency: 999,
        exclude_kernel: true,
        ..EventConfig::bare(Counter::CpuClock)
    }
}

#[test]
fn the_kernel_reads_the_running_python_stack_at_each_sample() {
    let found = pythons_or_skip(8..=13);
    for (_, python) in found {
        let what = python.display().to_string();
        let mut child = Command::new(&python)
            .arg(SCRIPT)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        let mut ready = String::new();
        let stdout = child.stdout.take().expect("stdout");
        let busy = Busy(child);
        BufReader::new(stdout)
            .read_line(&mut ready)
            .expect("the script's ready line");
        assert_eq!(ready.trim(), "ready", "{what}");
        let pid = busy.0.id();
        let interp = Interpreter::find(pid)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .unwrap_or_else(|| panic!("{what}: no runtime"));
        let mem = Process(pid);
        let threads = interp.threads(&mem, &[(pid, pid)]).expect("thread states");
        let main = threads
            .iter()
            .find(|t| t.tid == Some(pid))
            .unwrap_or_else(|| panic!("{what}: no state for the main thread"));
        let mut maps = match WalkerMaps::new(4, 64) {
            Ok(m) => m,
            Err(e) => {
                skip_or_fail(
                    SKIP_BPF,
                    format!("BPF is not usable here, so this test cannot run (as root it is): {e}"),
                );
                return;
            }
        };
        let index = maps
            .layout_index(&interp.layout)
            .unwrap_or_else(|| panic!("{what}: layout"));
        maps.add_process(pid, index).expect("process");
        maps.add_thread(pid, main.tstate).expect("thread");
        let mut ring = RingBuffer::new(1 << 20).expect("a ring buffer");
        let prog = maps
            .program(Some(&ring), None)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let event =
            sys::perf_event_open(&sampling(), pid as i32, -1).expect("an event on the spinner");
        sys::set_bpf(&event, prog.fd()).expect("attach");
        sys::enable(&event).expect("enable");
        // At least one sample of the spinner: it runs on a CPU the whole time.
        let end = Instant::now() + Duration::from_secs(60);
        let record = loop {
            std::thread::sleep(Duration::from_millis(50));
            let records = maps.records().expect("records");
            if let Some(r) = records.into_iter().find(|r| r.tid == pid) {
                break r;
            }
            assert!(Instant::now() < end, "{what}: no walk in 60 s");
        };
        sys::disable(&event).expect("disable");
        // Every walk also went to the ring, whole, in order of time.
        let mut from_ring = Vec::new();
        ring.drain(|b| from_ring.extend(Record::parse(b)));
        assert!(!from_ring.is_empty(), "{what}: nothing in the ring");
        let n = record.frames.len();
        assert!(
            from_ring
                .iter()
                .all(|r| r.tid == pid && r.frames.len() == n),
            "{what}"
        );
        assert!(
            from_ring.windows(2).all(|w| w[0].time <= w[1].time),
            "{what}"
        );
        assert!(
            from_ring.iter().any(|r| r.frames == record.frames),
            "{what}"
        );
        let names: Vec<String> = record
            .runs(&interp.layout)
            .iter()
            .flat_map(|r| &r.frames)
            .map(|f| {
                CodeInfo::read(&mem, &interp.layout, f.code)
                    .unwrap_or_else(|e| panic!("{what}: code at {:#x}: {e}", f.code))
                    .name
            })
            .collect();
        let mut expected = vec!["leaf".to_string()];
        expected.extend(std::iter::repeat_n("middle".to_string(), 20));
        expected.extend(["outer".to_string(), "<module>".to_string()]);
        assert_eq!(names, expected, "{what}");
    }
}
