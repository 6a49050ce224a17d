//! `unpack`: one streaming pass into `<work_dir>/bundles/<content digest>/`, reuse, refusals, cleanup,
//! flat memory and the CLI, all on real bundles written by `kubexm_bundles::pack`.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use kubexm_bundles::manifest::{BundleManifest, FileRecord};
use kubexm_bundles::pack::{pack, Entry, PackOptions, Source, EXEC_MODE, FILE_MODE};
use kubexm_install::unpack::{unpack, UnpackError, BUNDLES_DIR, FINGERPRINTS, MARKER};
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

const BIN: &str = env!("CARGO_BIN_EXE_kubexm-install");
const CLUSTER_YAML: &[u8] = b"apiVersion: kubexm.io/v1alpha1\nkind: Cluster\n";
const ETCD: &str = "files/etcd/v3.5.16/amd64/etcd";
const KUBEADM: &str = "files/kubeadm/v1.33.1/amd64/kubeadm";
const HELM: &str = "files/helm/v3.16.2/amd64/helm";

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The content digest the unpack must name the tree by: sha256 of the bundle's `SHA256SUMS`,
/// read here with plain zstd + tar (independently of the verify code).
fn content_digest(bundle: &Path) -> String {
    let file = fs::File::open(bundle).expect("open bundle");
    let decoder = zstd::stream::read::Decoder::new(file).expect("zstd");
    let mut archive = tar::Archive::new(decoder);
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        if entry.path().expect("path").to_str() == Some("SHA256SUMS") {
            let mut sums = Vec::new();
            entry.read_to_end(&mut sums).expect("read SHA256SUMS");
            return sha256(&sums);
        }
    }
    panic!("{} has no SHA256SUMS", bundle.display());
}

/// Deterministic, poorly compressible bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

fn manifest(files: Vec<FileRecord>) -> BundleManifest {
    BundleManifest {
        format_version: kubexm_bundles::FORMAT_VERSION,
        tool_version: "0.1.0".into(),
        cluster: "sample".into(),
        kubernetes_version: "v1.33.1".into(),
        zone: "default".into(),
        arches: ["amd64".to_owned()].into(),
        created: 1_700_000_000,
        files,
        images: Vec::new(),
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        sizes: Default::default(),
    }
}

/// `files/<name>/<version>/<arch>/<file>`.
fn record(path: &str, sha256: String, size: u64) -> FileRecord {
    let parts: Vec<&str> = path.split('/').collect();
    FileRecord {
        name: parts[1].into(),
        version: parts[2].into(),
        arch: parts[3].into(),
        path: path.into(),
        sha256,
        size,
        url: format!("https://example.invalid/{}", parts[4]),
        roles: ["master".to_owned()].into(),
    }
}

fn options() -> PackOptions {
    PackOptions {
        level: 1,
        threads: 2,
        mtime: 1_700_000_000,
    }
}

/// A bundle packed by `kubexm_bundles::pack`, and what it must unpack to.
struct Built {
    path: PathBuf,
    /// Its content digest.
    digest: String,
    manifest: BundleManifest,
    /// Every regular file but `bundle.json` and `SHA256SUMS`.
    expected: BTreeMap<String, Vec<u8>>,
}

/// Packs `cluster.yaml` and `files` (paths `files/<name>/<version>/<arch>/<file>`) into `dir/name`.
fn build(dir: &Path, name: &str, files: &[(&str, Vec<u8>)]) -> Built {
    let mut entries = vec![Entry {
        path: "cluster.yaml".into(),
        source: Source::Bytes(CLUSTER_YAML.to_vec()),
        sha256: None,
        mode: FILE_MODE,
    }];
    let mut records = Vec::new();
    let mut expected = BTreeMap::from([("cluster.yaml".to_owned(), CLUSTER_YAML.to_vec())]);
    for (path, content) in files {
        records.push(record(path, sha256(content), content.len() as u64));
        entries.push(Entry {
            path: (*path).to_owned(),
            source: Source::Bytes(content.clone()),
            sha256: None,
            mode: if path.ends_with("kubeadm") {
                EXEC_MODE
            } else {
                FILE_MODE
            },
        });
        expected.insert((*path).to_owned(), content.clone());
    }
    let manifest = manifest(records);
    let report = pack(&dir.join(name), &manifest, entries, &options()).expect("pack");
    // formatVersion 2: pack pins every entry's size in the bundle.json it writes.
    let mut manifest = manifest;
    manifest.sizes = expected
        .iter()
        .map(|(p, c)| (p.clone(), c.len() as u64))
        .collect();
    Built {
        digest: content_digest(&report.path),
        path: report.path,
        manifest,
        expected,
    }
}

fn sample(dir: &Path, name: &str) -> Built {
    build(
        dir,
        name,
        &[
            (ETCD, noise(300_000, 1)),
            (KUBEADM, noise(200_000, 2)),
            (HELM, b"TAMPER-ME helm\n".repeat(100)),
        ],
    )
}

/// Relative path → content of every regular file below `dir`.
fn files_in(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            let meta = fs::symlink_metadata(&path).expect("meta");
            if meta.is_dir() {
                stack.push(path);
            } else {
                assert!(meta.is_file(), "{} is not a file", path.display());
                let rel = path.strip_prefix(dir).expect("prefix");
                out.insert(
                    rel.to_string_lossy().into_owned(),
                    fs::read(&path).expect("read"),
                );
            }
        }
    }
    out
}

/// Relative path → mtime of everything below `dir`.
fn mtimes(dir: &Path) -> BTreeMap<PathBuf, SystemTime> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            let meta = fs::symlink_metadata(&path).expect("meta");
            out.insert(
                path.strip_prefix(dir).expect("prefix").to_owned(),
                meta.modified().expect("mtime"),
            );
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

/// The error and all its causes, `: `-joined.
pub(crate) fn chain(err: &dyn Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

/// The unpacked tree holds exactly the bundle's files, the marker and the metadata.
fn assert_tree(dir: &Path, built: &Built) {
    let mut found = files_in(dir);
    let json = found.remove("bundle.json").expect("bundle.json");
    let parsed: BundleManifest = serde_json::from_slice(&json).expect("parse bundle.json");
    assert_eq!(parsed, built.manifest);
    let sums = found.remove("SHA256SUMS").expect("SHA256SUMS");
    assert!(String::from_utf8(sums)
        .expect("utf8")
        .contains(&format!("{}  bundle.json\n", sha256(&json))));
    let marker = found.remove(MARKER).expect("marker");
    assert_eq!(marker, format!("{}\n", built.digest).into_bytes());
    assert_eq!(found, built.expected);
}

/// After a refused bundle: no partial directory and no digest directory under `root`.
fn assert_nothing_left(root: &Path, allowed: &BTreeSet<String>) {
    let left = names(root);
    assert!(
        left.iter().all(|n| n == ".lock" || allowed.contains(n)),
        "left behind in {}: {left:?}",
        root.display()
    );
}

#[test]
fn unpacks_once_then_reuses_even_under_another_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let built = sample(tmp.path(), "a.tar.zst");
    let work = tmp.path().join("work");
    let root = work.join(BUNDLES_DIR);

    let first = unpack(&built.path, &work).expect("unpack");
    assert!(!first.reused);
    assert_eq!(first.digest, built.digest);
    assert_eq!(first.dir, root.join(&built.digest));
    assert_eq!(first.manifest, built.manifest);
    assert_tree(&first.dir, &built);
    let exec = fs::metadata(first.dir.join(KUBEADM)).expect("meta");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&exec.permissions()) & 0o777,
        0o755
    );
    assert_eq!(
        names(&root),
        BTreeSet::from([
            ".lock".to_owned(),
            FINGERPRINTS.to_owned(),
            built.digest.clone()
        ])
    );
    let before = mtimes(&first.dir);

    // Same file again: fingerprint matches, nothing is touched.
    std::thread::sleep(Duration::from_millis(20));
    let second = unpack(&built.path, &work).expect("second unpack");
    assert!(second.reused);
    assert_eq!(second.dir, first.dir);
    assert_eq!(second.digest, first.digest);
    assert_eq!(second.manifest, built.manifest);
    assert_eq!(mtimes(&first.dir), before, "reuse must not touch the tree");

    // The same bytes under another name: hashed, found, reused; never mixed or duplicated.
    let moved = tmp.path().join("renamed.tar.zst");
    fs::rename(&built.path, &moved).expect("rename");
    let third = unpack(&moved, &work).expect("unpack renamed");
    assert!(third.reused);
    assert_eq!(third.dir, first.dir);
    assert_eq!(mtimes(&first.dir), before, "reuse must not touch the tree");
    assert_eq!(names(&root).len(), 3, "{:?}", names(&root));
    let record = fs::read_to_string(root.join(FINGERPRINTS)).expect("fingerprints");
    let canonical = fs::canonicalize(&moved).expect("canonical");
    assert!(
        record.contains(&*canonical.to_string_lossy()),
        "renamed bundle recorded: {record}"
    );
    // Now known by its new name too.
    assert!(unpack(&moved, &work).expect("again").reused);
}

#[test]
fn a_different_bundle_lands_beside_the_first() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = sample(tmp.path(), "a.tar.zst");
    let b = build(
        tmp.path(),
        "b.tar.zst",
        &[(ETCD, noise(100_000, 9)), (HELM, b"other helm\n".to_vec())],
    );
    let work = tmp.path().join("work");

    let ua = unpack(&a.path, &work).expect("unpack a");
    let ub = unpack(&b.path, &work).expect("unpack b");
    assert!(!ub.reused);
    assert_ne!(ua.dir, ub.dir);
    assert_eq!(ub.dir, work.join(BUNDLES_DIR).join(&b.digest));
    assert_tree(&ua.dir, &a);
    assert_tree(&ub.dir, &b);
    assert!(!ub.dir.join(KUBEADM).exists(), "bundles must not mix");
    assert!(unpack(&a.path, &work).expect("a again").reused);
    assert!(unpack(&b.path, &work).expect("b again").reused);

    // A bundle rewritten in place is hashed again (here it turns out to be b); a's tree stays.
    fs::copy(&b.path, &a.path).expect("overwrite a with b");
    let over = unpack(&a.path, &work).expect("unpack overwritten");
    assert_eq!(over.dir, ub.dir);
    assert!(over.reused, "same bytes as b");
    assert_tree(&ua.dir, &a);
}

#[test]
fn unpacks_again_when_the_directory_is_gone_or_incomplete() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let built = sample(tmp.path(), "a.tar.zst");
    let work = tmp.path().join("work");
    let first = unpack(&built.path, &work).expect("unpack");

    fs::remove_dir_all(&first.dir).expect("rm");
    let again = unpack(&built.path, &work).expect("unpack again");
    assert!(!again.reused);
    assert_tree(&again.dir, &built);

    // No marker: looks like a crash after the rename; replaced, stray content gone.
    fs::remove_file(again.dir.join(MARKER)).expect("rm marker");
    fs::write(again.dir.join("stray"), b"x").expect("stray");
    let third = unpack(&built.path, &work).expect("unpack third");
    assert!(!third.reused);
    assert_tree(&third.dir, &built);

    // A marker for another digest does not count either.
    fs::write(third.dir.join(MARKER), "0".repeat(64)).expect("bad marker");
    assert!(!unpack(&built.path, &work).expect("fourth").reused);
    assert_tree(&third.dir, &built);
}

#[test]
fn stale_partials_are_removed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let built = sample(tmp.path(), "a.tar.zst");
    let work = tmp.path().join("work");
    let root = work.join(BUNDLES_DIR);
    let stale = |root: &Path| {
        fs::create_dir_all(root.join(".partial-x/files/etcd")).expect("mkdir");
        fs::write(root.join(".partial-x/files/etcd/half"), b"half").expect("write");
        fs::write(root.join(".partial-1-2-fingerprints.json"), b"{").expect("write");
    };
    stale(&root);
    let first = unpack(&built.path, &work).expect("unpack");
    assert!(!first.reused);
    assert!(!root.join(".partial-x").exists());
    assert!(!root.join(".partial-1-2-fingerprints.json").exists());

    // Also on the reuse path.
    stale(&root);
    assert!(unpack(&built.path, &work).expect("reuse").reused);
    assert_eq!(names(&root).len(), 3, "{:?}", names(&root));

    // A garbled fingerprint record is only a cache miss.
    fs::write(root.join(FINGERPRINTS), b"{not json").expect("garble");
    let after = unpack(&built.path, &work).expect("unpack");
    assert!(after.reused, "hashed to the existing directory");
    assert!(unpack(&built.path, &work).expect("reuse").reused);
}

/// Unpacks `bundle` expecting a verification failure that names the bundle and `entry`.
fn assert_refused(bundle: &Path, work: &Path, entry: &str) -> String {
    let err = unpack(bundle, work).expect_err("bundle must be refused");
    assert!(matches!(err, UnpackError::Verify { .. }), "{err:?}");
    let text = chain(&err);
    assert!(
        text.contains(&format!("`{}`", bundle.display())),
        "error does not name the bundle: {text}"
    );
    assert!(
        text.contains(&format!("`{entry}`")),
        "error does not name `{entry}`: {text}"
    );
    text
}

#[test]
fn tampered_and_truncated_bundles_are_refused_and_leave_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let built = sample(tmp.path(), "a.tar.zst");
    let good = fs::read(&built.path).expect("read");
    let work = tmp.path().join("work");
    let root = work.join(BUNDLES_DIR);

    // One byte of helm's content changed; the tar is recompressed so zstd is happy.
    let mut tar = zstd::decode_all(good.as_slice()).expect("decompress");
    let at = tar
        .windows(9)
        .position(|w| w == b"TAMPER-ME")
        .expect("find content");
    tar[at] = b't';
    let tampered = tmp.path().join("tampered.tar.zst");
    fs::write(
        &tampered,
        zstd::encode_all(tar.as_slice(), 3).expect("zstd"),
    )
    .expect("write");
    let text = assert_refused(&tampered, &work, HELM);
    assert!(text.contains("tampered"), "{text}");
    assert_nothing_left(&root, &BTreeSet::new());

    // Cut in the middle of the stream.
    let truncated = tmp.path().join("truncated.tar.zst");
    fs::write(&truncated, &good[..good.len() / 2]).expect("write");
    let err = unpack(&truncated, &work).expect_err("truncated");
    let text = chain(&err);
    assert!(
        text.contains(&format!("`{}`", truncated.display())) && text.contains("after entry `"),
        "{text}"
    );
    assert_nothing_left(&root, &BTreeSet::new());

    // The good bundle still unpacks, and a bad one later leaves the good one alone.
    let ok = unpack(&built.path, &work).expect("unpack good");
    assert_refused(&tampered, &work, HELM);
    let allowed = BTreeSet::from([FINGERPRINTS.to_owned(), built.digest.clone()]);
    assert_nothing_left(&root, &allowed);
    assert_tree(&ok.dir, &built);
}

/// A raw tar entry; the name goes into the header verbatim.
fn raw(builder: &mut tar::Builder<Vec<u8>>, name: &str, kind: EntryType, data: &[u8], link: &str) {
    let mut header = Header::new_gnu();
    let gnu = header.as_gnu_mut().expect("gnu header");
    gnu.name[..name.len()].copy_from_slice(name.as_bytes());
    gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
    header.set_entry_type(kind);
    header.set_size(data.len() as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    builder.append(&header, data).expect("append");
}

/// `bundle.json`, `SHA256SUMS` (listing it and `listed`), then `bad`.
fn crafted(path: &Path, listed: &[(&str, &[u8])], bad: (&str, EntryType, &[u8], &str)) {
    let json = serde_json::to_vec_pretty(&manifest(Vec::new())).expect("json");
    let mut lines: Vec<String> = std::iter::once(("bundle.json", json.as_slice()))
        .chain(listed.iter().copied())
        .map(|(p, c)| format!("{}  {p}\n", sha256(c)))
        .collect();
    lines.sort_by(|a, b| a[66..].cmp(&b[66..]));
    let sums = lines.concat();
    let mut builder = tar::Builder::new(Vec::new());
    raw(&mut builder, "bundle.json", EntryType::Regular, &json, "");
    raw(
        &mut builder,
        "SHA256SUMS",
        EntryType::Regular,
        sums.as_bytes(),
        "",
    );
    let (name, kind, data, link) = bad;
    raw(&mut builder, name, kind, data, link);
    let tar = builder.into_inner().expect("tar");
    fs::write(path, zstd::encode_all(tar.as_slice(), 3).expect("zstd")).expect("write");
}

#[test]
fn unsafe_paths_links_and_devices_are_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path().join("work").join("deep");
    let root = work.join(BUNDLES_DIR);
    let cases: [(&str, EntryType, &[u8], &str); 5] = [
        ("../escape", EntryType::Regular, b"evil", ""),
        ("files/../../../escape", EntryType::Regular, b"evil", ""),
        ("files/link", EntryType::Symlink, b"", "/etc/passwd"),
        ("files/hard", EntryType::Link, b"", "bundle.json"),
        ("files/dev", EntryType::Char, b"", ""),
    ];
    for (i, (name, kind, data, link)) in cases.into_iter().enumerate() {
        let bundle = tmp.path().join(format!("bad{i}.tar.zst"));
        crafted(&bundle, &[], (name, kind, data, link));
        let text = assert_refused(&bundle, &work, name);
        assert!(
            text.contains("unsafe path") || text.contains("link") || text.contains("device"),
            "{text}"
        );
        assert_nothing_left(&root, &BTreeSet::new());
        for escaped in [
            tmp.path().join("escape"),
            work.join("escape"),
            root.join("escape"),
        ] {
            assert!(!escaped.exists(), "{} written", escaped.display());
        }
    }
}

#[test]
fn a_missing_bundle_or_a_directory_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path().join("work");
    let missing = tmp.path().join("missing.tar.zst");
    let err = unpack(&missing, &work).expect_err("missing");
    assert!(matches!(err, UnpackError::Open { .. }), "{err:?}");
    assert!(chain(&err).contains(&format!("`{}`", missing.display())));
    let err = unpack(tmp.path(), &work).expect_err("a directory");
    assert!(matches!(err, UnpackError::NotAFile { .. }), "{err:?}");
    assert_nothing_left(&work.join(BUNDLES_DIR), &BTreeSet::new());
}

#[test]
fn cli_unpacks_then_reports_already_unpacked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let built = sample(tmp.path(), "a.tar.zst");
    let work = tmp.path().join("work");
    let run = |bundle: &Path| {
        Command::new(BIN)
            .arg("--work-dir")
            .arg(&work)
            .args(["unpack", "--bundle"])
            .arg(bundle)
            .output()
            .expect("run kubexm-install")
    };
    let dir = work.join(BUNDLES_DIR).join(&built.digest);

    let first = run(&built.path);
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(
        stdout,
        format!("{}: unpacked in {}\n", built.path.display(), dir.display())
    );
    let second = run(&built.path);
    assert!(second.status.success());
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        format!(
            "{}: already unpacked in {}\n",
            built.path.display(),
            dir.display()
        )
    );

    let bad = tmp.path().join("bad.tar.zst");
    crafted(&bad, &[], ("../escape", EntryType::Regular, b"evil", ""));
    let refused = run(&bad);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("error: Failed to unpack") && stderr.contains("`../escape`"),
        "{stderr}"
    );
}

/// Peak RSS (`VmHWM`, bytes) of a live process, if readable.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Not timed: the CLI unpacks a ~200 MB bundle of random data while its peak RSS is sampled;
/// streaming keeps it far below the bundle size.
#[test]
fn peak_memory_stays_flat_for_a_large_bundle() {
    const PART: u64 = 50 << 20;
    const LIMIT: u64 = 64 << 20;
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    fs::create_dir(&src).expect("mkdir");
    let mut entries = Vec::new();
    let mut records = Vec::new();
    for i in 0..4 {
        let file = src.join(format!("part{i}"));
        let mut random = fs::File::open("/dev/urandom").expect("urandom").take(PART);
        let mut out = fs::File::create(&file).expect("create");
        std::io::copy(&mut random, &mut out).expect("random data");
        let path = format!("files/blob/v{i}/amd64/part");
        let sum = sha256(&fs::read(&file).expect("read"));
        records.push(record(&path, sum.clone(), PART));
        entries.push(Entry {
            path,
            source: Source::File(file),
            sha256: Some(sum),
            mode: FILE_MODE,
        });
    }
    let report = pack(
        &tmp.path().join("big.tar.zst"),
        &manifest(records),
        entries,
        &options(),
    )
    .expect("pack");
    fs::remove_dir_all(&src).expect("rm sources");
    assert!(report.bytes_out > 4 * PART, "{}", report.bytes_out);

    let work = tmp.path().join("work");
    let stderr = fs::File::create(tmp.path().join("stderr")).expect("stderr");
    let mut child = Command::new(BIN)
        .arg("--work-dir")
        .arg(&work)
        .args(["unpack", "--bundle"])
        .arg(&report.path)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn");
    let mut peak = 0;
    let mut samples = 0;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if let Some(rss) = peak_rss(child.id()) {
            peak = peak.max(rss);
            samples += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(
        status.success(),
        "{}",
        fs::read_to_string(tmp.path().join("stderr")).unwrap_or_default()
    );
    assert!(samples > 0, "no RSS sample taken");
    assert!(
        peak < LIMIT,
        "peak RSS {peak} bytes while unpacking {} bytes",
        report.bytes_out
    );
    let dir = work.join(BUNDLES_DIR).join(content_digest(&report.path));
    assert_eq!(
        fs::metadata(dir.join("files/blob/v3/amd64/part"))
            .expect("unpacked")
            .len(),
        PART
    );
}
