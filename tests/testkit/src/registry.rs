//! [`Registry`]: Debian's `docker-registry` (CNCF distribution 2.8) as a child process.

use std::fmt::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::tools::{self, run_or_panic};

/// The Debian binary (package `docker-registry`).
const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
/// How long [`Registry::start`] and [`Registry::restart`] wait for `GET /v2/` to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a log sync waits for the sentinel request's access-log line.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);
/// Fresh ports tried when the probed one was taken in the meantime.
const PORT_ATTEMPTS: usize = 5;
/// Lines of the registry log quoted in panic messages.
const LOG_TAIL_LINES: usize = 60;
/// Path prefix of the sentinel requests that order the access log; never counted.
const SYNC_PREFIX: &str = "/kubexm-testkit-sync/";

/// A certificate and key (PEM) the registry serves TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate (chain).
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// Makes a self-signed P-256 certificate for `127.0.0.1` (CN and IP SAN), valid for a day,
    /// with `openssl req`, as `dir/registry.crt` and `dir/registry.key`.
    ///
    /// # Panics
    /// If `openssl` fails.
    #[must_use]
    pub fn self_signed(dir: &Path) -> TlsFiles {
        let files = TlsFiles {
            cert: dir.join("registry.crt"),
            key: dir.join("registry.key"),
        };
        run_or_panic(
            Command::new("openssl")
                .args(["req", "-x509", "-newkey", "ec"])
                .args(["-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
                .args(["-days", "1", "-subj", "/CN=127.0.0.1"])
                .args(["-addext", "subjectAltName=IP:127.0.0.1"])
                .arg("-keyout")
                .arg(&files.key)
                .arg("-out")
                .arg(&files.cert),
            "creating a self-signed certificate for the registry",
        );
        files
    }

    /// A test CA (`dir/ca.crt`) and a server certificate for 127.0.0.1 signed by it
    /// (`dir/registry.crt`, `dir/registry.key`), made with `openssl`. Returns the files and the
    /// CA certificate's path: what a client is told to trust.
    ///
    /// # Panics
    /// If `openssl` fails.
    #[must_use]
    pub fn signed_by_test_ca(dir: &Path) -> (TlsFiles, PathBuf) {
        let ca_key = dir.join("ca.key");
        let ca = dir.join("ca.crt");
        let files = TlsFiles {
            cert: dir.join("registry.crt"),
            key: dir.join("registry.key"),
        };
        let csr = dir.join("registry.csr");
        let ext = dir.join("registry.ext");
        fs_err::write(
            &ext,
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
        )
        .expect("write the certificate extensions file");
        run_or_panic(
            Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                ])
                .args(["-days", "1", "-subj", "/CN=KubeXM test CA"])
                .args([
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ])
                .arg("-keyout")
                .arg(&ca_key)
                .arg("-out")
                .arg(&ca),
            "creating the test CA",
        );
        run_or_panic(
            Command::new("openssl")
                .args([
                    "req",
                    "-new",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-nodes",
                ])
                .args(["-subj", "/CN=127.0.0.1"])
                .arg("-keyout")
                .arg(&files.key)
                .arg("-out")
                .arg(&csr),
            "creating the registry's certificate request",
        );
        run_or_panic(
            Command::new("openssl")
                .args(["x509", "-req", "-days", "1", "-CAcreateserial"])
                .arg("-in")
                .arg(&csr)
                .arg("-CA")
                .arg(&ca)
                .arg("-CAkey")
                .arg(&ca_key)
                .arg("-extfile")
                .arg(&ext)
                .arg("-out")
                .arg(&files.cert),
            "signing the registry's certificate with the test CA",
        );
        (files, ca)
    }
}

/// How to run the [`Registry`].
///
/// Build it with a struct literal (`RegistryOptions { basic_auth: Some(..), ..Default::default() }`)
/// or the `with_*` methods.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryOptions {
    /// Require HTTP basic auth with this user and password (htpasswd, bcrypt).
    pub basic_auth: Option<(String, String)>,
    /// Serve HTTPS with these files instead of plain HTTP.
    pub tls: Option<TlsFiles>,
}

impl RegistryOptions {
    /// Options requiring basic auth with `user` / `pass`.
    #[must_use]
    pub fn with_basic_auth(mut self, user: &str, pass: &str) -> Self {
        self.basic_auth = Some((user.to_owned(), pass.to_owned()));
        self
    }

    /// Options serving HTTPS with `tls`.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsFiles) -> Self {
        self.tls = Some(tls);
        self
    }
}

impl fmt::Debug for RegistryOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryOptions")
            .field(
                "basic_auth",
                &self.basic_auth.as_ref().map(|(user, _)| (user, "***")),
            )
            .field("tls", &self.tls)
            .finish()
    }
}

/// One line of the registry's access log (Apache combined format), e.g.
/// `127.0.0.1 - - [21/Nov/2026:08:13:14 +0000] "HEAD /v2/a/blobs/sha256:... HTTP/1.1" 404 157 "" "skopeo/1.9.3"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogEntry {
    /// `GET`, `HEAD`, `PUT`, ...
    pub method: String,
    /// Request URI, query included.
    pub uri: String,
    /// Response status code.
    pub status: u16,
}

impl AccessLogEntry {
    /// Parses one combined-log line; `None` for any other line (the registry's own
    /// `time=... level=...` lines share the log file).
    #[must_use]
    pub fn parse(line: &str) -> Option<AccessLogEntry> {
        let (_, rest) = line.split_once("] \"")?;
        let (request, rest) = rest.split_once('"')?;
        let mut request = request.split(' ');
        let method = request.next()?.to_owned();
        let uri = request.next()?.to_owned();
        let status = rest.split_whitespace().next()?.parse().ok()?;
        Some(AccessLogEntry {
            method,
            uri,
            status,
        })
    }
}

/// A real `docker-registry serve` on `127.0.0.1:<free port>` with its own temporary
/// config, htpasswd, storage and log (stdout and stderr, appended across restarts).
///
/// Deletes are enabled. It answers `GET /v2/` when [`Registry::start`] returns; `Drop`
/// kills the process and removes the temporary directory.
#[derive(Debug)]
pub struct Registry {
    dir: tempfile::TempDir,
    port: u16,
    options: RegistryOptions,
    child: Option<Child>,
    sync_seq: AtomicU64,
}

/// Why a start attempt did not reach readiness.
enum StartFailure {
    AddressInUse,
    Other(String),
}

impl Registry {
    /// Starts a registry and waits (up to 20 s) until `GET /v2/` answers 200 or 401.
    ///
    /// # Panics
    /// If the binary is missing, or the registry exits or does not answer in time; the
    /// message quotes the end of the registry's log.
    #[must_use]
    pub fn start(options: RegistryOptions) -> Registry {
        tools::require_file(Path::new(REGISTRY_BIN), "docker-registry");
        let dir = tempfile::Builder::new()
            .prefix("kubexm-registry-")
            .tempdir()
            .expect("create the registry's temporary directory");
        fs_err::create_dir(dir.path().join("storage")).expect("create the registry storage dir");
        if let Some((user, pass)) = &options.basic_auth {
            fs_err::write(
                dir.path().join("htpasswd"),
                tools::htpasswd_line(user, pass),
            )
            .expect("write the registry htpasswd");
        }
        let mut registry = Registry {
            dir,
            port: 0,
            options,
            child: None,
            sync_seq: AtomicU64::new(0),
        };
        for _ in 0..PORT_ATTEMPTS {
            registry.port = crate::free_port();
            registry.write_config();
            match registry.spawn_and_wait() {
                Ok(()) => return registry,
                Err(StartFailure::AddressInUse) => registry.stop(),
                Err(StartFailure::Other(why)) => registry.fail(&why),
            }
        }
        registry.fail(&format!(
            "every one of {PORT_ATTEMPTS} probed ports was taken before the registry bound it"
        ))
    }

    /// `127.0.0.1:PORT`, as used in image references.
    #[must_use]
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port it listens on (kept across [`restart`](Self::restart)).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`, or `https://` with TLS.
    #[must_use]
    pub fn url(&self) -> String {
        let scheme = if self.options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.host())
    }

    /// `docker://127.0.0.1:PORT/REPO:TAG`, a skopeo reference.
    #[must_use]
    pub fn docker_ref(&self, repo_tag: &str) -> String {
        format!("docker://{}/{repo_tag}", self.host())
    }

    /// The basic-auth user and password it was started with.
    #[must_use]
    pub fn creds(&self) -> Option<(&str, &str)> {
        self.options
            .basic_auth
            .as_ref()
            .map(|(user, pass)| (user.as_str(), pass.as_str()))
    }

    /// The options it was started with.
    #[must_use]
    pub fn options(&self) -> &RegistryOptions {
        &self.options
    }

    /// The filesystem storage root (kept across restarts).
    #[must_use]
    pub fn storage_dir(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// The generated `config.yml`.
    #[must_use]
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.yml")
    }

    /// The captured stdout and stderr of every run.
    #[must_use]
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("registry.log")
    }

    /// The whole captured log (empty if unreadable).
    #[must_use]
    pub fn log_text(&self) -> String {
        fs_err::read(self.log_path())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// The process id while it runs.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Every access-log line so far, without the kit's own sentinel requests.
    ///
    /// Lines are written just after the response; call [`sync_access_log`](Self::sync_access_log)
    /// first (as [`count_requests`](Self::count_requests) does) to be sure earlier requests are in.
    #[must_use]
    pub fn access_log(&self) -> Vec<AccessLogEntry> {
        self.log_text()
            .lines()
            .filter_map(AccessLogEntry::parse)
            .filter(|entry| !entry.uri.starts_with(SYNC_PREFIX))
            .collect()
    }

    /// Requests with this method whose URI contains `path_substring`, counted from the access
    /// log after a [`sync_access_log`](Self::sync_access_log). Counts survive restarts.
    ///
    /// # Panics
    /// If the registry is not running (see [`sync_access_log`](Self::sync_access_log)).
    #[must_use]
    pub fn count_requests(&self, method: &str, path_substring: &str) -> usize {
        self.sync_access_log();
        self.access_log()
            .iter()
            .filter(|e| e.method.eq_ignore_ascii_case(method) && e.uri.contains(path_substring))
            .count()
    }

    /// Makes sure every request that completed before this call is in the access log: sends
    /// a sentinel `GET /kubexm-testkit-sync/N` (a 404, never counted) and waits for its line.
    ///
    /// # Panics
    /// If the registry is not running or the line does not show up within 10 s.
    pub fn sync_access_log(&self) {
        let n = self.sync_seq.fetch_add(1, Ordering::SeqCst);
        let path = format!("{SYNC_PREFIX}{n}");
        if let Err(why) = self.probe(&path) {
            self.fail(&format!("access-log sync request {path} failed: {why}"));
        }
        let needle = format!("\"GET {path} ");
        if !crate::wait_until(SYNC_TIMEOUT, || self.log_text().contains(&needle)) {
            self.fail(&format!(
                "access-log line for {path} did not appear within {SYNC_TIMEOUT:?}"
            ));
        }
    }

    /// Kills the registry (SIGKILL, like a crash) and reaps it; the port and storage stay
    /// reserved for [`restart`](Self::restart). Does nothing if it is not running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it if running, then starts it again on the same port with the same storage,
    /// and waits until it answers.
    ///
    /// # Panics
    /// If it does not come back within 20 s (the message quotes the log).
    pub fn restart(&mut self) {
        self.stop();
        match self.spawn_and_wait() {
            Ok(()) => {}
            Err(StartFailure::AddressInUse) => self.fail(&format!(
                "port {} was taken by another process while the registry was stopped",
                self.port
            )),
            Err(StartFailure::Other(why)) => self.fail(&why),
        }
    }

    fn write_config(&self) {
        let quote = |path: &Path| {
            // A JSON string is a valid YAML double-quoted scalar.
            serde_json::to_string(&path.to_string_lossy()).expect("serialize a path as a string")
        };
        let mut config = format!(
            "version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
  secret: kubexm-testkit-not-a-secret
",
            storage = quote(&self.storage_dir()),
            port = self.port,
        );
        if let Some(tls) = &self.options.tls {
            let _ = write!(
                config,
                "  tls:\n    certificate: {}\n    key: {}\n",
                quote(&tls.cert),
                quote(&tls.key)
            );
        }
        if self.options.basic_auth.is_some() {
            let _ = write!(
                config,
                "auth:\n  htpasswd:\n    realm: kubexm-testkit\n    path: {}\n",
                quote(&self.dir.path().join("htpasswd"))
            );
        }
        fs_err::write(self.config_path(), config).expect("write the registry config.yml");
    }

    fn spawn_and_wait(&mut self) -> Result<(), StartFailure> {
        let log = fs_err::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open the registry log file");
        let log_err = log
            .file()
            .try_clone()
            .expect("clone the registry log handle");
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(log.into_parts().0)
            .stderr(log_err)
            .spawn()
            .map_err(|err| StartFailure::Other(format!("spawning {REGISTRY_BIN}: {err}")))?;
        self.child = Some(child);

        let mut exited = None;
        let ready = crate::wait_until(READY_TIMEOUT, || {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    exited = Some(status);
                    return true;
                }
            }
            matches!(self.probe("/v2/"), Ok(200 | 401))
        });
        if let Some(status) = exited {
            self.child = None;
            return Err(if self.log_text().contains("address already in use") {
                StartFailure::AddressInUse
            } else {
                StartFailure::Other(format!("docker-registry exited early with {status}"))
            });
        }
        if ready {
            Ok(())
        } else {
            Err(StartFailure::Other(format!(
                "GET {}/v2/ did not answer 200 or 401 within {READY_TIMEOUT:?}",
                self.url()
            )))
        }
    }

    /// Status of an unauthenticated `GET path`.
    fn probe(&self, path: &str) -> Result<u16, String> {
        if self.options.tls.is_none() {
            return tools::http_status(&format!("{}{path}", self.url()), None)
                .map_err(|err| err.to_string());
        }
        // Quick refusal check before paying for a curl process.
        TcpStream::connect_timeout(
            &SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port).into(),
            Duration::from_secs(1),
        )
        .map_err(|err| err.to_string())?;
        let out = tools::run(
            Command::new("curl")
                .args(["--silent", "--insecure", "--max-time", "10"])
                .args(["--output", "/dev/null", "--write-out", "%{http_code}"])
                .arg(format!("{}{path}", self.url())),
        )
        .map_err(|err| err.to_string())?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|err| format!("curl printed no status code: {err}"))
    }

    /// Panics with `why` and the end of the registry log.
    fn fail(&self, why: &str) -> ! {
        let log = self.log_text();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        panic!(
            "docker-registry on {}: {why}\nconfig: {}\n--- last {LOG_TAIL_LINES} lines of {} ---\n{tail}",
            self.host(),
            self.config_path().display(),
            self.log_path().display()
        );
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_combined_log_lines() {
        let line = r#"127.0.0.1 - - [21/Nov/2026:08:13:14 +0000] "HEAD /v2/test/bb/blobs/sha256:b5 HTTP/1.1" 404 157 "" "skopeo/1.9.3""#;
        assert_eq!(
            AccessLogEntry::parse(line),
            Some(AccessLogEntry {
                method: "HEAD".into(),
                uri: "/v2/test/bb/blobs/sha256:b5".into(),
                status: 404,
            })
        );
        let app_line =
            r#"time="2026-11-21T08:13:14Z" level=info msg="listening on 127.0.0.1:45123""#;
        assert_eq!(AccessLogEntry::parse(app_line), None);
    }

    #[test]
    fn options_debug_redacts_the_password() {
        let options = RegistryOptions::default().with_basic_auth("alice", "s3cret");
        let shown = format!("{options:?}");
        assert!(shown.contains("alice"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
