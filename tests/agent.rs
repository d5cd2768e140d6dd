//! End-to-end tests of `flamerec agent` against a real OTLP receiver: the
//! OpenTelemetry Collector's otlpreceiver (v0.165), built from its Go modules
//! by `tests/otelcol/build` (`.ci/install-test-tools` runs it), which writes
//! each request it takes as a JSON line. A missing Go toolchain fails
//! naming the cause unless FLAMEREC_SKIP_COLLECTOR_TESTS=1.
//!
//! The receiver checks the message, not the dictionary's references, so
//! these tests check those themselves: every index in range, entry 0 of
//! each table empty, `string_table[0] == ""`.
//!
//! Margins: cpu-mix's 50/30/20 split is read from its own samples, which
//! follow its CPU time whatever else runs; ≈ 12 s at 199 Hz gives about
//! 2,000 of them beside the Python program on 2 CPUs (more than 1,200 even
//! when a third task takes a CPU's share), where the 50% share's standard
//! deviation is 1.1–1.4 points: 3 points is more than twice that.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use flamerec_samples::{FramePointers, Sample};
use flamerec_testkit::{python, skip_or_fail, SKIP_COLLECTOR};

/// The receiver, built when missing; `None` when it cannot be and the
/// skip variable is set.
pub(crate) fn receiver() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otelcol/build");
    let dest = std::env::var_os("FLAMEREC_OTELCOL").map_or_else(
        || PathBuf::from("/var/cache/flamerec/otelcol-probe"),
        PathBuf::from,
    );
    let built = Command::new(&script).arg(&dest).output();
    let why = match built {
        Ok(o) if o.status.success() => return Some(dest),
        Ok(o) => format!(
            "the OTLP receiver could not be built: tests/otelcol/build failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            format!("the OTLP receiver could not be built: cannot run tests/otelcol/build: {e}")
        }
    };
    skip_or_fail(SKIP_COLLECTOR, why);
    None
}

/// A free loopback port (bound, then let go).
pub(crate) fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("its address").port()
}

/// A running receiver; killed when dropped.
pub(crate) struct Collector {
    child: Child,
}

impl Collector {
    pub(crate) fn start(bin: &Path, port: u16, out: &Path, extra: &[&str]) -> Collector {
        let mut child = Command::new(bin)
            .args(["-http", &format!("127.0.0.1:{port}"), "-out"])
            .arg(out)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the receiver");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("its stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("its first line");
        assert!(line.starts_with("listening http="), "receiver said: {line}");
        Collector { child }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Windows an agent's log says it cut.
fn windows_in(log: &str) -> usize {
    log.lines()
        .filter(|l| l.starts_with("flamerec: window "))
        .count()
}

/// Windows an agent's log says it cut with samples of a process to send
/// (a window of idle CPUs only makes no request).
fn windows_to_send_in(log: &str) -> usize {
    log.lines()
        .filter(|l| l.starts_with("flamerec: window ") && !l.contains(" processes, 0 bytes"))
        .count()
}

/// A running agent; SIGTERM'd (and waited for) when stopped or dropped.
pub(crate) struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    pub(crate) fn start(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Agent {
        let log = dir.join(format!("{name}.log"));
        let child = flamerec()
            .arg("agent")
            .args(["-F", "199", "--window", "5"])
            .args(args)
            .envs(env.iter().copied())
            .stderr(std::fs::File::create(&log).expect("the agent's log"))
            .spawn()
            .expect("start flamerec agent");
        Agent { child, log }
    }

    /// Its log so far.
    fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Windows it has cut so far.
    pub(crate) fn windows(&self) -> usize {
        windows_in(&self.said())
    }

    /// Stops it with SIGTERM; returns its log and how long it took to exit.
    pub(crate) fn stop(mut self) -> (String, Duration) {
        let asked = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = wait_child(&mut self.child, "the agent to stop");
        let took = asked.elapsed();
        let said = self.said();
        assert!(status.success(), "the agent failed: {said}");
        (said, took)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One process's samples in the requests: its resource's attributes and
/// its stacks (function names root first, each with its count and thread
/// attributes).
#[derive(Debug, Default)]
pub(crate) struct Process {
    pub(crate) attributes: HashMap<String, Value>,
    pub(crate) stacks: Vec<(Vec<String>, u64)>,
    pub(crate) thread_names: BTreeSet<String>,
}

/// The requests written by the receiver, checked for the dictionary's
/// rules, as processes by pid; and the windows (profile start times) seen.
pub(crate) fn received(path: &Path) -> (HashMap<i64, Process>, BTreeSet<String>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut procs: HashMap<i64, Process> = HashMap::new();
    let mut windows = BTreeSet::new();
    // A line still being written (the receiver appends while tests poll)
    // is left for the next read.
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let req: Value = serde_json::from_str(line).expect("a JSON request");
        let d = &req["dictionary"];
        let table = |k: &str| d[k].as_array().cloned().unwrap_or_default();
        let (strings, functions, locations, stacks, attrs, mappings) = (
            table("stringTable"),
            table("functionTable"),
            table("locationTable"),
            table("stackTable"),
            table("attributeTable"),
            table("mappingTable"),
        );
        assert_eq!(
            strings.first().and_then(Value::as_str),
            Some(""),
            "string_table[0]"
        );
        for t in [&functions, &locations, &stacks, &mappings] {
            assert_eq!(
                t.first(),
                Some(&serde_json::json!({})),
                "entry 0 of a table is empty"
            );
        }
        let idx = |v: &Value, len: usize, what: &str| -> usize {
            let i = v.as_i64().unwrap_or(0);
            assert!(
                i >= 0 && (i as usize) < len,
                "{what} {i} out of range ({len})"
            );
            i as usize
        };
        let string = |v: &Value| -> String {
            let i = idx(v, strings.len(), "string index");
            strings[i].as_str().unwrap_or_default().to_string()
        };
        for f in &functions {
            string(&f["nameStrindex"]);
        }
        for m in &mappings {
            string(&m["filenameStrindex"]);
        }
        for rp in req["resourceProfiles"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let mut attributes = HashMap::new();
            for kv in rp["resource"]["attributes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let key = match kv.get("key") {
                    Some(k) => k.as_str().unwrap_or_default().to_string(),
                    None => string(&kv["keyStrindex"]),
                };
                let v = &kv["value"];
                let value = match v.get("stringValueStrindex") {
                    Some(i) => Value::String(string(i)),
                    None => v
                        .get("stringValue")
                        .or_else(|| v.get("intValue"))
                        .cloned()
                        .unwrap_or(Value::Null),
                };
                attributes.insert(key, value);
            }
            let pid: i64 = match &attributes["process.pid"] {
                Value::String(s) => s.parse().expect("a pid"),
                v => v.as_i64().expect("a pid"),
            };
            let p = procs.entry(pid).or_default();
            p.attributes = attributes;
            for sp in rp["scopeProfiles"].as_array().cloned().unwrap_or_default() {
                for prof in sp["profiles"].as_array().cloned().unwrap_or_default() {
                    windows.insert(
                        prof["timeUnixNano"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    );
                    for s in prof["samples"].as_array().cloned().unwrap_or_default() {
                        let stack = &stacks[idx(&s["stackIndex"], stacks.len(), "stack")];
                        let mut frames = Vec::new();
                        for l in stack["locationIndices"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                        {
                            let loc = &locations[idx(&l, locations.len(), "location")];
                            idx(&loc["mappingIndex"], mappings.len(), "mapping");
                            // Inlined functions first, their caller last.
                            for line in loc["lines"].as_array().cloned().unwrap_or_default() {
                                let f = &functions
                                    [idx(&line["functionIndex"], functions.len(), "function")];
                                frames.push(string(&f["nameStrindex"]));
                            }
                        }
                        frames.reverse();
                        for a in s["attributeIndices"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                        {
                            let a = &attrs[idx(&a, attrs.len(), "attribute")];
                            if string(&a["keyStrindex"]) == "thread.name" {
                                let name = a["value"]["stringValue"].as_str().unwrap_or_default();
                                p.thread_names.insert(name.to_string());
                            }
                        }
                        let n: u64 = s["values"][0]
                            .as_str()
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        p.stacks.push((frames, n));
                    }
                }
            }
        }
    }
    (procs, windows)
}

/// A Python program whose one function spins for `secs` seconds.
const PY_SPIN: &str = "import time\ndef agent_spin(secs):\n    t = time.time()\n    while time.time() - t < secs:\n        pass\nagent_spin(float(__import__('sys').argv[1]))\n";

#[test]
fn agent_delivers_named_whole_windows_to_the_collectors_receiver() {
    let Some(rx) = receiver() else { return };
    let Some(_alone) = measuring() else { return };
    let Some(py) = python(12) else {
        return;
    };
    let dir = tmp();
    let port = free_port();
    let out = dir.path().join("received.jsonl");
    let _collector = Collector::start(&rx, port, &out, &[]);
    let bin = sample_bin(Sample::CpuMix, FramePointers::Yes);
    let spool = dir.path().join("spool");
    let url = format!("http://127.0.0.1:{port}");
    let agent = Agent::start(
        dir.path(),
        "agent",
        &["--otlp", &url, "--spool", spool.to_str().unwrap()],
        &[],
    );
    // Both programs start once the agent records (its first window says so).
    wait_for("the agent's first window", || agent.windows() >= 1);
    let mut mix = Command::new(&bin)
        .args(["--units", "3500000"])
        .spawn()
        .expect("cpu-mix");
    let mut spin = Command::new(&py)
        .args(["-c", PY_SPIN, "12"])
        .spawn()
        .expect("python");
    wait_child(&mut mix, "cpu-mix");
    wait_child(&mut spin, "the Python program");
    let (said, took) = agent.stop();
    assert!(
        took < Duration::from_secs(15),
        "the agent took {took:?} to stop: {said}"
    );
    let (procs, windows) = received(&out);
    assert!(
        windows.len() >= 3,
        "{} windows received: {said}",
        windows.len()
    );
    assert!(said.contains("0 dropped, 0 failed tries"), "{said}");

    let m = procs
        .get(&i64::from(mix.id()))
        .unwrap_or_else(|| panic!("no cpu-mix in the requests: {said}"));
    let exe = bin.to_string_lossy();
    assert_eq!(
        m.attributes["process.executable.path"],
        Value::String(exe.to_string())
    );
    assert_eq!(
        m.attributes["service.name"],
        Value::String("cpu-mix".into())
    );
    assert_eq!(
        m.attributes["process.executable.name"],
        Value::String("cpu-mix".into())
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(m.attributes["host.name"], Value::String(host.trim().into()));
    assert!(m.thread_names.contains("cpu-mix"), "{:?}", m.thread_names);
    let n = total(&m.stacks);
    assert!(n >= 1200, "only {n} samples of cpu-mix");
    let whole = share(&m.stacks, |s| s.first().is_some_and(|f| f == "_start"));
    assert!(whole >= 99.0, "{whole:.1}% of cpu-mix's stacks from _start");
    for (f, want) in [
        ("cpu_mix_alpha", 50.0),
        ("cpu_mix_beta", 30.0),
        ("cpu_mix_gamma", 20.0),
    ] {
        let got = share(&m.stacks, |s| s.iter().any(|x| x == f));
        assert!(
            (got - want).abs() <= 3.0,
            "{f}: {got:.1}% of {n} samples, {want}% expected"
        );
    }

    let p = procs
        .get(&i64::from(spin.id()))
        .expect("the Python program in the requests");
    let named = share(&p.stacks, |s| s.iter().any(|f| f.starts_with("agent_spin")));
    assert!(
        named >= 90.0,
        "Python frames in {named:.1}% of the Python program's samples"
    );
}

/// OTLP over gRPC to the receiver's gRPC server (grpc-go over HTTP/2):
/// every window cut arrives, the two RESOURCE_EXHAUSTED answers are
/// retried after the 3 s their RetryInfo asks (without it they would not
/// be retried; the backoff alone waits 0.5 s, then 1 s: the first window
/// arrives ≥ 6 s after its end, asserted), and the program's process comes
/// with its attributes and named stacks. The margin: cpu-mix runs ≈ 4 s of
/// CPU, ≥ 200 samples at 199 Hz on a loaded 2-core machine; the bound is 50.
#[test]
fn agent_sends_otlp_over_grpc_and_retries_when_asked() {
    let Some(rx) = receiver() else { return };
    let Some(_w) = workload() else { return };
    let dir = tmp();
    let (port, grpc_port) = (free_port(), free_port());
    let out = dir.path().join("grpc.jsonl");
    let grpc_addr = format!("127.0.0.1:{grpc_port}");
    let _c = Collector::start(
        &rx,
        port,
        &out,
        &[
            "-grpc",
            &grpc_addr,
            "-status",
            "429",
            "-status-times",
            "2",
            "-retry-after",
            "3",
        ],
    );
    let spool = dir.path().join("spool");
    let url = format!("http://{grpc_addr}");
    let agent = Agent::start(
        dir.path(),
        "grpc",
        &[
            "--otlp",
            &url,
            "--otlp-protocol",
            "grpc",
            "--spool",
            spool.to_str().unwrap(),
        ],
        &[],
    );
    wait_for("the agent's first window", || agent.windows() >= 1);
    let bin = sample_bin(Sample::CpuMix, FramePointers::Yes);
    let mut mix = Command::new(&bin)
        .args(["--units", "1200000"])
        .spawn()
        .expect("cpu-mix");
    wait_child(&mut mix, "cpu-mix");
    let seen = agent.windows();
    wait_for("a window after cpu-mix ended", || agent.windows() > seen);
    // The first window's retries done (a stop would try what waits at
    // once), the later ones go at the first try.
    wait_for("the first window sent after its retries", || {
        agent.said().lines().any(|l| {
            let sent = l.split("otlp: ").nth(1).and_then(|t| t.split(' ').next());
            sent.and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n > 0)
        })
    });
    let (said, _) = agent.stop();
    let cut = windows_to_send_in(&said);
    let (procs, windows) = received(&out);
    assert_eq!(windows.len(), cut, "windows received of {cut} cut: {said}");
    assert!(
        said.contains(&format!("{cut} windows sent")) && said.contains("2 failed tries"),
        "{said}"
    );
    let latest: f64 = said
        .split("at most ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no delay said: {said}"));
    assert!(latest >= 5.9, "the retries waited less than asked: {said}");
    let m = procs
        .get(&i64::from(mix.id()))
        .unwrap_or_else(|| panic!("no cpu-mix in the requests: {said}"));
    assert_eq!(
        m.attributes["service.name"],
        Value::String("cpu-mix".into())
    );
    let n = total(&m.stacks);
    let named = m
        .stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == "cpu_mix_alpha"))
        .map(|(_, n)| n)
        .sum::<u64>();
    assert!(
        n >= 50 && named >= n / 4,
        "{named} of {n} samples in cpu_mix_alpha: {said}"
    );
}

/// Sends windows through a receiver that fails twice, one killed and
/// restarted, and one that never answers (then a restarted agent).
#[test]
fn agent_rides_out_a_backend_that_fails_goes_away_or_hangs() {
    let Some(rx) = receiver() else { return };
    let Some(_w) = workload() else { return };
    let dir = tmp();
    let spool = dir.path().join("spool");
    let spool_arg = spool.to_str().unwrap().to_string();
    // Every window has samples to send (a window of idle CPUs alone makes no request).
    let busy = Busy(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh"),
    );

    // 503 twice (with Retry-After 1 s), then 200: every window arrives.
    let port = free_port();
    let out = dir.path().join("a.jsonl");
    let c = Collector::start(
        &rx,
        port,
        &out,
        &["-status", "503", "-status-times", "2", "-retry-after", "1"],
    );
    let url = format!("http://127.0.0.1:{port}");
    let agent = Agent::start(
        dir.path(),
        "a",
        &["--otlp", &url, "--spool", &spool_arg],
        &[],
    );
    wait_for("three windows", || agent.windows() >= 3);
    let (said, _) = agent.stop();
    drop(c);
    let cut = windows_in(&said);
    let (_, windows) = received(&out);
    assert_eq!(windows.len(), cut, "windows received of {cut} cut: {said}");
    assert!(
        said.contains(&format!("{cut} windows sent")) && said.contains("2 failed tries"),
        "{said}"
    );

    // Killed after the first window and started again two windows later:
    // what waited in the spool arrives.
    let out = dir.path().join("b.jsonl");
    let c = Collector::start(&rx, port, &out, &[]);
    let agent = Agent::start(
        dir.path(),
        "b",
        &["--otlp", &url, "--spool", &spool_arg],
        &[],
    );
    wait_for("the first window received", || !received(&out).1.is_empty());
    drop(c);
    let cut_before = agent.windows();
    wait_for("two more windows", || agent.windows() >= cut_before + 2);
    let again = Collector::start(&rx, port, &out, &[]);
    wait_for("a window after the restart", || {
        agent.windows() >= cut_before + 3
    });
    let (said, _) = agent.stop();
    drop(again);
    let cut = windows_in(&said);
    let (_, windows) = received(&out);
    assert_eq!(windows.len(), cut, "windows received of {cut} cut: {said}");
    assert!(said.contains("0 dropped"), "{said}");

    // A receiver that takes connections and never answers: the agent stops
    // in bounded time and leaves its windows in the spool; the next agent
    // sends them.
    let hang = TcpListener::bind("127.0.0.1:0").unwrap();
    let hang_url = format!("http://{}", hang.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in hang.incoming().take(8) {
            conns.push(c);
        }
        std::thread::sleep(Duration::from_secs(60));
        drop(conns);
    });
    let agent = Agent::start(
        dir.path(),
        "c",
        &["--otlp", &hang_url, "--spool", &spool_arg],
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")],
    );
    wait_for("two windows", || agent.windows() >= 2);
    let (said, took) = agent.stop();
    assert!(
        took < Duration::from_secs(20),
        "stopping took {took:?}: {said}"
    );
    let cut = windows_in(&said);
    let waiting = std::fs::read_dir(spool.join("otlp")).unwrap().count();
    assert_eq!(waiting, cut, "windows left in the spool: {said}");
    drop(held);
    let out = dir.path().join("c.jsonl");
    let _c = Collector::start(&rx, port, &out, &[]);
    let agent = Agent::start(
        dir.path(),
        "d",
        &["--otlp", &url, "--spool", &spool_arg],
        &[],
    );
    wait_for("the spooled windows and one new", || {
        received(&out).1.len() > cut
    });
    let (said, _) = agent.stop();
    assert!(said.contains("0 dropped"), "{said}");
    drop(busy);
}

/// The local directory: windows as `.frec` files that `info` names and
/// `fold` reads, the oldest removed past the size bound.
#[test]
fn agent_keeps_windows_in_a_bounded_directory() {
    let Some(_w) = workload() else { return };
    let dir = tmp();
    let win = dir.path().join("windows");
    let agent = Agent::start(
        dir.path(),
        "dir",
        &["--dir", win.to_str().unwrap(), "--dir-max-mib", "1"],
        &[],
    );
    wait_for("two windows", || agent.windows() >= 2);
    let (said, _) = agent.stop();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&win)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}: {said}");
    let info = info_json(&files[1]);
    assert_eq!(info["window"]["index"], 1, "{info}");
    assert_eq!(info["complete"], true);
    let mut text = String::new();
    flamerec()
        .arg("info")
        .arg(&files[1])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        text.contains("window:     1 of a continuous recording"),
        "{text}"
    );
    assert!(!fold(&files[1], &[]).is_empty());
}

/// What a loopback stand-in for Pyroscope's push API took: per request,
/// its series as (labels, decoded pprof), and every rule of Pyroscope's
/// validation a request broke.
#[derive(Default)]
struct Pushes {
    series: Vec<(
        HashMap<String, String>,
        flamerec_fold::export::proto::Profile,
    )>,
    broken: Vec<String>,
}

/// Serves `POST /push.v1.PusherService/Push` on `l` (200 to each), checking
/// what Pyroscope's distributor checks: sample types present, type names
/// without `-`, ids counting from 1, `string_table[0] == ""`, at most 16,000
/// samples and 4 MiB per profile, label names Prometheus would take,
/// `__name__` and `service_name` set.
fn serve_pushes(l: TcpListener, into: std::sync::Arc<std::sync::Mutex<Pushes>>) {
    use flamerec_agent::pyroscope::wire::PushRequest;
    use prost::Message;
    use std::io::Write;
    for conn in l.incoming() {
        let Ok(mut s) = conn else { return };
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut head = String::new();
        let mut line = String::new();
        while r.read_line(&mut line).unwrap_or(0) > 2 {
            head.push_str(&line);
            line.clear();
        }
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        let mut got = into.lock().unwrap();
        if !head.starts_with("POST /push.v1.PusherService/Push HTTP/1.1")
            || !head.contains("Content-Type: application/proto")
        {
            got.broken.push(format!("request: {head}"));
            continue;
        }
        let req = match PushRequest::decode(body.as_slice()) {
            Ok(r) => r,
            Err(e) => {
                got.broken.push(format!("push request: {e}"));
                continue;
            }
        };
        for series in req.series {
            let labels: HashMap<String, String> = series
                .labels
                .iter()
                .map(|l| (l.name.clone(), l.value.clone()))
                .collect();
            for l in &series.labels {
                let ok = l.name.chars().enumerate().all(|(i, c)| {
                    c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
                });
                if !ok {
                    got.broken.push(format!("label name {}", l.name));
                }
            }
            for k in ["__name__", "service_name"] {
                if labels.get(k).is_none_or(String::is_empty) {
                    got.broken.push(format!("no {k}"));
                }
            }
            for raw in series.samples {
                if raw.raw_profile.len() > 4 << 20 {
                    got.broken.push("profile over 4 MiB".into());
                }
                let mut unzipped = Vec::new();
                flate2::read::GzDecoder::new(raw.raw_profile.as_slice())
                    .read_to_end(&mut unzipped)
                    .unwrap();
                let p = flamerec_fold::export::proto::Profile::decode(unzipped.as_slice()).unwrap();
                if p.string_table.first().map(String::as_str) != Some("") {
                    got.broken.push("string_table[0] is not empty".into());
                }
                if p.sample_type.is_empty() || p.sample.len() > 16_000 {
                    got.broken.push(format!(
                        "{} sample types, {} samples",
                        p.sample_type.len(),
                        p.sample.len()
                    ));
                }
                for t in &p.sample_type {
                    let name = &p.string_table[t.r#type as usize];
                    if name.contains('-') {
                        got.broken.push(format!("sample type {name}"));
                    }
                }
                let from_one = p
                    .location
                    .iter()
                    .enumerate()
                    .all(|(i, l)| l.id == i as u64 + 1)
                    && p.function
                        .iter()
                        .enumerate()
                        .all(|(i, f)| f.id == i as u64 + 1)
                    && p.mapping
                        .iter()
                        .enumerate()
                        .all(|(i, m)| m.id == i as u64 + 1);
                if !from_one {
                    got.broken.push("ids do not count from 1".into());
                }
                got.series.push((labels.clone(), p));
            }
        }
    }
}

/// What a Pyroscope stand-in ([`serve_pushes`]) took while the agent (with
/// `extra` flags) recorded `PY -c PROGRAM 8`, every push valid.
struct Pushed {
    /// The agent's log.
    said: String,
    /// The Python program's pid.
    pid: u32,
    /// Its service: its executable's name.
    service: String,
    got: Pushes,
}

impl Pushed {
    fn run(dir: &Path, name: &str, py: &Path, extra: &[&str], program: &str) -> Pushed {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        let pushes = std::sync::Arc::new(std::sync::Mutex::new(Pushes::default()));
        let served = std::sync::Arc::clone(&pushes);
        std::thread::spawn(move || serve_pushes(l, served));
        let spool = dir.join("spool");
        let mut args = vec!["--pyroscope", &url, "--spool", spool.to_str().unwrap()];
        args.extend(extra);
        let agent = Agent::start(dir, name, &args, &[]);
        let mut child = Command::new(py)
            .args(["-c", program, "8"])
            .spawn()
            .expect("python");
        wait_child(&mut child, "the Python program");
        let (said, _) = agent.stop();
        let got = std::mem::take(&mut *pushes.lock().unwrap());
        assert!(got.broken.is_empty(), "{:?}", got.broken);
        Pushed {
            said,
            pid: child.id(),
            service: py.file_name().unwrap().to_string_lossy().into_owned(),
            got,
        }
    }

    /// The series of the program's service: at least two (windows of 5 s
    /// over its 8 s).
    fn ours(
        &self,
    ) -> Vec<&(
        HashMap<String, String>,
        flamerec_fold::export::proto::Profile,
    )> {
        let ours: Vec<_> = self
            .got
            .series
            .iter()
            .filter(|(l, _)| l.get("service_name") == Some(&self.service))
            .collect();
        assert!(
            ours.len() >= 2,
            "{} series of {} in {} ({})",
            ours.len(),
            self.service,
            self.got.series.len(),
            self.said
        );
        ours
    }
}

/// Pyroscope's push API, to a stand-in that applies Pyroscope's documented
/// validation: each window one series per service, the Python program's
/// functions under its own service.
#[test]
fn agent_pushes_valid_series_per_service_to_pyroscope() {
    let Some(_w) = workload() else { return };
    let Some(py) = python(12) else {
        return;
    };
    let dir = tmp();
    let pushed = Pushed::run(dir.path(), "pyroscope", &py, &[], PY_SPIN);
    let (said, service) = (&pushed.said, &pushed.service);
    let ours = pushed.ours();
    assert!(ours.iter().all(|(l, _)| l["__name__"] == "process_cpu"));
    let named = ours
        .iter()
        .any(|(_, p)| p.string_table.iter().any(|s| s.starts_with("agent_spin")));
    assert!(named, "no agent_spin in {service}'s profiles");
    // The program's samples are in its service's series, and in no other.
    let pids_of = |(_, p): &&(
        HashMap<String, String>,
        flamerec_fold::export::proto::Profile,
    )|
     -> BTreeSet<i64> {
        p.sample
            .iter()
            .flat_map(|s| {
                s.label
                    .iter()
                    .filter(|l| p.string_table[l.key as usize] == "pid")
                    .map(|l| l.num)
            })
            .collect()
    };
    let me = i64::from(pushed.pid);
    assert!(ours.iter().any(|s| pids_of(s).contains(&me)), "{said}");
    let elsewhere = pushed
        .got
        .series
        .iter()
        .filter(|(l, _)| l.get("service_name") != Some(service))
        .any(|s| pids_of(&s).contains(&me));
    assert!(!elsewhere, "the program's samples under another service");
}

/// A Python program whose one function sleeps for `secs` seconds, 50 ms at a time.
const PY_WAIT: &str = "import time\ndef agent_wait(secs):\n    t = time.time()\n    while time.time() - t < secs:\n        time.sleep(0.05)\nagent_wait(float(__import__('sys').argv[1]))\n";

/// Off-CPU windows to Pyroscope: the time a program blocked, in its own
/// series (`off_cpu`, nanoseconds), named down to its Python function.
#[test]
fn agent_pushes_off_cpu_time_to_pyroscope() {
    let Some(_w) = workload() else { return };
    let Some(py) = python(12) else {
        return;
    };
    let dir = tmp();
    let pushed = Pushed::run(
        dir.path(),
        "pyroscope-off",
        &py,
        &["-e", "off-cpu"],
        PY_WAIT,
    );
    let (said, service) = (&pushed.said, &pushed.service);
    let ours = pushed.ours();
    let mut blocked = 0;
    for (labels, p) in &ours {
        assert_eq!(labels["__name__"], "off_cpu");
        let types: Vec<_> = p
            .sample_type
            .iter()
            .map(|t| {
                (
                    p.string_table[t.r#type as usize].as_str(),
                    p.string_table[t.unit as usize].as_str(),
                )
            })
            .collect();
        assert_eq!(types, [("off_cpu", "nanoseconds")]);
        let waiting: HashSet<u64> = p
            .function
            .iter()
            .filter(|f| p.string_table[f.name as usize].starts_with("agent_wait"))
            .map(|f| f.id)
            .collect();
        let in_wait = |s: &flamerec_fold::export::proto::Sample| {
            s.location_id.iter().any(|l| {
                p.location[*l as usize - 1]
                    .line
                    .iter()
                    .any(|line| waiting.contains(&line.function_id))
            })
        };
        blocked += p
            .sample
            .iter()
            .filter(|s| in_wait(s))
            .map(|s| s.value[0])
            .sum::<i64>();
    }
    // The program sleeps 8 s in agent_wait, 50 ms at a time: ≈ 8e9 ns
    // blocked there, less its last sleep if its window is not yet cut
    // (SIGTERM sends it) and the sleeps' wake-ups; 4e9 is half, room for
    // a loaded machine's late wake-ups shortening no sleep but a window
    // boundary falling anywhere. Over 9e9 would count time it did not block.
    assert!(
        (4_000_000_000..9_000_000_000).contains(&blocked),
        "{service} blocked {blocked} ns in agent_wait ({said})"
    );
}
