//! A small HTTP/2 client for one request per connection over plain TCP
//! (`h2c` with prior knowledge, as gRPC speaks to a collector on
//! loopback or in the cluster): the connection preface and settings, the
//! request's header block and its body in DATA frames within the peer's
//! flow-control windows, and the answer's headers, body and trailers —
//! answering the peer's SETTINGS and PING on the way. Every wait is
//! bounded by the timeout; nothing the peer sends is trusted for sizes.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::hpack::{self, Decoder};
use crate::http::Endpoint;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

// Flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The stream of the one request.
const STREAM: u32 = 1;
/// Largest frame read: the protocol's default, which this side keeps.
const MAX_FRAME: usize = 16_384;
/// The window this side gives the peer for its answer (per stream).
const OUR_WINDOW: u32 = 1 << 20;
/// Most bytes of an answer's body kept (an OTLP answer is a few bytes).
const MAX_BODY: usize = 64 * 1024;
/// Most bytes of one header block (with its continuations).
const MAX_BLOCK: usize = 64 * 1024;
/// Most frames read for one answer (a peer that never ends the stream).
const MAX_FRAMES: usize = 10_000;

/// What the server answered on the request's stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// `:status`.
    pub status: u16,
    /// The header fields of the first block (without `:status`).
    pub headers: Vec<(String, String)>,
    /// The fields of a block after the body (gRPC's status is there), or
    /// of the only block when it ended the stream.
    pub trailers: Vec<(String, String)>,
    /// The body (its first [`MAX_BODY`] bytes).
    pub body: Vec<u8>,
}

fn broken(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("HTTP/2: {what}"))
}

/// One frame as read.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

fn write_frame(
    s: &mut impl Write,
    kind: u8,
    flags: u8,
    stream: u32,
    payload: &[u8],
) -> io::Result<()> {
    let len = payload.len();
    let mut head = [0u8; 9];
    head[..3].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
    head[3] = kind;
    head[4] = flags;
    head[5..].copy_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    s.write_all(&head)?;
    s.write_all(payload)
}

fn read_frame(s: &mut impl Read) -> io::Result<Frame> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head)?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    if len > MAX_FRAME {
        return Err(broken("a frame larger than allowed"));
    }
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload)?;
    Ok(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// The first four bytes of `p` as a big-endian number.
fn word(p: &[u8]) -> Option<u32> {
    p.get(..4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
}

/// The payload of a DATA or HEADERS frame without its padding (and, for
/// HEADERS, its priority fields).
fn unpadded(f: &Frame) -> io::Result<&[u8]> {
    let mut p = &f.payload[..];
    let mut pad = 0;
    if f.flags & PADDED != 0 {
        pad = usize::from(*p.first().ok_or_else(|| broken("padding without length"))?);
        p = &p[1..];
    }
    if f.kind == HEADERS && f.flags & PRIORITY != 0 {
        p = p
            .get(5..)
            .ok_or_else(|| broken("priority fields cut short"))?;
    }
    let keep = p
        .len()
        .checked_sub(pad)
        .ok_or_else(|| broken("more padding than payload"))?;
    Ok(&p[..keep])
}

/// The connection's state while one request runs.
struct Conn {
    s: TcpStream,
    decoder: Decoder,
    /// What the peer lets this side send: on the connection, on the stream.
    conn_window: i64,
    stream_window: i64,
    peer_initial: i64,
    peer_max_frame: usize,
    /// A header block being read (HEADERS then CONTINUATIONs), and whether
    /// it ends the stream.
    block: Option<(Vec<u8>, bool)>,
    answer: Answer,
    got_headers: bool,
    ended: bool,
}

impl Conn {
    fn handle(&mut self, f: Frame) -> io::Result<()> {
        match f.kind {
            // Acknowledgements and window updates are best effort: a peer
            // that closed after its answer has sent what is left to read.
            SETTINGS if f.flags & ACK == 0 => {
                self.settings(&f.payload)?;
                let _ = write_frame(&mut self.s, SETTINGS, ACK, 0, &[]);
            }
            PING if f.flags & ACK == 0 => {
                let _ = write_frame(&mut self.s, PING, ACK, 0, &f.payload);
            }
            WINDOW_UPDATE => self.window_update(&f)?,
            RST_STREAM if f.stream == STREAM => {
                let code = word(&f.payload).unwrap_or(0);
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    format!("HTTP/2: the server reset the stream (error {code})"),
                ));
            }
            GOAWAY => {
                let last = word(&f.payload).unwrap_or(0) & 0x7fff_ffff;
                if last < STREAM || !self.got_headers {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "HTTP/2: the server went away before answering",
                    ));
                }
            }
            HEADERS | CONTINUATION if f.stream == STREAM => self.header_part(&f)?,
            DATA if f.stream == STREAM => self.data(&f)?,
            HEADERS | CONTINUATION | DATA => {
                return Err(broken("a frame on a stream never opened"))
            }
            _ => {}
        }
        Ok(())
    }

    fn window_update(&mut self, f: &Frame) -> io::Result<()> {
        if f.payload.len() != 4 {
            return Err(broken("a window update of the wrong size"));
        }
        let add = i64::from(word(&f.payload).unwrap_or(0) & 0x7fff_ffff);
        match f.stream {
            0 => self.conn_window += add,
            STREAM => self.stream_window += add,
            _ => {}
        }
        Ok(())
    }

    /// A HEADERS frame or a CONTINUATION of its block.
    fn header_part(&mut self, f: &Frame) -> io::Result<()> {
        if f.kind == HEADERS {
            if self.block.is_some() {
                return Err(broken("a header block inside another"));
            }
            let part = unpadded(f)?.to_vec();
            self.block = Some((part, f.flags & END_STREAM != 0));
        } else {
            let Some((block, _)) = &mut self.block else {
                return Err(broken("a continuation without headers"));
            };
            if block.len() + f.payload.len() > MAX_BLOCK {
                return Err(broken("a header block too large"));
            }
            block.extend_from_slice(&f.payload);
        }
        if f.flags & END_HEADERS != 0 {
            self.end_block()?;
        }
        Ok(())
    }

    fn data(&mut self, f: &Frame) -> io::Result<()> {
        let data = unpadded(f)?;
        let room = MAX_BODY.saturating_sub(self.answer.body.len());
        self.answer
            .body
            .extend_from_slice(&data[..data.len().min(room)]);
        if !f.payload.is_empty() {
            // Give back what the frame used, so a longer answer flows.
            let n = (f.payload.len() as u32).to_be_bytes();
            let _ = write_frame(&mut self.s, WINDOW_UPDATE, 0, 0, &n);
            let _ = write_frame(&mut self.s, WINDOW_UPDATE, 0, STREAM, &n);
        }
        if f.flags & END_STREAM != 0 {
            self.ended = true;
        }
        Ok(())
    }

    fn settings(&mut self, p: &[u8]) -> io::Result<()> {
        if !p.len().is_multiple_of(6) {
            return Err(broken("settings of the wrong size"));
        }
        for s in p.chunks_exact(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                0x4 => {
                    if value > 0x7fff_ffff {
                        return Err(broken("an initial window over the maximum"));
                    }
                    // A new initial size moves the open stream's window by the difference.
                    self.stream_window += i64::from(value) - self.peer_initial;
                    self.peer_initial = i64::from(value);
                }
                0x5 => self.peer_max_frame = (value as usize).clamp(MAX_FRAME, 1 << 24),
                _ => {}
            }
        }
        Ok(())
    }

    fn end_block(&mut self) -> io::Result<()> {
        let Some((block, ends)) = self.block.take() else {
            return Ok(());
        };
        let fields = self
            .decoder
            .decode(&block)
            .map_err(|e| broken(&e.to_string()))?;
        if self.got_headers {
            self.answer.trailers = fields;
        } else {
            self.got_headers = true;
            for (k, v) in fields {
                if k == ":status" {
                    self.answer.status = v
                        .parse()
                        .map_err(|_| broken("a :status that is not a number"))?;
                } else if ends {
                    // One block that ends the stream: gRPC's "trailers only".
                    self.answer.trailers.push((k, v));
                } else {
                    self.answer.headers.push((k, v));
                }
            }
        }
        if ends {
            self.ended = true;
        }
        Ok(())
    }

    /// Reads and handles the next frame.
    fn next(&mut self) -> io::Result<()> {
        let f = read_frame(&mut self.s)?;
        self.handle(f)
    }

    /// Sends `body` in DATA frames as the windows allow; the last ends the
    /// stream. Stops early when the server answered already.
    fn send_body(&mut self, body: &[u8]) -> io::Result<()> {
        let mut rest = body;
        let mut frames = 0;
        loop {
            if self.ended {
                return Ok(());
            }
            let room = self.conn_window.min(self.stream_window).max(0) as usize;
            let n = rest.len().min(room).min(self.peer_max_frame);
            if n == 0 && !rest.is_empty() {
                frames += 1;
                if frames > MAX_FRAMES {
                    return Err(broken("the server never opened its window"));
                }
                self.next()?;
                continue;
            }
            let (now, later) = rest.split_at(n);
            let flags = if later.is_empty() { END_STREAM } else { 0 };
            write_frame(&mut self.s, DATA, flags, STREAM, now)?;
            self.conn_window -= n as i64;
            self.stream_window -= n as i64;
            rest = later;
            if rest.is_empty() {
                return Ok(());
            }
        }
    }
}

/// Sends one `POST` of `body` to `path` on `to` with `headers` (lower-case
/// names) and reads the answer, each step within `timeout`.
pub fn post(
    to: &Endpoint,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<Answer> {
    let s = crate::http::connect(to, timeout)?;
    let mut c = Conn {
        s,
        decoder: Decoder::default(),
        conn_window: 65_535,
        stream_window: 65_535,
        peer_initial: 65_535,
        peer_max_frame: MAX_FRAME,
        block: None,
        answer: Answer::default(),
        got_headers: false,
        ended: false,
    };
    c.s.write_all(PREFACE)?;
    // No server push; a large window for the answer's stream.
    let mut settings = Vec::new();
    settings.extend_from_slice(&[0, 2, 0, 0, 0, 0]);
    settings.extend_from_slice(&[0, 4]);
    settings.extend_from_slice(&OUR_WINDOW.to_be_bytes());
    write_frame(&mut c.s, SETTINGS, 0, 0, &settings)?;
    let authority = format!("{}:{}", to.host, to.port);
    let mut fields = vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority.as_str()),
    ];
    fields.extend_from_slice(headers);
    let block = hpack::encode(&fields);
    if block.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "HTTP/2: the request's headers are too large",
        ));
    }
    let flags = END_HEADERS | if body.is_empty() { END_STREAM } else { 0 };
    write_frame(&mut c.s, HEADERS, flags, STREAM, &block)?;
    if !body.is_empty() {
        c.send_body(body)?;
    }
    c.s.flush()?;
    for _ in 0..MAX_FRAMES {
        if c.ended && c.block.is_none() {
            return Ok(c.answer);
        }
        c.next()?;
    }
    Err(broken("the server never ended its answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that reads a request and answers as gRPC does: headers,
    /// one DATA frame, trailers; with a SETTINGS and a PING to answer and a
    /// window the body has to wait for.
    #[test]
    fn a_request_gets_through_small_windows_and_its_answer_comes_back() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let body: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let expected = body.clone();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut preface = [0u8; 24];
            s.read_exact(&mut preface).unwrap();
            assert_eq!(&preface[..], PREFACE);
            // A small stream window: the client must wait for updates.
            write_frame(&mut s, SETTINGS, 0, 0, &[0, 4, 0, 0, 0x10, 0]).unwrap();
            write_frame(&mut s, PING, 0, 0, &[7; 8]).unwrap();
            let mut d = Decoder::default();
            let mut got = Vec::new();
            let mut fields = Vec::new();
            let mut pinged = false;
            loop {
                let f = read_frame(&mut s).unwrap();
                match f.kind {
                    HEADERS => fields = d.decode(&f.payload).unwrap(),
                    PING => pinged = f.flags & ACK != 0 && f.payload == [7; 8],
                    DATA => {
                        got.extend_from_slice(&f.payload);
                        let n = (f.payload.len() as u32).to_be_bytes();
                        write_frame(&mut s, WINDOW_UPDATE, 0, 0, &n).unwrap();
                        write_frame(&mut s, WINDOW_UPDATE, 0, 1, &n).unwrap();
                        if f.flags & END_STREAM != 0 {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let head = hpack::encode(&[(":status", "200"), ("content-type", "application/grpc")]);
            write_frame(&mut s, HEADERS, END_HEADERS, 1, &head).unwrap();
            write_frame(&mut s, DATA, PADDED, 1, &[2, 0, 0, 0, 0, 0, 9, 9]).unwrap();
            let trailers = hpack::encode(&[("grpc-status", "0")]);
            write_frame(&mut s, HEADERS, END_HEADERS | END_STREAM, 1, &trailers).unwrap();
            // Acknowledgements come while the connection stays (as a
            // server keeps it); the client closes it.
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            (fields, got, pinged)
        });
        let e = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let a = post(
            &e,
            "/svc/Method",
            &[("te", "trailers")],
            &body,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(a.status, 200);
        assert_eq!(
            a.headers,
            [("content-type".to_string(), "application/grpc".to_string())]
        );
        assert_eq!(a.body, [0, 0, 0, 0, 0]);
        assert_eq!(a.trailers, [("grpc-status".to_string(), "0".to_string())]);
        let (fields, got, pinged) = server.join().unwrap();
        assert!(
            fields.contains(&(":path".into(), "/svc/Method".into())),
            "{fields:?}"
        );
        assert!(fields.contains(&(":authority".into(), format!("127.0.0.1:{port}"))));
        assert_eq!(got, expected);
        assert!(pinged, "the ping was answered");
    }

    #[test]
    fn a_server_that_is_not_http2_or_resets_is_an_error() {
        for answer in [
            &b"HTTP/1.1 400 Bad Request\r\n\r\n"[..],
            &[0, 0, 4, RST_STREAM, 0, 0, 0, 0, 1, 0, 0, 0, 8][..],
        ] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let answer = answer.to_vec();
            let server = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                s.write_all(&answer).unwrap();
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink);
            });
            let e = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
            assert!(post(&e, "/x", &[], b"body", Duration::from_secs(5)).is_err());
            server.join().unwrap();
        }
    }
}
