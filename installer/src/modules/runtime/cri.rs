//! The one place that knows how the kubelet (and crictl, and kubeadm) reach each container
//! runtime: its CRI socket, the systemd units the kubelet must start after, and how a given
//! Kubernetes version wants that said (kubeadm's `criSocket`, the kubelet's flags or its
//! configuration file).
//!
//! | runtime (`runtime.type`) | CRI socket | kubelet after |
//! |---|---|---|
//! | containerd | `/run/containerd/containerd.sock` | `containerd.service` |
//! | docker + cri-dockerd (v1.24+, or `criDockerd: true`) | `/run/cri-dockerd.sock` | `docker.service cri-docker.service` |
//! | docker, dockershim (before v1.24) | `/var/run/dockershim.sock` (served by the kubelet itself) | `docker.service` |
//! | cri-o | `/var/run/crio/crio.sock` | `crio.service` |
//! | iSulad | `/var/run/isulad.sock` | `isulad.service` |
//!
//! Sources: the sockets each runtime's own default configuration and units name (containerd
//! `config.toml` `grpc.address`, cri-dockerd's `cri-docker.socket`, cri-o's `crio.conf`
//! `listen`, iSulad's `daemon.json`), kubeadm's `DefaultDockerCRISocket` (v1.20.2
//! cmd/kubeadm/app/constants/constants_unix.go) and kubespray's kubelet unit (the kubelet
//! starts after and wants its runtime's service).

use kubexm_manifests::model::RuntimeType;
use kubexm_manifests::version::KubeVersion;

use crate::context::InstallContext;

/// How the kubelet talks to the node's container runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cri {
    /// containerd's CRI plugin.
    Containerd,
    /// docker through cri-dockerd.
    CriDockerd,
    /// docker through the kubelet's built-in dockershim (Kubernetes before v1.24).
    Dockershim,
    /// cri-o.
    CriO,
    /// iSulad.
    Isulad,
}

/// dockershim's socket, exactly as kubeadm before v1.24 compares it to recognise docker.
pub const DOCKERSHIM_SOCKET: &str = "/var/run/dockershim.sock";

impl Cri {
    /// The CRI of `runtime` for Kubernetes `version`: docker goes through cri-dockerd from
    /// v1.24 (no dockershim) or when `criDockerd: true`, else through dockershim.
    pub fn new(runtime: RuntimeType, cri_dockerd: Option<bool>, version: KubeVersion) -> Self {
        match runtime {
            RuntimeType::Containerd => Cri::Containerd,
            RuntimeType::Docker if !version.has_dockershim() || cri_dockerd == Some(true) => {
                Cri::CriDockerd
            }
            RuntimeType::Docker => Cri::Dockershim,
            RuntimeType::CriO => Cri::CriO,
            RuntimeType::Isulad => Cri::Isulad,
        }
    }

    /// The cluster's CRI (as [`super::Runtime::cri`] gives it).
    pub fn of(ctx: &InstallContext) -> Self {
        let r = &ctx.cluster.file.spec.runtime;
        Self::new(r.kind, r.cri_dockerd, ctx.cluster.version)
    }

    /// The socket path.
    pub fn socket(self) -> &'static str {
        match self {
            Cri::Containerd => "/run/containerd/containerd.sock",
            Cri::CriDockerd => "/run/cri-dockerd.sock",
            Cri::Dockershim => DOCKERSHIM_SOCKET,
            Cri::CriO => "/var/run/crio/crio.sock",
            Cri::Isulad => "/var/run/isulad.sock",
        }
    }

    /// The endpoint as a URL (`unix:///run/containerd/containerd.sock`): what crictl, the
    /// kubelet's `--container-runtime-endpoint` and its `containerRuntimeEndpoint` take.
    pub fn endpoint(self) -> String {
        format!("unix://{}", self.socket())
    }

    /// kubeadm's `nodeRegistration.criSocket` for `version`: the URL from v1.24, the bare path
    /// before (kubeadm then hands it to the kubelet unchanged and recognises dockershim only by
    /// its exact path).
    pub fn kubeadm_cri_socket(self, version: KubeVersion) -> String {
        if version.kubeadm_cri_socket_is_url() {
            self.endpoint()
        } else {
            self.socket().to_string()
        }
    }

    /// The systemd units the kubelet starts after (and wants): the runtime's services.
    pub fn kubelet_after(self) -> &'static [&'static str] {
        match self {
            Cri::Containerd => &["containerd.service"],
            Cri::CriDockerd => &["docker.service", "cri-docker.service"],
            Cri::Dockershim => &["docker.service"],
            Cri::CriO => &["crio.service"],
            Cri::Isulad => &["isulad.service"],
        }
    }

    /// The kubelet's runtime flags for `version` when KubeXM runs the kubelet itself
    /// (`kubernetes.type: kubexm`): before v1.24 a CRI runtime needs `--container-runtime=remote`
    /// and the endpoint, dockershim needs `--network-plugin=cni` (else it runs no CNI); v1.24 →
    /// v1.26 take the endpoint as a flag only; from v1.27 it goes into the configuration file
    /// ([`Self::kubelet_config_endpoint`]).
    pub fn kubelet_flags(self, version: KubeVersion) -> Vec<(&'static str, String)> {
        if self == Cri::Dockershim {
            return if version.kubelet_has_network_plugin_flag() {
                vec![("network-plugin", "cni".to_string())]
            } else {
                Vec::new()
            };
        }
        let mut flags = Vec::new();
        if version.kubelet_needs_remote_runtime_flag() {
            flags.push(("container-runtime", "remote".to_string()));
        }
        if !version.kubelet_config_has_runtime_endpoint() {
            flags.push(("container-runtime-endpoint", self.endpoint()));
        }
        flags
    }

    /// `containerRuntimeEndpoint` of the kubelet's configuration file, from v1.27 (`None`
    /// before, and for dockershim).
    pub fn kubelet_config_endpoint(self, version: KubeVersion) -> Option<String> {
        (self != Cri::Dockershim && version.kubelet_config_has_runtime_endpoint())
            .then(|| self.endpoint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().expect("version")
    }

    #[test]
    fn docker_uses_dockershim_before_1_24_unless_cri_dockerd_is_asked_for() {
        assert_eq!(
            Cri::new(RuntimeType::Docker, None, v("v1.23.17")),
            Cri::Dockershim
        );
        assert_eq!(
            Cri::new(RuntimeType::Docker, Some(true), v("v1.23.17")),
            Cri::CriDockerd
        );
        assert_eq!(
            Cri::new(RuntimeType::Docker, None, v("v1.24.0")),
            Cri::CriDockerd
        );
    }

    #[test]
    fn kubeadm_cri_socket_is_a_path_before_1_24_and_a_url_after() {
        assert_eq!(
            Cri::Containerd.kubeadm_cri_socket(v("v1.20.2")),
            "/run/containerd/containerd.sock"
        );
        assert_eq!(
            Cri::Dockershim.kubeadm_cri_socket(v("v1.23.17")),
            "/var/run/dockershim.sock"
        );
        assert_eq!(
            Cri::CriO.kubeadm_cri_socket(v("v1.31.0")),
            "unix:///var/run/crio/crio.sock"
        );
        assert_eq!(
            Cri::CriDockerd.kubeadm_cri_socket(v("v1.24.0")),
            "unix:///run/cri-dockerd.sock"
        );
    }

    #[test]
    fn kubelet_runtime_flags_per_version() {
        assert_eq!(
            Cri::Containerd.kubelet_flags(v("v1.20.2")),
            [
                ("container-runtime", "remote".to_string()),
                (
                    "container-runtime-endpoint",
                    "unix:///run/containerd/containerd.sock".to_string()
                )
            ]
        );
        assert_eq!(
            Cri::Dockershim.kubelet_flags(v("v1.23.17")),
            [("network-plugin", "cni".to_string())]
        );
        assert_eq!(
            Cri::Isulad.kubelet_flags(v("v1.25.16")),
            [(
                "container-runtime-endpoint",
                "unix:///var/run/isulad.sock".to_string()
            )]
        );
        assert!(Cri::Containerd.kubelet_flags(v("v1.27.0")).is_empty());
        assert_eq!(Cri::Containerd.kubelet_config_endpoint(v("v1.26.15")), None);
        assert_eq!(
            Cri::Containerd
                .kubelet_config_endpoint(v("v1.27.0"))
                .as_deref(),
            Some("unix:///run/containerd/containerd.sock")
        );
    }

    #[test]
    fn kubelet_follows_the_runtime_units() {
        assert_eq!(
            Cri::CriDockerd.kubelet_after(),
            ["docker.service", "cri-docker.service"]
        );
        assert_eq!(Cri::Isulad.kubelet_after(), ["isulad.service"]);
    }
}
