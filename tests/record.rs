//! End-to-end tests of `flamerec record`: dwarf stacks without frame
//! pointers, off-CPU time, attaching, system-wide mode, signals, profiler
//! frame trimming and failures. Each records real workloads.

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::Duration;

use crate::common::*;
use flamerec_samples::{FramePointers, Sample};

/// Kernel functions of the scheduler that off-CPU trimming removes.
const SCHED: [&str; 2] = ["__schedule", "schedule"];

#[test]
fn dwarf_mode_gives_whole_stacks_without_frame_pointers() {
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("mix.frec");
    // Default mode is dwarf.
    let Some(o) = record(&out, &[], &[bin.to_str().unwrap()]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(info_json(&out)["call_graph"], "dwarf");
    let stacks = fold(&out, &["--no-inline"]);
    // Nearly every sample's stack starts at the entry point (tolerance: 2%
    // for samples taken in process start-up and exit).
    let whole = share(&stacks, |s| s.get(1).is_some_and(|f| f == "_start"));
    assert!(whole >= 98.0, "only {whole:.1}% of stacks reach _start");
    let run = share(&stacks, |s| s.iter().any(|f| f == "cpu_mix_run"));
    assert!(run >= 95.0, "cpu_mix_run in only {run:.1}% of stacks");
    assert_expected_shares(&stacks, Sample::CpuMix);
}

#[test]
fn fp_mode_cannot_see_callers_in_a_binary_without_frame_pointers() {
    // The contrast that makes dwarf the default: the same binary, fp mode.
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("mix.frec");
    let Some(o) = record(
        &out,
        &["-g", "fp"],
        &[bin.to_str().unwrap(), "--units", "60000"],
    ) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let stacks = fold(&out, &["--no-inline"]);
    let whole = share(&stacks, |s| s.get(1).is_some_and(|f| f == "_start"));
    assert!(
        whole < 50.0,
        "{whole:.1}% reach _start without frame pointers?"
    );
}

#[test]
fn off_cpu_weights_are_the_nanoseconds_blocked() {
    let dir = tmp();
    let out = dir.path().join("off.frec");
    let Some(o) = record(
        &out,
        &["-e", "off-cpu"],
        &["sh", "-c", "sleep 0.5; sleep 0.5"],
    ) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let sleeps = fold(&out, &["--comm", "sleep"]);
    let ns = total(&sleeps) as f64;
    // Two sleeps of 0.5 s: 1e9 ns, within 10% (timer slack, process start).
    assert!(
        (0.9e9..1.1e9).contains(&ns),
        "sleep processes blocked {ns} ns"
    );
    let all = fold(&out, &[]);
    for (s, _) in &all {
        let leaf = s.last().unwrap();
        assert!(
            !SCHED.contains(&leaf.as_str()),
            "scheduler frame at the leaf: {s:?}"
        );
    }
    let info = info_json(&out);
    assert_eq!(info["event"], "off-cpu");
    // The shell waited for both sleeps as well.
    assert!(total(&all) as f64 >= 1.9e9, "total {}", total(&all));
}

#[test]
fn keep_profiler_frames_shows_what_trimming_removes() {
    let dir = tmp();
    let out = dir.path().join("off.frec");
    let cmd = ["sh", "-c", "sleep 0.1; sleep 0.1"];
    let Some(o) = record(&out, &["-e", "off-cpu", "--keep-profiler-frames"], &cmd) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let kept = fold(&out, &[]);
    let untrimmed = share(&kept, |s| s.iter().any(|f| SCHED.contains(&f.as_str())));
    assert!(
        untrimmed > 50.0,
        "scheduler frames in only {untrimmed:.1}% untrimmed"
    );
}

#[test]
fn trim_extends_the_trim_set() {
    let dir = tmp();
    let out = dir.path().join("dd.frec");
    let cmd = [
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=64k",
        "count=200000",
    ];
    let Some(o) = record(&out, &["--trim", "read_zero"], &cmd) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let stacks = fold(&out, &[]);
    assert!(stacks.iter().all(|(s, _)| s.last().unwrap() != "read_zero"));
    let vfs = share(&stacks, |s| s.last().is_some_and(|f| f == "vfs_read"));
    assert!(
        vfs > 20.0,
        "read_zero's time should now sit in vfs_read: {vfs:.1}%"
    );
}

/// Starts a long cpu-mix run in the background.
fn background_cpu_mix() -> std::process::Child {
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    Command::new(bin)
        .args(["--units", "2000000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("start cpu-mix")
}

#[test]
fn attaching_to_a_running_process_records_its_stacks() {
    if !perf_usable() {
        return;
    }
    let mut child = background_cpu_mix();
    sleep(Duration::from_millis(200));
    let dir = tmp();
    let out = dir.path().join("p.frec");
    let o = flamerec()
        .args(["record", "-q", "-d", "1", "-o"])
        .arg(&out)
        .args(["-p", &child.id().to_string()])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let stacks = fold(&out, &["--no-inline"]);
    // Other tests load the machine: a count says little, the shares below do.
    assert!(total(&stacks) > 20, "{} samples", total(&stacks));
    assert!(
        stacks.iter().all(|(s, _)| s[0] == "cpu-mix"),
        "only the attached process"
    );
    // Its mappings came from /proc: stacks still unwind through the binary.
    let run = share(&stacks, |s| s.iter().any(|f| f == "cpu_mix_run"));
    assert!(run >= 90.0, "cpu_mix_run in {run:.1}%");
}

#[test]
fn system_wide_holds_the_workload_and_never_flamerec() {
    if !perf_usable() {
        return;
    }
    let mut child = background_cpu_mix();
    let dir = tmp();
    let out = dir.path().join("a.frec");
    let rec = flamerec()
        .args(["record", "-q", "-a", "-d", "1", "-o"])
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let me = format!("flamerec-{}", rec.id());
    let o = rec.wait_with_output().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let stacks = fold(&out, &["--per-process"]);
    let mix = share(&stacks, |s| s[0].starts_with("cpu-mix-"));
    assert!(
        mix > 5.0,
        "cpu-mix has {mix:.1}% of a system-wide recording"
    );
    // Other tests' flamerec processes may run meanwhile; this one never shows.
    assert!(
        stacks.iter().all(|(s, _)| s[0] != me),
        "{me} recorded itself"
    );
    assert_eq!(info_json(&out)["complete"], true);
}

#[test]
fn processes_started_by_a_shell_are_each_their_own_process() {
    let dir = tmp();
    let out = dir.path().join("tree.frec");
    let script = "python3 -c 'sum(range(3*10**7))' & head -c 3000000 /dev/urandom | xz -9 -T1 > /dev/null & wait";
    let Some(o) = record(&out, &[], &["sh", "-c", script]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let stacks = fold(&out, &["--per-process"]);
    for name in ["python3-", "xz-"] {
        let s = share(&stacks, |s| s[0].starts_with(name));
        assert!(s > 5.0, "{name}PID holds {s:.1}%");
    }
}

#[test]
fn sigint_is_forwarded_and_the_recording_finished() {
    if !perf_usable() {
        return;
    }
    let dir = tmp();
    let out = dir.path().join("int.frec");
    let mut rec = flamerec()
        .args(["record", "-q", "-o"])
        .arg(&out)
        .args(["--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    sleep(Duration::from_millis(500));
    let k = Command::new("kill")
        .args(["-INT", &rec.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let status = rec.wait().unwrap();
    // sleep died of the forwarded SIGINT: 128 + 2, as a shell reports it.
    assert_eq!(status.code(), Some(130));
    assert_eq!(info_json(&out)["complete"], true);
}

#[test]
fn sigkill_leaves_a_file_that_folds_up_to_its_last_chunk() {
    if !perf_usable() {
        return;
    }
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("killed.frec");
    let mut rec = flamerec()
        .args(["record", "-q", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&bin)
        .args(["--units", "3000000"])
        .spawn()
        .unwrap();
    // Chunks reach the file at least once a second.
    sleep(Duration::from_millis(2500));
    let _ = rec.kill();
    let _ = rec.wait();
    // The orphaned workload goes too.
    let _ = Command::new("pkill")
        .args(["-f", "--", "--units 3000000"])
        .status();
    let o = flamerec().arg("fold").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    let n: u64 = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert!(n > 0, "no samples before the kill");
    assert_eq!(info_json(&out)["complete"], false);
}

#[test]
fn an_event_the_machine_lacks_is_one_clear_error() {
    let dir = tmp();
    let out = dir.path().join("c.frec");
    let Some(o) = record(&out, &["-e", "cycles"], &["true"]) else {
        return;
    };
    if !o.status.success() {
        // No hardware PMU (as in most VMs): say so and name the alternative.
        let err = stderr(&o);
        assert!(
            err.starts_with("flamerec: error: ") && err.lines().count() == 1,
            "{err}"
        );
        assert!(err.contains("cpu-clock"), "{err}");
    }
}

#[test]
fn attaching_to_a_missing_pid_fails_in_one_line() {
    let o = flamerec()
        .args(["record", "-q", "-p", "999999999", "-d", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("no process with pid 999999999") && err.lines().count() == 1,
        "{err}"
    );
}

/// Runs `flamerec ARGS` as the unprivileged user `nobody`.
fn as_nobody(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_flamerec"))
        .args(args)
        .output()
        .expect("setpriv (util-linux) runs")
}

fn paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

#[test]
fn without_privileges_kernel_sampling_falls_back_and_system_wide_names_the_sysctl() {
    if !perf_usable() {
        return;
    }
    // Only meaningful where the kernel restricts unprivileged users (the default, 2).
    if paranoid() < 2 || !sys_is_root() {
        eprintln!("kernel.perf_event_paranoid < 2 or not root: nothing to check");
        return;
    }
    let dir = tmp();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = dir.path().join("user.frec");
    let busy = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done";
    let o = as_nobody(&[
        "record",
        "-q",
        "-o",
        out.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        busy,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("recording user stacks only"),
        "{}",
        stderr(&o)
    );
    assert!(
        !stderr(&o).contains("kernel symbols are hidden"),
        "{}",
        stderr(&o)
    );
    let stacks = fold(&out, &[]);
    assert!(total(&stacks) > 0);
    assert!(stacks
        .iter()
        .all(|(s, _)| !s.iter().any(|f| f.starts_with("entry_SYSCALL"))));
    let o = as_nobody(&[
        "record",
        "-q",
        "-a",
        "-d",
        "1",
        "-o",
        dir.path().join("a.frec").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.lines().count() == 1 && err.contains("kernel.perf_event_paranoid is"),
        "{err}"
    );
    assert!(err.contains("perf_event_paranoid=0"), "{err}");
}

fn sys_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

#[test]
fn lost_samples_are_counted_per_cpu_stored_and_explained() {
    if !perf_usable() {
        return;
    }
    let dir = tmp();
    let out = dir.path().join("lost.frec");
    // The recorder is stopped for a second while the command runs on: its
    // rings (one page of fp samples at 20 kHz) overrun for certain.
    let bin = sample_bin(Sample::CpuMix, FramePointers::Yes);
    let rec = flamerec()
        .args([
            "record",
            "-q",
            "-g",
            "fp",
            "--mmap-pages",
            "1",
            "-F",
            "20000",
            "-o",
        ])
        .arg(&out)
        .arg("--")
        .arg(&bin)
        .args(["--units", "600000"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = rec.id().to_string();
    sleep(Duration::from_millis(400));
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    sleep(Duration::from_millis(1000));
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let o = rec.wait_with_output().unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let info = info_json(&out);
    let lost = info["lost_samples"].as_u64().unwrap();
    let samples = info["samples"].as_u64().unwrap();
    assert!(
        lost * 100 > samples + lost,
        "{lost} lost of {samples}: {err}"
    );
    // Stored per CPU, adding up; the recorder was stopped, not waiting for a
    // CPU, so the cause is the rings' size.
    let per_cpu = info["lost_per_cpu"].as_array().unwrap();
    let sum: u64 = per_cpu.iter().map(|c| c["lost"].as_u64().unwrap()).sum();
    assert_eq!(sum, lost, "{info}");
    // (A loaded machine may add some lost while it waited for a CPU.)
    let waited = info["lost_while_recorder_waited"].as_u64().unwrap();
    assert!(waited * 2 < lost, "{info}");
    assert!(
        err.contains("CPU ") && err.contains("the rings filled between reads: raise --mmap-pages"),
        "{lost} lost of {samples}, no per-CPU count and cause: {err}"
    );
    // The count the recorder saw is the count the file keeps.
    let line = err
        .lines()
        .find(|l| l.contains(" lost, "))
        .unwrap_or_default();
    assert!(
        line.contains(&format!("{samples} samples, {lost} lost")),
        "{line}"
    );
    let text = flamerec().arg("info").arg(&out).output().unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("because a ring was full"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
}

#[test]
fn task_clock_samples_the_same_split() {
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("task.frec");
    let Some(o) = record(&out, &["-e", "task-clock"], &[bin.to_str().unwrap()]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(info_json(&out)["event"], "task-clock");
    let stacks = fold(&out, &["--no-inline"]);
    let alpha = share(&stacks, |s| s.last().is_some_and(|f| f == "cpu_mix_alpha"));
    // Tolerance 5 points, as for cpu-clock.
    assert!((45.0..=55.0).contains(&alpha), "cpu_mix_alpha {alpha:.1}%");
}

#[test]
fn sigterm_is_forwarded_and_a_second_sigint_stops_at_once() {
    if !perf_usable() {
        return;
    }
    let dir = tmp();
    let out = dir.path().join("term.frec");
    let mut rec = flamerec()
        .args(["record", "-q", "-o"])
        .arg(&out)
        .args(["--", "sleep", "30"])
        .spawn()
        .unwrap();
    sleep(Duration::from_millis(400));
    Command::new("kill")
        .args(["-TERM", &rec.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(rec.wait().unwrap().code(), Some(128 + 15));
    assert_eq!(info_json(&out)["complete"], true);

    // A command that ignores SIGINT: the first is passed on and ignored,
    // the second stops recording; the file is still finished.
    let out = dir.path().join("int2.frec");
    let mut rec = flamerec()
        .args(["record", "-q", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "trap '' INT; sleep 5"])
        .spawn()
        .unwrap();
    sleep(Duration::from_millis(400));
    for _ in 0..2 {
        Command::new("kill")
            .args(["-INT", &rec.id().to_string()])
            .status()
            .unwrap();
        sleep(Duration::from_millis(300));
    }
    assert_eq!(rec.wait().unwrap().code(), Some(130));
    assert_eq!(info_json(&out)["complete"], true);
}

#[test]
fn an_unprivileged_recording_at_the_default_rate_loses_nothing_and_keeps_whole_stacks() {
    if !perf_usable() {
        return;
    }
    // As root, drop to `nobody`: the ring buffers must then fit
    // kernel.perf_event_mlock_kb, which is where samples used to be lost.
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let dir = tmp();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let out = dir.path().join("user.frec");
    let args = [
        "record",
        "-q",
        "-o",
        out.to_str().unwrap(),
        "--",
        bin.to_str().unwrap(),
    ];
    let o = if sys_is_root() {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_flamerec"))
            .args(args)
            .env("HOME", dir.path())
            .output()
            .expect("setpriv (util-linux) runs")
    } else {
        flamerec().args(args).output().expect("run flamerec")
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let info = info_json(&out);
    assert_eq!(info["lost_samples"], 0, "{}", stderr(&o));
    let samples = info["samples"].as_u64().unwrap_or(0);
    assert!(samples >= 300, "{samples} samples");
    let stacks = fold(&out, &["--no-inline"]);
    let whole = share(&stacks, |s| s.get(1).is_some_and(|f| f == "_start"));
    assert!(whole >= 98.0, "only {whole:.1}% of stacks reach _start");
}

#[test]
fn dwarf_mode_at_4999_hz_on_every_core_loses_at_most_a_tenth_of_a_percent() {
    // The threads sample keeps both cores busy from its first instruction.
    let bin = sample_bin(Sample::Threads, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("threads.frec");
    let Some(o) = record(&out, &["-F", "4999"], &[bin.to_str().unwrap()]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let info = info_json(&out);
    let lost = info["lost_samples"].as_u64().unwrap_or(u64::MAX);
    let samples = info["samples"].as_u64().unwrap_or(0);
    assert!(samples >= 3000, "{samples} samples");
    assert!(
        lost * 1000 <= samples + lost,
        "{lost} of {} samples lost ({info}): {}",
        samples + lost,
        stderr(&o)
    );
}
