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

mod channel;
mod host_key;
pub mod known_hosts;
mod login;
mod options;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use russh::client::{Handle, Msg};
use russh::{ChannelMsg, ChannelWriteHalf};
use tokio::sync::{oneshot, Semaphore};

pub use kubexm_manifests::secret::Secret;
pub use options::SshOptions;

use super::{shell, Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome, UploadSource};
use channel::{is_disconnect, send_input, Input, Job, Raw, SudoState, WriteError};
use host_key::Client;
use login::connect_once;

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
