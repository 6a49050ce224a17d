//! Verified file downloads into the cache: streamed to a partial file while hashing, resumed with
//! HTTP Range after a cut, retried with backoff, and renamed into the store only when the sha256
//! matches the catalog's pin.

use std::path::PathBuf;
use std::time::Duration;

use kubexm_manifests::display::Untrusted;

use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cache::{Cache, CacheError};
use crate::progress::Progress;

/// Retry policy: `attempts` tries in all, waiting `base`, 2×`base`, 4×`base`… between them.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Total tries (≥ 1).
    pub attempts: u32,
    /// First delay.
    pub base: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 4,
            base: Duration::from_millis(500),
        }
    }
}

impl Retry {
    /// Delay before try number `attempt` (1-based; the first retry is attempt 2).
    pub fn delay(&self, attempt: u32) -> Duration {
        self.base * 2u32.saturating_pow(attempt.saturating_sub(2)).min(64)
    }
}

/// Bounds of one file download into the cache, whatever the server sends: its size, and the
/// whole time it may take (every try, resume and retry delay included). The stall timeout of
/// the HTTP client (no byte for 60 s) does not bound a server that sends one byte every few
/// seconds; this deadline does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DownloadLimits {
    /// Most bytes one file may have.
    pub max_bytes: u64,
    /// The whole time one file may take.
    pub deadline: Duration,
}

/// Default [`DownloadLimits::max_bytes`]: far above any file a bundle holds (Kubernetes
/// binaries, runtimes and OS packages are at most a few hundred MiB).
pub const DEFAULT_MAX_DOWNLOAD: u64 = 8 << 30;
/// Default [`DownloadLimits::deadline`]: one hour per file.
pub const DEFAULT_DOWNLOAD_DEADLINE: Duration = Duration::from_secs(3600);

impl Default for DownloadLimits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_DOWNLOAD,
            deadline: DEFAULT_DOWNLOAD_DEADLINE,
        }
    }
}

impl DownloadLimits {
    /// Limits of `max_bytes` bytes and `deadline` per file.
    pub fn new(max_bytes: u64, deadline: Duration) -> Self {
        Self {
            max_bytes,
            deadline,
        }
    }
}

/// Why a file could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Permanent HTTP status (404, 401, 403, …).
    #[error("GET {url} answered {status}{hint}")]
    Status {
        /// URL.
        url: String,
        /// Status code.
        status: u16,
        /// What to do.
        hint: &'static str,
    },
    /// Content did not match the pin after every retry.
    #[error("{url}: sha256 mismatch after {attempts} tries: expected {expected}, got {actual}; the download was deleted")]
    Mismatch {
        /// URL.
        url: String,
        /// Pinned sum.
        expected: String,
        /// Sum of what arrived.
        actual: String,
        /// Tries made.
        attempts: u32,
    },
    /// A document read into memory (a file pinned on first use, an `index.yaml`) is larger than
    /// [`MAX_UNPINNED`].
    #[error("{url}: {size} bytes is more than KubeXM reads into memory ({MAX_UNPINNED}); pin the file with --catalog FILE")]
    TooLarge {
        /// URL.
        url: String,
        /// Its size.
        size: u64,
    },
    /// The download did not finish within [`DownloadLimits::deadline`].
    #[error("{}: not downloaded within {} s ({arrived} bytes arrived; the partial file is kept and resumed next time); the server is too slow or sends almost nothing: use a closer mirror (your zone's), or raise --download-deadline", Untrusted(.url), .deadline.as_secs())]
    Deadline {
        /// URL.
        url: String,
        /// The deadline.
        deadline: Duration,
        /// Bytes in the partial file when it passed.
        arrived: u64,
    },
    /// The file is larger than [`DownloadLimits::max_bytes`].
    #[error("{}: the server sends {size} bytes or more, above the limit of {max} bytes per file; the download was deleted: check the catalog URL (no file a bundle holds is this large), or raise --max-download-size", Untrusted(.url))]
    TooLargeDownload {
        /// URL.
        url: String,
        /// What the server announced or sent, at least.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// Transport errors or 5xx on every try.
    #[error("{url}: giving up after {attempts} tries: {last}")]
    Exhausted {
        /// URL.
        url: String,
        /// Tries made.
        attempts: u32,
        /// Last error.
        last: String,
    },
    /// Local I/O.
    #[error("{url}: writing `{path}` failed")]
    Io {
        /// URL.
        url: String,
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Cache error.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// Largest document read into memory: a file `--accept-unpinned` pins on first use (CNI
/// manifests and charts are far smaller) or a chart repository's `index.yaml`.
pub const MAX_UNPINNED: u64 = 64 << 20;

/// The whole of one request for a small document ([`MAX_UNPINNED`] at 512 KiB/s at least).
const SMALL_DEADLINE: Duration = Duration::from_secs(60 + (MAX_UNPINNED >> 19));

/// The body of `resp`, or `Err(at least its size)` once it passes `max` bytes: never more than
/// `max` bytes in memory, whatever the server says or sends.
async fn read_at_most(
    resp: reqwest::Response,
    max: u64,
) -> Result<Result<Vec<u8>, u64>, reqwest::Error> {
    if let Some(len) = resp.content_length().filter(|n| *n > max) {
        return Ok(Err(len));
    }
    let mut out = Vec::new();
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if out.len() as u64 + chunk.len() as u64 > max {
            return Ok(Err(out.len() as u64 + chunk.len() as u64));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Ok(out))
}

/// Downloads files into a [`Cache`].
#[derive(Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    cache: Cache,
    retry: Retry,
    progress: Progress,
    limits: DownloadLimits,
}

enum Attempt {
    Done(String),
    Retry(String),
}

impl Fetcher {
    /// A fetcher with its own HTTP client.
    pub fn new(cache: Cache, retry: Retry, progress: Progress) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(20))
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("kubexm-build/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            client,
            cache,
            retry,
            progress,
            limits: DownloadLimits::default(),
        })
    }

    /// The same fetcher holding every file download to `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: DownloadLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Makes sure the file with sha256 `expected` is in the cache, downloading it from `url` if
    /// needed, within [`DownloadLimits`]. A cache hit makes no request at all.
    pub async fn fetch(
        &self,
        url: &str,
        expected: &str,
        label: &str,
    ) -> Result<PathBuf, FetchError> {
        if self.cache.contains(expected) {
            return Ok(self.cache.blob_path(expected));
        }
        let partial = self.cache.partial_path(expected);
        let deadline = self.limits.deadline;
        match tokio::time::timeout(deadline, self.download(url, expected, label, &partial)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Deadline {
                url: url.to_owned(),
                deadline,
                arrived: tokio::fs::metadata(&partial).await.map_or(0, |m| m.len()),
            }),
        }
    }

    /// [`Fetcher::fetch`] without its deadline.
    async fn download(
        &self,
        url: &str,
        expected: &str,
        label: &str,
        partial: &PathBuf,
    ) -> Result<PathBuf, FetchError> {
        let mut item = self.progress.item(label, 0);
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt)).await;
            }
            match self.attempt(url, expected, partial, &mut item).await? {
                Attempt::Done(actual) if actual == expected => {
                    let path = self.cache.commit(partial, expected)?;
                    item.finish("downloaded");
                    return Ok(path);
                }
                Attempt::Done(actual) => {
                    let _ = tokio::fs::remove_file(partial).await;
                    item.reset(0);
                    tracing::warn!(%url, %expected, %actual, attempt, "sha256 mismatch; deleted, retrying");
                    if attempt == self.retry.attempts {
                        return Err(FetchError::Mismatch {
                            url: url.to_owned(),
                            expected: expected.to_owned(),
                            actual,
                            attempts: attempt,
                        });
                    }
                }
                Attempt::Retry(why) => {
                    tracing::warn!(%url, attempt, error = %why, "download interrupted; will resume");
                    last = why;
                }
            }
        }
        Err(FetchError::Exhausted {
            url: url.to_owned(),
            attempts: self.retry.attempts,
            last,
        })
    }

    /// The sha256 of the document at `url`, downloaded once into memory (retried like
    /// downloads, never cached): for `--accept-unpinned`, where the user vouches for the file
    /// the upstream host serves now. Bounded to [`MAX_UNPINNED`] bytes.
    pub async fn sha256_of(&self, url: &str) -> Result<String, FetchError> {
        let body = self
            .get_small(url, ": check the URL or your zone's mirror")
            .await?;
        Ok(kubexm_bundles::hash::sha256_hex(&body))
    }

    /// A small text document no sum is known for (a Helm repository's `index.yaml`), retried
    /// like downloads; never cached. What it says is checked by its user.
    pub async fn get_text(&self, url: &str) -> Result<String, FetchError> {
        let body = self
            .get_small(
                url,
                ": check the chart repository URL (spec.addons[].source.chart.repo) or your zone's mirror",
            )
            .await?;
        String::from_utf8(body.to_vec()).map_err(|e| FetchError::Exhausted {
            url: url.to_owned(),
            attempts: 1,
            last: format!("not UTF-8 text: {e}"),
        })
    }

    /// A small document no sum can be known for in advance (a signed repository index), retried
    /// like downloads, never cached; its signature is checked by the caller. `hint` follows the
    /// status in errors.
    pub async fn get_document(&self, url: &str, hint: &'static str) -> Result<Vec<u8>, FetchError> {
        self.get_small(url, hint).await
    }

    /// A document of at most [`MAX_UNPINNED`] bytes, in memory, retried on transport errors,
    /// 429 and 5xx; any other status fails at once with `hint`.
    async fn get_small(&self, url: &str, hint: &'static str) -> Result<Vec<u8>, FetchError> {
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt)).await;
            }
            let resp = match self.client.get(url).timeout(SMALL_DEADLINE).send().await {
                Ok(r) => r,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            match resp.status().as_u16() {
                200 => match read_at_most(resp, MAX_UNPINNED).await {
                    Ok(Ok(b)) => return Ok(b),
                    Ok(Err(size)) => {
                        return Err(FetchError::TooLarge {
                            url: url.to_owned(),
                            size,
                        })
                    }
                    Err(e) => last = e.to_string(),
                },
                s if s == 429 || s >= 500 => last = format!("HTTP {s}"),
                s => return Err(self.status(url, s, hint)),
            }
        }
        Err(FetchError::Exhausted {
            url: url.to_owned(),
            attempts: self.retry.attempts,
            last,
        })
    }

    /// One try: resume from the partial file if any, stream the rest while hashing.
    async fn attempt(
        &self,
        url: &str,
        expected: &str,
        partial: &PathBuf,
        item: &mut crate::progress::Item,
    ) -> Result<Attempt, FetchError> {
        let io = |source| FetchError::Io {
            url: url.to_owned(),
            path: partial.clone(),
            source,
        };
        let mut hasher = Sha256::new();
        let mut have = 0u64;
        if let Ok(mut f) = tokio::fs::File::open(partial).await {
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = f.read(&mut buf).await.map_err(io)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                have += n as u64;
            }
        }
        let mut req = self.client.get(url);
        if have > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Ok(Attempt::Retry(e.to_string())),
        };
        let status = resp.status();
        let append = match status.as_u16() {
            206 if have > 0 => true,
            200 => false,
            416 if have > 0 => {
                // Everything is already here (or the partial is longer than the file).
                return Ok(Attempt::Done(hex::encode(hasher.finalize())));
            }
            404 | 410 => return Err(self.status(url, status.as_u16(), ": the file is not at that URL; check the catalog URL or your zone's mirror")),
            401 | 403 => return Err(self.status(url, status.as_u16(), ": the server refused access; files are fetched without credentials, so use a mirror that serves them openly")),
            s if s == 429 || s >= 500 => return Ok(Attempt::Retry(format!("HTTP {s}"))),
            s => return Err(self.status(url, s, "")),
        };
        if !append {
            hasher = Sha256::new();
            have = 0;
        }
        let max = self.limits.max_bytes;
        let too_large = |size: u64| FetchError::TooLargeDownload {
            url: url.to_owned(),
            size,
            max,
        };
        if let Some(len) = resp.content_length() {
            let total = have.saturating_add(len);
            if total > max {
                let _ = tokio::fs::remove_file(partial).await;
                return Err(too_large(total));
            }
            item.set_total(total);
        }
        item.reset(have);
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(partial)
            .await
            .map_err(io)?;
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    file.flush().await.map_err(io)?;
                    return Ok(Attempt::Retry(format!("connection lost: {e}")));
                }
            };
            have = have.saturating_add(chunk.len() as u64);
            if have > max {
                drop(file);
                let _ = tokio::fs::remove_file(partial).await;
                return Err(too_large(have));
            }
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(io)?;
            item.inc(chunk.len() as u64);
        }
        file.flush().await.map_err(io)?;
        file.sync_all().await.map_err(io)?;
        let _ = expected;
        Ok(Attempt::Done(hex::encode(hasher.finalize())))
    }

    fn status(&self, url: &str, status: u16, hint: &'static str) -> FetchError {
        FetchError::Status {
            url: url.to_owned(),
            status,
            hint,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Instant;

    /// A server on 127.0.0.1 that answers every connection with `head` and then `body`, one
    /// piece every `every`; returns its URL for `path`.
    fn serve(path: &str, head: String, body: Vec<Vec<u8>>, every: Duration) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let (head, body) = (head.clone(), body.clone());
                std::thread::spawn(move || {
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request);
                    if stream.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    for piece in body {
                        std::thread::sleep(every);
                        if stream
                            .write_all(&piece)
                            .and_then(|()| stream.flush())
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        format!("http://127.0.0.1:{port}{path}")
    }

    fn fetcher(dir: &std::path::Path, limits: DownloadLimits) -> Fetcher {
        let retry = Retry {
            attempts: 2,
            base: Duration::from_millis(10),
        };
        Fetcher::new(Cache::open(dir).expect("cache"), retry, Progress::auto())
            .expect("client")
            .with_limits(limits)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// One byte every 200 ms of a 100 000-byte file: the stall timeout never fires, so only the
    /// total deadline ends it, with an error naming the URL (escaped) and what to do; the
    /// partial file stays to be resumed.
    #[test]
    fn a_trickling_server_meets_the_deadline() {
        let dir = tempfile::tempdir().expect("tmp");
        let url = serve(
            "/etcd\u{1b}[2J.tar.gz",
            "HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n".into(),
            vec![vec![b'x']; 100_000],
            Duration::from_millis(200),
        );
        let f = fetcher(
            dir.path(),
            DownloadLimits::new(1 << 20, Duration::from_secs(2)),
        );
        let started = Instant::now();
        let result = runtime().block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                f.fetch(&url, &"0".repeat(64), "etcd"),
            )
            .await
        });
        let err = result
            .expect("the deadline ends the download, not the test's own timeout")
            .expect_err("not downloaded");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(matches!(err, FetchError::Deadline { .. }), "{err:?}");
        let shown = err.to_string();
        assert!(
            shown.contains("127.0.0.1") && shown.contains("--download-deadline"),
            "{shown}"
        );
        assert!(
            !shown.contains('\u{1b}'),
            "the URL is shown escaped: {shown:?}"
        );
    }

    /// A file above the size limit is refused from its Content-Length before anything is
    /// written, and, without one, as soon as more than the limit arrived; nothing stays behind.
    #[test]
    fn a_file_above_the_size_limit_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let limits = DownloadLimits::new(1000, Duration::from_secs(60));
        let announced = serve(
            "/big",
            "HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n".into(),
            vec![vec![b'x'; 5000]],
            Duration::ZERO,
        );
        let unannounced = serve(
            "/big-unannounced",
            "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".into(),
            vec![vec![b'x'; 600]; 4],
            Duration::from_millis(10),
        );
        let f = fetcher(dir.path(), limits);
        for (url, sum) in [(announced, "1".repeat(64)), (unannounced, "2".repeat(64))] {
            let err = runtime()
                .block_on(f.fetch(&url, &sum, "big"))
                .expect_err("too large");
            assert!(
                matches!(err, FetchError::TooLargeDownload { size, max: 1000, .. } if size > 1000),
                "{url}: {err:?}"
            );
            assert!(err.to_string().contains("--max-download-size"), "{err}");
            assert!(
                !f.cache.partial_path(&sum).exists(),
                "{url}: partial file left"
            );
        }
        // Within the limit, the same fetcher downloads and checks the file.
        let ok = serve(
            "/small",
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n".into(),
            vec![b"abc".to_vec()],
            Duration::ZERO,
        );
        let sum = kubexm_bundles::hash::sha256_hex(b"abc");
        let path = runtime()
            .block_on(f.fetch(&ok, &sum, "small"))
            .expect("fetched");
        assert_eq!(std::fs::read(path).expect("read"), b"abc");
    }
}
