//! The `delete` pipeline: its plan for the lab cluster, and `kubexm-install delete` refusing
//! without `--yes` / printing the plan with `--dry-run` (no connection: the lab's hosts are not
//! up). Running it for real is the lab's e2e, `tests/lab/labkit e2e` (it touches /etc, so not on
//! this machine).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use kubexm_install::context::load_context;
use kubexm_install::pipeline::plan;
use kubexm_install::pipelines::delete_pipeline;
use kubexm_install::pipelines::install_pipeline;

fn lab_cluster() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab/cluster.yaml")
}

fn lab_catalog() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab/mirror/catalog-lab.yaml")
}

#[test]
fn delete_plan_of_the_lab_cluster() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = Arc::new(
        load_context(&lab_cluster(), Some(&lab_catalog()), None, work.path()).expect("context"),
    );
    let p = plan::build(
        &delete_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    let modules: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        modules,
        [
            "delete-preflight",
            "delete-timers",
            "delete-finalize",
            "delete-kubexm",
            "delete-kubeadm",
            "delete-kata",
            "delete-runtime",
            "delete-registry",
            "delete-loadbalancer",
            "delete-etcd",
            "delete-os-repository",
            "delete-scripts",
            "delete-node-prep"
        ],
        "reverse install order"
    );
    // The lab is kubernetes.type kubeadm without Kata: only the kubexm and Kata removals (and
    // the scripts') are skipped.
    for m in &p.modules {
        assert_eq!(
            m.skipped.is_some(),
            m.name == "delete-kubexm" || m.name == "delete-scripts" || m.name == "delete-kata",
            "{}",
            m.name
        );
    }
    let text = p.to_text();
    for want in [
        "rm -f -- /usr/local/bin/containerd",
        "/etc/containerd/certs.d/10.88.10.11:5000/hosts.toml",
        "mv -f -- \"$o\" /etc/haproxy/haproxy.cfg",
        "systemctl disable --now keepalived",
        "rm -f -- /etc/sysctl.d/99-kubexm.conf /etc/modules-load.d/kubexm.conf",
        "rm -rf -- /etc/kubexm",
        "/usr/local/bin/kubeadm reset -f",
        "systemctl disable --now kubelet",
        "/usr/local/bin/kubectl /usr/local/bin/helm /etc/kubernetes /var/lib/kubelet",
        "for i in cni0 flannel.1",
        // What real v1.20.2 pods left after kubeadm reset (lab run): pod network namespaces
        // with their veths, the bridge plugin's CNI-* masquerade chains, the pod logs.
        "ip netns delete \"${n##*/}\"",
        "grep -vE 'KUBE-|FLANNEL|cali-|CILIUM|CNI-|",
        "/var/log/pods /var/log/containers",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
    insta::assert_snapshot!(text);
}

#[test]
fn the_install_keeps_what_delete_restores() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = Arc::new(
        load_context(&lab_cluster(), Some(&lab_catalog()), None, work.path()).expect("context"),
    );
    let text = plan::build(
        &install_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan")
    .to_text();
    for want in [
        "o=/etc/kubexm/orig/etc/haproxy/haproxy.cfg",
        "o=/etc/kubexm/orig/etc/keepalived/keepalived.conf",
        "echo /var/lib/containerd > /etc/kubexm/containerd-data.created",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
}

fn delete_cli(args: &[&str]) -> std::process::Output {
    let work = tempfile::tempdir().expect("tempdir");
    Command::new(env!("CARGO_BIN_EXE_kubexm-install"))
        .arg("--work-dir")
        .arg(work.path())
        .arg("delete")
        .arg("-f")
        .arg(lab_cluster())
        .arg("--catalog")
        .arg(lab_catalog())
        .args(args)
        .output()
        .expect("run kubexm-install")
}

#[test]
fn delete_without_yes_says_what_it_would_delete_and_does_nothing() {
    let out = delete_cli(&[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "would remove cluster lab from 3 node(s)",
        "node3 (10.88.10.13)",
        "delete-etcd / delete-etcd on node1,node2,node3: remove-etcd",
        "pass --yes",
    ] {
        assert!(err.contains(want), "{want} missing from\n{err}");
    }
}

#[test]
fn delete_dry_run_prints_the_plan() {
    let out = delete_cli(&["--dry-run"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("pipeline delete\n"), "{text}");
    assert!(text.contains("module delete-node-prep"), "{text}");
}
