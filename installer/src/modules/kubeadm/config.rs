//! The kubeadm configuration files: `kubeadm init --config` on the first master and
//! `kubeadm join --config` on every other node.
//!
//! **API version** ([`KubeVersion::kubeadm_api`]): `kubeadm.k8s.io/v1beta4` from Kubernetes
//! v1.31 (the release that introduced it and deprecated v1beta3), `v1beta3` for v1.22–v1.30,
//! `v1beta2` for v1.20–v1.21. They differ here in how extra arguments are written (v1beta4 takes
//! a list of `{name, value}`, so a flag may repeat; v1beta2/v1beta3 a map), and v1beta2 has
//! neither `patches` (the `--experimental-patches` flag of `kubeadm init`/`join` takes the
//! directory instead) nor `nodeRegistration.imagePullPolicy`.
//!
//! **Per version** besides: `nodeRegistration.criSocket` is the runtime's socket
//! ([`Cri::kubeadm_cri_socket`]: a bare path before v1.24, a `unix://` URL after; dockershim's
//! exact path for docker before v1.24, from which kubeadm itself gives the kubelet
//! `--network-plugin=cni`, and `--container-runtime=remote` with the endpoint for the others);
//! the kubelet's `containerRuntimeEndpoint` only from v1.27 (before, kubeadm passes the socket
//! as a flag); the images under the version's registry (`k8s.gcr.io` before v1.25, CoreDNS
//! without the `coredns/` path before v1.21: the catalog's per-version image list).
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
//! * kubelet: `cgroupDriver: systemd`, the runtime's socket (v1.27+), cluster DNS = the
//!   NodeLocal DNSCache address, `maxPods`, feature gates; `--pod-infra-container-image` = the
//!   runtime's sandbox image before v1.35 (kubeadm sets it only for dockershim; without it the
//!   kubelet's image garbage collection counts the sandbox image unused and deletes it). kube-proxy: the proxy mode, the pod
//!   CIDR, `conntrack.maxPerCore` when `kubernetes.kubeProxy.conntrackMaxPerCore` is set, feature
//!   gates.
//! * `spec.kubernetes.kubeProxyArgs` is refused (kubeadm's kube-proxy takes no flags of
//!   KubeXM's; they would be dropped silently): the settings are planned with an error naming it.
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

use crate::modules::k8s::{ec_key_in_sec1, image_named, CA_SIGNER, STACKED_ETCD_DATA};
use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::collections::BTreeMap;
use std::sync::Arc;

use kubexm_manifests::kube_version::KubeadmApi;
use kubexm_manifests::model::{EtcdType, LbMode};
use kubexm_manifests::version::KubeVersion;
use serde::Serialize;

use super::join::JoinCredentials;
use crate::context::InstallContext;
use crate::modules::etcd::EtcdLayout;
use crate::modules::images::{node_image, ImageParts};
use crate::modules::runtime::cri::Cri;
use crate::modules::{dns, loadbalancer, security};
use crate::pipeline::ops::{CopyFile, CreateDir, Op, RenderTemplate, UploadFile};
use crate::pipeline::{Node, StepError};

/// `kubeadm init --config` file on the first master.
pub const INIT_CONFIG: &str = "/etc/kubernetes/kubeadm-config.yaml";
/// `kubeadm join --config` file.
pub const JOIN_CONFIG: &str = "/etc/kubernetes/kubexm/kubeadm-join.yaml";
/// kubeadm patches (the API server's bind address).
pub const PATCHES_DIR: &str = "/etc/kubernetes/kubexm/patches";
/// External etcd: the CA kubeadm's components trust.
pub const ETCD_CA: &str = "/etc/kubernetes/pki/etcd/ca.crt";
/// External etcd: the API server's client certificate.
pub const ETCD_CERT: &str = "/etc/kubernetes/pki/apiserver-etcd-client.crt";
/// External etcd: its key.
pub const ETCD_KEY: &str = "/etc/kubernetes/pki/apiserver-etcd-client.key";
/// kubeadm's preflight check that runs the system validator (kernel, OS, cgroups): its name
/// in `ignorePreflightErrors` and `--ignore-preflight-errors` (kubeadm's
/// `SystemVerificationCheck.Name()`, run by `init`, `join`, `upgrade apply` and `upgrade node`).
pub const SYSTEM_VERIFICATION: &str = "SystemVerification";

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

/// kubeadm's own waits (`timeouts`, v1beta4) in `InitConfiguration` and `JoinConfiguration`,
/// longer than its defaults (4 min for the kubelet and the control plane's health, 1 min for an
/// API call, 2 min for etcd, 5 min for the TLS bootstrap). On a busy or slow host the real lab
/// (v1.36.3 on 2 loaded cores) ran out of them half-way: `kubeadm init` creates the admin's
/// ClusterRoleBinding as the first thing of its wait-control-plane phase, so the whole start of
/// etcd and the API server must fit in one API call's timeout (it did not in 1 minute, nor once
/// in 4); a joining master's stacked etcd member was not started within 2 minutes ("the etcd
/// member … is not started"). Each stays bounded, and below the step's own 15 minutes.
pub const KUBEADM_TIMEOUTS: [(&str, &str); 5] = [
    ("controlPlaneComponentHealthCheck", "8m0s"),
    ("kubeletHealthCheck", "8m0s"),
    ("kubernetesAPICall", "8m0s"),
    ("etcdAPICall", "8m0s"),
    ("tlsBootstrap", "8m0s"),
];

/// One of kubeadm's `timeouts`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct KubeadmTimeout {
    /// Its field (`etcdAPICall`).
    pub name: &'static str,
    /// A Go duration (`8m0s`).
    pub value: &'static str,
}

/// Everything the configuration files share, computed once from the cluster.
#[derive(Debug, Clone, Serialize)]
pub struct KubeadmSettings {
    /// Configuration API.
    #[serde(skip)]
    pub api: KubeadmApi,
    /// Its `apiVersion` (`kubeadm.k8s.io/v1beta4`).
    pub api_version: &'static str,
    /// `extraArgs` are `{name, value}` lists (v1beta4), not maps.
    pub extra_args_list: bool,
    /// The configuration has `patches` (v1beta3+).
    pub has_patches_field: bool,
    /// `nodeRegistration.imagePullPolicy` exists (v1beta3+).
    pub has_image_pull_policy: bool,
    /// kubeadm's `timeouts` (v1beta4+; empty before): [`KUBEADM_TIMEOUTS`].
    pub timeouts: Vec<KubeadmTimeout>,
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
    /// The security enhancement (`kubernetes.securityEnhancement`): audit flags among the API
    /// server's, its policy and log directories mounted into the static pod, the kubelet's
    /// anonymous access and read-only port off.
    pub security_enhancement: bool,
    /// With it: the audit policy's directory.
    pub audit_policy_dir: &'static str,
    /// With it: the audit log's directory.
    pub audit_log_dir: &'static str,
    /// Feature gates of the kubelet and kube-proxy, by name.
    pub feature_gates: Vec<Gate>,
    /// kubelet `clusterDNS` (NodeLocal DNSCache's addresses).
    pub cluster_dns: Vec<String>,
    /// kubelet `maxPods`.
    pub max_pods: u32,
    /// kube-proxy mode.
    pub proxy_mode: &'static str,
    /// kubelet `failCgroupV1`, when cluster.yaml sets it.
    pub fail_cgroup_v1: Option<bool>,
    /// kubeadm's [`SYSTEM_VERIFICATION`] preflight check is ignored at `init`, `join` and
    /// `upgrade`: from v1.35 kubeadm's system validator makes a cgroup v1 host a preflight
    /// *error*, which the operator's `failCgroupV1: false` (keep cgroup v1) does not lift by
    /// itself. Only then: older versions' commands and files stay as they were.
    pub ignore_system_verification: bool,
    /// kube-proxy `conntrack.maxPerCore`.
    pub conntrack_max_per_core: Option<u32>,
    /// `nodeRegistration.criSocket`.
    pub cri_socket: String,
    /// The kubelet's `containerRuntimeEndpoint` (v1.27+).
    pub kubelet_runtime_endpoint: Option<String>,
    #[serde(skip)]
    etcd_files: EtcdClientFiles,
    #[serde(skip)]
    bind_patch_nodes: Vec<String>,
    #[serde(skip)]
    user_kubelet_args: BTreeMap<String, String>,
    /// The runtime's sandbox image for the kubelet's `--pod-infra-container-image` (before
    /// v1.35): kubeadm passes it only with dockershim, and a kubelet that does not know the
    /// sandbox image counts it unused, so its image garbage collection deletes it under disk
    /// pressure (seen in the lab: a re-run of add-node pulled pause again on a joined node).
    #[serde(skip)]
    pause_image: Option<String>,
    #[serde(skip)]
    node_ips: BTreeMap<String, String>,
}

/// What the settings take from outside cluster.yaml, handed in by the caller (which reads the
/// cluster CA's rotation state: `modules::certs::rotate_kubeadm_ca::kubeadm_inputs`), so
/// planning the settings reads nothing from disk but the user's external etcd files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KubeadmInputs {
    /// A rotation of the cluster CA has `ca.crt` hold two CAs: the controller-manager signs
    /// with [`CA_SIGNER`] alone (`--cluster-signing-cert-file`).
    pub separate_signer: bool,
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
    pub fn new(ctx: &InstallContext, inputs: KubeadmInputs) -> Result<Self, StepError> {
        Self::for_version(ctx, ctx.cluster.version, inputs)
    }

    /// The settings as they would be for another Kubernetes version (tests of the older API).
    pub fn for_version(
        ctx: &InstallContext,
        version: KubeVersion,
        inputs: KubeadmInputs,
    ) -> Result<Self, StepError> {
        let spec = &ctx.cluster.file.spec;
        let k8s = &spec.kubernetes;
        if !k8s.kube_proxy_args.is_empty() {
            // kube-proxy runs from kubeadm's DaemonSet with a KubeProxyConfiguration and no
            // command-line flags of KubeXM's: the flags would be dropped silently.
            return Err(StepError::Invalid(format!(
                "spec.kubernetes.kubeProxyArgs ({}) is not applied with kubernetes.type kubeadm: kubeadm runs kube-proxy from its KubeProxyConfiguration, which KubeXM writes from spec.kubernetes.proxyMode, kubeProxy.conntrackMaxPerCore and featureGates; remove kubeProxyArgs (or use kubernetes.type kubexm, whose kube-proxy takes them as flags)",
                k8s.kube_proxy_args
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let api = version.kubeadm_api();
        let v = version.to_string();
        let endpoint = ctx.control_plane_endpoint()?;
        // kubeadm pulls every control-plane image (and pause) from one repository: the one
        // holding the version's kube-apiserver image, as the private registry serves it.
        let apiserver = ImageParts::of(&node_image(ctx, &image_named(ctx, "kube-apiserver")?)?)?;
        let cri = Cri::of(ctx);
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
            api_version: api.api_version(),
            extra_args_list: api.extra_args_are_lists(),
            has_patches_field: api.has_patches_field(),
            has_image_pull_policy: api.has_image_pull_policy(),
            timeouts: if api.has_timeouts() {
                KUBEADM_TIMEOUTS
                    .iter()
                    .map(|&(name, value)| KubeadmTimeout { name, value })
                    .collect()
            } else {
                Vec::new()
            },
            cluster: ctx.cluster.file.metadata.name.clone(),
            cluster_name: ctx.cluster.cluster_name().to_string(),
            version: v,
            endpoint: format!("{}:{}", endpoint.domain, endpoint.port),
            apiserver_port: crate::modules::k8s::APISERVER_PORT,
            image_repository: apiserver.repository,
            dns_image_repository: coredns.repository,
            dns_image_tag: coredns.tag,
            etcd,
            pod_subnet: spec.network.pod_cidr.clone(),
            service_subnet: spec.network.service_cidr.clone(),
            dns_domain: k8s.dns_domain.clone(),
            cert_sans: sans,
            apiserver_args: if k8s.security_enhancement {
                // The user's flags still win.
                let mut user: BTreeMap<String, String> = security::audit_flags()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                user.extend(k8s.apiserver_args.clone());
                with_gates(&user)
            } else {
                with_gates(&k8s.apiserver_args)
            },
            security_enhancement: k8s.security_enhancement,
            audit_policy_dir: security::AUDIT_POLICY_DIR,
            audit_log_dir: security::AUDIT_LOG_DIR,
            controller_manager_args: {
                // While the cluster CA is rotated `ca.crt` holds two CAs, which the
                // controller-manager's signer refuses: it signs with the signing CA alone.
                let mut user = k8s.controller_manager_args.clone();
                if inputs.separate_signer {
                    user.entry("cluster-signing-cert-file".to_string())
                        .or_insert_with(|| CA_SIGNER.to_string());
                }
                with_gates(&user)
            },
            scheduler_args: with_gates(&k8s.scheduler_args),
            feature_gates: k8s
                .feature_gates
                .iter()
                .map(|(name, enabled)| Gate {
                    name: name.clone(),
                    enabled: *enabled,
                })
                .collect(),
            cluster_dns: dns::local_ips(ctx)
                .into_iter()
                .map(str::to_string)
                .collect(),
            node_ips: ctx
                .nodes
                .iter()
                .map(|n| (n.name.clone(), dns::node_ip(ctx, n)))
                .collect(),
            max_pods: k8s.max_pods,
            proxy_mode: ctx.cluster.proxy_mode().as_str(),
            fail_cgroup_v1: k8s.kubelet.fail_cgroup_v1,
            ignore_system_verification: version.kubelet_fails_on_cgroup_v1()
                && k8s.kubelet.fail_cgroup_v1 == Some(false),
            conntrack_max_per_core: k8s.kube_proxy.conntrack_max_per_core,
            cri_socket: cri.kubeadm_cri_socket(version),
            kubelet_runtime_endpoint: cri.kubelet_config_endpoint(version),
            etcd_files,
            bind_patch_nodes,
            user_kubelet_args: k8s.kubelet_args.clone(),
            pause_image: if version.kubelet_has_pod_infra_image_flag() {
                Some(crate::modules::runtime::sandbox_image(ctx)?)
            } else {
                None
            },
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
        let bind_patch = self.bind_patch_nodes.contains(&node.name);
        if control_plane && bind_patch {
            // KubeXM's load balancer on this node already listens on the VIP's 6443 (haproxy /
            // nginx bind it on every load-balancer node); kubeadm's preflight tries to listen
            // on *:6443 and fails, though the API server (patched to bind the node's own
            // address) will not conflict. Measured with real kubeadm v1.20.2 in the lab.
            ignore.push("Port-6443".to_string());
        }
        if self.ignore_system_verification {
            ignore.push(SYSTEM_VERIFICATION.to_string());
        }
        NodeSettings {
            name: node.name.clone(),
            address: node.internal_address.clone(),
            control_plane,
            kubelet_args: args(
                [(
                    "node-ip",
                    self.node_ips
                        .get(&node.name)
                        .cloned()
                        .unwrap_or_else(|| node.internal_address.clone()),
                )]
                .into_iter()
                .chain(
                    self.pause_image
                        .clone()
                        .map(|p| ("pod-infra-container-image", p)),
                )
                .collect(),
                &self.user_kubelet_args,
            ),
            ignore_preflight: ignore,
            patches: bind_patch.then_some(PATCHES_DIR),
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

    /// The canonical settings a re-run compares with what kubeadm applied
    /// ([`super::reconfigure`]): the API server's SANs, the control-plane flags, and the rest
    /// of the cluster-wide configuration.
    pub fn drift_files(&self) -> Result<super::reconfigure::DriftFiles, StepError> {
        let json = |v: serde_json::Value| {
            serde_json::to_string_pretty(&v)
                .map(|s| s + "\n")
                .map_err(|e| StepError::Invalid(format!("kubeadm settings: {e}")))
        };
        let mut sans = self.cert_sans.clone();
        sans.sort();
        // One address is written as a string, as before dual-stack DNS: what earlier runs
        // recorded compares equal.
        let cluster_dns = match self.cluster_dns.as_slice() {
            [one] => serde_json::json!(one),
            many => serde_json::json!(many),
        };
        let mut kubelet = serde_json::json!({
            "clusterDNS": cluster_dns,
            "maxPods": self.max_pods,
            "criSocket": self.cri_socket,
            "containerRuntimeEndpoint": self.kubelet_runtime_endpoint,
            "featureGates": self.feature_gates,
            "args": self.user_kubelet_args,
            "securityEnhancement": self.security_enhancement,
        });
        if let Some(fail) = self.fail_cgroup_v1 {
            kubelet["failCgroupV1"] = fail.into();
        }
        Ok(super::reconfigure::DriftFiles {
            cert_sans: sans.iter().map(|s| format!("{s}\n")).collect(),
            control_plane: json(serde_json::json!({
                "apiServer": self.apiserver_args,
                "controllerManager": self.controller_manager_args,
                "scheduler": self.scheduler_args,
            }))?,
            kubelet: json(kubelet)?,
            kube_proxy: json(serde_json::json!({
                "mode": self.proxy_mode,
                "conntrackMaxPerCore": self.conntrack_max_per_core,
                "featureGates": self.feature_gates,
            }))?,
            cluster: json(serde_json::json!({
                "kubernetesVersion": self.version,
                "clusterName": self.cluster_name,
                "controlPlaneEndpoint": self.endpoint,
                "imageRepository": self.image_repository,
                "dns": [self.dns_image_repository, self.dns_image_tag],
                "etcd": self.etcd,
                "podSubnet": self.pod_subnet,
                "serviceSubnet": self.service_subnet,
                "dnsDomain": self.dns_domain,
            }))?,
        })
    }

    /// What `kubeadm init`/`join` add to their command line for `node`: the patch directory as
    /// `--experimental-patches DIR` where the configuration API has no `patches` field
    /// (v1beta2, kubeadm v1.20–v1.21); nothing otherwise.
    pub fn patches_flag(&self, node: &NodeSettings) -> Script {
        match node.patches {
            Some(dir) if !self.has_patches_field => {
                script!(" --experimental-patches {dir}", dir = dir)
            }
            _ => Script::empty(),
        }
    }

    /// What `kubeadm upgrade apply` / `upgrade node` add to their command line for kubeadm's
    /// preflight: `--ignore-preflight-errors=SystemVerification` when
    /// [`Self::ignore_system_verification`]; nothing otherwise (older versions' commands are
    /// unchanged).
    pub fn upgrade_preflight_flag(&self) -> Script {
        if self.ignore_system_verification {
            script!(" --ignore-preflight-errors={SYSTEM_VERIFICATION}")
        } else {
            Script::empty()
        }
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
                for (src, dest) in [
                    (format!("{cert_dir}/ca.pem"), ETCD_CA),
                    (format!("{cert_dir}/node-{}.pem", node.name), ETCD_CERT),
                ] {
                    ops.push(Op::Copy(CopyFile {
                        src,
                        dest: dest.to_string(),
                        mode: 0o644,
                    }));
                }
                ops.push(ec_key_in_sec1(
                    &format!("{cert_dir}/node-{}-key.pem", node.name),
                    ETCD_KEY,
                ));
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
