//! A small HTTP/1.1 client for one `POST` at a time: what delivering a
//! window to a backend needs, with every wait bounded. Plain `http://`
//! only (a collector on the host or a sidecar terminates TLS).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Where requests go: `http://HOST[:PORT][/PATH]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or address, as given.
    pub host: String,
    /// Port (80 when not given).
    pub port: u16,
    /// Path, `/` when not given.
    pub path: String,
}

impl Endpoint {
    /// Parses an `http://` URL; anything else is refused with the reason.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(format!(
                    "{url}: https is not supported; send to a collector on this host or a sidecar over http"
                ))
            }
            _ => return Err(format!("{url}: not an http:// URL")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| format!("{url}: the port is not a number"))?,
            ),
            _ => (authority, 80),
        };
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        Ok(Endpoint {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// This endpoint with `path` in place of its own.
    pub fn with_path(&self, path: &str) -> Endpoint {
        Endpoint {
            path: path.to_string(),
            ..self.clone()
        }
    }
}

/// `s` with its `%XX` escapes decoded (as OTLP's header variables and
/// gRPC's messages write them); a `%` without two hex digits stays.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A connection to `to`, each step (connect, read, write) within `timeout`.
pub(crate) fn connect(to: &Endpoint, timeout: Duration) -> io::Result<TcpStream> {
    let addr = (to.host.as_str(), to.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address for the host"))?;
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// What the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// `Retry-After` in seconds, when given as a number.
    pub retry_after: Option<Duration>,
    /// The start of the body (at most 512 bytes), for messages.
    pub body: String,
}

/// Sends one `POST` with `body` and reads the answer, each step within
/// `timeout`.
pub fn post(
    to: &Endpoint,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<Response> {
    let mut s = connect(to, timeout)?;
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Length: {}\r\nConnection: close\r\nUser-Agent: flamerec/{}\r\n",
        to.path,
        to.host,
        to.port,
        body.len(),
        env!("CARGO_PKG_VERSION")
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    s.flush()?;
    read_response(BufReader::new(s))
}

fn read_response<R: BufRead>(mut r: R) -> io::Result<Response> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let mut line = String::new();
    r.by_ref().take(8192).read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| line.starts_with("HTTP/1."))
        .ok_or_else(|| bad("not an HTTP response"))?;
    let mut retry_after = None;
    let mut length: Option<usize> = None;
    for _ in 0..200 {
        line.clear();
        r.by_ref().take(8192).read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim();
            if k.eq_ignore_ascii_case("retry-after") {
                retry_after = v.parse::<u64>().ok().map(Duration::from_secs);
            } else if k.eq_ignore_ascii_case("content-length") {
                length = v.parse().ok();
            }
        }
    }
    let mut body = Vec::new();
    let want = length.unwrap_or(512).min(512) as u64;
    // A body cut short says less, not something false: keep what came.
    let _ = r.take(want).read_to_end(&mut body);
    Ok(Response {
        status,
        retry_after,
        // A message for people: a protobuf status or binary bytes keep
        // their readable parts only.
        body: String::from_utf8_lossy(&body)
            .chars()
            .filter(|c| !c.is_control() && *c != char::REPLACEMENT_CHARACTER)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:4318/v1development/profiles").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("127.0.0.1", 4318, "/v1development/profiles")
        );
        let e = Endpoint::parse("http://collector").unwrap();
        assert_eq!((e.port, e.path.as_str()), (80, "/"));
        let e = Endpoint::parse("http://[::1]:9/x").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9));
        assert!(Endpoint::parse("https://x")
            .unwrap_err()
            .contains("https is not supported"));
        assert!(Endpoint::parse("x:1").is_err());
        assert!(Endpoint::parse("http://h:port").is_err());
    }

    #[test]
    fn responses() {
        let r = read_response(
            &b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nslowXXXX"[..],
        )
        .unwrap();
        assert_eq!(
            r,
            Response {
                status: 429,
                retry_after: Some(Duration::from_secs(7)),
                body: "slow".into()
            }
        );
        assert!(read_response(&b"SSH-2.0\r\n"[..]).is_err());
    }

    #[test]
    fn a_post_reaches_a_server_and_its_status_comes_back() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut req = String::new();
            let mut line = String::new();
            while r.read_line(&mut line).unwrap() > 2 {
                req.push_str(&line);
                line.clear();
            }
            let mut body = [0u8; 5];
            r.read_exact(&mut body).unwrap();
            (&s).write_all(b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            (req, body)
        });
        let e = Endpoint::parse(&format!("http://127.0.0.1:{port}/p")).unwrap();
        let r = post(
            &e,
            &[("Content-Type", "x/y")],
            b"hello",
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(r.status, 503);
        let (req, body) = server.join().unwrap();
        assert!(req.starts_with("POST /p HTTP/1.1\r\n"), "{req}");
        assert!(
            req.contains("Content-Length: 5\r\n") && req.contains("Content-Type: x/y\r\n"),
            "{req}"
        );
        assert_eq!(&body, b"hello");
    }
}
