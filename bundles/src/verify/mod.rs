//! Verifies a bundle in one streaming pass, optionally extracting it through a [`Sink`].
//!
//! Whatever a sink received is only trustworthy if [`verify`] returned `Ok`: content is written
//! while it is hashed, and a bad entry is detected after its bytes went through.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};

use crate::check;
use crate::layout::{self, MemoryBlobs};
use crate::manifest::{BundleManifest, IMAGES_DIR, MANIFEST_PATH, SUMS_PATH};
use crate::path;
use crate::pins::{self, Pins};
use crate::sums::{self, Sums};
use kubexm_manifests::digest::Digest as BlobDigest;
use sha2::{Digest, Sha256};
use tar::EntryType;

mod error;

pub use crate::dirsink::DirSink;
pub use crate::worker_sink::WorkerSink;
pub use error::{LinkKind, VerifyError};

/// Largest `bundle.json` or `SHA256SUMS` read into memory. A real bundle's are a few hundred
/// KiB at most (one line per file and blob); 4 MiB leaves room for tens of thousands of entries.
pub const MAX_METADATA_SIZE: u64 = 4 << 20;
/// Largest total of manifests, indexes and configs kept in memory for the layout check.
pub const MAX_KEPT_MANIFESTS: u64 = 64 << 20;
/// Most zero bytes read after the tar end marker (tar pads to records of 10 KiB by default).
const MAX_TRAILING_ZEROS: usize = 1 << 20;
/// Where blobs live in the bundle.
const BLOBS_PREFIX: &str = "images/blobs/sha256/";
/// The layout's index.
const INDEX_PATH: &str = "images/index.json";

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

/// Bounds a reader holds a bundle to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Most content bytes the sink may receive (the free space where it writes). A formatVersion
    /// 2 bundle whose pinned total is larger is refused before anything is written; for
    /// formatVersion 1 each entry is refused before it is written once the running total would
    /// pass it.
    pub max_bytes: Option<u64>,
}

/// What a verified bundle holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// `bundle.json`.
    pub manifest: BundleManifest,
    /// Tar entries: `bundle.json`, `SHA256SUMS`, directories and files.
    pub entries: usize,
    /// Content bytes of all regular files, `bundle.json` and `SHA256SUMS` included: what the
    /// bundle takes on disk once unpacked.
    pub bytes: u64,
    /// For formatVersion 2, the same total as pinned up front (before any content was read).
    pub pinned_bytes: Option<u64>,
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

/// [`verify_buffered`] within `limits`.
///
/// # Errors
///
/// See [`VerifyError`]; [`VerifyError::NoSpace`] when the bundle needs more than
/// `limits.max_bytes`.
pub fn verify_limited(
    reader: impl io::BufRead,
    sink: &mut dyn Sink,
    limits: Limits,
) -> Result<VerifyReport, VerifyError> {
    run(reader, sink, limits)
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
    run(reader, sink, Limits::default())
}

/// [`verify_limited`] over the tar stream itself (not compressed): every rule of a bundle
/// holds the same, e.g. for a tree rebuilt from a delta bundle and the site
/// ([`crate::delta::rebuild`]).
///
/// # Errors
///
/// See [`VerifyError`].
pub fn verify_tar(
    reader: impl Read,
    sink: &mut dyn Sink,
    limits: Limits,
) -> Result<VerifyReport, VerifyError> {
    run_tar(reader, sink, limits)
}

fn run(
    reader: impl io::BufRead,
    sink: &mut dyn Sink,
    limits: Limits,
) -> Result<VerifyReport, VerifyError> {
    let decoder = zstd::stream::read::Decoder::with_buffer(reader).map_err(|source| {
        VerifyError::Truncated {
            after: None,
            source,
        }
    })?;
    run_tar(decoder, sink, limits)
}

fn run_tar(
    tar_stream: impl Read,
    sink: &mut dyn Sink,
    limits: Limits,
) -> Result<VerifyReport, VerifyError> {
    let mut stream = EofReader {
        inner: tar_stream,
        eof: false,
    };
    let mut state = State {
        limits,
        ..State::default()
    };
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
        rest = rest.saturating_add(n);
        // GNU tar pads to a 10 KiB record; a stream that goes on with zeros is a bomb.
        if buf[..n].iter().any(|&b| b != 0) || rest > MAX_TRAILING_ZEROS {
            return Err(VerifyError::TrailingData {
                after: state.last_good.clone(),
            });
        }
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
    limits: Limits,
    /// Sizes known before content is read.
    pins: Pins,
    /// Content bytes declared by the tar headers so far.
    declared: u64,
    /// `bundle.json` and its mode, written to the sink once `SHA256SUMS` agrees with it.
    pending_manifest: Option<(Vec<u8>, u32)>,
    /// Blobs seen, with the content of those that may be manifests.
    blobs: MemoryBlobs,
    /// `images/index.json`.
    index: Option<Vec<u8>>,
    /// formatVersion 2: the content bytes of the whole bundle, known from `bundle.json`.
    pinned: Option<u64>,
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
            self.admit(&path, entry.size())?;
            let mode = entry_mode(&entry);
            let (actual, kept) = self.copy(&mut entry, &path, mode, sink)?;
            if actual != expected {
                return Err(VerifyError::Tampered {
                    path,
                    expected,
                    actual,
                });
            }
            self.keep(&path, &actual, entry.size(), kept)?;
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
        if expected == MANIFEST_PATH {
            let version: VersionOnly =
                serde_json::from_slice(&bytes).map_err(VerifyError::BadManifest)?;
            check::format_version(version.format_version.as_ref())
                .map_err(VerifyError::Manifest)?;
            let manifest = serde_json::from_slice(&bytes).map_err(VerifyError::BadManifest)?;
            self.manifest = Some((manifest, crate::hash::sha256_hex(&bytes)));
            // Written with `SHA256SUMS`, once the space the bundle takes is known.
            self.pending_manifest = Some((bytes, mode));
        } else {
            let sums = sums::parse(&bytes).map_err(VerifyError::Sums)?;
            self.check_manifest(&sums)?;
            let manifest_len = self
                .pending_manifest
                .as_ref()
                .map_or(0, |(b, _)| b.len() as u64);
            self.declared = manifest_len.saturating_add(size);
            self.pinned = self
                .pins
                .total()
                .map(|total| self.declared.saturating_add(total));
            self.fits(self.pinned.unwrap_or(self.declared))?;
            if let Some((json, json_mode)) = self.pending_manifest.take() {
                write_all(sink, MANIFEST_PATH, json_mode, &json)?;
            }
            write_all(sink, &path, mode, &bytes)?;
            self.sums = Some(sums);
            self.sums_digest = Some(crate::hash::sha256_hex(&bytes));
        }
        self.bytes += size;
        self.seen.insert(path.clone());
        self.last_good = Some(path);
        Ok(())
    }

    /// Once `SHA256SUMS` is known: the sum of `bundle.json`, then its contents.
    fn check_manifest(&mut self, sums: &Sums) -> Result<(), VerifyError> {
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
        check::manifest(manifest, sums).map_err(VerifyError::Manifest)?;
        self.pins = pins::pins(manifest, sums).map_err(VerifyError::Manifest)?;
        Ok(())
    }

    /// Fails unless `needed` bytes fit the limit.
    fn fits(&self, needed: u64) -> Result<(), VerifyError> {
        match self.limits.max_bytes {
            Some(limit) if needed > limit => Err(VerifyError::NoSpace { needed, limit }),
            _ => Ok(()),
        }
    }

    /// Before a file's content is read: its tar header must declare its pinned size, and it
    /// must fit what is left of the limit.
    fn admit(&mut self, path: &str, size: u64) -> Result<(), VerifyError> {
        if let Some(pinned) = self.pins.size(path) {
            if pinned != size {
                return Err(VerifyError::SizeMismatch {
                    path: path.to_owned(),
                    pinned,
                    header: size,
                });
            }
        }
        if let Some(name) = path.strip_prefix(BLOBS_PREFIX) {
            if BlobDigest::from_hex(name).is_err() {
                return Err(VerifyError::Layout(layout::LayoutProblem::BlobName {
                    path: path.to_owned(),
                }));
            }
        }
        if path == INDEX_PATH && size > layout::MAX_MANIFEST_SIZE {
            return Err(VerifyError::TooLarge {
                path: path.to_owned(),
                size,
                max: layout::MAX_MANIFEST_SIZE,
            });
        }
        self.declared = self.declared.saturating_add(size);
        self.fits(self.declared)
    }

    /// After a file verified: blobs must hash to their name; manifests and `index.json` are
    /// kept for the layout check.
    fn keep(
        &mut self,
        path: &str,
        sha256: &str,
        size: u64,
        kept: Option<Vec<u8>>,
    ) -> Result<(), VerifyError> {
        if path == INDEX_PATH {
            self.index = kept;
            return Ok(());
        }
        let Some(name) = path.strip_prefix(BLOBS_PREFIX) else {
            return Ok(());
        };
        if name != sha256 {
            return Err(VerifyError::Layout(layout::LayoutProblem::BlobContent {
                path: path.to_owned(),
                actual: sha256.to_owned(),
            }));
        }
        let digest = BlobDigest::from_hex(name).map_err(|_| {
            VerifyError::Layout(layout::LayoutProblem::BlobName {
                path: path.to_owned(),
            })
        })?;
        let kept = kept.filter(|bytes| layout::may_be_manifest(size, bytes));
        self.blobs.insert(digest, size, kept);
        let total = self.blobs.kept_bytes() as u64;
        if total > MAX_KEPT_MANIFESTS {
            return Err(VerifyError::TooLarge {
                path: format!("{IMAGES_DIR}/blobs (manifests and configs)"),
                size: total,
                max: MAX_KEPT_MANIFESTS,
            });
        }
        Ok(())
    }

    /// Copies a regular file into the sink, hashing it; returns the hex sha256 and, for small
    /// layout files that may be manifests, the content.
    fn copy<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &str,
        mode: u32,
        sink: &mut dyn Sink,
    ) -> Result<(String, Option<Vec<u8>>), VerifyError> {
        let sink_err = |source| VerifyError::Sink {
            path: path.to_owned(),
            source,
        };
        let size = entry.size();
        let layout_file = path == INDEX_PATH || path.starts_with(BLOBS_PREFIX);
        let mut kept = (layout_file && size <= layout::MAX_MANIFEST_SIZE)
            .then(|| Vec::with_capacity(usize::try_from(size.min(64 * 1024)).unwrap_or(0)));
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
            if let Some(k) = kept.as_mut() {
                if copied == 0 && !layout::may_be_manifest(size, &buf[..n]) && path != INDEX_PATH {
                    kept = None;
                } else {
                    k.extend_from_slice(&buf[..n]);
                }
            }
            copied += n as u64;
        }
        out.flush().map_err(sink_err)?;
        if copied != size {
            return Err(self.truncated(short_read(size, copied)));
        }
        self.bytes += size;
        Ok((hex::encode(hasher.finalize()), kept))
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
        if let Some(index) = &self.index {
            layout::check(&manifest.images, index, &self.blobs).map_err(VerifyError::Layout)?;
        }
        sink.finish().map_err(VerifyError::Finish)?;
        Ok(VerifyReport {
            manifest,
            entries: self.position,
            bytes: self.bytes,
            pinned_bytes: self.pinned,
            content_digest: self.sums_digest.unwrap_or_default(),
        })
    }
}

/// Just the version of `bundle.json`, read before the whole document.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct VersionOnly {
    #[serde(default)]
    format_version: Option<serde_json::Value>,
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
