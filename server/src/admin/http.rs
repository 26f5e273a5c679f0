//! Just enough HTTP/1.1 for a scraper, a probe and `curl`: one `GET` (or
//! `HEAD`) per connection, answered with a complete body and closed.
//!
//! Hand-written rather than a server crate: the admin port serves a few
//! fixed, read-only pages to local tooling, and an HTTP stack (hyper and
//! its tower of dependencies) would double the server's build for that.
//! What it leaves out (keep-alive, chunked bodies, request bodies) no
//! Prometheus scraper, Kubernetes probe or Docker healthcheck needs.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The request line and headers may take this much; a longer head is
/// answered 431 and closed.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;

/// A request must arrive, and its answer be written, within this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Whether the body is to be left out (`HEAD`).
    pub head_only: bool,
    /// The path, without any query string.
    pub path: String,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

pub const TEXT: &str = "text/plain; charset=utf-8";
pub const JSON: &str = "application/json";
/// The Prometheus text exposition format, version 0.0.4.
pub const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

impl Response {
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: TEXT,
            body: body.into(),
        }
    }

    pub fn json(status: u16, body: String) -> Self {
        Self {
            status,
            content_type: JSON,
            body,
        }
    }
}

/// Why a request could not be read; each has the answer it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRequest {
    /// The head did not end within [`REQUEST_HEAD_BYTES_MAX`].
    TooLarge,
    /// Not an HTTP/1 request line.
    Malformed,
    /// A method other than GET and HEAD.
    Method(String),
}

impl BadRequest {
    pub fn response(&self) -> Response {
        match self {
            BadRequest::TooLarge => Response::text(
                431,
                format!("request head over {REQUEST_HEAD_BYTES_MAX} bytes\n"),
            ),
            BadRequest::Malformed => Response::text(400, "not an HTTP/1 request\n"),
            BadRequest::Method(method) => Response::text(
                405,
                format!("{method} is not served here: the admin port is read-only (GET, HEAD)\n"),
            ),
        }
    }
}

/// Parses a request head (everything before the blank line).
pub fn parse(head: &[u8]) -> Result<Request, BadRequest> {
    let head = std::str::from_utf8(head).map_err(|_| BadRequest::Malformed)?;
    let line = head.lines().next().ok_or(BadRequest::Malformed)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(BadRequest::Malformed);
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Err(BadRequest::Malformed);
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        other => return Err(BadRequest::Method(other.to_owned())),
    };
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Ok(Request {
        head_only,
        path: path.to_owned(),
    })
}

/// Reads a request head from `stream`: `Ok(None)` if the peer closed
/// before sending one.
pub async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> std::io::Result<Option<Result<Request, BadRequest>>> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&chunk[..read]);
        if let Some(end) = find_end(&head) {
            return Ok(Some(parse(&head[..end])));
        }
        if head.len() > REQUEST_HEAD_BYTES_MAX {
            return Ok(Some(Err(BadRequest::TooLarge)));
        }
    }
}

/// Where the head ends: before the first blank line (CRLF or bare LF).
fn find_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// Writes `response` whole and shuts the stream down.
pub async fn write<S: AsyncWrite + Unpin>(
    stream: &mut S,
    response: &Response,
    head_only: bool,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    if response.status == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&response.body);
    }
    stream.write_all(out.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the request line is read as a scraper and curl send it, the
    // query string dropped.
    #[test]
    fn a_get_is_read_with_its_path() {
        let request = parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*").expect("ok");
        assert_eq!(
            request,
            Request {
                head_only: false,
                path: "/metrics".into()
            }
        );
        assert!(parse(b"HEAD /health HTTP/1.0").expect("ok").head_only);
    }

    // Proves what is not a GET or HEAD gets its own refusal.
    #[test]
    fn other_methods_and_garbage_are_refused() {
        assert_eq!(
            parse(b"POST /metrics HTTP/1.1"),
            Err(BadRequest::Method("POST".into()))
        );
        assert_eq!(parse(b"\x00\x00\x00\x2d"), Err(BadRequest::Malformed));
        assert_eq!(parse(b"GET metrics HTTP/1.1"), Err(BadRequest::Malformed));
        assert_eq!(parse(b"GET / SPDY/3"), Err(BadRequest::Malformed));
        assert_eq!(BadRequest::Method("PUT".into()).response().status, 405);
    }

    // Proves a head longer than the limit is cut off, not buffered.
    #[tokio::test]
    async fn a_long_head_is_refused() {
        let mut long = b"GET /".to_vec();
        long.extend(std::iter::repeat_n(b'a', REQUEST_HEAD_BYTES_MAX + 10));
        let mut reader = &long[..];
        let read = read_head(&mut reader).await.expect("read");
        assert_eq!(read, Some(Err(BadRequest::TooLarge)));
        let mut ended = &b"GET /ready HTTP/1.1\n\n"[..];
        let read = read_head(&mut ended).await.expect("read");
        assert_eq!(
            read.and_then(Result::ok).map(|r| r.path),
            Some("/ready".into())
        );
    }
}
