//! The real consumers the exports are checked against: `go tool pprof`
//! (Debian's golang-go), speedscope's own importer (the npm package's
//! built app, in headless Chromium), and `perf` for perf.data input.
//!
//! Missing tools are installed as root with apt-get (npm into a cache
//! under the test build), as the viewer tests install Chromium; without
//! root, a test fails saying what to install.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use crate::common::is_root;

/// The speedscope release whose importer loads our files.
pub const SPEEDSCOPE_VERSION: &str = "1.25.0";

/// Seconds a consumer may run before it is killed.
const RUN_TIMEOUT_S: &str = "300";

fn runs(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    // Tests (and other test binaries, like the viewer's installing
    // Chromium) may install at the same time: one apt-get at a time here,
    // and each waits for dpkg's lock instead of failing on it.
    static APT: Mutex<()> = Mutex::new(());
    let _one = APT.lock().unwrap_or_else(|e| e.into_inner());
    let o = Command::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=600"])
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "apt-get {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// Makes `cmd` runnable (`cmd probe` succeeds), installing Debian's
/// `package` when it is not and we are root; panics saying why otherwise.
fn ensure(cell: &'static OnceLock<Result<(), String>>, cmd: &str, probe: &str, package: &str) {
    let ready = cell.get_or_init(|| {
        if runs(cmd, probe) {
            return Ok(());
        }
        let hint = format!("install it with `sudo apt-get install -y {package}`");
        if !is_root() {
            return Err(format!(
                "`{cmd}` is missing and this test is not root: {hint}"
            ));
        }
        eprintln!("`{cmd}` is missing: apt-get install -y {package}");
        let install = ["install", "-y", "-q", package];
        // A fresh machine may not have package lists yet.
        apt_get(&install)
            .or_else(|_| apt_get(&["update", "-q"]).and_then(|()| apt_get(&install)))
            .map_err(|e| format!("{e}; {hint}"))?;
        if runs(cmd, probe) {
            Ok(())
        } else {
            Err(format!(
                "{package} is installed but `{cmd} {probe}` still fails"
            ))
        }
    });
    if let Err(e) = ready {
        panic!("{e}");
    }
}

/// `go` (for `go tool pprof`).
pub fn go() -> &'static str {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    ensure(&CELL, "go", "version", "golang-go");
    "go"
}

/// `perf`.
pub fn perf() -> &'static str {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    ensure(&CELL, "perf", "--version", "linux-perf");
    "perf"
}

fn chromium() -> &'static str {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    ensure(&CELL, "chromium", "--version", "chromium");
    "chromium"
}

fn npm() -> &'static str {
    static CELL: OnceLock<Result<(), String>> = OnceLock::new();
    ensure(&CELL, "npm", "--version", "npm");
    "npm"
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `go tool pprof ARGS FILE` and returns what it printed.
pub fn pprof(args: &[&str], file: &Path) -> String {
    let o = Command::new("timeout")
        .arg(RUN_TIMEOUT_S)
        .args([go(), "tool", "pprof"])
        .args(args)
        .arg(file)
        .env("PPROF_TMPDIR", std::env::temp_dir())
        .output()
        .expect("run go tool pprof");
    assert!(
        o.status.success(),
        "go tool pprof {args:?} {} failed: {}",
        file.display(),
        err(&o)
    );
    text(&o)
}

/// One row of `go tool pprof -top`.
#[derive(Debug, Clone, PartialEq)]
pub struct TopRow {
    pub flat_pct: f64,
    pub cum_pct: f64,
    /// As pprof prints it, without its ` (inline)` note.
    pub name: String,
}

/// The rows of `go tool pprof -top` output.
pub fn top_rows(out: &str) -> Vec<TopRow> {
    let pct = |s: &str| s.trim_end_matches('%').parse::<f64>().ok();
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            // flat flat% sum% cum cum% NAME..., NAME may hold spaces.
            let mut rest = l.trim_start();
            let mut cols = Vec::new();
            for _ in 0..5 {
                let end = rest.find(char::is_whitespace)?;
                cols.push(&rest[..end]);
                rest = rest[end..].trim_start();
            }
            let name = rest
                .trim_end()
                .trim_end_matches(" (inline)")
                .trim_end_matches(" (partial-inline)");
            Some(TopRow {
                flat_pct: pct(cols[1])?,
                cum_pct: pct(cols[4])?,
                name: name.to_string(),
            })
        })
        .collect()
}

/// Where speedscope is installed (once per test build).
fn speedscope_app() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let prefix =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("speedscope-{SPEEDSCOPE_VERSION}"));
        let app = prefix.join("node_modules/speedscope/dist/release");
        if app.join("index.html").is_file() {
            return Ok(app);
        }
        let o = Command::new("timeout")
            .arg(RUN_TIMEOUT_S)
            .arg(npm())
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg(format!("speedscope@{SPEEDSCOPE_VERSION}"))
            .output()
            .map_err(|e| format!("cannot run npm: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "npm install speedscope@{SPEEDSCOPE_VERSION} failed: {}",
                err(&o)
            ));
        }
        if app.join("index.html").is_file() {
            Ok(app)
        } else {
            Err(format!(
                "speedscope installed, but {} is missing",
                app.display()
            ))
        }
    });
    match dir {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    }
}

/// The page script: loads the file the way `npx speedscope FILE` does
/// (`loadFileFromBase64`), then saves it with speedscope's own exporter
/// (Ctrl+S) and reports, hex-encoded into the DOM, the profiles and frame
/// names speedscope imported, or the import errors and alerts.
const LOADER: &str = r#"
(function () {
  var out = { errors: [], alerts: [], profiles: null, frames: null };
  function report() {
    var json = JSON.stringify(out);
    var hex = Array.from(new TextEncoder().encode(json), function (b) {
      return b.toString(16).padStart(2, '0');
    }).join('');
    var pre = document.getElementById('flamerec-result');
    if (!pre) {
      pre = document.createElement('pre');
      pre.id = 'flamerec-result';
      document.body.appendChild(pre);
    }
    pre.textContent = hex;
  }
  window.alert = function (m) { out.alerts.push(String(m)); report(); };
  var log = console.log;
  console.log = function () {
    if (String(arguments[0]).indexOf('Failed to load format') === 0) {
      var e = arguments[1];
      out.errors.push(String((e && e.stack) || e));
      report();
    }
    return log.apply(this, arguments);
  };
  URL.createObjectURL = function (blob) {
    blob.text().then(function (text) {
      var f = JSON.parse(text);
      out.frames = f.shared.frames.map(function (x) { return x.name; });
      out.profiles = f.profiles.map(function (p) {
        return { name: p.name, unit: p.unit, total: p.endValue - p.startValue };
      });
      report();
    });
    return 'data:,';
  };
  HTMLAnchorElement.prototype.click = function () {};
  var timer = setInterval(function () {
    if (out.profiles || out.errors.length || out.alerts.length) {
      clearInterval(timer);
      return;
    }
    // Saving does nothing until the import is done: keep asking.
    window.dispatchEvent(new KeyboardEvent('keydown', { key: 's', ctrlKey: true }));
  }, 100);
  var text = __FLAMEREC_TEXT__;
  speedscope.loadFileFromBase64(__FLAMEREC_NAME__, btoa(unescape(encodeURIComponent(text))));
})();
"#;

/// Loads `file` into speedscope's app in headless Chromium; returns
/// `{errors, alerts, profiles: [{name, unit, total}], frames: [name]}`.
pub fn speedscope_import(file: &Path) -> serde_json::Value {
    let app = speedscope_app();
    let content = std::fs::read_to_string(file).expect("speedscope file is UTF-8");
    let name = file
        .file_name()
        .map_or("profile".into(), |n| n.to_string_lossy());
    // The file last: nothing is replaced inside it.
    let script = LOADER
        .replace(
            "__FLAMEREC_NAME__",
            &serde_json::to_string(&name).expect("JSON string"),
        )
        .replace(
            "__FLAMEREC_TEXT__",
            &serde_json::to_string(&content).expect("JSON string"),
        );
    let dir = tempfile::tempdir().expect("temporary directory");
    let loader = dir.path().join("load.js");
    std::fs::write(&loader, script).expect("write loader");
    let url = format!(
        "file://{}#localProfilePath={}",
        app.join("index.html").display(),
        loader.display()
    );
    let o = Command::new("timeout")
        .args(["--kill-after=10", RUN_TIMEOUT_S])
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--window-size=1280,900",
            "--dump-dom",
            // Virtual time: the import and the save finish in it,
            // however loaded the machine is.
            "--virtual-time-budget=60000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(o.status.success(), "chromium failed on {url}: {}", err(&o));
    let dom = text(&o);
    let start = "<pre id=\"flamerec-result\">";
    let Some(i) = dom.find(start) else {
        panic!(
            "speedscope reported nothing for {}: {}",
            file.display(),
            tail(&dom)
        );
    };
    let hex = &dom[i + start.len()..];
    let hex = &hex[..hex.find('<').unwrap_or(hex.len())];
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|k| u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).expect("hex"))
        .collect();
    serde_json::from_slice(&bytes).expect("loader result is JSON")
}

fn tail(s: &str) -> String {
    s.chars()
        .rev()
        .take(2000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}
