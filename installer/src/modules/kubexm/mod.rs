//! Kubernetes for `kubernetes.type: kubexm`: the server binaries as systemd services, with every
//! certificate and kubeconfig made by KubeXM on the control host (no kubeadm).
//!
//! Modules, in install order (each skipped unless `kubernetes.type` is kubexm):
//!
//! 1. `kubexm-certs` ([`certs`]): the cluster CA, front-proxy CA, service-account key pair and
//!    every leaf certificate, kept under `WORK/pki/<cluster>/kubernetes` so re-runs upload
//!    byte-identical files; kubeconfigs with embedded certificates. Masters get the control-plane
//!    files, every master and worker its own kubelet certificate and the kubelet/kube-proxy
//!    kubeconfigs. Running Kubernetes services are restarted when a file changed.
//! 2. `kubexm-control-plane` ([`control_plane`]): kube-apiserver, kube-controller-manager,
//!    kube-scheduler and kubectl from the bundle on the masters; then their units and
//!    configuration one master at a time, each master's API server answering `/readyz` (and its
//!    controller-manager and scheduler `/healthz`) before the next master changes; then the
//!    cluster RBAC KubeXM needs is applied from the first master.
//! 3. `kubexm-nodes` ([`node`]): kubelet and kube-proxy on every master and worker; then the
//!    first master waits until every node has registered and labels them.
//! 4. `coredns` ([`coredns`]): the CoreDNS manifest applied from the first master.
//!
//! The CNI plugin, NodeLocal DNS and the addons are the `network`, `nodelocaldns` and `addons`
//! modules that follow (shared with the kubeadm path).
//!
//! **Admin identities** (Kubernetes ≥ 1.29 convention, used for every version): `admin.conf`
//! is `kubernetes-admin` in group `kubeadm:cluster-admins`, which a ClusterRoleBinding makes
//! cluster-admin (so access can be revoked); `super-admin.conf` (masters only, mode 0600) is
//! `kubernetes-super-admin` in `system:masters`, used only to apply that binding. The API
//! server's kubelet client certificate is in `kubeadm:cluster-admins` too.
//!
//! **Node identities**: one certificate per node, `system:node:<name>` in `system:nodes`, client
//! *and* serving (SANs: the node name and addresses); the API server verifies kubelets against
//! the cluster CA (`--kubelet-certificate-authority`). kube-proxy, the controller-manager and the
//! scheduler use the users the built-in RBAC already binds (`system:kube-proxy`,
//! `system:kube-controller-manager`, `system:kube-scheduler`).

pub mod certs;
pub mod control_plane;
pub mod coredns;
pub mod delete;
pub mod flags;
pub mod kubeconfig;
pub mod node;

use crate::modules::k8s::host_url;
use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::net::IpAddr;
use std::sync::Arc;

use kubexm_manifests::model::KubernetesType;
use kubexm_manifests::version::KubeVersion;

use super::runtime;
use crate::context::{ControlPlaneEndpoint, InstallContext};
use crate::modules::k8s::APISERVER_PORT;
use crate::pipeline::ops::{Op, RenderTemplate, RunCommand, Systemd, SystemdAction};
use crate::pipeline::{Facts, Node, Step, StepError};

/// Where the Kubernetes files live on the nodes. Tests point it at a temporary directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Configuration, kubeconfigs, `pki/`, `manifests/`, `addons/` (`/etc/kubernetes`).
    pub kube_dir: String,
    /// Binaries (`/usr/local/bin`).
    pub bin_dir: String,
    /// systemd units (`/etc/systemd/system`).
    pub unit_dir: String,
    /// kubelet's state (`/var/lib/kubelet`).
    pub kubelet_dir: String,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            kube_dir: "/etc/kubernetes".to_string(),
            bin_dir: runtime::BIN_DIR.to_string(),
            unit_dir: "/etc/systemd/system".to_string(),
            kubelet_dir: "/var/lib/kubelet".to_string(),
        }
    }
}

impl Layout {
    /// The certificate directory.
    pub fn pki_dir(&self) -> String {
        format!("{}/pki", self.kube_dir)
    }
    /// A file in the certificate directory.
    pub fn pki(&self, file: &str) -> String {
        format!("{}/pki/{file}", self.kube_dir)
    }
    /// A file directly in the configuration directory (kubeconfigs, component configs).
    pub fn conf(&self, file: &str) -> String {
        format!("{}/{file}", self.kube_dir)
    }
    /// Static pod manifests (kubelet's `staticPodPath`).
    pub fn manifests_dir(&self) -> String {
        format!("{}/manifests", self.kube_dir)
    }
    /// Cluster manifests KubeXM applies with kubectl.
    pub fn addons_dir(&self) -> String {
        format!("{}/addons", self.kube_dir)
    }
    /// A binary.
    pub fn bin(&self, name: &str) -> String {
        format!("{}/{name}", self.bin_dir)
    }
    /// A unit file.
    pub fn unit(&self, name: &str) -> String {
        format!("{}/{name}.service", self.unit_dir)
    }
}

/// The Kubernetes services KubeXM runs, in start order.
pub const SERVICES: [&str; 5] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
];

/// The group `admin.conf` and the API server's kubelet client are in, bound to cluster-admin.
pub const CLUSTER_ADMINS: &str = "kubeadm:cluster-admins";

/// Everything the kubexm steps derive from cluster.yaml, computed once.
#[derive(Debug, Clone)]
pub struct KubexmCluster {
    /// The install context.
    pub ctx: Arc<InstallContext>,
    /// Paths on the nodes.
    pub layout: Layout,
    /// Cluster name inside Kubernetes.
    pub name: String,
    /// Kubernetes version.
    pub version: KubeVersion,
    /// Where clients reach the API servers.
    pub endpoint: ControlPlaneEndpoint,
    /// The `kubernetes` service's address (first address of the service CIDR).
    pub api_service_ip: IpAddr,
    /// Cluster DNS (tenth address of the service CIDR).
    pub dns_ip: IpAddr,
}

impl KubexmCluster {
    /// The cluster with the standard layout.
    pub fn new(ctx: &Arc<InstallContext>) -> Result<Self, StepError> {
        Self::with_layout(ctx, Layout::default())
    }

    /// The cluster with another layout.
    pub fn with_layout(ctx: &Arc<InstallContext>, layout: Layout) -> Result<Self, StepError> {
        let services = &ctx.cluster.file.spec.network.service_cidr;
        let first = services.split(',').next().unwrap_or(services).trim();
        Ok(Self {
            ctx: ctx.clone(),
            layout,
            name: ctx.cluster.cluster_name().to_string(),
            version: ctx.cluster.version,
            endpoint: ctx.control_plane_endpoint()?,
            api_service_ip: nth_address(first, 1, "spec.network.serviceCidr")?,
            dns_ip: nth_address(first, 10, "spec.network.serviceCidr")?,
        })
    }

    /// `spec.kubernetes`.
    pub fn spec(&self) -> &kubexm_manifests::model::Kubernetes {
        &self.ctx.cluster.file.spec.kubernetes
    }

    /// The masters, in cluster.yaml order.
    pub fn masters(&self) -> Vec<&Node> {
        self.ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Master))
            .collect()
    }

    /// Names of the nodes that run a kubelet: masters and workers.
    pub fn node_names(&self) -> Vec<String> {
        self.ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
            .map(|n| n.name.clone())
            .collect()
    }

    /// The local API proxy workers run with `loadBalancer.mode: internal` and type haproxy or
    /// nginx (kube-vip holds a VIP on the masters instead).
    pub fn local_proxy(&self) -> Option<crate::modules::internal_lb::LocalProxyKind> {
        crate::modules::internal_lb::local_proxy_kind(&self.ctx)
    }

    /// Whether kube-vip holds the VIP on the masters (`loadBalancer.mode: internal`, type
    /// kube-vip).
    pub fn kube_vip(&self) -> bool {
        use kubexm_manifests::model::{InternalLbType, LbMode};
        let lb = &self.ctx.cluster.file.spec.load_balancer;
        lb.mode == LbMode::Internal && lb.internal.kind == InternalLbType::KubeVip
    }

    /// The API server on `node` itself: `https://<internal address>:6443`.
    pub fn local_api(&self, node: &Node) -> String {
        host_url(&node.internal_address, APISERVER_PORT)
    }

    /// kubectl with `admin.conf` against the API server of `master` itself (so nothing depends
    /// on the load balancer while the cluster is being set up).
    pub fn kubectl(&self, master: &Node) -> Script {
        script!(
            "{} --kubeconfig {} --server {}",
            self.layout.bin("kubectl"),
            self.layout.conf("admin.conf"),
            self.local_api(master)
        )
    }

    /// How the kubelet reaches the configured runtime.
    pub fn cri(&self) -> runtime::cri::Cri {
        runtime::cri::Cri::of(&self.ctx)
    }

    /// A template context with the values every kubexm template uses.
    pub fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        c.insert("cluster", &self.name);
        c.insert("version", &self.version.to_string());
        c
    }

    /// [`Self::context`] for a file on `node`, with the node name and `featureGates`.
    pub fn node_context(&self, node: &Node) -> tera::Context {
        let mut c = self.context();
        c.insert("node", &node.name);
        c.insert(
            "feature_gates",
            &feature_gate_lines(&self.spec().feature_gates),
        );
        c
    }
}

/// `featureGates` entries as `{name, enabled}`, sorted (templates do not iterate maps: their
/// order is not stable); the templates escape the name.
pub fn feature_gate_lines(
    gates: &std::collections::BTreeMap<String, bool>,
) -> Vec<serde_json::Value> {
    gates
        .iter()
        .map(|(k, v)| serde_json::json!({ "name": k, "enabled": v }))
        .collect()
}

/// The `n`th address of `cidr` (`10.233.0.0/18`, 10 → `10.233.0.10`); `field` names the setting
/// in errors.
pub fn nth_address(cidr: &str, n: u32, field: &str) -> Result<IpAddr, StepError> {
    let bad = |why: &str| StepError::Invalid(format!("{field}: `{cidr}` {why}"));
    let (addr, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| bad("is not a CIDR (ADDRESS/PREFIX)"))?;
    let addr: IpAddr = addr.parse().map_err(|_| bad("has no valid address"))?;
    let prefix: u32 = prefix.parse().map_err(|_| bad("has no valid prefix"))?;
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    if prefix > bits || bits - prefix < 5 {
        return Err(bad(&format!(
            "is too small: the service network needs at least {n} addresses"
        )));
    }
    Ok(match addr {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) + n).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) + u128::from(n)).into()),
    })
}

/// Why every kubexm module is skipped for a kubeadm cluster.
pub fn skip_reason(ctx: &InstallContext) -> Option<String> {
    match ctx.cluster.file.spec.kubernetes.kind {
        KubernetesType::Kubexm => None,
        KubernetesType::Kubeadm => Some(
            "kubernetes.type is kubeadm: the kubeadm module sets up the control plane and nodes"
                .to_string(),
        ),
    }
}

/// Generic steps of a systemd service: its files, `daemon-reload` when they changed, enabled and
/// started, restarted when something changed (and active afterwards).
pub fn service_ops(unit: &str, files: Vec<RenderTemplate>) -> Vec<Op> {
    let mut ops: Vec<Op> = files.into_iter().map(Op::Template).collect();
    ops.push(Op::Run(
        RunCommand::new("systemctl daemon-reload")
            .when_changed()
            .undo("systemctl daemon-reload"),
    ));
    ops.push(Op::Systemd(Systemd::new(SystemdAction::EnableNow(
        unit.to_string(),
    ))));
    ops.push(Op::Systemd(Systemd::new(SystemdAction::Restart {
        unit: unit.to_string(),
        always: false,
    })));
    ops
}

/// Uploads bundle binaries to the artifacts directory and copies them into the binary directory.
pub struct Binaries {
    /// The install context (bundle files).
    pub ctx: Arc<InstallContext>,
    /// Paths on the nodes.
    pub layout: Layout,
    /// Catalog component names, each a single binary of the same name.
    pub components: Vec<&'static str>,
}

impl Step for Binaries {
    fn name(&self) -> &str {
        "kubernetes-binaries"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = Vec::new();
        for c in &self.components {
            let (path, rec) = runtime::bundle_file(&self.ctx, c, node)?;
            let (op, artifact) = runtime::upload(path, &rec, 0o755)?;
            ops.push(op);
            ops.push(runtime::copy(artifact, self.layout.bin(c)));
        }
        Ok(ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_addresses() {
        let ip = |c, n| nth_address(c, n, "f").map(|a| a.to_string());
        assert_eq!(ip("10.233.0.0/18", 1).as_deref().ok(), Some("10.233.0.1"));
        assert_eq!(ip("10.96.0.0/12", 10).as_deref().ok(), Some("10.96.0.10"));
        assert_eq!(ip("fd00:10::/108", 10).as_deref().ok(), Some("fd00:10::a"));
        let err = ip("10.0.0.0/30", 10).expect_err("too small").to_string();
        assert!(err.contains("f: `10.0.0.0/30` is too small"), "{err}");
        assert!(ip("10.0.0.0", 1).is_err());
    }

    #[test]
    fn urls_bracket_ipv6() {
        assert_eq!(host_url("10.0.0.1", 6443), "https://10.0.0.1:6443");
        assert_eq!(host_url("fd00::1", 6443), "https://[fd00::1]:6443");
    }
}
