//! Shared helpers: a sample bundle, raw tar crafting, error chains.

use std::error::Error;
use std::path::{Path, PathBuf};

use kubexm_bundles::manifest::{BundleManifest, FileRecord, ImageRecord};
use kubexm_bundles::pack::{pack, Entry, PackOptions, PackReport, Source, EXEC_MODE, FILE_MODE};
use kubexm_bundles::verify::{verify, NullSink, VerifyReport};
use kubexm_bundles::VerifyError;
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

pub(crate) const LONG_PATH: &str = "files/a-component-with-a-rather-long-name/v1.2.3-with-a-long-prerelease-tag/amd64/a-file-name-that-pushes-the-path-past-one-hundred-bytes.tar.gz";
pub(crate) const ETCD_PATH: &str = "files/etcd/v3.5.16/amd64/etcd-v3.5.16-linux-amd64.tar.gz";
pub(crate) const KUBEADM_PATH: &str = "files/kubeadm/v1.33.1/amd64/kubeadm";

pub(crate) fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Deterministic pseudo-random bytes (poorly compressible).
pub(crate) fn noise(len: usize, seed: u64) -> Vec<u8> {
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

pub(crate) fn manifest(files: Vec<FileRecord>, images: Vec<ImageRecord>) -> BundleManifest {
    BundleManifest {
        format_version: kubexm_bundles::FORMAT_VERSION,
        tool_version: "0.1.0".into(),
        cluster: "sample".into(),
        kubernetes_version: "v1.33.1".into(),
        zone: "default".into(),
        arches: ["amd64".to_owned()].into(),
        created: 1_700_000_000,
        files,
        images,
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        sizes: std::collections::BTreeMap::new(),
    }
}

fn record(path: &str, content: &[u8]) -> FileRecord {
    let parts: Vec<&str> = path.split('/').collect();
    FileRecord {
        name: parts[1].into(),
        version: parts[2].into(),
        arch: parts[3].into(),
        path: path.into(),
        sha256: sha256(content),
        size: content.len() as u64,
        url: format!("https://example.invalid/{}", parts[4]),
        roles: ["master".to_owned()].into(),
    }
}

/// A realistic bundle: files on disk (one with a known sum, one without), an executable, a
/// path over 100 bytes, an OCI layout and in-memory entries. Returns the manifest, the entries
/// and every expected `(path, content, mode)`.
pub(crate) struct Sample {
    pub(crate) manifest: BundleManifest,
    pub(crate) entries: Vec<Entry>,
    pub(crate) expected: Vec<(String, Vec<u8>, u32)>,
}

pub(crate) fn sample(src: &Path) -> Sample {
    let etcd = noise(300_000, 1);
    let kubeadm = noise(200_000, 2);
    let long = b"long path content\n".repeat(1000);
    let blob = b"{\"schemaVersion\":2}".to_vec();
    let blob_path = format!("images/blobs/sha256/{}", sha256(&blob));
    let index = format!(
        "{{\"schemaVersion\":2,\"manifests\":[{{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:{}\",\"size\":{},\"annotations\":{{\"org.opencontainers.image.ref.name\":\"registry.k8s.io/pause:3.10\"}}}}]}}",
        sha256(&blob),
        blob.len()
    )
    .into_bytes();
    let layout = b"{\"imageLayoutVersion\":\"1.0.0\"}".to_vec();
    let cluster = b"apiVersion: kubexm.io/v1alpha1\nkind: Cluster\n".to_vec();

    let on_disk = |name: &str, content: &[u8]| {
        let path = src.join(name);
        fs_err::write(&path, content).expect("write source");
        path
    };
    let etcd_src = on_disk("etcd", &etcd);
    let kubeadm_src = on_disk("kubeadm", &kubeadm);
    let long_src = on_disk("long", &long);

    let files = vec![
        record(ETCD_PATH, &etcd),
        record(KUBEADM_PATH, &kubeadm),
        record(LONG_PATH, &long),
    ];
    let images = vec![ImageRecord {
        reference: "registry.k8s.io/pause:3.10".into(),
        source: "registry.k8s.io/pause:3.10".into(),
        digest: format!("sha256:{}", sha256(&blob)),
        source_digest: None,
        layout_digest: None,
        media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        size: blob.len() as u64,
        platforms: ["linux/amd64".to_owned()].into(),
        roles: ["master".to_owned()].into(),
    }];
    let entry = |path: &str, source: Source, sha: Option<String>, mode: u32| Entry {
        path: path.into(),
        source,
        sha256: sha,
        mode,
    };
    // Deliberately unsorted.
    let entries = vec![
        entry(LONG_PATH, Source::File(long_src), None, FILE_MODE),
        entry(
            "images/index.json",
            Source::Bytes(index.clone()),
            None,
            FILE_MODE,
        ),
        entry(
            ETCD_PATH,
            Source::File(etcd_src),
            Some(sha256(&etcd)),
            FILE_MODE,
        ),
        entry(
            "cluster.yaml",
            Source::Bytes(cluster.clone()),
            None,
            FILE_MODE,
        ),
        entry(KUBEADM_PATH, Source::File(kubeadm_src), None, EXEC_MODE),
        entry(
            &blob_path,
            Source::Bytes(blob.clone()),
            Some(sha256(&blob)),
            FILE_MODE,
        ),
        entry(
            "images/oci-layout",
            Source::Bytes(layout.clone()),
            None,
            FILE_MODE,
        ),
    ];
    let expected = vec![
        ("cluster.yaml".to_owned(), cluster, FILE_MODE),
        (ETCD_PATH.to_owned(), etcd, FILE_MODE),
        (KUBEADM_PATH.to_owned(), kubeadm, EXEC_MODE),
        (LONG_PATH.to_owned(), long, FILE_MODE),
        (blob_path, blob, FILE_MODE),
        ("images/index.json".to_owned(), index, FILE_MODE),
        ("images/oci-layout".to_owned(), layout, FILE_MODE),
    ];
    Sample {
        manifest: manifest(files, images),
        entries,
        expected,
    }
}

pub(crate) fn options() -> PackOptions {
    PackOptions {
        level: 3,
        threads: 2,
        mtime: 1_700_000_000,
    }
}

/// Packs the sample into `dir/name`.
pub(crate) fn pack_sample(dir: &Path, name: &str) -> (Sample, PackReport) {
    let src = dir.join(format!("{name}.src"));
    fs_err::create_dir_all(&src).expect("mkdir");
    let sample = sample(&src);
    let report = pack(
        &dir.join(name),
        &sample.manifest,
        sample.entries.clone(),
        &options(),
    )
    .expect("pack");
    (sample, report)
}

pub(crate) fn verify_bytes(bundle: &[u8]) -> Result<VerifyReport, VerifyError> {
    verify(bundle, &mut NullSink)
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

/// Asserts that verification fails and that the message chain names `entry`.
pub(crate) fn assert_rejects(bundle: &[u8], entry: &str) -> VerifyError {
    let err = verify_bytes(bundle).expect_err("bundle must be rejected");
    let text = chain(&err);
    assert!(
        text.contains(&format!("`{entry}`")),
        "error does not name `{entry}`: {text}"
    );
    err
}

pub(crate) fn tar_of(bundle: &[u8]) -> Vec<u8> {
    zstd::decode_all(bundle).expect("decompress")
}

pub(crate) fn zst(tar: &[u8]) -> Vec<u8> {
    zstd::encode_all(tar, 3).expect("compress")
}

/// One raw tar entry; the name is written into the header verbatim (no checks).
pub(crate) struct Raw {
    pub(crate) name: Vec<u8>,
    pub(crate) kind: EntryType,
    pub(crate) data: Vec<u8>,
    pub(crate) link: Vec<u8>,
}

pub(crate) fn file(name: &str, data: &[u8]) -> Raw {
    Raw {
        name: name.as_bytes().to_vec(),
        kind: EntryType::Regular,
        data: data.to_vec(),
        link: Vec::new(),
    }
}

pub(crate) fn special(name: &str, kind: EntryType, link: &str) -> Raw {
    Raw {
        name: name.as_bytes().to_vec(),
        kind,
        data: Vec::new(),
        link: link.as_bytes().to_vec(),
    }
}

/// A tar stream (with end marker) of `entries`, names ≤ 100 bytes written raw.
pub(crate) fn raw_tar(entries: &[Raw]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for raw in entries {
        let mut header = Header::new_gnu();
        let gnu = header.as_gnu_mut().expect("gnu header");
        gnu.name[..raw.name.len()].copy_from_slice(&raw.name);
        gnu.linkname[..raw.link.len()].copy_from_slice(&raw.link);
        header.set_entry_type(raw.kind);
        header.set_size(raw.data.len() as u64);
        header.set_mode(if raw.kind == EntryType::Directory {
            0o755
        } else {
            0o644
        });
        header.set_mtime(0);
        header.set_cksum();
        builder
            .append(&header, raw.data.as_slice())
            .expect("append");
    }
    builder.into_inner().expect("finish tar")
}

/// `bundle.json` text for `manifest`.
pub(crate) fn manifest_json(manifest: &BundleManifest) -> Vec<u8> {
    serde_json::to_vec_pretty(manifest).expect("json")
}

/// `SHA256SUMS` text for `(path, content)` pairs.
pub(crate) fn sums_for(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut lines: Vec<(String, String)> = files
        .iter()
        .map(|(p, c)| ((*p).to_owned(), sha256(c)))
        .collect();
    lines.sort();
    lines
        .iter()
        .map(|(p, h)| format!("{h}  {p}\n"))
        .collect::<String>()
        .into_bytes()
}

/// A crafted bundle: valid `bundle.json` (no files, no images) and a `SHA256SUMS` listing
/// `bundle.json` plus `listed`, followed by `rest`.
pub(crate) fn crafted(listed: &[(&str, &[u8])], rest: Vec<Raw>) -> Vec<u8> {
    let mut m = manifest(vec![], vec![]);
    m.sizes = listed
        .iter()
        .map(|(p, c)| ((*p).to_owned(), c.len() as u64))
        .collect();
    let json = manifest_json(&m);
    let mut all: Vec<(&str, &[u8])> = vec![("bundle.json", &json)];
    all.extend_from_slice(listed);
    let sums = sums_for(&all);
    let mut entries = vec![file("bundle.json", &json), file("SHA256SUMS", &sums)];
    entries.extend(rest);
    zst(&raw_tar(&entries))
}

pub(crate) fn read_tree(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs_err::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path.strip_prefix(root).expect("prefix").to_owned());
        }
    }
    out.sort();
    out
}
