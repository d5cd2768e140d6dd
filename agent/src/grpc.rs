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
    /// when to retry; with the delay its `google.rpc.RetryInfo` asks for.
    Retryable(String, Option<Duration>),
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
            // A proxy's Retry-After, in seconds.
            let after = a.headers.iter().find(|(k, _)| k == "retry-after");
            let after = after.and_then(|(_, v)| v.trim().parse::<u64>().ok());
            let after = after.filter(|&s| s <= MAX_RETRY_DELAY.as_secs());
            Status::Retryable(why, after.map(Duration::from_secs))
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
        return Status::Retryable("the answer ended without a grpc-status".into(), None);
    };
    let delay = field("grpc-status-details-bin").and_then(retry_delay);
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
        1 | 4 | 10 | 11 | 14 | 15 => Status::Retryable(why(), delay),
        8 if delay.is_some() => Status::Retryable(why(), delay),
        _ => Status::Refused(why()),
    }
}

/// The longest delay a server's RetryInfo is taken for.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);

/// The delay a `grpc-status-details-bin` value asks for: base64 (padded
/// or not) of a `google.rpc.Status` whose `details` hold a
/// `google.rpc.RetryInfo` (its `retry_delay`, a `google.protobuf.Duration`).
/// `None` where there is none, or it is malformed or negative; at most
/// [`MAX_RETRY_DELAY`].
fn retry_delay(details: &str) -> Option<Duration> {
    let status = base64_decode(details)?;
    let mut delay = None;
    for any in field_bytes(&status, 3)? {
        let type_urls = field_bytes(any, 1)?;
        if !type_urls
            .iter()
            .any(|t| t.ends_with(b"/google.rpc.RetryInfo"))
        {
            continue;
        }
        for info in field_bytes(any, 2)? {
            for d in field_bytes(info, 1)? {
                delay = Some(duration(d)?);
            }
        }
    }
    delay
}

/// A `google.protobuf.Duration` of at most [`MAX_RETRY_DELAY`]; `None`
/// where malformed, negative (a ten-byte varint: far past the cap) or
/// longer.
fn duration(d: &[u8]) -> Option<Duration> {
    let (mut secs, mut nanos) = (0u64, 0u64);
    for (f, v) in fields(d)? {
        match (f, v) {
            (1, Field::Varint(v)) => secs = v,
            (2, Field::Varint(v)) => nanos = v,
            _ => {}
        }
    }
    (secs <= MAX_RETRY_DELAY.as_secs() && nanos < 1_000_000_000)
        .then(|| Duration::new(secs, nanos as u32))
}

/// The length-delimited values of field `number` of message `msg`, in
/// order; `None` where the message is malformed.
fn field_bytes(msg: &[u8], number: u64) -> Option<Vec<&[u8]>> {
    let values = fields(msg)?.into_iter().filter_map(|(f, v)| match v {
        Field::Bytes(b) if f == number => Some(b),
        _ => None,
    });
    Some(values.collect())
}

/// A protobuf field's value, as far as the retry delay needs.
#[derive(Debug, PartialEq, Eq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of a protobuf message, in order; `None` where it is malformed.
fn fields(mut b: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b)?;
        let value = match key & 7 {
            0 => Field::Varint(varint(&mut b)?),
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                b = b.get(n..)?;
                Field::Fixed
            }
            2 => {
                let n = usize::try_from(varint(&mut b)?).ok()?;
                let (v, rest) = (b.get(..n)?, b.get(n..)?);
                b = rest;
                Field::Bytes(v)
            }
            _ => return None,
        };
        out.push((key >> 3, value));
    }
    Some(out)
}

/// A varint from the front of `b`.
fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Standard base64, padded or not (gRPC sends `-bin` values unpadded).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim().trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = acc << 6 | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
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

    const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";
    /// RetryInfo { retry_delay: Duration { seconds: 3, nanos: 500,000,000 } }.
    const RETRY_3_5: &[u8] = &[0x0a, 0x08, 0x08, 0x03, 0x10, 0x80, 0xca, 0xb5, 0xee, 0x01];

    /// `google.rpc.Status { code: 8, details }` (each an `Any`), encoded
    /// by hand, as base64 without padding (as grpc-go sends `-bin` values).
    fn status_with(details: &[(&str, &[u8])]) -> String {
        let len = |n: usize| u8::try_from(n).unwrap();
        let mut status = vec![0x08, 8];
        for (url, value) in details {
            let mut any = vec![0x0a, len(url.len())];
            any.extend_from_slice(url.as_bytes());
            any.extend([0x12, len(value.len())]);
            any.extend_from_slice(value);
            status.extend([0x1a, len(any.len())]);
            status.extend(any);
        }
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in status.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |a, &b| a << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(char::from(alphabet[(n >> (18 - 6 * i) & 63) as usize]));
            }
        }
        out
    }

    #[test]
    fn retry_info_gives_the_delay_asked() {
        let other = (
            "type.googleapis.com/google.rpc.DebugInfo",
            &[0x0a, 0x01, b'x'][..],
        );
        let delay = |d: &[(&str, &[u8])]| retry_delay(&status_with(d));
        let asked = Some(Duration::from_millis(3500));
        assert_eq!(delay(&[(RETRY_INFO, RETRY_3_5)]), asked);
        assert_eq!(delay(&[other, (RETRY_INFO, RETRY_3_5)]), asked);
        let mut padded = status_with(&[(RETRY_INFO, RETRY_3_5)]);
        while !padded.len().is_multiple_of(4) {
            padded.push('=');
        }
        assert_eq!(retry_delay(&padded), asked);
        assert_eq!(delay(&[other]), None);
        assert_eq!(delay(&[]), None);
        // Malformed: cut short; a day (past the hour taken); not base64.
        assert_eq!(delay(&[(RETRY_INFO, &RETRY_3_5[..5])]), None);
        let day: &[u8] = &[0x0a, 0x04, 0x08, 0x80, 0xa3, 0x05];
        assert_eq!(delay(&[(RETRY_INFO, day)]), None);
        assert_eq!(retry_delay("!!"), None);
    }

    #[test]
    fn statuses_are_judged_as_the_exporter_specification_says() {
        assert_eq!(judge(&answer(200, &[("grpc-status", "0")])), Status::Ok);
        assert_eq!(
            judge(&answer(
                200,
                &[("grpc-status", "14"), ("grpc-message", "no%20backend")]
            )),
            Status::Retryable("gRPC status 14 no backend".into(), None)
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
        // RESOURCE_EXHAUSTED is retried only when the server says when.
        assert!(matches!(
            judge(&answer(
                200,
                &[("grpc-status", "8"), ("grpc-status-details-bin", "x")]
            )),
            Status::Refused(_)
        ));
        assert_eq!(
            judge(&answer(
                200,
                &[
                    ("grpc-status", "8"),
                    (
                        "grpc-status-details-bin",
                        &status_with(&[(RETRY_INFO, RETRY_3_5)])
                    )
                ]
            )),
            Status::Retryable("gRPC status 8".into(), Some(Duration::from_millis(3500)))
        );
        assert!(matches!(
            judge(&answer(200, &[])),
            Status::Retryable(_, None)
        ));
        assert!(matches!(
            judge(&answer(503, &[])),
            Status::Retryable(_, None)
        ));
        assert!(matches!(judge(&answer(404, &[])), Status::Refused(_)));
    }
}
