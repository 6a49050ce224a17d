//! The `certs renew` pipeline: KubeXM's etcd first (the API servers' etcd client certificates
//! come from it), then the Kubernetes certificates of the cluster's bootstrap path (modules in
//! [`crate::modules::renew`], in this order; each skips itself when it does not apply), then on
//! the kubeadm path the pending kubelet serving CSRs approved after their checks.

use crate::modules::renew::{
    ApproveServingCsrsModule, Renew, RenewEtcdModule, RenewKubeadmModule, RenewKubexmModule,
};
use crate::pipeline::Pipeline;

/// The `certs renew` pipeline (state and journal named `certs-renew`).
pub fn renew_pipeline(r: &Renew) -> Pipeline {
    Pipeline {
        name: "certs-renew".to_string(),
        modules: vec![
            Box::new(RenewEtcdModule(r.clone())),
            Box::new(RenewKubexmModule(r.clone())),
            Box::new(RenewKubeadmModule(r.clone())),
            Box::new(ApproveServingCsrsModule(r.clone())),
        ],
    }
}
