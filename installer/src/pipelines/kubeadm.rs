//! The kubeadm module as the pipelines compose it: handed the cluster CA's rotation state
//! ([`kubeadm_inputs`]), which is read here, when the module plans, and not by the kubeadm module
//! (a component module never reaches into the day-2 certificate modules).

use std::sync::Arc;

use crate::context::InstallContext;
use crate::modules::certs::rotate_kubeadm_ca::kubeadm_inputs;
use crate::modules::kubeadm::config::KubeadmInputs;
use crate::modules::kubeadm::KubeadmModule;
use crate::pipeline::{Module, StepError, Task};

/// [`KubeadmModule`] with its inputs read from the cluster's key directory when it plans.
pub struct Kubeadm(pub Arc<InstallContext>);

impl Kubeadm {
    /// The kubeadm module with the inputs as they are now.
    pub fn module(&self) -> Result<KubeadmModule, StepError> {
        Ok(KubeadmModule::new(self.0.clone(), kubeadm_inputs(&self.0)?))
    }
}

impl Module for Kubeadm {
    fn name(&self) -> &str {
        "kubeadm"
    }
    fn skip(&self) -> Option<String> {
        // Decided from cluster.yaml alone.
        KubeadmModule::new(self.0.clone(), KubeadmInputs::default()).skip()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        self.module()?.tasks()
    }
}
