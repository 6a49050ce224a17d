//! The standard tools read a bundle: `tar`, `zstd`, `sha256sum -c`.

use std::process::Command;

use kubexm_bundles::verify::{verify, DirSink};

use crate::common::{pack_sample, LONG_PATH};

#[test]
fn sha256sum_checks_the_extracted_tree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, report) = pack_sample(tmp.path(), "b.tar.zst");
    let root = tmp.path().join("out");
    let file = fs_err::File::open(&report.path).expect("open");
    verify(file, &mut DirSink::new(&root).expect("sink")).expect("verify");
    let out = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&root)
        .output()
        .expect("run sha256sum");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("bundle.json: OK"), "{stdout}");
    assert!(stdout.contains(&format!("{LONG_PATH}: OK")), "{stdout}");
}

#[test]
fn zstd_and_tar_list_the_bundle() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (sample, report) = pack_sample(tmp.path(), "b.tar.zst");
    let out = Command::new("bash")
        .arg("-c")
        .arg("set -o pipefail; zstd -dc \"$1\" | tar -tf -")
        .arg("bash")
        .arg(&report.path)
        .output()
        .expect("run zstd | tar");
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{listing}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines[..2], ["bundle.json", "SHA256SUMS"]);
    for (path, _, _) in &sample.expected {
        assert!(lines.contains(&path.as_str()), "{path} not in {lines:?}");
    }
    assert!(lines.contains(&"files/"), "{lines:?}");
    assert_eq!(lines.len(), report.entries);

    // GNU tar extracts it too, with the same content.
    let dir = tmp.path().join("gnu");
    fs_err::create_dir(&dir).expect("mkdir");
    let status = Command::new("tar")
        .arg("--zstd")
        .arg("-xf")
        .arg(&report.path)
        .arg("-C")
        .arg(&dir)
        .status()
        .expect("run tar");
    assert!(status.success());
    let long = fs_err::read(dir.join(LONG_PATH)).expect("long path extracted");
    assert_eq!(long, sample.expected[3].1);
}
