//! Checks the entries, derives directories and computes missing sums before anything is written.

use std::collections::BTreeSet;
use std::io;

use super::{Entry, PackError, Source, EXEC_MODE, FILE_MODE};
use crate::hash::{self, HashReader};
use crate::manifest::{MANIFEST_PATH, SUMS_PATH};
use crate::path;

/// A regular file, checked and with its size known.
pub(super) struct Planned {
    pub(super) path: String,
    pub(super) source: Source,
    pub(super) sha256: Option<String>,
    pub(super) mode: u32,
    pub(super) size: u64,
}

/// Checks every entry and reads source sizes; sorted by path.
pub(super) fn plan(entries: Vec<Entry>) -> Result<Vec<Planned>, PackError> {
    let mut files = Vec::with_capacity(entries.len());
    for entry in entries {
        let Entry {
            path,
            source,
            sha256,
            mode,
        } = entry;
        if let Err(problem) = path::check(&path) {
            return Err(PackError::UnsafePath { path, problem });
        }
        if path == MANIFEST_PATH || path == SUMS_PATH {
            return Err(PackError::Reserved { path });
        }
        if mode != FILE_MODE && mode != EXEC_MODE {
            return Err(PackError::Mode { path, mode });
        }
        if let Some(sum) = &sha256 {
            if !hash::is_sha256_hex(sum) {
                let sha256 = sum.clone();
                return Err(PackError::BadSha256 { path, sha256 });
            }
        }
        if matches!(source, Source::Stored(_)) && sha256.is_none() {
            return Err(PackError::StoredWithoutSum { path });
        }
        let size = match &source {
            Source::Bytes(bytes) => bytes.len() as u64,
            Source::File(file) | Source::Stored(file) => {
                let meta = fs_err::metadata(file).map_err(|source| PackError::Read {
                    path: path.clone(),
                    file: file.clone(),
                    source,
                })?;
                if !meta.is_file() {
                    let file = file.clone();
                    return Err(PackError::NotAFile { path, file });
                }
                meta.len()
            }
        };
        files.push(Planned {
            path,
            source,
            sha256,
            mode,
            size,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    for pair in files.windows(2) {
        if pair[0].path == pair[1].path {
            let path = pair[0].path.clone();
            return Err(PackError::Duplicate { path });
        }
    }
    Ok(files)
}

/// Every parent directory of the files; fails if a directory is also a file or reserved.
pub(super) fn directories(files: &[Planned]) -> Result<BTreeSet<String>, PackError> {
    let names: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let mut dirs = BTreeSet::new();
    for file in files {
        for dir in path::ancestors(&file.path) {
            if names.contains(dir) || dir == MANIFEST_PATH || dir == SUMS_PATH {
                return Err(PackError::Conflict {
                    path: dir.to_owned(),
                    child: file.path.clone(),
                });
            }
            dirs.insert(dir.to_owned());
        }
    }
    Ok(dirs)
}

/// The sum to list in `SHA256SUMS`: as given for files (checked while streaming, except stored
/// ones), computed otherwise. Bytes with a given sum are checked now.
pub(super) fn first_pass_sum(file: &Planned) -> Result<String, PackError> {
    let actual = match (&file.source, &file.sha256) {
        (Source::File(_) | Source::Stored(_), Some(given)) => return Ok(given.clone()),
        (Source::Bytes(bytes), _) => hash::sha256_hex(bytes),
        (Source::File(src) | Source::Stored(src), None) => {
            let read_err = |source| PackError::Read {
                path: file.path.clone(),
                file: src.clone(),
                source,
            };
            let mut reader = HashReader::new(fs_err::File::open(src).map_err(read_err)?);
            io::copy(&mut reader, &mut io::sink()).map_err(read_err)?;
            reader.finish().0
        }
    };
    match &file.sha256 {
        Some(expected) if *expected != actual => Err(PackError::Mismatch {
            path: file.path.clone(),
            expected: expected.clone(),
            actual,
        }),
        _ => Ok(actual),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(path: &str) -> Entry {
        Entry {
            path: path.into(),
            source: Source::Bytes(b"x".to_vec()),
            sha256: None,
            mode: FILE_MODE,
        }
    }

    #[test]
    fn plans_sorted_and_rejects_bad_entries() {
        let files = plan(vec![bytes("b"), bytes("a/c")]).expect("plan");
        assert_eq!(files[0].path, "a/c");
        assert_eq!(
            directories(&files).expect("dirs"),
            BTreeSet::from(["a".to_owned()])
        );

        let err = |entries| plan(entries).map(|_| ()).expect_err("must fail");
        assert!(matches!(
            err(vec![bytes("../x")]),
            PackError::UnsafePath { .. }
        ));
        assert!(matches!(
            err(vec![bytes("SHA256SUMS")]),
            PackError::Reserved { .. }
        ));
        assert!(matches!(
            err(vec![bytes("a"), bytes("a")]),
            PackError::Duplicate { .. }
        ));
        let mut odd = bytes("a");
        odd.mode = 0o4755;
        assert!(matches!(err(vec![odd]), PackError::Mode { .. }));
        let mut bad = bytes("a");
        bad.sha256 = Some("zz".into());
        assert!(matches!(err(vec![bad]), PackError::BadSha256 { .. }));

        let files = plan(vec![bytes("a"), bytes("a/b")]).expect("plan");
        assert!(matches!(
            directories(&files),
            Err(PackError::Conflict { .. })
        ));
        let files = plan(vec![bytes("bundle.json/x")]).expect("plan");
        assert!(matches!(
            directories(&files),
            Err(PackError::Conflict { .. })
        ));
    }
}
