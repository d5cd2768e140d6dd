//! What the user is told of JIT code no file named: per command, the
//! share of its samples with such a frame anywhere in their stacks, and
//! the flags that make its runtime name its code.

use std::collections::HashMap;

use super::JitNames;

/// Scripts that run node (and take its flags through `NODE_OPTIONS`).
const NODE_LAUNCHERS: [&str; 4] = ["npm", "npx", "yarn", "pnpm"];

/// The JDK's tools that run a JVM of their own (and take its flags as
/// `-J…`).
const JDK_TOOLS: [&str; 6] = ["javac", "jshell", "jar", "javadoc", "jlink", "jpackage"];

/// The command a process name stands for (`npm run bench` → `npm`).
fn command_of(comm: &str) -> &str {
    comm.split([' ', '-']).next().unwrap_or(comm)
}

/// Whether `comm` runs a JVM: java, or a JDK tool.
fn is_jvm(comm: &str) -> bool {
    let command = command_of(comm);
    command.starts_with("java") || JDK_TOOLS.contains(&command)
}

impl JitNames {
    /// Whether processes named `comm` were started by the recorded command
    /// rather than being it (npm's node, a build tool's java).
    fn behind(&self, comm: &str) -> bool {
        self.command
            .as_deref()
            .is_some_and(|c| command_of(c) != command_of(comm))
    }

    /// Whether a JVM was among the processes whose JIT code was followed.
    pub(crate) fn followed_a_jvm(&self) -> bool {
        self.procs
            .keys()
            .any(|pid| self.comms.get(pid).is_some_and(|c| is_jvm(c)))
    }

    /// One line per command whose samples ran JIT code no perf map or
    /// jitdump named, for 1% of its samples or more; most samples first.
    pub(super) fn advice(&self) -> Vec<String> {
        // By command name, and whether the process wrote any file at all:
        // samples with a JIT frame still unnamed anywhere in their stacks,
        // of all the samples of that command's processes.
        let mut by_comm: HashMap<(&str, bool), u64> = HashMap::new();
        for ((pid, addrs), &n) in &self.unnamed {
            if addrs.iter().any(|&a| self.name_at_end(a).is_none()) {
                let comm = self.comms.get(pid).map_or("", String::as_str);
                let wrote = self.procs.get(pid).is_some_and(|s| {
                    !s.map.entries().is_empty()
                        || s.dumps.iter().any(|(d, _)| !d.loads().is_empty())
                });
                *by_comm.entry((comm, wrote)).or_default() += n;
            }
        }
        let mut of_comm: HashMap<&str, u64> = HashMap::new();
        for (pid, &n) in &self.samples {
            let comm = self.comms.get(pid).map_or("", String::as_str);
            *of_comm.entry(comm).or_default() += n;
        }
        // Every sample counted here was counted in `samples` too.
        let all_of = |comm: &str, n: u64| of_comm.get(comm).copied().unwrap_or(0).max(n);
        let told: Vec<(&str, bool, u64)> = by_comm
            .into_iter()
            .filter(|&((comm, _), n)| n * 100 >= all_of(comm, n))
            .map(|((comm, wrote), n)| (comm, wrote, n))
            .collect();
        let mut advice: Vec<(u64, String)> = told
            .iter()
            .map(|&(comm, wrote, n)| {
                let behind = self.behind(comm);
                (n, setup_advice(comm, behind, wrote, n, all_of(comm, n)))
            })
            .collect();
        // Interpreted JavaScript behind V8's one entry, unless the flag that
        // names it was advised already (with the perf flag).
        let mut interpreted: HashMap<&str, u64> = HashMap::new();
        for (pid, &n) in &self.interpreted {
            let comm = self.comms.get(pid).map_or("", String::as_str);
            *interpreted.entry(comm).or_default() += n;
        }
        for (comm, n) in interpreted {
            let flagged = told.iter().any(|&(c, wrote, _)| c == comm && !wrote);
            let all = all_of(comm, n);
            if !flagged && n * 100 >= all {
                advice.push((n, interpreted_advice(comm, self.behind(comm), n, all)));
            }
        }
        advice.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        advice.into_iter().map(|(_, a)| a).collect()
    }
}

/// What a runtime needs for its JIT code to be named, said when `n` of
/// the `all` samples of processes named `comm` had a frame in anonymous
/// memory that no file named, anywhere in their stacks; `behind` when the
/// command recorded is another program that started them (npm, gradle, a
/// shell script); `wrote` when they did write a map or dump, just not (yet)
/// for that code.
fn setup_advice(comm: &str, behind: bool, wrote: bool, n: u64, all: u64) -> String {
    let who = if comm.is_empty() { "processes" } else { comm };
    let pct = n * 100 / all.max(1);
    let share = format!("{pct}% of the samples of {who} ({n} of {all}) ran JIT code");
    if wrote {
        // What the files lack is not known: code the runtime never writes
        // a record for (a JVMTI agent's dump has compiled methods only, not
        // the interpreter or stubs), or records it writes late.
        let late = if comm == "node" {
            " (node writes its last records when it exits)"
        } else {
            ""
        };
        return format!(
            "{share} that its perf map or jitdump did not name by the end: code the runtime \
             wrote no record for, or wrote it after the recording{late}"
        );
    }
    format!(
        "{share} that no perf map or jitdump named: {}",
        runtime_advice(comm, behind)
    )
}

/// What names node's interpreted functions, said when `n` of the `all`
/// samples of processes named `comm` ran through V8's interpreter entry.
fn interpreted_advice(comm: &str, behind: bool, n: u64, all: u64) -> String {
    let who = if comm.is_empty() { "processes" } else { comm };
    let pct = n * 100 / all.max(1);
    let how = if behind || NODE_LAUNCHERS.contains(&command_of(comm)) {
        "run it with NODE_OPTIONS='--interpreted-frames-native-stack'"
    } else {
        "run node with --interpreted-frames-native-stack"
    };
    format!(
        "{pct}% of the samples of {who} ({n} of {all}) ran interpreted JavaScript, shown as \
         Builtins_InterpreterEntryTrampoline: {how} to name its functions"
    )
}

/// The flags that make the runtime behind a command name its JIT code,
/// spelled for that command: a JDK tool passes JVM flags as `-J-XX:…`; a
/// runtime the recorded command started (`behind`: npm's node, gradle's or
/// a script's java) and a node launcher take them from the environment
/// (`NODE_OPTIONS`, `JAVA_TOOL_OPTIONS`, `PYTHONPERFSUPPORT`), which the
/// launcher passes on.
fn runtime_advice(comm: &str, behind: bool) -> &'static str {
    let command = command_of(comm);
    let launcher = NODE_LAUNCHERS.contains(&command);
    if command == "node" && !behind {
        "run node with --perf-basic-prof --interpreted-frames-native-stack (or --perf-prof)"
    } else if command == "node" || launcher {
        "run it with NODE_OPTIONS='--perf-basic-prof --interpreted-frames-native-stack'"
    } else if JDK_TOOLS.contains(&command) && !behind {
        "run it with -J-XX:+PreserveFramePointer -J-XX:+UnlockDiagnosticVMOptions -J-XX:+DumpPerfMapAtExit"
    } else if is_jvm(comm) && behind {
        "run it with JAVA_TOOL_OPTIONS='-XX:+PreserveFramePointer -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit'"
    } else if is_jvm(comm) {
        "run java with -XX:+PreserveFramePointer -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit, or `jcmd PID Compiler.perfmap` before it ends"
    } else if command.starts_with("python") && behind {
        "run it with PYTHONPERFSUPPORT=1 (CPython 3.12+)"
    } else if command.starts_with("python") {
        "run CPython 3.12+ with -X perf"
    } else {
        "its runtime must write /tmp/perf-PID.map or a jitdump"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advice_names_the_flag_or_says_the_records_came_late() {
        let none = setup_advice("node", false, false, 85, 100);
        assert!(
            none.starts_with("85% of the samples of node (85 of 100) ran JIT code"),
            "{none}"
        );
        assert!(
            none.ends_with("--perf-basic-prof --interpreted-frames-native-stack (or --perf-prof)"),
            "{none}"
        );
        assert!(setup_advice("python3.12", false, false, 3, 100).ends_with("with -X perf"));
        // Each launcher in its own spelling.
        assert!(
            runtime_advice("javac", false).starts_with("run it with -J-XX:+PreserveFramePointer")
        );
        assert!(runtime_advice("java", false).starts_with("run java with -XX:"));
        assert!(runtime_advice("npm run bench", false).contains("NODE_OPTIONS="));
        assert!(runtime_advice("npx", false).contains("NODE_OPTIONS="));
        let late = setup_advice("node", false, true, 19, 100);
        assert!(late.contains("wrote no record for"), "{late}");
        assert!(
            late.ends_with("(node writes its last records when it exits)"),
            "{late}"
        );
        let node = interpreted_advice("node", false, 89, 100);
        assert!(
            node.starts_with("89% of the samples of node (89 of 100) ran interpreted"),
            "{node}"
        );
        assert!(
            node.ends_with("run node with --interpreted-frames-native-stack to name its functions"),
            "{node}"
        );
        assert!(interpreted_advice("npm", false, 5, 10)
            .contains("NODE_OPTIONS='--interpreted-frames-native-stack'"));
        // Started by another command: spelled for the environment.
        assert!(runtime_advice("node", true).starts_with("run it with NODE_OPTIONS="));
        assert!(runtime_advice("java", true).starts_with("run it with JAVA_TOOL_OPTIONS="));
        assert!(runtime_advice("python3.12", true).contains("PYTHONPERFSUPPORT=1"));
        assert!(interpreted_advice("node", true, 5, 10).contains("NODE_OPTIONS="));
        let java = setup_advice("java", false, true, 98, 100);
        assert!(!java.contains("node"), "{java}");
        assert!(!late.contains("--perf-prof"), "{late}");
    }
}
