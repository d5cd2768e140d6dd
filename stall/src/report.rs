//! What a stall report holds and how it reads: text for people
//! (`Display`, leaf first) and one folded line for flamegraph tools.
//! This module only formats; it never captures or symbolizes.

use std::fmt;
use std::time::Duration;

use flamerec_symbolize::names::{sanitize, sanitize_root};

/// Which time a stall is measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Clock {
    /// The thread's own CPU time (a `task-clock` perf event, as Seastar's
    /// detector): catches a thread that runs too long without a tick, in user
    /// code or in the kernel on its behalf (page faults, a big `mmap`,
    /// copying). Time blocked (sleeping in `read`, waiting on a lock) does
    /// not count. Kernel stacks are sampled where perf events allow it.
    #[default]
    Cpu,
    /// Wall time: any time without a tick counts, blocked included, except
    /// while the thread said it is idle ([`crate::ThreadGuard::idle`]).
    /// Stacks are taken with a signal (user frames), plus, as root, the
    /// kernel stack of a thread blocked in a system call.
    Wall,
}

impl Clock {
    fn describe(self) -> &'static str {
        match self {
            Clock::Cpu => "CPU time",
            Clock::Wall => "wall time",
        }
    }
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Function name (demangled), or `module+0xOFFSET` when unknown.
    pub name: String,
    /// The function was inlined into the next frame (its caller).
    pub inlined: bool,
}

/// A stall of one thread.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Report {
    /// Thread id.
    pub tid: u32,
    /// Thread name (`/proc/self/task/TID/comm`).
    pub thread_name: String,
    /// Time without a tick so far, in `clock` time: a lower bound, short of
    /// the truth by at most a quarter of the threshold.
    pub duration: Duration,
    /// The part of `duration` no earlier delivered report of this stall
    /// accounted for; the weight of the folded line, so the lines of many
    /// reports add up to the stalled time.
    pub new_time: Duration,
    /// The stall is over (the thread ticked): `duration` is final, the
    /// stacks are the last ones taken during it.
    pub ended: bool,
    /// The clock `duration` is measured in.
    pub clock: Clock,
    /// Kernel frames, leaf first; empty when the thread was in user code or
    /// kernel stacks are not available.
    pub kernel: Vec<Frame>,
    /// User frames, leaf first, inlined functions expanded.
    pub user: Vec<Frame>,
    /// Reports the rate limit dropped since the previous delivered one.
    pub suppressed: u64,
}

impl Report {
    /// The stack as one folded line, `thread;outermost;...;leaf WEIGHT`,
    /// root first, user frames then kernel frames, weight in milliseconds of
    /// [`Report::new_time`] (at least 1). `inferno-flamegraph` and
    /// `flamerec diff` read many such lines.
    pub fn folded(&self) -> String {
        let mut line = sanitize_root(&self.thread_name);
        for f in self.user.iter().rev().chain(self.kernel.iter().rev()) {
            line.push(';');
            line.push_str(&sanitize(&f.name));
        }
        let ms = self.new_time.as_millis().max(1);
        line.push(' ');
        line.push_str(&ms.to_string());
        line
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.duration.as_millis();
        let state = if self.ended { "ended" } else { "so far" };
        write!(
            f,
            "stall: thread {:?} (tid {}): no tick for {ms} ms of {}, {state}",
            self.thread_name,
            self.tid,
            self.clock.describe()
        )?;
        if self.suppressed > 0 {
            write!(
                f,
                " ({} earlier report{} suppressed by the rate limit)",
                self.suppressed,
                if self.suppressed == 1 { "" } else { "s" }
            )?;
        }
        let frames = self
            .kernel
            .iter()
            .map(|fr| ("[k] ", fr))
            .chain(self.user.iter().map(|fr| ("", fr)));
        for (i, (side, fr)) in frames.enumerate() {
            let inl = if fr.inlined { " (inlined)" } else { "" };
            write!(f, "\n  #{i:<3} {side}{}{inl}", fr.name)?;
        }
        if self.kernel.is_empty() && self.user.is_empty() {
            write!(f, "\n  (no stack could be taken)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, inlined: bool) -> Frame {
        Frame {
            name: name.into(),
            inlined,
        }
    }

    fn report() -> Report {
        Report {
            tid: 42,
            thread_name: "loop; 1".into(),
            duration: Duration::from_millis(200),
            new_time: Duration::from_millis(100),
            ended: false,
            clock: Clock::Cpu,
            kernel: vec![frame("clear_page_erms", false), frame("do_fault", false)],
            user: vec![
                frame("core::ptr::write", true),
                frame("app::fill", false),
                frame("main", false),
            ],
            suppressed: 2,
        }
    }

    #[test]
    fn folded_is_root_first_and_weighs_new_milliseconds() {
        assert_eq!(
            report().folded(),
            "loop:_1;main;app::fill;core::ptr::write;do_fault;clear_page_erms 100"
        );
    }

    #[test]
    fn text_is_leaf_first_with_kernel_marked() {
        let text = report().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("tid 42"), "{text}");
        assert!(
            lines[0].contains("no tick for 200 ms of CPU time, so far"),
            "{text}"
        );
        assert!(lines[0].contains("2 earlier reports suppressed"), "{text}");
        assert_eq!(lines[1].trim(), "#0   [k] clear_page_erms");
        assert_eq!(lines[3].trim(), "#2   core::ptr::write (inlined)");
        assert_eq!(lines[5].trim(), "#4   main");
    }
}
