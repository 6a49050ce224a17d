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

use crate::common::Edit as _;
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
        t.edit(
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
    let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
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
    let nft = |t: String| t.edit("proxyMode: iptables", "proxyMode: nftables");
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
            t.edit("proxyMode: iptables", &format!("proxyMode: {mode}"))
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

/// A stand-in node for the network checks (issue 19): answers the interface probe with `net`
/// and the VIP probe with `vip`.
struct NetAnswer {
    net: String,
    vip: &'static str,
}

#[async_trait]
impl Runner for NetAnswer {
    fn node(&self) -> &str {
        "stand-in"
    }
    async fn exec(&self, e: &Exec) -> Result<ExecOutput, RunError> {
        let script = format!("{e:?}");
        let stdout = if script.contains("arping") {
            self.vip.to_string()
        } else if script.contains("#links") {
            self.net.clone()
        } else {
            String::new()
        };
        Ok(ExecOutput {
            code: Some(0),
            stdout,
            stderr: String::new(),
        })
    }
    async fn upload(&self, _: &Upload) -> Result<UploadOutcome, RunError> {
        Ok(UploadOutcome::Uploaded(0))
    }
}

/// `ip -o addr` of a node with `addrs` on eth0.
fn ip_addr(addrs: &[&str]) -> String {
    let mut s = "#links\nlo\neth0\n#addrs\n1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n".to_string();
    for a in addrs {
        let family = if a.contains(':') { "inet6" } else { "inet" };
        s.push_str(&format!(
            "2: eth0@if7    {family} {a} scope global eth0\\       valid_lft forever preferred_lft forever\n"
        ));
    }
    s
}

/// Runs preflight's network tasks as the install does (facts on every node, then the
/// decisions; the VIP from its first holder): the first refusal, or every note.
async fn network_preflight(
    ctx: &Arc<InstallContext>,
    nodes: &[(&str, String)],
    vip: &'static str,
) -> Result<Vec<String>, String> {
    use kubexm_install::modules::preflight::{
        CheckNodeNetwork, CheckVipFree, GatherNetFacts, NetRules, ProbeVip,
    };
    let facts = Facts::default();
    let rules = Arc::new(NetRules::of(ctx));
    let runner = |name: &str| NetAnswer {
        net: nodes
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| ip_addr(&[])),
        vip,
    };
    let mut notes = Vec::new();
    let run = |ops: Vec<Op>, r: NetAnswer| async move {
        let mut out = Vec::new();
        for op in ops {
            let a = op
                .generic()
                .apply_noted(&r)
                .await
                .map_err(|e| e.to_string())?;
            out.extend(a.notes);
        }
        Ok::<_, String>(out)
    };
    for name in ctx.all() {
        let n = ctx.node(&name).expect("node");
        notes.extend(run(GatherNetFacts.ops(n, &facts).expect("ops"), runner(&name)).await?);
    }
    for name in ctx.all() {
        let n = ctx.node(&name).expect("node");
        let ops = CheckNodeNetwork(rules.clone()).ops(n, &facts).expect("ops");
        notes.extend(run(ops, runner(&name)).await?);
    }
    if let Some(rule) = &rules.vip {
        let first = ctx.node(&rule.holders[0]).expect("holder");
        let ops = ProbeVip(rule.clone()).ops(first, &facts).expect("ops");
        notes.extend(run(ops, runner(&first.name)).await?);
        let ops = CheckVipFree(rules.clone()).ops(first, &facts).expect("ops");
        notes.extend(run(ops, runner(&first.name)).await?);
    }
    Ok(notes)
}

fn healthy_nodes() -> Vec<(&'static str, String)> {
    vec![
        ("master1", ip_addr(&["192.168.50.11/24"])),
        ("master2", ip_addr(&["192.168.50.12/24"])),
        ("master3", ip_addr(&["192.168.50.13/24"])),
        ("worker1", ip_addr(&["192.168.50.21/24"])),
        ("worker2", ip_addr(&["192.168.50.22/24"])),
    ]
}

/// Issue 19: each node holds its configured internal address; the VIP's interface is on every
/// node that holds the VIP (keepalived on the masters here).
#[tokio::test]
async fn node_addresses_and_the_vip_interface_are_checked_on_every_node() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = cluster(work.path(), "v1.31.13", "kubexm", |t| t);
    assert_eq!(
        network_preflight(&ctx, &healthy_nodes(), "ping=silent\narping=absent\n").await,
        Ok(vec![])
    );
    // worker1's address is not on the machine (a typo in cluster.yaml, or the wrong host).
    let mut nodes = healthy_nodes();
    nodes[3].1 = ip_addr(&["192.168.50.121/24"]);
    let e = network_preflight(&ctx, &nodes, "ping=silent\narping=absent\n")
        .await
        .expect_err("worker1 refused");
    assert!(
        e.contains("node worker1: spec.hosts[3].address 192.168.50.21 is not assigned to any interface of the node (`ip -o addr` shows 192.168.50.121 on eth0)"),
        "{e}"
    );
    // master3 names its interface differently.
    let mut nodes = healthy_nodes();
    nodes[2].1 = "#links\nlo\nens3\n#addrs\n2: ens3    inet 192.168.50.13/24 scope global ens3\n"
        .to_string();
    let e = network_preflight(&ctx, &nodes, "ping=silent\narping=absent\n")
        .await
        .expect_err("master3 refused");
    assert!(
        e.contains("node master3 has no network interface `eth0` (spec.loadBalancer.interface: keepalived puts the VIP 192.168.50.100 on it there); its interfaces: ens3, lo"),
        "{e}"
    );
    // A worker holds no VIP: its interface names do not matter.
    let mut nodes = healthy_nodes();
    nodes[4].1 = "#links\nlo\nens3\n#addrs\n2: ens3    inet 192.168.50.22/24 scope global ens3\n"
        .to_string();
    assert_eq!(
        network_preflight(&ctx, &nodes, "ping=silent\narping=absent\n").await,
        Ok(vec![])
    );
}

/// Issue 19: on a dual-stack cluster the node's internalAddressV6 (the kubelet's second
/// `--node-ip`) must be assigned too; on a single-stack cluster it is not used, so not checked.
#[tokio::test]
async fn the_ipv6_address_is_checked_on_dual_stack_clusters() {
    let work = tempfile::tempdir().expect("tempdir");
    let v6 = |t: String| {
        t.edit(
            "{name: worker1, address: 192.168.50.21}",
            "{name: worker1, address: 192.168.50.21, internalAddressV6: 'fd00:50::21'}",
        )
    };
    let single = cluster(work.path(), "v1.31.13", "kubexm", v6);
    assert_eq!(
        network_preflight(&single, &healthy_nodes(), "ping=silent\narping=silent\n").await,
        Ok(vec![])
    );
    let dual = cluster(work.path(), "v1.31.13", "kubexm", |t| {
        v6(t).edit(
            "  network:\n",
            "  network:\n    podCidr: 10.233.64.0/18,fd00:64::/56\n    serviceCidr: 10.233.0.0/18,fd00:233::/112\n",
        )
    });
    let e = network_preflight(&dual, &healthy_nodes(), "ping=silent\narping=silent\n")
        .await
        .expect_err("v6 missing");
    assert!(
        e.contains("node worker1: spec.hosts[3].internalAddressV6 fd00:50::21 is not assigned to any interface of the node (`ip -o addr` shows no IPv6 address)"),
        "{e}"
    );
    let mut nodes = healthy_nodes();
    nodes[3].1 = ip_addr(&["192.168.50.21/24", "fd00:50::21/64"]);
    assert_eq!(
        network_preflight(&dual, &nodes, "ping=silent\narping=silent\n").await,
        Ok(vec![])
    );
}

/// Issue 19: a VIP something else answers for is refused before the first install; once one
/// of this cluster's nodes holds it (a re-run, day-2), the answer is ours.
#[tokio::test]
async fn a_vip_in_use_is_refused_unless_this_cluster_holds_it() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = cluster(work.path(), "v1.31.13", "kubexm", |t| t);
    let e = network_preflight(&ctx, &healthy_nodes(), "ping=answered\narping=absent\n")
        .await
        .expect_err("in use");
    assert!(
        e.contains("the VIP 192.168.50.100 (spec.loadBalancer.vip) is already in use: probed from node master1, it answers (ping answered, arping absent), and no node of this cluster has it on an interface"),
        "{e}"
    );
    let e = network_preflight(&ctx, &healthy_nodes(), "ping=silent\narping=answered\n")
        .await
        .expect_err("ARP answer");
    assert!(e.contains("arping answered"), "{e}");
    // keepalived on master2 holds it: a re-run of the install.
    let mut nodes = healthy_nodes();
    nodes[1].1 = ip_addr(&["192.168.50.12/24", "192.168.50.100/32"]);
    let notes = network_preflight(&ctx, &nodes, "ping=answered\narping=answered\n")
        .await
        .expect("ours");
    assert_eq!(
        notes,
        vec!["VIP not in use: the VIP 192.168.50.100 is already on eth0 of node master2 (this cluster's keepalived): not checked for another user".to_string()]
    );
    // kube-vip: the masters hold it; without a load balancer that puts a VIP on an interface
    // there is nothing to probe.
    let kube_vip = cluster(work.path(), "v1.31.13", "kubeadm", |t| {
        t.edit("    loadbalancer: [\"master[1:3]\"]\n", "").edit(
            "    mode: external\n    external:\n      type: kubexm-kh\n",
            "    mode: internal\n    internal:\n      type: kube-vip\n",
        )
    });
    let rules = kubexm_install::modules::preflight::NetRules::of(&kube_vip);
    let rule = rules.vip.expect("kube-vip VIP");
    assert_eq!(rule.holder_kind, "kube-vip");
    assert_eq!(rule.holders, ["master1", "master2", "master3"]);
    let none = cluster(work.path(), "v1.31.13", "kubeadm", |t| {
        t.edit("    loadbalancer: [\"master[1:3]\"]\n", "").edit(
            "    mode: external\n    external:\n      type: kubexm-kh\n",
            "    mode: internal\n",
        )
    });
    assert!(kubexm_install::modules::preflight::NetRules::of(&none)
        .vip
        .is_none());
    use kubexm_install::modules::preflight::PreflightModule;
    use kubexm_install::pipeline::Module;
    let tasks: Vec<String> = PreflightModule(none.clone())
        .tasks()
        .expect("tasks")
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(!tasks.iter().any(|t| t.contains("vip")), "{tasks:?}");
}
