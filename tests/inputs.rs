//! Every command reads every input, from a path or from standard input
//! (issue 38): perf.data from this machine's `perf` in pipe mode (straight
//! through a pipe and saved to a file) and file mode (`-z`, `-g`,
//! `--call-graph dwarf`), folded text as other tools write it, several
//! kinds in one command, broken input on stdin, and perf.data of other
//! kernels (tests/fixtures/perf-data/, whose README says where each came from).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use crate::common::*;
use crate::export::consumers;
use flamerec_samples::{FramePointers, Sample};

/// `perf record -q -F 999 ARGS -o OUT -- SAMPLE`, with OUT `-` for pipe
/// mode and `-e cpu-clock` unless ARGS names an event; returns the command
/// (its stdout is what `-o -` writes).
fn perf_record(args: &[&str], out: &str, sample: Sample, fp: FramePointers) -> Command {
    let bin = sample_bin(sample, fp);
    let mut c = Command::new(consumers::perf());
    c.args(["record", "-q", "-F", "999"]);
    if !args.contains(&"-e") {
        c.args(["-e", "cpu-clock"]);
    }
    c.args(args)
        .args(["-o", out, "--"])
        .arg(bin)
        .args(sample.args(sample.default_work() / 2));
    c
}

/// Pipe-mode perf.data of cpu-mix in memory, and the wall time perf took.
fn pipe_mode_bytes(args: &[&str]) -> (Vec<u8>, f64) {
    let _running = workload();
    let started = Instant::now();
    let o = perf_record(args, "-", Sample::CpuMix, FramePointers::Yes)
        .output()
        .expect("run perf record -o -");
    assert!(o.status.success(), "perf record failed: {}", stderr(&o));
    (o.stdout, started.elapsed().as_secs_f64())
}

fn folded_ok(o: &Output) -> Vec<(Vec<String>, u64)> {
    assert!(o.status.success(), "flamerec failed: {}", stderr(o));
    parse_folded(&String::from_utf8_lossy(&o.stdout))
}

fn has_frame(stacks: &[(Vec<String>, u64)], frame: &str) -> bool {
    stacks.iter().any(|(s, _)| s.iter().any(|f| f == frame))
}

#[test]
fn perf_pipe_mode_folds_straight_from_perf_and_saved_to_a_file() {
    if !perf_usable() {
        return;
    }
    // Straight from perf's stdout into `flamerec fold -`.
    let _running = workload();
    let mut perf = perf_record(&["-g"], "-", Sample::CpuMix, FramePointers::Yes)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run perf record -o -");
    let piped = flamerec()
        .args(["fold", "-"])
        .stdin(perf.stdout.take().expect("perf's stdout"))
        .output()
        .expect("run flamerec fold -");
    assert!(perf.wait().expect("wait for perf").success());
    let stacks = folded_ok(&piped);
    assert!(total(&stacks) > 100, "{stacks:?}");
    assert!(has_frame(&stacks, "cpu_mix_alpha"), "{stacks:?}");
    assert!(!stderr(&piped).contains("error"), "{}", stderr(&piped));

    // Saved to a file (`perf record -o - > x.data`): a 16-byte header.
    let (bytes, wall_s) = pipe_mode_bytes(&["-g"]);
    let dir = tmp();
    let data = dir.path().join("pipe.data");
    fs::write(&data, &bytes).expect("write pipe.data");
    let from_file = fold(&data, &[]);
    assert!(has_frame(&from_file, "cpu_mix_alpha"), "{from_file:?}");
    let info = info_json(&data);
    assert_eq!(info["format"], "perf.data-pipe", "{info}");
    assert_eq!(info["call_graph"], "fp", "{info}");
    assert_eq!(info["samples"].as_u64(), Some(total(&from_file)), "{info}");
    assert_eq!(info["processes"].as_u64(), Some(1), "{info}");
    // From the first sample, not from the time-0 records perf makes up
    // for what ran before it (that counted the machine's uptime).
    let duration = info["duration_s"].as_f64().expect("duration_s");
    assert!(
        duration > 0.0 && duration <= wall_s,
        "{duration} s of {wall_s} s"
    );

    // The same bytes through stdin fold the same.
    let through_stdin = folded_ok(&flamerec_stdin(&["fold", "-"], &bytes));
    assert_eq!(through_stdin, from_file);

    // Cut short (perf killed mid-write): what came before, and a warning.
    let cut = flamerec_stdin(&["fold", "-"], &bytes[..bytes.len() * 2 / 3]);
    let partial = folded_ok(&cut);
    assert!(total(&partial) > 0 && total(&partial) < total(&from_file));
    let err = stderr(&cut);
    assert!(
        err.contains("(standard input): perf.data stream ends inside a record"),
        "{err}"
    );
}

#[test]
fn perf_file_mode_compressed_with_dwarf_stacks_reads_from_a_path_or_a_pipe() {
    if !perf_usable() {
        return;
    }
    let dir = tmp();
    let data = dir.path().join("z.data");
    let _running = workload();
    let o = perf_record(
        &["-z", "--call-graph", "dwarf"],
        data.to_str().expect("utf-8 path"),
        Sample::CpuMix,
        FramePointers::No,
    )
    .output()
    .expect("run perf record -z");
    assert!(o.status.success(), "perf record failed: {}", stderr(&o));
    let info = info_json(&data);
    assert_eq!(info["format"], "perf.data", "{info}");
    assert_eq!(info["call_graph"], "dwarf", "{info}");
    let stacks = fold(&data, &[]);
    assert_eq!(info["samples"].as_u64(), Some(total(&stacks)), "{info}");
    // Unwound through DWARF: the workload's functions sit under main.
    assert!(
        stacks.iter().any(|(s, _)| {
            let main = s.iter().position(|f| f == "main");
            let alpha = s.iter().position(|f| f == "cpu_mix_alpha");
            matches!((main, alpha), (Some(m), Some(a)) if m < a)
        }),
        "{stacks:?}"
    );
    // File mode seeks: from a pipe it is spooled first, and folds the same.
    let bytes = fs::read(&data).expect("read z.data");
    assert_eq!(
        folded_ok(&flamerec_stdin(&["fold", "-"], &bytes)),
        stacks,
        "through a pipe"
    );
    let redirected = flamerec()
        .args(["fold", "-"])
        .stdin(fs::File::open(&data).expect("open z.data"))
        .output()
        .expect("run flamerec fold - < z.data");
    assert_eq!(folded_ok(&redirected), stacks, "redirected");
}

#[test]
fn a_system_map_names_the_kernel_frames_of_a_kernel_that_moved() {
    if !perf_usable() {
        return;
    }
    let dir = tmp();
    let data = dir.path().join("sys.data");
    let _running = workload();
    let o = perf_record(
        &["-g"],
        data.to_str().expect("utf-8 path"),
        Sample::SyscallLoop,
        FramePointers::Yes,
    )
    .output()
    .expect("run perf record");
    assert!(o.status.success(), "perf record failed: {}", stderr(&o));
    // A System.map lists where the kernel was linked, not where it ran:
    // this kernel's symbols moved 2 MiB down name the same frames.
    let kallsyms = fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
    let mut map = String::new();
    for line in kallsyms.lines() {
        let (addr, rest) = line.split_once(' ').expect("kallsyms line");
        let addr = u64::from_str_radix(addr, 16).expect("hex address");
        if addr != 0 {
            map.push_str(&format!("{:016x} {rest}\n", addr - 0x20_0000));
        }
    }
    assert!(
        map.contains(" T _text\n"),
        "/proc/kallsyms hides its addresses here (kernel.kptr_restrict); this test reads them as root"
    );
    let system_map = dir.path().join("System.map");
    fs::write(&system_map, map).expect("write System.map");
    let here = fold(&data, &["--kernel-suffix"]);
    assert!(
        here.iter()
            .any(|(s, _)| s.iter().any(|f| f.ends_with("_[k]") && !f.contains("0x"))),
        "no named kernel frame: {here:?}"
    );
    let moved = fold(
        &data,
        &[
            "--kernel-suffix",
            "--kallsyms",
            system_map.to_str().expect("utf-8 path"),
        ],
    );
    assert_eq!(moved, here);
}

/// Folded text as tools write it: a comment, CRLF line ends, no newline at
/// the end, a count of 0, frames with spaces, and semicolons inside names
/// written as `:` (what stackcollapse-perf and inferno do).
const FOREIGN_FOLDED: &str = "# collapsed by some tool\r\n\
    my app;main;std::vector<int>::push_back;operator new(unsigned long) 5\r\n\
    my app;main;idle 0\r\n\
    my app;main;parse: a:b (x) 3\r\n\
    other;main;std::vector<int>::push_back;operator new(unsigned long) 2";

const FOREIGN_FOLDED_OUT: &str = "my app;main;parse: a:b (x) 3\n\
    my app;main;std::vector<int>::push_back;operator new(unsigned long) 5\n\
    other;main;std::vector<int>::push_back;operator new(unsigned long) 2\n";

#[test]
fn folded_text_takes_every_output_from_a_path_or_stdin() {
    let dir = tmp();
    let path = dir.path().join("stacks.folded");
    fs::write(&path, FOREIGN_FOLDED).expect("write folded text");
    let out = dir.path().join("out.folded");
    let (svg, json) = (dir.path().join("out.svg"), dir.path().join("out.json"));
    let o = flamerec()
        .arg("fold")
        .arg("-o")
        .arg(&out)
        .arg("--svg")
        .arg(&svg)
        .arg("--json")
        .arg(&json)
        .arg(&path)
        .output()
        .expect("run flamerec fold");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    assert_eq!(
        fs::read_to_string(&out).expect("folded"),
        FOREIGN_FOLDED_OUT
    );
    let svg = fs::read_to_string(&svg).expect("svg");
    assert!(svg.contains("<svg") && svg.contains("operator new(unsigned long)"));
    let summary: serde_json::Value =
        serde_json::from_slice(&fs::read(&json).expect("json")).expect("JSON summary");
    assert_eq!(summary["total_samples"].as_u64(), Some(10), "{summary}");

    // On stdin, and this time with a newline at the end.
    let o = flamerec_stdin(&["fold", "-"], format!("{FOREIGN_FOLDED}\r\n").as_bytes());
    assert_eq!(String::from_utf8_lossy(&o.stdout), FOREIGN_FOLDED_OUT);
    let o = flamerec_stdin(&["info", "--json", "-"], FOREIGN_FOLDED.as_bytes());
    assert!(o.status.success(), "{}", stderr(&o));
    let info: serde_json::Value = serde_json::from_slice(&o.stdout).expect("info JSON");
    assert_eq!(info["format"], "folded");
    assert_eq!(info["samples"].as_u64(), Some(10));
    assert_eq!(info["stacks"].as_u64(), Some(3));
    assert_eq!(info["roots"].as_u64(), Some(2));
}

#[test]
fn several_kinds_fold_and_diff_in_one_command() {
    if !perf_usable() {
        return;
    }
    let dir = tmp();
    let rec = dir.path().join("a.frec");
    let bin = sample_bin(Sample::CpuMix, FramePointers::Yes);
    let work = Sample::CpuMix.args(Sample::CpuMix.default_work() / 2);
    let Some(o) = record(
        &rec,
        &["-g", "fp", "-F", "999"],
        &[bin.to_str().expect("utf-8"), &work[0], &work[1]],
    ) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    // perf's own name for its default event when there is no hardware
    // counter: `cpu-clock:ppp` is the event a .frec calls `cpu-clock`.
    let data = dir.path().join("b.data");
    fs::write(&data, pipe_mode_bytes(&["-g", "-e", "cpu-clock:ppp"]).0).expect("write b.data");
    let text = dir.path().join("c.folded");
    fs::write(&text, FOREIGN_FOLDED).expect("write c.folded");
    let each: Vec<u64> = [&rec, &data, &text]
        .iter()
        .map(|p| total(&fold(p, &[])))
        .collect();
    let all = fold(&rec, &[data.to_str().unwrap(), text.to_str().unwrap()]);
    assert_eq!(total(&all), each.iter().sum::<u64>(), "{each:?}");
    assert!(has_frame(&all, "cpu_mix_alpha") && has_frame(&all, "parse: a:b (x)"));

    // BASE a perf.data, NEW a recording given on stdin.
    let md = dir.path().join("report.md");
    let o = flamerec()
        .arg("diff")
        .arg("--markdown")
        .arg(&md)
        .arg("--base")
        .arg(&data)
        .args(["--new", "-"])
        .stdin(fs::File::open(&rec).expect("open a.frec"))
        .output()
        .expect("run flamerec diff");
    assert!(o.status.success(), "{}", stderr(&o));
    let report = fs::read_to_string(&md).expect("report");
    assert!(report.contains("(standard input)"), "{report}");
}

#[test]
fn broken_input_on_stdin_is_one_error_line() {
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut pipe_header_then_junk = b"PERFILE2\x10\0\0\0\0\0\0\0".to_vec();
    pipe_header_then_junk.extend([0xff; 40]);
    for (what, bytes, needle) in [
        ("empty", &b""[..], "(standard input) is empty"),
        ("garbage", &garbage[..], "(standard input):1: not UTF-8"),
        ("no count", &b"a;b c\n"[..], "(standard input):1: expected"),
        (
            "perf.data pipe header, then junk",
            &pipe_header_then_junk[..],
            "(standard input): not a readable perf.data file",
        ),
        (
            "perf.data file header, cut",
            &b"PERFILE2\x68\0\0\0\0\0\0\0\0\0"[..],
            "(standard input): not a readable perf.data file",
        ),
    ] {
        for cmd in [
            &["fold", "-"][..],
            &["info", "-"],
            &["view", "--html", "/dev/null", "-"],
        ] {
            let o = flamerec_stdin(cmd, bytes);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{what}, {cmd:?}: {err}");
            assert!(
                err.starts_with("flamerec: error: ") && err.contains(needle),
                "{what}, {cmd:?}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{what}, {cmd:?}: {err}");
        }
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/perf-data")
        .join(name)
}

#[test]
fn perf_data_of_another_kernel_says_so_once_and_takes_its_symbols() {
    let running = fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    for (name, kernel) in [
        ("sleep.compressed.pipe.data", "6.5.0-1024-aws"),
        ("sleep.compressed2.data", "5.15.193-1-MANJARO"),
    ] {
        assert_ne!(
            running.trim(),
            kernel,
            "this test needs another kernel than {kernel}"
        );
        let path = fixture(name);
        let o = flamerec().arg("fold").arg(&path).output().expect("fold");
        let stacks = folded_ok(&o);
        let err = stderr(&o);
        let said = format!(
            "recorded on Linux {kernel}, this machine runs {}",
            running.trim()
        );
        assert_eq!(err.matches(&said).count(), 1, "{name}: {err}");
        assert!(err.contains("--kallsyms"), "{name}: {err}");
        assert!(!err.contains("run as root"), "{name}: {err}");
        let info = info_json(&path);
        assert_eq!(info["kernel_release"], kernel, "{info}");
        let missing = info["missing"].to_string();
        assert!(missing.contains(&said), "{name}: {missing}");

        // That kernel's symbols, given, name its kernel frames.
        let addr = stacks
            .iter()
            .flat_map(|(s, _)| s.iter())
            .find_map(|f| f.strip_prefix("[kernel.kallsyms]+0x"))
            .unwrap_or_else(|| panic!("{name} has a kernel frame: {stacks:?}"));
        let addr = u64::from_str_radix(addr, 16).expect("hex address");
        let dir = tmp();
        let kallsyms = dir.path().join("kallsyms");
        fs::write(
            &kallsyms,
            format!(
                "{:016x} T their_kernel_function\n{:016x} T after_it\n",
                addr - 0x10,
                addr + 0x100
            ),
        )
        .expect("write kallsyms");
        let o = flamerec()
            .arg("fold")
            .arg("--kallsyms")
            .arg(&kallsyms)
            .arg(&path)
            .output()
            .expect("fold --kallsyms");
        let named = folded_ok(&o);
        assert!(
            has_frame(&named, "their_kernel_function"),
            "{name}: {named:?}"
        );
        assert!(!stderr(&o).contains("recorded on Linux"), "{}", stderr(&o));
    }
}
