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

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::hash::{is_sha256_hex, sha256_hex};
use crate::manifest::SUMS_PATH;
use crate::pack::PlannedBundle;
use crate::path;
use crate::sums;
use crate::verify::{DirSink, Sink};

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
    #[error("cannot read the site inventory `{}`", path.display())]
    ReadInventory {
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The inventory or `delta.json` is malformed.
    #[error("`{what}` is not valid: {reason}")]
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
    #[error("`{path}`: its source `{}` has sha256 {actual}, expected {expected}", from.display())]
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
    /// Reading or writing failed.
    #[error("`{}`", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn list(items: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut out: Vec<String> = items
        .iter()
        .take(SHOWN)
        .map(|m| format!("  - {m}"))
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
        let file = fs_err::File::open(path).map_err(read)?;
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

/// A repository path: lowercase components of `[a-z0-9._-]` separated by `/`.
fn is_repository(s: &str) -> bool {
    !s.is_empty()
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

/// Rebuilds the target tree into `out` (an empty directory): each entry copied from the delta's
/// store (`delta_root/delta/sha256/<hex>`) or from the file `locate` returns, checked against its
/// sha256 while it is copied; then the target's `SHA256SUMS`. Returns the bytes written.
///
/// # Errors
///
/// [`DeltaError::BaseMissing`] when `locate` finds no source for site entries (all named),
/// [`DeltaError::Mismatch`] when a source does not match, [`DeltaError::Io`].
pub fn rebuild(
    manifest: &DeltaManifest,
    delta_root: &Path,
    out: &Path,
    locate: &dyn Fn(&DeltaEntry) -> Option<PathBuf>,
) -> Result<u64, DeltaError> {
    let missing = manifest.missing(|e| locate(e).is_some());
    if !missing.is_empty() {
        return Err(DeltaError::BaseMissing { missing });
    }
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| DeltaError::Io { path, source }
    };
    let mut sink = DirSink::new(out).map_err(io_err(out))?;
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    for e in &manifest.entries {
        let from = match e.source {
            EntrySource::Delta => delta_root.join(STORE_DIR).join(&e.sha256),
            _ => locate(e).ok_or_else(|| DeltaError::BaseMissing {
                missing: vec![e.path.clone()],
            })?,
        };
        let mut input = fs_err::File::open(&from).map_err(io_err(&from))?;
        let mut hasher = Sha256::new();
        {
            let mut w = sink
                .file(&e.path, e.mode)
                .map_err(io_err(&out.join(&e.path)))?;
            loop {
                let n = input.read(&mut buf).map_err(io_err(&from))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                w.write_all(&buf[..n]).map_err(io_err(&out.join(&e.path)))?;
                total += n as u64;
            }
            w.flush().map_err(io_err(&out.join(&e.path)))?;
        }
        let actual = hex::encode(hasher.finalize());
        if actual != e.sha256 {
            return Err(DeltaError::Mismatch {
                path: e.path.clone(),
                from,
                expected: e.sha256.clone(),
                actual,
            });
        }
    }
    {
        let mut w = sink
            .file(SUMS_PATH, 0o644)
            .map_err(io_err(&out.join(SUMS_PATH)))?;
        w.write_all(manifest.target_sums.as_bytes())
            .and_then(|()| w.flush())
            .map_err(io_err(&out.join(SUMS_PATH)))?;
    }
    sink.finish().map_err(io_err(out))?;
    Ok(total + manifest.target_sums.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::pack::PlannedFile;

    fn file(path: &str, content: &[u8]) -> PlannedFile {
        PlannedFile {
            path: path.into(),
            sha256: sha256_hex(content),
            size: content.len() as u64,
            mode: 0o644,
        }
    }

    /// A planned bundle of `files` and a `bundle.json` of `{}`.
    fn planned(files: Vec<PlannedFile>) -> PlannedBundle {
        let mut files = files;
        files.push(file("bundle.json", b"{}\n"));
        files.sort_by(|a, b| a.path.cmp(&b.path));
        PlannedBundle {
            manifest_json: b"{}\n".to_vec(),
            files,
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
        let target = planned(vec![file("files/a", b"same"), file("files/b", b"new")]);
        let (delta, carry) = plan(&target, &inv, &"0".repeat(64));
        assert_eq!(carry.len(), 2, "files/b and bundle.json");
        assert_eq!(delta.from_site().count(), 1);
        let parsed = DeltaManifest::parse(&delta.to_json()).expect("parses");
        assert_eq!(parsed, delta);

        // The delta's store holds what the site lacks.
        let droot = dir.path().join("delta");
        std::fs::create_dir_all(droot.join(STORE_DIR)).expect("mkdir");
        std::fs::write(droot.join(STORE_DIR).join(sha256_hex(b"new")), b"new").expect("w");
        std::fs::write(droot.join(STORE_DIR).join(sha256_hex(b"{}\n")), b"{}\n").expect("w");
        let out = dir.path().join("out");
        let site = old.join("files/a");
        rebuild(&parsed, &droot, &out, &|_| Some(site.clone())).expect("rebuilds");
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
    }

    #[test]
    fn parse_refuses_entries_that_leave_the_tree() {
        let (mut delta, _) = plan(
            &planned(vec![file("files/a", b"x")]),
            &SiteInventory::default(),
            "",
        );
        delta.entries[1].mode = 0o4755;
        assert!(DeltaManifest::parse(&delta.to_json()).is_err());
        delta.entries[1].mode = 0o644;
        delta.entries[1].source = EntrySource::Registry;
        delta.entries[1].repository = Some("../x".into());
        assert!(DeltaManifest::parse(&delta.to_json()).is_err());
    }
}
