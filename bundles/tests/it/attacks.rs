//! Hostile bundles (issue 15): each test is an attack that `verify` accepted before the fix.
//! The bundles are written by hand here (raw JSON, raw tar headers), as an attacker would.

use serde_json::{json, Value};
use tar::{EntryType, Header};

use crate::common::{chain, file, raw_tar, sha256, verify_bytes, zst, Raw};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const REF: &str = "registry.k8s.io/pause:3.10";

/// `bundle.json` of `version` with `files`, `images` and, for version 2, `sizes`.
fn bundle_json(version: u32, files: Value, images: Value, sizes: Option<Value>) -> Vec<u8> {
    let mut doc = json!({
        "formatVersion": version,
        "toolVersion": "0.1.0",
        "cluster": "sample",
        "kubernetesVersion": "v1.33.1",
        "zone": "default",
        "arches": ["amd64"],
        "created": 0,
        "files": files,
        "images": images,
    });
    if let Some(sizes) = sizes {
        doc["sizes"] = sizes;
    }
    serde_json::to_vec_pretty(&doc).expect("json")
}

/// A whole bundle: `bundle.json`, `SHA256SUMS` over `listed` (path, content), then `entries`.
fn bundle(json: &[u8], listed: &[(String, Vec<u8>)], entries: Vec<Raw>) -> Vec<u8> {
    let mut lines: Vec<(String, String)> = listed
        .iter()
        .map(|(p, c)| (p.clone(), sha256(c)))
        .chain([("bundle.json".to_owned(), sha256(json))])
        .collect();
    lines.sort();
    let sums: String = lines.iter().map(|(p, h)| format!("{h}  {p}\n")).collect();
    let mut all = vec![
        file("bundle.json", json),
        file("SHA256SUMS", sums.as_bytes()),
    ];
    all.extend(entries);
    zst(&raw_tar(&all))
}

fn desc(media_type: &str, content: &[u8]) -> Value {
    json!({"mediaType": media_type, "digest": format!("sha256:{}", sha256(content)), "size": content.len()})
}

/// A one-image OCI layout: (path, content) of every layout file, and the image record.
fn layout() -> (Vec<(String, Vec<u8>)>, Value) {
    let layer = b"pretend this is a gzipped tar".to_vec();
    let config = br#"{"architecture":"amd64","os":"linux"}"#.to_vec();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": desc(CONFIG, &config),
        "layers": [desc(LAYER, &layer)],
    }))
    .expect("manifest");
    let mut top = desc(MANIFEST, &manifest);
    top["annotations"] = json!({"org.opencontainers.image.ref.name": REF});
    let index =
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [top]})).expect("index");
    let image = json!({
        "reference": REF,
        "source": REF,
        "digest": format!("sha256:{}", sha256(&manifest)),
        "mediaType": MANIFEST,
        "size": manifest.len(),
        "platforms": ["linux/amd64"],
        "roles": ["master"],
    });
    let blob = |c: &Vec<u8>| (format!("images/blobs/sha256/{}", sha256(c)), c.clone());
    let files = vec![
        blob(&layer),
        blob(&config),
        blob(&manifest),
        ("images/index.json".to_owned(), index),
        (
            "images/oci-layout".to_owned(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
    ];
    (files, image)
}

/// The layout as a formatVersion 1 bundle (sorted entries).
fn layout_bundle(mut files: Vec<(String, Vec<u8>)>, image: Value) -> Vec<u8> {
    files.sort();
    let json = bundle_json(1, json!([]), json!([image]), None);
    let entries = files.iter().map(|(p, c)| file(p, c)).collect();
    bundle(&json, &files, entries)
}

fn rejected(bundle: &[u8]) -> String {
    match verify_bytes(bundle) {
        Ok(report) => panic!(
            "the attack must be refused, but verify said OK ({} entries, {} bytes)",
            report.entries, report.bytes
        ),
        Err(err) => chain(&err),
    }
}

#[test]
fn attack_layout_control_closed_layout_verifies() {
    // The hand-written layout is valid: the attacks below each break one thing.
    let (files, image) = layout();
    verify_bytes(&layout_bundle(files, image)).expect("a closed layout verifies");
}

#[test]
fn attack_decompression_bomb_file_size_never_checked() {
    // A 1-byte file that `bundle.json` declares as 999999999 bytes.
    let path = "files/etcd/v3.5.16/amd64/etcd";
    let files = json!([{
        "name": "etcd", "version": "v3.5.16", "arch": "amd64", "path": path,
        "sha256": sha256(b"x"), "size": 999_999_999u64,
        "url": "https://example.invalid/etcd", "roles": ["etcd"],
    }]);
    let json = bundle_json(1, files, json!([]), None);
    let text = rejected(&bundle(
        &json,
        &[(path.to_owned(), b"x".to_vec())],
        vec![file(path, b"x")],
    ));
    assert!(text.contains(path), "{text}");
    assert!(text.contains("999999999"), "{text}");
}

/// A tar header declaring `declared` bytes followed by only `data` (the stream ends early).
fn lying_entry(name: &str, declared: u64, data: &[u8]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = Header::new_gnu();
    header.set_path(name).expect("path");
    header.set_entry_type(EntryType::Regular);
    header.set_size(declared);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    builder.append(&header, data).expect("append");
    builder.into_inner().expect("tar")
}

/// A formatVersion 2 bundle pinning `files/zeros` at `pinned` bytes whose tar header declares
/// `declared` bytes of zeros; the stream ends after 4 KiB of them.
fn v2_zeros_bomb(pinned: u64, declared: u64) -> Vec<u8> {
    let json = bundle_json(
        2,
        json!([]),
        json!([]),
        Some(json!({ "files/zeros": pinned })),
    );
    let sums = format!(
        "{}  bundle.json\n{}  files/zeros\n",
        sha256(&json),
        sha256(b"")
    );
    let mut tar = raw_tar(&[
        file("bundle.json", &json),
        file("SHA256SUMS", sums.as_bytes()),
    ]);
    tar.truncate(tar.len() - 1024);
    tar.extend(lying_entry("files/zeros", declared, &[0u8; 4096]));
    zst(&tar)
}

#[test]
fn attack_decompression_bomb_header_differs_from_pinned_size() {
    // formatVersion 2 pins `files/zeros` at 1 byte; its tar header declares 10 GiB of zeros.
    let text = rejected(&v2_zeros_bomb(1, 10 << 30));
    assert!(text.contains("`files/zeros`"), "{text}");
    assert!(
        text.contains(&format!("declares {} bytes", 10u64 << 30)) && text.contains("pins 1"),
        "refused at the header, before reading the content: {text}"
    );
}

#[test]
fn attack_layout_index_points_at_missing_manifest() {
    let (mut files, image) = layout();
    let manifest_at = files
        .iter()
        .position(|(p, c)| {
            p.starts_with("images/blobs/") && c.windows(8).any(|w| w == b"\"layers\"")
        })
        .expect("manifest blob");
    let (gone, _) = files.remove(manifest_at);
    let text = rejected(&layout_bundle(files, image));
    let hex = gone.rsplit('/').next().expect("hex");
    assert!(text.contains("does not close"), "{text}");
    assert!(
        text.contains(hex) && text.contains("not in the bundle"),
        "{text}"
    );
}

#[test]
fn attack_layout_layer_digest_does_not_match_blob() {
    // The layer's file keeps its name (the digest the manifest gives) but holds other bytes;
    // SHA256SUMS lists the sum of what it holds, so every sum checks out.
    let (mut files, image) = layout();
    let layer_at = files
        .iter()
        .position(|(_, c)| c.starts_with(b"pretend"))
        .expect("layer");
    files[layer_at].1 = b"something else entirely".to_vec();
    let name = files[layer_at].0.clone();
    let text = rejected(&layout_bundle(files, image));
    assert!(text.contains(&name), "{text}");
    assert!(text.contains("not the digest it is named by"), "{text}");
}

#[test]
fn attack_layout_bundle_json_image_missing_from_index() {
    let (files, mut image) = layout();
    image["reference"] = json!("registry.k8s.io/coredns/coredns:v1.11.3");
    let text = rejected(&layout_bundle(files, image));
    assert!(
        text.contains("`registry.k8s.io/coredns/coredns:v1.11.3` is not in `images/index.json`"),
        "{text}"
    );
}

#[test]
fn attack_layout_digest_traversal_in_index() {
    // The digest `seed` used to join onto the blob directory.
    let (mut files, image) = layout();
    let index_at = files
        .iter()
        .position(|(p, _)| p == "images/index.json")
        .expect("index");
    let digest = image["digest"].as_str().expect("digest").to_owned();
    let evil = String::from_utf8(files[index_at].1.clone())
        .expect("utf8")
        .replace(&digest, "sha256:../../../etc/hostname");
    files[index_at].1 = evil.into_bytes();
    let text = rejected(&layout_bundle(files, image));
    assert!(text.contains("sha256:../../../etc/hostname"), "{text}");
    assert!(text.contains("64 lowercase hex"), "{text}");
}

#[test]
fn attack_marker_entry_overwrites_unpacked_marker() {
    let json = bundle_json(1, json!([]), json!([]), None);
    let marker = b"0000000000000000000000000000000000000000000000000000000000000000\n";
    let text = rejected(&bundle(
        &json,
        &[(".kubexm-unpacked".to_owned(), marker.to_vec())],
        vec![file(".kubexm-unpacked", marker)],
    ));
    assert!(text.contains("`.kubexm-unpacked`"), "{text}");
    assert!(text.contains("reserved"), "{text}");
}

#[test]
fn attack_oversized_bundle_json() {
    // 5 MiB of `bundle.json` (the issue's 62 MB one took 564 MB of memory): a real one is a few
    // hundred KiB at most.
    let mut doc: Value =
        serde_json::from_slice(&bundle_json(1, json!([]), json!([]), None)).expect("json");
    doc["toolVersion"] = json!("x".repeat(5 << 20));
    let json = serde_json::to_vec(&doc).expect("json");
    let text = rejected(&bundle(&json, &[], vec![]));
    assert!(text.contains("`bundle.json`"), "{text}");
    assert!(text.contains("at most 4194304"), "{text}");
}

#[test]
fn attack_terminal_escapes_in_entry_name() {
    // An unlisted entry whose name clears the screen and prints a fake success line.
    let json = bundle_json(1, json!([]), json!([]), None);
    let evil = "\u{1b}[2J\u{1b}[32mOK\u{1b}[0m";
    let text = rejected(&bundle(&json, &[], vec![file(evil, b"x")]));
    assert!(
        !text.contains('\u{1b}'),
        "raw ESC reached the message: {text:?}"
    );
    assert!(text.contains(r"\u{1b}[2J"), "{text}");
}

/// A sink that records every call: nothing may be written before the space is known.
#[derive(Default)]
struct Recording {
    calls: Vec<String>,
}

impl kubexm_bundles::verify::Sink for Recording {
    fn dir(&mut self, path: &str) -> std::io::Result<()> {
        self.calls.push(format!("dir {path}"));
        Ok(())
    }

    fn file(&mut self, path: &str, _mode: u32) -> std::io::Result<Box<dyn std::io::Write + '_>> {
        self.calls.push(format!("file {path}"));
        Ok(Box::new(std::io::sink()))
    }

    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn attack_decompression_bomb_refused_before_the_first_byte() {
    // formatVersion 2 pins 10 GiB; the free space (the limit) is 1 MiB: refused after reading
    // `bundle.json` and `SHA256SUMS`, before the sink receives anything, not even those two.
    let bundle = v2_zeros_bomb(10 << 30, 10 << 30);
    let mut sink = Recording::default();
    let err = kubexm_bundles::verify::verify_limited(
        bundle.as_slice(),
        &mut sink,
        kubexm_bundles::verify::Limits {
            max_bytes: Some(1 << 20),
        },
    )
    .expect_err("10 GiB into 1 MiB");
    assert!(
        matches!(
            err,
            kubexm_bundles::VerifyError::NoSpace {
                limit: 1_048_576,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        sink.calls.is_empty(),
        "written before the check: {:?}",
        sink.calls
    );
}

#[test]
fn attack_decompression_bomb_version_1_held_to_the_limit_entry_by_entry() {
    // formatVersion 1 pins nothing but `files[]`: each entry is checked before it is written.
    let json = bundle_json(1, json!([]), json!([]), None);
    let big = vec![0u8; 3 << 20];
    let bundle = bundle(
        &json,
        &[
            ("a".to_owned(), b"small".to_vec()),
            ("b".to_owned(), big.clone()),
        ],
        vec![file("a", b"small"), file("b", &big)],
    );
    let mut sink = Recording::default();
    let err = kubexm_bundles::verify::verify_limited(
        bundle.as_slice(),
        &mut sink,
        kubexm_bundles::verify::Limits {
            max_bytes: Some(1 << 20),
        },
    )
    .expect_err("3 MiB into 1 MiB");
    assert!(
        matches!(err, kubexm_bundles::VerifyError::NoSpace { .. }),
        "{err:?}"
    );
    assert!(
        !sink.calls.iter().any(|c| c == "file b"),
        "the entry over the limit was never opened: {:?}",
        sink.calls
    );
    // And the same old-format bundle verifies without a limit: version 1 is still read.
    let report = verify_bytes(&bundle).expect("version 1 verifies");
    assert_eq!(report.pinned_bytes, None);
}

#[test]
fn attack_zero_bomb_after_the_end_marker() {
    // 256 MiB of zeros after the end marker compress to a few KiB; verify read them all.
    let json = bundle_json(1, json!([]), json!([]), None);
    let mut tar = raw_tar(&[
        file("bundle.json", &json),
        file(
            "SHA256SUMS",
            format!("{}  bundle.json\n", sha256(&json)).as_bytes(),
        ),
    ]);
    tar.resize(tar.len() + (256 << 20), 0);
    let bundle = zst(&tar);
    assert!(bundle.len() < 1 << 20);
    let started = std::time::Instant::now();
    let text = rejected(&bundle);
    assert!(text.contains("after the tar end marker"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn attack_file_record_version_walks_out_of_the_artifacts_dir() {
    // The installer uploads files to ARTIFACTS/<name>/<version>/<file> on every node.
    let path = "files/etcd/v3.5.16/amd64/etcd";
    let files = json!([{
        "name": "etcd", "version": "../../../../etc/cron.d", "arch": "amd64", "path": path,
        "sha256": sha256(b"x"), "size": 1,
        "url": "https://example.invalid/etcd", "roles": ["etcd"],
    }]);
    let json = bundle_json(1, files, json!([]), None);
    let text = rejected(&bundle(
        &json,
        &[(path.to_owned(), b"x".to_vec())],
        vec![file(path, b"x")],
    ));
    assert!(text.contains("version"), "{text}");
    assert!(text.contains("separator"), "{text}");
}
