//! The control host's runner: scripts run under `sh -c` as child processes.

use std::process::Stdio;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::{shell, Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome, UploadSource};

/// Runs steps on the machine the installer runs on.
#[derive(Debug, Clone)]
pub struct LocalRunner {
    node: String,
    is_root: bool,
}

impl Default for LocalRunner {
    fn default() -> Self {
        Self::new("localhost")
    }
}

impl LocalRunner {
    /// A runner that reports itself as `node`.
    pub fn new(node: impl Into<String>) -> Self {
        Self {
            node: node.into(),
            is_root: rustix::process::geteuid().is_root(),
        }
    }

    fn io(&self, context: &str, source: std::io::Error) -> RunError {
        RunError::Io {
            node: self.node.clone(),
            context: context.to_string(),
            source,
        }
    }
}

#[async_trait]
impl Runner for LocalRunner {
    fn node(&self) -> &str {
        &self.node
    }

    async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError> {
        let mut line = shell::with_timeout(&exec.script, exec.timeout);
        if exec.sudo && !self.is_root {
            line = shell::with_sudo_nopasswd(&line);
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&line)
            .stdin(if exec.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| self.io("starting sh", e))?;
        if let (Some(bytes), Some(mut stdin)) = (exec.stdin.as_ref(), child.stdin.take()) {
            // A script that exits without reading its stdin closes the pipe; that is not an error.
            let _ = stdin.write_all(bytes).await;
        }
        // `timeout` on the node enforces the limit; this is the backstop if even that hangs.
        let backstop = exec.timeout + std::time::Duration::from_secs(10);
        let out = match tokio::time::timeout(backstop, child.wait_with_output()).await {
            Ok(out) => out.map_err(|e| self.io("waiting for sh", e))?,
            Err(_) => {
                return Err(RunError::Timeout {
                    node: self.node.clone(),
                    after: exec.timeout,
                    summary: super::summary(&exec.script),
                })
            }
        };
        // coreutils timeout exits 124 when it killed the command (137 when KILL was needed).
        if matches!(out.status.code(), Some(124) | Some(137)) {
            return Err(RunError::Timeout {
                node: self.node.clone(),
                after: exec.timeout,
                summary: super::summary(&exec.script),
            });
        }
        Ok(ExecOutput {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, RunError> {
        let check = Exec {
            script: shell::remote_sha256(&upload.dest),
            sudo: upload.sudo,
            stdin: None,
            timeout: std::time::Duration::from_secs(120),
        };
        let current = self.exec(&check).await?;
        if current.success() && current.stdout.trim() == upload.sha256 {
            return Ok(UploadOutcome::Skipped);
        }
        let bytes = match &upload.source {
            UploadSource::Bytes(b) => b.clone(),
            UploadSource::File(p) => tokio::fs::read(p)
                .await
                .map_err(|e| self.io(&format!("reading {}", p.display()), e))?,
        };
        let len = bytes.len() as u64;
        let write = Exec {
            script: shell::receive_file(&upload.dest, &upload.sha256, upload.mode),
            sudo: upload.sudo,
            stdin: Some(bytes),
            timeout: std::time::Duration::from_secs(600),
        };
        let out = self.exec(&write).await?;
        if !out.success() {
            return Err(RunError::Upload {
                node: self.node.clone(),
                dest: upload.dest.clone(),
                message: out.stderr.trim().to_string(),
            });
        }
        Ok(UploadOutcome::Uploaded(len))
    }
}
