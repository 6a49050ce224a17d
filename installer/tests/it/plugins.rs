//! multus over its delegate, Kata Containers and Node Feature Discovery: the rendered manifests
//! (parsed back as YAML and snapshotted), containerd's `kata` handler, the plan of the network
//! and plugins modules, and the skip reasons. The manifests are also checked by a real API
//! server in `apiserver.rs` when the lab's binaries are there.

use std::sync::Arc;

use kubexm_install::context::InstallContext;
use kubexm_install::modules::network::{render_multus, NetworkModule};
use kubexm_install::modules::plugins::{render_kata, render_nfd, PluginsModule};
use kubexm_install::modules::runtime::RuntimeModule;
use kubexm_install::pipeline::{Facts, Module};

use crate::common::Edit as _;
use crate::kubeadm::yaml_docs;
use crate::lb::{lab_context, rendered};

/// The lab cluster with multus over flannel, Kata Containers and Node Feature Discovery.
pub(crate) fn lab_with_everything() -> Arc<InstallContext> {
    lab_context(|t| {
        t.edit(
            "    plugin: flannel\n",
            "    plugin: multus\n    multus: {delegate: flannel}\n",
        )
        .edit(
            "  kubernetes:\n",
            "  kubernetes:\n    kata: {enabled: true}\n    nodeFeatureDiscovery: {enabled: true}\n",
        )
    })
}

/// The `kind` of every document of a rendered manifest.
pub(crate) fn kinds(text: &str) -> Vec<String> {
    yaml_docs(text)
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Every step and op of `module` on the first master, one line each.
fn plan_text(ctx: &Arc<InstallContext>, module: &dyn Module) -> String {
    crate::network::plan_of(ctx, module, false)
}

#[test]
fn multus_manifest_runs_the_thin_plugin_from_the_private_registry() {
    let ctx = lab_with_everything();
    let text = render_multus(&ctx).expect("rendered");
    assert_eq!(
        kinds(&text),
        [
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "DaemonSet"
        ]
    );
    let docs = yaml_docs(&text);
    let pod = &docs[4]["spec"]["template"]["spec"];
    let image = "10.88.10.11:5000/k8snetworkplumbingwg/multus-cni:v4.2.4";
    assert_eq!(pod["initContainers"][0]["image"], image);
    assert_eq!(pod["containers"][0]["image"], image);
    assert_eq!(pod["containers"][0]["command"][0], "/thin_entrypoint");
    assert_eq!(
        pod["containers"][0]["args"][0], "--multus-conf-file=auto",
        "multus's configuration comes from the delegate's"
    );
    assert_eq!(pod["serviceAccountName"], "multus");
    assert_eq!(
        docs[0]["metadata"]["name"],
        "network-attachment-definitions.k8s.cni.cncf.io"
    );
    assert!(text.contains("multus (thin plugin) over flannel"), "{text}");
    insta::assert_snapshot!("multus-lab", text);
}

#[test]
fn multus_plan_installs_the_delegate_then_multus_then_waits_for_both() {
    let ctx = lab_with_everything();
    let module = NetworkModule(ctx.clone());
    assert!(module.skip().is_none(), "multus over flannel is installed");
    let plan = plan_text(&ctx, &module);
    let steps: Vec<&str> = plan
        .lines()
        .filter_map(|l| l.trim().strip_prefix("step "))
        .collect();
    assert_eq!(steps, ["flannel", "multus", "nodes-ready", "multus-ready"]);
    assert!(
        plan.contains("rollout status daemonset/kube-multus-ds"),
        "{plan}"
    );
    insta::assert_snapshot!("multus-over-flannel-plan", plan);

    // Over cilium, cilium's chart leaves multus's configuration in place.
    let ctx = crate::kubeadm::example_context(|t| {
        t.edit(
            "plugin: calico",
            "plugin: multus\n    multus: {delegate: cilium}",
        )
        .edit("    calico:\n      mode: ipip\n", "")
    });
    let plan = plan_text(&ctx, &NetworkModule(ctx.clone()));
    let steps: Vec<&str> = plan
        .lines()
        .filter_map(|l| l.trim().strip_prefix("step "))
        .collect();
    assert_eq!(
        steps,
        [
            "helm-binary",
            "cilium",
            "multus",
            "nodes-ready",
            "multus-ready"
        ],
        "{plan}"
    );
    let values = cilium_values(&ctx);
    assert_eq!(yaml_docs(&values)[0]["cni"]["exclusive"], false, "{values}");
    // Alone, cilium keeps its default (exclusive).
    let alone = crate::kubeadm::example_context(|t| {
        t.edit("plugin: calico", "plugin: cilium")
            .edit("    calico:\n      mode: ipip\n", "")
    });
    assert!(yaml_docs(&cilium_values(&alone))[0]["cni"].is_null());
}

/// cilium's values file as the network module uploads it.
fn cilium_values(ctx: &Arc<InstallContext>) -> String {
    let first = ctx.first_master().expect("first").clone();
    for task in NetworkModule(ctx.clone()).tasks().expect("tasks") {
        for step in &task.steps {
            for op in step.ops(&first, &Facts::default()).expect("ops") {
                if let kubexm_install::pipeline::ops::Op::Upload(u) = op {
                    if u.dest.ends_with("cilium-values.yaml") {
                        if let kubexm_install::runner::UploadSource::Bytes(b) = u.source {
                            return String::from_utf8(b).expect("utf-8");
                        }
                    }
                }
            }
        }
    }
    panic!("no cilium values")
}

#[test]
fn multus_over_kube_ovn_or_hybridnet_installs_the_delegate_s_chart_first() {
    for (delegate, step) in [("kube-ovn", "kube-ovn"), ("hybridnet", "hybridnet")] {
        let ctx = crate::kubeadm::example_context(|t| {
            t.edit(
                "plugin: calico",
                &format!("plugin: multus\n    multus: {{delegate: {delegate}}}"),
            )
            .edit("    calico:\n      mode: ipip\n", "")
        });
        let module = NetworkModule(ctx.clone());
        assert!(module.skip().is_none(), "{delegate}");
        let plan = plan_text(&ctx, &module);
        let steps: Vec<&str> = plan
            .lines()
            .filter_map(|l| l.trim().strip_prefix("step "))
            .collect();
        assert_eq!(steps.first(), Some(&"helm-binary"), "{plan}");
        assert!(
            steps.ends_with(&[step, "multus", "nodes-ready", "multus-ready"]),
            "{plan}"
        );
    }
}

#[test]
fn kata_manifest_and_containerd_handler() {
    let ctx = lab_with_everything();
    let text = render_kata(&ctx).expect("rendered");
    assert_eq!(
        kinds(&text),
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "DaemonSet",
            "RuntimeClass"
        ]
    );
    let docs = yaml_docs(&text);
    let c = &docs[3]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["image"],
        "10.88.10.11:5000/kata-containers/kata-deploy:3.2.0"
    );
    // The RuntimeClass names containerd's handler and waits for kata-deploy's node label.
    assert_eq!(docs[4]["metadata"]["name"], "kata");
    assert_eq!(docs[4]["handler"], "kata");
    assert_eq!(
        docs[4]["scheduling"]["nodeSelector"]["katacontainers.io/kata-runtime"],
        "true"
    );
    insta::assert_snapshot!("kata-lab", text);

    // containerd's configuration on every node carries the handler of the same name.
    let files = rendered(&ctx, &RuntimeModule(ctx.clone()));
    let configs: Vec<&(String, String, String)> = files
        .iter()
        .filter(|(_, dest, _)| dest == "/etc/containerd/config.toml")
        .collect();
    assert_eq!(configs.len(), 3, "one per node");
    for (node, _, config) in &configs {
        assert!(
            config.contains(
                "containerd.runtimes.kata]\n        runtime_type = \"io.containerd.kata.v2\""
            ),
            "{node}: {config}"
        );
        assert!(
            config.contains(
                "ConfigPath = \"/opt/kata/share/defaults/kata-containers/configuration-qemu.toml\""
            ),
            "{config}"
        );
    }
    // Without kata, no handler.
    let plain = lab_context(|t| t);
    let files = rendered(&plain, &RuntimeModule(plain.clone()));
    assert!(files
        .iter()
        .filter(|(_, dest, _)| dest == "/etc/containerd/config.toml")
        .all(|(_, _, c)| !c.contains("kata")));
}

#[test]
fn node_feature_discovery_manifest() {
    let ctx = lab_with_everything();
    let text = render_nfd(&ctx).expect("rendered");
    assert_eq!(
        kinds(&text),
        [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Service",
            "Deployment",
            "DaemonSet"
        ]
    );
    let docs = yaml_docs(&text);
    let image = "10.88.10.11:5000/nfd/node-feature-discovery:v0.10.1";
    let master = &docs[7]["spec"]["template"]["spec"]["containers"][0];
    let worker = &docs[8]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(master["image"], image);
    assert_eq!(worker["image"], image);
    assert_eq!(worker["args"][0], "-server=nfd-master:8080");
    insta::assert_snapshot!("node-feature-discovery-lab", text);
}

#[test]
fn plugins_plan_and_skip() {
    let ctx = lab_with_everything();
    let module = PluginsModule(ctx.clone());
    assert!(module.skip().is_none());
    let plan = plan_text(&ctx, &module);
    for want in [
        "task kata on node1",
        "task node-feature-discovery on node1",
        "apply --server-side --force-conflicts --field-manager=kubexm -f /etc/kubernetes/kubexm/manifests/kata.yaml",
        "-f /etc/kubernetes/kubexm/manifests/node-feature-discovery.yaml",
    ] {
        assert!(plan.contains(want), "{want} missing from\n{plan}");
    }
    insta::assert_snapshot!("plugins-plan", plan);

    // Only one of them.
    let nfd_only = lab_context(|t| {
        t.edit(
            "  kubernetes:\n",
            "  kubernetes:\n    nodeFeatureDiscovery: {enabled: true}\n",
        )
    });
    let tasks = PluginsModule(nfd_only).tasks().expect("tasks");
    let names: Vec<&str> = tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["node-feature-discovery"]);

    let reason = PluginsModule(lab_context(|t| t)).skip().expect("skipped");
    assert!(reason.contains("kubernetes.kata"), "{reason}");
}

/// A stand-in node answering the KVM probe.
struct KvmAnswer(&'static str);

#[async_trait::async_trait]
impl kubexm_install::runner::Runner for KvmAnswer {
    fn node(&self) -> &str {
        "stand-in"
    }
    async fn exec(
        &self,
        _: &kubexm_install::runner::Exec,
    ) -> Result<kubexm_install::runner::ExecOutput, kubexm_install::runner::RunError> {
        Ok(kubexm_install::runner::ExecOutput {
            code: Some(0),
            stdout: self.0.to_string(),
            stderr: String::new(),
        })
    }
    async fn upload(
        &self,
        _: &kubexm_install::runner::Upload,
    ) -> Result<kubexm_install::runner::UploadOutcome, kubexm_install::runner::RunError> {
        Ok(kubexm_install::runner::UploadOutcome::Uploaded(0))
    }
}

/// Issue 19: with Kata enabled, preflight checks /dev/kvm on every node kata-deploy runs on
/// (the worker role) and refuses one without it, naming it and the way out.
#[tokio::test]
async fn kata_needs_dev_kvm_on_every_node_it_runs_on() {
    use kubexm_install::modules::preflight::{
        kata_nodes, CheckKvm, GatherKvmFacts, PreflightModule,
    };
    use kubexm_install::pipeline::Step;
    let ctx = lab_with_everything();
    let workers = ctx.with_role(kubexm_manifests::resolve::Role::Worker);
    assert_eq!(kata_nodes(&ctx), workers);
    let plan = plan_text(&ctx, &PreflightModule(ctx.clone()));
    let start = plan.find("task check-kata-kvm").expect("kata task");
    let end = plan[start..].find("\ntask check-nodes").expect("next task") + start;
    insta::assert_snapshot!("kata-kvm-preflight-plan", &plan[start..end]);
    // Off: no check.
    let off = crate::lb::lab_context(|t| t);
    assert!(kata_nodes(&off).is_empty());
    assert!(!plan_text(&off, &PreflightModule(off.clone())).contains("check-kata-kvm"));

    let node = ctx.node(&workers[0]).expect("worker");
    let run = |probe: &'static str| async move {
        let facts = Facts::default();
        let runner = KvmAnswer(probe);
        for op in GatherKvmFacts.ops(node, &facts).expect("gather") {
            op.generic()
                .apply(&runner)
                .await
                .map_err(|e| e.to_string())?;
        }
        for op in CheckKvm.ops(node, &facts).expect("check") {
            op.generic()
                .apply(&runner)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(())
    };
    assert_eq!(run("kvm=yes\ncpu=vmx\n").await, Ok(()));
    let e = run("kvm=no\ncpu=none\n").await.expect_err("no kvm");
    assert!(
        e.contains(&format!("node {} has no /dev/kvm", node.name)),
        "{e}"
    );
    assert!(e.contains("spec.kubernetes.kata.enabled: false"), "{e}");
}

/// `delete` removes what kata-deploy left on the nodes before containerd's own removal; the
/// script, run over a stand-in root, removes Kata's files and keeps what is not Kata's.
#[test]
fn delete_removes_kata_traces_before_containerd() {
    use kubexm_install::modules::plugins::delete_module;
    let ctx = lab_with_everything();
    let pipeline = kubexm_install::pipelines::delete_pipeline(&ctx);
    let names: Vec<&str> = pipeline.modules.iter().map(|m| m.name()).collect();
    let kata = names
        .iter()
        .position(|n| *n == "delete-kata")
        .expect("kata");
    let runtime = names
        .iter()
        .position(|n| *n == "delete-runtime")
        .expect("runtime");
    assert!(kata < runtime, "{names:?}");
    let off = crate::lb::lab_context(|t| t);
    assert!(delete_module(&off).skip().is_some());

    let module = delete_module(&ctx);
    assert_eq!(module.skip(), None);
    let tasks = module.tasks().expect("tasks");
    let node = ctx.first_master().expect("m").clone();
    let op = tasks[0].steps[0]
        .ops(&node, &Facts::default())
        .expect("ops")
        .remove(0);
    let kubexm_install::pipeline::ops::Op::Run(run) = op else {
        panic!("not a run op");
    };
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path().display().to_string();
    let bin = root.path().join("usr/local/bin");
    let etc = root.path().join("etc/containerd");
    let kata = root.path().join("opt/kata/bin");
    for d in [&bin, &etc, &kata] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(kata.join("containerd-shim-kata-v2"), "shim").expect("write");
    // kata-deploy's shim (its paths under the stand-in root, as the script's are).
    let shim = format!("#!/usr/bin/env bash\nKATA_CONF_FILE={r}/opt/kata/share/defaults/kata-containers/configuration-qemu.toml {r}/opt/kata/bin/containerd-shim-kata-v2 \"$@\"\n");
    std::fs::write(bin.join("containerd-shim-kata-qemu-v2"), &shim).expect("write");
    std::fs::write(bin.join("containerd-shim-kata-qemu-v2.bak"), &shim).expect("write");
    std::fs::write(bin.join("containerd-shim-kata-clh-v2.bak"), "not kata's").expect("write");
    std::os::unix::fs::symlink(
        bin.join("containerd-shim-kata-qemu-v2"),
        bin.join("containerd-shim-kata-v2"),
    )
    .expect("symlink");
    std::fs::write(bin.join("containerd"), "kept").expect("write");
    std::fs::write(
        etc.join("config.toml.bak"),
        "# Written by KubeXM for cluster lab: containerd 1.7 (config format 2).\n",
    )
    .expect("write");
    let script = run
        .command
        .edit("/opt/kata", &format!("{r}/opt/kata"))
        .edit("/usr/local/bin", &format!("{r}/usr/local/bin"))
        .edit("/etc/containerd", &format!("{r}/etc/containerd"));
    let unless = run
        .unless
        .clone()
        .expect("unless")
        .edit("/opt/kata", &format!("{r}/opt/kata"))
        .edit("/usr/local/bin", &format!("{r}/usr/local/bin"))
        .edit("/etc/containerd", &format!("{r}/etc/containerd"));
    let sh = |s: &str| {
        std::process::Command::new("sh")
            .args(["-c", s])
            .status()
            .expect("sh")
            .success()
    };
    assert!(!sh(&unless), "Kata's files are there: the step runs");
    assert!(sh(&script));
    let mut left: Vec<String> = walk(root.path())
        .into_iter()
        .map(|p| {
            p.strip_prefix(root.path())
                .expect("under")
                .display()
                .to_string()
        })
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "usr/local/bin/containerd",
            "usr/local/bin/containerd-shim-kata-clh-v2.bak"
        ]
    );
    // The other .bak is not Kata's: it stays, and a re-run has nothing to do.
    assert!(sh(&unless));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
