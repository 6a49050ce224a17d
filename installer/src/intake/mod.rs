//! A bundle on its way in, before and after it is unpacked:
//!
//! * [`source`]: where its bytes come from — one `.tar.zst`, or the parts of a split bundle
//!   (`X.parts.json`), read as one stream, each part checked against its sha256;
//! * [`trust`]: whether it is signed by a trusted key — checked on the content digest read from
//!   the head of the stream, before anything is unpacked;
//! * [`site`]: what the site already holds (unpacked bundles, registry blobs): the inventory a
//!   delta bundle is made against;
//! * [`delta`]: a delta bundle refused when its base is absent, else completed from the site
//!   into the full bundle's tree.
//!
//! [`prepare`] runs them in that order; every command that reads a bundle goes through it.

pub mod delta;
pub mod site;
pub mod source;
pub mod trust;

use std::path::{Path, PathBuf};

use kubexm_bundles::split::SplitError;

use crate::seed::SeedOptions;
use crate::unpack::{unpack, unpack_reader, UnpackError, Unpacked, BUNDLES_DIR, MARKER};
use delta::IntakeDeltaError;
use source::BundleSource;
use trust::{TrustError, TrustPolicy, Verified};

/// Why a bundle was not taken in.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntakeError {
    /// The split index cannot be used.
    #[error(transparent)]
    Split(#[from] SplitError),
    /// Parts of a split bundle are damaged or missing (each named).
    #[error("{} of the {total} parts of `{}` are damaged or missing; copy them again:\n{}", .parts.len(), bundle.display(), .parts.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Parts {
        /// The index.
        bundle: PathBuf,
        /// Number of parts.
        total: usize,
        /// Each damaged part.
        parts: Vec<String>,
    },
    /// The signature check refused it.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// A delta bundle whose base is absent, or that could not be completed.
    #[error(transparent)]
    Delta(Box<IntakeDeltaError>),
    /// Unpacking failed.
    #[error(transparent)]
    Unpack(#[from] UnpackError),
    /// The site's unpacked bundles cannot be read.
    #[error(transparent)]
    Site(#[from] site::SiteError),
}

impl From<IntakeDeltaError> for IntakeError {
    fn from(e: IntakeDeltaError) -> Self {
        Self::Delta(Box::new(e))
    }
}

/// A bundle taken in: the tree to install from.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The unpacked tree (for a delta bundle, the completed full tree).
    pub unpacked: Unpacked,
    /// The signature that verified, when keys are configured.
    pub verified: Option<Verified>,
    /// The delta bundle's own tree, when the bundle was a delta.
    pub delta_of: Option<Unpacked>,
}

/// Takes `path` in: signature (when `trust` has keys) before anything is unpacked, a delta's
/// base checked before anything is unpacked, then the unpack (from the parts of a split bundle
/// as one stream), then a delta completed from the site (blobs only the registry holds fetched
/// with `registry`).
///
/// # Errors
///
/// See [`IntakeError`]; each names the bundle, the part, the key or the missing entries.
pub fn prepare(
    path: &Path,
    work_dir: &Path,
    trust: &TrustPolicy,
    registry: Option<&SeedOptions>,
) -> Result<Prepared, IntakeError> {
    let source = BundleSource::open(path)?;
    let verified = trust.check(&source)?;
    let plan = delta::read_delta(&source)?;
    if let Some(plan) = &plan {
        if !is_complete(work_dir, &plan.target_content_digest) {
            let files = site::scan(work_dir)?;
            delta::check_base(path, plan, &files, registry.is_some())?;
        }
    }
    let unpacked = match &source {
        BundleSource::File(p) => unpack(p, work_dir)?,
        BundleSource::Parts { index, .. } => {
            let (reader, status) = source.reader().map_err(|e| UnpackError::Open {
                path: path.to_owned(),
                source: e,
            })?;
            let size = index.size;
            match unpack_reader(reader, path, size, work_dir) {
                Ok(u) => u,
                Err(e) => {
                    let damaged = source.damaged_parts();
                    if damaged.is_empty() {
                        if let Some(problem) = status.and_then(|s| s.problem()) {
                            tracing::warn!(%problem, "a part failed while reading");
                        }
                        return Err(e.into());
                    }
                    return Err(IntakeError::Parts {
                        bundle: path.to_owned(),
                        total: index.parts.len(),
                        parts: damaged.iter().map(ToString::to_string).collect(),
                    });
                }
            }
        }
    };
    if let Some(v) = &verified {
        v.confirm(&unpacked.digest)?;
    }
    let Some(plan) = plan else {
        return Ok(Prepared {
            unpacked,
            verified,
            delta_of: None,
        });
    };
    let files = site::scan(work_dir)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| UnpackError::Io {
            action: "start a runtime for",
            path: path.to_owned(),
            source,
        })?;
    let full = if is_complete(work_dir, &plan.target_content_digest) {
        // Completed by an earlier run: publish_tree reuses it.
        crate::unpack::publish_tree(work_dir, &plan.target_content_digest, |_, _| {
            Err("the completed tree vanished".into())
        })?
    } else {
        runtime.block_on(delta::complete(
            path, &plan, &unpacked, &files, registry, work_dir,
        ))?
    };
    Ok(Prepared {
        unpacked: full,
        verified,
        delta_of: Some(unpacked),
    })
}

/// Whether `work_dir/bundles/<digest>/` is a complete tree.
fn is_complete(work_dir: &Path, digest: &str) -> bool {
    let dir = work_dir.join(BUNDLES_DIR).join(digest);
    std::fs::read_to_string(dir.join(MARKER)).is_ok_and(|m| m.trim_end() == digest)
}
