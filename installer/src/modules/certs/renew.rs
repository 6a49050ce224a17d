//! Modules of `kubexm-install certs renew` (see [`crate::pipelines::renew`]): the cluster's
//! leaf certificates renewed and every component that reads them restarted, one node at a time,
//! each healthy before the next.
//!
//! * **KubeXM's etcd** (`etcd.type: kubexm`, both paths): the leaves re-issued on the control
//!   host from the kept etcd CA ([`crate::pki::Reissue`]), uploaded, each member restarted in
//!   turn and `endpoint health --cluster` awaited (all members together when a certificate has
//!   already expired: peers on expired certificates refuse a renewed member); masters that are
//!   not members get their API server client certificate (`node-<name>`).
//! * **kubexm path**: every Kubernetes leaf and kubeconfig re-issued on the control host from the
//!   kept CAs, uploaded; masters one at a time (kube-apiserver, controller-manager, scheduler,
//!   kubelet, kube-proxy restarted; `/readyz`, the controller-manager's and scheduler's
//!   `/healthz`, the kubelet's `/healthz` awaited), then workers one at a time (kubelet,
//!   kube-proxy).
//! * **kubeadm path**, on each master that has a certificate due, one at a time: the API server's
//!   etcd client files copied again from KubeXM's etcd certificates, `kubeadm certs renew`
//!   ([`kubeadm_renew_command`]; `kubeadm alpha certs renew` before v1.20), then what kubeadm
//!   leaves alone: the
//!   kubelet's client certificate ([`KubeletClient`]); then the static pods restart (manifests
//!   parked and put back, as `restore` does), the kubelet restarts, `/readyz` is awaited.
//!
//! The admin kubeconfig is fetched again to the control host at the end. Last, on the kubeadm
//! path, the kubelet serving CSRs pending then are approved after the install's checks
//! ([`ApproveServingCsrsModule`]), also when nothing else is due.
//!
//! Nothing here asks the API server before the health checks: expired certificates (an API
//! server that no longer starts, kubeconfigs it refuses) are renewed the same way. Every node
//! step is guarded by a marker holding the renewal's id ([`RENEWED`]), so `--resume` does not
//! renew twice.

use crate::modules::k8s::ec_key_in_sec1;
use crate::runner::shell::Script;
use crate::script;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::{EtcdType, KubernetesType};
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::modules::backup::restore::{
    RestartNodeAgents, StartControlPlane, StopControlPlane, KUBELET_HEALTHY,
};
use crate::modules::etcd::{self, EtcdCertificates, EtcdLayout};
use crate::modules::kubeadm::binaries::KUBEADM;
use crate::modules::kubeadm::config::{ETCD_CA, ETCD_CERT, ETCD_KEY};
use crate::modules::kubeadm::init::FetchAdminKubeconfig;
use crate::modules::kubexm::certs::{certificates, KubernetesCertificates};
use crate::modules::kubexm::control_plane::WaitControlPlane;
use crate::modules::kubexm::{KubexmCluster, SERVICES};
use crate::pipeline::ops::{CopyFile, Op, RunCommand, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// Where a Kubernetes node keeps the id of the renewal each of its steps last finished (one file
/// per step; the delete pipelines remove `/etc/kubernetes`).
pub const RENEWED: &str = "/etc/kubernetes/kubexm/renewed";
/// The kubelet's certificate directory and its current client certificate (cert + key).
pub const KUBELET_PKI: &str = "/var/lib/kubelet/pki";
const KUBELET_CURRENT: &str = "/var/lib/kubelet/pki/kubelet-client-current.pem";
const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";
const KUBEADM_PKI: &str = "/etc/kubernetes/pki";

/// What every renew module shares.
#[derive(Clone)]
pub struct Renew {
    /// The cluster; its key directory re-issues leaves as the renewal says
    /// ([`crate::pki::KeyDir::with_reissue`]).
    pub ctx: Arc<InstallContext>,
    /// This renewal's id (the same for a `--resume` of it).
    pub id: String,
    /// The threshold in days (a certificate with fewer days left is renewed).
    pub under_days: i64,
    /// Renew every certificate, whatever its expiry.
    pub all: bool,
    /// kubeadm path: the masters with a certificate due (decided from the nodes' inventory).
    pub masters: Vec<String>,
    /// KubeXM's etcd has a certificate due.
    pub etcd: bool,
    /// One of KubeXM's etcd certificates has expired: members restart together, not one at a
    /// time ([`RenewEtcdModule`]).
    pub etcd_expired: bool,
    /// kubexm path: a Kubernetes certificate is due (on a node or on the control host).
    pub kubernetes: bool,
    /// kubeadm path: workers whose kubelet client certificate is due
    /// ([`super::renew_kubelet::RenewWorkerClientsModule`]).
    pub workers: Vec<String>,
    /// kubeadm path: nodes whose kubelet serving certificate is due
    /// ([`super::renew_kubelet::RenewServingModule`]).
    pub serving: Vec<String>,
    /// The registry's (or Harbor's) server certificate is due
    /// ([`super::renew_registry::RenewRegistryModule`]).
    pub registry: bool,
}

impl Renew {
    fn kind(&self) -> KubernetesType {
        self.ctx.cluster.file.spec.kubernetes.kind
    }

    /// The node-side marker of step `what` of this renewal.
    pub fn marker(&self, what: &str) -> Marker {
        Marker {
            file: format!("{RENEWED}/{what}"),
            id: self.id.clone(),
        }
    }
}

/// A node-side marker: `file` holds `id` once the step it guards finished.
#[derive(Debug, Clone)]
pub struct Marker {
    /// The file.
    pub file: String,
    /// The renewal id.
    pub id: String,
}

impl Marker {
    /// The shell test "this renewal already did it".
    pub fn done(&self) -> Script {
        script!(
            "[ \"$(cat {} 2>/dev/null)\" = {} ]",
            shell::quoted(&self.file),
            shell::quoted(&self.id)
        )
    }

    /// The shell that records it.
    pub fn record(&self) -> Script {
        let dir = self.file.rsplit_once('/').map_or("/", |(d, _)| d);
        script!(
            "mkdir -p {} && echo {} > {}",
            shell::quoted(dir),
            shell::quoted(&self.id),
            shell::quoted(&self.file)
        )
    }
}

/// KubeXM's etcd certificates renewed, one member at a time.
pub struct RenewEtcdModule(pub Renew);

impl Module for RenewEtcdModule {
    fn name(&self) -> &str {
        "renew-etcd-certificates"
    }
    fn skip(&self) -> Option<String> {
        if self.0.ctx.cluster.file.spec.etcd.kind != EtcdType::Kubexm {
            return Some("etcd.type is not kubexm: KubeXM keeps no etcd certificates".into());
        }
        (!self.0.etcd).then(|| {
            format!(
                "no etcd certificate has fewer than {} days left",
                self.0.under_days
            )
        })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        etcd_rolling_tasks(
            &self.0.ctx,
            "renew-etcd-members",
            "kubexm-renewed",
            &self.0.id,
            self.0.etcd_expired,
            |_, f| f,
        )
    }
}

/// KubeXM's etcd files (made from the context's key directory: [`etcd::certificates`], each
/// node's list filtered by `keep`) uploaded and the members restarted one at a time, each
/// followed by `endpoint health` on every member (task `members_task`, restart guarded by the
/// marker file `marker` in the certificate directory holding `id`); masters that are not
/// members get their files too. Shared by `certs renew` and `rotate-ca`.
///
/// `together`: every member at once instead (expired member certificates: a member restarted
/// on a new certificate cannot talk to peers still holding expired ones, so one at a time the
/// cluster would never be healthy between restarts; each then waits for the whole cluster).
pub fn etcd_rolling_tasks(
    ctx: &InstallContext,
    members_task: &str,
    marker: &str,
    id: &str,
    together: bool,
    keep: impl Fn(&str, Vec<etcd::CertFile>) -> Vec<etcd::CertFile>,
) -> Result<Vec<Task>, StepError> {
    let layout = Arc::new(EtcdLayout::from_context(ctx));
    let files = etcd::context_certificates(ctx, &layout)?
        .into_iter()
        .map(|(n, f)| {
            let f = keep(&n, f);
            (n, f)
        })
        .collect::<std::collections::BTreeMap<_, _>>();
    let members: Vec<String> = layout.members.iter().map(|m| m.name.clone()).collect();
    let others: Vec<String> = ctx
        .nodes
        .iter()
        .filter(|n| files.contains_key(&n.name) && !members.contains(&n.name))
        .map(|n| n.name.clone())
        .collect();
    let upload = Arc::new(EtcdCertificates {
        layout: layout.clone(),
        files,
        restart: false,
    });
    let mut members = Task::new(members_task, members);
    if !together {
        members = members.serial();
    }
    let mut tasks = vec![members.step_arc(upload.clone()).step(RestartEtcdMember {
        layout: layout.clone(),
        // In the certificate directory, which etcd's delete removes (an etcd-only node
        // has no /etc/kubernetes).
        marker: Marker {
            file: format!("{}/{marker}", layout.cert_dir),
            id: id.to_string(),
        },
    })];
    if !others.is_empty() {
        tasks.push(Task::new("etcd-client-certificates", others).step_arc(upload));
    }
    Ok(tasks)
}

/// etcd restarted on this member (unless this renewal did already), then every member answers
/// `endpoint health`.
pub struct RestartEtcdMember {
    /// The etcd layout.
    pub layout: Arc<EtcdLayout>,
    /// The renewal's marker.
    pub marker: Marker,
}

impl Step for RestartEtcdMember {
    fn name(&self) -> &str {
        "restart-etcd-member"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![
            Op::Run(
                RunCommand::new(script!(
                    "systemctl restart --no-block {} && {}",
                    etcd::UNIT,
                    self.marker.record()
                ))
                .unless(self.marker.done()),
            ),
            Op::Wait(WaitFor {
                what: format!("etcd healthy after {} restarted", node.name),
                check: self.layout.health_command(&node.name),
                timeout: Duration::from_secs(180),
                interval: Duration::from_secs(3),
            }),
        ])
    }
}

/// kubexm path: every Kubernetes leaf re-issued and uploaded, then each node restarted in turn.
pub struct RenewKubexmModule(pub Renew);

impl Module for RenewKubexmModule {
    fn name(&self) -> &str {
        "renew-kubernetes-certificates"
    }
    fn skip(&self) -> Option<String> {
        if self.0.kind() != KubernetesType::Kubexm {
            return Some("kubernetes.type is kubeadm: kubeadm renews the certificates".into());
        }
        (!self.0.kubernetes).then(|| {
            format!(
                "no Kubernetes certificate has fewer than {} days left",
                self.0.under_days
            )
        })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let k = Arc::new(KubexmCluster::new(&self.0.ctx)?);
        let files = certificates(&k, &self.0.ctx.key_dir().join("kubernetes"))?;
        let upload = Arc::new(KubernetesCertificates {
            layout: k.layout.clone(),
            files,
            restart: false,
        });
        let restart = Arc::new(RestartServices {
            marker: self.0.marker("kubernetes"),
        });
        let mut tasks = kubexm_rolling_tasks(
            &self.0.ctx,
            &k,
            ("renew-masters".into(), "renew-workers".into()),
            upload,
            restart,
            None,
        );
        tasks.push(fetch_admin(&self.0.ctx, k.layout.conf("admin.conf"))?);
        Ok(tasks)
    }
}

/// kubexm path: the node tasks of a rolling change of the Kubernetes files: the masters one at a
/// time (`upload`, `restart`, `masters_extra` if any, the control plane and the kubelet healthy),
/// then the workers one at a time (`upload`, `restart`, the kubelet healthy).
pub(crate) fn kubexm_rolling_tasks(
    ctx: &InstallContext,
    k: &Arc<KubexmCluster>,
    (masters_task, workers_task): (String, String),
    upload: Arc<KubernetesCertificates>,
    restart: Arc<RestartServices>,
    masters_extra: Option<Arc<dyn Step>>,
) -> Vec<Task> {
    let masters = ctx.with_role(Role::Master);
    let workers: Vec<String> = k
        .node_names()
        .into_iter()
        .filter(|n| !masters.contains(n))
        .collect();
    let mut on_masters = Task::new(masters_task, masters)
        .serial()
        .step_arc(upload.clone())
        .step_arc(restart.clone());
    if let Some(extra) = masters_extra {
        on_masters = on_masters.step_arc(extra);
    }
    let mut tasks = vec![on_masters
        .step(WaitControlPlane { k: k.clone() })
        .step(KubeletHealthy)];
    if !workers.is_empty() {
        tasks.push(
            Task::new(workers_task, workers)
                .serial()
                .step_arc(upload)
                .step_arc(restart)
                .step(KubeletHealthy),
        );
    }
    tasks
}

pub(crate) fn fetch_admin(ctx: &InstallContext, src: String) -> Result<Task, StepError> {
    let first = ctx.first_master()?.name.clone();
    Ok(
        Task::new("fetch-admin-kubeconfig", [first]).step(FetchAdminKubeconfig {
            src,
            dest: crate::modules::k8s::admin_kubeconfig_path(ctx),
        }),
    )
}

/// The kubexm path's services that run on the node restarted (unless this renewal did already).
pub struct RestartServices {
    /// The renewal's marker.
    pub marker: Marker,
}

impl Step for RestartServices {
    fn name(&self) -> &str {
        "restart-kubernetes-services"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "for u in {}; do if systemctl is-enabled -q $u 2>/dev/null; then systemctl restart $u; fi; done; {}",
                shell::words(SERVICES),
                self.marker.record()
            ))
            .unless(self.marker.done())
            .timeout(Duration::from_secs(300)),
        )])
    }
}

/// The kubelet answers its health endpoint.
pub struct KubeletHealthy;

impl Step for KubeletHealthy {
    fn name(&self) -> &str {
        "kubelet-healthy"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: format!("the kubelet on {} healthy", node.name),
            check: KUBELET_HEALTHY.into(),
            timeout: Duration::from_secs(180),
            interval: Duration::from_secs(2),
        })])
    }
}

/// kubeadm path: the kubelet serving CSRs pending now approved with the install's checks
/// ([`crate::modules::kubeadm::serving_csr`]), whatever else is due: a kubelet renews its serving
/// certificate with a new CSR late in its life, which nothing else approves. Reads the CSRs
/// when it runs, without waiting for any; `certs schedule`'s timer so approves them daily.
pub struct ApproveServingCsrsModule(pub Renew);

impl Module for ApproveServingCsrsModule {
    fn name(&self) -> &str {
        "kubelet-serving-certificates"
    }
    fn skip(&self) -> Option<String> {
        (self.0.kind() != KubernetesType::Kubeadm).then(|| {
            "kubernetes.type is kubexm: KubeXM issues the kubelet serving certificates itself"
                .into()
        })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0.ctx;
        let first = ctx.first_master()?.name.clone();
        let nodes: Vec<Node> = ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
            .cloned()
            .collect();
        let names = crate::modules::kubeadm::serving_csr::NodeNames::all(ctx, &nodes);
        Ok(crate::modules::kubeadm::serving_csr::approval_tasks(
            &names, &first, false, false, "",
        ))
    }
}

/// kubeadm path: each master due renewed through kubeadm, one at a time.
pub struct RenewKubeadmModule(pub Renew);

impl Module for RenewKubeadmModule {
    fn name(&self) -> &str {
        "renew-control-plane"
    }
    fn skip(&self) -> Option<String> {
        if self.0.kind() != KubernetesType::Kubeadm {
            return Some(
                "kubernetes.type is kubexm: KubeXM re-issues the certificates itself".into(),
            );
        }
        self.0.masters.is_empty().then(|| {
            format!(
                "no master has a certificate with fewer than {} days left",
                self.0.under_days
            )
        })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let r = &self.0;
        let kubexm_etcd = r.ctx.cluster.file.spec.etcd.kind == EtcdType::Kubexm;
        let mut t = Task::new("renew-master", r.masters.clone()).serial();
        if kubexm_etcd {
            t = t.step(EtcdClientFiles {
                cert_dir: EtcdLayout::from_context(&r.ctx).cert_dir,
            });
        }
        let t = t
            .step(KubeadmRenewAll {
                command: kubeadm_renew_command(
                    r.ctx.cluster.version,
                    r.ctx.cluster.file.spec.etcd.kind == EtcdType::Kubeadm,
                ),
                marker: r.marker("kubeadm"),
            })
            .step(KubeletClient {
                under_days: r.under_days,
                all: r.all,
                marker: r.marker("kubelet-client"),
            })
            .step(StopControlPlane {
                kind: KubernetesType::Kubeadm,
            })
            .step(RestartNodeAgents)
            .step(StartControlPlane {
                kind: KubernetesType::Kubeadm,
                after: "the renewal",
            });
        Ok(vec![
            t,
            fetch_admin(&r.ctx, crate::modules::k8s::ADMIN_CONF.to_string())?,
        ])
    }
}

/// The certificates and kubeconfigs kubeadm renews on a master that does not run kubeadm's
/// stacked etcd, with the file each lives in (`super-admin.conf` from v1.29, on the first master
/// only).
const KUBEADM_LEAVES: [(&str, &str); 7] = [
    ("apiserver", "/etc/kubernetes/pki/apiserver.crt"),
    (
        "apiserver-kubelet-client",
        "/etc/kubernetes/pki/apiserver-kubelet-client.crt",
    ),
    (
        "front-proxy-client",
        "/etc/kubernetes/pki/front-proxy-client.crt",
    ),
    ("admin.conf", "/etc/kubernetes/admin.conf"),
    (
        "controller-manager.conf",
        "/etc/kubernetes/controller-manager.conf",
    ),
    ("scheduler.conf", "/etc/kubernetes/scheduler.conf"),
    ("super-admin.conf", "/etc/kubernetes/super-admin.conf"),
];

/// kubeadm's renewal (`kubeadm certs renew`, `kubeadm alpha certs renew` before v1.20 where
/// `certs` left `alpha`). With kubeadm's stacked etcd (`etcd.type: kubeadm`): `renew all`.
/// Otherwise each certificate by name, each one present: when the API server cannot be asked
/// (expired certificates) kubeadm falls back to its default configuration, whose local etcd
/// makes `renew all` fail on the etcd CA key that KubeXM never puts on a master (measured with
/// real v1.20.2).
pub fn kubeadm_renew_command(
    version: kubexm_manifests::version::KubeVersion,
    stacked_etcd: bool,
) -> Script {
    let renew = if version.at_least(1, 20) {
        script!("{KUBEADM} certs renew")
    } else {
        script!("{KUBEADM} alpha certs renew")
    };
    if stacked_etcd {
        return script!("{renew} all", renew = renew);
    }
    Script::join(
        KUBEADM_LEAVES
            .iter()
            .filter(|(name, _)| *name != "super-admin.conf" || version.has_super_admin_conf())
            .map(|(name, file)| {
                script!(
                    "{{ [ ! -e {file} ] || {renew} {name}; }}",
                    file = file,
                    renew = renew,
                    name = name
                )
            }),
        " && ",
    )
}

/// The API server's etcd client files copied again from KubeXM's etcd certificates (which
/// the etcd module may just have renewed).
pub struct EtcdClientFiles {
    /// KubeXM's etcd certificate directory.
    pub cert_dir: String,
}

impl Step for EtcdClientFiles {
    fn name(&self) -> &str {
        "etcd-client-files"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let d = &self.cert_dir;
        Ok(vec![
            Op::Copy(CopyFile {
                src: format!("{d}/ca.pem"),
                dest: ETCD_CA.into(),
                mode: 0o644,
            }),
            Op::Copy(CopyFile {
                src: format!("{d}/node-{}.pem", node.name),
                dest: ETCD_CERT.into(),
                mode: 0o644,
            }),
            ec_key_in_sec1(&format!("{d}/node-{}-key.pem", node.name), ETCD_KEY),
        ])
    }
}

/// kubeadm's renewal ([`kubeadm_renew_command`]: every certificate and kubeconfig kubeadm made,
/// from the CA on the master; without the API server kubeadm falls back to its defaults when the
/// cluster's configuration cannot be read, and renews each certificate from its own
/// attributes).
pub struct KubeadmRenewAll {
    /// The command.
    pub command: Script,
    /// The renewal's marker.
    pub marker: Marker,
}

impl Step for KubeadmRenewAll {
    fn name(&self) -> &str {
        "kubeadm-certs-renew"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(script!("{} && {}", self.command, self.marker.record()))
                .unless(self.marker.done())
                .timeout(Duration::from_secs(180)),
        )])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(300),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// What `kubeadm certs renew` leaves alone: the kubelet's client certificate. When
/// `kubelet.conf` embeds its certificate and the kubelet's rotated one
/// (`kubelet-client-current.pem`) is valid, `kubelet.conf` points at the rotated one. When
/// the one in use has fewer than the threshold's days left (or is expired: the kubelet then
/// cannot rotate it), a new one (`system:node:<name>`, O=`system:nodes`, clientAuth, one year)
/// is signed by the cluster CA on the master and becomes `kubelet-client-current.pem`.
pub struct KubeletClient {
    /// Threshold in days.
    pub under_days: i64,
    /// Renew whatever its expiry.
    pub all: bool,
    /// The renewal's marker.
    pub marker: Marker,
}

impl KubeletClient {
    /// The script for `node`.
    pub fn script(&self, node: &Node) -> Script {
        let seconds = self.under_days.max(0) * 86_400;
        let subject = shell::quoted(&script!("/O=system:nodes/CN=system:node:{}", node.name));
        script!(
            "set -e\n\
             umask 077\n\
             conf={KUBELET_CONF}; cur={KUBELET_CURRENT}; pki={KUBEADM_PKI}\n\
             embedded=no; grep -q '^ *client-certificate-data:' \"$conf\" && embedded=yes\n\
             tmp=$(mktemp -d); trap 'rm -rf \"$tmp\"' EXIT\n\
             if [ $embedded = yes ]; then sed -n 's/^ *client-certificate-data: *//p' \"$conf\" | base64 -d > \"$tmp/inuse.crt\"; else cp \"$cur\" \"$tmp/inuse.crt\" 2>/dev/null || : > \"$tmp/inuse.crt\"; fi\n\
             due=no\n\
             {all}openssl x509 -in \"$tmp/inuse.crt\" -noout -checkend {seconds} >/dev/null 2>&1 || due=yes\n\
             if [ $due = yes ]; then\n\
             \x20 openssl ecparam -name prime256v1 -genkey -noout -out \"$tmp/key.pem\"\n\
             \x20 openssl req -new -key \"$tmp/key.pem\" -subj {subject} -out \"$tmp/csr.pem\"\n\
             \x20 printf 'keyUsage=critical,digitalSignature,keyEncipherment\\nextendedKeyUsage=clientAuth\\nbasicConstraints=critical,CA:FALSE\\n' > \"$tmp/ext\"\n\
             \x20 openssl x509 -req -in \"$tmp/csr.pem\" -CA \"$pki/ca.crt\" -CAkey \"$pki/ca.key\" -set_serial 0x$(openssl rand -hex 16) -days 365 -extfile \"$tmp/ext\" -out \"$tmp/crt.pem\" 2>/dev/null\n\
             \x20 new={KUBELET_PKI}/kubelet-client-kubexm-$(date +%Y-%m-%d-%H-%M-%S).pem\n\
             \x20 cat \"$tmp/crt.pem\" \"$tmp/key.pem\" > \"$new\"\n\
             \x20 ln -sfn \"$new\" \"$cur.kubexm-new\" && mv -fT \"$cur.kubexm-new\" \"$cur\"\n\
             fi\n\
             if [ $embedded = yes ] && openssl x509 -in \"$cur\" -noout -checkend 0 >/dev/null 2>&1; then\n\
             \x20 sed -i -e \"s#^\\( *\\)client-certificate-data:.*#\\1client-certificate: $cur#\" -e \"s#^\\( *\\)client-key-data:.*#\\1client-key: $cur#\" \"$conf\"\n\
             fi\n\
             {record}",
            all = if self.all {
                Script::new("due=yes; ")
            } else {
                Script::empty()
            },
            record = self.marker.record(), seconds = seconds, subject = subject
        )
    }
}

impl Step for KubeletClient {
    fn name(&self) -> &str {
        "kubelet-client-certificate"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(self.script(node)).unless(self.marker.done()),
        )])
    }
}
