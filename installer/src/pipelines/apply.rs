//! The `apply` pipeline: the settings of an edited cluster.yaml applied to the installed
//! cluster, after [`crate::apply_change::classify`] accepted every difference. It is the create
//! pipeline's modules again over every node of the cluster, each converging what changed and
//! finding nothing to do elsewhere:
//!
//! * control plane (`featureGates`, component flags, the API server's SANs): kubexm path, each
//!   master's units one master at a time, its API server answering `/readyz` before the next;
//!   kubeadm path, `kubeadm-reconfigure` one master at a time.
//! * kubelet (`featureGates`, flags, configuration): kubexm path, its configuration rewritten
//!   and the service restarted; kubeadm path, `kubelet-settings` one node at a time, masters
//!   first.
//! * kube-proxy (mode, flags, configuration): kubexm path, its configuration and service;
//!   kubeadm path, `kube-proxy-settings` (kube-proxy's ConfigMap and DaemonSet, then a rolling
//!   restart).
//! * node preparation, the load balancer, the pod network's options and the extras: their
//!   modules' managed files and manifests, as a re-run of the install changes them.

use std::sync::Arc;

use crate::context::InstallContext;
use crate::pipeline::Pipeline;

/// The `apply` pipeline for the desired cluster.
pub fn apply_pipeline(ctx: &Arc<InstallContext>) -> Pipeline {
    Pipeline {
        name: "apply".to_string(),
        modules: super::create::install_modules(ctx, None),
    }
}
