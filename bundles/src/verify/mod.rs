//! Verifies a bundle in one streaming pass, optionally extracting it through a [`Sink`].
//!
//! Whatever a sink received is only trustworthy if [`verify`] returned `Ok`: content is written
//! while it is hashed, and a bad entry is detected after its bytes went through.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};

use crate::check;
use crate::manifest::{BundleManifest, MANIFEST_PATH, SUMS_PATH};
use crate::path;
use crate::sums::{self, Sums};
use sha2::{Digest, Sha256};
use tar::EntryType;

mod error;

pub use crate::dirsink::DirSink;
pub use crate::worker_sink::WorkerSink;
pub use error::{LinkKind, VerifyError};

/// Largest `bundle.json` or `SHA256SUMS` read into memory.
pub const MAX_METADATA_SIZE: u64 = 64 << 20;

const TAR_BLOCK: usize = 512;
/// Content is copied through a buffer of this size.
const COPY_BUFFER: usize = 256 * 1024;

/// Receives the verified stream: directories and regular files, in stream order.
pub trait Sink {
    /// A directory entry (`path` has no trailing slash).
    ///
    /// # Errors
    ///
    /// Any I/O error; verification stops with [`VerifyError::Sink`].
    fn dir(&mut self, path: &str) -> io::Result<()>;
    /// A regular file; the content is written to the returned writer, then it is flushed.
    ///
    /// # Errors
    ///
    /// Any I/O error; verification stops with [`VerifyError::Sink`].
    fn file(&mut self, path: &str, mode: u32) -> io::Result<Box<dyn Write + '_>>;
    /// Called once after the whole stream verified.
    ///
    /// # Errors
    ///
    /// Any I/O error; verification fails with [`VerifyError::Finish`].
    fn finish(&mut self) -> io::Result<()>;
}

/// A sink that discards everything: verify only.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl Sink for NullSink {
    fn dir(&mut self, _path: &str) -> io::Result<()> {
        Ok(())
    }

    fn file(&mut self, _path: &str, _mode: u32) -> io::Result<Box<dyn Write + '_>> {
        Ok(Box::new(io::sink()))
    }

    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a verified bundle holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// `bundle.json`.
    pub manifest: BundleManifest,
    /// Tar entries: `bundle.json`, `SHA256SUMS`, directories and files.
    pub entries: usize,
    /// Content bytes of all regular files, `bundle.json` and `SHA256SUMS` included.
    pub bytes: u64,
    /// The bundle's content digest: sha256 of its `SHA256SUMS`, which lists the sum of
    /// `bundle.json` and of every file, so two bundles with the same content digest verified to
    /// the same bytes (however they were compressed).
    pub content_digest: String,
}

/// Reads a bundle once: checks order, paths, entry types and every sum, and passes
/// directories and files to `sink`.
///
/// # Errors
///
/// See [`VerifyError`]: each names the offending entry.
pub fn verify(reader: impl Read, sink: &mut dyn Sink) -> Result<VerifyReport, VerifyError> {
    let buffered = io::BufReader::with_capacity(zstd::zstd_safe::DCtx::in_size(), reader);
    verify_buffered(buffered, sink)
}

/// [`verify`] over a reader that already buffers (e.g. [`crate::prefetch::Prefetch`]): the
/// decompressor reads its buffer in place.
///
/// # Errors
///
/// See [`VerifyError`]: each names the offending entry.
pub fn verify_buffered(
    reader: impl io::BufRead,
    sink: &mut dyn Sink,
) -> Result<VerifyReport, VerifyError> {
    let decoder = zstd::stream::read::Decoder::with_buffer(reader).map_err(|source| {
        VerifyError::Truncated {
            after: None,
            source,
        }
    })?;
    let mut stream = EofReader {
        inner: decoder,
        eof: false,
    };
    let mut state = State::default();
    {
        let mut archive = tar::Archive::new(&mut stream);
        let entries = archive
            .entries()
            .map_err(|source| state.truncated(source))?;
        for entry in entries {
            let entry = entry.map_err(|source| state.truncated(source))?;
            state.entry(entry, sink)?;
        }
    }
    end_marker(&mut stream, &state)?;
    state.finish(sink)
}

/// Records whether the inner reader reached EOF.
struct EofReader<R> {
    inner: R,
    eof: bool,
}

impl<R: Read> Read for EofReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.eof = true;
        }
        Ok(n)
    }
}

/// The tar reader stops at the first zero block or at EOF; require a real end marker: two
/// zero blocks, then only zeros to the end of a valid zstd stream.
fn end_marker<R: Read>(stream: &mut EofReader<R>, state: &State) -> Result<(), VerifyError> {
    let early_eof = || {
        state.truncated(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "stream ends before the tar end marker",
        ))
    };
    if stream.eof {
        return Err(early_eof());
    }
    let mut rest = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stream
            .read(&mut buf)
            .map_err(|source| state.truncated(source))?;
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Err(VerifyError::TrailingData {
                after: state.last_good.clone(),
            });
        }
        rest = rest.saturating_add(n);
    }
    if rest < TAR_BLOCK {
        return Err(early_eof());
    }
    Ok(())
}

#[derive(Default)]
struct State {
    position: usize,
    manifest: Option<(BundleManifest, String)>,
    sums: Option<Sums>,
    /// sha256 of the `SHA256SUMS` bytes.
    sums_digest: Option<String>,
    seen: BTreeSet<String>,
    last_good: Option<String>,
    bytes: u64,
    /// Copy buffer, reused for every entry.
    buf: Vec<u8>,
}

impl State {
    fn truncated(&self, source: io::Error) -> VerifyError {
        VerifyError::Truncated {
            after: self.last_good.clone(),
            source,
        }
    }

    fn entry<R: Read>(
        &mut self,
        mut entry: tar::Entry<'_, R>,
        sink: &mut dyn Sink,
    ) -> Result<(), VerifyError> {
        self.position += 1;
        let kind = entry.header().entry_type();
        let path = entry_path(&entry, kind)?;
        match self.position {
            1 => return self.metadata(&mut entry, kind, path, MANIFEST_PATH, sink),
            2 => return self.metadata(&mut entry, kind, path, SUMS_PATH, sink),
            _ => {}
        }
        if let Err(problem) = path::check(&path) {
            return Err(VerifyError::UnsafePath { path, problem });
        }
        check_kind(&entry, kind, &path)?;
        if self.seen.contains(&path) {
            return Err(VerifyError::Duplicate { path });
        }
        let sums = self.sums.as_ref().ok_or_else(|| VerifyError::Missing {
            path: SUMS_PATH.to_owned(),
        })?;
        if kind.is_dir() {
            if sums.contains_key(&path) {
                return Err(VerifyError::NotAFile { path });
            }
            sink.dir(&path).map_err(|source| VerifyError::Sink {
                path: path.clone(),
                source,
            })?;
        } else {
            let Some(expected) = sums.get(&path).cloned() else {
                return Err(VerifyError::Unlisted { path });
            };
            let mode = entry_mode(&entry);
            let actual = self.copy(&mut entry, &path, mode, sink)?;
            if actual != expected {
                return Err(VerifyError::Tampered {
                    path,
                    expected,
                    actual,
                });
            }
        }
        self.seen.insert(path.clone());
        self.last_good = Some(path);
        Ok(())
    }

    /// `bundle.json` (position 1) or `SHA256SUMS` (position 2).
    fn metadata<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        kind: EntryType,
        path: String,
        expected: &'static str,
        sink: &mut dyn Sink,
    ) -> Result<(), VerifyError> {
        if path == expected {
            check_kind(entry, kind, &path)?;
        }
        if path != expected || kind.is_dir() {
            return Err(VerifyError::Order {
                position: self.position,
                expected,
                found: path,
            });
        }
        let size = entry.size();
        if size > MAX_METADATA_SIZE {
            return Err(VerifyError::TooLarge {
                path,
                size,
                max: MAX_METADATA_SIZE,
            });
        }
        let mut bytes = Vec::new();
        let read = entry
            .read_to_end(&mut bytes)
            .map_err(|source| self.truncated(source))?;
        if read as u64 != size {
            return Err(self.truncated(short_read(size, read as u64)));
        }
        let mode = entry_mode(entry);
        write_all(sink, &path, mode, &bytes)?;
        if expected == MANIFEST_PATH {
            let value: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(VerifyError::BadManifest)?;
            check::format_version(&value).map_err(VerifyError::Manifest)?;
            let manifest = serde_json::from_value(value).map_err(VerifyError::BadManifest)?;
            self.manifest = Some((manifest, crate::hash::sha256_hex(&bytes)));
        } else {
            let sums = sums::parse(&bytes).map_err(VerifyError::Sums)?;
            self.check_manifest(&sums)?;
            self.sums = Some(sums);
            self.sums_digest = Some(crate::hash::sha256_hex(&bytes));
        }
        self.bytes += size;
        self.seen.insert(path.clone());
        self.last_good = Some(path);
        Ok(())
    }

    /// Once `SHA256SUMS` is known: the sum of `bundle.json`, then its contents.
    fn check_manifest(&self, sums: &Sums) -> Result<(), VerifyError> {
        let Some((manifest, actual)) = &self.manifest else {
            return Err(VerifyError::Missing {
                path: MANIFEST_PATH.to_owned(),
            });
        };
        let Some(expected) = sums.get(MANIFEST_PATH) else {
            return Err(VerifyError::Unlisted {
                path: MANIFEST_PATH.to_owned(),
            });
        };
        if expected != actual {
            return Err(VerifyError::Tampered {
                path: MANIFEST_PATH.to_owned(),
                expected: expected.clone(),
                actual: actual.clone(),
            });
        }
        check::manifest(manifest, sums).map_err(VerifyError::Manifest)
    }

    /// Copies a regular file into the sink, hashing it; returns the hex sha256.
    fn copy<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &str,
        mode: u32,
        sink: &mut dyn Sink,
    ) -> Result<String, VerifyError> {
        let sink_err = |source| VerifyError::Sink {
            path: path.to_owned(),
            source,
        };
        let size = entry.size();
        let mut out = sink.file(path, mode).map_err(sink_err)?;
        let mut hasher = Sha256::new();
        // One buffer for the whole stream: small enough to stay in the CPU cache between the
        // decompressor writing it, the hasher and write(2) reading it.
        if self.buf.is_empty() {
            self.buf = vec![0u8; COPY_BUFFER];
        }
        let buf = &mut self.buf;
        let mut copied = 0u64;
        loop {
            let n = entry.read(buf).map_err(|source| VerifyError::Truncated {
                after: self.last_good.clone(),
                source,
            })?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(sink_err)?;
            copied += n as u64;
        }
        out.flush().map_err(sink_err)?;
        if copied != size {
            return Err(self.truncated(short_read(size, copied)));
        }
        self.bytes += size;
        Ok(hex::encode(hasher.finalize()))
    }

    fn finish(self, sink: &mut dyn Sink) -> Result<VerifyReport, VerifyError> {
        let (Some((manifest, _)), Some(sums)) = (self.manifest, self.sums) else {
            let path = if self.position == 0 {
                MANIFEST_PATH
            } else {
                SUMS_PATH
            };
            return Err(VerifyError::Missing {
                path: path.to_owned(),
            });
        };
        if let Some(path) = sums.keys().find(|p| !self.seen.contains(*p)) {
            return Err(VerifyError::Missing { path: path.clone() });
        }
        sink.finish().map_err(VerifyError::Finish)?;
        Ok(VerifyReport {
            manifest,
            entries: self.position,
            bytes: self.bytes,
            content_digest: self.sums_digest.unwrap_or_default(),
        })
    }
}

fn short_read(expected: u64, actual: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("entry content ends after {actual} of {expected} bytes"),
    )
}

fn write_all(sink: &mut dyn Sink, path: &str, mode: u32, bytes: &[u8]) -> Result<(), VerifyError> {
    let sink_err = |source| VerifyError::Sink {
        path: path.to_owned(),
        source,
    };
    let mut out = sink.file(path, mode).map_err(sink_err)?;
    out.write_all(bytes).map_err(sink_err)?;
    out.flush().map_err(sink_err)
}

/// Permission bits only: no setuid, setgid or sticky bit survives extraction.
fn entry_mode<R: Read>(entry: &tar::Entry<'_, R>) -> u32 {
    entry.header().mode().map_or(0o644, |m| m & 0o777)
}

/// The entry path as UTF-8, without a directory's trailing slash.
fn entry_path<R: Read>(entry: &tar::Entry<'_, R>, kind: EntryType) -> Result<String, VerifyError> {
    let raw = entry.path_bytes();
    let mut path = String::from_utf8(raw.to_vec()).map_err(|_| VerifyError::NotUtf8 {
        path: String::from_utf8_lossy(&raw).into_owned(),
    })?;
    if kind.is_dir() && path.len() > 1 && path.ends_with('/') {
        path.pop();
    }
    Ok(path)
}

/// Only regular files and directories.
fn check_kind<R: Read>(
    entry: &tar::Entry<'_, R>,
    kind: EntryType,
    path: &str,
) -> Result<(), VerifyError> {
    let link = |kind| {
        let target = entry
            .link_name_bytes()
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_default();
        VerifyError::Link {
            path: path.to_owned(),
            kind,
            target,
        }
    };
    let special = |kind| VerifyError::Special {
        path: path.to_owned(),
        kind,
    };
    match kind {
        EntryType::Regular | EntryType::Directory => Ok(()),
        EntryType::Symlink => Err(link(LinkKind::Symbolic)),
        EntryType::Link => Err(link(LinkKind::Hard)),
        EntryType::Char => Err(special("character device")),
        EntryType::Block => Err(special("block device")),
        EntryType::Fifo => Err(special("FIFO")),
        EntryType::Continuous => Err(special("contiguous file")),
        EntryType::GNUSparse => Err(special("sparse file")),
        EntryType::XGlobalHeader => Err(special("pax global header")),
        _ => Err(special("unsupported entry type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage() {
        let err = verify(&b"not zstd at all"[..], &mut NullSink).expect_err("garbage");
        assert!(
            matches!(err, VerifyError::Truncated { after: None, .. }),
            "{err:?}"
        );
        let empty = zstd::encode_all(&b""[..], 3).expect("zstd");
        let err = verify(empty.as_slice(), &mut NullSink).expect_err("empty");
        assert!(
            matches!(err, VerifyError::Truncated { after: None, .. }),
            "{err:?}"
        );
    }
}
