//! Early writeback: a file writer that asks the kernel to start writing what it wrote to disk
//! every [`STEP`] bytes (and on flush), so that a later `fsync`/`syncfs` only waits for the
//! tail instead of everything at once.

use std::io::{self, Write};
use std::num::NonZeroU64;

/// Bytes written between two writeback kicks.
pub(crate) const STEP: u64 = 32 << 20;

/// Writes through to the file and kicks writeback as it goes.
pub(crate) struct WritebackFile {
    file: fs_err::File,
    written: u64,
    kicked: u64,
}

impl WritebackFile {
    pub(crate) fn new(file: fs_err::File) -> Self {
        Self {
            file,
            written: 0,
            kicked: 0,
        }
    }

    pub(crate) fn into_inner(self) -> fs_err::File {
        self.file
    }

    /// `POSIX_FADV_DONTNEED` over what was written since the last kick: Linux starts
    /// asynchronous writeback of those dirty pages (and drops pages already written back, none
    /// here). Only a hint: errors are ignored; the caller's sync reports real ones.
    fn kick(&mut self) {
        if let Some(len) = NonZeroU64::new(self.written - self.kicked) {
            let _ = rustix::fs::fadvise(
                &self.file,
                self.kicked,
                Some(len),
                rustix::fs::Advice::DontNeed,
            );
            self.kicked = self.written;
        }
    }
}

impl Write for WritebackFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.kicked >= STEP {
            self.kick();
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.kick();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_everything_through() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("f");
        let mut out = WritebackFile::new(fs_err::File::create(&path).expect("create"));
        let data = vec![5u8; (STEP + 3) as usize];
        out.write_all(&data).expect("write");
        out.write_all(b"tail").expect("write");
        out.flush().expect("flush");
        drop(out.into_inner());
        let back = fs_err::read(&path).expect("read");
        assert_eq!(back.len(), data.len() + 4);
        assert!(back.ends_with(b"tail"));
    }
}
