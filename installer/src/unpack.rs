//! One-pass verified unpack of a bundle into the work directory.
//!
//! The bundle is decompressed once: [`kubexm_bundles::verify::verify`] checks every entry
//! (sha256 of each file against `SHA256SUMS`, `bundle.json` against both) while a [`DirSink`]
//! writes it out. The tree only gets its final name — the bundle's **content digest**, the
//! sha256 of its `SHA256SUMS`, which pins `bundle.json` and every file — once all of that
//! succeeded and the tree is synced:
//!
//! ```text
//! <work_dir>/bundles/
//!   .lock                      flock held while unpacking: one unpack at a time per work dir
//!   .partial-<pid>-<nanos>/    an unpack in progress; removed on error, or by the next run
//!                              after a crash (anything named `.partial-*` is stale under the lock)
//!   <content digest>/          a complete, verified unpack: bundle.json, files/, images/, …
//!     .kubexm-unpacked         completion marker holding the digest
//!   fingerprints.json          bundle path + size, mtime, ctime, device, inode → digest
//! ```
//!
//! The marker is written into the partial directory (after the filesystem is synced) and the
//! directory is renamed afterwards, so a `<digest>/` directory without a marker never comes
//! from this code; one found anyway is treated as incomplete and replaced.
//!
//! A second unpack of the same file (same fingerprint) reuses the directory without reading
//! the bundle. An unknown file is unpacked; if its content digest turns out to be one already
//! unpacked (a copy, a renamed or recompressed bundle), the existing directory is reused and the
//! new copy discarded.
//!
//! The content digest rather than the sha256 of the `.tar.zst` names the tree: every byte that
//! ends up in it is already hashed once against `SHA256SUMS`, and a second pass over the whole
//! compressed file only to name the directory cost a third of the unpack. (Comparing the file
//! with a digest published out of band is `sha256sum`'s job, before the bundle is trusted.)
//!
//! Space is checked against what the bundle says it takes, never guessed from its compressed
//! size: a formatVersion 2 bundle pins every entry's size in `bundle.json`, so the whole total is
//! compared with the free space before the first byte is written, and an entry whose tar header
//! declares another size is refused before it is read. A formatVersion 1 bundle is held to the
//! same limit entry by entry, before each is written. The trees are private (0700): a bundle
//! may carry secrets (keys in addons) and the work directory's other users need none of it.
//!
//! Memory stays flat whatever the bundle size: the file is read through a 1 MiB buffer and
//! entries are copied in 256 KiB chunks. Two threads share the pass: this one reads,
//! decompresses, parses and hashes; a [`WorkerSink`] thread does the writes.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use kubexm_bundles::manifest::{BundleManifest, MANIFEST_PATH};
use kubexm_bundles::prefetch::Prefetch;
use kubexm_bundles::verify::{verify_limited, DirSink, Limits, VerifyError, WorkerSink};
use serde::{Deserialize, Serialize};

use crate::private_dir::ensure_private_dir;

/// Directory under the work directory holding unpacked bundles.
pub const BUNDLES_DIR: &str = "bundles";
/// Completion marker inside `<work_dir>/bundles/<digest>/`; holds the content digest.
pub const MARKER: &str = ".kubexm-unpacked";
/// Fingerprint record under `<work_dir>/bundles/`.
pub const FINGERPRINTS: &str = "fingerprints.json";
/// Prefix of in-progress (or, found at start, stale) entries under `<work_dir>/bundles/`.
pub const PARTIAL_PREFIX: &str = ".partial-";
/// Free space left untouched by an unpack: file system overhead (blocks, directories), the
/// marker and the fingerprint record, and room for the install's own logs.
pub const SPACE_MARGIN: u64 = 32 << 20;

const LOCK: &str = ".lock";
const FINGERPRINTS_VERSION: u32 = 1;

/// An unpacked bundle.
#[derive(Debug, Clone)]
pub struct Unpacked {
    /// Directory holding the bundle's tree (`bundle.json`, `files/`, `images/`, …).
    pub dir: PathBuf,
    /// The bundle's content digest (sha256 of its `SHA256SUMS`).
    pub digest: String,
    /// Its `bundle.json`.
    pub manifest: BundleManifest,
    /// True when an earlier unpack of the same bundle was reused: the fingerprint matched (the
    /// bundle was not read), or the bundle's content digest was already unpacked.
    pub reused: bool,
}

/// Why a bundle could not be unpacked. Nothing is left half-written in any case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnpackError {
    /// The bundle cannot be opened or inspected.
    #[error("Failed to open bundle `{}`", path.display())]
    Open {
        /// The bundle.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The bundle is a directory or a special file.
    #[error("Bundle `{}` is not a regular file", path.display())]
    NotAFile {
        /// The bundle.
        path: PathBuf,
    },
    /// `statvfs` failed.
    #[error("Failed to read the free space in `{}`", dir.display())]
    FreeSpace {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The work directory's filesystem is too full for what the bundle takes.
    #[error(
        "Not enough free space in `{}` to unpack `{}`: it takes {needed} bytes, {available} available (keeping {SPACE_MARGIN} free); nothing was written",
        dir.display(),
        bundle.display()
    )]
    NoSpace {
        /// Where the bundle would be unpacked.
        dir: PathBuf,
        /// The bundle.
        bundle: PathBuf,
        /// Bytes the bundle takes (its pinned total, or for formatVersion 1 the running total
        /// when the limit was reached).
        needed: u64,
        /// Free bytes for unprivileged users, less [`SPACE_MARGIN`].
        available: u64,
    },
    /// The bundle failed verification; the source names the entry.
    #[error("Bundle `{}` failed verification", bundle.display())]
    Verify {
        /// The bundle.
        bundle: PathBuf,
        /// What is wrong, naming the entry.
        #[source]
        source: VerifyError,
    },
    /// The bundle file was modified or replaced while it was read.
    #[error("Bundle `{}` changed while it was being unpacked", bundle.display())]
    Changed {
        /// The bundle.
        bundle: PathBuf,
    },
    /// Building a tree for [`publish_tree`] failed.
    #[error("Failed to build the bundle tree {digest}")]
    Fill {
        /// Content digest of the tree.
        digest: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A reused unpack has an unreadable `bundle.json`.
    #[error(
        "Failed to parse `bundle.json` of the unpacked bundle in `{}`; remove that directory to unpack again",
        dir.display()
    )]
    Reuse {
        /// The unpacked directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// An I/O error in the work directory.
    #[error("Failed to {action} `{}`", path.display())]
    Io {
        /// What was being done (`create`, `rename`, …).
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> UnpackError + 'a {
    move |source| UnpackError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Verifies and unpacks `bundle` under `work_dir/bundles/<content digest>/`, or reuses an earlier unpack.
///
/// # Errors
///
/// See [`UnpackError`]: the bundle cannot be read, fails verification (the source names the
/// entry), there is not enough space, or the work directory cannot be written.
pub fn unpack(bundle: &Path, work_dir: &Path) -> Result<Unpacked, UnpackError> {
    let root = work_dir.join(BUNDLES_DIR);
    if !work_dir.exists() {
        ensure_private_dir(work_dir).map_err(io_err("create", work_dir))?;
    }
    ensure_private_dir(&root).map_err(io_err("create", &root))?;
    let _lock = Lock::acquire(&root)?;
    remove_stale(&root)?;

    let open_err = |source| UnpackError::Open {
        path: bundle.to_owned(),
        source,
    };
    let key = fs::canonicalize(bundle).map_err(open_err)?;
    let key = key.to_string_lossy().into_owned();
    let meta = fs::metadata(bundle).map_err(open_err)?;
    if !meta.is_file() {
        return Err(UnpackError::NotAFile {
            path: bundle.to_owned(),
        });
    }

    let fingerprints_path = root.join(FINGERPRINTS);
    let mut known = Fingerprints::load(&fingerprints_path);
    if let Some(digest) = known.lookup(&key, &Fingerprint::of(&meta)) {
        let dir = root.join(digest);
        if is_complete(&dir, digest) {
            let manifest = read_manifest(&dir)?;
            tracing::info!(bundle = %bundle.display(), dir = %dir.display(), "bundle already unpacked");
            return Ok(Unpacked {
                dir,
                digest: digest.to_owned(),
                manifest,
                reused: true,
            });
        }
    }

    let extracted = extract(bundle, &root)?;
    known.insert(
        key,
        extracted.fingerprint,
        extracted.unpacked.digest.clone(),
    );
    known.retain_complete(&root);
    known.save(&root, &fingerprints_path)?;
    Ok(extracted.unpacked)
}

struct Extracted {
    unpacked: Unpacked,
    /// Of the file actually read (from the open descriptor).
    fingerprint: Fingerprint,
}

/// The single streaming pass: hash, verify, extract into a partial directory, then publish it.
fn extract(bundle: &Path, root: &Path) -> Result<Extracted, UnpackError> {
    let open_err = |source| UnpackError::Open {
        path: bundle.to_owned(),
        source,
    };
    let file = File::open(bundle).map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    if !meta.is_file() {
        return Err(UnpackError::NotAFile {
            path: bundle.to_owned(),
        });
    }
    let before = Fingerprint::of(&meta);
    let reader = file.try_clone().map_err(io_err("read", bundle))?;
    let unpacked = extract_from(reader, bundle, before.size, root, || {
        let after = file.metadata().map_err(io_err("read", bundle))?;
        if Fingerprint::of(&after) != before {
            return Err(UnpackError::Changed {
                bundle: bundle.to_owned(),
            });
        }
        Ok(())
    })?;
    Ok(Extracted {
        unpacked,
        fingerprint: before,
    })
}

/// Verifies the stream read from `reader` (`size` bytes, named `bundle` in messages) into a
/// partial directory; once `check` agrees, publishes it under its content digest.
fn extract_from(
    reader: impl io::Read + Send + 'static,
    bundle: &Path,
    size: u64,
    root: &Path,
    check: impl FnOnce() -> Result<(), UnpackError>,
) -> Result<Unpacked, UnpackError> {
    // Every bundle, whole, split or a completed delta, is held to the free space: with
    // formatVersion 2 before anything is written.
    let limits = Limits {
        max_bytes: Some(available(root)?.saturating_sub(SPACE_MARGIN)),
    };
    let partial = Partial::create(root)?;
    let sink = DirSink::new(&partial.path).map_err(io_err("create", &partial.path))?;
    let mut sink = WorkerSink::spawn(sink).map_err(io_err("create", &partial.path))?;
    tracing::info!(bundle = %bundle.display(), size, "verifying and unpacking bundle");
    let reader = crate::progress::Counting::new(
        reader,
        crate::progress::bar(
            size,
            "{spinner} unpacking {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
        ),
    );
    let reader = Prefetch::spawn(reader).map_err(io_err("read", bundle))?;
    let verified = verify_limited(reader, &mut sink, limits);
    drop(sink);
    let report = verified.map_err(|source| match source {
        VerifyError::NoSpace { needed, limit } => UnpackError::NoSpace {
            dir: root.to_owned(),
            bundle: bundle.to_owned(),
            needed,
            available: limit,
        },
        source => UnpackError::Verify {
            bundle: bundle.to_owned(),
            source,
        },
    })?;
    check()?;
    let digest = report.content_digest;
    let dir = root.join(&digest);

    let reused = if is_complete(&dir, &digest) {
        // The same bundle under another name: keep the existing tree, drop the new copy.
        drop(partial);
        true
    } else {
        partial.publish(&dir, &digest)?;
        fsync_dir(root)?;
        false
    };
    tracing::info!(bundle = %bundle.display(), dir = %dir.display(), reused, "bundle unpacked");
    Ok(Unpacked {
        dir,
        digest,
        manifest: report.manifest,
        reused,
    })
}

/// Verifies and unpacks a bundle read from `reader` (e.g. the parts of a split bundle, read as
/// one stream) under `work_dir/bundles/<content digest>/`. `bundle` names it in messages;
/// `size` is its length (the free-space check). Nothing is fingerprinted: a second unpack of the
/// same content reuses the tree once its digest is known.
///
/// # Errors
///
/// See [`UnpackError`].
pub fn unpack_reader(
    reader: impl io::Read + Send + 'static,
    bundle: &Path,
    size: u64,
    work_dir: &Path,
) -> Result<Unpacked, UnpackError> {
    let root = work_dir.join(BUNDLES_DIR);
    fs::create_dir_all(&root).map_err(io_err("create", &root))?;
    let _lock = Lock::acquire(&root)?;
    remove_stale(&root)?;
    extract_from(reader, bundle, size, &root, || Ok(()))
}

/// Builds a tree with `fill` in a partial directory under `work_dir/bundles/` (with the unpack
/// lock held; `fill` is given the free-space limits every unpack is held to) and publishes it as `<digest>/` with its marker — or reuses a complete tree of
/// that digest without calling `fill`. `fill` must leave exactly the bundle's files there (a
/// delta bundle completed from the site); the caller vouches that their `SHA256SUMS` hashes to
/// `digest`.
///
/// # Errors
///
/// [`UnpackError::Fill`] with `fill`'s error, or an I/O error of the work directory.
pub fn publish_tree(
    work_dir: &Path,
    digest: &str,
    fill: impl FnOnce(&Path, Limits) -> Result<(), Box<dyn std::error::Error + Send + Sync>>,
) -> Result<Unpacked, UnpackError> {
    let root = work_dir.join(BUNDLES_DIR);
    fs::create_dir_all(&root).map_err(io_err("create", &root))?;
    let _lock = Lock::acquire(&root)?;
    remove_stale(&root)?;
    let dir = root.join(digest);
    if is_complete(&dir, digest) {
        let manifest = read_manifest(&dir)?;
        return Ok(Unpacked {
            dir,
            digest: digest.to_owned(),
            manifest,
            reused: true,
        });
    }
    let limits = Limits {
        max_bytes: Some(available(&root)?.saturating_sub(SPACE_MARGIN)),
    };
    let partial = Partial::create(&root)?;
    fill(&partial.path, limits).map_err(|source| UnpackError::Fill {
        digest: digest.to_owned(),
        source,
    })?;
    let manifest = read_manifest(&partial.path)?;
    partial.publish(&dir, digest)?;
    fsync_dir(&root)?;
    Ok(Unpacked {
        dir,
        digest: digest.to_owned(),
        manifest,
        reused: false,
    })
}

/// An exclusive `flock` on `bundles/.lock`, released when dropped (or when the process dies).
struct Lock {
    _file: File,
}

impl Lock {
    fn acquire(root: &Path) -> Result<Self, UnpackError> {
        use rustix::fs::{flock, FlockOperation};
        let path = root.join(LOCK);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("create", &path))?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                tracing::info!(lock = %path.display(), "waiting for another unpack to finish");
                flock(&file, FlockOperation::LockExclusive)
                    .map_err(|errno| io_err("lock", &path)(errno.into()))?;
            }
            Err(errno) => return Err(io_err("lock", &path)(errno.into())),
        }
        Ok(Self { _file: file })
    }
}

/// Removes `.partial-*` entries: with the lock held, they can only be left by a crashed run.
fn remove_stale(root: &Path) -> Result<(), UnpackError> {
    for entry in fs::read_dir(root).map_err(io_err("list", root))? {
        let entry = entry.map_err(io_err("list", root))?;
        if !entry
            .file_name()
            .to_string_lossy()
            .starts_with(PARTIAL_PREFIX)
        {
            continue;
        }
        let path = entry.path();
        let is_dir = entry
            .file_type()
            .map_err(io_err("inspect", &path))?
            .is_dir();
        tracing::info!(path = %path.display(), "removing what a crashed unpack left");
        let removed = if is_dir {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(io_err("remove", &path))?;
    }
    Ok(())
}

/// A `.partial-<pid>-<nanos>` path under `root`.
fn partial_path(root: &Path, suffix: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    root.join(format!(
        "{PARTIAL_PREFIX}{}-{nanos}{suffix}",
        std::process::id()
    ))
}

/// The extraction directory; removed on drop unless published.
struct Partial {
    path: PathBuf,
    published: bool,
}

impl Partial {
    fn create(root: &Path) -> Result<Self, UnpackError> {
        use std::os::unix::fs::DirBuilderExt;
        let path = partial_path(root, "");
        fs::DirBuilder::new()
            .mode(crate::private_dir::PRIVATE_DIR_MODE)
            .create(&path)
            .map_err(io_err("create", &path))?;
        Ok(Self {
            path,
            published: false,
        })
    }

    /// Syncs the tree, writes the marker and renames the directory to `dir`, replacing an
    /// incomplete directory found there.
    fn publish(mut self, dir: &Path, digest: &str) -> Result<(), UnpackError> {
        let handle = File::open(&self.path).map_err(io_err("open", &self.path))?;
        rustix::fs::syncfs(&handle).map_err(|errno| io_err("sync", &self.path)(errno.into()))?;
        let marker = self.path.join(MARKER);
        write_synced(&marker, format!("{digest}\n").as_bytes())?;
        match fs::symlink_metadata(dir) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(dir).map_err(io_err("remove", dir))?,
            Ok(_) => fs::remove_file(dir).map_err(io_err("remove", dir))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("inspect", dir)(e)),
        }
        fs::rename(&self.path, dir).map_err(io_err("rename", &self.path))?;
        self.published = true;
        Ok(())
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        if self.published {
            return;
        }
        // Best effort: a leftover is removed by the next run.
        if let Err(error) = fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), %error, "failed to remove a partial unpack");
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), UnpackError> {
    let mut file = File::create(path).map_err(io_err("create", path))?;
    file.write_all(bytes).map_err(io_err("write", path))?;
    file.sync_all().map_err(io_err("sync", path))
}

fn fsync_dir(dir: &Path) -> Result<(), UnpackError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync", dir))
}

/// A directory with a marker holding `digest`.
/// The bundle unpacked earlier under `work_dir/bundles/<digest>/` (what a cluster record names),
/// `None` when it is not there whole. Nothing is read but its `bundle.json`: the tree was
/// verified when it was unpacked.
pub fn unpacked(work_dir: &Path, digest: &str) -> Result<Option<Unpacked>, UnpackError> {
    if !kubexm_manifests::catalog::is_sha256_hex(digest) {
        return Ok(None);
    }
    let dir = work_dir.join(BUNDLES_DIR).join(digest);
    if !is_complete(&dir, digest) {
        return Ok(None);
    }
    let manifest = read_manifest(&dir)?;
    Ok(Some(Unpacked {
        dir,
        digest: digest.to_owned(),
        manifest,
        reused: true,
    }))
}

fn is_complete(dir: &Path, digest: &str) -> bool {
    fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
        && fs::read_to_string(dir.join(MARKER)).is_ok_and(|m| m.trim_end() == digest)
}

fn read_manifest(dir: &Path) -> Result<BundleManifest, UnpackError> {
    let path = dir.join(MANIFEST_PATH);
    let bytes = fs::read(&path).map_err(io_err("read", &path))?;
    serde_json::from_slice(&bytes).map_err(|source| UnpackError::Reuse {
        dir: dir.to_owned(),
        source,
    })
}

/// Bytes free for unprivileged users on the filesystem holding `dir`.
fn available(dir: &Path) -> Result<u64, UnpackError> {
    let st = rustix::fs::statvfs(dir).map_err(|errno| UnpackError::FreeSpace {
        dir: dir.to_owned(),
        source: errno.into(),
    })?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// What identifies a file's content without reading it. The ctime changes on any write (and
/// cannot be set by users), the inode on any replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Fingerprint {
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    dev: u64,
    ino: u64,
}

impl Fingerprint {
    fn of(meta: &fs::Metadata) -> Self {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Self {
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Record {
    fingerprint: Fingerprint,
    digest: String,
}

/// `fingerprints.json`: canonical bundle path → fingerprint and content digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Fingerprints {
    version: u32,
    bundles: BTreeMap<String, Record>,
}

impl Default for Fingerprints {
    fn default() -> Self {
        Self {
            version: FINGERPRINTS_VERSION,
            bundles: BTreeMap::new(),
        }
    }
}

impl Fingerprints {
    /// The record, or an empty one when missing or unreadable (it is only a cache).
    fn load(path: &Path) -> Self {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Self::default(),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring unreadable fingerprints");
                return Self::default();
            }
        };
        match serde_json::from_slice::<Self>(&bytes) {
            Ok(record) if record.version == FINGERPRINTS_VERSION => record,
            Ok(_) => Self::default(),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "ignoring unreadable fingerprints");
                Self::default()
            }
        }
    }

    /// The digest recorded for `key` if the fingerprint still matches and is well-formed.
    fn lookup(&self, key: &str, fingerprint: &Fingerprint) -> Option<&str> {
        self.bundles
            .get(key)
            .filter(|r| r.fingerprint == *fingerprint && is_digest(&r.digest))
            .map(|r| r.digest.as_str())
    }

    fn insert(&mut self, key: String, fingerprint: Fingerprint, digest: String) {
        self.bundles.insert(
            key,
            Record {
                fingerprint,
                digest,
            },
        );
    }

    /// Drops records whose unpacked directory is gone.
    fn retain_complete(&mut self, root: &Path) {
        self.bundles
            .retain(|_, r| is_digest(&r.digest) && is_complete(&root.join(&r.digest), &r.digest));
    }

    /// Writes a temporary file beside `path`, syncs it, then renames it over `path`.
    fn save(&self, root: &Path, path: &Path) -> Result<(), UnpackError> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| io_err("write", path)(e.into()))?;
        let tmp = partial_path(root, "-fingerprints.json");
        if let Err(e) = write_synced(&tmp, &bytes)
            .and_then(|()| fs::rename(&tmp, path).map_err(io_err("rename", &tmp)))
        {
            // Best effort: a leftover is removed by the next run.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        fsync_dir(root)
    }
}

fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_free_space() {
        assert!(available(Path::new(".")).expect("statvfs") > 0);
        assert!(matches!(
            available(Path::new("/nonexistent/kubexm")),
            Err(UnpackError::FreeSpace { .. })
        ));
    }

    #[test]
    fn fingerprints_round_trip_and_tolerate_garbage() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join(FINGERPRINTS);
        assert_eq!(Fingerprints::load(&path), Fingerprints::default());
        let fp = Fingerprint {
            size: 1,
            mtime_ns: 2,
            ctime_ns: 3,
            dev: 4,
            ino: 5,
        };
        let digest = "a".repeat(64);
        let mut known = Fingerprints::default();
        known.insert("/b".into(), fp, digest.clone());
        known.insert("/bad".into(), fp, "../../etc".into());
        known.save(tmp.path(), &path).expect("save");
        let loaded = Fingerprints::load(&path);
        assert_eq!(loaded, known);
        assert_eq!(loaded.lookup("/b", &fp), Some(digest.as_str()));
        assert_eq!(loaded.lookup("/b", &Fingerprint { size: 9, ..fp }), None);
        assert_eq!(loaded.lookup("/bad", &fp), None, "digest must be hex");
        assert_eq!(loaded.lookup("/other", &fp), None);
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(tmp.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, [FINGERPRINTS]);

        fs::write(&path, b"{not json").expect("write");
        assert_eq!(Fingerprints::load(&path), Fingerprints::default());
    }

    #[test]
    fn recognises_digests() {
        assert!(is_digest(&"0123456789abcdef".repeat(4)));
        assert!(!is_digest(&"0123456789ABCDEF".repeat(4)));
        assert!(!is_digest("abc"));
    }
}
