//! Module: Kubernetes with kubeadm (`kubernetes.type: kubeadm`, the default).
//!
//! Tasks, in order:
//! 1. `kubernetes-binaries` (every master and worker): kubeadm, kubelet, kubectl (masters) from
//!    the bundle; the kubelet unit with kubeadm's drop-in, enabled.
//! 2. `kube-vip-first-master` (kube-vip only): the VIP holder's static pod before init
//!    ([`crate::modules::internal_lb`]).
//! 3. `kubeadm-init` (first master): the configuration ([`config`]) and `kubeadm init
//!    --upload-certs`, its whole output kept; the API server must answer, then its
//!    controller-manager and scheduler ([`settle`]).
//! 4. `fetch-admin-kubeconfig`: `/etc/kubernetes/admin.conf` copied to the control host
//!    (`WORK/pki/<cluster>/admin.conf`, 0600).
//! 5. `join-credentials` (first master): token, CA hash and certificate key parsed from kubeadm's
//!    output ([`join`]), fresh ones issued when the token is near its end or the uploaded
//!    certificates are gone. Never skipped by `--resume` (they live in the run's memory).
//! 6. `join-control-plane` (the other masters, one at a time: stacked etcd adds one member per
//!    join; each node's control plane must settle before the next joins), then
//!    `kube-proxy-after-control-plane-joins` (kube-proxy restarted once: [`settle`]), then
//!    `join-workers` (the workers that are not masters, in parallel); the local API proxy of
//!    the internal load balancer on those workers after they joined.
//! 7. With the internal haproxy/nginx: every kubelet and kube-proxy through `127.0.0.1:6443` — a
//!    master's own API server, a worker's local proxy — so no node depends on the first master,
//!    to which the endpoint's name resolves ([`crate::modules::internal_lb`]).
//! 8. `kubeadm-reconfigure` (every master, one at a time): on a re-run, API server SAN and
//!    control-plane flag changes applied with kubeadm's phases, other changes reported as
//!    needing the `apply` pipeline ([`reconfigure`]).
//! 9. `node-roles` (first master): labels and taints per role ([`labels`]).
//! 10. `kubelet-serving-csrs`, `approve-kubelet-serving-csrs` (first master): every kubelet
//!     runs with `serverTLSBootstrap: true`; the pending `kubernetes.io/kubelet-serving` CSRs
//!     of this cluster's nodes that name only the node's own name and addresses are approved,
//!     so kubelets serve certificates of the cluster CA (metrics-server): [`serving_csr`].
//!     Then `kubelet-serving-settle` (every node without a serving certificate yet: a short
//!     bounded wait), `kubelet-serving-csrs-again`, `approve-kubelet-serving-csrs-again` (a kubelet
//!     restarted after it asked asks again) and `kubelet-serving-certificates` (every kubelet
//!     serves its certificate, awaited).
//!
//! Every step is skipped when already done (`kubeadm init` when admin.conf exists, a join when
//! the node has kubelet.conf), so a re-run with the same cluster.yaml changes nothing; a changed
//! cluster.yaml is compared with what kubeadm applied ([`reconfigure`]), never ignored.

pub mod binaries;
pub mod config;
pub mod init;
pub mod join;
pub mod joining;
pub mod labels;
pub mod node_settings;
pub mod reconfigure;
pub mod serving_csr;
pub mod settle;

use crate::modules::k8s::{admin_kubeconfig_path, ADMIN_CONF};
use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;

use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, InternalLbType, KubernetesType, LbMode};

use super::internal_lb::{
    KubeProxyViaLocalProxy, KubeVip, KubeletViaLocalProxy, LocalProxy, LocalProxyKind,
};
use crate::context::InstallContext;
use crate::modules::task_id::TaskId;
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use binaries::{KubeBinaries, KubeletService, KUBEADM, KUBELET_DROPIN, KUBELET_UNIT};
use config::{KubeadmInputs, KubeadmSettings};
use init::{FetchAdminKubeconfig, InitControlPlane, LearnJoinCredentials};
use joining::JoinNode;
use labels::NodeRoles;
use node_settings::{KubeProxySettings, KubeletSettings};
use reconfigure::Reconfigure;
use settle::{ControlPlaneSettled, RestartKubeProxy};

/// kube-vip's static pod on the first master before `kubeadm init`.
pub const KUBE_VIP_FIRST_MASTER: TaskId = TaskId::new("kube-vip-first-master");
/// The join credentials learned on the first master.
pub const JOIN_CREDENTIALS: TaskId = TaskId::new("join-credentials");
/// The other masters joining, one at a time.
pub const JOIN_CONTROL_PLANE: TaskId = TaskId::new("join-control-plane");
/// The workers joining.
pub const JOIN_WORKERS: TaskId = TaskId::new("join-workers");
/// Every master reconfigured with kubeadm's phases (API server SANs, control-plane flags).
pub const KUBEADM_RECONFIGURE: TaskId = TaskId::new("kubeadm-reconfigure");

/// kubeadm's "super admin" kubeconfig (v1.29+), which has its rights before init ends.
pub const SUPER_ADMIN_CONF: &str = "/etc/kubernetes/super-admin.conf";

/// The masters and workers.
fn kubernetes_nodes(ctx: &InstallContext) -> Vec<String> {
    ctx.nodes
        .iter()
        .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
        .map(|n| n.name.clone())
        .collect()
}

/// The kubeadm module, handed what its settings take from outside cluster.yaml.
pub struct KubeadmModule {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// The settings' inputs (the cluster CA's rotation state, read by the caller).
    pub inputs: KubeadmInputs,
}

impl KubeadmModule {
    /// The module for `ctx` with `inputs`.
    pub fn new(ctx: Arc<InstallContext>, inputs: KubeadmInputs) -> Self {
        Self { ctx, inputs }
    }
}

/// Why the kubeadm modules skip: `kubernetes.type` is not kubeadm.
fn skip_reason(ctx: &InstallContext) -> Option<String> {
    (ctx.cluster.file.spec.kubernetes.kind != KubernetesType::Kubeadm).then(|| {
        "kubernetes.type is kubexm: the control plane runs from binaries as systemd services"
            .to_string()
    })
}

impl Module for KubeadmModule {
    fn name(&self) -> &str {
        "kubeadm"
    }

    fn skip(&self) -> Option<String> {
        skip_reason(&self.ctx)
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.ctx;
        let settings = Arc::new(KubeadmSettings::new(ctx, self.inputs)?);
        let first = ctx.first_master()?.name.clone();
        let masters = ctx.with_role(Role::Master);
        let others: Vec<String> = masters.iter().skip(1).cloned().collect();
        let workers = ctx.workers_only();
        let lb = &ctx.cluster.file.spec.load_balancer;
        let internal = (lb.mode == LbMode::Internal).then_some(lb.internal.kind);
        let kube_vip = internal == Some(InternalLbType::KubeVip);
        let local_proxy = match internal {
            Some(InternalLbType::Haproxy) => Some(LocalProxyKind::Haproxy),
            Some(InternalLbType::Nginx) => Some(LocalProxyKind::Nginx),
            _ => None,
        };

        let mut binaries = Task::new("kubernetes-binaries", kubernetes_nodes(ctx))
            .step(KubeBinaries { ctx: ctx.clone() })
            .step(KubeletService {
                cluster: ctx.cluster.file.metadata.name.clone(),
                cri: crate::modules::runtime::cri::Cri::of(ctx),
            });
        if crate::modules::security::enabled(ctx) {
            // On the masters before `kubeadm init`/`join`: the static pod mounts them.
            binaries = binaries.step(crate::modules::security::AuditPolicy { ctx: ctx.clone() });
        }
        let mut tasks = vec![binaries];
        let mut init = Task::new("kubeadm-init", [first.clone()]);
        if kube_vip {
            // From v1.29 kubeadm's admin.conf gets its rights only at the end of init: kube-vip
            // holds the VIP with super-admin.conf until then, and only before the first init
            // (a re-run leaves the running kube-vip alone). Before v1.29 there is no
            // super-admin.conf and admin.conf has its rights from the start.
            let step = if ctx.cluster.version.has_super_admin_conf() {
                KubeVip::before_init(ctx, SUPER_ADMIN_CONF)?
            } else {
                KubeVip::new(ctx, ADMIN_CONF)?
            };
            tasks.push(Task::new(KUBE_VIP_FIRST_MASTER, [first.clone()]).step(step));
        }
        init = init.step(InitControlPlane {
            settings: settings.clone(),
            manifests_prefilled: kube_vip,
        });
        if kube_vip {
            init = init.step(KubeVip::new(ctx, ADMIN_CONF)?);
        }
        init = init.step(ControlPlaneSettled);
        if local_proxy.is_some() {
            // Its kubelet talks to its own API server, not through the endpoint's name.
            init = init.step(KubeletViaLocalProxy);
        }
        tasks.push(init);
        tasks.push(Task::new("fetch-admin-kubeconfig", [first.clone()]).step(
            FetchAdminKubeconfig {
                src: ADMIN_CONF.to_string(),
                dest: admin_kubeconfig_path(ctx),
            },
        ));
        if !others.is_empty() || !workers.is_empty() {
            tasks.push(
                Task::new(JOIN_CREDENTIALS, [first.clone()]).step(LearnJoinCredentials {
                    control_planes: !others.is_empty(),
                }),
            );
        }
        if !others.is_empty() {
            let mut t = Task::new(JOIN_CONTROL_PLANE, others.clone())
                .serial()
                .step(JoinNode {
                    settings: settings.clone(),
                    control_plane: true,
                })
                .step(ControlPlaneSettled);
            if kube_vip {
                t = t.step(KubeVip::new(ctx, ADMIN_CONF)?);
            }
            if local_proxy.is_some() {
                t = t.step(KubeletViaLocalProxy);
            }
            tasks.push(t);
            tasks.push(
                Task::new("kube-proxy-after-control-plane-joins", [first.clone()])
                    .step(RestartKubeProxy { joined: others }),
            );
        }
        if !workers.is_empty() {
            let mut t = Task::new(JOIN_WORKERS, workers).step(JoinNode {
                settings: settings.clone(),
                control_plane: false,
            });
            if let Some(kind) = local_proxy {
                t = t
                    .step(LocalProxy::new(ctx, kind)?)
                    .step(KubeletViaLocalProxy);
            }
            tasks.push(t);
        }
        tasks.push(
            Task::new(KUBEADM_RECONFIGURE, masters.clone())
                .serial()
                .step(Reconfigure {
                    settings: settings.clone(),
                    first: first.clone(),
                }),
        );
        // Masters first (the first master uploads the kubelet ConfigMap), one node at a time.
        let mut masters_first = masters.clone();
        masters_first.extend(
            kubernetes_nodes(ctx)
                .into_iter()
                .filter(|n| !masters.contains(n)),
        );
        tasks.push(
            Task::new("kubelet-settings", masters_first)
                .serial()
                .step(KubeletSettings {
                    settings: settings.clone(),
                    first: first.clone(),
                    masters: masters.clone(),
                }),
        );
        tasks.push(
            Task::new("kube-proxy-settings", [first.clone()]).step(KubeProxySettings {
                settings: settings.clone(),
            }),
        );
        if local_proxy.is_some() {
            // Every node's kube-proxy through 127.0.0.1:6443: its own API server on a master,
            // the local proxy on a worker (after kube-proxy's settings: kubeadm writes the
            // endpoint back into its ConfigMap).
            tasks.push(
                Task::new("kube-proxy-via-local-proxy", [first.clone()]).step(
                    KubeProxyViaLocalProxy {
                        endpoint: ctx.control_plane_endpoint()?.url(),
                    },
                ),
            );
        }
        tasks.push(Task::new("node-roles", [first.clone()]).step(NodeRoles::new(ctx)));
        // Kubelet serving certificates from the cluster CA (metrics-server checks them):
        // every kubelet asks with `serverTLSBootstrap`, KubeXM approves only its nodes' own.
        let kube_nodes = kubernetes_nodes(ctx);
        let kube_nodes: Vec<Node> = ctx
            .nodes
            .iter()
            .filter(|n| kube_nodes.contains(&n.name))
            .cloned()
            .collect();
        tasks.extend(serving_csr::install_approval_tasks(
            &serving_csr::NodeNames::all(ctx, &kube_nodes),
            &first,
        ));
        Ok(tasks)
    }
}

/// The kubeadm part of `delete`, first of the component deletions (it stops every pod), on
/// every master and worker:
///
/// 1. `kubeadm reset -f` (static pods, the node's kubeadm files, stacked etcd's data).
/// 2. The kubelet stopped and disabled; its unit, drop-in and state (`/var/lib/kubelet`, mounts
///    released first) removed; kubeadm, kubelet, kubectl and helm removed from `/usr/local/bin`;
///    `/etc/kubernetes` (KubeXM's init/join files and applied manifests included) and the local
///    API proxy's configuration removed; the bundle copies under `/var/lib/kubexm`.
/// 3. The pod network's traces and the pod logs
///    ([`crate::modules::network::traces::remove_pod_network_traces`]).
pub struct KubeadmDeleteModule(pub Arc<InstallContext>);

/// The kubeadm delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> KubeadmDeleteModule {
    KubeadmDeleteModule(ctx.clone())
}

impl Module for KubeadmDeleteModule {
    fn name(&self) -> &str {
        "delete-kubeadm"
    }
    fn skip(&self) -> Option<String> {
        skip_reason(&self.0)
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let stacked = self.0.cluster.file.spec.etcd.kind == EtcdType::Kubeadm;
        Ok(vec![Task::new(
            "delete-kubernetes",
            kubernetes_nodes(&self.0),
        )
        .step(RemoveKubernetes { stacked })])
    }
}

/// Resets the node and removes what the install put there (see [`KubeadmDeleteModule`]).
pub struct RemoveKubernetes {
    stacked: bool,
}

impl Step for RemoveKubernetes {
    fn name(&self) -> &str {
        "remove-kubernetes"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let bins = Script::new("/usr/local/bin/kubeadm /usr/local/bin/kubelet /usr/local/bin/kubectl /usr/local/bin/helm");
        let staging = Script::new("/var/lib/kubexm/artifacts/kubeadm /var/lib/kubexm/artifacts/kubelet /var/lib/kubexm/artifacts/kubectl /var/lib/kubexm/artifacts/helm /var/lib/kubexm/extract/helm-*");
        let etcd = if self.stacked {
            Script::new(crate::modules::k8s::STACKED_ETCD_DATA)
        } else {
            Script::empty()
        };
        let files = script!(
            "{KUBELET_UNIT} {KUBELET_DROPIN} {bins} /etc/kubernetes /var/lib/kubelet {proxy} {etcd}",
            bins = bins,
            proxy = super::internal_lb::PROXY_DIR,
            etcd = etcd
        );
        let gone = Script::join(
            files
                .split_whitespace()
                .map(|p| script!("[ ! -e {p} ]", p = p)),
            " && ",
        );
        Ok(vec![
            Op::Run(
                RunCommand::new(script!(
                    "{KUBEADM} reset -f >/dev/null 2>&1 || true"
                ))
                .unless(script!(
                    "[ ! -x {KUBEADM} ] || {{ [ ! -e /etc/kubernetes/kubelet.conf ] && [ ! -e {ADMIN_CONF} ] && [ -z \"$(ls -A /etc/kubernetes/manifests 2>/dev/null)\" ]; }}"
                )),
            ),
            Op::Run(
                RunCommand::new(
                    "systemctl disable --now kubelet 2>/dev/null || systemctl stop kubelet 2>/dev/null || true",
                )
                .unless(script!(
                    "! {} || {{ ! systemctl is-enabled -q kubelet 2>/dev/null && ! systemctl is-active -q kubelet; }}",
                    super::delete::written_by_kubexm(KUBELET_UNIT)
                )),
            ),
            Op::Run(
                RunCommand::new(script!(
                    "grep -o ' /var/lib/kubelet/[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true\nrm -rf -- {files} {staging}\nrmdir /etc/systemd/system/kubelet.service.d 2>/dev/null || true\nsystemctl daemon-reload", files = files, staging = staging
                ))
                .unless(script!(
                    "{gone} && ! ls -d {staging} >/dev/null 2>&1",
                    gone = gone,
                    staging = staging
                )),
            ),
            crate::modules::network::traces::remove_pod_network_traces(),
        ])
    }
}
