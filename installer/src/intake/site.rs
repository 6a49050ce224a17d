//! What an air-gapped site holds: the files of every bundle unpacked in the work directory and
//! the blobs of its registry. `kubexm-install inventory` writes it as a site inventory
//! (`kubexm_bundles::delta::SiteInventory`) for `kubexm-build bundle --have`, and a delta bundle
//! is completed from the same scan.
//!
//! Registry blobs are found two ways, then each is confirmed with a `HEAD /v2/<repo>/blobs/<digest>`:
//! the configs and layers of the images of every unpacked bundle (in the repository seeding puts
//! them), and — with `catalog` — every repository the registry lists (`/v2/_catalog`), every tag
//! of it, and the configs and layers its manifests name. Both walks are bounded (`MAX_*`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use futures_util::{stream, StreamExt};
use kubexm_bundles::delta::{
    parse_sums, BlobAt, RegistryHoldings, SiteInventory, INVENTORY_VERSION,
};
use kubexm_bundles::manifest::{BundleManifest, MANIFEST_PATH, SUMS_PATH};
use serde::Deserialize;

use crate::seed::{self, PushClient, SeedError, SeedOptions, CATALOG};
use crate::unpack::{BUNDLES_DIR, MARKER};

/// Repositories read from a registry catalog, at most.
pub const MAX_REPOSITORIES: usize = 10_000;
/// Tags read per repository, at most.
pub const MAX_TAGS: usize = 1_000;
/// Names asked per catalog page.
const PAGE: usize = 1_000;
/// Largest catalog, tag list or manifest read.
const MAX_DOCUMENT: u64 = 4 << 20;
/// Concurrent registry requests.
const JOBS: usize = 8;
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

/// Why the site could not be inventoried.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SiteError {
    /// A file of the work directory cannot be read.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An unpacked bundle is damaged (its `SHA256SUMS` or `bundle.json`).
    #[error("the unpacked bundle `{}` is damaged: {reason}", dir.display())]
    Damaged {
        /// Its directory.
        dir: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The registry failed.
    #[error(transparent)]
    Registry(#[from] SeedError),
}

/// An unpacked bundle.
#[derive(Debug, Clone)]
pub struct SiteBundle {
    /// Content digest.
    pub digest: String,
    /// Its directory.
    pub dir: PathBuf,
}

/// The files the site's unpacked bundles hold.
#[derive(Debug, Clone, Default)]
pub struct SiteFiles {
    /// sha256 → (a file with that content, its size).
    pub by_sha: BTreeMap<String, (PathBuf, u64)>,
    /// The unpacked bundles.
    pub bundles: Vec<SiteBundle>,
}

/// Scans `work_dir/bundles/`: every complete unpack (marker naming its digest), every file its
/// `SHA256SUMS` lists that is present as a regular file.
///
/// # Errors
///
/// [`SiteError::Read`] or [`SiteError::Damaged`].
pub fn scan(work_dir: &Path) -> Result<SiteFiles, SiteError> {
    let root = work_dir.join(BUNDLES_DIR);
    let mut out = SiteFiles::default();
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(source) => return Err(SiteError::Read { path: root, source }),
    };
    let mut dirs: Vec<(String, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| SiteError::Read {
            path: root.clone(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        let is_digest = name.len() == 64
            && name
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        let complete = is_digest
            && std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir())
            && std::fs::read_to_string(dir.join(MARKER)).is_ok_and(|m| m.trim_end() == name);
        if complete {
            dirs.push((name, dir));
        }
    }
    dirs.sort();
    for (digest, dir) in dirs {
        let sums_path = dir.join(SUMS_PATH);
        let bytes = std::fs::read(&sums_path).map_err(|source| SiteError::Read {
            path: sums_path.clone(),
            source,
        })?;
        let sums = parse_sums(&bytes).map_err(|e| SiteError::Damaged {
            dir: dir.clone(),
            reason: e.to_string(),
        })?;
        for (path, sum) in sums {
            let file = dir.join(&path);
            match std::fs::symlink_metadata(&file) {
                Ok(m) if m.is_file() => {
                    out.by_sha.entry(sum).or_insert((file, m.len()));
                }
                _ => {
                    tracing::warn!(bundle = %digest, path = %path, "listed file missing from the unpacked bundle; not counted");
                }
            }
        }
        out.bundles.push(SiteBundle { digest, dir });
    }
    Ok(out)
}

/// Candidate (digest → repositories) from the unpacked bundles' images.
fn bundle_candidates(
    files: &SiteFiles,
    opts: &SeedOptions,
    into: &mut BTreeMap<String, (u64, BTreeSet<String>)>,
) -> Result<(), SiteError> {
    for b in &files.bundles {
        let path = b.dir.join(MANIFEST_PATH);
        let bytes = std::fs::read(&path).map_err(|source| SiteError::Read {
            path: path.clone(),
            source,
        })?;
        let manifest: BundleManifest =
            serde_json::from_slice(&bytes).map_err(|e| SiteError::Damaged {
                dir: b.dir.clone(),
                reason: format!("bundle.json: {e}"),
            })?;
        for (repo, blobs) in seed::image_blobs(&b.dir, &manifest, opts)? {
            for (digest, size) in blobs {
                let digest = digest.to_string();
                into.entry(digest)
                    .or_insert((size, BTreeSet::new()))
                    .1
                    .insert(repo.clone());
            }
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct Catalog {
    #[serde(default)]
    repositories: Vec<String>,
}

#[derive(Deserialize)]
struct Tags {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Doc {
    #[serde(default)]
    manifests: Option<Vec<Desc>>,
    #[serde(default)]
    config: Option<Desc>,
    #[serde(default)]
    layers: Vec<Desc>,
}

#[derive(Deserialize)]
struct Desc {
    digest: String,
    #[serde(default)]
    size: u64,
}

fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn is_repository(s: &str) -> bool {
    !s.is_empty()
        && s.split('/').all(|c| {
            !c.is_empty()
                && c != ".."
                && c.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
                })
        })
}

fn is_tag(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Candidates from the registry catalog: every repository, tag and manifest.
async fn catalog_candidates(
    client: &PushClient,
    into: &mut BTreeMap<String, (u64, BTreeSet<String>)>,
) -> Result<(), SiteError> {
    // Pages of PAGE names (the distribution registry's largest), following `last`.
    let mut repositories: Vec<String> = Vec::new();
    loop {
        let mut path = format!("/v2/_catalog?n={PAGE}");
        if let Some(last) = repositories.last() {
            path.push_str(&format!("&last={last}"));
        }
        let Some(bytes) = client.get_small(CATALOG, &path, None, MAX_DOCUMENT).await? else {
            break;
        };
        let page: Catalog = serde_json::from_slice(&bytes).map_err(|e| SeedError::Protocol {
            registry: client.base().to_owned(),
            detail: format!("/v2/_catalog is not a catalog: {e}"),
        })?;
        let n = page.repositories.len();
        let before = repositories.len();
        repositories.extend(page.repositories.into_iter().filter(|r| is_repository(r)));
        if n < PAGE || repositories.len() == before || repositories.len() >= MAX_REPOSITORIES {
            break;
        }
    }
    for repo in repositories.iter().take(MAX_REPOSITORIES) {
        let Some(bytes) = client
            .get_small(repo, &format!("/v2/{repo}/tags/list"), None, MAX_DOCUMENT)
            .await?
        else {
            continue;
        };
        let tags: Tags = serde_json::from_slice(&bytes).unwrap_or(Tags { tags: None });
        let mut manifests: Vec<String> = tags
            .tags
            .unwrap_or_default()
            .into_iter()
            .filter(|t| is_tag(t))
            .take(MAX_TAGS)
            .collect();
        let mut seen = BTreeSet::new();
        while let Some(reference) = manifests.pop() {
            if !seen.insert(reference.clone()) || seen.len() > MAX_TAGS * 4 {
                continue;
            }
            let Some(bytes) = client
                .get_small(
                    repo,
                    &format!("/v2/{repo}/manifests/{reference}"),
                    Some(ACCEPT),
                    MAX_DOCUMENT,
                )
                .await?
            else {
                continue;
            };
            let Ok(doc) = serde_json::from_slice::<Doc>(&bytes) else {
                continue;
            };
            for child in doc.manifests.unwrap_or_default() {
                if is_digest(&child.digest) {
                    manifests.push(child.digest);
                }
            }
            for d in doc.config.into_iter().chain(doc.layers) {
                if is_digest(&d.digest) {
                    into.entry(d.digest)
                        .or_insert((d.size, BTreeSet::new()))
                        .1
                        .insert(repo.clone());
                }
            }
        }
    }
    Ok(())
}

/// The blobs `opts.target` serves, found from the unpacked bundles (and its catalog with
/// `catalog`), each confirmed with a HEAD.
///
/// # Errors
///
/// [`SiteError`]: an unreadable bundle, or a registry error other than a missing blob.
pub async fn registry_holdings(
    files: &SiteFiles,
    opts: &SeedOptions,
    catalog: bool,
) -> Result<RegistryHoldings, SiteError> {
    let client = PushClient::new(
        &opts.target,
        opts.attempts,
        opts.retry_delay,
        opts.chunk_size,
    )?;
    let mut candidates = BTreeMap::new();
    bundle_candidates(files, opts, &mut candidates)?;
    if catalog {
        catalog_candidates(&client, &mut candidates).await?;
    }
    let found: Vec<Option<(String, BlobAt)>> = stream::iter(candidates)
        .map(|(digest, (size, repos))| {
            let client = &client;
            async move {
                for repo in repos {
                    if let Some(served) = client.blob_size(&repo, &digest).await? {
                        let size = if served > 0 { served } else { size };
                        return Ok::<_, SeedError>(Some((
                            digest,
                            BlobAt {
                                size,
                                repository: repo,
                            },
                        )));
                    }
                }
                Ok(None)
            }
        })
        .buffer_unordered(JOBS)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    Ok(RegistryHoldings {
        host: opts.target.host.clone(),
        blobs: found.into_iter().flatten().collect(),
    })
}

/// The site inventory: `files` and, when given, what the registry serves.
pub fn inventory(
    files: &SiteFiles,
    registry: Option<RegistryHoldings>,
    created: u64,
) -> SiteInventory {
    SiteInventory {
        kubexm_inventory: INVENTORY_VERSION,
        created,
        bundles: files.bundles.iter().map(|b| b.digest.clone()).collect(),
        files: files
            .by_sha
            .iter()
            .map(|(sha, (_, size))| (sha.clone(), *size))
            .collect(),
        registry,
    }
}
