//! `kubexm-build verify` on hostile inputs (issue 34): a split part that is a FIFO, a delta
//! bundle whose `delta.json` does not parse, split indexes whose names drive the terminal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kubexm_bundles::manifest::BundleManifest;
use kubexm_bundles::pack::{pack, Entry, PackOptions, Source, FILE_MODE};

/// A bundle of `cluster.yaml` and `extra` entries at `dir/name`.
fn bundle(dir: &Path, name: &str, extra: &[(&str, Vec<u8>)]) -> PathBuf {
    let manifest: BundleManifest = serde_json::from_value(serde_json::json!({
        "formatVersion": kubexm_bundles::FORMAT_VERSION,
        "toolVersion": "0.1.0",
        "cluster": "c",
        "kubernetesVersion": "v1.33.1",
        "zone": "default",
        "arches": ["amd64"],
        "created": 0,
        "files": [],
        "images": [],
    }))
    .expect("bundle.json");
    let mut entries = vec![Entry {
        path: "cluster.yaml".into(),
        source: Source::Bytes(b"kind: Cluster\n".to_vec()),
        sha256: None,
        mode: FILE_MODE,
    }];
    for (path, bytes) in extra {
        entries.push(Entry {
            path: (*path).to_owned(),
            source: Source::Bytes(bytes.clone()),
            sha256: None,
            mode: FILE_MODE,
        });
    }
    let opts = PackOptions {
        level: 1,
        threads: 1,
        mtime: 0,
    };
    pack(&dir.join(name), &manifest, entries, &opts)
        .expect("pack")
        .path
}

/// `kubexm-build verify ARG`, killed after 60 s (a hang is a failure, not a stuck test).
fn verify(arg: &Path) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .arg("verify")
        .arg(arg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (child.wait_with_output().expect("output"), started.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_split_part_that_is_a_fifo_is_refused_at_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    // Incompressible: xorshift bytes.
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    let noise: Vec<u8> = (0..3 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect();
    let path = bundle(tmp.path(), "b.tar.zst", &[("files/noise", noise)]);
    let digest = kubexm_bundles::head::read_head(fs_err::File::open(&path).expect("open"), None)
        .expect("head")
        .content_digest;
    let index = kubexm_bundles::split::split(&path, 1 << 20, &digest).expect("split");
    assert!(index.parts.len() >= 2, "{} parts", index.parts.len());
    let index_path = kubexm_bundles::split::index_path(&path);
    let part = index.part_path(&index_path, 1);
    fs_err::remove_file(&part).expect("rm part");
    let made = Command::new("mkfifo").arg(&part).status().expect("mkfifo");
    assert!(made.success());
    let (out, took) = verify(&index_path);
    // Before the fix: blocked in open(2) on the FIFO until killed, with no message.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("part 2 of") && err.contains("a FIFO") && err.contains("b.tar.zst.part002"),
        "{err}"
    );
}

#[test]
fn a_delta_bundle_whose_delta_json_does_not_parse_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = bundle(
        tmp.path(),
        "d.tar.zst",
        &[("delta.json", b"{\"kubexmDelta\": 1,".to_vec())],
    );
    let (out, _) = verify(&path);
    // Before the fix: "OK (…)" and exit 0.
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("delta bundle whose `delta.json` is refused"),
        "{err}"
    );
    assert!(!text(&out.stdout).contains("OK"), "{}", text(&out.stdout));

    let fine = bundle(tmp.path(), "plain.tar.zst", &[]);
    let (out, _) = verify(&fine);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stdout).contains("delta bundle"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn split_index_refusals_escape_what_the_index_says() {
    let tmp = tempfile::tempdir().expect("tmp");
    let sum = "0".repeat(64);
    for (bundle_name, part_name) in [
        (
            "x\u{1b}]0;pwned\u{7}\u{1b}[2J.tar.zst",
            "x.part1".to_owned(),
        ),
        ("b.tar.zst", "b.tar.zst.part001\u{1b}[2K\rOK".to_owned()),
    ] {
        let index = serde_json::json!({
            "kubexmSplit": 1,
            "bundle": bundle_name,
            "size": 10,
            "sha256": sum,
            "contentDigest": sum,
            "partSize": 1 << 20,
            "parts": [{"name": part_name, "size": 10, "sha256": sum}],
        });
        let path = tmp.path().join("b.tar.zst.parts.json");
        std::fs::write(&path, serde_json::to_vec(&index).expect("json")).expect("write");
        let (out, _) = verify(&path);
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(err.contains("is not a valid split index"), "{err}");
        assert!(
            !err.contains('\u{1b}') && !err.contains('\u{7}') && !err.contains('\r'),
            "raw control characters reach the terminal: {err:?}"
        );
        assert!(err.contains(r"\u{1b}"), "shown escaped: {err}");
    }
}
