//! `flamerec agent`: options → `flamerec_agent::run`, which records the
//! whole system until SIGINT or SIGTERM and delivers it window by window.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use flamerec_agent::deliver::Retry;
use flamerec_agent::http::Endpoint;
use flamerec_agent::rotated::Bounds;
use flamerec_agent::{AgentOptions, DirFormat, DirSink, OtlpProtocol, SinkOptions};
use flamerec_record::{RecordOptions, Target};

use super::record::{Event, Mode, Picked, Python};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum FileFormat {
    /// `.frec` recordings.
    Frec,
    /// Gzipped pprof (`.pb.gz`).
    Pprof,
}

/// Arguments of `flamerec agent`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Samples per second per CPU.
    #[arg(short = 'F', long = "freq", default_value_t = 19, value_parser = clap::value_parser!(u64).range(1..=1000))]
    freq: u64,
    /// Seconds per window (5–60): each a complete profile.
    #[arg(long, value_name = "SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(5..=60))]
    window: u64,
    /// Minutes one recording runs before the next takes over (what it
    /// learned — frames, stacks, names — is dropped with it).
    #[arg(long, value_name = "MINUTES", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1440))]
    epoch: u64,
    /// Call-graph mode.
    #[arg(short = 'g', long = "call-graph", value_enum, default_value = "dwarf")]
    call_graph: Mode,
    /// Sampling event (off-cpu: time blocked).
    #[arg(short, long, value_enum, default_value = "cpu-clock")]
    event: Event,
    /// Read Python frames at each sample: auto (from the first CPython
    /// process found), on, or off.
    #[arg(long, value_enum, value_name = "auto|on|off", default_value = "auto")]
    python: Python,
    /// Send OTLP profiles over HTTP (protobuf) to this collector: a base
    /// URL (`/v1development/profiles` is added) or the full path. Without
    /// a value, OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT, else
    /// OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    otlp: Option<String>,
    /// How OTLP is sent: http/protobuf or grpc (HTTP/2 without TLS).
    /// Default: OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL, else
    /// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
    #[arg(long, value_name = "PROTOCOL")]
    otlp_protocol: Option<String>,
    /// Push pprof per service to this Pyroscope server (its push API).
    #[arg(long, value_name = "URL")]
    pyroscope: Option<String>,
    /// Keep each window as a file in this directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The files in --dir.
    #[arg(long, value_enum, default_value = "frec")]
    dir_format: FileFormat,
    /// --dir holds at most this many MiB (oldest files removed first).
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    dir_max_mib: u64,
    /// --dir holds files at most this many hours old.
    #[arg(long, value_name = "HOURS", default_value_t = 72)]
    dir_max_hours: u64,
    /// Where windows wait for a backend that is away (one folder per backend).
    #[arg(long, value_name = "DIR", default_value = "/var/spool/flamerec")]
    spool: PathBuf,
    /// Each backend's spool holds at most this many MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    spool_max_mib: u64,
    /// A window not delivered within this many minutes is dropped.
    #[arg(long, value_name = "MINUTES", default_value_t = 60)]
    spool_max_minutes: u64,
    /// Tries per window before it is dropped.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    tries: u32,
    #[command(flatten)]
    picked: Picked,
    /// The service name of every process (default: its container, else its executable's name).
    #[arg(long, value_name = "NAME")]
    service: Option<String>,
    /// No line per window.
    #[arg(short, long)]
    quiet: bool,
}

fn env_var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

/// The OTLP protocol as the flag and OpenTelemetry's variables give it.
fn otlp_protocol(flag: Option<&str>) -> anyhow::Result<OtlpProtocol> {
    let (value, from) = match flag {
        Some(f) => (f.to_string(), "--otlp-protocol"),
        None => match env_var("OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL") {
            Some(v) => (v, "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL"),
            None => match env_var("OTEL_EXPORTER_OTLP_PROTOCOL") {
                Some(v) => (v, "OTEL_EXPORTER_OTLP_PROTOCOL"),
                None => return Ok(OtlpProtocol::HttpProtobuf),
            },
        },
    };
    match value.trim() {
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "grpc" => Ok(OtlpProtocol::Grpc),
        other => {
            anyhow::bail!("{from}: `{other}` is not one flamerec sends (http/protobuf or grpc)")
        }
    }
}

/// The OTLP endpoint as the flag and OpenTelemetry's variables give it.
fn otlp_endpoint(
    flag: &str,
    protocol: OtlpProtocol,
) -> anyhow::Result<(Endpoint, Vec<(String, String)>)> {
    let grpc = protocol == OtlpProtocol::Grpc;
    let url = if !flag.is_empty() {
        flag.to_string()
    } else if let Some(u) = env_var("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT") {
        u
    } else if let Some(base) = env_var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        if grpc {
            // gRPC takes the endpoint as it is: the method names the signal.
            base
        } else {
            // The general variable is a base: the signal's path goes after it.
            format!(
                "{}{}",
                base.trim_end_matches('/'),
                flamerec_agent::sinks::OTLP_PROFILES_PATH
            )
        }
    } else if grpc {
        "http://localhost:4317".to_string()
    } else {
        "http://localhost:4318".to_string()
    };
    let endpoint = Endpoint::parse(&url).map_err(|e| anyhow::anyhow!("--otlp: {e}"))?;
    let headers = env_var("OTEL_EXPORTER_OTLP_PROFILES_HEADERS")
        .or_else(|| env_var("OTEL_EXPORTER_OTLP_HEADERS"))
        .map(|h| parse_headers(&h))
        .transpose()?
        .unwrap_or_default();
    Ok((endpoint, headers))
}

/// `key=value,key=value`, values percent-decoded as OpenTelemetry says.
fn parse_headers(s: &str) -> anyhow::Result<Vec<(String, String)>> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("OTEL_EXPORTER_OTLP_HEADERS: `{p}` is not key=value")
            })?;
            Ok((
                k.trim().to_string(),
                flamerec_agent::http::percent_decode(v.trim()),
            ))
        })
        .collect()
}

fn options(a: &Args) -> anyhow::Result<AgentOptions> {
    let timeout = std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT")
        .ok()
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis);
    let pyroscope = a
        .pyroscope
        .as_deref()
        .map(|u| Endpoint::parse(u).map_err(|e| anyhow::anyhow!("--pyroscope: {e}")))
        .transpose()?
        .map(|e| (e, Vec::new()));
    let protocol = otlp_protocol(a.otlp_protocol.as_deref())?;
    let sinks = SinkOptions {
        dir: a.dir.as_ref().map(|path| DirSink {
            path: path.clone(),
            format: match a.dir_format {
                FileFormat::Frec => DirFormat::Frec,
                FileFormat::Pprof => DirFormat::Pprof,
            },
            bounds: Bounds {
                max_bytes: a.dir_max_mib.saturating_mul(1 << 20),
                max_age: Duration::from_secs(a.dir_max_hours.saturating_mul(3600)),
            },
        }),
        otlp: a
            .otlp
            .as_deref()
            .map(|flag| otlp_endpoint(flag, protocol))
            .transpose()?,
        otlp_protocol: protocol,
        pyroscope,
        spool: a.spool.clone(),
        spool_bounds: Bounds {
            max_bytes: a.spool_max_mib.saturating_mul(1 << 20),
            max_age: Duration::from_secs(a.spool_max_minutes.saturating_mul(60)),
        },
        retry: Retry {
            tries: a.tries,
            timeout,
            ..Retry::default()
        },
        service: a.service.clone(),
    };
    if sinks.dir.is_none() && sinks.otlp.is_none() && sinks.pyroscope.is_none() {
        anyhow::bail!("nowhere to send windows: give --otlp, --pyroscope or --dir");
    }
    Ok(AgentOptions {
        record: RecordOptions {
            frequency: a.freq,
            call_graph: a.call_graph.into(),
            target: Target::System,
            event: a.event.into(),
            python: a.python.into(),
            // A window is cut once the stream passes its end: chunks come
            // four times a second, not once.
            chunk_every: Duration::from_millis(250),
            selection: a.picked.selection(),
            ..RecordOptions::default()
        },
        window: Duration::from_secs(a.window),
        epoch: Duration::from_secs(a.epoch.saturating_mul(60)),
        sinks,
        quiet: a.quiet,
    })
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let opts = options(&a)?;
    let line = |l: &str| eprintln!("{l}");
    let summary = flamerec_agent::run(&opts, &line)?;
    if !a.quiet {
        eprintln!(
            "flamerec: agent stopped: {} windows in {} recordings, {} dropped before a sink took them",
            summary.windows, summary.recordings, summary.dropped_windows
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_as_opentelemetry_spells_them() {
        let h = parse_headers("api-key=a%20b, x=1,").unwrap();
        assert_eq!(
            h,
            [("api-key".into(), "a b".into()), ("x".into(), "1".into())]
        );
        assert!(parse_headers("novalue").is_err());
        assert_eq!(flamerec_agent::http::percent_decode("%zz%41"), "%zzA");
    }
}
