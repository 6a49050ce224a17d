//! A small OCI distribution push client (HTTP API v2): blob HEAD, cross-repository mount,
//! monolithic and chunked uploads streamed from disk, manifest HEAD/PUT. Basic auth and the
//! bearer-token flow (`WWW-Authenticate: Bearer realm=…`) are handled; every request is retried
//! with backoff on 5xx and connection errors.
//!
//! The registry is not trusted, and this client is the one place KubeXM's installer talks HTTP
//! (a test greps the code for `reqwest` anywhere else):
//! - every request goes to the origin the operator named (scheme, host and port): an upload
//!   `Location` on another origin (or a relative one that would change the host) is refused
//!   before anything is sent ([`same_origin`]), so the credentials never follow it; redirects
//!   to another origin lose them (reqwest drops `Authorization` there);
//! - credentials go to a token realm only on that same origin ([`realm_allowed`]): a realm on
//!   another host, port or scheme is refused before anything is sent there; one helper
//!   (`PushClient::attach`) adds `Authorization` to every request and applies the rule;
//! - every request has a stall timeout (no byte for [`Deadlines::stall`]), a total deadline
//!   scaled by its size, and all tries of one request share [`Deadlines::retry_budget`]; when
//!   they run out the error names the registry, the repository and the blob or manifest;
//! - every answer read into memory has a size limit: error bodies and tokens
//!   [`MAX_BODY_READ`], Harbor's API [`MAX_API_BODY`], `get_small` its caller's;
//! - whatever the registry sends back is shown through [`Untrusted`] (escaped and cut).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kubexm_manifests::digest::Digest;
use kubexm_manifests::display::{Untrusted, UntrustedMax};

use reqwest::header::{
    HeaderMap, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, LOCATION,
    WWW_AUTHENTICATE,
};
use reqwest::{Method, StatusCode};
use tokio::io::AsyncReadExt;

use super::error::{RegistryTarget, SeedError};

/// The `repo` argument for registry-wide requests (`/v2/_catalog`): its token scope is
/// `registry:catalog:*`. Not a valid repository name, so it never names one.
pub const CATALOG: &str = "<catalog>";

/// Default: blobs up to this size go up in one PUT; larger ones in chunks of this size.
pub const CHUNK: u64 = 8 << 20;
/// Characters of a registry's error body kept in an error.
const MAX_BODY_SHOWN: usize = 400;

/// How long the registry may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// No byte received for this long fails the request.
    pub stall: Duration,
    /// Every request may take this long, plus its body at [`Deadlines::min_rate`].
    pub base: Duration,
    /// Slowest transfer accepted, in bytes per second.
    pub min_rate: u64,
    /// All tries of one request together (retries and back-off included) stop after this.
    pub retry_budget: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            stall: Duration::from_secs(30),
            base: Duration::from_secs(60),
            min_rate: 512 * 1024,
            retry_budget: Duration::from_secs(600),
        }
    }
}

impl Deadlines {
    /// The total deadline of one request moving `bytes` bytes.
    pub fn for_size(&self, bytes: u64) -> Duration {
        let transfer = Duration::from_secs(bytes / self.min_rate.max(1));
        self.base.saturating_add(transfer)
    }
}

/// Whether `url` has the origin (scheme, host, port) of `base`: the only place requests that
/// may carry the operator's credentials go.
pub fn same_origin(base: &reqwest::Url, url: &reqwest::Url) -> bool {
    url.scheme() == base.scheme()
        && url.host_str() == base.host_str()
        && url.port_or_known_default() == base.port_or_known_default()
}

/// Whether credentials may be sent to the token `realm` of a registry at `base`
/// (`https://host:port` or, with `--plain-http`, `http://host:port`): only when the realm is on
/// the registry's own origin ([`same_origin`]) and names no user. A token service elsewhere,
/// even over https, is another party the operator did not name.
pub fn realm_allowed(base: &str, realm: &str) -> bool {
    let (Ok(base), Ok(realm)) = (reqwest::Url::parse(base), reqwest::Url::parse(realm)) else {
        return false;
    };
    same_origin(&base, &realm) && realm.username().is_empty() && realm.password().is_none()
}

/// Outcome of making sure a blob is in a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobOutcome {
    /// It was there already.
    Present,
    /// Mounted from another repository of the same registry.
    Mounted,
    /// Uploaded.
    Uploaded,
}

/// Push client for one registry.
pub struct PushClient {
    http: reqwest::Client,
    base: String,
    base_url: reqwest::Url,
    host: String,
    username: Option<String>,
    password: Option<kubexm_manifests::secret::Secret>,
    tokens: Mutex<HashMap<String, String>>,
    basic_required: Mutex<bool>,
    attempts: u32,
    delay: Duration,
    chunk: u64,
    deadlines: Deadlines,
}

enum Body {
    Empty,
    Bytes(bytes::Bytes),
}

impl PushClient {
    /// A client for `target`.
    pub fn new(
        target: &RegistryTarget,
        attempts: u32,
        delay: Duration,
        chunk: u64,
    ) -> Result<Self, SeedError> {
        Self::with_deadlines(target, attempts, delay, chunk, Deadlines::default())
    }

    /// A client for `target` held to `deadlines`.
    pub fn with_deadlines(
        target: &RegistryTarget,
        attempts: u32,
        delay: Duration,
        chunk: u64,
        deadlines: Deadlines,
    ) -> Result<Self, SeedError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(deadlines.stall.min(Duration::from_secs(20)))
            .read_timeout(deadlines.stall)
            .user_agent(concat!("kubexm-install/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::limited(5));
        if let Some(pem) = &target.ca_pem {
            for cert in reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| SeedError::Setup(format!("--ca-file is not a PEM certificate: {e}")))?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder
            .build()
            .map_err(|e| SeedError::Setup(e.to_string()))?;
        let scheme = if target.plain_http { "http" } else { "https" };
        let base = format!("{scheme}://{}", target.host);
        let base_url = reqwest::Url::parse(&base)
            .ok()
            .filter(|u| u.path() == "/" && u.username().is_empty() && u.query().is_none())
            .ok_or_else(|| {
                SeedError::Setup(format!(
                    "`{}` is not a registry address (host[:port])",
                    Untrusted(&target.host)
                ))
            })?;
        Ok(Self {
            http,
            base,
            base_url,
            host: target.host.clone(),
            username: target.username.clone(),
            password: target.password.clone(),
            tokens: Mutex::new(HashMap::new()),
            basic_required: Mutex::new(false),
            attempts: attempts.max(1),
            delay,
            chunk: chunk.max(1),
            deadlines,
        })
    }

    /// The registry's base URL (`https://host:port`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The registry's `host[:port]` as the operator named it.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `path_or_url` (a `/v2/…` or `/api/…` path, or a URL the registry sent) resolved against
    /// the registry's base, when it stays on the registry's origin.
    ///
    /// # Errors
    ///
    /// [`SeedError::Origin`] naming the URL otherwise.
    fn url(&self, path_or_url: &str) -> Result<reqwest::Url, SeedError> {
        let refused = || SeedError::Origin {
            registry: self.host.clone(),
            url: path_or_url.to_owned(),
        };
        let url = self.base_url.join(path_or_url).map_err(|_| refused())?;
        if !same_origin(&self.base_url, &url) || !url.username().is_empty() {
            return Err(refused());
        }
        Ok(url)
    }

    /// One call of an HTTP API of the registry (Harbor's `/api/v2.0/…`): the request to the
    /// registry's own origin with the operator's credentials (Basic), the whole exchange within
    /// [`Deadlines::base`], the answer's body at most [`MAX_API_BODY`] bytes. Not retried.
    ///
    /// # Errors
    ///
    /// [`SeedError::Protocol`] for a transport error, a deadline passed or a body too large;
    /// [`SeedError::Origin`] for a path that leaves the registry.
    pub async fn api(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        json: Option<&serde_json::Value>,
    ) -> Result<(StatusCode, Vec<u8>), SeedError> {
        let url = self.url(path)?;
        let deadline = self.deadlines.base;
        let what = format!("{method} {}", Untrusted(path));
        let fail = |detail: String| SeedError::Protocol {
            registry: self.host.clone(),
            detail: format!("{what}: {detail}"),
        };
        let mut req = self
            .http
            .request(method.clone(), url)
            .query(query)
            .timeout(deadline);
        if let Some(body) = json {
            req = req.json(body);
        }
        if let Some(auth) = self.basic() {
            req = req.header(AUTHORIZATION, auth);
        }
        let exchange = async {
            let resp = req.send().await.map_err(|e| fail(chain(&e)))?;
            let status = resp.status();
            let body = read_limited(resp, MAX_API_BODY)
                .await
                .map_err(|e| fail(e.to_string()))?;
            Ok::<_, SeedError>((status, body))
        };
        match tokio::time::timeout(deadline, exchange).await {
            Ok(result) => result,
            Err(_) => Err(fail(format!(
                "no complete answer within {deadline:?}; check that the registry is Harbor and reachable"
            ))),
        }
    }

    /// Makes sure `digest` (content at `path`, `size` bytes) is in `repo`; mounts from `from` when given.
    pub async fn ensure_blob(
        &self,
        repo: &str,
        digest: &Digest,
        path: &Path,
        size: u64,
        from: Option<&str>,
    ) -> Result<BlobOutcome, SeedError> {
        let object = format!("blob {digest}");
        let op = Op {
            repo,
            object: &object,
            bytes: 0,
        };
        let head = self
            .send(
                &op,
                Method::HEAD,
                &format!("/v2/{repo}/blobs/{digest}"),
                &HeaderMap::new(),
                Body::Empty,
            )
            .await;
        match head {
            Ok(resp) if resp.status().is_success() => return Ok(BlobOutcome::Present),
            Ok(_) => {}
            // The HEAD only decides whether to skip: a registry that cannot answer it (a
            // registry killed while writing a blob's repository link leaves a link it cannot
            // read, and answers 500 for that blob until the link is written again) gets the
            // blob again; the upload's completion rewrites the link. A registry that is down
            // fails the upload with its own error.
            Err(SeedError::Exhausted {
                last_status: Some(status),
                last,
                ..
            }) if status.is_server_error() => {
                tracing::warn!(registry = %self.host, repo, object = %object, error = %last,
                    "the registry cannot say whether it holds this blob: uploading it again");
            }
            Err(e) => return Err(e),
        }
        let mut location = None;
        if let Some(from) = from {
            let resp = self
                .send(
                    &op,
                    Method::POST,
                    &format!("/v2/{repo}/blobs/uploads/?mount={digest}&from={from}"),
                    &HeaderMap::new(),
                    Body::Empty,
                )
                .await?;
            match resp.status() {
                StatusCode::CREATED => return Ok(BlobOutcome::Mounted),
                StatusCode::ACCEPTED => location = Some(self.location(&resp, repo)?),
                s => return Err(self.status_error(&op, "mount", s, resp).await),
            }
        }
        let location = match location {
            Some(l) => l,
            None => {
                let resp = self
                    .send(
                        &op,
                        Method::POST,
                        &format!("/v2/{repo}/blobs/uploads/"),
                        &HeaderMap::new(),
                        Body::Empty,
                    )
                    .await?;
                if resp.status() != StatusCode::ACCEPTED {
                    let s = resp.status();
                    return Err(self.status_error(&op, "start upload of", s, resp).await);
                }
                self.location(&resp, repo)?
            }
        };
        self.upload(&op, digest, path, size, location).await?;
        Ok(BlobOutcome::Uploaded)
    }

    async fn upload(
        &self,
        op: &Op<'_>,
        digest: &Digest,
        path: &Path,
        size: u64,
        mut location: String,
    ) -> Result<(), SeedError> {
        let repo = op.repo;
        let io = |source| SeedError::Read {
            path: path.to_owned(),
            source,
        };
        let mut file = tokio::fs::File::open(path).await.map_err(io)?;
        let chunk = self.chunk;
        let mut buf = Vec::with_capacity(usize::try_from(chunk.min(size)).unwrap_or(0));
        if size > chunk {
            let mut offset = 0u64;
            while offset < size {
                buf.clear();
                (&mut file)
                    .take(chunk)
                    .read_to_end(&mut buf)
                    .await
                    .map_err(io)?;
                if buf.is_empty() {
                    break;
                }
                let end = offset + buf.len() as u64 - 1;
                let mut h = HeaderMap::new();
                h.insert(CONTENT_TYPE, header_value("application/octet-stream")?);
                h.insert(CONTENT_RANGE, header_value(&format!("{offset}-{end}"))?);
                let chunk_op = Op {
                    bytes: buf.len() as u64,
                    ..*op
                };
                let resp = self
                    .send(
                        &chunk_op,
                        Method::PATCH,
                        &location,
                        &h,
                        Body::Bytes(bytes::Bytes::copy_from_slice(&buf)),
                    )
                    .await?;
                if resp.status() != StatusCode::ACCEPTED {
                    let s = resp.status();
                    return Err(self.status_error(op, "upload a chunk of", s, resp).await);
                }
                location = self.location(&resp, repo)?;
                offset = end + 1;
            }
            buf.clear();
        } else {
            file.read_to_end(&mut buf).await.map_err(io)?;
        }
        let sep = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{sep}digest={digest}");
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, header_value("application/octet-stream")?);
        let put_op = Op {
            bytes: buf.len() as u64,
            ..*op
        };
        let resp = self
            .send(
                &put_op,
                Method::PUT,
                &url,
                &h,
                Body::Bytes(bytes::Bytes::from(std::mem::take(&mut buf))),
            )
            .await?;
        if resp.status() != StatusCode::CREATED {
            let s = resp.status();
            return Err(self.status_error(op, "finish upload of", s, resp).await);
        }
        Ok(())
    }

    /// The digest the registry has for `reference` (tag or digest), if any.
    pub async fn manifest_digest(
        &self,
        repo: &str,
        reference: &str,
        accept: &str,
    ) -> Result<Option<String>, SeedError> {
        let mut h = HeaderMap::new();
        h.insert(reqwest::header::ACCEPT, header_value(accept)?);
        let object = format!("manifest {}", Untrusted(reference));
        let op = Op {
            repo,
            object: &object,
            bytes: 0,
        };
        let Some(resp) = self
            .head(&op, &format!("/v2/{repo}/manifests/{reference}"), &h)
            .await?
        else {
            return Ok(None);
        };
        Ok(resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned))
    }

    /// Puts manifest bytes under `reference` (tag or digest) with their media type.
    pub async fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<(), SeedError> {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, header_value(media_type)?);
        let object = format!("manifest {}", Untrusted(reference));
        let op = Op {
            repo,
            object: &object,
            bytes: bytes.len() as u64,
        };
        let resp = self
            .send(
                &op,
                Method::PUT,
                &format!("/v2/{repo}/manifests/{reference}"),
                &h,
                Body::Bytes(bytes::Bytes::copy_from_slice(bytes)),
            )
            .await?;
        if resp.status() != StatusCode::CREATED {
            let s = resp.status();
            return Err(self.status_error(&op, "put", s, resp).await);
        }
        Ok(())
    }

    /// The size of blob `digest` in `repo`, or `None` when the repository does not serve it.
    pub async fn blob_size(&self, repo: &str, digest: &str) -> Result<Option<u64>, SeedError> {
        let object = format!("blob {}", Untrusted(digest));
        let op = Op {
            repo,
            object: &object,
            bytes: 0,
        };
        let resp = self
            .head(
                &op,
                &format!("/v2/{repo}/blobs/{digest}"),
                &HeaderMap::new(),
            )
            .await?;
        Ok(resp.map(|r| r.content_length().unwrap_or(0)))
    }

    /// HEADs `path`: the answer when the registry serves it, `None` otherwise.
    async fn head(
        &self,
        op: &Op<'_>,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<Option<reqwest::Response>, SeedError> {
        let resp = self
            .send(op, Method::HEAD, path, headers, Body::Empty)
            .await?;
        Ok(resp.status().is_success().then_some(resp))
    }

    /// GETs a `/v2/…` path of `repo` (or of the catalog when `repo` is [`CATALOG`]) into memory,
    /// at most `max` bytes; `None` on 404.
    pub async fn get_small(
        &self,
        repo: &str,
        path: &str,
        accept: Option<&str>,
        max: u64,
    ) -> Result<Option<Vec<u8>>, SeedError> {
        let mut h = HeaderMap::new();
        if let Some(a) = accept {
            h.insert(reqwest::header::ACCEPT, header_value(a)?);
        }
        let object = format!("GET {}", Untrusted(path));
        // The request's deadline allows for `max` bytes at the slowest accepted rate.
        let op = Op {
            repo,
            object: &object,
            bytes: max,
        };
        let mut resp = self.send(&op, Method::GET, path, &h, Body::Empty).await?;
        if resp.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            let s = resp.status();
            return Err(self.status_error(&op, "get", s, resp).await);
        }
        let mut out = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| SeedError::Protocol {
            registry: self.host.clone(),
            detail: format!("GET {path}: {}", chain(&e)),
        })? {
            if out.len() as u64 + chunk.len() as u64 > max {
                return Err(SeedError::Protocol {
                    registry: self.host.clone(),
                    detail: format!("GET {path}: the answer is larger than {max} bytes"),
                });
            }
            out.extend_from_slice(&chunk);
        }
        Ok(Some(out))
    }

    /// Downloads blob `digest` of `repo` into `dest` (created), checking its sha256 and `size`.
    pub async fn download_blob(
        &self,
        repo: &str,
        digest: &str,
        size: u64,
        dest: &Path,
    ) -> Result<(), SeedError> {
        use sha2::Digest as _;
        use tokio::io::AsyncWriteExt;
        let object = format!("blob {}", Untrusted(digest));
        // The request's deadline allows for `size` bytes at the slowest accepted rate.
        let op = Op {
            repo,
            object: &object,
            bytes: size,
        };
        let mut resp = self
            .send(
                &op,
                Method::GET,
                &format!("/v2/{repo}/blobs/{digest}"),
                &HeaderMap::new(),
                Body::Empty,
            )
            .await?;
        if !resp.status().is_success() {
            let s = resp.status();
            return Err(self.status_error(&op, "get", s, resp).await);
        }
        let write_err = |source| SeedError::Read {
            path: dest.to_owned(),
            source,
        };
        let mut file = tokio::fs::File::create(dest).await.map_err(write_err)?;
        let mut hasher = sha2::Sha256::new();
        let mut got = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(|e| SeedError::Protocol {
            registry: self.host.clone(),
            detail: format!("get blob {digest} from {repo}: {}", chain(&e)),
        })? {
            got += chunk.len() as u64;
            if got > size {
                return Err(SeedError::Protocol {
                    registry: self.host.clone(),
                    detail: format!("blob {digest} in {repo} is larger than its {size} bytes"),
                });
            }
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(write_err)?;
        }
        file.sync_all().await.map_err(write_err)?;
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != digest || got != size {
            return Err(SeedError::Protocol {
                registry: self.host.clone(),
                detail: format!(
                    "blob {digest} in {repo} arrived as {actual} ({got} bytes, expected {size})"
                ),
            });
        }
        Ok(())
    }

    /// The upload URL of a `Location` answer, resolved against the registry and refused when it
    /// leaves the registry's origin.
    fn location(&self, resp: &reqwest::Response, repo: &str) -> Result<String, SeedError> {
        let loc = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| SeedError::Protocol {
                registry: self.host.clone(),
                detail: format!("upload to {repo} answered without a Location header"),
            })?;
        Ok(self.url(loc)?.to_string())
    }

    async fn status_error(
        &self,
        op: &Op<'_>,
        what: &str,
        status: StatusCode,
        resp: reqwest::Response,
    ) -> SeedError {
        let body = read_capped(resp, self.deadlines.stall).await;
        SeedError::Registry {
            registry: self.host.clone(),
            repo: op.repo.to_owned(),
            what: format!("{what} {}", op.object),
            status: status.as_u16(),
            body: UntrustedMax(String::from_utf8_lossy(&body), MAX_BODY_SHOWN).to_string(),
        }
    }

    /// Sends with auth and retries, within the deadlines. `path_or_url` is a `/v2/…` path or an
    /// absolute URL.
    async fn send(
        &self,
        op: &Op<'_>,
        method: Method,
        path_or_url: &str,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<reqwest::Response, SeedError> {
        let repo = op.repo;
        let url = self.url(path_or_url)?;
        let started = Instant::now();
        let budget = self.deadlines.retry_budget;
        let per_request = self.deadlines.for_size(op.bytes);
        let mut last = String::new();
        let mut last_status = None;
        let mut reauthed = false;
        let mut attempt = 0;
        while attempt < self.attempts {
            attempt += 1;
            if attempt > 1 {
                let pause = self.delay * 2u32.saturating_pow(attempt - 2).min(64);
                if started.elapsed().saturating_add(pause) >= budget {
                    break;
                }
                tokio::time::sleep(pause).await;
            }
            let Some(left) = budget
                .checked_sub(started.elapsed())
                .filter(|d| !d.is_zero())
            else {
                break;
            };
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .timeout(per_request.min(left))
                .headers(headers.clone());
            req = match &body {
                Body::Empty => req.header(CONTENT_LENGTH, 0),
                Body::Bytes(b) => req.body(b.clone()),
            };
            req = self
                .attach(req, &url, self.authorization(repo))
                .map_err(|url| SeedError::Origin {
                    registry: self.host.clone(),
                    url: url.to_string(),
                })?;
            match req.send().await {
                Ok(resp) if resp.status() == StatusCode::UNAUTHORIZED && !reauthed => {
                    reauthed = true;
                    attempt -= 1;
                    self.authenticate(repo, &resp).await?;
                }
                Ok(resp)
                    if resp.status() == StatusCode::UNAUTHORIZED
                        || resp.status() == StatusCode::FORBIDDEN =>
                {
                    return Err(SeedError::Unauthorized {
                        registry: self.host.clone(),
                        detail: format!(
                            "{method} {} answered {}",
                            Untrusted(url.as_str()),
                            resp.status()
                        ),
                    });
                }
                Ok(resp)
                    if resp.status().is_server_error()
                        || resp.status() == StatusCode::TOO_MANY_REQUESTS =>
                {
                    last = format!(
                        "{method} {} answered {}",
                        Untrusted(url.as_str()),
                        resp.status()
                    );
                    last_status = Some(resp.status());
                    tracing::warn!(registry = %self.host, repo, object = op.object, attempt, error = %last, "retrying");
                }
                Ok(resp) => return Ok(resp),
                Err(e) => {
                    let why = if e.is_timeout() {
                        format!(
                            "no answer in time (stall timeout {:?}, deadline {:?})",
                            self.deadlines.stall,
                            per_request.min(left)
                        )
                    } else {
                        chain(&e)
                    };
                    last = format!("{method} {}: {}", Untrusted(url.as_str()), Untrusted(&why));
                    last_status = None;
                    tracing::warn!(registry = %self.host, repo, object = op.object, attempt, error = %last, "retrying");
                }
            }
        }
        Err(SeedError::Exhausted {
            registry: self.host.clone(),
            repo: repo.to_owned(),
            object: op.object.to_owned(),
            attempts: attempt,
            elapsed: started.elapsed(),
            last,
            last_status,
        })
    }

    /// The one place the operator's credentials (`auth`: Basic, or a Bearer token the
    /// registry's token service gave for them) are put on a request: only when `url` is on the
    /// registry's own origin, the scheme, host and port the operator named, and names no user.
    /// Anywhere else the request is not made; the refused URL is returned.
    fn attach(
        &self,
        req: reqwest::RequestBuilder,
        url: &reqwest::Url,
        auth: Option<String>,
    ) -> Result<reqwest::RequestBuilder, reqwest::Url> {
        match auth {
            None => Ok(req),
            Some(_) if !realm_allowed(self.base_url.as_str(), url.as_str()) => Err(url.clone()),
            Some(a) => Ok(req.header(AUTHORIZATION, a)),
        }
    }

    fn authorization(&self, repo: &str) -> Option<String> {
        if let Some(t) = self.tokens.lock().ok().and_then(|t| t.get(repo).cloned()) {
            return Some(format!("Bearer {t}"));
        }
        let basic = self.basic_required.lock().map(|b| *b).unwrap_or(false);
        basic.then(|| self.basic()).flatten()
    }

    fn basic(&self) -> Option<String> {
        use base64::Engine;
        let (u, p) = (self.username.as_ref()?, self.password.as_ref()?);
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{}", p.expose()))
        ))
    }

    /// Answers a 401 challenge: Basic → send credentials from now on; Bearer → fetch a token.
    async fn authenticate(&self, repo: &str, resp: &reqwest::Response) -> Result<(), SeedError> {
        let challenge = resp
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let no_creds = || SeedError::Unauthorized {
            registry: self.host.clone(),
            detail: "the registry requires credentials; pass --username and --password-stdin"
                .into(),
        };
        if challenge.to_ascii_lowercase().starts_with("bearer") {
            let params = parse_challenge(&challenge);
            let realm = params.get("realm").ok_or_else(|| SeedError::Protocol {
                registry: self.host.clone(),
                detail: format!("bearer challenge without realm: {}", Untrusted(&challenge)),
            })?;
            let scope = if repo == CATALOG {
                "registry:catalog:*".to_owned()
            } else {
                format!("repository:{repo}:pull,push")
            };
            let realm_refused = || SeedError::Realm {
                registry: self.host.clone(),
                realm: realm.clone(),
            };
            let realm_url = reqwest::Url::parse(realm).map_err(|_| realm_refused())?;
            let mut req = self
                .http
                .get(realm_url.clone())
                .timeout(self.deadlines.base)
                .query(&[("scope", scope)]);
            if let Some(service) = params.get("service") {
                req = req.query(&[("service", service)]);
            }
            let req = self
                .attach(req, &realm_url, self.basic())
                .map_err(|_| realm_refused())?;
            let token_resp = req.send().await.map_err(|e| SeedError::Unauthorized {
                registry: self.host.clone(),
                detail: format!(
                    "token request to {} failed: {}",
                    Untrusted(realm),
                    Untrusted(chain(&e))
                ),
            })?;
            if !token_resp.status().is_success() {
                return Err(SeedError::Unauthorized {
                    registry: self.host.clone(),
                    detail: format!(
                        "token service {} answered {}; check the credentials",
                        Untrusted(realm),
                        token_resp.status()
                    ),
                });
            }
            let body = read_capped(token_resp, self.deadlines.stall).await;
            let v: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| SeedError::Protocol {
                    registry: self.host.clone(),
                    detail: format!("token response is not JSON: {e}"),
                })?;
            let token = v
                .get("token")
                .or_else(|| v.get("access_token"))
                .and_then(|t| t.as_str())
                .ok_or_else(|| SeedError::Protocol {
                    registry: self.host.clone(),
                    detail: "token response has no token".into(),
                })?;
            if let Ok(mut t) = self.tokens.lock() {
                t.insert(repo.to_owned(), token.to_owned());
            }
            return Ok(());
        }
        if self.basic().is_none() {
            return Err(no_creds());
        }
        if let Ok(mut b) = self.basic_required.lock() {
            *b = true;
        }
        Ok(())
    }
}

/// One request's subject: its repository, what it concerns (`blob sha256:…`, `manifest v1`)
/// and the bytes it sends (its deadline scales with them).
#[derive(Clone, Copy)]
struct Op<'a> {
    repo: &'a str,
    object: &'a str,
    bytes: u64,
}

/// Largest response body read for an error message or a token.
pub const MAX_BODY_READ: usize = 64 * 1024;

/// Largest answer of Harbor's API read ([`PushClient::api`]): a project list of one name.
pub const MAX_API_BODY: u64 = 1 << 20;

/// The body of `resp`, refused past `max` bytes (the request's own deadline bounds the time).
async fn read_limited(mut resp: reqwest::Response, max: u64) -> Result<Vec<u8>, String> {
    if resp.content_length().is_some_and(|n| n > max) {
        return Err(format!("the answer is larger than {max} bytes"));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| chain(&e))? {
        if out.len() as u64 + chunk.len() as u64 > max {
            return Err(format!("the answer is larger than {max} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// At most [`MAX_BODY_READ`] bytes of a response body, within `stall` per chunk.
async fn read_capped(mut resp: reqwest::Response, stall: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < MAX_BODY_READ {
        match tokio::time::timeout(stall, resp.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                let room = MAX_BODY_READ - out.len();
                out.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            _ => break,
        }
    }
    out
}

/// A header value, or a setup error naming it.
fn header_value(value: &str) -> Result<reqwest::header::HeaderValue, SeedError> {
    value.parse().map_err(|_| {
        SeedError::Setup(format!(
            "`{}` is not a valid HTTP header value",
            Untrusted(value)
        ))
    })
}

/// An error with its causes, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// `Bearer realm="x",service="y",scope="a:pull,push"` → {realm, service, scope}; quoted values
/// may hold commas.
fn parse_challenge(header: &str) -> HashMap<String, String> {
    let rest = header.split_once(' ').map_or("", |(_, r)| r);
    let mut out = HashMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        let key: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
                value.push(c);
            }
            while chars.peek().is_some_and(|c| *c != ',') {
                chars.next();
            }
            chars.next();
        } else {
            value = chars
                .by_ref()
                .take_while(|c| *c != ',')
                .collect::<String>()
                .trim()
                .to_owned();
        }
        out.insert(key, value);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn credentials_only_to_the_named_origin() {
        use super::realm_allowed;
        let tls = "https://reg.example:5000";
        assert!(!realm_allowed(tls, "https://auth.example/token"));
        assert!(realm_allowed(tls, "https://reg.example:5000/service/token"));
        assert!(!realm_allowed(tls, "https://reg.example/service/token"));
        assert!(realm_allowed(
            "https://reg.example",
            "https://reg.example:443/service/token"
        ));
        assert!(!realm_allowed(
            tls,
            "https://reg.example:8443/service/token"
        ));
        assert!(!realm_allowed(tls, "https://reg.example.evil/token"));
        assert!(!realm_allowed(tls, "https://user@reg.example/token"));
        assert!(!realm_allowed(tls, "http://127.0.0.1:8080/token"));
        assert!(!realm_allowed(tls, "http://reg.example:5000/token"));
        let plain = "http://127.0.0.1:5000";
        assert!(realm_allowed(plain, "http://127.0.0.1:5000/token"));
        assert!(!realm_allowed(plain, "http://127.0.0.1:5001/token"));
        assert!(!realm_allowed(plain, "http://localhost:5000/token"));
        assert!(!realm_allowed(plain, "https://auth.example/token"));
        assert!(!realm_allowed(plain, "https://127.0.0.1:5000/token"));
        assert!(!realm_allowed(tls, "ftp://x/token"));
        assert!(!realm_allowed(tls, "not a url"));
    }

    #[test]
    fn deadlines_scale_with_size() {
        let d = super::Deadlines::default();
        assert_eq!(d.for_size(0), d.base);
        assert_eq!(
            d.for_size(d.min_rate * 100),
            d.base + std::time::Duration::from_secs(100)
        );
    }

    #[test]
    fn parses_bearer_challenges() {
        let p = super::parse_challenge(
            r#"Bearer realm="https://h/service/token",service="harbor-registry",scope="repository:a:pull""#,
        );
        assert_eq!(p["realm"], "https://h/service/token");
        assert_eq!(p["service"], "harbor-registry");
        assert_eq!(p["scope"], "repository:a:pull");
        let q =
            super::parse_challenge(r#"Bearer realm="r",scope="repository:x:pull,push",service=s"#);
        assert_eq!(
            (q["scope"].as_str(), q["service"].as_str()),
            ("repository:x:pull,push", "s")
        );
    }
}
