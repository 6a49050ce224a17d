//! [`HttpMirror`]: a small HTTP/1.1 file server with request counting and fault injection.
//!
//! Hand-rolled on `std::net` (one thread per connection, `Connection: close`), so it needs
//! no runtime and gives byte-level control for faults such as [`Fault::CutAfter`].

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// A failure the mirror serves once, for the next request to a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `404 Not Found`, even if the file exists.
    NotFound,
    /// This status code with a short text body (e.g. 500, 503).
    Status(u16),
    /// `401 Unauthorized` with a `WWW-Authenticate: Basic` challenge.
    Unauthorized,
    /// The file (or requested range) with one byte flipped: same length, wrong content.
    /// The flipped byte is the middle one of the body sent. An empty body is sent as is.
    Corrupt,
    /// Headers announce the full `Content-Length`, then only this many body bytes are sent
    /// and the connection is closed: a download cut mid-way, to be resumed with `Range`.
    CutAfter(usize),
}

/// One request the mirror received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// `GET`, `HEAD`, ...
    pub method: String,
    /// The decoded URL path, starting with `/`, without the query string.
    pub path: String,
    /// The raw `Range` header value, if any (e.g. `bytes=100-`).
    pub range: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    requests: Vec<RequestRecord>,
    faults: HashMap<String, VecDeque<Fault>>,
}

#[derive(Debug)]
struct Shared {
    root: PathBuf,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A handler thread that panicked cannot leave the state half-updated (each update
        // is one push or pop), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A static file server on `127.0.0.1:<OS-chosen port>` serving a directory.
///
/// `GET` and `HEAD`; `Range: bytes=N-`, `bytes=N-M` and `bytes=-N` give `206` with
/// `Content-Range`; `Content-Length` is always set; every response closes the connection.
/// It is accepting connections when [`HttpMirror::start`] returns and stops on `Drop`.
#[derive(Debug)]
pub struct HttpMirror {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    accept_thread: Option<JoinHandle<()>>,
}

impl HttpMirror {
    /// Serves the files under `root` (which the caller keeps alive).
    ///
    /// # Panics
    /// If no loopback port can be bound.
    #[must_use]
    pub fn start(root: &Path) -> HttpMirror {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("HttpMirror: bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("HttpMirror: local address of the listener");
        let shared = Arc::new(Shared {
            root: root.to_path_buf(),
            state: Mutex::new(State::default()),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let accept_thread = {
            let shared = Arc::clone(&shared);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("http-mirror-{}", addr.port()))
                .spawn(move || accept_loop(&listener, &shared, &stop))
                .expect("HttpMirror: spawn the accept thread")
        };
        HttpMirror {
            addr,
            shared,
            stop,
            accept_thread: Some(accept_thread),
        }
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `base_url()` joined with `path` (with or without a leading `/`).
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url(), normalize(path))
    }

    /// The socket address the mirror listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The directory being served.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    /// Number of requests received (any method, any path, faults included).
    #[must_use]
    pub fn requests(&self) -> usize {
        self.shared.state().requests.len()
    }

    /// Number of requests received for `path` (with or without a leading `/`).
    #[must_use]
    pub fn requests_for(&self, path: &str) -> usize {
        let path = normalize(path);
        self.shared
            .state()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    /// Every request received since the start or the last [`reset_counts`](Self::reset_counts), in order.
    #[must_use]
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.shared.state().requests.clone()
    }

    /// The `Range` header of each request for `path`, in order (`None`: no `Range`).
    #[must_use]
    pub fn ranges_for(&self, path: &str) -> Vec<Option<String>> {
        let path = normalize(path);
        self.shared
            .state()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.range.clone())
            .collect()
    }

    /// Forgets the recorded requests (pending faults are kept).
    pub fn reset_counts(&self) {
        self.shared.state().requests.clear();
    }

    /// Queues `fault` for `path`: the next request for it gets the first queued fault,
    /// the one after gets the second, and so on; once the queue is empty, requests are
    /// served normally again. Any method consumes a fault.
    pub fn inject(&self, path: &str, fault: Fault) {
        self.shared
            .state()
            .faults
            .entry(normalize(path))
            .or_default()
            .push_back(fault);
    }

    /// Faults still queued for `path`.
    #[must_use]
    pub fn pending_faults(&self, path: &str) -> usize {
        self.shared
            .state()
            .faults
            .get(&normalize(path))
            .map_or(0, VecDeque::len)
    }

    /// Drops every queued fault.
    pub fn clear_faults(&self) {
        self.shared.state().faults.clear();
    }
}

impl Drop for HttpMirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept() so the thread sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.accept_thread.take() {
            let _ = thread.join();
        }
    }
}

fn normalize(path: &str) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let shared = Arc::clone(shared);
        let _ = std::thread::Builder::new()
            .name("http-mirror-conn".into())
            .spawn(move || {
                // A client that disconnects early is not the mirror's problem.
                let _ = handle_connection(stream, &shared);
            });
    }
}

struct Request {
    method: String,
    path: String,
    range: Option<String>,
}

/// Reads the request head. `Ok(None)`: the peer sent nothing (e.g. the Drop wake-up).
fn read_request(stream: &TcpStream) -> std::io::Result<Option<Request>> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default();
    let raw_path = target.split(['?', '#']).next().unwrap_or_default();
    let path = percent_decode(raw_path);
    let mut range = None;
    let mut head_bytes = line.len();
    loop {
        let mut header = String::new();
        let n = reader.read_line(&mut header)?;
        head_bytes += n;
        if n == 0 || header == "\r\n" || header == "\n" || head_bytes > 64 * 1024 {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.trim().eq_ignore_ascii_case("range") {
                range = Some(value.trim().to_owned());
            }
        }
    }
    Ok(Some(Request {
        method,
        path,
        range,
    }))
}

fn percent_decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = raw
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(byte) = hex {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Maps a URL path onto a file under `root`, refusing anything that could escape it.
fn resolve(root: &Path, url_path: &str) -> Option<PathBuf> {
    let relative = Path::new(url_path.trim_start_matches('/'));
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let full = root.join(relative);
    full.is_file().then_some(full)
}

/// What a `Range` header asks for, given the file length.
enum RangeRequest {
    Full,
    Partial { start: usize, end: usize },
    Unsatisfiable,
}

fn parse_range(header: Option<&str>, len: usize) -> RangeRequest {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return RangeRequest::Full;
    };
    if spec.contains(',') {
        // Multiple ranges: ignoring Range and sending 200 is allowed by RFC 9110.
        return RangeRequest::Full;
    }
    let Some((first, last)) = spec.split_once('-') else {
        return RangeRequest::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    let parsed = if first.is_empty() {
        // Suffix range: the last N bytes.
        last.parse::<usize>()
            .ok()
            .map(|n| (len.saturating_sub(n), len.checked_sub(1)))
    } else {
        first.parse::<usize>().ok().map(|start| {
            let end = if last.is_empty() {
                len.checked_sub(1)
            } else {
                last.parse::<usize>()
                    .ok()
                    .map(|e| e.min(len.saturating_sub(1)))
            };
            (start, end)
        })
    };
    match parsed {
        None => RangeRequest::Full,
        Some((start, Some(end))) if start <= end && start < len => {
            RangeRequest::Partial { start, end }
        }
        Some(_) => RangeRequest::Unsatisfiable,
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

fn write_head(
    stream: &mut TcpStream,
    status: u16,
    content_length: usize,
    extra: &[(&str, String)],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Length: {content_length}\r\nConnection: close\r\n",
        reason(status)
    );
    for (name, value) in extra {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())
}

fn simple(stream: &mut TcpStream, status: u16, head_only: bool) -> std::io::Result<()> {
    let body = format!("{status} {}\n", reason(status));
    let mut extra = vec![("Content-Type", "text/plain".to_owned())];
    if status == 401 {
        extra.push((
            "WWW-Authenticate",
            "Basic realm=\"kubexm-testkit\"".to_owned(),
        ));
    }
    write_head(stream, status, body.len(), &extra)?;
    if !head_only {
        stream.write_all(body.as_bytes())?;
    }
    Ok(())
}

fn handle_connection(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let Some(request) = read_request(&stream)? else {
        return Ok(());
    };
    let fault = {
        let mut state = shared.state();
        state.requests.push(RequestRecord {
            method: request.method.clone(),
            path: request.path.clone(),
            range: request.range.clone(),
        });
        state
            .faults
            .get_mut(&request.path)
            .and_then(VecDeque::pop_front)
    };
    let head_only = request.method == "HEAD";
    if !head_only && request.method != "GET" {
        return simple(&mut stream, 405, false);
    }
    match fault {
        Some(Fault::NotFound) => return simple(&mut stream, 404, head_only),
        Some(Fault::Status(code)) => return simple(&mut stream, code, head_only),
        Some(Fault::Unauthorized) => return simple(&mut stream, 401, head_only),
        Some(Fault::Corrupt | Fault::CutAfter(_)) | None => {}
    }
    let Some(file) = resolve(&shared.root, &request.path) else {
        return simple(&mut stream, 404, head_only);
    };
    let content = fs_err::read(&file)?;
    let len = content.len();
    let (status, body, mut extra) = match parse_range(request.range.as_deref(), len) {
        RangeRequest::Full => (200, &content[..], Vec::new()),
        RangeRequest::Partial { start, end } => (
            206,
            &content[start..=end],
            vec![("Content-Range", format!("bytes {start}-{end}/{len}"))],
        ),
        RangeRequest::Unsatisfiable => {
            write_head(
                &mut stream,
                416,
                0,
                &[("Content-Range", format!("bytes */{len}"))],
            )?;
            return Ok(());
        }
    };
    extra.push(("Accept-Ranges", "bytes".to_owned()));
    extra.push(("Content-Type", "application/octet-stream".to_owned()));
    write_head(&mut stream, status, body.len(), &extra)?;
    if head_only {
        return Ok(());
    }
    match fault {
        Some(Fault::Corrupt) => {
            let mut corrupted = body.to_vec();
            if let Some(byte) = corrupted.get_mut(body.len() / 2) {
                *byte ^= 0xff;
            }
            stream.write_all(&corrupted)?;
        }
        Some(Fault::CutAfter(n)) => {
            stream.write_all(&body[..n.min(body.len())])?;
            stream.flush()?;
            // Close now: the client sees EOF before Content-Length bytes arrived.
            let _ = stream.shutdown(Shutdown::Write);
        }
        _ => stream.write_all(body)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(header: &str, len: usize) -> Option<(usize, usize)> {
        match parse_range(Some(header), len) {
            RangeRequest::Partial { start, end } => Some((start, end)),
            RangeRequest::Full => None,
            RangeRequest::Unsatisfiable => Some((usize::MAX, usize::MAX)),
        }
    }

    #[test]
    fn ranges_parse() {
        assert_eq!(range("bytes=10-", 100), Some((10, 99)));
        assert_eq!(range("bytes=10-19", 100), Some((10, 19)));
        assert_eq!(range("bytes=10-500", 100), Some((10, 99)));
        assert_eq!(range("bytes=-5", 100), Some((95, 99)));
        assert_eq!(range("bytes=100-", 100), Some((usize::MAX, usize::MAX)));
        assert_eq!(range("bytes=0-1,5-6", 100), None);
        assert_eq!(range("items=0-1", 100), None);
    }

    #[test]
    fn paths_cannot_escape_root() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs_err::write(dir.path().join("a"), b"x").expect("write a");
        assert!(resolve(dir.path(), "/a").is_some());
        assert!(resolve(dir.path(), "/../a").is_none());
        assert!(resolve(dir.path(), "/").is_none());
        assert_eq!(percent_decode("/a%20b%zz%"), "/a b%zz%");
    }
}
