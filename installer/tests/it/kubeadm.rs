//! The kubeadm module: every file it renders over a matrix (etcd types kubexm / kubeadm /
//! external, load balancers none / external / internal haproxy / nginx / kube-vip, configuration
//! APIs v1beta4 (v1.31, v1.33) and v1beta3 (v1.30)), parsed back as YAML and snapshotted; the
//! join-credentials parser on kubeadm output in the exact formats kubeadm versions print; the
//! module's task order; and the plan of a 3-master / 2-worker cluster.

use kubexm_install::modules::k8s::ADMIN_CONF;
use std::sync::Arc;

use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::modules::internal_lb::{KubeVip, LocalProxy, LocalProxyKind};
use kubexm_install::modules::kubeadm::config::KubeadmSettings;
use kubexm_install::modules::kubeadm::init::LearnJoinCredentials;
use kubexm_install::modules::kubeadm::join::{parse, JoinCredentials, JoinParseError};
use kubexm_install::modules::kubeadm::{KubeadmModule, SUPER_ADMIN_CONF};
use kubexm_install::pipeline::ops::Op;
use kubexm_install::pipeline::{plan, Facts, Module};
use kubexm_install::pipelines::install_pipeline;
use kubexm_manifests::kube_version::KubeadmApi;
use kubexm_manifests::version::KubeVersion;

use crate::common::Edit as _;
use crate::lb::{check_with, file_of, lab_context, rendered, repo};

/// The example cluster (3 masters, 2 workers; calico, internal haproxy, KubeXM's etcd, a
/// private registry) with `edit` applied to its text, against the built-in catalog.
pub(crate) fn example_context(edit: impl Fn(String) -> String) -> Arc<InstallContext> {
    let text =
        std::fs::read_to_string(repo().join("manifests/examples/cluster.yaml")).expect("example");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, edit(text)).expect("write yaml");
    Arc::new(load_context(&file, None, None, dir.path()).expect("example cluster loads"))
}

/// The example with kube-vip as the internal load balancer.
fn kube_vip_example() -> Arc<InstallContext> {
    example_context(|t| {
        t.edit(
            "      type: haproxy\n",
            "      type: kube-vip\n    vip: 192.168.10.100\n    interface: eth0\n",
        )
    })
}

/// Parses every `---` document of a rendered YAML file (a real YAML parser, not a snapshot).
pub(crate) fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
    text.split("\n---\n")
        .map(|d| {
            kubexm_manifests::yaml::from_str::<serde_json::Value>(d, "rendered")
                .unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"))
        })
        .collect()
}

fn credentials() -> JoinCredentials {
    JoinCredentials {
        endpoint: "lb.kubexm.internal:6443".into(),
        token: "7r2k9x.q4m8z1c0v5b3n6h2".into(),
        ca_cert_hashes: vec![format!("sha256:{}", "ab".repeat(32))],
        certificate_key: Some("cd".repeat(32)),
    }
}

pub(crate) fn init_text(
    ctx: &InstallContext,
    s: &KubeadmSettings,
    node: &str,
    prefilled: bool,
) -> String {
    let n = s.node(ctx.node(node).expect("node"), true, prefilled);
    String::from_utf8(s.render_init(&n).expect("init").text().to_vec()).expect("utf-8")
}

fn join_text(ctx: &InstallContext, s: &KubeadmSettings, node: &str, cp: bool) -> String {
    let n = s.node(ctx.node(node).expect("node"), cp, false);
    String::from_utf8(
        s.render_join(&n, &credentials())
            .expect("join")
            .text()
            .to_vec(),
    )
    .expect("utf-8")
}

#[test]
fn lab_init_and_join_configs_v1beta4_with_kubexm_etcd_and_an_external_lb() {
    let ctx = lab_context(|t| t);
    let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
    assert_eq!(s.api, KubeadmApi::V1beta4);
    let init = init_text(&ctx, &s, "node1", false);
    assert!(init.starts_with("# Written by KubeXM"), "{init}");
    let docs = yaml_docs(&init);
    let kinds: Vec<&str> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "InitConfiguration",
            "ClusterConfiguration",
            "KubeletConfiguration",
            "KubeProxyConfiguration"
        ]
    );
    assert_eq!(docs[0]["apiVersion"], "kubeadm.k8s.io/v1beta4");
    // Issue 13 item 8: kubelets ask for a serving certificate from the cluster CA (kubeadm docs,
    // "Kubelet serving certificates"); KubeXM approves the checked CSRs (serving_csr).
    assert_eq!(docs[2]["serverTLSBootstrap"], true, "{init}");
    assert_eq!(docs[2]["rotateCertificates"], true, "{init}");
    assert_eq!(
        docs[0]["localAPIEndpoint"]["advertiseAddress"],
        "10.88.10.11"
    );
    // v1beta4 extra arguments are {name, value} lists.
    assert_eq!(
        docs[0]["nodeRegistration"]["kubeletExtraArgs"],
        serde_json::json!([
            {"name": "node-ip", "value": "10.88.10.11"},
            // The sandbox image containerd is configured with (so image GC keeps it).
            {"name": "pod-infra-container-image", "value": "10.88.10.11:5000/pause:3.10"}
        ])
    );
    // Every lab master is also a KubeXM load-balancer node on 6443: a per-node patch binds
    // the API server to the node's address.
    assert_eq!(
        docs[0]["patches"]["directory"],
        "/etc/kubernetes/kubexm/patches"
    );
    let cc = &docs[1];
    assert_eq!(cc["controlPlaneEndpoint"], "lb.kubexm.internal:6443");
    assert_eq!(cc["kubernetesVersion"], "v1.33.11");
    assert_eq!(cc["imageRepository"], "10.88.10.11:5000");
    assert_eq!(cc["dns"]["imageRepository"], "10.88.10.11:5000/coredns");
    assert_eq!(cc["dns"]["imageTag"], "v1.12.0");
    assert_eq!(cc["networking"]["podSubnet"], "10.233.64.0/18");
    assert_eq!(
        cc["etcd"]["external"]["endpoints"],
        serde_json::json!([
            "https://10.88.10.11:2379",
            "https://10.88.10.12:2379",
            "https://10.88.10.13:2379"
        ])
    );
    assert_eq!(
        cc["etcd"]["external"]["certFile"],
        "/etc/kubernetes/pki/apiserver-etcd-client.crt"
    );
    let sans = cc["apiServer"]["certSANs"].as_array().expect("sans");
    for want in [
        "lb.kubexm.internal",
        "10.88.10.100",
        "node2",
        "10.88.10.13",
        "127.0.0.1",
    ] {
        assert!(sans.iter().any(|s| s == want), "{want} not in {sans:?}");
    }
    assert_eq!(docs[2]["cgroupDriver"], "systemd");
    assert_eq!(docs[2]["clusterDNS"], serde_json::json!(["169.254.25.10"]));
    assert_eq!(docs[3]["mode"], "ipvs");
    insta::assert_snapshot!("kubeadm-init-lab-v1beta4", init);

    let join = join_text(&ctx, &s, "node2", true);
    let j = &yaml_docs(&join)[0];
    assert_eq!(j["kind"], "JoinConfiguration");
    assert_eq!(
        j["discovery"]["bootstrapToken"]["token"],
        "7r2k9x.q4m8z1c0v5b3n6h2"
    );
    assert_eq!(
        j["controlPlane"]["localAPIEndpoint"]["advertiseAddress"],
        "10.88.10.12"
    );
    assert_eq!(j["controlPlane"]["certificateKey"], "cd".repeat(32));
    insta::assert_snapshot!("kubeadm-join-lab-node2-control-plane", join);

    // The patch and the etcd client files come before kubeadm runs.
    let n = s.node(ctx.node("node1").expect("node1"), true, false);
    let files = s.control_plane_files(&n).expect("files");
    let plan: Vec<String> = files.iter().map(|o| o.generic().plan().detail).collect();
    // kubeadm v1.20's --upload-certs reads the etcd client key as SEC1 ("EC PRIVATE KEY"):
    // the node's PKCS#8 key is converted, not copied.
    assert!(
        plan.iter().any(|d| d.contains(
            "openssl ec -in /etc/ssl/etcd/ssl/node-node1-key.pem -out /etc/kubernetes/pki/apiserver-etcd-client.key.kubexm-part"
        ) && d.contains("mv -f /etc/kubernetes/pki/apiserver-etcd-client.key.kubexm-part /etc/kubernetes/pki/apiserver-etcd-client.key")),
        "{plan:?}"
    );
    let patch = files
        .iter()
        .find_map(|o| match o {
            Op::Template(t) if t.file.dest.ends_with("kube-apiserver+json.yaml") => {
                Some(String::from_utf8(t.text().to_vec()).expect("utf-8"))
            }
            _ => None,
        })
        .expect("patch rendered");
    assert_eq!(
        yaml_docs(&patch)[0],
        serde_json::json!([{"op": "add", "path": "/spec/containers/0/command/-", "value": "--bind-address=10.88.10.11"}])
    );
    insta::assert_snapshot!("kube-apiserver-patch-node1", patch);
}

#[test]
fn stacked_etcd_no_lb_and_component_settings_on_v1_31() {
    let ctx = example_context(|t| {
        t.edit("version: v1.33.11", "version: v1.31.13")
            .edit("etcd: [\"master[1:3]\"]", "etcd: []")
            .edit("  etcd:\n    type: kubexm\n", "  etcd:\n    type: kubeadm\n")
            .edit("proxyMode: ipvs", "proxyMode: iptables\n    featureGates: {SidecarContainers: true, InPlacePodVerticalScaling: false}\n    apiserverArgs: {audit-log-maxage: \"30\"}\n    kubeletArgs: {max-open-files: \"1000000\"}")
            .edit("master: [\"master[1:3]\"]", "master: [master1]")
            .edit("worker: [\"node[1:2]\"]", "worker: [master2, master3, \"node[1:2]\"]")
            .edit("    mode: internal\n    internal:\n      type: haproxy\n", "    mode: none\n")
    });
    let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
    assert_eq!(s.api, KubeadmApi::V1beta4);
    let init = init_text(&ctx, &s, "master1", false);
    let docs = yaml_docs(&init);
    let cc = &docs[1];
    assert_eq!(cc["kubernetesVersion"], "v1.31.13");
    // No load balancer: the endpoint's domain resolves to the first master.
    assert_eq!(cc["controlPlaneEndpoint"], "lb.kubexm.internal:6443");
    assert_eq!(cc["imageRepository"], "dockerhub.kubexm.local/kubexm");
    assert_eq!(
        cc["etcd"]["local"]["imageRepository"],
        "dockerhub.kubexm.local/kubexm"
    );
    assert_eq!(cc["etcd"]["local"]["imageTag"], "3.5.15-0");
    assert_eq!(cc["etcd"]["local"]["dataDir"], "/var/lib/etcd");
    assert!(cc["etcd"]["external"].is_null());
    assert_eq!(
        cc["apiServer"]["extraArgs"],
        serde_json::json!([
            {"name": "audit-log-maxage", "value": "30"},
            {"name": "feature-gates", "value": "InPlacePodVerticalScaling=false,SidecarContainers=true"}
        ])
    );
    assert!(cc["apiServer"]["certSANs"]
        .as_array()
        .expect("sans")
        .iter()
        .any(|s| s == "api.demo.example.com"));
    assert_eq!(
        docs[0]["nodeRegistration"]["kubeletExtraArgs"][0],
        serde_json::json!({"name": "max-open-files", "value": "1000000"})
    );
    assert!(docs[0]["patches"].is_null(), "no load balancer on masters");
    assert_eq!(docs[2]["featureGates"]["SidecarContainers"], true);
    assert_eq!(docs[3]["mode"], "iptables");
    assert!(docs[3]["ipvs"].is_null());
    insta::assert_snapshot!("kubeadm-init-stacked-etcd-v1.31", init);
    // The etcd image is bundled for the masters (stacked etcd).
    assert!(ctx
        .image_references()
        .contains(&"registry.k8s.io/etcd:3.5.15-0".to_string()));
}

#[test]
fn user_external_etcd_and_the_v1beta3_api_before_v1_31() {
    let pki = tempfile::tempdir().expect("tempdir");
    for f in ["ca.pem", "client.pem", "client-key.pem"] {
        std::fs::write(pki.path().join(f), format!("--- {f} ---\n")).expect("write pem");
    }
    let p = |f: &str| pki.path().join(f).display().to_string();
    let etcd = format!(
        "  etcd:\n    type: external\n    endpoints: [\"https://10.0.0.5:2379\"]\n    caFile: {}\n    certFile: {}\n    keyFile: {}\n",
        p("ca.pem"),
        p("client.pem"),
        p("client-key.pem")
    );
    let ctx = example_context(|t| {
        t.edit("etcd: [\"master[1:3]\"]", "etcd: []")
            .edit("  etcd:\n    type: kubexm\n", &etcd)
            .edit(
                "apiserverCertExtraSans: [api.demo.example.com]",
                "apiserverCertExtraSans: [api.demo.example.com]\n    schedulerArgs: {v: \"2\"}",
            )
    });
    let v130: KubeVersion = "v1.30.14".parse().expect("version");
    assert_eq!(v130.kubeadm_api(), KubeadmApi::V1beta3);
    let s = KubeadmSettings::for_version(&ctx, v130, Default::default()).expect("settings");
    let init = init_text(&ctx, &s, "master1", false);
    let docs = yaml_docs(&init);
    assert_eq!(docs[0]["apiVersion"], "kubeadm.k8s.io/v1beta3");
    // v1beta3 extra arguments are maps.
    assert_eq!(
        docs[0]["nodeRegistration"]["kubeletExtraArgs"],
        serde_json::json!({
            "node-ip": "192.168.10.11",
            "pod-infra-container-image": "dockerhub.kubexm.local/kubexm/pause:3.10"
        })
    );
    assert_eq!(
        docs[1]["scheduler"]["extraArgs"],
        serde_json::json!({"v": "2"})
    );
    assert_eq!(
        docs[1]["etcd"]["external"]["endpoints"],
        serde_json::json!(["https://10.0.0.5:2379"])
    );
    insta::assert_snapshot!("kubeadm-init-external-etcd-v1beta3", init);
    // The user's files are uploaded from the control host to kubeadm's paths.
    let n = s.node(ctx.node("master2").expect("master2"), true, false);
    let files = s.control_plane_files(&n).expect("files");
    let uploads: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter_map(|o| match o {
            Op::Upload(u) => match &u.source {
                kubexm_install::runner::UploadSource::Bytes(b) => Some((u.dest.clone(), b.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        uploads,
        vec![
            (
                "/etc/kubernetes/pki/etcd/ca.crt".to_string(),
                b"--- ca.pem ---\n".to_vec()
            ),
            (
                "/etc/kubernetes/pki/apiserver-etcd-client.crt".to_string(),
                b"--- client.pem ---\n".to_vec()
            ),
            (
                "/etc/kubernetes/pki/apiserver-etcd-client.key".to_string(),
                b"--- client-key.pem ---\n".to_vec()
            ),
        ]
    );
    let join = join_text(&ctx, &s, "node1", false);
    let j = &yaml_docs(&join)[0];
    assert_eq!(j["apiVersion"], "kubeadm.k8s.io/v1beta3");
    assert!(j["controlPlane"].is_null(), "a worker");
    assert_eq!(
        j["nodeRegistration"]["kubeletExtraArgs"],
        serde_json::json!({
            "node-ip": "192.168.10.21",
            "pod-infra-container-image": "dockerhub.kubexm.local/kubexm/pause:3.10"
        })
    );
    insta::assert_snapshot!("kubeadm-join-worker-v1beta3", join);
}

#[test]
fn kubelet_unit_and_kubeadm_drop_in() {
    let ctx = lab_context(|t| t);
    let module = KubeadmModule::new(ctx.clone(), Default::default());
    let files: Vec<(String, String, String)> = rendered(&ctx, &OnlyFirstTask(&module));
    let unit = file_of(&files, "node2", "/etc/systemd/system/kubelet.service");
    assert!(
        unit.contains("ExecStart=/usr/local/bin/kubelet\n"),
        "{unit}"
    );
    insta::assert_snapshot!("kubelet.service", unit);
    let dropin = file_of(
        &files,
        "node3",
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
    );
    assert!(dropin.contains("EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env"));
    insta::assert_snapshot!("10-kubeadm.conf", dropin);
}

/// The first task of a module (the others need facts learned at run time).
struct OnlyFirstTask<'a>(&'a dyn Module);

impl Module for OnlyFirstTask<'_> {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn tasks(
        &self,
    ) -> Result<Vec<kubexm_install::pipeline::Task>, kubexm_install::pipeline::StepError> {
        Ok(self.0.tasks()?.into_iter().take(1).collect())
    }
}

fn module_tasks(ctx: &Arc<InstallContext>) -> Vec<(String, Vec<String>, Vec<String>)> {
    KubeadmModule::new(ctx.clone(), Default::default())
        .tasks()
        .expect("tasks")
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.hosts.clone(),
                t.steps.iter().map(|s| s.name().to_string()).collect(),
            )
        })
        .collect()
}

#[test]
fn kubelet_serving_csrs_are_learned_then_approved_on_the_first_master_for_every_node() {
    let ctx = lab_context(|t| t);
    let tasks = module_tasks(&ctx);
    let at = |name: &str| {
        tasks
            .iter()
            .position(|t| t.0 == name)
            .unwrap_or_else(|| panic!("no task {name}"))
    };
    // After every join (the kubelets ask when they start) and the node roles.
    assert!(at("kubelet-serving-csrs") > at("join-credentials"));
    assert!(at("kubelet-serving-csrs") > at("node-roles"));
    assert_eq!(
        at("approve-kubelet-serving-csrs"),
        at("kubelet-serving-csrs") + 1
    );
    for name in ["kubelet-serving-csrs", "approve-kubelet-serving-csrs"] {
        assert_eq!(
            tasks[at(name)].1,
            ["node1"],
            "{name} runs on the first master"
        );
    }
    // The plan names every master and worker (the CSRs are only known at run time).
    let module = KubeadmModule::new(ctx.clone(), Default::default());
    let all = module.tasks().expect("tasks");
    let approve = &all[at("approve-kubelet-serving-csrs")];
    let node = ctx.node("node1").expect("node1");
    let planned: Vec<String> = approve.steps[0]
        .ops(node, &kubexm_install::pipeline::Facts::default().for_plan())
        .expect("plan")
        .iter()
        .map(|o| o.generic().plan().detail)
        .collect();
    let kube_nodes: Vec<String> = ctx
        .nodes
        .iter()
        .filter(|n| {
            !n.roles.is_empty()
                && n.roles.iter().any(|r| {
                    matches!(
                        r,
                        kubexm_manifests::resolve::Role::Master
                            | kubexm_manifests::resolve::Role::Worker
                    )
                })
        })
        .map(|n| n.name.clone())
        .collect();
    assert_eq!(planned.len(), kube_nodes.len(), "{planned:?}");
    for n in &kube_nodes {
        assert!(
            planned
                .iter()
                .any(|p| p.contains(&format!("CSR of system:node:{n}, checked"))),
            "{n}: {planned:?}"
        );
    }
    // A kubelet restarted after it asked (a worker behind the internal load balancer's local
    // proxy, seen on real v1.20.2) asks again: the nodes still without a serving certificate
    // settle briefly, the CSRs are read and approved a second time (no wait), then every kubelet
    // must serve its certificate.
    assert_eq!(
        at("kubelet-serving-settle"),
        at("approve-kubelet-serving-csrs") + 1
    );
    assert_eq!(
        at("kubelet-serving-csrs-again"),
        at("kubelet-serving-settle") + 1
    );
    assert_eq!(
        at("approve-kubelet-serving-csrs-again"),
        at("kubelet-serving-csrs-again") + 1
    );
    assert_eq!(at("kubelet-serving-certificates"), tasks.len() - 1);
    for name in [
        "kubelet-serving-csrs-again",
        "approve-kubelet-serving-csrs-again",
    ] {
        assert_eq!(tasks[at(name)].1, ["node1"], "{name}");
    }
    for name in ["kubelet-serving-settle", "kubelet-serving-certificates"] {
        assert_eq!(
            tasks[at(name)].1,
            kube_nodes,
            "{name} runs on every kubelet's node"
        );
    }
    let ops_of = |name: &str| -> Vec<String> {
        all[at(name)].steps[0]
            .ops(node, &kubexm_install::pipeline::Facts::default().for_plan())
            .expect("plan")
            .iter()
            .map(|o| o.generic().plan().detail)
            .collect()
    };
    let again = ops_of("kubelet-serving-csrs-again");
    assert!(
        again.len() == 1 && again[0].ends_with(" get csr -o json") && !again[0].contains("sleep"),
        "the second reading does not wait: {again:?}"
    );
    let settle = ops_of("kubelet-serving-settle").join("\n");
    assert!(
        settle.contains("[ -s /var/lib/kubelet/pki/kubelet-server-current.pem ]")
            && settle.contains("-lt 10 "),
        "bounded, and nothing to wait for with a certificate: {settle}"
    );
    let fetched = ops_of("kubelet-serving-certificates").join("\n");
    assert!(
        fetched.contains("[ -s /var/lib/kubelet/pki/kubelet-server-current.pem ]"),
        "{fetched}"
    );
}

#[test]
fn task_order_per_load_balancer_mode() {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // Internal haproxy (the example): workers get the local proxy after joining.
    let ctx = example_context(|t| t);
    let tasks = module_tasks(&ctx);
    let names: Vec<&str> = tasks.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "kubernetes-binaries",
            "kubeadm-init",
            "fetch-admin-kubeconfig",
            "join-credentials",
            "join-control-plane",
            "kube-proxy-after-control-plane-joins",
            "join-workers",
            "kubeadm-reconfigure",
            "kubelet-settings",
            "kube-proxy-settings",
            // After kube-proxy's settings: kubeadm writes the endpoint back into its ConfigMap.
            "kube-proxy-via-local-proxy",
            "node-roles",
            "kubelet-serving-csrs",
            "approve-kubelet-serving-csrs",
            "kubelet-serving-settle",
            "kubelet-serving-csrs-again",
            "approve-kubelet-serving-csrs-again",
            "kubelet-serving-certificates"
        ]
    );
    // Each control-plane node settles before the next joins; its kubelet then talks to its
    // own API server (127.0.0.1:6443), not to the first master the endpoint's name resolves to.
    assert_eq!(tasks[4].1, v(&["master2", "master3"]));
    assert_eq!(
        tasks[4].2,
        v(&[
            "kubeadm-join-control-plane",
            "control-plane-settled",
            "kubelet-via-local-proxy"
        ])
    );
    assert_eq!(
        tasks[1].2,
        v(&[
            "kubeadm-init",
            "control-plane-settled",
            "kubelet-via-local-proxy"
        ])
    );
    // kube-proxy is restarted once, on the first master, after every control-plane join.
    assert_eq!(tasks[5].1, v(&["master1"]));
    assert_eq!(tasks[6].1, v(&["node1", "node2"]));
    assert_eq!(
        tasks[6].2,
        v(&["kubeadm-join", "local-api-proxy", "kubelet-via-local-proxy"])
    );
    let m = KubeadmModule::new(ctx.clone(), Default::default())
        .tasks()
        .expect("tasks");
    assert!(!m[4].parallel, "control-plane nodes join one at a time");
    assert!(m[5].parallel, "workers join in parallel");

    // kube-vip: on the first master before init (super-admin.conf), switched to admin.conf
    // after init, and on the other masters after they joined.
    let ctx = kube_vip_example();
    let tasks = module_tasks(&ctx);
    let names: Vec<&str> = tasks.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "kubernetes-binaries",
            "kube-vip-first-master",
            "kubeadm-init",
            "fetch-admin-kubeconfig",
            "join-credentials",
            "join-control-plane",
            "kube-proxy-after-control-plane-joins",
            "join-workers",
            "kubeadm-reconfigure",
            "kubelet-settings",
            "kube-proxy-settings",
            "node-roles",
            "kubelet-serving-csrs",
            "approve-kubelet-serving-csrs",
            "kubelet-serving-settle",
            "kubelet-serving-csrs-again",
            "approve-kubelet-serving-csrs-again",
            "kubelet-serving-certificates"
        ]
    );
    assert_eq!(
        tasks[2].2,
        v(&["kubeadm-init", "kube-vip", "control-plane-settled"])
    );
    assert_eq!(
        tasks[5].2,
        v(&[
            "kubeadm-join-control-plane",
            "control-plane-settled",
            "kube-vip"
        ])
    );
    // kubeadm accepts the manifest placed before init.
    let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
    let init = init_text(&ctx, &s, "master1", true);
    assert_eq!(
        yaml_docs(&init)[0]["nodeRegistration"]["ignorePreflightErrors"],
        serde_json::json!(["DirAvailable--etc-kubernetes-manifests"])
    );
    // One master, no workers: nothing to join.
    let ctx = example_context(|t| {
        t.edit("master: [\"master[1:3]\"]", "master: [master1]")
            .edit("etcd: [\"master[1:3]\"]", "etcd: [master1]")
            .edit("worker: [\"node[1:2]\"]", "worker: [master1]")
            .edit(
                "    mode: internal\n    internal:\n      type: haproxy\n",
                "    mode: none\n",
            )
    });
    let names: Vec<String> = module_tasks(&ctx).into_iter().map(|t| t.0).collect();
    assert_eq!(
        names,
        v(&[
            "kubernetes-binaries",
            "kubeadm-init",
            "fetch-admin-kubeconfig",
            "kubeadm-reconfigure",
            "kubelet-settings",
            "kube-proxy-settings",
            "node-roles",
            "kubelet-serving-csrs",
            "approve-kubelet-serving-csrs",
            "kubelet-serving-settle",
            "kubelet-serving-csrs-again",
            "approve-kubelet-serving-csrs-again",
            "kubelet-serving-certificates"
        ])
    );
}

#[test]
fn kube_vip_static_pods() {
    let ctx = kube_vip_example();
    let before = KubeVip::new(&ctx, SUPER_ADMIN_CONF).expect("kube-vip");
    let text = String::from_utf8(before.render().expect("render").text().to_vec()).expect("utf-8");
    let pod = &yaml_docs(&text)[0];
    assert_eq!(pod["kind"], "Pod");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        c["image"],
        "dockerhub.kubexm.local/kubexm/kube-vip/kube-vip:v1.0.3"
    );
    let env: std::collections::BTreeMap<String, String> = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or("").to_string(),
                e["value"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(env["address"], "192.168.10.100");
    assert_eq!(env["vip_interface"], "eth0");
    // kube-vip v1.0 (the catalog's) reads the prefix length from vip_subnet, not vip_cidr.
    assert_eq!(env["vip_subnet"], "32");
    assert!(!env.contains_key("vip_cidr"));
    assert_eq!(env["cp_enable"], "true");
    assert_eq!(
        pod["spec"]["volumes"][0]["hostPath"]["path"],
        "/etc/kubernetes/super-admin.conf"
    );
    insta::assert_snapshot!("kube-vip-before-init", text);
    let after = KubeVip::new(&ctx, ADMIN_CONF).expect("kube-vip");
    let text = String::from_utf8(after.render().expect("render").text().to_vec()).expect("utf-8");
    assert_eq!(
        yaml_docs(&text)[0]["spec"]["volumes"][0]["hostPath"]["path"],
        "/etc/kubernetes/admin.conf"
    );
}

#[test]
fn local_proxies_of_the_internal_load_balancer_pass_haproxy_and_nginx() {
    let ctx = example_context(|t| t);
    let files = LocalProxy::new(&ctx, LocalProxyKind::Haproxy)
        .expect("haproxy")
        .render()
        .expect("render");
    let cfg = String::from_utf8(files[0].text().to_vec()).expect("utf-8");
    assert_eq!(files[0].file.dest, "/etc/kubexm/kube-lb/haproxy.cfg");
    assert!(cfg.contains("bind 127.0.0.1:6443"), "{cfg}");
    for a in [
        "192.168.10.11:6443",
        "192.168.10.12:6443",
        "192.168.10.13:6443",
    ] {
        assert!(cfg.contains(a), "{cfg}");
    }
    check_with("haproxy", &["-c", "-q", "-f", "FILE"], &cfg, "haproxy.cfg");
    insta::assert_snapshot!("internal-lb-haproxy.cfg", cfg);
    let pod = String::from_utf8(files[1].text().to_vec()).expect("utf-8");
    let p = &yaml_docs(&pod)[0];
    assert_eq!(
        p["spec"]["containers"][0]["image"],
        "dockerhub.kubexm.local/kubexm/library/haproxy:3.2.19-alpine"
    );
    assert_eq!(
        p["metadata"]["annotations"]["kubexm.io/config-sha256"],
        files[0].file.sha256
    );
    insta::assert_snapshot!("internal-lb-haproxy-pod", pod);

    let ctx = example_context(|t| t.edit("      type: haproxy\n", "      type: nginx\n"));
    let files = LocalProxy::new(&ctx, LocalProxyKind::Nginx)
        .expect("nginx")
        .render()
        .expect("render");
    let cfg = String::from_utf8(files[0].text().to_vec()).expect("utf-8");
    // nginx -t binds its listeners: in a network namespace of its own with loopback up.
    // The nginx image has the stream module built in; this host's Debian nginx loads it as a
    // dynamic module.
    let local = format!("include /etc/nginx/modules-enabled/*.conf;\n{cfg}");
    check_with(
        "unshare",
        &["-n", "sh", "-c", "ip link set lo up && nginx -q -t -c FILE"],
        &local,
        "nginx.conf",
    );
    insta::assert_snapshot!("internal-lb-nginx.conf", cfg);
    let pod = String::from_utf8(files[1].text().to_vec()).expect("utf-8");
    assert_eq!(
        yaml_docs(&pod)[0]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        "/etc/nginx/nginx.conf"
    );
    insta::assert_snapshot!("internal-lb-nginx-pod", pod);
}

// ---- the join-credentials parser on kubeadm's real output formats ----

const HASH: &str = "sha256:9f1b2c7e4a0d3c6b8e5f7a2d1c4b6e8f0a3c5d7e9b1f2a4c6d8e0b2a4c6e8f01";
const KEY: &str = "3b7e1f9a2c4d6e8f0a1b3c5d7e9f1a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f";

/// `kubeadm init --upload-certs` with a control-plane endpoint, as kubeadm v1.21+ (v1.31,
/// v1.33) prints it: continuation lines start with a tab; the control-plane command is indented
/// by two spaces, the worker command not; the worker command ends with a space.
fn init_output_v133() -> String {
    format!(
        "[init] Using Kubernetes version: v1.33.11\n\
[preflight] Running pre-flight checks\n\
[upload-certs] Storing the certificates in Secret \"kubeadm-certs\" in the \"kube-system\" Namespace\n\
[upload-certs] Using certificate key:\n\
{KEY}\n\
[bootstrap-token] Using token: 7r2k9x.q4m8z1c0v5b3n6h2\n\
[addons] Applied essential addon: CoreDNS\n\
[addons] Applied essential addon: kube-proxy\n\
\n\
Your Kubernetes control-plane has initialized successfully!\n\
\n\
To start using your cluster, you need to run the following as a regular user:\n\
\n\
  mkdir -p $HOME/.kube\n\
  sudo cp -i /etc/kubernetes/admin.conf $HOME/.kube/config\n\
  sudo chown $(id -u):$(id -g) $HOME/.kube/config\n\
\n\
Alternatively, if you are the root user, you can run:\n\
\n\
  export KUBECONFIG=/etc/kubernetes/admin.conf\n\
\n\
You should now deploy a pod network to the cluster.\n\
Run \"kubectl apply -f [podnetwork].yaml\" with one of the options listed at:\n\
  https://kubernetes.io/docs/concepts/cluster-administration/addons/\n\
\n\
You can now join any number of the control-plane node running the following command on each as root:\n\
\n\
  kubeadm join lb.kubexm.internal:6443 --token 7r2k9x.q4m8z1c0v5b3n6h2 \\\n\
\t--discovery-token-ca-cert-hash {HASH} \\\n\
\t--control-plane --certificate-key {KEY}\n\
\n\
Please note that the certificate-key gives access to cluster sensitive data, keep it secret!\n\
As a safeguard, uploaded-certs will be deleted in two hours; If necessary, you can use\n\
\"kubeadm init phase upload-certs --upload-certs\" to reload certs afterward.\n\
\n\
Then you can join any number of worker nodes by running the following on each as root:\n\
\n\
kubeadm join lb.kubexm.internal:6443 --token 7r2k9x.q4m8z1c0v5b3n6h2 \\\n\
\t--discovery-token-ca-cert-hash {HASH} \n"
    )
}

/// The same from kubeadm v1.14–v1.20: continuation lines indented by four spaces, no
/// "Alternatively" paragraph.
fn init_output_v119() -> String {
    format!(
        "Your Kubernetes control-plane has initialized successfully!\n\
\n\
To start using your cluster, you need to run the following as a regular user:\n\
\n\
  mkdir -p $HOME/.kube\n\
  sudo cp -i /etc/kubernetes/admin.conf $HOME/.kube/config\n\
  sudo chown $(id -u):$(id -g) $HOME/.kube/config\n\
\n\
You should now deploy a pod network to the cluster.\n\
Run \"kubectl apply -f [podnetwork].yaml\" with one of the options listed at:\n\
  https://kubernetes.io/docs/concepts/cluster-administration/addons/\n\
\n\
You can now join any number of the control-plane node running the following command on each as root:\n\
\n\
  kubeadm join 10.0.0.10:6443 --token abcdef.0123456789abcdef \\\n\
    --discovery-token-ca-cert-hash {HASH} \\\n\
    --control-plane --certificate-key {KEY}\n\
\n\
Please note that the certificate-key gives access to cluster sensitive data, keep it secret!\n\
As a safeguard, uploaded-certs will be deleted in two hours; If necessary, you can use\n\
\"kubeadm init phase upload-certs --upload-certs\" to reload certs afterward.\n\
\n\
Then you can join any number of worker nodes by running the following on each as root:\n\
\n\
kubeadm join 10.0.0.10:6443 --token abcdef.0123456789abcdef \\\n\
    --discovery-token-ca-cert-hash {HASH} \n"
    )
}

#[test]
fn join_credentials_from_init_output_v1_21_and_later() {
    let c = parse(&init_output_v133()).expect("parsed");
    assert_eq!(c.endpoint, "lb.kubexm.internal:6443");
    assert_eq!(c.token, "7r2k9x.q4m8z1c0v5b3n6h2");
    assert_eq!(c.token_id(), "7r2k9x");
    assert_eq!(c.ca_cert_hashes, vec![HASH.to_string()]);
    assert_eq!(c.certificate_key.as_deref(), Some(KEY));
    // The token and key never show in debug output.
    let dbg = format!("{c:?}");
    assert!(
        !dbg.contains("q4m8z1c0v5b3n6h2") && !dbg.contains(KEY),
        "{dbg}"
    );
}

#[test]
fn join_credentials_from_init_output_v1_19() {
    let c = parse(&init_output_v119()).expect("parsed");
    assert_eq!(c.endpoint, "10.0.0.10:6443");
    assert_eq!(c.token, "abcdef.0123456789abcdef");
    assert_eq!(c.ca_cert_hashes, vec![HASH.to_string()]);
    assert_eq!(c.certificate_key.as_deref(), Some(KEY));
}

#[test]
fn fresh_token_and_reuploaded_certificates_replace_the_init_ones() {
    // The first master's credentials file: the init output, then a fresh token from
    // `kubeadm token create --print-join-command` (one line, trailing space) and the output of
    // `kubeadm init phase upload-certs --upload-certs`.
    let key2 = "0".repeat(63) + "1";
    let text = format!(
        "kubeadm join lb.kubexm.internal:6443 --token z9y8x7.w6v5u4t3s2r1q0p9 --discovery-token-ca-cert-hash {HASH} \n\
[upload-certs] Storing the certificates in Secret \"kubeadm-certs\" in the \"kube-system\" Namespace\n\
[upload-certs] Using certificate key:\n\
{key2}\n"
    );
    let c = parse(&text).expect("parsed");
    assert_eq!(c.token, "z9y8x7.w6v5u4t3s2r1q0p9");
    assert_eq!(c.certificate_key, Some(key2.clone()));
    // Appended to an init output, the newest values win.
    let both = format!("{}{text}", init_output_v133());
    let c = parse(&both).expect("parsed");
    assert_eq!(c.token, "z9y8x7.w6v5u4t3s2r1q0p9");
    assert_eq!(c.certificate_key, Some(key2));
    // A control-plane command from `token create --certificate-key` carries its key itself.
    let cp = format!(
        "kubeadm join 10.0.0.10:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash {HASH} --control-plane --certificate-key {KEY}\n"
    );
    assert_eq!(
        parse(&cp).expect("parsed").certificate_key.as_deref(),
        Some(KEY)
    );
    // Without a control-plane endpoint kubeadm prints only the worker command and no key.
    let worker_only = init_output_v133()
        .split("You can now join")
        .next()
        .unwrap_or("")
        .edit(&format!("[upload-certs] Using certificate key:\n{KEY}\n"), "")
        + &format!("Then you can join any number of worker nodes by running the following on each as root:\n\nkubeadm join 10.0.0.10:6443 --token abcdef.0123456789abcdef \\\n\t--discovery-token-ca-cert-hash {HASH} \n");
    let c = parse(&worker_only).expect("parsed");
    assert_eq!(c.certificate_key, None);
}

#[test]
fn malformed_outputs_are_named_without_quoting_the_token() {
    assert_eq!(
        parse("[init] Using Kubernetes version: v1.33.11\nerror execution phase preflight\n"),
        Err(JoinParseError::NoJoinCommand)
    );
    let withheld = format!(
        "kubeadm join 10.0.0.10:6443 --token <value withheld> --discovery-token-ca-cert-hash {HASH} \n"
    );
    assert_eq!(parse(&withheld), Err(JoinParseError::TokenWithheld));
    let bad_token = format!(
        "kubeadm join 10.0.0.10:6443 --token ABCDEF.0123456789abcdef --discovery-token-ca-cert-hash {HASH}\n"
    );
    let err = parse(&bad_token).expect_err("uppercase token").to_string();
    assert!(err.contains("--token") && !err.contains("ABCDEF"), "{err}");
    let no_hash = "kubeadm join 10.0.0.10:6443 --token abcdef.0123456789abcdef\n";
    assert!(parse(no_hash)
        .expect_err("no hash")
        .to_string()
        .contains("--discovery-token-ca-cert-hash"));
    let bad_key = init_output_v133().edit(KEY, "tooshort");
    assert!(parse(&bad_key)
        .expect_err("bad key")
        .to_string()
        .contains("certificate key"));
    let no_port = format!(
        "kubeadm join lb.kubexm.internal --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash {HASH}\n"
    );
    assert!(parse(&no_port).is_err());
}

/// Found by the `kubeadm_join` fuzz target: an endpoint holding control characters
/// (`lb.kubexm\u{1}\0\0\0.internal:6443`) was accepted and would have been rendered into every
/// node's join configuration.
#[test]
fn join_endpoint_with_control_characters_is_refused() {
    let with = |endpoint: &str| {
        format!(
            "kubeadm join {endpoint} --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash {HASH}\n"
        )
    };
    for bad in [
        "lb.kubexm\u{1}\0\0\0.internal:6443",
        "\u{1b}[32mlb:6443",
        "lb.kubexm.internal:+6443",
        "lb.kubexm.internal:0",
        "lb.kubexm.internal:65536",
        "\"lb\":6443",
        "LB.example:6443",
        "[not-v6]:6443",
        ":6443",
    ] {
        let err = parse(&with(bad)).expect_err(bad).to_string();
        assert!(err.contains("HOST:PORT"), "{bad:?}: {err}");
    }
    for good in [
        "10.0.0.10:6443",
        "lb.kubexm.internal:6443",
        "[fd00::10]:6443",
    ] {
        assert_eq!(parse(&with(good)).expect(good).endpoint, good);
    }
}

#[test]
fn learned_credentials_round_trip_through_facts() {
    let facts = Facts::default();
    assert!(JoinCredentials::from_facts(&facts).is_none());
    for (k, v) in kubexm_install::modules::kubeadm::join::learn(&init_output_v133()).expect("learn")
    {
        facts.set(k, v);
    }
    assert_eq!(
        JoinCredentials::from_facts(&facts),
        Some(parse(&init_output_v133()).expect("parsed"))
    );
    let err = kubexm_install::modules::kubeadm::join::learn("nothing").expect_err("nothing");
    assert!(err.contains("kubeadm join"), "{err}");
}

#[test]
fn the_credentials_script_renews_tokens_and_certificates_only_when_needed() {
    let cp = LearnJoinCredentials {
        control_planes: true,
    }
    .script();
    for want in [
        "cp /etc/kubernetes/kubexm/kubeadm-init.log \"$cur\"",
        "get secret \"bootstrap-token-$id\" -o 'jsonpath={.data.expiration}'",
        "if [ \"$left\" -lt 3600 ] ||",
        "/usr/local/bin/kubeadm token create --print-join-command",
        "get secret kubeadm-certs -o name",
        "/usr/local/bin/kubeadm init phase upload-certs --upload-certs --config /etc/kubernetes/kubeadm-config.yaml",
    ] {
        assert!(cp.contains(want), "{want} missing from\n{cp}");
    }
    let workers = LearnJoinCredentials {
        control_planes: false,
    }
    .script();
    assert!(!workers.contains("upload-certs"), "{workers}");
    // The token-id extraction of the script agrees with the parser, on real output.
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("out");
    std::fs::write(&f, init_output_v133()).expect("write");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sed -n 's/.*--token \\([a-z0-9]\\{{6\\}}\\)\\.[a-z0-9]\\{{16\\}}.*/\\1/p' {} | tail -n 1",
            f.display()
        ))
        .output()
        .expect("sh");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7r2k9x");
    assert!(cp.contains("sed -n 's/.*--token \\([a-z0-9]\\{6\\}\\)\\.[a-z0-9]\\{16\\}.*/\\1/p'"));
    // Stored credentials that no longer pin the signing CA (a rotated cluster CA) are replaced.
    assert!(
        cp.contains("if pub=$(openssl x509 -in /etc/kubernetes/pki/ca.crt -noout -pubkey")
            && cp.contains("|| { [ -n \"$pin\" ] && ! grep -q \"sha256:$pin\" \"$cur\"; }; then"),
        "{cp}"
    );
}

/// The pin the credentials script computes is kubeadm's: the sha256 of the CA's DER
/// SubjectPublicKeyInfo, of the first certificate of a bundle.
#[test]
fn the_ca_pin_is_the_sha256_of_the_first_certificates_public_key_info() {
    use kubexm_install::modules::kubeadm::init::ca_pin_command;
    let dir = tempfile::tempdir().expect("tempdir");
    let first = kubexm_install::pki::Ca::load_or_create(dir.path(), "one", "one").expect("ca");
    let second = kubexm_install::pki::Ca::load_or_create(dir.path(), "two", "two").expect("ca");
    let bundle = dir.path().join("bundle.crt");
    std::fs::write(
        &bundle,
        format!("{}{}", first.cert_pem(), second.cert_pem()),
    )
    .expect("write");
    let pin_of = |crt: &std::path::Path| {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{}\nprintf %s \"$pin\"",
                ca_pin_command(&crt.display().to_string())
            ))
            .output()
            .expect("sh");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let pin = pin_of(&bundle);
    // No certificate (a stand-in's node, an unreadable file): no pin, nothing checked.
    assert_eq!(pin_of(&dir.path().join("absent.crt")), "");
    std::fs::write(dir.path().join("junk.crt"), "not a certificate").expect("write");
    assert_eq!(pin_of(&dir.path().join("junk.crt")), "");
    let (_, pem) = x509_parser::pem::parse_x509_pem(first.cert_pem().as_bytes()).expect("pem");
    let cert = pem.parse_x509().expect("x509");
    let want = kubexm_bundles::hash::sha256_hex(cert.tbs_certificate.subject_pki.raw);
    assert_eq!(pin, want);
}

/// `kubexm-install plan` of the example cluster (3 masters, 2 workers) lists the kubeadm path
/// in order, with no secret anywhere (the join configurations appear as size and digest).
#[test]
fn plan_of_three_masters_and_two_workers_is_complete_and_ordered() {
    let ctx = example_context(|t| t);
    let p = plan::build(
        &install_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Facts::default(),
    )
    .expect("plan");
    let modules: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        modules,
        [
            "preflight",
            "os-repository",
            "pre-install",
            "node-prep",
            "etcd-disk",
            "etcd",
            "loadbalancer",
            "registry",
            "runtime",
            "kubexm-certs",
            "kubexm-control-plane",
            "kubexm-nodes",
            "coredns",
            "kubeadm",
            "network",
            "nodelocaldns",
            "plugins",
            "addons",
            "finalize",
            "backup-timer",
            "post-install",
            "cluster-ready"
        ]
    );
    let text = p.to_text();
    let order = [
        "task kubernetes-binaries on master1,master2,master3,node1,node2",
        "task kubeadm-init on master1",
        "kubeadm init --config /etc/kubernetes/kubeadm-config.yaml --upload-certs",
        "task fetch-admin-kubeconfig on master1",
        "task join-credentials on master1",
        "task join-control-plane on master2,master3 (one at a time)",
        "task join-workers on node1,node2 (parallel)",
        "task node-roles on master1",
        "label node node1 --overwrite node-role.kubernetes.io/worker=",
        "task pod-network on master1",
        "helm upgrade --install calico",
        "task nodes-ready on master1",
        "task nodelocaldns on master1",
        "task addons on master1",
        "helm upgrade --install metrics-server",
    ];
    let mut at = 0;
    for want in order {
        let found = text[at..]
            .find(want)
            .unwrap_or_else(|| panic!("`{want}` missing after byte {at} of\n{text}"));
        at += found + want.len();
    }
    assert!(
        !text.contains("learned from kubeadm init"),
        "placeholders stay inside files"
    );
}

/// Issue 33 item 2: from v1.35 kubeadm's system validator makes a cgroup v1 host a preflight
/// error; with `failCgroupV1: false` (the operator keeps cgroup v1) `init` and every `join`
/// ignore kubeadm's `SystemVerification` check. Before v1.35, or without the setting, the files
/// are as before (no such entry).
#[test]
fn cgroup_v1_kept_on_1_35_ignores_kubeadms_system_verification_at_init_and_join() {
    let work = tempfile::tempdir().expect("tempdir");
    let keep = |t: String| {
        t.edit(
            "    proxyMode: iptables\n",
            "    proxyMode: iptables\n    kubelet: {failCgroupV1: false}\n",
        )
    };
    let ignored = |docs: &[serde_json::Value], registration: &str| -> Vec<String> {
        docs[0]["nodeRegistration"]["ignorePreflightErrors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_else(|| {
                assert!(
                    docs[0]["nodeRegistration"]["ignorePreflightErrors"].is_null(),
                    "{registration}: {docs:?}"
                );
                Vec::new()
            })
    };
    for (version, kept, want) in [
        ("v1.35.4", true, true),
        ("v1.35.4", false, false),
        ("v1.31.13", true, false),
    ] {
        let ctx = if kept {
            crate::versions::cluster(work.path(), version, "kubeadm", keep)
        } else {
            crate::versions::cluster(work.path(), version, "kubeadm", |t| t)
        };
        let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
        assert_eq!(s.ignore_system_verification, want, "{version} kept={kept}");
        let init = yaml_docs(&init_text(&ctx, &s, "master1", false));
        let master2 = yaml_docs(&join_text(&ctx, &s, "master2", true));
        let worker1 = yaml_docs(&join_text(&ctx, &s, "worker1", false));
        for (what, docs) in [
            ("init", &init),
            ("join master2", &master2),
            ("join worker1", &worker1),
        ] {
            let list = ignored(docs, what);
            assert_eq!(
                list.iter().any(|e| e == "SystemVerification"),
                want,
                "{version} kept={kept} {what}: {list:?}"
            );
        }
    }
}

/// Issue 33 item 1: on a dual-stack cluster the kubelet's `--node-ip` is the node's IPv4 and
/// `internalAddressV6`; the kubelet reports both as InternalIPs and asks for both in its serving
/// CSR. The install's approval (and `certs renew`'s, the same tasks) accepts exactly the node's
/// own addresses: that CSR is approved, one naming another IPv6 address is not.
#[test]
fn dual_stack_serving_csrs_with_the_nodes_ipv6_address_are_approved() {
    use kubexm_install::modules::kubeadm::serving_csr::{
        ServingCsr, FACT, KUBELET_SERVING_SIGNER, NODES_GROUP,
    };
    use kubexm_install::pipeline::Facts;
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = crate::versions::cluster(work.path(), "v1.33.11", "kubeadm", |t| {
        t.edit(
            "    plugin: none\n",
            "    plugin: none\n    podCidr: \"10.233.64.0/18,fd00:10:233::/56\"\n    serviceCidr: \"10.233.0.0/18,fd00:10:96::/112\"\n",
        )
        .edit(
            "{name: worker1, address: 192.168.50.21}",
            "{name: worker1, address: 192.168.50.21, internalAddressV6: \"fd00:50::21\"}",
        )
    });
    // What the kubelet is told (and so puts in its CSR).
    let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
    let join = yaml_docs(&join_text(&ctx, &s, "worker1", false));
    assert_eq!(
        join[0]["nodeRegistration"]["kubeletExtraArgs"][0],
        serde_json::json!({"name": "node-ip", "value": "192.168.50.21,fd00:50::21"})
    );
    let csr = |name: &str, ips: &[&str]| ServingCsr {
        name: name.into(),
        username: "system:node:worker1".into(),
        usages: vec!["digital signature".into(), "server auth".into()],
        common_name: "system:node:worker1".into(),
        organizations: vec![NODES_GROUP.into()],
        dns: vec!["worker1".into()],
        ips: ips.iter().map(|i| i.parse().expect("ip")).collect(),
        other_names: Vec::new(),
    };
    let tasks = KubeadmModule::new(ctx.clone(), Default::default())
        .tasks()
        .expect("tasks");
    let approve = tasks
        .iter()
        .find(|t| t.name == "approve-kubelet-serving-csrs")
        .expect("approval task");
    assert_eq!(approve.steps.len(), 1);
    let first = ctx.node("master1").expect("master1");
    let approved = |csrs: Vec<ServingCsr>| {
        let facts = Facts::default();
        facts.set(FACT, serde_json::to_string(&csrs).expect("json"));
        approve.steps[0].ops(first, &facts).map(|ops| {
            ops.iter()
                .map(|o| o.generic().plan().detail)
                .collect::<Vec<_>>()
        })
    };
    let ok = approved(vec![csr("csr-w1", &["192.168.50.21", "fd00:50::21"])])
        .expect("the node's own IPv4 and IPv6 addresses are approved");
    assert_eq!(ok.len(), 1, "{ok:?}");
    assert!(ok[0].contains("certificate approve csr-w1"), "{ok:?}");
    let refused = approved(vec![csr("csr-x", &["192.168.50.21", "fd00:50::99"])])
        .expect_err("another IPv6 address is refused");
    assert!(refused.to_string().contains("fd00:50::99"), "{refused}");
    assert_eq!(KUBELET_SERVING_SIGNER, "kubernetes.io/kubelet-serving");
}

/// Issue 33 item 1 with a REAL kubelet's request: the serving CSR the kubelet v1.37.2 (built from
/// Go modules) made in a lab node with `--node-ip=10.88.61.11,fd00:88:61::11` and
/// `--hostname-override=worker1`, as its API server listed it (`installer/tests/fixtures/
/// serving-csr/`, captured by `tests/lab/kubernetes/capture-serving-csr`; its README says how).
/// Read by the install's own learn step, judged by its approval step and by `certs renew`'s:
/// approved for worker1 when cluster.yaml gives it that `internalAddress` and `internalAddressV6`
/// (the `--node-ip` KubeXM renders is then the one the capture used); refused, naming the IPv6
/// address, when the node's `internalAddressV6` is another.
#[test]
fn a_real_kubelets_dual_stack_serving_csr_is_approved_only_with_the_nodes_own_ipv6() {
    use base64::Engine as _;
    use kubexm_install::modules::certs::renew::{ApproveServingCsrsModule, Renew};
    use kubexm_install::modules::kubeadm::serving_csr::{ServingCsr, FACT};
    use kubexm_install::pipeline::Task;

    let fixtures = repo().join("installer/tests/fixtures/serving-csr");
    let list = std::fs::read_to_string(fixtures.join("kubelet-v1.37.2-dual-stack.csr.json"))
        .expect("the captured CSR list");
    let pem = std::fs::read_to_string(fixtures.join("kubelet-v1.37.2-dual-stack.csr.pem"))
        .expect("the captured request");
    let parsed: serde_json::Value = serde_json::from_str(&list).expect("JSON");
    let request = parsed["items"][0]["spec"]["request"]
        .as_str()
        .expect("spec.request");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(request)
            .expect("base64"),
        pem.as_bytes(),
        "the list's request is the committed PEM"
    );

    let work = tempfile::tempdir().expect("tempdir");
    // The example kubeadm cluster at v1.37.2 (the lab catalog pins it), dual-stack, worker1 with
    // the captured node's addresses; `address` is another (the SSH address).
    let fixture = repo().join("installer/tests/fixtures/kubexm/cluster.yaml");
    let cluster = |v6: &str| {
        let worker1 = format!(
            "{{name: worker1, address: 192.168.50.21, internalAddress: 10.88.61.11, \
             internalAddressV6: \"{v6}\"}}"
        );
        let text = std::fs::read_to_string(&fixture)
            .expect("fixture")
            .edit(
                "    type: kubexm\n    version: v1.31.13\n",
                "    type: kubeadm\n    version: v1.37.2\n",
            )
            .edit(
                "  etcd:\n    type: kubexm\n",
                "  etcd:\n    type: kubeadm\n",
            )
            .edit(
                "    plugin: calico\n",
                "    plugin: none\n    podCidr: \"10.233.64.0/18,fd00:10:233::/56\"\n    \
                 serviceCidr: \"10.233.0.0/18,fd00:10:96::/112\"\n",
            )
            .edit("{name: worker1, address: 192.168.50.21}", &worker1);
        let file = work.path().join("cluster.yaml");
        std::fs::write(&file, text).expect("write cluster.yaml");
        Arc::new(
            load_context(
                &file,
                Some(&repo().join("tests/lab/mirror/catalog-lab.yaml")),
                None,
                work.path(),
            )
            .expect("the dual-stack kubeadm cluster at v1.37.2 loads"),
        )
    };
    // The learn task's own parser on the captured list, then the approval task's ops.
    let approve = |tasks: &[Task], ctx: &InstallContext| {
        let first = ctx.node("master1").expect("master1");
        let task = |name: &str| {
            tasks
                .iter()
                .find(|t| t.name == name)
                .unwrap_or_else(|| panic!("task {name}"))
        };
        let facts = Facts::default();
        let ops = task("kubelet-serving-csrs").steps[0]
            .ops(first, &facts)
            .expect("learn ops");
        let [Op::Learn(learn)] = ops.as_slice() else {
            panic!("one learn op: {ops:?}")
        };
        for (k, v) in (learn.parse)(&list).expect("the captured list parses") {
            facts.set(k, v);
        }
        let learned: Vec<ServingCsr> =
            serde_json::from_str(&facts.get(FACT).expect("learned")).expect("CSRs");
        task("approve-kubelet-serving-csrs").steps[0]
            .ops(first, &facts)
            .map(|ops| {
                ops.iter()
                    .map(|o| o.generic().plan().detail)
                    .collect::<Vec<_>>()
            })
            .map(|approved| (learned, approved))
    };
    let install = |ctx: &Arc<InstallContext>| {
        KubeadmModule::new(ctx.clone(), Default::default())
            .tasks()
            .expect("install tasks")
    };
    let renew = |ctx: &Arc<InstallContext>| {
        ApproveServingCsrsModule(Renew {
            ctx: ctx.clone(),
            id: "1700000000".into(),
            under_days: 30,
            all: false,
            masters: Vec::new(),
            etcd: false,
            etcd_expired: false,
            kubernetes: false,
            workers: Vec::new(),
            serving: Vec::new(),
            registry: false,
        })
        .tasks()
        .expect("certs renew's approval tasks")
    };

    let ctx = cluster("fd00:88:61::11");
    // KubeXM tells the kubelet what the captured one was told.
    let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
    let join = yaml_docs(&join_text(&ctx, &s, "worker1", false));
    assert_eq!(
        join[0]["nodeRegistration"]["kubeletExtraArgs"][0],
        serde_json::json!({"name": "node-ip", "value": "10.88.61.11,fd00:88:61::11"})
    );
    for (what, tasks) in [("install", install(&ctx)), ("certs renew", renew(&ctx))] {
        let (learned, approved) = approve(&tasks, &ctx)
            .unwrap_or_else(|e| panic!("{what}: the node's own CSR is refused: {e}"));
        let [csr] = learned.as_slice() else {
            panic!("{what}: one pending CSR: {learned:?}")
        };
        assert_eq!(
            (csr.username.as_str(), csr.dns.as_slice()),
            ("system:node:worker1", ["worker1".to_string()].as_slice()),
            "{what}"
        );
        assert_eq!(
            csr.ips,
            ["10.88.61.11", "fd00:88:61::11"].map(|i| i.parse::<std::net::IpAddr>().expect("ip")),
            "{what}: the real kubelet asks for both InternalIPs"
        );
        assert_eq!(csr.usages, ["digital signature", "server auth"], "{what}");
        assert!(
            matches!(approved.as_slice(), [one] if one.contains("certificate approve csr-4lq5z")),
            "{what}: {approved:?}"
        );
    }

    // The same request on a cluster where worker1's IPv6 address is another: refused.
    let other = cluster("fd00:88:61::99");
    for (what, tasks) in [("install", install(&other)), ("certs renew", renew(&other))] {
        let refused = approve(&tasks, &other)
            .map(|(_, approved)| approved)
            .expect_err("an IPv6 address that is not the node's is refused")
            .to_string();
        assert!(
            refused.contains("node worker1")
                && refused.contains("csr-4lq5z")
                && refused.contains("IP address fd00:88:61::11, not one of the node's")
                && refused.contains("fd00:88:61::99"),
            "{what}: {refused}"
        );
    }
}

/// Issue 33 item 6: `kubeProxyArgs` were used only by the kubexm path and dropped silently on
/// the kubeadm path; the kubeadm settings (and so the install's plan) now refuse them, naming the
/// field, the flags and what to do.
#[test]
fn kube_proxy_args_are_refused_on_the_kubeadm_path_naming_them() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = crate::versions::cluster(work.path(), "v1.33.11", "kubeadm", |t| {
        t.edit(
            "    proxyMode: iptables\n",
            "    proxyMode: iptables\n    kubeProxyArgs: {v: \"4\", metrics-bind-address: \"0.0.0.0:10249\"}\n",
        )
    });
    let e = KubeadmSettings::new(&ctx, Default::default())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("spec.kubernetes.kubeProxyArgs (metrics-bind-address, v) is not applied with kubernetes.type kubeadm")
            && e.contains("remove kubeProxyArgs"),
        "{e}"
    );
    assert!(KubeadmModule::new(ctx.clone(), Default::default())
        .tasks()
        .is_err());
    // Without them: planned as before.
    let ctx = crate::versions::cluster(work.path(), "v1.33.11", "kubeadm", |t| t);
    assert!(KubeadmSettings::new(&ctx, Default::default()).is_ok());
}
