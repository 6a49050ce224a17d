//! What changes when one bundle replaces another (`kubexm-build diff`), computed from the two
//! bundles' own metadata: `bundle.json` (files, images, OS packages, sizes), `SHA256SUMS`, the
//! SBOM (which blobs make up each image) and the few small text entries worth showing
//! (`cluster.yaml`, addon YAML). The JSON form (`-o json`) is [`BundleDiff`]: a stable format,
//! `kubexmDiff: 1`, fields only ever added.
//!
//! How entries are paired:
//!
//! * files by component name and arch: one on each side that differ is a change (a new version,
//!   or the same version re-pinned to other bytes); several (an upgrade path's versions) are
//!   listed as added and removed, those the two sides share left out;
//! * images by reference (same reference, another digest: changed), then by repository (one
//!   tag each side: retagged); the rest added or removed;
//! * OS packages per release by name and arch.
//!
//! The delta size is what `kubexm-build bundle --have` would carry if the site held exactly the
//! old bundle: every entry of the new one whose content the old one does not hold, once.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use kubexm_bundles::manifest::{BundleManifest, FileRecord, ImageRecord, OsRepoRecord};
use kubexm_bundles::peek::Peeked;
use kubexm_manifests::display::Untrusted;
use serde::{Deserialize, Serialize};

/// `kubexmDiff` version.
pub const DIFF_VERSION: u32 = 1;
/// The SBOM entry.
pub const SBOM_PATH: &str = crate::sbom::SBOM_PATH;
/// Text entries larger than this are compared by sum only, not shown as a unified diff.
pub const MAX_TEXT_DIFF: u64 = 64 << 10;
/// A unified diff longer than this is left out (the sums still say what changed).
pub const MAX_DIFF_OUTPUT: usize = 64 << 10;
/// Where addon files sit in a bundle.
pub const ADDON_DIR: &str = "files/addons/";

/// Whether the entry `path` of `size` bytes is read for the diff (beside `bundle.json` and
/// `SHA256SUMS`): `cluster.yaml`, addon YAML small enough to show, and the SBOM when `sbom`.
pub fn wanted(path: &str, size: Option<u64>, sbom: bool) -> bool {
    let small = size.is_some_and(|s| s <= MAX_TEXT_DIFF);
    match path {
        kubexm_bundles::manifest::CLUSTER_PATH => true,
        SBOM_PATH => sbom,
        p => {
            small
                && p.starts_with(ADDON_DIR)
                && [".yaml", ".yml", ".json"].iter().any(|x| p.ends_with(x))
        }
    }
}

/// The whole diff.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BundleDiff {
    /// [`DIFF_VERSION`].
    pub kubexm_diff: u32,
    /// What is replaced.
    pub old: Side,
    /// What replaces it.
    pub new: Side,
    /// Same content digest: nothing changes.
    pub identical: bool,
    /// Kubernetes version, when it changes.
    pub kubernetes: Option<Change<String>>,
    /// The further versions of an upgrade-path bundle, when they change.
    pub upgrade_path: Option<Change<Vec<String>>>,
    /// Components (files' names) whose versions change.
    pub components: Vec<ComponentChange>,
    /// Files under `files/`.
    pub files: FileChanges,
    /// Images of the OCI layout.
    pub images: ImageChanges,
    /// OS packages, per release.
    pub os_packages: Vec<ReleaseChange>,
    /// The cluster.yaml each side was built from (for `--installed`: the one last applied).
    pub cluster_yaml: Option<TextChange>,
    /// Other entries (`catalog.yaml`, `upgrade/<version>/cluster.yaml`, …) added, removed or
    /// changed; not files, images, OS repositories or the metadata.
    pub other_entries: EntryChanges,
    /// Sizes.
    pub size: SizeChange,
}

/// One side of the diff.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Side {
    /// The file given, or the cluster record read.
    pub source: String,
    /// `bundle`, `split`, `delta` (its target is described) or `installed`.
    pub form: String,
    /// sha256 of its `SHA256SUMS`.
    pub content_digest: String,
    /// Cluster name.
    pub cluster: String,
    /// Kubernetes version.
    pub kubernetes_version: String,
    /// Further versions (upgrade path).
    pub upgrade_path: Vec<String>,
    /// The kubexm-build that wrote it.
    pub tool_version: String,
    /// Creation time, seconds since the epoch.
    pub created: u64,
    /// Regular files it holds.
    pub entries: usize,
    /// Bytes they take unpacked, `SHA256SUMS` included (formatVersion 2; `null` for version 1).
    pub bytes: Option<u64>,
    /// Bytes of the compressed bundle (the parts of a split one, the delta itself for a
    /// delta); `null` for an installed bundle.
    pub file_bytes: Option<u64>,
    /// What could not be compared, and why.
    pub notes: Vec<String>,
}

/// A value before and after.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Change<T> {
    /// Before.
    pub old: T,
    /// After.
    pub new: T,
}

/// A component's versions on each side.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentChange {
    /// `bundle.json` `files[].name`.
    pub name: String,
    /// Its versions in the old bundle (empty: added).
    pub old: Vec<String>,
    /// In the new one (empty: removed).
    pub new: Vec<String>,
}

/// A file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct FileRef {
    /// Component name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Architecture.
    pub arch: String,
    /// Path in the bundle.
    pub path: String,
    /// sha256.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
}

/// A file replaced by another of the same component and arch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    /// Component name.
    pub name: String,
    /// Architecture.
    pub arch: String,
    /// Before.
    pub old: FileRef,
    /// After.
    pub new: FileRef,
    /// A unified diff of the two, for addon YAML small enough to show.
    pub diff: Option<String>,
}

/// Files added, removed, changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileChanges {
    /// Only in the new bundle.
    pub added: Vec<FileRef>,
    /// Only in the old one.
    pub removed: Vec<FileRef>,
    /// Replaced.
    pub changed: Vec<FileChange>,
}

/// An image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageRef {
    /// Reference.
    pub reference: String,
    /// Top manifest or index (`sha256:…`).
    pub digest: String,
    /// Bytes of its manifest, configs and layers in the bundle (from the SBOM; `null` without
    /// it).
    pub size: Option<u64>,
    /// Platforms kept.
    pub platforms: Vec<String>,
}

/// An image replaced by another.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageChange {
    /// Repository (reference without its tag).
    pub repository: String,
    /// Before.
    pub old: ImageRef,
    /// After.
    pub new: ImageRef,
}

/// Images added, removed, retagged, changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageChanges {
    /// Only in the new bundle.
    pub added: Vec<ImageRef>,
    /// Only in the old one.
    pub removed: Vec<ImageRef>,
    /// Same repository, another tag.
    pub retagged: Vec<ImageChange>,
    /// Same reference, another digest.
    pub changed: Vec<ImageChange>,
}

/// A package.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct PackageRef {
    /// Name.
    pub name: String,
    /// Architecture.
    pub arch: String,
    /// Version.
    pub version: String,
}

/// A package's version before and after.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PackageChange {
    /// Name.
    pub name: String,
    /// Architecture.
    pub arch: String,
    /// Version before.
    pub old: String,
    /// After.
    pub new: String,
}

/// The OS packages of one release.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseChange {
    /// Release (`debian-12`).
    pub release: String,
    /// `added`, `removed` (the whole repository) or `changed`.
    pub status: String,
    /// Packages only in the new bundle.
    pub added: Vec<PackageRef>,
    /// Only in the old one.
    pub removed: Vec<PackageRef>,
    /// Another version.
    pub changed: Vec<PackageChange>,
}

/// A text entry that changed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TextChange {
    /// sha256 before.
    pub old_sha256: String,
    /// After.
    pub new_sha256: String,
    /// A unified diff, when both are small text.
    pub diff: Option<String>,
}

/// Paths added, removed, changed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EntryChanges {
    /// Only in the new bundle.
    pub added: Vec<String>,
    /// Only in the old one.
    pub removed: Vec<String>,
    /// Other content.
    pub changed: Vec<String>,
}

/// Sizes, and what a delta against the old bundle would carry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SizeChange {
    /// Unpacked bytes of the old bundle (`null`: formatVersion 1).
    pub old_bytes: Option<u64>,
    /// Of the new one.
    pub new_bytes: Option<u64>,
    /// Entries of the new bundle whose content the old one does not hold.
    pub delta_entries: usize,
    /// Their distinct bytes, uncompressed (`null`: formatVersion 1).
    pub delta_bytes: Option<u64>,
}

/// One side as read: the metadata, its SBOM's image blobs, what to call it.
pub struct Input {
    /// The metadata.
    pub peeked: Peeked,
    /// `source`, `form`, `fileBytes` and notes for [`Side`].
    pub source: String,
    /// See [`Side::form`].
    pub form: &'static str,
    /// See [`Side::file_bytes`].
    pub file_bytes: Option<u64>,
    /// The SBOM, when read and matching.
    pub sbom: Option<Vec<u8>>,
    /// The cluster.yaml to compare, when not the bundle's own (the record's).
    pub cluster_yaml: Option<Vec<u8>>,
    /// Notes so far.
    pub notes: Vec<String>,
}

#[derive(Deserialize)]
struct Sbom {
    #[serde(default)]
    dependencies: Vec<SbomDependency>,
}

#[derive(Deserialize)]
struct SbomDependency {
    #[serde(rename = "ref")]
    reference: String,
    #[serde(rename = "dependsOn", default)]
    depends_on: Vec<String>,
}

/// What one side holds, indexed for the comparison.
struct Held<'a> {
    manifest: &'a BundleManifest,
    sizes: &'a BTreeMap<String, u64>,
    /// reference → blob digests (`sha256:…`), from the SBOM.
    image_blobs: Option<BTreeMap<String, Vec<String>>>,
}

impl Held<'_> {
    fn image(&self, i: &ImageRecord) -> ImageRef {
        let size = self.image_blobs.as_ref().and_then(|blobs| {
            let list = blobs.get(&i.reference)?;
            list.iter().try_fold(i.size, |sum, d| {
                let hex = d.strip_prefix("sha256:")?;
                let s = self.sizes.get(&format!("images/blobs/sha256/{hex}"))?;
                Some(sum + s)
            })
        });
        ImageRef {
            reference: i.reference.clone(),
            digest: i.digest.clone(),
            size,
            platforms: i.platforms.iter().cloned().collect(),
        }
    }
}

fn parse_sbom(bytes: &[u8]) -> Result<BTreeMap<String, Vec<String>>, serde_json::Error> {
    let sbom: Sbom = serde_json::from_slice(bytes)?;
    Ok(sbom
        .dependencies
        .into_iter()
        .filter_map(|d| {
            let reference = d.reference.strip_prefix("image:")?.to_owned();
            let blobs = d
                .depends_on
                .into_iter()
                .filter_map(|b| b.strip_prefix("blob:").map(str::to_owned))
                .collect();
            Some((reference, blobs))
        })
        .collect())
}

fn side(input: &Input, notes: Vec<String>) -> Side {
    let p = &input.peeked;
    let m = &p.manifest;
    let bytes = (!m.sizes.is_empty())
        .then(|| m.sizes.values().sum::<u64>() + p.manifest_size + p.sums_size);
    Side {
        source: input.source.clone(),
        form: input.form.to_owned(),
        content_digest: p.content_digest.clone(),
        cluster: m.cluster.clone(),
        kubernetes_version: m.kubernetes_version.clone(),
        upgrade_path: m
            .upgrade_path
            .iter()
            .map(|s| s.kubernetes_version.clone())
            .collect(),
        tool_version: m.tool_version.clone(),
        created: m.created,
        entries: p.sums.len(),
        bytes,
        file_bytes: input.file_bytes,
        notes,
    }
}

/// Compares two bundles.
pub fn diff(old: &Input, new: &Input) -> BundleDiff {
    let held = |i: &Input, notes: &mut Vec<String>| {
        let image_blobs = match &i.sbom {
            Some(bytes) => match parse_sbom(bytes) {
                Ok(b) => Some(b),
                Err(e) => {
                    notes.push(format!(
                        "its SBOM does not parse ({e}): image sizes not shown"
                    ));
                    None
                }
            },
            None => None,
        };
        image_blobs
    };
    let mut old_notes = old.notes.clone();
    let mut new_notes = new.notes.clone();
    let old_held = Held {
        manifest: &old.peeked.manifest,
        sizes: &old.peeked.manifest.sizes,
        image_blobs: held(old, &mut old_notes),
    };
    let new_held = Held {
        manifest: &new.peeked.manifest,
        sizes: &new.peeked.manifest.sizes,
        image_blobs: held(new, &mut new_notes),
    };
    let (om, nm) = (&old.peeked.manifest, &new.peeked.manifest);
    let old_side = side(old, old_notes);
    let new_side = side(new, new_notes);
    let change = |a: &String, b: &String| {
        (a != b).then(|| Change {
            old: a.clone(),
            new: b.clone(),
        })
    };
    let upgrade_path = (old_side.upgrade_path != new_side.upgrade_path).then(|| Change {
        old: old_side.upgrade_path.clone(),
        new: new_side.upgrade_path.clone(),
    });
    let cluster_yaml = {
        let text = |i: &Input| {
            i.cluster_yaml.clone().or_else(|| {
                i.peeked
                    .entries
                    .get(kubexm_bundles::manifest::CLUSTER_PATH)
                    .cloned()
            })
        };
        match (text(old), text(new)) {
            (Some(a), Some(b)) if a != b => Some(TextChange {
                old_sha256: kubexm_bundles::hash::sha256_hex(&a),
                new_sha256: kubexm_bundles::hash::sha256_hex(&b),
                diff: unified(&a, &b, "cluster.yaml"),
            }),
            _ => None,
        }
    };
    BundleDiff {
        kubexm_diff: DIFF_VERSION,
        identical: old.peeked.content_digest == new.peeked.content_digest,
        kubernetes: change(&om.kubernetes_version, &nm.kubernetes_version),
        upgrade_path,
        components: components(om, nm),
        files: files(old, new),
        images: images(&old_held, &new_held),
        os_packages: os_packages(&om.os_repos, &nm.os_repos),
        cluster_yaml,
        other_entries: other_entries(&old.peeked.sums, &new.peeked.sums, om, nm),
        size: SizeChange {
            old_bytes: old_side.bytes,
            new_bytes: new_side.bytes,
            ..delta_size(&old.peeked, &new.peeked)
        },
        old: old_side,
        new: new_side,
    }
}

fn components(old: &BundleManifest, new: &BundleManifest) -> Vec<ComponentChange> {
    let versions = |m: &BundleManifest| {
        let mut by: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in &m.files {
            by.entry(f.name.clone())
                .or_default()
                .insert(f.version.clone());
        }
        by
    };
    let (a, b) = (versions(old), versions(new));
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter_map(|n| {
            let (o, w) = (
                a.get(n).cloned().unwrap_or_default(),
                b.get(n).cloned().unwrap_or_default(),
            );
            (o != w).then(|| ComponentChange {
                name: n.clone(),
                old: o.into_iter().collect(),
                new: w.into_iter().collect(),
            })
        })
        .collect()
}

fn file_ref(f: &FileRecord) -> FileRef {
    FileRef {
        name: f.name.clone(),
        version: f.version.clone(),
        arch: f.arch.clone(),
        path: f.path.clone(),
        sha256: f.sha256.clone(),
        size: f.size,
    }
}

fn files(old: &Input, new: &Input) -> FileChanges {
    let group = |m: &BundleManifest| {
        let mut by: BTreeMap<(String, String), Vec<FileRef>> = BTreeMap::new();
        for f in &m.files {
            by.entry((f.name.clone(), f.arch.clone()))
                .or_default()
                .push(file_ref(f));
        }
        by
    };
    let (a, b) = (group(&old.peeked.manifest), group(&new.peeked.manifest));
    let keys: BTreeSet<&(String, String)> = a.keys().chain(b.keys()).collect();
    let mut out = FileChanges::default();
    for key in keys {
        let mut o = a.get(key).cloned().unwrap_or_default();
        let mut n = b.get(key).cloned().unwrap_or_default();
        let same = |x: &FileRef, y: &FileRef| x.path == y.path && x.sha256 == y.sha256;
        let shared: Vec<FileRef> = o
            .iter()
            .filter(|x| n.iter().any(|y| same(x, y)))
            .cloned()
            .collect();
        o.retain(|x| !shared.iter().any(|y| same(x, y)));
        n.retain(|x| !shared.iter().any(|y| same(x, y)));
        if let ([before], [after]) = (o.as_slice(), n.as_slice()) {
            let text = |i: &Input, f: &FileRef| i.peeked.entries.get(&f.path).cloned();
            let diff = match (text(old, before), text(new, after)) {
                (Some(x), Some(y)) => unified(&x, &y, &after.path),
                _ => None,
            };
            out.changed.push(FileChange {
                name: key.0.clone(),
                arch: key.1.clone(),
                old: before.clone(),
                new: after.clone(),
                diff,
            });
        } else {
            out.removed.extend(o);
            out.added.extend(n);
        }
    }
    out
}

/// `registry/repo:tag` → `registry/repo` (a digest dropped too).
fn repository(reference: &str) -> &str {
    let name = reference.split('@').next().unwrap_or(reference);
    match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => name,
    }
}

fn images(old: &Held<'_>, new: &Held<'_>) -> ImageChanges {
    let by_ref = |h: &Held<'_>| -> BTreeMap<String, ImageRef> {
        h.manifest
            .images
            .iter()
            .map(|i| (i.reference.clone(), h.image(i)))
            .collect()
    };
    let (mut a, mut b) = (by_ref(old), by_ref(new));
    let mut out = ImageChanges::default();
    let common: Vec<String> = a.keys().filter(|r| b.contains_key(*r)).cloned().collect();
    for r in common {
        let (Some(x), Some(y)) = (a.remove(&r), b.remove(&r)) else {
            continue;
        };
        if x.digest != y.digest {
            out.changed.push(ImageChange {
                repository: repository(&r).to_owned(),
                old: x,
                new: y,
            });
        }
    }
    let by_repo = |m: BTreeMap<String, ImageRef>| {
        let mut by: BTreeMap<String, Vec<ImageRef>> = BTreeMap::new();
        for (r, i) in m {
            by.entry(repository(&r).to_owned()).or_default().push(i);
        }
        by
    };
    let (a, b) = (by_repo(a), by_repo(b));
    let repos: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for repo in repos {
        let o = a.get(repo).cloned().unwrap_or_default();
        let n = b.get(repo).cloned().unwrap_or_default();
        if let ([x], [y]) = (o.as_slice(), n.as_slice()) {
            out.retagged.push(ImageChange {
                repository: repo.clone(),
                old: x.clone(),
                new: y.clone(),
            });
        } else {
            out.removed.extend(o);
            out.added.extend(n);
        }
    }
    out
}

fn os_packages(old: &[OsRepoRecord], new: &[OsRepoRecord]) -> Vec<ReleaseChange> {
    let index =
        |repos: &[OsRepoRecord]| -> BTreeMap<String, BTreeMap<(String, String), BTreeSet<String>>> {
            let mut by: BTreeMap<String, BTreeMap<(String, String), BTreeSet<String>>> =
                BTreeMap::new();
            for r in repos {
                let rel = by.entry(r.release.clone()).or_default();
                for p in &r.packages {
                    rel.entry((p.name.clone(), p.arch.clone()))
                        .or_default()
                        .insert(p.version.clone());
                }
            }
            by
        };
    let (a, b) = (index(old), index(new));
    let releases: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut out = Vec::new();
    for rel in releases {
        let status = match (a.get(rel), b.get(rel)) {
            (None, _) => "added",
            (_, None) => "removed",
            _ => "changed",
        };
        let empty = BTreeMap::new();
        let (o, n) = (a.get(rel).unwrap_or(&empty), b.get(rel).unwrap_or(&empty));
        let mut change = ReleaseChange {
            release: rel.clone(),
            status: status.to_owned(),
            added: Vec::new(),
            removed: Vec::new(),
            changed: Vec::new(),
        };
        let keys: BTreeSet<&(String, String)> = o.keys().chain(n.keys()).collect();
        for key in keys {
            let x = o.get(key).cloned().unwrap_or_default();
            let y = n.get(key).cloned().unwrap_or_default();
            if x == y {
                continue;
            }
            let pkg = |v: &String| PackageRef {
                name: key.0.clone(),
                arch: key.1.clone(),
                version: v.clone(),
            };
            if x.len() == 1 && y.len() == 1 {
                change.changed.push(PackageChange {
                    name: key.0.clone(),
                    arch: key.1.clone(),
                    old: x.iter().next().cloned().unwrap_or_default(),
                    new: y.iter().next().cloned().unwrap_or_default(),
                });
            } else {
                change.removed.extend(x.difference(&y).map(pkg));
                change.added.extend(y.difference(&x).map(pkg));
            }
        }
        let empty_change =
            change.added.is_empty() && change.removed.is_empty() && change.changed.is_empty();
        if !(empty_change && status == "changed") {
            out.push(change);
        }
    }
    out
}

/// Entries that are neither files, images, OS repositories nor the bundle's metadata.
fn other_entries(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    om: &BundleManifest,
    nm: &BundleManifest,
) -> EntryChanges {
    let covered: BTreeSet<&str> = om
        .files
        .iter()
        .chain(&nm.files)
        .map(|f| f.path.as_str())
        .collect();
    let skip = |p: &str| {
        covered.contains(p)
            || p.starts_with("images/")
            || p.starts_with("repos/")
            || [
                kubexm_bundles::manifest::MANIFEST_PATH,
                kubexm_bundles::manifest::CLUSTER_PATH,
                SBOM_PATH,
            ]
            .contains(&p)
    };
    let mut out = EntryChanges::default();
    let paths: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for p in paths.into_iter().filter(|p| !skip(p)) {
        match (old.get(p), new.get(p)) {
            (None, Some(_)) => out.added.push(p.clone()),
            (Some(_), None) => out.removed.push(p.clone()),
            (Some(a), Some(b)) if a != b => out.changed.push(p.clone()),
            _ => {}
        }
    }
    out
}

fn delta_size(old: &Peeked, new: &Peeked) -> SizeChange {
    let held: BTreeSet<&String> = old.sums.values().collect();
    let mut carried: BTreeSet<&String> = BTreeSet::new();
    let mut entries = 0;
    let mut bytes = Some(0u64);
    for (path, sum) in &new.sums {
        if held.contains(sum) {
            continue;
        }
        entries += 1;
        if carried.insert(sum) {
            let size = if path == kubexm_bundles::manifest::MANIFEST_PATH {
                Some(new.manifest_size)
            } else {
                new.manifest.sizes.get(path).copied()
            };
            bytes = bytes.zip(size).map(|(a, b)| a + b);
        }
    }
    SizeChange {
        old_bytes: None,
        new_bytes: None,
        delta_entries: entries,
        delta_bytes: bytes,
    }
}

/// A unified diff of two small UTF-8 texts, `None` when either is not or the diff is too long.
fn unified(old: &[u8], new: &[u8], name: &str) -> Option<String> {
    let small = |t: &[u8]| t.len() as u64 <= MAX_TEXT_DIFF;
    if !small(old) || !small(new) {
        return None;
    }
    let (a, b) = (
        std::str::from_utf8(old).ok()?,
        std::str::from_utf8(new).ok()?,
    );
    let text = similar::TextDiff::from_lines(a, b)
        .unified_diff()
        .context_radius(3)
        .header(&format!("old/{name}"), &format!("new/{name}"))
        .to_string();
    (text.len() <= MAX_DIFF_OUTPUT).then_some(text)
}

/// Sizes for people: `1.2 MiB (1234567 bytes)`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    #[allow(clippy::cast_precision_loss)]
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn opt_size(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "unknown size".to_owned(), size)
}

fn short(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("{}", Untrusted(&hex[..hex.len().min(12)]))
}

/// The diff for people. Every name from a bundle is escaped.
pub fn render_text(d: &BundleDiff) -> String {
    let mut o = String::new();
    let u = |s: &str| Untrusted(s.to_owned()).to_string();
    for (label, s) in [("old", &d.old), ("new", &d.new)] {
        let path: String = s
            .upgrade_path
            .iter()
            .map(|v| format!(" + {}", u(v)))
            .collect();
        let file = s
            .file_bytes
            .map(|b| format!(", {}", size(b)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "{label}: {} ({}{file}): cluster {}, Kubernetes {}{path}, content sha256:{}",
            u(&s.source),
            s.form,
            u(&s.cluster),
            u(&s.kubernetes_version),
            short(&s.content_digest)
        );
        for n in &s.notes {
            let _ = writeln!(o, "  note: {n}");
        }
    }
    if d.identical {
        let _ = writeln!(
            o,
            "\nThe two bundles have the same content: nothing changes."
        );
        return o;
    }
    if let Some(k) = &d.kubernetes {
        let _ = writeln!(o, "\nKubernetes: {} -> {}", u(&k.old), u(&k.new));
    }
    if let Some(p) = &d.upgrade_path {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.iter().map(|x| u(x)).collect::<Vec<_>>().join(", ")
            }
        };
        let _ = writeln!(o, "Upgrade path: {} -> {}", list(&p.old), list(&p.new));
    }
    if !d.components.is_empty() {
        let _ = writeln!(o, "\nComponents ({} changed):", d.components.len());
        let list = |v: &[String]| {
            if v.is_empty() {
                "-".to_owned()
            } else {
                v.iter().map(|x| u(x)).collect::<Vec<_>>().join(", ")
            }
        };
        for c in &d.components {
            let _ = writeln!(o, "  {}: {} -> {}", u(&c.name), list(&c.old), list(&c.new));
        }
    }
    let f = &d.files;
    let _ = writeln!(
        o,
        "\nFiles: {} added, {} removed, {} changed",
        f.added.len(),
        f.removed.len(),
        f.changed.len()
    );
    let file = |r: &FileRef| {
        format!(
            "{} {} {} ({}, sha256 {})",
            u(&r.name),
            u(&r.version),
            u(&r.arch),
            size(r.size),
            short(&r.sha256)
        )
    };
    for r in &f.added {
        let _ = writeln!(o, "  + {}", file(r));
    }
    for r in &f.removed {
        let _ = writeln!(o, "  - {}", file(r));
    }
    for c in &f.changed {
        let _ = writeln!(
            o,
            "  ~ {} {}: {} -> {} ({} -> {}, sha256 {} -> {})",
            u(&c.name),
            u(&c.arch),
            u(&c.old.version),
            u(&c.new.version),
            size(c.old.size),
            size(c.new.size),
            short(&c.old.sha256),
            short(&c.new.sha256)
        );
        if let Some(diff) = &c.diff {
            indent(&mut o, diff);
        }
    }
    let i = &d.images;
    let _ = writeln!(
        o,
        "\nImages: {} added, {} removed, {} retagged, {} changed",
        i.added.len(),
        i.removed.len(),
        i.retagged.len(),
        i.changed.len()
    );
    let image = |r: &ImageRef| {
        format!(
            "{} ({}, {})",
            u(&r.reference),
            short(&r.digest),
            opt_size(r.size)
        )
    };
    for r in &i.added {
        let _ = writeln!(o, "  + {}", image(r));
    }
    for r in &i.removed {
        let _ = writeln!(o, "  - {}", image(r));
    }
    for c in i.retagged.iter().chain(&i.changed) {
        let _ = writeln!(
            o,
            "  ~ {} -> {} ({} -> {}, {} -> {})",
            u(&c.old.reference),
            u(&c.new.reference),
            short(&c.old.digest),
            short(&c.new.digest),
            opt_size(c.old.size),
            opt_size(c.new.size)
        );
    }
    if !d.os_packages.is_empty() {
        let _ = writeln!(o, "\nOS packages:");
        for r in &d.os_packages {
            let _ = writeln!(
                o,
                "  {} ({}): {} added, {} removed, {} changed",
                u(&r.release),
                r.status,
                r.added.len(),
                r.removed.len(),
                r.changed.len()
            );
            for p in &r.added {
                let _ = writeln!(o, "    + {} {} {}", u(&p.name), u(&p.arch), u(&p.version));
            }
            for p in &r.removed {
                let _ = writeln!(o, "    - {} {} {}", u(&p.name), u(&p.arch), u(&p.version));
            }
            for p in &r.changed {
                let _ = writeln!(
                    o,
                    "    ~ {} {}: {} -> {}",
                    u(&p.name),
                    u(&p.arch),
                    u(&p.old),
                    u(&p.new)
                );
            }
        }
    }
    match &d.cluster_yaml {
        None => {
            let _ = writeln!(o, "\ncluster.yaml: unchanged");
        }
        Some(c) => {
            let _ = writeln!(
                o,
                "\ncluster.yaml: changed (sha256 {} -> {})",
                short(&c.old_sha256),
                short(&c.new_sha256)
            );
            if let Some(diff) = &c.diff {
                indent(&mut o, diff);
            }
        }
    }
    let e = &d.other_entries;
    if !(e.added.is_empty() && e.removed.is_empty() && e.changed.is_empty()) {
        let _ = writeln!(o, "\nOther entries:");
        for (mark, list) in [("+", &e.added), ("-", &e.removed), ("~", &e.changed)] {
            for p in list {
                let _ = writeln!(o, "  {mark} {}", u(p));
            }
        }
    }
    let s = &d.size;
    let _ = writeln!(
        o,
        "\nSize unpacked: {} -> {}; a delta against the old bundle (--have) would carry {} entries, {}",
        opt_size(s.old_bytes),
        opt_size(s.new_bytes),
        s.delta_entries,
        opt_size(s.delta_bytes)
    );
    o
}

fn indent(o: &mut String, diff: &str) {
    for line in diff.lines() {
        let _ = writeln!(o, "    {}", Untrusted(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_drop_the_tag_not_the_port() {
        assert_eq!(
            repository("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause"
        );
        assert_eq!(repository("127.0.0.1:5000/a/b:v1"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("127.0.0.1:5000/a/b"), "127.0.0.1:5000/a/b");
        assert_eq!(repository("a/b@sha256:00"), "a/b");
    }

    #[test]
    fn unified_diffs_only_small_text() {
        let d = unified(b"a: 1\nb: 2\n", b"a: 1\nb: 3\n", "cluster.yaml").expect("diff");
        assert!(d.contains("-b: 2\n+b: 3\n"), "{d}");
        assert!(
            d.starts_with("--- old/cluster.yaml\n+++ new/cluster.yaml\n"),
            "{d}"
        );
        assert!(unified(b"\xff", b"a", "x").is_none());
        let big = vec![b'a'; usize::try_from(MAX_TEXT_DIFF).unwrap_or(0) + 1];
        assert!(unified(&big, b"a", "x").is_none());
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 << 20), "3.0 MiB");
    }
}
