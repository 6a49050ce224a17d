//! Preflight's host requirements (issue 13 items 2, 3, 7): the kernel and cgroup hierarchy
//! each node reports, judged per Kubernetes version before anything changes; the kubelet's
//! `failCgroupV1` rendered on both paths when cluster.yaml sets it.
//!
//! Upstream facts: kubelet `failCgroupV1` defaults to true from v1.35 (the kubelet exits on a
//! cgroup v1 host) and exists from v1.31 (KEP-4569); kubeadm's SystemVerification kernel floor
//! (kubernetes/system-validators: 4.19 from v1.32); kube-proxy nftables needs kernel 5.13+.
//! The nodes here are stand-ins (a runner answering the probe as the named OS does); the lab's
//! real Debian 12 nodes run the same probe in `tests/lab/kubernetes/install-real`.

use std::sync::Arc;

use async_trait::async_trait;
use kubexm_install::context::InstallContext;
use kubexm_install::modules::kubeadm::config::KubeadmSettings;
use kubexm_install::modules::kubexm::node::KubexmNodesModule;
use kubexm_install::modules::preflight::{CheckHostRequirements, GatherHostFacts};
use kubexm_install::pipeline::ops::Op;
use kubexm_install::pipeline::{Facts, Step};
use kubexm_install::runner::{Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome};

use crate::lb::{file_of, rendered};
use crate::versions::{cluster, text, yaml_docs};

/// A stand-in node: answers every command with the probe output of the OS it plays.
struct ProbeAnswer(&'static str);

#[async_trait]
impl Runner for ProbeAnswer {
    fn node(&self) -> &str {
        "stand-in"
    }
    async fn exec(&self, _: &Exec) -> Result<ExecOutput, RunError> {
        Ok(ExecOutput {
            code: Some(0),
            stdout: self.0.to_string(),
            stderr: String::new(),
        })
    }
    async fn upload(&self, _: &Upload) -> Result<UploadOutcome, RunError> {
        Ok(UploadOutcome::Uploaded(0))
    }
}

const EL9_CGROUP_V1: &str = "kernel=5.14.0-503.el9.x86_64\ncgroupfs=tmpfs\nos=rocky 9.5\n";
const CENTOS7: &str = "kernel=3.10.0-1160.el7.x86_64\ncgroupfs=tmpfs\nos=centos 7\n";
const DEBIAN12: &str = "kernel=6.1.0-26-amd64\ncgroupfs=cgroup2fs\nos=debian 12\n";

/// Runs the gather and check steps of preflight on `node` answering `probe`: the check's
/// result (its notes, or its error).
async fn preflight(
    ctx: &Arc<InstallContext>,
    node: &str,
    probe: &'static str,
) -> Result<Vec<String>, String> {
    let n = ctx.node(node).expect("node");
    let facts = Facts::default();
    let runner = ProbeAnswer(probe);
    for op in GatherHostFacts.ops(n, &facts).expect("gather ops") {
        op.generic()
            .apply(&runner)
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut notes = Vec::new();
    for op in CheckHostRequirements(ctx.clone())
        .ops(n, &facts)
        .expect("check ops")
    {
        assert!(matches!(op, Op::Require(_)));
        let applied = op
            .generic()
            .apply_noted(&runner)
            .await
            .map_err(|e| e.to_string())?;
        assert!(!applied.changed);
        notes.extend(applied.notes);
    }
    Ok(notes)
}

#[tokio::test]
async fn cgroup_v1_nodes_are_refused_on_1_35_unless_fail_cgroup_v1_is_false() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = cluster(work.path(), "v1.35.4", "kubeadm", |t| t);
    let e = preflight(&ctx, "worker2", EL9_CGROUP_V1)
        .await
        .expect_err("refused");
    insta::assert_snapshot!("cgroup-v1-refused-on-1.35", e);
    assert!(
        e.contains("node worker2 (kernel 5.14.0-503.el9.x86_64, cgroup v1, rocky 9.5)"),
        "{e}"
    );
    assert!(e.contains("systemd.unified_cgroup_hierarchy=1"), "{e}");
    assert!(preflight(&ctx, "worker2", DEBIAN12)
        .await
        .expect("cgroup v2")
        .is_empty());

    // The operator's explicit choice: preflight lets cgroup v1 through and both paths render it.
    let keep = |t: String| {
        t.replace(
            "    proxyMode: iptables\n",
            "    proxyMode: iptables\n    kubelet: {failCgroupV1: false}\n",
        )
    };
    for kind in ["kubeadm", "kubexm"] {
        let ctx = cluster(work.path(), "v1.35.4", kind, keep);
        let notes = preflight(&ctx, "worker2", EL9_CGROUP_V1)
            .await
            .expect("allowed explicitly");
        assert!(
            notes.len() == 1 && notes[0].contains("maintenance mode"),
            "{kind}: {notes:?}"
        );
        let kubelet = if kind == "kubeadm" {
            crate::dns::kubeadm_kubelet(&ctx)
        } else {
            let files = rendered(&ctx, &KubexmNodesModule(ctx.clone()));
            yaml_docs(&file_of(
                &files,
                "worker2",
                "/etc/kubernetes/kubelet-config.yaml",
            ))
            .remove(0)
        };
        assert_eq!(kubelet["failCgroupV1"], false, "{kind}");
    }
    // Unset: nothing rendered (the kubelet's own default).
    let s = KubeadmSettings::new(&ctx).expect("settings");
    let init = text(
        &s.render_init(&s.node(ctx.node("master1").expect("m1"), true, false))
            .expect("init"),
    );
    assert!(!init.contains("failCgroupV1"));
}

#[tokio::test]
async fn old_kernels_and_cgroup_v1_per_version() {
    let work = tempfile::tempdir().expect("tempdir");
    // CentOS 7 (3.10, cgroup v1) runs v1.20: kubeadm's floor is 3.10 there.
    let ctx = cluster(work.path(), "v1.20.2", "kubeadm", |t| t);
    assert_eq!(preflight(&ctx, "master1", CENTOS7).await, Ok(vec![]));
    // v1.31: cgroup v1 in maintenance mode: a warning naming the node.
    let ctx = cluster(work.path(), "v1.31.13", "kubexm", |t| t);
    let notes = preflight(&ctx, "master1", CENTOS7)
        .await
        .expect("v1.31 warns only");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("node master1") && notes[0].contains("maintenance mode"),
        "{notes:?}"
    );
    // nftables on a kernel older than 5.13 (Debian 11's 5.10).
    let nft = |t: String| t.replace("proxyMode: iptables", "proxyMode: nftables");
    let ctx = cluster(work.path(), "v1.35.4", "kubexm", nft);
    let e = preflight(
        &ctx,
        "worker1",
        "kernel=5.10.0-32-amd64\ncgroupfs=cgroup2fs\nos=debian 11\n",
    )
    .await
    .expect_err("nftables on 5.10");
    assert!(
        e.contains("node worker1") && e.contains("nftables mode needs kernel 5.13"),
        "{e}"
    );
}

#[tokio::test]
async fn a_node_whose_facts_were_not_gathered_is_not_passed() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = cluster(work.path(), "v1.35.4", "kubeadm", |t| t);
    let n = ctx.node("master1").expect("node");
    let ops = CheckHostRequirements(ctx.clone())
        .ops(n, &Facts::default())
        .expect("ops");
    let e = ops[0]
        .generic()
        .apply(&ProbeAnswer(""))
        .await
        .expect_err("no facts");
    assert!(e.to_string().contains("were not gathered"), "{e}");
    // Hostile probe output: refused, not quoted.
    let e = preflight(
        &ctx,
        "master1",
        "kernel=\u{1b}]0;pwned\u{7}\ncgroupfs=cgroup2fs\n",
    )
    .await
    .expect_err("hostile");
    assert!(!e.contains('\u{1b}'), "{e}");
}

/// Node preparation installs what kube-proxy's mode runs on the host (issue 13 item 7): ipset
/// and ipvsadm for ipvs, nft for nftables, iptables always (kubeadm's preflight looks for it).
#[test]
fn node_preparation_installs_what_the_proxy_mode_needs() {
    use kubexm_install::modules::os::NodePrepModule;
    use kubexm_install::pipeline::Module;
    let work = tempfile::tempdir().expect("tempdir");
    let packages = |mode: &str| -> Vec<String> {
        let ctx = cluster(work.path(), "v1.35.4", "kubexm", |t| {
            t.replace("proxyMode: iptables", &format!("proxyMode: {mode}"))
        });
        let node = ctx.node("worker1").expect("worker1");
        let tasks = NodePrepModule(ctx.clone()).tasks().expect("tasks");
        let step = tasks[0]
            .steps
            .iter()
            .find(|s| s.name() == "install-dependencies")
            .expect("install-dependencies");
        match &step.ops(node, &Facts::default()).expect("ops")[0] {
            Op::Package(p) => {
                assert_eq!(
                    p.debs,
                    p.rpms
                        .iter()
                        .map(|r| r
                            .replace("conntrack-tools", "conntrack")
                            .replace("procps-ng", "procps"))
                        .collect::<Vec<_>>()
                );
                p.debs.clone()
            }
            other => panic!("not a package op: {other:?}"),
        }
    };
    let ipvs = packages("ipvs");
    assert!(
        ["iptables", "ipset", "ipvsadm"]
            .iter()
            .all(|p| ipvs.iter().any(|d| d == p)),
        "{ipvs:?}"
    );
    let nft = packages("nftables");
    assert!(
        nft.iter().any(|d| d == "nftables") && !nft.iter().any(|d| d == "ipset"),
        "{nft:?}"
    );
    let ipt = packages("iptables");
    assert!(
        ipt.iter().any(|d| d == "iptables")
            && !ipt.iter().any(|d| d == "ipvsadm" || d == "nftables"),
        "{ipt:?}"
    );
}
