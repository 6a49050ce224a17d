//! The `delete-node` pipeline: one node leaves a running cluster.
//!
//! 1. `drain` — cordon, then drain through the eviction API (PodDisruptionBudgets respected;
//!    `--force-drain` bypasses them), from the first master that stays. Skipped when the node
//!    is not registered, or with `--unreachable` (its pods go with its Node object).
//! 2. `loadbalancer` / `local-api-proxies` — a master leaves every load balancer's backends
//!    (reloaded one node at a time) and every worker's local API proxy; a load-balancer node
//!    leaves the others' keepalived peers.
//! 3. `kubexm-certs` (kubexm path, a master) — the API server certificate re-issued without the
//!    master's addresses, one master at a time.
//! 4. `apiserver-etcd-servers` then `etcd-member-remove` (kubexm etcd, a member) — every API
//!    server stops using the member, one master at a time; then `etcdctl member remove` from a
//!    member that stays, checked gone, the rest healthy.
//! 5. The node cleaned by the delete pipeline's own modules scoped to it (`delete-kubeadm` runs
//!    `kubeadm reset`, which also removes a stacked etcd member; runtime, registry trust, load
//!    balancer, etcd, node preparation), unless `--unreachable`.
//! 6. `stacked-etcd-member` (kubeadm etcd, a master) — the member checked gone (removed here
//!    when the node was unreachable).
//! 7. `delete-node-object` — `kubectl delete node`, after the reset (see
//!    [`crate::modules::lifecycle::membership`]).
//! 8. `apiserver-certificates` (kubeadm path, a master) — every master that stays gets its API
//!    server certificate re-issued without the master's name and address (`kubeadm-reconfigure`,
//!    one master at a time), so that a later re-run finds nothing to change.
//! 9. `node-prep` — every node that stays: the managed `/etc/hosts` block without the node.

use kubexm_manifests::resolve::Role;
use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, KubernetesType};

use super::phase::Phase;
use crate::context::{InstallContext, UnknownNode};
use crate::facts::ClusterFacts;
use crate::modules::lifecycle::etcd_member::{
    ApiServerEtcdModule, EtcdLeaveModule, StackedMemberGoneModule,
};
use crate::modules::lifecycle::membership::{
    DeleteNodeObjectModule, DrainModule, DrainOptions, LocalProxiesModule,
};
use crate::modules::{kubeadm, kubexm, loadbalancer, os};
use crate::pipeline::{Module, Pipeline};

/// The node leaving and the cluster before and after.
pub struct DeleteNode<'a> {
    /// The cluster as installed (with the node).
    pub installed: &'a Arc<InstallContext>,
    /// The cluster without it.
    pub desired: &'a Arc<InstallContext>,
    /// The node.
    pub node: &'a str,
    /// The facts gathered.
    pub facts: &'a ClusterFacts,
    /// How it is drained.
    pub drain: DrainOptions,
    /// It cannot be reached: only the cluster-side phases run.
    pub unreachable: bool,
}

/// The `delete-node` pipeline (see the module documentation).
pub fn delete_node_pipeline(x: &DeleteNode<'_>) -> Result<Pipeline, UnknownNode> {
    let (i, d) = (x.installed, x.desired);
    let node = i.node(x.node).cloned().ok_or_else(|| UnknownNode {
        name: x.node.to_string(),
        known: i.all().join(", "),
    })?;
    let only = i.scope(&[x.node])?;
    let master = node.has_role(Role::Master);
    let registered = x.facts.api(x.node).is_some() || x.facts.assumed;
    let kubexm_member =
        i.cluster.file.spec.etcd.kind == EtcdType::Kubexm && node.has_role(Role::Etcd);
    let stacked = i.cluster.file.spec.etcd.kind == EtcdType::Kubeadm && master;
    let gone = "--unreachable: the node is left as it is";

    let mut phases = vec![Phase::new(
        "drain",
        DrainModule {
            ctx: d.clone(),
            node: x.node.to_string(),
            options: x.drain,
        },
    )
    .skip_if(
        x.unreachable,
        "--unreachable: its pods are deleted with its Node object",
    )
    .skip_if(!registered, "the node is not registered in the API")];
    phases.push(
        Phase::new("loadbalancer", loadbalancer::LoadBalancerModule(d.clone()))
            .one_at_a_time()
            .skip_if(
                !master && !node.has_role(Role::Loadbalancer),
                "not a master or load-balancer node: the load balancers do not change",
            ),
    );
    phases.push(
        Phase::new(
            "local-api-proxies",
            LocalProxiesModule {
                ctx: d.clone(),
                except: Vec::new(),
            },
        )
        .skip_if(!master, "not a master: the proxies' backends do not change"),
    );
    if i.cluster.file.spec.kubernetes.kind == KubernetesType::Kubexm {
        phases.push(
            Phase::new("kubexm-certs", kubexm::certs::KubexmCertsModule(d.clone()))
                .scope(d.scope(&d.with_role(Role::Master))?)
                .one_at_a_time()
                .skip_if(!master, "not a master: the certificates do not change"),
        );
    }
    if kubexm_member {
        let via = super::etcd_member::via(x.facts, d, x.node);
        phases.push(Phase::new(
            "apiserver-etcd-servers",
            ApiServerEtcdModule { ctx: d.clone() },
        ));
        phases.push(Phase::new(
            "etcd-member-remove",
            EtcdLeaveModule {
                current: i.clone(),
                next: d.clone(),
                member: x.node.to_string(),
                via,
            },
        ));
    }
    // The node itself: the delete pipeline's own modules, scoped to it.
    for module in super::delete::node_delete_modules(i) {
        let title = module.name().to_string();
        phases.push(
            Phase::new(title, Boxed(module))
                .scope(only.clone())
                .skip_if(x.unreachable, gone),
        );
    }
    if stacked {
        phases.push(Phase::new(
            "stacked-etcd-member",
            StackedMemberGoneModule {
                ctx: d.clone(),
                member: x.node.to_string(),
                address: node.internal_address.clone(),
                remove: x.unreachable,
            },
        ));
    }
    phases.push(
        Phase::new(
            "delete-node-object",
            DeleteNodeObjectModule {
                ctx: d.clone(),
                node: x.node.to_string(),
            },
        )
        .skip_if(!registered, "the node is not registered in the API"),
    );
    if i.cluster.file.spec.kubernetes.kind == KubernetesType::Kubeadm {
        phases.push(
            Phase::new("apiserver-certificates", super::kubeadm::Kubeadm(d.clone()))
                .only(&[kubeadm::KUBEADM_RECONFIGURE])
                .scope(d.scope(&d.with_role(Role::Master))?)
                .skip_if(
                    !master,
                    "not a master: the API server certificates' SANs do not change",
                ),
        );
    }
    phases.push(Phase::new("node-prep", os::NodePrepModule(d.clone())));
    Ok(Pipeline {
        name: "delete-node".to_string(),
        modules: phases
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn Module>)
            .collect(),
    })
}

/// A boxed module as a module (the delete modules have different types).
struct Boxed(Box<dyn Module>);

impl Module for Boxed {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn skip(&self) -> Option<String> {
        self.0.skip()
    }
    fn tasks(&self) -> Result<Vec<crate::pipeline::Task>, crate::pipeline::StepError> {
        self.0.tasks()
    }
}
