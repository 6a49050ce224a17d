//! What each Kubernetes version's components accept in their flags and configuration files:
//! the facts the installer reads when it writes kubeadm configurations (`kubernetes.type:
//! kubeadm`) and the components' units and files (`kubernetes.type: kubexm`), so that nothing is
//! rendered that the version would refuse or silently ignore.
//!
//! The facts about kubeadm's defaults (API version, images, labels, taints) are in
//! [`crate::kube_version`]; these are about the components' own interfaces. Each is pinned by a
//! unit test below that names its source.

use crate::kube_version::KubeadmApi;
use crate::version::KubeVersion;

impl KubeadmApi {
    /// Whether `extraArgs` / `kubeletExtraArgs` are lists of `{name, value}` (v1beta4, so a
    /// flag may repeat) rather than maps (v1beta2, v1beta3).
    pub fn extra_args_are_lists(self) -> bool {
        self >= KubeadmApi::V1beta4
    }

    /// Whether `InitConfiguration`/`JoinConfiguration` have `patches.directory` (v1beta3+);
    /// with v1beta2 the patch directory is the `--experimental-patches` flag of
    /// `kubeadm init`/`join` (kubeadm v1.19–v1.21).
    pub fn has_patches_field(self) -> bool {
        self >= KubeadmApi::V1beta3
    }

    /// Whether `nodeRegistration.imagePullPolicy` exists (added in v1beta3).
    pub fn has_image_pull_policy(self) -> bool {
        self >= KubeadmApi::V1beta3
    }

    /// Whether `InitConfiguration`/`JoinConfiguration` have `timeouts` (added in v1beta4, with
    /// `etcdAPICall` among them; before it kubeadm's waits were fixed).
    pub fn has_timeouts(self) -> bool {
        self >= KubeadmApi::V1beta4
    }
}

/// The `apiVersion` of kube-scheduler's `KubeSchedulerConfiguration` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulerConfigApi {
    /// `kubescheduler.config.k8s.io/v1beta1` (v1.19 → removed in v1.23).
    V1beta1,
    /// `kubescheduler.config.k8s.io/v1beta2` (v1.22 → removed in v1.28).
    V1beta2,
    /// `kubescheduler.config.k8s.io/v1` (GA in v1.25).
    V1,
}

impl SchedulerConfigApi {
    /// The `apiVersion` string.
    pub fn api_version(self) -> &'static str {
        match self {
            SchedulerConfigApi::V1beta1 => "kubescheduler.config.k8s.io/v1beta1",
            SchedulerConfigApi::V1beta2 => "kubescheduler.config.k8s.io/v1beta2",
            SchedulerConfigApi::V1 => "kubescheduler.config.k8s.io/v1",
        }
    }
}

impl KubeVersion {
    /// kube-scheduler's configuration API KubeXM writes: v1beta1 before v1.22, v1beta2 for
    /// v1.22–v1.24, v1 from v1.25 (each served by every version it is used for).
    pub fn scheduler_config_api(self) -> SchedulerConfigApi {
        if self.at_least(1, 25) {
            SchedulerConfigApi::V1
        } else if self.at_least(1, 22) {
            SchedulerConfigApi::V1beta2
        } else {
            SchedulerConfigApi::V1beta1
        }
    }

    /// Whether kube-controller-manager still serves plain HTTP on `--port` (10252) unless told
    /// `--port=0`: before v1.22, which removed its insecure serving.
    pub fn controller_manager_serves_insecurely(self) -> bool {
        !self.at_least(1, 22)
    }

    /// Whether kube-scheduler still serves plain HTTP on `--port` (10251) unless told
    /// `--port=0`: before v1.23, which removed its insecure serving.
    pub fn scheduler_serves_insecurely(self) -> bool {
        !self.at_least(1, 23)
    }

    /// Whether the `KubeletConfiguration` has `registerWithTaints` (from v1.23); before, only
    /// the `--register-with-taints` flag.
    pub fn kubelet_config_has_register_with_taints(self) -> bool {
        self.at_least(1, 23)
    }

    /// Whether kubeadm's `nodeRegistration.criSocket` is written as a URL (`unix:///…`): from
    /// v1.24, whose kubeadm warns about a bare path ("Usage of CRI endpoints without URL scheme
    /// is deprecated") and prefixes it. Before, the bare path: kubeadm passes the value to the
    /// kubelet as it is and recognises docker only by the exact path `/var/run/dockershim.sock`.
    pub fn kubeadm_cri_socket_is_url(self) -> bool {
        self.at_least(1, 24)
    }

    /// Whether the kubelet has `--pod-infra-container-image` (removed in v1.35; the runtime's
    /// pinned sandbox image takes its place).
    pub fn kubelet_has_pod_infra_image_flag(self) -> bool {
        !self.at_least(1, 35)
    }

    /// Whether the kubelet has `--network-plugin` (dockershim's CNI switch; removed with
    /// dockershim in v1.24). With dockershim the kubelet runs no CNI unless it is `cni`.
    pub fn kubelet_has_network_plugin_flag(self) -> bool {
        self.has_dockershim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().expect("test version")
    }

    /// kubeadm v1beta4 changelog ("extraArgs are now a list of name/value pairs"); v1beta3
    /// changelog (added `patches` and `nodeRegistration.imagePullPolicy`); kubeadm v1.20's
    /// `--experimental-patches` (cmd/kubeadm/app/cmd/options/constant.go of the v1.20.2 source)
    /// and its v1beta2 types (no `patches`, no `imagePullPolicy`).
    #[test]
    fn kubeadm_api_shapes() {
        assert!(!KubeadmApi::V1beta2.extra_args_are_lists());
        assert!(!KubeadmApi::V1beta3.extra_args_are_lists());
        assert!(KubeadmApi::V1beta4.extra_args_are_lists());
        assert!(!KubeadmApi::V1beta2.has_patches_field());
        assert!(KubeadmApi::V1beta3.has_patches_field());
        assert!(!KubeadmApi::V1beta2.has_image_pull_policy());
        assert!(KubeadmApi::V1beta4.has_image_pull_policy());
        assert!(KubeadmApi::V1beta4.has_timeouts());
        assert!(!KubeadmApi::V1beta3.has_timeouts());
    }

    /// KEP-785 implementation history (kubernetes/enhancements
    /// keps/sig-scheduling/785-scheduler-component-config-api): v1beta1 in 1.19 and removed in
    /// 1.23, v1beta2 in 1.22 and removed in 1.28 (kubernetes PR #117649), v1 GA in 1.25.
    #[test]
    fn scheduler_configuration_api_per_version() {
        assert_eq!(
            v("v1.20.2").scheduler_config_api(),
            SchedulerConfigApi::V1beta1
        );
        assert_eq!(
            v("v1.21.14").scheduler_config_api(),
            SchedulerConfigApi::V1beta1
        );
        assert_eq!(
            v("v1.22.0").scheduler_config_api(),
            SchedulerConfigApi::V1beta2
        );
        assert_eq!(
            v("v1.24.17").scheduler_config_api().api_version(),
            "kubescheduler.config.k8s.io/v1beta2"
        );
        assert_eq!(v("v1.25.0").scheduler_config_api(), SchedulerConfigApi::V1);
        assert_eq!(v("v1.36.0").scheduler_config_api(), SchedulerConfigApi::V1);
    }

    /// kubernetes/kubeadm#2207: kubeadm added `--port=0` to both components (PR #92720, all
    /// of v1.16–v1.20); kube-controller-manager lost insecure serving in v1.22 (PR #96216),
    /// kube-scheduler in v1.23 (PR #96345), and kubeadm dropped the flag then (PRs #104157,
    /// #105034).
    #[test]
    fn insecure_ports_per_version() {
        assert!(v("v1.20.2").controller_manager_serves_insecurely());
        assert!(v("v1.21.14").controller_manager_serves_insecurely());
        assert!(!v("v1.22.0").controller_manager_serves_insecurely());
        assert!(v("v1.22.17").scheduler_serves_insecurely());
        assert!(!v("v1.23.0").scheduler_serves_insecurely());
    }

    /// CHANGELOG-1.23 ("registerWithTaints" added to the KubeletConfiguration); the v1.20.2
    /// source's staging/src/k8s.io/kubelet/config/v1beta1/types.go has no such field.
    #[test]
    fn kubelet_register_with_taints_field() {
        assert!(!v("v1.20.2").kubelet_config_has_register_with_taints());
        assert!(!v("v1.22.17").kubelet_config_has_register_with_taints());
        assert!(v("v1.23.0").kubelet_config_has_register_with_taints());
    }

    /// kubeadm v1.20.2 validation (ValidateSocketPath accepts a bare absolute path or unix://)
    /// and flags.go (`criSocket == "/var/run/dockershim.sock"` selects docker); kubeadm v1.24
    /// release notes (a CRI socket without URL scheme is deprecated and gets `unix://`).
    #[test]
    fn cri_socket_spelling_per_version() {
        assert!(!v("v1.20.2").kubeadm_cri_socket_is_url());
        assert!(!v("v1.23.17").kubeadm_cri_socket_is_url());
        assert!(v("v1.24.0").kubeadm_cri_socket_is_url());
    }

    /// The kubelet's flags: `--network-plugin` went with dockershim in v1.24;
    /// `--pod-infra-container-image` was removed in v1.35.
    #[test]
    fn kubelet_flags_per_version() {
        assert!(v("v1.23.17").kubelet_has_network_plugin_flag());
        assert!(!v("v1.24.0").kubelet_has_network_plugin_flag());
        assert!(v("v1.34.0").kubelet_has_pod_infra_image_flag());
        assert!(!v("v1.35.0").kubelet_has_pod_infra_image_flag());
    }
}
