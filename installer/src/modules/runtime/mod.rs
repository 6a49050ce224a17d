//! Module: the container runtime on every master and worker, from the bundle — containerd
//! ([`containerd`]), docker with cri-dockerd ([`docker`]), cri-o ([`crio`]) or iSulad
//! ([`isulad`]), per `runtime.type`. [`Runtime`] is the one place that knows each runtime's
//! CRI socket, unit, registry CA directory, install and delete; other modules ask it.
//!
//! What every runtime shares (this file):
//! * Bundle files go to `/var/lib/kubexm/artifacts/<name>/<version>/<file>` (sha256-checked,
//!   skipped when present); archives are extracted into `/var/lib/kubexm/extract/<name>-<version>`
//!   and the binaries copied into place.
//! * The CNI plugins go to `/opt/cni/bin`, crictl to `/usr/local/bin` with `/etc/crictl.yaml`
//!   pointing at the runtime's CRI socket.
//! * The runtime uses the systemd cgroup driver and the pause image from the private registry
//!   as sandbox image; the private registry's CA is put where the runtime reads it by the
//!   registry module ([`registry_ca_path`]); the pause image is pulled once the runtime is up.
//! * When the runtime's data directory was absent or empty at install time a marker under
//!   `/etc/kubexm` says so, and `delete` removes the data; data that was there before is kept.

pub mod containerd;
pub mod cri;
pub mod crio;
pub mod docker;
pub mod isulad;
mod kind;

mod common;
pub use common::*;
pub use kind::Runtime;

use std::sync::Arc;

use kubexm_manifests::model::RuntimeType;

use crate::context::InstallContext;
use crate::pipeline::{Module, StepError, Task};

/// The container runtime.
pub struct RuntimeModule(pub Arc<InstallContext>);

impl Module for RuntimeModule {
    fn name(&self) -> &str {
        "runtime"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Runtime::of(&self.0).tasks(&self.0)
    }
}

/// The runtime part of the `delete` pipeline, on every master and worker (run after the
/// Kubernetes delete module has removed the pods): the runtime's services stopped and disabled
/// (when their units are KubeXM's), what KubeXM installed removed (binaries, units,
/// configuration, the private registry's CA and credentials), the CNI plugins KubeXM copied,
/// the runtime's data when KubeXM created it, and the staging files. Each runtime's file says
/// exactly which paths.
pub struct RuntimeDeleteModule(pub Arc<InstallContext>);

/// The runtime delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> RuntimeDeleteModule {
    RuntimeDeleteModule(ctx.clone())
}

impl Module for RuntimeDeleteModule {
    fn name(&self) -> &str {
        "delete-runtime"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Runtime::of(&self.0).delete_tasks(&self.0)
    }
}

/// Where `kind` reads the CA of the private registry `endpoint` (`host[:port]`); the registry
/// module uploads it there on every node.
pub fn registry_ca_path(kind: RuntimeType, endpoint: &str) -> String {
    Runtime::new(kind).registry_ca_path(endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_runtime_reads_the_registry_ca_from_its_own_directory() {
        let ep = "reg.local:5000";
        assert_eq!(
            registry_ca_path(RuntimeType::Containerd, ep),
            "/etc/containerd/certs.d/reg.local:5000/ca.crt"
        );
        assert_eq!(
            registry_ca_path(RuntimeType::Docker, ep),
            "/etc/docker/certs.d/reg.local:5000/ca.crt"
        );
        assert_eq!(
            registry_ca_path(RuntimeType::CriO, ep),
            "/etc/containers/certs.d/reg.local:5000/ca.crt"
        );
        assert_eq!(
            registry_ca_path(RuntimeType::Isulad, ep),
            "/etc/isulad/certs.d/reg.local:5000/ca.crt"
        );
    }
}
