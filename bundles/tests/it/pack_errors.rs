//! pack refuses bad input and leaves nothing behind.

use kubexm_bundles::pack::{pack, Entry, PackOptions, Source, FILE_MODE};
use kubexm_bundles::PackError;

use crate::common::{self, sha256};

fn leftovers(dir: &std::path::Path) -> Vec<String> {
    fs_err::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial") || n.ends_with(".tar.zst"))
        .collect()
}

#[test]
fn wrong_cached_sum_aborts_and_cleans_up() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("blob");
    fs_err::write(&src, b"actual content").expect("write");
    let entry = Entry {
        path: "cluster.yaml".into(),
        source: Source::File(src),
        sha256: Some(sha256(b"what the cache claims")),
        mode: FILE_MODE,
    };
    let out = tmp.path().join("b.tar.zst");
    let err = pack(
        &out,
        &common::manifest(vec![], vec![]),
        vec![entry],
        &PackOptions::default(),
    )
    .expect_err("mismatch");
    assert!(matches!(err, PackError::Mismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("`cluster.yaml`"), "{err}");
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}

#[test]
fn wrong_sum_for_bytes_is_caught_before_writing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let entry = Entry {
        path: "cluster.yaml".into(),
        source: Source::Bytes(b"a".to_vec()),
        sha256: Some(sha256(b"b")),
        mode: FILE_MODE,
    };
    let err = pack(
        &tmp.path().join("b.tar.zst"),
        &common::manifest(vec![], vec![]),
        vec![entry],
        &PackOptions::default(),
    )
    .expect_err("mismatch");
    assert!(matches!(err, PackError::Mismatch { .. }), "{err:?}");
    assert!(leftovers(tmp.path()).is_empty());
}

#[test]
fn missing_source_names_entry_and_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let entry = Entry {
        path: "files/x/v1/amd64/x".into(),
        source: Source::File(tmp.path().join("nope")),
        sha256: None,
        mode: FILE_MODE,
    };
    let err = pack(
        &tmp.path().join("b.tar.zst"),
        &common::manifest(vec![], vec![]),
        vec![entry],
        &PackOptions::default(),
    )
    .expect_err("missing source");
    let text = common::chain(&err);
    assert!(
        text.contains("`files/x/v1/amd64/x`") && text.contains("nope"),
        "{text}"
    );
}

#[test]
fn manifest_must_match_entries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sample = common::sample(tmp.path());
    let mut entries = sample.entries;
    entries.retain(|e| e.path != common::ETCD_PATH);
    let err = pack(
        &tmp.path().join("b.tar.zst"),
        &sample.manifest,
        entries,
        &PackOptions::default(),
    )
    .expect_err("manifest lists a file that is not packed");
    assert!(common::chain(&err).contains(common::ETCD_PATH), "{err:?}");
    assert!(leftovers(tmp.path()).is_empty());
}

#[test]
fn output_directory_must_exist() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let err = pack(
        &tmp.path().join("missing/b.tar.zst"),
        &common::manifest(vec![], vec![]),
        vec![],
        &PackOptions::default(),
    )
    .expect_err("no such directory");
    assert!(common::chain(&err).contains("missing"), "{err:?}");
}

#[test]
fn stored_sources_are_trusted_but_must_have_a_sum_and_their_size() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("blob");
    let data = common::noise(3 << 20, 7);
    fs_err::write(&src, &data).expect("write");
    let stored = |sha256| Entry {
        path: "cluster.yaml".into(),
        source: Source::Stored(src.clone()),
        sha256,
        mode: FILE_MODE,
    };
    let out = tmp.path().join("b.tar.zst");
    let manifest = common::manifest(vec![], vec![]);
    let opts = PackOptions::default();

    let err = pack(&out, &manifest, vec![stored(None)], &opts).expect_err("no sum");
    assert!(matches!(err, PackError::StoredWithoutSum { .. }), "{err:?}");

    // Same bytes as a checked file source: the store is trusted, not re-hashed.
    let stored_report =
        pack(&out, &manifest, vec![stored(Some(sha256(&data)))], &opts).expect("stored");
    let file_out = tmp.path().join("f.tar.zst");
    let file_entry = Entry {
        source: Source::File(src.clone()),
        ..stored(Some(sha256(&data)))
    };
    let file_report = pack(&file_out, &manifest, vec![file_entry], &opts).expect("file");
    assert_eq!(stored_report.sha256, file_report.sha256);
    common::verify_bytes(&fs_err::read(&out).expect("read")).expect("verifies");

    // A wrong sum is not noticed while packing, but the bundle does not verify.
    let wrong = tmp.path().join("w.tar.zst");
    pack(
        &wrong,
        &manifest,
        vec![stored(Some(sha256(b"other")))],
        &opts,
    )
    .expect("trusted");
    let err = common::verify_bytes(&fs_err::read(&wrong).expect("read")).expect_err("tampered");
    assert!(common::chain(&err).contains("cluster.yaml"), "{err:?}");
}
