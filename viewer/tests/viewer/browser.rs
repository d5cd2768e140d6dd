//! The page in headless Chromium: a real recording loaded, zoomed,
//! searched, sandwiched and tabled by the page's selftest; the served page;
//! a diff; hostile symbol names; and load/zoom times on 200k stacks.
//!
//! Recording needs perf_event_open: where it is denied these tests fail
//! naming the cause, unless FLAMEREC_SKIP_PERF_TESTS=1 is set.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use flamerec_record::{CallGraph, RecordError, RecordOptions, Target};
use flamerec_samples::{build, FramePointers, Sample};
use flamerec_testkit::{skip_or_fail, SKIP_PERF};
use flamerec_viewer::{write_html, Server, ViewData};
use serde_json::Value;

use crate::chromium::{self, file_url};

/// A recording of `cpu-mix` (50/30/20 across alpha/beta/gamma), made once;
/// `None` when perf tests are skipped.
pub(crate) fn cpu_mix_recording() -> Option<&'static Path> {
    static REC: OnceLock<Option<(tempfile::TempDir, PathBuf)>> = OnceLock::new();
    REC.get_or_init(|| {
        let bin = build(Sample::CpuMix, FramePointers::Yes)
            .unwrap_or_else(|e| panic!("cannot build cpu-mix: {e}"));
        let dir = tempfile::tempdir().expect("temporary directory");
        let out = dir.path().join("cpu-mix.frec");
        let mut argv = vec![bin.into_os_string()];
        argv.extend(Sample::CpuMix.args(200_000).map(Into::into));
        let opts = RecordOptions {
            output: out.clone(),
            call_graph: CallGraph::Fp,
            target: Target::Command(argv),
            ..RecordOptions::default()
        };
        match flamerec_record::record(&opts, &mut |_| {}) {
            Ok(_) => Some((dir, out)),
            Err(e @ RecordError::PerfDenied { .. }) => {
                skip_or_fail(
                    SKIP_PERF,
                    format!("cannot record cpu-mix, so the browser tests cannot run: {e}"),
                );
                None
            }
            Err(e) => panic!("cannot record cpu-mix, so the browser tests cannot run: {e}"),
        }
    })
    .as_ref()
    .map(|(_, p)| p.as_path())
}

/// Writes the standalone page of `data` and returns its path.
fn page(dir: &Path, name: &str, data: &ViewData) -> PathBuf {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).expect("create page");
    write_html(data, std::io::BufWriter::new(file)).expect("write page");
    path
}

/// Runs the selftest on a page and checks it passed.
fn selftest(url: &str, wait_ms: u32) -> (Value, String) {
    let dom = chromium::dump_dom(url, wait_ms);
    let r = chromium::selftest_result(&dom);
    assert_eq!(r["ok"], true, "selftest failed: {:#}", r["errors"]);
    (r, dom)
}

fn names(rows: &Value) -> Vec<String> {
    rows.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r[0].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// An array of strings.
fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn pct(text: &Value) -> f64 {
    let s = text.as_str().unwrap_or("");
    let num: String = s
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse().unwrap_or(f64::NAN)
}

#[test]
fn a_real_recording_zooms_searches_sandwiches_and_tables() {
    let Some(rec) = cpu_mix_recording() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    let data = ViewData::load(rec, None).expect("load recording");
    let html = page(dir.path(), "cpu-mix.html", &data);
    let (r, _) = selftest(&file_url(&html, "#selftest&st-fn=cpu_mix_beta"), 0);

    assert!(
        r["flame"]["frames"].as_u64().unwrap_or(0) > 5,
        "{:#}",
        r["flame"]
    );
    // Zoom: a click on cpu_mix_beta's frame; breadcrumbs end there.
    let crumbs = strs(&r["zoom"]["crumbs"]);
    assert_eq!(crumbs.first().map(String::as_str), Some("all"));
    assert_eq!(crumbs.last().map(String::as_str), Some("cpu_mix_beta"));
    assert!(crumbs.iter().any(|c| c == "cpu_mix_run"), "{crumbs:?}");
    // Hovering it showed its samples and shares.
    let hover = r["zoom"]["hover"].as_str().unwrap_or("");
    assert!(
        hover.starts_with("cpu_mix_beta — ")
            && hover.contains("samples, total ")
            && hover.contains("self "),
        "{hover}"
    );

    // Search: beta is ~30% of the samples, shown as the matched share.
    let share = pct(&r["search"]["match"]);
    assert!((15.0..=45.0).contains(&share), "matched {share}%");
    assert_eq!(pct(&r["search"]["upperCaseSensitive"]), 0.0);
    assert!((pct(&r["search"]["upperCaseInsensitive"]) - share).abs() < 1e-9);
    assert_eq!(r["search"]["invalid"], "invalid regex");

    // Table: by self time the three work functions lead, alpha first.
    let by_self = names(&r["table"]["bySelf"]);
    assert_eq!(
        by_self.first().map(String::as_str),
        Some("cpu_mix_alpha"),
        "{by_self:?}"
    );
    let top3: HashSet<&str> = by_self.iter().take(3).map(String::as_str).collect();
    assert_eq!(
        top3,
        HashSet::from(["cpu_mix_alpha", "cpu_mix_beta", "cpu_mix_gamma"])
    );
    // A row click focuses the function: it becomes the root.
    assert_eq!(
        r["table"]["afterRowClick"]["crumbs"],
        serde_json::json!(["cpu_mix_beta"])
    );
    assert!(r["table"]["afterRowClick"]["hash"]
        .as_str()
        .is_some_and(|h| h.contains("fo=1")));

    // Sandwich: cpu_mix_run is the caller.
    assert_eq!(r["sandwich"]["title"], "Callers of cpu_mix_beta");
    assert_eq!(r["sandwich"]["callers"][0][0], "cpu_mix_run");

    // Merging beta away keeps every sample; unmerging brings it back.
    assert_eq!(r["merge"]["left"], 0);
    assert_eq!(r["merge"]["total"], r["merge"]["before"]);
    assert_eq!(r["merge"]["restored"], true);

    // Thread filter and root grouping.
    let before = r["filter"]["before"].as_f64().unwrap_or(0.0);
    assert!(before > 0.0);
    assert!(r["filter"]["after"].as_f64().unwrap_or(f64::MAX) < before);
    assert_eq!(r["filter"]["restored"].as_f64(), Some(before));
    assert_eq!(r["groups"]["name"]["roots"][0][0], "cpu-mix");
    assert!(r["groups"]["thread"]["roots"][0][0]
        .as_str()
        .is_some_and(|s| s.starts_with("cpu-mix-") && s.contains('/')));
    assert_eq!(r["icicle"]["inverted"], true);
    assert_eq!(r["reset"]["crumbs"], serde_json::json!(["all"]));

    // The screenshot kept as an artifact (and, on request, for the README).
    let png = chromium::target_dir().join("viewer-screenshot.png");
    chromium::screenshot(&file_url(&html, "#s=cpu_mix_beta"), &png, 1280, 720, 0);
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "screenshot is only {size} bytes");
    let sandwich_png = chromium::target_dir().join("viewer-sandwich.png");
    let f = r["zoom"]["hash"].as_str().and_then(|h| {
        h.split(['#', '&'])
            .find_map(|kv| kv.strip_prefix("f=").map(str::to_owned))
    });
    let f = f.expect("selected function in the URL");
    chromium::screenshot(
        &file_url(&html, &format!("#v=sandwich&f={f}")),
        &sandwich_png,
        1280,
        700,
        0,
    );
    if std::env::var("FLAMEREC_UPDATE_SCREENSHOT").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/viewer.png");
        std::fs::copy(&png, docs).expect("update docs/viewer.png");
    }
}

#[test]
fn the_served_page_fetches_its_data() {
    let Some(rec) = cpu_mix_recording() else {
        return;
    };
    let data = ViewData::load(rec, None).expect("load recording");
    let server = Arc::new(Server::bind(data, 0).expect("bind"));
    let s = Arc::clone(&server);
    let thread = std::thread::spawn(move || s.run());
    let url = format!("{}#selftest&st-fn=cpu_mix_gamma", server.url());
    let result = std::panic::catch_unwind(|| selftest(&url, 20_000));
    server.stop();
    thread.join().expect("server thread");
    let (r, _) = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert!(
        r["timings"]["fetch"].is_number(),
        "data did not come from the server"
    );
    assert_eq!(r["sandwich"]["callers"][0][0], "cpu_mix_run");
}

#[test]
fn a_diff_colors_growth_red_and_shrinkage_blue() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let base = "app;main;parse 40\napp;main;compute 40\napp;main;write 20\n";
    let new = "app;main;parse 20\napp;main;compute 70\napp;main;write 10\n";
    let b = crate::stacks(base);
    let n = crate::stacks(new);
    let data = ViewData::from_stacks("base → new", b, Some(n)).expect("diff data");
    let html = page(dir.path(), "diff.html", &data);
    let (r, _) = selftest(&file_url(&html, "#selftest&st-fn=compute"), 0);
    assert_eq!(r["profile"]["diff"], true);
    assert_eq!(r["diff"]["grew"], serde_json::json!(["compute"]));
    let shrank: HashSet<String> = strs(&r["diff"]["shrank"]).into_iter().collect();
    assert_eq!(
        shrank,
        HashSet::from(["parse".to_string(), "write".to_string()])
    );
    let color = |name: &str| r["diff"]["colors"][name].as_str().unwrap_or("").to_string();
    assert!(
        color("compute").starts_with("rgb(255,"),
        "{}",
        color("compute")
    );
    assert!(color("parse").ends_with(",255)"), "{}", color("parse"));
    // The table shows the change in share: compute +30 pp of total.
    let row = r["table"]["bySelf"][0].clone();
    assert_eq!(row[0], "compute");
    chromium::screenshot(
        &file_url(&html, ""),
        &chromium::target_dir().join("viewer-diff.png"),
        1000,
        300,
        0,
    );
}

#[test]
fn hostile_symbol_names_render_as_text() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let evil = "<script>alert(1)</script>";
    let img = "<img src=x onerror=alert(2)>";
    let stacks = vec![
        (format!("app;main;{evil}"), 6),
        (format!("app;main;{img}"), 3),
        ("app;main;plain".to_string(), 1),
    ];
    let data = ViewData::from_stacks(evil, stacks, None).expect("view data");
    let html = page(dir.path(), "evil.html", &data);
    let (r, dom) = selftest(&file_url(&html, "#selftest"), 0);
    assert_eq!(r["title"], evil, "title shown as text");
    let by_self = names(&r["table"]["bySelf"]);
    assert_eq!(by_self.first().map(String::as_str), Some(evil));
    assert!(by_self.iter().any(|n| n == img));
    let lower = dom.to_ascii_lowercase();
    assert!(!lower.contains("<img"), "an <img> element was created");
    assert_eq!(
        lower.matches("<script").count(),
        2,
        "only the page's own scripts"
    );
    assert!(dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

/// 200,000 distinct stacks from a random call graph (fixed seed), spread
/// over 8 threads, depth 5–40: little prefix sharing, so the tree is large.
fn large_profile() -> Vec<(String, u64)> {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    const FUNCS: u64 = 5000;
    let callees: Vec<[u64; 6]> = (0..FUNCS)
        .map(|_| std::array::from_fn(|_| next(FUNCS)))
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(200_000);
    while out.len() < 200_000 {
        let mut line = format!("app-100/{};main", 100 + next(8));
        let mut f = next(50);
        for _ in 0..5 + next(36) {
            line.push_str(&format!(";fn_{f}"));
            f = callees[f as usize][next(6) as usize];
        }
        if seen.insert(line.clone()) {
            out.push((line, 1 + next(50)));
        }
    }
    out
}

#[test]
fn load_and_zoom_times_on_200k_distinct_stacks() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let stacks = large_profile();
    let t0 = std::time::Instant::now();
    let data = ViewData::from_stacks("200k stacks", stacks, None).expect("view data");
    let encode_ms = t0.elapsed().as_secs_f64() * 1e3;
    assert_eq!(data.stack_count(), 200_000);
    let html = page(dir.path(), "large.html", &data);
    let (r, _) = selftest(&file_url(&html, "#selftest&st-runs=40"), 0);
    let t = &r["timings"];
    let report = serde_json::json!({
        "stacks": data.stack_count(),
        "nodes": data.node_count(),
        "page_bytes": std::fs::metadata(&html).map(|m| m.len()).unwrap_or(0),
        "rust_encode_ms": encode_ms.round(),
        "rust_profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "load_ms": t["loaded"],
        "json_parse_ms": t["parse"],
        "decode_ms": t["decode"],
        "build_view_ms": t["buildView"],
        "first_render_ms": t["firstRender"],
        "zoom_redraw_median_ms": t["zoomRedrawMedian"],
        "zoom_redraw_max_ms": t["zoomRedrawMax"],
    });
    // Timings are reported, not asserted: budgets belong to benchmarks.
    eprintln!("viewer timings in Chromium: {report:#}");
    let out = chromium::target_dir().join("viewer-perf.json");
    std::fs::write(&out, format!("{report:#}\n")).expect("write viewer-perf.json");
    assert!(r["zoom"]["frames"].as_u64().unwrap_or(0) > 0);
}
