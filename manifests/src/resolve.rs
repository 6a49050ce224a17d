//! The resolver: a validated cluster + zone + catalog → the exact files and images to bundle.
//!
//! The JSON form of [`Resolution`] (`kubexm-build resolve -o json`) is stable within a
//! `formatVersion`: fields are only added, never renamed or removed.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::catalog::{newest_versions, Archive, Catalog, Component};
use crate::image_ref::ImageRef;
use crate::model::{
    AddonType, Arch, EtcdType, InternalLbType, KubernetesType, LbMode, Plugin, RegistryType,
    RuntimeType,
};

/// Bundle directory of the addons' sources: `files/addons/<addon>/<file>`.
pub const ADDONS_DIR: &str = "files/addons";
/// Bundle directory of the custom scripts: `files/scripts/<phase>/<NN>-<file name>`.
pub const SCRIPTS_DIR: &str = "files/scripts";
use crate::validate::{Problem, ValidCluster};
use crate::zone::Zone;

/// Version of the JSON form.
pub const RESOLUTION_FORMAT: u32 = 1;

/// A role hosts play.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// etcd member.
    Etcd,
    /// Control plane.
    Master,
    /// Worker.
    Worker,
    /// Registry host.
    Registry,
    /// Load balancer host.
    Loadbalancer,
    /// The NFS server.
    Nfs,
}

impl Role {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Etcd => "etcd",
            Role::Master => "master",
            Role::Worker => "worker",
            Role::Registry => "registry",
            Role::Loadbalancer => "loadbalancer",
            Role::Nfs => "nfs",
        }
    }
}

const NODES: &[Role] = &[Role::Master, Role::Worker];

/// The catalog's image group of kata-deploy (Kata Containers' installer DaemonSet).
pub const KATA_DEPLOY_GROUP: &str = "kata-deploy";
/// The kata-deploy release KubeXM's Kata manifest is written for.
pub const KATA_DEPLOY_VERSION: &str = "3.2.0";
/// The catalog's image group of Node Feature Discovery.
pub const NFD_GROUP: &str = "node-feature-discovery";
/// The Node Feature Discovery release KubeXM's manifest is written for (the v0.10 layout the
/// seed, KubeKey v3, deploys: master Deployment + worker DaemonSet speaking gRPC).
pub const NFD_VERSION: &str = "v0.10.1";
/// The catalog's image group of `kubexm-install verify-cluster`'s probe: a busybox with `httpd`,
/// `wget` and `nslookup`, run on every node for the check's pod-network, Service and DNS probes.
/// Every bundle carries it, so that every installed cluster can be verified offline.
pub const PROBE_GROUP: &str = "kubexm-probe";
/// The probe image's version (the catalog's `addonImages.kubexm-probe` key).
pub const PROBE_VERSION: &str = "1.36.1";
const MASTERS: &[Role] = &[Role::Master];
/// The catalog's image group of the NFS provisioner (nfs-subdir-external-provisioner).
pub const NFS_PROVISIONER_GROUP: &str = "nfs-subdir-external-provisioner";
/// The nfs-subdir-external-provisioner release KubeXM's manifest is written for (the image
/// KubeKey's chart 4.0.18 runs).
pub const NFS_PROVISIONER_VERSION: &str = "v4.0.2";
/// The catalog's image group of OpenEBS local PV (the provisioner and its helper image).
pub const LOCAL_PV_GROUP: &str = "openebs-localpv";
/// The OpenEBS dynamic-localpv-provisioner release KubeXM's manifest is written for
/// (KubeKey's `localpv_provisioner_version`).
pub const LOCAL_PV_VERSION: &str = "4.4.0";

/// One file to download and bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BinaryEntry {
    /// Component name.
    pub name: String,
    /// Version as in the catalog.
    pub version: String,
    /// Architecture.
    pub arch: Arch,
    /// Download URL after the zone's rewrites.
    pub url: String,
    /// Pinned sha256 (hex); empty when `unpinned`.
    pub sha256: String,
    /// How the file is packed.
    pub archive: Archive,
    /// Roles that need it.
    pub roles: BTreeSet<Role>,
    /// Path inside the bundle: `files/<name>/<version>/<arch>/<file>`.
    pub path: String,
    /// The catalog pins no sha256 for this version (a `userPinned` component): `resolve` and
    /// `plan` list it, `kubexm-build bundle` refuses it until it is pinned with `--catalog`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unpinned: bool,
}

/// When a custom script runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScriptPhase {
    /// `spec.system.preInstall`: before node preparation.
    PreInstall,
    /// `spec.system.postInstall`: after the last module.
    PostInstall,
}

impl ScriptPhase {
    /// `pre-install` / `post-install` (bundle directory, journal tag suffix).
    pub fn as_str(self) -> &'static str {
        match self {
            ScriptPhase::PreInstall => "pre-install",
            ScriptPhase::PostInstall => "post-install",
        }
    }

    /// `preInstall` / `postInstall` (the cluster.yaml field under `spec.system`).
    pub fn field(self) -> &'static str {
        match self {
            ScriptPhase::PreInstall => "preInstall",
            ScriptPhase::PostInstall => "postInstall",
        }
    }

    /// The `bundle.json` record name of the phase's scripts: `script/pre-install`.
    pub fn record_name(self) -> String {
        format!("script/{}", self.as_str())
    }
}

/// One custom script to bundle (`spec.system.preInstall` / `postInstall`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScriptEntry {
    /// When it runs.
    pub phase: ScriptPhase,
    /// Its place in the list, from 1 (the record's version, two digits: `01`).
    pub position: usize,
    /// The path as written in cluster.yaml (relative to cluster.yaml's directory).
    pub source: String,
    /// Path inside the bundle: `files/scripts/<phase>/<NN>-<file name>`.
    pub path: String,
}

impl ScriptEntry {
    /// The record's version: the two-digit position (`01`), so records sort in run order.
    pub fn version(&self) -> String {
        format!("{:02}", self.position)
    }
}

/// Where one addon's source comes from (bundled under [`ADDONS_DIR`]`/<addon>/`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddonEntry {
    /// `spec.addons[].name`.
    pub addon: String,
    /// `yaml` or `helm`.
    pub kind: AddonType,
    /// The source.
    pub source: AddonLocation,
    /// Its sha256 when known before downloading (`source.sha256`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Directory inside the bundle holding the addon's files.
    pub dir: String,
}

/// Where an addon's files are fetched from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum AddonLocation {
    /// A file or directory on the build host.
    Path {
        /// The path as written in cluster.yaml.
        path: String,
    },
    /// A file at a URL (after the zone's rewrites).
    Url {
        /// The URL.
        url: String,
    },
    /// A chart in a Helm repository (its index.yaml names the archive).
    Chart {
        /// Repository URL.
        repo: String,
        /// Chart name.
        name: String,
        /// Chart version.
        version: String,
    },
}

/// One image to pull and bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageEntry {
    /// Canonical reference (what the cluster asks for; the name in the bundle).
    pub reference: String,
    /// Where to pull it from (after the zone's rewrites).
    pub source: String,
    /// What it is for (`kubernetes`, `calico`, `addon:NAME`, …).
    pub group: String,
    /// Platforms to keep, e.g. `linux/amd64`.
    pub platforms: BTreeSet<String>,
    /// Roles that pull it.
    pub roles: BTreeSet<Role>,
}

/// Everything a cluster needs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    /// [`RESOLUTION_FORMAT`].
    pub format_version: u32,
    /// `metadata.name`.
    pub cluster: String,
    /// Kubernetes version.
    pub kubernetes_version: String,
    /// `kubeadm` or `kubexm`.
    pub kubernetes_type: KubernetesType,
    /// Zone name.
    pub zone: String,
    /// Architectures present in the hosts.
    pub arches: BTreeSet<Arch>,
    /// Files, sorted by name, version, arch.
    pub binaries: Vec<BinaryEntry>,
    /// Images, sorted by reference.
    pub images: Vec<ImageEntry>,
    /// Addon sources, in `spec.addons` order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addons: Vec<AddonEntry>,
    /// Custom scripts (`spec.system.preInstall`, then `postInstall`), in list order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scripts: Vec<ScriptEntry>,
}

struct Resolver<'a> {
    cluster: &'a ValidCluster,
    catalog: &'a Catalog,
    zone: &'a Zone,
    defaults: &'a BTreeMap<String, String>,
    binaries: BTreeMap<(String, String, Arch), BinaryEntry>,
    images: BTreeMap<String, ImageEntry>,
    problems: Vec<Problem>,
}

/// Resolves the files and images `cluster` needs.
pub fn resolve(
    cluster: &ValidCluster,
    catalog: &Catalog,
    zone: &Zone,
) -> Result<Resolution, Vec<Problem>> {
    let Some(release) = catalog.release(cluster.version) else {
        return Err(vec![Problem {
            path: "spec.kubernetes.version".into(),
            message: format!("{} is not in the catalog", cluster.version),
            hint: format!(
                "supported versions: {}",
                catalog.kubernetes_versions().join(", ")
            ),
        }]);
    };
    let mut r = Resolver {
        cluster,
        catalog,
        zone,
        defaults: &release.defaults,
        binaries: BTreeMap::new(),
        images: BTreeMap::new(),
        problems: Vec::new(),
    };
    let spec = &cluster.file.spec;
    let k8s = cluster.version.to_string();

    // Kubernetes itself: the images kubeadm of this version lists (registry and CoreDNS path
    // per version, tags from the catalog), or the server binaries on the kubexm path.
    let kubeadm_images = cluster.version.kubeadm_images(release);
    match spec.kubernetes.kind {
        KubernetesType::Kubeadm => {
            r.binary_at("kubeadm", &k8s, NODES, "spec.kubernetes.version");
            for img in [
                &kubeadm_images.apiserver,
                &kubeadm_images.controller_manager,
                &kubeadm_images.scheduler,
            ] {
                r.image(img, "kubernetes", MASTERS);
            }
            r.image(&kubeadm_images.proxy, "kubernetes", NODES);
        }
        KubernetesType::Kubexm => {
            for c in [
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
            ] {
                r.binary_at(c, &k8s, MASTERS, "spec.kubernetes.version");
            }
            r.binary_at("kube-proxy", &k8s, NODES, "spec.kubernetes.version");
        }
    }
    r.binary_at("kubelet", &k8s, NODES, "spec.kubernetes.version");
    r.binary_at("kubectl", &k8s, MASTERS, "spec.kubernetes.version");
    r.image(&kubeadm_images.pause, "kubernetes", NODES);
    r.image(&kubeadm_images.coredns, "kubernetes", NODES);
    r.image_group("nodelocaldns", None, NODES, "spec.kubernetes");
    r.image_group(
        PROBE_GROUP,
        Some(PROBE_VERSION),
        NODES,
        "verify-cluster's probe",
    );
    // Kata Containers and Node Feature Discovery: the version KubeXM's manifests are written for
    // (their objects change between releases); the image list of that version comes from the
    // catalog's addonImages, so --catalog can point it elsewhere.
    if spec.kubernetes.kata.enabled {
        r.image_group(
            KATA_DEPLOY_GROUP,
            Some(KATA_DEPLOY_VERSION),
            NODES,
            "spec.kubernetes.kata.enabled",
        );
    }
    if spec.kubernetes.node_feature_discovery.enabled {
        r.image_group(
            NFD_GROUP,
            Some(NFD_VERSION),
            NODES,
            "spec.kubernetes.nodeFeatureDiscovery.enabled",
        );
    }

    // Storage: the provisioners run on any node (Deployments; local PV's helper pods run on the
    // node of each volume).
    if !cluster.roles.nfs.is_empty() {
        r.image_group(
            NFS_PROVISIONER_GROUP,
            Some(NFS_PROVISIONER_VERSION),
            NODES,
            "spec.roleGroups.nfs",
        );
    }
    if spec.storage.local_enabled() {
        r.image_group(
            LOCAL_PV_GROUP,
            Some(LOCAL_PV_VERSION),
            NODES,
            "spec.storage.localVolume.enabled",
        );
    }

    // etcd.
    match spec.etcd.kind {
        EtcdType::Kubexm => r.binary(
            "etcd",
            spec.etcd.version.as_deref(),
            &[Role::Etcd],
            "spec.etcd.version",
        ),
        EtcdType::Kubeadm => r.image(&kubeadm_images.etcd, "etcd", MASTERS),
        EtcdType::External => {}
    }

    // Runtime.
    let rt_version = spec.runtime.version.as_deref();
    match spec.runtime.kind {
        RuntimeType::Containerd => {
            r.binary("containerd", rt_version, NODES, "spec.runtime.version");
            r.binary("runc", None, NODES, "spec.runtime");
            r.binary("crictl", None, NODES, "spec.runtime");
            r.binary("cni-plugins", None, NODES, "spec.network");
        }
        RuntimeType::Docker => {
            r.binary("docker", rt_version, NODES, "spec.runtime.version");
            // Validation refuses criDockerd: true where the kubelet still has dockershim.
            if !cluster.version.has_dockershim() {
                r.binary("cri-dockerd", None, NODES, "spec.runtime");
            }
            r.binary("crictl", None, NODES, "spec.runtime");
            r.binary("cni-plugins", None, NODES, "spec.network");
        }
        RuntimeType::CriO => {
            // The cri-o bundle carries crio, conmon, pinns, crun and runc; crictl and the CNI
            // plugins come from their own components, as for the other runtimes.
            r.binary("cri-o", rt_version, NODES, "spec.runtime.version");
            r.binary("crictl", None, NODES, "spec.runtime");
            r.binary("cni-plugins", None, NODES, "spec.network");
        }
        RuntimeType::Isulad => {
            r.binary("isulad", rt_version, NODES, "spec.runtime.version");
            r.binary("runc", None, NODES, "spec.runtime");
            r.binary("crictl", None, NODES, "spec.runtime");
            r.binary("cni-plugins", None, NODES, "spec.network");
        }
    }

    // Network (`none`: the user brings the CNI; nothing is bundled for it).
    let net = &spec.network;
    let mut plugins = vec![net.plugin];
    plugins.retain(|p| *p != Plugin::None);
    if net.plugin == Plugin::Multus {
        plugins.extend(net.multus.delegate);
    }
    for p in plugins {
        let field = format!("spec.network.{}.version", field_name(p));
        let version = net.options(p).version.as_deref();
        r.image_group(p.as_str(), version, NODES, &field);
        if p == Plugin::Calico {
            // calicoctl must match the calico release it manages.
            let ctl = version.or_else(|| r.defaults.get("calico").map(String::as_str));
            r.binary("calicoctl", ctl, MASTERS, &field);
        }
        // The plugin's upstream manifest or chart, applied from the first master.
        if let Some(file) = network_file(p) {
            let chosen = version
                .map(str::to_owned)
                .or_else(|| r.defaults.get(p.as_str()).cloned());
            if let Some(v) = chosen {
                r.binary_at(file, &v, MASTERS, &field);
            }
            if file.ends_with("-chart") {
                r.binary("helm", None, MASTERS, &field);
            }
        }
    }

    // Load balancer.
    let lb = &spec.load_balancer;
    if lb.mode == LbMode::Internal {
        match lb.internal.kind {
            InternalLbType::Haproxy => {
                r.image_group("haproxy", None, &[Role::Worker], "spec.loadBalancer")
            }
            InternalLbType::Nginx => {
                r.image_group("nginx", None, &[Role::Worker], "spec.loadBalancer")
            }
            InternalLbType::KubeVip => {
                r.image_group("kube-vip", None, MASTERS, "spec.loadBalancer")
            }
        }
    }

    // Registry.
    let reg = &spec.registry;
    match reg.kind {
        RegistryType::Registry => r.binary(
            "registry",
            reg.version.as_deref(),
            &[Role::Registry],
            "spec.registry.version",
        ),
        RegistryType::Harbor => {
            let version = reg.harbor_config.version.as_deref();
            r.binary(
                "harbor",
                version,
                &[Role::Registry],
                "spec.registry.harborConfig.version",
            );
            // With runtime.type docker the registry host runs the same docker as the nodes
            // (it may be one of them).
            let docker = (spec.runtime.kind == RuntimeType::Docker)
                .then_some(rt_version)
                .flatten();
            r.binary("docker", docker, &[Role::Registry], "spec.registry");
            r.binary("compose", None, &[Role::Registry], "spec.registry");
        }
        RegistryType::External | RegistryType::None => {}
    }

    // Addons.
    if spec.addons.iter().any(|a| a.kind == AddonType::Helm) {
        r.binary("helm", None, MASTERS, "spec.addons");
    }
    let mut addons = Vec::new();
    for (i, addon) in spec.addons.iter().enumerate() {
        let src = &addon.source;
        let location = match (&src.path, &src.url, &src.chart) {
            (Some(path), _, _) => Some(AddonLocation::Path { path: path.clone() }),
            (None, Some(url), _) => Some(AddonLocation::Url {
                url: zone.rewrite_url(url),
            }),
            (None, None, c) => match (&c.repo, &c.name, &c.version) {
                (Some(repo), Some(name), Some(version)) => Some(AddonLocation::Chart {
                    repo: zone.rewrite_url(repo),
                    name: name.clone(),
                    version: version.clone(),
                }),
                _ => None,
            },
        };
        if let Some(source) = location {
            addons.push(AddonEntry {
                addon: addon.name.clone(),
                kind: addon.kind,
                source,
                sha256: src.sha256.clone(),
                dir: format!("{ADDONS_DIR}/{}", addon.name),
            });
        }
        for img in &addon.images {
            r.image_at(
                img,
                &format!("addon:{}", addon.name),
                NODES,
                &format!("spec.addons[{i}].images"),
            );
        }
    }

    let mut scripts = Vec::new();
    for (phase, list) in [
        (ScriptPhase::PreInstall, &spec.system.pre_install),
        (ScriptPhase::PostInstall, &spec.system.post_install),
    ] {
        for (i, source) in list.iter().enumerate() {
            // The file name, reduced to characters safe in a bundle path.
            let name: String = source
                .rsplit('/')
                .next()
                .filter(|n| !n.is_empty() && *n != "." && *n != "..")
                .unwrap_or("script")
                .chars()
                .map(|ch| {
                    if ch.is_ascii_alphanumeric() || "._-".contains(ch) {
                        ch
                    } else {
                        '_'
                    }
                })
                .collect();
            scripts.push(ScriptEntry {
                phase,
                position: i + 1,
                source: source.clone(),
                path: format!("{SCRIPTS_DIR}/{}/{:02}-{name}", phase.as_str(), i + 1),
            });
        }
    }

    if !r.problems.is_empty() {
        return Err(r.problems);
    }
    Ok(Resolution {
        format_version: RESOLUTION_FORMAT,
        cluster: cluster.file.metadata.name.clone(),
        kubernetes_version: k8s,
        kubernetes_type: spec.kubernetes.kind,
        zone: zone.name().to_owned(),
        arches: spec.hosts.iter().map(|h| h.arch).collect(),
        binaries: r.binaries.into_values().collect(),
        images: r.images.into_values().collect(),
        addons,
        scripts,
    })
}

/// The catalog component holding a network plugin's upstream manifest or Helm chart.
pub fn network_file(plugin: Plugin) -> Option<&'static str> {
    match plugin {
        Plugin::Flannel => Some("flannel-manifest"),
        Plugin::Calico => Some("calico-chart"),
        Plugin::Cilium => Some("cilium-chart"),
        Plugin::KubeOvn => Some("kube-ovn-chart"),
        Plugin::Hybridnet => Some("hybridnet-chart"),
        Plugin::Multus | Plugin::None => None,
    }
}

fn field_name(p: Plugin) -> &'static str {
    match p {
        Plugin::KubeOvn => "kubeOvn",
        other => other.as_str(),
    }
}

impl Resolver<'_> {
    fn arches(&self, roles: &[Role]) -> BTreeSet<Arch> {
        let rg = &self.cluster.roles;
        let names: BTreeSet<&String> = roles
            .iter()
            .flat_map(|role| match role {
                Role::Etcd => &rg.etcd,
                Role::Master => &rg.master,
                Role::Worker => &rg.worker,
                Role::Registry => &rg.registry,
                Role::Loadbalancer => &rg.loadbalancer,
                Role::Nfs => &rg.nfs,
            })
            .collect();
        self.cluster
            .file
            .spec
            .hosts
            .iter()
            .filter(|h| names.contains(&h.name))
            .map(|h| h.arch)
            .collect()
    }

    fn problem(&mut self, path: &str, message: String, hint: String) {
        self.problems.push(Problem {
            path: path.to_owned(),
            message,
            hint,
        });
    }

    /// A component at its configured version, or the catalog default for this release.
    fn binary(&mut self, name: &str, version: Option<&str>, roles: &[Role], field: &str) {
        let chosen = version
            .map(str::to_owned)
            .or_else(|| self.defaults.get(name).cloned());
        match chosen {
            Some(v) => self.binary_at(name, &v, roles, field),
            None => self.problem(
                field,
                format!(
                    "the catalog names no default `{name}` version for Kubernetes {}",
                    self.cluster.version
                ),
                format!("add `{name}` to this release's defaults with --catalog FILE"),
            ),
        }
    }

    fn binary_at(&mut self, name: &str, version: &str, roles: &[Role], field: &str) {
        let Some(component) = self.catalog.components.get(name) else {
            self.problem(
                field,
                format!("component `{name}` is not in the catalog"),
                "add it with --catalog FILE".into(),
            );
            return;
        };
        if component.user_pinned {
            let sums = component.versions.get(version);
            for arch in self.arches(roles) {
                let (sum, unpinned) = match sums.and_then(|s| s.get(&arch)) {
                    Some(sum) => (sum.clone(), false),
                    None => (String::new(), true),
                };
                let mut entry = self.entry(component, version, arch, &sum);
                entry.unpinned = unpinned;
                self.binaries
                    .entry((name.to_owned(), version.to_owned(), arch))
                    .or_insert(entry)
                    .roles
                    .extend(roles.iter().copied());
            }
            return;
        }
        if !component.versions.contains_key(version) {
            let hint = if component.versions.is_empty() {
                format!("the built-in catalog pins no `{name}` version; pin one (url + sha256 per arch) with --catalog FILE")
            } else {
                format!(
                    "known versions: {}; or pin it with --catalog FILE",
                    newest_versions(component.versions.keys(), 8)
                )
            };
            self.problem(
                field,
                format!("{name} {version} is not in the catalog"),
                hint,
            );
            return;
        }
        for arch in self.arches(roles) {
            match component.versions[version].get(&arch) {
                Some(sum) => {
                    let entry = self.entry(component, version, arch, sum);
                    self.binaries
                        .entry((name.to_owned(), version.to_owned(), arch))
                        .or_insert(entry)
                        .roles
                        .extend(roles.iter().copied());
                }
                None => self.problem(
                    field,
                    format!("{name} {version} has no pinned sha256 for {arch}"),
                    "use hosts of another arch for this role, another version, or pin it with --catalog FILE".into(),
                ),
            }
        }
    }

    fn entry(&self, c: &Component, version: &str, arch: Arch, sum: &str) -> BinaryEntry {
        let file_version = c.file_versions.get(version).map_or(version, String::as_str);
        let upstream = expand_url(&c.url, file_version, arch);
        let url = match c.zone_urls.get(self.zone.name()) {
            Some(t) => expand_url(t, file_version, arch),
            None => self.zone.rewrite_url(&upstream),
        };
        let file = upstream
            .rsplit('/')
            .next()
            .filter(|f| !f.is_empty())
            .unwrap_or(&c.name)
            .to_owned();
        BinaryEntry {
            name: c.name.clone(),
            version: version.to_owned(),
            arch,
            url,
            sha256: sum.to_owned(),
            archive: c.archive,
            roles: BTreeSet::new(),
            path: format!("files/{}/{version}/{arch}/{file}", c.name),
            unpinned: false,
        }
    }

    /// Every image of a catalog image group at the configured or default version.
    fn image_group(&mut self, group: &str, version: Option<&str>, roles: &[Role], field: &str) {
        let Some(chosen) = version
            .map(str::to_owned)
            .or_else(|| self.defaults.get(group).cloned())
        else {
            self.problem(
                field,
                format!("the catalog names no default `{group}` version for Kubernetes {}", self.cluster.version),
                format!("set the version explicitly or add `{group}` to this release's defaults with --catalog FILE"),
            );
            return;
        };
        let images = self
            .catalog
            .addon_images
            .get(group)
            .and_then(|g| g.get(&chosen))
            .cloned();
        match images {
            Some(images) => {
                for img in images {
                    self.image_at(&img, group, roles, field);
                }
            }
            None => {
                let known = self
                    .catalog
                    .addon_images
                    .get(group)
                    .map(|g| newest_versions(g.keys(), 8))
                    .unwrap_or_default();
                self.problem(
                    field,
                    format!("{group} {chosen} has no image list in the catalog"),
                    format!(
                        "known versions: {known}; or add it under addonImages with --catalog FILE"
                    ),
                );
            }
        }
    }

    fn image(&mut self, reference: &str, group: &str, roles: &[Role]) {
        self.image_at(reference, group, roles, "catalog");
    }

    fn image_at(&mut self, reference: &str, group: &str, roles: &[Role], field: &str) {
        let parsed: ImageRef = match reference.parse() {
            Ok(p) => p,
            Err(e) => {
                self.problem(field, e.to_string(), "fix the image reference".into());
                return;
            }
        };
        let canonical = parsed.to_string();
        let source = self.zone.rewrite_image(&parsed).to_string();
        let platforms: BTreeSet<String> = self
            .arches(roles)
            .into_iter()
            .map(|a| format!("linux/{a}"))
            .collect();
        let entry = self
            .images
            .entry(canonical.clone())
            .or_insert_with(|| ImageEntry {
                reference: canonical,
                source,
                group: group.to_owned(),
                platforms: BTreeSet::new(),
                roles: BTreeSet::new(),
            });
        entry.platforms.extend(platforms);
        entry.roles.extend(roles.iter().copied());
    }
}

/// Substitutes `{version}`, `{version_nov}`, `{arch}`, `{uname_arch}` in a URL template.
pub fn expand_url(template: &str, version: &str, arch: Arch) -> String {
    template
        .replace(
            "{version_nov}",
            version.strip_prefix('v').unwrap_or(version),
        )
        .replace("{version}", version)
        .replace("{uname_arch}", arch.uname())
        .replace("{arch}", arch.as_str())
}
