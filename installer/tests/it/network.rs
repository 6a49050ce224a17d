//! The pod network, NodeLocal DNSCache and addons: the flannel manifest rendered from the
//! bundle (pod CIDR, backend, images), calico's and cilium's chart values, the NodeLocal
//! DNSCache manifest, addons (YAML rendered with values, charts with nested values) — parsed
//! back as YAML and snapshotted — and the steps that apply them from the first master.

use std::path::Path;
use std::sync::Arc;

use kubexm_bundles::manifest::{BundleManifest, FileRecord, ImageRecord};
use kubexm_install::context::{load_context, BundleRef, InstallContext};
use kubexm_install::modules::addons::{nested_values, AddonsModule};
use kubexm_install::modules::dns;
use kubexm_install::modules::network::{render_flannel, NetworkModule};
use kubexm_install::pipeline::ops::Op;
use kubexm_install::pipeline::{Facts, Module};
use kubexm_install::runner::UploadSource;

use crate::common::Edit as _;
use crate::kubeadm::{example_context, yaml_docs};
use crate::lb::{lab_context, repo};

/// The stand-in kube-flannel.yml the lab mirror serves (the upstream file's shape).
fn flannel_stand_in() -> String {
    std::fs::read_to_string(repo().join("tests/lab/mirror/kube-flannel.yml")).expect("stand-in")
}

fn flannel_net_conf(rendered: &str) -> serde_json::Value {
    let docs = yaml_docs(rendered);
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("ConfigMap");
    serde_json::from_str(cm["data"]["net-conf.json"].as_str().expect("net-conf")).expect("JSON")
}

fn images_of(rendered: &str) -> Vec<String> {
    rendered
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("image:")
                .map(|i| i.trim().to_string())
        })
        .collect()
}

#[test]
fn flannel_manifest_gets_the_pod_cidr_the_backend_and_private_registry_images() {
    let ctx = lab_context(|t| t);
    let out = render_flannel(&ctx, &flannel_stand_in()).expect("rendered");
    let net = flannel_net_conf(&out);
    assert_eq!(net["Network"], "10.233.64.0/18");
    assert_eq!(net["Backend"]["Type"], "vxlan");
    assert_eq!(
        images_of(&out),
        [
            "10.88.10.11:5000/flannel-io/flannel-cni-plugin:v1.8.0-flannel1",
            "10.88.10.11:5000/flannel-io/flannel:v0.27.4",
            "10.88.10.11:5000/flannel-io/flannel:v0.27.4"
        ]
    );
    // Nothing else changed: the same objects in the same order.
    let kinds = |t: &str| -> Vec<String> {
        yaml_docs(t)
            .iter()
            .map(|d| d["kind"].as_str().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(kinds(&out), kinds(&flannel_stand_in()));
    insta::assert_snapshot!("kube-flannel-lab", out);

    // Dual-stack and host-gw.
    let ctx = lab_context(|t| {
        t.edit(
            "    plugin: flannel\n",
            "    plugin: flannel\n    podCidr: 10.233.64.0/18,fd00:10:233::/56\n    serviceCidr: 10.233.0.0/18,fd00:10:96::/112\n    flannel: {mode: host-gw}\n",
        )
    });
    let out = render_flannel(&ctx, &flannel_stand_in()).expect("rendered");
    let net = flannel_net_conf(&out);
    assert_eq!(net["Network"], "10.233.64.0/18");
    assert_eq!(net["EnableIPv6"], true);
    assert_eq!(net["IPv6Network"], "fd00:10:233::/56");
    assert_eq!(net["Backend"]["Type"], "host-gw");
}

#[test]
fn flannel_manifests_it_cannot_render_are_refused_by_name() {
    let ctx = lab_context(|t| t);
    let unknown = flannel_stand_in().edit(
        "ghcr.io/flannel-io/flannel:v0.27.4",
        "ghcr.io/flannel-io/flannel:v9.9.9",
    );
    let err = render_flannel(&ctx, &unknown)
        .expect_err("not bundled")
        .to_string();
    assert!(
        err.contains("ghcr.io/flannel-io/flannel:v9.9.9") && err.contains("not in the bundle"),
        "{err}"
    );
    let no_network = flannel_stand_in().edit("\"Network\"", "\"Netwerk\"");
    let err = render_flannel(&ctx, &no_network)
        .expect_err("no Network")
        .to_string();
    assert!(err.contains("\"Network\""), "{err}");
}

#[test]
fn calico_chart_values() {
    let ctx = example_context(|t| t);
    let values = values_of(&ctx, "calico-values.yaml");
    let v = &yaml_docs(&values)[0];
    let i = &v["installation"];
    // calico/node is at dockerhub.kubexm.local/kubexm/calico/node: registry + imagePath.
    assert_eq!(i["registry"], "dockerhub.kubexm.local/");
    assert_eq!(i["imagePath"], "kubexm/calico");
    assert_eq!(
        i["calicoNetwork"]["ipPools"],
        serde_json::json!([{
            "name": "default-ipv4-ippool", "cidr": "10.233.64.0/18", "encapsulation": "IPIP",
            "natOutgoing": "Enabled", "nodeSelector": "all()", "blockSize": 26
        }])
    );
    assert_eq!(
        v["tigeraOperator"],
        serde_json::json!({"registry": "dockerhub.kubexm.local/kubexm", "image": "tigera/operator", "version": "v1.40.3"})
    );
    insta::assert_snapshot!("calico-values", values);

    let vxlan = example_context(|t| t.edit("mode: ipip", "mode: vxlan\n      mtu: 1400"));
    let v = &yaml_docs(&values_of(&vxlan, "calico-values.yaml"))[0];
    assert_eq!(v["installation"]["calicoNetwork"]["bgp"], "Disabled");
    assert_eq!(v["installation"]["calicoNetwork"]["mtu"], 1400);
    assert_eq!(
        v["installation"]["calicoNetwork"]["ipPools"][0]["encapsulation"],
        "VXLAN"
    );

    // Flattened without a namespace, calico's images would have no path of their own.
    let flat = example_context(|t| t.edit("    namespace: kubexm\n", "    rewrite: flatten\n"));
    let err = NetworkModule(flat)
        .tasks()
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("registry.namespace"), "{err}");
}

#[test]
fn cilium_chart_values() {
    let ctx = example_context(|t| {
        t.edit("plugin: calico", "plugin: cilium")
            .edit("    calico:\n      mode: ipip\n", "")
    });
    let values = values_of(&ctx, "cilium-values.yaml");
    let v = &yaml_docs(&values)[0];
    // The agents run on the host network: with the internal haproxy the endpoint's name
    // resolves to the first master only, so they use 127.0.0.1:6443 (a master's own API server,
    // a worker's local proxy), which survives the loss of any one master (issue 13 item 6).
    assert_eq!(v["k8sServiceHost"], "127.0.0.1");
    assert_eq!(v["k8sServicePort"], 6443);
    assert_eq!(
        v["ipam"]["operator"]["clusterPoolIPv4PodCIDRList"],
        serde_json::json!(["10.233.64.0/18"])
    );
    assert_eq!(
        v["image"],
        serde_json::json!({"repository": "dockerhub.kubexm.local/kubexm/cilium/cilium", "tag": "v1.19.3", "useDigest": false})
    );
    // The chart adds `-generic` to the operator's repository itself.
    assert_eq!(
        v["operator"]["image"]["repository"],
        "dockerhub.kubexm.local/kubexm/cilium/operator"
    );
    assert_eq!(
        v["hubble"]["ui"]["backend"]["image"]["repository"],
        "dockerhub.kubexm.local/kubexm/cilium/hubble-ui-backend"
    );
    insta::assert_snapshot!("cilium-values", values);
}

/// The rendered values file (`name`) of the network module's chart step.
fn values_of(ctx: &Arc<InstallContext>, name: &str) -> String {
    let first = ctx.first_master().expect("first").clone();
    for task in NetworkModule(ctx.clone()).tasks().expect("tasks") {
        for step in &task.steps {
            for op in step.ops(&first, &Facts::default()).expect("ops") {
                if let Op::Upload(u) = op {
                    if u.dest.ends_with(name) {
                        if let UploadSource::Bytes(b) = u.source {
                            return String::from_utf8(b).expect("utf-8");
                        }
                    }
                }
            }
        }
    }
    panic!("{name} not rendered")
}

#[test]
fn nodelocaldns_manifest() {
    let ctx = lab_context(|t| t);
    let text = dns::render(&ctx).expect("rendered");
    let docs = yaml_docs(&text);
    let kinds: Vec<&str> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        ["ServiceAccount", "Service", "ConfigMap", "DaemonSet"]
    );
    let c = &docs[3]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "10.88.10.11:5000/dns/k8s-dns-node-cache:1.25.0");
    assert_eq!(c["args"][1], "169.254.25.10");
    let corefile = docs[2]["data"]["Corefile"].as_str().expect("Corefile");
    assert!(corefile.starts_with("cluster.local:53 {"), "{corefile}");
    assert!(corefile.contains("bind 169.254.25.10"), "{corefile}");
    insta::assert_snapshot!("nodelocaldns", text);
}

#[test]
fn every_plugin_but_none_is_installed() {
    for plugin in ["flannel", "calico", "cilium", "kube-ovn", "hybridnet"] {
        let ctx = lab_context(|t| t.edit("plugin: flannel", &format!("plugin: {plugin}")));
        assert!(NetworkModule(ctx).skip().is_none(), "{plugin}");
    }
    let none = lab_context(|t| t.edit("plugin: flannel", "plugin: none"));
    let reason = NetworkModule(none).skip().expect("skipped");
    assert!(reason.contains("bring your own CNI"), "{reason}");
}

/// A bundle directory holding `files` (name, bundle path, content) and the cluster's images.
fn with_bundle(
    yaml: &str,
    catalog: Option<&Path>,
    files: &[(&str, &str, &[u8])],
) -> (tempfile::TempDir, Arc<InstallContext>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, yaml).expect("write yaml");
    let planned = load_context(&file, catalog, None, dir.path()).expect("context");
    let bundle = dir.path().join("bundle");
    let mut records = Vec::new();
    for (name, path, content) in files {
        let p = bundle.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, content).expect("write");
        records.push(FileRecord {
            name: (*name).into(),
            version: "-".into(),
            arch: "amd64".into(),
            path: (*path).into(),
            sha256: kubexm_bundles::hash::sha256_hex(content),
            size: content.len() as u64,
            url: String::new(),
            roles: Default::default(),
        });
    }
    let images = planned
        .image_references()
        .into_iter()
        .map(|r| ImageRecord {
            reference: r.clone(),
            source: r,
            digest: format!("sha256:{}", "0".repeat(64)),
            source_digest: None,
            layout_digest: None,
            media_type: "application/vnd.oci.image.index.v1+json".into(),
            size: 1,
            platforms: Default::default(),
            roles: Default::default(),
        })
        .collect();
    let manifest = BundleManifest {
        format_version: 1,
        tool_version: "test".into(),
        cluster: "lab".into(),
        kubernetes_version: "v1.33.11".into(),
        zone: "default".into(),
        arches: ["amd64".to_string()].into(),
        created: 0,
        files: records,
        images,
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        sizes: Default::default(),
    };
    let ctx = Arc::new(
        load_context(
            &file,
            catalog,
            Some(BundleRef {
                dir: bundle,
                manifest,
            }),
            dir.path(),
        )
        .expect("context with bundle"),
    );
    (dir, ctx)
}

fn plan_text(ctx: &Arc<InstallContext>, module: &dyn Module) -> String {
    let first = ctx.first_master().expect("first").clone();
    let mut out = Vec::new();
    for task in module.tasks().expect("tasks") {
        for step in &task.steps {
            out.push(format!("step {}", step.name()));
            for op in step.ops(&first, &Facts::default()).expect("ops") {
                let p = op.generic().plan();
                out.push(format!("{} {}", p.kind, p.detail));
            }
        }
    }
    out.join("\n")
}

#[test]
fn the_flannel_step_uploads_the_rendered_bundle_file_and_applies_it_once() {
    let yaml = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab");
    let catalog = repo().join("tests/lab/mirror/catalog-lab.yaml");
    let (_dir, ctx) = with_bundle(
        &yaml,
        Some(&catalog),
        &[(
            "flannel-manifest",
            "files/flannel-manifest/v0.27.4/amd64/kube-flannel.yml",
            flannel_stand_in().as_bytes(),
        )],
    );
    let module = NetworkModule(ctx.clone());
    let first = ctx.first_master().expect("first").clone();
    let tasks = module.tasks().expect("tasks");
    let ops = tasks[0].steps[0]
        .ops(&first, &Facts::default())
        .expect("ops");
    let uploaded = ops
        .iter()
        .find_map(|o| match o {
            Op::Upload(u) if u.dest == "/etc/kubernetes/kubexm/manifests/kube-flannel.yml" => {
                match &u.source {
                    UploadSource::Bytes(b) => Some(String::from_utf8(b.clone()).expect("utf-8")),
                    UploadSource::File(_) => None,
                }
            }
            _ => None,
        })
        .expect("the rendered manifest is uploaded");
    assert_eq!(
        uploaded,
        render_flannel(&ctx, &flannel_stand_in()).expect("rendered")
    );
    let text = format!(
        "{}\n{}",
        plan_text(&ctx, &module),
        plan_inputs(&ctx, &module)
    );
    for want in [
        "apply --server-side --force-conflicts --field-manager=kubexm -f /etc/kubernetes/kubexm/manifests/kube-flannel.yml",
        "unless: sha256sum -c --status /etc/kubernetes/kubexm/manifests/kube-flannel.yml.applied",
        "wait --for=condition=Ready node/node1 node/node2 node/node3",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
}

fn plan_inputs(ctx: &Arc<InstallContext>, module: &dyn Module) -> String {
    let first = ctx.first_master().expect("first").clone();
    let mut out = String::new();
    for task in module.tasks().expect("tasks") {
        for step in &task.steps {
            for op in step.ops(&first, &Facts::default()).expect("ops") {
                if let Some(i) = op.generic().plan().input {
                    out.push_str(&i);
                    out.push('\n');
                }
            }
        }
    }
    out
}

#[test]
fn addons_yaml_rendered_with_values_and_charts_with_nested_values() {
    let yaml = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml"))
        .expect("lab")
        .edit(
            "  system:\n",
            "  addons:\n    - name: demo\n      namespace: demo\n      type: yaml\n      source: {path: demo}\n      values: {replicas: \"3\"}\n    - name: dash\n      namespace: dash\n      type: helm\n      source: {chart: {name: dash, version: 1.0.0, repo: 'https://charts.example'}}\n      values: {service.type: NodePort, service.port: \"8443\", replicas: \"2\"}\n  system:\n",
        );
    let catalog = repo().join("tests/lab/mirror/catalog-lab.yaml");
    let (_dir, ctx) = with_bundle(
        &yaml,
        Some(&catalog),
        &[
            (
                "addon/demo",
                "files/addons/demo/a.yaml",
                b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: demo}\nspec:\n  replicas: {{ values.replicas }}\n",
            ),
            ("addon/demo", "files/addons/demo/b.yaml", b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"),
            ("addon/dash", "files/addons/dash/dash-1.0.0.tgz", b"chart bytes"),
            ("helm", "files/helm/v3.18.4/amd64/helm-v3.18.4-linux-amd64.tar.gz", b"helm"),
        ],
    );
    let module = AddonsModule(ctx.clone());
    assert!(module.skip().is_none());
    let first = ctx.first_master().expect("first").clone();
    let tasks = module.tasks().expect("tasks");
    let steps: Vec<&str> = tasks[0].steps.iter().map(|s| s.name()).collect();
    assert_eq!(steps, ["helm-binary", "addon-demo", "addon-dash"]);
    let uploads = addon_uploads(&ctx);
    let a = &uploads["/etc/kubernetes/kubexm/manifests/addons/demo/a.yaml"];
    assert!(a.contains("replicas: 3"), "{a}");
    let values = &uploads["/etc/kubernetes/kubexm/manifests/addons/dash/values.yaml"];
    assert_eq!(
        yaml_docs(values)[0],
        serde_json::json!({"replicas": "2", "service": {"port": "8443", "type": "NodePort"}})
    );
    assert!(
        uploads["/etc/kubernetes/kubexm/manifests/addons/dash/dash-1.0.0.tgz"]
            .ends_with("files/addons/dash/dash-1.0.0.tgz>")
    );
    let text = plan_text(&ctx, &module);
    for want in [
        "create namespace demo",
        "-n demo apply --server-side",
        "/usr/local/bin/helm upgrade --install dash /etc/kubernetes/kubexm/manifests/addons/dash/dash-1.0.0.tgz --namespace dash",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
    // A failed apply (kubectl or helm exits non-zero) fails the step and leaves no `.applied`
    // record, so the next run applies again: each command run with `sh` against a scratch
    // directory, kubectl and helm replaced by `false`.
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path().to_str().expect("utf-8");
    let mut applies = 0;
    for step in &tasks[0].steps {
        for op in step.ops(&first, &Facts::default()).expect("ops") {
            let Op::Run(r) = op else { continue };
            if !(r.command.contains(" apply --server-side")
                || r.command.contains(" upgrade --install"))
            {
                continue;
            }
            applies += 1;
            // A command, not a fixture: it names kubectl or helm, not always both.
            let cmd = r
                .command
                .replace("/usr/local/bin/kubectl", "false")
                .replace("/usr/local/bin/helm", "false")
                .replace("/etc/kubernetes/kubexm/manifests", dir);
            let status = std::process::Command::new("sh")
                .args(["-c", &cmd])
                .status()
                .expect("sh");
            assert!(!status.success(), "a failed apply succeeded: {cmd}");
            let records: Vec<_> = walk(scratch.path())
                .into_iter()
                .filter(|p| p.ends_with(".applied"))
                .collect();
            assert!(records.is_empty(), "a failed apply left {records:?}: {cmd}");
        }
    }
    assert_eq!(applies, 3, "a.yaml, b.yaml and the dash chart");
    // Without addons the module is skipped.
    assert_eq!(
        AddonsModule(lab_context(|t| t)).skip().as_deref(),
        Some("spec.addons is empty")
    );
}

#[test]
fn dotted_value_keys_nest() {
    let v: std::collections::BTreeMap<String, String> =
        [("a.b.c", "1"), ("a.b.d", "2"), ("a.e", "3"), ("f", "4")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    assert_eq!(
        nested_values(&v),
        serde_json::json!({"a": {"b": {"c": "1", "d": "2"}, "e": "3"}, "f": "4"})
    );
}

/// Every file under `dir` (recursively), as strings.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

#[test]
fn addon_images_are_rewritten_to_the_private_registry() {
    // Issue 13 item 8: the example's metrics-server pulled from registry.k8s.io and failed
    // offline. Every `image:` of a YAML addon and every image value of a chart's values now
    // names the private registry (keep-path: `registry.k8s.io/a/b:t` → `REG/a/b:t`).
    let image = "registry.k8s.io/metrics-server/metrics-server:v0.7.2";
    let yaml = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml"))
        .expect("lab")
        .edit(
            "  system:\n",
            &format!("  addons:\n    - name: ms\n      namespace: kube-system\n      type: yaml\n      source: {{path: ms}}\n      images: [\"{image}\"]\n    - name: metrics-server\n      namespace: kube-system\n      type: helm\n      source: {{chart: {{name: metrics-server, version: 3.12.2, repo: 'https://kubernetes-sigs.github.io/metrics-server'}}}}\n      images: [\"{image}\"]\n      values: {{image.repository: registry.k8s.io/metrics-server/metrics-server, image.tag: v0.7.2, sidecar.image: \"{image}\", args.0: --kubelet-preferred-address-types=InternalIP}}\n  system:\n"),
        );
    let catalog = repo().join("tests/lab/mirror/catalog-lab.yaml");
    let manifest = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: metrics-server}}\nspec:\n  template:\n    spec:\n      containers:\n        - name: metrics-server\n          image: {image}\n          imagePullPolicy: IfNotPresent\n      initContainers:\n        - image: \"10.88.10.11:5000/metrics-server/metrics-server:v0.7.2\" # already private: kept\n          name: init\n"
    );
    let files: [(&str, &str, &[u8]); 3] = [
        ("addon/ms", "files/addons/ms/ms.yaml", manifest.as_bytes()),
        (
            "addon/metrics-server",
            "files/addons/metrics-server/metrics-server-3.12.2.tgz",
            b"chart bytes",
        ),
        (
            "helm",
            "files/helm/v3.18.4/amd64/helm-v3.18.4-linux-amd64.tar.gz",
            b"helm",
        ),
    ];
    let (_dir, ctx) = with_bundle(&yaml, Some(&catalog), &files);
    assert!(
        ctx.image_references().iter().any(|r| r == image),
        "the addon's image is in the bundle"
    );
    let uploads = addon_uploads(&ctx);
    let ms = &uploads["/etc/kubernetes/kubexm/manifests/addons/ms/ms.yaml"];
    let docs = yaml_docs(ms);
    let spec = &docs[0]["spec"]["template"]["spec"];
    let pulled = "10.88.10.11:5000/metrics-server/metrics-server:v0.7.2";
    assert_eq!(spec["containers"][0]["image"], pulled, "{ms}");
    assert_eq!(spec["initContainers"][0]["image"], pulled, "{ms}");
    assert!(!ms.contains("registry.k8s.io"), "{ms}");
    insta::assert_snapshot!("addon-yaml-images-rewritten", ms);
    let values = &uploads["/etc/kubernetes/kubexm/manifests/addons/metrics-server/values.yaml"];
    let v = &yaml_docs(values)[0];
    assert_eq!(
        v["image"]["repository"],
        "10.88.10.11:5000/metrics-server/metrics-server"
    );
    assert_eq!(v["image"]["tag"], "v0.7.2");
    assert_eq!(v["sidecar"]["image"], pulled);
    assert_eq!(
        v["args"]["0"],
        "--kubelet-preferred-address-types=InternalIP"
    );
    insta::assert_snapshot!("addon-helm-values-rewritten", values);

    // An image the bundle does not have is refused, naming the addon, the file and the image.
    let other = manifest.edit(image, "quay.io/example/unbundled:v1");
    let files: [(&str, &str, &[u8]); 1] =
        [("addon/ms", "files/addons/ms/ms.yaml", other.as_bytes())];
    let (_dir, ctx) = with_bundle(&yaml, Some(&catalog), &files);
    let err = match AddonsModule(ctx).tasks() {
        Ok(_) => panic!("an unbundled image was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("addon ms file ms.yaml") && err.contains("quay.io/example/unbundled:v1"),
        "{err}"
    );
}

/// Every upload of the addons module on the first master: destination → content.
fn addon_uploads(ctx: &Arc<InstallContext>) -> std::collections::BTreeMap<String, String> {
    let first = ctx.first_master().expect("first").clone();
    let mut uploads = std::collections::BTreeMap::new();
    for task in AddonsModule(ctx.clone()).tasks().expect("tasks") {
        for step in &task.steps {
            for op in step.ops(&first, &Facts::default()).expect("ops") {
                if let Op::Upload(u) = op {
                    let content = match u.source {
                        UploadSource::Bytes(b) => String::from_utf8(b).expect("utf-8"),
                        UploadSource::File(p) => format!("<file {}>", p.display()),
                    };
                    uploads.insert(u.dest, content);
                }
            }
        }
    }
    uploads
}

/// Every step and op of `module` on the first master, one line each under `task` and `step`
/// headers; with `checks`, each command's `unless` and `undo` too.
pub(crate) fn plan_of(ctx: &Arc<InstallContext>, module: &dyn Module, checks: bool) -> String {
    let first = ctx.first_master().expect("first").clone();
    let mut out = Vec::new();
    for task in module.tasks().expect("tasks") {
        out.push(format!("task {} on {}", task.name, task.hosts.join(",")));
        for step in &task.steps {
            out.push(format!("  step {}", step.name()));
            for op in step.ops(&first, &Facts::default()).expect("ops") {
                let p = op.generic().plan();
                out.push(format!("    {} {}", p.kind, p.detail));
                let Op::Run(r) = &op else { continue };
                for (what, check) in [("unless", &r.unless), ("undo", &r.undo)] {
                    if let Some(c) = check.as_ref().filter(|_| checks) {
                        out.push(format!("      {what}: {c}"));
                    }
                }
            }
        }
    }
    out.join("\n") + "\n"
}

/// The network module's plan with every check and revert.
fn module_plan(ctx: &Arc<InstallContext>) -> String {
    plan_of(ctx, &NetworkModule(ctx.clone()), true)
}

/// The example cluster at v1.31.13 with `plugin` on the given installation path, loaded with the
/// kubexm tests' stand-in catalog (the built-in one pins no kube-* server binaries).
fn example_with(plugin: &str, path: &str) -> Arc<InstallContext> {
    let text = std::fs::read_to_string(repo().join("manifests/examples/cluster.yaml"))
        .expect("example")
        .edit("plugin: calico", &format!("plugin: {plugin}"))
        .edit("    calico:\n      mode: ipip\n", "")
        .edit("version: v1.33.11", "version: v1.31.13")
        .edit(
            "  kubernetes:\n    type: kubeadm",
            &format!("  kubernetes:\n    type: {path}"),
        );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, text).expect("write yaml");
    let catalog = repo().join("installer/tests/fixtures/kubexm/catalog-stand-in.yaml");
    Arc::new(load_context(&file, Some(&catalog), None, dir.path()).expect("example loads"))
}

#[test]
fn kube_ovn_chart_values() {
    let ctx = example_context(|t| {
        t.edit(
            "plugin: calico",
            "plugin: kube-ovn\n    kubeOvn: {mode: vxlan, joinCidr: 100.65.0.0/16}",
        )
        .edit("    calico:\n      mode: ipip\n", "")
    });
    let values = values_of(&ctx, "kube-ovn-values.yaml");
    let v = &yaml_docs(&values)[0];
    // kubeovn/kube-ovn at dockerhub.kubexm.local/kubexm/kubeovn/kube-ovn: the chart composes
    // address/repository:tag.
    assert_eq!(
        v["global"]["registry"]["address"],
        "dockerhub.kubexm.local/kubexm/kubeovn"
    );
    assert_eq!(
        v["global"]["images"]["kubeovn"],
        serde_json::json!({"repository": "kube-ovn", "tag": "v1.15.0", "vpcRepository": "vpc-nat-gateway"})
    );
    assert_eq!(v["networking"]["NET_STACK"], "ipv4");
    assert_eq!(v["networking"]["TUNNEL_TYPE"], "vxlan");
    assert_eq!(
        v["ipv4"],
        serde_json::json!({"POD_CIDR": "10.233.64.0/18", "POD_GATEWAY": "10.233.64.1", "SVC_CIDR": "10.233.0.0/18", "JOIN_CIDR": "100.65.0.0/16"})
    );
    assert_eq!(v["MASTER_NODES_LABEL"], "kube-ovn/role=master");
    let masters: Vec<String> = ctx
        .nodes
        .iter()
        .filter(|n| n.roles.contains(&kubexm_manifests::resolve::Role::Master))
        .map(|n| n.internal_address.clone())
        .collect();
    assert_eq!(v["MASTER_NODES"], masters.join(","));
    insta::assert_snapshot!("kube-ovn-values", values);

    // Dual-stack: both families, kube-ovn's default join CIDRs.
    let dual = example_context(|t| {
        t.edit("plugin: calico", "plugin: kube-ovn")
            .edit("    calico:\n      mode: ipip\n", "")
            .edit(
                "podCidr: 10.233.64.0/18",
                "podCidr: 10.233.64.0/18,fd00:10:233::/56",
            )
            .edit(
                "serviceCidr: 10.233.0.0/18",
                "serviceCidr: 10.233.0.0/18,fd00:10:96::/112",
            )
    });
    let v = &yaml_docs(&values_of(&dual, "kube-ovn-values.yaml"))[0];
    assert_eq!(v["networking"]["NET_STACK"], "dual_stack");
    assert_eq!(v["networking"]["TUNNEL_TYPE"], "geneve");
    assert_eq!(
        v["dual_stack"],
        serde_json::json!({
            "POD_CIDR": "10.233.64.0/18,fd00:10:233::/56",
            "POD_GATEWAY": "10.233.64.1,fd00:10:233::1",
            "SVC_CIDR": "10.233.0.0/18,fd00:10:96::/112",
            "JOIN_CIDR": "100.64.0.0/16,fd00:100:64::/112"
        })
    );
}

#[test]
fn hybridnet_chart_values() {
    let ctx = example_context(|t| {
        t.edit(
            "plugin: calico",
            "plugin: hybridnet\n    hybridnet: {defaultNetworkType: underlay}",
        )
        .edit("    calico:\n      mode: ipip\n", "")
    });
    let values = values_of(&ctx, "hybridnet-values.yaml");
    let v = &yaml_docs(&values)[0];
    assert_eq!(
        v["images"],
        serde_json::json!({"registryURL": "dockerhub.kubexm.local/kubexm", "hybridnet": {"image": "hybridnetdev/hybridnet", "tag": "v0.8.8"}})
    );
    assert_eq!(
        v["init"],
        serde_json::json!({"cidr": "10.233.64.0/18", "ipVersion": "4"})
    );
    assert_eq!(v["defaultNetworkType"], "Underlay");
    assert_eq!(v["defaultIPFamily"], "IPv4");
    insta::assert_snapshot!("hybridnet-values", values);
    let overlay = example_context(|t| {
        t.edit("plugin: calico", "plugin: hybridnet")
            .edit("    calico:\n      mode: ipip\n", "")
    });
    let v = &yaml_docs(&values_of(&overlay, "hybridnet-values.yaml"))[0];
    assert_eq!(v["defaultNetworkType"], "Overlay");
}

#[test]
fn kube_ovn_and_hybridnet_plans_on_both_paths() {
    for plugin in ["kube-ovn", "hybridnet"] {
        let kubeadm = example_with(plugin, "kubeadm");
        let kubexm = example_with(plugin, "kubexm");
        assert!(NetworkModule(kubeadm.clone()).skip().is_none(), "{plugin}");
        let plan = module_plan(&kubeadm);
        // The module needs only admin.conf and kubectl on the first master: the same plan on
        // both paths.
        assert_eq!(plan, module_plan(&kubexm), "{plugin}");
        let steps: Vec<&str> = plan
            .lines()
            .filter_map(|l| l.trim().strip_prefix("step "))
            .collect();
        let want: &[&str] = if plugin == "kube-ovn" {
            &["helm-binary", "kube-ovn-masters", "kube-ovn", "nodes-ready"]
        } else {
            &["helm-binary", "hybridnet", "nodes-ready"]
        };
        assert_eq!(steps, want, "{plan}");
        assert!(
            plan.contains(&format!("upgrade --install {plugin} ")),
            "{plan}"
        );
        insta::assert_snapshot!(format!("{plugin}-plan"), plan);
    }
    // The masters get the label kube-ovn's chart selects, checked first, removed on revert.
    let plan = module_plan(&example_with("kube-ovn", "kubexm"));
    for want in [
        "label node master1 --overwrite kube-ovn/role=master",
        "grep -qxF -- kube-ovn/role=master",
        "undo: /usr/local/bin/kubectl --kubeconfig /etc/kubernetes/admin.conf label node master1 kube-ovn/role- ",
    ] {
        assert!(plan.contains(want), "{want} missing from\n{plan}");
    }
}

/// Every leaf path of `v` (`a.b.c`).
fn leaf_paths(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaf_paths(&p, x, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// The charts' own values (facts from kubeovn/kube-ovn `charts/kube-ovn/values.yaml` v1.15 and
/// alibaba/hybridnet `charts/hybridnet/values.yaml`; neither chart ships a values schema): every
/// value KubeXM sets is one the chart reads, with a value the chart's comments allow. The
/// charts themselves cannot be rendered here (no helm, no chart download): rendered-only.
#[test]
fn every_chart_value_kubexm_sets_is_one_the_upstream_chart_reads() {
    let kube_ovn_keys: Vec<String> = [
        "global.registry.address",
        "global.images.kubeovn.repository",
        "global.images.kubeovn.tag",
        // read by the v1.13 chart for the NAT gateway's image (v1.14+: natgateway below)
        "global.images.kubeovn.vpcRepository",
        "global.images.natgateway.repository",
        "global.images.natgateway.tag",
        "MASTER_NODES",
        "MASTER_NODES_LABEL",
        "networking.NET_STACK",
        "networking.NETWORK_TYPE",
        "networking.TUNNEL_TYPE",
    ]
    .into_iter()
    .map(String::from)
    .chain(["ipv4", "ipv6", "dual_stack"].into_iter().flat_map(|s| {
        ["POD_CIDR", "POD_GATEWAY", "SVC_CIDR", "JOIN_CIDR"].map(|k| format!("{s}.{k}"))
    }))
    .collect();
    let hybridnet_keys = [
        "images.registryURL",
        "images.hybridnet.image",
        "images.hybridnet.tag",
        "init.cidr",
        "init.ipVersion",
        "defaultNetworkType",
        "defaultIPFamily",
        "manager.replicas",
        "webhook.replicas",
        "typha.replicas",
    ];
    type Edit = fn(String) -> String;
    let edits: [(&str, Edit); 4] = [
        ("kube-ovn ipv4", |t| {
            t.edit(
                "plugin: calico",
                "plugin: kube-ovn\n    kubeOvn: {mode: stt}",
            )
            .edit("    calico:\n      mode: ipip\n", "")
        }),
        ("kube-ovn dual-stack", |t| {
            t.edit("plugin: calico", "plugin: kube-ovn")
                .edit("    calico:\n      mode: ipip\n", "")
                .edit(
                    "podCidr: 10.233.64.0/18",
                    "podCidr: 10.233.64.0/18,fd00:10:233::/56",
                )
                .edit(
                    "serviceCidr: 10.233.0.0/18",
                    "serviceCidr: 10.233.0.0/18,fd00:10:96::/112",
                )
        }),
        ("hybridnet overlay", |t| {
            t.edit("plugin: calico", "plugin: hybridnet")
                .edit("    calico:\n      mode: ipip\n", "")
        }),
        ("hybridnet underlay", |t| {
            t.edit(
                "plugin: calico",
                "plugin: hybridnet\n    hybridnet: {defaultNetworkType: underlay}",
            )
            .edit("    calico:\n      mode: ipip\n", "")
        }),
    ];
    for (what, edit) in edits {
        let ctx = example_context(edit);
        let kube_ovn = what.starts_with("kube-ovn");
        let file = if kube_ovn {
            "kube-ovn-values.yaml"
        } else {
            "hybridnet-values.yaml"
        };
        let v = &yaml_docs(&values_of(&ctx, file))[0];
        let mut paths = Vec::new();
        leaf_paths("", v, &mut paths);
        assert!(paths.len() >= 10, "{what}: {paths:?}");
        for p in &paths {
            let known = if kube_ovn {
                kube_ovn_keys.iter().any(|k| k == p)
            } else {
                hybridnet_keys.contains(&p.as_str())
            };
            assert!(known, "{what}: `{p}` is not a value of the upstream chart");
        }
        let one_of = |path: &[&str], allowed: &[&str]| {
            let x = path.iter().fold(v, |v, k| &v[*k]);
            let s = x
                .as_str()
                .unwrap_or_else(|| panic!("{what}: {path:?} is {x}, not a string"));
            assert!(
                allowed.contains(&s),
                "{what}: {path:?} is `{s}`, not one of {allowed:?}"
            );
        };
        if kube_ovn {
            one_of(
                &["networking", "NET_STACK"],
                &["ipv4", "ipv6", "dual_stack"],
            );
            one_of(&["networking", "NETWORK_TYPE"], &["geneve", "vlan"]);
            one_of(&["networking", "TUNNEL_TYPE"], &["geneve", "vxlan", "stt"]);
            let stack = v["networking"]["NET_STACK"].as_str().expect("stack");
            assert!(
                v[stack]["POD_CIDR"].is_string(),
                "{what}: the {stack} section"
            );
        } else {
            one_of(&["defaultNetworkType"], &["Overlay", "Underlay"]);
            one_of(&["defaultIPFamily"], &["IPv4", "IPv6", "DualStack"]);
            one_of(&["init", "ipVersion"], &["4", "6"]);
            assert!(v["manager"]["replicas"].is_u64(), "{what}: replicas");
        }
    }
}
