//! The HTTP server: binds 127.0.0.1 only, serves exactly three resources,
//! 404 for everything else, refuses foreign Host headers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::thread::JoinHandle;

use flamerec_viewer::{Server, ViewData};

use crate::{folded, json};

/// A running server and the thread that serves it; stops on drop.
struct Running {
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.stop();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread");
        }
    }
}

fn start() -> Running {
    let data = folded("app;main;work 3\napp;main;idle 1\n");
    let server = Arc::new(Server::bind(data, 0).expect("bind"));
    let s = Arc::clone(&server);
    let thread = Some(std::thread::spawn(move || s.run()));
    Running { server, thread }
}

struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Sends `request` as is (so odd targets reach the server unnormalized).
fn raw(r: &Running, request: &str) -> Reply {
    let mut s = TcpStream::connect(r.server.addr()).expect("connect");
    s.write_all(request.as_bytes()).expect("send");
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).expect("read reply");
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header end");
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    Reply {
        status,
        head,
        body: bytes[split + 4..].to_vec(),
    }
}

fn get(r: &Running, target: &str) -> Reply {
    let port = r.server.addr().port();
    raw(
        r,
        &format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"),
    )
}

#[test]
fn listens_on_loopback_only() {
    let r = start();
    let addr = r.server.addr();
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    assert_eq!(r.server.url(), format!("http://127.0.0.1:{}/", addr.port()));
    // The kernel's view: the listening socket is bound to 127.0.0.1, not 0.0.0.0.
    let tcp = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port_hex = format!(":{:04X}", addr.port());
    let listening: Vec<&str> = tcp
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&port_hex) && f[3] == "0A"
        })
        .collect();
    assert_eq!(listening.len(), 1, "one listening socket: {listening:?}");
    assert!(
        listening[0].split_whitespace().nth(1) == Some(&format!("0100007F{port_hex}")),
        "bound to 127.0.0.1: {}",
        listening[0]
    );
    // And nothing on the IPv6 side.
    let tcp6 = std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    assert!(!tcp6.lines().any(|l| l
        .split_whitespace()
        .nth(1)
        .is_some_and(|a| a.ends_with(&port_hex))));
}

#[test]
fn serves_the_page_the_script_and_the_data() {
    let r = start();
    let page = get(&r, "/");
    assert_eq!(page.status, 200);
    assert!(page.head.contains("text/html"), "{}", page.head);
    assert!(page
        .head
        .contains("Content-Security-Policy: default-src 'none'"));
    let html = String::from_utf8(page.body).expect("utf-8 page");
    assert!(html.contains(r#"<script src="viewer.js"></script>"#));
    assert!(!html.contains("flamerec:scripts"));

    let js = get(&r, "/viewer.js");
    assert_eq!(js.status, 200);
    assert!(js.head.contains("text/javascript"));
    assert!(String::from_utf8_lossy(&js.body).contains("function decodeProfile"));

    let data = get(&r, "/profile.json?t=1");
    assert_eq!(data.status, 200);
    assert!(data.head.contains("application/json"));
    let v: serde_json::Value = serde_json::from_slice(&data.body).expect("JSON body");
    assert_eq!(v["schema"], "flamerec-view/1");
    assert_eq!(v["totals"], serde_json::json!([4]));
}

#[test]
fn unknown_paths_are_404() {
    let r = start();
    for target in [
        "/nope",
        "/index.htm",
        "/viewer.js.map",
        "/profile.json/x",
        "/favicon.ico",
    ] {
        assert_eq!(get(&r, target).status, 404, "{target}");
    }
}

#[test]
fn no_path_traversal() {
    let r = start();
    for target in [
        "/../Cargo.toml",
        "/%2e%2e/Cargo.toml",
        "/%2E%2E%2FCargo.toml",
        "/..%2fCargo.toml",
        "/viewer.js/../../Cargo.toml",
        "/./viewer.js/../../../etc/passwd",
        "//etc/passwd",
        "/etc/passwd",
        "/..\\Cargo.toml",
        "/assets/index.html",
        "/src/lib.rs",
    ] {
        let reply = get(&r, target);
        assert_eq!(reply.status, 404, "{target}");
        let body = String::from_utf8_lossy(&reply.body);
        assert!(
            !body.contains("[package]") && !body.contains("root:"),
            "{target}: {body}"
        );
    }
}

#[test]
fn foreign_host_and_other_methods_are_refused() {
    let r = start();
    let port = r.server.addr().port();
    let rebound = raw(
        &r,
        &format!("GET /profile.json HTTP/1.1\r\nHost: attacker.example:{port}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(rebound.status, 403);
    let post = raw(
        &r,
        &format!("POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(post.status, 405);
    let local = raw(
        &r,
        &format!("GET / HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(local.status, 200);
}

#[test]
fn the_json_is_a_preorder_tree_with_sorted_names() {
    // Out of order on purpose: the folded parser would sort them first.
    let unsorted = [("b;x", 1), ("a;c", 2), ("a;b", 3)].map(|(s, n)| (s.to_string(), n));
    let data = ViewData::from_stacks("test", unsorted.to_vec(), None).expect("view data");
    let v = json(&data);
    assert_eq!(v["strings"], serde_json::json!(["a", "b", "c", "x"]));
    // name, child count, self — preorder, children alphabetical.
    assert_eq!(
        v["nodes"],
        serde_json::json!([0, 2, 0, 1, 0, 3, 2, 0, 2, 1, 1, 0, 3, 0, 1])
    );
    // Folded text has no thread ids: each root stands for itself.
    assert_eq!(
        v["threads"],
        serde_json::json!([[0, 0, 0, null, null], [1, 1, 1, null, null]])
    );
    assert_eq!(v["diff"], false);
    assert_eq!(v["totals"], serde_json::json!([6]));
}

#[test]
fn a_diff_carries_both_sides_per_node() {
    let base = crate::stacks("p;f 4\np;g 4\n");
    let new = crate::stacks("p;f 6\np;h 2\n");
    let data = flamerec_viewer::ViewData::from_stacks("d", base, Some(new)).expect("diff data");
    let v = json(&data);
    assert_eq!(v["diff"], true);
    assert_eq!(v["totals"], serde_json::json!([8, 8]));
    assert_eq!(v["strings"], serde_json::json!(["f", "g", "h", "p"]));
    // name, child count, base self, new self.
    assert_eq!(
        v["nodes"],
        serde_json::json!([3, 3, 0, 0, 0, 0, 4, 6, 1, 0, 4, 0, 2, 0, 0, 2])
    );
    assert_eq!(data.stack_count(), 3);
    assert_eq!(data.node_count(), 4);
}
