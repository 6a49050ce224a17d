//! Scopes: the create pipeline's modules restricted to some nodes (as add-node reuses them),
//! planned without connecting anywhere.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use kubexm_install::context::{load_context, scoped, InstallContext, Scope};
use kubexm_install::pipeline::plan;
use kubexm_install::pipelines::install_pipeline;
use kubexm_install::run::CONTROL_HOST;

fn lab_context(work: &std::path::Path) -> Arc<InstallContext> {
    let lab = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab");
    Arc::new(
        load_context(
            &lab.join("cluster.yaml"),
            Some(&lab.join("mirror/catalog-lab.yaml")),
            None,
            work,
        )
        .expect("lab context"),
    )
}

#[test]
fn scope_all_leaves_the_create_plan_unchanged() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = lab_context(work.path());
    let nodes = ctx.plan_nodes();
    let plain = plan::build(&install_pipeline(&ctx), &nodes, &Default::default())
        .expect("plan")
        .to_text();
    let all = plan::build(
        &scoped(install_pipeline(&ctx), &Scope::All),
        &nodes,
        &Default::default(),
    )
    .expect("plan")
    .to_text();
    assert!(plain.contains("task kubeadm-init on node1"), "{plain}");
    assert_eq!(plain, all);
}

#[test]
fn a_scoped_create_pipeline_runs_only_on_the_nodes_in_scope_and_the_control_host() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = lab_context(work.path());
    let scope = ctx.scope(&["node3"]).expect("node3 is a lab node");
    let p = plan::build(
        &scoped(install_pipeline(&ctx), &scope),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    let mut hosts = BTreeSet::new();
    let mut tasks = BTreeSet::new();
    for m in &p.modules {
        for t in &m.tasks {
            assert!(!t.hosts.is_empty(), "{}/{} has no host", m.name, t.name);
            hosts.extend(t.hosts.iter().cloned());
            tasks.insert(format!("{}/{}", m.name, t.name));
        }
    }
    assert_eq!(
        hosts,
        BTreeSet::from(["node3".to_string(), CONTROL_HOST.to_string()])
    );
    // node3 (a master) is prepared, gets its runtime and joins; `kubeadm init` runs on the
    // first master, out of scope.
    for want in [
        "preflight/check-nodes",
        "node-prep/prepare-nodes",
        "runtime/install-containerd",
        "kubeadm/join-control-plane",
    ] {
        assert!(tasks.contains(want), "{want} missing from {tasks:?}");
    }
    assert!(!tasks.contains("kubeadm/kubeadm-init"), "{tasks:?}");
}

#[test]
fn a_scope_refuses_a_node_cluster_yaml_does_not_name() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = lab_context(work.path());
    let err = ctx
        .scope(&["node3", "node9"])
        .expect_err("node9 is unknown");
    let msg = err.to_string();
    assert!(msg.contains("\"node9\""), "{msg}");
    assert!(msg.contains("node1, node2, node3"), "{msg}");
}
