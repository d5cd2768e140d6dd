//! Headless Chromium for the browser tests: found on PATH (or
//! `FLAMEREC_CHROMIUM`), installed from Debian's packages when missing and
//! running as root, otherwise a failure that says what to install.
//!
//! Pages are driven without a WebDriver: the page's `#selftest` mode
//! performs the clicks and typing itself and writes what it saw into the
//! DOM, which `--dump-dom` prints.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const INSTALL_HINT: &str = "the viewer's browser tests need Debian's headless Chromium: \
     install it with `sudo apt-get install -y chromium chromium-driver` \
     (or point FLAMEREC_CHROMIUM at a Chromium binary)";

/// Seconds one Chromium run may take before it is killed.
const RUN_TIMEOUT_S: u32 = 180;

fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FLAMEREC_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    let o = Command::new("apt-get")
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

fn install() -> Result<(), String> {
    let pkgs = ["install", "-y", "-q", "chromium", "chromium-driver"];
    eprintln!(
        "installing Chromium for the browser tests: apt-get install -y chromium chromium-driver"
    );
    // A fresh machine may not have package lists yet.
    apt_get(&pkgs).or_else(|_| apt_get(&["update", "-q"]).and_then(|()| apt_get(&pkgs)))
}

/// The Chromium binary, installed on first use when possible.
pub fn binary() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = BIN.get_or_init(|| {
        if let Some(p) = find() {
            return Ok(p);
        }
        if !is_root() {
            return Err(format!("Chromium not found; {INSTALL_HINT}"));
        }
        install().map_err(|e| format!("{e}; {INSTALL_HINT}"))?;
        find().ok_or_else(|| format!("Chromium still not found after installing; {INSTALL_HINT}"))
    });
    match found {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// Runs headless Chromium on `url` with a fresh profile and extra flags.
fn run(url: &str, extra: &[String]) -> Output {
    let profile = tempfile::tempdir().expect("profile directory");
    let o = Command::new("timeout")
        .args(["--kill-after=10", &RUN_TIMEOUT_S.to_string()])
        .arg(binary())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        o.status.success(),
        "chromium failed ({}) on {url}: {}",
        o.status,
        tail(&String::from_utf8_lossy(&o.stderr))
    );
    o
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The page's DOM after it loaded. `wait_ms` > 0 lets a page that fetches
/// its data (served mode) finish first, in virtual time.
pub fn dump_dom(url: &str, wait_ms: u32) -> String {
    let mut flags = vec![
        "--window-size=1280,900".to_string(),
        "--dump-dom".to_string(),
    ];
    if wait_ms > 0 {
        flags.push(format!("--virtual-time-budget={wait_ms}"));
    }
    String::from_utf8_lossy(&run(url, &flags).stdout).into_owned()
}

/// Saves a PNG of the page at `url` (width × height CSS pixels).
pub fn screenshot(url: &str, png: &Path, width: u32, height: u32, wait_ms: u32) {
    let mut flags = vec![
        format!("--window-size={width},{height}"),
        format!("--screenshot={}", png.display()),
    ];
    if wait_ms > 0 {
        flags.push(format!("--virtual-time-budget={wait_ms}"));
    }
    run(url, &flags);
    let bytes = std::fs::read(png).expect("screenshot written");
    assert!(
        bytes.starts_with(b"\x89PNG"),
        "{} is not a PNG",
        png.display()
    );
}

/// The JSON the page's selftest wrote into `<pre id="selftest">`.
pub fn selftest_result(dom: &str) -> serde_json::Value {
    let start_tag = "<pre id=\"selftest\">";
    let Some(start) = dom.find(start_tag) else {
        panic!("no selftest output in the page:\n{}", tail(dom));
    };
    let rest = &dom[start + start_tag.len()..];
    let text = &rest[..rest.find("</pre>").expect("end of selftest output")];
    let text = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("selftest output is not JSON ({e}): {text}"))
}

/// `target/`, where artifacts go (beside the test binary's `debug/`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/debug/deps/viewer-HASH
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir)
}

/// A `file://` URL for a local path.
pub fn file_url(path: &Path, hash: &str) -> String {
    format!("file://{}{hash}", path.display())
}
