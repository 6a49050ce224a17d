//! `upgrade` plans (issue 17) for both bootstrap paths and several versions: the phases and
//! their order (images seeded first, etcd one member at a time when its version changes, one
//! master at a time with the first master's `kubeadm upgrade apply`, workers in batches, the
//! CNI and add-ons last), which node drains which, and the commands each node runs.

use kubexm_install::modules::k8s::image_named;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::facts::ClusterFacts;
use kubexm_install::modules::lifecycle::membership::DrainOptions;
use kubexm_install::pipeline::plan::{self, Plan};
use kubexm_install::pipelines::upgrade::{upgrade_pipeline, Upgrade};

use crate::common::Edit as _;
use crate::day2::outline;

use crate::common::repo;

/// The lab's cluster.yaml (kubeadm path, KubeXM's etcd) with `version` and a fourth and fifth
/// host as workers only, with the built-in catalog (every version has its real sums there): its
/// registry version, no CNI (flannel has no v1.20 release there).
fn lab(work: &Path, version: &str, etcd: &str) -> Arc<InstallContext> {
    lab_with(work, version, etcd, |t| t)
}

/// [`lab`] with `edit` applied to the text.
fn lab_with(
    work: &Path,
    version: &str,
    etcd: &str,
    edit: impl Fn(String) -> String,
) -> Arc<InstallContext> {
    let text = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab yaml");
    let key = "privateKeyPath: /var/tmp/kubexm-lab/labs/e2e/id_ed25519";
    let text = text
        .edit("    version: v1.33.11\n", &format!("    version: {version}\n"))
        .edit("    version: v3.4.23\n", &format!("    version: {etcd}\n"))
        .edit(
            "  roleGroups:\n",
            &format!("    - {{name: node4, address: 10.88.10.14, user: root, {key}}}\n    - {{name: node5, address: 10.88.10.15, user: root, {key}}}\n  roleGroups:\n"),
        )
        .edit("    worker: [\"node[1:3]\"]", "    worker: [\"node[1:5]\"]")
        // The built-in catalog's registry version, and no flannel before v1.21 there.
        .edit("    version: 2.8.2\n", "    version: \"2\"\n")
        .edit("plugin: flannel", "plugin: none");
    load(work, &format!("{version}.yaml"), &edit(text))
}

fn load(work: &Path, name: &str, text: &str) -> Arc<InstallContext> {
    let file = work.join(name);
    std::fs::write(&file, text).expect("write cluster.yaml");
    Arc::new(load_context(&file, None, None, work).expect("cluster loads"))
}

fn plan(installed: &Arc<InstallContext>, target: &Arc<InstallContext>, batch: usize) -> Plan {
    let facts = ClusterFacts::assumed(installed);
    let p = upgrade_pipeline(&Upgrade {
        installed,
        target,
        facts: &facts,
        drain: DrainOptions::default(),
        batch,
    })
    .expect("pipeline");
    assert_eq!(p.name, format!("upgrade-{}", target.cluster.version));
    plan::build(&p, &target.plan_nodes(), &Default::default()).expect("plan")
}

fn names(p: &Plan) -> Vec<String> {
    p.modules.iter().map(|m| m.name.clone()).collect()
}

fn task<'a>(p: &'a Plan, phase: &str, task: &str) -> &'a kubexm_install::pipeline::plan::TaskPlan {
    p.modules
        .iter()
        .find(|m| m.name == phase)
        .and_then(|m| m.tasks.iter().find(|t| t.name == task))
        .unwrap_or_else(|| panic!("no task {task} in {phase}:\n{}", outline(p)))
}

#[test]
fn kubeadm_path_one_master_at_a_time_then_workers_in_batches() {
    let work = tempfile::tempdir().expect("tempdir");
    let installed = lab(work.path(), "v1.20.15", "v3.4.13");
    let target = lab(work.path(), "v1.21.14", "v3.4.13");
    let p = plan(&installed, &target, 2);
    let order = names(&p);
    let at = |n: &str| {
        order
            .iter()
            .position(|x| x == n)
            .unwrap_or_else(|| panic!("no {n} in {order:?}"))
    };
    assert_eq!(order[0], "registry-images", "the new images first");
    assert!(at("etcd-node1") < at("control-plane-node1"));
    assert!(at("control-plane-node1") < at("control-plane-node2"));
    assert!(at("control-plane-node2") < at("control-plane-node3"));
    assert!(at("control-plane-node3") < at("workers-1"));
    assert!(at("workers-1") < at("network") && at("network") < at("addons"));
    // The etcd version is the same: its phases are skipped, saying so.
    let etcd = p
        .modules
        .iter()
        .find(|m| m.name == "etcd-node2")
        .expect("etcd-node2");
    assert_eq!(etcd.skipped.as_deref(), Some("etcd stays at v3.4.13"));
    // Only the first master runs `upgrade apply`; the others `upgrade node`.
    let apply = task(&p, "control-plane-node1", "kubeadm-upgrade-apply");
    assert_eq!(apply.hosts, ["node1"]);
    let text = p.to_text();
    assert_eq!(
        text.matches("/usr/local/bin/kubeadm upgrade apply v1.21.14 --yes")
            .count(),
        1,
        "{text}"
    );
    assert_eq!(
        task(&p, "control-plane-node2", "kubeadm-upgrade-node").hosts,
        ["node2"]
    );
    // A master is drained from another master; workers from the first master, two at a time.
    assert_eq!(
        task(&p, "control-plane-node1", "cordon-drain").hosts,
        ["node2"]
    );
    assert_eq!(
        task(&p, "control-plane-node2", "cordon-drain").hosts,
        ["node1"]
    );
    assert_eq!(
        task(&p, "workers-1", "kubeadm-upgrade-node").hosts,
        ["node4", "node5"]
    );
    assert_eq!(task(&p, "workers-1", "cordon-drain").hosts, ["node1"]);
    // Every node's kubelet checked at the new version, each master's API server too.
    assert_eq!(
        text.matches("reporting kubelet v1.21.14").count(),
        5,
        "{text}"
    );
    assert_eq!(text.matches("reporting v1.21.14").count(), 3, "{text}");
    insta::assert_snapshot!("upgrade-kubeadm-v1.20-v1.21", outline(&p));

    // Batches of one: one worker at a time.
    let p = plan(&installed, &target, 1);
    assert!(names(&p).contains(&"workers-2".to_string()));
    assert_eq!(
        task(&p, "workers-2", "kubeadm-upgrade-node").hosts,
        ["node5"]
    );
}

#[test]
fn kubeadm_path_newer_versions_and_an_etcd_change() {
    let work = tempfile::tempdir().expect("tempdir");
    let installed = lab(work.path(), "v1.28.15", "v3.5.9");
    let target = lab(work.path(), "v1.29.15", "v3.5.10");
    let p = plan(&installed, &target, 3);
    // etcd changes: every member in turn, health after each.
    for n in ["node1", "node2", "node3"] {
        let m = p
            .modules
            .iter()
            .find(|m| m.name == format!("etcd-{n}"))
            .expect("etcd phase");
        assert!(m.skipped.is_none(), "{:?}", m.skipped);
        let install = m
            .tasks
            .iter()
            .find(|t| t.name == "install-etcd")
            .expect("install-etcd");
        assert_eq!(install.hosts, [n]);
    }
    let text = p.to_text();
    assert!(text.contains("upgrade apply v1.29.15 --yes"), "{text}");
    insta::assert_snapshot!("upgrade-kubeadm-v1.28-v1.29", outline(&p));
}

#[test]
fn kubexm_path_replaces_and_restarts_each_component() {
    // The kubexm fixture (v1.31.13) installed at v1.30.14: the test catalog pins both (the
    // built-in one has no public sums for the kube-* server binaries).
    let work = tempfile::tempdir().expect("tempdir");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubexm");
    let catalog = fixture.join("catalog-stand-in.yaml");
    let text = std::fs::read_to_string(fixture.join("cluster.yaml")).expect("fixture");
    assert!(
        text.contains("version: v1.31.13"),
        "the fixture's version moved"
    );
    let load_with = |name: &str, t: &str| {
        let file = work.path().join(name);
        std::fs::write(&file, t).expect("write");
        Arc::new(load_context(&file, Some(&catalog), None, work.path()).expect("loads"))
    };
    let installed = load_with(
        "v1.30.yaml",
        &text.edit("version: v1.31.13", "version: v1.30.14"),
    );
    let target = load_with("v1.31.yaml", &text);
    let p = plan(&installed, &target, 1);
    check_kubexm(&p, "v1.31.13");
}

fn check_kubexm(p: &Plan, next: &str) {
    let masters: Vec<&str> = p
        .modules
        .iter()
        .filter_map(|m| m.name.strip_prefix("control-plane-"))
        .collect();
    assert!(!masters.is_empty(), "{}", outline(p));
    for m in &masters {
        let t = task(p, &format!("control-plane-{m}"), "control-plane");
        assert_eq!(t.hosts, [*m]);
        let steps: Vec<&str> = t.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            steps,
            [
                "kubernetes-binaries",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "restart-onto-new-binaries",
                "wait-control-plane"
            ]
        );
    }
    let text = p.to_text();
    assert!(text.contains("readlink /proc/$pid/exe"), "{text}");
    assert!(!text.contains("kubeadm upgrade"), "{text}");
    assert!(
        text.contains(&format!("reporting kubelet {next}")),
        "{text}"
    );
    assert!(p.modules.iter().any(|m| m.name == "coredns"));
    insta::assert_snapshot!("upgrade-kubexm-next-minor", outline(p));
}

/// Issue 33 item 2: an upgrade to v1.35+ with `failCgroupV1: false` ignores kubeadm's
/// `SystemVerification` preflight (a cgroup v1 host is an error there) in `upgrade apply` and
/// every `upgrade node`; without the setting the commands are as before.
#[test]
fn kubeadm_upgrade_to_1_35_on_kept_cgroup_v1_ignores_system_verification() {
    let work = tempfile::tempdir().expect("tempdir");
    // (iptables on both sides: the default mode changes at v1.35, which an upgrade refuses.)
    let keep = |t: String| {
        t.edit(
            "    type: kubeadm\n",
            "    type: kubeadm\n    proxyMode: iptables\n    kubelet: {failCgroupV1: false}\n",
        )
    };
    let iptables = |t: String| {
        t.edit(
            "    type: kubeadm\n",
            "    type: kubeadm\n    proxyMode: iptables\n",
        )
    };
    let installed = lab_with(work.path(), "v1.34.11", "v3.5.21", keep);
    let target = lab_with(work.path(), "v1.35.8", "v3.5.21", keep);
    let text = plan(&installed, &target, 2).to_text();
    let flag = "--ignore-preflight-errors=SystemVerification";
    assert_eq!(
        text.matches(&format!(
            "/usr/local/bin/kubeadm upgrade apply v1.35.8 --yes --patches /etc/kubernetes/kubexm/patches {flag}"
        ))
        .count(),
        1,
        "{text}"
    );
    // node2 and node3 (masters, with their patches), node4 and node5 (workers).
    assert_eq!(
        text.matches("/usr/local/bin/kubeadm upgrade node").count(),
        text.matches(&format!(
            "upgrade node --patches /etc/kubernetes/kubexm/patches {flag}"
        ))
        .count()
            + text.matches(&format!("upgrade node {flag}")).count(),
        "{text}"
    );
    assert_eq!(
        text.matches(&format!("upgrade node {flag}")).count(),
        2,
        "{text}"
    );

    // Without the setting: the commands of before.
    let installed = lab_with(work.path(), "v1.34.11", "v3.5.21", iptables);
    let target = lab_with(work.path(), "v1.35.8", "v3.5.21", iptables);
    let text = plan(&installed, &target, 2).to_text();
    assert!(!text.contains(flag), "{text}");
}

/// Issue 33 item 3: the default proxy mode moved from ipvs to iptables at v1.35; an upgrade over
/// it with `proxyMode` unset is refused before anything runs, naming the mode the cluster runs
/// and what to set. The same mode on both sides (set, or the same default) plans.
#[test]
fn an_upgrade_across_the_default_proxy_mode_change_is_refused_naming_what_to_set() {
    let work = tempfile::tempdir().expect("tempdir");
    let installed = lab(work.path(), "v1.34.11", "v3.5.21");
    let target = lab(work.path(), "v1.35.8", "v3.5.21");
    let facts = ClusterFacts::assumed(&installed);
    let refused = upgrade_pipeline(&Upgrade {
        installed: &installed,
        target: &target,
        facts: &facts,
        drain: DrainOptions::default(),
        batch: 1,
    })
    .err()
    .expect("refused")
    .to_string();
    assert!(
        refused.contains("kube-proxy runs in ipvs mode (spec.kubernetes.proxyMode is unset: KubeXM's default for v1.34.11)")
            && refused.contains("v1.35.8 would run it in iptables mode")
            && refused.contains("set spec.kubernetes.proxyMode: ipvs"),
        "{refused}"
    );
    // Set to what the cluster runs: planned (kubeadm path and kubexm path alike).
    let ipvs = |t: String| {
        t.edit(
            "    type: kubeadm\n",
            "    type: kubeadm\n    proxyMode: ipvs\n",
        )
    };
    let target = lab_with(work.path(), "v1.35.8", "v3.5.21", ipvs);
    let installed_ipvs = lab_with(work.path(), "v1.34.11", "v3.5.21", ipvs);
    plan(&installed_ipvs, &target, 1);
    assert!(kubexm_install::pipelines::upgrade::proxy_mode_change(&installed, &target).is_none());
    // Both before v1.35: the same default, nothing to say.
    let a = lab(work.path(), "v1.33.11", "v3.5.21");
    assert!(kubexm_install::pipelines::upgrade::proxy_mode_change(&a, &installed).is_none());
}

/// Issue 33 item 4: `kubeadm upgrade apply` keeps the etcd and CoreDNS image tags the cluster's
/// `kubeadm-config` names; the first master uploads the target's configuration (stacked etcd's
/// and CoreDNS's new tags) before it, so both move with the upgrade.
#[test]
fn kubeadm_upgrade_apply_uploads_the_targets_etcd_and_coredns_tags_first() {
    use kubexm_install::modules::kubeadm::config::KubeadmSettings;
    use kubexm_install::modules::lifecycle::upgrade::{KubeadmUpgrade, UPGRADE_CONFIG};
    use kubexm_install::pipeline::ops::Op;
    use kubexm_install::pipeline::{Facts, Step};
    let work = tempfile::tempdir().expect("tempdir");
    let stacked = |t: String| {
        t.edit("    etcd: [\"node[1:3]\"]\n", "    etcd: []\n")
            .edit(
                "  etcd:\n    type: kubexm\n",
                "  etcd:\n    type: kubeadm\n",
            )
    };
    let installed = lab_with(work.path(), "v1.32.4", "v3.5.21", stacked);
    let target = lab_with(work.path(), "v1.33.11", "v3.5.21", stacked);
    let tag = |ctx: &InstallContext, name: &str| {
        let r = image_named(ctx, name).expect("image");
        r.rsplit_once(':').expect("tag").1.to_string()
    };
    let (etcd_new, dns_new) = (tag(&target, "etcd"), tag(&target, "coredns"));
    assert_ne!(
        tag(&installed, "etcd"),
        etcd_new,
        "the versions' etcd tags differ"
    );
    let step = KubeadmUpgrade {
        settings: Arc::new(KubeadmSettings::new(&target, Default::default()).expect("settings")),
        version: target.cluster.version,
        apply: true,
    };
    let node1 = target.node("node1").expect("node1");
    let ops = step.ops(node1, &Facts::default()).expect("ops");
    let config = ops
        .iter()
        .find_map(|o| match o {
            Op::Template(t) if t.file.dest == UPGRADE_CONFIG => {
                Some(String::from_utf8(t.text().to_vec()).expect("utf-8"))
            }
            _ => None,
        })
        .expect("the target's configuration is written");
    let cc = crate::kubeadm::yaml_docs(&config)
        .into_iter()
        .find(|d| d["kind"] == "ClusterConfiguration")
        .expect("ClusterConfiguration");
    assert_eq!(cc["kubernetesVersion"], "v1.33.11");
    assert_eq!(cc["etcd"]["local"]["imageTag"], etcd_new.as_str());
    assert_eq!(cc["dns"]["imageTag"], dns_new.as_str());
    let script = ops
        .iter()
        .find_map(|o| match o {
            Op::Run(r) => Some(r.command.clone()),
            _ => None,
        })
        .expect("the upgrade script");
    let upload = script
        .find(&format!(
            "kubeadm init phase upload-config kubeadm --config {UPGRADE_CONFIG} &&"
        ))
        .unwrap_or_else(|| panic!("{script}"));
    let apply = script
        .find("kubeadm upgrade apply v1.33.11 --yes")
        .unwrap_or_else(|| panic!("{script}"));
    assert!(upload < apply, "{script}");
    // Run it (kubeadm and systemctl stubs that log their arguments, the state directory in a
    // temporary one): both kubeadm commands run, in order, and only then is the marker written.
    // The real v1.36.3 -> v1.37.2 lab found `if ! upload && apply >log` running neither apply
    // nor the log (the `!` took only the upload) while the marker said "upgraded".
    let run = tempfile::tempdir().expect("tempdir");
    let (bin, state) = (run.path().join("bin"), run.path().join("state"));
    std::fs::create_dir_all(&bin).expect("bin");
    // What the step's upload wrote before the script (the wanted settings it records).
    std::fs::create_dir_all(state.join("wanted")).expect("wanted");
    let calls = run.path().join("calls");
    for stub in ["kubeadm", "systemctl"] {
        let p = bin.join(stub);
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho \"{stub} $*\" >>'{}'\n", calls.display()),
        )
        .expect("stub");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let local = script
        .as_str()
        .replace(
            "/usr/local/bin/kubeadm",
            &bin.join("kubeadm").display().to_string(),
        )
        .replace("/etc/kubernetes/kubexm", &state.display().to_string());
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&local)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = std::fs::read_to_string(&calls).expect("calls");
    let said: Vec<&str> = said.lines().collect();
    assert_eq!(said.len(), 3, "{said:?}");
    assert!(
        said[0].starts_with("kubeadm init phase upload-config kubeadm --config "),
        "{said:?}"
    );
    assert!(
        said[1].starts_with("kubeadm upgrade apply v1.33.11 --yes"),
        "{said:?}"
    );
    assert_eq!(said[2], "systemctl restart kubelet");
    assert_eq!(
        std::fs::read_to_string(state.join("upgraded-to")).expect("marker"),
        "v1.33.11\n"
    );
    // A failing `upgrade apply` fails the step and writes no marker.
    std::fs::write(
        bin.join("kubeadm"),
        "#!/bin/sh\ncase \"$*\" in upgrade*) echo boom; exit 1;; esac\n",
    )
    .expect("stub");
    std::fs::remove_file(state.join("upgraded-to")).expect("rm marker");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&local)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .expect("sh runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("boom"));
    assert!(!state.join("upgraded-to").exists());
    // `upgrade node` reads the uploaded configuration: it writes none of its own.
    let node = KubeadmUpgrade {
        apply: false,
        ..step
    };
    let ops = node.ops(node1, &Facts::default()).expect("ops");
    assert!(!ops
        .iter()
        .any(|o| matches!(o, Op::Template(t) if t.file.dest == UPGRADE_CONFIG)));
}

/// Issue 33 item 5: with the internal load balancer's local proxy, `kubeadm upgrade apply`
/// writes kube-proxy's kubeconfig back to the endpoint's name (the first master); the upgrade
/// puts it back on 127.0.0.1:6443 right after, as the install does.
#[test]
fn kube_proxy_goes_back_to_the_local_proxy_after_upgrade_apply() {
    let work = tempfile::tempdir().expect("tempdir");
    let internal = |t: String| {
        t.edit(
            "    mode: external\n    external:\n      type: kubexm-kh\n",
            "    mode: internal\n    internal:\n      type: haproxy\n",
        )
        .edit("    loadbalancer: [\"node[1:3]\"]\n", "")
    };
    let installed = lab_with(work.path(), "v1.30.14", "v3.5.21", internal);
    let target = lab_with(work.path(), "v1.31.13", "v3.5.21", internal);
    let p = plan(&installed, &target, 2);
    let phase = p
        .modules
        .iter()
        .find(|m| m.name == "control-plane-node1")
        .expect("first master's phase");
    let tasks: Vec<&str> = phase.tasks.iter().map(|t| t.name.as_str()).collect();
    let at = |n: &str| {
        tasks
            .iter()
            .position(|t| *t == n)
            .unwrap_or_else(|| panic!("no {n} in {tasks:?}"))
    };
    assert!(
        at("kubeadm-upgrade-apply") < at("kube-proxy-via-local-proxy"),
        "{tasks:?}"
    );
    assert_eq!(
        task(&p, "control-plane-node1", "kube-proxy-via-local-proxy").hosts,
        ["node1"]
    );
    let text = p.to_text();
    assert!(
        text.contains("https://127.0.0.1:6443")
            && text.contains("rollout restart daemonset kube-proxy"),
        "{text}"
    );
    // After every master's upgrade (kubeadm rewrites the ConfigMap in `upgrade apply`, and in
    // the last master's `upgrade node`, where it applies the deferred addons), never in a
    // worker's phase; each after that master's kubeadm task.
    let phases: Vec<&str> = p
        .modules
        .iter()
        .filter(|m| {
            m.tasks
                .iter()
                .any(|t| t.name == "kube-proxy-via-local-proxy")
        })
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(
        phases,
        [
            "control-plane-node1",
            "control-plane-node2",
            "control-plane-node3"
        ]
    );
    for m in p
        .modules
        .iter()
        .filter(|m| phases.contains(&m.name.as_str()))
    {
        let names: Vec<&str> = m.tasks.iter().map(|t| t.name.as_str()).collect();
        let kubeadm = names.iter().position(|t| t.starts_with("kubeadm-upgrade-"));
        let proxy = names
            .iter()
            .position(|t| *t == "kube-proxy-via-local-proxy");
        assert!(kubeadm.is_some() && kubeadm < proxy, "{names:?}");
    }
    // The external load balancer (the lab's): no local proxy, no such task.
    let p = plan(
        &lab(work.path(), "v1.30.14", "v3.5.21"),
        &lab(work.path(), "v1.31.13", "v3.5.21"),
        2,
    );
    assert!(!p
        .modules
        .iter()
        .flat_map(|m| &m.tasks)
        .any(|t| t.name == "kube-proxy-via-local-proxy"));
}
