//! Cluster backups (`kubexm-install backup` / `restore`): one encrypted file holding the etcd
//! snapshot, each node's Kubernetes and etcd files (PKI, kubeconfigs, static pod manifests,
//! kubeadm configuration), KubeXM's own record of the cluster (every cluster.yaml applied) and
//! the keys KubeXM keeps for it, with a manifest of sha256 sums.
//!
//! The plaintext is a tar stream: `manifest.json` first, then every entry the manifest lists,
//! nothing else. Entry names are fixed shapes ([`entry_path_ok`]): `etcd/snapshot.db`,
//! `nodes/<node>/files.tar`, `control/pki.tar`, `control/record.tar`. It is encrypted with the
//! operator's key ([`crypt`]) and written to a temporary file beside the destination, synced,
//! then renamed (mode 0600).
//!
//! Reading ([`open`]) decrypts into a private directory, then checks the whole archive against
//! its manifest: every entry listed, present once, a regular file of the listed size and sha256,
//! nothing unlisted; the manifest is at most [`MAX_MANIFEST`] bytes.

pub mod crypt;
pub mod fresh;
pub mod schedule;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crypt::{BackupKey, CryptError};

/// The manifest's name inside the archive.
pub const MANIFEST: &str = "manifest.json";
/// The etcd snapshot's name inside the archive.
pub const SNAPSHOT: &str = "etcd/snapshot.db";
/// Largest manifest read.
pub const MAX_MANIFEST: u64 = 1 << 20;
/// Format version written.
pub const FORMAT: u32 = 1;

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format_version: u32,
    /// Cluster name.
    pub cluster: String,
    /// When it was taken (RFC 3339, UTC).
    pub created: String,
    /// KubeXM's version that took it.
    pub kubexm_version: String,
    /// The etcd member the snapshot came from.
    pub etcd_member: String,
    /// The entries after the manifest, in archive order.
    pub entries: Vec<Entry>,
}

/// One file of the archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// Name inside the archive.
    pub path: String,
    /// Length in bytes.
    pub size: u64,
    /// sha256, lowercase hex.
    pub sha256: String,
    /// What it is, for people.
    pub what: String,
}

/// What can go wrong with a backup file.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// Encryption layer.
    #[error(transparent)]
    Crypt(#[from] CryptError),
    /// The archive inside does not match its manifest.
    #[error("the backup's archive is not valid: {}", kubexm_manifests::display::UntrustedMax(.0, 1000))]
    Invalid(String),
    /// Reading or writing failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let context = context.into();
    move |source| BackupError::Io { context, source }
}

/// Whether `p` is one of the entry shapes a backup may hold (see the module docs): no `..`, no
/// absolute part, node names as cluster.yaml allows them.
pub fn entry_path_ok(p: &str) -> bool {
    match p.split('/').collect::<Vec<_>>().as_slice() {
        ["etcd", "snapshot.db"] => true,
        ["control", "pki.tar" | "record.tar"] => true,
        ["nodes", node, "files.tar"] => is_plain_name(node),
        _ => false,
    }
}

/// A cluster or node name as the work directory and cluster.yaml allow them: ASCII letters,
/// digits, `-`, `.`, `_`, not starting with `.`, at most 253 bytes.
pub fn is_plain_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && !n.starts_with('.')
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// Most entries a manifest lists (a backup holds one per node plus three).
pub const MAX_ENTRIES: usize = 10_000;
/// Longest `created` and `kubexmVersion` value.
pub const MAX_TOKEN: usize = 64;
/// Longest `what` of an entry.
pub const MAX_WHAT: usize = 256;

fn is_token(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic())
}

impl Manifest {
    /// Parses and checks `manifest.json`: the format version, the cluster and etcd member as
    /// plain names ([`is_plain_name`]), `created` and `kubexmVersion` as short printable tokens,
    /// and every entry: a name a backup holds ([`entry_path_ok`]), once, a lowercase hex
    /// sha256 and a `what` without control characters. A backup file comes from elsewhere: its
    /// key proves who wrote it, not that its text is safe to print or to name a cluster with.
    ///
    /// # Errors
    ///
    /// [`BackupError::Invalid`] naming the first problem (values shown escaped).
    pub fn parse(json: &[u8]) -> Result<Self, BackupError> {
        use kubexm_manifests::display::UntrustedMax;
        let bad = |m: String| BackupError::Invalid(m);
        if json.len() as u64 > MAX_MANIFEST {
            return Err(bad(format!(
                "{MANIFEST} is larger than {MAX_MANIFEST} bytes"
            )));
        }
        let m: Manifest =
            serde_json::from_slice(json).map_err(|e| bad(format!("{MANIFEST}: {e}")))?;
        if m.format_version != FORMAT {
            return Err(bad(format!(
                "format version {} (this KubeXM reads {FORMAT})",
                m.format_version
            )));
        }
        let field = |name: &str, value: &str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(bad(format!(
                    "{MANIFEST}: {name} `{}` is not valid",
                    UntrustedMax(value, 300)
                )))
            }
        };
        field("cluster", &m.cluster, is_plain_name(&m.cluster))?;
        field("etcdMember", &m.etcd_member, is_plain_name(&m.etcd_member))?;
        field("created", &m.created, is_token(&m.created, MAX_TOKEN))?;
        field(
            "kubexmVersion",
            &m.kubexm_version,
            is_token(&m.kubexm_version, MAX_TOKEN),
        )?;
        if m.entries.len() > MAX_ENTRIES {
            return Err(bad(format!(
                "{MANIFEST} lists {} entries, at most {MAX_ENTRIES} allowed",
                m.entries.len()
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        for e in &m.entries {
            if !entry_path_ok(&e.path) || !seen.insert(e.path.as_str()) {
                return Err(bad(format!(
                    "{MANIFEST} lists {:?} (not an entry name a backup holds, or twice)",
                    e.path.escape_debug().to_string()
                )));
            }
            let hex = e.sha256.len() == 64
                && e.sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            field("sha256", &e.sha256, hex)?;
            let what = e.what.len() <= MAX_WHAT && !e.what.chars().any(char::is_control);
            field("what", &e.what, what)?;
        }
        Ok(m)
    }
}

/// Files gathered for a backup, in a private staging directory.
#[derive(Debug)]
pub struct Staging {
    dir: tempfile::TempDir,
    entries: Vec<Entry>,
}

impl Staging {
    /// A new staging directory under `parent` (mode 0700).
    pub fn new(parent: &Path) -> Result<Self, BackupError> {
        crate::private_dir::ensure_private_dir(parent)
            .map_err(io(format!("creating {}", parent.display())))?;
        let dir = tempfile::Builder::new()
            .prefix(".backup-")
            .tempdir_in(parent)
            .map_err(io(format!(
                "creating a staging directory in {}",
                parent.display()
            )))?;
        Ok(Self {
            dir,
            entries: Vec::new(),
        })
    }

    /// Where entry `path` is staged (its directory created).
    pub fn path_for(&self, path: &str) -> Result<PathBuf, BackupError> {
        if !entry_path_ok(path) {
            return Err(BackupError::Invalid(format!("entry name {path:?}")));
        }
        let p = self.dir.path().join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("creating {}", parent.display())))?;
        }
        Ok(p)
    }

    /// Records a staged file (hashing it).
    pub fn add(&mut self, path: &str, what: &str) -> Result<&Entry, BackupError> {
        let p = self.path_for(path)?;
        let (size, sha256) = hash_file(&p)?;
        self.entries.push(Entry {
            path: path.to_string(),
            size,
            sha256,
            what: what.to_string(),
        });
        Ok(self.entries.last().expect("just pushed"))
    }

    /// Packs a directory of the control host into entry `path` as a tar (relative names).
    pub fn add_dir(&mut self, path: &str, dir: &Path, what: &str) -> Result<&Entry, BackupError> {
        let p = self.path_for(path)?;
        let f = std::fs::File::create(&p).map_err(io(format!("creating {}", p.display())))?;
        let mut b = tar::Builder::new(f);
        b.follow_symlinks(false);
        if dir.is_dir() {
            b.append_dir_all(".", dir)
                .map_err(io(format!("packing {}", dir.display())))?;
        }
        b.into_inner()
            .and_then(|f| f.sync_all())
            .map_err(io(format!("writing {}", p.display())))?;
        self.add(path, what)
    }

    /// Writes the encrypted backup to `out` (atomically, mode 0600) and returns its manifest.
    pub fn seal(
        self,
        key: &BackupKey,
        cluster: &str,
        etcd_member: &str,
        out: &Path,
    ) -> Result<Manifest, BackupError> {
        let manifest = Manifest {
            format_version: FORMAT,
            cluster: cluster.to_string(),
            created: crate::record::now(),
            kubexm_version: env!("CARGO_PKG_VERSION").to_string(),
            etcd_member: etcd_member.to_string(),
            entries: self.entries.clone(),
        };
        let plain = self.dir.path().join("archive.tar");
        {
            let f = std::fs::File::create(&plain).map_err(io("creating the archive"))?;
            let mut b = tar::Builder::new(std::io::BufWriter::new(f));
            let json = serde_json::to_vec_pretty(&manifest)
                .map_err(|e| BackupError::Invalid(e.to_string()))?;
            let mut h = tar::Header::new_gnu();
            h.set_size(json.len() as u64);
            h.set_mode(0o600);
            h.set_cksum();
            b.append_data(&mut h, MANIFEST, json.as_slice())
                .map_err(io("writing the manifest"))?;
            for e in &manifest.entries {
                let src = self.dir.path().join(&e.path);
                let mut f =
                    std::fs::File::open(&src).map_err(io(format!("reading {}", src.display())))?;
                let mut h = tar::Header::new_gnu();
                h.set_size(e.size);
                h.set_mode(0o600);
                h.set_cksum();
                b.append_data(&mut h, &e.path, &mut f)
                    .map_err(io(format!("packing {}", e.path)))?;
            }
            b.into_inner()
                .map_err(io("writing the archive"))?
                .into_inner()
                .map_err(|e| e.into_error())
                .and_then(|f| f.sync_all())
                .map_err(io("writing the archive"))?;
        }
        let parent = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = tempfile::Builder::new()
            .prefix(".kubexm-backup-")
            .tempfile_in(parent)
            .map_err(io(format!("creating a file in {}", parent.display())))?;
        {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io("chmod 600"))?;
        }
        let mut w = std::io::BufWriter::new(tmp.as_file());
        let mut r = std::io::BufReader::new(
            std::fs::File::open(&plain).map_err(io("reading the archive"))?,
        );
        crypt::encrypt(key, &mut r, &mut w)?;
        w.flush()
            .map_err(io(format!("writing {}", out.display())))?;
        drop(w);
        tmp.as_file()
            .sync_all()
            .map_err(io(format!("writing {}", out.display())))?;
        tmp.persist(out).map_err(|e| BackupError::Io {
            context: format!("renaming into {}", out.display()),
            source: e.error,
        })?;
        Ok(manifest)
    }
}

fn hash_file(p: &Path) -> Result<(u64, String), BackupError> {
    let mut f = std::fs::File::open(p).map_err(io(format!("reading {}", p.display())))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        let k = f
            .read(&mut buf)
            .map_err(io(format!("reading {}", p.display())))?;
        if k == 0 {
            return Ok((n, hex::encode(h.finalize())));
        }
        n += k as u64;
        h.update(&buf[..k]);
    }
}

/// An opened, verified backup: its manifest and its entries as files.
#[derive(Debug)]
pub struct Opened {
    /// The manifest.
    pub manifest: Manifest,
    dir: tempfile::TempDir,
}

impl Opened {
    /// Where entry `path` is (it was checked against the manifest).
    pub fn file(&self, path: &str) -> Option<PathBuf> {
        self.manifest
            .entries
            .iter()
            .any(|e| e.path == path)
            .then(|| self.dir.path().join(path))
    }

    /// The private directory the backup was opened into (removed with this value).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The manifest entry `path`.
    pub fn entry(&self, path: &str) -> Option<&Entry> {
        self.manifest.entries.iter().find(|e| e.path == path)
    }
}

/// Decrypts `file` with `key` into a private directory under `scratch` and checks every entry
/// against the manifest.
pub fn open(file: &Path, key: &BackupKey, scratch: &Path) -> Result<Opened, BackupError> {
    crate::private_dir::ensure_private_dir(scratch)
        .map_err(io(format!("creating {}", scratch.display())))?;
    let dir = tempfile::Builder::new()
        .prefix(".restore-")
        .tempdir_in(scratch)
        .map_err(io(format!("creating a directory in {}", scratch.display())))?;
    let plain = dir.path().join("archive.tar");
    {
        let mut r = std::io::BufReader::new(
            std::fs::File::open(file).map_err(io(format!("reading {}", file.display())))?,
        );
        let mut w = std::io::BufWriter::new(
            std::fs::File::create(&plain).map_err(io("creating the decrypted archive"))?,
        );
        crypt::decrypt(key, &mut r, &mut w)?;
        w.flush().map_err(io("writing the decrypted archive"))?;
    }
    let manifest = check_archive(&plain, dir.path())?;
    std::fs::remove_file(&plain).map_err(io("removing the decrypted archive"))?;
    Ok(Opened { manifest, dir })
}

/// Reads a decrypted archive (`plain`), checking it whole against its manifest, and writes its
/// entries under `into` (only the entry names the manifest lists and [`entry_path_ok`] allows).
pub fn check_archive(plain: &Path, into: &Path) -> Result<Manifest, BackupError> {
    let bad = |m: String| BackupError::Invalid(m);
    let f = std::fs::File::open(plain).map_err(io("reading the decrypted archive"))?;
    let mut a = tar::Archive::new(std::io::BufReader::new(f));
    let mut entries = a.entries().map_err(io("reading the archive"))?;
    let mut first = entries
        .next()
        .ok_or_else(|| bad("empty archive".into()))?
        .map_err(io("reading the archive"))?;
    if first.path_bytes().as_ref() != MANIFEST.as_bytes() {
        return Err(bad(format!("the first entry is not {MANIFEST}")));
    }
    if first.header().size().unwrap_or(u64::MAX) > MAX_MANIFEST {
        return Err(bad(format!(
            "{MANIFEST} is larger than {MAX_MANIFEST} bytes"
        )));
    }
    let mut json = Vec::new();
    (&mut first)
        .take(MAX_MANIFEST)
        .read_to_end(&mut json)
        .map_err(io("reading the manifest"))?;
    let manifest = Manifest::parse(&json)?;
    let mut got = std::collections::BTreeSet::new();
    for entry in entries {
        let mut entry = entry.map_err(io("reading the archive"))?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(want) = manifest.entries.iter().find(|e| e.path == name) else {
            return Err(bad(format!(
                "entry {:?} is not in {MANIFEST}",
                name.escape_debug().to_string()
            )));
        };
        if !entry.header().entry_type().is_file() || !got.insert(name.clone()) {
            return Err(bad(format!(
                "entry {name} is not a regular file, or appears twice"
            )));
        }
        if entry.header().size().ok() != Some(want.size) {
            return Err(bad(format!("entry {name}: size differs from {MANIFEST}")));
        }
        let dest = into.join(&want.path);
        if let Some(p) = dest.parent() {
            std::fs::create_dir_all(p).map_err(io(format!("creating {}", p.display())))?;
        }
        let mut out =
            std::fs::File::create(&dest).map_err(io(format!("writing {}", dest.display())))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        loop {
            let k = entry
                .read(&mut buf)
                .map_err(io(format!("reading {name}")))?;
            if k == 0 {
                break;
            }
            n += k as u64;
            h.update(&buf[..k]);
            out.write_all(&buf[..k])
                .map_err(io(format!("writing {}", dest.display())))?;
        }
        if n != want.size || hex::encode(h.finalize()) != want.sha256 {
            return Err(bad(format!("entry {name}: sha256 differs from {MANIFEST}")));
        }
    }
    if let Some(missing) = manifest.entries.iter().find(|e| !got.contains(&e.path)) {
        return Err(bad(format!(
            "{} is listed in {MANIFEST} but missing",
            missing.path
        )));
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_fixed_shapes() {
        for ok in [
            "etcd/snapshot.db",
            "nodes/node-1/files.tar",
            "control/pki.tar",
        ] {
            assert!(entry_path_ok(ok), "{ok}");
        }
        for bad in [
            "../etc/passwd",
            "/etc/passwd",
            "nodes/../files.tar",
            "nodes/.hidden/files.tar",
            "nodes/a/b/files.tar",
            "etcd/other.db",
            "manifest.json",
            "nodes//files.tar",
        ] {
            assert!(!entry_path_ok(bad), "{bad}");
        }
    }

    fn sealed(dir: &Path, key: &BackupKey) -> PathBuf {
        let mut s = Staging::new(&dir.join("work")).expect("staging");
        std::fs::write(s.path_for(SNAPSHOT).expect("path"), b"snapshot bytes").expect("write");
        s.add(SNAPSHOT, "etcd snapshot").expect("add");
        let pki = dir.join("pki");
        std::fs::create_dir_all(pki.join("etcd")).expect("mkdir");
        std::fs::write(pki.join("etcd/ca.pem"), b"CA").expect("write");
        s.add_dir("control/pki.tar", &pki, "keys").expect("add dir");
        let out = dir.join("b.kxbak");
        let m = s.seal(key, "c1", "node1", &out).expect("seal");
        assert_eq!(m.entries.len(), 2);
        out
    }

    #[test]
    fn a_sealed_backup_opens_with_its_key_only_and_is_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = BackupKey::generate().expect("key");
        let out = sealed(dir.path(), &key);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&out).expect("meta").permissions().mode() & 0o777,
            0o600
        );
        let raw = std::fs::read(&out).expect("read");
        assert!(
            !raw.windows(14).any(|w| w == b"snapshot bytes"),
            "encrypted"
        );
        let o = open(&out, &key, &dir.path().join("scratch")).expect("open");
        assert_eq!(o.manifest.cluster, "c1");
        let snap = o.file(SNAPSHOT).expect("snapshot");
        assert_eq!(std::fs::read(snap).expect("read"), b"snapshot bytes");
        assert!(o.file("nodes/x/files.tar").is_none());
        let other = BackupKey::generate().expect("key");
        assert!(matches!(
            open(&out, &other, &dir.path().join("scratch")),
            Err(BackupError::Crypt(CryptError::Forged { .. }))
        ));
    }

    /// An archive whose manifest and entries disagree is refused even when it is properly
    /// encrypted (a key-holder's mistake or a hand-made file).
    #[test]
    fn archives_that_disagree_with_their_manifest_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = BackupKey::generate().expect("key");
        let seal_tar = |entries: &[(&str, &[u8])], manifest: &Manifest| -> PathBuf {
            let mut tarb = tar::Builder::new(Vec::new());
            let json = serde_json::to_vec(manifest).expect("json");
            let mut all: Vec<(&str, &[u8])> = vec![(MANIFEST, json.as_slice())];
            all.extend_from_slice(entries);
            for (name, data) in all {
                let mut h = tar::Header::new_gnu();
                h.set_size(data.len() as u64);
                h.set_mode(0o600);
                h.set_cksum();
                tarb.append_data(&mut h, name, data).expect("append");
            }
            let plain = tarb.into_inner().expect("tar");
            let out = dir.path().join("x.kxbak");
            let mut f = std::fs::File::create(&out).expect("create");
            crypt::encrypt(&key, &mut plain.as_slice(), &mut f).expect("encrypt");
            out
        };
        let entry = |path: &str, data: &[u8]| Entry {
            path: path.into(),
            size: data.len() as u64,
            sha256: hex::encode(Sha256::digest(data)),
            what: String::new(),
        };
        let manifest = |entries: Vec<Entry>| Manifest {
            format_version: FORMAT,
            cluster: "c".into(),
            created: "2026-11-28T15:00:00Z".into(),
            kubexm_version: "0.1.0".into(),
            etcd_member: "n".into(),
            entries,
        };
        let scratch = dir.path().join("s");
        let good = seal_tar(
            &[(SNAPSHOT, b"good")],
            &manifest(vec![entry(SNAPSHOT, b"good")]),
        );
        open(&good, &key, &scratch).expect("an archive that matches its manifest opens");
        let cases: Vec<(&str, PathBuf)> = vec![
            (
                "changed content",
                seal_tar(
                    &[(SNAPSHOT, b"evil")],
                    &manifest(vec![entry(SNAPSHOT, b"good")]),
                ),
            ),
            (
                "unlisted entry",
                seal_tar(
                    &[(SNAPSHOT, b"good"), ("control/pki.tar", b"x")],
                    &manifest(vec![entry(SNAPSHOT, b"good")]),
                ),
            ),
            (
                "missing entry",
                seal_tar(&[], &manifest(vec![entry(SNAPSHOT, b"good")])),
            ),
            (
                "traversal in the manifest",
                seal_tar(&[], &manifest(vec![entry("../../etc/passwd", b"x")])),
            ),
        ];
        for (what, file) in cases {
            let e = open(&file, &key, &scratch).expect_err(what);
            assert!(matches!(e, BackupError::Invalid(_)), "{what}: {e}");
        }
        assert!(!dir.path().join("etc/passwd").exists());

        // Text of the manifest that is printed (`backup verify`, `restore`'s refusals) or names
        // the cluster: control characters, spaces and unbounded values are refused when the
        // backup is opened, and the refusal shows them escaped.
        type Edit = Box<dyn Fn(&mut Manifest)>;
        let hostile: Vec<(&str, Edit)> = vec![
            ("cluster", Box::new(|m| m.cluster = "c\u{1b}[2J".into())),
            ("cluster", Box::new(|m| m.cluster = "c 1".into())),
            ("cluster", Box::new(|m| m.cluster = "a".repeat(254))),
            (
                "etcdMember",
                Box::new(|m| m.etcd_member = "n\nforged line".into()),
            ),
            ("created", Box::new(|m| m.created = "\u{7}".into())),
            (
                "kubexmVersion",
                Box::new(|m| m.kubexm_version = "1".repeat(65)),
            ),
            (
                "what",
                Box::new(|m| m.entries[0].what = "snap\rshot".into()),
            ),
            (
                "sha256",
                Box::new(|m| m.entries[0].sha256 = m.entries[0].sha256.to_uppercase()),
            ),
        ];
        for (field, edit) in hostile {
            let mut m = manifest(vec![entry(SNAPSHOT, b"good")]);
            edit(&mut m);
            let file = seal_tar(&[(SNAPSHOT, b"good")], &m);
            let e = open(&file, &key, &scratch).expect_err(field);
            let shown = e.to_string();
            assert!(shown.contains(field), "{field}: {shown}");
            assert!(!shown.chars().any(char::is_control), "{field}: {shown:?}");
        }
    }
}
