//! Streams the planned entries into the zstd-compressed tar, hashing on the way.

use std::collections::BTreeSet;
use std::io::{self, BufWriter, Read};
use std::path::Path;

use tar::{EntryType, Header};

use super::plan::Planned;
use super::{PackError, PackOptions, PackReport, Source, DIR_MODE, FILE_MODE};
use crate::hash::{HashReader, HashWriter};
use crate::manifest::{MANIFEST_PATH, SUMS_PATH};
use crate::sums;

/// A directory or a file, in stream order.
pub(super) enum Item {
    Dir(String),
    File(Planned),
}

impl Item {
    fn path(&self) -> &str {
        match self {
            Item::Dir(path) => path,
            Item::File(file) => &file.path,
        }
    }
}

/// Streams the whole bundle into `partial`; returns the report without its final path.
pub(super) fn write(
    partial: &Path,
    opts: &PackOptions,
    manifest_json: &[u8],
    sums_text: &[u8],
    dirs: &BTreeSet<String>,
    files: Vec<Planned>,
    sums: &sums::Sums,
) -> Result<PackReport, PackError> {
    let write_err = |source| PackError::Write {
        path: partial.to_owned(),
        source,
    };
    let file = fs_err::File::create(partial).map_err(write_err)?;
    let out = HashWriter::new(BufWriter::with_capacity(1 << 20, file));
    let mut tar = tar::Builder::new(encoder(out, opts)?);

    let mut bytes_in = (manifest_json.len() + sums_text.len()) as u64;
    append_bytes(&mut tar, opts, MANIFEST_PATH, FILE_MODE, manifest_json).map_err(write_err)?;
    append_bytes(&mut tar, opts, SUMS_PATH, FILE_MODE, sums_text).map_err(write_err)?;

    let mut items: Vec<Item> = dirs
        .iter()
        .cloned()
        .map(Item::Dir)
        .chain(files.into_iter().map(Item::File))
        .collect();
    items.sort_by(|a, b| a.path().cmp(b.path()));
    let entries = 2 + items.len();
    for item in items {
        match item {
            Item::Dir(path) => {
                let mut header = header(EntryType::Directory, 0, DIR_MODE, opts.mtime);
                tar.append_data(&mut header, format!("{path}/"), io::empty())
                    .map_err(write_err)?;
            }
            Item::File(file) => {
                let expected = sums.get(&file.path).cloned().unwrap_or_default();
                bytes_in += file.size;
                append_file(&mut tar, opts, file, &expected, partial)?;
            }
        }
    }

    let encoder = tar.into_inner().map_err(write_err)?;
    let (buffered, sha256, bytes_out) = encoder.finish().map_err(write_err)?.finish();
    let file = buffered
        .into_inner()
        .map_err(|e| write_err(e.into_error()))?;
    file.sync_all().map_err(write_err)?;
    Ok(PackReport {
        path: partial.to_owned(),
        bytes_in,
        bytes_out,
        entries,
        sha256,
    })
}

pub(super) fn encoder(
    out: HashWriter<BufWriter<fs_err::File>>,
    opts: &PackOptions,
) -> Result<zstd::stream::write::Encoder<'static, HashWriter<BufWriter<fs_err::File>>>, PackError> {
    // Always at least one worker: zstd's output is the same for any worker count >= 1, but
    // differs from single-threaded mode (0 workers).
    let threads = match opts.threads {
        0 => std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
        n => n,
    };
    let compressor = |source| PackError::Compressor {
        level: opts.level,
        threads,
        source,
    };
    let mut encoder = zstd::stream::write::Encoder::new(out, opts.level).map_err(compressor)?;
    encoder.multithread(threads).map_err(compressor)?;
    encoder.include_checksum(true).map_err(compressor)?;
    Ok(encoder)
}

pub(super) fn header(kind: EntryType, size: u64, mode: u32, mtime: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime);
    header
}

pub(super) fn append_bytes<W: io::Write>(
    tar: &mut tar::Builder<W>,
    opts: &PackOptions,
    path: &str,
    mode: u32,
    bytes: &[u8],
) -> io::Result<()> {
    let mut header = header(EntryType::Regular, bytes.len() as u64, mode, opts.mtime);
    tar.append_data(&mut header, path, bytes)
}

/// Streams one file, hashing it on the way, and checks it against its listed sum.
pub(super) fn append_file<W: io::Write>(
    tar: &mut tar::Builder<W>,
    opts: &PackOptions,
    file: Planned,
    expected: &str,
    partial: &Path,
) -> Result<(), PackError> {
    let mut header = header(EntryType::Regular, file.size, file.mode, opts.mtime);
    let (actual, count) = match file.source {
        Source::Bytes(bytes) => {
            let mut reader = HashReader::new(bytes.as_slice());
            tar.append_data(&mut header, &file.path, &mut reader)
                .map_err(|source| PackError::Write {
                    path: partial.to_owned(),
                    source,
                })?;
            reader.finish()
        }
        Source::File(src) => {
            let handle = fs_err::File::open(&src).map_err(|source| PackError::Read {
                path: file.path.clone(),
                file: src.clone(),
                source,
            })?;
            let mut reader = HashReader::new(handle.take(file.size));
            if let Err(source) = tar.append_data(&mut header, &file.path, &mut reader) {
                return Err(if reader.failed() {
                    PackError::Read {
                        path: file.path,
                        file: src,
                        source,
                    }
                } else {
                    PackError::Write {
                        path: partial.to_owned(),
                        source,
                    }
                });
            }
            let (actual, count) = reader.finish();
            if count != file.size {
                return Err(PackError::Changed {
                    path: file.path,
                    file: src,
                    expected: file.size,
                    actual: count,
                });
            }
            (actual, count)
        }
    };
    debug_assert_eq!(count, file.size);
    if actual != expected {
        return Err(PackError::Mismatch {
            path: file.path,
            expected: expected.to_owned(),
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash;

    #[test]
    fn detects_a_source_that_changed_after_planning() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let src = tmp.path().join("f");
        fs_err::write(&src, b"abc").expect("write");
        let planned = |size, sum: &str| Planned {
            path: "f".into(),
            source: Source::File(src.clone()),
            sha256: Some(sum.to_owned()),
            mode: FILE_MODE,
            size,
        };
        let opts = PackOptions::default();
        let out = Path::new("out");
        let mut tar = tar::Builder::new(Vec::new());
        let sum = hash::sha256_hex(b"abc");
        append_file(&mut tar, &opts, planned(3, &sum), &sum, out).expect("unchanged");
        let err = append_file(&mut tar, &opts, planned(10, &sum), &sum, out).expect_err("shrunk");
        assert!(
            matches!(
                err,
                PackError::Changed {
                    expected: 10,
                    actual: 3,
                    ..
                }
            ),
            "{err:?}"
        );
        let other = hash::sha256_hex(b"abd");
        let err =
            append_file(&mut tar, &opts, planned(3, &other), &other, out).expect_err("edited");
        assert!(matches!(err, PackError::Mismatch { .. }), "{err:?}");
    }
}
