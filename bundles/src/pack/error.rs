//! Errors of [`super::pack`].

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::check::ManifestProblem;
use crate::path::PathProblem;

/// Why [`super::pack`] failed. No output file is left behind.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PackError {
    /// The output path has no file name or parent directory.
    #[error("Invalid output path `{}`", path.display())]
    InvalidOutput {
        /// The path.
        path: PathBuf,
    },
    /// `SOURCE_DATE_EPOCH` is not a number.
    #[error("SOURCE_DATE_EPOCH=`{value}` is not a number of seconds")]
    SourceDateEpoch {
        /// The value.
        value: String,
    },
    /// An entry path is unsafe.
    #[error("Entry path `{path}` {problem}")]
    UnsafePath {
        /// The path.
        path: String,
        /// Why.
        problem: PathProblem,
    },
    /// An entry uses `bundle.json` or `SHA256SUMS`, which pack writes itself.
    #[error("Entry path `{path}` is reserved")]
    Reserved {
        /// The path.
        path: String,
    },
    /// Two entries have the same path.
    #[error("Entry `{path}` is given twice")]
    Duplicate {
        /// The path.
        path: String,
    },
    /// A file path is also the directory of another entry.
    #[error("Entry `{path}` is a file but `{child}` is inside it")]
    Conflict {
        /// The file.
        path: String,
        /// The entry below it.
        child: String,
    },
    /// The mode is not 0644 or 0755.
    #[error("Entry `{path}` has mode {mode:o}; expected 644 or 755")]
    Mode {
        /// The path.
        path: String,
        /// The mode given.
        mode: u32,
    },
    /// The given sha256 is not 64 lowercase hex digits.
    #[error("Entry `{path}` has an invalid sha256 `{sha256}`")]
    BadSha256 {
        /// The path.
        path: String,
        /// The value given.
        sha256: String,
    },
    /// A [`super::Source::Stored`] entry without its sha256.
    #[error("Entry `{path}` comes from a content-addressed store but has no sha256")]
    StoredWithoutSum {
        /// The entry.
        path: String,
    },
    /// A source is not a regular file.
    #[error("Source `{}` of entry `{path}` is not a regular file", file.display())]
    NotAFile {
        /// The entry.
        path: String,
        /// The source file.
        file: PathBuf,
    },
    /// A source file could not be read.
    #[error("Failed to read `{}` for entry `{path}`", file.display())]
    Read {
        /// The entry.
        path: String,
        /// The source file.
        file: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Content does not match its sha256 (given, or computed in the first pass).
    #[error(
        "Entry `{path}` has sha256 {actual}, expected {expected} (wrong cached sum, or the file changed while packing)"
    )]
    Mismatch {
        /// The entry.
        path: String,
        /// The sha256 listed in `SHA256SUMS`.
        expected: String,
        /// The sha256 of what was read.
        actual: String,
    },
    /// A source file changed size while packing.
    #[error("Source `{}` of entry `{path}` changed while packing: {expected} bytes expected, {actual} read", file.display())]
    Changed {
        /// The entry.
        path: String,
        /// The source file.
        file: PathBuf,
        /// Size when the bundle was planned.
        expected: u64,
        /// Bytes read.
        actual: u64,
    },
    /// Not enough free space for the output.
    #[error(
        "Not enough free space in `{}`: need {needed} bytes, {available} available",
        dir.display()
    )]
    NoSpace {
        /// The output directory.
        dir: PathBuf,
        /// Upper bound of the bundle size.
        needed: u64,
        /// Free bytes.
        available: u64,
    },
    /// statvfs failed.
    #[error("Failed to check free space in `{}`", dir.display())]
    FreeSpace {
        /// The output directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// `bundle.json` could not be serialized.
    #[error("Failed to serialize `bundle.json`")]
    Serialize(#[source] serde_json::Error),
    /// `bundle.json` disagrees with the entries.
    #[error("`bundle.json` does not match the entries")]
    Manifest(#[source] ManifestProblem),
    /// The zstd encoder rejected the options.
    #[error("Failed to set up zstd (level {level}, {threads} threads)")]
    Compressor {
        /// Level.
        level: i32,
        /// Workers.
        threads: u32,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing the output failed.
    #[error("Failed to write `{}`", path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}
