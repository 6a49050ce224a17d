//! Module: the pod network (CNI), from the first master, for both installation paths (it needs
//! only `/etc/kubernetes/admin.conf` and `kubectl` on the masters).
//!
//! **Design**: the plugins' own upstream files are bundled (catalog components
//! `flannel-manifest`, `calico-chart`, `cilium-chart`, `kube-ovn-chart`, `hybridnet-chart`,
//! resolved for `network.plugin`) and
//! KubeXM only sets what the cluster decides: the pod CIDR, the encapsulation mode and MTU, and
//! every image's location (the private registry). Writing KubeXM's own CNI manifests instead
//! was rejected: calico and cilium ship dozens of CRDs and RBAC rules that change every
//! release, and a hand-written copy would drift from what the plugin's version expects.
//!
//! * **flannel**: the release's `kube-flannel.yml`, rendered here — `net-conf.json`'s `Network`
//!   set to the pod CIDR (and `IPv6Network` for dual-stack), the backend type to
//!   `network.flannel.mode`, every `image:` rewritten to where nodes pull it — and applied with
//!   `kubectl apply --server-side`.
//! * **calico**: the release's `tigera-operator` Helm chart, installed with the bundle's helm and
//!   a values file from `templates/cni/calico-values.yaml.tera` (IP pool = pod CIDR, IPIP /
//!   VXLAN / no encapsulation from `network.calico.mode`, the operator's and calico's images
//!   from the private registry).
//! * **cilium**: the cilium Helm chart with `templates/cni/cilium-values.yaml.tera` (cluster-pool
//!   IPAM over the pod CIDR, the API endpoint, every image from the private registry).
//! * **kube-ovn**: the masters labelled `kube-ovn/role=master`, then kube-ovn's Helm chart with
//!   `templates/cni/kube-ovn-values.yaml.tera` (IP stack, pod CIDR and gateway, service and join
//!   CIDRs, tunnel type, the masters' addresses, images from the private registry); see
//!   [`kube_ovn`].
//! * **hybridnet**: hybridnet's Helm chart with `templates/cni/hybridnet-values.yaml.tera` (the
//!   init overlay subnet over the pod CIDR, the default network type, the image from the
//!   private registry); see [`hybridnet`].
//!
//! * **multus** (`network.plugin: multus`, `network.multus.delegate`): the delegate installed
//!   exactly as above, then multus's thin plugin from KubeXM's own manifest
//!   (`templates/cni/multus.yaml.tera`, see [`multus`]); with cilium as the delegate its chart
//!   is told not to own `/etc/cni/net.d` alone (`cni.exclusive: false`), or it would remove
//!   multus's configuration.
//!
//! Then every master and worker must report Ready (and with multus, its DaemonSet must have
//! rolled out).
//!
//! **`network.plugin: none`** (bring your own CNI): the module is skipped, nothing of a CNI is
//! installed or awaited, and the nodes stay `NotReady` (pods other than host-network ones stay
//! `Pending`/`ContainerCreating`) until a CNI is installed — by the operator afterwards, or by a
//! `system.postInstall` script that runs on every node after the last module
//! ([`crate::modules::scripts`]). The CNI plugin binaries of `/opt/cni/bin` (bridge,
//! host-local, …) are still installed with the runtime.

mod calico;
mod cilium;
mod common;
mod flannel;
pub mod hybridnet;
pub mod kube_ovn;
pub mod multus;
pub mod switch;
pub mod traces;

use kubexm_manifests::resolve::Role;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::Plugin;
use kubexm_manifests::resolve::network_file;

use super::apply::HelmBinary;
use crate::context::InstallContext;
use crate::modules::k8s::kubectl;
use crate::pipeline::ops::{Op, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

pub use calico::Calico;
pub use cilium::Cilium;
pub use common::{primary_plugin, rewrite_images, split_image, ImageLocation};
pub use flannel::{render_flannel, Flannel};
pub use hybridnet::{render_hybridnet_values, Hybridnet};
pub use kube_ovn::{render_kube_ovn_values, KubeOvn, KubeOvnMasters, MASTER_LABEL};
pub use multus::{render_multus, Multus, MultusReady};

/// The pod network module.
pub struct NetworkModule(pub Arc<InstallContext>);

impl Module for NetworkModule {
    fn name(&self) -> &str {
        "network"
    }

    fn skip(&self) -> Option<String> {
        let p = self.0.cluster.file.spec.network.plugin;
        if p == Plugin::None {
            return Some(
                "network.plugin none: bring your own CNI (nodes stay NotReady until one is installed, e.g. by a system.postInstall script)"
                    .to_string(),
            );
        }
        let primary = primary_plugin(&self.0.cluster.file.spec.network);
        (!implemented(primary)).then(|| {
            let what = if p == Plugin::Multus {
                format!("multus's delegate {}", primary.as_str())
            } else {
                format!("network.plugin {}", p.as_str())
            };
            format!(
                "{what}: this build installs calico, flannel, cilium, kube-ovn and hybridnet (alone or under multus); the {} module is not implemented yet",
                primary.as_str()
            )
        })
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let first = ctx.first_master()?.name.clone();
        let net = &ctx.cluster.file.spec.network;
        let primary = primary_plugin(net);
        let mut task = Task::new("pod-network", [first.clone()]);
        task = match primary {
            Plugin::Flannel => task.step(Flannel::new(ctx)?),
            Plugin::Calico => task
                .step(HelmBinary { ctx: ctx.clone() })
                .step(Calico::new(ctx)?),
            Plugin::Cilium => task
                .step(HelmBinary { ctx: ctx.clone() })
                .step(Cilium::new(ctx)?),
            Plugin::KubeOvn => task
                .step(HelmBinary { ctx: ctx.clone() })
                .step(KubeOvnMasters::new(ctx))
                .step(KubeOvn::new(ctx)?),
            Plugin::Hybridnet => task
                .step(HelmBinary { ctx: ctx.clone() })
                .step(Hybridnet::new(ctx)?),
            other => {
                return Err(StepError::Invalid(format!(
                    "network.plugin {} is not implemented",
                    other.as_str()
                )))
            }
        };
        if net.plugin == Plugin::Multus {
            task = task.step(Multus::new(ctx)?);
        }
        let nodes: Vec<String> = ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
            .map(|n| n.name.clone())
            .collect();
        let mut ready = Task::new("nodes-ready", [first]).step(NodesReady { nodes });
        if net.plugin == Plugin::Multus {
            ready = ready.step(MultusReady);
        }
        Ok(vec![task, ready])
    }
}

/// Whether this build installs `plugin` as the default network.
fn implemented(plugin: Plugin) -> bool {
    network_file(plugin).is_some()
}

/// Waits until every master and worker reports Ready (the pod network is up).
pub struct NodesReady {
    nodes: Vec<String>,
}

impl Step for NodesReady {
    fn name(&self) -> &str {
        "nodes-ready"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| shell::quote(&format!("node/{n}")))
            .collect();
        Ok(vec![Op::Wait(WaitFor {
            what: format!("{} node(s) Ready", self.nodes.len()),
            check: format!(
                "{} wait --for=condition=Ready {} --timeout=10s >/dev/null",
                kubectl(),
                nodes.join(" ")
            ),
            timeout: Duration::from_secs(600),
            interval: Duration::from_secs(3),
        })])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(660),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}
