//! The write path of [`super::pack`], on the caller's thread: sources are read straight into a
//! chunk buffer, full chunks go to the zstd encoder (whose zstdmt workers compress in
//! parallel), and its output is hashed and written while it is still in the CPU cache.
//!
//! No extra threads on purpose: measured on a 2-core VM, handing buffers to another thread
//! made `write(2)` and hashing read every byte from another core's cache, which cost more than
//! the work it moved.

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

use crate::writeback::WritebackFile;

/// Size of the chunk buffer (fits in a core's L2 cache next to zstd's buffers).
pub(super) const CHUNK: usize = 256 << 10;

/// The zstd encoder over the output file.
pub(super) type Encoder = zstd::stream::write::Encoder<'static, HashFile>;

/// The output file; hashes and counts what is written to it, and starts writing it back to disk
/// early, so that the final `fsync` only waits for the tail instead of the whole bundle.
pub(super) struct HashFile {
    file: WritebackFile,
    hasher: Sha256,
    bytes: u64,
}

impl HashFile {
    pub(super) fn new(file: fs_err::File) -> Self {
        Self {
            file: WritebackFile::new(file),
            hasher: Sha256::new(),
            bytes: 0,
        }
    }
}

impl Write for HashFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// What reached the file (not yet synced).
pub(super) struct Written {
    pub(super) file: fs_err::File,
    pub(super) sha256: String,
    pub(super) bytes: u64,
}

/// Collects the tar stream in a chunk buffer in front of the encoder.
pub(super) struct ChunkWriter {
    buf: Vec<u8>,
    len: usize,
    encoder: Encoder,
}

/// [`ChunkWriter::read_from`] failed reading the source or writing the output.
#[derive(Debug)]
pub(super) enum ReadFromError {
    Read(io::Error),
    Write(io::Error),
}

impl ChunkWriter {
    pub(super) fn new(encoder: Encoder) -> Self {
        Self {
            buf: vec![0; CHUNK],
            len: 0,
            encoder,
        }
    }

    fn drain(&mut self) -> io::Result<()> {
        if self.len > 0 {
            self.encoder.write_all(&self.buf[..self.len])?;
            self.len = 0;
        }
        Ok(())
    }

    /// Reads up to `limit` bytes of `reader` straight into the chunk buffer, hashing them if
    /// asked; returns how many bytes it got (fewer only at end of file).
    pub(super) fn read_from(
        &mut self,
        reader: &mut dyn Read,
        limit: u64,
        mut hasher: Option<&mut Sha256>,
    ) -> Result<u64, ReadFromError> {
        let mut done = 0u64;
        while done < limit {
            if self.len == CHUNK {
                self.drain().map_err(ReadFromError::Write)?;
            }
            let room = CHUNK - self.len;
            let want = usize::try_from(limit - done).map_or(room, |left| left.min(room));
            let start = self.len;
            let n = match reader.read(&mut self.buf[start..start + want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ReadFromError::Read(e)),
            };
            if let Some(hasher) = hasher.as_mut() {
                hasher.update(&self.buf[start..start + n]);
            }
            self.len += n;
            done += n as u64;
        }
        Ok(done)
    }

    /// Ends the zstd stream.
    pub(super) fn finish(mut self) -> io::Result<Written> {
        self.drain()?;
        let out = self.encoder.finish()?;
        Ok(Written {
            file: out.file.into_inner(),
            sha256: hex::encode(out.hasher.finalize()),
            bytes: out.bytes,
        })
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.len == CHUNK {
            self.drain()?;
        }
        let n = data.len().min(CHUNK - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&data[..n]);
        self.len += n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
