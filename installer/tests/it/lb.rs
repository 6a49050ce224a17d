//! The external load balancer module on the lab cluster: rendered haproxy / keepalived / nginx
//! configurations (snapshots), checked by the real tools, and its skip reasons.

use std::process::Command;
use std::sync::Arc;

use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::modules::loadbalancer::{virtual_router_id, LoadBalancerModule};
use kubexm_install::pipeline::ops::Op;
use kubexm_install::pipeline::{Facts, Module};

use crate::common::Edit as _;

pub(crate) use crate::common::repo;

/// The lab cluster (tests/lab/cluster.yaml with the lab catalog), with `edit` applied to its
/// text first.
pub(crate) fn lab_context(edit: impl Fn(String) -> String) -> Arc<InstallContext> {
    let text = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab yaml");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, edit(text)).expect("write yaml");
    let catalog = repo().join("tests/lab/mirror/catalog-lab.yaml");
    Arc::new(load_context(&file, Some(&catalog), None, dir.path()).expect("lab cluster loads"))
}

/// Every rendered file of `module` per node: (node, destination, text), in task/step order.
pub(crate) fn rendered(ctx: &InstallContext, module: &dyn Module) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let nodes = ctx.plan_nodes();
    for task in module.tasks().expect("tasks") {
        for step in &task.steps {
            for host in &task.hosts {
                let node = nodes.iter().find(|n| &n.name == host).expect("node");
                for op in step.ops(node, &Facts::default()).expect("ops") {
                    if let Op::Template(t) = op {
                        out.push((
                            host.clone(),
                            t.file.dest.clone(),
                            String::from_utf8(t.text().to_vec()).expect("utf-8"),
                        ));
                    }
                }
            }
        }
    }
    out
}

pub(crate) fn file_of(files: &[(String, String, String)], node: &str, dest: &str) -> String {
    files
        .iter()
        .find(|(n, d, _)| n == node && d == dest)
        .unwrap_or_else(|| panic!("{dest} is not rendered for {node}"))
        .2
        .clone()
}

/// Runs a config checker on `text` written to a temp file; panics with its output on failure.
pub(crate) fn check_with(tool: &str, args: &[&str], text: &str, name: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write config");
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("FILE", path.to_str().expect("utf-8")))
        .collect();
    let out = Command::new(tool).args(&args).output().unwrap_or_else(|e| {
        panic!("{tool} is needed for this test (tests/run-all installs it): {e}")
    });
    assert!(
        out.status.success(),
        "{tool} {args:?} rejected the rendered {name}:\n{}{}\n---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn lab_haproxy_and_keepalived_configs() {
    let ctx = lab_context(|t| t);
    let module = LoadBalancerModule(ctx.clone());
    assert_eq!(module.skip(), None);
    let files = rendered(&ctx, &module);
    let haproxy = file_of(&files, "node1", "/etc/haproxy/haproxy.cfg");
    // The same haproxy.cfg on every load-balancer node.
    assert_eq!(
        haproxy,
        file_of(&files, "node3", "/etc/haproxy/haproxy.cfg")
    );
    assert!(haproxy.contains("bind 10.88.10.100:6443"), "{haproxy}");
    for a in ["10.88.10.11", "10.88.10.12", "10.88.10.13"] {
        assert!(haproxy.contains(&format!("{a}:6443")), "{haproxy}");
    }
    assert!(haproxy.contains("bind 127.0.0.1:8081"), "{haproxy}");
    insta::assert_snapshot!("haproxy.cfg", haproxy);

    let sysctl = file_of(&files, "node2", "/etc/sysctl.d/98-kubexm-lb.conf");
    assert!(sysctl.contains("net.ipv4.ip_nonlocal_bind = 1"), "{sysctl}");

    for (i, node) in ["node1", "node2", "node3"].iter().enumerate() {
        let k = file_of(&files, node, "/etc/keepalived/keepalived.conf");
        assert!(k.contains("state BACKUP"), "{k}");
        assert!(
            k.contains(&format!("priority {}", 150 - 10 * i)),
            "{node}: {k}"
        );
        assert!(
            k.contains(&format!("unicast_src_ip 10.88.10.1{}", i + 1)),
            "{k}"
        );
        assert!(
            !k.contains(&format!("        10.88.10.1{}\n", i + 1)),
            "a node is not its own peer: {k}"
        );
        assert!(k.contains("10.88.10.100/32 dev eth0"), "{k}");
        assert!(
            k.contains(&format!("virtual_router_id {}", virtual_router_id("lab"))),
            "{k}"
        );
        insta::assert_snapshot!(format!("keepalived.conf-{node}"), k);
    }
}

#[test]
fn lab_lb_configs_pass_the_real_tools() {
    let ctx = lab_context(|t| t);
    let files = rendered(&ctx, &LoadBalancerModule(ctx.clone()));
    check_with(
        "haproxy",
        &["-c", "-q", "-f", "FILE"],
        &file_of(&files, "node1", "/etc/haproxy/haproxy.cfg"),
        "haproxy.cfg",
    );
    for node in ["node1", "node2", "node3"] {
        check_with(
            "keepalived",
            &["-t", "-f", "FILE"],
            &file_of(&files, node, "/etc/keepalived/keepalived.conf"),
            "keepalived.conf",
        );
    }
}

#[test]
fn kubexm_kn_renders_an_nginx_stream_proxy_that_nginx_accepts() {
    let ctx = lab_context(|t| t.edit("type: kubexm-kh", "type: kubexm-kn"));
    let module = LoadBalancerModule(ctx.clone());
    assert_eq!(module.skip(), None);
    let files = rendered(&ctx, &module);
    let nginx = file_of(&files, "node1", "/etc/nginx/nginx.conf");
    assert!(nginx.contains("stream {"), "{nginx}");
    assert!(nginx.contains("listen 10.88.10.100:6443;"), "{nginx}");
    insta::assert_snapshot!("nginx.conf", nginx);
    let k = file_of(&files, "node2", "/etc/keepalived/keepalived.conf");
    assert!(
        k.contains("/usr/bin/systemctl is-active --quiet nginx"),
        "{k}"
    );
    // The `kubexm-lb` user is created on the nodes by the step; this host may not have it.
    let local = nginx.edit("user kubexm-lb;", "user nobody nogroup;");
    // `nginx -t` binds its listeners: run it in a network namespace of its own with
    // ip_nonlocal_bind=1, as the node has it (the lb-nonlocal-bind step runs first).
    check_with(
        "unshare",
        &[
            "-n",
            "sh",
            "-c",
            "sysctl -qw net.ipv4.ip_nonlocal_bind=1 && nginx -q -t -c FILE",
        ],
        &local,
        "nginx.conf",
    );
}

#[test]
fn other_load_balancer_modes_are_skipped_with_a_reason() {
    let no_group = |t: String| t.edit("    loadbalancer: [\"node[1:3]\"]\n", "");
    let internal = lab_context(|t| {
        no_group(t)
            .edit("mode: external", "mode: internal")
            .edit("    external:\n      type: kubexm-kh\n", "")
    });
    let reason = LoadBalancerModule(internal).skip().expect("skipped");
    assert!(reason.contains("mode is internal"), "{reason}");

    let unmanaged = lab_context(|t| no_group(t).edit("type: kubexm-kh", "type: external"));
    let reason = LoadBalancerModule(unmanaged).skip().expect("skipped");
    assert!(reason.contains("not managed by KubeXM"), "{reason}");
}

#[test]
fn virtual_router_id_is_stable_and_in_range() {
    assert_eq!(virtual_router_id("lab"), virtual_router_id("lab"));
    for name in ["", "lab", "demo", "a-very-long-cluster-name-0123456789"] {
        let id = virtual_router_id(name);
        assert!((1..=255).contains(&id), "{name}: {id}");
    }
    assert_ne!(virtual_router_id("lab"), virtual_router_id("demo"));
}

#[test]
fn lab_plan_shows_the_load_balancer_and_runtime_tasks() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_kubexm-install"))
        .arg("--work-dir")
        .arg(work.path())
        .args(["plan", "-f"])
        .arg(repo().join("tests/lab/cluster.yaml"))
        .arg("--catalog")
        .arg(repo().join("tests/lab/mirror/catalog-lab.yaml"))
        .output()
        .expect("run kubexm-install");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    for expected in [
        "module loadbalancer",
        "task install-loadbalancer on node1,node2,node3",
        "step haproxy-config",
        "step keepalived-config",
        "task wait-vip on node1",
        "VIP 10.88.10.100 on eth0",
        "module runtime",
        "task install-containerd on node1,node2,node3",
        "step install-containerd-binaries",
        "step configure-containerd",
        "template containerd/config-v2.toml.tera -> /etc/containerd/config.toml",
        "step pull-pause",
        "10.88.10.11:5000/pause:3.10",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
}
