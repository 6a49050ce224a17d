//! Day-2 without connecting anywhere: the change an edited cluster.yaml makes ([`diff`]), the
//! checks on the facts (quorum, even etcd counts, last master, one change at a time), and the
//! plans of add-node, delete-node and etcd add-member/remove-member for both Kubernetes paths
//! (snapshots plus the order and placement that matter). The lab runs them for real
//! (`tests/labkit/tests/day2.rs`: `tests/lab/labkit day2`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use kubexm_install::change::diff;
use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::facts::checks::{
    check_add, check_delete, check_etcd_add, check_etcd_remove, Guards,
};
use kubexm_install::facts::{ClusterFacts, EndpointHealth};
use kubexm_install::modules::lifecycle::membership::DrainOptions;
use kubexm_install::pipeline::plan::{self, Plan};
use kubexm_install::pipelines::add_node::{add_node_pipeline, AddNodes};
use kubexm_install::pipelines::delete_node::{delete_node_pipeline, DeleteNode};
use kubexm_install::pipelines::etcd_member::{
    add_member_pipeline, remove_member_pipeline, EtcdChange,
};
use kubexm_install::record::{membership, restrict};

use crate::common::Edit as _;
use crate::plan_cli::without_generated_keys;

use crate::common::repo;

/// The lab cluster grown to five hosts: node4 a worker, node5 a master (not an etcd member,
/// not a load-balancer node). `edit` changes the text further.
fn lab5_text(edit: impl Fn(String) -> String) -> String {
    let text = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab yaml");
    let key = "privateKeyPath: /var/tmp/kubexm-lab/labs/e2e/id_ed25519";
    edit(
        text.edit(
            "  roleGroups:\n",
            &format!("    - {{name: node4, address: 10.88.10.14, user: root, {key}}}\n    - {{name: node5, address: 10.88.10.15, user: root, {key}}}\n  roleGroups:\n"),
        )
        .edit("    master: [\"node[1:3]\"]", "    master: [\"node[1:3]\", node5]")
        .edit("    worker: [\"node[1:3]\"]", "    worker: [\"node[1:4]\"]"),
    )
}

/// `text` loaded as a context with the lab catalog; the PKI under `work`.
fn load(work: &Path, text: &str, catalog: &Path) -> Arc<InstallContext> {
    let file = work.join("cluster.yaml");
    std::fs::write(&file, text).expect("write cluster.yaml");
    Arc::new(load_context(&file, Some(catalog), None, work).expect("cluster loads"))
}

fn lab_catalog() -> PathBuf {
    repo().join("tests/lab/mirror/catalog-lab.yaml")
}

/// `full` restricted to `nodes` with the roles `full` gives them (as a record would hold).
fn with_nodes(full: &Arc<InstallContext>, nodes: &[&str]) -> Arc<InstallContext> {
    let all = membership(&full.cluster);
    let keep: BTreeMap<String, Vec<String>> = all
        .into_iter()
        .filter(|(n, _)| nodes.contains(&n.as_str()))
        .collect();
    with_roles(full, &keep)
}

fn with_roles(
    full: &Arc<InstallContext>,
    nodes: &BTreeMap<String, Vec<String>>,
) -> Arc<InstallContext> {
    let cluster = restrict(full.cluster.clone(), nodes);
    Arc::new(InstallContext {
        nodes: kubexm_install::inventory::nodes(&cluster),
        cluster,
        bundle: None,
        pki_dir: full.pki_dir.clone(),
        keys: full.keys.clone(),
        resolution: full.resolution.clone(),
        os_releases: full.os_releases.clone(),
    })
}

fn build(p: &kubexm_install::pipeline::Pipeline, ctx: &InstallContext) -> Plan {
    plan::build(p, &ctx.plan_nodes(), &Default::default()).expect("plan")
}

/// The add-node plan of `new` joining `installed`, giving `desired`.
fn add_plan(
    installed: &Arc<InstallContext>,
    desired: &Arc<InstallContext>,
    new: &[String],
    facts: &ClusterFacts,
) -> Plan {
    let p = add_node_pipeline(&AddNodes {
        installed,
        desired,
        new,
        facts,
    })
    .expect("pipeline");
    build(&p, desired)
}

/// The delete-node plan of `node` leaving `installed`, giving `desired`.
fn delete_plan(
    installed: &Arc<InstallContext>,
    desired: &Arc<InstallContext>,
    node: &str,
    facts: &ClusterFacts,
    drain: DrainOptions,
    unreachable: bool,
) -> Plan {
    let p = delete_node_pipeline(&DeleteNode {
        installed,
        desired,
        node,
        facts,
        drain,
        unreachable,
    })
    .expect("pipeline");
    build(&p, installed)
}

/// `[i] module` / task lines only: the shape of a plan (which phase, which task, which nodes).
pub(crate) fn outline(p: &Plan) -> String {
    let mut s = String::new();
    for (i, m) in p.modules.iter().enumerate() {
        match &m.skipped {
            Some(r) => s.push_str(&format!("[{}] {} — skipped: {r}\n", i + 1, m.name)),
            None => {
                s.push_str(&format!("[{}] {}\n", i + 1, m.name));
                for t in &m.tasks {
                    s.push_str(&format!(
                        "    {} on {}{}\n",
                        t.name,
                        t.hosts.join(","),
                        if t.parallel { "" } else { " (one at a time)" }
                    ));
                }
            }
        }
    }
    s
}

fn phase<'a>(p: &'a Plan, name: &str) -> &'a kubexm_install::pipeline::plan::ModulePlan {
    p.modules
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no phase {name} in\n{}", outline(p)))
}

fn position(p: &Plan, name: &str) -> usize {
    p.modules
        .iter()
        .position(|m| m.name == name)
        .unwrap_or_else(|| panic!("no phase {name} in\n{}", outline(p)))
}

fn hosts(p: &Plan, phase_name: &str, task: &str) -> Vec<String> {
    phase(p, phase_name)
        .tasks
        .iter()
        .find(|t| t.name == task)
        .unwrap_or_else(|| panic!("no task {task} in phase {phase_name} of\n{}", outline(p)))
        .hosts
        .clone()
}

/// The lab (kubeadm path, kubexm etcd, external haproxy load balancer): installed with 3 nodes,
/// the five-host file desired.
struct Lab {
    work: tempfile::TempDir,
    full: Arc<InstallContext>,
    three: Arc<InstallContext>,
}

fn lab() -> Lab {
    let work = tempfile::tempdir().expect("tempdir");
    let full = load(work.path(), &lab5_text(|t| t), &lab_catalog());
    let three = with_nodes(&full, &["node1", "node2", "node3"]);
    Lab { work, full, three }
}

#[test]
fn diff_names_added_nodes_and_refuses_other_changes_by_path() {
    let l = lab();
    let change = diff(&l.three.cluster, &l.full.cluster, "`cluster.yaml`");
    let added: Vec<(&str, Vec<String>)> = change
        .added
        .iter()
        .map(|a| (a.name.as_str(), a.roles.clone()))
        .collect();
    assert_eq!(
        added,
        vec![
            ("node4", vec!["worker".to_string()]),
            ("node5", vec!["master".to_string()])
        ]
    );
    assert!(change.removed.is_empty() && change.roles.is_empty());
    assert!(change.problems.is_empty(), "{:?}", change.problems);
    insta::assert_snapshot!("diff-add-two", change.to_string());

    let work = tempfile::tempdir().expect("tempdir");
    let edited = load(
        work.path(),
        &lab5_text(|t| {
            t.edit("version: v1.33.11", "version: v1.33.11\n    maxPods: 200")
                .edit("address: 10.88.10.12,", "address: 10.88.10.42,")
                .edit(
                    "    master: [\"node[1:3]\", node5]",
                    "    master: [node1, node2, node5]",
                )
        }),
        &lab_catalog(),
    );
    let change = diff(&l.three.cluster, &edited.cluster, "`cluster.yaml`");
    let text = change.to_string();
    assert!(
        text.contains("spec.kubernetes.maxPods: is `200` in `cluster.yaml`"),
        "{text}"
    );
    assert!(
        text.contains("spec.hosts[1].address: node2 has address `10.88.10.12`"),
        "{text}"
    );
    assert!(text.contains("~ node3 roles -master"), "{text}");
    assert_eq!(change.problems.len(), 2, "{text}");
}

#[test]
fn add_worker_plan_kubeadm_path() {
    let l = lab();
    let four = with_nodes(&l.full, &["node1", "node2", "node3", "node4"]);
    let facts = ClusterFacts::assumed(&l.three);
    let new = vec!["node4".to_string()];
    let v = check_add(&l.three, &four, &new, &facts, Guards::default());
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    let p = add_plan(&l.three, &four, &new, &facts);
    assert_eq!(hosts(&p, "preflight", "check-nodes"), ["node4"]);
    // Every node's /etc/hosts block and chrony name node4.
    assert_eq!(
        hosts(&p, "node-prep", "prepare-nodes"),
        ["node1", "node2", "node3", "node4"]
    );
    let text = p.to_text();
    assert!(
        text.contains("10.88.10.14 node4"),
        "the hosts block lists node4"
    );
    assert!(phase(&p, "loadbalancer").skipped.is_some());
    assert!(phase(&p, "etcd-join").skipped.is_some());
    assert_eq!(hosts(&p, "runtime", "install-containerd"), ["node4"]);
    assert_eq!(hosts(&p, "registry", "trust-registry"), ["node4"]);
    assert_eq!(hosts(&p, "kubeadm", "join-credentials"), ["node1"]);
    assert_eq!(hosts(&p, "kubeadm", "join-workers"), ["node4"]);
    assert_eq!(hosts(&p, "kubeadm", "node-roles"), ["node1"]);
    assert!(!phase(&p, "kubeadm")
        .tasks
        .iter()
        .any(|t| t.name == "kube-vip-first-master" || t.name == "join-control-plane"));
    assert!(position(&p, "runtime") < position(&p, "kubeadm"));
    insta::assert_snapshot!("add-worker-kubeadm-outline", outline(&p));
    let text = text.edit(&l.work.path().display().to_string(), "WORK");
    insta::assert_snapshot!("add-worker-kubeadm-plan", without_generated_keys(&text));
}

/// An operator's `system.preInstall` / `postInstall` scripts (e.g. the CNI they bring with
/// `network.plugin: none`, without which a new node never turns Ready) run on the joining node
/// only: first after preflight, last after the pod network, as the create pipeline runs them.
#[test]
fn add_node_runs_the_operators_scripts_on_the_new_node_only() {
    let work = tempfile::tempdir().expect("tmp");
    let dir = work.path().join("scripts");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for f in ["prepare.sh", "cni.sh"] {
        std::fs::write(dir.join(f), "#!/bin/sh\nexit 0\n").expect("script");
    }
    let text = lab5_text(|t| {
        t.edit(
            "  system:\n",
            &format!(
                "  system:\n    preInstall: [{d}/prepare.sh]\n    postInstall: [{d}/cni.sh]\n",
                d = dir.display()
            ),
        )
    });
    assert!(
        text.contains("postInstall:"),
        "the lab cluster.yaml has a system section"
    );
    let full = load(work.path(), &text, &lab_catalog());
    let three = with_nodes(&full, &["node1", "node2", "node3"]);
    let four = with_nodes(&full, &["node1", "node2", "node3", "node4"]);
    let facts = ClusterFacts::assumed(&three);
    let new = vec!["node4".to_string()];
    let p = add_plan(&three, &four, &new, &facts);
    assert_eq!(hosts(&p, "pre-install", "pre-install"), ["node4"]);
    assert_eq!(hosts(&p, "post-install", "post-install"), ["node4"]);
    // After the OS repository, which comes right after preflight (as in the create pipeline).
    assert_eq!(position(&p, "os-repository"), position(&p, "preflight") + 1);
    assert_eq!(
        position(&p, "pre-install"),
        position(&p, "os-repository") + 1
    );
    assert_eq!(position(&p, "post-install") + 1, p.modules.len());
    assert!(position(&p, "network") < position(&p, "post-install"));
    let text = p.to_text();
    assert!(text.contains("-> /etc/kubexm/scripts/post_install_node4.sh (755)"));
    assert!(
        !text.contains("post_install_node1"),
        "existing nodes do not run the scripts again"
    );
}

#[test]
fn add_master_plan_kubeadm_path_updates_every_load_balancer_one_at_a_time() {
    let l = lab();
    let four = with_nodes(&l.full, &["node1", "node2", "node3", "node5"]);
    let facts = ClusterFacts::assumed(&l.three);
    let new = vec!["node5".to_string()];
    let v = check_add(&l.three, &four, &new, &facts, Guards::default());
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    let p = add_plan(&l.three, &four, &new, &facts);
    let lb = phase(&p, "loadbalancer");
    let install = lb
        .tasks
        .iter()
        .find(|t| t.name == "install-loadbalancer")
        .expect("install-loadbalancer");
    assert_eq!(install.hosts, ["node1", "node2", "node3"]);
    assert!(!install.parallel, "one load balancer at a time");
    let text = p.to_text();
    assert!(
        text.contains("systemctl reload-or-restart haproxy (when changed)"),
        "haproxy reloads"
    );
    // The new master's client certificate for etcd, and its control-plane join.
    assert_eq!(
        hosts(&p, "etcd-certificates", "etcd-certificates"),
        ["node5"]
    );
    assert_eq!(hosts(&p, "kubeadm", "join-control-plane"), ["node5"]);
    assert!(position(&p, "loadbalancer") < position(&p, "kubeadm"));
    // Every master's API server certificate gets node5 in its SANs, after node5 joined.
    assert_eq!(
        hosts(&p, "apiserver-certificates", "kubeadm-reconfigure"),
        ["node1", "node2", "node3", "node5"]
    );
    assert_eq!(
        position(&p, "apiserver-certificates"),
        position(&p, "kubeadm") + 1
    );
    insta::assert_snapshot!("add-master-kubeadm-outline", outline(&p));
    // The backends every haproxy gets.
    let cfg = kubexm_install::modules::loadbalancer::api_backends(&four).expect("backends");
    let names: Vec<&str> = cfg.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["node1", "node2", "node3", "node5"]);
}

#[test]
fn delete_master_plan_drains_removes_the_member_resets_then_deletes_the_node() {
    let l = lab();
    let five = with_nodes(&l.full, &["node1", "node2", "node3", "node4", "node5"]);
    // node5 was made an etcd member (4 members), then leaves the cluster.
    let mut roles = membership(&five.cluster);
    roles.insert("node5".into(), vec!["etcd".into(), "master".into()]);
    let installed = with_roles(&l.full, &roles);
    roles.remove("node5");
    let desired = with_roles(&l.full, &roles);
    let facts = ClusterFacts::assumed(&installed);
    let v = check_delete(&installed, &desired, "node5", &facts, Guards::default());
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    let p = delete_plan(
        &installed,
        &desired,
        "node5",
        &facts,
        DrainOptions::default(),
        false,
    );
    let order = [
        "drain",
        "loadbalancer",
        "apiserver-etcd-servers",
        "etcd-member-remove",
        "delete-kubeadm",
        "delete-etcd",
        "delete-node-object",
        "apiserver-certificates",
        "node-prep",
    ];
    for w in order.windows(2) {
        assert!(
            position(&p, w[0]) < position(&p, w[1]),
            "{} before {}",
            w[0],
            w[1]
        );
    }
    assert_eq!(hosts(&p, "drain", "cordon-drain"), ["node1"]);
    assert_eq!(hosts(&p, "delete-kubeadm", "delete-kubernetes"), ["node5"]);
    // The masters that stay: API server certificates without node5.
    assert_eq!(
        hosts(&p, "apiserver-certificates", "kubeadm-reconfigure"),
        ["node1", "node2", "node3"]
    );
    assert_eq!(
        hosts(&p, "etcd-member-remove", "etcd-member-remove"),
        ["node1"]
    );
    assert_eq!(
        hosts(&p, "apiserver-etcd-servers", "apiserver-etcd-servers"),
        ["node1", "node2", "node3"]
    );
    assert_eq!(
        hosts(&p, "node-prep", "prepare-nodes"),
        ["node1", "node2", "node3", "node4"]
    );
    let text = p.to_text();
    for want in [
        "drain node5 --ignore-daemonsets --delete-emptydir-data --timeout=300s",
        "--force-drain",
        "member remove",
        "/usr/local/bin/kubeadm reset -f",
        "delete node node5",
        "--etcd-servers=https://10.88.10.11:2379,https://10.88.10.12:2379,https://10.88.10.13:2379",
    ] {
        assert!(text.contains(want), "{want} missing from the plan");
    }
    assert!(
        !text.contains("--disable-eviction"),
        "no forced drain by default"
    );
    let reset = text.find("kubeadm reset -f").expect("reset");
    let delete = text.find("delete node node5").expect("delete");
    assert!(reset < delete, "kubeadm reset before kubectl delete node");
    insta::assert_snapshot!("delete-master-kubeadm-outline", outline(&p));
    insta::assert_snapshot!("delete-master-kubeadm-plan", without_generated_keys(&text));
}

#[test]
fn delete_worker_unreachable_runs_only_cluster_side_phases() {
    let l = lab();
    let four = with_nodes(&l.full, &["node1", "node2", "node3", "node4"]);
    let three = l.three.clone();
    let mut facts = ClusterFacts::assumed(&four);
    facts.unreachable.insert("node4".into());
    facts.assumed = false;
    let refused = check_delete(&four, &three, "node4", &facts, Guards::default());
    let msg = refused
        .problems
        .iter()
        .map(ToString::to_string)
        .collect::<String>();
    assert!(msg.contains("pass --unreachable"), "{msg}");
    let g = Guards {
        unreachable: true,
        ..Guards::default()
    };
    assert!(check_delete(&four, &three, "node4", &facts, g)
        .problems
        .is_empty());
    let p = delete_plan(
        &four,
        &three,
        "node4",
        &facts,
        DrainOptions {
            force: true,
            ..DrainOptions::default()
        },
        true,
    );
    for m in &p.modules {
        for t in &m.tasks {
            assert!(
                !t.hosts.contains(&"node4".to_string()),
                "{} runs on node4",
                m.name
            );
        }
    }
    assert!(phase(&p, "drain").skipped.is_some());
    assert!(phase(&p, "delete-kubeadm").skipped.is_some());
    assert_eq!(
        hosts(&p, "delete-node-object", "delete-node-object"),
        ["node1"]
    );
    insta::assert_snapshot!("delete-worker-unreachable-outline", outline(&p));
}

#[test]
fn forced_drain_bypasses_eviction_and_says_so() {
    let l = lab();
    let four = with_nodes(&l.full, &["node1", "node2", "node3", "node4"]);
    let facts = ClusterFacts::assumed(&four);
    let p = delete_plan(
        &four,
        &l.three,
        "node4",
        &facts,
        DrainOptions {
            force: true,
            timeout: std::time::Duration::from_secs(120),
        },
        false,
    );
    let text = p.to_text();
    assert!(
        text.contains("drain node4 --ignore-daemonsets --delete-emptydir-data --force --disable-eviction --grace-period=30 --timeout=120s"),
        "{text}"
    );
    assert!(
        text.contains("step drain-forced (timeout 210s, 3 attempts)"),
        "{text}"
    );
}

#[test]
fn etcd_member_add_and_remove_plans() {
    let l = lab();
    let mut roles = membership(&l.three.cluster);
    let installed = l.three.clone();
    roles.insert(
        "node3".into(),
        vec!["loadbalancer".into(), "master".into(), "worker".into()],
    );
    // node3 without etcd (a 2-member cluster would be even: the checks refuse it without the
    // flag), then node3 back as a member.
    let two = with_roles(&l.full, &roles);
    let facts = ClusterFacts::assumed(&installed);
    let v = check_etcd_remove(&installed, "node3", &facts, Guards::default());
    let msg: String = v.problems.iter().map(ToString::to_string).collect();
    assert!(
        msg.contains("leaves 2 etcd members, an even number"),
        "{msg}"
    );
    assert!(msg.contains("--allow-even-etcd"), "{msg}");
    let g = Guards {
        allow_even_etcd: true,
        ..Guards::default()
    };
    assert!(check_etcd_remove(&installed, "node3", &facts, g)
        .problems
        .is_empty());
    let remove = build(
        &remove_member_pipeline(&EtcdChange {
            installed: &installed,
            desired: &two,
            node: "node3",
            facts: &facts,
        })
        .expect("pipeline"),
        &installed,
    );
    assert!(position(&remove, "apiserver-etcd-servers") < position(&remove, "etcd-member-remove"));
    assert_eq!(hosts(&remove, "etcd-retire", "etcd-retire"), ["node3"]);
    let rtext = remove.to_text();
    assert!(rtext.contains("--etcd-servers=https://10.88.10.11:2379,https://10.88.10.12:2379"));
    assert!(rtext.contains("init phase upload-config kubeadm"));
    insta::assert_snapshot!("etcd-remove-member-plan", without_generated_keys(&rtext));

    let facts2 = ClusterFacts::assumed(&two);
    let v = check_etcd_add(&two, &installed, "node3", &facts2, Guards::default());
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    let add = build(
        &add_member_pipeline(&EtcdChange {
            installed: &two,
            desired: &installed,
            node: "node3",
            facts: &facts2,
        })
        .expect("pipeline"),
        &installed,
    );
    assert_eq!(hosts(&add, "etcd-join", "etcd-member-add"), ["node1"]);
    assert_eq!(hosts(&add, "etcd-join", "install-etcd"), ["node3"]);
    assert!(position(&add, "etcd-join") < position(&add, "apiserver-etcd-servers"));
    let atext = add.to_text();
    assert!(
        atext.contains("member add node3 --peer-urls=https://10.88.10.13:2380"),
        "{atext}"
    );
    insta::assert_snapshot!("etcd-add-member-plan", without_generated_keys(&atext));
}

#[test]
fn the_joining_member_starts_with_initial_cluster_state_existing() {
    let l = lab();
    let mut layout = kubexm_install::modules::etcd::EtcdLayout::from_context(&l.three);
    let fresh = layout.render_config("node3").expect("config");
    assert!(fresh.contains("initial-cluster-state: \"new\""), "{fresh}");
    layout.joining.insert("node3".into());
    let joining = layout.render_config("node3").expect("config");
    assert!(
        joining.contains("initial-cluster-state: \"existing\""),
        "{joining}"
    );
    assert!(joining.contains(
        "initial-cluster: \"node1=https://10.88.10.11:2380,node2=https://10.88.10.12:2380,node3=https://10.88.10.13:2380\""
    ));
}

#[test]
fn checks_refuse_the_last_master_quorum_loss_and_two_changes_at_once() {
    let l = lab();
    // The last master.
    let one = with_nodes(&l.full, &["node1", "node4"]);
    let worker_only = with_nodes(&l.full, &["node4"]);
    let facts = ClusterFacts::assumed(&one);
    let v = check_delete(&one, &worker_only, "node1", &facts, Guards::default());
    let msg: String = v.problems.iter().map(|p| format!("{p}\n")).collect();
    assert!(msg.contains("node1 is the last master"), "{msg}");
    assert!(msg.contains("runs the private registry"), "{msg}");
    assert!(msg.contains("take their time from node1"), "{msg}");

    // Quorum: with node2 unhealthy, removing node3 leaves 2 members, 1 healthy.
    let mut facts = ClusterFacts::assumed(&l.three);
    facts.assumed = false;
    let etcd = facts.etcd.as_mut().expect("etcd facts");
    etcd.health = vec![
        EndpointHealth {
            endpoint: "https://10.88.10.11:2379".into(),
            health: true,
            error: None,
        },
        EndpointHealth {
            endpoint: "https://10.88.10.12:2379".into(),
            health: false,
            error: Some("context deadline exceeded".into()),
        },
        EndpointHealth {
            endpoint: "https://10.88.10.13:2379".into(),
            health: true,
            error: None,
        },
    ];
    let g = Guards {
        allow_even_etcd: true,
        ..Guards::default()
    };
    let v = check_etcd_remove(&l.three, "node3", &facts, g);
    let msg: String = v.problems.iter().map(|p| format!("{p}\n")).collect();
    assert!(
        msg.contains("of which 1 are healthy, below the quorum of 2"),
        "{msg}"
    );
    // Adding needs every member healthy.
    let mut roles = membership(&l.three.cluster);
    roles.insert("node4".into(), vec!["etcd".into(), "worker".into()]);
    let four = with_roles(&l.full, &roles);
    let with_worker = with_nodes(&l.full, &["node1", "node2", "node3", "node4"]);
    let v = check_etcd_add(&with_worker, &four, "node4", &facts, g);
    let msg: String = v.problems.iter().map(|p| format!("{p}\n")).collect();
    assert!(msg.contains("member node2 is not healthy"), "{msg}");

    // Two etcd members in one add-node.
    let text = lab5_text(|t| t.edit("    etcd: [\"node[1:3]\"]", "    etcd: [\"node[1:5]\"]"));
    let work = tempfile::tempdir().expect("tempdir");
    let five = load(work.path(), &text, &lab_catalog());
    let three = with_nodes(&five, &["node1", "node2", "node3"]);
    let new = vec!["node4".to_string(), "node5".to_string()];
    let v = check_add(&three, &five, &new, &ClusterFacts::assumed(&three), g);
    let msg: String = v.problems.iter().map(|p| format!("{p}\n")).collect();
    assert!(msg.contains("2 new etcd members (node4, node5)"), "{msg}");
    assert!(msg.contains("one member at a time"), "{msg}");
}

#[test]
fn stacked_etcd_masters_join_one_at_a_time() {
    let text = lab5_text(|t| {
        t.edit("  etcd:\n    type: kubexm\n    version: v3.4.23\n", "  etcd:\n    type: kubeadm\n")
            .edit("    etcd: [\"node[1:3]\"]\n", "")
            .edit(
                "    - {name: node4, address: 10.88.10.14,",
                "    - {name: node6, address: 10.88.10.16, user: root}\n    - {name: node4, address: 10.88.10.14,",
            )
            .edit("    master: [\"node[1:3]\", node5]", "    master: [\"node[1:3]\", node5, node6]")
    });
    let work = tempfile::tempdir().expect("tempdir");
    let full = load(work.path(), &text, &lab_catalog());
    let three = with_nodes(&full, &["node1", "node2", "node3"]);
    let new = vec!["node5".to_string(), "node6".to_string()];
    let v = check_add(
        &three,
        &full,
        &new,
        &ClusterFacts::assumed(&three),
        Guards::default(),
    );
    let msg: String = v.problems.iter().map(|p| format!("{p}\n")).collect();
    assert!(
        msg.contains("2 new masters: each one adds a stacked etcd member"),
        "{msg}"
    );
    // One stacked master leaving: kubeadm reset removes its member, checked gone after.
    let four = with_nodes(&full, &["node1", "node2", "node3", "node5"]);
    let facts = ClusterFacts::assumed(&four);
    let p = delete_plan(
        &four,
        &three,
        "node5",
        &facts,
        DrainOptions::default(),
        false,
    );
    assert!(position(&p, "delete-kubeadm") < position(&p, "stacked-etcd-member"));
    assert!(position(&p, "stacked-etcd-member") < position(&p, "delete-node-object"));
    let text = p.to_text();
    assert!(text.contains("exec etcd-node1 -- etcdctl"), "{text}");
    assert!(text.contains("etcd member node5 gone"), "{text}");
}

fn kubexm_fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kubexm")
        .join(name)
}

#[test]
fn kubexm_path_add_master_reissues_the_api_server_certificate_one_master_at_a_time() {
    let work = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(kubexm_fixture("cluster.yaml"))
        .expect("fixture")
        .edit(
            "  roleGroups:\n",
            "    - {name: master4, address: 192.168.50.14}\n    - {name: worker3, address: 192.168.50.23}\n  roleGroups:\n",
        )
        .edit("    master: [\"master[1:3]\"]", "    master: [\"master[1:4]\"]")
        .edit("    worker: [\"worker[1:2]\"]", "    worker: [\"worker[1:3]\"]");
    let full = load(work.path(), &text, &kubexm_fixture("catalog-stand-in.yaml"));
    let installed = with_nodes(
        &full,
        &["master1", "master2", "master3", "worker1", "worker2"],
    );
    let facts = ClusterFacts::assumed(&installed);
    // A worker: only its own certificates and services.
    let plus_worker = with_nodes(
        &full,
        &[
            "master1", "master2", "master3", "worker1", "worker2", "worker3",
        ],
    );
    let new = vec!["worker3".to_string()];
    let p = add_plan(&installed, &plus_worker, &new, &facts);
    assert_eq!(
        hosts(&p, "kubexm-certs", "kubernetes-certificates"),
        ["worker3"]
    );
    assert_eq!(
        hosts(&p, "kubexm-nodes", "install-node-services"),
        ["master1", "worker3"]
    );
    assert_eq!(hosts(&p, "kubexm-nodes", "register-nodes"), ["master1"]);
    assert!(phase(&p, "kubexm-control-plane").skipped.is_some());
    insta::assert_snapshot!("add-worker-kubexm-outline", outline(&p));

    // A master: every master's certificates again (the API server's SANs name master4), one
    // master at a time; its control plane; the load balancers.
    let plus_master = with_nodes(
        &full,
        &[
            "master1", "master2", "master3", "master4", "worker1", "worker2",
        ],
    );
    let new = vec!["master4".to_string()];
    let p = add_plan(&installed, &plus_master, &new, &facts);
    let certs = phase(&p, "kubexm-certs")
        .tasks
        .iter()
        .find(|t| t.name == "kubernetes-certificates")
        .expect("certs");
    assert_eq!(certs.hosts, ["master1", "master2", "master3", "master4"]);
    assert!(!certs.parallel);
    assert_eq!(
        hosts(&p, "kubexm-control-plane", "install-control-plane"),
        ["master4"]
    );
    assert_eq!(
        hosts(&p, "etcd-certificates", "etcd-certificates"),
        ["master4"]
    );
    let spec = kubexm_install::modules::kubexm::certs::apiserver_spec(
        &kubexm_install::modules::kubexm::KubexmCluster::new(&plus_master).expect("cluster"),
    )
    .expect("spec");
    assert!(format!("{spec:?}").contains("192.168.50.14"), "{spec:?}");
    insta::assert_snapshot!("add-master-kubexm-outline", outline(&p));

    // etcd add-member on the kubexm path: the API server units follow, one master at a time.
    let mut roles = membership(&plus_master.cluster);
    roles.insert("master4".into(), vec!["etcd".into(), "master".into()]);
    let with_member = with_roles(&full, &roles);
    let add = build(
        &add_member_pipeline(&EtcdChange {
            installed: &plus_master,
            desired: &with_member,
            node: "master4",
            facts: &ClusterFacts::assumed(&plus_master),
        })
        .expect("pipeline"),
        &with_member,
    );
    let t = phase(&add, "apiserver-etcd-servers")
        .tasks
        .iter()
        .find(|t| t.name == "apiserver-etcd-servers")
        .expect("task");
    assert!(!t.parallel);
    let atext = add.to_text();
    assert!(atext.contains("https://192.168.50.14:2379"), "{atext}");
    insta::assert_snapshot!("etcd-add-member-kubexm-outline", outline(&add));
}

/// `kubexm-install ARGS` in `work`.
pub(crate) fn cli(work: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubexm-install"))
        .arg("--work-dir")
        .arg(work)
        .args(args)
        .output()
        .expect("run kubexm-install")
}

#[test]
fn cli_day2_commands_are_discoverable_and_need_a_recorded_cluster() {
    let work = tempfile::tempdir().expect("tempdir");
    let top = cli(work.path(), &["--help"]);
    let help = String::from_utf8_lossy(&top.stdout);
    for verb in ["add-node", "delete-node", "etcd"] {
        assert!(help.contains(verb), "{verb} missing from --help:\n{help}");
    }
    let h = cli(work.path(), &["add-node", "--help"]);
    let h = String::from_utf8_lossy(&h.stdout);
    assert!(
        h.contains("Examples:") && h.contains("--dry-run") && h.contains("--resume"),
        "{h}"
    );
    let h = cli(work.path(), &["delete-node", "--help"]);
    let h = String::from_utf8_lossy(&h.stdout);
    assert!(
        h.contains("--force-drain") && h.contains("--unreachable"),
        "{h}"
    );
    let h = cli(work.path(), &["etcd", "--help"]);
    let h = String::from_utf8_lossy(&h.stdout);
    assert!(
        h.contains("add-member") && h.contains("remove-member"),
        "{h}"
    );

    let out = cli(work.path(), &["delete-node", "--node", "node3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no cluster is recorded"), "{err}");
    let file = work.path().join("cluster.yaml");
    std::fs::write(&file, lab5_text(|t| t)).expect("write");
    let out = cli(
        work.path(),
        &["add-node", "-f", file.to_str().expect("utf-8"), "--dry-run"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no record of cluster lab"), "{err}");
    assert!(err.contains("kubexm-install install"), "{err}");
}

/// `apply`'s view of an edited cluster.yaml (issue 17 groundwork): feature gates and component
/// flags, kube-proxy's mode, NTP and the load balancer are grouped for applying; the pod CIDR,
/// the version, the cluster domain, etcd and the runtime are refused with what to do.
#[test]
fn apply_groups_what_changes_in_place_and_refuses_the_rest() {
    use kubexm_install::apply_change::{classify, Group};
    let l = lab();
    let work = tempfile::tempdir().expect("tempdir");
    let unchanged = classify(&l.full.cluster, &l.full.cluster, "`cluster.yaml`");
    assert!(unchanged.applied.is_empty() && unchanged.refused.is_empty());
    assert!(unchanged.to_string().contains("no change"));

    let edited = load(
        work.path(),
        &lab5_text(|t| {
            t.edit(
                "    version: v1.33.11\n",
                "    version: v1.33.11\n    proxyMode: ipvs\n    featureGates: {GracefulNodeShutdown: true}\n    apiserverArgs: {audit-log-maxage: \"7\"}\n    kubeletArgs: {max-open-files: \"500000\"}\n",
            )
            .edit("    ntpServers: [node1]", "    ntpServers: [node1, node2]")
            .edit("    interface: eth0", "    interface: eth1")
        }),
        &lab_catalog(),
    );
    let change = classify(&l.full.cluster, &edited.cluster, "`cluster.yaml`");
    let groups: Vec<(Group, &str)> = change
        .applied
        .iter()
        .map(|a| (a.group, a.path.as_str()))
        .collect();
    assert_eq!(
        groups,
        vec![
            (
                Group::ControlPlane,
                "spec.kubernetes.apiserverArgs.audit-log-maxage"
            ),
            (
                Group::ControlPlane,
                "spec.kubernetes.featureGates.GracefulNodeShutdown"
            ),
            (Group::Kubelet, "spec.kubernetes.kubeletArgs.max-open-files"),
            (Group::KubeProxy, "spec.kubernetes.proxyMode"),
            (Group::Nodes, "spec.system.ntpServers"),
            (Group::LoadBalancer, "spec.loadBalancer.interface"),
        ],
        "{change}"
    );
    assert!(change.refused.is_empty(), "{change}");
    let text = change.to_string();
    assert!(
        text.contains("~ spec.kubernetes.proxyMode: unset -> `\"ipvs\"`")
            || text.contains("~ spec.kubernetes.proxyMode: `\"iptables\"` -> `\"ipvs\"`"),
        "{text}"
    );

    let refused = load(
        work.path(),
        &lab5_text(|t| {
            t.edit(
                "  network:\n    plugin: flannel",
                "  network:\n    plugin: calico\n    podCidr: 10.200.0.0/16",
            )
            .edit(
                "version: v1.33.11",
                "version: v1.34.3\n    dnsDomain: corp.local",
            )
            .edit("    version: v3.4.23", "    version: v3.5.21")
            .edit("    type: containerd", "    type: cri-o")
        }),
        &lab_catalog(),
    );
    let change = classify(&l.full.cluster, &refused.cluster, "`cluster.yaml`");
    let paths: Vec<&str> = change.refused.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "spec.network.podCidr",
        "spec.network.plugin",
        "spec.kubernetes.version",
        "spec.kubernetes.dnsDomain",
        "spec.etcd.version",
        "spec.runtime.type",
    ] {
        assert!(paths.contains(&want), "{want} not refused: {change}");
    }
    let version = change
        .refused
        .iter()
        .find(|p| p.path == "spec.kubernetes.version")
        .expect("version");
    assert!(version.hint.contains("an upgrade"), "{version}");
    let cidr = change
        .refused
        .iter()
        .find(|p| p.path == "spec.network.podCidr")
        .expect("cidr");
    assert!(
        cidr.message
            .contains("`\"10.200.0.0/16\"` in `cluster.yaml`"),
        "{cidr}"
    );
    assert!(
        !change
            .applied
            .iter()
            .any(|a| a.path == "spec.network.plugin"),
        "{change}"
    );

    // The control-plane endpoint does not move, and what apply cannot take out of a running
    // cluster is not turned off.
    let secured = load(
        work.path(),
        &lab5_text(|t| {
            t.edit(
                "    version: v1.33.11\n",
                "    version: v1.33.11\n    securityEnhancement: true\n",
            )
        }),
        &lab_catalog(),
    );
    let moved = load(
        work.path(),
        &lab5_text(|t| t.edit("    vip: 10.88.10.100", "    vip: 10.88.10.101")),
        &lab_catalog(),
    );
    let change = classify(&secured.cluster, &moved.cluster, "`cluster.yaml`");
    let paths: Vec<&str> = change.refused.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.kubernetes.securityEnhancement",
            "spec.loadBalancer.vip"
        ],
        "{change}"
    );
    assert!(change.applied.is_empty(), "{change}");
    assert!(
        change.refused[0].message.contains("does not take it out"),
        "{change}"
    );
}

/// `apply` of feature gates and kube-proxy's mode on both paths: the change as shown, and the
/// plan's shape. kubeadm: the control plane one master at a time, then every kubelet one node at
/// a time (masters first; the first master alone uploads the kubelet ConfigMap), then
/// kube-proxy's ConfigMap and DaemonSet from the first master. kubexm: each master's units one
/// master at a time, each answering before the next.
#[test]
fn apply_plans_on_both_paths() {
    use kubexm_install::apply_change::classify;
    use kubexm_install::pipelines::apply::apply_pipeline;
    let edit = |t: &str, version: &str| {
        t.edit(
            &format!("    version: {version}\n"),
            &format!("    version: {version}\n    proxyMode: ipvs\n    featureGates: {{RotateKubeletServerCertificate: true}}\n"),
        )
    };

    // kubeadm path (the lab's cluster).
    let l = lab();
    let work = tempfile::tempdir().expect("tempdir");
    let edited = load(
        work.path(),
        &lab5_text(|t| edit(&t, "v1.33.11")),
        &lab_catalog(),
    );
    let change = classify(&l.full.cluster, &edited.cluster, "`cluster.yaml`");
    assert!(change.refused.is_empty(), "{change}");
    let p = build(&apply_pipeline(&edited, None), &edited);
    assert_eq!(p.pipeline, "apply");
    assert_eq!(
        hosts(&p, "kubeadm", "kubelet-settings"),
        ["node1", "node2", "node3", "node5", "node4"]
    );
    assert_eq!(hosts(&p, "kubeadm", "kube-proxy-settings"), ["node1"]);
    let text = p.to_text();
    assert!(
        text.contains(
            "init phase kubelet-start --config /etc/kubernetes/kubexm/kubeadm-reconfigure.yaml"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "init phase addon kube-proxy --config /etc/kubernetes/kubexm/kubeadm-reconfigure.yaml"
        ),
        "{text}"
    );
    assert_eq!(
        text.matches("init phase upload-config kubelet").count(),
        1,
        "only the first master uploads the kubelet ConfigMap"
    );
    insta::assert_snapshot!("apply-kubeadm", format!("{change}\n{}", outline(&p)));

    // kubexm path.
    let work = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(kubexm_fixture("cluster.yaml")).expect("fixture");
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("version: v1."))
        .map(|v| format!("v1.{v}"))
        .expect("a Kubernetes version in the fixture");
    let installed = load(work.path(), &text, &kubexm_fixture("catalog-stand-in.yaml"));
    let edited = load(
        work.path(),
        &edit(&text, &version),
        &kubexm_fixture("catalog-stand-in.yaml"),
    );
    let change = classify(&installed.cluster, &edited.cluster, "`cluster.yaml`");
    assert!(change.refused.is_empty(), "{change}");
    let p = build(&apply_pipeline(&edited, None), &edited);
    let cp = phase(&p, "kubexm-control-plane");
    let task = cp
        .tasks
        .iter()
        .find(|t| t.name == "install-control-plane")
        .expect("install-control-plane");
    assert!(!task.parallel, "one master at a time");
    assert_eq!(
        task.steps.last().map(|s| s.name.as_str()),
        Some("wait-control-plane"),
        "each master answers before the next changes"
    );
    let k = kubexm_install::modules::kubexm::KubexmCluster::new(&edited).expect("cluster");
    let master = edited.node("master1").expect("master1");
    assert_eq!(
        kubexm_install::modules::kubexm::control_plane::apiserver_flags(&k, master)
            .get("feature-gates"),
        Some("RotateKubeletServerCertificate=true")
    );
    insta::assert_snapshot!("apply-kubexm", format!("{change}\n{}", outline(&p)));
}

/// `apply` of a pod network plugin change (flannel to calico on the lab): refused without the
/// confirmation, with it shown with its warning; the plan removes flannel before the network
/// module installs calico, removes flannel's traces from every node, then recreates the pods one
/// node at a time, masters first.
#[test]
fn apply_of_a_network_plugin_change_removes_the_old_plugin_first() {
    use kubexm_install::apply_change::{classify, classify_with, Group};
    use kubexm_install::pipelines::apply::apply_pipeline;
    let l = lab();
    let edited = load(
        l.work.path(),
        &lab5_text(|t| t.edit("    plugin: flannel\n", "    plugin: calico\n")),
        &lab_catalog(),
    );
    let refused = classify(&l.full.cluster, &edited.cluster, "`cluster.yaml`");
    let plugin = refused
        .refused
        .iter()
        .find(|p| p.path == "spec.network.plugin")
        .unwrap_or_else(|| panic!("the plugin change is refused: {refused}"));
    assert!(
        plugin.hint.contains("--allow-network-plugin-change"),
        "{plugin}"
    );
    assert!(
        plugin.message.contains("from flannel to calico"),
        "{plugin}"
    );
    assert!(refused.plugin_change.is_none());

    let change = classify_with(&l.full.cluster, &edited.cluster, "`cluster.yaml`", true);
    assert!(change.refused.is_empty(), "{change}");
    assert!(
        change
            .applied
            .iter()
            .any(|a| a.group == Group::NetworkPlugin && a.path == "spec.network.plugin"),
        "{change}"
    );
    let shown = change.to_string();
    assert!(
        shown.contains("WARNING: the pod network changes from flannel to calico"),
        "{shown}"
    );

    let p = build(&apply_pipeline(&edited, change.plugin_change), &edited);
    let (out, net, pods) = (
        position(&p, "network-switch-out"),
        position(&p, "network"),
        position(&p, "network-switch-pods"),
    );
    assert_eq!((out + 1, net + 1), (net, pods), "{}", outline(&p));
    assert_eq!(
        hosts(&p, "network-switch-out", "remove-old-network"),
        ["node1"]
    );
    assert_eq!(
        hosts(&p, "network-switch-out", "remove-old-network-traces"),
        ["node1", "node2", "node3", "node5", "node4"]
    );
    let recreate: Vec<&str> = phase(&p, "network-switch-pods")
        .tasks
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        recreate,
        [
            "recreate-pods-node1",
            "recreate-pods-node2",
            "recreate-pods-node3",
            "recreate-pods-node5",
            "recreate-pods-node4",
            "network-switch-end"
        ]
    );
    let text = p.to_text();
    for want in [
        "delete --ignore-not-found --timeout=300s -f /etc/kubernetes/kubexm/manifests/kube-flannel.yml",
        "upgrade --install calico",
        "spec.nodeName=node4",
        "grep -vE 'FLANNEL'",
    ] {
        assert!(text.contains(want), "{want} missing from the plan");
    }
    // The old plugin goes before the new one is installed.
    let removed = text.find("kube-flannel.yml >/dev/null").expect("removal");
    let installed = text.find("upgrade --install calico").expect("install");
    assert!(removed < installed);
    assert!(
        !text.contains("grep -vE 'KUBE-"),
        "kube-proxy's chains stay"
    );
    insta::assert_snapshot!(
        "apply-network-plugin-change",
        format!("{change}\n{}", outline(&p))
    );

    // No plugin change: no switch modules.
    let p = build(&apply_pipeline(&l.full, None), &l.full);
    assert!(!outline(&p).contains("network-switch"), "{}", outline(&p));
}
