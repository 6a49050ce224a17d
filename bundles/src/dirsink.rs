//! [`DirSink`]: extracts a verified stream into a directory without ever following a symlink.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use fs_err::os::unix::fs::OpenOptionsExt;
use kubexm_manifests::display::Untrusted;

use crate::path;
use crate::verify::Sink;
use crate::writeback::WritebackFile;

/// Mode of created directories.
const DIR_MODE: u32 = 0o755;

/// Extracts into `root`: creates parents, writes files with their mode (permission bits only),
/// refuses to go through or overwrite anything that is not a plain directory or file.
///
/// Existing regular files are replaced. Only trust the tree if [`crate::verify()`] returned `Ok`.
#[derive(Debug, Clone)]
pub struct DirSink {
    root: PathBuf,
}

impl DirSink {
    /// Extracts into `root`, which is created if missing and must be a directory.
    ///
    /// # Errors
    ///
    /// `root` cannot be created or is not a directory.
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        fs_err::create_dir_all(&root)?;
        if !fs_err::symlink_metadata(&root)?.is_dir() {
            return Err(not_a_dir(&root));
        }
        Ok(Self { root })
    }

    /// The extraction root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates `rel` and its parents below the root, one component at a time, checking each.
    fn ensure_dir(&self, rel: &str) -> io::Result<PathBuf> {
        let mut current = self.root.clone();
        for component in rel.split('/') {
            current.push(component);
            match fs_err::symlink_metadata(&current) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => return Err(not_a_dir(&current)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs_err::create_dir(&current)?;
                    fs_err::set_permissions(&current, PermissionsExt::from_mode(DIR_MODE))?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(current)
    }
}

impl Sink for DirSink {
    fn dir(&mut self, path: &str) -> io::Result<()> {
        safe(path)?;
        self.ensure_dir(path).map(drop)
    }

    fn file(&mut self, path: &str, mode: u32) -> io::Result<Box<dyn Write + '_>> {
        safe(path)?;
        let target = match path.rsplit_once('/') {
            Some((parent, name)) => self.ensure_dir(parent)?.join(name),
            None => self.root.join(path),
        };
        match fs_err::symlink_metadata(&target) {
            Ok(meta) if meta.is_file() => fs_err::remove_file(&target)?,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("`{}` exists and is not a regular file", target.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mode = mode & 0o777;
        // create_new (O_CREAT|O_EXCL) never follows a symlink at the final component.
        let file = fs_err::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&target)?;
        file.set_permissions(PermissionsExt::from_mode(mode))?;
        // Unpacks sync the tree before publishing it: start writeback while extracting.
        Ok(Box::new(WritebackFile::new(file)))
    }

    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn safe(rel: &str) -> io::Result<()> {
    path::check(rel).map_err(|problem| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unsafe path `{}`: it {problem}", Untrusted(rel)),
        )
    })
}

fn not_a_dir(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("`{}` exists and is not a directory", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_files_with_mode() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut sink = DirSink::new(tmp.path().join("root")).expect("sink");
        sink.dir("a/b").expect("dir");
        sink.file("a/b/c", 0o4755)
            .expect("file")
            .write_all(b"hi")
            .expect("write");
        let path = tmp.path().join("root/a/b/c");
        assert_eq!(fs_err::read(&path).expect("read"), b"hi");
        let mode = fs_err::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o7777, 0o755);
        // Replacing a regular file works.
        sink.file("a/b/c", 0o644)
            .expect("again")
            .write_all(b"x")
            .expect("write");
        assert_eq!(fs_err::read(&path).expect("read"), b"x");
    }

    #[test]
    fn never_follows_symlinks() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        fs_err::create_dir(&outside).expect("mkdir");
        let root = tmp.path().join("root");
        let mut sink = DirSink::new(&root).expect("sink");
        std::os::unix::fs::symlink(&outside, root.join("link")).expect("symlink");
        std::os::unix::fs::symlink(outside.join("f"), root.join("flink")).expect("symlink");

        assert!(sink.dir("link/x").is_err());
        assert!(sink.file("link/x", 0o644).is_err());
        assert!(sink.file("flink", 0o644).is_err());
        assert!(sink.file("../escape", 0o644).is_err());
        assert!(sink.dir("/abs").is_err());
        assert_eq!(fs_err::read_dir(&outside).expect("ls").count(), 0);
    }
}
