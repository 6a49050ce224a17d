//! Every kind of bad bundle is rejected, and the error names the entry.

use kubexm_bundles::manifest::BundleManifest;
use kubexm_bundles::VerifyError;
use tar::EntryType;

use crate::common::{
    self, assert_rejects, crafted, file, manifest_json, pack_sample, raw_tar, special, sums_for,
    zst, ETCD_PATH,
};

#[test]
fn crafted_good_bundle_verifies() {
    // The crafting helpers themselves produce an acceptable bundle.
    let bundle = crafted(&[("a", b"x")], vec![file("a", b"x")]);
    let report = common::verify_bytes(&bundle).expect("verify");
    assert_eq!(report.entries, 3);
}

#[test]
fn tampered_content() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sample, report) = pack_sample(tmp.path(), "b.tar.zst");
    let mut tar = common::tar_of(&fs_err::read(&report.path).expect("read"));
    let etcd = &sample.expected[1].1;
    let at = tar
        .windows(64)
        .position(|w| w == &etcd[..64])
        .expect("etcd content in tar");
    tar[at + 1000] ^= 0xff;
    let err = assert_rejects(&zst(&tar), ETCD_PATH);
    assert!(matches!(err, VerifyError::Tampered { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&common::sha256(etcd)), "{text}");
}

#[test]
fn tampered_bundle_json() {
    let json = manifest_json(&common::manifest(vec![], vec![]));
    let sums = sums_for(&[("bundle.json", &json)]);
    let mut evil = json.clone();
    let at = evil.iter().position(|&b| b == b's').expect("an s");
    evil[at] = b'S';
    let bundle = zst(&raw_tar(&[
        file("bundle.json", &evil),
        file("SHA256SUMS", &sums),
    ]));
    let err = common::verify_bytes(&bundle).expect_err("tampered bundle.json");
    // Either it no longer parses or its sum differs; both name bundle.json.
    assert!(common::chain(&err).contains("bundle.json"), "{err:?}");

    let mut renamed = common::manifest(vec![], vec![]);
    renamed.cluster = "other".into();
    let other = manifest_json(&renamed);
    let bundle = zst(&raw_tar(&[
        file("bundle.json", &other),
        file("SHA256SUMS", &sums),
    ]));
    let err = assert_rejects(&bundle, "bundle.json");
    assert!(matches!(err, VerifyError::Tampered { .. }), "{err:?}");
}

#[test]
fn truncated_at_any_offset() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, report) = pack_sample(tmp.path(), "b.tar.zst");
    let bytes = fs_err::read(&report.path).expect("read");
    let len = bytes.len();
    for cut in [
        0,
        1,
        10,
        len / 10,
        len / 3,
        len / 2,
        len * 9 / 10,
        len - 5,
        len - 1,
    ] {
        let err = common::verify_bytes(&bytes[..cut]).expect_err("truncated bundle accepted");
        assert!(
            matches!(err, VerifyError::Truncated { .. }),
            "cut at {cut}/{len}: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("truncated"), "{text}");
        if let VerifyError::Truncated {
            after: Some(last), ..
        } = &err
        {
            assert!(text.contains(&format!("`{last}`")), "{text}");
        }
    }
}

#[test]
fn truncated_tar_inside_a_valid_zstd_stream() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, report) = pack_sample(tmp.path(), "b.tar.zst");
    let tar = common::tar_of(&fs_err::read(&report.path).expect("read"));
    // No end marker at all: the stream stops right after the last entry.
    let cut = zst(&tar[..tar.len() - 1024]);
    let err = common::verify_bytes(&cut).expect_err("no end marker");
    assert!(
        matches!(err, VerifyError::Truncated { after: Some(_), .. }),
        "{err:?}"
    );
    // Half an end marker.
    let half = zst(&tar[..tar.len() - 512]);
    let err = common::verify_bytes(&half).expect_err("half end marker");
    assert!(matches!(err, VerifyError::Truncated { .. }), "{err:?}");
    // Cut inside an entry's content: names the last complete entry.
    let mid = zst(&tar[..tar.len() / 2 / 512 * 512]);
    let err = common::verify_bytes(&mid).expect_err("cut mid entry");
    assert!(
        matches!(err, VerifyError::Truncated { after: Some(_), .. }),
        "{err:?}"
    );
    // Garbage after the end marker.
    let mut trailing = tar.clone();
    trailing.extend_from_slice(b"junk");
    let err = common::verify_bytes(&zst(&trailing)).expect_err("trailing data");
    assert!(matches!(err, VerifyError::TrailingData { .. }), "{err:?}");
    // Extra zero padding (as GNU tar writes up to a 10 KiB record) is fine.
    let mut padded = tar;
    padded.resize(padded.len() + 8192, 0);
    common::verify_bytes(&zst(&padded)).expect("zero padding accepted");
}

#[test]
fn missing_entry() {
    let bundle = crafted(&[("a", b"x"), ("files/gone", b"y")], vec![file("a", b"x")]);
    let err = assert_rejects(&bundle, "files/gone");
    assert!(matches!(err, VerifyError::Missing { .. }), "{err:?}");
}

#[test]
fn unlisted_entry() {
    let bundle = crafted(&[("a", b"x")], vec![file("a", b"x"), file("extra", b"z")]);
    let err = assert_rejects(&bundle, "extra");
    assert!(matches!(err, VerifyError::Unlisted { .. }), "{err:?}");
    assert!(err.to_string().contains("Unlisted entry"), "{err}");
}

#[test]
fn parent_dir_path() {
    let bundle = crafted(&[], vec![file("../evil", b"x")]);
    let err = assert_rejects(&bundle, "../evil");
    assert!(matches!(err, VerifyError::UnsafePath { .. }), "{err:?}");
    let bundle = crafted(&[], vec![file("a/../../evil", b"x")]);
    assert_rejects(&bundle, "a/../../evil");
}

#[test]
fn parent_dir_in_a_long_gnu_name() {
    // A name over 100 bytes goes through the GNU long-name extension.
    let long = format!("{}/../../../evil", "a".repeat(120));
    let json = manifest_json(&common::manifest(vec![], vec![]));
    let sums = sums_for(&[("bundle.json", &json)]);
    let mut tar = raw_tar(&[file("bundle.json", &json), file("SHA256SUMS", &sums)]);
    tar.truncate(tar.len() - 1024);
    let mut rest = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(1);
    header.set_mode(0o644);
    header.set_entry_type(EntryType::Regular);
    // The tar crate refuses `..` in set_path, so write the long-name entry by hand.
    let mut long_header = tar::Header::new_gnu();
    let gnu = long_header.as_gnu_mut().expect("gnu");
    gnu.name[..13].copy_from_slice(b"././@LongLink");
    long_header.set_entry_type(EntryType::GNULongName);
    long_header.set_size(long.len() as u64 + 1);
    long_header.set_mode(0o644);
    long_header.set_cksum();
    let mut name = long.clone().into_bytes();
    name.push(0);
    rest.append(&long_header, name.as_slice())
        .expect("long name");
    header.as_gnu_mut().expect("gnu").name[..5].copy_from_slice(b"short");
    header.set_cksum();
    rest.append(&header, &b"x"[..]).expect("entry");
    tar.extend(rest.into_inner().expect("finish"));
    let err = assert_rejects(&zst(&tar), &long);
    assert!(matches!(err, VerifyError::UnsafePath { .. }), "{err:?}");
}

#[test]
fn absolute_path() {
    let bundle = crafted(&[], vec![file("/etc/evil", b"x")]);
    let err = assert_rejects(&bundle, "/etc/evil");
    assert!(matches!(err, VerifyError::UnsafePath { .. }), "{err:?}");
}

#[test]
fn backslash_and_nul_free_names() {
    let bundle = crafted(&[], vec![file("a\\..\\evil", b"x")]);
    assert_rejects(&bundle, "a\\..\\evil");
}

#[test]
fn symlink_escaping_root() {
    let bundle = crafted(
        &[],
        vec![special("escape", EntryType::Symlink, "../../../etc")],
    );
    let err = assert_rejects(&bundle, "escape");
    assert!(matches!(err, VerifyError::Link { .. }), "{err:?}");
    assert!(
        err.to_string().contains("symbolic link to `../../../etc`"),
        "{err}"
    );
}

#[test]
fn symlink_inside_root_too() {
    let bundle = crafted(
        &[("a", b"x")],
        vec![file("a", b"x"), special("b", EntryType::Symlink, "a")],
    );
    let err = assert_rejects(&bundle, "b");
    assert!(matches!(err, VerifyError::Link { .. }), "{err:?}");
}

#[test]
fn hard_link() {
    let bundle = crafted(&[], vec![special("hl", EntryType::Link, "/etc/shadow")]);
    let err = assert_rejects(&bundle, "hl");
    assert!(err.to_string().contains("hard link"), "{err}");
}

#[test]
fn char_device_block_device_and_fifo() {
    for (kind, word) in [
        (EntryType::Char, "character device"),
        (EntryType::Block, "block device"),
        (EntryType::Fifo, "FIFO"),
    ] {
        let bundle = crafted(&[], vec![special("dev", kind, "")]);
        let err = assert_rejects(&bundle, "dev");
        assert!(matches!(err, VerifyError::Special { .. }), "{err:?}");
        assert!(err.to_string().contains(word), "{err}");
    }
}

#[test]
fn duplicate_entry() {
    let bundle = crafted(&[("a", b"x")], vec![file("a", b"x"), file("a", b"x")]);
    let err = assert_rejects(&bundle, "a");
    assert!(matches!(err, VerifyError::Duplicate { .. }), "{err:?}");
    let bundle = crafted(
        &[("a", b"x")],
        vec![file("a", b"x"), file("bundle.json", b"{}")],
    );
    let err = assert_rejects(&bundle, "bundle.json");
    assert!(matches!(err, VerifyError::Duplicate { .. }), "{err:?}");
}

#[test]
fn bundle_json_not_first() {
    let json = manifest_json(&common::manifest(vec![], vec![]));
    let sums = sums_for(&[("bundle.json", &json)]);
    let bundle = zst(&raw_tar(&[
        file("SHA256SUMS", &sums),
        file("bundle.json", &json),
    ]));
    let err = assert_rejects(&bundle, "bundle.json");
    assert!(
        matches!(err, VerifyError::Order { position: 1, .. }),
        "{err:?}"
    );
    let bundle = zst(&raw_tar(&[
        file("bundle.json", &json),
        file("cluster.yaml", b""),
    ]));
    let err = assert_rejects(&bundle, "SHA256SUMS");
    assert!(
        matches!(err, VerifyError::Order { position: 2, .. }),
        "{err:?}"
    );
}

#[test]
fn bad_format_version() {
    let mut value = serde_json::to_value(common::manifest(vec![], vec![])).expect("json");
    value["formatVersion"] = 3.into();
    value["someFutureField"] = true.into();
    let json = serde_json::to_vec(&value).expect("json");
    let sums = sums_for(&[("bundle.json", &json)]);
    let bundle = zst(&raw_tar(&[
        file("bundle.json", &json),
        file("SHA256SUMS", &sums),
    ]));
    let err = assert_rejects(&bundle, "bundle.json");
    let text = common::chain(&err);
    assert!(
        text.contains("formatVersion 3; this build reads 1 to 2"),
        "{text}"
    );
}

#[test]
fn manifest_disagrees_with_sums() {
    let mut m: BundleManifest = common::manifest(vec![], vec![]);
    m.files.push(kubexm_bundles::manifest::FileRecord {
        name: "etcd".into(),
        version: "v3.5.16".into(),
        arch: "amd64".into(),
        path: "files/etcd/v3.5.16/amd64/etcd.tgz".into(),
        sha256: common::sha256(b"expected"),
        size: 8,
        url: "https://example.invalid/etcd.tgz".into(),
        roles: ["etcd".to_owned()].into(),
    });
    let json = manifest_json(&m);
    let sums = sums_for(&[
        ("bundle.json", &json),
        ("files/etcd/v3.5.16/amd64/etcd.tgz", b"other"),
    ]);
    let bundle = zst(&raw_tar(&[
        file("bundle.json", &json),
        file("SHA256SUMS", &sums),
        file("files/etcd/v3.5.16/amd64/etcd.tgz", b"other"),
    ]));
    let err = assert_rejects(&bundle, "files/etcd/v3.5.16/amd64/etcd.tgz");
    assert!(matches!(err, VerifyError::Manifest(_)), "{err:?}");
}

#[test]
fn images_need_an_oci_layout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sample = common::sample(tmp.path());
    let json = manifest_json(&sample.manifest);
    let sums = sums_for(&[("bundle.json", &json)]);
    let bundle = zst(&raw_tar(&[
        file("bundle.json", &json),
        file("SHA256SUMS", &sums),
    ]));
    let err = common::verify_bytes(&bundle).expect_err("no files, no layout");
    assert!(matches!(err, VerifyError::Manifest(_)), "{err:?}");
}

#[test]
fn malformed_sums() {
    let json = manifest_json(&common::manifest(vec![], vec![]));
    let mut sums = sums_for(&[("bundle.json", &json)]);
    sums.extend_from_slice(b"not a checksum line\n");
    let bundle = zst(&raw_tar(&[
        file("bundle.json", &json),
        file("SHA256SUMS", &sums),
    ]));
    let err = assert_rejects(&bundle, "SHA256SUMS");
    assert!(common::chain(&err).contains("line 2"), "{err:?}");
}

#[test]
fn directory_where_a_file_is_listed() {
    let bundle = crafted(
        &[("a", b"x")],
        vec![special("a/", EntryType::Directory, "")],
    );
    let err = assert_rejects(&bundle, "a");
    assert!(matches!(err, VerifyError::NotAFile { .. }), "{err:?}");
}
