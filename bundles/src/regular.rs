//! Opening a file that must be a regular file (a split part, an index, a `delta.json`) without
//! ever blocking on it: a FIFO opened for reading blocks in `open(2)` until a writer comes,
//! and a read from a character device may never end. The file is opened with `O_NONBLOCK`
//! (which `open` honours for a FIFO and regular files ignore), then its type is checked on the
//! open descriptor, so a name swapped between a check and the open cannot slip through.

use std::io;
use std::path::Path;

/// Opens `path` for reading if it is a regular file (symbolic links followed).
///
/// # Errors
///
/// The `open(2)` error, or [`io::ErrorKind::InvalidInput`] saying what kind of file it is
/// (`a FIFO`, `a directory`, …) when it is not a regular file. The error of
/// [`fs_err::File`] names the path.
pub fn open(path: &Path) -> io::Result<fs_err::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| with_path(path, io::Error::from(e)))?;
    let file = std::fs::File::from(fd);
    let kind = file.metadata().map_err(|e| with_path(path, e))?.file_type();
    if !kind.is_file() {
        return Err(with_path(
            path,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("it is {}, not a regular file", describe(kind)),
            ),
        ));
    }
    Ok(fs_err::File::from_parts(file, path))
}

/// `a FIFO`, `a directory`, … for a message.
pub fn describe(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// The error as [`fs_err`] words it: the operation and the path, the cause kept.
fn with_path(path: &Path, e: io::Error) -> io::Error {
    let shown = kubexm_manifests::display::UntrustedMax(path.to_string_lossy(), 1000);
    io::Error::new(e.kind(), format!("failed to open `{shown}`: {e}"))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    #[test]
    fn refuses_a_fifo_without_blocking() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("b.part001");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        let started = Instant::now();
        let err = super::open(&fifo).expect_err("a FIFO is not a part");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("a FIFO"), "{err}");
        assert!(err.to_string().contains("b.part001"), "{err}");
        let err = super::open(dir.path()).expect_err("a directory");
        assert!(err.to_string().contains("a directory"), "{err}");
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").expect("write");
        assert!(super::open(&file).is_ok());
    }
}
