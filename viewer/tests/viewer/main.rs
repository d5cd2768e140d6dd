//! Tests of `flamerec-viewer`: the server (loopback only, fixed resources,
//! no traversal), the JSON the page reads, HTML escaping, and the page
//! itself in headless Chromium.

mod browser;
mod chromium;
mod inputs;
mod page;
mod server;

use flamerec_testkit::folded::stacks;
use flamerec_viewer::ViewData;

/// A profile from folded text.
fn folded(text: &str) -> ViewData {
    ViewData::from_stacks("test", stacks(text), None).expect("view data")
}

fn json(data: &ViewData) -> serde_json::Value {
    serde_json::from_str(data.json()).expect("view JSON parses")
}
