//! Finalization (issue 19; the seed's ChownModule): the admin kubeconfig in `~/.kube/config` of
//! every master's SSH user that is not root, on both paths, planned only where it applies.

use kubexm_install::modules::finalize::FinalizeModule;
use kubexm_install::pipeline::ops::Op;
use kubexm_install::pipeline::{Facts, Module};

use crate::versions::cluster;

fn ops_on(module: &FinalizeModule, node: &str) -> Vec<String> {
    let ctx = &module.0;
    let tasks = module.tasks().expect("tasks");
    let n = ctx.node(node).expect("node");
    tasks
        .iter()
        .filter(|t| t.hosts.iter().any(|h| h == node))
        .flat_map(|t| t.steps.iter())
        .flat_map(|s| s.ops(n, &Facts::default()).expect("ops"))
        .map(|op| match op {
            Op::Run(r) => r.command,
            other => panic!("a run command, not {other:?}"),
        })
        .collect()
}

#[test]
fn the_admin_kubeconfig_goes_to_the_masters_non_root_ssh_users() {
    let work = tempfile::tempdir().expect("tempdir");
    let ops = |t: String| {
        t.replace(
            "{name: master2, address: 192.168.50.12}",
            "{name: master2, address: 192.168.50.12, user: ops}",
        )
        .replace(
            "{name: worker1, address: 192.168.50.21}",
            "{name: worker1, address: 192.168.50.21, user: ops}",
        )
    };
    for (kind, admin) in [
        ("kubeadm", "/etc/kubernetes/admin.conf"),
        ("kubexm", "/etc/kubernetes/admin.conf"),
    ] {
        let ctx = cluster(work.path(), "v1.31.13", kind, ops);
        let m = FinalizeModule(ctx.clone());
        assert_eq!(m.skip(), None, "{kind}");
        let tasks = m.tasks().expect("tasks");
        assert_eq!(tasks.len(), 1, "{kind}");
        // Masters only (worker1's user has no admin kubeconfig to get), root's left alone.
        assert_eq!(tasks[0].hosts, ["master2"], "{kind}");
        let cmds = ops_on(&m, "master2");
        assert_eq!(cmds.len(), 1, "{kind}");
        assert!(cmds[0].contains("u=ops\n"), "{kind}: {}", cmds[0]);
        assert!(
            cmds[0].contains(&format!("install -m 0600 -o \"$u\" -g \"$g\" {admin} ")),
            "{kind}: {}",
            cmds[0]
        );
        assert!(
            cmds[0].contains("install -d -m 0700 -o \"$u\""),
            "{}",
            cmds[0]
        );
    }
    // Every master logs in as root: nothing to do, and the plan says why.
    let ctx = cluster(work.path(), "v1.31.13", "kubeadm", |t| t);
    let m = FinalizeModule(ctx);
    assert!(m
        .skip()
        .is_some_and(|s| s.contains("every master's SSH user is root")));
    assert!(m.tasks().expect("tasks").is_empty());
}
