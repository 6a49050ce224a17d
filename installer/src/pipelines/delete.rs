//! The delete pipeline: removes what the create pipeline put on the nodes, module by module in
//! reverse install order. Each module owns its removal (`delete_module`); the conventions every
//! delete step follows are in [`crate::modules::delete`].

use std::sync::Arc;

use crate::context::InstallContext;
use crate::modules::delete::DeletePreflight;
use crate::modules::{
    backup, etcd, finalize, kubeadm, kubexm, loadbalancer, os, osrepo, plugins, registry, runtime,
    scripts, security, storage,
};
use crate::pipeline::{Module, Pipeline};

/// The `delete` pipeline, modules in reverse install order.
pub fn delete_pipeline(ctx: &Arc<InstallContext>) -> Pipeline {
    let mut modules = node_delete_modules(ctx);
    // First after the preflight: no scheduled backup or renewal runs against a cluster being
    // deleted (the control host's timers belong to the whole cluster, not to one node).
    modules.insert(1, Box::new(backup::timer::delete_module(ctx)));
    Pipeline {
        name: "delete".to_string(),
        modules,
    }
}

/// The delete modules that clean nodes (also `delete-node`'s, scoped to the node).
pub(crate) fn node_delete_modules(ctx: &Arc<InstallContext>) -> Vec<Box<dyn Module>> {
    let mut modules: Vec<Box<dyn Module>> = vec![
        Box::new(DeletePreflight(ctx.clone())),
        // The SSH users' copies of the admin kubeconfig, while it still tells them apart.
        Box::new(finalize::delete_module(ctx)),
        Box::new(kubexm::delete::delete_module(ctx)),
        Box::new(kubeadm::delete_module(ctx)),
    ];
    if security::enabled(ctx) {
        // Only when asked (the plan of a cluster without it stays as it was).
        modules.push(Box::new(security::SecurityDeleteModule(ctx.clone())));
    }
    if !ctx.cluster.roles.nfs.is_empty() {
        // The nfs host's export and server (the plan of a cluster without one stays as it was),
        // while /etc/kubexm still holds what the install noted.
        modules.push(Box::new(storage::delete_module(ctx)));
    }
    modules.extend([
        // What kata-deploy left, while containerd's directory is still there.
        Box::new(plugins::delete_module(ctx)) as Box<dyn Module>,
        Box::new(runtime::delete_module(ctx)),
        Box::new(registry::delete_module(ctx)),
        Box::new(loadbalancer::delete_module(ctx)),
        Box::new(etcd::delete_module(ctx)),
        Box::new(osrepo::delete_module(ctx)),
        // The scripts' copies, stamps and logs (/etc/kubexm/scripts goes with node
        // preparation's /etc/kubexm too); what the scripts did is their authors' to undo.
        Box::new(scripts::delete_module(ctx)),
        Box::new(os::delete_module(ctx)),
    ]);
    modules
}
