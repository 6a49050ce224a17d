//! Copying a file from a node to the control host over the run's connection: the node's size
//! and sha256 first, then bounded pieces as base64 on standard output (plain `tail`/`head`/
//! `base64`, present on every minimal host), appended to a private local file and hashed as
//! they arrive; the result must match the sum the node announced.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::{shell, Exec, RunError, Runner};

/// Bytes per piece (about 5.6 MB of base64 on the wire).
pub const PIECE: u64 = 4 << 20;
const PIECE_TIMEOUT: Duration = Duration::from_secs(120);

/// What went wrong fetching a file.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The node could not be reached or the command failed to run.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The node refused or answered something unexpected.
    #[error("{node}: fetching {path}: {why}")]
    Remote {
        /// Node.
        node: String,
        /// Remote path.
        path: String,
        /// What happened.
        why: String,
    },
    /// Writing the local copy failed.
    #[error("writing {path}")]
    Local {
        /// Local path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// A fetched file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Its length.
    pub size: u64,
    /// Its sha256 (lowercase hex).
    pub sha256: String,
}

fn printable(s: &str) -> String {
    s.chars()
        .take(300)
        .map(|c| if c.is_control() && c != '\n' { '?' } else { c })
        .collect()
}

/// Copies `remote` (an absolute path on the runner's node, read as root) to `local` (created
/// with mode 0600, replaced if present), refusing files larger than `max` bytes.
pub async fn fetch_file(
    runner: &dyn Runner,
    remote: &str,
    local: &Path,
    max: u64,
) -> Result<Fetched, FetchError> {
    let node = runner.node().to_string();
    let fail = |why: String| FetchError::Remote {
        node: node.clone(),
        path: remote.to_string(),
        why,
    };
    let q = shell::quote(remote);
    let out = runner
        .exec(
            &Exec::root(format!("stat -c %s -- {q} && sha256sum -- {q}"))
                .with_timeout(PIECE_TIMEOUT),
        )
        .await?;
    if !out.success() {
        return Err(fail(printable(out.stderr.trim())));
    }
    let mut lines = out.stdout.lines();
    let size: u64 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| {
            fail(format!(
                "unexpected size answer {:?}",
                printable(&out.stdout)
            ))
        })?;
    let sum = lines
        .next()
        .and_then(|l| l.split_whitespace().next())
        .filter(|s| {
            s.len() == 64
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .ok_or_else(|| {
            fail(format!(
                "unexpected sha256 answer {:?}",
                printable(&out.stdout)
            ))
        })?
        .to_string();
    if size > max {
        return Err(fail(format!(
            "{size} bytes, more than the {max} bytes allowed for it"
        )));
    }
    let local_err = |source: std::io::Error| FetchError::Local {
        path: local.display().to_string(),
        source,
    };
    let mut file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(local)
            .map_err(local_err)?
    };
    let mut hasher = Sha256::new();
    let mut offset = 0u64;
    while offset < size {
        let len = PIECE.min(size - offset);
        let out = runner
            .exec(
                &Exec::root(format!(
                    "tail -c +{} -- {q} | head -c {len} | base64 -w 0",
                    offset + 1
                ))
                .with_timeout(PIECE_TIMEOUT),
            )
            .await?;
        if !out.success() {
            return Err(fail(printable(out.stderr.trim())));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(out.stdout.trim())
            .map_err(|e| fail(format!("bytes {offset}..: not base64 ({e})")))?;
        if bytes.len() as u64 != len {
            return Err(fail(format!(
                "bytes {offset}..: {} bytes arrived, {len} expected (the file changed while it was read?)",
                bytes.len()
            )));
        }
        hasher.update(&bytes);
        file.write_all(&bytes).map_err(local_err)?;
        offset += len;
    }
    file.sync_all().map_err(local_err)?;
    let got = hex::encode(hasher.finalize());
    if got != sum {
        return Err(fail(format!(
            "the copy's sha256 {got} differs from the node's {sum} (the file changed while it was read?)"
        )));
    }
    Ok(Fetched { size, sha256: got })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::local::LocalRunner;

    #[tokio::test]
    async fn a_file_larger_than_a_piece_arrives_whole_and_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path().join("src.bin");
        let data: Vec<u8> = (0..(PIECE as usize * 2 + 12345))
            .map(|i| (i * 7 % 256) as u8)
            .collect();
        std::fs::write(&src, &data).expect("write");
        let dst = dir.path().join("dst.bin");
        let runner = LocalRunner::new("localhost");
        let got = fetch_file(&runner, &src.display().to_string(), &dst, 1 << 30)
            .await
            .expect("fetch");
        assert_eq!(got.size, data.len() as u64);
        assert_eq!(got.sha256, hex::encode(Sha256::digest(&data)));
        assert_eq!(std::fs::read(&dst).expect("read"), data);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&dst).expect("meta").permissions().mode() & 0o777,
            0o600
        );
        let e = fetch_file(&runner, &src.display().to_string(), &dst, 1000)
            .await
            .expect_err("too large");
        assert!(e.to_string().contains("more than the 1000 bytes"), "{e}");
        let e = fetch_file(&runner, "/nonexistent/x", &dst, 1000)
            .await
            .expect_err("missing");
        assert!(e.to_string().contains("/nonexistent/x"), "{e}");
    }
}
