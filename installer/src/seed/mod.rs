//! Seeding: push every image of an unpacked bundle's OCI layout into a private registry, under
//! the rewrite rules (project/namespace, keep-path or flatten). Blobs first — each distinct
//! blob uploaded once, then mounted into the other repositories that need it — then child
//! manifests by digest, then each image's top manifest or index under its tag. Everything the
//! registry already has is skipped, so a re-run after a failure resumes and a re-seed uploads
//! nothing. Digests are preserved byte for byte.
//!
//! Every digest read from the bundle (`bundle.json`, `index.json`, manifests) is parsed into a
//! [`Digest`] before a blob path is built from it; the bundle's layout was already checked to
//! close when it was unpacked.

mod client;
mod error;
pub mod harbor;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures_util::{stream, StreamExt, TryStreamExt};
use kubexm_bundles::manifest::{BundleManifest, ImageRecord};
use kubexm_manifests::digest::Digest;
use kubexm_manifests::display::Untrusted;
use kubexm_manifests::image_ref::ImageRef;
use kubexm_manifests::model::RewriteMode;
use serde::Deserialize;

pub use client::{
    realm_allowed, same_origin, BlobOutcome, Deadlines, PushClient, CATALOG, CHUNK, MAX_API_BODY,
};
pub use error::{RegistryTarget, SeedError};

/// How to seed.
#[derive(Debug, Clone)]
pub struct SeedOptions {
    /// Target registry.
    pub target: RegistryTarget,
    /// Project / namespace prefix.
    pub project: Option<String>,
    /// Path rewrite.
    pub rewrite: RewriteMode,
    /// `Some(public)`: the target is Harbor; create missing projects (public or not) first.
    pub harbor: Option<bool>,
    /// With `harbor`: projects to create too, each public or not (`registry.harborConfig.projects`);
    /// a project the images need that is listed here gets this visibility.
    pub harbor_projects: Vec<(String, bool)>,
    /// Parallel uploads.
    pub jobs: usize,
    /// Tries per request.
    pub attempts: u32,
    /// First retry delay.
    pub retry_delay: Duration,
    /// Blobs larger than this are uploaded in chunks of this size ([`CHUNK`] by default).
    pub chunk_size: u64,
}

/// What a seed did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Images in the bundle.
    pub images: usize,
    /// Images the registry already had complete (skipped).
    pub images_complete: usize,
    /// Blobs uploaded.
    pub blobs_uploaded: usize,
    /// Blobs mounted from another repository.
    pub blobs_mounted: usize,
    /// Blobs the registry had already.
    pub blobs_present: usize,
    /// Manifests and indexes pushed.
    pub manifests_pushed: usize,
    /// Harbor projects created.
    pub projects_created: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Doc {
    #[serde(default)]
    manifests: Option<Vec<Desc>>,
    #[serde(default)]
    config: Option<Desc>,
    #[serde(default)]
    layers: Vec<Desc>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Desc {
    #[serde(default)]
    media_type: Option<String>,
    /// Validated when parsed: a bad digest fails the whole manifest.
    digest: Digest,
    #[serde(default)]
    size: u64,
}

/// One image's push plan.
struct Plan {
    repo: String,
    tag: String,
    top_digest: Digest,
    top_media_type: String,
    /// (digest, media type) of child manifests, pushed by digest before the top.
    children: Vec<(Digest, String)>,
    /// Blob digests with sizes.
    blobs: BTreeMap<Digest, u64>,
}

/// The target reference of a bundle image.
pub fn target_reference(record: &ImageRecord, opts: &SeedOptions) -> Result<ImageRef, SeedError> {
    let src: ImageRef = record
        .reference
        .parse()
        .map_err(|e| SeedError::Layout(format!("{e}")))?;
    Ok(src.in_private_registry(&opts.target.host, opts.project.as_deref(), opts.rewrite))
}

/// A repository and the blobs (`sha256:…` → size) an image puts there.
pub type RepositoryBlobs = (String, BTreeMap<Digest, u64>);

/// For each image of the bundle unpacked at `dir`: the repository it is seeded to and the
/// configs and layers it is made of (`sha256:…` → size): what a registry serves under
/// `/blobs/`. Manifests and indexes are not listed: registries serve them under `/manifests/`.
///
/// # Errors
///
/// [`SeedError::Layout`] or [`SeedError::Read`] when the layout does not hold what it promises.
pub fn image_blobs(
    dir: &Path,
    manifest: &BundleManifest,
    opts: &SeedOptions,
) -> Result<Vec<RepositoryBlobs>, SeedError> {
    let blobs_dir = dir.join("images/blobs");
    manifest
        .images
        .iter()
        .map(|r| plan(&blobs_dir, r, opts).map(|p| (p.repo, p.blobs)))
        .collect()
}

/// Seeds every image of the bundle unpacked at `dir`, with the default [`Deadlines`].
pub async fn seed(
    dir: &Path,
    manifest: &BundleManifest,
    opts: &SeedOptions,
) -> Result<SeedReport, SeedError> {
    seed_with(dir, manifest, opts, Deadlines::default()).await
}

/// [`seed`] held to `deadlines`.
pub async fn seed_with(
    dir: &Path,
    manifest: &BundleManifest,
    opts: &SeedOptions,
    deadlines: Deadlines,
) -> Result<SeedReport, SeedError> {
    let blobs_dir = dir.join("images/blobs");
    let plans = manifest
        .images
        .iter()
        .map(|r| plan(&blobs_dir, r, opts))
        .collect::<Result<Vec<_>, _>>()?;
    let client = PushClient::with_deadlines(
        &opts.target,
        opts.attempts,
        opts.retry_delay,
        opts.chunk_size,
        deadlines,
    )?;
    let mut report = SeedReport {
        images: plans.len(),
        ..SeedReport::default()
    };
    if let Some(public) = opts.harbor {
        let mut wanted: BTreeMap<String, bool> = opts.harbor_projects.iter().cloned().collect();
        for p in &plans {
            if let Some(project) = p.repo.split('/').next() {
                wanted.entry(project.to_owned()).or_insert(public);
            }
        }
        for visibility in [true, false] {
            let projects: Vec<String> = wanted
                .iter()
                .filter(|(_, v)| **v == visibility)
                .map(|(p, _)| p.clone())
                .collect();
            if projects.is_empty() {
                continue;
            }
            report
                .projects_created
                .extend(harbor::ensure_projects(&client, &projects, visibility).await?);
        }
    }

    // An image whose tag already resolves to its top digest is complete (a registry refuses a
    // manifest whose blobs are missing): skip it without touching its blobs.
    let complete: Vec<bool> = stream::iter(plans.iter())
        .map(|p| {
            let client = &client;
            async move {
                let have = client
                    .manifest_digest(&p.repo, &p.tag, &p.top_media_type)
                    .await?;
                Ok::<bool, SeedError>(have == Some(p.top_digest.to_string()))
            }
        })
        .buffered(opts.jobs)
        .try_collect()
        .await?;
    report.images_complete = complete.iter().filter(|c| **c).count();
    let plans: Vec<Plan> = plans
        .into_iter()
        .zip(complete)
        .filter(|(_, done)| !done)
        .map(|(p, _)| p)
        .collect();

    // Each distinct blob goes up once to the first repository that needs it…
    let mut primary: BTreeMap<&Digest, (&str, u64)> = BTreeMap::new();
    let mut others: Vec<(&str, &Digest, u64)> = Vec::new();
    for p in &plans {
        for (digest, size) in &p.blobs {
            match primary.get(digest) {
                None => {
                    primary.insert(digest, (&p.repo, *size));
                }
                Some((repo, _)) if *repo == p.repo => {}
                Some(_) => others.push((&p.repo, digest, *size)),
            }
        }
    }
    let path_of = |digest: &Digest| digest.blob_path(&blobs_dir);
    let bar = progress_bar((primary.len() + others.len()) as u64);
    let first: Vec<BlobOutcome> = stream::iter(primary.iter())
        .map(|(digest, (repo, size))| {
            let client = &client;
            let path = path_of(digest);
            let bar = &bar;
            async move {
                let outcome = client.ensure_blob(repo, digest, &path, *size, None).await;
                blob_done(bar, repo, digest, *size, outcome.as_ref().ok());
                outcome
            }
        })
        .buffer_unordered(opts.jobs)
        .try_collect()
        .await?;
    // …and is mounted into the others.
    let rest: Vec<BlobOutcome> = stream::iter(others.iter())
        .map(|(repo, digest, size)| {
            let client = &client;
            let from = primary.get(digest).map(|(r, _)| *r);
            let path = path_of(digest);
            let bar = &bar;
            async move {
                let outcome = client.ensure_blob(repo, digest, &path, *size, from).await;
                blob_done(bar, repo, digest, *size, outcome.as_ref().ok());
                outcome
            }
        })
        .buffer_unordered(opts.jobs)
        .try_collect()
        .await?;
    for o in first.iter().chain(&rest) {
        match o {
            BlobOutcome::Present => report.blobs_present += 1,
            BlobOutcome::Mounted => report.blobs_mounted += 1,
            BlobOutcome::Uploaded => report.blobs_uploaded += 1,
        }
    }

    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    // Manifests: children by digest, then the top under its tag.
    let pushed: Vec<usize> = stream::iter(plans.iter())
        .map(|p| push_manifests(&client, &blobs_dir, p))
        .buffer_unordered(opts.jobs)
        .try_collect()
        .await?;
    report.manifests_pushed = pushed.iter().sum();
    for p in &plans {
        tracing::info!(image = %format!("{}/{}:{}", opts.target.host, p.repo, p.tag), digest = %p.top_digest, "seeded");
    }
    Ok(report)
}

/// A blob progress bar when stderr is a terminal; JSON log lines are written either way.
fn progress_bar(total: u64) -> Option<indicatif::ProgressBar> {
    crate::progress::bar(total, "{spinner} blobs {pos}/{len} {wide_bar} {msg}")
}

fn blob_done(
    bar: &Option<indicatif::ProgressBar>,
    repo: &str,
    digest: &Digest,
    size: u64,
    outcome: Option<&BlobOutcome>,
) {
    if let Some(b) = bar {
        b.inc(1);
        b.set_message(Untrusted(repo).to_string());
    }
    if let Some(o) = outcome {
        tracing::info!(repo = %Untrusted(repo), %digest, size, outcome = ?o, "blob");
    }
}

async fn push_manifests(
    client: &PushClient,
    blobs_dir: &Path,
    p: &Plan,
) -> Result<usize, SeedError> {
    let mut pushed = 0;
    for (digest, media_type) in &p.children {
        let reference = digest.to_string();
        if client
            .manifest_digest(&p.repo, &reference, media_type)
            .await?
            != Some(reference.clone())
        {
            let bytes = read_blob(blobs_dir, digest)?;
            client
                .put_manifest(&p.repo, &reference, media_type, &bytes)
                .await?;
            pushed += 1;
        }
    }
    if client
        .manifest_digest(&p.repo, &p.tag, &p.top_media_type)
        .await?
        != Some(p.top_digest.to_string())
    {
        let bytes = read_blob(blobs_dir, &p.top_digest)?;
        client
            .put_manifest(&p.repo, &p.tag, &p.top_media_type, &bytes)
            .await?;
        pushed += 1;
    }
    Ok(pushed)
}

/// Largest manifest read from the layout (as the layout check allows).
const MAX_MANIFEST: u64 = kubexm_bundles::layout::MAX_MANIFEST_SIZE;

fn read_blob(blobs_dir: &Path, digest: &Digest) -> Result<Vec<u8>, SeedError> {
    use std::io::Read;
    let path = digest.blob_path(blobs_dir);
    let read_err = |source| SeedError::Read {
        path: path.clone(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .map_err(read_err)?
        .take(MAX_MANIFEST + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_MANIFEST {
        return Err(SeedError::Layout(format!(
            "manifest {digest} is larger than {MAX_MANIFEST} bytes"
        )));
    }
    Ok(bytes)
}

fn parse_doc(bytes: &[u8], digest: &Digest) -> Result<Doc, SeedError> {
    serde_json::from_slice(bytes).map_err(|e| {
        SeedError::Layout(format!(
            "manifest {digest} is not a manifest with valid digests: {e}"
        ))
    })
}

/// A digest from `bundle.json`, validated.
fn record_digest(record: &ImageRecord) -> Result<Digest, SeedError> {
    Digest::parse(&record.digest).map_err(|e| {
        SeedError::Layout(format!(
            "`bundle.json` image {}: {e}",
            Untrusted(&record.reference)
        ))
    })
}

fn plan(blobs_dir: &Path, record: &ImageRecord, opts: &SeedOptions) -> Result<Plan, SeedError> {
    let target = target_reference(record, opts)?;
    let tag = target
        .tag
        .clone()
        .or_else(|| target.digest.clone())
        .ok_or_else(|| {
            SeedError::Layout(format!("{} has neither tag nor digest", record.reference))
        })?;
    let top_digest = record_digest(record)?;
    let top = parse_doc(&read_blob(blobs_dir, &top_digest)?, &top_digest)?;
    let mut children = Vec::new();
    let mut blobs = BTreeMap::new();
    let mut add_image = |doc: &Doc, digest: &Digest| -> Result<(), SeedError> {
        let config = doc
            .config
            .as_ref()
            .ok_or_else(|| SeedError::Layout(format!("manifest {digest} has no config")))?;
        for d in std::iter::once(config).chain(&doc.layers) {
            if !d.digest.blob_path(blobs_dir).is_file() {
                return Err(SeedError::Layout(format!(
                    "{}: blob {} is missing",
                    Untrusted(&record.reference),
                    d.digest
                )));
            }
            blobs.insert(d.digest.clone(), d.size);
        }
        Ok(())
    };
    match &top.manifests {
        Some(list) => {
            for child in list {
                let child_doc = parse_doc(&read_blob(blobs_dir, &child.digest)?, &child.digest)?;
                add_image(&child_doc, &child.digest)?;
                let mt = child
                    .media_type
                    .clone()
                    .unwrap_or_else(|| "application/vnd.oci.image.manifest.v1+json".to_owned());
                children.push((child.digest.clone(), mt));
            }
        }
        None => add_image(&top, &top_digest)?,
    }
    Ok(Plan {
        repo: target.repository.clone(),
        tag,
        top_digest,
        top_media_type: record.media_type.clone(),
        children,
        blobs,
    })
}
