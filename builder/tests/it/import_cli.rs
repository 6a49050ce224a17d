//! `kubexm-build import kubekey` on KubeKey's published sample configurations
//! (`manifests/tests/fixtures/kubekey/`): the written cluster.yaml passes `kubexm-build
//! validate`, secrets land in private files, nothing is overwritten without `--force`, and the
//! other commands send a KubeKey file to `import`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/tests/fixtures/kubekey")
        .join(name)
        .display()
        .to_string()
}

fn kubexm_build(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .args(args)
        .current_dir(dir)
        .env_remove("KMZONE")
        .output()
        .expect("kubexm-build runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

/// Imports, then validates the result with the same binary, as a user would.
fn import_and_validate(dir: &Path, args: &[&str]) -> (String, PathBuf) {
    let out_file = dir.join("cluster.yaml");
    let mut all = vec!["import", "kubekey"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "cluster.yaml"]);
    let out = kubexm_build(dir, &all);
    assert!(
        out.status.success(),
        "import {args:?} failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let v = kubexm_build(dir, &["validate", "-f", "cluster.yaml"]);
    assert!(
        v.status.success(),
        "the imported cluster.yaml does not validate: {}\n{}",
        text(&v.stderr),
        std::fs::read_to_string(&out_file).unwrap_or_default()
    );
    assert!(text(&v.stdout).contains(": valid ("), "{}", text(&v.stdout));
    (text(&out.stdout), out_file)
}

#[test]
fn every_kubekey_sample_imports_to_a_valid_cluster() {
    let cases: &[(&str, &[&str])] = &[
        (
            "config-example",
            &[
                "-f",
                "v1alpha2-config-example.yaml",
                "--kubernetes-version",
                "v1.33.11",
            ],
        ),
        (
            "registry",
            &[
                "-f",
                "v1alpha2-registry.yaml",
                "--kubernetes-version",
                "v1.33.11",
            ],
        ),
        (
            "v4-localhost",
            &[
                "-f",
                "v4-config-v1.33.yaml",
                "-i",
                "v4-inventory-localhost.yaml",
            ],
        ),
        (
            "v4-ha",
            &["-f", "v4-config-v1.33.yaml", "-i", "v4-inventory-ha.yaml"],
        ),
        (
            "v4-offline-registry",
            &[
                "-f",
                "v4-config-offline-registry.yaml",
                "-i",
                "v4-inventory-ha.yaml",
                "--kubernetes-version",
                "v1.34.3",
            ],
        ),
    ];
    for (name, args) in cases {
        let dir = tempfile::tempdir().expect("tmp");
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if a.ends_with(".yaml") {
                    fixture(a)
                } else {
                    (*a).to_owned()
                }
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (stdout, file) = import_and_validate(dir.path(), &args);
        assert!(stdout.contains("fields mapped"), "{name}: {stdout}");
        let yaml = std::fs::read_to_string(&file).expect("read");
        assert!(
            yaml.starts_with("# Imported from "),
            "{name}: the report heads the file"
        );
        assert!(
            !yaml.contains("Qcloud@123"),
            "{name}: host passwords are in their own files"
        );
        for secret in std::fs::read_dir(dir.path().join("cluster.yaml.secrets"))
            .into_iter()
            .flatten()
            .flatten()
        {
            assert_eq!(mode(&secret.path()), 0o600, "{name}: {:?}", secret.path());
        }
    }
}

#[test]
fn secrets_are_private_and_nothing_is_overwritten_without_force() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let sample = fixture("v1alpha2-config-example.yaml");
    let args = ["-f", sample.as_str(), "--kubernetes-version", "v1.33.11"];
    let (stdout, file) = import_and_validate(d, &args);
    assert!(stdout.contains("25 not mapped"), "{stdout}");
    assert!(
        stdout.contains("spec.etcd.heartbeatInterval = 250"),
        "{stdout}"
    );
    // The registry password stays inline (cluster.yaml has no other place for it): 0600.
    assert_eq!(mode(&file), 0o600);
    let secrets = d.join("cluster.yaml.secrets");
    assert_eq!(mode(&secrets), 0o700);
    assert_eq!(
        std::fs::read_to_string(secrets.join("node1.password")).expect("pw"),
        "Qcloud@123\n"
    );
    let before = std::fs::read(&file).expect("read");
    let mut again = vec!["import", "kubekey"];
    again.extend_from_slice(&args);
    again.extend_from_slice(&["-o", "cluster.yaml"]);
    let out = kubexm_build(d, &again);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--force"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&file).expect("read"), before, "untouched");
    again.push("--force");
    let out = kubexm_build(d, &again);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_refused_import_writes_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = kubexm_build(
        dir.path(),
        &[
            "import",
            "kubekey",
            "-f",
            &fixture("v1alpha2-config-example.yaml"),
            "-o",
            "c.yaml",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.contains("v1.21.5") && err.contains("--kubernetes-version"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("ls").count(),
        0,
        "nothing written"
    );
}

#[test]
fn other_commands_send_a_kubekey_file_to_import() {
    let dir = tempfile::tempdir().expect("tmp");
    let sample = fixture("v1alpha2-config-example.yaml");
    for cmd in ["validate", "resolve", "bundle"] {
        let out = kubexm_build(dir.path(), &[cmd, "-f", &sample]);
        assert_eq!(out.status.code(), Some(3), "{cmd}");
        let err = text(&out.stderr);
        assert!(
            err.contains("is a KubeKey v1alpha2 Cluster, not a KubeXM cluster.yaml"),
            "{cmd}: {err}"
        );
        assert!(
            err.contains("kubexm-build import kubekey -f"),
            "{cmd}: {err}"
        );
    }
    let out = kubexm_build(
        dir.path(),
        &["validate", "-f", &fixture("v4-config-v1.33.yaml")],
    );
    assert!(
        text(&out.stderr).contains("--inventory"),
        "{}",
        text(&out.stderr)
    );
}
