//! Delta bundles at the site (format: `kubexm_bundles::delta`). Before unpacking, the delta's
//! `delta.json` is read from the head of the stream and every entry it does not carry is looked
//! up at the site: an absent base is refused there, naming each missing entry, before anything
//! is written. After the delta is unpacked, the full bundle's tree is rebuilt from the delta,
//! the unpacked bundles and (for blobs only the registry holds) the site's registry, each entry
//! checked against its sha256 and size, streamed through the same verifier as a whole bundle
//! (pinned sizes, sums, paths, the image layout's closure, the free-space limit), and published under the full bundle's content digest — the tree
//! the rest of the install reads, exactly as if the full bundle had been unpacked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use futures_util::{stream, StreamExt, TryStreamExt};
use kubexm_bundles::delta::{self as format, DeltaEntry, DeltaError, DeltaManifest, EntrySource};
use kubexm_bundles::head::{read_head, HeadError};
use kubexm_bundles::verify::DirSink;

use super::site::SiteFiles;
use super::source::BundleSource;
use crate::seed::{PushClient, SeedError, SeedOptions};
use crate::unpack::{publish_tree, UnpackError, Unpacked};

/// Why a delta bundle cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntakeDeltaError {
    /// The head of the bundle cannot be read.
    #[error("cannot read the head of `{}`", bundle.display())]
    Head {
        /// The bundle.
        bundle: PathBuf,
        /// The cause.
        #[source]
        source: HeadError,
    },
    /// `delta.json` is invalid, or the base is absent (named), or a source does not match.
    #[error("delta bundle `{}`", bundle.display())]
    Delta {
        /// The bundle.
        bundle: PathBuf,
        /// The cause.
        #[source]
        source: DeltaError,
    },
    /// A registry blob could not be fetched.
    #[error("cannot fetch the base blobs from the site registry")]
    Registry(#[from] SeedError),
    /// Publishing the rebuilt tree failed.
    #[error(transparent)]
    Unpack(#[from] UnpackError),
}

/// `delta.json` of `source` when it is a delta bundle (read from the head of its stream).
///
/// # Errors
///
/// [`IntakeDeltaError::Head`] or an invalid `delta.json`.
pub fn read_delta(source: &BundleSource) -> Result<Option<DeltaManifest>, IntakeDeltaError> {
    let bundle = source.path().to_owned();
    let head_err = |source| IntakeDeltaError::Head {
        bundle: bundle.clone(),
        source,
    };
    let (reader, _) = source
        .reader()
        .map_err(|e| head_err(HeadError::Stream(e)))?;
    let head = read_head(reader, Some(format::DELTA_PATH)).map_err(head_err)?;
    let Some(bytes) = head.also else {
        return Ok(None);
    };
    DeltaManifest::parse(&bytes)
        .map(Some)
        .map_err(|source| IntakeDeltaError::Delta { bundle, source })
}

/// Refuses a delta whose base the site does not hold, naming every missing entry. Entries only
/// the registry holds count as present when `registry` is given (they are fetched later).
///
/// # Errors
///
/// [`IntakeDeltaError::Delta`] with [`DeltaError::BaseMissing`].
pub fn check_base(
    bundle: &Path,
    delta: &DeltaManifest,
    files: &SiteFiles,
    registry: bool,
) -> Result<(), IntakeDeltaError> {
    let missing = delta.missing(|e| {
        files.by_sha.contains_key(&e.sha256) || (registry && e.source == EntrySource::Registry)
    });
    if missing.is_empty() {
        return Ok(());
    }
    Err(IntakeDeltaError::Delta {
        bundle: bundle.to_owned(),
        source: DeltaError::BaseMissing { missing },
    })
}

/// Rebuilds and publishes the full bundle's tree from the unpacked delta `unpacked`, the site's
/// files and, for blobs they lack, the registry of `registry`.
///
/// # Errors
///
/// See [`IntakeDeltaError`]; nothing is published unless every entry matched.
pub async fn complete(
    bundle: &Path,
    delta: &DeltaManifest,
    unpacked: &Unpacked,
    files: &SiteFiles,
    registry: Option<&SeedOptions>,
    work_dir: &Path,
) -> Result<Unpacked, IntakeDeltaError> {
    check_base(bundle, delta, files, registry.is_some())?;
    let fetch_dir = tempfile::Builder::new()
        .prefix(".kubexm-delta-fetch-")
        .tempdir_in(work_dir)
        .map_err(|source| UnpackError::Io {
            action: "create",
            path: work_dir.to_owned(),
            source,
        })?;
    let fetched = fetch_from_registry(delta, files, registry, fetch_dir.path()).await?;
    let delta_root = unpacked.dir.clone();
    let by_sha: BTreeMap<String, PathBuf> = files
        .by_sha
        .iter()
        .map(|(k, (p, _))| (k.clone(), p.clone()))
        .chain(fetched)
        .collect();
    let plan = delta.clone();
    let bundle_owned = bundle.to_owned();
    let published = publish_tree(
        work_dir,
        &delta.target_content_digest,
        move |out, limits| {
            let locate = |e: &DeltaEntry| by_sha.get(&e.sha256).cloned();
            let boxed = |source| {
                Box::new(IntakeDeltaError::Delta {
                    bundle: bundle_owned.clone(),
                    source,
                }) as Box<dyn std::error::Error + Send + Sync>
            };
            let mut sink = DirSink::new(out).map_err(|source| {
                boxed(DeltaError::Io {
                    path: out.to_owned(),
                    source,
                })
            })?;
            // The same verifier as any bundle: pinned sizes, sums, paths, the layout closure.
            format::rebuild_into(&plan, &delta_root, &mut sink, limits, &locate).map_err(boxed)?;
            Ok(())
        },
    )?;
    tracing::info!(
        bundle = %bundle.display(),
        dir = %published.dir.display(),
        "delta bundle completed from the site"
    );
    Ok(published)
}

/// Downloads the registry-only entries into `dir`, verified; returns sha256 → file.
async fn fetch_from_registry(
    delta: &DeltaManifest,
    files: &SiteFiles,
    registry: Option<&SeedOptions>,
    dir: &Path,
) -> Result<BTreeMap<String, PathBuf>, IntakeDeltaError> {
    let wanted: BTreeMap<String, (String, u64)> = delta
        .entries
        .iter()
        .filter(|e| e.source == EntrySource::Registry && !files.by_sha.contains_key(&e.sha256))
        .filter_map(|e| {
            e.repository
                .clone()
                .map(|r| (e.sha256.clone(), (r, e.size)))
        })
        .collect();
    let Some(opts) = registry.filter(|_| !wanted.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let client = PushClient::new(
        &opts.target,
        opts.attempts,
        opts.retry_delay,
        opts.chunk_size,
    )?;
    let fetched: Vec<(String, PathBuf)> = stream::iter(wanted)
        .map(|(sha, (repo, size))| {
            let client = &client;
            let dest = dir.join(&sha);
            async move {
                client
                    .download_blob(&repo, &format!("sha256:{sha}"), size, &dest)
                    .await?;
                Ok::<_, SeedError>((sha, dest))
            }
        })
        .buffer_unordered(opts.jobs.max(1))
        .try_collect()
        .await?;
    Ok(fetched.into_iter().collect())
}
