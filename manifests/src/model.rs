//! The serde mirror of `cluster.yaml` (`apiVersion: kubexm.io/v1alpha1`, `kind: Cluster`).
//!
//! Parsing is pure: these types only describe the document. Cross-field rules live in
//! [`crate::validate`], and everything derived (expanded role groups, chosen versions) in
//! [`crate::resolve`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::secret::Secret;

/// The only `apiVersion` this release reads.
pub const API_VERSION: &str = "kubexm.io/v1alpha1";
/// The `kind` of a cluster description.
pub const KIND_CLUSTER: &str = "Cluster";

/// A directory on the nodes that KubeXM creates, writes into configuration files and units, and
/// removes on `delete` (`etcd.dataDir`, `registry.dataDir`, the storage paths): absolute,
/// normalised (no `.`, `..`, empty or trailing components), of letters, digits and `/._-+@`
/// only (so it needs no quoting in any file format), and neither a system directory nor inside
/// one. [`NodePath::parse`] is the one place that checks it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodePath(String);

/// Directories a data directory may be neither equal to nor inside of.
const SYSTEM_TREES: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr",
];
/// Directories a data directory may be inside of, but not equal to.
const SYSTEM_DIRS: &[&str] = &[
    "/",
    "/home",
    "/media",
    "/mnt",
    "/opt",
    "/root",
    "/srv",
    "/tmp",
    "/var",
    "/var/cache",
    "/var/lib",
    "/var/lib/kubelet",
    "/var/lib/kubexm",
    "/var/log",
    "/var/run",
    "/var/spool",
    "/var/tmp",
];

/// Why a string is not a [`NodePath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodePathError {
    /// Not starting with `/`.
    #[error("is relative")]
    Relative,
    /// A character outside letters, digits and `/._-+@` (spaces, quotes, control characters).
    #[error(
        "holds {0:?}; a directory on the nodes is written with letters, digits and /._-+@ only"
    )]
    Character(char),
    /// `.`, `..`, `//` or a trailing `/`.
    #[error("is not normalised (no `.`, `..`, `//` or trailing `/`)")]
    NotNormal,
    /// Longer than [`NodePath::MAX_LEN`].
    #[error("is longer than {} bytes", NodePath::MAX_LEN)]
    TooLong,
    /// A system directory, or inside one KubeXM must never write to or remove.
    #[error("is the system directory {0} or inside it, and `delete` removes this directory")]
    System(&'static str),
}

impl NodePath {
    /// The longest path taken (Linux's PATH_MAX).
    pub const MAX_LEN: usize = 4096;

    /// Checks `s`.
    ///
    /// # Errors
    ///
    /// Whatever makes it unfit, see [`NodePathError`].
    pub fn parse(s: &str) -> Result<Self, NodePathError> {
        if s.len() > Self::MAX_LEN {
            return Err(NodePathError::TooLong);
        }
        if let Some(bad) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "/._-+@".contains(*c)))
        {
            return Err(NodePathError::Character(bad));
        }
        let Some(rest) = s.strip_prefix('/') else {
            return Err(NodePathError::Relative);
        };
        if !rest.is_empty()
            && rest
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(NodePathError::NotNormal);
        }
        if let Some(dir) = SYSTEM_DIRS.iter().find(|d| **d == s) {
            return Err(NodePathError::System(dir));
        }
        if let Some(tree) = SYSTEM_TREES
            .iter()
            .find(|t| s == **t || s.strip_prefix(**t).is_some_and(|r| r.starts_with('/')))
        {
            return Err(NodePathError::System(tree));
        }
        Ok(Self(s.to_owned()))
    }

    /// The path.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for NodePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for NodePath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A whole `cluster.yaml`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterFile {
    /// Schema version, must be [`API_VERSION`].
    pub api_version: String,
    /// Must be [`KIND_CLUSTER`].
    pub kind: String,
    /// Name and labels of the cluster.
    pub metadata: Metadata,
    /// The cluster description.
    pub spec: ClusterSpec,
}

/// `metadata`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Metadata {
    /// Cluster name; used for the bundle file name and the kubeconfig context.
    pub name: String,
}

/// `spec`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Every machine of the cluster.
    pub hosts: Vec<Host>,
    /// Which hosts play which role.
    pub role_groups: RoleGroups,
    /// Kubernetes itself.
    pub kubernetes: Kubernetes,
    /// etcd placement and type.
    #[serde(default)]
    pub etcd: Etcd,
    /// Container runtime.
    #[serde(default)]
    pub runtime: Runtime,
    /// Pod network.
    #[serde(default)]
    pub network: Network,
    /// API server load balancing.
    #[serde(default)]
    pub load_balancer: LoadBalancer,
    /// Private registry.
    #[serde(default)]
    pub registry: Registry,
    /// OS-level settings.
    #[serde(default)]
    pub system: System,
    /// Extra /etc/hosts entries and resolvers.
    #[serde(default)]
    pub extra: Extra,
    /// Addons installed after the cluster is up.
    #[serde(default)]
    pub addons: Vec<Addon>,
    /// A scheduled backup set up at the end of the install (the timer `backup schedule`
    /// writes, on the control host); `delete` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSchedule>,
    /// Storage classes: NFS (with a host under `roleGroups.nfs`) and local volumes.
    #[serde(default, skip_serializing_if = "Storage::is_unset")]
    pub storage: Storage,
}

/// `spec.storage`: the StorageClasses KubeXM installs (KubeKey's `storage_class.nfs` and
/// `storage_class.local`, v1alpha2's `storage.openebs`). At most one of them is the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Storage {
    /// The NFS export and its StorageClass `nfs-client`; used when a host is named under
    /// `roleGroups.nfs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs: Option<NfsStorage>,
    /// OpenEBS local PV (hostpath): the StorageClass `local`, volumes in a directory of the node
    /// the pod runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_volume: Option<LocalVolume>,
}

impl Storage {
    /// Nothing set (not serialized).
    pub fn is_unset(&self) -> bool {
        self.nfs.is_none() && self.local_volume.is_none()
    }

    /// Whether local volumes are enabled.
    pub fn local_enabled(&self) -> bool {
        self.local_volume.as_ref().is_some_and(|l| l.enabled)
    }
}

/// `spec.storage.nfs`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NfsStorage {
    /// The directory the `nfs` host exports (an absolute path); default
    /// [`DEFAULT_NFS_PATH`], KubeKey's.
    #[serde(default = "default_nfs_path")]
    pub path: String,
    /// Make `nfs-client` the cluster's default StorageClass.
    #[serde(default, skip_serializing_if = "is_false")]
    pub default: bool,
}

impl Default for NfsStorage {
    fn default() -> Self {
        Self {
            path: default_nfs_path(),
            default: false,
        }
    }
}

/// `spec.storage.localVolume`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalVolume {
    /// Install the local PV provisioner and the StorageClass `local`.
    #[serde(default)]
    pub enabled: bool,
    /// Where volumes are made on each node (an absolute path); default
    /// [`DEFAULT_LOCAL_BASE_PATH`], KubeKey's `storage.openebs.basePath`.
    #[serde(default = "default_local_base_path")]
    pub base_path: String,
    /// Make `local` the cluster's default StorageClass.
    #[serde(default, skip_serializing_if = "is_false")]
    pub default: bool,
}

/// `spec.storage.nfs.path`'s default (KubeKey's `storage_class.nfs.path`).
pub const DEFAULT_NFS_PATH: &str = "/share/kubernetes";
/// `spec.storage.localVolume.basePath`'s default (KubeKey's `storage.openebs.basePath`).
pub const DEFAULT_LOCAL_BASE_PATH: &str = "/var/openebs/local";

fn default_nfs_path() -> String {
    DEFAULT_NFS_PATH.to_string()
}
fn default_local_base_path() -> String {
    DEFAULT_LOCAL_BASE_PATH.to_string()
}

/// `spec.backup`: `kubexm-install backup create --keep N` from a systemd timer on the control
/// host, set up by the install.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BackupSchedule {
    /// When (systemd `OnCalendar=`: `daily`, `weekly`, `*-*-* 02:30:00`); default `daily`.
    #[serde(default = "default_backup_calendar")]
    pub on_calendar: String,
    /// Backups kept (older ones removed after each new one); default 7.
    #[serde(default = "default_backup_keep")]
    pub keep: usize,
    /// The backup key on the control host (`backup keygen`; an absolute path, mode 0600). Only
    /// its path is kept: the key is never read into a plan, a record or a bundle.
    pub key_file: String,
}

/// `spec.backup.onCalendar`'s default.
pub const DEFAULT_BACKUP_CALENDAR: &str = "daily";
/// `spec.backup.keep`'s default.
pub const DEFAULT_BACKUP_KEEP: usize = 7;

fn default_backup_calendar() -> String {
    DEFAULT_BACKUP_CALENDAR.to_string()
}
fn default_backup_keep() -> usize {
    DEFAULT_BACKUP_KEEP
}

/// CPU architecture of a host.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// x86_64.
    #[default]
    Amd64,
    /// aarch64.
    Arm64,
}

impl Arch {
    /// Go-style name (`amd64`).
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// `uname -m` style name (`x86_64`).
    pub fn uname(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.hosts[]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Host {
    /// Host name; becomes the node name and the machine's hostname.
    pub name: String,
    /// Address the control host uses for SSH.
    pub address: String,
    /// Address used inside the cluster; defaults to `address`.
    #[serde(default)]
    pub internal_address: Option<String>,
    /// The host's IPv6 address inside the cluster, besides an IPv4 `internalAddress`, on a
    /// dual-stack cluster: the kubelet's `--node-ip` gets both families.
    #[serde(
        default,
        rename = "internalAddressV6",
        skip_serializing_if = "Option::is_none"
    )]
    pub internal_address_v6: Option<String>,
    /// SSH port.
    #[serde(default = "default_ssh_port")]
    pub port: u16,
    /// SSH user; non-root users need sudo.
    #[serde(default = "default_user")]
    pub user: String,
    /// SSH/sudo password given inline (prefer `passwordEnv` or `passwordFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// Name of an environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// File whose first line is the password.
    #[serde(default)]
    pub password_file: Option<String>,
    /// SSH private key.
    #[serde(default)]
    pub private_key_path: Option<String>,
    /// CPU architecture.
    #[serde(default)]
    pub arch: Arch,
    /// Node labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

fn default_ssh_port() -> u16 {
    22
}

fn default_user() -> String {
    "root".to_owned()
}

impl Host {
    /// The in-cluster address (`internalAddress`, else `address`).
    pub fn internal(&self) -> &str {
        self.internal_address.as_deref().unwrap_or(&self.address)
    }
}

/// `spec.roleGroups`. Entries are host names or ranges such as `node[1:3]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RoleGroups {
    /// etcd members (etcd.type kubexm).
    #[serde(default)]
    pub etcd: Vec<String>,
    /// Control-plane nodes. `control-plane` is accepted as an alias.
    #[serde(default, alias = "control-plane", alias = "controlPlane")]
    pub master: Vec<String>,
    /// Worker nodes.
    #[serde(default)]
    pub worker: Vec<String>,
    /// Hosts running the private registry.
    #[serde(default)]
    pub registry: Vec<String>,
    /// Hosts running keepalived + haproxy/nginx (loadBalancer.mode external).
    #[serde(default)]
    pub loadbalancer: Vec<String>,
    /// The NFS server (KubeKey's `roleGroups.nfs`): at most one host. Naming it turns NFS
    /// storage on: the server exports `spec.storage.nfs.path`, every Kubernetes node gets the NFS
    /// client, and the `nfs-client` StorageClass provisions volumes as subdirectories of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nfs: Vec<String>,
}

/// How Kubernetes is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KubernetesType {
    /// `kubeadm init/join` with static pods.
    #[default]
    Kubeadm,
    /// The server binaries as systemd services with certificates made by KubeXM.
    Kubexm,
}

/// kube-proxy mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProxyMode {
    /// IPVS.
    #[default]
    Ipvs,
    /// iptables.
    Iptables,
    /// nftables (beta from v1.31).
    Nftables,
}

impl ProxyMode {
    /// The name kube-proxy's `mode` takes: `ipvs`, `iptables`, `nftables`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Ipvs => "ipvs",
            ProxyMode::Iptables => "iptables",
            ProxyMode::Nftables => "nftables",
        }
    }
}

/// `spec.kubernetes.readyWait`: how `install` and `apply` end, waiting until the cluster is
/// ready (issue 33 item 12).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadyWait {
    /// How long to wait, in seconds ([`ReadyWait::MIN_SECONDS`] to [`ReadyWait::MAX_SECONDS`]).
    #[serde(default = "ReadyWait::default_seconds")]
    pub timeout_seconds: u64,
    /// Also wait for every Deployment and DaemonSet to be rolled out (false: the nodes only,
    /// e.g. while an add-on is known to start later).
    #[serde(default = "ReadyWait::default_workloads")]
    pub workloads: bool,
}

impl ReadyWait {
    /// The default wait.
    pub const DEFAULT_SECONDS: u64 = 300;
    /// The shortest wait accepted.
    pub const MIN_SECONDS: u64 = 30;
    /// The longest wait accepted.
    pub const MAX_SECONDS: u64 = 3600;
    fn default_seconds() -> u64 {
        Self::DEFAULT_SECONDS
    }
    fn default_workloads() -> bool {
        true
    }
    /// Whether nothing was set.
    pub fn is_default(&self) -> bool {
        *self == ReadyWait::default()
    }
}

impl Default for ReadyWait {
    fn default() -> Self {
        ReadyWait {
            timeout_seconds: Self::DEFAULT_SECONDS,
            workloads: true,
        }
    }
}

/// `spec.kubernetes`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Kubernetes {
    /// Install method.
    #[serde(default, rename = "type")]
    pub kind: KubernetesType,
    /// Kubernetes version, e.g. `v1.31.4`; must be in the catalog.
    pub version: String,
    /// Cluster name inside Kubernetes; defaults to `metadata.name`.
    #[serde(default)]
    pub cluster_name: Option<String>,
    /// Cluster DNS domain.
    #[serde(default = "default_dns_domain")]
    pub dns_domain: String,
    /// kube-proxy mode; unset: the default for the version
    /// ([`crate::validate::ValidCluster::proxy_mode`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_mode: Option<ProxyMode>,
    /// kubelet maxPods.
    #[serde(default = "default_max_pods")]
    pub max_pods: u32,
    /// Feature gates for every component.
    #[serde(default)]
    pub feature_gates: BTreeMap<String, bool>,
    /// Extra SANs in the API server certificate.
    #[serde(default)]
    pub apiserver_cert_extra_sans: Vec<String>,
    /// Extra kube-apiserver flags (`name: value`, without `--`).
    #[serde(default)]
    pub apiserver_args: BTreeMap<String, String>,
    /// Extra kube-controller-manager flags.
    #[serde(default)]
    pub controller_manager_args: BTreeMap<String, String>,
    /// Extra kube-scheduler flags.
    #[serde(default)]
    pub scheduler_args: BTreeMap<String, String>,
    /// Extra kubelet flags.
    #[serde(default)]
    pub kubelet_args: BTreeMap<String, String>,
    /// Extra kube-proxy flags.
    #[serde(default)]
    pub kube_proxy_args: BTreeMap<String, String>,
    /// kube-proxy settings written into its configuration file (both paths).
    #[serde(default)]
    pub kube_proxy: KubeProxyOptions,
    /// kubelet settings written into its `KubeletConfiguration` (both paths).
    #[serde(default)]
    pub kubelet: KubeletOptions,
    /// The bounded wait that ends `install` and `apply`: every node Ready and, by default,
    /// every Deployment and DaemonSet rolled out.
    #[serde(default, skip_serializing_if = "ReadyWait::is_default")]
    pub ready_wait: ReadyWait,
    /// Kata Containers (KubeKey v3's `kubernetes.kata.enabled`): the `kata` runtime handler in
    /// containerd's configuration, the `kata` RuntimeClass, and kata-deploy's DaemonSet, which
    /// puts the Kata artifacts on every node. containerd only.
    #[serde(default, skip_serializing_if = "Switch::is_off")]
    pub kata: Switch,
    /// Node Feature Discovery (KubeKey v3's `kubernetes.nodeFeatureDiscovery.enabled`): its
    /// master and workers, which label every node with the hardware and kernel features found.
    #[serde(default, skip_serializing_if = "Switch::is_off")]
    pub node_feature_discovery: Switch,
    /// Security enhancement (KubeKey's `kubernetes.securityEnhancement`, also forced on by
    /// `kubexm-install install --security-enhancement`): file modes and ownership of the etcd and
    /// Kubernetes files hardened on the nodes, the kubelet's anonymous access off (webhook
    /// authentication and authorization), and API audit logging with KubeXM's policy under
    /// `/var/log/kubernetes/audit/`. The API server's `--anonymous-auth` stays on: its own
    /// liveness and readiness probes call `/livez` and `/readyz` anonymously.
    #[serde(default, skip_serializing_if = "is_false")]
    pub security_enhancement: bool,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(b: &bool) -> bool {
    !*b
}

/// An optional part of the cluster, off unless `enabled: true`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Switch {
    /// Install it.
    #[serde(default)]
    pub enabled: bool,
}

impl Switch {
    /// Off (not serialized).
    pub fn is_off(&self) -> bool {
        !self.enabled
    }
}

/// `spec.kubernetes.kubelet`: settings of the kubelet's `KubeletConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeletOptions {
    /// `failCgroupV1` (kubelet v1.31+; defaults to true from v1.35, when the kubelet refuses to
    /// start on a cgroup v1 host). `false` keeps a v1.35+ cluster running on cgroup v1 hosts
    /// (cgroup v1 is in maintenance mode upstream); unset: the kubelet's default, and preflight
    /// refuses cgroup v1 nodes on v1.35+.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_cgroup_v1: Option<bool>,
}

/// `spec.kubernetes.kubeProxy`: settings of kube-proxy's `KubeProxyConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeProxyOptions {
    /// `conntrack.maxPerCore`: conntrack entries per CPU kube-proxy sets the kernel's table to
    /// (kube-proxy's default 32768). `0` leaves the kernel's limit as it is: for hosts where
    /// kube-proxy cannot (or must not) change `nf_conntrack_max`, e.g. containers sharing the
    /// host's kernel, or hosts whose limit is managed elsewhere.
    #[serde(default)]
    pub conntrack_max_per_core: Option<u32>,
}

fn default_dns_domain() -> String {
    "cluster.local".to_owned()
}

fn default_max_pods() -> u32 {
    110
}

/// etcd type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum EtcdType {
    /// etcd binaries as a systemd service on the `etcd` role group, certificates by KubeXM.
    #[default]
    Kubexm,
    /// Stacked etcd static pods made by kubeadm on the masters.
    Kubeadm,
    /// An existing etcd cluster.
    External,
}

/// `spec.etcd`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Etcd {
    /// etcd type.
    #[serde(default, rename = "type")]
    pub kind: EtcdType,
    /// etcd version (type kubexm); defaults to the catalog's choice for the Kubernetes version.
    #[serde(default)]
    pub version: Option<String>,
    /// Client URLs of an external etcd.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// CA of an external etcd.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Client certificate for an external etcd.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// Client key for an external etcd.
    #[serde(default)]
    pub key_file: Option<String>,
    /// Data directory.
    #[serde(default)]
    pub data_dir: Option<String>,
}

/// Container runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeType {
    /// containerd + runc + crictl + CNI plugins.
    #[default]
    Containerd,
    /// Docker static binaries (+ cri-dockerd from v1.24).
    Docker,
    /// CRI-O from the OS packages.
    #[serde(rename = "cri-o")]
    CriO,
    /// iSulad.
    Isulad,
}

/// `spec.runtime`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Runtime {
    /// Runtime type.
    #[serde(default, rename = "type")]
    pub kind: RuntimeType,
    /// Runtime version; defaults to the catalog's choice for the Kubernetes version.
    #[serde(default)]
    pub version: Option<String>,
    /// For `docker`: install cri-dockerd (required from Kubernetes v1.24, where dockershim is gone).
    #[serde(default)]
    pub cri_dockerd: Option<bool>,
    /// containerd settings (only with `type: containerd`).
    #[serde(default)]
    pub containerd: ContainerdOptions,
}

/// `spec.runtime.containerd`: settings of containerd's CRI plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ContainerdOptions {
    /// The CRI plugin's `restrict_oom_score_adj`: containers get an `oom_score_adj` no lower
    /// than containerd's own instead of the negative values the kubelet asks for. Needed where
    /// containerd runs without `CAP_SYS_RESOURCE` (rootless, or inside a container or a
    /// systemd-nspawn machine), where every pod would otherwise fail to start; leave it off on
    /// ordinary hosts (critical pods then lose their OOM protection).
    #[serde(default)]
    pub restrict_oom_score_adj: bool,
}

/// CNI plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Plugin {
    /// Calico.
    #[default]
    Calico,
    /// Flannel.
    Flannel,
    /// Cilium.
    Cilium,
    /// Kube-OVN.
    KubeOvn,
    /// Hybridnet.
    Hybridnet,
    /// Multus with a delegate plugin.
    Multus,
    /// No network plugin: bring your own CNI. KubeXM bundles and installs no CNI plugin, its files
    /// or images; nodes stay `NotReady` until a CNI is installed (e.g. by a `postInstall` script).
    None,
}

impl Plugin {
    /// Catalog name of the plugin.
    pub fn as_str(self) -> &'static str {
        match self {
            Plugin::Calico => "calico",
            Plugin::Flannel => "flannel",
            Plugin::Cilium => "cilium",
            Plugin::KubeOvn => "kube-ovn",
            Plugin::Hybridnet => "hybridnet",
            Plugin::Multus => "multus",
            Plugin::None => "none",
        }
    }
}

/// `spec.network`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Network {
    /// CNI plugin.
    #[serde(default)]
    pub plugin: Plugin,
    /// Pod CIDR; two comma-separated CIDRs (IPv4,IPv6) for dual-stack. Read normalised: items
    /// trimmed and joined with `,` and no spaces (see [`normalize_cidr_list`]).
    #[serde(
        default = "default_pod_cidr",
        deserialize_with = "deserialize_cidr_list"
    )]
    pub pod_cidr: String,
    /// Service CIDR; two comma-separated CIDRs for dual-stack. Read normalised like `podCidr`.
    #[serde(
        default = "default_service_cidr",
        deserialize_with = "deserialize_cidr_list"
    )]
    pub service_cidr: String,
    /// Calico options.
    #[serde(default)]
    pub calico: PluginOptions,
    /// Flannel options.
    #[serde(default)]
    pub flannel: PluginOptions,
    /// Cilium options.
    #[serde(default)]
    pub cilium: PluginOptions,
    /// Kube-OVN options (`mode`: the tunnel type, with `joinCidr`).
    #[serde(default)]
    pub kube_ovn: KubeOvnOptions,
    /// Hybridnet options (with `defaultNetworkType`).
    #[serde(default)]
    pub hybridnet: HybridnetOptions,
    /// Multus options (with `delegate`).
    #[serde(default)]
    pub multus: MultusOptions,
}

impl Default for Network {
    fn default() -> Self {
        Self {
            plugin: Plugin::default(),
            pod_cidr: default_pod_cidr(),
            service_cidr: default_service_cidr(),
            calico: PluginOptions::default(),
            flannel: PluginOptions::default(),
            cilium: PluginOptions::default(),
            kube_ovn: KubeOvnOptions::default(),
            hybridnet: HybridnetOptions::default(),
            multus: MultusOptions::default(),
        }
    }
}

/// Options of `network.plugin: none`, which has none.
static NO_PLUGIN_OPTIONS: PluginOptions = PluginOptions {
    version: None,
    mode: None,
    mtu: None,
    values: BTreeMap::new(),
};

/// A comma-separated CIDR list as every consumer reads it: items trimmed, empty items dropped,
/// joined with `,` and no spaces (`"10.233.64.0/18, fd00::/56"` → `"10.233.64.0/18,fd00::/56"`).
/// kubeadm and the control-plane flags do not accept spaces in these lists.
pub fn normalize_cidr_list(list: &str) -> String {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

fn deserialize_cidr_list<'de, D>(deserializer: D) -> Result<String, D::Error>
where
    D: serde::Deserializer<'de>,
{
    String::deserialize(deserializer).map(|s| normalize_cidr_list(&s))
}

impl Network {
    /// Normalises `podCidr` and `serviceCidr` in place (parsing already does; this covers
    /// documents built in code).
    pub fn normalize(&mut self) {
        self.pod_cidr = normalize_cidr_list(&self.pod_cidr);
        self.service_cidr = normalize_cidr_list(&self.service_cidr);
    }

    /// Options of `plugin` (multus has its own; `none` has empty options).
    pub fn options(&self, plugin: Plugin) -> &PluginOptions {
        match plugin {
            Plugin::None => &NO_PLUGIN_OPTIONS,
            Plugin::Calico => &self.calico,
            Plugin::Flannel => &self.flannel,
            Plugin::Cilium => &self.cilium,
            Plugin::KubeOvn => &self.kube_ovn.common,
            Plugin::Hybridnet => &self.hybridnet.common,
            Plugin::Multus => &self.multus.common,
        }
    }
}

fn default_pod_cidr() -> String {
    "10.233.64.0/18".to_owned()
}

fn default_service_cidr() -> String {
    "10.233.0.0/18".to_owned()
}

/// Options shared by every plugin.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginOptions {
    /// Plugin version; defaults to the catalog's.
    #[serde(default)]
    pub version: Option<String>,
    /// Encapsulation / backend mode (calico: `ipip`|`vxlan`|`none`; flannel: `vxlan`|`host-gw`).
    #[serde(default)]
    pub mode: Option<String>,
    /// Interface MTU.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Free-form values handed to the plugin's manifest template.
    #[serde(default)]
    pub values: BTreeMap<String, String>,
}

/// `spec.network.kubeOvn`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeOvnOptions {
    /// The CIDR of kube-ovn's `join` subnet, which connects the nodes to the pod network (one
    /// CIDR, or IPv4,IPv6 on a dual-stack cluster); kube-ovn's own default (`100.64.0.0/16`,
    /// `fd00:100:64::/112`) when unset. It must not overlap the pod or service CIDRs.
    #[serde(default)]
    pub join_cidr: Option<String>,
    /// `version`, `mode` (the tunnel: `geneve`, `vxlan` or `stt`), `mtu` and `values`.
    #[serde(flatten)]
    pub common: PluginOptions,
}

/// The network a hybridnet pod gets when it asks for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
pub enum HybridnetNetworkType {
    /// VXLAN between the nodes (the chart's `init` network over the pod CIDR).
    #[default]
    #[serde(rename = "overlay", alias = "Overlay")]
    Overlay,
    /// The nodes' own layer 2 (VLAN) or BGP network: an Underlay Network and Subnet must be
    /// created with hybridnet's own resources before such pods can start.
    #[serde(rename = "underlay", alias = "Underlay")]
    Underlay,
}

impl HybridnetNetworkType {
    /// The value hybridnet's chart takes (`Overlay`, `Underlay`).
    pub fn chart_value(self) -> &'static str {
        match self {
            HybridnetNetworkType::Overlay => "Overlay",
            HybridnetNetworkType::Underlay => "Underlay",
        }
    }
}

/// `spec.network.hybridnet`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HybridnetOptions {
    /// The default network type of pods (`overlay` or `underlay`; KubeKey's `defaultNetworkType`);
    /// `overlay` when unset.
    #[serde(default)]
    pub default_network_type: Option<HybridnetNetworkType>,
    /// `version`, `mtu` and `values` (hybridnet has no `mode`: see `defaultNetworkType`).
    #[serde(flatten)]
    pub common: PluginOptions,
}

/// `spec.network.multus`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MultusOptions {
    /// The primary plugin multus delegates to.
    #[serde(default)]
    pub delegate: Option<Plugin>,
    /// Multus's own options.
    #[serde(flatten)]
    pub common: PluginOptions,
}

/// Load balancer mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LbMode {
    /// A per-node proxy or kube-vip inside the cluster.
    Internal,
    /// Dedicated load balancer hosts or an existing VIP.
    External,
    /// No load balancer: the first master's address is the endpoint.
    #[default]
    None,
}

/// Internal load balancer type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum InternalLbType {
    /// haproxy static pod on every worker.
    #[default]
    Haproxy,
    /// nginx static pod on every worker.
    Nginx,
    /// kube-vip static pod on the masters, holding a VIP.
    KubeVip,
}

/// External load balancer type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ExternalLbType {
    /// keepalived + haproxy on the `loadbalancer` role group.
    #[default]
    KubexmKh,
    /// keepalived + nginx on the `loadbalancer` role group.
    KubexmKn,
    /// A load balancer KubeXM does not manage.
    External,
}

/// `spec.loadBalancer.internal`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InternalLb {
    /// Proxy type.
    #[serde(default, rename = "type")]
    pub kind: InternalLbType,
}

/// `spec.loadBalancer.external`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExternalLb {
    /// Load balancer type.
    #[serde(default, rename = "type")]
    pub kind: ExternalLbType,
}

/// `spec.loadBalancer`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadBalancer {
    /// Mode.
    #[serde(default)]
    pub mode: LbMode,
    /// Internal options.
    #[serde(default)]
    pub internal: InternalLb,
    /// External options.
    #[serde(default)]
    pub external: ExternalLb,
    /// Virtual IP (kube-vip, keepalived, external).
    #[serde(default)]
    pub vip: Option<String>,
    /// Network interface carrying the VIP.
    #[serde(default)]
    pub interface: Option<String>,
    /// API server port behind the load balancer.
    #[serde(default = "default_lb_port")]
    pub port: u16,
    /// DNS name of the API endpoint.
    #[serde(default = "default_lb_domain")]
    pub domain: String,
}

impl Default for LoadBalancer {
    fn default() -> Self {
        Self {
            mode: LbMode::default(),
            internal: InternalLb::default(),
            external: ExternalLb::default(),
            vip: None,
            interface: None,
            port: default_lb_port(),
            domain: default_lb_domain(),
        }
    }
}

fn default_lb_port() -> u16 {
    6443
}

fn default_lb_domain() -> String {
    "lb.kubexm.internal".to_owned()
}

/// Registry type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RegistryType {
    /// The distribution registry binary as a systemd service on the `registry` host.
    #[default]
    Registry,
    /// Harbor from its offline installer on the `registry` host.
    Harbor,
    /// A registry KubeXM does not deploy (seeded only).
    External,
    /// No private registry: nodes pull from the (zone-rewritten) upstream registries.
    None,
}

/// How an image's repository path is mapped into the private registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RewriteMode {
    /// `registry.k8s.io/coredns/coredns:v1` → `REG/PROJECT/coredns/coredns:v1`.
    #[default]
    KeepPath,
    /// `registry.k8s.io/coredns/coredns:v1` → `REG/PROJECT/coredns:v1`.
    Flatten,
}

/// Credentials and trust for one registry host.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RegistryAuth {
    /// User name.
    #[serde(default)]
    pub username: Option<String>,
    /// Password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<Secret>,
    /// CA bundle to trust.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Client certificate.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// Client key.
    #[serde(default)]
    pub key_file: Option<String>,
    /// Speak plain HTTP.
    #[serde(default, rename = "plainHTTP")]
    pub plain_http: bool,
    /// Accept any certificate.
    #[serde(default)]
    pub skip_tls_verify: bool,
}

/// A Harbor project to create.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HarborProject {
    /// Project name.
    pub name: String,
    /// Anonymous pulls allowed.
    #[serde(default = "default_true")]
    pub public: bool,
}

fn default_true() -> bool {
    true
}

/// `spec.registry.harborConfig`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HarborConfig {
    /// Harbor installer version; defaults to the catalog's.
    #[serde(default)]
    pub version: Option<String>,
    /// Admin password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_password: Option<Secret>,
    /// HTTPS port.
    #[serde(default)]
    pub https_port: Option<u16>,
    /// Projects to create before seeding.
    #[serde(default)]
    pub projects: Vec<HarborProject>,
}

/// `spec.registry`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Registry {
    /// Registry type.
    #[serde(default, rename = "type")]
    pub kind: RegistryType,
    /// `host[:port]` nodes pull from; defaults to `dockerhub.kubexm.local` on the registry host.
    #[serde(default)]
    pub private_registry: Option<String>,
    /// Project / namespace every image is pushed under.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Path rewrite mode.
    #[serde(default)]
    pub rewrite: RewriteMode,
    /// Registry version (type registry); defaults to the catalog's.
    #[serde(default)]
    pub version: Option<String>,
    /// Credentials and trust per registry host.
    #[serde(default)]
    pub auths: BTreeMap<String, RegistryAuth>,
    /// Harbor settings (type harbor).
    #[serde(default)]
    pub harbor_config: HarborConfig,
    /// Storage directory on the registry host.
    #[serde(default)]
    pub data_dir: Option<String>,
}

/// `spec.system`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct System {
    /// NTP servers; a cluster host name makes that host the in-cluster server.
    #[serde(default)]
    pub ntp_servers: Vec<String>,
    /// Time zone, e.g. `Asia/Shanghai`.
    #[serde(default)]
    pub timezone: Option<String>,
    /// Extra RPM packages on RPM-based hosts.
    #[serde(default)]
    pub rpms: Vec<String>,
    /// Extra Debian packages on apt-based hosts.
    #[serde(default)]
    pub debs: Vec<String>,
    /// The OS releases the hosts run (`debian-12`, `ubuntu-22.04`, `rocky-9`; the catalog's
    /// `osReleases`). For each, the bundle carries a signed repository of the OS packages KubeXM
    /// installs with their dependencies, and the install uses it as the nodes' only package
    /// source. Empty: nodes install OS packages from their own sources.
    #[serde(default)]
    pub os_releases: Vec<String>,
    /// Shell scripts run on every node before node preparation: paths on the build host
    /// (relative to cluster.yaml's directory), bundled by `kubexm-build` with their sha256,
    /// copied to `/etc/kubexm/scripts/pre_install_<host>.sh` (several: `…_<host>-01.sh`,
    /// `-02.sh`, … run in that order). A script runs again only when its content changed since it
    /// last succeeded on the node; its output goes to the node's journal
    /// (`journalctl -t kubexm-pre-install`); a non-zero exit stops the install.
    #[serde(default)]
    pub pre_install: Vec<String>,
    /// Shell scripts run on every node after the last module (addons), like `preInstall`:
    /// `/etc/kubexm/scripts/post_install_<host>.sh`, `journalctl -t kubexm-post-install`. E.g.
    /// the pod network of `network.plugin: none`.
    #[serde(default)]
    pub post_install: Vec<String>,
    /// Preflight thresholds.
    #[serde(default)]
    pub preflight: Preflight,
}

/// `spec.system.preflight`: the limits preflight enforces. The memory defaults accept machines
/// sold as 4 GB (masters) and 2 GB (workers): `MemTotal` excludes memory the kernel reserves.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Preflight {
    /// Minimum CPUs on every node.
    #[serde(default = "default_min_cpus")]
    pub min_cpus: u32,
    /// Minimum `MemTotal` on masters, MiB.
    #[serde(default = "default_master_mem", rename = "minMasterMemoryMiB")]
    pub min_master_memory_mib: u64,
    /// Minimum `MemTotal` on other nodes, MiB.
    #[serde(default = "default_worker_mem", rename = "minWorkerMemoryMiB")]
    pub min_worker_memory_mib: u64,
    /// Largest clock difference to the control host, seconds.
    #[serde(default = "default_skew")]
    pub max_clock_skew_seconds: u32,
    /// Kernel modules that must be loaded or loadable (default: br_netfilter, overlay, and
    /// ip_vs when kubernetes.proxyMode is ipvs). Set it only for kernels that build these in or
    /// hosts that cannot load modules (containers).
    #[serde(default)]
    pub kernel_modules: Option<Vec<String>>,
    /// Measure the etcd data disk's fdatasync latency with fio on every etcd member (etcd.type
    /// kubexm or kubeadm) before etcd is installed; default true. `false` turns the check off.
    #[serde(default, rename = "etcdFsyncCheck")]
    pub etcd_fsync_check: Option<bool>,
    /// The largest fdatasync p99 latency of the etcd data disk, in milliseconds (a decimal
    /// number: `2.5`); default [`DEFAULT_ETCD_FSYNC_P99_MS`], etcd's guideline for its WAL.
    #[serde(default, rename = "etcdFsyncP99Ms")]
    pub etcd_fsync_p99_ms: Option<Millis>,
    /// The free space Harbor's data directory needs on the registry host before Harbor is
    /// installed (registry.type harbor), in GiB; default [`DEFAULT_HARBOR_MIN_FREE_DISK_GIB`],
    /// Harbor's documented minimum disk. `0` turns the check off.
    #[serde(default, rename = "harborMinFreeDiskGiB")]
    pub harbor_min_free_disk_gib: Option<u64>,
}

/// Harbor's installation prerequisites: 40 GB of disk at least (160 GB recommended), 2 CPUs and
/// 4 GB of memory at least (goharbor.io, "Harbor Installation Prerequisites").
pub const DEFAULT_HARBOR_MIN_FREE_DISK_GIB: u64 = 40;

/// etcd's guideline for the WAL disk: the 99th percentile of fdatasync under 10 ms (etcd's
/// hardware recommendations and FAQ: "What does the etcd warning 'failed to send out
/// heartbeat on time' mean?", measured with fio `--fdatasync=1`).
pub const DEFAULT_ETCD_FSYNC_P99_MS: Millis = Millis(10_000);

impl Preflight {
    /// Whether the etcd fsync check runs.
    pub fn etcd_fsync_check(&self) -> bool {
        self.etcd_fsync_check.unwrap_or(true)
    }

    /// The etcd fsync threshold.
    pub fn etcd_fsync_p99(&self) -> Millis {
        self.etcd_fsync_p99_ms.unwrap_or(DEFAULT_ETCD_FSYNC_P99_MS)
    }

    /// The free space Harbor's data directory needs, GiB (0: not checked).
    pub fn harbor_min_free_disk(&self) -> u64 {
        self.harbor_min_free_disk_gib
            .unwrap_or(DEFAULT_HARBOR_MIN_FREE_DISK_GIB)
    }
}

/// A duration written in milliseconds as a decimal number (`10`, `2.5`, `0.01`), kept in
/// whole microseconds: more than 0 and at most one hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Millis(u64);

/// A milliseconds value that is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0} is not a duration in milliseconds between 0.001 and 3600000")]
pub struct MillisError(f64);

impl Millis {
    /// The largest value, one hour.
    pub const MAX_MICROS: u64 = 3_600_000_000;

    /// From whole microseconds (`None` when 0 or over an hour).
    pub fn from_micros(us: u64) -> Option<Self> {
        (us > 0 && us <= Self::MAX_MICROS).then_some(Self(us))
    }

    /// Whole microseconds.
    pub fn as_micros(self) -> u64 {
        self.0
    }

    /// Nanoseconds.
    pub fn as_nanos(self) -> u64 {
        self.0.saturating_mul(1000)
    }
}

impl TryFrom<f64> for Millis {
    type Error = MillisError;
    fn try_from(ms: f64) -> Result<Self, MillisError> {
        if !ms.is_finite() || ms <= 0.0 {
            return Err(MillisError(ms));
        }
        let us = (ms * 1000.0).round();
        if us < 1.0 || us > Self::MAX_MICROS as f64 {
            return Err(MillisError(ms));
        }
        // In range, so exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Self::from_micros(us as u64).ok_or(MillisError(ms))
    }
}

impl From<Millis> for f64 {
    #[allow(clippy::cast_precision_loss)]
    fn from(m: Millis) -> f64 {
        m.0 as f64 / 1000.0
    }
}

impl std::fmt::Display for Millis {
    /// `10 ms`, `2.5 ms`, `0.015 ms`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (whole, frac) = (self.0 / 1000, self.0 % 1000);
        if frac == 0 {
            write!(f, "{whole} ms")
        } else {
            let frac = format!("{frac:03}");
            write!(f, "{whole}.{} ms", frac.trim_end_matches('0'))
        }
    }
}

impl Default for Preflight {
    fn default() -> Self {
        Self {
            min_cpus: default_min_cpus(),
            min_master_memory_mib: default_master_mem(),
            min_worker_memory_mib: default_worker_mem(),
            max_clock_skew_seconds: default_skew(),
            kernel_modules: None,
            etcd_fsync_check: None,
            etcd_fsync_p99_ms: None,
            harbor_min_free_disk_gib: None,
        }
    }
}

fn default_min_cpus() -> u32 {
    2
}
fn default_master_mem() -> u64 {
    3500
}
fn default_worker_mem() -> u64 {
    1700
}
fn default_skew() -> u32 {
    5
}

/// `spec.extra.hosts[]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExtraHost {
    /// Domain name.
    pub domain: String,
    /// IP address.
    pub address: String,
}

/// `spec.extra.resolves[]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExtraResolve {
    /// Name server address.
    pub address: String,
}

/// `spec.extra`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Extra {
    /// Written to every node's /etc/hosts.
    #[serde(default)]
    pub hosts: Vec<ExtraHost>,
    /// Written to every node's resolver.
    #[serde(default)]
    pub resolves: Vec<ExtraResolve>,
}

/// Addon type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AddonType {
    /// Plain YAML manifests.
    Yaml,
    /// A Helm chart.
    Helm,
}

/// A Helm chart reference.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Chart {
    /// Chart name.
    #[serde(default)]
    pub name: Option<String>,
    /// Chart version.
    #[serde(default)]
    pub version: Option<String>,
    /// Repository URL (used by the builder only).
    #[serde(default)]
    pub repo: Option<String>,
}

/// Where an addon comes from.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AddonSource {
    /// Local path (YAML file or directory, or chart archive).
    #[serde(default)]
    pub path: Option<String>,
    /// URL of the YAML or chart archive.
    #[serde(default)]
    pub url: Option<String>,
    /// Chart (type helm).
    #[serde(default)]
    pub chart: Chart,
    /// sha256 of what `url` (or the chart repository) serves. Required to bundle a `url`
    /// source; for a `chart.repo` chart it defaults to the digest the repository's index.yaml
    /// gives, and must match it when both are known. Local `path` sources are hashed at build.
    #[serde(default)]
    pub sha256: Option<String>,
}

/// `spec.addons[]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Addon {
    /// Addon name (unique).
    pub name: String,
    /// Target namespace.
    #[serde(default = "default_addon_namespace")]
    pub namespace: String,
    /// Addon type.
    #[serde(rename = "type")]
    pub kind: AddonType,
    /// Source.
    #[serde(default)]
    pub source: AddonSource,
    /// Helm values (type helm) or template values (type yaml).
    #[serde(default)]
    pub values: BTreeMap<String, String>,
    /// Images the addon needs; bundled and seeded.
    #[serde(default)]
    pub images: Vec<String>,
}

fn default_addon_namespace() -> String {
    "default".to_owned()
}

impl ClusterFile {
    /// Removes every inline secret (`spec.hosts[].password`, `spec.registry.auths[].password`,
    /// `spec.registry.harborConfig.adminPassword`) and returns the field path of each one
    /// removed. `passwordEnv` and `passwordFile` references stay: they name where the secret is,
    /// not the secret.
    pub fn strip_inline_secrets(&mut self) -> Vec<String> {
        let mut removed = Vec::new();
        for (i, host) in self.spec.hosts.iter_mut().enumerate() {
            if host.password.take().is_some() {
                removed.push(format!("spec.hosts[{i}].password"));
            }
        }
        for (name, auth) in &mut self.spec.registry.auths {
            if auth.password.take().is_some() {
                removed.push(format!("spec.registry.auths[\"{name}\"].password"));
            }
        }
        if self
            .spec
            .registry
            .harbor_config
            .admin_password
            .take()
            .is_some()
        {
            removed.push("spec.registry.harborConfig.adminPassword".to_owned());
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_paths_are_absolute_normal_plain_and_not_system_directories() {
        for good in [
            "/var/lib/etcd",
            "/data/registry",
            "/var/lib/kubexm-registry",
            "/srv/nfs",
        ] {
            assert_eq!(
                NodePath::parse(good).map(|p| p.to_string()),
                Ok(good.to_string())
            );
        }
        for (bad, want) in [
            ("var/lib/etcd", NodePathError::Relative),
            ("", NodePathError::Relative),
            (
                "/var/lib/etcd\nforce-new-cluster: true",
                NodePathError::Character('\n'),
            ),
            ("/var/lib/etcd\\n", NodePathError::Character('\\')),
            ("/data/a b", NodePathError::Character(' ')),
            ("/data/\"x", NodePathError::Character('"')),
            ("/var/lib/../../etc/cron.d", NodePathError::NotNormal),
            ("/var/lib/etcd/", NodePathError::NotNormal),
            ("/var//lib", NodePathError::NotNormal),
            ("/var/./lib", NodePathError::NotNormal),
            ("/", NodePathError::System("/")),
            ("/var/lib", NodePathError::System("/var/lib")),
            ("/etc", NodePathError::System("/etc")),
            ("/etc/cron.d", NodePathError::System("/etc")),
            ("/usr/local/bin", NodePathError::System("/usr")),
        ] {
            assert_eq!(NodePath::parse(bad), Err(want), "{bad:?}");
        }
        assert_eq!(
            NodePath::parse(&format!("/{}", "a".repeat(4096))),
            Err(NodePathError::TooLong)
        );
        assert!(
            NodePath::parse("/etcd-data").is_ok(),
            "/etc is a prefix of the name only"
        );
    }

    #[test]
    fn etcd_fsync_threshold_reads_decimal_milliseconds() {
        let p: Preflight = serde_json::from_str(r#"{"etcdFsyncP99Ms": 2.5}"#).expect("2.5");
        assert_eq!(p.etcd_fsync_p99().as_micros(), 2500);
        assert_eq!(p.etcd_fsync_p99().to_string(), "2.5 ms");
        assert!(p.etcd_fsync_check());
        let d = Preflight::default();
        assert_eq!(d.etcd_fsync_p99(), DEFAULT_ETCD_FSYNC_P99_MS);
        assert_eq!(d.etcd_fsync_p99().to_string(), "10 ms");
        let tiny: Preflight = serde_json::from_str(r#"{"etcdFsyncP99Ms": 0.001}"#).expect("1 us");
        assert_eq!(tiny.etcd_fsync_p99().as_nanos(), 1000);
        assert_eq!(tiny.etcd_fsync_p99().to_string(), "0.001 ms");
        for bad in ["0", "-1", "0.0004", "3600001", "\"10\""] {
            assert!(
                serde_json::from_str::<Preflight>(&format!(r#"{{"etcdFsyncP99Ms": {bad}}}"#))
                    .is_err(),
                "{bad}"
            );
        }
        let off: Preflight = serde_json::from_str(r#"{"etcdFsyncCheck": false}"#).expect("off");
        assert!(!off.etcd_fsync_check());
        // Written back as the number it was read from.
        assert_eq!(
            serde_json::to_value(p.etcd_fsync_p99_ms).expect("json"),
            serde_json::json!(2.5)
        );
    }
}
