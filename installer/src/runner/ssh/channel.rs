//! What one command on a session channel is made of: its stdin (bytes or a file), what the
//! channel produced, sending stdin and answering sudo's prompt.

use std::path::Path;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use russh::client::Msg;
use russh::ChannelWriteHalf;
use tokio::io::AsyncReadExt as _;

use crate::runner::{shell, RunError};
use kubexm_manifests::secret::Secret;

/// Bytes for a command's stdin.
pub(super) enum Input<'a> {
    Empty,
    Bytes(&'a [u8]),
    File(&'a Path),
}

/// One command to run on a channel.
pub(super) struct Job<'a> {
    pub(super) command: String,
    /// Answer `sudo`'s prompt with this password, and wait for [`shell::SUDO_READY`].
    pub(super) sudo_password: Option<&'a Secret>,
    pub(super) input: Input<'a>,
    pub(super) timeout: Duration,
    pub(super) summary: &'a str,
}

/// What a channel produced.
pub(super) struct Raw {
    pub(super) code: Option<i32>,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: Vec<u8>,
    pub(super) sent: u64,
}

/// Size of the reads from a file being uploaded.
pub(super) const UPLOAD_CHUNK: usize = 256 * 1024;
pub(super) fn is_disconnect(e: &russh::Error) -> bool {
    matches!(e, russh::Error::Disconnect | russh::Error::SendError)
}

/// A failed write of stdin.
pub(super) enum WriteError {
    /// Reading the local source failed.
    Local(RunError),
    /// The channel is gone.
    Channel,
}

pub(super) async fn send_input(
    write: &ChannelWriteHalf<Msg>,
    input: &Input<'_>,
) -> Result<u64, WriteError> {
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
pub(super) struct SudoState<'a> {
    pub(super) password: &'a Secret,
    pub(super) pending: Vec<u8>,
    pub(super) prompts: u32,
    pub(super) ready: bool,
}

impl SudoState<'_> {
    /// Takes stderr bytes; answers prompts; returns true once [`shell::SUDO_READY`] arrived
    /// (what follows it goes to `stderr`).
    pub(super) async fn feed(
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
