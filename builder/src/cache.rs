//! The content-addressed cache: `<root>/blobs/sha256/<hex>` holds only verified content, shared by
//! downloaded files and image blobs. Downloads land in `<root>/tmp/` first and are renamed into
//! place once their digest is checked; `<root>/refs/` remembers which digest an image tag had.

use std::path::{Path, PathBuf};

/// Error touching the cache.
#[derive(Debug, thiserror::Error)]
#[error("cache `{path}`: {action}")]
pub struct CacheError {
    /// Path involved.
    pub path: PathBuf,
    /// What was being done.
    pub action: &'static str,
    /// Cause.
    #[source]
    pub source: std::io::Error,
}

/// The cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// Opens (and creates) the cache at `root`.
    pub fn open(root: &Path) -> Result<Self, CacheError> {
        for sub in ["blobs/sha256", "tmp", "refs"] {
            let dir = root.join(sub);
            std::fs::create_dir_all(&dir).map_err(|source| CacheError {
                path: dir.clone(),
                action: "cannot create directory",
                source,
            })?;
        }
        Ok(Self {
            root: root.to_owned(),
        })
    }

    /// The default location: `$XDG_CACHE_HOME/kubexm` (or `~/.cache/kubexm`).
    pub fn default_root() -> PathBuf {
        dirs::cache_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("kubexm")
    }

    /// Root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the verified blob `hex` lives.
    pub fn blob_path(&self, hex: &str) -> PathBuf {
        self.root.join("blobs/sha256").join(hex)
    }

    /// Whether the blob is present (never for a `hex` that is not 64 lowercase hex digits: such
    /// a name could point outside the cache).
    pub fn contains(&self, hex: &str) -> bool {
        kubexm_manifests::digest::is_sha256_hex(hex) && self.blob_path(hex).is_file()
    }

    /// The in-progress download of `hex` (kept between runs so a download can resume).
    pub fn partial_path(&self, hex: &str) -> PathBuf {
        self.root.join("tmp").join(format!("{hex}.partial"))
    }

    /// A per-tag record file.
    pub fn ref_path(&self, key: &str) -> PathBuf {
        let safe: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.root.join("refs").join(format!("{safe}.json"))
    }

    /// Moves a verified temp file into the store.
    pub fn commit(&self, tmp: &Path, hex: &str) -> Result<PathBuf, CacheError> {
        let dest = self.blob_path(hex);
        if dest.is_file() {
            // Another task stored the same content meanwhile; content-addressed, so identical.
            let _ = std::fs::remove_file(tmp);
            return Ok(dest);
        }
        std::fs::rename(tmp, &dest).map_err(|source| CacheError {
            path: dest.clone(),
            action: "cannot move a verified download into place",
            source,
        })?;
        Ok(dest)
    }

    /// Stores bytes whose digest the caller has checked (manifests): temp file + rename.
    pub fn put_bytes(&self, hex: &str, bytes: &[u8]) -> Result<PathBuf, CacheError> {
        if self.contains(hex) {
            return Ok(self.blob_path(hex));
        }
        let tmp = self
            .root
            .join("tmp")
            .join(format!("{hex}.{}.put", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(|source| CacheError {
            path: tmp.clone(),
            action: "cannot write",
            source,
        })?;
        self.commit(&tmp, hex)
    }

    /// Writes a small metadata file atomically.
    pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|source| CacheError {
                path: path.to_owned(),
                action: "cannot write",
                source,
            })
    }
}
