//! The `certs renew` pipeline: the registry's TLS first (nodes pull from it when components
//! restart), KubeXM's etcd (the API servers' etcd client certificates come from it), the
//! Kubernetes certificates of the cluster's bootstrap path, then on the kubeadm path the
//! workers' kubelet client certificates and the kubelets' serving certificates, which need a
//! working API server (modules in [`crate::modules::certs::renew`], [`crate::modules::certs::renew_kubelet`]
//! and [`crate::modules::certs::renew_registry`], in this order; each skips itself when it does not
//! apply), and last on the kubeadm path the pending kubelet serving CSRs approved after their
//! checks (a kubelet's own renewal waits for it).

use crate::modules::certs::renew::{
    ApproveServingCsrsModule, Renew, RenewEtcdModule, RenewKubeadmModule, RenewKubexmModule,
};
use crate::modules::certs::renew_kubelet::{RenewServingModule, RenewWorkerClientsModule};
use crate::modules::certs::renew_registry::RenewRegistryModule;
use crate::pipeline::Pipeline;

/// The `certs renew` pipeline (state and journal named `certs-renew`).
pub fn renew_pipeline(r: &Renew) -> Pipeline {
    Pipeline {
        name: "certs-renew".to_string(),
        modules: vec![
            Box::new(RenewRegistryModule(r.clone())),
            Box::new(RenewEtcdModule(r.clone())),
            Box::new(RenewKubexmModule(r.clone())),
            Box::new(RenewKubeadmModule(r.clone())),
            Box::new(RenewWorkerClientsModule(r.clone())),
            Box::new(RenewServingModule(r.clone())),
            Box::new(ApproveServingCsrsModule(r.clone())),
        ],
    }
}
