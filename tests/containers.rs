//! End-to-end tests of processes that see other files than the recorder:
//! a mount namespace of its own, and real containers (podman with runc,
//! from Debian's packages; `.ci/run` installs them) recorded from the host
//! by pid, by container and system-wide. A missing podman fails naming
//! the cause unless FLAMEREC_SKIP_CONTAINER_TESTS=1.
//!
//! Margins: every share here is of the recorded program's own samples,
//! which follow its CPU time whatever else runs. Attached while it works,
//! no sample is of its start-up or exit, so its stacks are whole but for a
//! sample caught in a page fault's or signal's frame: 99.5% is the issue's
//! line and measured here at 99.9–100%. The 50/30/20 split within ±5
//! points needs ≈ 1,000 samples (the 50% share's standard deviation is 1.6
//! points then): 3 s attached at 999 Hz gives that with 2 CPUs shared by
//! up to 3 runnable tasks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::*;
use flamerec_samples::{FramePointers, Sample};
use flamerec_testkit::{python, skip_or_fail, SKIP_CONTAINER};

/// cpu-mix's work units for the containers' programs: ≈ 7 s of CPU, more
/// than any recording here lasts.
const UNITS: &str = "2000000";

/// podman, run with runc and a containers.conf of the tests' own: crun
/// refuses a hybrid cgroup tree, and podman's default open-file limit is
/// more than a machine may allow.
struct Podman {
    conf: tempfile::TempDir,
}

impl Podman {
    /// podman and runc when both run here; `None` when they do not and
    /// FLAMEREC_SKIP_CONTAINER_TESTS=1; a failure naming the cause else.
    fn find() -> Option<Podman> {
        let missing = ["podman", "runc"].into_iter().find(|tool| {
            !Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
        if let Some(tool) = missing {
            skip_or_fail(
                SKIP_CONTAINER,
                format!(
                    "{tool} does not run here, so the container tests cannot start a container \
                     (apt-get install podman runc)"
                ),
            );
            return None;
        }
        let conf = tmp();
        std::fs::write(
            conf.path().join("containers.conf"),
            "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n",
        )
        .expect("write containers.conf");
        Some(Podman { conf })
    }

    fn command(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", self.conf.path().join("containers.conf"))
            .args(["--runtime", "runc"]);
        c
    }

    /// Starts `argv` in a container whose root is `root`, detached.
    fn run(&self, root: &Path, argv: &[&str]) -> Container<'_> {
        self.run_with(root, &[], argv)
    }

    /// [`Podman::run`] with host directories mounted read-only (`(host
    /// directory, path inside)`).
    fn run_with(&self, root: &Path, volumes: &[(&Path, &str)], argv: &[&str]) -> Container<'_> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "flamerec-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut c = self.command();
        // A /tmp of its own: the root is shared by the tests' containers,
        // and a runtime's perf map there would outlive its container.
        c.args([
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            "none",
            "--tmpfs",
            "/tmp",
        ]);
        for (host, inside) in volumes {
            c.arg("-v").arg(format!("{}:{inside}:ro", host.display()));
        }
        let o = c
            .arg("--rootfs")
            .arg(root)
            .args(argv)
            .output()
            .expect("run podman");
        assert!(o.status.success(), "podman run: {}", stderr(&o));
        let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let c = Container {
            podman: self,
            name,
            id,
        };
        wait_for("the container's process", || c.pid().is_some());
        c
    }
}

/// A running container, removed when dropped.
struct Container<'p> {
    podman: &'p Podman,
    name: String,
    id: String,
}

impl Container<'_> {
    /// Its first process's pid on the host.
    fn pid(&self) -> Option<u32> {
        let o = self
            .podman
            .command()
            .args(["inspect", "--format", "{{.State.Pid}}", &self.name])
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .ok()
            .filter(|&p| p > 0)
    }

    /// How fold --container and info name it.
    fn label(&self) -> String {
        format!("podman:{}", &self.id[..12])
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        // -t 0: the program is pid 1 in its namespace and ignores SIGTERM.
        let _ = self
            .podman
            .command()
            .args(["rm", "-f", "-t", "0", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A root file system holding `bin` at `/opt/x/NAME` (a path the host
/// does not have) and copies of the libraries and loader it needs.
fn root_with(dir: &Path, bin: &Path) -> (PathBuf, String) {
    let root = dir.join("root");
    let name = bin.file_name().unwrap().to_str().unwrap().to_string();
    let inside = format!("/opt/x/{name}");
    let o = Command::new("ldd").arg(bin).output().expect("run ldd");
    assert!(o.status.success(), "ldd {}: {}", bin.display(), stderr(&o));
    let libs: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| path.to_string())
        })
        .collect();
    for (from, to) in libs
        .iter()
        .map(|l| (PathBuf::from(l), l.clone()))
        .chain([(bin.to_path_buf(), inside.clone())])
    {
        let dest = root.join(to.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        // A copy, not the host's file: another inode at a path the host
        // has (its libc) or has not (the program).
        std::fs::copy(&from, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
    for d in ["proc", "dev", "sys", "etc", "tmp"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    (root, inside)
}

/// cpu-mix in a container whose root `root_with` made in `dir`, at work:
/// the container and its pid on the host.
fn cpu_mix_in<'p>(podman: &'p Podman, dir: &Path) -> (Container<'p>, u32) {
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let (root, inside) = root_with(dir, &bin);
    let c = podman.run(&root, &[&inside, "--units", UNITS]);
    let pid = c.pid().expect("its pid");
    wait_for("cpu-mix at work", || cpu_ticks(pid) >= 5);
    (c, pid)
}

/// Records `args` (a target and its duration) into `out`, failing on error.
fn record_target(out: &Path, args: &[&str]) -> Output {
    let o = flamerec()
        .args(["record", "-q", "-o"])
        .arg(out)
        .args(args)
        .output()
        .expect("run flamerec");
    assert!(o.status.success(), "{}", stderr(&o));
    o
}

/// Whole (from `_start`) and named as cpu-mix on the host: the split,
/// and every stack of the program through `cpu_mix_run`.
fn assert_cpu_mix(stacks: &Stacks, what: &str) {
    let mix: Stacks = stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == "cpu-mix"))
        .cloned()
        .collect();
    assert!(total(&mix) >= 300, "{what}: {} samples", total(&mix));
    let at = mix[0].0.iter().position(|f| f == "cpu-mix").unwrap_or(0);
    let whole = share(&mix, |s| s.get(at + 1).is_some_and(|f| f == "_start"));
    assert!(
        whole >= 99.5,
        "{what}: only {whole:.2}% of stacks reach _start"
    );
    let run = share(&mix, |s| s.iter().any(|f| f == "cpu_mix_run"));
    assert!(run >= 99.5, "{what}: cpu_mix_run in only {run:.2}%");
    let own: Stacks = mix.iter().map(|(s, n)| (s[at..].to_vec(), *n)).collect();
    assert_expected_shares(&own, Sample::CpuMix);
}

#[test]
fn a_process_in_its_own_mount_namespace_is_named_from_its_own_files() {
    let Some(_alone) = measuring() else {
        return;
    };
    // The program at a path only its mount namespace has (a tmpfs over
    // /mnt): the host's /mnt is another directory.
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let script = format!(
        "mount -t tmpfs tmpfs /mnt && cp {} /mnt/cpu-mix && exec /mnt/cpu-mix --units {UNITS}",
        bin.display()
    );
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .expect("run unshare");
    wait_for("cpu-mix in its own mount namespace", || {
        proc_stat(child.id()).is_some_and(|s| s.comm == "cpu-mix") && cpu_ticks(child.id()) >= 5
    });
    let dir = tmp();
    let out = dir.path().join("ns.frec");
    let pid = child.id().to_string();
    let o = record_target(&out, &["-p", &pid, "-d", "3"]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(!stderr(&o).contains("missing"), "{}", stderr(&o));
    assert_cpu_mix(&fold(&out, &["--no-inline"]), "attached");
}

#[test]
fn a_container_recorded_by_pid_is_whole_and_named_with_its_identity() {
    let Some(_alone) = measuring() else {
        return;
    };
    let Some(podman) = Podman::find() else {
        return;
    };
    let dir = tmp();
    let (c, pid) = cpu_mix_in(&podman, dir.path());
    let out = dir.path().join("pid.frec");
    let pid_arg = pid.to_string();
    let o = record_target(&out, &["-p", &pid_arg, "-d", "3"]);
    assert!(!stderr(&o).contains("missing"), "{}", stderr(&o));
    assert_cpu_mix(&fold(&out, &["--no-inline"]), "by pid");

    // Its identity: the container in info, and as the outermost frame.
    let info = info_json(&out);
    let containers = info["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "{info}");
    assert_eq!(containers[0]["container"], c.label(), "{info}");
    assert_eq!(containers[0]["id"], c.id.as_str(), "{info}");
    let stacks = fold(&out, &["--container"]);
    assert!(
        stacks
            .iter()
            .all(|(s, _)| s[0] == c.label() && s[1] == "cpu-mix"),
        "{:?}",
        &stacks[..stacks.len().min(3)]
    );
}

#[test]
fn a_container_recorded_by_its_id_holds_its_processes_only() {
    let Some(_alone) = measuring() else {
        return;
    };
    let Some(podman) = Podman::find() else {
        return;
    };
    let dir = tmp();
    let (c, _) = cpu_mix_in(&podman, dir.path());
    // The same program on the host, busy meanwhile: not in the cgroup.
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let mut host = Command::new(&bin)
        .args(["--units", UNITS])
        .stdout(Stdio::null())
        .spawn()
        .expect("start cpu-mix");
    let out = dir.path().join("id.frec");
    record_target(&out, &["--container", &c.id[..8], "-d", "3"]);
    let _ = host.kill();
    let _ = host.wait();
    let stacks = fold(&out, &["--container", "--per-process", "--no-inline"]);
    let roots: std::collections::BTreeSet<&str> =
        stacks.iter().map(|(s, _)| s[0].as_str()).collect();
    assert_eq!(roots.into_iter().collect::<Vec<_>>(), [c.label()]);
    let host_pid = format!("cpu-mix-{}", host.id());
    assert!(
        !stacks.iter().any(|(s, _)| s[1] == host_pid),
        "the host's cpu-mix was recorded"
    );
    let own: Stacks = stacks
        .iter()
        .map(|(s, n)| {
            let mut s = s[1..].to_vec();
            s[0] = "cpu-mix".into();
            (s, *n)
        })
        .collect();
    assert_cpu_mix(&own, "by container id");
    assert_eq!(info_json(&out)["processes"], 1);
}

#[test]
fn system_wide_each_container_is_named_and_listed() {
    let Some(_alone) = measuring() else {
        return;
    };
    let Some(podman) = Podman::find() else {
        return;
    };
    let dir = tmp();
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let (root, inside) = root_with(dir.path(), &bin);
    let a = podman.run(&root, &[&inside, "--units", UNITS]);
    let b = podman.run(&root, &[&inside, "--units", UNITS]);
    for c in [&a, &b] {
        let pid = c.pid().expect("its pid");
        wait_for("cpu-mix at work", || cpu_ticks(pid) >= 5);
    }
    let out = dir.path().join("all.frec");
    record_target(&out, &["-a", "-d", "3"]);
    let info = info_json(&out);
    let listed: Vec<&str> = info["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .filter_map(|c| c["container"].as_str())
        .collect();
    let stacks = fold(&out, &["--container", "--no-inline"]);
    for c in [&a, &b] {
        assert!(listed.contains(&c.label().as_str()), "{info}");
        let own: Stacks = stacks
            .iter()
            .filter(|(s, _)| s[0] == c.label())
            .map(|(s, n)| (s[1..].to_vec(), *n))
            .collect();
        assert_cpu_mix(&own, &c.label());
    }
}

/// The Debian sid root `tests/rootfs/make-sid-root` makes (`.ci/install-test-tools`
/// runs it): a libc newer than the host's, CPython 3.13–3.15 and node, as a
/// container image would hold them.
fn sid_root() -> Option<PathBuf> {
    let root = std::env::var_os("FLAMEREC_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/flamerec/sid-root"),
        PathBuf::from,
    );
    if root.join(".flamerec-complete").is_file() {
        return Some(root);
    }
    skip_or_fail(
        SKIP_CONTAINER,
        format!(
            "no sid root at {} (make it with tests/rootfs/make-sid-root, which needs mmdebstrap)",
            root.display()
        ),
    );
    None
}

/// A directory holding `file` alone, to mount into a container.
fn dir_with(dir: &Path, file: &str) -> PathBuf {
    let d = dir.join("mounted");
    std::fs::create_dir_all(&d).unwrap();
    let name = Path::new(file).file_name().unwrap();
    std::fs::copy(file, d.join(name)).unwrap_or_else(|e| panic!("copy {file}: {e}"));
    d
}

/// pyenv's CPython 3.12 mounted into a container of the sid root (another
/// libc, its own pid namespace: its threads know other ids than the
/// host's), known.py recorded by container: Python frames shown and right,
/// as on the host (`python::shown`'s checks; named in ≥ 50% of samples, as
/// there).
#[test]
fn cpython_in_a_container_shows_its_python_frames() {
    if !bpf_usable() {
        return;
    }
    let Some(python) = python(12) else {
        return;
    };
    let Some(_alone) = measuring() else {
        return;
    };
    let (Some(podman), Some(root)) = (Podman::find(), sid_root()) else {
        return;
    };
    let dir = tmp();
    let prefix = python
        .parent()
        .and_then(Path::parent)
        .expect("pyenv prefix");
    let scripts = dir_with(dir.path(), crate::python::SCRIPT);
    let prefix_inside = prefix.to_str().unwrap();
    let c = podman.run_with(
        &root,
        &[(prefix, prefix_inside), (&scripts, "/opt/x")],
        &[python.to_str().unwrap(), "/opt/x/known.py", "100000"],
    );
    let pid = c.pid().expect("its pid");
    wait_for("known.py at work", || cpu_ticks(pid) >= 20);
    let out = dir.path().join("py.frec");
    record_target(&out, &["--container", &c.id[..12], "-d", "3"]);
    let stacks = fold(&out, &[]);
    let s = crate::python::shown("cpython 3.12 in a container", &stacks);
    assert!(
        s.named * 2 >= s.samples,
        "{} of {} samples show known.py's frames",
        s.named,
        s.samples
    );
}

/// node from the sid root in a container, `--perf-basic-prof`: its perf
/// map is `/tmp/perf-1.map` inside the container (pid 1 there), read
/// through the container's root; the JS functions are named and their
/// stacks whole. (node 24 inlines fb and fc into fa: the split is node's,
/// not asserted here; the host's node test asserts it.)
#[test]
fn node_in_a_container_is_named_from_its_own_perf_map() {
    let Some(_alone) = measuring() else {
        return;
    };
    let (Some(podman), Some(root)) = (Podman::find(), sid_root()) else {
        return;
    };
    let dir = tmp();
    let scripts = dir_with(dir.path(), crate::jit::PROGRAM);
    let c = podman.run_with(
        &root,
        &[(&scripts, "/opt/x")],
        &[
            "node",
            "--allow-natives-syntax",
            "--perf-basic-prof",
            "/opt/x/known-profile.js",
            "100000",
        ],
    );
    let pid = c.pid().expect("its pid");
    wait_for("node at work", || cpu_ticks(pid) >= 50);
    let out = dir.path().join("js.frec");
    let o = record_target(&out, &["-p", &pid.to_string(), "-d", "3"]);
    let err = stderr(&o);
    assert!(!err.contains("not the files at their paths"), "{err}");
    let stacks = fold(&out, &[]);
    let ours: Stacks = stacks
        .into_iter()
        .filter(|(s, _)| {
            s.iter()
                .any(|f| matches!(crate::jit::js_function(f), Some("fa" | "fb" | "fc")))
        })
        .collect();
    assert!(
        total(&ours) >= 500,
        "{} samples in fa, fb or fc",
        total(&ours)
    );
    let anon = share(&ours, |s| s.iter().any(|f| f.starts_with("[anon]")));
    assert!(
        anon < 1.0,
        "{anon:.1}% of their stacks hold unnamed JIT code"
    );
    let whole = share(&ours, |s| s.get(1).is_some_and(|f| f == "_start"));
    assert!(whole >= 97.0, "{whole:.1}% whole");
    let info = info_json(&out);
    assert!(
        info["jit_frames"]["perf_map"].as_u64().unwrap_or(0) > 0,
        "{info}"
    );
}

/// Debian's CPython 3.13, 3.14 and 3.15 (sid's, stripped of their symbol
/// tables: the eval loop's cold part is found from its jumps; 3.14 and
/// 3.15 read by the offsets they publish) in a container: known.py's
/// Python frames shown and right as on the host (`python::shown`; named
/// in ≥ 50% of samples, measured 99.7%: the rest is start-up).
#[test]
fn debians_cpython_3_13_to_3_15_in_a_container_show_their_python_frames() {
    if !bpf_usable() {
        return;
    }
    let Some(_alone) = measuring() else {
        return;
    };
    let (Some(podman), Some(root)) = (Podman::find(), sid_root()) else {
        return;
    };
    let dir = tmp();
    let scripts = dir_with(dir.path(), crate::python::SCRIPT);
    for minor in [13, 14, 15] {
        let python = format!("python3.{minor}");
        let c = podman.run_with(
            &root,
            &[(&scripts, "/opt/x")],
            &[&python, "/opt/x/known.py", "100000"],
        );
        let pid = c.pid().expect("its pid");
        wait_for("known.py at work", || cpu_ticks(pid) >= 20);
        let out = dir.path().join("py.frec");
        let o = record_target(&out, &["-p", &pid.to_string(), "-d", "2"]);
        let err = stderr(&o);
        assert!(!err.contains("no layout"), "{python}: {err}");
        let s = crate::python::shown(&python, &fold(&out, &[]));
        assert!(
            s.named * 2 >= s.samples,
            "{python}: {} of {} samples show known.py's frames",
            s.named,
            s.samples
        );
        let info = info_json(&out);
        let version = info["python"][0]["version"].as_str().unwrap_or_default();
        assert!(version.starts_with(&format!("3.{minor}.")), "{info}");
    }
}

/// A C program whose work is in `NAME_work`, called from `main` until
/// killed: two builds of it at one path are told apart by their names.
fn spinner(name: &str) -> String {
    format!(
        "#include <stdint.h>\n\
         __attribute__((noinline)) uint64_t {name}_work(uint64_t n) {{\n\
           volatile uint64_t t = 0; for (uint64_t i = 0; i < n; i++) t += i * i; return t; }}\n\
         int main(void) {{ volatile uint64_t s = 0; for (;;) s += {name}_work(1000000); }}\n"
    )
}

/// A program whose binary was replaced at its path while it ran (a
/// deploy, a rebuild): read as it was mapped, never as the file now at
/// that path. The host's file is another build whose function is
/// `replaced_work`: it must not name a single frame.
#[test]
fn a_binary_replaced_while_it_runs_is_named_as_it_was_mapped() {
    let Some(_alone) = measuring() else {
        return;
    };
    let dir = tmp();
    let old = compile_c(dir.path(), "old", &spinner("original"), &["-O1", "-g"]);
    let new = compile_c(dir.path(), "new", &spinner("replaced"), &["-O1", "-g"]);
    let at = dir.path().join("service");
    std::fs::copy(&old, &at).expect("install the first build");
    let mut child = Command::new(&at).spawn().expect("start it");
    wait_for("the program at work", || cpu_ticks(child.id()) >= 5);
    // Replaced as a deploy does: a new file renamed over the path.
    let staged = dir.path().join("service.new");
    std::fs::copy(&new, &staged).expect("stage the second build");
    std::fs::rename(&staged, &at).expect("replace the binary");
    let out = dir.path().join("replaced.frec");
    let o = record_target(&out, &["-p", &child.id().to_string(), "-d", "2"]);
    let _ = child.kill();
    let _ = child.wait();
    let stacks = fold(&out, &["--no-inline"]);
    assert!(
        total(&stacks) >= 300,
        "{} samples: {}",
        total(&stacks),
        stderr(&o)
    );
    let original = share(&stacks, |s| s.iter().any(|f| f == "original_work"));
    let replaced = share(&stacks, |s| s.iter().any(|f| f == "replaced_work"));
    assert_eq!(replaced, 0.0, "named by the file now at its path");
    assert!(original >= 95.0, "original_work in {original:.1}%");
}

/// `flamerec agent` system-wide: a container's process reaches the
/// OpenTelemetry Collector's receiver as its own resource, with the
/// container's id, its service named by the container, its executable as
/// the process sees it, and whole, named stacks.
#[test]
fn the_agent_sends_a_containers_samples_with_its_identity() {
    use crate::agent::{free_port, received, receiver, Agent, Collector};
    let Some(rx) = receiver() else { return };
    let Some(_w) = workload() else { return };
    let Some(podman) = Podman::find() else { return };
    let dir = tmp();
    let (c, pid) = cpu_mix_in(&podman, dir.path());
    let port = free_port();
    let out = dir.path().join("received.jsonl");
    let _collector = Collector::start(&rx, port, &out, &[]);
    let url = format!("http://127.0.0.1:{port}");
    let spool = dir.path().join("spool");
    let agent = Agent::start(
        dir.path(),
        "agent",
        &["--otlp", &url, "--spool", spool.to_str().unwrap()],
        &[],
    );
    wait_for("two windows", || agent.windows() >= 2);
    let (said, _) = agent.stop();
    let (procs, _) = received(&out);
    let p = procs
        .get(&i64::from(pid))
        .unwrap_or_else(|| panic!("no process {pid} in the requests: {said}"));
    let text = |k: &str| {
        p.attributes
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(text("container.id"), c.id);
    assert_eq!(text("service.name"), c.label());
    assert_eq!(text("process.executable.path"), "/opt/x/cpu-mix");
    let whole = share(&p.stacks, |s| s.first().is_some_and(|f| f == "_start"));
    assert!(
        whole >= 99.0,
        "{whole:.1}% whole of {} samples",
        total(&p.stacks)
    );
    let named = share(&p.stacks, |s| s.iter().any(|f| f.starts_with("cpu_mix_")));
    assert!(named >= 95.0, "{named:.1}% in cpu-mix's functions");
}
