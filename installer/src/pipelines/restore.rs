//! The `restore` pipeline: a backup's etcd snapshot becomes KubeXM's etcd again on the same
//! members, the control plane and node agents restarted around it (modules in
//! [`crate::modules::backup::restore`], in this order).

use crate::modules::backup::restore::{
    RestartNodeAgentsModule, Restore, RestoreDataModule, StartControlPlaneModule, StartEtcdModule,
    StopControlPlaneModule, StopEtcdModule,
};
use crate::modules::backup::restore_fresh::FreshRestore;
use crate::pipeline::Pipeline;

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
        modules: super::create::install_modules(&f.restore.ctx, Some(f)),
    }
}
