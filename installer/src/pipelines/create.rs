//! The create pipeline (named `install` in logs, state files and plans): every module in
//! install order, each deciding from the cluster what it skips.

use std::sync::Arc;

use crate::context::InstallContext;
use crate::modules::{
    addons, dns, etcd, kubeadm, kubexm, loadbalancer, network, os, osrepo, preflight, registry,
    runtime, scripts,
};
use crate::pipeline::Pipeline;

/// The `install` pipeline in order.
pub fn install_pipeline(ctx: &Arc<InstallContext>) -> Pipeline {
    Pipeline {
        name: "install".to_string(),
        modules: vec![
            Box::new(preflight::PreflightModule(ctx.clone())),
            Box::new(osrepo::OsRepoModule(ctx.clone())),
            Box::new(scripts::PreInstallModule(ctx.clone())),
            Box::new(os::NodePrepModule(ctx.clone())),
            Box::new(etcd::EtcdModule(ctx.clone())),
            Box::new(loadbalancer::LoadBalancerModule(ctx.clone())),
            Box::new(registry::RegistryModule(ctx.clone())),
            Box::new(runtime::RuntimeModule(ctx.clone())),
            Box::new(kubexm::certs::KubexmCertsModule(ctx.clone())),
            Box::new(kubexm::control_plane::KubexmControlPlaneModule(ctx.clone())),
            Box::new(kubexm::node::KubexmNodesModule(ctx.clone())),
            Box::new(kubexm::coredns::CoreDnsModule(ctx.clone())),
            Box::new(kubeadm::KubeadmModule(ctx.clone())),
            Box::new(network::NetworkModule(ctx.clone())),
            Box::new(dns::NodeLocalDnsModule(ctx.clone())),
            Box::new(addons::AddonsModule(ctx.clone())),
            Box::new(scripts::PostInstallModule(ctx.clone())),
        ],
    }
}
