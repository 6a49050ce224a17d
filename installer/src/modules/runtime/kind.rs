//! [`Runtime`]: one type that knows, for the configured `runtime.type`, its CRI socket, the
//! systemd unit that serves it, where it reads registry CAs, and how it is installed and deleted
//! (each runtime's own file). Other modules ask it instead of matching on `RuntimeType`.

use std::sync::Arc;

use kubexm_manifests::model::RuntimeType;

use super::{containerd, crio, docker, isulad};
use crate::context::InstallContext;
use crate::pipeline::{StepError, Task};

/// A container runtime and its facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runtime {
    kind: RuntimeType,
}

impl Runtime {
    /// The runtime of this `runtime.type`.
    pub fn new(kind: RuntimeType) -> Self {
        Self { kind }
    }

    /// The cluster's runtime (`spec.runtime.type`).
    pub fn of(ctx: &InstallContext) -> Self {
        Self::new(ctx.cluster.file.spec.runtime.kind)
    }

    /// Its `runtime.type`.
    pub fn kind(self) -> RuntimeType {
        self.kind
    }

    /// The CRI socket kubelet and crictl talk to (cri-dockerd's for docker).
    pub fn cri_socket(self) -> &'static str {
        match self.kind {
            RuntimeType::Containerd => containerd::SOCKET,
            RuntimeType::Docker => docker::CRI_SOCKET,
            RuntimeType::CriO => crio::SOCKET,
            RuntimeType::Isulad => isulad::SOCKET,
        }
    }

    /// The systemd unit serving the CRI socket (kubelet starts after it).
    pub fn cri_unit(self) -> &'static str {
        match self.kind {
            RuntimeType::Containerd => "containerd.service",
            RuntimeType::Docker => "cri-docker.service",
            RuntimeType::CriO => "crio.service",
            RuntimeType::Isulad => "isulad.service",
        }
    }

    /// The directory under which it reads per-registry CAs (`<dir>/<host[:port]>/ca.crt`).
    pub fn certs_dir(self) -> &'static str {
        match self.kind {
            RuntimeType::Containerd => containerd::CERTS_DIR,
            RuntimeType::Docker => docker::CERTS_DIR,
            RuntimeType::CriO => crio::CERTS_DIR,
            RuntimeType::Isulad => isulad::CERTS_DIR,
        }
    }

    /// Where it reads the CA of the private registry `endpoint` (`host[:port]`).
    pub fn registry_ca_path(self, endpoint: &str) -> String {
        format!("{}/{endpoint}/ca.crt", self.certs_dir())
    }

    /// The install tasks (binaries, configuration, services, pause image) on every master and
    /// worker.
    pub fn tasks(self, ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
        match self.kind {
            RuntimeType::Containerd => containerd::tasks(ctx),
            RuntimeType::Docker => docker::tasks(ctx),
            RuntimeType::CriO => crio::tasks(ctx),
            RuntimeType::Isulad => isulad::tasks(ctx),
        }
    }

    /// The delete tasks: what [`Runtime::tasks`] installed, removed.
    pub fn delete_tasks(self, ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
        match self.kind {
            RuntimeType::Containerd => containerd::delete_tasks(ctx),
            RuntimeType::Docker => docker::delete_tasks(ctx),
            RuntimeType::CriO => crio::delete_tasks(ctx),
            RuntimeType::Isulad => isulad::delete_tasks(ctx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_runtime_knows_its_socket_unit_and_ca_path() {
        let want = [
            (
                RuntimeType::Containerd,
                "unix:///run/containerd/containerd.sock",
                "containerd.service",
                "/etc/containerd/certs.d/r:5000/ca.crt",
            ),
            (
                RuntimeType::Docker,
                "unix:///run/cri-dockerd.sock",
                "cri-docker.service",
                "/etc/docker/certs.d/r:5000/ca.crt",
            ),
            (
                RuntimeType::CriO,
                "unix:///var/run/crio/crio.sock",
                "crio.service",
                "/etc/containers/certs.d/r:5000/ca.crt",
            ),
            (
                RuntimeType::Isulad,
                "unix:///var/run/isulad.sock",
                "isulad.service",
                "/etc/isulad/certs.d/r:5000/ca.crt",
            ),
        ];
        for (kind, socket, unit, ca) in want {
            let r = Runtime::new(kind);
            assert_eq!(r.kind(), kind);
            assert_eq!(r.cri_socket(), socket, "{kind:?}");
            assert_eq!(r.cri_unit(), unit, "{kind:?}");
            assert_eq!(r.registry_ca_path("r:5000"), ca, "{kind:?}");
        }
    }
}
