//! Directories of the work directory that hold secrets or bundle contents are private (0700):
//! the unpacked trees (a bundle's `cluster.yaml`, keys in addons), the PKI, run logs and state.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Mode of every directory KubeXM keeps for itself.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Creates `dir` (and missing parents) with mode 0700; an existing `dir` is set to 0700.
/// Existing parents are left as they are: the work directory may be one the user chose.
///
/// # Errors
///
/// The directory cannot be created or its mode set, or it is not a directory.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("`{}` exists and is not a directory", dir.display()),
        ));
    }
    if meta.permissions().mode() & 0o7777 != PRIVATE_DIR_MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))?;
    }
    Ok(())
}

/// Writes `content` to `path` whole or not at all: a temporary file beside it (created with
/// `mode`, so a secret is never readable by others even for a moment), synced, then renamed over
/// `path`. The parent directory is made private first ([`ensure_private_dir`]).
///
/// # Errors
///
/// The directory cannot be made private, or the file cannot be written, synced or renamed.
pub fn write_private_file(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    ensure_private_dir(dir)?;
    write_file_atomic(path, content, mode)
}

/// `content` written to a temporary file beside `path` (created with `mode`), synced, then
/// renamed over `path`; the directory is left as it is (e.g. `/etc/systemd/system`).
///
/// # Errors
///
/// The file cannot be written, synced or renamed.
pub fn write_file_atomic(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".kubexm-write")
        .tempfile_in(dir)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.write_all(content)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_and_tightens() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("work/bundles");
        ensure_private_dir(&dir).expect("create");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&tmp.path().join("work")), 0o700, "created parents too");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure_private_dir(&dir).expect("again");
        assert_eq!(mode(&dir), 0o700);
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").expect("write");
        assert!(ensure_private_dir(&file).is_err());
    }

    #[test]
    fn private_files_are_written_whole_with_their_mode() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = d.path().join("keys/ca.key");
        write_private_file(&f, b"one", 0o600).expect("write");
        write_private_file(&f, b"two", 0o600).expect("rewrite");
        assert_eq!(std::fs::read(&f).expect("read"), b"two");
        let mode = std::fs::metadata(&f).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(d.path().join("keys"))
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
        let left: Vec<_> = std::fs::read_dir(d.path().join("keys"))
            .expect("ls")
            .collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }
}
