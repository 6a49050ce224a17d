//! `kubexm-build bundle` end to end against real servers on loopback: files from the testkit's
//! HTTP mirror, images from Debian's `docker-registry` (one anonymous, one behind htpasswd basic
//! auth) holding small real busybox images, and `skopeo` as the independent client that must read
//! what we write.
//!
//! The kube-* server binaries and the other files are stand-in files (random bytes): no real
//! Kubernetes binaries can be had here. Their sums are pinned through a catalog override,
//! exactly as a user pins their own versions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kubexm_testkit::{
    images, skopeo_copy, skopeo_inspect_digest, HttpMirror, Registry, RegistryOptions,
};

pub(crate) const USER: &str = "puller";
pub(crate) const PASS: &str = "pull-secret-123";

/// Every stand-in file the test cluster needs: (component, version, arch, upstream URL path).
/// Masters are amd64, the worker arm64, so node components come in both arches.
pub(crate) const FILES: &[(&str, &str, &str, &str)] = &[
    ("kube-apiserver", "v1.33.11", "amd64", "dl.k8s.io/release/v1.33.11/bin/linux/amd64/kube-apiserver"),
    ("kube-controller-manager", "v1.33.11", "amd64", "dl.k8s.io/release/v1.33.11/bin/linux/amd64/kube-controller-manager"),
    ("kube-scheduler", "v1.33.11", "amd64", "dl.k8s.io/release/v1.33.11/bin/linux/amd64/kube-scheduler"),
    ("kubectl", "v1.33.11", "amd64", "dl.k8s.io/release/v1.33.11/bin/linux/amd64/kubectl"),
    ("etcd", "v3.5.24", "amd64", "github.com/etcd-io/etcd/releases/download/v3.5.24/etcd-v3.5.24-linux-amd64.tar.gz"),
    ("calicoctl", "v3.99.0", "amd64", "github.com/projectcalico/calico/releases/download/v3.99.0/calicoctl-linux-amd64"),
    ("kube-proxy", "v1.33.11", "amd64", "dl.k8s.io/release/v1.33.11/bin/linux/amd64/kube-proxy"),
    ("kube-proxy", "v1.33.11", "arm64", "dl.k8s.io/release/v1.33.11/bin/linux/arm64/kube-proxy"),
    ("kubelet", "v1.33.11", "amd64", "dl.k8s.io/release/v1.33.11/bin/linux/amd64/kubelet"),
    ("kubelet", "v1.33.11", "arm64", "dl.k8s.io/release/v1.33.11/bin/linux/arm64/kubelet"),
    ("containerd", "1.7.34", "amd64", "github.com/containerd/containerd/releases/download/v1.7.34/containerd-1.7.34-linux-amd64.tar.gz"),
    ("containerd", "1.7.34", "arm64", "github.com/containerd/containerd/releases/download/v1.7.34/containerd-1.7.34-linux-arm64.tar.gz"),
    ("runc", "v1.3.6", "amd64", "github.com/opencontainers/runc/releases/download/v1.3.6/runc.amd64"),
    ("runc", "v1.3.6", "arm64", "github.com/opencontainers/runc/releases/download/v1.3.6/runc.arm64"),
    ("crictl", "v1.33.0", "amd64", "github.com/kubernetes-sigs/cri-tools/releases/download/v1.33.0/crictl-v1.33.0-linux-amd64.tar.gz"),
    ("crictl", "v1.33.0", "arm64", "github.com/kubernetes-sigs/cri-tools/releases/download/v1.33.0/crictl-v1.33.0-linux-arm64.tar.gz"),
    ("cni-plugins", "v1.9.1", "amd64", "github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-amd64-v1.9.1.tgz"),
    ("cni-plugins", "v1.9.1", "arm64", "github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-arm64-v1.9.1.tgz"),
    // The network plugin's chart (a `userPinned` component: pinned here like a user pins it)
    // and helm, which installs it.
    ("calico-chart", "v3.99.0", "amd64", "github.com/projectcalico/calico/releases/download/v3.99.0/tigera-operator-v3.99.0.tgz"),
    ("helm", "v3.18.4", "amd64", "get.helm.sh/helm-v3.18.4-linux-amd64.tar.gz"),
];

/// The Helm chart an addon takes from the mirror's chart repository (`charts/index.yaml`).
pub(crate) const ADDON_CHART: &str = "charts.example/charts/demo-chart-1.0.0.tgz";
/// The YAML an addon takes from the build host (relative to cluster.yaml).
pub(crate) const ADDON_YAML: &str = "addons/demo.yaml";

pub(crate) struct Lab {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) mirror: HttpMirror,
    pub(crate) open: Registry,
    pub(crate) private: Registry,
    /// reference → digest at the source registry
    source_digests: BTreeMap<String, String>,
}

impl Lab {
    pub(crate) fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
}

/// Deterministic stand-in content (64 KiB, distinct per name).
pub(crate) fn stand_in(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * 1024);
    let mut x: u64 = name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    while out.len() < 64 * 1024 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// A real (gzip'd tar) Helm chart whose values pull an image the bundle carries (the catalog's
/// calico addon image), deterministic: the index's digest is taken from these bytes.
pub(crate) fn demo_chart() -> Vec<u8> {
    kubexm_testkit::tgz(&[
        (
            "demo-chart/Chart.yaml",
            "apiVersion: v2\nname: demo-chart\nversion: 1.0.0\nappVersion: v3.99.0\n",
        ),
        (
            "demo-chart/values.yaml",
            "image:\n  repository: docker.io/calico/node\n  tag: \"\"\n",
        ),
        ("demo-chart/templates/cm.yaml", "kind: ConfigMap\n"),
    ])
}

pub(crate) fn setup() -> Lab {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("mirror");
    let mut pins = String::from(
        "# Test pins: sums of the stand-in files served by the test's mirror.\ncomponents:\n",
    );
    for (name, version, arch, path) in FILES {
        let content = stand_in(path);
        let file = root.join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, &content).expect("write stand-in");
        let sum = kubexm_testkit::sha256_hex(&content);
        pins.push_str(&format!(
            "  - name: {name}\n    versions:\n      \"{version}\": {{{arch}: \"{sum}\"}}\n"
        ));
    }
    // Addon sources: a chart repository on the mirror (index.yaml with the archive's digest,
    // as Helm repositories publish it) and a YAML file on the build host.
    let chart = demo_chart();
    std::fs::create_dir_all(root.join("charts.example/charts")).expect("mkdir charts");
    std::fs::write(root.join(ADDON_CHART), &chart).expect("write chart");
    std::fs::write(
        root.join("charts.example/charts/index.yaml"),
        format!(
            "apiVersion: v1\nentries:\n  demo-chart:\n  - name: demo-chart\n    version: 1.0.0\n    digest: {}\n    urls: [demo-chart-1.0.0.tgz]\n  - name: demo-chart\n    version: 0.9.0\n    digest: {}\n    urls: [demo-chart-0.9.0.tgz]\n",
            kubexm_testkit::sha256_hex(&chart),
            "0".repeat(64)
        ),
    )
    .expect("write index");
    std::fs::create_dir_all(dir.path().join("addons")).expect("mkdir addons");
    std::fs::write(
        dir.path().join(ADDON_YAML),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo}\n",
    )
    .expect("write addon yaml");
    let mirror = HttpMirror::start(&root);
    let open = Registry::start(RegistryOptions::default());
    let private = Registry::start(RegistryOptions {
        basic_auth: Some((USER.to_owned(), PASS.to_owned())),
        ..RegistryOptions::default()
    });

    // Real images: busybox-static rootfs, built with umoci, pushed with skopeo.
    let work = dir.path().join("images");
    std::fs::create_dir_all(&work).expect("mkdir");
    let amd = images::busybox_layout(&work, "pause", "amd64");
    let arm = images::busybox_layout(&work, "pause-arm", "arm64");
    let s390 = images::busybox_layout(&work, "pause-s390x", "s390x");
    let mut source_digests = BTreeMap::new();
    // pause: a two-platform OCI index, kept whole (both arches are needed).
    let pause = images::push_index(
        &open,
        "registry.k8s.io/pause:3.10",
        &[(&amd, "amd64"), (&arm, "arm64")],
        None,
    );
    source_digests.insert("registry.k8s.io/pause:3.10".to_owned(), pause.index);
    // coredns: a three-platform index reduced to the two needed.
    let coredns = images::push_index(
        &open,
        "registry.k8s.io/coredns/coredns:v1.12.0",
        &[(&amd, "amd64"), (&arm, "arm64"), (&s390, "s390x")],
        None,
    );
    source_digests.insert(
        "registry.k8s.io/coredns/coredns:v1.12.0".to_owned(),
        coredns.index,
    );
    // node-cache: index again (shares every blob with pause: deduplicated in the bundle).
    let nc = images::push_index(
        &open,
        "registry.k8s.io/dns/k8s-dns-node-cache:1.25.0",
        &[(&amd, "amd64"), (&arm, "arm64")],
        None,
    );
    source_digests.insert(
        "registry.k8s.io/dns/k8s-dns-node-cache:1.25.0".to_owned(),
        nc.index,
    );
    // verify-cluster's probe (every bundle carries it): an index again, from docker.io/library.
    let probe = images::push_index(
        &open,
        "library/busybox:1.36.1",
        &[(&amd, "amd64"), (&arm, "arm64")],
        None,
    );
    source_digests.insert("docker.io/library/busybox:1.36.1".to_owned(), probe.index);
    // kube-vip: a single Docker schema2 manifest (masters only, amd64).
    let kv = images::push_docker_schema2(
        &amd,
        images::LAYOUT_TAG,
        &open,
        None,
        "ghcr.io/kube-vip/kube-vip:v1.0.3",
    );
    source_digests.insert("ghcr.io/kube-vip/kube-vip:v1.0.3".to_owned(), kv);
    // calico/node: behind basic auth.
    let calico = images::push_index(
        &private,
        "calico/node:v3.99.0",
        &[(&amd, "amd64"), (&arm, "arm64")],
        Some((USER, PASS)),
    );
    source_digests.insert("docker.io/calico/node:v3.99.0".to_owned(), calico.index);

    pins.push_str(
        "addonImages:\n  calico:\n    \"v3.99.0\": [\"docker.io/calico/node:v3.99.0\"]\n",
    );
    std::fs::write(dir.path().join("catalog.yaml"), pins).expect("write catalog");
    let zone = format!(
        "apiVersion: kubexm.io/v1alpha1\nkind: Zone\nmetadata: {{name: lab}}\nfiles:\n  - {{from: 'https://', to: '{base}/'}}\nimages:\n  - {{from: registry.k8s.io, to: '{o}/registry.k8s.io', plainHTTP: true}}\n  - {{from: ghcr.io, to: '{o}/ghcr.io', plainHTTP: true}}\n  - {{from: docker.io/calico, to: '{p}/calico', plainHTTP: true}}\n  - {{from: docker.io/library, to: '{o}/library', plainHTTP: true}}\n",
        base = mirror.base_url(),
        o = open.host(),
        p = private.host(),
    );
    std::fs::write(dir.path().join("zone.yaml"), zone).expect("write zone");
    write_cluster(dir.path(), Some((private.host().as_str(), USER, PASS)));
    Lab {
        dir,
        mirror,
        open,
        private,
        source_digests,
    }
}

pub(crate) fn write_cluster(dir: &Path, auth: Option<(&str, &str, &str)>) {
    let auths = match auth {
        Some((host, u, p)) => format!(
            "    auths:\n      \"{host}\": {{username: {u}, password: {p}, plainHTTP: true}}\n"
        ),
        None => String::new(),
    };
    let cluster = format!(
        "apiVersion: kubexm.io/v1alpha1
kind: Cluster
metadata: {{name: lab}}
spec:
  hosts:
    - {{name: m1, address: 10.0.0.11}}
    - {{name: w1, address: 10.0.0.21, arch: arm64}}
  roleGroups:
    etcd: [m1]
    master: [m1]
    worker: [w1]
  kubernetes: {{type: kubexm, version: v1.33.11}}
  network:
    plugin: calico
    calico: {{version: v3.99.0}}
  loadBalancer: {{mode: internal, internal: {{type: kube-vip}}, vip: 10.0.0.100, interface: eth0}}
  registry:
    type: none
{auths}  addons:
    - name: demo-yaml
      namespace: demo
      type: yaml
      source: {{path: {ADDON_YAML}}}
    - name: demo-chart
      namespace: demo
      type: helm
      source:
        chart: {{name: demo-chart, version: 1.0.0, repo: 'https://charts.example/charts'}}
"
    );
    std::fs::write(dir.join("cluster.yaml"), cluster).expect("write cluster");
}

pub(crate) fn bundle(lab: &Lab, out: &str, cache: &str, extra: &[&str]) -> Output {
    bundle_cmd(lab, out, cache, extra)
        .output()
        .expect("kubexm-build runs")
}

pub(crate) fn bundle_cmd(lab: &Lab, out: &str, cache: &str, extra: &[&str]) -> Command {
    let d = lab.dir.path();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubexm-build"));
    cmd.arg("bundle")
        .arg("-f")
        .arg(d.join("cluster.yaml"))
        .arg("--zone-file")
        .arg(d.join("zone.yaml"))
        .arg("--catalog")
        .arg(d.join("catalog.yaml"))
        .arg("--cache-dir")
        .arg(d.join(cache))
        .arg("-o")
        .arg(d.join(out))
        .args([
            "--retry-delay-ms",
            "50",
            "--docker-config",
            "/nonexistent/config.json",
        ])
        .args(extra)
        .env_remove("KMZONE")
        .env("SOURCE_DATE_EPOCH", "1700000000");
    cmd
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn extract(bundle: &Path, into: &Path) {
    std::fs::create_dir_all(into).expect("mkdir");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "zstd -dc '{}' | tar -x -C '{}'",
            bundle.display(),
            into.display()
        ))
        .status()
        .expect("zstd | tar");
    assert!(status.success(), "zstd -dc | tar -x failed");
}

fn registry_get_count(r: &Registry) -> usize {
    r.count_requests("GET", "/v2/") + r.count_requests("HEAD", "/v2/")
}

#[test]
fn bundle_from_mirror_and_registries_is_complete_readable_and_reproducible() {
    let lab = setup();
    let out = bundle(&lab, "b1.tar.zst", "cache", &[]);
    assert!(
        out.status.success(),
        "bundle failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        !text(&out.stderr).contains(PASS),
        "the registry password leaked into the logs"
    );
    let b1 = lab.path("b1.tar.zst");

    // verify: our own streaming check.
    let v = Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .arg("verify")
        .arg(&b1)
        .output()
        .expect("verify runs");
    assert!(v.status.success(), "verify: {}", text(&v.stderr));
    assert!(text(&v.stdout).contains(": OK ("), "{}", text(&v.stdout));

    // Independent tools: tar/zstd extract it, sha256sum checks it.
    let x = lab.path("x");
    extract(&b1, &x);
    let sums = Command::new("sha256sum")
        .args(["-c", "--quiet", "SHA256SUMS"])
        .current_dir(&x)
        .output()
        .expect("sha256sum");
    assert!(
        sums.status.success(),
        "sha256sum -c: {}{}",
        text(&sums.stdout),
        text(&sums.stderr)
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(x.join("bundle.json")).expect("bundle.json"))
            .expect("json");
    assert_eq!(manifest["cluster"], "lab");
    assert_eq!(
        manifest["files"].as_array().map(Vec::len),
        Some(FILES.len() + 2),
        "every catalog file and the two addon sources"
    );
    for f in manifest["files"].as_array().expect("files") {
        let path = f["path"].as_str().expect("path");
        assert!(x.join(path).is_file(), "{path} missing");
    }
    let file = |name: &str| {
        manifest["files"]
            .as_array()
            .expect("files")
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in bundle.json"))
            .clone()
    };
    // The network plugin's chart, under its upstream file name.
    let cni = file("calico-chart");
    assert_eq!(
        cni["path"],
        "files/calico-chart/v3.99.0/amd64/tigera-operator-v3.99.0.tgz"
    );
    // Addons: the local YAML as it is, the chart from the repository index's URL, verified
    // against the index's digest.
    let yaml = file("addon/demo-yaml");
    assert_eq!(yaml["path"], "files/addons/demo-yaml/demo.yaml");
    assert_eq!(
        std::fs::read(x.join("files/addons/demo-yaml/demo.yaml")).expect("yaml"),
        std::fs::read(lab.path(ADDON_YAML)).expect("source yaml")
    );
    let chart = file("addon/demo-chart");
    assert_eq!(
        chart["path"],
        "files/addons/demo-chart/demo-chart-1.0.0.tgz"
    );
    assert_eq!(chart["version"], "1.0.0");
    assert_eq!(
        chart["url"],
        format!("{}/{ADDON_CHART}", lab.mirror.base_url())
    );
    assert_eq!(
        std::fs::read(x.join("files/addons/demo-chart/demo-chart-1.0.0.tgz")).expect("chart"),
        demo_chart()
    );
    assert!(x.join("cluster.yaml").is_file());

    // skopeo reads every image from the layout, digests match the source registries, and the
    // images push on to another registry.
    let layout = x.join("images");
    let images = manifest["images"].as_array().expect("images");
    assert_eq!(images.len(), lab.source_digests.len());
    for (i, img) in images.iter().enumerate() {
        let reference = img["reference"].as_str().expect("reference");
        let oci = format!("oci:{}:{reference}", layout.display());
        let source = &lab.source_digests[reference];
        let recorded_source = img["sourceDigest"]
            .as_str()
            .or_else(|| img["digest"].as_str())
            .expect("digest");
        assert_eq!(recorded_source, source, "{reference}: source digest");
        let in_layout = skopeo_inspect_digest(&oci, false, None)
            .unwrap_or_else(|e| panic!("skopeo inspect {oci}: {e}"));
        assert!(!in_layout.is_empty(), "{reference}");
        let dest = format!("docker://{}/copy/check{i}:t", lab.open.host());
        // A Docker schema2 image sits behind a one-entry OCI index in the layout: copy the
        // instance (its digest is the source's); indexes are copied whole.
        let single = img
            .get("layoutDigest")
            .is_some_and(serde_json::Value::is_string);
        let mut copy_args = vec!["--dest-tls-verify=false"];
        if !single {
            copy_args.push("--all");
        }
        skopeo_copy(&oci, &dest, &copy_args).unwrap_or_else(|e| panic!("skopeo copy {oci}: {e}"));
        let pushed = skopeo_inspect_digest(&dest, false, None).expect("inspect pushed copy");
        assert_eq!(
            pushed,
            img["digest"].as_str().expect("digest"),
            "{reference}: digest preserved by push"
        );
    }
    let by_ref = |r: &str| {
        images
            .iter()
            .find(|i| i["reference"] == r)
            .expect(r)
            .clone()
    };
    let pause = by_ref("registry.k8s.io/pause:3.10");
    assert!(
        pause.get("sourceDigest").is_none(),
        "a two-platform index needed whole is kept byte for byte"
    );
    let coredns = by_ref("registry.k8s.io/coredns/coredns:v1.12.0");
    assert!(
        coredns["sourceDigest"].is_string(),
        "the s390x entry was dropped, so the index was reduced"
    );
    assert_eq!(
        coredns["platforms"],
        serde_json::json!(["linux/amd64", "linux/arm64"])
    );
    let kv = by_ref("ghcr.io/kube-vip/kube-vip:v1.0.3");
    assert_eq!(
        kv["mediaType"],
        "application/vnd.docker.distribution.manifest.v2+json"
    );
    // Blobs shared by several images are stored once.
    let blob_count = std::fs::read_dir(layout.join("blobs/sha256"))
        .expect("blobs")
        .count();
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).expect("index"))
            .expect("json");
    assert_eq!(
        index["manifests"].as_array().map(Vec::len),
        Some(images.len())
    );
    assert!(blob_count < 5 * 6, "deduplicated blobs: {blob_count}");

    // Warm cache: zero requests anywhere, and a byte-identical bundle.
    lab.mirror.reset_counts();
    let before = (
        registry_get_count(&lab.open),
        registry_get_count(&lab.private),
    );
    let out = bundle(&lab, "b2.tar.zst", "cache", &[]);
    assert!(
        out.status.success(),
        "warm rebuild failed: {}",
        text(&out.stderr)
    );
    assert_eq!(lab.mirror.requests(), 0, "warm rebuild made file requests");
    assert_eq!(
        (
            registry_get_count(&lab.open),
            registry_get_count(&lab.private)
        ),
        before,
        "warm rebuild made registry requests"
    );
    let (a, b) = (
        std::fs::read(&b1).expect("b1"),
        std::fs::read(lab.path("b2.tar.zst")).expect("b2"),
    );
    assert!(a == b, "the same inputs must give a byte-identical bundle");

    verify_refuses_damaged_copies(&lab, &a);
}

pub(crate) fn verify_cli(path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .arg("verify")
        .arg(path)
        .output()
        .expect("verify runs")
}

/// `kubexm-build verify` names the entry of a tampered or truncated bundle and exits 1.
fn verify_refuses_damaged_copies(lab: &Lab, good: &[u8]) {
    // Truncated: cut the compressed stream in half.
    let cut = lab.path("cut.tar.zst");
    std::fs::write(&cut, &good[..good.len() / 2]).expect("write");
    let out = verify_cli(&cut);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).to_lowercase().contains("truncated"),
        "{}",
        text(&out.stderr)
    );

    // Tampered: flip one byte inside kubectl's content, recompress.
    let mut tar_bytes = zstd::decode_all(good).expect("decompress");
    let target = FILES
        .iter()
        .find(|f| f.0 == "kubectl")
        .map(|f| format!("files/kubectl/{}/{}/kubectl", f.1, f.2))
        .expect("kubectl");
    let mut archive = tar::Archive::new(std::io::Cursor::new(tar_bytes.clone()));
    let offset = archive
        .entries()
        .expect("entries")
        .filter_map(Result::ok)
        .find(|e| e.path().is_ok_and(|p| p.to_string_lossy() == target))
        .map(|e| e.raw_file_position())
        .expect("kubectl entry");
    let at = usize::try_from(offset).expect("offset") + 100;
    tar_bytes[at] ^= 0xff;
    let tampered = lab.path("tampered.tar.zst");
    std::fs::write(
        &tampered,
        zstd::encode_all(tar_bytes.as_slice(), 3).expect("compress"),
    )
    .expect("write");
    let out = verify_cli(&tampered);
    assert_eq!(out.status.code(), Some(4));
    let err = text(&out.stderr);
    assert!(err.contains(&target), "the tampered entry is named: {err}");
}

#[test]
fn unpinned_network_files_and_unsummed_addon_urls_are_refused_before_any_download() {
    let lab = setup();
    let cluster = lab.path("cluster.yaml");
    let original = std::fs::read_to_string(&cluster).expect("cluster");
    // flannel: its upstream manifest is a `userPinned` component the built-in catalog cannot pin.
    std::fs::write(
        &cluster,
        original.replace(
            "plugin: calico\n    calico: {version: v3.99.0}",
            "plugin: flannel",
        ),
    )
    .expect("write");
    let out = bundle(&lab, "u.tar.zst", "c-u", &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    for want in [
        "no pinned sha256",
        "flannel-manifest v0.27.4 (amd64)",
        "/github.com/flannel-io/flannel/releases/download/v0.27.4/kube-flannel.yml",
        "--catalog FILE",
        "  - name: flannel-manifest",
    ] {
        assert!(err.contains(want), "{want} missing from:\n{err}");
    }
    assert_eq!(lab.mirror.requests(), 0, "nothing is downloaded");
    assert!(!lab.path("u.tar.zst").exists());

    // An addon URL without source.sha256.
    std::fs::write(
        &cluster,
        format!(
            "{original}    - name: from-url\n      type: yaml\n      source: {{url: 'https://example.org/x.yaml'}}\n"
        ),
    )
    .expect("write");
    let out = bundle(&lab, "v.tar.zst", "c-v", &[]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(
        err.contains("from-url") && err.contains("source.sha256"),
        "{err}"
    );
    assert_eq!(lab.mirror.requests(), 0, "nothing is downloaded");
}

#[test]
fn addons_pulling_an_image_the_bundle_lacks_are_refused_before_any_image_pull() {
    // Issue 13 item 8: a bundle whose addon manifests pull an image it does not carry fails
    // offline on the nodes; the build refuses it, naming the addon, the file, the line and
    // the image, and what to do.
    let lab = setup();
    std::fs::write(
        lab.path(ADDON_YAML),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: demo}\nspec:\n  containers:\n    - name: a\n      image: quay.io/example/missing:v1\n",
    )
    .expect("write addon");
    let before = registry_get_count(&lab.open);
    let out = bundle(&lab, "m.tar.zst", "c-m", &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    for want in [
        "spec.addons `demo-yaml`: demo.yaml line 7 pulls quay.io/example/missing:v1, which the bundle does not contain",
        "list it in that addon's `images`",
    ] {
        assert!(err.contains(want), "{want} missing from:\n{err}");
    }
    assert_eq!(registry_get_count(&lab.open), before, "no image was pulled");
    assert!(!lab.path("m.tar.zst").exists());
    // Listed in the addon's `images`, the same manifest passes the check.
    let cluster = lab.path("cluster.yaml");
    let yaml = std::fs::read_to_string(&cluster).expect("cluster");
    std::fs::write(
        &cluster,
        yaml.replace(
            &format!("source: {{path: {ADDON_YAML}}}\n"),
            &format!(
                "source: {{path: {ADDON_YAML}}}\n      images: [\"quay.io/example/missing:v1\"]\n"
            ),
        ),
    )
    .expect("write cluster");
    let out = bundle(&lab, "m2.tar.zst", "c-m2", &["--retries", "1"]);
    let err = text(&out.stderr);
    assert!(!err.contains("does not contain"), "{err}");
}

#[test]
fn accept_unpinned_takes_the_sum_of_what_the_mirror_serves_and_prints_the_pin() {
    let lab = setup();
    let cluster = lab.path("cluster.yaml");
    let original = std::fs::read_to_string(&cluster).expect("cluster");
    std::fs::write(
        &cluster,
        original.replace(
            "plugin: calico\n    calico: {version: v3.99.0}",
            "plugin: flannel",
        ),
    )
    .expect("write");
    // The upstream file, under its upstream path on the mirror (the zone maps https:// there).
    let manifest = b"apiVersion: v1\nkind: Namespace\nmetadata: {name: kube-flannel}\n".to_vec();
    let path = lab
        .path("mirror")
        .join("github.com/flannel-io/flannel/releases/download/v0.27.4/kube-flannel.yml");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, &manifest).expect("write manifest");
    let sum = kubexm_testkit::sha256_hex(&manifest);

    let out = bundle(&lab, "p.tar.zst", "c-p", &["--accept-unpinned"]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(
        stdout.contains(&format!(
            "flannel-manifest v0.27.4 (amd64) pinned on first use (--accept-unpinned): sha256 {sum}"
        )),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains(&format!(
            "  - name: flannel-manifest\n    versions: {{\"v0.27.4\": {{amd64: \"{sum}\"}}}}"
        )),
        "the catalog entry that pins it is printed:\n{stdout}"
    );
    assert!(!stderr.contains("no pinned sha256"), "{stderr}");
    // The test registries hold no flannel images, so this build stops there — after the pin.
    if out.status.success() {
        let listed = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "zstd -dc {} | tar -xO SHA256SUMS",
                lab.path("p.tar.zst").display()
            ))
            .output()
            .expect("sh");
        assert!(
            text(&listed.stdout).contains(&sum),
            "the bundle records the pinned sum"
        );
    }
}
