//! Download and registry faults during `kubexm-build bundle`, injected into real loopback servers:
//! the testkit's HTTP mirror (404, 500, corruption, a connection cut mid-file) and Debian's
//! `docker-registry` (401 without credentials, the registry down and back).

use crate::bundle_e2e::{bundle, bundle_cmd, setup, text, write_cluster, FILES};
use kubexm_testkit::Fault;

fn kubectl_path() -> String {
    format!(
        "/{}",
        FILES.iter().find(|f| f.0 == "kubectl").expect("kubectl").3
    )
}

#[test]
fn file_faults_fail_clearly_or_recover() {
    let lab = setup();
    let path = kubectl_path();
    let url = format!("{}{}", lab.mirror.base_url(), path);

    // 404: permanent, named, nothing left behind.
    lab.mirror.inject(&path, Fault::NotFound);
    let out = bundle(&lab, "nf.tar.zst", "c-404", &[]);
    assert_eq!(out.status.code(), Some(5));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("GET {url} answered 404")), "{err}");
    assert!(
        !lab.path("nf.tar.zst").exists(),
        "no bundle after a failure"
    );

    // Corrupt every try: the mismatch names URL, expected and actual, and nothing unverified stays.
    lab.mirror.clear_faults();
    lab.mirror.inject(&path, Fault::Corrupt);
    lab.mirror.inject(&path, Fault::Corrupt);
    let out = bundle(&lab, "bad.tar.zst", "c-bad", &["--retries", "2"]);
    assert_eq!(out.status.code(), Some(5));
    let err = text(&out.stderr);
    let expected = kubexm_testkit::sha256_hex(
        &std::fs::read(lab.mirror.root().join(path.trim_start_matches('/'))).expect("file"),
    );
    assert!(
        err.contains(&format!(
            "{url}: sha256 mismatch after 2 tries: expected {expected}, got "
        )),
        "{err}"
    );
    assert!(
        !lab.path("c-bad/blobs/sha256").join(&expected).exists(),
        "unverified content kept"
    );
    assert!(
        !lab.path(&format!("c-bad/tmp/{expected}.partial")).exists(),
        "mismatching partial kept"
    );

    // Corrupt once, then good: retried and verified.
    lab.mirror.reset_counts();
    lab.mirror.inject(&path, Fault::Corrupt);
    let out = bundle(&lab, "retry.tar.zst", "c-retry", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        lab.mirror.requests_for(&path),
        2,
        "one bad download, one good"
    );

    // 500 then recovery, and a connection cut mid-file resumed with Range.
    lab.mirror.reset_counts();
    lab.mirror.inject(&path, Fault::Status(500));
    lab.mirror.inject(&path, Fault::CutAfter(10_000));
    let out = bundle(&lab, "resume.tar.zst", "c-resume", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ranges = lab.mirror.ranges_for(&path);
    assert_eq!(ranges.len(), 3, "500, cut, resume: {ranges:?}");
    assert_eq!(
        ranges[2].as_deref(),
        Some("bytes=10000-"),
        "the third request resumes: {ranges:?}"
    );
    let v = std::process::Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .arg("verify")
        .arg(lab.path("resume.tar.zst"))
        .output()
        .expect("verify");
    assert!(v.status.success(), "{}", text(&v.stderr));
}

#[test]
fn registry_faults_fail_clearly_or_recover() {
    let mut lab = setup();
    // No credentials for the private registry: a clear 401 error naming the registry.
    write_cluster(lab.dir.path(), None);
    let out = bundle(&lab, "noauth.tar.zst", "c-401", &["--retries", "2"]);
    assert_eq!(out.status.code(), Some(5));
    let err = text(&out.stderr);
    let host = lab.private.host();
    assert!(
        err.contains("refused access")
            && err.contains(&format!("`{host}`"))
            && err.contains("spec.registry.auths"),
        "{err}"
    );

    // The open registry goes down and comes back while the build retries.
    write_cluster(
        lab.dir.path(),
        Some((
            host.as_str(),
            crate::bundle_e2e::USER,
            crate::bundle_e2e::PASS,
        )),
    );
    lab.open.stop();
    let mut child = bundle_cmd(
        &lab,
        "recover.tar.zst",
        "c-down",
        &["--retries", "8", "--retry-delay-ms", "400"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("kubexm-build starts");
    // Bring the registry back only once the build has seen the outage and says it retries
    // (no fixed sleep: under load the build may need longer than any guess to get there).
    let stderr = child.stderr.take().expect("stderr is piped");
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        let mut told = false;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !told && line.contains("retrying") {
                told = true;
                let _ = seen_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let saw_retry = seen_rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .is_ok();
    lab.open.restart();
    let status = child.wait().expect("kubexm-build finishes");
    let err = reader.join().expect("stderr reader");
    assert!(saw_retry, "the outage was retried: {err}");
    assert!(status.success(), "{err}");
}

#[test]
fn images_sharing_a_config_blob_are_fetched_once_without_racing() {
    // Regression: two single-platform images with the same config were downloaded concurrently
    // into one temp file. The same Docker schema2 image pushed under two names, both needed by
    // amd64-only hosts, must bundle cleanly.
    let lab = setup();
    let work = lab.path("same");
    std::fs::create_dir_all(&work).expect("mkdir");
    let amd = kubexm_testkit::images::busybox_layout(&work, "same", "amd64");
    for name in ["ghcr.io/x/a:v1", "ghcr.io/x/b:v1"] {
        let _digest = kubexm_testkit::images::push_docker_schema2(
            &amd,
            kubexm_testkit::images::LAYOUT_TAG,
            &lab.open,
            None,
            name,
        );
    }
    let cluster = std::fs::read_to_string(lab.path("cluster.yaml"))
        .expect("cluster")
        .replace("{name: w1, address: 10.0.0.21, arch: arm64}", "{name: w1, address: 10.0.0.21}")
        .replace(
            "  addons:\n",
            "  addons:\n    - {name: twins, type: yaml, source: {path: addons/demo.yaml}, images: [\"ghcr.io/x/a:v1\", \"ghcr.io/x/b:v1\"]}\n",
        );
    std::fs::write(lab.path("cluster.yaml"), cluster).expect("write");
    let out = bundle(&lab, "twins.tar.zst", "c-twins", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tmp_left = std::fs::read_dir(lab.path("c-twins/tmp"))
        .expect("tmp")
        .count();
    assert_eq!(tmp_left, 0, "no temp files left in the cache");
}
