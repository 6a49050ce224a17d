//! The KubeXM bundle format, shared by `kubexm-build` (writes bundles) and `kubexm-install`
//! (verifies and unpacks them). The format is specified in `bundles/README.md`.
//!
//! ```no_run
//! use std::path::{Path, PathBuf};
//! use kubexm_bundles::pack::{pack, Entry, PackOptions, Source, FILE_MODE};
//! use kubexm_bundles::verify::{verify, DirSink};
//! # fn demo(manifest: kubexm_bundles::manifest::BundleManifest) -> Result<(), Box<dyn std::error::Error>> {
//! let entries = vec![Entry {
//!     path: "cluster.yaml".into(),
//!     source: Source::File(PathBuf::from("cluster.yaml")),
//!     sha256: None,
//!     mode: FILE_MODE,
//! }];
//! let report = pack(Path::new("b.tar.zst"), &manifest, entries, &PackOptions::from_env()?)?;
//! let file = fs_err::File::open(&report.path)?;
//! verify(file, &mut DirSink::new("extracted")?)?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod atomic;
mod check;
pub mod delta;
mod dirsink;
pub mod hash;
pub mod head;
pub mod layout;
pub mod manifest;
pub mod pack;
mod path;
pub mod peek;
mod pins;
pub mod pipe;
pub mod prefetch;
pub mod regular;
pub mod sign;
mod space;
pub mod split;
mod sums;
pub mod verify;
mod worker_sink;
mod writeback;

pub use check::ManifestProblem;
pub use pack::{pack, PackError};
pub use path::PathProblem;
pub use sums::SumsError;
pub use verify::{verify, VerifyError};

/// Version of the bundle layout written in `bundle.json`: 2 pins every entry's size
/// (`sizes`).
pub const FORMAT_VERSION: u32 = 2;
/// Versions [`verify()`] reads: 1 (sizes not pinned; checked as entries arrive) and 2.
pub const READABLE_FORMAT_VERSIONS: [u32; 2] = [1, 2];

/// Any error of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Writing a bundle failed.
    #[error(transparent)]
    Pack(#[from] PackError),
    /// A bundle failed verification.
    #[error(transparent)]
    Verify(#[from] VerifyError),
}
