//! `kubexm-build` as an operator discovers it: every `--help` carries examples, the completion
//! scripts parse in their shells, the man pages render; and each failure class exits with its
//! documented code (3 invalid configuration, 4 bundle refused by verify, 2 usage).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kubexm-build");

#[test]
fn help_completions_and_man_pages_cover_every_subcommand() {
    let paths = kubexm_testkit::cli::every_help_has_examples(BIN);
    for verb in ["bundle", "verify", "import", "completions", "man"] {
        assert!(
            paths.iter().any(|p| p == &[verb.to_string()]),
            "{verb}: {paths:?}"
        );
    }
    assert!(paths
        .iter()
        .any(|p| p == &["import".to_string(), "kubekey".to_string()]));
    kubexm_testkit::cli::completions_and_man_pages_check(BIN, "kubexm-build", &paths);
}

#[test]
fn each_failure_class_exits_with_its_documented_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("KUBEXM_LOG", "off")
            .output()
            .expect("kubexm-build runs")
    };
    assert_eq!(run(&["bundle", "--no-such-flag"]).status.code(), Some(2));

    let bad = dir.path().join("cluster.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubexm.io/v1alpha1\nkind: Cluster\nmetadata: {name: x}\nspec: {hosts: []}\n",
    )
    .expect("write");
    let out = run(&["validate", "-f", bad.to_str().expect("utf-8")]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let junk = dir.path().join("junk.tar.zst");
    std::fs::write(&junk, b"not a bundle").expect("write");
    let out = run(&["verify", junk.to_str().expect("utf-8")]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // 5: the upstream refuses every connection (the lab zone with its ports closed).
    let lab = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab");
    let zone = std::fs::read_to_string(lab.join("mirror/zone-lab.yaml"))
        .expect("zone")
        .replace("127.0.0.1:28080", "127.0.0.1:1")
        .replace("127.0.0.1:25000", "127.0.0.1:1");
    let zone_file = dir.path().join("zone.yaml");
    std::fs::write(&zone_file, zone).expect("write");
    let path = |p: std::path::PathBuf| p.to_str().expect("utf-8").to_string();
    let out = run(&[
        "bundle",
        "-f",
        &path(lab.join("cluster.yaml")),
        "--catalog",
        &path(lab.join("mirror/catalog-lab.yaml")),
        "--zone-file",
        &path(zone_file),
        "--cache-dir",
        &path(dir.path().join("cache")),
        "-o",
        &path(dir.path().join("x.tar.zst")),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("127.0.0.1:1"), "{err}");

    let out = run(&["validate", "-f", "../manifests/examples/cluster.yaml", "-q"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
