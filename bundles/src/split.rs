//! Split volumes: a bundle cut into numbered parts of at most a given size (discs, size-limited
//! media), each with its own sha256 in a small index, so a damaged part is named and only that
//! part is copied again. A reader ([`PartsReader`]) gives the parts back as one stream, without
//! joining them on disk.
//!
//! ```text
//! demo.tar.zst.parts.json          the index (below); signed as demo.tar.zst.parts.json.minisig
//! demo.tar.zst.part001             bytes [0, partSize) of demo.tar.zst
//! demo.tar.zst.part002             bytes [partSize, 2·partSize)
//! …                                the last part holds the rest
//! ```
//!
//! The index (`SplitIndex`, JSON, unknown fields refused):
//!
//! ```json
//! {
//!   "kubexmSplit": 1,
//!   "bundle": "demo.tar.zst",
//!   "size": 31457280,
//!   "sha256": "<sha256 of the whole .tar.zst>",
//!   "contentDigest": "<sha256 of its SHA256SUMS>",
//!   "partSize": 10485760,
//!   "parts": [ { "name": "demo.tar.zst.part001", "size": 10485760, "sha256": "…" }, … ]
//! }
//! ```
//!
//! `cat demo.tar.zst.part* > demo.tar.zst` joins them with standard tools; `sha256sum` of each
//! part matches the index.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kubexm_manifests::display::{Untrusted, UntrustedMax};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// The index's `kubexmSplit` version.
pub const SPLIT_VERSION: u32 = 1;
/// Suffix of the index file.
pub const INDEX_SUFFIX: &str = ".parts.json";
/// Smallest part size accepted.
pub const MIN_PART_SIZE: u64 = 1 << 20;
/// Most parts in one index.
pub const MAX_PARTS: usize = 9999;
/// Largest index read.
const MAX_INDEX: u64 = 4 << 20;
/// Longest `bundle` name: a file name is at most 255 bytes on Linux file systems, and the
/// longest name made from it, `<bundle>.parts.json.minisig`, adds 19.
pub const MAX_BUNDLE_NAME: usize = 255 - ".parts.json.minisig".len();
const COPY_BUFFER: usize = 1 << 20;

/// The index of a split bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SplitIndex {
    /// [`SPLIT_VERSION`].
    pub kubexm_split: u32,
    /// File name of the whole bundle.
    pub bundle: String,
    /// Size of the whole bundle.
    pub size: u64,
    /// sha256 of the whole bundle.
    pub sha256: String,
    /// The bundle's content digest (sha256 of its `SHA256SUMS`).
    pub content_digest: String,
    /// Size of every part but the last.
    pub part_size: u64,
    /// The parts, in order.
    pub parts: Vec<Part>,
}

/// One part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Part {
    /// File name, beside the index.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the part.
    pub sha256: String,
}

/// A problem with a split bundle; each names the part.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SplitError {
    /// The index cannot be read.
    #[error("cannot read the split index `{}`", shown(path))]
    Read {
        /// The index.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The index is not a valid split index.
    #[error("`{}` is not a valid split index: {}", shown(path), UntrustedMax(.reason, 1000))]
    Index {
        /// The index.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A part is missing or unreadable.
    #[error(
        "part {number} of {total}, `{}`, cannot be read; copy it again from the original media",
        shown(path)
    )]
    Missing {
        /// 1-based.
        number: usize,
        /// Number of parts.
        total: usize,
        /// The part.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A part has the wrong size.
    #[error("part {number} of {total}, `{}`, is {actual} bytes, the index says {expected}; copy it again", shown(path))]
    Size {
        /// 1-based.
        number: usize,
        /// Number of parts.
        total: usize,
        /// The part.
        path: PathBuf,
        /// From the index.
        expected: u64,
        /// On disk.
        actual: u64,
    },
    /// A part's content does not match its sha256.
    #[error("part {number} of {total}, `{}`, is damaged: sha256 {actual}, the index says {}; copy this part again", shown(path), Untrusted(.expected))]
    Damaged {
        /// 1-based.
        number: usize,
        /// Number of parts.
        total: usize,
        /// The part.
        path: PathBuf,
        /// From the index.
        expected: String,
        /// Computed.
        actual: String,
    },
    /// Writing the parts failed.
    #[error("cannot write `{}`", shown(path))]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl SplitIndex {
    /// Reads and checks an index: version, names (`<bundle>.partNNN`, nothing else), sizes and
    /// sums.
    ///
    /// # Errors
    ///
    /// [`SplitError::Read`] or [`SplitError::Index`].
    pub fn load(path: &Path) -> Result<(Self, Vec<u8>), SplitError> {
        let read = |source| SplitError::Read {
            path: path.to_owned(),
            source,
        };
        let file = crate::regular::open(path).map_err(read)?;
        let mut bytes = Vec::new();
        file.take(MAX_INDEX + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        let bad = |reason: String| SplitError::Index {
            path: path.to_owned(),
            reason,
        };
        if bytes.len() as u64 > MAX_INDEX {
            return Err(bad(format!("larger than {MAX_INDEX} bytes")));
        }
        let index = Self::parse(path, &bytes)?;
        Ok((index, bytes))
    }

    /// Parses and checks the bytes of an index (`path` only names it in errors): what
    /// [`SplitIndex::load`] does once the file is read.
    ///
    /// # Errors
    ///
    /// [`SplitError::Index`] naming the first problem.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, SplitError> {
        let bad = |reason: String| SplitError::Index {
            path: path.to_owned(),
            reason,
        };
        let index: SplitIndex = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        index.check().map_err(bad)?;
        Ok(index)
    }

    fn check(&self) -> Result<(), String> {
        if self.kubexm_split != SPLIT_VERSION {
            return Err(format!(
                "kubexmSplit is {}, this build reads {SPLIT_VERSION}",
                self.kubexm_split
            ));
        }
        if !is_file_name(&self.bundle) {
            return Err(format!("bundle `{}` is not a plain file name", self.bundle));
        }
        if self.bundle.len() > MAX_BUNDLE_NAME {
            return Err(format!(
                "bundle is a name of {} bytes; at most {MAX_BUNDLE_NAME} allowed",
                self.bundle.len()
            ));
        }
        if self.parts.is_empty() || self.parts.len() > MAX_PARTS {
            return Err(format!(
                "{} parts (1 to {MAX_PARTS} allowed)",
                self.parts.len()
            ));
        }
        for (field, sum) in [
            ("sha256", &self.sha256),
            ("contentDigest", &self.content_digest),
        ] {
            if !is_hex64(sum) {
                return Err(format!("{field} is not 64 lowercase hex digits"));
            }
        }
        let mut total = 0u64;
        for (i, part) in self.parts.iter().enumerate() {
            let expected = part_name(&self.bundle, i, self.parts.len());
            if part.name != expected {
                return Err(format!(
                    "parts[{i}] is named `{}`, expected `{expected}`",
                    part.name
                ));
            }
            if !is_hex64(&part.sha256) {
                return Err(format!("parts[{i}].sha256 is not 64 lowercase hex digits"));
            }
            let last = i + 1 == self.parts.len();
            if (!last && part.size != self.part_size)
                || (last && (part.size == 0 || part.size > self.part_size))
            {
                return Err(format!(
                    "parts[{i}] is {} bytes with partSize {}",
                    part.size, self.part_size
                ));
            }
            total = total.saturating_add(part.size);
        }
        if total != self.size {
            return Err(format!(
                "the parts add up to {total} bytes, size says {}",
                self.size
            ));
        }
        Ok(())
    }

    /// The path of part `i` beside the index at `index_path`.
    pub fn part_path(&self, index_path: &Path, i: usize) -> PathBuf {
        index_path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(&self.parts[i].name)
    }

    /// Checks every part's size and sha256 (one read of each), returning every bad part.
    pub fn check_parts(&self, index_path: &Path) -> Vec<SplitError> {
        let total = self.parts.len();
        let mut bad = Vec::new();
        for (i, part) in self.parts.iter().enumerate() {
            let path = self.part_path(index_path, i);
            let number = i + 1;
            let result = (|| -> Result<(), SplitError> {
                let missing = |source| SplitError::Missing {
                    number,
                    total,
                    path: path.clone(),
                    source,
                };
                let mut file = crate::regular::open(&path).map_err(missing)?;
                let actual_size = file.metadata().map_err(missing)?.len();
                if actual_size != part.size {
                    return Err(SplitError::Size {
                        number,
                        total,
                        path: path.clone(),
                        expected: part.size,
                        actual: actual_size,
                    });
                }
                let mut hasher = Sha256::new();
                let mut buf = vec![0u8; COPY_BUFFER];
                loop {
                    let n = file.read(&mut buf).map_err(missing)?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
                let actual = hex::encode(hasher.finalize());
                if actual != part.sha256 {
                    return Err(SplitError::Damaged {
                        number,
                        total,
                        path: path.clone(),
                        expected: part.sha256.clone(),
                        actual,
                    });
                }
                Ok(())
            })();
            if let Err(e) = result {
                bad.push(e);
            }
        }
        bad
    }
}

/// `<bundle>.partNNN`, numbered from 1, at least three digits.
pub fn part_name(bundle: &str, i: usize, total: usize) -> String {
    let width = total.to_string().len().max(3);
    format!("{bundle}.part{:0width$}", i + 1)
}

/// The index path for a bundle path (`demo.tar.zst` → `demo.tar.zst.parts.json`).
pub fn index_path(bundle: &Path) -> PathBuf {
    let mut s = bundle.as_os_str().to_owned();
    s.push(INDEX_SUFFIX);
    PathBuf::from(s)
}

/// A path from an index or the command line, escaped for a message.
fn shown(path: &Path) -> UntrustedMax<std::borrow::Cow<'_, str>> {
    UntrustedMax(path.to_string_lossy(), 1000)
}

fn is_file_name(s: &str) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && !s.contains(['/', '\\', '\0'])
        && !s.chars().any(char::is_control)
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Cuts `bundle` into parts of `part_size` bytes beside it, writes the index and removes the
/// whole file. Each part and the index are written to a temporary name and renamed, so an
/// interrupted split leaves the whole bundle in place and no index.
///
/// # Errors
///
/// [`SplitError::Write`] (or [`SplitError::Index`] for a part size below [`MIN_PART_SIZE`] or
/// too many parts).
pub fn split(
    bundle: &Path,
    part_size: u64,
    content_digest: &str,
) -> Result<SplitIndex, SplitError> {
    let index_file = index_path(bundle);
    let bad = |reason: String| SplitError::Index {
        path: index_file.clone(),
        reason,
    };
    if part_size < MIN_PART_SIZE {
        return Err(bad(format!(
            "parts of {part_size} bytes: at least {MIN_PART_SIZE} (1M) please"
        )));
    }
    let name = bundle
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| is_file_name(n))
        .ok_or_else(|| {
            bad(format!(
                "`{}` has no plain UTF-8 file name",
                bundle.display()
            ))
        })?
        .to_owned();
    let werr = |path: &Path| {
        let path = path.to_owned();
        move |source| SplitError::Write { path, source }
    };
    let mut input = crate::regular::open(bundle).map_err(werr(bundle))?;
    let size = input.metadata().map_err(werr(bundle))?.len();
    let count = usize::try_from(size.div_ceil(part_size).max(1)).unwrap_or(usize::MAX);
    if count > MAX_PARTS {
        return Err(bad(format!(
            "{count} parts of {part_size} bytes; use larger parts"
        )));
    }
    let dir = bundle.parent().unwrap_or_else(|| Path::new(".")).to_owned();
    let mut whole = Sha256::new();
    let mut parts = Vec::with_capacity(count);
    let mut written: Vec<PathBuf> = Vec::new();
    let mut buf = vec![0u8; COPY_BUFFER];
    let result = (|| -> Result<(), SplitError> {
        for i in 0..count {
            let part = part_name(&name, i, count);
            let path = dir.join(&part);
            let tmp = dir.join(format!(".{part}.partial-{}", std::process::id()));
            let mut out = fs_err::File::create(&tmp).map_err(werr(&tmp))?;
            written.push(tmp.clone());
            let mut hasher = Sha256::new();
            let mut left = part_size.min(size - i as u64 * part_size);
            let part_len = left;
            while left > 0 {
                let want = usize::try_from(left.min(COPY_BUFFER as u64)).unwrap_or(COPY_BUFFER);
                let n = input.read(&mut buf[..want]).map_err(werr(bundle))?;
                if n == 0 {
                    return Err(SplitError::Write {
                        path: bundle.to_owned(),
                        source: io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the bundle shrank while it was split",
                        ),
                    });
                }
                hasher.update(&buf[..n]);
                whole.update(&buf[..n]);
                out.write_all(&buf[..n]).map_err(werr(&tmp))?;
                left -= n as u64;
            }
            out.sync_all().map_err(werr(&tmp))?;
            fs_err::rename(&tmp, &path).map_err(werr(&path))?;
            written.pop();
            written.push(path);
            parts.push(Part {
                name: part,
                size: part_len,
                sha256: hex::encode(hasher.finalize()),
            });
        }
        Ok(())
    })();
    if let Err(e) = result {
        for p in &written {
            let _ = fs_err::remove_file(p);
        }
        return Err(e);
    }
    let index = SplitIndex {
        kubexm_split: SPLIT_VERSION,
        bundle: name,
        size,
        sha256: hex::encode(whole.finalize()),
        content_digest: content_digest.to_owned(),
        part_size,
        parts,
    };
    let mut json = serde_json::to_vec_pretty(&index).map_err(|e| bad(e.to_string()))?;
    json.push(b'\n');
    crate::atomic::write(&index_file, &json, 0o644).map_err(werr(&index_file))?;
    fs_err::remove_file(bundle).map_err(werr(bundle))?;
    Ok(index)
}

/// What went wrong in a [`PartsReader`], kept for the caller (the stream's reader only sees an
/// I/O error).
#[derive(Debug, Clone, Default)]
pub struct PartsStatus(Arc<Mutex<Option<String>>>);

impl PartsStatus {
    /// The first part problem met while reading, if any.
    pub fn problem(&self) -> Option<String> {
        self.0.lock().ok().and_then(|g| g.clone())
    }

    fn set(&self, msg: String) {
        if let Ok(mut g) = self.0.lock() {
            g.get_or_insert(msg);
        }
    }
}

/// Reads the parts of a split bundle as one stream, checking each part's size before it is
/// read and its sha256 when its last byte was read: a damaged part fails the stream at its end
/// with an error naming it.
pub struct PartsReader {
    index: SplitIndex,
    index_path: PathBuf,
    current: Option<(usize, fs_err::File, Sha256, u64)>,
    next: usize,
    status: PartsStatus,
}

impl PartsReader {
    /// A reader over the parts listed in `index` (beside `index_path`).
    pub fn new(index: SplitIndex, index_path: &Path) -> Self {
        Self {
            index,
            index_path: index_path.to_owned(),
            current: None,
            next: 0,
            status: PartsStatus::default(),
        }
    }

    /// A handle on the first problem met, to name the part after the stream failed.
    pub fn status(&self) -> PartsStatus {
        self.status.clone()
    }

    fn fail(&self, e: SplitError) -> io::Error {
        let msg = e.to_string();
        self.status.set(msg.clone());
        io::Error::new(io::ErrorKind::InvalidData, msg)
    }

    fn open_next(&mut self) -> io::Result<bool> {
        if self.next >= self.index.parts.len() {
            return Ok(false);
        }
        let i = self.next;
        let total = self.index.parts.len();
        let path = self.index.part_path(&self.index_path, i);
        let file = match crate::regular::open(&path) {
            Ok(f) => f,
            Err(source) => {
                return Err(self.fail(SplitError::Missing {
                    number: i + 1,
                    total,
                    path,
                    source,
                }))
            }
        };
        let actual = file.metadata().map(|m| m.len()).unwrap_or(0);
        let expected = self.index.parts[i].size;
        if actual != expected {
            return Err(self.fail(SplitError::Size {
                number: i + 1,
                total,
                path,
                expected,
                actual,
            }));
        }
        self.current = Some((i, file, Sha256::new(), 0));
        self.next += 1;
        Ok(true)
    }
}

impl Read for PartsReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.current.is_none() && !self.open_next()? {
                return Ok(0);
            }
            let Some((i, file, hasher, read)) = self.current.as_mut() else {
                return Ok(0);
            };
            let i = *i;
            let expected = self.index.parts[i].size;
            let want =
                usize::try_from((expected - *read).min(buf.len() as u64)).unwrap_or(buf.len());
            let n = if want == 0 {
                0
            } else {
                file.read(&mut buf[..want])?
            };
            if n > 0 {
                hasher.update(&buf[..n]);
                *read += n as u64;
                return Ok(n);
            }
            // End of this part: its sum must match before the next part is read.
            let total = self.index.parts.len();
            let Some((_, _, hasher, read)) = self.current.take() else {
                return Ok(0);
            };
            let path = self.index.part_path(&self.index_path, i);
            if read != expected {
                return Err(self.fail(SplitError::Size {
                    number: i + 1,
                    total,
                    path,
                    expected,
                    actual: read,
                }));
            }
            let actual = hex::encode(hasher.finalize());
            if actual != self.index.parts[i].sha256 {
                return Err(self.fail(SplitError::Damaged {
                    number: i + 1,
                    total,
                    path,
                    expected: self.index.parts[i].sha256.clone(),
                    actual,
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn splits_reads_back_and_names_a_damaged_part() {
        let dir = tempfile::tempdir().expect("tmp");
        let bundle = dir.path().join("b.tar.zst");
        let content = data(3 * MIN_PART_SIZE as usize + 123);
        std::fs::write(&bundle, &content).expect("write");
        let index = split(&bundle, MIN_PART_SIZE, &"a".repeat(64)).expect("split");
        assert!(!bundle.exists(), "the whole file is replaced by its parts");
        assert_eq!(index.parts.len(), 4);
        assert_eq!(index.parts[0].name, "b.tar.zst.part001");
        assert_eq!(index.parts[3].size, 123);
        let ipath = index_path(&bundle);
        let (loaded, _) = SplitIndex::load(&ipath).expect("index loads");
        assert_eq!(loaded, index);
        assert!(loaded.check_parts(&ipath).is_empty());
        let mut back = Vec::new();
        PartsReader::new(loaded.clone(), &ipath)
            .read_to_end(&mut back)
            .expect("reads");
        assert!(back == content);

        // Damage part 2: the reader fails at its end naming it; the check names it too.
        let p2 = dir.path().join("b.tar.zst.part002");
        let mut bytes = std::fs::read(&p2).expect("read");
        bytes[100] ^= 0xff;
        std::fs::write(&p2, &bytes).expect("write");
        let mut reader = PartsReader::new(loaded.clone(), &ipath);
        let status = reader.status();
        let err = reader.read_to_end(&mut Vec::new()).expect_err("damaged");
        assert!(err.to_string().contains("part 2 of 4"), "{err}");
        assert!(status
            .problem()
            .expect("recorded")
            .contains("b.tar.zst.part002"));
        let bad = loaded.check_parts(&ipath);
        assert_eq!(bad.len(), 1);
        assert!(matches!(bad[0], SplitError::Damaged { number: 2, .. }));

        // A truncated part is named before it is read.
        std::fs::write(&p2, &bytes[..10]).expect("truncate");
        let err = PartsReader::new(loaded, &ipath)
            .read_to_end(&mut Vec::new())
            .expect_err("short");
        assert!(
            err.to_string().contains("part 2 of 4") && err.to_string().contains("10 bytes"),
            "{err}"
        );
    }

    #[test]
    fn index_names_cannot_leave_the_directory() {
        let mut index = SplitIndex {
            kubexm_split: 1,
            bundle: "b.tar.zst".into(),
            size: 5,
            sha256: "0".repeat(64),
            content_digest: "0".repeat(64),
            part_size: MIN_PART_SIZE,
            parts: vec![Part {
                name: "../etc/passwd".into(),
                size: 5,
                sha256: "0".repeat(64),
            }],
        };
        assert!(index
            .check()
            .expect_err("bad name")
            .contains("expected `b.tar.zst.part001`"));
        index.parts[0].name = "b.tar.zst.part001".into();
        assert_eq!(index.check(), Ok(()));
        index.bundle = "../b".into();
        assert!(index.check().is_err());
    }

    /// A bundle name no file system can hold (so no part can be opened) is refused by the
    /// parser, naming the bound; the longest allowed one passes.
    #[test]
    fn bundle_names_are_bounded() {
        let index = |bundle: String| {
            let part = part_name(&bundle, 0, 1);
            format!(
                r#"{{"kubexmSplit":1,"bundle":"{bundle}","size":5,"sha256":"{z}","contentDigest":"{z}","partSize":1048576,"parts":[{{"name":"{part}","size":5,"sha256":"{z}"}}]}}"#,
                z = "0".repeat(64)
            )
        };
        let at = Path::new("x.parts.json");
        let ok = SplitIndex::parse(at, index("b".repeat(MAX_BUNDLE_NAME)).as_bytes())
            .expect("the longest name");
        assert_eq!(ok.bundle.len(), MAX_BUNDLE_NAME);
        let err = SplitIndex::parse(at, index("b".repeat(MAX_BUNDLE_NAME + 1)).as_bytes())
            .expect_err("too long");
        assert!(err.to_string().contains("at most 236"), "{err}");
    }
}
