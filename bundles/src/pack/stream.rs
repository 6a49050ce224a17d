//! Streams the planned entries into the zstd-compressed tar, hashing on the way.

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::Path;

use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

use super::chunks::{ChunkWriter, Encoder, HashFile, ReadFromError};
use super::plan::Planned;
use super::{PackError, PackOptions, PackReport, Source, DIR_MODE, FILE_MODE};
use crate::manifest::{MANIFEST_PATH, SUMS_PATH};
use crate::sums;

/// Tar block size: contents are padded to a multiple of it.
const BLOCK: usize = 512;

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
    let mut chunks = ChunkWriter::new(encoder(HashFile::new(file), opts)?);
    let (bytes_in, entries) = stream_entries(
        &mut chunks,
        opts,
        manifest_json,
        sums_text,
        dirs,
        files,
        sums,
        partial,
    )?;
    let written = chunks.finish().map_err(write_err)?;
    written.file.sync_all().map_err(write_err)?;
    Ok(PackReport {
        path: partial.to_owned(),
        bytes_in,
        bytes_out: written.bytes,
        entries,
        sha256: written.sha256,
    })
}

/// Writes the tar stream (headers, contents, padding, end marker) into `out`; returns the
/// content bytes and the number of entries.
#[allow(clippy::too_many_arguments)]
fn stream_entries(
    out: &mut ChunkWriter,
    opts: &PackOptions,
    manifest_json: &[u8],
    sums_text: &[u8],
    dirs: &BTreeSet<String>,
    files: Vec<Planned>,
    sums: &sums::Sums,
    partial: &Path,
) -> Result<(u64, usize), PackError> {
    let write_err = |source| PackError::Write {
        path: partial.to_owned(),
        source,
    };
    let mut tar = tar::Builder::new(out);
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
    tar.into_inner().map_err(write_err)?;
    Ok((bytes_in, entries))
}

pub(super) fn encoder(out: HashFile, opts: &PackOptions) -> Result<Encoder, PackError> {
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

/// Streams one file straight into the chunks, hashing it on the way, and checks it against its
/// listed sum (a [`Source::Stored`] file: only its size).
pub(super) fn append_file(
    tar: &mut tar::Builder<&mut ChunkWriter>,
    opts: &PackOptions,
    file: Planned,
    expected: &str,
    partial: &Path,
) -> Result<(), PackError> {
    let write_err = |source| PackError::Write {
        path: partial.to_owned(),
        source,
    };
    let mut header = header(EntryType::Regular, file.size, file.mode, opts.mtime);
    // The header (and a long-name entry if needed) only: the content follows below.
    tar.append_data(&mut header, &file.path, io::empty())
        .map_err(write_err)?;
    let out = tar.get_mut();
    let mut hasher = match file.source {
        Source::Stored(_) => None,
        Source::File(_) | Source::Bytes(_) => Some(Sha256::new()),
    };
    match &file.source {
        Source::Bytes(bytes) => {
            out.read_from(&mut bytes.as_slice(), file.size, hasher.as_mut())
                .map_err(|e| match e {
                    ReadFromError::Read(source) | ReadFromError::Write(source) => write_err(source),
                })?;
        }
        Source::File(src) | Source::Stored(src) => {
            let read_err = |source| PackError::Read {
                path: file.path.clone(),
                file: src.clone(),
                source,
            };
            let mut handle = fs_err::File::open(src).map_err(read_err)?;
            let count = out
                .read_from(&mut handle, file.size, hasher.as_mut())
                .map_err(|e| match e {
                    ReadFromError::Read(source) => read_err(source),
                    ReadFromError::Write(source) => write_err(source),
                })?;
            if count != file.size {
                return Err(PackError::Changed {
                    path: file.path,
                    file: src.clone(),
                    expected: file.size,
                    actual: count,
                });
            }
        }
    }
    let block = BLOCK as u64;
    let padding = (block - file.size % block) % block;
    out.write_all(&[0u8; BLOCK][..padding as usize])
        .map_err(write_err)?;
    let Some(hasher) = hasher else {
        return Ok(());
    };
    let actual = hex::encode(hasher.finalize());
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
        let tmp_out = tempfile::tempfile().expect("tempfile");
        let file = fs_err::File::from_parts(tmp_out, tmp.path().join("out"));
        let mut chunks = ChunkWriter::new(encoder(HashFile::new(file), &opts).expect("zstd"));
        let mut tar = tar::Builder::new(&mut chunks);
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
