//! What each Kubernetes version does differently, as facts the installer reads instead of
//! comparing version numbers itself.
//!
//! Every answer is an upstream fact for the range KubeXM supports (v1.20 → v1.37); the unit tests
//! below pin each one and name its source. Boundaries are `major.minor` unless a fact changed in a
//! patch release (the image registry), where the patch is part of the rule.
//!
//! ```
//! use kubexm_manifests::kube_version::{KubeadmApi, ProxyModeStatus};
//! use kubexm_manifests::model::ProxyMode;
//! use kubexm_manifests::version::KubeVersion;
//!
//! let v: KubeVersion = "v1.20.2".parse().unwrap();
//! assert_eq!(v.kubeadm_api(), KubeadmApi::V1beta2);
//! assert_eq!(v.image_repository(), "k8s.gcr.io");
//! assert!(v.has_dockershim());
//! assert_eq!(v.proxy_mode_status(ProxyMode::Nftables), ProxyModeStatus::Unavailable);
//! ```

use std::fmt;

use crate::catalog::KubernetesRelease;
use crate::model::ProxyMode;
use crate::version::KubeVersion;

/// The oldest Kubernetes version KubeXM installs.
pub const OLDEST_SUPPORTED: KubeVersion = KubeVersion::new(1, 20, 0);
/// The newest Kubernetes minor KubeXM installs (`1.37`).
pub const NEWEST_SUPPORTED_MINOR: (u32, u32) = (1, 37);

/// The registry kubeadm pulled its images from before v1.25 (and the backports below).
pub const K8S_GCR_IO: &str = "k8s.gcr.io";
/// The registry kubeadm pulls its images from since v1.25.0, v1.24.9, v1.23.15 and v1.22.17.
pub const REGISTRY_K8S_IO: &str = "registry.k8s.io";

/// The label every kubeadm control-plane node gets (since v1.20).
pub const LABEL_CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
/// The label kubeadm also applied up to v1.23.
pub const LABEL_MASTER: &str = "node-role.kubernetes.io/master";

/// The kernel from which kube-proxy's nftables mode works (kube-proxy documentation).
pub const NFTABLES_MIN_KERNEL: KernelVersion = KernelVersion::new(5, 13);

/// The kubeadm configuration API a version of kubeadm reads and writes by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KubeadmApi {
    /// `kubeadm.k8s.io/v1beta2` (v1.15 → removed in v1.26; KubeXM uses it before v1.22).
    V1beta2,
    /// `kubeadm.k8s.io/v1beta3` (added in v1.22; KubeXM uses it for v1.22 → v1.30).
    V1beta3,
    /// `kubeadm.k8s.io/v1beta4` (added in v1.31).
    V1beta4,
}

impl KubeadmApi {
    /// The `apiVersion` of the configuration documents, e.g. `kubeadm.k8s.io/v1beta3`.
    pub fn api_version(self) -> &'static str {
        match self {
            KubeadmApi::V1beta2 => "kubeadm.k8s.io/v1beta2",
            KubeadmApi::V1beta3 => "kubeadm.k8s.io/v1beta3",
            KubeadmApi::V1beta4 => "kubeadm.k8s.io/v1beta4",
        }
    }
}

impl fmt::Display for KubeadmApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.api_version())
    }
}

/// A node taint (`key:effect`, no value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taint {
    /// Taint key.
    pub key: &'static str,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: &'static str,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.key, self.effect)
    }
}

const TAINT_MASTER: Taint = Taint {
    key: LABEL_MASTER,
    effect: "NoSchedule",
};
const TAINT_CONTROL_PLANE: Taint = Taint {
    key: LABEL_CONTROL_PLANE,
    effect: "NoSchedule",
};

/// A kernel `major.minor`, compared numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
}

impl KernelVersion {
    /// A kernel version from its parts.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// The `major.minor` at the start of a `uname -r` string (`4.18.0-553.el8_10.x86_64` → 4.18);
    /// `None` when it does not start with two numbers.
    pub fn from_release(release: &str) -> Option<Self> {
        let mut parts = release.trim().splitn(3, '.');
        let major = parts.next()?.parse().ok()?;
        let minor: String = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Some(Self::new(major, minor.parse().ok()?))
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What kubeadm's `SystemVerification` preflight check asks of the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRequirement {
    /// The oldest kernel kubeadm accepts.
    pub minimum: KernelVersion,
    /// Whether an older kernel is a preflight error (`true`) or only a warning.
    pub fatal: bool,
}

/// An etcd release `MAJOR.MINOR.PATCH`, compared numerically (`v3.5.24`, `3.6.14`; kubeadm's image
/// tags such as `3.5.24-0` compare by their release part).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EtcdVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl EtcdVersion {
    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// `v3.4.23`, `3.4.23` or an image tag `3.5.24-0`; `None` when it is not three numbers.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let release = s.split_once('-').map_or(s, |(r, _)| r);
        let mut parts = release.split('.').map(|p| {
            if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                p.parse::<u32>().ok()
            } else {
                None
            }
        });
        let v = Self::new(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }
}

impl fmt::Display for EtcdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// How far kube-proxy supports a proxy mode in a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyModeStatus {
    /// The mode does not exist.
    Unavailable,
    /// Alpha: works only with the named feature gate set to true.
    FeatureGate(&'static str),
    /// Beta, on by default.
    Beta,
    /// Generally available.
    Stable,
    /// Still works, deprecated: new clusters should not choose it.
    Deprecated,
}

impl ProxyModeStatus {
    /// Whether kube-proxy runs the mode without a feature gate.
    pub fn usable(self) -> bool {
        matches!(
            self,
            ProxyModeStatus::Beta | ProxyModeStatus::Stable | ProxyModeStatus::Deprecated
        )
    }
}

/// How far dual-stack networking is supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DualStack {
    /// Alpha: the `IPv6DualStack` feature gate must be set on every component.
    Alpha,
    /// Beta, on by default.
    Beta,
    /// Generally available.
    Stable,
}

/// The images `kubeadm config images list --kubernetes-version vX` prints for kubeadm vX.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeadmImages {
    /// `<repo>/kube-apiserver:vX`.
    pub apiserver: String,
    /// `<repo>/kube-controller-manager:vX`.
    pub controller_manager: String,
    /// `<repo>/kube-scheduler:vX`.
    pub scheduler: String,
    /// `<repo>/kube-proxy:vX`.
    pub proxy: String,
    /// `<repo>/pause:<tag>`.
    pub pause: String,
    /// `<repo>/etcd:<tag>` (stacked etcd).
    pub etcd: String,
    /// `<repo>/coredns:<tag>` before v1.21, `<repo>/coredns/coredns:<tag>` from v1.21.
    pub coredns: String,
}

impl KubeadmImages {
    /// Every image, in the order kubeadm prints them (control plane, proxy, pause, etcd, CoreDNS).
    pub fn all(&self) -> [&str; 7] {
        [
            &self.apiserver,
            &self.controller_manager,
            &self.scheduler,
            &self.proxy,
            &self.pause,
            &self.etcd,
            &self.coredns,
        ]
    }
}

impl KubeVersion {
    /// Whether this is in the range KubeXM installs (v1.20.0 → v1.37.x).
    pub fn is_supported(self) -> bool {
        self >= OLDEST_SUPPORTED && (self.major, self.minor) <= NEWEST_SUPPORTED_MINOR
    }

    /// The kubeadm configuration API KubeXM writes for this version: v1beta2 before v1.22,
    /// v1beta3 for v1.22 → v1.30, v1beta4 from v1.31.
    pub fn kubeadm_api(self) -> KubeadmApi {
        if self.at_least(1, 31) {
            KubeadmApi::V1beta4
        } else if self.at_least(1, 22) {
            KubeadmApi::V1beta3
        } else {
            KubeadmApi::V1beta2
        }
    }

    /// Whether this kubeadm still reads `kubeadm.k8s.io/v1beta2` (removed in v1.26).
    pub fn kubeadm_reads_v1beta2(self) -> bool {
        !self.at_least(1, 26)
    }

    /// Whether the kubelet has dockershim (talks to docker itself): before v1.24. From v1.24
    /// docker needs cri-dockerd.
    pub fn has_dockershim(self) -> bool {
        !self.at_least(1, 24)
    }

    /// Whether a kubelet on a CRI runtime other than dockershim needs
    /// `--container-runtime=remote` (with `--container-runtime-endpoint`): before v1.24, when the
    /// kubelet's default runtime was docker.
    pub fn kubelet_needs_remote_runtime_flag(self) -> bool {
        !self.at_least(1, 24)
    }

    /// Whether the kubelet still accepts `--container-runtime` at all (removed in v1.27).
    pub fn kubelet_accepts_container_runtime_flag(self) -> bool {
        !self.at_least(1, 27)
    }

    /// Whether the CRI endpoint can be set as `containerRuntimeEndpoint` in the
    /// KubeletConfiguration (from v1.27); before, only the `--container-runtime-endpoint` flag.
    pub fn kubelet_config_has_runtime_endpoint(self) -> bool {
        self.at_least(1, 27)
    }

    /// The labels kubeadm puts on a control-plane node: `master` and `control-plane` for
    /// v1.20 → v1.23, `control-plane` only from v1.24.
    pub fn control_plane_labels(self) -> &'static [&'static str] {
        if self.at_least(1, 24) {
            &[LABEL_CONTROL_PLANE]
        } else {
            &[LABEL_MASTER, LABEL_CONTROL_PLANE]
        }
    }

    /// The taints kubeadm puts on a control-plane node: `master:NoSchedule` up to v1.23, both
    /// `master` and `control-plane` in v1.24, `control-plane:NoSchedule` only from v1.25.
    pub fn control_plane_taints(self) -> &'static [Taint] {
        if self.at_least(1, 25) {
            &[TAINT_CONTROL_PLANE]
        } else if self.at_least(1, 24) {
            &[TAINT_MASTER, TAINT_CONTROL_PLANE]
        } else {
            &[TAINT_MASTER]
        }
    }

    /// kubeadm's default image repository: `registry.k8s.io` from v1.25.0 and in the backports
    /// v1.24.9+, v1.23.15+, v1.22.17; `k8s.gcr.io` before.
    pub fn image_repository(self) -> &'static str {
        let switched = match (self.major, self.minor) {
            (1, m) if m >= 25 => true,
            (1, 24) => self.patch >= 9,
            (1, 23) => self.patch >= 15,
            (1, 22) => self.patch >= 17,
            (1, _) => false,
            _ => true,
        };
        if switched {
            REGISTRY_K8S_IO
        } else {
            K8S_GCR_IO
        }
    }

    /// The CoreDNS repository under the image repository: `coredns` before v1.21,
    /// `coredns/coredns` from v1.21 (whose tags carry a `v`).
    pub fn coredns_repository(self) -> &'static str {
        if self.at_least(1, 21) {
            "coredns/coredns"
        } else {
            "coredns"
        }
    }

    /// The images kubeadm of this version lists for a stacked-etcd cluster, with the tags the
    /// catalog records for it (`release`).
    pub fn kubeadm_images(self, release: &KubernetesRelease) -> KubeadmImages {
        let repo = self.image_repository();
        KubeadmImages {
            apiserver: format!("{repo}/kube-apiserver:{self}"),
            controller_manager: format!("{repo}/kube-controller-manager:{self}"),
            scheduler: format!("{repo}/kube-scheduler:{self}"),
            proxy: format!("{repo}/kube-proxy:{self}"),
            pause: format!("{repo}/pause:{}", release.pause),
            etcd: format!("{repo}/etcd:{}", release.etcd_image),
            coredns: format!("{repo}/{}:{}", self.coredns_repository(), release.coredns),
        }
    }

    /// Whether kubeadm writes `super-admin.conf` and binds `admin.conf` to the
    /// `kubeadm:cluster-admins` group instead of `system:masters` (from v1.29).
    pub fn has_super_admin_conf(self) -> bool {
        self.at_least(1, 29)
    }

    /// The kernel kubeadm's `SystemVerification` check asks for: 3.10 before v1.32; 4.19 (the
    /// oldest kernel.org LTS it lists) from v1.32, a fatal error up to v1.33 and only a warning
    /// from v1.34.
    pub fn kubeadm_kernel_requirement(self) -> KernelRequirement {
        if self.at_least(1, 32) {
            KernelRequirement {
                minimum: KernelVersion::new(4, 19),
                fatal: !self.at_least(1, 34),
            }
        } else {
            KernelRequirement {
                minimum: KernelVersion::new(3, 10),
                fatal: true,
            }
        }
    }

    /// Whether the kubelet refuses to start on a cgroup v1 host by default (`failCgroupV1`
    /// defaults to true from v1.35).
    pub fn kubelet_fails_on_cgroup_v1(self) -> bool {
        self.at_least(1, 35)
    }

    /// The oldest etcd kubeadm accepts as an external etcd (KubeXM's etcd is one): its preflight
    /// check `ExternalEtcdVersion` refuses an older one with "this version of kubeadm only
    /// supports external etcd version >= 3.5.24-0" (`MinExternalEtcdVersion` in
    /// cmd/kubeadm/app/constants/constants.go: 3.5.24-0 in v1.36.3 and v1.37.2, seen refusing
    /// etcd 3.4.23 in the lab with v1.37.2; 3.2.18 in v1.20.2). `None` for the minors between,
    /// whose value KubeXM has not verified (kubeadm's own preflight still checks).
    pub fn kubeadm_min_external_etcd(self) -> Option<EtcdVersion> {
        if self.at_least(1, 36) {
            Some(EtcdVersion::new(3, 5, 24))
        } else if !self.at_least(1, 21) {
            Some(EtcdVersion::new(3, 2, 18))
        } else {
            None
        }
    }

    /// Whether containerd 1.x is supported: up to v1.37. The removal announced for v1.36 was
    /// deferred twice: the v1.36 kubelet reports a CRI runtime without the `RuntimeConfig` call
    /// (containerd 1.x) as losing support in 1.37.0, the v1.37 kubelet says 1.38.0
    /// (`kubelet_cri_losing_support`, cmd/kubelet/app/server.go of k8s.io/kubernetes v1.36.3
    /// and v1.37.2).
    pub fn supports_containerd_1x(self) -> bool {
        !self.at_least(1, 38)
    }

    /// How far kube-proxy supports `mode` in this version: nftables is alpha behind the
    /// `NFTablesProxyMode` gate in v1.29–v1.30, beta from v1.31, GA from v1.33; ipvs is
    /// deprecated from v1.35; iptables is stable throughout.
    pub fn proxy_mode_status(self, mode: ProxyMode) -> ProxyModeStatus {
        match mode {
            ProxyMode::Iptables => ProxyModeStatus::Stable,
            ProxyMode::Ipvs if self.at_least(1, 35) => ProxyModeStatus::Deprecated,
            ProxyMode::Ipvs => ProxyModeStatus::Stable,
            ProxyMode::Nftables if self.at_least(1, 33) => ProxyModeStatus::Stable,
            ProxyMode::Nftables if self.at_least(1, 31) => ProxyModeStatus::Beta,
            ProxyMode::Nftables if self.at_least(1, 29) => {
                ProxyModeStatus::FeatureGate("NFTablesProxyMode")
            }
            ProxyMode::Nftables => ProxyModeStatus::Unavailable,
        }
    }

    /// The proxy mode KubeXM uses when `spec.kubernetes.proxyMode` is unset: ipvs before v1.35
    /// (KubeXM's default so far, as KubeKey's and kubespray's); from v1.35, where ipvs is
    /// deprecated (KEP-5495: kube-proxy warns when it runs in ipvs mode), iptables — kube-proxy's
    /// own default on Linux in every version. nftables (GA from v1.33) is never chosen by
    /// default: it needs a kernel of [`NFTABLES_MIN_KERNEL`] or newer, which several supported
    /// operating systems do not have; choose it explicitly.
    pub fn default_proxy_mode(self) -> ProxyMode {
        if self.at_least(1, 35) {
            ProxyMode::Iptables
        } else {
            ProxyMode::Ipvs
        }
    }

    /// Whether the KubeletConfiguration has the `failCgroupV1` field (from v1.31, KEP-4569;
    /// cgroup v1 is in maintenance mode from then on).
    pub fn kubelet_has_fail_cgroup_v1(self) -> bool {
        self.at_least(1, 31)
    }

    /// How far dual-stack (IPv4 + IPv6) is supported: alpha in v1.20, beta (on by default) in
    /// v1.21–v1.22, GA from v1.23.
    pub fn dual_stack(self) -> DualStack {
        if self.at_least(1, 23) {
            DualStack::Stable
        } else if self.at_least(1, 21) {
            DualStack::Beta
        } else {
            DualStack::Alpha
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().expect("test version")
    }

    #[test]
    fn supported_range_is_v1_20_to_v1_37() {
        assert!(v("v1.20.0").is_supported());
        assert!(v("v1.36.9").is_supported());
        assert!(v("v1.37.0").is_supported());
        assert!(v("v1.37.2").is_supported());
        assert!(!v("v1.19.16").is_supported());
        assert!(!v("v1.38.0").is_supported());
    }

    /// kubeadm CHANGELOGs: v1beta3 added in v1.22, v1beta2 removed in v1.26, v1beta4 added in v1.31.
    #[test]
    fn kubeadm_api_per_version() {
        assert_eq!(v("v1.20.2").kubeadm_api(), KubeadmApi::V1beta2);
        assert_eq!(v("v1.21.14").kubeadm_api(), KubeadmApi::V1beta2);
        assert_eq!(v("v1.22.0").kubeadm_api(), KubeadmApi::V1beta3);
        assert_eq!(v("v1.30.14").kubeadm_api(), KubeadmApi::V1beta3);
        assert_eq!(v("v1.31.0").kubeadm_api(), KubeadmApi::V1beta4);
        assert_eq!(v("v1.36.0").kubeadm_api(), KubeadmApi::V1beta4);
        assert_eq!(KubeadmApi::V1beta3.to_string(), "kubeadm.k8s.io/v1beta3");
        assert!(v("v1.25.16").kubeadm_reads_v1beta2());
        assert!(!v("v1.26.0").kubeadm_reads_v1beta2());
    }

    /// kubernetes v1.20.2 cmd/kubeadm/app/phases/kubelet/flags.go: docker gets `--network-plugin`,
    /// every other CRI socket `--container-runtime=remote --container-runtime-endpoint`;
    /// dockershim was removed in v1.24 and the `--container-runtime` flag in v1.27.
    #[test]
    fn kubelet_runtime_flags_and_dockershim() {
        assert!(v("v1.23.17").has_dockershim());
        assert!(!v("v1.24.0").has_dockershim());
        assert!(v("v1.20.2").kubelet_needs_remote_runtime_flag());
        assert!(!v("v1.24.0").kubelet_needs_remote_runtime_flag());
        assert!(v("v1.26.15").kubelet_accepts_container_runtime_flag());
        assert!(!v("v1.27.0").kubelet_accepts_container_runtime_flag());
        assert!(!v("v1.26.15").kubelet_config_has_runtime_endpoint());
        assert!(v("v1.27.0").kubelet_config_has_runtime_endpoint());
    }

    /// kubernetes v1.20.2 cmd/kubeadm/app/phases/markcontrolplane (both labels) and
    /// util/config/initconfiguration.go (OldControlPlaneTaint only); kubeadm v1.24 dropped the
    /// master label and added the control-plane taint, v1.25 dropped the master taint.
    #[test]
    fn control_plane_labels_and_taints() {
        assert_eq!(
            v("v1.20.2").control_plane_labels(),
            &[LABEL_MASTER, LABEL_CONTROL_PLANE]
        );
        assert_eq!(v("v1.24.0").control_plane_labels(), &[LABEL_CONTROL_PLANE]);
        let names = |k: KubeVersion| -> Vec<String> {
            k.control_plane_taints()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            names(v("v1.23.17")),
            ["node-role.kubernetes.io/master:NoSchedule"]
        );
        assert_eq!(
            names(v("v1.24.9")),
            [
                "node-role.kubernetes.io/master:NoSchedule",
                "node-role.kubernetes.io/control-plane:NoSchedule"
            ]
        );
        assert_eq!(
            names(v("v1.25.0")),
            ["node-role.kubernetes.io/control-plane:NoSchedule"]
        );
    }

    /// kubernetes v1.20.2 v1beta2/defaults.go DefaultImageRepository `k8s.gcr.io`; registry.k8s.io
    /// from v1.25.0, backported by kubernetes PRs #113388 (1.22), #113393 (1.23), #113395 (1.24)
    /// into the December 2022 patches (CHANGELOG-1.23 v1.23.15).
    #[test]
    fn image_repository_switch_and_backports() {
        for (ver, repo) in [
            ("v1.20.2", K8S_GCR_IO),
            ("v1.21.14", K8S_GCR_IO),
            ("v1.22.16", K8S_GCR_IO),
            ("v1.22.17", REGISTRY_K8S_IO),
            ("v1.23.14", K8S_GCR_IO),
            ("v1.23.15", REGISTRY_K8S_IO),
            ("v1.24.8", K8S_GCR_IO),
            ("v1.24.9", REGISTRY_K8S_IO),
            ("v1.25.0", REGISTRY_K8S_IO),
            ("v1.36.0", REGISTRY_K8S_IO),
        ] {
            assert_eq!(v(ver).image_repository(), repo, "{ver}");
        }
        assert_eq!(v("v1.20.15").coredns_repository(), "coredns");
        assert_eq!(v("v1.21.0").coredns_repository(), "coredns/coredns");
    }

    /// `kubeadm config images list --kubernetes-version v1.20.2` with kubeadm v1.20.2 (constants
    /// from its source: PauseVersion 3.2, CoreDNSVersion 1.7.0, DefaultEtcdVersion 3.4.13-0).
    #[test]
    fn kubeadm_images_of_v1_20_2() {
        let release = KubernetesRelease {
            version: "v1.20.2".into(),
            pause: "3.2".into(),
            coredns: "1.7.0".into(),
            etcd_image: "3.4.13-0".into(),
            defaults: Default::default(),
        };
        let images = v("v1.20.2").kubeadm_images(&release);
        // The whole list is pinned against the real kubeadm in tests/it/resolve.rs.
        assert_eq!(images.apiserver, "k8s.gcr.io/kube-apiserver:v1.20.2");
        assert_eq!(images.coredns, "k8s.gcr.io/coredns:1.7.0");
        assert_eq!(images.all().len(), 7);
    }

    /// kubeadm v1.29 added super-admin.conf and the kubeadm:cluster-admins group.
    #[test]
    fn super_admin_from_v1_29() {
        assert!(!v("v1.28.15").has_super_admin_conf());
        assert!(v("v1.29.0").has_super_admin_conf());
    }

    /// system-validators in kubernetes v1.20.2 vendor/: "Requires 3.10+"; v1.32 raised the floor
    /// to the kernel.org LTS list starting at 4.19; kubernetes PR #131919 (v1.34) made the kernel
    /// check a warning.
    #[test]
    fn kernel_requirement_per_version() {
        let r = v("v1.31.13").kubeadm_kernel_requirement();
        assert_eq!((r.minimum, r.fatal), (KernelVersion::new(3, 10), true));
        let r = v("v1.32.0").kubeadm_kernel_requirement();
        assert_eq!((r.minimum, r.fatal), (KernelVersion::new(4, 19), true));
        let r = v("v1.34.0").kubeadm_kernel_requirement();
        assert_eq!((r.minimum, r.fatal), (KernelVersion::new(4, 19), false));
        assert_eq!(
            KernelVersion::from_release("4.18.0-553.el8_10.x86_64"),
            Some(KernelVersion::new(4, 18))
        );
        assert_eq!(
            KernelVersion::from_release("6.1.0-26-amd64"),
            Some(KernelVersion::new(6, 1))
        );
        assert_eq!(KernelVersion::from_release("garbage"), None);
        assert!(KernelVersion::new(3, 10) < KernelVersion::new(4, 19));
    }

    /// kubelet failCgroupV1 defaults to true from v1.35 (issue 13 item 2). containerd 1.x: the
    /// removal announced for v1.36 was deferred; the v1.36.3 kubelet names 1.37.0, the v1.37.2
    /// kubelet 1.38.0 as the release that drops a runtime without RuntimeConfig (issue 33 item 8).
    #[test]
    fn cgroup_v1_and_containerd_1x() {
        assert!(!v("v1.34.11").kubelet_fails_on_cgroup_v1());
        assert!(v("v1.35.0").kubelet_fails_on_cgroup_v1());
        assert!(v("v1.37.2").kubelet_fails_on_cgroup_v1());
        assert!(v("v1.35.8").supports_containerd_1x());
        assert!(v("v1.36.0").supports_containerd_1x());
        assert!(v("v1.37.2").supports_containerd_1x());
        assert!(!v("v1.38.0").supports_containerd_1x());
        assert!(!v("v1.30.14").kubelet_has_fail_cgroup_v1());
        assert!(v("v1.31.0").kubelet_has_fail_cgroup_v1());
    }

    /// kubeadm's MinExternalEtcdVersion (constants.go of v1.20.2, v1.36.3, v1.37.2); etcd versions
    /// as the catalog and kubeadm's image tags write them.
    #[test]
    fn kubeadm_min_external_etcd_and_etcd_versions() {
        assert_eq!(
            v("v1.37.2").kubeadm_min_external_etcd(),
            Some(EtcdVersion::new(3, 5, 24))
        );
        assert_eq!(
            v("v1.36.0").kubeadm_min_external_etcd(),
            Some(EtcdVersion::new(3, 5, 24))
        );
        assert_eq!(v("v1.35.8").kubeadm_min_external_etcd(), None);
        assert_eq!(
            v("v1.20.2").kubeadm_min_external_etcd(),
            Some(EtcdVersion::new(3, 2, 18))
        );
        assert_eq!(
            EtcdVersion::parse("v3.4.23"),
            Some(EtcdVersion::new(3, 4, 23))
        );
        assert_eq!(
            EtcdVersion::parse("3.5.24-0"),
            Some(EtcdVersion::new(3, 5, 24))
        );
        assert!(EtcdVersion::new(3, 4, 23) < EtcdVersion::new(3, 5, 24));
        assert!(EtcdVersion::new(3, 6, 0) > EtcdVersion::new(3, 5, 24));
        for bad in ["", "v3.4", "3.4.x", "v3.4.23.1", "latest"] {
            assert_eq!(EtcdVersion::parse(bad), None, "{bad}");
        }
        assert_eq!(EtcdVersion::new(3, 5, 24).to_string(), "3.5.24");
    }

    /// KEP-3866 (nftables: alpha 1.29, beta 1.31, GA 1.33) and the ipvs deprecation in v1.35.
    #[test]
    fn proxy_modes_per_version() {
        use ProxyMode::*;
        assert_eq!(
            v("v1.28.0").proxy_mode_status(Nftables),
            ProxyModeStatus::Unavailable
        );
        assert_eq!(
            v("v1.29.0").proxy_mode_status(Nftables),
            ProxyModeStatus::FeatureGate("NFTablesProxyMode")
        );
        assert_eq!(
            v("v1.31.0").proxy_mode_status(Nftables),
            ProxyModeStatus::Beta
        );
        assert_eq!(
            v("v1.33.0").proxy_mode_status(Nftables),
            ProxyModeStatus::Stable
        );
        assert_eq!(
            v("v1.34.0").proxy_mode_status(Ipvs),
            ProxyModeStatus::Stable
        );
        assert_eq!(
            v("v1.35.0").proxy_mode_status(Ipvs),
            ProxyModeStatus::Deprecated
        );
        assert!(v("v1.35.0").proxy_mode_status(Ipvs).usable());
        assert!(!v("v1.30.0").proxy_mode_status(Nftables).usable());
        assert_eq!(
            v("v1.20.0").proxy_mode_status(Iptables),
            ProxyModeStatus::Stable
        );
        // KEP-5495 (ipvs deprecated in v1.35); kube-proxy's default mode is iptables
        // (kubernetes pkg/proxy/apis/config: an empty mode means iptables on Linux).
        assert_eq!(v("v1.20.2").default_proxy_mode(), Ipvs);
        assert_eq!(v("v1.34.11").default_proxy_mode(), Ipvs);
        assert_eq!(v("v1.35.0").default_proxy_mode(), Iptables);
        assert_eq!(v("v1.36.3").default_proxy_mode(), Iptables);
    }

    /// Dual-stack: alpha v1.20 (IPv6DualStack gate), beta v1.21, GA v1.23.
    #[test]
    fn dual_stack_per_version() {
        assert_eq!(v("v1.20.2").dual_stack(), DualStack::Alpha);
        assert_eq!(v("v1.22.0").dual_stack(), DualStack::Beta);
        assert_eq!(v("v1.23.0").dual_stack(), DualStack::Stable);
    }
}
