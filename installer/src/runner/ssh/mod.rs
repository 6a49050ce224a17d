//! The SSH runner: one multiplexed SSH connection per node for the whole run (russh).
//!
//! Every [`Exec`] and [`Upload`] opens a new session channel on the node's single connection,
//! so concurrent calls from several tasks share it (at most [`SshOptions::max_channels`] channels
//! at once: OpenSSH's `MaxSessions` defaults to 10). Scripts run through the same shell text as
//! the local runner ([`shell`]): `timeout -k 5 N sh -c SCRIPT`, wrapped in `sudo` for a non-root
//! login.
//!
//! # Reconnecting
//! When the connection turns out to be dead, the runner reconnects **once** per operation and:
//! - for an [`Exec`], retries it only if the remote command had not been started (opening the
//!   channel or sending the `exec` request failed). A command that may have run is never run a
//!   second time; that is [`RunError::Connection`] (scripts are not assumed idempotent);
//! - for an [`Upload`], retries it as a whole even if the transfer was under way: the node writes
//!   to `DEST.kubexm-part` and renames only after checking the sha256, so repeating it is safe.
//!
//! If the reconnect fails too, the result is [`RunError::Connection`] naming the node. Several
//! tasks that see the same dead connection share one reconnect.
//!
//! # Host keys
//! Checked against an OpenSSH `known_hosts` file (plain and `[host]:port` names, wildcards,
//! hashed names, `@revoked`): an unknown key is refused unless
//! [`SshOptions::accept_new_host_keys`] (then it is recorded, atomically, mode 0600), a changed
//! or revoked key is always refused. Only the key types recorded for the host are offered in the
//! key exchange, as OpenSSH does, so a server switching key type counts as changed.
//!
//! # sudo
//! For a non-root login with a password, `sudo -S` is asked to print a recognisable prompt
//! ([`shell::with_sudo_prompt`]); the runner answers it with the password and sends the script's
//! stdin only after sudo has let the command start. The password never appears on a command line,
//! in logs, in errors or in the captured output. A second prompt (wrong password) ends in
//! [`RunError::Auth`]. Without a password, `sudo -n` is used.
//!
//! # Timeouts
//! The node enforces [`Exec::timeout`] (`timeout -k 5`, which kills the process group); exit 124
//! or 137 is [`RunError::Timeout`]. Ten seconds later the runner also closes the channel itself.
//!
//! # russh caveat
//! russh holds back every outgoing message of a connection while one channel has data waiting
//! for window, and never drops that data when the channel closes. So whenever stdin is sent the
//! node reads all of it ([`shell::drain_stdin_after`]); otherwise a script that ignores its stdin
//! would freeze the whole connection. With stdin, a script killed by a signal N exits 128+N.

pub mod known_hosts;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use russh::client::{self, Handle, Msg};
use russh::keys::{Algorithm, HashAlg, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, ChannelWriteHalf};
use tokio::io::AsyncReadExt as _;
use tokio::sync::{oneshot, Semaphore};

pub use kubexm_manifests::secret::Secret;

use super::{shell, Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome, UploadSource};

/// How to reach and log in to one node.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// Node name (used in every error and log line).
    pub node: String,
    /// Address (IP or DNS name) as written in the `known_hosts` file.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Login user.
    pub user: String,
    /// Private key (OpenSSH format, ed25519 or RSA, not passphrase-protected).
    pub private_key: Option<PathBuf>,
    /// Login password, also given to `sudo` for a non-root user.
    pub password: Option<Secret>,
    /// The OpenSSH `known_hosts` file host keys are checked against.
    pub known_hosts: PathBuf,
    /// Record unknown host keys instead of refusing them (changed keys are always refused).
    pub accept_new_host_keys: bool,
    /// Limit for TCP connect, key exchange and authentication.
    pub connect_timeout: Duration,
    /// Keepalive interval; the connection is declared dead after 3 unanswered keepalives.
    pub keepalive_interval: Duration,
    /// Most channels open at once on the connection (sshd's `MaxSessions`, default 10).
    pub max_channels: usize,
}

impl SshOptions {
    /// Options with defaults: port 22, no key or password, unknown host keys refused, 15 s
    /// connect timeout, 15 s keepalive, 8 channels.
    pub fn new(
        node: impl Into<String>,
        host: impl Into<String>,
        user: impl Into<String>,
        known_hosts: impl Into<PathBuf>,
    ) -> Self {
        Self {
            node: node.into(),
            host: host.into(),
            port: 22,
            user: user.into(),
            private_key: None,
            password: None,
            known_hosts: known_hosts.into(),
            accept_new_host_keys: false,
            connect_timeout: Duration::from_secs(15),
            keepalive_interval: Duration::from_secs(15),
            max_channels: 8,
        }
    }
}

/// Outcome of the host-key check, kept so a refused connection can say why.
struct HostKeyCheck {
    opts: Arc<SshOptions>,
    rejection: Mutex<Option<String>>,
}

impl HostKeyCheck {
    fn reject(&self, message: String) -> bool {
        tracing::error!(node = %self.opts.node, "{message}");
        if let Ok(mut slot) = self.rejection.lock() {
            *slot = Some(message);
        }
        false
    }

    fn rejection(&self) -> Option<String> {
        self.rejection.lock().ok().and_then(|slot| slot.clone())
    }

    fn verify(&self, presented: &PublicKeyOrCertificate) -> bool {
        let o = &self.opts;
        let file = o.known_hosts.display();
        let name = known_hosts::host_pattern(&o.host, o.port);
        let key = match presented {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            PublicKeyOrCertificate::Certificate(_) => {
                return self.reject(format!(
                "{name} presented a host certificate; only plain host keys in {file} are supported"
            ))
            }
        };
        let what = format!(
            "{} {}",
            key.algorithm().as_str(),
            key.fingerprint(HashAlg::Sha256)
        );
        match known_hosts::check(&o.known_hosts, &o.host, o.port, key) {
            Err(e) => self.reject(format!("cannot read known_hosts file {file}: {e}")),
            Ok(known_hosts::Verdict::Known) => true,
            Ok(known_hosts::Verdict::Changed { line, recorded }) => self.reject(format!(
                "HOST KEY CHANGED for {name}: the server presents {what} but {file} line {line} \
                 records a different {recorded} key. Refusing to connect (this could be a \
                 man-in-the-middle attack). If the host was reinstalled, check the new key and \
                 replace line {line} of {file}"
            )),
            Ok(known_hosts::Verdict::Revoked { line }) => self.reject(format!(
                "the host key of {name} ({what}) is marked @revoked in {file} line {line}; refusing to connect"
            )),
            Ok(known_hosts::Verdict::Unknown) if o.accept_new_host_keys => {
                match known_hosts::learn(&o.known_hosts, &o.host, o.port, key) {
                    Ok(()) => {
                        tracing::warn!(node = %o.node, "new host key of {name} ({what}) recorded in {file}");
                        true
                    }
                    Err(e) => self.reject(format!(
                        "cannot record the new host key of {name} in {file}: {e}"
                    )),
                }
            }
            Ok(known_hosts::Verdict::Unknown) => self.reject(format!(
                "the host key of {name} ({what}) is not in {file}. Check the fingerprint and add it \
                 (e.g. `ssh-keyscan -p {port} {host} >> {file}`), or pass --accept-new-host-keys \
                 to record it on first connection",
                port = o.port,
                host = o.host
            )),
        }
    }
}

/// russh callbacks: only the host-key check.
struct Client {
    check: Arc<HostKeyCheck>,
}

impl client::Handler for Client {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_public_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(self.check.verify(server_public_key))
    }
}

/// One live connection; `generation` tells reconnects apart.
struct Connection {
    handle: Handle<Client>,
    generation: u64,
}

/// Why an operation failed on a connection.
enum Failure {
    /// The connection is dead and the command was not started: safe to retry.
    NotStarted(String),
    /// The connection died while the command may have been running.
    Lost(String),
    /// Anything else (final).
    Failed(RunError),
}

/// Bytes for a command's stdin.
enum Input<'a> {
    Empty,
    Bytes(&'a [u8]),
    File(&'a Path),
}

/// One command to run on a channel.
struct Job<'a> {
    command: String,
    /// Answer `sudo`'s prompt with this password, and wait for [`shell::SUDO_READY`].
    sudo_password: Option<&'a Secret>,
    input: Input<'a>,
    timeout: Duration,
    summary: &'a str,
}

/// What a channel produced.
struct Raw {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    sent: u64,
}

/// Size of the reads from a file being uploaded.
const UPLOAD_CHUNK: usize = 256 * 1024;
/// Extra time after an exec's timeout before the runner closes the channel itself.
const BACKSTOP: Duration = Duration::from_secs(10);

/// Runs steps on a remote node over one SSH connection.
pub struct SshRunner {
    opts: Arc<SshOptions>,
    current: tokio::sync::Mutex<Arc<Connection>>,
    channels: Semaphore,
    connects: AtomicU64,
}

impl fmt::Debug for SshRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshRunner")
            .field("opts", &self.opts)
            .field("connects", &self.connects.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SshRunner {
    /// Connects, checks the host key and logs in.
    ///
    /// # Errors
    /// [`RunError::HostKey`] for an unknown (not accepted), changed or revoked host key,
    /// [`RunError::Auth`] when the key and password are refused, [`RunError::Connection`] when
    /// the node cannot be reached within [`SshOptions::connect_timeout`].
    pub async fn connect(opts: SshOptions) -> Result<SshRunner, RunError> {
        let opts = Arc::new(opts);
        let handle = connect_once(&opts).await?;
        Ok(SshRunner {
            channels: Semaphore::new(opts.max_channels.max(1)),
            opts,
            current: tokio::sync::Mutex::new(Arc::new(Connection {
                handle,
                generation: 0,
            })),
            connects: AtomicU64::new(1),
        })
    }

    /// How many SSH connections this runner has made (1 plus reconnects).
    pub fn connections(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    /// Closes the connection politely (dropping the runner closes it too).
    pub async fn close(&self) {
        let conn = self.current.lock().await.clone();
        let _ = conn
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }

    async fn connection(&self) -> Arc<Connection> {
        self.current.lock().await.clone()
    }

    /// Replaces the dead connection `dead` (unless another task already did).
    async fn reconnect(&self, dead: &Connection, why: &str) -> Result<Arc<Connection>, RunError> {
        let mut current = self.current.lock().await;
        if current.generation != dead.generation {
            return Ok(current.clone());
        }
        tracing::warn!(node = %self.opts.node, "SSH connection lost ({why}); reconnecting");
        match connect_once(&self.opts).await {
            Ok(handle) => {
                self.connects.fetch_add(1, Ordering::Relaxed);
                *current = Arc::new(Connection {
                    handle,
                    generation: dead.generation + 1,
                });
                Ok(current.clone())
            }
            Err(RunError::Connection { message, .. }) => Err(RunError::Connection {
                node: self.opts.node.clone(),
                message: format!("connection lost ({why}) and reconnecting failed: {message}"),
            }),
            Err(other) => Err(other),
        }
    }

    fn connection_error(&self, message: String) -> RunError {
        RunError::Connection {
            node: self.opts.node.clone(),
            message,
        }
    }

    fn final_error(&self, failure: Failure) -> RunError {
        match failure {
            Failure::NotStarted(m) => self.connection_error(m),
            Failure::Lost(m) => {
                self.connection_error(format!("{m}; not retried because the command may have run"))
            }
            Failure::Failed(e) => self.fill_node(e),
        }
    }

    /// The remote command line for `script` and, when sudo's prompt must be answered, the
    /// password. With stdin to send, the line drains stdin after the script
    /// ([`shell::drain_stdin_after`]): russh stalls the whole connection when a channel closes
    /// with unsent, window-blocked data, so the node must always read all of it.
    fn command_line(
        &self,
        script: &str,
        sudo: bool,
        timeout: Duration,
        has_stdin: bool,
    ) -> (String, Option<&Secret>) {
        let line = shell::with_timeout(script, timeout);
        let (line, password) = if !sudo || self.opts.user == "root" {
            (line, None)
        } else {
            match &self.opts.password {
                Some(password) => (shell::with_sudo_prompt(&line), Some(password)),
                None => (shell::with_sudo_nopasswd(&line), None),
            }
        };
        if has_stdin {
            (shell::drain_stdin_after(&line), password)
        } else {
            (line, password)
        }
    }

    fn timed_out(&self, after: Duration, summary: &str) -> RunError {
        RunError::Timeout {
            node: self.opts.node.clone(),
            after,
            summary: summary.to_string(),
        }
    }

    /// Runs `job` on one channel of `conn`.
    async fn run(&self, conn: &Connection, job: &Job<'_>) -> Result<Raw, Failure> {
        let _permit = self
            .channels
            .acquire()
            .await
            .map_err(|_| Failure::Failed(self.connection_error("runner closed".into())))?;
        let channel = match conn.handle.channel_open_session().await {
            Ok(channel) => channel,
            Err(e) => {
                return Err(if conn.handle.is_closed() || is_disconnect(&e) {
                    Failure::NotStarted(format!("cannot open a channel: {e}"))
                } else {
                    Failure::Failed(self.connection_error(format!("cannot open a channel: {e}")))
                })
            }
        };
        if let Err(e) = channel.exec(true, job.command.as_bytes()).await {
            return Err(Failure::NotStarted(format!(
                "cannot start the command: {e}"
            )));
        }
        let (mut read, write) = channel.split();
        let backstop = job.timeout + BACKSTOP;
        let outcome = tokio::time::timeout(backstop, self.drive(&mut read, &write, job)).await;
        match outcome {
            Ok(result) => result,
            Err(_) => {
                let _ = write.close().await;
                Err(Failure::Failed(self.timed_out(job.timeout, job.summary)))
            }
        }
    }

    /// Feeds stdin and collects output until the channel closes.
    async fn drive(
        &self,
        read: &mut russh::ChannelReadHalf,
        write: &ChannelWriteHalf<Msg>,
        job: &Job<'_>,
    ) -> Result<Raw, Failure> {
        let (ready_tx, ready_rx) = oneshot::channel::<()>();
        let mut ready_tx = Some(ready_tx);
        let wait_ready = job.sudo_password.is_some();
        let writer = async {
            if wait_ready && ready_rx.await.is_err() {
                return Ok(0);
            }
            let sent = send_input(write, &job.input).await?;
            let _ = write.eof().await;
            Ok::<u64, WriteError>(sent)
        };
        tokio::pin!(writer);

        let mut raw = Raw {
            code: None,
            stdout: Vec::new(),
            stderr: Vec::new(),
            sent: 0,
        };
        let mut exited = false;
        let mut refused = false;
        let mut sudo = job.sudo_password.map(|password| SudoState {
            password,
            pending: Vec::new(),
            prompts: 0,
            ready: false,
        });
        let mut writer_done = false;
        loop {
            tokio::select! {
                msg = read.wait() => {
                    let Some(msg) = msg else { break };
                    match msg {
                        ChannelMsg::Data { data } => raw.stdout.extend_from_slice(&data),
                        ChannelMsg::ExtendedData { data, ext: 1 } => match sudo.as_mut() {
                            Some(state) if !state.ready => {
                                if state.feed(&data, write, &mut raw.stderr).await {
                                    if let Some(tx) = ready_tx.take() {
                                        let _ = tx.send(());
                                    }
                                }
                            }
                            _ => raw.stderr.extend_from_slice(&data),
                        },
                        ChannelMsg::ExitStatus { exit_status } => {
                            raw.code = i32::try_from(exit_status).ok();
                            exited = true;
                        }
                        ChannelMsg::ExitSignal { .. } => exited = true,
                        ChannelMsg::Failure => refused = true,
                        _ => {}
                    }
                }
                sent = &mut writer, if !writer_done => {
                    writer_done = true;
                    match sent {
                        Ok(n) => raw.sent = n,
                        Err(WriteError::Local(e)) => {
                            let _ = write.close().await;
                            return Err(Failure::Failed(e));
                        }
                        // The channel went away; the reader tells why.
                        Err(WriteError::Channel) => {}
                    }
                }
            }
        }
        if let Some(state) = &sudo {
            if state.prompts > 1 {
                return Err(Failure::Failed(RunError::Auth {
                    node: self.opts.node.clone(),
                    user: self.opts.user.clone(),
                    message: "sudo did not accept the password".into(),
                }));
            }
            if !state.ready {
                // sudo refused before running the command: show what it said.
                raw.stderr.splice(0..0, state.pending.iter().copied());
            }
        }
        if refused && !exited {
            return Err(Failure::Failed(self.connection_error(format!(
                "the server refused to run `{}`",
                job.summary
            ))));
        }
        if !exited {
            return Err(Failure::Lost(format!(
                "connection lost while running `{}`",
                job.summary
            )));
        }
        Ok(raw)
    }

    async fn exec_on(&self, conn: &Connection, exec: &Exec) -> Result<ExecOutput, Failure> {
        let (command, sudo_password) =
            self.command_line(&exec.script, exec.sudo, exec.timeout, exec.stdin.is_some());
        let summary = super::summary(&exec.script);
        let job = Job {
            command,
            sudo_password,
            input: exec.stdin.as_deref().map_or(Input::Empty, Input::Bytes),
            timeout: exec.timeout,
            summary: &summary,
        };
        let raw = self.run(conn, &job).await?;
        if matches!(raw.code, Some(124) | Some(137)) {
            return Err(Failure::Failed(self.timed_out(exec.timeout, &summary)));
        }
        Ok(ExecOutput {
            code: raw.code,
            stdout: String::from_utf8_lossy(&raw.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&raw.stderr).into_owned(),
        })
    }

    async fn upload_on(
        &self,
        conn: &Connection,
        upload: &Upload,
    ) -> Result<UploadOutcome, Failure> {
        // The size first: a node copy of another size is replaced without hashing it. A local
        // file that cannot be read is still skipped when the node has the content already.
        let size = match &upload.source {
            UploadSource::Bytes(b) => Ok(b.len() as u64),
            UploadSource::File(p) => tokio::fs::metadata(p)
                .await
                .map(|m| m.len())
                .map_err(|e| self.io(&format!("reading {}", p.display()), e)),
        };
        let check = Exec {
            script: match &size {
                Ok(size) => shell::remote_sha256_of_size(&upload.dest, *size),
                Err(_) => shell::remote_sha256(&upload.dest),
            },
            sudo: upload.sudo,
            stdin: None,
            timeout: Duration::from_secs(120),
        };
        let current = self.exec_on(conn, &check).await?;
        if current.success() && current.stdout.trim() == upload.sha256 {
            return Ok(UploadOutcome::Skipped);
        }
        let len = size.map_err(Failure::Failed)?;
        let input = match &upload.source {
            UploadSource::Bytes(b) => Input::Bytes(b),
            UploadSource::File(p) => Input::File(p),
        };
        // Ten minutes, plus a second per MiB for slow links.
        let timeout = Duration::from_secs(600 + len / (1 << 20));
        let script = shell::receive_file(&upload.dest, &upload.sha256, upload.mode);
        let (command, sudo_password) = self.command_line(&script, upload.sudo, timeout, true);
        let summary = format!("upload {}", upload.dest);
        let job = Job {
            command,
            sudo_password,
            input,
            timeout,
            summary: &summary,
        };
        let raw = self.run(conn, &job).await?;
        let stderr = String::from_utf8_lossy(&raw.stderr).trim().to_string();
        match raw.code {
            Some(0) => Ok(UploadOutcome::Uploaded(raw.sent)),
            Some(124) | Some(137) => Err(Failure::Failed(self.timed_out(timeout, &summary))),
            code => Err(Failure::Failed(RunError::Upload {
                node: self.opts.node.clone(),
                dest: upload.dest.clone(),
                message: if code == Some(shell::UPLOAD_MISMATCH) {
                    stderr
                } else {
                    format!("receiving script exited with {code:?}: {stderr}")
                },
            })),
        }
    }

    fn io(&self, context: &str, source: std::io::Error) -> RunError {
        RunError::Io {
            node: self.opts.node.clone(),
            context: context.to_string(),
            source,
        }
    }
}

fn is_disconnect(e: &russh::Error) -> bool {
    matches!(e, russh::Error::Disconnect | russh::Error::SendError)
}

/// A failed write of stdin.
enum WriteError {
    /// Reading the local source failed.
    Local(RunError),
    /// The channel is gone.
    Channel,
}

async fn send_input(write: &ChannelWriteHalf<Msg>, input: &Input<'_>) -> Result<u64, WriteError> {
    match input {
        Input::Empty => Ok(0),
        Input::Bytes(bytes) => {
            write
                .data_bytes(Bytes::copy_from_slice(bytes))
                .await
                .map_err(|_| WriteError::Channel)?;
            Ok(bytes.len() as u64)
        }
        Input::File(path) => {
            let local = |e: std::io::Error| {
                WriteError::Local(RunError::Io {
                    node: String::new(),
                    context: format!("reading {}", path.display()),
                    source: e,
                })
            };
            let mut file = tokio::fs::File::open(path).await.map_err(local)?;
            let mut sent = 0u64;
            loop {
                let mut buf = BytesMut::with_capacity(UPLOAD_CHUNK);
                while buf.len() < UPLOAD_CHUNK {
                    if file.read_buf(&mut buf).await.map_err(local)? == 0 {
                        break;
                    }
                }
                if buf.is_empty() {
                    return Ok(sent);
                }
                sent += buf.len() as u64;
                write
                    .data_bytes(buf.freeze())
                    .await
                    .map_err(|_| WriteError::Channel)?;
            }
        }
    }
}

/// Watches stderr before the command starts for sudo's prompt and the ready marker.
struct SudoState<'a> {
    password: &'a Secret,
    pending: Vec<u8>,
    prompts: u32,
    ready: bool,
}

impl SudoState<'_> {
    /// Takes stderr bytes; answers prompts; returns true once [`shell::SUDO_READY`] arrived
    /// (what follows it goes to `stderr`).
    async fn feed(
        &mut self,
        data: &[u8],
        write: &ChannelWriteHalf<Msg>,
        stderr: &mut Vec<u8>,
    ) -> bool {
        self.pending.extend_from_slice(data);
        loop {
            if let Some(i) = find(&self.pending, shell::SUDO_PROMPT.as_bytes()) {
                self.pending.drain(i..i + shell::SUDO_PROMPT.len());
                self.prompts += 1;
                if self.prompts == 1 {
                    let mut line = String::with_capacity(self.password.expose().len() + 1);
                    line.push_str(self.password.expose());
                    line.push('\n');
                    let _ = write.data_bytes(Bytes::from(line)).await;
                } else {
                    // Asked again: the password was wrong. End sudo's stdin so it gives up.
                    let _ = write.eof().await;
                }
                continue;
            }
            if let Some(i) = find(&self.pending, shell::SUDO_READY.as_bytes()) {
                stderr.extend_from_slice(&self.pending[i + shell::SUDO_READY.len()..]);
                // Before the marker there is only sudo's own chatter (lecture, "try again").
                self.pending.clear();
                self.ready = true;
                return true;
            }
            return false;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Connects, checks the host key and authenticates, within the connect timeout.
async fn connect_once(opts: &Arc<SshOptions>) -> Result<Handle<Client>, RunError> {
    let node = opts.node.clone();
    match tokio::time::timeout(opts.connect_timeout, connect_and_login(opts)).await {
        Ok(result) => result,
        Err(_) => Err(RunError::Connection {
            node,
            message: format!(
                "no SSH session with {}:{} within {:?}",
                opts.host, opts.port, opts.connect_timeout
            ),
        }),
    }
}

async fn connect_and_login(opts: &Arc<SshOptions>) -> Result<Handle<Client>, RunError> {
    let check = Arc::new(HostKeyCheck {
        opts: opts.clone(),
        rejection: Mutex::new(None),
    });
    let recorded = known_hosts::recorded_algorithms(&opts.known_hosts, &opts.host, opts.port);
    let preferred = russh::Preferred {
        // AES-GCM first: hardware-accelerated on both ends, the fastest for big uploads.
        cipher: std::borrow::Cow::Owned(vec![
            russh::cipher::AES_256_GCM,
            russh::cipher::AES_128_GCM,
            russh::cipher::CHACHA20_POLY1305,
            russh::cipher::AES_256_CTR,
            russh::cipher::AES_128_CTR,
        ]),
        // Ask for the key type we know, as OpenSSH does; any other is then a changed key.
        key: if recorded.is_empty() {
            russh::Preferred::DEFAULT.key
        } else {
            std::borrow::Cow::Owned(recorded)
        },
        ..Default::default()
    };
    let config = client::Config {
        keepalive_interval: Some(opts.keepalive_interval),
        keepalive_max: 3,
        nodelay: true,
        inactivity_timeout: None,
        preferred,
        window_size: 8 * 1024 * 1024,
        ..Default::default()
    };
    let handler = Client {
        check: check.clone(),
    };
    let mut handle = client::connect(Arc::new(config), (opts.host.as_str(), opts.port), handler)
        .await
        .map_err(|e| match check.rejection() {
            Some(message) => RunError::HostKey {
                node: opts.node.clone(),
                message,
            },
            None => RunError::Connection {
                node: opts.node.clone(),
                message: format!("cannot connect to {}:{}: {e}", opts.host, opts.port),
            },
        })?;
    authenticate(&mut handle, opts).await?;
    tracing::debug!(node = %opts.node, host = %opts.host, port = opts.port, user = %opts.user, "SSH connected");
    Ok(handle)
}

async fn authenticate(handle: &mut Handle<Client>, opts: &SshOptions) -> Result<(), RunError> {
    let auth_error = |message: String| RunError::Auth {
        node: opts.node.clone(),
        user: opts.user.clone(),
        message,
    };
    let lost = |e: russh::Error| RunError::Connection {
        node: opts.node.clone(),
        message: format!("connection lost during authentication: {e}"),
    };
    let mut tried = Vec::new();
    if let Some(path) = &opts.private_key {
        let key = russh::keys::load_secret_key(path, None)
            .map_err(|e| auth_error(format!("cannot load private key {}: {e}", path.display())))?;
        let hash = if matches!(key.algorithm(), Algorithm::Rsa { .. }) {
            handle
                .best_supported_rsa_hash()
                .await
                .map_err(lost)?
                .flatten()
        } else {
            None
        };
        let kind = key.algorithm().as_str().to_string();
        let result = handle
            .authenticate_publickey(
                opts.user.clone(),
                PrivateKeyWithHashAlg::new(Arc::new(key), hash),
            )
            .await
            .map_err(lost)?;
        if result.success() {
            return Ok(());
        }
        tried.push(format!("public key {} ({kind})", path.display()));
    }
    if let Some(password) = &opts.password {
        let result = handle
            .authenticate_password(opts.user.clone(), password.expose())
            .await
            .map_err(lost)?;
        if result.success() {
            return Ok(());
        }
        tried.push("password".to_string());
    }
    Err(auth_error(if tried.is_empty() {
        "no private key or password configured".to_string()
    } else {
        format!("the server refused {}", tried.join(" and "))
    }))
}

#[async_trait]
impl Runner for SshRunner {
    fn node(&self) -> &str {
        &self.opts.node
    }

    async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError> {
        let conn = self.connection().await;
        match self.exec_on(&conn, exec).await {
            Ok(out) => Ok(out),
            Err(Failure::NotStarted(why)) => {
                let conn = self.reconnect(&conn, &why).await?;
                self.exec_on(&conn, exec)
                    .await
                    .map_err(|f| self.final_error(f))
            }
            Err(other) => Err(self.final_error(other)),
        }
    }

    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, RunError> {
        let conn = self.connection().await;
        match self.upload_on(&conn, upload).await {
            Ok(out) => Ok(out),
            Err(Failure::NotStarted(why) | Failure::Lost(why)) => {
                let conn = self.reconnect(&conn, &why).await?;
                self.upload_on(&conn, upload)
                    .await
                    .map_err(|f| self.final_error(f))
            }
            Err(other) => Err(self.final_error(other)),
        }
    }

    async fn renew(&self) -> Result<(), RunError> {
        let mut current = self.current.lock().await;
        let handle = connect_once(&self.opts).await?;
        self.connects.fetch_add(1, Ordering::Relaxed);
        let generation = current.generation + 1;
        let old = std::mem::replace(&mut *current, Arc::new(Connection { handle, generation }));
        drop(current);
        tracing::debug!(node = %self.opts.node, "SSH connection renewed");
        // The old connection is most likely dead (the node rebooted): closing it is a courtesy.
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            old.handle
                .disconnect(russh::Disconnect::ByApplication, "", "en"),
        )
        .await;
        Ok(())
    }
}

impl SshRunner {
    /// Errors built away from the runner (reading an upload source) get the node name here.
    fn fill_node(&self, e: RunError) -> RunError {
        match e {
            RunError::Io {
                node,
                context,
                source,
            } if node.is_empty() => RunError::Io {
                node: self.opts.node.clone(),
                context,
                source,
            },
            other => other,
        }
    }
}
