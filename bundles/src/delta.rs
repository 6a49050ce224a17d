//! Delta bundles: only what an air-gapped site does not already hold.
//!
//! A site describes what it holds in a **site inventory** (`kubexm-install inventory` writes
//! it): the sha256 of every file of every bundle it unpacked, and the blobs its registry serves.
//! `kubexm-build bundle --have site-inventory.json` then packs a **delta bundle**: an ordinary
//! bundle (same format, verified and signed the same way) whose `bundle.json` lists no files or
//! images, holding
//!
//! ```text
//! delta.json                  the target: its SHA256SUMS and every entry (path, sha256, size,
//!                             mode, where it comes from)
//! delta/sha256/<hex>          the content of every target entry the site does not hold, once
//! ```
//!
//! The installer refuses a delta whose base is absent, naming each missing entry, before it
//! unpacks anything. Otherwise it unpacks the delta and rebuilds the target tree — every entry
//! from the delta, from an unpacked bundle, or fetched from the site's registry, each checked
//! against its sha256 — so the tree and its content digest are exactly those of the full bundle.
//!
//! The inventory (`SiteInventory`, JSON, unknown fields refused):
//!
//! ```json
//! {
//!   "kubexmInventory": 1,
//!   "created": 1700000000,
//!   "bundles": ["<content digest>", …],
//!   "files": { "<sha256>": <size>, … },
//!   "registry": { "host": "10.0.0.9:5000",
//!                 "blobs": { "sha256:<hex>": { "size": 1234, "repository": "kubexm/pause" }, … } }
//! }
//! ```

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use kubexm_manifests::display::{Untrusted, UntrustedMax};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::hash::{is_sha256_hex, sha256_hex};
use crate::manifest::{MANIFEST_PATH, SUMS_PATH};
use crate::pack::PlannedBundle;
use crate::path;
use crate::sums;
use crate::verify::{verify_tar, DirSink, Limits, Sink, VerifyError, VerifyReport};

/// The delta's description of its target.
pub const DELTA_PATH: &str = "delta.json";
/// Where a delta holds content, by sha256.
pub const STORE_DIR: &str = "delta/sha256";
/// `kubexmDelta` version.
pub const DELTA_VERSION: u32 = 1;
/// `kubexmInventory` version.
pub const INVENTORY_VERSION: u32 = 1;
/// Largest inventory read.
const MAX_INVENTORY: u64 = 256 << 20;

/// What an air-gapped site holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SiteInventory {
    /// [`INVENTORY_VERSION`].
    pub kubexm_inventory: u32,
    /// When it was taken (seconds since the epoch).
    pub created: u64,
    /// Content digests of the unpacked bundles.
    pub bundles: Vec<String>,
    /// sha256 → size of every file of those bundles.
    pub files: BTreeMap<String, u64>,
    /// What the site's registry serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryHoldings>,
}

/// Blobs a registry serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistryHoldings {
    /// `host[:port]`.
    pub host: String,
    /// `sha256:<hex>` → where it was found.
    pub blobs: BTreeMap<String, BlobAt>,
}

/// A blob in a registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlobAt {
    /// Size in bytes.
    pub size: u64,
    /// A repository that serves it.
    pub repository: String,
}

/// Where an entry of the target comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntrySource {
    /// `delta/sha256/<hex>` of the delta.
    Delta,
    /// A file of a bundle the site unpacked.
    Site,
    /// A blob of the site's registry (`repository`).
    Registry,
}

/// One regular file of the target bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeltaEntry {
    /// Path in the target.
    pub path: String,
    /// Its sha256.
    pub sha256: String,
    /// Its size.
    pub size: u64,
    /// 0644 or 0755.
    pub mode: u32,
    /// Where the installer takes it from.
    pub source: EntrySource,
    /// For [`EntrySource::Registry`]: a repository that serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
}

/// `delta.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeltaManifest {
    /// [`DELTA_VERSION`].
    pub kubexm_delta: u32,
    /// Content digest of the target (sha256 of `targetSums`).
    pub target_content_digest: String,
    /// The target's `SHA256SUMS`.
    pub target_sums: String,
    /// sha256 of the site inventory the delta was made against.
    pub inventory_sha256: String,
    /// Every regular file of the target but `SHA256SUMS`, sorted by path.
    pub entries: Vec<DeltaEntry>,
}

/// A problem with an inventory, a delta or a rebuild; each names the file or entry.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeltaError {
    /// The inventory cannot be read.
    #[error("cannot read the site inventory `{}`", shown(path))]
    ReadInventory {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The inventory or `delta.json` is malformed.
    #[error("`{}` is not valid: {}", UntrustedMax(.what, 1000), UntrustedMax(.reason, 1000))]
    Invalid {
        /// `delta.json` or the inventory file.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// Entries the site does not hold.
    #[error("this delta bundle needs {} entr{} the site does not hold (made against another base):\n{}", .missing.len(), if .missing.len() == 1 { "y" } else { "ies" }, list(.missing))]
    BaseMissing {
        /// `path (sha256 …)` of each.
        missing: Vec<String>,
    },
    /// A source file for an entry does not match.
    #[error("`{}`: its source `{}` has sha256 {actual}, expected {}", Untrusted(.path), shown(from), Untrusted(.expected))]
    Mismatch {
        /// Entry path.
        path: String,
        /// Where it was taken from.
        from: PathBuf,
        /// Expected.
        expected: String,
        /// Found.
        actual: String,
    },
    /// A source file for an entry has another size than the entry.
    #[error("`{}`: its source `{}` has {actual} bytes, expected {expected}", Untrusted(.path), shown(from))]
    Size {
        /// Entry path.
        path: String,
        /// Where it was taken from.
        from: PathBuf,
        /// Expected.
        expected: u64,
        /// Found.
        actual: u64,
    },
    /// The rebuilt bundle breaks a rule of the bundle format.
    #[error("the bundle rebuilt from the delta is refused")]
    Verify(#[source] Box<VerifyError>),
    /// The rebuilt bundle is another bundle than the delta's target.
    #[error("the rebuilt bundle has content digest sha256:{actual}, the delta targets sha256:{}", Untrusted(.expected))]
    Digest {
        /// The target's.
        expected: String,
        /// The rebuilt one's.
        actual: String,
    },
    /// Reading or writing failed.
    #[error("`{}`", shown(path))]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// A path from a bundle, an index or the command line, escaped for a message.
fn shown(path: &Path) -> UntrustedMax<std::borrow::Cow<'_, str>> {
    UntrustedMax(path.to_string_lossy(), 1000)
}

fn list(items: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut out: Vec<String> = items
        .iter()
        .take(SHOWN)
        .map(|m| format!("  - {}", UntrustedMax(m, 1000)))
        .collect();
    if items.len() > SHOWN {
        out.push(format!("  … and {} more", items.len() - SHOWN));
    }
    out.join("\n")
}

impl SiteInventory {
    /// Reads and checks an inventory; also returns the sha256 of its bytes.
    ///
    /// # Errors
    ///
    /// [`DeltaError::ReadInventory`] or [`DeltaError::Invalid`].
    pub fn load(path: &Path) -> Result<(Self, String), DeltaError> {
        let read = |source| DeltaError::ReadInventory {
            path: path.to_owned(),
            source,
        };
        let file = crate::regular::open(path).map_err(read)?;
        let mut bytes = Vec::new();
        file.take(MAX_INVENTORY + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        let invalid = |reason: String| DeltaError::Invalid {
            what: path.display().to_string(),
            reason,
        };
        if bytes.len() as u64 > MAX_INVENTORY {
            return Err(invalid(format!("larger than {MAX_INVENTORY} bytes")));
        }
        let inv: SiteInventory =
            serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        inv.check().map_err(invalid)?;
        Ok((inv, sha256_hex(&bytes)))
    }

    fn check(&self) -> Result<(), String> {
        if self.kubexm_inventory != INVENTORY_VERSION {
            return Err(format!(
                "kubexmInventory is {}, this build reads {INVENTORY_VERSION}",
                self.kubexm_inventory
            ));
        }
        for sum in self.files.keys().chain(&self.bundles) {
            if !is_sha256_hex(sum) {
                return Err(format!("`{sum}` is not a sha256"));
            }
        }
        if let Some(reg) = &self.registry {
            for (digest, at) in &reg.blobs {
                let ok = digest.strip_prefix("sha256:").is_some_and(is_sha256_hex);
                if !ok {
                    return Err(format!("registry blob `{digest}` is not sha256:<hex>"));
                }
                if !is_repository(&at.repository) {
                    return Err(format!("repository `{}` is not valid", at.repository));
                }
            }
        }
        Ok(())
    }

    /// Where the site holds content with this sha256 (files first, then the registry).
    pub fn holds(&self, sha256: &str) -> Option<(EntrySource, Option<String>)> {
        if self.files.contains_key(sha256) {
            return Some((EntrySource::Site, None));
        }
        self.registry
            .as_ref()
            .and_then(|r| r.blobs.get(&format!("sha256:{sha256}")))
            .map(|at| (EntrySource::Registry, Some(at.repository.clone())))
    }

    /// JSON, pretty-printed with a final newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

/// Parses a `SHA256SUMS` file (path → sha256), strictly, as `verify` does.
///
/// # Errors
///
/// [`DeltaError::Invalid`] naming the problem.
pub fn parse_sums(bytes: &[u8]) -> Result<BTreeMap<String, String>, DeltaError> {
    sums::parse(bytes).map_err(|e| DeltaError::Invalid {
        what: SUMS_PATH.to_owned(),
        reason: e.to_string(),
    })
}

/// A repository path: lowercase components of `[a-z0-9._-]` separated by `/`, at most 255
/// bytes (the distribution spec's bound on a repository name).
fn is_repository(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
        })
}

/// Plans a delta for the bundle `target` ([`crate::pack::plan_bundle`]: every file but
/// `SHA256SUMS`, `bundle.json` included): for each entry whether the site holds it. Returns
/// `delta.json` and the sha256s the delta must carry.
pub fn plan(
    target: &PlannedBundle,
    inventory: &SiteInventory,
    inventory_sha256: &str,
) -> (DeltaManifest, Vec<String>) {
    let sums: sums::Sums = target
        .files
        .iter()
        .map(|f| (f.path.clone(), f.sha256.clone()))
        .collect();
    let target_sums = String::from_utf8_lossy(&sums::render(&sums)).into_owned();
    let mut carry: Vec<String> = Vec::new();
    let entries = target
        .files
        .iter()
        .map(|f| {
            let (source, repository) = inventory
                .holds(&f.sha256)
                .unwrap_or((EntrySource::Delta, None));
            if source == EntrySource::Delta && !carry.contains(&f.sha256) {
                carry.push(f.sha256.clone());
            }
            DeltaEntry {
                path: f.path.clone(),
                sha256: f.sha256.clone(),
                size: f.size,
                mode: f.mode,
                source,
                repository,
            }
        })
        .collect();
    let manifest = DeltaManifest {
        kubexm_delta: DELTA_VERSION,
        target_content_digest: sha256_hex(target_sums.as_bytes()),
        target_sums,
        inventory_sha256: inventory_sha256.to_owned(),
        entries,
    };
    (manifest, carry)
}

impl DeltaManifest {
    /// JSON, pretty-printed with a final newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Parses and checks `delta.json`: the entries are exactly the target's sums, paths are safe,
    /// modes are 0644/0755, registry entries name a repository.
    ///
    /// # Errors
    ///
    /// [`DeltaError::Invalid`] naming the first problem.
    pub fn parse(bytes: &[u8]) -> Result<Self, DeltaError> {
        let invalid = |reason: String| DeltaError::Invalid {
            what: DELTA_PATH.to_owned(),
            reason,
        };
        let m: DeltaManifest = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
        if m.kubexm_delta != DELTA_VERSION {
            return Err(invalid(format!(
                "kubexmDelta is {}, this build reads {DELTA_VERSION}",
                m.kubexm_delta
            )));
        }
        if !is_sha256_hex(&m.inventory_sha256) {
            return Err(invalid(
                "inventorySha256 is not 64 lowercase hex digits".into(),
            ));
        }
        if sha256_hex(m.target_sums.as_bytes()) != m.target_content_digest {
            return Err(invalid(
                "targetContentDigest is not the sha256 of targetSums".into(),
            ));
        }
        let sums = sums::parse(m.target_sums.as_bytes()).map_err(|e| invalid(e.to_string()))?;
        if sums.len() != m.entries.len() {
            return Err(invalid(format!(
                "targetSums lists {} files, entries {}",
                sums.len(),
                m.entries.len()
            )));
        }
        for (e, (path, sum)) in m.entries.iter().zip(&sums) {
            if &e.path != path || &e.sha256 != sum {
                return Err(invalid(format!(
                    "entry `{}` does not match targetSums",
                    e.path
                )));
            }
            if e.path == SUMS_PATH || path::check(&e.path).is_err() {
                return Err(invalid(format!("entry path `{}` is not allowed", e.path)));
            }
            if e.mode != 0o644 && e.mode != 0o755 {
                return Err(invalid(format!("entry `{}` has mode {:o}", e.path, e.mode)));
            }
            match (e.source, &e.repository) {
                (EntrySource::Registry, Some(r)) if is_repository(r) => {}
                (EntrySource::Registry, _) => {
                    return Err(invalid(format!(
                        "registry entry `{}` names no valid repository",
                        e.path
                    )))
                }
                (_, None) => {}
                (_, Some(_)) => {
                    return Err(invalid(format!(
                        "entry `{}` names a repository but is not from the registry",
                        e.path
                    )))
                }
            }
        }
        Ok(m)
    }

    /// Entries whose content the delta does not carry.
    pub fn from_site(&self) -> impl Iterator<Item = &DeltaEntry> {
        self.entries
            .iter()
            .filter(|e| e.source != EntrySource::Delta)
    }

    /// The `path (sha256 …)` of each site entry `have` says is absent.
    pub fn missing(&self, have: impl Fn(&DeltaEntry) -> bool) -> Vec<String> {
        self.from_site()
            .filter(|e| !have(e))
            .map(|e| {
                let at = match (&e.source, &e.repository) {
                    (EntrySource::Registry, Some(r)) => format!(" in registry repository {r}"),
                    _ => String::new(),
                };
                format!("{} (sha256 {}, {} bytes{at})", e.path, e.sha256, e.size)
            })
            .collect()
    }
}

/// Rebuilds the target tree into `out` (an empty directory) with no space limit: see
/// [`rebuild_into`].
///
/// # Errors
///
/// As [`rebuild_into`].
pub fn rebuild(
    manifest: &DeltaManifest,
    delta_root: &Path,
    out: &Path,
    locate: &dyn Fn(&DeltaEntry) -> Option<PathBuf>,
) -> Result<VerifyReport, DeltaError> {
    let missing = manifest.missing(|e| locate(e).is_some());
    if !missing.is_empty() {
        return Err(DeltaError::BaseMissing { missing });
    }
    let mut sink = DirSink::new(out).map_err(|source| DeltaError::Io {
        path: out.to_owned(),
        source,
    })?;
    rebuild_into(manifest, delta_root, &mut sink, Limits::default(), locate)
}

/// Rebuilds the target bundle: each entry taken from the delta's store
/// (`delta_root/delta/sha256/<hex>`) or from the file `locate` returns (read no further than
/// the entry's size, its sum checked), streamed as the target's tar stream (`bundle.json`,
/// `SHA256SUMS`, the other files) through the same verifier as any bundle
/// ([`crate::verify::verify_tar`]: pinned sizes, sums, paths, the layout closure, `limits`)
/// into `sink`. The result's content digest must be the target's.
///
/// # Errors
///
/// [`DeltaError::BaseMissing`] when `locate` finds no source for site entries (all named,
/// before anything is written), [`DeltaError::Mismatch`] or [`DeltaError::Size`] when a source
/// does not match, [`DeltaError::Verify`] when the rebuilt bundle breaks a rule of the format,
/// [`DeltaError::Digest`], [`DeltaError::Io`].
pub fn rebuild_into(
    manifest: &DeltaManifest,
    delta_root: &Path,
    sink: &mut dyn Sink,
    limits: Limits,
    locate: &dyn Fn(&DeltaEntry) -> Option<PathBuf>,
) -> Result<VerifyReport, DeltaError> {
    let missing = manifest.missing(|e| locate(e).is_some());
    if !missing.is_empty() {
        return Err(DeltaError::BaseMissing { missing });
    }
    let mut sources: Vec<(&DeltaEntry, PathBuf)> = Vec::with_capacity(manifest.entries.len());
    for e in &manifest.entries {
        let from = match e.source {
            EntrySource::Delta => delta_root.join(STORE_DIR).join(&e.sha256),
            _ => locate(e).ok_or_else(|| DeltaError::BaseMissing {
                missing: vec![e.path.clone()],
            })?,
        };
        sources.push((e, from));
    }
    // The order every bundle has: bundle.json, SHA256SUMS, then the rest.
    sources.sort_by_key(|(e, _)| (e.path != MANIFEST_PATH, e.path.clone()));
    let (reader, writer) = channel_pipe();
    std::thread::scope(|scope| {
        let producer = scope.spawn(|| write_tar(writer, &manifest.target_sums, &sources));
        let verified = verify_tar(io::BufReader::with_capacity(1 << 20, reader), sink, limits);
        let produced = producer.join().unwrap_or(Err(Some(DeltaError::Invalid {
            what: DELTA_PATH.to_owned(),
            reason: "the rebuild stopped unexpectedly".to_owned(),
        })));
        match (produced, verified) {
            // A source's own fault names the source.
            (Err(Some(e)), _) => Err(e),
            (_, Err(e)) => Err(DeltaError::Verify(Box::new(e))),
            (Err(None), Ok(_)) => Err(DeltaError::Invalid {
                what: DELTA_PATH.to_owned(),
                reason: "the rebuilt stream ended early".to_owned(),
            }),
            (Ok(()), Ok(report)) if report.content_digest != manifest.target_content_digest => {
                Err(DeltaError::Digest {
                    expected: manifest.target_content_digest.clone(),
                    actual: report.content_digest,
                })
            }
            (Ok(()), Ok(report)) => Ok(report),
        }
    })
}

/// Writes the target's tar stream into `out`. `Err(None)`: the verifier stopped reading (its
/// error is the one to report); `Err(Some(_))`: a source is at fault.
fn write_tar(
    out: impl Write,
    target_sums: &str,
    sources: &[(&DeltaEntry, PathBuf)],
) -> Result<(), Option<DeltaError>> {
    let mut tar = tar::Builder::new(io::BufWriter::with_capacity(1 << 20, out));
    // bundle.json (sorted first when the target has one), SHA256SUMS, the rest.
    let head = usize::from(
        sources
            .first()
            .is_some_and(|(e, _)| e.path == MANIFEST_PATH),
    );
    let (manifest, rest) = sources.split_at(head);
    for (e, from) in manifest {
        append_source(&mut tar, e, from)?;
    }
    let sums = target_sums.as_bytes();
    append(&mut tar, SUMS_PATH, 0o644, sums.len() as u64, sums).map_err(|_| None)?;
    for (e, from) in rest {
        append_source(&mut tar, e, from)?;
    }
    tar.into_inner()
        .and_then(|mut w| w.flush())
        .map_err(|_| None)
}

/// An in-process pipe (a bounded channel of chunks): the writer blocks while the reader is
/// behind; writing fails once the reader is gone, reading ends once the writer is gone.
fn channel_pipe() -> (ChannelReader, ChannelWriter) {
    let (tx, rx) = std::sync::mpsc::sync_channel(4);
    (
        ChannelReader {
            rx,
            chunk: Vec::new(),
            at: 0,
        },
        ChannelWriter { tx },
    )
}

struct ChannelWriter {
    tx: std::sync::mpsc::SyncSender<Vec<u8>>,
}

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx
            .send(buf.to_vec())
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct ChannelReader {
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Appends entry `e` read from `from`: no further than its size, its size and sum checked.
fn append_source<W: Write>(
    tar: &mut tar::Builder<W>,
    e: &DeltaEntry,
    from: &Path,
) -> Result<(), Option<DeltaError>> {
    let io_err = |source| {
        Some(DeltaError::Io {
            path: from.to_owned(),
            source,
        })
    };
    let size_err = |actual| {
        Some(DeltaError::Size {
            path: e.path.clone(),
            from: from.to_owned(),
            expected: e.size,
            actual,
        })
    };
    let input = crate::regular::open(from).map_err(io_err)?;
    let actual_size = input.metadata().map_err(io_err)?.len();
    if actual_size != e.size {
        return Err(size_err(actual_size));
    }
    let mut hashed = HashRead {
        inner: input.take(e.size),
        hasher: Sha256::new(),
        read: 0,
        failed: None,
    };
    let written = append(tar, &e.path, e.mode, e.size, &mut hashed);
    if let Some(source) = hashed.failed.take() {
        return Err(io_err(source));
    }
    written.map_err(|_| None)?;
    if hashed.read != e.size {
        return Err(size_err(hashed.read));
    }
    let actual = hex::encode(hashed.hasher.finalize());
    if actual != e.sha256 {
        return Err(Some(DeltaError::Mismatch {
            path: e.path.clone(),
            from: from.to_owned(),
            expected: e.sha256.clone(),
            actual,
        }));
    }
    Ok(())
}

fn append<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    mode: u32,
    size: u64,
    data: impl Read,
) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(mode);
    header.set_mtime(0);
    tar.append_data(&mut header, path, data)
}

/// Hashes and counts what passes through; keeps a read error of the source apart from the
/// writer's.
struct HashRead<R> {
    inner: R,
    hasher: Sha256,
    read: u64,
    failed: Option<io::Error>,
}

impl<R: Read> Read for HashRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.hasher.update(&buf[..n]);
                self.read += n as u64;
                Ok(n)
            }
            Err(e) => {
                let shown = io::Error::new(e.kind(), e.to_string());
                self.failed = Some(e);
                Err(shown)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::manifest::BundleManifest;
    use crate::pack::{plan_bundle, Entry, Source, FILE_MODE};

    /// The bundle `pack` would write with `files` (path, content) and an empty manifest.
    fn planned(files: &[(&str, &[u8])]) -> PlannedBundle {
        let manifest = BundleManifest {
            files: vec![],
            ..crate::check::tests::bundle()
        };
        let entries = files
            .iter()
            .map(|(path, content)| Entry {
                path: (*path).to_owned(),
                source: Source::Bytes(content.to_vec()),
                sha256: None,
                mode: FILE_MODE,
            })
            .collect();
        plan_bundle(&manifest, entries).expect("plan")
    }

    /// Writes what the delta carries into its store under `droot`.
    fn store(droot: &Path, target: &PlannedBundle, contents: &[&[u8]]) {
        std::fs::create_dir_all(droot.join(STORE_DIR)).expect("mkdir");
        for c in contents
            .iter()
            .copied()
            .chain([target.manifest_json.as_slice()])
        {
            std::fs::write(droot.join(STORE_DIR).join(sha256_hex(c)), c).expect("w");
        }
    }

    #[test]
    fn plans_parses_and_rebuilds() {
        let dir = tempfile::tempdir().expect("tmp");
        let old = dir.path().join("old");
        std::fs::create_dir_all(old.join("files")).expect("mkdir");
        std::fs::write(old.join("files/a"), b"same").expect("write");
        let mut inv = SiteInventory {
            kubexm_inventory: 1,
            ..SiteInventory::default()
        };
        inv.files.insert(sha256_hex(b"same"), 4);
        let target = planned(&[("files/a", b"same"), ("files/b", b"new")]);
        let (delta, carry) = plan(&target, &inv, &"0".repeat(64));
        assert_eq!(carry.len(), 2, "files/b and bundle.json");
        assert_eq!(delta.from_site().count(), 1);
        let parsed = DeltaManifest::parse(&delta.to_json()).expect("parses");
        assert_eq!(parsed, delta);

        // The delta's store holds what the site lacks.
        let droot = dir.path().join("delta");
        store(&droot, &target, &[b"new"]);
        let out = dir.path().join("out");
        let site = old.join("files/a");
        let report = rebuild(&parsed, &droot, &out, &|_| Some(site.clone())).expect("rebuilds");
        assert_eq!(report.content_digest, parsed.target_content_digest);
        assert_eq!(
            report.pinned_bytes,
            Some(report.bytes),
            "sizes pinned as pack pins them"
        );
        let sums = std::fs::read(out.join(SUMS_PATH)).expect("sums");
        assert_eq!(sha256_hex(&sums), parsed.target_content_digest);
        assert_eq!(std::fs::read(out.join("files/a")).expect("a"), b"same");

        // Absent base: named.
        let err =
            rebuild(&parsed, &droot, &dir.path().join("out2"), &|_| None).expect_err("missing");
        assert!(err.to_string().contains("files/a (sha256"), "{err}");
        // A base that changed: refused.
        std::fs::write(&site, b"diff").expect("w");
        let err = rebuild(&parsed, &droot, &dir.path().join("out3"), &|_| {
            Some(site.clone())
        })
        .expect_err("mismatch");
        assert!(matches!(err, DeltaError::Mismatch { .. }), "{err}");
        // A longer source is not read past the entry's size.
        std::fs::write(&site, b"same and more").expect("w");
        let err = rebuild(&parsed, &droot, &dir.path().join("out4"), &|_| {
            Some(site.clone())
        })
        .expect_err("size");
        assert!(
            matches!(
                err,
                DeltaError::Size {
                    expected: 4,
                    actual: 13,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_rebuilt_tree_goes_through_every_check_of_a_bundle() {
        // The target's layout names a blob the bundle lacks: `pack` plans it, but the
        // rebuilt bundle must not close, exactly as the same full bundle would not verify.
        let dir = tempfile::tempdir().expect("tmp");
        let index = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{}","size":2}}]}}"#,
            "a".repeat(64)
        );
        let target = planned(&[("images/index.json", index.as_bytes())]);
        let (delta, _) = plan(&target, &SiteInventory::default(), &"0".repeat(64));
        let droot = dir.path().join("delta");
        store(&droot, &target, &[index.as_bytes()]);
        let err = rebuild(&delta, &droot, &dir.path().join("out"), &|_| None).expect_err("layout");
        assert!(
            matches!(&err, DeltaError::Verify(e) if matches!(**e, VerifyError::Layout(_))),
            "{err:?}"
        );

        // Over the space limit: refused before the sink gets anything.
        let target = planned(&[("files/a", b"0123456789")]);
        let (delta, _) = plan(&target, &SiteInventory::default(), &"0".repeat(64));
        let droot = dir.path().join("delta2");
        store(&droot, &target, &[b"0123456789"]);
        let limits = Limits { max_bytes: Some(5) };
        let err = rebuild_into(
            &delta,
            &droot,
            &mut crate::verify::NullSink,
            limits,
            &|_| None,
        )
        .expect_err("space");
        assert!(
            matches!(&err, DeltaError::Verify(e) if matches!(**e, VerifyError::NoSpace { .. })),
            "{err:?}"
        );

        // Another target than the delta names: refused.
        let mut other = delta.clone();
        other.target_content_digest = "b".repeat(64);
        let err = rebuild_into(
            &other,
            &droot,
            &mut crate::verify::NullSink,
            Limits::default(),
            &|_| None,
        )
        .expect_err("digest");
        assert!(matches!(err, DeltaError::Digest { .. }), "{err:?}");
    }

    #[test]
    fn parse_refuses_entries_that_leave_the_tree() {
        let (mut delta, _) = plan(
            &planned(&[("files/a", b"x")]),
            &SiteInventory::default(),
            &"0".repeat(64),
        );
        assert!(DeltaManifest::parse(&delta.to_json()).is_ok());
        delta.entries[1].mode = 0o4755;
        assert!(DeltaManifest::parse(&delta.to_json()).is_err());
        delta.entries[1].mode = 0o644;
        delta.entries[1].source = EntrySource::Registry;
        delta.entries[1].repository = Some("../x".into());
        assert!(DeltaManifest::parse(&delta.to_json()).is_err());
        delta.entries[1].repository = Some(format!("kubexm/{}", "a".repeat(250)));
        assert!(
            DeltaManifest::parse(&delta.to_json()).is_err(),
            "a name past 255 bytes"
        );
        delta.entries[1].repository = Some("kubexm/pause".into());
        assert!(DeltaManifest::parse(&delta.to_json()).is_ok());
    }

    /// `inventorySha256` is a sha256, like every other digest of `delta.json`: text that is not
    /// (control characters, a novel) is refused, not carried along.
    #[test]
    fn parse_refuses_an_inventory_digest_that_is_not_one() {
        let target = planned(&[("files/a", b"x")]);
        for bad in ["", "not hex", "\u{1b}[2J", &"A".repeat(64), &"0".repeat(65)] {
            let (delta, _) = plan(&target, &SiteInventory::default(), bad);
            let err = DeltaManifest::parse(&delta.to_json()).expect_err(bad);
            assert!(err.to_string().contains("inventorySha256"), "{err}");
        }
        let (delta, _) = plan(&target, &SiteInventory::default(), &"0".repeat(64));
        assert!(DeltaManifest::parse(&delta.to_json()).is_ok());
    }
}
