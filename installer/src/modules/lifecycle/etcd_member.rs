//! Module area: etcd membership of a running cluster (`etcd.type: kubexm`), one member at a
//! time, reusing the etcd module's layout and steps:
//!
//! * [`EtcdJoinModule`]: `etcdctl member add` on a running member (skipped when the member is
//!   already listed, so a resumed run goes on), then etcd on the new member from the bundle with
//!   `initial-cluster-state: existing`, then the member must be started and every member healthy.
//!   The certificates are the etcd module's own task, run first by the pipelines.
//! * [`EtcdLeaveModule`]: `etcdctl member remove` from a member that stays, checked gone, every
//!   member left healthy.
//! * [`RetireEtcdModule`]: etcd stopped and its data, configuration and unit removed on a node
//!   that stays in the cluster (`etcd remove-member`); its certificates stay (a master's API
//!   server uses its etcd client certificate from the same directory).
//! * [`ApiServerEtcdModule`]: every API server's etcd endpoints follow the members, one master
//!   at a time, each answering `/readyz` with the new list before the next: kubeadm's static pod
//!   manifest (and the cluster's `ClusterConfiguration`, which later control-plane joins read),
//!   or the kubexm path's kube-apiserver unit.
//!
//! Stacked etcd (`etcd.type: kubeadm`) follows the masters: `kubeadm join --control-plane` adds
//! the member and `kubeadm reset` removes it; [`StackedMemberGoneModule`] checks (and, for a
//! node that is gone, does) the removal through the etcd pod of a master that stays.

use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::{EtcdType, InternalLbType, KubernetesType, LbMode};

use super::membership::kubectl_on;
use crate::context::InstallContext;
use crate::modules::etcd::{
    EtcdBinaries, EtcdConfig, EtcdHealth, EtcdLayout, StartEtcd, UNIT, UNIT_FILE,
};
use crate::modules::k8s::kubectl;
use crate::modules::kubeadm::config::{KubeadmSettings, Settings, INIT_CONFIG};
use crate::modules::kubexm::control_plane::{ApiServer, WaitControlPlane};
use crate::modules::kubexm::KubexmCluster;
use crate::pipeline::ops::{Op, RunCommand, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// The API server's static pod manifest (kubeadm).
pub const APISERVER_MANIFEST: &str = "/etc/kubernetes/manifests/kube-apiserver.yaml";
/// Its copy before KubeXM changed its etcd endpoints (the rollback), outside the manifests
/// directory.
const BACKUP: &str = "/etc/kubernetes/kubexm/kube-apiserver.yaml.kubexm-orig";

/// etcdctl inside the stacked etcd pod of `master`, with kubeadm's health-check client
/// certificate; append a subcommand.
pub fn stacked_etcdctl(kubectl: &Script, master: &str) -> Script {
    script!(
        "{kubectl} -n kube-system exec {pod} -- etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt --key=/etc/kubernetes/pki/etcd/healthcheck-client.key --command-timeout=10s",
        kubectl = kubectl,
        pod = format!("etcd-{master}")
    )
}

/// `etcdctl member list` line test: the member with `peer` as its peer URL is listed
/// (`ID, status, name, peerURLs, clientURLs, isLearner`).
fn listed(etcdctl: &Script, peer: &str) -> Script {
    script!(
        "{etcdctl} member list | grep -qF -- {pattern}",
        etcdctl = etcdctl,
        pattern = format!(", {peer},")
    )
}

fn one_shot(timeout: Duration) -> Policy {
    Policy {
        timeout,
        attempts: 1,
        retry_delay: Duration::from_secs(0),
    }
}

/// A new etcd member joins the running cluster (see the module documentation).
pub struct EtcdJoinModule {
    /// The cluster as it is now (the members that run).
    pub current: Arc<InstallContext>,
    /// The cluster with the new member.
    pub next: Arc<InstallContext>,
    /// The new member.
    pub member: String,
    /// A running member that adds it.
    pub via: String,
}

impl Module for EtcdJoinModule {
    fn name(&self) -> &str {
        "etcd-join"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let current = Arc::new(EtcdLayout::from_context(&self.current));
        let mut next = EtcdLayout::from_context(&self.next);
        next.joining = BTreeSet::from([self.member.clone()]);
        let next = Arc::new(next);
        let member = next
            .member(&self.member)
            .ok_or_else(|| {
                StepError::Invalid(format!(
                    "{} has no etcd role in the new cluster",
                    self.member
                ))
            })?
            .clone();
        Ok(vec![
            Task::new("etcd-member-add", [self.via.clone()]).step(MemberAdd {
                etcdctl: current.etcdctl(&self.via),
                name: member.name.clone(),
                peer: next.peer_url(&member),
            }),
            Task::new("install-etcd", [self.member.clone()])
                .step(EtcdBinaries {
                    ctx: self.next.clone(),
                    layout: next.clone(),
                })
                .step(EtcdConfig {
                    layout: next.clone(),
                })
                .step(StartEtcd),
            Task::new("etcd-member-started", [self.member.clone()])
                .step(MemberStarted {
                    etcdctl: next.etcdctl(&self.member),
                    name: member.name.clone(),
                })
                .step(EtcdHealth { layout: next }),
        ])
    }
}

/// `etcdctl member add NAME --peer-urls=PEER`, skipped when that peer URL is listed already.
pub struct MemberAdd {
    /// etcdctl against the running members.
    pub etcdctl: Script,
    /// The member's name.
    pub name: String,
    /// Its peer URL.
    pub peer: String,
}

impl Step for MemberAdd {
    fn name(&self) -> &str {
        "etcd-member-add"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let e = script!("{} --command-timeout=10s", self.etcdctl);
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "{e} member add {name} --peer-urls={peer} >/dev/null",
                e = e,
                name = self.name,
                peer = self.peer
            ))
            .unless(listed(&e, &self.peer))
            // Only a member that never started is taken back.
            .undo(script!(
                "id=$({e} member list | grep -F -- {pattern} | cut -d, -f1)\n[ -z \"$id\" ] || {e} member remove \"$id\" >/dev/null",
                e = e,
                pattern = format!(", unstarted, , {},", self.peer)
            ))
            .timeout(Duration::from_secs(90)),
        )])
    }
    fn policy(&self) -> Policy {
        one_shot(Duration::from_secs(120))
    }
}

/// Waits until the member reports started under its name.
pub struct MemberStarted {
    /// etcdctl on the member.
    pub etcdctl: Script,
    /// The member's name.
    pub name: String,
}

impl Step for MemberStarted {
    fn name(&self) -> &str {
        "etcd-member-started"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: format!("etcd member {} started", self.name),
            check: format!(
                "{} --command-timeout=10s member list | grep -qE {}",
                self.etcdctl,
                shell::quoted(&format!("^[0-9a-f]+, started, {}, ", self.name))
            ),
            timeout: Duration::from_secs(180),
            interval: Duration::from_secs(3),
        })])
    }
    fn policy(&self) -> Policy {
        one_shot(Duration::from_secs(240))
    }
}

/// An etcd member leaves (see the module documentation).
pub struct EtcdLeaveModule {
    /// The cluster as it is now.
    pub current: Arc<InstallContext>,
    /// The cluster without the member.
    pub next: Arc<InstallContext>,
    /// The member leaving.
    pub member: String,
    /// A member that stays and removes it.
    pub via: String,
}

impl Module for EtcdLeaveModule {
    fn name(&self) -> &str {
        "etcd-member-remove"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let current = EtcdLayout::from_context(&self.current);
        let next = Arc::new(EtcdLayout::from_context(&self.next));
        let member = current
            .member(&self.member)
            .ok_or_else(|| StepError::Invalid(format!("{} is not an etcd member", self.member)))?;
        Ok(vec![Task::new("etcd-member-remove", [self.via.clone()])
            .step(MemberRemove {
                etcdctl: next.etcdctl(&self.via),
                name: member.name.clone(),
                peer: current.peer_url(member),
            })
            .step(EtcdHealth { layout: next })])
    }
}

/// `etcdctl member remove ID` of the member with that peer URL, checked gone.
pub struct MemberRemove {
    /// etcdctl against the members that stay.
    pub etcdctl: Script,
    /// The member's name (for messages).
    pub name: String,
    /// Its peer URL (what identifies it, started or not).
    pub peer: String,
}

impl Step for MemberRemove {
    fn name(&self) -> &str {
        "etcd-member-remove"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let e = script!("{} --command-timeout=10s", self.etcdctl);
        let gone = script!("! {}", listed(&e, &self.peer));
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "set -e\nid=$({e} member list | grep -F -- {pattern} | cut -d, -f1)\n[ -n \"$id\" ]\n{e} member remove \"$id\" >/dev/null",
                e = e,
                pattern = format!(", {},", self.peer)
            ))
            .unless(gone.clone())
            .verify(gone)
            .timeout(Duration::from_secs(90)),
        )])
    }
    fn policy(&self) -> Policy {
        one_shot(Duration::from_secs(120))
    }
}

/// etcd stopped and removed (but for its certificates) on a node that stays in the cluster.
pub struct RetireEtcdModule {
    /// The cluster as it is now (the member's layout).
    pub current: Arc<InstallContext>,
    /// The node.
    pub member: String,
}

impl Module for RetireEtcdModule {
    fn name(&self) -> &str {
        "etcd-retire"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let l = EtcdLayout::from_context(&self.current);
        Ok(vec![Task::new("etcd-retire", [self.member.clone()]).step(
            RetireEtcd {
                data_dir: l.data_dir.clone(),
                config: l.config.clone(),
            },
        )])
    }
}

/// Stops and disables etcd; removes its data, configuration and unit.
pub struct RetireEtcd {
    /// The data directory.
    pub data_dir: String,
    /// The configuration file.
    pub config: String,
}

impl Step for RetireEtcd {
    fn name(&self) -> &str {
        "etcd-retire"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let (d, c) = (shell::quoted(&self.data_dir), shell::quoted(&self.config));
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "systemctl disable --now {UNIT} 2>/dev/null || systemctl stop {UNIT} 2>/dev/null || true\nrm -rf -- {d}\nrm -f -- {c} {UNIT_FILE}\nrmdir \"$(dirname -- {c})\" 2>/dev/null || true\nsystemctl daemon-reload\nsystemctl reset-failed {UNIT} 2>/dev/null || true", d = d, c = c
            ))
            .unless(script!(
                "[ ! -e {UNIT_FILE} ] && [ ! -e {d} ] && [ ! -e {c} ] && ! systemctl is-active -q {UNIT}", d = d, c = c
            )),
        )])
    }
}

/// Every API server's etcd endpoints follow the members (see the module documentation).
pub struct ApiServerEtcdModule {
    /// The cluster with its new members.
    pub ctx: Arc<InstallContext>,
}

impl Module for ApiServerEtcdModule {
    fn name(&self) -> &str {
        "apiserver-etcd-servers"
    }
    fn skip(&self) -> Option<String> {
        (self.ctx.cluster.file.spec.etcd.kind != EtcdType::Kubexm).then(|| {
            "etcd.type is not kubexm: the API servers' etcd endpoints do not change".to_string()
        })
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.ctx;
        let masters = ctx.with_role(Role::Master);
        let servers = EtcdLayout::from_context(ctx).client_endpoints().join(",");
        match ctx.cluster.file.spec.kubernetes.kind {
            KubernetesType::Kubeadm => {
                let settings = Arc::new(KubeadmSettings::new(
                    ctx,
                    crate::modules::certs::rotate_kubeadm_ca::kubeadm_inputs(ctx)?,
                )?);
                let first = ctx.first_master()?.name.clone();
                let lb = &ctx.cluster.file.spec.load_balancer;
                let kube_vip =
                    lb.mode == LbMode::Internal && lb.internal.kind == InternalLbType::KubeVip;
                Ok(vec![
                    Task::new("cluster-configuration", [first]).step(UploadClusterConfiguration {
                        settings,
                        manifests_prefilled: kube_vip,
                    }),
                    Task::new("apiserver-etcd-servers", masters)
                        .serial()
                        .step(StaticPodEtcdServers { servers }),
                ])
            }
            KubernetesType::Kubexm => {
                let k = Arc::new(KubexmCluster::new(ctx)?);
                Ok(vec![Task::new("apiserver-etcd-servers", masters)
                    .serial()
                    .step(ApiServer { k: k.clone() })
                    .step(WaitControlPlane { k })])
            }
        }
    }
}

/// kubeadm's configuration on the first master rendered from the cluster as it is now and
/// uploaded (`kubeadm init phase upload-config kubeadm`) when it changed: later control-plane
/// joins read their etcd endpoints from it.
pub struct UploadClusterConfiguration {
    /// The cluster's kubeadm settings.
    pub settings: Settings,
    /// kube-vip's static pod is placed before init (as the kubeadm module renders it).
    pub manifests_prefilled: bool,
}

impl Step for UploadClusterConfiguration {
    fn name(&self) -> &str {
        "upload-cluster-configuration"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let n = self.settings.node(node, true, self.manifests_prefilled);
        Ok(vec![
            Op::Template(self.settings.render_init(&n)?),
            Op::Run(
                RunCommand::new(script!(
                    "{} init phase upload-config kubeadm --config {INIT_CONFIG} >/dev/null",
                    crate::modules::kubeadm::binaries::KUBEADM
                ))
                .when_changed(),
            ),
        ])
    }
}

/// The `--etcd-servers` flag of the API server's static pod set to `servers`; then the kubelet's
/// new API server (with that flag) must run and answer `/readyz` on this master.
pub struct StaticPodEtcdServers {
    /// The comma-separated client URLs.
    pub servers: String,
}

impl Step for StaticPodEtcdServers {
    fn name(&self) -> &str {
        "apiserver-etcd-servers"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let flag = format!("--etcd-servers={}", self.servers);
        let has = script!(
            "sed -n 's/^ *- //p' {APISERVER_MANIFEST} | grep -qxF -- {}",
            flag
        );
        let server = crate::modules::k8s::host_url(
            &node.internal_address,
            crate::modules::k8s::APISERVER_PORT,
        );
        Ok(vec![
            Op::Run(
                RunCommand::new(script!(
                    // Written beside, then renamed: the kubelet reads every file of the manifests
                    // directory, so no temporary file may appear there.
                    "set -e\ngrep -q -- '^ *- --etcd-servers=' {APISERVER_MANIFEST} || {{ echo '{APISERVER_MANIFEST} has no --etcd-servers flag' >&2; exit 1; }}\ncp -a {APISERVER_MANIFEST} {BACKUP}\nsed 's#^\\( *- --etcd-servers=\\).*#\\1{servers}#' {APISERVER_MANIFEST} > {BACKUP}.new\nchmod 600 {BACKUP}.new\nmv -f {BACKUP}.new {APISERVER_MANIFEST}",
                    servers = shell::in_single_quotes(&self.servers)
                ))
                .unless(has)
                .undo(script!(
                    "if [ -e {BACKUP} ]; then mv -f {BACKUP} {APISERVER_MANIFEST}; fi"
                )),
            ),
            Op::Wait(WaitFor {
                what: format!("the kubelet runs {}'s API server with the new etcd endpoints", node.name),
                check: format!(
                    "pgrep -f -- {} >/dev/null",
                    shell::quoted(&format!("kube-apiserver .*{flag}( |$)"))
                ),
                timeout: Duration::from_secs(180),
                interval: Duration::from_secs(2),
            }),
            Op::Wait(WaitFor {
                what: format!("{}'s API server answering /readyz", node.name),
                check: format!("{} --server {server} get --raw=/readyz >/dev/null", kubectl()),
                timeout: Duration::from_secs(180),
                interval: Duration::from_secs(2),
            }),
        ])
    }
    fn policy(&self) -> Policy {
        one_shot(Duration::from_secs(420))
    }
}

/// Stacked etcd: the member of a master that left is gone (removed through a master that stays
/// when the node could not run `kubeadm reset` itself).
pub struct StackedMemberGoneModule {
    /// The cluster without the master.
    pub ctx: Arc<InstallContext>,
    /// The master that left.
    pub member: String,
    /// Its internal address (its peer URL's host).
    pub address: String,
    /// Remove it here (the node was unreachable); else only check.
    pub remove: bool,
}

impl Module for StackedMemberGoneModule {
    fn name(&self) -> &str {
        "stacked-etcd-member"
    }
    fn skip(&self) -> Option<String> {
        (self.ctx.cluster.file.spec.etcd.kind != EtcdType::Kubeadm)
            .then(|| "etcd.type is not kubeadm".to_string())
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let first = self.ctx.first_master()?.clone();
        let k = kubectl_on(&self.ctx, &first)?;
        let e = stacked_etcdctl(&k, &first.name);
        let peer = format!(
            "{}:{}",
            if self.address.contains(':') {
                format!("https://[{}]", self.address)
            } else {
                format!("https://{}", self.address)
            },
            crate::modules::etcd::PEER_PORT
        );
        let step = MemberRemove {
            etcdctl: e.clone(),
            name: self.member.clone(),
            peer: peer.clone(),
        };
        let mut t = Task::new("stacked-etcd-member-gone", [first.name.clone()]);
        if self.remove {
            t = t.step(step);
        } else {
            t = t.step(MemberGone {
                etcdctl: e,
                name: self.member.clone(),
                peer,
            });
        }
        Ok(vec![t])
    }
}

/// A check: the member with this peer URL is no longer listed (kubeadm reset removed it).
pub struct MemberGone {
    /// etcdctl.
    pub etcdctl: Script,
    /// The member's name (messages).
    pub name: String,
    /// Its peer URL.
    pub peer: String,
}

impl Step for MemberGone {
    fn name(&self) -> &str {
        "etcd-member-gone"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: format!("etcd member {} gone", self.name),
            check: format!("! {}", listed(&self.etcdctl, &self.peer)),
            timeout: Duration::from_secs(60),
            interval: Duration::from_secs(3),
        })])
    }
}
