//! pack → verify → extract, and reproducibility.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use kubexm_bundles::pack::{pack, PackOptions};
use kubexm_bundles::verify::{verify, DirSink};

use crate::common::{self, pack_sample, sha256};

#[test]
fn round_trip_extracts_every_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sample, report) = pack_sample(tmp.path(), "b.tar.zst");
    let bytes = fs_err::read(&report.path).expect("read bundle");
    assert_eq!(report.bytes_out, bytes.len() as u64);
    assert_eq!(report.sha256, sha256(&bytes));

    let root = tmp.path().join("out");
    let mut sink = DirSink::new(&root).expect("sink");
    let verified = verify(bytes.as_slice(), &mut sink).expect("verify");
    // formatVersion 2: pack pins the size of every entry in bundle.json.
    let mut expected_manifest = sample.manifest.clone();
    expected_manifest.sizes = sample
        .expected
        .iter()
        .map(|(path, content, _)| (path.clone(), content.len() as u64))
        .collect();
    assert_eq!(verified.manifest, expected_manifest);
    let pinned: u64 = expected_manifest.sizes.values().sum();
    let metadata = verified.bytes - pinned;
    assert_eq!(verified.pinned_bytes, Some(verified.bytes), "{metadata}");
    assert_eq!(verified.entries, report.entries);
    assert_eq!(verified.bytes, report.bytes_in);

    for (path, content, mode) in &sample.expected {
        let file = root.join(path);
        assert_eq!(&fs_err::read(&file).expect("read"), content, "{path}");
        let actual = fs_err::metadata(&file).expect("meta").permissions().mode() & 0o7777;
        assert_eq!(actual, *mode, "{path}");
    }
    let json = fs_err::read(root.join("bundle.json")).expect("bundle.json");
    let parsed: kubexm_bundles::manifest::BundleManifest =
        serde_json::from_slice(&json).expect("parse");
    assert_eq!(parsed, expected_manifest);

    let tree = common::read_tree(&root);
    let files: Vec<&PathBuf> = tree.iter().filter(|p| root.join(p).is_file()).collect();
    assert_eq!(files.len(), sample.expected.len() + 2, "{tree:?}");
}

#[test]
fn same_inputs_give_identical_bytes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sample, first) = pack_sample(tmp.path(), "a.tar.zst");
    let mut opts = common::options();
    // Worker count must not change the output.
    opts.threads = 1;
    let second = pack(
        &tmp.path().join("b.tar.zst"),
        &sample.manifest,
        sample.entries.clone(),
        &opts,
    )
    .expect("pack again");
    let a = fs_err::read(&first.path).expect("read a");
    let b = fs_err::read(&second.path).expect("read b");
    assert!(a == b, "bundles differ");
    assert_eq!(first.sha256, second.sha256);

    opts.mtime += 1;
    let third = pack(
        &tmp.path().join("c.tar.zst"),
        &sample.manifest,
        sample.entries,
        &opts,
    )
    .expect("pack with another mtime");
    assert_ne!(first.sha256, third.sha256, "mtime must reach the headers");
}

#[test]
fn stream_order_and_headers_are_fixed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, report) = pack_sample(tmp.path(), "b.tar.zst");
    let tar = common::tar_of(&fs_err::read(&report.path).expect("read"));
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut names = Vec::new();
    for entry in archive.entries().expect("entries") {
        let entry = entry.expect("entry");
        let header = entry.header();
        assert_eq!(header.uid().expect("uid"), 0);
        assert_eq!(header.gid().expect("gid"), 0);
        assert_eq!(header.mtime().expect("mtime"), 1_700_000_000);
        assert_eq!(header.username_bytes(), Some(&b""[..]));
        assert_eq!(header.groupname_bytes(), Some(&b""[..]));
        let mode = header.mode().expect("mode");
        if header.entry_type().is_dir() {
            assert_eq!(mode, 0o755);
        } else {
            assert!(mode == 0o644 || mode == 0o755, "{mode:o}");
        }
        names.push(String::from_utf8(entry.path_bytes().to_vec()).expect("utf8"));
    }
    assert_eq!(names[0], "bundle.json");
    assert_eq!(names[1], "SHA256SUMS");
    let rest: Vec<String> = names[2..]
        .iter()
        .map(|n| n.trim_end_matches('/').to_owned())
        .collect();
    let mut sorted = rest.clone();
    sorted.sort();
    assert_eq!(rest, sorted);
    // Every directory comes before its contents.
    for (i, name) in rest.iter().enumerate() {
        if let Some((parent, _)) = name.rsplit_once('/') {
            let at = rest.iter().position(|n| n == parent).expect("parent entry");
            assert!(at < i, "{parent} after {name}");
        }
    }
    assert!(names.iter().any(|n| n == common::LONG_PATH));
    assert_eq!(report.entries, names.len());
}

#[test]
fn empty_bundle_round_trips() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = common::manifest(vec![], vec![]);
    let out = tmp.path().join("empty.tar.zst");
    let report = pack(&out, &manifest, vec![], &PackOptions::default()).expect("pack");
    assert_eq!(report.entries, 2);
    let verified = common::verify_bytes(&fs_err::read(&out).expect("read")).expect("verify");
    assert_eq!(verified.manifest, manifest);
}
