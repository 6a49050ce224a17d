//! Errors of [`super::verify`].

use std::io;

use kubexm_manifests::display::Untrusted;
use thiserror::Error;

use crate::check::ManifestProblem;
use crate::layout::LayoutProblem;
use crate::path::PathProblem;
use crate::sums::SumsError;

/// Kind of link entry (bundles never contain links).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// A symbolic link.
    Symbolic,
    /// A hard link.
    Hard,
}

impl std::fmt::Display for LinkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LinkKind::Symbolic => "symbolic",
            LinkKind::Hard => "hard",
        })
    }
}

/// Why a bundle failed verification. Every variant names the entry.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The zstd or tar stream is cut short or corrupt.
    #[error("Bundle is truncated or corrupt after {}", after_entry(.after))]
    Truncated {
        /// The last entry read completely, if any.
        after: Option<String>,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Non-zero data follows the tar end marker.
    #[error("Bundle has data after the tar end marker (last entry {})", after_entry(.after))]
    TrailingData {
        /// The last entry.
        after: Option<String>,
    },
    /// `bundle.json` or `SHA256SUMS` is not where it must be.
    #[error("Entry {position} is `{}`; expected `{expected}`", Untrusted(.found))]
    Order {
        /// 1-based position in the stream.
        position: usize,
        /// The required entry.
        expected: &'static str,
        /// What was found.
        found: String,
    },
    /// An entry path is not UTF-8.
    #[error("Entry `{}` has a path that is not UTF-8", Untrusted(.path))]
    NotUtf8 {
        /// The path, lossily decoded.
        path: String,
    },
    /// An entry path is unsafe.
    #[error("Entry `{}` has an unsafe path: it {problem}", Untrusted(.path))]
    UnsafePath {
        /// The path.
        path: String,
        /// Why.
        problem: PathProblem,
    },
    /// A symbolic or hard link.
    #[error("Entry `{}` is a {kind} link to `{}`; bundles contain no links", Untrusted(.path), Untrusted(.target))]
    Link {
        /// The path.
        path: String,
        /// Symbolic or hard.
        kind: LinkKind,
        /// Link target, lossily decoded.
        target: String,
    },
    /// A device, FIFO or other special file.
    #[error("Entry `{}` is a {kind}; bundles contain only files and directories", Untrusted(.path))]
    Special {
        /// The path.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// `bundle.json` or `SHA256SUMS` is too large to be real.
    #[error("Entry `{}` is {size} bytes; at most {max} allowed", Untrusted(.path))]
    TooLarge {
        /// The path.
        path: String,
        /// Declared size.
        size: u64,
        /// [`super::MAX_METADATA_SIZE`].
        max: u64,
    },
    /// `bundle.json` is not valid.
    #[error("Failed to parse `bundle.json`")]
    BadManifest(#[source] serde_json::Error),
    /// `bundle.json` disagrees with the bundle.
    #[error("`bundle.json` does not match the bundle")]
    Manifest(#[source] ManifestProblem),
    /// `SHA256SUMS` is malformed.
    #[error("Failed to parse `SHA256SUMS`")]
    Sums(#[source] SumsError),
    /// An entry that `SHA256SUMS` does not list.
    #[error("Unlisted entry `{}`: not in `SHA256SUMS`", Untrusted(.path))]
    Unlisted {
        /// The path.
        path: String,
    },
    /// The same path twice.
    #[error("Duplicate entry `{}`", Untrusted(.path))]
    Duplicate {
        /// The path.
        path: String,
    },
    /// Content does not match `SHA256SUMS`.
    #[error("Entry `{}` was tampered with: sha256 {actual}, expected {expected}", Untrusted(.path))]
    Tampered {
        /// The path.
        path: String,
        /// From `SHA256SUMS`.
        expected: String,
        /// Of the content.
        actual: String,
    },
    /// A directory entry where `SHA256SUMS` lists a file.
    #[error("Entry `{}` is a directory but `SHA256SUMS` lists it as a file", Untrusted(.path))]
    NotAFile {
        /// The path.
        path: String,
    },
    /// Listed in `SHA256SUMS` but absent.
    #[error("Missing entry `{}`: listed in `SHA256SUMS` but not in the bundle", Untrusted(.path))]
    Missing {
        /// The path.
        path: String,
    },
    /// A tar header declares another size than the one pinned in `bundle.json`.
    #[error("Entry `{}` declares {header} bytes, but `bundle.json` pins {pinned}", Untrusted(.path))]
    SizeMismatch {
        /// The path.
        path: String,
        /// The pinned size.
        pinned: u64,
        /// The size in the tar header.
        header: u64,
    },
    /// The bundle needs more space than the limit (the free space where it is unpacked).
    #[error("The bundle needs {needed} bytes on disk, but only {limit} are available")]
    NoSpace {
        /// Bytes needed (pinned total, or the running total of a formatVersion 1 bundle).
        needed: u64,
        /// The limit.
        limit: u64,
    },
    /// The OCI image layout does not close.
    #[error("The image layout in `images/` does not close")]
    Layout(#[source] LayoutProblem),
    /// The sink failed.
    #[error("Failed to extract entry `{}`", Untrusted(.path))]
    Sink {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// [`super::Sink::finish`] failed.
    #[error("Failed to finish extraction")]
    Finish(#[source] io::Error),
}

fn after_entry(after: &Option<String>) -> String {
    after
        .as_ref()
        .map_or_else(|| "the start".to_owned(), |p| format!("entry `{p}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_position() {
        assert_eq!(after_entry(&None), "the start");
        assert_eq!(after_entry(&Some("a".into())), "entry `a`");
    }
}
