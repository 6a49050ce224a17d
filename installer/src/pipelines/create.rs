//! The create pipeline (named `install` in logs, state files and plans): every module in
//! install order, each deciding from the cluster what it skips.

use std::sync::Arc;

use super::kubeadm::Kubeadm;
use crate::context::InstallContext;
use crate::modules::{
    addons, backup, dns, etcd, finalize, kubexm, loadbalancer, network, os, osrepo, plugins,
    preflight, ready, registry, runtime, scripts, security, storage,
};
use crate::pipeline::{Module, Pipeline};

/// The `install` pipeline in order.
pub fn install_pipeline(ctx: &Arc<InstallContext>) -> Pipeline {
    Pipeline {
        name: "install".to_string(),
        modules: install_modules(ctx, &NewCluster),
    }
}

/// Where a cluster the install pipeline builds gets its identity (CAs) and its etcd data from:
/// a new cluster makes them ([`NewCluster`]); `restore --fresh` brings them from a backup
/// (`pipelines/restore.rs`). Only these two places of the pipeline differ.
pub(crate) trait Origin {
    /// The module that sets etcd up.
    fn etcd(&self, ctx: &Arc<InstallContext>) -> Box<dyn Module>;
    /// The modules that bootstrap the control plane on the kubeadm path, around `kubeadm`.
    fn kubeadm(&self, ctx: &Arc<InstallContext>, kubeadm: Kubeadm) -> Vec<Box<dyn Module>>;
}

/// A new cluster: etcd and the kubeadm path as they are.
pub(crate) struct NewCluster;

impl Origin for NewCluster {
    fn etcd(&self, ctx: &Arc<InstallContext>) -> Box<dyn Module> {
        Box::new(etcd::EtcdModule(ctx.clone()))
    }

    fn kubeadm(&self, _ctx: &Arc<InstallContext>, kubeadm: Kubeadm) -> Vec<Box<dyn Module>> {
        vec![Box::new(kubeadm)]
    }
}

/// The install modules in order, the cluster's identity and etcd data from `origin`.
pub(crate) fn install_modules(
    ctx: &Arc<InstallContext>,
    origin: &dyn Origin,
) -> Vec<Box<dyn Module>> {
    let etcd = origin.etcd(ctx);
    let mut modules: Vec<Box<dyn Module>> = vec![
        Box::new(preflight::PreflightModule(ctx.clone())),
        Box::new(osrepo::OsRepoModule(ctx.clone())),
        Box::new(scripts::PreInstallModule(ctx.clone())),
        Box::new(os::NodePrepModule(ctx.clone())),
        // After node preparation (fio from the bundle's OS packages), before etcd.
        Box::new(preflight::EtcdDiskModule(ctx.clone())),
        etcd,
        Box::new(loadbalancer::LoadBalancerModule(ctx.clone())),
        Box::new(registry::RegistryModule(ctx.clone())),
        Box::new(runtime::RuntimeModule(ctx.clone())),
        Box::new(kubexm::certs::KubexmCertsModule(ctx.clone())),
        Box::new(kubexm::control_plane::KubexmControlPlaneModule(ctx.clone())),
        Box::new(kubexm::node::KubexmNodesModule(ctx.clone())),
        Box::new(kubexm::coredns::CoreDnsModule(ctx.clone())),
    ];
    modules.extend(origin.kubeadm(ctx, Kubeadm(ctx.clone())));
    if security::enabled(ctx) {
        // Only when asked: the plan of a cluster without it stays as it was.
        modules.push(Box::new(security::SecurityModule(ctx.clone())));
    }
    modules.extend([
        Box::new(network::NetworkModule(ctx.clone())) as Box<dyn Module>,
        Box::new(dns::NodeLocalDnsModule(ctx.clone())),
        Box::new(plugins::PluginsModule(ctx.clone())),
    ]);
    if storage::enabled(ctx) {
        // Only when asked (the plan of a cluster without storage stays as it was).
        modules.push(Box::new(storage::StorageModule(ctx.clone())));
    }
    modules.extend([
        Box::new(addons::AddonsModule(ctx.clone())) as Box<dyn Module>,
        Box::new(finalize::FinalizeModule(ctx.clone())),
        // The cluster is complete before its first scheduled backup; the operator's
        // post-install scripts stay last.
        Box::new(backup::timer::BackupTimerModule(ctx.clone())),
        Box::new(scripts::PostInstallModule(ctx.clone())),
        // Last, after the post-install scripts (they may bring the pod network): the install
        // reports success only once every node is Ready and every workload rolled out.
        Box::new(ready::ClusterReadyModule(ctx.clone())),
    ]);
    modules
}
