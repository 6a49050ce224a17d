//! The kubeadm configuration files: `kubeadm init --config` on the first master and
//! `kubeadm join --config` on every other node.
//!
//! **API version**: `kubeadm.k8s.io/v1beta4` from Kubernetes v1.31 (the release that introduced
//! it and deprecated v1beta3), `v1beta3` for v1.22–v1.30 (the built-in catalog starts at v1.31;
//! older releases come from a catalog override). The two differ here only in how extra
//! arguments are written: v1beta4 takes a list of `{name, value}` (so a flag may repeat),
//! v1beta3 a map.
//!
//! What goes in:
//! * `controlPlaneEndpoint`: `loadBalancer.domain:port`; the domain resolves through the managed
//!   /etc/hosts block to the VIP, or to the first master without one.
//! * images: `imageRepository` (and the CoreDNS and, for stacked etcd, etcd repository/tag) from
//!   where nodes pull the bundle's images ([`super::super::images::node_image`]): the private
//!   registry, or the zone's source without one.
//! * etcd per `etcd.type`: `local` (stacked, kubeadm's static pods); `external` with KubeXM's
//!   own etcd (endpoints of the etcd hosts, the etcd module's client certificate of each
//!   master copied to kubeadm's conventional paths) or with the user's etcd (their CA, client
//!   certificate and key uploaded from the control host to the same paths).
//! * kubelet: `cgroupDriver: systemd`, containerd's socket, cluster DNS = the NodeLocal DNSCache
//!   address, `maxPods`, feature gates. kube-proxy: the proxy mode, the pod CIDR, feature gates.
//! * `spec.kubernetes.featureGates` go to every component (`--feature-gates` of the API server,
//!   controller manager and scheduler; `featureGates` of the kubelet and kube-proxy), not to
//!   kubeadm's own `featureGates` (kubeadm rejects gates it does not know).
//! * API server certificate SANs: the endpoint's domain, the VIP, every master's name and
//!   address, `127.0.0.1` and `localhost` (the internal load balancer's local proxy), then
//!   `apiserverCertExtraSans`.
//! * When a master is also a KubeXM load-balancer node on port 6443
//!   ([`crate::modules::loadbalancer::api_server_must_bind_node_address`]), the API server must
//!   bind the node's own address: a per-node kubeadm patch adds `--bind-address` (the cluster
//!   configuration is shared by every master, so it cannot hold a per-node address).

use kubexm_manifests::resolve::Role;
use std::collections::BTreeMap;
use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, LbMode, ProxyMode};
use kubexm_manifests::version::KubeVersion;
use serde::Serialize;

use super::join::JoinCredentials;
use crate::context::InstallContext;
use crate::modules::etcd::EtcdLayout;
use crate::modules::images::{node_image, ImageParts};
use crate::modules::{dns, loadbalancer};
use crate::pipeline::ops::{CopyFile, CreateDir, Op, RenderTemplate, UploadFile};
use crate::pipeline::{Node, StepError};

/// `kubeadm init --config` file on the first master.
pub const INIT_CONFIG: &str = "/etc/kubernetes/kubeadm-config.yaml";
/// KubeXM's files next to kubeadm's (init output, join configuration, patches); root only.
pub const STATE_DIR: &str = "/etc/kubernetes/kubexm";
/// `kubeadm join --config` file.
pub const JOIN_CONFIG: &str = "/etc/kubernetes/kubexm/kubeadm-join.yaml";
/// kubeadm patches (the API server's bind address).
pub const PATCHES_DIR: &str = "/etc/kubernetes/kubexm/patches";
/// containerd's CRI socket.
// issue 13: kubeadm's criSocket is containerd's for every runtime; it should be
// `runtime::Runtime::of(ctx).cri_socket()` (the rendered output is kept as is in this change).
pub const CRI_SOCKET: &str = "unix:///run/containerd/containerd.sock";
/// External etcd: the CA kubeadm's components trust.
pub const ETCD_CA: &str = "/etc/kubernetes/pki/etcd/ca.crt";
/// External etcd: the API server's client certificate.
pub const ETCD_CERT: &str = "/etc/kubernetes/pki/apiserver-etcd-client.crt";
/// External etcd: its key.
pub const ETCD_KEY: &str = "/etc/kubernetes/pki/apiserver-etcd-client.key";
/// Stacked etcd's data directory (kubeadm's default).
pub const STACKED_ETCD_DATA: &str = "/var/lib/etcd";

/// The kubeadm configuration API a Kubernetes version takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ApiVersion {
    /// `kubeadm.k8s.io/v1beta3` (v1.22–v1.30).
    #[serde(rename = "v1beta3")]
    V1beta3,
    /// `kubeadm.k8s.io/v1beta4` (v1.31+).
    #[serde(rename = "v1beta4")]
    V1beta4,
}

impl ApiVersion {
    /// The API for `version`.
    pub fn for_version(version: KubeVersion) -> Result<Self, StepError> {
        if version.at_least(1, 31) {
            Ok(ApiVersion::V1beta4)
        } else if version.at_least(1, 22) {
            Ok(ApiVersion::V1beta3)
        } else {
            Err(StepError::Invalid(format!(
                "Kubernetes {version} is older than v1.22, the first kubeadm with the v1beta3 configuration API KubeXM writes: use v1.22 or later"
            )))
        }
    }

    /// `v1beta3` / `v1beta4`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1beta3 => "v1beta3",
            ApiVersion::V1beta4 => "v1beta4",
        }
    }
}

/// A component flag (`--name=value`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Arg {
    /// Name without `--`.
    pub name: String,
    /// Value.
    pub value: String,
}

fn args(defaults: Vec<(&str, String)>, user: &BTreeMap<String, String>) -> Vec<Arg> {
    let mut m: BTreeMap<String, String> = defaults
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    m.extend(user.iter().map(|(k, v)| (k.clone(), v.clone())));
    m.into_iter()
        .map(|(name, value)| Arg { name, value })
        .collect()
}

/// A feature gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gate {
    /// Name.
    pub name: String,
    /// On or off.
    pub enabled: bool,
}

/// etcd as kubeadm sees it.
#[derive(Debug, Clone, Serialize)]
pub struct EtcdSettings {
    /// External etcd (KubeXM's or the user's) rather than stacked.
    pub external: bool,
    /// External: client URLs.
    pub endpoints: Vec<String>,
    /// Stacked: image repository and tag, data directory.
    pub image_repository: String,
    /// Stacked: image tag.
    pub image_tag: String,
    /// Stacked: data directory.
    pub data_dir: String,
    /// External: CA path on the masters.
    pub ca_file: &'static str,
    /// External: client certificate path.
    pub cert_file: &'static str,
    /// External: client key path.
    pub key_file: &'static str,
}

/// Where a master's external-etcd client files come from.
#[derive(Debug, Clone)]
enum EtcdClientFiles {
    /// Stacked etcd: none.
    None,
    /// KubeXM's etcd: the etcd module's files in its certificate directory on each master.
    Kubexm {
        /// That directory.
        cert_dir: String,
    },
    /// The user's etcd: files read on the control host.
    User {
        ca: Vec<u8>,
        cert: Vec<u8>,
        key: Vec<u8>,
    },
}

/// Everything the configuration files share, computed once from the cluster.
#[derive(Debug, Clone, Serialize)]
pub struct KubeadmSettings {
    /// Configuration API.
    pub api: ApiVersion,
    /// KubeXM's cluster name (comments).
    pub cluster: String,
    /// `clusterName`.
    pub cluster_name: String,
    /// `kubernetesVersion`.
    pub version: String,
    /// `controlPlaneEndpoint` (`domain:port`).
    pub endpoint: String,
    /// The API server port on every master.
    pub apiserver_port: u16,
    /// `imageRepository`.
    pub image_repository: String,
    /// CoreDNS repository (kubeadm appends `/coredns`).
    pub dns_image_repository: String,
    /// CoreDNS tag.
    pub dns_image_tag: String,
    /// etcd.
    pub etcd: EtcdSettings,
    /// `networking.podSubnet`.
    pub pod_subnet: String,
    /// `networking.serviceSubnet`.
    pub service_subnet: String,
    /// `networking.dnsDomain`.
    pub dns_domain: String,
    /// API server certificate SANs.
    pub cert_sans: Vec<String>,
    /// API server flags.
    pub apiserver_args: Vec<Arg>,
    /// Controller manager flags.
    pub controller_manager_args: Vec<Arg>,
    /// Scheduler flags.
    pub scheduler_args: Vec<Arg>,
    /// Feature gates of the kubelet and kube-proxy, by name.
    pub feature_gates: Vec<Gate>,
    /// kubelet `clusterDNS`.
    pub cluster_dns: String,
    /// kubelet `maxPods`.
    pub max_pods: u32,
    /// kube-proxy mode.
    pub proxy_mode: &'static str,
    /// CRI socket.
    pub cri_socket: &'static str,
    #[serde(skip)]
    etcd_files: EtcdClientFiles,
    #[serde(skip)]
    bind_patch_nodes: Vec<String>,
    #[serde(skip)]
    user_kubelet_args: BTreeMap<String, String>,
}

/// What differs per node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeSettings {
    /// Node name.
    pub name: String,
    /// Internal address (advertise address, kubelet `--node-ip`).
    pub address: String,
    /// Joins as a control-plane node.
    pub control_plane: bool,
    /// kubelet flags.
    pub kubelet_args: Vec<Arg>,
    /// Preflight errors to ignore.
    pub ignore_preflight: Vec<String>,
    /// Patch directory (the API server's bind address), when needed.
    pub patches: Option<&'static str>,
}

impl KubeadmSettings {
    /// Computes the settings for the cluster (reads the user's external etcd files).
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        Self::for_version(ctx, ctx.cluster.version)
    }

    /// The settings as they would be for another Kubernetes version (tests of the older API).
    pub fn for_version(ctx: &InstallContext, version: KubeVersion) -> Result<Self, StepError> {
        let spec = &ctx.cluster.file.spec;
        let k8s = &spec.kubernetes;
        let api = ApiVersion::for_version(version)?;
        let v = version.to_string();
        let endpoint = ctx.control_plane_endpoint()?;
        let apiserver = ImageParts::of(&node_image(
            ctx,
            &format!("registry.k8s.io/kube-apiserver:{}", ctx.cluster.version),
        )?)?;
        let coredns = ImageParts::of(&node_image(ctx, &coredns_reference(ctx)?)?)?;
        let (etcd, etcd_files) = etcd_settings(ctx)?;
        let gates = feature_gates(&k8s.feature_gates);
        let with_gates = |user: &BTreeMap<String, String>| {
            let defaults = match &gates {
                Some(g) => vec![("feature-gates", g.clone())],
                None => Vec::new(),
            };
            args(defaults, user)
        };
        let mut sans: Vec<String> = vec![endpoint.domain.clone()];
        if let Some(vip) = &spec.load_balancer.vip {
            if spec.load_balancer.mode != LbMode::None {
                sans.push(vip.clone());
            }
        }
        for m in ctx.with_role(Role::Master) {
            if let Some(n) = ctx.node(&m) {
                sans.push(n.name.clone());
                sans.push(n.internal_address.clone());
            }
        }
        sans.extend(["127.0.0.1".to_string(), "localhost".to_string()]);
        sans.extend(k8s.apiserver_cert_extra_sans.iter().cloned());
        let mut seen = std::collections::BTreeSet::new();
        sans.retain(|s| seen.insert(s.clone()));
        let bind_patch_nodes = ctx
            .nodes
            .iter()
            .filter(|n| loadbalancer::api_server_must_bind_node_address(ctx, n))
            .map(|n| n.name.clone())
            .collect();
        Ok(Self {
            api,
            cluster: ctx.cluster.file.metadata.name.clone(),
            cluster_name: ctx.cluster.cluster_name().to_string(),
            version: v,
            endpoint: format!("{}:{}", endpoint.domain, endpoint.port),
            apiserver_port: loadbalancer::APISERVER_PORT,
            image_repository: apiserver.repository,
            dns_image_repository: coredns.repository,
            dns_image_tag: coredns.tag,
            etcd,
            pod_subnet: spec.network.pod_cidr.clone(),
            service_subnet: spec.network.service_cidr.clone(),
            dns_domain: k8s.dns_domain.clone(),
            cert_sans: sans,
            apiserver_args: with_gates(&k8s.apiserver_args),
            controller_manager_args: with_gates(&k8s.controller_manager_args),
            scheduler_args: with_gates(&k8s.scheduler_args),
            feature_gates: k8s
                .feature_gates
                .iter()
                .map(|(name, enabled)| Gate {
                    name: name.clone(),
                    enabled: *enabled,
                })
                .collect(),
            cluster_dns: dns::NODELOCAL_DNS_IP.to_string(),
            max_pods: k8s.max_pods,
            proxy_mode: match k8s.proxy_mode {
                ProxyMode::Ipvs => "ipvs",
                ProxyMode::Iptables => "iptables",
                ProxyMode::Nftables => "nftables",
            },
            cri_socket: CRI_SOCKET,
            etcd_files,
            bind_patch_nodes,
            user_kubelet_args: k8s.kubelet_args.clone(),
        })
    }

    /// The per-node settings; `manifests_prefilled` when static pods are placed before kubeadm
    /// runs (kube-vip on the first master).
    pub fn node(
        &self,
        node: &Node,
        control_plane: bool,
        manifests_prefilled: bool,
    ) -> NodeSettings {
        let mut ignore = Vec::new();
        if manifests_prefilled {
            ignore.push("DirAvailable--etc-kubernetes-manifests".to_string());
        }
        NodeSettings {
            name: node.name.clone(),
            address: node.internal_address.clone(),
            control_plane,
            kubelet_args: args(
                vec![("node-ip", node.internal_address.clone())],
                &self.user_kubelet_args,
            ),
            ignore_preflight: ignore,
            patches: self
                .bind_patch_nodes
                .contains(&node.name)
                .then_some(PATCHES_DIR),
        }
    }

    fn context(&self, node: &NodeSettings) -> Result<tera::Context, StepError> {
        let mut c = tera::Context::from_serialize(self).map_err(|e| StepError::Template {
            name: "kubeadm".into(),
            message: e.to_string(),
        })?;
        c.insert("node", node);
        Ok(c)
    }

    /// `kubeadm init --config` for the first master.
    pub fn render_init(&self, node: &NodeSettings) -> Result<RenderTemplate, StepError> {
        RenderTemplate::new(
            "kubeadm/init-config.yaml.tera",
            &self.context(node)?,
            INIT_CONFIG,
            0o600,
        )
    }

    /// `kubeadm join --config` for `node`: with the learned credentials, or placeholders when
    /// planning (the plan shows only the file's size and digest).
    pub fn render_join(
        &self,
        node: &NodeSettings,
        creds: &JoinCredentials,
    ) -> Result<RenderTemplate, StepError> {
        let mut c = self.context(node)?;
        c.insert("discovery_endpoint", &creds.endpoint);
        c.insert("token", &creds.token);
        c.insert("ca_cert_hashes", &creds.ca_cert_hashes);
        c.insert("certificate_key", &creds.certificate_key);
        RenderTemplate::new("kubeadm/join-config.yaml.tera", &c, JOIN_CONFIG, 0o600)
    }

    /// Directories, etcd client files and the bind-address patch a control-plane node needs
    /// before `kubeadm init` / `kubeadm join --control-plane`.
    pub fn control_plane_files(&self, node: &NodeSettings) -> Result<Vec<Op>, StepError> {
        let mut ops = Vec::new();
        match &self.etcd_files {
            EtcdClientFiles::None => {}
            EtcdClientFiles::Kubexm { cert_dir } => {
                ops.push(Op::Mkdir(CreateDir {
                    path: "/etc/kubernetes/pki/etcd".into(),
                    mode: 0o755,
                }));
                for (src, dest, mode) in [
                    (format!("{cert_dir}/ca.pem"), ETCD_CA, 0o644),
                    (
                        format!("{cert_dir}/node-{}.pem", node.name),
                        ETCD_CERT,
                        0o644,
                    ),
                    (
                        format!("{cert_dir}/node-{}-key.pem", node.name),
                        ETCD_KEY,
                        0o600,
                    ),
                ] {
                    ops.push(Op::Copy(CopyFile {
                        src,
                        dest: dest.to_string(),
                        mode,
                    }));
                }
            }
            EtcdClientFiles::User { ca, cert, key } => {
                ops.push(Op::Mkdir(CreateDir {
                    path: "/etc/kubernetes/pki/etcd".into(),
                    mode: 0o755,
                }));
                ops.push(Op::Upload(UploadFile::bytes(ca.clone(), ETCD_CA, 0o644)));
                ops.push(Op::Upload(UploadFile::bytes(
                    cert.clone(),
                    ETCD_CERT,
                    0o644,
                )));
                ops.push(Op::Upload(UploadFile::bytes(key.clone(), ETCD_KEY, 0o600)));
            }
        }
        if let Some(dir) = node.patches {
            ops.push(Op::Mkdir(CreateDir {
                path: dir.to_string(),
                mode: 0o700,
            }));
            let mut c = tera::Context::new();
            c.insert("cluster", &self.cluster);
            c.insert("flag", &format!("--bind-address={}", node.address));
            ops.push(Op::Template(RenderTemplate::new(
                "kubeadm/kube-apiserver-patch.yaml.tera",
                &c,
                format!("{dir}/kube-apiserver+json.yaml"),
                0o600,
            )?));
        }
        Ok(ops)
    }
}

/// `A=true,B=false`, or `None` without gates.
fn feature_gates(gates: &BTreeMap<String, bool>) -> Option<String> {
    (!gates.is_empty()).then(|| {
        gates
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// The CoreDNS image of the cluster (`registry.k8s.io/coredns/coredns:<catalog tag>`).
fn coredns_reference(ctx: &InstallContext) -> Result<String, StepError> {
    image_named(ctx, "coredns")
}

/// The cluster image whose last path component is `name`.
pub fn image_named(ctx: &InstallContext, name: &str) -> Result<String, StepError> {
    ctx.image_references()
        .into_iter()
        .find(|r| {
            r.parse::<kubexm_manifests::image_ref::ImageRef>()
                .is_ok_and(|i| i.basename() == name)
        })
        .ok_or_else(|| {
            StepError::Invalid(format!(
                "no {name} image in the bundle (or the catalog's resolution): rebuild the bundle for this cluster"
            ))
        })
}

fn etcd_settings(ctx: &InstallContext) -> Result<(EtcdSettings, EtcdClientFiles), StepError> {
    let spec = &ctx.cluster.file.spec.etcd;
    let mut s = EtcdSettings {
        external: true,
        endpoints: Vec::new(),
        image_repository: String::new(),
        image_tag: String::new(),
        data_dir: spec
            .data_dir
            .clone()
            .unwrap_or_else(|| STACKED_ETCD_DATA.to_string()),
        ca_file: ETCD_CA,
        cert_file: ETCD_CERT,
        key_file: ETCD_KEY,
    };
    let files = match spec.kind {
        EtcdType::Kubeadm => {
            let image = ImageParts::of(&node_image(ctx, &image_named(ctx, "etcd")?)?)?;
            s.external = false;
            s.image_repository = image.repository;
            s.image_tag = image.tag;
            EtcdClientFiles::None
        }
        EtcdType::Kubexm => {
            let layout = EtcdLayout::from_context(ctx);
            s.endpoints = layout.client_endpoints();
            EtcdClientFiles::Kubexm {
                cert_dir: layout.cert_dir,
            }
        }
        EtcdType::External => {
            s.endpoints = spec.endpoints.clone();
            let read = |field: &str, v: &Option<String>| -> Result<Vec<u8>, StepError> {
                let p = v.as_deref().ok_or_else(|| {
                    StepError::Invalid(format!(
                        "spec.etcd.{field} is required for etcd.type external"
                    ))
                })?;
                std::fs::read(p).map_err(|e| {
                    StepError::Invalid(format!("spec.etcd.{field}: cannot read {p}: {e}"))
                })
            };
            EtcdClientFiles::User {
                ca: read("caFile", &spec.ca_file)?,
                cert: read("certFile", &spec.cert_file)?,
                key: read("keyFile", &spec.key_file)?,
            }
        }
    };
    Ok((s, files))
}

/// Placeholder credentials for the plan (never used to join: a run learns the real ones).
pub fn planned_credentials(settings: &KubeadmSettings) -> JoinCredentials {
    JoinCredentials {
        endpoint: settings.endpoint.clone(),
        token: "<learned from kubeadm init>".into(),
        ca_cert_hashes: vec!["<learned from kubeadm init>".into()],
        certificate_key: Some("<learned from kubeadm init>".into()),
    }
}

/// Shared settings handle.
pub type Settings = Arc<KubeadmSettings>;
