//! The page: one HTML template, the client script, and the two ways they are
//! put together — served (script and data fetched from the server) or
//! standalone (`--html`: script and data inlined, no network at all).
//!
//! This module owns how data is embedded in HTML. The JSON is the only
//! profile-derived text that ever enters the HTML, and it goes through
//! [`escape_script_json`]; symbol names reach the screen only through the
//! client's `textContent` and canvas `fillText`, never as markup.

use std::io::{self, Write};

use crate::ViewData;

/// The page template; `<!--flamerec:head-->` and `<!--flamerec:scripts-->`
/// are replaced per mode.
const TEMPLATE: &str = include_str!("../assets/index.html");

/// Where mode-specific `<head>` content goes.
const HEAD_SLOT: &str = "<!--flamerec:head-->";

/// Where the scripts go.
const SCRIPTS_SLOT: &str = "<!--flamerec:scripts-->";

/// The client, one file per concern, served and inlined as one script.
pub(crate) const SCRIPT: &str = concat!(
    include_str!("../assets/js/model.js"),
    include_str!("../assets/js/flame.js"),
    include_str!("../assets/js/panels.js"),
    include_str!("../assets/js/app.js"),
    include_str!("../assets/js/selftest.js"),
    include_str!("../assets/js/main.js"),
);

/// Content-Security-Policy of the standalone page: inline script and style
/// only, nothing loaded from anywhere.
const STANDALONE_CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";

/// Content-Security-Policy header of the served page.
pub(crate) const SERVED_CSP: &str = "default-src 'none'; script-src 'self'; \
     connect-src 'self'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The page as the server sends it: it loads `viewer.js`, which fetches
/// `profile.json`.
pub(crate) fn served_page() -> String {
    TEMPLATE
        .replace(HEAD_SLOT, "")
        .replace(SCRIPTS_SLOT, r#"<script src="viewer.js"></script>"#)
}

/// Writes one self-contained page: the data and the script inlined, and a
/// Content-Security-Policy that forbids every network request.
pub fn write_html<W: Write>(data: &ViewData, mut out: W) -> io::Result<()> {
    let (before_head, rest) = TEMPLATE.split_once(HEAD_SLOT).unwrap_or((TEMPLATE, ""));
    let (middle, after) = rest.split_once(SCRIPTS_SLOT).unwrap_or((rest, ""));
    out.write_all(before_head.as_bytes())?;
    write!(
        out,
        r#"<meta http-equiv="Content-Security-Policy" content="{STANDALONE_CSP}">"#
    )?;
    out.write_all(middle.as_bytes())?;
    out.write_all(br#"<script id="flamerec-data" type="application/json">"#)?;
    out.write_all(escape_script_json(data.json()).as_bytes())?;
    out.write_all(b"</script>\n<script>\n")?;
    out.write_all(SCRIPT.as_bytes())?;
    out.write_all(b"</script>")?;
    out.write_all(after.as_bytes())?;
    out.flush()
}

/// Makes JSON safe inside a `<script>` element: `<`, `>` and `&` become
/// `\u003c`, `\u003e`, `\u0026` (so no `</script>` or `<!--` can end or
/// bend the element), and U+2028/U+2029 are escaped too. These characters
/// only occur inside JSON strings, where the escapes mean the same text.
pub fn escape_script_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 64);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_json_has_no_markup_characters() {
        let json = serde_json::to_string(&["</script><!--&\u{2028}\u{2029}"]).unwrap_or_default();
        let esc = escape_script_json(&json);
        assert!(!esc.contains(['<', '>', '&', '\u{2028}', '\u{2029}']));
        let back: Vec<String> = serde_json::from_str(&esc).unwrap_or_default();
        assert_eq!(back, vec!["</script><!--&\u{2028}\u{2029}".to_string()]);
    }

    #[test]
    fn the_script_cannot_close_its_own_element() {
        let lower = SCRIPT.to_ascii_lowercase();
        assert!(!lower.contains("</script"));
        assert!(!lower.contains("<!--"));
        assert!(TEMPLATE.contains(HEAD_SLOT) && TEMPLATE.contains(SCRIPTS_SLOT));
    }
}
