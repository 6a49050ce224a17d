//! The `restore` pipeline: a backup's etcd snapshot becomes KubeXM's etcd again on the same
//! members, the control plane and node agents restarted around it (modules in
//! [`crate::modules::restore`], in this order).

use crate::modules::restore::{
    RestartNodeAgentsModule, Restore, RestoreDataModule, StartControlPlaneModule, StartEtcdModule,
    StopControlPlaneModule, StopEtcdModule,
};
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
