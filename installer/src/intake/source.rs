//! Where a bundle's bytes come from: one file, or the parts of a split bundle.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use kubexm_bundles::sign::SIGNATURE_SUFFIX;
use kubexm_bundles::split::{self, PartsReader, PartsStatus, SplitError, SplitIndex};

/// A bundle to read.
#[derive(Debug, Clone)]
pub enum BundleSource {
    /// One `.tar.zst`.
    File(PathBuf),
    /// A split bundle: its index and the parts beside it.
    Parts {
        /// The index file (`X.parts.json`).
        index_path: PathBuf,
        /// Its bytes (what an index signature signs).
        index_bytes: Vec<u8>,
        /// The index.
        index: SplitIndex,
    },
}

impl BundleSource {
    /// `path` ending in `.parts.json` is a split bundle's index; anything else one file.
    ///
    /// # Errors
    ///
    /// A split index that cannot be read or is invalid.
    pub fn open(path: &Path) -> Result<Self, SplitError> {
        if path.to_string_lossy().ends_with(split::INDEX_SUFFIX) {
            let (index, index_bytes) = SplitIndex::load(path)?;
            return Ok(Self::Parts {
                index_path: path.to_owned(),
                index_bytes,
                index,
            });
        }
        Ok(Self::File(path.to_owned()))
    }

    /// The path the user gave.
    pub fn path(&self) -> &Path {
        match self {
            Self::File(p) => p,
            Self::Parts { index_path, .. } => index_path,
        }
    }

    /// The bundle's own name: the file, or the whole file the parts were cut from.
    pub fn bundle_path(&self) -> PathBuf {
        match self {
            Self::File(p) => p.clone(),
            Self::Parts {
                index_path, index, ..
            } => index_path
                .parent()
                .unwrap_or_else(|| Path::new("."))
                .join(&index.bundle),
        }
    }

    /// The detached signature over the content digest: `<bundle>.minisig`.
    pub fn signature_path(&self) -> PathBuf {
        beside(&self.bundle_path(), SIGNATURE_SUFFIX)
    }

    /// A new reader over the whole stream, and for parts a handle naming a damaged part.
    ///
    /// # Errors
    ///
    /// The file cannot be opened.
    pub fn reader(&self) -> io::Result<(Box<dyn Read + Send>, Option<PartsStatus>)> {
        Ok(match self {
            Self::File(p) => (Box::new(std::fs::File::open(p)?), None),
            Self::Parts {
                index_path, index, ..
            } => {
                let r = PartsReader::new(index.clone(), index_path);
                let status = r.status();
                (Box::new(r), Some(status))
            }
        })
    }

    /// Total size of the stream.
    ///
    /// # Errors
    ///
    /// The file cannot be inspected.
    pub fn size(&self) -> io::Result<u64> {
        match self {
            Self::File(p) => Ok(std::fs::metadata(p)?.len()),
            Self::Parts { index, .. } => Ok(index.size),
        }
    }

    /// For a split bundle whose stream failed: every damaged or missing part, named (one read of
    /// each part). Empty for a single file or when every part is sound.
    pub fn damaged_parts(&self) -> Vec<SplitError> {
        match self {
            Self::File(_) => Vec::new(),
            Self::Parts {
                index_path, index, ..
            } => index.check_parts(index_path),
        }
    }
}

/// `<path><suffix>`.
pub fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}
