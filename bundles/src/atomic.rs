//! Small files written whole or not at all: a temporary file beside the target (created with
//! the final mode, so a secret is never readable by others, even briefly), synced, renamed.

use fs_err::os::unix::fs::OpenOptionsExt;
use std::io::{self, Write};
use std::path::Path;

/// Writes `bytes` to `path` atomically with permission bits `mode`.
///
/// # Errors
///
/// Any I/O error; the temporary file is removed.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => std::path::PathBuf::from("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut file = fs_err::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs_err::rename(&tmp, path)?;
        fs_err::File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs_err::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_with_the_mode_and_replaces() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("k");
        super::write(&p, b"one", 0o600).expect("write");
        super::write(&p, b"two", 0o600).expect("replace");
        assert_eq!(std::fs::read(&p).expect("read"), b"two");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("ls").count(),
            1,
            "no temp file left"
        );
    }
}
