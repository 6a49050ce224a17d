//! The exit codes of `kubexm-build`, the same contract as `kubexm-install`'s (documented in
//! `installer/docs/guide.md`, "Exit codes"); the classes a build can end in.

use std::process::ExitCode;

/// What a run ended with. The numbers never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitStatus {
    /// Done.
    Success = 0,
    /// Any other failure (I/O, a bug).
    Failure = 1,
    /// cluster.yaml, a catalog, a zone file or an imported configuration cannot be read or
    /// breaks a rule (clap's usage errors exit 2).
    InvalidConfig = 3,
    /// `verify` refused the bundle (damaged, truncated, unsigned, untrusted, parts missing).
    BundleRefused = 4,
    /// A file or image could not be downloaded (upstream unreachable, refused, or serving
    /// other bytes than pinned).
    CannotConnect = 5,
}

/// A configuration problem found by the builder itself (not by the manifests crate): a file
/// of another tool, resolver problems, an addon without its sum.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidConfig(pub String);

impl ExitStatus {
    /// The class of `err`, raised by `verify` when `verifying`.
    pub fn of(err: &anyhow::Error, verifying: bool) -> Self {
        let class = err.chain().find_map(|e| {
            if e.is::<kubexm_manifests::load::LoadError>()
                || e.is::<kubexm_manifests::catalog::CatalogError>()
                || e.is::<kubexm_manifests::zone::ZoneError>()
                || e.is::<kubexm_manifests::import::ImportError>()
                || e.is::<InvalidConfig>()
            {
                Some(Self::InvalidConfig)
            } else if e.is::<kubexm_bundles::peek::PeekError>()
                || e.is::<kubexm_bundles::split::SplitError>()
            {
                Some(Self::BundleRefused)
            } else if e.is::<crate::fetch::FetchError>() || e.is::<crate::images::ImageError>() {
                Some(Self::CannotConnect)
            } else {
                None
            }
        });
        match class {
            Some(c) => c,
            None if verifying => Self::BundleRefused,
            None => Self::Failure,
        }
    }

    /// The process exit code.
    pub fn code(self) -> ExitCode {
        ExitCode::from(self as u8)
    }
}
