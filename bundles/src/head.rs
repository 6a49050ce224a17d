//! The head of a bundle: `bundle.json`, `SHA256SUMS` and the content digest, read from the
//! first two entries without going through the rest — what a signature check needs before a
//! bundle is unpacked. Nothing here is trusted until the signature over the content digest
//! verified; the full streaming [`crate::verify`] then checks every byte against `SHA256SUMS`.

use std::collections::BTreeMap;
use std::io::{self, Read};

use thiserror::Error;

use crate::hash::sha256_hex;
use crate::manifest::{MANIFEST_PATH, SUMS_PATH};
use crate::sums::{self, SumsError};
use crate::verify::MAX_METADATA_SIZE;

/// The first entries of a bundle.
#[derive(Debug, Clone)]
pub struct Head {
    /// `bundle.json` as stored.
    pub manifest_json: Vec<u8>,
    /// `SHA256SUMS` as stored.
    pub sums_text: Vec<u8>,
    /// `SHA256SUMS` parsed: path → sha256.
    pub sums: BTreeMap<String, String>,
    /// sha256 of `SHA256SUMS`.
    pub content_digest: String,
    /// The entry asked for with [`read_head`]'s `also`, when the bundle has it (its sum checked
    /// against `SHA256SUMS`).
    pub also: Option<Vec<u8>>,
}

/// Why the head could not be read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HeadError {
    /// Decompression or tar framing failed.
    #[error("cannot read the bundle's first entries")]
    Stream(#[source] io::Error),
    /// The first entries are not `bundle.json` then `SHA256SUMS`.
    #[error("entry {position} is `{found}`, expected `{expected}`")]
    Order {
        /// 1-based.
        position: usize,
        /// What the format requires.
        expected: &'static str,
        /// What the bundle has.
        found: String,
    },
    /// A metadata entry is larger than [`MAX_METADATA_SIZE`].
    #[error("`{path}` is {size} bytes, more than the {MAX_METADATA_SIZE} allowed")]
    TooLarge {
        /// The entry.
        path: String,
        /// Its size.
        size: u64,
    },
    /// `SHA256SUMS` is malformed.
    #[error(transparent)]
    Sums(#[from] SumsError),
    /// An entry read here does not match `SHA256SUMS`.
    #[error("`{path}` does not match its sum in `SHA256SUMS`")]
    Sum {
        /// The entry.
        path: String,
    },
}

/// Reads `bundle.json` and `SHA256SUMS` from the start of a bundle stream, and the entry `also`
/// if it comes before the first entry sorted after it (entries are sorted by path).
///
/// # Errors
///
/// See [`HeadError`].
pub fn read_head(reader: impl Read, also: Option<&str>) -> Result<Head, HeadError> {
    let decoder = zstd::stream::read::Decoder::new(reader).map_err(HeadError::Stream)?;
    let mut archive = tar::Archive::new(decoder);
    let mut entries = archive.entries().map_err(HeadError::Stream)?;
    let mut next = |position: usize, expected: &'static str| -> Result<Vec<u8>, HeadError> {
        let entry = entries
            .next()
            .ok_or_else(|| HeadError::Order {
                position,
                expected,
                found: "the end of the bundle".to_owned(),
            })?
            .map_err(HeadError::Stream)?;
        let path = entry.path_bytes().into_owned();
        let path = String::from_utf8_lossy(&path).into_owned();
        if path != expected || !entry.header().entry_type().is_file() {
            return Err(HeadError::Order {
                position,
                expected,
                found: path,
            });
        }
        read_small(entry, &path)
    };
    let manifest_json = next(1, MANIFEST_PATH)?;
    let sums_text = next(2, SUMS_PATH)?;
    let sums = sums::parse(&sums_text)?;
    if sums.get(MANIFEST_PATH) != Some(&sha256_hex(&manifest_json)) {
        return Err(HeadError::Sum {
            path: MANIFEST_PATH.to_owned(),
        });
    }
    let mut found = None;
    if let Some(want) = also.filter(|w| sums.contains_key(*w)) {
        for entry in entries {
            let entry = entry.map_err(HeadError::Stream)?;
            if !entry.header().entry_type().is_file() {
                // Directories sort by their name without the slash (`delta` before `delta.json`).
                continue;
            }
            let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            if path.as_str() > want {
                break;
            }
            if path == want {
                let bytes = read_small(entry, &path)?;
                if sums.get(want) != Some(&sha256_hex(&bytes)) {
                    return Err(HeadError::Sum { path });
                }
                found = Some(bytes);
                break;
            }
        }
    }
    Ok(Head {
        content_digest: sha256_hex(&sums_text),
        manifest_json,
        sums_text,
        sums,
        also: found,
    })
}

fn read_small(entry: impl Read, path: &str) -> Result<Vec<u8>, HeadError> {
    let mut bytes = Vec::new();
    entry
        .take(MAX_METADATA_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(HeadError::Stream)?;
    if bytes.len() as u64 > MAX_METADATA_SIZE {
        return Err(HeadError::TooLarge {
            path: path.to_owned(),
            size: bytes.len() as u64,
        });
    }
    Ok(bytes)
}
