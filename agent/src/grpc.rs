//! One unary gRPC call (what OTLP/gRPC's `Export` is) over [`crate::h2`]:
//! the message framed with its compressed flag and length, `grpc-encoding`
//! when it is gzipped, and the answer judged by its `grpc-status` as
//! OpenTelemetry's exporter specification says which codes to retry.

use std::io;
use std::time::Duration;

use crate::h2;
use crate::http::Endpoint;

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// `grpc-status: 0`.
    Ok,
    /// A code worth trying again later (the server is away, busy, or the
    /// call was cut): 1, 4, 10, 11, 14, 15, and 8 when the server said
    /// when to retry (`grpc-status-details-bin` present).
    Retryable(String),
    /// Any other code: the message itself is refused.
    Refused(String),
}

/// Calls `method` (`/package.Service/Method`) on `to` with the serialized
/// message `message` (gzipped when `gzipped`), `metadata` as extra headers.
pub fn call(
    to: &Endpoint,
    method: &str,
    metadata: &[(&str, &str)],
    message: &[u8],
    gzipped: bool,
    timeout: Duration,
) -> io::Result<Status> {
    let len = u32::try_from(message.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "gRPC: a message over 4 GiB"))?;
    let mut body = Vec::with_capacity(message.len() + 5);
    body.push(u8::from(gzipped));
    body.extend_from_slice(&len.to_be_bytes());
    body.extend_from_slice(message);
    let timeout_header = format!("{}m", timeout.as_millis().max(1));
    let user_agent = concat!("flamerec/", env!("CARGO_PKG_VERSION"));
    let mut headers: Vec<(&str, &str)> = vec![
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", &timeout_header),
        ("user-agent", user_agent),
    ];
    if gzipped {
        headers.push(("grpc-encoding", "gzip"));
    }
    headers.extend_from_slice(metadata);
    let answer = h2::post(to, method, &headers, &body, timeout)?;
    Ok(judge(&answer))
}

/// The status of an answer: HTTP first (a proxy's), then gRPC's.
fn judge(a: &h2::Answer) -> Status {
    if a.status != 200 {
        let why = format!("HTTP {}", a.status);
        return if a.status == 429 || a.status >= 500 {
            Status::Retryable(why)
        } else {
            Status::Refused(why)
        };
    }
    let field = |name: &str| {
        a.trailers
            .iter()
            .chain(&a.headers)
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let Some(code) = field("grpc-status").and_then(|c| c.parse::<u32>().ok()) else {
        return Status::Retryable("the answer ended without a grpc-status".into());
    };
    let why = || {
        format!(
            "gRPC status {code} {}",
            // `grpc-message` is percent-encoded.
            crate::http::percent_decode(field("grpc-message").unwrap_or(""))
        )
        .trim_end()
        .to_string()
    };
    match code {
        0 => Status::Ok,
        1 | 4 | 10 | 11 | 14 | 15 => Status::Retryable(why()),
        8 if field("grpc-status-details-bin").is_some() => Status::Retryable(why()),
        _ => Status::Refused(why()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, trailers: &[(&str, &str)]) -> h2::Answer {
        h2::Answer {
            status,
            trailers: trailers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..h2::Answer::default()
        }
    }

    #[test]
    fn statuses_are_judged_as_the_exporter_specification_says() {
        assert_eq!(judge(&answer(200, &[("grpc-status", "0")])), Status::Ok);
        assert_eq!(
            judge(&answer(
                200,
                &[("grpc-status", "14"), ("grpc-message", "no%20backend")]
            )),
            Status::Retryable("gRPC status 14 no backend".into())
        );
        assert_eq!(
            judge(&answer(
                200,
                &[("grpc-status", "3"), ("grpc-message", "bad")]
            )),
            Status::Refused("gRPC status 3 bad".into())
        );
        assert!(matches!(
            judge(&answer(200, &[("grpc-status", "8")])),
            Status::Refused(_)
        ));
        assert!(matches!(
            judge(&answer(
                200,
                &[("grpc-status", "8"), ("grpc-status-details-bin", "x")]
            )),
            Status::Retryable(_)
        ));
        assert!(matches!(judge(&answer(200, &[])), Status::Retryable(_)));
        assert!(matches!(judge(&answer(503, &[])), Status::Retryable(_)));
        assert!(matches!(judge(&answer(404, &[])), Status::Refused(_)));
    }
}
