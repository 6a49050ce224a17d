//! `etcd add-member` and `etcd remove-member`: a node of the cluster joins or leaves KubeXM's
//! etcd (`etcd.type: kubexm`), one member per command.
//!
//! add-member: `etcd-certificates` (the member's certificates from the kept etcd CA), `etcd-join`
//! (`member add`, etcd with `initial-cluster-state: existing`, started, all healthy), then
//! `apiserver-etcd-servers` (every API server, one master at a time).
//!
//! remove-member: `apiserver-etcd-servers` first (no API server uses the member any more), then
//! `etcd-member-remove` (from a member that stays, checked gone, the rest healthy), then
//! `etcd-retire` on the node (etcd stopped, its data, configuration and unit removed).

use std::sync::Arc;

use super::phase::Phase;
use crate::context::{InstallContext, UnknownNode};
use crate::facts::ClusterFacts;
use crate::modules::etcd::{EtcdLayout, EtcdModule};
use crate::modules::lifecycle::etcd_member::{
    ApiServerEtcdModule, EtcdJoinModule, EtcdLeaveModule, RetireEtcdModule,
};
use crate::pipeline::{Module, Pipeline};

/// The member changing and the cluster before and after.
pub struct EtcdChange<'a> {
    /// The cluster as installed.
    pub installed: &'a Arc<InstallContext>,
    /// The cluster after the change.
    pub desired: &'a Arc<InstallContext>,
    /// The node.
    pub node: &'a str,
    /// The facts gathered.
    pub facts: &'a ClusterFacts,
}

/// The running etcd member a membership change runs etcdctl on: the one that answered the
/// facts, else the first member of `ctx`'s layout — never `except` (the member joining or
/// leaving).
pub fn via(facts: &ClusterFacts, ctx: &InstallContext, except: &str) -> String {
    facts
        .etcd
        .as_ref()
        .map(|e| e.from.clone())
        .filter(|m| m != except)
        .or_else(|| {
            EtcdLayout::from_context(ctx)
                .members
                .iter()
                .map(|m| m.name.clone())
                .find(|m| m != except)
        })
        .unwrap_or_default()
}

fn pipeline(name: &str, phases: Vec<Phase>) -> Pipeline {
    Pipeline {
        name: name.to_string(),
        modules: phases
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn Module>)
            .collect(),
    }
}

/// `etcd add-member`.
pub fn add_member_pipeline(c: &EtcdChange<'_>) -> Result<Pipeline, UnknownNode> {
    let d = c.desired;
    Ok(pipeline(
        "etcd-add-member",
        vec![
            Phase::new("etcd-certificates", EtcdModule(d.clone()))
                .only(&[crate::modules::etcd::ETCD_CERTIFICATES])
                .scope(d.scope(&[c.node])?),
            Phase::new(
                "etcd-join",
                EtcdJoinModule {
                    current: c.installed.clone(),
                    next: d.clone(),
                    member: c.node.to_string(),
                    via: via(c.facts, c.installed, c.node),
                },
            ),
            Phase::new(
                "apiserver-etcd-servers",
                ApiServerEtcdModule { ctx: d.clone() },
            ),
        ],
    ))
}

/// `etcd remove-member`.
pub fn remove_member_pipeline(c: &EtcdChange<'_>) -> Result<Pipeline, UnknownNode> {
    let d = c.desired;
    Ok(pipeline(
        "etcd-remove-member",
        vec![
            Phase::new(
                "apiserver-etcd-servers",
                ApiServerEtcdModule { ctx: d.clone() },
            ),
            Phase::new(
                "etcd-member-remove",
                EtcdLeaveModule {
                    current: c.installed.clone(),
                    next: d.clone(),
                    member: c.node.to_string(),
                    via: via(c.facts, d, c.node),
                },
            ),
            Phase::new(
                "etcd-retire",
                RetireEtcdModule {
                    current: c.installed.clone(),
                    member: c.node.to_string(),
                },
            )
            .skip_if(
                c.facts.unreachable.contains(c.node),
                "the node cannot be reached: etcd stays on it, stopped by its removal",
            ),
        ],
    ))
}
