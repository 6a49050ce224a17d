//! Per-version rendering, v1.20 → v1.35, on both paths: the same 3-master / 2-worker cluster
//! (`tests/fixtures/kubexm/cluster.yaml`, `network.plugin: none`, kube-proxy's
//! `conntrack.maxPerCore: 0`) at v1.20.2, v1.23.17, v1.24.17, v1.25.16, v1.30.14, v1.31.13 and
//! v1.35.4, every file snapshotted per version and path and checked against the facts of that
//! version (each assertion names the upstream fact; the facts themselves are pinned with their
//! sources in `manifests/src/kube_version.rs` and `kube_components.rs`):
//!
//! * kubeadm: configuration API and its shapes (v1beta2 maps and no `patches` /
//!   `imagePullPolicy`, the `--experimental-patches` flag instead; v1beta3 maps; v1beta4 lists),
//!   `criSocket` (bare path before v1.24, URL after; dockershim's exact path for docker before
//!   v1.24), the kubelet's `containerRuntimeEndpoint` only from v1.27, the image registry and
//!   CoreDNS path, the kubelet unit after the runtime, the control-plane taints untainted per
//!   version.
//! * kubexm: `--port=0` before v1.22 (controller-manager) / v1.23 (scheduler), the scheduler's
//!   configuration API, the kubelet's runtime flags before v1.24 / v1.27, `registerWithTaints`
//!   vs `--register-with-taints` (v1.23), `--pod-infra-container-image` before v1.35, the
//!   control-plane labels and CoreDNS's tolerations per version.

use kubexm_install::modules::k8s::image_named;
use std::path::Path;
use std::sync::Arc;

use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::modules::kubeadm::binaries::KubeletService;
use kubexm_install::modules::kubeadm::config::KubeadmSettings;
use kubexm_install::modules::kubeadm::init::InitControlPlane;
use kubexm_install::modules::kubeadm::join::JoinCredentials;
use kubexm_install::modules::kubeadm::labels::NodeRoles;
use kubexm_install::modules::kubexm::control_plane::KubexmControlPlaneModule;
use kubexm_install::modules::kubexm::coredns::CoreDnsModule;
use kubexm_install::modules::kubexm::node::{node_labels, KubexmNodesModule};
use kubexm_install::modules::runtime::cri::Cri;
use kubexm_install::pipeline::ops::Op;
use kubexm_install::pipeline::{Facts, Step};
use kubexm_manifests::kube_version::KubeadmApi;
use kubexm_manifests::version::KubeVersion;

use crate::common::Edit as _;
use crate::lb::{file_of, rendered};

/// The versions every test here covers.
const VERSIONS: [&str; 7] = [
    "v1.20.2", "v1.23.17", "v1.24.17", "v1.25.16", "v1.30.14", "v1.31.13", "v1.35.4",
];

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kubexm")
        .join(name)
}

/// The fixture cluster at `version` with `kind` (kubeadm or kubexm), no CNI, kube-proxy's
/// conntrack limit left alone, and `edit` applied last.
pub(crate) fn cluster(
    work: &Path,
    version: &str,
    kind: &str,
    edit: impl Fn(String) -> String,
) -> Arc<InstallContext> {
    let text = std::fs::read_to_string(fixture("cluster.yaml")).expect("fixture");
    let text = text
        .edit(
            "    type: kubexm\n    version: v1.31.13\n",
            &format!(
                "    type: {kind}\n    version: {version}\n    proxyMode: iptables\n    kubeProxy: {{conntrackMaxPerCore: 0}}\n"
            ),
        )
        .edit("    plugin: calico\n", "    plugin: none\n");
    let file = work.join("cluster.yaml");
    std::fs::write(&file, edit(text)).expect("write cluster.yaml");
    Arc::new(
        load_context(&file, Some(&fixture("catalog-stand-in.yaml")), None, work)
            .unwrap_or_else(|e| panic!("the {kind} cluster at {version} loads: {e}")),
    )
}

fn v(s: &str) -> KubeVersion {
    s.parse().expect("version")
}

pub(crate) fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple::<serde_json::Value>(text)
        .unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"))
}

fn credentials() -> JoinCredentials {
    JoinCredentials {
        endpoint: "lb.kubexm.internal:6443".into(),
        token: "7r2k9x.q4m8z1c0v5b3n6h2".into(),
        ca_cert_hashes: vec![format!("sha256:{}", "ab".repeat(32))],
        certificate_key: Some("cd".repeat(32)),
    }
}

/// The kubeadm path's kubelet unit on `node`.
fn kubelet_unit(ctx: &InstallContext, node: &str) -> String {
    let step = KubeletService {
        cluster: ctx.cluster.file.metadata.name.clone(),
        cri: Cri::of(ctx),
    };
    step.ops(ctx.node(node).expect("node"), &Facts::default())
        .expect("ops")
        .into_iter()
        .find_map(|o| match o {
            Op::Template(t) if t.file.dest == "/etc/systemd/system/kubelet.service" => {
                Some(text(&t))
            }
            _ => None,
        })
        .expect("kubelet.service")
}

pub(crate) fn text(t: &kubexm_install::pipeline::ops::RenderTemplate) -> String {
    String::from_utf8(t.text().to_vec()).expect("utf-8")
}

/// The shell of every `Run` op of a step on a node.
fn commands(step: &dyn Step, ctx: &InstallContext, node: &str) -> Vec<String> {
    let n = ctx.node(node).expect("node");
    step.ops(n, &Facts::default())
        .expect("ops")
        .into_iter()
        .filter_map(|o| match o {
            Op::Run(r) => Some(r.command.into_string()),
            _ => None,
        })
        .collect()
}

/// `extraArgs`-like value as name → value, whatever its shape (map or list).
fn args_of(v: &serde_json::Value) -> Vec<(String, String)> {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect(),
        serde_json::Value::Array(a) => a
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or_default().to_string(),
                    e["value"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[test]
fn kubeadm_files_per_version() {
    for version in VERSIONS {
        let work = tempfile::tempdir().expect("tempdir");
        let ctx = cluster(work.path(), version, "kubeadm", |t| t);
        let ver = v(version);
        let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
        let m1 = s.node(ctx.node("master1").expect("master1"), true, false);
        let init = text(&s.render_init(&m1).expect("init"));
        let cp = text(
            &s.render_join(
                &s.node(ctx.node("master2").expect("master2"), true, false),
                &credentials(),
            )
            .expect("join"),
        );
        let worker = text(
            &s.render_join(
                &s.node(ctx.node("worker1").expect("worker1"), false, false),
                &credentials(),
            )
            .expect("join"),
        );
        let unit = kubelet_unit(&ctx, "master1");
        let docs = yaml_docs(&init);
        let api = ver.kubeadm_api();
        // kubeadm CHANGELOGs: v1beta2 before v1.22, v1beta3 v1.22–v1.30, v1beta4 from v1.31.
        let want_api = if ver.at_least(1, 31) {
            "kubeadm.k8s.io/v1beta4"
        } else if ver.at_least(1, 22) {
            "kubeadm.k8s.io/v1beta3"
        } else {
            "kubeadm.k8s.io/v1beta2"
        };
        for d in &docs[..2] {
            assert_eq!(d["apiVersion"], want_api, "{version}");
        }
        assert_eq!(yaml_docs(&cp)[0]["apiVersion"], want_api, "{version}");
        let reg = &docs[0]["nodeRegistration"];
        // criSocket: a bare path before v1.24 (kubeadm v1.20's flags.go hands it to the kubelet
        // as it is), a URL from v1.24 (kubeadm v1.24 deprecates the bare path).
        let socket = if ver.at_least(1, 24) {
            "unix:///run/containerd/containerd.sock"
        } else {
            "/run/containerd/containerd.sock"
        };
        assert_eq!(reg["criSocket"], socket, "{version}");
        assert_eq!(
            yaml_docs(&worker)[0]["nodeRegistration"]["criSocket"],
            socket
        );
        // v1beta4 lists {name, value}; v1beta2/v1beta3 maps.
        assert_eq!(
            reg["kubeletExtraArgs"].is_array(),
            api == KubeadmApi::V1beta4,
            "{version}"
        );
        // The kubelet knows the runtime's sandbox image until v1.35 removed the flag (kubeadm
        // passes it only with dockershim): else its image garbage collection counts pause
        // unused and deletes it under disk pressure.
        let mut want_args = vec![("node-ip".to_string(), "192.168.50.11".to_string())];
        if !ver.at_least(1, 35) {
            let sandbox = kubexm_install::modules::runtime::sandbox_image(&ctx).expect("sandbox");
            assert!(sandbox.contains("/pause:"), "{version}: {sandbox}");
            want_args.push(("pod-infra-container-image".to_string(), sandbox));
        }
        assert_eq!(args_of(&reg["kubeletExtraArgs"]), want_args, "{version}");
        assert_eq!(
            args_of(&yaml_docs(&worker)[0]["nodeRegistration"]["kubeletExtraArgs"]).len(),
            want_args.len(),
            "{version}"
        );
        // v1beta2 has neither imagePullPolicy nor patches: the patch directory (the masters
        // are KubeXM load-balancer nodes, so the API server binds the node's address) goes on
        // the command line as --experimental-patches.
        assert_eq!(
            reg["imagePullPolicy"].is_null(),
            api == KubeadmApi::V1beta2,
            "{version}"
        );
        assert_eq!(
            docs[0]["patches"].is_null(),
            api == KubeadmApi::V1beta2,
            "{version}"
        );
        let init_cmd = commands(
            &InitControlPlane {
                settings: Arc::new(s.clone()),
                manifests_prefilled: false,
            },
            &ctx,
            "master1",
        )
        .into_iter()
        .find(|c| c.contains(" init --config "))
        .expect("kubeadm init");
        assert_eq!(
            init_cmd.contains("--experimental-patches /etc/kubernetes/kubexm/patches"),
            api == KubeadmApi::V1beta2,
            "{version}: {init_cmd}"
        );
        assert!(!init_cmd.contains("--skip-phases"), "CoreDNS is applied");
        // The images: kubeadm's registry of the version (k8s.gcr.io before v1.25 and the
        // v1.22.17/v1.23.15/v1.24.9 backports), CoreDNS without `coredns/` before v1.21.
        let cc = &docs[1];
        let source = image_named(&ctx, "kube-apiserver").expect("kube-apiserver image");
        assert_eq!(
            source,
            format!("{}/kube-apiserver:{version}", ver.image_repository()),
            "{version}"
        );
        // ... as the private registry serves it (flattened: no source registry in the path).
        let repo = cc["imageRepository"].as_str().expect("imageRepository");
        assert_eq!(repo, "192.168.50.11:5000", "{version}");
        let dns_repo = cc["dns"]["imageRepository"].as_str().expect("dns repo");
        if ver.at_least(1, 21) {
            assert!(dns_repo.ends_with("/coredns"), "{version}: {dns_repo}");
        } else {
            assert_eq!(dns_repo, repo, "{version}: kubeadm appends /coredns itself");
            assert_eq!(cc["dns"]["imageTag"], "1.7.0");
        }
        // The kubelet's containerRuntimeEndpoint exists from v1.27 only.
        let kubelet = &docs[2];
        assert_eq!(kubelet["kind"], "KubeletConfiguration");
        assert_eq!(
            kubelet["containerRuntimeEndpoint"].as_str(),
            ver.at_least(1, 27)
                .then_some("unix:///run/containerd/containerd.sock"),
            "{version}"
        );
        assert_eq!(docs[3]["conntrack"]["maxPerCore"], 0);
        assert!(
            unit.contains("After=network-online.target containerd.service"),
            "{unit}"
        );
        insta::assert_snapshot!(
            format!("kubeadm-{version}"),
            format!("===== init (master1)\n{init}===== join (master2, control plane)\n{cp}===== join (worker1)\n{worker}")
        );
    }
}

#[test]
fn kubeadm_untaints_the_control_plane_taints_of_the_version() {
    for (version, want) in [
        ("v1.20.2", vec!["node-role.kubernetes.io/master:NoSchedule"]),
        (
            "v1.24.17",
            vec![
                "node-role.kubernetes.io/master:NoSchedule",
                "node-role.kubernetes.io/control-plane:NoSchedule",
            ],
        ),
        (
            "v1.25.16",
            vec!["node-role.kubernetes.io/control-plane:NoSchedule"],
        ),
    ] {
        let work = tempfile::tempdir().expect("tempdir");
        // master1 is also a worker: it loses the control-plane taints.
        let ctx = cluster(work.path(), version, "kubeadm", |t| {
            t.edit(
                "worker: [\"worker[1:2]\"]",
                "worker: [master1, \"worker[1:2]\"]",
            )
        });
        let cmds = commands(&NodeRoles::new(&ctx), &ctx, "master1");
        let untainted: Vec<String> = cmds
            .iter()
            .filter_map(|c| {
                let rest = c.split(" taint node master1 ").nth(1)?;
                Some(
                    rest.split_whitespace()
                        .next()?
                        .trim_end_matches('-')
                        .to_string(),
                )
            })
            .collect();
        assert_eq!(untainted, want, "{version}");
    }
}

#[test]
fn kubeadm_docker_uses_dockershim_before_1_24_and_cri_dockerd_after() {
    for (version, socket, after) in [
        (
            "v1.23.17",
            "/var/run/dockershim.sock",
            "After=network-online.target docker.service",
        ),
        (
            "v1.24.17",
            "unix:///run/cri-dockerd.sock",
            "After=network-online.target docker.service cri-docker.service",
        ),
    ] {
        let work = tempfile::tempdir().expect("tempdir");
        let ctx = cluster(work.path(), version, "kubeadm", |t| {
            t.edit("    type: containerd\n", "    type: docker\n")
        });
        let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
        let n = s.node(ctx.node("master1").expect("master1"), true, false);
        let init = text(&s.render_init(&n).expect("init"));
        let docs = yaml_docs(&init);
        assert_eq!(
            docs[0]["nodeRegistration"]["criSocket"], socket,
            "{version}"
        );
        let unit = kubelet_unit(&ctx, "worker1");
        assert!(unit.contains(after), "{version}: {unit}");
    }
}

/// The kubexm path's files of `node` (kubeconfigs and keys left out: they differ per run).
fn kubexm_snapshot(files: &[(String, String, String)], node: &str) -> String {
    let mut s = String::new();
    for (n, dest, text) in files {
        if n == node && !dest.ends_with(".conf") && !dest.contains("/pki/") {
            s.push_str(&format!("===== {dest}\n{text}"));
        }
    }
    s
}

/// The words of a unit's `ExecStart=` (continuation lines joined).
pub(crate) fn exec_start(unit: &str) -> Vec<String> {
    let joined = unit.edit(" \\\n", " ");
    joined
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

pub(crate) fn flag<'a>(words: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("--{name}=");
    words.iter().find_map(|w| w.strip_prefix(prefix.as_str()))
}

#[test]
fn kubexm_files_per_version() {
    for version in VERSIONS {
        let work = tempfile::tempdir().expect("tempdir");
        let ctx = cluster(work.path(), version, "kubexm", |t| t);
        let ver = v(version);
        let mut files = rendered(&ctx, &KubexmControlPlaneModule(ctx.clone()));
        files.extend(rendered(&ctx, &KubexmNodesModule(ctx.clone())));
        files.extend(rendered(&ctx, &CoreDnsModule(ctx.clone())));
        let unit = |node: &str, name: &str| {
            exec_start(&file_of(
                &files,
                node,
                &format!("/etc/systemd/system/{name}.service"),
            ))
        };
        // --port=0 while the components still serve plain HTTP (kubeadm#2207).
        let kcm = unit("master1", "kube-controller-manager");
        assert_eq!(
            flag(&kcm, "port"),
            (!ver.at_least(1, 22)).then_some("0"),
            "{version}"
        );
        let sched = unit("master1", "kube-scheduler");
        assert_eq!(
            flag(&sched, "port"),
            (!ver.at_least(1, 23)).then_some("0"),
            "{version}"
        );
        // The scheduler's configuration API: v1beta1 < 1.22 ≤ v1beta2 < 1.25 ≤ v1 (KEP-785).
        let sched_conf = yaml_docs(&file_of(
            &files,
            "master1",
            "/etc/kubernetes/kube-scheduler.yaml",
        ));
        let want = if ver.at_least(1, 25) {
            "kubescheduler.config.k8s.io/v1"
        } else if ver.at_least(1, 22) {
            "kubescheduler.config.k8s.io/v1beta2"
        } else {
            "kubescheduler.config.k8s.io/v1beta1"
        };
        assert_eq!(sched_conf[0]["apiVersion"], want, "{version}");
        // The API server's service-account flags exist and are required from v1.20.
        let api = unit("master1", "kube-apiserver");
        for f in [
            "service-account-issuer",
            "service-account-key-file",
            "service-account-signing-key-file",
        ] {
            assert!(flag(&api, f).is_some(), "{version}: --{f}");
        }
        assert!(flag(&api, "insecure-port").is_none(), "inert since v1.20");
        // The kubelet's runtime: --container-runtime=remote before v1.24 (removed in v1.27),
        // the endpoint as a flag before v1.27, in the configuration file from v1.27.
        for node in ["master1", "worker1"] {
            let kubelet = unit(node, "kubelet");
            let conf = yaml_docs(&file_of(
                &files,
                node,
                "/etc/kubernetes/kubelet-config.yaml",
            ));
            assert_eq!(
                flag(&kubelet, "container-runtime"),
                (!ver.at_least(1, 24)).then_some("remote"),
                "{version}"
            );
            let endpoint = "unix:///run/containerd/containerd.sock";
            assert_eq!(
                flag(&kubelet, "container-runtime-endpoint"),
                (!ver.at_least(1, 27)).then_some(endpoint),
                "{version}"
            );
            assert_eq!(
                conf[0]["containerRuntimeEndpoint"].as_str(),
                ver.at_least(1, 27).then_some(endpoint),
                "{version}"
            );
            assert_eq!(
                flag(&kubelet, "pod-infra-container-image").is_some(),
                !ver.at_least(1, 35),
                "{version}"
            );
        }
        // A master-only node registers with the version's control-plane taints: in the
        // configuration file from v1.23, as --register-with-taints before.
        let kubelet = unit("master1", "kubelet");
        let conf = yaml_docs(&file_of(
            &files,
            "master1",
            "/etc/kubernetes/kubelet-config.yaml",
        ));
        let taints: Vec<String> = ver
            .control_plane_taints()
            .iter()
            .map(ToString::to_string)
            .collect();
        if ver.at_least(1, 23) {
            let listed: Vec<String> = conf[0]["registerWithTaints"]
                .as_array()
                .expect("registerWithTaints")
                .iter()
                .map(|t| {
                    format!(
                        "{}:{}",
                        t["key"].as_str().unwrap_or(""),
                        t["effect"].as_str().unwrap_or("")
                    )
                })
                .collect();
            assert_eq!(listed, taints, "{version}");
            assert_eq!(flag(&kubelet, "register-with-taints"), None);
        } else {
            assert!(conf[0]["registerWithTaints"].is_null(), "{version}");
            assert_eq!(
                flag(&kubelet, "register-with-taints"),
                Some(taints.join(",").as_str()),
                "{version}"
            );
        }
        // Labels as kubeadm of the version sets them; CoreDNS tolerates its taints.
        let labels = node_labels(&ctx, ctx.node("master1").expect("master1"));
        for l in ver.control_plane_labels() {
            assert!(labels.contains_key(*l), "{version}: {l}");
        }
        assert_eq!(
            labels.contains_key("node-role.kubernetes.io/master"),
            !ver.at_least(1, 24),
            "{version}"
        );
        let coredns = file_of(&files, "master1", "/etc/kubernetes/addons/coredns.yaml");
        for t in ver.control_plane_taints() {
            assert!(
                coredns.contains(&format!("- key: {}\n", t.key)),
                "{version}"
            );
        }
        let proxy = yaml_docs(&file_of(
            &files,
            "worker1",
            "/etc/kubernetes/kube-proxy.yaml",
        ));
        assert_eq!(proxy[0]["conntrack"]["maxPerCore"], 0);
        insta::assert_snapshot!(
            format!("kubexm-{version}"),
            format!(
                "{}{}",
                kubexm_snapshot(&files, "master1"),
                kubexm_snapshot(&files, "worker1")
            )
        );
    }
}
