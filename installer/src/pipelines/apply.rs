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
//! * the pod network plugin (`--allow-network-plugin-change`): `network-switch-out` (the old
//!   plugin removed from the cluster and the nodes) right before the network module, which
//!   installs the new one, then `network-switch-pods` (the pods recreated node by node); see
//!   [`crate::modules::network::switch`].

use std::sync::Arc;

use crate::context::InstallContext;
use crate::modules::network::switch::{NetworkSwitchOut, NetworkSwitchPods, PluginChange};
use crate::pipeline::{Module, Pipeline};

/// The `apply` pipeline for the desired cluster, with the pod network plugin's `change`.
pub fn apply_pipeline(ctx: &Arc<InstallContext>, change: Option<PluginChange>) -> Pipeline {
    let mut modules = super::create::install_modules(ctx, &super::create::NewCluster);
    if let Some(change) = change {
        // Around the network module (always in the install's modules; else at the end).
        let at = modules
            .iter()
            .position(|m| m.name() == "network")
            .unwrap_or(modules.len().saturating_sub(1));
        let out: Box<dyn Module> = Box::new(NetworkSwitchOut {
            ctx: ctx.clone(),
            change,
        });
        let pods: Box<dyn Module> = Box::new(NetworkSwitchPods {
            ctx: ctx.clone(),
            change,
        });
        modules.insert(at + 1, pods);
        modules.insert(at, out);
    }
    Pipeline {
        name: "apply".to_string(),
        modules,
    }
}
