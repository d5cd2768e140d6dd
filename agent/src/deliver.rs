//! Delivery to one backend: its payloads wait in a spool directory (bytes
//! and age bounded, oldest dropped first) and a thread of its own sends
//! them oldest first, retrying with backoff. Sampling never waits for a
//! backend: a window is written into the spool and the cutter goes on; a
//! backend that is away fills its spool up to its bounds; a restart finds
//! the spool and sends what is in it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::grpc;
use crate::http::{self, Endpoint};
use crate::rotated::{Bounds, Rotated};

/// How sending is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// The first wait after a failure; each next one doubles.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
    /// Tries of one payload before it is dropped.
    pub tries: u32,
    /// Each step of one request (connect, send, answer) within this.
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            first: Duration::from_millis(500),
            max: Duration::from_secs(120),
            tries: 10,
            timeout: Duration::from_secs(10),
        }
    }
}

/// The content type of a payload sent as a gRPC call (its path is the
/// method, its encoding the message's compression) rather than a `POST`.
pub const GRPC_CONTENT_TYPE: &str = "application/grpc";

/// One request as it waits in the spool: where it goes, its headers and
/// its body. Stored as a JSON line (the target) followed by the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    /// The path (and query) it is posted to.
    pub path: String,
    /// Its `Content-Type`.
    pub content_type: String,
    /// Its `Content-Encoding` (`gzip`), empty for none.
    pub encoding: String,
    /// The body.
    pub body: Vec<u8>,
    /// When its window ended, nanoseconds since the Unix epoch (the delay
    /// to delivery is counted from there).
    pub window_end_unix_ns: u64,
}

impl Payload {
    fn to_bytes(&self) -> Vec<u8> {
        let head = (
            &self.path,
            &self.content_type,
            &self.encoding,
            self.window_end_unix_ns,
        );
        let mut out = serde_json::to_vec(&head).unwrap_or_default();
        out.push(b'\n');
        out.extend_from_slice(&self.body);
        out
    }

    fn from_bytes(bytes: &[u8]) -> Option<Payload> {
        let nl = bytes.iter().position(|&b| b == b'\n')?;
        let (path, content_type, encoding, window_end_unix_ns): (String, String, String, u64) =
            serde_json::from_slice(&bytes[..nl]).ok()?;
        Some(Payload {
            path,
            content_type,
            encoding,
            body: bytes[nl + 1..].to_vec(),
            window_end_unix_ns,
        })
    }
}

/// What a backend's delivery did so far.
#[derive(Debug, Default)]
pub struct Counts {
    /// Payloads the backend accepted.
    pub sent: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Payloads dropped: refused (a 4xx other than 408 and 429), out of
    /// tries, or pushed out of the spool by its bounds.
    pub dropped: AtomicU64,
    /// Failed tries.
    pub failures: AtomicU64,
    /// From the end of the last window delivered to its delivery, ms.
    pub last_delay_ms: AtomicU64,
    /// The longest such delay, ms.
    pub max_delay_ms: AtomicU64,
}

/// A backend's spool and its sending thread.
pub struct Delivery {
    name: String,
    spool: Arc<Rotated>,
    wake: mpsc::Sender<()>,
    stop: Arc<AtomicBool>,
    hurry: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// What it did.
    pub counts: Arc<Counts>,
}

impl Delivery {
    /// Starts delivering to `to` from the spool at `dir` (payloads already
    /// there from an earlier run go first).
    pub fn start(
        name: &str,
        to: Endpoint,
        headers: Vec<(String, String)>,
        dir: &Path,
        bounds: Bounds,
        retry: Retry,
    ) -> std::io::Result<Delivery> {
        let spool = Arc::new(Rotated::open(dir, ".req", bounds)?);
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let hurry = Arc::new(AtomicBool::new(false));
        let (wake, woken) = mpsc::channel();
        // Header names in lower case: HTTP/1.1 ignores their case, and
        // HTTP/2 (gRPC's metadata) wants them so.
        let headers = headers
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        let sender = Sending {
            spool: Arc::clone(&spool),
            to,
            headers,
            retry,
            counts: Arc::clone(&counts),
            stop: Arc::clone(&stop),
            hurry: Arc::clone(&hurry),
            name: name.to_string(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("flamerec-{name}"))
            .spawn(move || sender.run(&woken))?;
        Ok(Delivery {
            name: name.to_string(),
            spool,
            wake,
            stop,
            hurry,
            thread: Some(thread),
            counts,
        })
    }

    /// The backend's name, as said in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Puts a payload in the spool under `key` (names sort by age) and
    /// wakes the sender; returns how many older payloads the bounds pushed out.
    pub fn put(&self, key: &str, p: &Payload) -> std::io::Result<usize> {
        let removed = self.spool.put(key, &p.to_bytes())?;
        self.counts
            .dropped
            .fetch_add(removed as u64, Ordering::Relaxed);
        let _ = self.wake.send(());
        Ok(removed)
    }

    /// Payloads waiting.
    pub fn waiting(&self) -> usize {
        self.spool.files().map_or(0, |f| f.len())
    }

    /// Tries to send what waits until `deadline`, then stops the sender;
    /// what is left stays in the spool for the next run.
    pub fn finish(mut self, deadline: Instant) {
        // A backend back from an outage is tried now, not after the backoff.
        self.hurry.store(true, Ordering::Relaxed);
        while self.waiting() > 0 && Instant::now() < deadline {
            if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.wake.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The sending thread's side.
struct Sending {
    spool: Arc<Rotated>,
    to: Endpoint,
    headers: Vec<(String, String)>,
    retry: Retry,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    hurry: Arc<AtomicBool>,
    name: String,
}

/// What one try came to.
enum Outcome {
    Sent,
    /// Not now: try again after this long at least.
    Later(Option<Duration>, String),
    /// Never: the backend refused it.
    Refused(String),
}

impl Sending {
    fn run(self, woken: &Receiver<()>) {
        let mut tries = 0u32;
        let mut current: Option<PathBuf> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let Ok(Some(path)) = self.spool.oldest() else {
                if let Err(RecvTimeoutError::Disconnected) =
                    woken.recv_timeout(Duration::from_secs(1))
                {
                    return;
                }
                continue;
            };
            if current.as_ref() != Some(&path) {
                current = Some(path.clone());
                tries = 0;
            }
            let p = match fs::read(&path) {
                Ok(b) => Payload::from_bytes(&b),
                // Pushed out by the bounds meanwhile: gone.
                Err(_) => continue,
            };
            let Some(p) = p else {
                eprintln!(
                    "flamerec: warning: {}: {} is not a payload this flamerec wrote: dropped",
                    self.name,
                    path.display()
                );
                self.drop_payload(&path);
                continue;
            };
            let wait = match self.send(&p) {
                Outcome::Sent => {
                    let delay = crate::unix_ns().saturating_sub(p.window_end_unix_ns) / 1_000_000;
                    self.counts.last_delay_ms.store(delay, Ordering::Relaxed);
                    self.counts.max_delay_ms.fetch_max(delay, Ordering::Relaxed);
                    self.counts.sent.fetch_add(1, Ordering::Relaxed);
                    self.counts
                        .bytes
                        .fetch_add(p.body.len() as u64, Ordering::Relaxed);
                    let _ = fs::remove_file(&path);
                    continue;
                }
                Outcome::Refused(why) => {
                    eprintln!(
                        "flamerec: warning: {}: a window was refused and dropped: {why}",
                        self.name
                    );
                    self.drop_payload(&path);
                    continue;
                }
                Outcome::Later(at_least, why) => {
                    self.counts.failures.fetch_add(1, Ordering::Relaxed);
                    tries += 1;
                    if tries >= self.retry.tries {
                        eprintln!(
                            "flamerec: warning: {}: a window was dropped after {tries} tries: {why}",
                            self.name
                        );
                        self.drop_payload(&path);
                        continue;
                    }
                    let backoff = self
                        .retry
                        .first
                        .saturating_mul(1u32 << (tries - 1).min(20))
                        .min(self.retry.max);
                    at_least.map_or(backoff, |a| a.max(backoff).min(self.retry.max))
                }
            };
            let until = Instant::now() + wait;
            while !self.stop.load(Ordering::Relaxed)
                && !self.hurry.load(Ordering::Relaxed)
                && Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(50).min(wait));
            }
        }
    }

    fn drop_payload(&self, path: &Path) {
        self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        let _ = fs::remove_file(path);
    }

    fn send(&self, p: &Payload) -> Outcome {
        if p.content_type == GRPC_CONTENT_TYPE {
            return self.call(p);
        }
        let mut headers: Vec<(&str, &str)> = vec![("Content-Type", p.content_type.as_str())];
        if !p.encoding.is_empty() {
            headers.push(("Content-Encoding", p.encoding.as_str()));
        }
        headers.extend(self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        match http::post(
            &self.to.with_path(&p.path),
            &headers,
            &p.body,
            self.retry.timeout,
        ) {
            Ok(r) if (200..300).contains(&r.status) => Outcome::Sent,
            Ok(r) if r.status == 408 || r.status == 429 || r.status >= 500 => Outcome::Later(
                r.retry_after,
                format!("HTTP {} {}", r.status, r.body.trim()),
            ),
            Ok(r) => Outcome::Refused(format!("HTTP {} {}", r.status, r.body.trim())),
            Err(e) => Outcome::Later(None, e.to_string()),
        }
    }

    /// A payload for gRPC: one unary call of its path (the method), its
    /// headers as metadata.
    fn call(&self, p: &Payload) -> Outcome {
        let metadata: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let gzipped = p.encoding == "gzip";
        match grpc::call(
            &self.to,
            &p.path,
            &metadata,
            &p.body,
            gzipped,
            self.retry.timeout,
        ) {
            Ok(grpc::Status::Ok) => Outcome::Sent,
            Ok(grpc::Status::Retryable(why, delay)) => Outcome::Later(delay, why),
            Ok(grpc::Status::Refused(why)) => Outcome::Refused(why),
            Err(e) => Outcome::Later(None, e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip() {
        let p = Payload {
            path: "/v1development/profiles".into(),
            content_type: "application/x-protobuf".into(),
            encoding: "gzip".into(),
            body: vec![0, b'\n', 255],
            window_end_unix_ns: 7,
        };
        assert_eq!(Payload::from_bytes(&p.to_bytes()), Some(p));
        assert_eq!(Payload::from_bytes(b"no header"), None);
    }
}
