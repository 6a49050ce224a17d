//! The `restore` pipeline: a backup's etcd snapshot becomes KubeXM's etcd again on the same
//! members, the control plane and node agents restarted around it (modules in
//! [`crate::modules::backup::restore`], in this order).

use crate::modules::backup::restore::{
    RestartNodeAgentsModule, Restore, RestoreDataModule, StartControlPlaneModule, StartEtcdModule,
    StopControlPlaneModule, StopEtcdModule,
};
use std::sync::Arc;

use super::create::Origin;
use super::kubeadm::Kubeadm;
use crate::context::InstallContext;
use crate::modules::backup::restore_fresh::{
    FreshRestore, KubeadmCaModule, RestoredEtcdModule, RestoredKubeadmModule,
};
use crate::pipeline::{Module, Pipeline};

/// The `restore` pipeline.
pub fn restore_pipeline(r: &Restore) -> Pipeline {
    Pipeline {
        name: "restore".to_string(),
        modules: vec![
            Box::new(StopControlPlaneModule(r.clone())),
            Box::new(StopEtcdModule(r.clone())),
            Box::new(RestoreDataModule(r.clone())),
            Box::new(StartEtcdModule(r.clone())),
            Box::new(StartControlPlaneModule(r.clone())),
            Box::new(RestartNodeAgentsModule(r.clone())),
        ],
    }
}

/// The `restore-fresh` pipeline (`restore --fresh`): the install pipeline onto nodes that hold
/// nothing of the cluster, with etcd's data and the cluster's CAs from the backup
/// ([`crate::modules::backup::restore_fresh`]).
pub fn restore_fresh_pipeline(f: &FreshRestore) -> Pipeline {
    Pipeline {
        name: "restore-fresh".to_string(),
        modules: super::create::install_modules(&f.restore.ctx, f),
    }
}

/// A cluster restored from a backup: etcd from its snapshot, the kubeadm path with its CAs.
impl Origin for FreshRestore {
    fn etcd(&self, _ctx: &Arc<InstallContext>) -> Box<dyn Module> {
        Box::new(RestoredEtcdModule(self.clone()))
    }

    fn kubeadm(&self, ctx: &Arc<InstallContext>, kubeadm: Kubeadm) -> Vec<Box<dyn Module>> {
        vec![
            Box::new(KubeadmCaModule(self.clone())),
            Box::new(RestoredKubeadmModule {
                kubeadm: Box::new(kubeadm),
                ctx: ctx.clone(),
            }),
        ]
    }
}
