//! The `kernel-upgrade` pipeline: the nodes' kernels upgraded one node at a time, so that never
//! more than one master or etcd member is down.
//!
//! One phase per node, `kernel-<node>` ([`crate::modules::lifecycle::kernel::KernelNodeModule`]: cordon,
//! drain, the kubelet stopped, the kernel package installed, reboot, `uname -r` and the runtime
//! verified, the kubelet started, uncordon, Ready, then the master's API server and the etcd
//! member healthy), in [`order`]: masters first, then the other etcd members, then the workers,
//! then any other host. Each phase finishes, health checks included, before the next starts; a
//! failure stops the rollout naming the node, the nodes after it untouched. Every finished task
//! is recorded in the pipeline's state file, so `--resume` continues where it stopped.
//!
//! A node already on the newest installed kernel with its package current and no kernel
//! pending (the facts, [`crate::facts::kernel`]) is skipped: a second run changes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use kubexm_manifests::resolve::Role;

use super::phase::Phase;
use crate::context::{InstallContext, UnknownNode};
use crate::facts::kernel::KernelState;
use crate::facts::ClusterFacts;
use crate::modules::lifecycle::kernel::{KernelNodeModule, KernelTarget};
use crate::modules::lifecycle::membership::DrainOptions;
use crate::pipeline::ops::{PackageSource, WaitBounds};
use crate::pipeline::{Module, Node, Pipeline};

/// The pipeline's name (its state file and journal).
pub const NAME: &str = "kernel-upgrade";

/// What to upgrade and what is known.
pub struct KernelUpgrade<'a> {
    /// The cluster.
    pub ctx: &'a Arc<InstallContext>,
    /// The nodes to upgrade (in any order; see [`order`]).
    pub nodes: &'a [String],
    /// Each node's kernel facts.
    pub states: &'a BTreeMap<String, KernelState>,
    /// The cluster's facts (which nodes the API knows).
    pub facts: &'a ClusterFacts,
    /// How nodes are drained.
    pub drain: DrainOptions,
    /// Where the kernel package comes from.
    pub source: PackageSource,
    /// How long a node may take to come back from its reboot
    /// ([`crate::modules::lifecycle::kernel::REBOOT_BOUNDS`]).
    pub reboot: WaitBounds,
}

/// The order nodes are upgraded in: masters, then the other etcd members, then workers, then
/// the rest, each group in cluster.yaml order.
pub fn order(ctx: &InstallContext, nodes: &[String]) -> Vec<String> {
    let rank = |n: &Node| {
        if n.has_role(Role::Master) {
            0
        } else if n.has_role(Role::Etcd) {
            1
        } else if n.has_role(Role::Worker) {
            2
        } else {
            3
        }
    };
    let mut picked: Vec<(usize, usize, &Node)> = ctx
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| nodes.contains(&n.name))
        .map(|(i, n)| (rank(n), i, n))
        .collect();
    picked.sort_by_key(|(r, i, _)| (*r, *i));
    picked.into_iter().map(|(_, _, n)| n.name.clone()).collect()
}

/// Where `node`'s cordon, drain and uncordon run: the first master that is not the node, or
/// the node itself when it is the only master.
pub fn via(ctx: &InstallContext, node: &str) -> String {
    ctx.with_role(Role::Master)
        .into_iter()
        .find(|m| m != node)
        .unwrap_or_else(|| node.to_string())
}

/// Why the pipeline cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum KernelPipelineError {
    /// A node that is not in the cluster.
    #[error(transparent)]
    UnknownNode(#[from] UnknownNode),
    /// No facts for a node.
    #[error("no kernel facts were gathered for {0}")]
    NoFacts(String),
}

/// The `kernel-upgrade` pipeline (see the module documentation).
///
/// # Errors
/// A node not in the cluster, or one without facts.
pub fn kernel_upgrade_pipeline(x: &KernelUpgrade<'_>) -> Result<Pipeline, KernelPipelineError> {
    let ctx = x.ctx;
    for n in x.nodes {
        if ctx.node(n).is_none() {
            return Err(UnknownNode {
                name: n.clone(),
                known: ctx.all().join(", "),
            }
            .into());
        }
    }
    let mut modules: Vec<Box<dyn Module>> = Vec::new();
    for name in order(ctx, x.nodes) {
        let Some(node) = ctx.node(&name).cloned() else {
            continue;
        };
        let state = x
            .states
            .get(&name)
            .ok_or_else(|| KernelPipelineError::NoFacts(name.clone()))?;
        let title = format!("kernel-{name}");
        let target = KernelTarget {
            package: state.package.clone(),
            via: via(ctx, &name),
            registered: x.facts.api(&name).is_some() || x.facts.assumed,
            etcd: KernelTarget::etcd_of(ctx, &node),
            node,
        };
        let module = KernelNodeModule {
            ctx: ctx.clone(),
            target,
            drain: x.drain,
            source: x.source.clone(),
            reboot: x.reboot,
            title: title.clone(),
        };
        modules.push(Box::new(
            Phase::new(title, module).skip_if(state.up_to_date(), state.summary()),
        ));
    }
    Ok(Pipeline {
        name: NAME.to_string(),
        modules,
    })
}
