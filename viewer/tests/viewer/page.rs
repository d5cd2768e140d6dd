//! The standalone page (`--html`): data and script inlined, every symbol
//! escaped, no way to load anything from the network.

use flamerec_viewer::{write_html, ViewData};

const EVIL: &str = "<script>alert(1)</script>";

fn page_of(data: &ViewData) -> String {
    let mut out = Vec::new();
    write_html(data, &mut out).expect("write page");
    String::from_utf8(out).expect("utf-8 page")
}

fn evil_profile() -> ViewData {
    let stacks = vec![
        (format!("app;main;{EVIL}"), 5),
        ("app;main;<img src=x onerror=alert(2)>".to_string(), 3),
        ("app;main;a&b\u{2028}c\u{2029}d<!--e-->".to_string(), 2),
        ("app;</SCRIPT><script>alert(3)</script>".to_string(), 1),
    ];
    ViewData::from_stacks(EVIL, stacks, None).expect("view data")
}

#[test]
fn symbol_names_cannot_break_out_of_the_data_script() {
    let page = page_of(&evil_profile());
    let lower = page.to_ascii_lowercase();
    // Exactly our own two script elements: the data and the code.
    assert_eq!(
        lower.matches("<script").count(),
        2,
        "extra <script> in page"
    );
    assert_eq!(
        lower.matches("</script").count(),
        2,
        "extra </script> in page"
    );
    assert!(!page.contains(EVIL));
    assert!(!page.contains("<img"));
    assert!(!page.contains("<!--e"));
    assert!(!page.contains('\u{2028}') && !page.contains('\u{2029}'));
    assert!(page.contains(r"\u003cscript\u003ealert(1)\u003c/script\u003e"));
    assert!(page.contains(r"a\u0026b\u2028c\u2029d"));
}

#[test]
fn the_embedded_data_reads_back_unchanged() {
    let data = evil_profile();
    let page = page_of(&data);
    let start_tag = r#"<script id="flamerec-data" type="application/json">"#;
    let start = page.find(start_tag).expect("data element") + start_tag.len();
    let len = page[start..].find("</script>").expect("data end");
    let embedded: serde_json::Value =
        serde_json::from_str(&page[start..start + len]).expect("embedded JSON parses");
    let direct: serde_json::Value = serde_json::from_str(data.json()).expect("JSON");
    assert_eq!(embedded, direct);
    assert_eq!(embedded["title"], EVIL);
    assert!(embedded["strings"]
        .as_array()
        .expect("strings")
        .iter()
        .any(|s| s == EVIL));
}

#[test]
fn the_page_loads_nothing_from_the_network() {
    let page = page_of(&crate::folded("a;b 1\n"));
    assert!(page.contains(r#"<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline';"#));
    for needle in ["http://", "https://", "src=\"", "url("] {
        assert!(!page.contains(needle), "page references {needle}");
    }
}
