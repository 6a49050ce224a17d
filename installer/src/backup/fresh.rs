//! What `restore --fresh` takes from an opened backup besides the snapshot: the control host's
//! key directory (`control/pki.tar`) and, on the kubeadm path, kubeadm's identity files (CAs and
//! the service-account key pair) from a master's `nodes/<node>/files.tar`.
//!
//! Both tars come from a file that crossed an air gap, so they are read as hostile: only
//! regular files and directories, relative names without `..`, every file at most
//! [`MAX_KEY_FILE`] bytes, at most [`MAX_KEY_FILES`] of them. Written files are 0600 in 0700
//! directories.
//!
//! The key directory is merged, never overwritten: files the work directory lacks are added;
//! a CA or the service-account key that the work directory holds with other bytes is refused
//! (that directory belongs to another cluster identity, and keys are never replaced silently).

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::{io, BackupError, Opened};

/// Largest file taken from the key tars (keys, certificates, kubeconfigs, secrets).
pub const MAX_KEY_FILE: u64 = 1 << 20;
/// Most files taken from one key tar.
pub const MAX_KEY_FILES: usize = 10_000;

/// What a fresh restore added to the key directory.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Files added (relative names).
    pub added: Vec<String>,
    /// Files the key directory already held with the backup's bytes, or (leaves) kept as they
    /// are.
    pub kept: usize,
}

/// Whether a key-directory file makes the cluster's identity: a CA (`<name>-ca.crt`/`.key`)
/// or the service-account key pair (`sa.key`/`sa.pub`).
pub fn is_identity(name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.ends_with("-ca.crt") || base.ends_with("-ca.key") || base == "sa.key" || base == "sa.pub"
}

/// A checked relative name of a tar entry (`./a/b` → `a/b`); `None` for `.` itself.
fn relative(raw: &[u8]) -> Result<Option<PathBuf>, BackupError> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| BackupError::Invalid("a key tar entry's name is not UTF-8".into()))?;
    let mut out = PathBuf::new();
    for c in Path::new(text).components() {
        match c {
            Component::CurDir => {}
            Component::Normal(p) => out.push(p),
            _ => {
                return Err(BackupError::Invalid(format!(
                    "a key tar entry is named {:?}: only relative names without `..` are allowed",
                    text.escape_debug().to_string()
                )))
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Reads the regular files of tar `file` (checked as the module says) as `(name, bytes)`;
/// `want` picks which names are read (others are skipped unread). The tar comes from a backup
/// file (hostile input, fuzzed: `tests/fuzz`, `backup_key_tar`).
pub fn read_tar(
    file: &Path,
    what: &str,
    want: &dyn Fn(&Path) -> bool,
) -> Result<Vec<(PathBuf, Vec<u8>)>, BackupError> {
    let f = std::fs::File::open(file).map_err(io(format!("reading {what}")))?;
    let mut a = tar::Archive::new(std::io::BufReader::new(f));
    let mut out = Vec::new();
    let mut count = 0usize;
    for entry in a.entries().map_err(io(format!("reading {what}")))? {
        let mut entry = entry.map_err(io(format!("reading {what}")))?;
        count += 1;
        if count > MAX_KEY_FILES {
            return Err(BackupError::Invalid(format!(
                "{what} holds more than {MAX_KEY_FILES} entries"
            )));
        }
        let Some(name) = relative(&entry.path_bytes())? else {
            continue;
        };
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        // The nodes' trees hold symlinks (kubelet-client-current.pem); none is followed.
        if kind.is_symlink() && what.starts_with("nodes/") {
            continue;
        }
        if !kind.is_file() {
            return Err(BackupError::Invalid(format!(
                "{what}: {} is not a regular file or directory",
                name.display()
            )));
        }
        if !want(&name) {
            continue;
        }
        let size = entry.header().size().unwrap_or(u64::MAX);
        if size > MAX_KEY_FILE {
            return Err(BackupError::Invalid(format!(
                "{what}: {} is {size} bytes, more than the {MAX_KEY_FILE} a key file may be",
                name.display()
            )));
        }
        let mut bytes = Vec::new();
        (&mut entry)
            .take(MAX_KEY_FILE)
            .read_to_end(&mut bytes)
            .map_err(io(format!("reading {what}: {}", name.display())))?;
        out.push((name, bytes));
    }
    Ok(out)
}

/// Merges the backup's `control/pki.tar` into `key_dir` (created 0700 when missing).
pub fn merge_key_dir(opened: &Opened, key_dir: &Path) -> Result<Merged, BackupError> {
    let entry = "control/pki.tar";
    let Some(tar) = opened.file(entry) else {
        return Err(BackupError::Invalid(format!(
            "the backup holds no {entry}: it has no keys to restore"
        )));
    };
    let files = read_tar(&tar, entry, &|_| true)?;
    if !files.iter().any(|(n, _)| is_identity(&n.to_string_lossy())) {
        return Err(BackupError::Invalid(format!(
            "{entry} holds no CA: it has no cluster identity to restore"
        )));
    }
    // Refuse before writing anything.
    for (name, bytes) in &files {
        let target = key_dir.join(name);
        if is_identity(&name.to_string_lossy()) && target.exists() {
            let have =
                std::fs::read(&target).map_err(io(format!("reading {}", target.display())))?;
            if &have != bytes {
                return Err(BackupError::Invalid(format!(
                    "{} differs from the backup's: the work directory holds another identity for this cluster; move {} away (or use another --work-dir) and run again",
                    target.display(),
                    key_dir.display()
                )));
            }
        }
    }
    crate::private_dir::ensure_private_dir(key_dir)
        .map_err(io(format!("creating {}", key_dir.display())))?;
    let mut merged = Merged::default();
    for (name, bytes) in files {
        let target = key_dir.join(&name);
        if target.exists() {
            merged.kept += 1;
            continue;
        }
        if let Some(parent) = target.parent() {
            crate::private_dir::ensure_private_dir(parent)
                .map_err(io(format!("creating {}", parent.display())))?;
        }
        crate::private_dir::write_file_atomic(&target, &bytes, 0o600)
            .map_err(io(format!("writing {}", target.display())))?;
        merged.added.push(name.to_string_lossy().into_owned());
    }
    Ok(merged)
}

/// Files read from a backup's tar: `(name, bytes)`.
pub type NamedFiles = Vec<(String, Vec<u8>)>;

/// kubeadm's identity files (`etc/kubernetes/pki/<name>` for each of `names`) from the first
/// node tar of the backup that holds all of them, as `(node, files)`.
pub fn kubeadm_identity(
    opened: &Opened,
    names: &[&str],
) -> Result<(String, NamedFiles), BackupError> {
    for e in &opened.manifest.entries {
        let Some(node) = e
            .path
            .strip_prefix("nodes/")
            .and_then(|p| p.strip_suffix("/files.tar"))
        else {
            continue;
        };
        let Some(tar) = opened.file(&e.path) else {
            continue;
        };
        let wanted: Vec<PathBuf> = names
            .iter()
            .map(|n| Path::new("etc/kubernetes/pki").join(n))
            .collect();
        let files = read_tar(&tar, &e.path, &|p| wanted.iter().any(|w| w == p))?;
        let mut found = Vec::new();
        for n in names {
            let want = Path::new("etc/kubernetes/pki").join(n);
            if let Some((_, bytes)) = files.iter().find(|(p, _)| p == &want) {
                if !bytes.starts_with(b"-----BEGIN ") {
                    return Err(BackupError::Invalid(format!(
                        "{}: /{} is not PEM",
                        e.path,
                        want.display()
                    )));
                }
                found.push(((*n).to_string(), bytes.clone()));
            }
        }
        if found.len() == names.len() {
            return Ok((node.to_string(), found));
        }
    }
    Err(BackupError::Invalid(format!(
        "no node of the backup holds kubeadm's {} under /etc/kubernetes/pki (a backup of a kubeadm-path cluster has them on every master)",
        names.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::{BackupKey, Staging};

    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, bytes) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o600);
            h.set_cksum();
            b.append_data(&mut h, name, *bytes).expect("append");
        }
        b.into_inner().expect("tar")
    }

    /// A sealed and reopened backup with the given control pki.tar and node tars.
    fn opened(dir: &Path, pki: &[u8], nodes: &[(&str, Vec<u8>)]) -> Opened {
        let key = BackupKey::generate().expect("key");
        let mut s = Staging::new(dir).expect("staging");
        std::fs::write(s.path_for("control/pki.tar").expect("path"), pki).expect("write");
        s.add("control/pki.tar", "keys").expect("add");
        for (node, bytes) in nodes {
            let entry = format!("nodes/{node}/files.tar");
            std::fs::write(s.path_for(&entry).expect("path"), bytes).expect("write");
            s.add(&entry, "files").expect("add");
        }
        let out = dir.join("b.kxbak");
        s.seal(&key, "c", "node1", &out).expect("seal");
        crate::backup::open(&out, &key, &dir.join("scratch")).expect("open")
    }

    #[test]
    fn identity_files_are_cas_and_the_service_account_key() {
        for n in [
            "kubernetes/kubernetes-ca.crt",
            "etcd/etcd-ca.key",
            "kubernetes/sa.key",
            "sa.pub",
        ] {
            assert!(is_identity(n), "{n}");
        }
        for n in [
            "kubernetes/apiserver.crt",
            "admin.conf",
            "etcd/member-node1.key",
            "ca.crt",
        ] {
            assert!(!is_identity(n), "{n}");
        }
    }

    #[test]
    fn the_key_dir_is_filled_with_what_it_lacks_and_never_overwritten() {
        let dir = tempfile::tempdir().expect("tmp");
        let pki = tar_of(&[
            ("./kubernetes/kubernetes-ca.crt", b"CA"),
            ("./kubernetes/kubernetes-ca.key", b"KEY"),
            ("./kubernetes/apiserver.crt", b"OLD LEAF"),
        ]);
        let o = opened(dir.path(), &pki, &[]);
        let kd = dir.path().join("pki").join("c");
        let m = merge_key_dir(&o, &kd).expect("merge");
        assert_eq!(m.added.len(), 3);
        assert_eq!(
            std::fs::read(kd.join("kubernetes/kubernetes-ca.key")).expect("read"),
            b"KEY"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&kd), 0o700);
        assert_eq!(mode(&kd.join("kubernetes")), 0o700);
        assert_eq!(mode(&kd.join("kubernetes/kubernetes-ca.key")), 0o600);

        // A leaf re-issued since (an install re-run): kept, and a second merge adds nothing.
        std::fs::write(kd.join("kubernetes/apiserver.crt"), b"NEW LEAF").expect("write");
        let again = merge_key_dir(&o, &kd).expect("again");
        assert!(again.added.is_empty());
        assert_eq!(again.kept, 3);
        assert_eq!(
            std::fs::read(kd.join("kubernetes/apiserver.crt")).expect("read"),
            b"NEW LEAF"
        );

        // Another CA in the work directory: refused, naming the file, nothing written.
        std::fs::write(kd.join("kubernetes/kubernetes-ca.crt"), b"OTHER CA").expect("write");
        std::fs::remove_file(kd.join("kubernetes/kubernetes-ca.key")).expect("rm");
        let err = merge_key_dir(&o, &kd).expect_err("another identity");
        assert!(
            err.to_string()
                .contains("kubernetes-ca.crt differs from the backup's"),
            "{err}"
        );
        assert!(!kd.join("kubernetes/kubernetes-ca.key").exists());
    }

    #[test]
    fn hostile_key_tars_are_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        // `..` in a name (tar-rs refuses to write one with append_data, so the header is raw).
        let mut h = tar::Header::new_gnu();
        h.as_gnu_mut().expect("gnu").name[..13].copy_from_slice(b"../escape.key");
        h.set_size(1);
        h.set_mode(0o600);
        h.set_cksum();
        let mut raw = h.as_bytes().to_vec();
        raw.extend_from_slice(&[b'x'; 512]);
        raw.extend_from_slice(&[0; 1024]);
        let o = opened(dir.path(), &raw, &[]);
        let err = merge_key_dir(&o, &dir.path().join("kd")).expect_err("dot-dot");
        assert!(err.to_string().contains("without `..`"), "{err}");
        assert!(!dir.path().join("escape.key").exists());

        // A file larger than a key may be.
        let dir = tempfile::tempdir().expect("tmp");
        let big = vec![b'a'; usize::try_from(MAX_KEY_FILE).expect("fits") + 1];
        let o = opened(
            dir.path(),
            &tar_of(&[("./etcd/etcd-ca.crt", big.as_slice())]),
            &[],
        );
        let err = merge_key_dir(&o, &dir.path().join("kd")).expect_err("big");
        assert!(err.to_string().contains("more than"), "{err}");

        // No CA at all.
        let dir = tempfile::tempdir().expect("tmp");
        let o = opened(dir.path(), &tar_of(&[("./admin.conf", b"x")]), &[]);
        let err = merge_key_dir(&o, &dir.path().join("kd")).expect_err("no CA");
        assert!(err.to_string().contains("holds no CA"), "{err}");
    }

    #[test]
    fn kubeadm_identity_comes_from_a_master_that_has_all_of_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let pem: &[u8] = b"-----BEGIN X-----\n";
        let worker = tar_of(&[("etc/kubernetes/pki/ca.crt", pem)]);
        let master = tar_of(&[
            ("etc/kubernetes/pki/ca.crt", pem),
            ("etc/kubernetes/pki/ca.key", pem),
            ("etc/kubernetes/pki/apiserver.crt", pem),
        ]);
        let o = opened(
            dir.path(),
            &tar_of(&[("./etcd/etcd-ca.crt", b"x")]),
            &[("node4", worker), ("node2", master)],
        );
        let (node, files) = kubeadm_identity(&o, &["ca.crt", "ca.key"]).expect("found");
        assert_eq!(node, "node2");
        assert_eq!(
            files.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["ca.crt", "ca.key"]
        );
        let err = kubeadm_identity(&o, &["ca.crt", "sa.key"]).expect_err("no sa.key");
        assert!(
            err.to_string().contains("no node of the backup holds"),
            "{err}"
        );
    }
}
