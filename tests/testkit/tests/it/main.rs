//! Tests of the test kit itself: one binary (`cargo test -p kubexm-testkit`).
//!
//! They need Debian's docker-registry, skopeo, umoci, busybox-static, apache2-utils,
//! openssl and curl (tests/run-all installs them).

mod deps;
mod images;
mod mirror;
mod registry;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// A response read until the server closed the connection.
#[derive(Debug)]
pub(crate) struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResponse {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn content_length(&self) -> usize {
        self.header("content-length")
            .expect("response has Content-Length")
            .parse()
            .expect("Content-Length is a number")
    }
}

/// Splits raw bytes (head + body) into a [`RawResponse`].
pub(crate) fn parse_response(raw: &[u8]) -> RawResponse {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response has a complete head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    RawResponse {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

/// A raw HTTP/1.1 request (no client library between the test and the bytes on the wire),
/// read until EOF: a cut body stays cut.
pub(crate) fn request(method: &str, url: &str, headers: &[(&str, &str)]) -> RawResponse {
    let rest = url.strip_prefix("http://").expect("http:// URL");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = TcpStream::connect(authority).expect("connect to the server");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set read timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\n");
    for (name, value) in headers {
        req.push_str(name);
        req.push_str(": ");
        req.push_str(value);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    parse_response(&raw)
}

pub(crate) fn get(url: &str) -> RawResponse {
    request("GET", url, &[])
}

/// Deterministic test content: `len` bytes of a simple pattern.
pub(crate) fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| u8::try_from(i * 7 % 251).expect("below 251"))
        .collect()
}
