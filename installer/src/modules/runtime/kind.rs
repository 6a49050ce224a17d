//! [`Runtime`]: one type that knows, for the configured `runtime.type`, where it reads registry
//! CAs and how it is installed and deleted (each runtime's own file), and gives the [`Cri`] —
//! its CRI socket and units, which also depend on the Kubernetes version. Other modules ask it
//! instead of matching on `RuntimeType`.

use std::sync::Arc;

use kubexm_manifests::model::RuntimeType;

use super::cri::Cri;
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

    /// How the kubelet, crictl and kubeadm reach it for the cluster's Kubernetes version (its
    /// CRI socket, the units the kubelet starts after, the per-version spelling): see
    /// [`Cri`]. docker goes through cri-dockerd from v1.24, through the kubelet's dockershim
    /// before.
    pub fn cri(self, ctx: &InstallContext) -> Cri {
        let r = &ctx.cluster.file.spec.runtime;
        Cri::new(self.kind, r.cri_dockerd, ctx.cluster.version)
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
    fn every_runtime_knows_its_ca_path() {
        let want = [
            (
                RuntimeType::Containerd,
                "/etc/containerd/certs.d/r:5000/ca.crt",
            ),
            (RuntimeType::Docker, "/etc/docker/certs.d/r:5000/ca.crt"),
            (RuntimeType::CriO, "/etc/containers/certs.d/r:5000/ca.crt"),
            (RuntimeType::Isulad, "/etc/isulad/certs.d/r:5000/ca.crt"),
        ];
        for (kind, ca) in want {
            let r = Runtime::new(kind);
            assert_eq!(r.kind(), kind);
            assert_eq!(r.registry_ca_path("r:5000"), ca, "{kind:?}");
        }
    }
}
