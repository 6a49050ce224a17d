//! Modules of `kubexm-install rotate-ca` (see [`crate::pipelines::rotate`] and
//! [`crate::rotation`] for the phases): one phase of the etcd CA's dual-CA transition.
//!
//! The context's key directory sees the etcd CA as the phase leaves it
//! ([`crate::pki::KeyDir::with_rotation`]), so the files are the ones an install would make at
//! that point:
//! * `trust-both`, `drop-old`: only the trust bundle (`ca.pem`) changes on every node that has
//!   KubeXM's etcd files;
//! * `reissue`: every etcd leaf re-issued from the new CA, with the bundle.
//!
//! Then etcd restarts one member at a time, `endpoint health` on every member after each
//! ([`super::renew::etcd_rolling_tasks`], as `certs renew`), and the API servers, which read the
//! same CA file and client certificate, restart one master at a time, each ready before the next
//! (kubexm path: [`RestartServices`], [`WaitControlPlane`], [`KubeletHealthy`]; kubeadm path:
//! the API server's copies refreshed ([`EtcdClientFiles`]) and the static pods restarted, as
//! `certs renew` does). Restarts are guarded by markers holding the rotation's id and the phase,
//! so a `--resume` restarts nothing twice.

use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, KubernetesType};
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::modules::etcd::EtcdLayout;
use crate::modules::kubexm::control_plane::WaitControlPlane;
use crate::modules::kubexm::KubexmCluster;
use crate::modules::renew::{
    etcd_rolling_tasks, EtcdClientFiles, KubeletHealthy, Marker, RestartServices, RENEWED,
};
use crate::modules::restore::{RestartNodeAgents, StartControlPlane, StopControlPlane};
use crate::pipeline::{Module, StepError, Task};
use crate::rotation::Phase;

/// The CA file etcd's members and clients read, in the certificate directory.
pub const ETCD_TRUST_FILE: &str = "ca.pem";

/// One phase of a rotation.
#[derive(Clone)]
pub struct Rotate {
    /// The cluster; its key directory sees the rotated CA as `phase` leaves it.
    pub ctx: Arc<InstallContext>,
    /// The rotation's id.
    pub id: i64,
    /// The phase.
    pub phase: Phase,
}

impl Rotate {
    /// Why the phase's modules do nothing on the nodes, if so.
    fn skip(&self) -> Option<String> {
        if self.ctx.cluster.file.spec.etcd.kind != EtcdType::Kubexm {
            return Some("etcd.type is not kubexm: KubeXM keeps no etcd CA".into());
        }
        (self.phase == Phase::New).then(|| {
            "the new etcd CA is made on the control host; nothing changes on the nodes".into()
        })
    }

    fn marker_name(&self) -> String {
        format!("kubexm-rotated-etcd-{}", self.phase)
    }
}

/// The etcd CA's phase on the etcd members (and the masters' etcd client files).
pub struct RotateEtcdModule(pub Rotate);

impl Module for RotateEtcdModule {
    fn name(&self) -> &str {
        "rotate-etcd-ca"
    }
    fn skip(&self) -> Option<String> {
        self.0.skip()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let leaves = r.phase == Phase::Reissue;
        etcd_rolling_tasks(
            &r.ctx,
            &format!("etcd-{}", r.phase),
            &r.marker_name(),
            &r.id.to_string(),
            false,
            |_, files| {
                files
                    .into_iter()
                    .filter(|f| leaves || f.name == ETCD_TRUST_FILE)
                    .collect()
            },
        )
    }
}

/// The API servers restarted one master at a time after an etcd CA phase: they read the etcd
/// CA file and their client certificate only when they start.
pub struct RotateEtcdClientsModule(pub Rotate);

impl Module for RotateEtcdClientsModule {
    fn name(&self) -> &str {
        "rotate-etcd-ca-api-servers"
    }
    fn skip(&self) -> Option<String> {
        self.0.skip()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let ctx = &r.ctx;
        let masters = ctx.with_role(Role::Master);
        let marker = Marker {
            file: format!("{RENEWED}/{}", r.marker_name()),
            id: r.id.to_string(),
        };
        let name = format!("api-servers-{}", r.phase);
        let task = match ctx.cluster.file.spec.kubernetes.kind {
            KubernetesType::Kubexm => {
                let k = Arc::new(KubexmCluster::new(ctx)?);
                Task::new(name, masters)
                    .serial()
                    .step(RestartServices { marker })
                    .step(WaitControlPlane { k })
                    .step(KubeletHealthy)
            }
            KubernetesType::Kubeadm => Task::new(name, masters)
                .serial()
                .step(EtcdClientFiles {
                    cert_dir: EtcdLayout::from_context(ctx).cert_dir,
                })
                .step(StopControlPlane {
                    kind: KubernetesType::Kubeadm,
                })
                .step(RestartNodeAgents)
                .step(StartControlPlane {
                    kind: KubernetesType::Kubeadm,
                    after: "the etcd CA phase",
                }),
        };
        Ok(vec![task])
    }
}
