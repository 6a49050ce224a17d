//! The `rotate-ca` pipeline of one phase ([`crate::rotation::Phase`]): the etcd members first,
//! then the API servers that read the etcd CA; the front-proxy CA; the cluster CA on either path (modules in [`crate::modules::certs::rotate`]; each skips
//! itself when it does not apply).

use crate::modules::certs::rotate::{
    Rotate, RotateEtcdClientsModule, RotateEtcdModule, RotateFrontProxyModule,
};
use crate::modules::certs::rotate_kubeadm_ca::RotateKubeadmCaModule;
use crate::modules::certs::rotate_kubernetes::RotateKubernetesModule;
use crate::pipeline::Pipeline;

/// The pipeline of `r`'s phase (state and journal named `rotate-ca-<ca>-<phase>`).
pub fn rotate_pipeline(r: &Rotate) -> Pipeline {
    Pipeline {
        name: format!("rotate-ca-{}-{}", r.ca.name(), r.phase),
        modules: vec![
            Box::new(RotateEtcdModule(r.clone())),
            Box::new(RotateEtcdClientsModule(r.clone())),
            Box::new(RotateFrontProxyModule(r.clone())),
            Box::new(RotateKubernetesModule(r.clone())),
            Box::new(RotateKubeadmCaModule(r.clone())),
        ],
    }
}
