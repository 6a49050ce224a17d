//! The `upgrade` pipeline: the cluster from one Kubernetes version to the next, for one step of
//! the upgrade path (`upgrade-<version>`; a path of several minors runs one pipeline per
//! version, each recorded before the next starts).
//!
//! Phases, in order, each finishing before the next starts:
//!
//! 1. `registry-images` (when KubeXM runs the registry): the new bundle's images seeded, so
//!    every node can pull the new version before anything changes.
//! 2. `etcd-<member>` (`etcd.type: kubexm`, only when the new bundle's etcd differs): one
//!    member at a time, its binary replaced and the member restarted, the whole cluster
//!    healthy before the next ([`crate::modules::etcd`]).
//! 3. `control-plane-<master>`, one master at a time, the first master first
//!    ([`crate::modules::lifecycle::upgrade`]): drained, upgraded (kubeadm `upgrade apply` on the first,
//!    `upgrade node` on the others; kubexm: the new binaries and units, each service restarted
//!    onto them and answering), its kubelet too, uncordoned, its API server and etcd healthy.
//! 4. `runtime-<node>` (only when the new bundle's container runtime differs): the runtime's
//!    files and service, one node at a time, before the node's own phase.
//! 5. `workers-<n>`: the workers that are not masters, `batch` at a time: drained, kubelet
//!    (kubeadm: `upgrade node`) and kube-proxy, uncordoned, Ready at the new version.
//! 6. `network`, `node-local-dns`, `coredns` (kubexm), `plugins`, `addons`: the CNI and the
//!    add-ons of the new bundle, last.
//!
//! Refused before anything runs: a change of kube-proxy's mode ([`proxy_mode_change`]; the
//! default moved from ipvs to iptables at v1.35, so an unset `proxyMode` would change it).
//!
//! Every finished task is recorded in the pipeline's state file (`--resume`), so a failure
//! stops the rollout naming the node, the nodes after it untouched, and a resumed run starts
//! at the node that failed.

use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, KubernetesType};
use kubexm_manifests::resolve::Role;

use super::phase::Phase;
use crate::context::{InstallContext, Scope};
use crate::facts::ClusterFacts;
use crate::modules::lifecycle::kernel::KernelTarget;
use crate::modules::lifecycle::membership::DrainOptions;
use crate::modules::lifecycle::upgrade::{EtcdMemberModule, UpgradeNode, UpgradeNodesModule};
use crate::modules::{addons, dns, etcd, kubexm, network, plugins, registry, runtime};
use crate::pipeline::{Module, Pipeline};

/// The pipeline's name for `version` (its state file and journal).
pub fn name(version: &kubexm_manifests::version::KubeVersion) -> String {
    format!("upgrade-{version}")
}

/// What one upgrade step needs.
pub struct Upgrade<'a> {
    /// The installed cluster (its bundle).
    pub installed: &'a Arc<InstallContext>,
    /// The target version's cluster (its bundle).
    pub target: &'a Arc<InstallContext>,
    /// The cluster's facts (which nodes the API knows).
    pub facts: &'a ClusterFacts,
    /// How nodes are drained.
    pub drain: DrainOptions,
    /// How many workers change at once (at least 1).
    pub batch: usize,
}

/// The version of `component` that `ctx`'s cluster.yaml resolves to, else (no resolution) its
/// bundle's first file of it, if either has one.
pub fn bundled_version(ctx: &InstallContext, component: &str) -> Option<String> {
    // The resolution first: a bundle built for an upgrade path holds several versions.
    match (&ctx.resolution, &ctx.bundle) {
        (Some(r), _) => r
            .binaries
            .iter()
            .find(|f| f.name == component)
            .map(|f| f.version.clone()),
        (None, Some(b)) => b
            .manifest
            .files
            .iter()
            .find(|f| f.name == component)
            .map(|f| f.version.clone()),
        (None, None) => None,
    }
}

/// Why a component's phase is skipped: its version is the same in both bundles.
fn unchanged(x: &Upgrade<'_>, component: &str, what: &str) -> Option<String> {
    let old = bundled_version(x.installed, component);
    let new = bundled_version(x.target, component);
    (old == new).then(|| {
        format!(
            "{what} stays at {}",
            new.as_deref().unwrap_or("the installed version")
        )
    })
}

/// Where `nodes`' cordon, drain and uncordon run: the first master outside them, else the
/// first master.
fn via(ctx: &InstallContext, nodes: &[String]) -> String {
    let masters = ctx.with_role(Role::Master);
    masters
        .iter()
        .find(|m| !nodes.contains(m))
        .or(masters.first())
        .cloned()
        .unwrap_or_default()
}

/// The `upgrade-<version>` pipeline (see the module documentation).
///
/// # Errors
/// A cluster without a master.
pub fn upgrade_pipeline(x: &Upgrade<'_>) -> Result<Pipeline, crate::pipeline::StepError> {
    let ctx = x.target;
    if let Some(refusal) = proxy_mode_change(x.installed, ctx) {
        return Err(crate::pipeline::StepError::Invalid(refusal));
    }
    let first = ctx.first_master()?.name.clone();
    let group = |names: Vec<String>, title: String| {
        let nodes = names
            .iter()
            .filter_map(|n| ctx.node(n).cloned())
            .map(|node| UpgradeNode {
                registered: x.facts.api(&node.name).is_some() || x.facts.assumed,
                etcd: KernelTarget::etcd_of(ctx, &node),
                node,
            })
            .collect();
        UpgradeNodesModule {
            ctx: ctx.clone(),
            via: via(ctx, &names),
            first: first.clone(),
            nodes,
            drain: x.drain,
            title,
        }
    };
    let mut modules: Vec<Box<dyn Module>> = Vec::new();
    modules.push(Box::new(
        Phase::new("registry-images", registry::RegistryModule(ctx.clone()))
            .only(&[registry::SEED_REGISTRY]),
    ));
    if ctx.cluster.file.spec.etcd.kind == EtcdType::Kubexm {
        let why = unchanged(x, "etcd", "etcd");
        for m in etcd::EtcdLayout::from_context(ctx).members {
            let title = format!("etcd-{}", m.name);
            modules.push(Box::new(
                Phase::new(
                    title.clone(),
                    EtcdMemberModule {
                        ctx: ctx.clone(),
                        member: m.name.clone(),
                        title,
                    },
                )
                .skip_if(why.is_some(), why.clone().unwrap_or_default()),
            ));
        }
    }
    let runtime_why = unchanged(x, runtime_component(ctx), "the container runtime");
    let masters = ctx.with_role(Role::Master);
    for m in &masters {
        modules.push(Box::new(
            Phase::new(format!("runtime-{m}"), runtime::RuntimeModule(ctx.clone()))
                .scope(Scope::Nodes([m.clone()].into()))
                .one_at_a_time()
                .skip_if(
                    runtime_why.is_some(),
                    runtime_why.clone().unwrap_or_default(),
                ),
        ));
        modules.push(Box::new(group(
            vec![m.clone()],
            format!("control-plane-{m}"),
        )));
    }
    let workers = ctx.workers_only();
    for (i, batch) in workers.chunks(x.batch.max(1)).enumerate() {
        if runtime_why.is_none() {
            modules.push(Box::new(
                Phase::new(
                    format!("runtime-workers-{}", i + 1),
                    runtime::RuntimeModule(ctx.clone()),
                )
                .scope(Scope::Nodes(batch.iter().cloned().collect())),
            ));
        }
        modules.push(Box::new(group(
            batch.to_vec(),
            format!("workers-{}", i + 1),
        )));
    }
    modules.push(Box::new(Phase::new(
        "network",
        network::NetworkModule(ctx.clone()),
    )));
    modules.push(Box::new(Phase::new(
        "node-local-dns",
        dns::NodeLocalDnsModule(ctx.clone()),
    )));
    if ctx.cluster.file.spec.kubernetes.kind == KubernetesType::Kubexm {
        modules.push(Box::new(Phase::new(
            "coredns",
            kubexm::coredns::CoreDnsModule(ctx.clone()),
        )));
    }
    modules.push(Box::new(Phase::new(
        "plugins",
        plugins::PluginsModule(ctx.clone()),
    )));
    modules.push(Box::new(Phase::new(
        "addons",
        addons::AddonsModule(ctx.clone()),
    )));
    Ok(Pipeline {
        name: name(&ctx.cluster.version),
        modules,
    })
}

/// Why the upgrade is refused when kube-proxy's mode would change with it: the default mode
/// moved from ipvs to iptables at v1.35 ([`KubeVersion::default_proxy_mode`]), and an upgrade
/// does not switch modes (the kubexm path would render the new mode over the old one's rules,
/// with no cleanup; on the kubeadm path `kubeadm upgrade` keeps the cluster's kube-proxy
/// ConfigMap, so the new mode would only be recorded as applied). `None` when it stays.
///
/// [`KubeVersion::default_proxy_mode`]: kubexm_manifests::version::KubeVersion::default_proxy_mode
pub fn proxy_mode_change(installed: &InstallContext, target: &InstallContext) -> Option<String> {
    let (was, will) = (installed.cluster.proxy_mode(), target.cluster.proxy_mode());
    if was == will {
        return None;
    }
    let why = |c: &InstallContext| {
        if c.cluster.file.spec.kubernetes.proxy_mode.is_some() {
            "set in cluster.yaml".to_string()
        } else {
            format!(
                "spec.kubernetes.proxyMode is unset: KubeXM's default for {}",
                c.cluster.version
            )
        }
    };
    Some(format!(
        "kube-proxy runs in {was} mode ({}), and {} would run it in {will} mode ({}): an upgrade keeps kube-proxy's mode and nothing was changed; set spec.kubernetes.proxyMode: {was} in cluster.yaml and `kubexm-install apply` it before the upgrade (the mode it runs: nothing changes on the nodes), then upgrade; change the mode afterwards with `kubexm-install apply` if you want {will}",
        why(installed),
        target.cluster.version,
        why(target),
        was = was.as_str(),
        will = will.as_str(),
    ))
}

/// The catalog component of the cluster's container runtime.
fn runtime_component(ctx: &InstallContext) -> &'static str {
    use kubexm_manifests::model::RuntimeType;
    match ctx.cluster.file.spec.runtime.kind {
        RuntimeType::Containerd => "containerd",
        RuntimeType::Docker => "docker",
        RuntimeType::CriO => "cri-o",
        RuntimeType::Isulad => "isulad",
    }
}
