//! The `add-node` pipeline: new workers, masters and etcd members join a running cluster. It
//! is the create pipeline's modules again, each scoped to the nodes concerned, plus the
//! membership modules (etcd, the API servers' etcd endpoints, local proxies):
//!
//! 1. `preflight` — the new nodes; then `pre-install`: the operator's `system.preInstall`
//!    scripts on the new nodes (as the create pipeline runs them on every node).
//! 2. `node-prep` — the new nodes are prepared; every node's managed `/etc/hosts` block and
//!    chrony configuration name them (the other steps find nothing to do on the others).
//! 3. `etcd-certificates` — the new nodes' etcd certificates (a new member's, a new master's
//!    client certificate), from the kept etcd CA.
//! 4. `etcd-join` — a new etcd member (kubexm etcd): `member add`, etcd with
//!    `initial-cluster-state: existing`, started and healthy. Then `apiserver-etcd-servers`:
//!    every API server's etcd endpoints, one master at a time.
//! 5. `loadbalancer` — a new master is a backend of every load-balancer node (reloaded one node
//!    at a time, haproxy/nginx without dropping connections); a new load-balancer node is set up.
//! 6. `registry` — the new nodes trust the registry CA (the registry is checked seeded).
//! 7. `runtime` — the container runtime on the new nodes.
//! 8. Kubernetes, kubexm path: `kubexm-certs` (the new nodes' certificates and kubeconfigs from
//!    the kept CA; with a new master every master's API server certificate is re-issued with
//!    its address, one master at a time), `kubexm-control-plane` (a new master's components),
//!    `kubexm-nodes` (kubelet and kube-proxy; the first master waits for them and labels them).
//!    kubeadm path: `kubeadm` on the new nodes and the first master: fresh join credentials on
//!    the first master (a new token when the kept one is near its end, certificates uploaded
//!    again when they expired), the joins, roles and labels; then `apiserver-certificates`:
//!    with a new master, every master's API server certificate re-issued with it in its SANs
//!    (`kubeadm-reconfigure`, one master at a time; those already done change nothing).
//! 9. `local-api-proxies` — with a new master, every worker's local API proxy (internal
//!    haproxy/nginx) lists it.
//! 10. `network` — from the first master: the pod network (unchanged) and every node Ready.
//! 11. `finalize` — a new master's non-root SSH user gets the admin kubeconfig in `~/.kube/config`.
//! 12. `post-install` — the operator's `system.postInstall` scripts on the new nodes (e.g. the
//!     CNI an operator brings with `network.plugin: none`, without which a new node never turns
//!     Ready). The existing nodes' stamps keep their runs as they were.

use kubexm_manifests::resolve::Role;
use std::collections::BTreeSet;
use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, KubernetesType};

use super::phase::Phase;
use crate::context::{InstallContext, Scope, UnknownNode};
use crate::facts::ClusterFacts;
use crate::modules::lifecycle::etcd_member::{ApiServerEtcdModule, EtcdJoinModule};
use crate::modules::lifecycle::membership::LocalProxiesModule;
use crate::modules::{
    etcd, finalize, kubeadm, kubexm, loadbalancer, network, os, osrepo, preflight, registry,
    runtime, scripts,
};
use crate::pipeline::Pipeline;

/// The nodes joining and the cluster before and after.
pub struct AddNodes<'a> {
    /// The cluster as installed.
    pub installed: &'a Arc<InstallContext>,
    /// The cluster with the new nodes.
    pub desired: &'a Arc<InstallContext>,
    /// The new nodes (names in `desired`).
    pub new: &'a [String],
    /// The facts gathered.
    pub facts: &'a ClusterFacts,
}

/// The `add-node` pipeline (see the module documentation).
pub fn add_node_pipeline(a: &AddNodes<'_>) -> Result<Pipeline, UnknownNode> {
    let d = a.desired;
    let new = d.scope(a.new)?;
    let is_new = |n: &str| a.new.iter().any(|x| x == n);
    let new_with = |role: Role| -> Vec<String> {
        a.new
            .iter()
            .filter(|n| d.node(n).is_some_and(|x| x.has_role(role)))
            .cloned()
            .collect()
    };
    let new_masters = new_with(Role::Master);
    let new_lb = new_with(Role::Loadbalancer);
    let kubexm_etcd = d.cluster.file.spec.etcd.kind == EtcdType::Kubexm;
    let new_member = new_with(Role::Etcd).into_iter().find(|_| kubexm_etcd);
    let first = d.first_master().map(|n| n.name.clone()).unwrap_or_default();
    let masters = d.with_role(Role::Master);
    let with = |extra: &[String]| -> Result<Scope, UnknownNode> {
        let mut s: BTreeSet<String> = a.new.iter().cloned().collect();
        s.extend(extra.iter().cloned());
        d.scope(&s.into_iter().collect::<Vec<_>>())
    };
    let via = super::etcd_member::via(
        a.facts,
        a.installed,
        new_member.as_deref().unwrap_or_default(),
    );
    let mut phases: Vec<Phase> = vec![
        Phase::new("preflight", preflight::PreflightModule(d.clone())).scope(new.clone()),
        // The bundle's OS package repository wherever node preparation may install packages
        // (already there on the other nodes: nothing to upload).
        Phase::new("os-repository", osrepo::OsRepoModule(d.clone())),
        Phase::new("pre-install", scripts::PreInstallModule(d.clone())).scope(new.clone()),
        Phase::new("node-prep", os::NodePrepModule(d.clone())),
        // A new etcd member's (or kubeadm master's) data disk, before etcd runs there.
        Phase::new("etcd-disk", preflight::EtcdDiskModule(d.clone())).scope(new.clone()),
        Phase::new("etcd-certificates", etcd::EtcdModule(d.clone()))
            .only(&[etcd::ETCD_CERTIFICATES])
            .scope(new.clone())
            .skip_if(
                !kubexm_etcd,
                "etcd.type is not kubexm: no KubeXM etcd certificates",
            )
            .skip_if(
                new_masters.is_empty() && new_member.is_none(),
                "no new master or etcd member",
            ),
    ];
    match &new_member {
        Some(m) => {
            phases.push(Phase::new(
                "etcd-join",
                EtcdJoinModule {
                    current: a.installed.clone(),
                    next: d.clone(),
                    member: m.clone(),
                    via: via.clone(),
                },
            ));
            // The masters joining now read the new endpoints from their own configuration.
            let existing: Vec<String> = masters.iter().filter(|m| !is_new(m)).cloned().collect();
            phases.push(
                Phase::new(
                    "apiserver-etcd-servers",
                    ApiServerEtcdModule { ctx: d.clone() },
                )
                .scope(d.scope(&existing)?),
            );
        }
        None => phases.push(
            Phase::new("etcd-join", etcd::EtcdModule(d.clone()))
                .skip_if(true, "no new etcd member"),
        ),
    }
    phases.push(
        Phase::new("loadbalancer", loadbalancer::LoadBalancerModule(d.clone()))
            .one_at_a_time()
            .skip_if(
                new_masters.is_empty() && new_lb.is_empty(),
                "no new master or load-balancer node: the backends do not change",
            ),
    );
    phases.push(Phase::new("registry", registry::RegistryModule(d.clone())).scope(new.clone()));
    phases.push(Phase::new("runtime", runtime::RuntimeModule(d.clone())).scope(new.clone()));
    match d.cluster.file.spec.kubernetes.kind {
        KubernetesType::Kubexm => {
            let cert_scope = if new_masters.is_empty() {
                new.clone()
            } else {
                with(&masters)?
            };
            phases.push(
                Phase::new("kubexm-certs", kubexm::certs::KubexmCertsModule(d.clone()))
                    .scope(cert_scope)
                    .one_at_a_time(),
            );
            phases.push(
                Phase::new(
                    "kubexm-control-plane",
                    kubexm::control_plane::KubexmControlPlaneModule(d.clone()),
                )
                .scope(new.clone())
                .skip_if(new_masters.is_empty(), "no new master"),
            );
            phases.push(
                Phase::new("kubexm-nodes", kubexm::node::KubexmNodesModule(d.clone()))
                    .scope(with(std::slice::from_ref(&first))?),
            );
        }
        KubernetesType::Kubeadm => {
            phases.push(
                Phase::new("kubeadm", super::kubeadm::Kubeadm(d.clone()))
                    // kube-vip's pre-init manifest would flip the first master's kube-vip to
                    // the pre-init kubeconfig and back.
                    .except(&[kubeadm::KUBE_VIP_FIRST_MASTER])
                    .scope(with(std::slice::from_ref(&first))?),
            );
            // Every master's API server certificate lists every master (SANs): with a new
            // master, the others' are re-issued too, one master at a time.
            phases.push(
                Phase::new("apiserver-certificates", super::kubeadm::Kubeadm(d.clone()))
                    .only(&[kubeadm::KUBEADM_RECONFIGURE])
                    .scope(d.scope(&masters)?)
                    .skip_if(
                        new_masters.is_empty(),
                        "no new master: the API server certificates' SANs do not change",
                    ),
            );
        }
    }
    phases.push(
        Phase::new(
            "local-api-proxies",
            LocalProxiesModule {
                ctx: d.clone(),
                except: a.new.to_vec(),
            },
        )
        .skip_if(
            new_masters.is_empty(),
            "no new master: the proxies' backends do not change",
        ),
    );
    phases.push(
        Phase::new("network", network::NetworkModule(d.clone()))
            .scope(d.scope(std::slice::from_ref(&first))?),
    );
    phases.push(
        Phase::new("finalize", finalize::FinalizeModule(d.clone()))
            .scope(new.clone())
            .skip_if(
                !new_masters
                    .iter()
                    .any(|m| finalize::has_non_root_user(d, m)),
                "no new master with a non-root SSH user: no user kubeconfig to write",
            ),
    );
    phases.push(Phase::new("post-install", scripts::PostInstallModule(d.clone())).scope(new));
    Ok(Pipeline {
        name: "add-node".to_string(),
        modules: phases
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn crate::pipeline::Module>)
            .collect(),
    })
}
