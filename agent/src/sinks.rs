//! Where windows go, and the payload each backend takes: a local directory
//! of rotated files (`.frec` or pprof), OTLP profiles for an OpenTelemetry
//! Collector, pprof per service for Pyroscope's push API.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use flamerec_fold::export::{write_otlp, write_pprof, OtlpResource, OtlpValue};
use flamerec_fold::{FoldOptions, Profile};

use crate::deliver::{Delivery, Payload, Retry, GRPC_CONTENT_TYPE};
use crate::http::Endpoint;
use crate::rotated::{Bounds, Rotated};
use crate::window::{ProcessInfo, WindowFile};
use crate::{stats, AgentError};

/// The path OTLP/HTTP takes profiles at (the signal's development version).
pub const OTLP_PROFILES_PATH: &str = "/v1development/profiles";

/// The path of Pyroscope's push API (Connect, protobuf).
pub const PYROSCOPE_PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// What the local directory keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirFormat {
    /// `.frec` recordings (`fold`, `info`, `view` read them).
    Frec,
    /// Gzipped pprof, `.pb.gz`.
    Pprof,
}

/// A local directory of windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirSink {
    /// Where.
    pub path: PathBuf,
    /// As what.
    pub format: DirFormat,
    /// Kept within these.
    pub bounds: Bounds,
}

/// OTLP's transports (`OTEL_EXPORTER_OTLP_PROTOCOL`'s values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `http/protobuf`: a `POST` of the message.
    #[default]
    HttpProtobuf,
    /// `grpc`: a unary call of the profiles service's `Export` over HTTP/2
    /// (plain, prior knowledge).
    Grpc,
}

/// The gRPC method OTLP profiles are exported by.
pub const OTLP_GRPC_METHOD: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

/// Every sink of a run.
#[derive(Debug, Clone, Default)]
pub struct SinkOptions {
    /// A local directory.
    pub dir: Option<DirSink>,
    /// An OTLP endpoint (over HTTP its base: the profiles path is added
    /// when it has none), with headers to send.
    pub otlp: Option<(Endpoint, Vec<(String, String)>)>,
    /// How OTLP is sent.
    pub otlp_protocol: OtlpProtocol,
    /// Pyroscope's base URL, with headers to send.
    pub pyroscope: Option<(Endpoint, Vec<(String, String)>)>,
    /// Where payloads wait for their backend, one folder each.
    pub spool: PathBuf,
    /// Each backend's spool within these.
    pub spool_bounds: Bounds,
    /// How sending is retried.
    pub retry: Retry,
    /// The service name of every process; else its container, else its executable.
    pub service: Option<String>,
}

/// The sinks, started.
pub(crate) struct Sinks {
    dir: Option<(Rotated, DirFormat)>,
    otlp: Option<(Delivery, String)>,
    otlp_type: &'static str,
    pyroscope: Option<Delivery>,
    service: Option<String>,
    host: String,
}

impl Sinks {
    pub(crate) fn start(o: &SinkOptions) -> Result<Sinks, AgentError> {
        let err = |what: &str, p: &Path, e: std::io::Error| {
            AgentError::Sink(format!("{what} {}: {e}", p.display()))
        };
        let dir = match &o.dir {
            Some(d) => {
                let suffix = match d.format {
                    DirFormat::Frec => ".frec",
                    DirFormat::Pprof => ".pb.gz",
                };
                let r = Rotated::open(&d.path, suffix, d.bounds)
                    .map_err(|e| err("cannot use the directory", &d.path, e))?;
                Some((r, d.format))
            }
            None => None,
        };
        let start = |name: &str, (to, headers): &(Endpoint, Vec<(String, String)>)| {
            let at = o.spool.join(name);
            Delivery::start(
                name,
                to.clone(),
                headers.clone(),
                &at,
                o.spool_bounds,
                o.retry,
            )
            .map_err(|e| err("cannot use the spool", &at, e))
        };
        let otlp = match &o.otlp {
            Some(t) => {
                let path = if o.otlp_protocol == OtlpProtocol::Grpc {
                    OTLP_GRPC_METHOD.to_string()
                } else if t.0.path == "/" {
                    OTLP_PROFILES_PATH.to_string()
                } else {
                    t.0.path.clone()
                };
                Some((start("otlp", t)?, path))
            }
            None => None,
        };
        let pyroscope = o
            .pyroscope
            .as_ref()
            .map(|t| start("pyroscope", t))
            .transpose()?;
        Ok(Sinks {
            dir,
            otlp,
            otlp_type: match o.otlp_protocol {
                OtlpProtocol::HttpProtobuf => "application/x-protobuf",
                OtlpProtocol::Grpc => GRPC_CONTENT_TYPE,
            },
            pyroscope,
            service: o.service.clone(),
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default(),
        })
    }

    /// Ships every window `rx` brings until the cutter hangs up.
    pub(crate) fn ship_all(
        &self,
        rx: Receiver<WindowFile>,
        quiet: bool,
        line: &(dyn Fn(&str) + Sync),
    ) {
        let mut cpu_before = stats::cpu_time();
        let mut at_before = Instant::now();
        for w in rx {
            let bytes = self.ship(&w, line);
            if quiet {
                continue;
            }
            let cpu_now = stats::cpu_time();
            let now = Instant::now();
            let cpu = match (cpu_before, cpu_now) {
                (Some(a), Some(b)) => format!(
                    "{:.2}% of a core",
                    100.0 * (b.saturating_sub(a)).as_secs_f64()
                        / now.duration_since(at_before).as_secs_f64().max(1e-3)
                ),
                _ => "CPU unknown".into(),
            };
            (cpu_before, at_before) = (cpu_now, now);
            let mem = stats::memory().map_or_else(
                || "RSS unknown".into(),
                |(rss, peak)| format!("RSS {} MiB (peak {})", rss >> 20, peak >> 20),
            );
            line(&format!(
                "flamerec: window {}: {} samples, {} lost, {} processes, {bytes} bytes{}; recorder {cpu}, {mem}{}",
                w.window.index,
                w.samples,
                w.lost,
                w.processes.len(),
                if w.names_late { " (some names came late)" } else { "" },
                self.backlog()
            ));
        }
    }

    /// The backends' figures, for the window line.
    fn backlog(&self) -> String {
        let mut out = String::new();
        for d in self.otlp.iter().map(|(d, _)| d).chain(&self.pyroscope) {
            let c = &d.counts;
            out.push_str(&format!(
                "; {}: {} sent ({:.1} s after its window), {} waiting, {} dropped",
                d.name(),
                c.sent.load(Ordering::Relaxed),
                c.last_delay_ms.load(Ordering::Relaxed) as f64 / 1e3,
                d.waiting(),
                c.dropped.load(Ordering::Relaxed)
            ));
        }
        out
    }

    /// Hands one window to every sink; returns the bytes it made.
    fn ship(&self, w: &WindowFile, line: &(dyn Fn(&str) + Sync)) -> u64 {
        let fault = |what: &str, e: String| {
            line(&format!(
                "flamerec: warning: window {}: {what}: {e}",
                w.window.index
            ))
        };
        let needs_profile = self.otlp.is_some()
            || self.pyroscope.is_some()
            || matches!(self.dir, Some((_, DirFormat::Pprof)));
        let profile = match needs_profile.then(|| fold_window(w, &[])) {
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                fault("folding it failed", e);
                None
            }
            None => None,
        };
        let mut bytes = self.keep(w, profile.as_ref(), &fault);
        let Some(profile) = profile else { return bytes };
        if sent(w).next().is_none() {
            // Nothing but idle CPUs: no request to make.
            return bytes;
        }
        if let Some((d, path)) = &self.otlp {
            let resources: Vec<OtlpResource> = sent(w).map(|p| self.resource(p)).collect();
            let body = write_otlp(&profile, &resources)
                .and_then(|b| gzip(&b))
                .map_err(|e| e.to_string());
            bytes += spool(d, w, path, self.otlp_type, "gzip", body, &fault);
        }
        if let Some(d) = &self.pyroscope {
            let body = self.pyroscope_push(w, &profile);
            bytes += spool(
                d,
                w,
                PYROSCOPE_PUSH_PATH,
                "application/proto",
                "",
                body,
                &fault,
            );
        }
        bytes
    }

    /// Writes the window into the local directory, if there is one;
    /// returns the bytes written.
    fn keep(&self, w: &WindowFile, profile: Option<&Profile>, fault: &dyn Fn(&str, String)) -> u64 {
        let Some((dir, format)) = &self.dir else {
            return 0;
        };
        let body = match (format, profile) {
            (DirFormat::Frec, _) => Ok(std::borrow::Cow::Borrowed(w.bytes.as_slice())),
            (DirFormat::Pprof, Some(p)) => pprof_bytes(p).map(std::borrow::Cow::Owned),
            (DirFormat::Pprof, None) => Err("no profile".into()),
        };
        let written = body.and_then(|b| {
            dir.put(&window_key(w), &b)
                .map(|_| b.len() as u64)
                .map_err(|e| e.to_string())
        });
        match written {
            Ok(n) => n,
            Err(e) => {
                fault(&format!("writing it into {}", dir.dir().display()), e);
                0
            }
        }
    }

    /// A process's service: the flag's, else its container, else its
    /// executable's name, else its own name.
    fn service_of(&self, p: &ProcessInfo) -> String {
        if let Some(s) = &self.service {
            return s.clone();
        }
        if !p.container_id.is_empty() {
            return p.container.clone();
        }
        match p.executable.rsplit('/').next() {
            Some(exe) if !exe.is_empty() => exe.trim_end_matches(" (deleted)").to_string(),
            _ if !p.name.is_empty() => p.name.clone(),
            _ => "unknown".into(),
        }
    }

    /// A process's resource, by OpenTelemetry's semantic conventions.
    fn resource(&self, p: &ProcessInfo) -> OtlpResource {
        let s = |v: &str| OtlpValue::Str(v.to_string());
        let mut attributes = vec![
            ("service.name".to_string(), s(&self.service_of(p))),
            ("host.name".to_string(), s(&self.host)),
            ("process.pid".to_string(), OtlpValue::Int(i64::from(p.pid))),
        ];
        let exe_name = p.executable.rsplit('/').next().unwrap_or_default();
        if !exe_name.is_empty() {
            attributes.push(("process.executable.name".into(), s(exe_name)));
            attributes.push(("process.executable.path".into(), s(&p.executable)));
        } else if !p.name.is_empty() {
            attributes.push(("process.executable.name".into(), s(&p.name)));
        }
        if !p.container_id.is_empty() {
            attributes.push(("container.id".into(), s(&p.container_id)));
        }
        OtlpResource {
            pid: p.pid,
            attributes,
        }
    }

    /// Pyroscope's push request: per service, the window's pprof of its
    /// processes, labelled `service_name`.
    fn pyroscope_push(&self, w: &WindowFile, all: &Profile) -> Result<Vec<u8>, String> {
        let mut services: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
        for p in sent(w) {
            services.entry(self.service_of(p)).or_default().push(p.pid);
        }
        let mut series = Vec::new();
        for (service, pids) in services {
            // One service of every process (no idle task): the window's own profile.
            let profile = if pids.len() == w.processes.len() {
                None
            } else {
                Some(fold_window(w, &pids)?)
            };
            let pprof = pprof_bytes(profile.as_ref().unwrap_or(all))?;
            series.push(crate::pyroscope::Series {
                labels: vec![
                    ("__name__".into(), pyroscope_name(all).into()),
                    ("service_name".into(), service),
                    ("host_name".into(), self.host.clone()),
                ],
                pprof,
            });
        }
        Ok(crate::pyroscope::push_request(&series))
    }

    /// Gives the backends until `deadline` to take what waits.
    pub(crate) fn finish(self, deadline: Instant, line: &(dyn Fn(&str) + Sync)) {
        for d in self.otlp.map(|(d, _)| d).into_iter().chain(self.pyroscope) {
            let name = d.name().to_string();
            let counts = std::sync::Arc::clone(&d.counts);
            d.finish(deadline);
            line(&format!(
                "flamerec: {name}: {} windows sent ({} bytes, at most {:.1} s after their window), {} dropped, {} failed tries",
                counts.sent.load(Ordering::Relaxed),
                counts.bytes.load(Ordering::Relaxed),
                counts.max_delay_ms.load(Ordering::Relaxed) as f64 / 1e3,
                counts.dropped.load(Ordering::Relaxed),
                counts.failures.load(Ordering::Relaxed)
            ));
        }
    }
}

/// A window's name in directories: its start (zero-padded, so names sort
/// by age) and its index.
fn window_key(w: &WindowFile) -> String {
    format!("{:020}-{:06}", w.window.start_unix_ns, w.window.index)
}

/// Puts a backend's payload for window `w` in its spool; returns its bytes.
fn spool(
    d: &Delivery,
    w: &WindowFile,
    path: &str,
    content_type: &str,
    encoding: &str,
    body: Result<Vec<u8>, String>,
    fault: &dyn Fn(&str, String),
) -> u64 {
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            fault(&format!("making {}'s payload", d.name()), e);
            return 0;
        }
    };
    let n = body.len() as u64;
    let p = Payload {
        path: path.to_string(),
        content_type: content_type.to_string(),
        encoding: encoding.to_string(),
        body,
        window_end_unix_ns: w.window.start_unix_ns.saturating_add(w.window.duration_ns),
    };
    match d.put(&window_key(w), &p) {
        Ok(_) => n,
        Err(e) => {
            fault(&format!("spooling it for {}", d.name()), e.to_string());
            0
        }
    }
}

/// The processes whose samples backends get: all but the kernel's idle
/// task (pid 0), whose samples are a CPU with nothing to run.
fn sent(w: &WindowFile) -> impl Iterator<Item = &ProcessInfo> {
    w.processes.iter().filter(|p| p.pid != 0)
}

/// The window folded as the exports want it (its samples kept), of the
/// processes `pids` (all when empty). Names are the window's own: no
/// binary or perf map is read here.
fn fold_window(w: &WindowFile, pids: &[u32]) -> Result<Profile, String> {
    let opts = FoldOptions {
        pids: pids.to_vec(),
        keep_samples: true,
        jobs: Some(1),
        names: flamerec_fold::NameOptions {
            perf_map_dir: None,
            ..flamerec_fold::NameOptions::default()
        },
        ..FoldOptions::default()
    };
    let label = format!("window {}", w.window.index);
    flamerec_fold::fold_bytes(&w.bytes, Path::new(&label), &opts).map_err(|e| e.to_string())
}

/// `body` gzipped (OTLP/HTTP takes `Content-Encoding: gzip`): a window's
/// request with deep stacks shrinks several times (its names repeat).
fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(body)?;
    z.finish()
}

/// The profile type's name Pyroscope groups by: `process_cpu` (as its eBPF
/// agent sends), `off_cpu` for time blocked (`-e off-cpu`).
fn pyroscope_name(p: &Profile) -> &'static str {
    if p.metadata.event == "off-cpu" {
        "off_cpu"
    } else {
        "process_cpu"
    }
}

fn pprof_bytes(p: &Profile) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    write_pprof(p, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// How long a window's payloads may wait in a spool by default.
pub const DEFAULT_SPOOL_AGE: Duration = Duration::from_secs(3600);
