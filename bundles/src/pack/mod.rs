//! Writes a bundle: a reproducible `.tar.zst` (format in `bundles/README.md`).
//!
//! Content is streamed from disk into the zstd encoder and hashed on the way (except
//! [`Source::Stored`] files, verified when they were stored); the output is written to
//! `<out>.partial-<pid>`, fsynced (writeback starts while packing) and renamed into place only
//! when complete.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::check::{self, ManifestProblem};
use crate::hash;
use crate::manifest::{BundleManifest, MANIFEST_PATH, SUMS_PATH};
use crate::{pins, space, sums};

mod chunks;
mod error;
mod plan;
mod stream;

pub use error::PackError;

/// zstd level used unless told otherwise.
pub const DEFAULT_LEVEL: i32 = 3;
/// Mode of directory entries.
pub const DIR_MODE: u32 = 0o755;
/// Mode of regular files.
pub const FILE_MODE: u32 = 0o644;
/// Mode of executables.
pub const EXEC_MODE: u32 = 0o755;

/// Where an entry's content comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file on disk, streamed and hashed while packing: it must match `sha256` when given.
    File(PathBuf),
    /// A file of a content-addressed store whose content was verified against the entry's
    /// `sha256` (required) when it was stored, and is never modified in place: streamed without
    /// hashing it again, only its size is checked. `SHA256SUMS` lists the sum all the same, so
    /// a store corrupted behind the builder's back is still caught by `verify` and unpack.
    Stored(PathBuf),
    /// Content in memory.
    Bytes(Vec<u8>),
}

/// One regular file of the bundle. Directories are derived from the paths.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Path inside the bundle (`files/etcd/v3.5.16/amd64/etcd-v3.5.16-linux-amd64.tar.gz`).
    pub path: String,
    /// Content.
    pub source: Source,
    /// Lowercase hex sha256 when already known (content-addressed cache); checked while packing
    /// except for [`Source::Stored`], which requires it.
    pub sha256: Option<String>,
    /// [`FILE_MODE`] or [`EXEC_MODE`].
    pub mode: u32,
}

/// How to pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackOptions {
    /// zstd level ([`DEFAULT_LEVEL`]).
    pub level: i32,
    /// zstd workers; 0 means one per core. The output does not depend on this number.
    pub threads: u32,
    /// mtime of every entry (`SOURCE_DATE_EPOCH`, else 0).
    pub mtime: u64,
}

impl Default for PackOptions {
    fn default() -> Self {
        Self {
            level: DEFAULT_LEVEL,
            threads: 0,
            mtime: 0,
        }
    }
}

impl PackOptions {
    /// Defaults, with `mtime` from `SOURCE_DATE_EPOCH` when set.
    ///
    /// # Errors
    ///
    /// [`PackError::SourceDateEpoch`] when the variable is set but not a number of seconds.
    pub fn from_env() -> Result<Self, PackError> {
        let mtime = match std::env::var_os("SOURCE_DATE_EPOCH") {
            None => 0,
            Some(value) => value
                .to_str()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| PackError::SourceDateEpoch {
                    value: value.to_string_lossy().into_owned(),
                })?,
        };
        Ok(Self {
            mtime,
            ..Self::default()
        })
    }
}

/// What [`pack`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackReport {
    /// The bundle.
    pub path: PathBuf,
    /// Content bytes of all regular files, `bundle.json` and `SHA256SUMS` included.
    pub bytes_in: u64,
    /// Size of the `.tar.zst`.
    pub bytes_out: u64,
    /// Tar entries: `bundle.json`, `SHA256SUMS`, directories and files.
    pub entries: usize,
    /// Lowercase hex sha256 of the `.tar.zst`.
    pub sha256: String,
}

/// Writes `manifest` and `entries` to `out` as a bundle (see `bundles/README.md`).
///
/// The same inputs and options always give the same bytes.
///
/// # Errors
///
/// Unsafe, reserved, duplicate or conflicting paths, bad modes or sums, unreadable sources,
/// content that does not match its sum, too little free space, or a failed write.
pub fn pack(
    out: &Path,
    manifest: &BundleManifest,
    entries: Vec<Entry>,
    opts: &PackOptions,
) -> Result<PackReport, PackError> {
    let (dir, partial) = output_paths(out)?;
    let Layout {
        manifest,
        files,
        dirs,
        manifest_json,
    } = layout(manifest, entries)?;
    let manifest = &manifest;

    let sums_len: usize = files
        .iter()
        .map(|f| f.path.len())
        .chain([MANIFEST_PATH.len()])
        .map(|len| 64 + 2 + len + 1)
        .sum();
    let needed = space::upper_bound(
        files
            .iter()
            .map(|f| (f.path.len(), f.size))
            .chain(dirs.iter().map(|d| (d.len() + 1, 0)))
            .chain([
                (MANIFEST_PATH.len(), manifest_json.len() as u64),
                (SUMS_PATH.len(), sums_len as u64),
            ]),
    );
    space::ensure(&dir, needed, space::available(&dir)?)?;

    let sums = sums_of(manifest, &files, &manifest_json)?;
    let sums_text = sums::render(&sums);

    let guard = Partial {
        path: partial,
        keep: false,
    };
    let written = stream::write(
        &guard.path,
        opts,
        &manifest_json,
        &sums_text,
        &dirs,
        files,
        &sums,
    )?;
    fs_err::rename(&guard.path, out).map_err(|source| PackError::Write {
        path: out.to_owned(),
        source,
    })?;
    disarm(guard);
    sync_dir(&dir).map_err(|source| PackError::Write {
        path: dir.clone(),
        source,
    })?;
    Ok(PackReport {
        path: out.to_owned(),
        ..written
    })
}

/// The files (checked and sorted), the derived directories and `bundle.json`'s bytes: what
/// [`pack`] writes and [`plan_bundle`] describes.
struct Layout {
    /// The manifest with every entry's size pinned (formatVersion 2).
    manifest: BundleManifest,
    files: Vec<plan::Planned>,
    dirs: std::collections::BTreeSet<String>,
    manifest_json: Vec<u8>,
}

fn layout(manifest: &BundleManifest, entries: Vec<Entry>) -> Result<Layout, PackError> {
    if manifest.format_version != crate::FORMAT_VERSION {
        return Err(PackError::Manifest(ManifestProblem::FormatVersion {
            found: manifest.format_version.to_string(),
            expected: crate::FORMAT_VERSION,
        }));
    }
    let files = plan::plan(entries)?;
    let dirs = plan::directories(&files)?;
    // formatVersion 2: every entry's size is pinned in bundle.json.
    let mut manifest = manifest.clone();
    manifest.sizes = files.iter().map(|f| (f.path.clone(), f.size)).collect();
    let mut manifest_json = serde_json::to_vec_pretty(&manifest).map_err(PackError::Serialize)?;
    manifest_json.push(b'\n');
    Ok(Layout {
        manifest,
        files,
        dirs,
        manifest_json,
    })
}

/// Every file's sum (hashing the sources whose sum is not known), checked against the
/// manifest, with `bundle.json`'s: the content of `SHA256SUMS`.
fn sums_of(
    manifest: &BundleManifest,
    files: &[plan::Planned],
    manifest_json: &[u8],
) -> Result<sums::Sums, PackError> {
    let mut sums = sums::Sums::new();
    for file in files {
        let sum = plan::first_pass_sum(file)?;
        sums.insert(file.path.clone(), sum);
    }
    check::manifest(manifest, &sums).map_err(PackError::Manifest)?;
    pins::pins(manifest, &sums).map_err(PackError::Manifest)?;
    sums.insert(MANIFEST_PATH.to_owned(), hash::sha256_hex(manifest_json));
    Ok(sums)
}

/// A bundle as [`pack`] would write it for the same inputs, without writing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBundle {
    /// `bundle.json`, byte for byte.
    pub manifest_json: Vec<u8>,
    /// Every regular file but `SHA256SUMS` (`bundle.json` included), sorted by path.
    pub files: Vec<PlannedFile>,
}

/// One regular file of a [`PlannedBundle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// Path in the bundle.
    pub path: String,
    /// Its sha256.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// Its mode.
    pub mode: u32,
}

/// What [`pack`] would write for `manifest` and `entries` — `bundle.json`'s bytes and every
/// file's path, sum, size and mode — through the same code path, without writing anything
/// (what a delta bundle is planned against).
///
/// # Errors
///
/// As [`pack`], but for the output and free space.
pub fn plan_bundle(
    manifest: &BundleManifest,
    entries: Vec<Entry>,
) -> Result<PlannedBundle, PackError> {
    let Layout {
        manifest,
        files,
        manifest_json,
        ..
    } = layout(manifest, entries)?;
    let sums = sums_of(&manifest, &files, &manifest_json)?;
    let mut planned: Vec<PlannedFile> = files
        .iter()
        .map(|f| PlannedFile {
            path: f.path.clone(),
            sha256: sums.get(&f.path).cloned().unwrap_or_default(),
            size: f.size,
            mode: f.mode,
        })
        .collect();
    planned.push(PlannedFile {
        path: MANIFEST_PATH.to_owned(),
        sha256: hash::sha256_hex(&manifest_json),
        size: manifest_json.len() as u64,
        mode: FILE_MODE,
    });
    planned.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(PlannedBundle {
        manifest_json,
        files: planned,
    })
}

/// The output directory and the partial file beside `out`.
fn output_paths(out: &Path) -> Result<(PathBuf, PathBuf), PackError> {
    let invalid = || PackError::InvalidOutput {
        path: out.to_owned(),
    };
    let name = out.file_name().ok_or_else(invalid)?;
    let dir = match out.parent().ok_or_else(invalid)? {
        p if p.as_os_str().is_empty() => PathBuf::from("."),
        p => p.to_owned(),
    };
    let mut partial: OsString = name.to_owned();
    partial.push(format!(".partial-{}", std::process::id()));
    Ok((dir.clone(), dir.join(partial)))
}

/// Removes the partial output unless kept.
struct Partial {
    path: PathBuf,
    keep: bool,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: the error being returned matters more.
            let _ = fs_err::remove_file(&self.path);
        }
    }
}

fn disarm(mut guard: Partial) {
    guard.keep = true;
}

/// Makes the rename durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs_err::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_partial_beside_the_output() {
        let (dir, partial) = output_paths(Path::new("b.tar.zst")).expect("paths");
        assert_eq!(dir, Path::new("."));
        assert_eq!(
            partial,
            Path::new(".").join(format!("b.tar.zst.partial-{}", std::process::id()))
        );
        assert!(output_paths(Path::new("/")).is_err());
    }
}
