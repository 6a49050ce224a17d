//! `kubexm-install plan`: the full ordered plan of the install pipeline, printed without
//! connecting anywhere (the example's hosts do not exist).

use std::path::{Path, PathBuf};
use std::process::Command;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples/cluster.yaml")
}

/// `kubexm-install plan ARGS` in a fresh work directory.
pub(crate) fn plan(args: &[&str]) -> std::process::Output {
    let work = tempfile::tempdir().expect("tempdir");
    plan_in(work.path(), args)
}

/// `kubexm-install plan ARGS` in the work directory `work`.
fn plan_in(work: &Path, args: &[&str]) -> std::process::Output {
    let mut out = Command::new(env!("CARGO_BIN_EXE_kubexm-install"))
        .arg("--work-dir")
        .arg(work)
        .arg("plan")
        .args(args)
        .output()
        .expect("run kubexm-install");
    // The work directory (where the admin kubeconfig is fetched to) differs on every run.
    let text = String::from_utf8_lossy(&out.stdout).replace(&work.display().to_string(), "WORK");
    out.stdout = text.into_bytes();
    out
}

#[test]
fn plan_of_the_example_cluster() {
    let out = plan(&["-f", example().to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    // The in-cluster time server (ntpServers: [master1]) serves, the others follow it.
    assert!(text.contains("allow"), "{text}");
    assert!(
        text.contains("server 192.168.10.11 iburst prefer"),
        "{text}"
    );
    insta::assert_snapshot!(without_generated_keys(&text));
}

/// The plan with the sizes and digests of generated certificates, keys and kubeconfigs (new
/// random keys in every fresh work directory) replaced by placeholders.
pub(crate) fn without_generated_keys(text: &str) -> String {
    text.lines()
        .map(|l| {
            let generated = [
                "/etc/ssl/",
                "registry-ca.crt",
                "/tls/",
                "/certs.d/",
                "/etc/kubernetes/pki/",
            ];
            let upload = l.contains("upload") && generated.iter().any(|g| l.contains(g));
            let kubeconfig = l.contains("template kubexm/kubeconfig.tera");
            if !(upload || kubeconfig) {
                return l.to_string();
            }
            let mut l = match (l.find('<'), l.find(" bytes>")) {
                (Some(open), Some(close)) => format!("{}<N{}", &l[..open], &l[close..]),
                _ if kubeconfig => l.to_string(),
                _ => return l.to_string(),
            };
            if let Some(d) = l.find("[sha256:") {
                l.truncate(d);
                l.push_str("[sha256:GENERATED]");
            }
            l
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn plan_as_json_lists_modules_tasks_steps_and_ops() {
    let out = plan(&["-f", example().to_str().expect("utf-8"), "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["pipeline"], "install");
    let modules: Vec<&str> = v["modules"]
        .as_array()
        .expect("modules")
        .iter()
        .map(|m| m["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        modules[..4],
        ["preflight", "os-repository", "pre-install", "node-prep"]
    );
    assert_eq!(
        v["modules"][1]["skipped"]
            .as_str()
            .map(|s| s.contains("osReleases is empty")),
        Some(true),
        "{}",
        v["modules"][1]
    );
    let hosts_block = &v["modules"][3]["tasks"][0]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["name"] == "hosts-block")
        .expect("hosts-block step")["groups"][0]["ops"][0];
    assert_eq!(hosts_block["kind"], "block");
    let detail = hosts_block["detail"].as_str().expect("detail");
    for line in [
        "192.168.10.11 master1.cluster.local master1",
        "192.168.10.30 dockerhub.kubexm.local",
        "192.168.10.11 lb.kubexm.internal",
        "192.168.10.5 ldap.corp.example",
    ] {
        assert!(detail.contains(line), "{line} missing from {detail}");
    }
}

#[test]
fn plan_of_an_invalid_cluster_names_the_file_and_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubexm.io/v1alpha1\nkind: Cluster\nmetadata: {name: x}\nspec: {hosts: []}\n",
    )
    .expect("write");
    let out = plan(&["-f", bad.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml"), "{err}");
    assert!(out.stdout.is_empty(), "nothing printed on failure");
}

/// Every file under `dir`, relative to it.
pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap_or(&p).to_path_buf());
            }
        }
    }
    out
}

#[test]
fn plan_writes_nothing_in_a_fresh_work_dir() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubexm");
    let kubexm = fixtures.join("cluster.yaml");
    let stand_ins = fixtures.join("catalog-stand-in.yaml");
    for args in [
        // etcd and registry CAs, the registry's server certificate.
        vec!["-f", example().to_str().expect("utf-8")],
        // kubernetes.type kubexm: the Kubernetes and front-proxy CAs, every component's
        // certificate, the service-account key.
        vec![
            "-f",
            kubexm.to_str().expect("utf-8"),
            "--catalog",
            stand_ins.to_str().expect("utf-8"),
        ],
    ] {
        let work = tempfile::tempdir().expect("tempdir");
        let out = plan_in(work.path(), &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        // The plan still uploads the certificates it would make.
        assert!(text.contains("/etc/ssl/etcd/ssl/ca.pem"), "{text}");
        assert_eq!(files_under(work.path()), Vec::<PathBuf>::new(), "{args:?}");
    }
}

/// `plan --files` (issue 13): after each op that writes a file, its full content — the
/// kubeadm configuration as kubeadm will read it — with secrets redacted: a registry password
/// cluster.yaml holds, every private key, the bootstrap token.
#[test]
fn plan_files_shows_every_file_written_with_secrets_redacted() {
    const PASSWORD: &str = "Pl4n-S3cret-x9";
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(example()).expect("example");
    let text = text.replace(
        "    namespace: kubexm\n",
        &format!("    namespace: kubexm\n    auths:\n      dockerhub.kubexm.local: {{username: admin, password: \"{PASSWORD}\"}}\n"),
    );
    assert!(text.contains(PASSWORD));
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, text).expect("write");
    let out = plan(&["-f", file.to_str().expect("utf-8"), "--files"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    // The kubeadm configuration, in full, right after the op that writes it.
    let at = text
        .find("template kubeadm/init-config.yaml.tera -> /etc/kubernetes/kubeadm-config.yaml")
        .expect("the init configuration is written");
    let after = &text[at..];
    for line in [
        "| kind: InitConfiguration",
        "| kind: ClusterConfiguration",
        "| kubernetesVersion: \"v1.33.11\"",
        "| kind: KubeletConfiguration",
    ] {
        assert!(
            after.contains(line),
            "{line} missing after the init configuration"
        );
    }
    // The registry password reached containerd's configuration, redacted.
    assert!(!text.contains(PASSWORD), "the registry password is printed");
    assert!(
        text.contains("| username = \"admin\"") || text.contains("username = \"admin\""),
        "containerd's auth block is shown"
    );
    // Private keys are named, never shown.
    let lines: Vec<&str> = text.lines().collect();
    let mut keys = 0;
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("| -----BEGIN") && l.contains("PRIVATE KEY-----") {
            keys += 1;
            assert!(
                lines[i + 1].ends_with("| *** (private key)"),
                "{}",
                lines[i + 1]
            );
        }
    }
    assert!(keys > 10, "{keys} private keys shown redacted");
    assert!(text.contains("| ***") || text.contains("token: \"***\""));
    // Without --files the plan is as before: no content.
    let plain =
        String::from_utf8(plan(&["-f", file.to_str().expect("utf-8")]).stdout).expect("utf-8");
    assert!(!plain.contains("| kind: InitConfiguration"));
    // A snapshot of one rendered file as the operator sees it.
    let init: String = after
        .lines()
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('|'))
        .map(|l| format!("{}\n", l.trim_start()))
        .collect();
    insta::assert_snapshot!("plan-files-kubeadm-init-config", init);
}

/// `kubexm-install plan … | head -n 1`: the reader closes the pipe after one line; the plan stops
/// quietly (status 141, as if SIGPIPE had ended it), with no panic message.
#[test]
fn plan_into_a_pipe_closed_early_stops_quietly() {
    use std::io::BufRead;
    let work = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubexm-install"))
        .arg("--work-dir")
        .arg(work.path())
        // --files: the plan with every rendered file, far more than a pipe holds (64 KiB).
        .args(["plan", "--files", "-f", example().to_str().expect("utf-8")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut first)
        .expect("first line");
    assert!(first.starts_with("pipeline install"), "{first}");
    // The reader is dropped here: the pipe is closed with most of the plan unwritten.
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(141), "{err}");
}
