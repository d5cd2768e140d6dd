//! The three ways a [`Report`] is written out: text for people and grep,
//! folded lines for flamegraph tools (a stack census), JSON for programs.
//!
//! Text, one block per thread:
//!
//! ```text
//! process 4352 thread-states
//! thread 4352 thread-states S (sleeping)
//!   #0  anon_pipe_read  [kernel.kallsyms]
//!   …
//!   #5  read  libc.so.6
//!   #6  std::io::stdio::StdinRaw::read  thread-states  (inlined)
//!   …
//! ```
//!
//! What a thread lacks is said on a line of its block starting with `  !`.
//! Folded: one line per thread with frames, `process;thread;root;…;leaf 1`,
//! kernel frames suffixed `_[k]`, names made safe for folded text.
//! Writing only: problems that belong to no thread (ids that named no
//! process, notes) are the caller's to print.

use std::fmt::Write as _;

use flamerec_symbolize::names::{sanitize, sanitize_root};

use crate::report::{FrameKind, Method, Report, Thread};

/// The text output; `verbose` adds how each thread was captured and held,
/// and the capture time.
pub fn text(report: &Report, verbose: bool) -> String {
    let mut out = String::new();
    for p in &report.processes {
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(out, "process {} {}", p.pid, p.name);
        if let Some(e) = &p.error {
            let _ = writeln!(out, "  ! {e}");
        }
        for t in &p.threads {
            thread_text(&mut out, t, verbose);
        }
    }
    if verbose {
        let threads: usize = report.processes.iter().map(|p| p.threads.len()).sum();
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "captured {threads} thread{} of {} process{} in {}",
            plural(threads, "", "s"),
            report.processes.len(),
            plural(report.processes.len(), "", "es"),
            duration(report.capture_ns)
        );
    }
    out
}

fn thread_text(out: &mut String, t: &Thread, verbose: bool) {
    let _ = write!(
        out,
        "thread {} {} {} ({})",
        t.tid, t.name, t.state, t.state_name
    );
    if t.kernel_thread {
        out.push_str(" kernel thread");
    }
    if verbose && t.how != Method::None {
        let _ = write!(
            out,
            ": {} in {}, held {}",
            t.how.name(),
            duration(t.capture_ns),
            duration(t.held_ns)
        );
    }
    out.push('\n');
    for (i, f) in t.frames.iter().enumerate() {
        let inlined = if f.inlined { "  (inlined)" } else { "" };
        let _ = writeln!(out, "  #{i:<3} {}  {}{inlined}", f.name, f.module);
    }
    if t.truncated {
        out.push_str("  ! the user stack could not be followed further\n");
    }
    if let Some(e) = &t.error {
        let _ = writeln!(out, "  ! {e}");
    }
}

/// The folded output: one line per thread that has frames.
pub fn folded(report: &Report) -> String {
    let mut out = String::new();
    for p in &report.processes {
        for t in p.threads.iter().filter(|t| !t.frames.is_empty()) {
            out.push_str(&sanitize_root(&p.name));
            out.push(';');
            out.push_str(&sanitize(&t.name));
            for f in t.frames.iter().rev() {
                out.push(';');
                out.push_str(&sanitize(&f.name));
                if f.kind == FrameKind::Kernel {
                    out.push_str("_[k]");
                }
            }
            out.push_str(" 1\n");
        }
    }
    out
}

/// The JSON output (schema `flamerec-stacks/1`, see the crate docs), one line.
pub fn json(report: &Report) -> String {
    serde_json::to_string(report).unwrap_or_else(|e| {
        // Serializing these plain structs cannot fail; say so if it ever does.
        format!(
            "{{\"schema\":\"{}\",\"error\":{:?}}}",
            crate::SCHEMA,
            e.to_string()
        )
    })
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// `0 ns`, `412 µs`, `3.2 ms`, `1.25 s`.
fn duration(ns: u64) -> String {
    match ns {
        0 => "0 ns".to_string(),
        1..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{} µs", ns / 1_000),
        1_000_000..=999_999_999 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Frame, Process, ThreadError};

    fn report() -> Report {
        let frame = |name: &str, module: &str, kind, inlined| Frame {
            name: name.into(),
            module: module.into(),
            kind,
            inlined,
        };
        Report {
            schema: crate::SCHEMA,
            capture_ns: 1_500_000,
            notes: Vec::new(),
            errors: Vec::new(),
            processes: vec![Process {
                pid: 10,
                name: "srv".into(),
                error: None,
                threads: vec![
                    Thread {
                        tid: 10,
                        name: "srv".into(),
                        state: 'S',
                        state_name: "sleeping",
                        kernel_thread: false,
                        how: Method::SyscallFile,
                        held_ns: 0,
                        capture_ns: 40_000,
                        truncated: false,
                        error: None,
                        frames: vec![
                            frame(
                                "anon_pipe_read",
                                "[kernel.kallsyms]",
                                FrameKind::Kernel,
                                false,
                            ),
                            frame("read", "libc.so.6", FrameKind::User, false),
                            frame("Vec<u8; 4>::push", "srv", FrameKind::User, true),
                            frame("main", "srv", FrameKind::User, false),
                        ],
                    },
                    Thread {
                        tid: 11,
                        name: "gone".into(),
                        state: 'S',
                        state_name: "sleeping",
                        kernel_thread: false,
                        how: Method::None,
                        held_ns: 0,
                        capture_ns: 0,
                        truncated: false,
                        error: Some(ThreadError::Vanished { tid: 11 }),
                        frames: Vec::new(),
                    },
                ],
            }],
        }
    }

    #[test]
    fn text_has_a_header_per_thread_and_a_line_per_frame() {
        let t = text(&report(), true);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "process 10 srv");
        assert_eq!(
            lines[1],
            "thread 10 srv S (sleeping): syscall-file in 40 µs, held 0 ns"
        );
        assert_eq!(lines[2], "  #0   anon_pipe_read  [kernel.kallsyms]");
        assert_eq!(lines[4], "  #2   Vec<u8; 4>::push  srv  (inlined)");
        assert_eq!(lines[6], "thread 11 gone S (sleeping)");
        assert_eq!(lines[7], "  ! thread 11 exited during the capture");
        assert_eq!(
            lines.last(),
            Some(&"captured 2 threads of 1 process in 1.5 ms")
        );
        assert!(!text(&report(), false).contains("captured"));
    }

    #[test]
    fn folded_is_root_first_with_kernel_frames_marked() {
        assert_eq!(
            folded(&report()),
            "srv;srv;main;Vec<u8: 4>::push;read;anon_pipe_read_[k] 1\n"
        );
    }

    #[test]
    fn json_follows_the_schema() {
        let v: serde_json::Value = serde_json::from_str(&json(&report())).unwrap();
        assert_eq!(v["schema"], "flamerec-stacks/1");
        let t = &v["processes"][0]["threads"][0];
        assert_eq!(t["state"], "S");
        assert_eq!(t["how"], "syscall-file");
        assert_eq!(t["frames"][0]["kind"], "kernel");
        assert_eq!(t["frames"][2]["inlined"], true);
        assert_eq!(
            v["processes"][0]["threads"][1]["error"],
            "thread 11 exited during the capture"
        );
        assert!(v["processes"][0]["error"].is_null());
    }
}
