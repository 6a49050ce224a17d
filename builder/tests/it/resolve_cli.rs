//! `kubexm-build resolve` and `validate` as a user runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example() -> PathBuf {
    root().join("manifests/examples/cluster.yaml")
}

fn kubexm_build(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .args(args)
        .env_remove("KMZONE")
        .output()
        .expect("kubexm-build runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_describes_the_commands() {
    let out = kubexm_build(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for word in ["resolve", "validate", "offline bundle"] {
        assert!(help.contains(word), "{word} missing from:\n{help}");
    }
    let out = kubexm_build(&["resolve", "--help"]);
    let help = text(&out.stdout);
    for flag in [
        "--file",
        "--zone",
        "--zone-file",
        "--catalog",
        "--output",
        "KMZONE",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn resolve_example_table() {
    let out = kubexm_build(&["resolve", "-f", &example().display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    insta::assert_snapshot!("resolve_example_table", text(&out.stdout));
}

#[test]
fn resolve_json_is_stable_and_complete() {
    let out = kubexm_build(&[
        "resolve",
        "-f",
        &example().display().to_string(),
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["formatVersion"], 1);
    assert_eq!(v["cluster"], "demo");
    assert_eq!(v["arches"], serde_json::json!(["amd64", "arm64"]));
    let bins = v["binaries"].as_array().expect("binaries");
    let kubelet_arm = bins
        .iter()
        .find(|b| b["name"] == "kubelet" && b["arch"] == "arm64")
        .expect("kubelet for the arm64 worker");
    for key in [
        "name", "version", "arch", "url", "sha256", "archive", "roles", "path",
    ] {
        assert!(
            !kubelet_arm[key].is_null(),
            "{key} missing in {kubelet_arm}"
        );
    }
    assert_eq!(kubelet_arm["path"], "files/kubelet/v1.33.11/arm64/kubelet");
    let images = v["images"].as_array().expect("images");
    let pause = images
        .iter()
        .find(|i| i["reference"] == "registry.k8s.io/pause:3.10")
        .expect("pause");
    assert_eq!(
        pause["platforms"],
        serde_json::json!(["linux/amd64", "linux/arm64"])
    );
    assert!(!text(&out.stdout).contains("KUBEXM_SSH_PASSWORD_VALUE"));
}

#[test]
fn kmzone_env_and_zone_file_switch_sources() {
    let out = Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .args([
            "resolve",
            "-f",
            &example().display().to_string(),
            "-o",
            "json",
        ])
        .env("KMZONE", "cn")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["zone"], "cn");
    for i in v["images"].as_array().expect("images") {
        let src = i["source"].as_str().expect("source");
        assert!(
            src.starts_with("registry.cn-beijing.aliyuncs.com/kubesphereio/"),
            "{src}"
        );
    }

    let zone = root().join("manifests/tests/fixtures/zone-local.yaml");
    let out = kubexm_build(&[
        "resolve",
        "-f",
        &example().display().to_string(),
        "-o",
        "json",
        "--zone-file",
        &zone.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["zone"], "local");
    for b in v["binaries"].as_array().expect("binaries") {
        assert!(
            b["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("http://127.0.0.1:8080/")),
            "{b}"
        );
    }
    for i in v["images"].as_array().expect("images") {
        assert!(
            i["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("127.0.0.1:5000/")),
            "{i}"
        );
    }
}

#[test]
fn bad_inputs_fail_with_a_named_cause() {
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("cluster.yaml");
    std::fs::write(&bad, "apiVersion: kubexm.io/v1alpha1\nkind: Cluster\nmetadata: {name: x}\nspec:\n  hosts: [{name: a, address: 10.0.0.1, colour: red}]\n").expect("write");
    let out = kubexm_build(&["resolve", "-f", &bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{}:5:40: unknown field `colour`", bad.display())),
        "{err}"
    );

    let out = kubexm_build(&["resolve", "-f", "/nonexistent/cluster.yaml"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("cannot read `/nonexistent/cluster.yaml`"));

    let out = kubexm_build(&[
        "resolve",
        "-f",
        &example().display().to_string(),
        "--zone",
        "mars",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("unknown zone `mars`"));

    let catalog = dir.path().join("catalog.yaml");
    std::fs::write(
        &catalog,
        "components:\n  - name: etcd\n    url: \"https://x/{flavour}\"\n",
    )
    .expect("write");
    let out = kubexm_build(&[
        "resolve",
        "-f",
        &example().display().to_string(),
        "--catalog",
        &catalog.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("unknown placeholder `{flavour}`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn validate_reports_every_problem() {
    let dir = tempfile::tempdir().expect("tmp");
    let f = dir.path().join("cluster.yaml");
    let text_in = std::fs::read_to_string(example())
        .expect("example")
        .replace("worker: [\"node[1:2]\"]", "worker: [\"node[1:3]\"]")
        .replace("podCidr: 10.233.64.0/18", "podCidr: 10.233.0.0/16");
    std::fs::write(&f, text_in).expect("write");
    let out = kubexm_build(&["validate", "-f", &f.display().to_string()]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(err.contains("(2 problems)"), "{err}");
    assert!(
        err.contains("spec.roleGroups.worker[0]: host `node3` is not in spec.hosts"),
        "{err}"
    );
    assert!(
        err.contains("spec.network.serviceCidr: `10.233.0.0/18` overlaps podCidr `10.233.0.0/16`"),
        "{err}"
    );

    let out = kubexm_build(&["validate", "-f", &example().display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("valid (6 hosts, Kubernetes v1.33.11, zone default)"));
}
