//! Where steps run: a [`Runner`] executes shell scripts and places files on one node.
//!
//! Two implementations: [`local::LocalRunner`] for the control host and [`ssh::SshRunner`] for
//! remote nodes (one SSH connection per host for the whole run). Steps never talk to a transport
//! directly; they build [`Exec`] and [`Upload`] values and hand them to the node's runner.

pub mod fetch;
pub mod local;
pub mod shell;
pub mod ssh;

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

/// One shell script to run on a node (`sh -c SCRIPT`).
#[derive(Debug, Clone)]
pub struct Exec {
    /// POSIX shell script; runs under `sh -c`.
    pub script: String,
    /// Run as root (through `sudo` when the login user is not root; the sudo password, when
    /// needed, is written on stdin, never on a command line).
    pub sudo: bool,
    /// Bytes written to the script's stdin, then stdin is closed.
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit. On expiry the remote process group is killed and
    /// [`RunError::Timeout`] is returned.
    pub timeout: Duration,
}

impl Exec {
    /// A script run as root with the default timeout of 5 minutes.
    pub fn root(script: impl Into<String>) -> Self {
        Self {
            script: script.into(),
            sudo: true,
            stdin: None,
            timeout: Duration::from_secs(300),
        }
    }

    /// The same script with another timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same script with bytes on stdin.
    #[must_use]
    pub fn with_stdin(mut self, stdin: Vec<u8>) -> Self {
        self.stdin = Some(stdin);
        self
    }
}

/// What a finished script produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit status; `None` when the process was killed by a signal.
    pub code: Option<i32>,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
}

impl ExecOutput {
    /// Exit status 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Where the bytes of an upload come from.
#[derive(Debug, Clone)]
pub enum UploadSource {
    /// A file on the control host.
    File(PathBuf),
    /// Bytes in memory (rendered templates, certificates).
    Bytes(Vec<u8>),
}

/// Place one file on a node: skipped when the destination already has `sha256`, otherwise
/// written to a temporary name beside the destination, checked, then renamed into place.
#[derive(Debug, Clone)]
pub struct Upload {
    /// Content.
    pub source: UploadSource,
    /// Lowercase hex sha256 of the content (the caller knows it: bundle records or hashing the
    /// rendered bytes).
    pub sha256: String,
    /// Absolute destination path on the node.
    pub dest: String,
    /// File mode, e.g. `0o644`; `0o600` for keys.
    pub mode: u32,
    /// Write as root (through sudo when needed).
    pub sudo: bool,
}

/// What an upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadOutcome {
    /// The destination already had the content; nothing was sent.
    Skipped,
    /// The content was sent (bytes) and verified on the node.
    Uploaded(u64),
}

/// Errors from running something on a node. Every variant names the node.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The script ran longer than its timeout and was killed.
    #[error("{node}: timed out after {after:?} running `{summary}`; the command was killed")]
    Timeout {
        /// Node name.
        node: String,
        /// The limit.
        after: Duration,
        /// First line of the script.
        summary: String,
    },
    /// Cannot connect or the connection broke (after the one reconnect attempt).
    #[error("{node}: connection failed: {message}")]
    Connection {
        /// Node name.
        node: String,
        /// What happened.
        message: String,
    },
    /// Authentication was refused.
    #[error("{node}: authentication failed for user {user}: {message}")]
    Auth {
        /// Node name.
        node: String,
        /// Login user.
        user: String,
        /// What was tried.
        message: String,
    },
    /// The host key is unknown (and not accepted) or changed.
    #[error("{node}: {message}")]
    HostKey {
        /// Node name.
        node: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// An upload's content did not arrive intact.
    #[error("{node}: upload to {dest} failed: {message}")]
    Upload {
        /// Node name.
        node: String,
        /// Destination path.
        dest: String,
        /// What went wrong.
        message: String,
    },
    /// A local I/O error (reading a file to upload, spawning a process).
    #[error("{node}: {context}")]
    Io {
        /// Node name.
        node: String,
        /// What was being done.
        context: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Runs scripts and places files on one node.
#[async_trait]
pub trait Runner: Send + Sync {
    /// The node's name (from cluster.yaml; `localhost` for the control host).
    fn node(&self) -> &str;

    /// Runs one script and waits for it (or its timeout).
    async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError>;

    /// Places one file, skipping it when the node already has the same content.
    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, RunError>;

    /// Drops the current connection and opens a fresh one, used from then on (after the node
    /// rebooted: "one connection per host" holds per boot). Nothing to do for runners without a
    /// connection (the control host).
    ///
    /// # Errors
    /// As a first connection: the node does not answer, its host key or the login is refused.
    async fn renew(&self) -> Result<(), RunError> {
        Ok(())
    }
}

/// First line of a script, shortened, for error messages and logs.
pub fn summary(script: &str) -> String {
    let line = script
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() > 120 {
        let mut s: String = line.chars().take(117).collect();
        s.push_str("...");
        s
    } else {
        line.to_string()
    }
}
