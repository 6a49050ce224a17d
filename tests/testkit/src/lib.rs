//! Test support for `KubeXM` integration tests.
//!
//! Everything here is real: [`HttpMirror`] is a small HTTP/1.1 file server with fault
//! injection, [`Registry`] runs Debian's `docker-registry` (distribution 2.8), and
//! [`images`] builds tiny real OCI images with `umoci` and pushes them with `skopeo`, and
//! [`Sshd`] runs Debian's OpenSSH server.
//! [`cli`] checks a binary's help, completions and man pages.
//! Servers bind to `127.0.0.1`, are ready when their constructor returns (readiness is
//! awaited under a timeout, never slept for) and are torn down on `Drop`.
//!
//! Conventions: constructors and fixture builders (`start`, `busybox_layout`, `push`...)
//! panic with a message naming what failed, because a broken fixture is a broken test.
//! Probes a test may expect to fail (`skopeo_inspect_digest`, `http_status`...) return
//! `Result<_, CommandError>` or `std::io::Result`.
//!
//! Blocking API: the servers run on their own threads or processes, so the kit works from
//! plain `#[test]` and from `#[tokio::test]` (on any runtime flavour).
//!
//! ```no_run
//! use kubexm_testkit::{images, HttpMirror, Registry, RegistryOptions};
//!
//! let files = tempfile::tempdir().expect("temp dir");
//! fs_err::write(files.path().join("a.bin"), b"hello").expect("write a.bin");
//! let mirror = HttpMirror::start(files.path());
//! let url = format!("{}/a.bin", mirror.base_url());
//!
//! let registry = Registry::start(RegistryOptions::default());
//! let work = tempfile::tempdir().expect("temp dir");
//! let layout = images::busybox_layout(work.path(), "one", "amd64");
//! let digest = images::push(&layout, images::LAYOUT_TAG, &registry, None, "library/busybox:1");
//! assert!(digest.starts_with("sha256:"));
//! # let _ = url;
//! ```
#![deny(missing_docs)]

pub mod cli;
pub mod images;
mod mirror;
mod registry;
mod sshd;
mod tools;

use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

pub use mirror::{Fault, HttpMirror, RequestRecord};
pub use registry::{AccessLogEntry, Registry, RegistryOptions, TlsFiles};
pub use sshd::{processes_with, ssh_keygen, sudo_user, Sshd, SUDO_PASSWORD, SUDO_USER};
pub use tools::{
    http_status, skopeo_copy, skopeo_inspect_digest, skopeo_inspect_raw, CommandError,
};

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
///
/// Another process may take it before you bind it; [`Registry::start`] retries on a fresh
/// port when that happens.
///
/// # Panics
/// If no loopback port can be bound.
#[must_use]
pub fn free_port() -> u16 {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0 to find a free port");
    listener
        .local_addr()
        .expect("local address of a bound listener")
        .port()
}

/// Polls `condition` until it returns `true` or `timeout` passes; returns whether it held.
///
/// Polls every 5 ms at first, backing off to 50 ms.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        if condition() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Lower-case hex SHA-256 of `bytes` (no `sha256:` prefix).
#[must_use]
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    let digest = sha2::Sha256::digest(bytes);
    digest
        .iter()
        .fold(String::with_capacity(64), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

/// `sha256:<hex>` digest of `bytes`, as OCI descriptors spell it.
#[must_use]
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// A gzip'd tar archive of `(path, content)` members (mode 0644, mtime 0), byte-for-byte the
/// same on every call: a real Helm chart archive for tests.
pub fn tgz(members: &[(&str, &str)]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, content) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, path, content.as_bytes())
            .expect("a tar member");
    }
    let raw = tar.into_inner().expect("a tar archive");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &raw).expect("gzip");
    gz.finish().expect("gzip")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_input() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(sha256_digest(b"x").starts_with("sha256:"));
    }

    #[test]
    fn wait_until_times_out_and_succeeds() {
        assert!(!wait_until(Duration::from_millis(30), || false));
        let mut calls = 0;
        assert!(wait_until(Duration::from_secs(1), || {
            calls += 1;
            calls == 3
        }));
    }

    #[test]
    fn free_port_is_bindable() {
        let port = free_port();
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("bind the probed port");
    }
}
