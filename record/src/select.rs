//! Which processes a system-wide recording keeps: rules by pid, executable
//! name, cgroup or container, decided once per process image from its
//! identity (what /proc says at its first sample), before its stack is
//! unwound — a left-out process costs the recorder one lookup per sample.
//!
//! A process is kept when no `include` rule is given or one matches, and no
//! `exclude` rule matches (as the OpenTelemetry profiler's and Parca's
//! relabelling keep or drop a target; here before any work is spent on it).

use std::fmt;
use std::str::FromStr;

use flamerec_format::Identity;

/// One rule: which processes it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessRule {
    /// The process of this pid (as the host sees it).
    Pid(u32),
    /// Processes whose executable's file name is this (`rustc`, `python3.12`).
    Executable(String),
    /// Processes in this cgroup (v2) or below it: `/system.slice/nginx.service`.
    Cgroup(String),
    /// Processes of the container whose id starts with this.
    Container(String),
}

/// A rule written wrongly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError(String);

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RuleError {}

impl FromStr for ProcessRule {
    type Err = RuleError;

    /// `pid:N`, `exe:NAME`, `cgroup:PATH` or `container:ID` (a prefix of
    /// the id, 4 characters or more).
    fn from_str(s: &str) -> Result<Self, RuleError> {
        let wrong = |why: &str| RuleError(format!("`{s}`: {why}"));
        let (kind, value) = s
            .split_once(':')
            .ok_or_else(|| wrong("expected pid:N, exe:NAME, cgroup:PATH or container:ID"))?;
        match kind {
            "pid" => value
                .parse()
                .map(ProcessRule::Pid)
                .map_err(|_| wrong("a pid is a number")),
            "exe" if !value.is_empty() && !value.contains('/') => {
                Ok(ProcessRule::Executable(value.to_string()))
            }
            "exe" => Err(wrong("an executable's file name, without a directory")),
            "cgroup" if value.starts_with('/') => {
                Ok(ProcessRule::Cgroup(value.trim_end_matches('/').to_string()))
            }
            "cgroup" => Err(wrong("a cgroup path as /proc/PID/cgroup gives it, from /")),
            "container" if value.len() >= 4 && value.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Ok(ProcessRule::Container(value.to_ascii_lowercase()))
            }
            "container" => Err(wrong("4 or more hex digits of a container id")),
            _ => Err(wrong(
                "expected pid:N, exe:NAME, cgroup:PATH or container:ID",
            )),
        }
    }
}

impl ProcessRule {
    /// Whether the process `pid`, whose identity is `id` (`None` when
    /// /proc no longer shows it), matches.
    fn matches(&self, pid: u32, id: Option<&Identity>) -> bool {
        match self {
            ProcessRule::Pid(p) => *p == pid,
            ProcessRule::Executable(name) => {
                id.is_some_and(|i| i.executable.rsplit('/').next() == Some(name.as_str()))
            }
            ProcessRule::Cgroup(path) => id.is_some_and(|i| {
                i.cgroup == *path
                    || path.is_empty()
                    || i.cgroup
                        .strip_prefix(path.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            }),
            ProcessRule::Container(prefix) => {
                id.is_some_and(|i| i.container.starts_with(prefix.as_str()))
            }
        }
    }
}

/// The rules of one recording; keeps everything when empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Kept only when one of these matches (when any is given).
    pub include: Vec<ProcessRule>,
    /// Left out when one of these matches.
    pub exclude: Vec<ProcessRule>,
}

impl Selection {
    /// Whether every process is kept (no rule given).
    pub fn is_everything(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }

    /// Whether the process `pid` with identity `id` is kept. A process
    /// gone before it is identified matches only pid rules: it is kept
    /// when it matches no include rule only if there is none.
    pub fn keeps(&self, pid: u32, id: Option<&Identity>) -> bool {
        let any = |rules: &[ProcessRule]| rules.iter().any(|r| r.matches(pid, id));
        (self.include.is_empty() || any(&self.include)) && !any(&self.exclude)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(exe: &str, cgroup: &str, container: &str) -> Identity {
        Identity {
            executable: exe.into(),
            cgroup: cgroup.into(),
            container: container.into(),
            ..Identity::default()
        }
    }

    #[test]
    fn rules_parse_and_refuse_what_cannot_match() {
        assert_eq!("pid:42".parse(), Ok(ProcessRule::Pid(42)));
        assert_eq!(
            "exe:rustc".parse(),
            Ok(ProcessRule::Executable("rustc".into()))
        );
        assert_eq!(
            "cgroup:/system.slice/a.service/".parse(),
            Ok(ProcessRule::Cgroup("/system.slice/a.service".into()))
        );
        assert_eq!(
            "container:0BCAEB88".parse(),
            Ok(ProcessRule::Container("0bcaeb88".into()))
        );
        for bad in [
            "42",
            "pid:x",
            "exe:",
            "exe:/usr/bin/rustc",
            "cgroup:system.slice",
            "container:0bc",
            "container:xyz1",
            "user:root",
        ] {
            let e = bad.parse::<ProcessRule>().unwrap_err();
            assert!(e.to_string().starts_with(&format!("`{bad}`: ")), "{e}");
        }
    }

    #[test]
    fn includes_then_excludes_decide() {
        let rustc = id("/usr/lib/rust/bin/rustc", "/user.slice/build", "");
        let ctr = id(
            "/usr/bin/python3.12",
            "/machine.slice/libpod-0bcaeb88.scope",
            "0bcaeb88ff",
        );
        let everything = Selection::default();
        assert!(everything.is_everything() && everything.keeps(1, None));

        let only_rustc = Selection {
            include: vec![ProcessRule::Executable("rustc".into())],
            exclude: vec![],
        };
        assert!(only_rustc.keeps(1, Some(&rustc)));
        assert!(!only_rustc.keeps(2, Some(&ctr)));
        assert!(!only_rustc.keeps(3, None), "unknown: not proven to match");

        let not_the_build = Selection {
            include: vec![],
            exclude: vec![ProcessRule::Cgroup("/user.slice".into())],
        };
        assert!(!not_the_build.keeps(1, Some(&rustc)));
        assert!(not_the_build.keeps(2, Some(&ctr)));
        assert!(not_the_build.keeps(3, None));
        // A path prefix that is not a whole component does not match.
        let partial = Selection {
            include: vec![],
            exclude: vec![ProcessRule::Cgroup("/user.sl".into())],
        };
        assert!(partial.keeps(1, Some(&rustc)));

        let container_but_pid = Selection {
            include: vec![ProcessRule::Container("0bcaeb88".into())],
            exclude: vec![ProcessRule::Pid(7)],
        };
        assert!(container_but_pid.keeps(6, Some(&ctr)));
        assert!(!container_but_pid.keeps(7, Some(&ctr)));
        assert!(!container_but_pid.keeps(8, Some(&rustc)));
    }
}
