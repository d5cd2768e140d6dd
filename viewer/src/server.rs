//! The local HTTP server: loopback only, a fixed set of in-memory resources.
//!
//! Requests are matched against exact paths — there is no file system
//! behind the server, so no path can reach outside what is listed in
//! [`route`]. Requests whose `Host` header is not this server's loopback
//! address are refused, so a web page that rebinds its own host name to
//! 127.0.0.1 cannot read the profile.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};

use tiny_http::{Header, Method, Request, Response};

use crate::html::{self, SCRIPT, SERVED_CSP};
use crate::{ViewData, ViewerError};

/// What a request path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/` or `/index.html`: the page.
    Page,
    /// `/viewer.js`: the client script.
    Script,
    /// `/profile.json`: the data.
    Data,
    /// Anything else.
    NotFound,
}

/// Maps a request target to a resource. Only these exact paths exist
/// (a query string is ignored); everything else, `..` in any spelling
/// included, is [`Route::NotFound`].
pub fn route(target: &str) -> Route {
    let path = target.split(['?', '#']).next().unwrap_or("");
    match path {
        "/" | "/index.html" => Route::Page,
        "/viewer.js" => Route::Script,
        "/profile.json" => Route::Data,
        _ => Route::NotFound,
    }
}

/// The viewer's HTTP server, listening on 127.0.0.1.
pub struct Server {
    http: tiny_http::Server,
    addr: SocketAddr,
    page: String,
    data: ViewData,
    stopping: AtomicBool,
}

impl Server {
    /// Listens on `127.0.0.1:port`; port 0 picks a free one.
    pub fn bind(data: ViewData, port: u16) -> Result<Server, ViewerError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .map_err(|source| ViewerError::Bind { port, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ViewerError::Bind { port, source })?;
        let http =
            tiny_http::Server::from_listener(listener, None).map_err(|e| ViewerError::Server {
                reason: e.to_string(),
            })?;
        Ok(Server {
            http,
            addr,
            page: html::served_page(),
            data,
            stopping: AtomicBool::new(false),
        })
    }

    /// The address it listens on (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The page's URL, `http://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Answers requests until [`Server::stop`] is called.
    pub fn run(&self) {
        loop {
            match self.http.recv() {
                Ok(rq) => self.answer(rq),
                Err(_) if self.stopping.load(Ordering::SeqCst) => return,
                // A failed accept or a broken connection: keep serving.
                Err(_) => {}
            }
        }
    }

    /// Makes [`Server::run`] return (from another thread).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.http.unblock();
    }

    fn answer(&self, rq: Request) {
        let response = if !matches!(rq.method(), Method::Get | Method::Head) {
            plain(405, "method not allowed\n")
        } else if !self.host_is_ours(&rq) {
            plain(403, "unexpected Host header\n")
        } else {
            match route(rq.url()) {
                Route::Page => body(self.page.as_bytes(), "text/html; charset=utf-8"),
                Route::Script => body(SCRIPT.as_bytes(), "text/javascript; charset=utf-8"),
                Route::Data => body(self.data.json().as_bytes(), "application/json"),
                Route::NotFound => plain(404, "not found\n"),
            }
        };
        // The client may have gone away; nothing to do about it.
        let _ = rq.respond(with_common_headers(response));
    }

    /// Whether the Host header names this server: `127.0.0.1:PORT` or
    /// `localhost:PORT`. HTTP/1.0 clients may send none.
    fn host_is_ours(&self, rq: &Request) -> bool {
        let port = self.addr.port();
        let Some(host) = rq.headers().iter().find(|h| h.field.equiv("Host")) else {
            return true;
        };
        let host = host.value.as_str().trim().to_ascii_lowercase();
        host == format!("127.0.0.1:{port}") || host == format!("localhost:{port}")
    }
}

type Body = Response<std::io::Cursor<Vec<u8>>>;

fn header(name: &str, value: &str) -> Option<Header> {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn body(bytes: &[u8], content_type: &str) -> Body {
    let mut r = Response::from_data(bytes.to_vec());
    if let Some(h) = header("Content-Type", content_type) {
        r.add_header(h);
    }
    r
}

fn plain(status: u16, text: &str) -> Body {
    body(text.as_bytes(), "text/plain; charset=utf-8").with_status_code(status)
}

fn with_common_headers(mut r: Body) -> Body {
    for (name, value) in [
        ("Content-Security-Policy", SERVED_CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
        ("Cache-Control", "no-store"),
    ] {
        if let Some(h) = header(name, value) {
            r.add_header(h);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_paths_route() {
        assert_eq!(route("/"), Route::Page);
        assert_eq!(route("/index.html?x=1"), Route::Page);
        assert_eq!(route("/viewer.js"), Route::Script);
        assert_eq!(route("/profile.json"), Route::Data);
        for bad in [
            "/../Cargo.toml",
            "/%2e%2e/Cargo.toml",
            "/viewer.js/..",
            "//viewer.js",
            "/assets/index.html",
            "",
            "*",
            "http://evil/",
        ] {
            assert_eq!(route(bad), Route::NotFound, "{bad}");
        }
    }
}
