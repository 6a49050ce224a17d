//! A bundle's metadata without unpacking it: `bundle.json`, `SHA256SUMS` and a few chosen small
//! entries, read from a bundle stream (whole, or the parts of a split bundle through
//! [`crate::split::PartsReader`]), from a delta bundle (its **target's** metadata: `delta.json`
//! and the content the delta carries) or from a bundle unpacked earlier
//! (`WORK/bundles/<content digest>/`, what a cluster record names). What `kubexm-build diff`
//! compares.
//!
//! Bounded whatever the bundle: the stream is decompressed only up to the last entry asked for
//! (entries are sorted by path, so `cluster.yaml` and `files/addons/…` come early and the SBOM
//! late), `bundle.json` and `SHA256SUMS` are held to [`MAX_METADATA_SIZE`], every other entry
//! read to the caller's [`Limits`], and each is checked against `SHA256SUMS` (or, in a delta's
//! store, against the sha256 it is named by) before it is returned. Nothing is written to disk.
//!
//! Nothing here checks a signature or the whole bundle: `verify` does. What is returned is
//! exactly what the bundle's content digest pins, so a diff of two signed bundles speaks of
//! what was signed once `verify --trusted-key` passed on each.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use kubexm_manifests::display::Untrusted;
use thiserror::Error;

use crate::delta::{DeltaError, DeltaManifest, EntrySource, DELTA_PATH, STORE_DIR};
use crate::hash::{is_sha256_hex, sha256_hex};
use crate::manifest::{BundleManifest, MANIFEST_PATH, SUMS_PATH};
use crate::sums::{self, SumsError};
use crate::verify::MAX_METADATA_SIZE;

/// Largest `delta.json` read (one line per entry of the target: far below this even for tens
/// of thousands of entries).
pub const MAX_DELTA_JSON: u64 = 64 << 20;
/// The marker `kubexm-install unpack` writes into a complete unpacked tree (holding the
/// content digest); a tree without it is not read.
pub const UNPACKED_MARKER: &str = ".kubexm-unpacked";

/// How much of the chosen entries is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one entry, at most.
    pub per_entry: u64,
    /// Bytes of all the chosen entries together, at most.
    pub total: u64,
}

/// The metadata of a bundle (for a delta bundle, of its target).
#[derive(Debug, Clone)]
pub struct Peeked {
    /// `bundle.json`, parsed.
    pub manifest: BundleManifest,
    /// Its size in bytes (`sizes` lists every other entry's).
    pub manifest_size: u64,
    /// `SHA256SUMS`: path → sha256.
    pub sums: BTreeMap<String, String>,
    /// Its size in bytes.
    pub sums_size: u64,
    /// sha256 of `SHA256SUMS`.
    pub content_digest: String,
    /// The chosen entries that were read, by path, each matching its sum.
    pub entries: BTreeMap<String, Vec<u8>>,
    /// Chosen entries a delta does not carry (the site holds them): not read.
    pub not_carried: Vec<String>,
    /// For a delta bundle, what it carries.
    pub delta: Option<DeltaCarries>,
}

/// What a delta bundle carries of its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaCarries {
    /// Entries of the target whose content the delta holds.
    pub entries: usize,
    /// Distinct bytes it holds for them.
    pub bytes: u64,
    /// Entries left to the site (an unpacked bundle or its registry).
    pub from_site: usize,
}

/// Why the metadata could not be read; each names the entry or file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PeekError {
    /// Decompression or tar framing failed.
    #[error("cannot read the bundle stream")]
    Stream(#[source] io::Error),
    /// The first entries are not `bundle.json` then `SHA256SUMS`.
    #[error("entry {position} is `{}`, expected `{expected}`: not a KubeXM bundle", Untrusted(.found))]
    Order {
        /// 1-based.
        position: usize,
        /// What the format requires.
        expected: &'static str,
        /// What the bundle has.
        found: String,
    },
    /// An entry is larger than what is read of it.
    #[error("`{}` is larger than the {max} bytes read of it", Untrusted(.path))]
    TooLarge {
        /// The entry.
        path: String,
        /// The limit.
        max: u64,
    },
    /// `SHA256SUMS` is malformed.
    #[error("`SHA256SUMS` is not valid")]
    Sums(#[source] SumsError),
    /// `bundle.json` does not parse.
    #[error("`bundle.json` is not a bundle manifest this build reads")]
    Manifest(#[source] serde_json::Error),
    /// An entry read does not match its sum.
    #[error("`{}` does not match its sum in `SHA256SUMS`: the bundle is damaged", Untrusted(.path))]
    Sum {
        /// The entry.
        path: String,
    },
    /// An entry `SHA256SUMS` lists is not in the stream.
    #[error("`{}` is listed in `SHA256SUMS` but the bundle ends without it", Untrusted(.path))]
    Missing {
        /// The entry.
        path: String,
    },
    /// `delta.json` is not valid.
    #[error("`delta.json` of this delta bundle is not valid")]
    Delta(#[source] DeltaError),
    /// A delta that does not carry its target's `bundle.json`.
    #[error("this delta bundle does not carry its target's `{}` (the site it was made for holds it): compare the full bundle, or run `kubexm-build diff --installed` on that site", Untrusted(.path))]
    NotCarried {
        /// The target entry.
        path: String,
    },
    /// A file of an unpacked tree cannot be read.
    #[error("cannot read `{}`", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// An unpacked tree that is not complete, or not the bundle it is named by.
    #[error("`{}` does not hold the complete unpacked bundle sha256:{digest}: {reason}", dir.display())]
    NotUnpacked {
        /// The directory.
        dir: PathBuf,
        /// The content digest it should hold.
        digest: String,
        /// What is wrong.
        reason: String,
    },
}

/// Reads the metadata of the bundle `reader` streams (a `.tar.zst`, whole or through its parts):
/// `bundle.json`, `SHA256SUMS`, and every entry `want(path, size)` chooses (`size` from
/// `sizes`, `None` in formatVersion 1). For a delta bundle, `want` chooses among the target's
/// entries and the result describes the target.
///
/// # Errors
///
/// See [`PeekError`]; the stream stops being read at the first.
pub fn peek_stream(
    reader: impl Read,
    want: &dyn Fn(&str, Option<u64>) -> bool,
    limits: Limits,
) -> Result<Peeked, PeekError> {
    let decoder = zstd::stream::read::Decoder::new(reader).map_err(PeekError::Stream)?;
    let mut archive = tar::Archive::new(decoder);
    let mut entries = archive.entries().map_err(PeekError::Stream)?;
    let mut first = |position: usize, expected: &'static str| -> Result<Vec<u8>, PeekError> {
        let entry = entries
            .next()
            .ok_or_else(|| PeekError::Order {
                position,
                expected,
                found: "the end of the bundle".to_owned(),
            })?
            .map_err(PeekError::Stream)?;
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if path != expected || !entry.header().entry_type().is_file() {
            return Err(PeekError::Order {
                position,
                expected,
                found: path,
            });
        }
        read_capped(entry, &path, MAX_METADATA_SIZE)
    };
    let manifest_json = first(1, MANIFEST_PATH)?;
    let sums_text = first(2, SUMS_PATH)?;
    let sums = sums::parse(&sums_text).map_err(PeekError::Sums)?;
    check_sum(&sums, MANIFEST_PATH, &manifest_json)?;
    let manifest: BundleManifest =
        serde_json::from_slice(&manifest_json).map_err(PeekError::Manifest)?;
    let is_delta = sums.contains_key(DELTA_PATH) && manifest.files.is_empty();

    // path in the stream → the paths it is returned as (a delta's store holds content once).
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if is_delta {
        wanted.insert(DELTA_PATH.to_owned(), vec![DELTA_PATH.to_owned()]);
    } else {
        for path in sums.keys() {
            if path != MANIFEST_PATH && want(path, manifest.sizes.get(path).copied()) {
                wanted.insert(path.clone(), vec![path.clone()]);
            }
        }
    }
    let mut got: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut budget = limits.total;
    let mut target: Option<(DeltaManifest, Vec<String>)> = None;
    for entry in entries {
        if wanted.is_empty() {
            break;
        }
        let entry = entry.map_err(PeekError::Stream)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(as_paths) = wanted.remove(&path) else {
            continue;
        };
        if path == DELTA_PATH && is_delta {
            let bytes = read_capped(entry, &path, MAX_DELTA_JSON)?;
            check_sum(&sums, &path, &bytes)?;
            let plan = DeltaManifest::parse(&bytes).map_err(PeekError::Delta)?;
            let mut not_carried = Vec::new();
            for e in &plan.entries {
                let chosen = e.path == MANIFEST_PATH
                    || (e.path != DELTA_PATH && want(&e.path, Some(e.size)));
                if !chosen {
                    continue;
                }
                if e.source != EntrySource::Delta {
                    if e.path == MANIFEST_PATH {
                        return Err(PeekError::NotCarried {
                            path: e.path.clone(),
                        });
                    }
                    not_carried.push(e.path.clone());
                    continue;
                }
                let stored = format!("{STORE_DIR}/{}", e.sha256);
                if !sums.contains_key(&stored) {
                    return Err(PeekError::Missing { path: stored });
                }
                wanted.entry(stored).or_default().push(e.path.clone());
            }
            target = Some((plan, not_carried));
            continue;
        }
        let max = limits.per_entry.min(budget);
        let bytes = read_capped(entry, &path, max)?;
        budget -= bytes.len() as u64;
        match path.strip_prefix(&format!("{STORE_DIR}/")) {
            Some(hex) if is_delta => {
                if !is_sha256_hex(hex) || sha256_hex(&bytes) != hex {
                    return Err(PeekError::Sum { path });
                }
            }
            _ => check_sum(&sums, &path, &bytes)?,
        }
        for p in as_paths {
            got.insert(p, bytes.clone());
        }
    }
    if let Some(path) = wanted.into_keys().next() {
        return Err(PeekError::Missing { path });
    }
    let Some((plan, not_carried)) = target else {
        return Ok(Peeked {
            manifest,
            manifest_size: manifest_json.len() as u64,
            content_digest: sha256_hex(&sums_text),
            sums_size: sums_text.len() as u64,
            sums,
            entries: got,
            not_carried: Vec::new(),
            delta: None,
        });
    };
    // The target's metadata, from what the delta carries.
    let target_json = got
        .remove(MANIFEST_PATH)
        .ok_or_else(|| PeekError::NotCarried {
            path: MANIFEST_PATH.to_owned(),
        })?;
    let target_manifest: BundleManifest =
        serde_json::from_slice(&target_json).map_err(PeekError::Manifest)?;
    let target_sums = sums::parse(plan.target_sums.as_bytes()).map_err(PeekError::Sums)?;
    let mut carried: BTreeSet<&str> = BTreeSet::new();
    let mut bytes = 0u64;
    let mut delta_entries = 0;
    for e in plan
        .entries
        .iter()
        .filter(|e| e.source == EntrySource::Delta)
    {
        delta_entries += 1;
        // Sizes come from `delta.json`: added without overflow, whatever they say.
        if carried.insert(&e.sha256) {
            bytes = bytes.saturating_add(e.size);
        }
    }
    Ok(Peeked {
        manifest: target_manifest,
        manifest_size: target_json.len() as u64,
        content_digest: plan.target_content_digest.clone(),
        sums_size: plan.target_sums.len() as u64,
        sums: target_sums,
        entries: got,
        not_carried,
        delta: Some(DeltaCarries {
            entries: delta_entries,
            bytes,
            from_site: plan.entries.len() - delta_entries,
        }),
    })
}

/// Reads the metadata of the bundle unpacked in `dir` (`WORK/bundles/<digest>/`, written by
/// `kubexm-install unpack`): its marker must hold `digest`, and its `SHA256SUMS` hash to it.
///
/// # Errors
///
/// See [`PeekError`].
pub fn peek_unpacked(
    dir: &Path,
    digest: &str,
    want: &dyn Fn(&str, Option<u64>) -> bool,
    limits: Limits,
) -> Result<Peeked, PeekError> {
    let not = |reason: String| PeekError::NotUnpacked {
        dir: dir.to_owned(),
        digest: digest.to_owned(),
        reason,
    };
    if !is_sha256_hex(digest) {
        return Err(not("the digest is not 64 hex digits".into()));
    }
    let marker = read_file(&dir.join(UNPACKED_MARKER), UNPACKED_MARKER, 1024).map_err(|_| {
        not(format!(
            "no `{UNPACKED_MARKER}` marker (an unpack did not finish)"
        ))
    })?;
    if String::from_utf8_lossy(&marker).trim_end() != digest {
        return Err(not(format!("its `{UNPACKED_MARKER}` names another digest")));
    }
    let sums_text = read_file(&dir.join(SUMS_PATH), SUMS_PATH, MAX_METADATA_SIZE)?;
    let actual = sha256_hex(&sums_text);
    if actual != digest {
        return Err(not(format!(
            "its `SHA256SUMS` hashes to sha256:{actual}: the tree was altered"
        )));
    }
    let sums = sums::parse(&sums_text).map_err(PeekError::Sums)?;
    let manifest_json = read_file(&dir.join(MANIFEST_PATH), MANIFEST_PATH, MAX_METADATA_SIZE)?;
    check_sum(&sums, MANIFEST_PATH, &manifest_json)?;
    let manifest: BundleManifest =
        serde_json::from_slice(&manifest_json).map_err(PeekError::Manifest)?;
    let mut entries = BTreeMap::new();
    let mut budget = limits.total;
    for path in sums.keys() {
        if path == MANIFEST_PATH || !want(path, manifest.sizes.get(path).copied()) {
            continue;
        }
        // `SHA256SUMS` hashes to the digest the tree is named by, and `unpack` checked every
        // path against the format's rules: still, never follow one that leaves the tree.
        if crate::path::check(path).is_err() {
            return Err(not(format!("`{}` is not a safe path", Untrusted(path))));
        }
        let bytes = read_file(&dir.join(path), path, limits.per_entry.min(budget))?;
        budget -= bytes.len() as u64;
        check_sum(&sums, path, &bytes)?;
        entries.insert(path.clone(), bytes);
    }
    Ok(Peeked {
        manifest,
        manifest_size: manifest_json.len() as u64,
        content_digest: actual,
        sums_size: sums_text.len() as u64,
        sums,
        entries,
        not_carried: Vec::new(),
        delta: None,
    })
}

fn check_sum(sums: &BTreeMap<String, String>, path: &str, bytes: &[u8]) -> Result<(), PeekError> {
    if sums.get(path) == Some(&sha256_hex(bytes)) {
        Ok(())
    } else {
        Err(PeekError::Sum {
            path: path.to_owned(),
        })
    }
}

fn read_capped(entry: impl Read, path: &str, max: u64) -> Result<Vec<u8>, PeekError> {
    let mut bytes = Vec::new();
    entry
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(PeekError::Stream)?;
    if bytes.len() as u64 > max {
        return Err(PeekError::TooLarge {
            path: path.to_owned(),
            max,
        });
    }
    Ok(bytes)
}

fn read_file(file: &Path, path: &str, max: u64) -> Result<Vec<u8>, PeekError> {
    let io = |source| PeekError::Io {
        path: file.to_owned(),
        source,
    };
    // Never a link: the tree holds regular files only.
    let meta = fs_err::symlink_metadata(file).map_err(io)?;
    if !meta.is_file() {
        return Err(io(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        )));
    }
    let mut bytes = Vec::new();
    fs_err::File::open(file)
        .map_err(io)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(PeekError::TooLarge {
            path: path.to_owned(),
            max,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Limits = Limits {
        per_entry: 0,
        total: 0,
    };

    fn tar_zst(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            builder.append_data(&mut h, path, *data).expect("append");
        }
        let tar = builder.into_inner().expect("tar");
        zstd::encode_all(tar.as_slice(), 1).expect("zstd")
    }

    #[test]
    fn refuses_what_is_not_a_bundle_and_damaged_entries() {
        let bytes = tar_zst(&[("cluster.yaml", b"x")]);
        let err = peek_stream(bytes.as_slice(), &|_, _| false, NONE).expect_err("refused");
        assert!(matches!(err, PeekError::Order { position: 1, .. }), "{err}");
        let bytes = tar_zst(&[("bundle.json", b"{}"), ("SHA256SUMS", b"")]);
        let err = peek_stream(bytes.as_slice(), &|_, _| false, NONE).expect_err("refused");
        assert!(matches!(err, PeekError::Sum { .. }), "{err}");
    }

    /// A delta whose `delta.json` gives sizes that add up past `u64::MAX` is read without an
    /// overflow (a panic in a debug build, a wrapped total in a release one).
    #[test]
    fn delta_sizes_that_overflow_are_added_saturating() {
        let manifest = |files: &str| {
            format!(
                r#"{{"formatVersion":2,"toolVersion":"0","cluster":"c","kubernetesVersion":"v1.33.1","zone":"default","arches":["amd64"],"created":0,"files":[{files}],"images":[]}}"#
            )
            .into_bytes()
        };
        let target_json = manifest("");
        let x = b"x".as_slice();
        let target_sums = format!(
            "{}  bundle.json\n{}  x\n",
            sha256_hex(&target_json),
            sha256_hex(x)
        );
        let entry = |path: &str, sha: String| {
            format!(
                r#"{{"path":"{path}","sha256":"{sha}","size":{},"mode":420,"source":"delta"}}"#,
                u64::MAX
            )
        };
        let delta = format!(
            r#"{{"kubexmDelta":1,"targetContentDigest":"{}","targetSums":{},"inventorySha256":"{}","entries":[{},{}]}}"#,
            sha256_hex(target_sums.as_bytes()),
            serde_json::to_string(&target_sums).expect("json"),
            "0".repeat(64),
            entry("bundle.json", sha256_hex(&target_json)),
            entry("x", sha256_hex(x)),
        )
        .into_bytes();
        let outer = manifest("");
        let stored = format!("{STORE_DIR}/{}", sha256_hex(&target_json));
        let mut listed = [
            ("bundle.json", sha256_hex(&outer)),
            ("delta.json", sha256_hex(&delta)),
            (stored.as_str(), sha256_hex(&target_json)),
        ];
        listed.sort();
        let sums: String = listed.iter().map(|(p, h)| format!("{h}  {p}\n")).collect();
        let bytes = tar_zst(&[
            ("bundle.json", &outer),
            ("SHA256SUMS", sums.as_bytes()),
            ("delta.json", &delta),
            (&stored, &target_json),
        ]);
        let limits = Limits {
            per_entry: 1 << 20,
            total: 1 << 20,
        };
        let peeked = peek_stream(bytes.as_slice(), &|_, _| false, limits).expect("peeked");
        let carries = peeked.delta.expect("a delta");
        assert_eq!(carries.entries, 2);
        assert_eq!(carries.bytes, u64::MAX);
    }
}
