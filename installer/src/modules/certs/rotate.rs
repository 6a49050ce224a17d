//! Modules of `kubexm-install rotate-ca` (see [`crate::pipelines::rotate`] and
//! [`crate::rotation`] for the phases): one phase of a CA's dual-CA transition, for KubeXM's etcd
//! CA or the front-proxy CA (the cluster CA's modules are [`super::rotate_kubernetes`], kubexm
//! path, and [`super::rotate_kubeadm_ca`], kubeadm path), and what they share.
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
//!
//! **Front-proxy CA** ([`RotateFrontProxyModule`]): the API servers trust it for the
//! aggregation layer's request headers (`--requestheader-client-ca-file`, also read by the
//! controller-manager) and present a `front-proxy-client` certificate it signed to aggregated API
//! servers (which learn the CA from the `extension-apiserver-authentication` ConfigMap each API
//! server writes when it starts). Only masters hold its files. Each master in turn gets the
//! phase's files and its control plane restarted, ready before the next:
//! * kubexm path: `front-proxy-ca.crt` (the trust bundle) and the client certificate, from
//!   `WORK/pki/<cluster>/kubernetes/` as the certificates module makes them;
//! * kubeadm path: kubeadm made the CA on the first master, so `new` copies it to
//!   `WORK/pki/<cluster>/kubeadm/` ([`FetchKubeadmCa`]); every phase then writes
//!   `front-proxy-ca.crt` with the signing CA first and the trust bundle after it (kubeadm signs
//!   with the first certificate and `front-proxy-ca.key`, so a `certs renew` mid-rotation signs
//!   what the phase says), the key, and from `reissue` the client certificate signed on the
//!   control host.

use crate::runner::shell::Script;
use crate::script;
use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, KubernetesType};
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::modules::backup::restore::{RestartNodeAgents, StartControlPlane, StopControlPlane};
use crate::modules::certs::renew::{
    etcd_rolling_tasks, EtcdClientFiles, KubeletHealthy, Marker, RestartServices, RENEWED,
};
use crate::modules::etcd::EtcdLayout;
use crate::modules::k8s::KUBEADM_PKI;
use crate::modules::kubexm::certs::KubernetesCertificates;
use crate::modules::kubexm::control_plane::WaitControlPlane;
use crate::modules::kubexm::KubexmCluster;
use crate::pipeline::ops::{FetchFile, Op, RunCommand, UploadFile, WaitFor};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::pki::{CertSpec, KeyDir, Usage};
use crate::rotation::Phase;

/// The CA file etcd's members and clients read, in the certificate directory.
pub const ETCD_TRUST_FILE: &str = "ca.pem";

/// The CAs `rotate-ca` rotates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotatedCa {
    /// KubeXM's etcd CA (`etcd.type: kubexm`).
    Etcd,
    /// The front-proxy CA (either Kubernetes path).
    FrontProxy,
    /// The cluster CA `kubernetes` (either Kubernetes path).
    Kubernetes,
}

impl RotatedCa {
    /// The CA's name in its key directory (`<name>-ca.crt`) and in commands.
    pub fn name(self) -> &'static str {
        match self {
            RotatedCa::Etcd => "etcd",
            RotatedCa::FrontProxy => "front-proxy",
            RotatedCa::Kubernetes => "kubernetes",
        }
    }

    /// The CA's common name (the new one's gets `-r<id>`).
    pub fn common_name(self) -> &'static str {
        match self {
            RotatedCa::Etcd => "etcd-ca",
            RotatedCa::FrontProxy => "front-proxy-ca",
            RotatedCa::Kubernetes => "kubernetes",
        }
    }

    /// The subdirectory of the cluster's key directory that holds the CA.
    pub fn key_subdir(self, kind: KubernetesType) -> &'static str {
        match (self, kind) {
            (RotatedCa::Etcd, _) => "etcd",
            (RotatedCa::FrontProxy | RotatedCa::Kubernetes, KubernetesType::Kubexm) => "kubernetes",
            (RotatedCa::FrontProxy | RotatedCa::Kubernetes, KubernetesType::Kubeadm) => {
                KUBEADM_CA_DIR
            }
        }
    }
}

/// kubeadm path: where the control host keeps the CAs kubeadm made (front-proxy, cluster) during
/// (and after) a rotation.
pub const KUBEADM_CA_DIR: &str = "kubeadm";

/// One phase of a rotation.
#[derive(Clone)]
pub struct Rotate {
    /// The CA.
    pub ca: RotatedCa,
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
        if self.ca != RotatedCa::Etcd {
            return Some(format!("this rotation is of the {} CA", self.ca.name()));
        }
        if self.ctx.cluster.file.spec.etcd.kind != EtcdType::Kubexm {
            return Some("etcd.type is not kubexm: KubeXM keeps no etcd CA".into());
        }
        (self.phase == Phase::New).then(|| {
            "the new etcd CA is made on the control host; nothing changes on the nodes".into()
        })
    }

    /// The marker of `what` in this phase on a node (`<ca>-<phase>-<what>`, holding the id).
    pub fn phase_marker(&self, what: &str) -> Marker {
        Marker {
            file: format!(
                "{RENEWED}/kubexm-rotated-{}-{}-{what}",
                self.ca.name(),
                self.phase
            ),
            id: self.id.to_string(),
        }
    }

    fn marker_name(&self) -> String {
        format!("kubexm-rotated-{}-{}", self.ca.name(), self.phase)
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
        let kubeadm = ctx.cluster.file.spec.kubernetes.kind == KubernetesType::Kubeadm;
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
        let mut tasks = vec![task];
        if kubeadm {
            tasks.push(stale_kubeadm_certs(ctx)?);
        }
        Ok(tasks)
    }
}

/// One phase of the front-proxy CA's rotation on the masters (see the module's documentation).
pub struct RotateFrontProxyModule(pub Rotate);

impl Module for RotateFrontProxyModule {
    fn name(&self) -> &str {
        "rotate-front-proxy-ca"
    }
    fn skip(&self) -> Option<String> {
        let r = &self.0;
        if r.ca != RotatedCa::FrontProxy {
            return Some(format!("this rotation is of the {} CA", r.ca.name()));
        }
        (r.phase == Phase::New && r.ctx.cluster.file.spec.kubernetes.kind == KubernetesType::Kubexm)
            .then(|| {
                "the new front-proxy CA is made on the control host; nothing changes on the nodes"
                    .into()
            })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let ctx = &r.ctx;
        let masters = ctx.with_role(Role::Master);
        let name = format!("front-proxy-{}", r.phase);
        let kind = ctx.cluster.file.spec.kubernetes.kind;
        let keys = ctx.key_dir().join(r.ca.key_subdir(kind));
        let first = ctx.first_master()?.name.clone();
        let mut kubexm = None;
        let task = match kind {
            KubernetesType::Kubexm => {
                let k = Arc::new(KubexmCluster::new(ctx)?);
                kubexm = Some(k.clone());
                let l = &k.layout;
                let wanted = [
                    l.pki("front-proxy-ca.crt"),
                    l.pki("front-proxy-client.crt"),
                    l.pki("front-proxy-client.key"),
                ];
                let files = crate::modules::kubexm::certs::certificates(&k, &keys)?
                    .into_iter()
                    .filter(|(n, _)| masters.contains(n))
                    .map(|(n, files)| {
                        let files = files
                            .into_iter()
                            .filter(|f| wanted.iter().any(|w| w == f.dest()))
                            .collect();
                        (n, files)
                    })
                    .collect();
                let marker = Marker {
                    file: format!("{RENEWED}/{}", r.marker_name()),
                    id: r.id.to_string(),
                };
                Task::new(name, masters)
                    .serial()
                    .step(KubernetesCertificates {
                        layout: k.layout.clone(),
                        files,
                        restart: false,
                    })
                    .step(RestartServices { marker })
                    .step(WaitControlPlane { k })
                    .step(KubeletHealthy)
            }
            KubernetesType::Kubeadm if r.phase == Phase::New => {
                return Ok(vec![Task::new("front-proxy-ca-to-control-host", [first])
                    .step(FetchKubeadmCa {
                        dir: keys.path().to_path_buf(),
                        ca: RotatedCa::FrontProxy,
                    })]);
            }
            KubernetesType::Kubeadm => Task::new(name, masters)
                .serial()
                .step(KubeadmFrontProxyFiles::new(&keys, r.phase)?)
                .step(StopControlPlane {
                    kind: KubernetesType::Kubeadm,
                })
                .step(RestartNodeAgents)
                .step(StartControlPlane {
                    kind: KubernetesType::Kubeadm,
                    after: "the front-proxy CA phase",
                }),
        };
        let mut tasks = vec![task];
        if kind == KubernetesType::Kubeadm {
            tasks.push(stale_kubeadm_certs(ctx)?);
        }
        if r.phase == Phase::DropOld {
            let ca = keys
                .ca(
                    RotatedCa::FrontProxy.name(),
                    RotatedCa::FrontProxy.common_name(),
                )
                .map_err(|source| StepError::Pki {
                    what: "front-proxy CA",
                    source,
                })?;
            tasks.push(
                Task::new("aggregation-trust-new-ca", [first]).step(AggregationTrust {
                    key: REQUESTHEADER_CA,
                    pem: ca.trust_pem().to_string(),
                    kubexm,
                }),
            );
        }
        Ok(tasks)
    }
}

/// What aggregated API servers are told to trust for request headers: the
/// `requestheader-client-ca-file` of the ConfigMap `kube-system/extension-apiserver-authentication`
/// set to `pem`, the bundle every API server now reads. Each API server adds its CAs to what the
/// ConfigMap holds and never removes one before it expires, so the old CA is taken out here,
/// once every API server trusts the new one alone (measured on v1.20.2: the old CA stayed after
/// every master restarted with the new bundle).
pub struct AggregationTrust {
    /// The ConfigMap's key: [`REQUESTHEADER_CA`] (front-proxy CA) or [`CLIENT_CA`] (cluster CA,
    /// which the API servers also only ever add).
    pub key: &'static str,
    /// The trust bundle.
    pub pem: String,
    /// kubexm path: the cluster (its kubectl); kubeadm path: `None`.
    pub kubexm: Option<Arc<KubexmCluster>>,
}

/// The kubectl command line on a master: the kubexm cluster's, or kubeadm's `admin.conf`.
pub fn cluster_kubectl(kubexm: Option<&Arc<KubexmCluster>>, node: &Node) -> Script {
    match kubexm {
        Some(k) => k.kubectl(node),
        None => crate::modules::k8s::kubectl(),
    }
}

/// The front-proxy CA's key in `extension-apiserver-authentication`.
pub const REQUESTHEADER_CA: &str = "requestheader-client-ca-file";
/// The cluster CA's key in `extension-apiserver-authentication`.
pub const CLIENT_CA: &str = "client-ca-file";

impl Step for AggregationTrust {
    fn name(&self) -> &str {
        if self.key == CLIENT_CA {
            "client-ca-trust"
        } else {
            "aggregation-trust"
        }
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let kubectl = cluster_kubectl(self.kubexm.as_ref(), node);
        let cm = Script::new("-n kube-system configmap extension-apiserver-authentication");
        let key = self.key;
        let patch = serde_json::json!({ "data": { key: self.pem } });
        let sum = kubexm_bundles::hash::sha256_hex(self.pem.as_bytes());
        let holds = script!(
            "[ \"$({kubectl} get {cm} -o jsonpath='{{.data.{key}}}' | sha256sum | cut -d' ' -f1)\" = {sum} ]",
            kubectl = kubectl,
            cm = cm,
            key = crate::runner::shell::in_single_quotes(key),
            sum = sum
        );
        Ok(vec![
            Op::Run(
                RunCommand::new(script!(
                    "{kubectl} patch {cm} --type merge -p {patch}",
                    kubectl = kubectl,
                    cm = cm,
                    patch = patch.to_string()
                ))
                .unless(holds.clone()),
            ),
            Op::Wait(WaitFor {
                what: format!(
                    "extension-apiserver-authentication's {key} holding the new CA alone"
                ),
                check: holds.into_string(),
                timeout: std::time::Duration::from_secs(60),
                interval: std::time::Duration::from_secs(2),
            }),
        ])
    }
}

/// kubeadm path, phase `new`: a CA kubeadm made (certificate and key; the front-proxy CA or the
/// cluster CA) copied from the first master into the control host's key directory, where the
/// rotation keeps it beside the new one. Writes nothing on the node.
pub struct FetchKubeadmCa {
    /// The control host's directory (`WORK/pki/<cluster>/kubeadm`).
    pub dir: std::path::PathBuf,
    /// Which CA.
    pub ca: RotatedCa,
}

impl FetchKubeadmCa {
    /// kubeadm's file stem of the CA in `/etc/kubernetes/pki`.
    fn kubeadm_stem(&self) -> &'static str {
        match self.ca {
            RotatedCa::FrontProxy => "front-proxy-ca",
            RotatedCa::Kubernetes | RotatedCa::Etcd => "ca",
        }
    }
}

impl Step for FetchKubeadmCa {
    fn name(&self) -> &str {
        match self.ca {
            RotatedCa::FrontProxy => "fetch-front-proxy-ca",
            RotatedCa::Kubernetes | RotatedCa::Etcd => "fetch-cluster-ca",
        }
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let stem = self.kubeadm_stem();
        let name = self.ca.name();
        Ok([("crt", 0o644), ("key", 0o600)]
            .into_iter()
            .map(|(ext, mode)| {
                Op::Fetch(FetchFile {
                    src: format!("{KUBEADM_PKI}/{stem}.{ext}"),
                    dest: self.dir.join(format!("{name}-ca.{ext}")),
                    mode,
                })
            })
            .collect())
    }
}

/// kubeadm path: a master's front-proxy files as a phase leaves them: `front-proxy-ca.crt` (the
/// signing CA first, then the rest of the trust bundle) and, once the new CA signs, its key
/// `front-proxy-ca.key` and the `front-proxy-client` certificate and key it signed.
pub struct KubeadmFrontProxyFiles {
    files: Vec<UploadFile>,
    convert: Option<Op>,
}

impl KubeadmFrontProxyFiles {
    /// The files of `phase` from the CA in `keys`.
    pub fn new(keys: &KeyDir, phase: Phase) -> Result<Self, StepError> {
        let pki = |source: crate::pki::PkiError| StepError::Pki {
            what: "front-proxy CA",
            source,
        };
        let ca = keys
            .ca(
                RotatedCa::FrontProxy.name(),
                RotatedCa::FrontProxy.common_name(),
            )
            .map_err(pki)?;
        let at = |f: &str| format!("{KUBEADM_PKI}/{f}");
        let mut files = vec![UploadFile::bytes(
            crate::rotation::signing_first(ca.cert_pem(), ca.trust_pem()).into_bytes(),
            at("front-proxy-ca.crt"),
            0o644,
        )];
        // Until the new CA signs, the node keeps kubeadm's own key file as it is. Then the new
        // CA's key goes in SEC1 (`EC PRIVATE KEY`): `kubeadm join --control-plane` copies the
        // CA keys through the kubeadm-certs Secret and refuses an EC key in PKCS#8 ("unknown
        // data found in Secret entry": its copycerts parses EC keys as SEC1 only; found by
        // `restore --fresh` after this rotation on v1.20.2).
        let mut convert = None;
        if phase.signs_with_new() {
            files.push(UploadFile::bytes(
                ca.key_pem().into_bytes(),
                FRONT_PROXY_KEY_PKCS8,
                0o600,
            ));
            convert = Some(crate::modules::k8s::ec_key_in_sec1(
                FRONT_PROXY_KEY_PKCS8,
                &at("front-proxy-ca.key"),
            ));
            let leaf = keys
                .leaf(
                    &ca,
                    "front-proxy-client",
                    &CertSpec::new("front-proxy-client", Usage::Client),
                )
                .map_err(pki)?;
            files.push(UploadFile::bytes(
                leaf.cert_pem.into_bytes(),
                at("front-proxy-client.crt"),
                0o644,
            ));
            files.push(UploadFile::bytes(
                leaf.key_pem.into_bytes(),
                at("front-proxy-client.key"),
                0o600,
            ));
        }
        Ok(Self { files, convert })
    }
}

/// kubeadm path: the new front-proxy CA key as uploaded (PKCS#8), converted from there.
pub const FRONT_PROXY_KEY_PKCS8: &str = "/etc/kubernetes/kubexm/front-proxy-ca.key.pk8";

impl Step for KubeadmFrontProxyFiles {
    fn name(&self) -> &str {
        "front-proxy-files"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = vec![Op::Mkdir(crate::pipeline::ops::CreateDir {
            path: crate::modules::k8s::STATE_DIR.into(),
            mode: 0o700,
        })];
        ops.extend(self.files.iter().cloned().map(Op::Upload));
        ops.extend(self.convert.clone());
        Ok(ops)
    }
}

/// kubeadm path: the task dropping the `kube-system/kubeadm-certs` Secret on the first master
/// after a phase changed CA files ([`DropKubeadmCerts`]).
pub(crate) fn stale_kubeadm_certs(ctx: &InstallContext) -> Result<Task, StepError> {
    let first = ctx.first_master()?.name.clone();
    Ok(Task::new("kubeadm-certs-stale", [first]).step(DropKubeadmCerts))
}

/// kubeadm path: the `kube-system/kubeadm-certs` Secret deleted. `kubeadm join --control-plane`
/// takes the CA files from it, and it holds them as they were when uploaded (kept two hours):
/// after a rotation phase a new master would get the CAs of before. Without it, the next
/// control-plane join uploads the files as they are now (see the kubeadm module's join
/// credentials).
pub struct DropKubeadmCerts;

impl Step for DropKubeadmCerts {
    fn name(&self) -> &str {
        "drop-kubeadm-certs"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = crate::modules::k8s::kubectl();
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "{k} -n kube-system delete secret kubeadm-certs --ignore-not-found",
                k = k
            ))
            .unless(script!(
                "! {k} -n kube-system get secret kubeadm-certs -o name >/dev/null 2>&1",
                k = k
            )),
        )])
    }
}
