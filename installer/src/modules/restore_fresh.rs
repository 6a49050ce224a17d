//! Modules of `kubexm-install restore --fresh` (see [`crate::pipelines::restore_fresh_pipeline`]):
//! a backup brought back onto nodes that hold nothing of the cluster (new machines, or the same
//! machines after `delete`), from the bundle like an install.
//!
//! The install pipeline runs with two changes, both taking the cluster's identity from the
//! backup rather than making a new one:
//!
//! * [`RestoredEtcdModule`] in place of the etcd module: every member gets its data directory
//!   from the backup's snapshot ([`RestoreData`], with the new members' names and peer URLs)
//!   after its binaries and configuration are in place and before etcd first starts. This is
//!   etcd's own disaster-recovery procedure (every member restored from the same snapshot with
//!   the new membership), so no member ever runs with an empty store that kube-apiserver could
//!   write to.
//! * kubeadm path: [`KubeadmCaModule`] puts the old cluster's CAs and service-account key pair
//!   on the first master before `kubeadm init` (kubeadm uses CA files it finds and issues fresh
//!   leaves for the new addresses from them; the other masters get them through kubeadm's
//!   certificate upload). So kubeconfigs, tokens and Secrets from the snapshot stay valid.
//!
//! On the kubexm path the CAs come from the control host's key directory, which
//! `restore --fresh` fills from the backup before the pipeline is built.

use std::path::PathBuf;
use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, KubernetesType};

use crate::modules::etcd;
use crate::modules::restore::{Restore, RestoreData};
use crate::pipeline::ops::{CreateDir, Op, UploadFile};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::UploadSource;

/// Where kubeadm keeps its PKI on a master.
pub const KUBEADM_PKI: &str = "/etc/kubernetes/pki";

/// The files of kubeadm's PKI that make the cluster's identity (CAs and the service-account
/// key pair) with their modes; every other file kubeadm issues from them.
pub const KUBEADM_IDENTITY: [(&str, u32); 6] = [
    ("ca.crt", 0o644),
    ("ca.key", 0o600),
    ("front-proxy-ca.crt", 0o644),
    ("front-proxy-ca.key", 0o600),
    ("sa.key", 0o600),
    ("sa.pub", 0o644),
];

/// One identity file taken from the backup, on the control host.
#[derive(Debug, Clone)]
pub struct IdentityFile {
    /// Its name under [`KUBEADM_PKI`] (one of [`KUBEADM_IDENTITY`]).
    pub name: &'static str,
    /// The file on the control host (inside the opened backup's private directory).
    pub local: PathBuf,
    /// Its sha256.
    pub sha256: String,
    /// Mode on the node.
    pub mode: u32,
}

/// What the fresh-restore modules share.
#[derive(Clone)]
pub struct FreshRestore {
    /// The snapshot and the cluster (the new nodes).
    pub restore: Restore,
    /// kubeadm path: the old cluster's identity files (empty on the kubexm path).
    pub kubeadm_identity: Vec<IdentityFile>,
}

/// The etcd module of a fresh restore: [`etcd::install_tasks`] with the snapshot restored on
/// each member before its first start.
pub struct RestoredEtcdModule(pub FreshRestore);

impl Module for RestoredEtcdModule {
    fn name(&self) -> &str {
        "etcd-from-backup"
    }
    fn skip(&self) -> Option<String> {
        (self.0.restore.ctx.cluster.file.spec.etcd.kind != EtcdType::Kubexm)
            .then(|| "etcd.type is not kubexm: restore rebuilds KubeXM's etcd only".to_string())
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        etcd::install_tasks(
            &self.0.restore.ctx,
            Some(Arc::new(RestoreData(self.0.restore.clone()))),
        )
    }
}

/// kubeadm path: the old cluster's CAs and service-account keys on the first master before
/// `kubeadm init`.
pub struct KubeadmCaModule(pub FreshRestore);

impl Module for KubeadmCaModule {
    fn name(&self) -> &str {
        "kubeadm-ca-from-backup"
    }
    fn skip(&self) -> Option<String> {
        (self.0.restore.ctx.cluster.file.spec.kubernetes.kind != KubernetesType::Kubeadm).then(
            || {
                "kubernetes.type is kubexm: the CAs come from the control host's key directory"
                    .into()
            },
        )
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        if self.0.kubeadm_identity.len() != KUBEADM_IDENTITY.len() {
            return Err(StepError::Invalid(format!(
                "the backup holds {} of kubeadm's {} identity files ({}): a fresh restore needs all of them",
                self.0.kubeadm_identity.len(),
                KUBEADM_IDENTITY.len(),
                KUBEADM_IDENTITY.map(|(n, _)| n).join(", ")
            )));
        }
        let first = self.0.restore.ctx.first_master()?.name.clone();
        Ok(vec![Task::new("restore-kubeadm-ca", [first]).step(
            RestoreKubeadmIdentity {
                files: self.0.kubeadm_identity.clone(),
            },
        )])
    }
}

/// The identity files uploaded to [`KUBEADM_PKI`] (sha256-checked; skipped where the node's copy
/// already matches; each upload reverted by the executor).
pub struct RestoreKubeadmIdentity {
    /// The files.
    pub files: Vec<IdentityFile>,
}

impl Step for RestoreKubeadmIdentity {
    fn name(&self) -> &str {
        "restore-kubeadm-ca"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = vec![Op::Mkdir(CreateDir {
            path: KUBEADM_PKI.into(),
            mode: 0o755,
        })];
        ops.extend(self.files.iter().map(|f| {
            Op::Upload(UploadFile {
                source: UploadSource::File(f.local.clone()),
                sha256: f.sha256.clone(),
                dest: format!("{KUBEADM_PKI}/{}", f.name),
                mode: f.mode,
            })
        }));
        Ok(ops)
    }
}
