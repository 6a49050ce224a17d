//! Module: Kubernetes with kubeadm (`kubernetes.type: kubeadm`, the default).
//!
//! Tasks, in order:
//! 1. `kubernetes-binaries` (every master and worker): kubeadm, kubelet, kubectl (masters) from
//!    the bundle; the kubelet unit with kubeadm's drop-in, enabled.
//! 2. `kube-vip-first-master` (kube-vip only): the VIP holder's static pod before init
//!    ([`crate::modules::internal_lb`]).
//! 3. `kubeadm-init` (first master): the configuration ([`config`]) and `kubeadm init
//!    --upload-certs`, its whole output kept; the API server must answer.
//! 4. `fetch-admin-kubeconfig`: `/etc/kubernetes/admin.conf` copied to the control host
//!    (`WORK/pki/<cluster>/admin.conf`, 0600).
//! 5. `join-credentials` (first master): token, CA hash and certificate key parsed from kubeadm's
//!    output ([`join`]), fresh ones issued when the token is near its end or the uploaded
//!    certificates are gone. Never skipped by `--resume` (they live in the run's memory).
//! 6. `join-control-plane` (the other masters, one at a time: stacked etcd adds one member per
//!    join), then `join-workers` (the workers that are not masters, in parallel); the local API
//!    proxy of the internal load balancer on those workers after they joined.
//! 7. `node-roles` (first master): labels and taints per role ([`labels`]).
//!
//! Every step is skipped when already done (`kubeadm init` when admin.conf exists, a join when
//! the node has kubelet.conf), so a re-run changes nothing.

pub mod binaries;
pub mod config;
pub mod init;
pub mod join;
pub mod joining;
pub mod labels;

use kubexm_manifests::resolve::Role;
use std::path::PathBuf;
use std::sync::Arc;

use kubexm_manifests::model::{EtcdType, InternalLbType, KubernetesType, LbMode};

use super::internal_lb::{
    KubeProxyViaLocalProxy, KubeVip, KubeletViaLocalProxy, LocalProxy, LocalProxyKind,
};
use crate::context::InstallContext;
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use binaries::{KubeBinaries, KubeletService, KUBEADM, KUBELET_DROPIN, KUBELET_UNIT};
use config::KubeadmSettings;
use init::{FetchAdminKubeconfig, InitControlPlane, LearnJoinCredentials, ADMIN_CONF};
use joining::JoinNode;
use labels::NodeRoles;

/// kubeadm's "super admin" kubeconfig (v1.29+), which has its rights before init ends.
pub const SUPER_ADMIN_CONF: &str = "/etc/kubernetes/super-admin.conf";

/// Where the cluster's admin kubeconfig is kept on the control host.
pub fn admin_kubeconfig_path(ctx: &InstallContext) -> PathBuf {
    ctx.pki_dir.join("admin.conf")
}

/// The masters and workers.
fn kubernetes_nodes(ctx: &InstallContext) -> Vec<String> {
    ctx.nodes
        .iter()
        .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
        .map(|n| n.name.clone())
        .collect()
}

/// The kubeadm module.
pub struct KubeadmModule(pub Arc<InstallContext>);

impl Module for KubeadmModule {
    fn name(&self) -> &str {
        "kubeadm"
    }

    fn skip(&self) -> Option<String> {
        (self.0.cluster.file.spec.kubernetes.kind != KubernetesType::Kubeadm).then(|| {
            "kubernetes.type is kubexm: the control plane runs from binaries as systemd services"
                .to_string()
        })
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let settings = Arc::new(KubeadmSettings::new(ctx)?);
        let first = ctx.first_master()?.name.clone();
        let masters = ctx.with_role(Role::Master);
        let others: Vec<String> = masters.iter().skip(1).cloned().collect();
        let workers: Vec<String> = ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Worker) && !n.has_role(Role::Master))
            .map(|n| n.name.clone())
            .collect();
        let lb = &ctx.cluster.file.spec.load_balancer;
        let internal = (lb.mode == LbMode::Internal).then_some(lb.internal.kind);
        let kube_vip = internal == Some(InternalLbType::KubeVip);
        let local_proxy = match internal {
            Some(InternalLbType::Haproxy) => Some(LocalProxyKind::Haproxy),
            Some(InternalLbType::Nginx) => Some(LocalProxyKind::Nginx),
            _ => None,
        };

        let mut tasks = vec![Task::new("kubernetes-binaries", kubernetes_nodes(ctx))
            .step(KubeBinaries { ctx: ctx.clone() })
            .step(KubeletService {
                cluster: ctx.cluster.file.metadata.name.clone(),
            })];
        let mut init = Task::new("kubeadm-init", [first.clone()]);
        if kube_vip {
            // Before v1.29 admin.conf has its rights from the start.
            let before_init = if ctx.cluster.version.at_least(1, 29) {
                SUPER_ADMIN_CONF
            } else {
                ADMIN_CONF
            };
            tasks.push(
                Task::new("kube-vip-first-master", [first.clone()])
                    .step(KubeVip::new(ctx, before_init)?),
            );
        }
        init = init.step(InitControlPlane {
            settings: settings.clone(),
            manifests_prefilled: kube_vip,
        });
        if kube_vip {
            init = init.step(KubeVip::new(ctx, ADMIN_CONF)?);
        }
        tasks.push(init);
        tasks.push(Task::new("fetch-admin-kubeconfig", [first.clone()]).step(
            FetchAdminKubeconfig {
                dest: admin_kubeconfig_path(ctx),
            },
        ));
        if !others.is_empty() || !workers.is_empty() {
            tasks.push(
                Task::new("join-credentials", [first.clone()]).step(LearnJoinCredentials {
                    control_planes: !others.is_empty(),
                }),
            );
        }
        if !others.is_empty() {
            let mut t = Task::new("join-control-plane", others)
                .serial()
                .step(JoinNode {
                    settings: settings.clone(),
                    control_plane: true,
                });
            if kube_vip {
                t = t.step(KubeVip::new(ctx, ADMIN_CONF)?);
            }
            tasks.push(t);
        }
        if !workers.is_empty() {
            let mut t = Task::new("join-workers", workers).step(JoinNode {
                settings: settings.clone(),
                control_plane: false,
            });
            if let Some(kind) = local_proxy {
                t = t
                    .step(LocalProxy::new(ctx, kind)?)
                    .step(KubeletViaLocalProxy);
            }
            tasks.push(t);
            if local_proxy.is_some() {
                tasks.push(
                    Task::new("kube-proxy-via-local-proxy", [first.clone()]).step(
                        KubeProxyViaLocalProxy {
                            endpoint: ctx.control_plane_endpoint()?.url(),
                        },
                    ),
                );
            }
        }
        tasks.push(Task::new("node-roles", [first]).step(NodeRoles::new(ctx)));
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
/// 3. The pod network's traces: CNI configurations and state (`/etc/cni/net.d`,
///    `/var/lib/cni`, flannel/calico/cilium run directories), the plugins' own binaries in
///    `/opt/cni/bin` (the runtime delete then removes the directory), their interfaces (cni0,
///    flannel.1, vxlan.calico, cilium_*, kube-ipvs0, nodelocaldns), IPVS services, and the
///    iptables chains of kube-proxy, flannel, calico, cilium and NodeLocal DNSCache.
pub struct KubeadmDeleteModule(pub Arc<InstallContext>);

/// The kubeadm delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> KubeadmDeleteModule {
    KubeadmDeleteModule(ctx.clone())
}

/// CNI plugin binaries the network plugins install into `/opt/cni/bin`.
const CNI_PLUGIN_BINARIES: &str = "flannel calico calico-ipam cilium-cni install";
/// Interfaces Kubernetes networking creates on nodes.
const INTERFACES: &str = "cni0 flannel.1 flannel-v6.1 vxlan.calico vxlan-v6.calico cilium_host cilium_net cilium_vxlan kube-ipvs0 nodelocaldns";
/// iptables rules and chains of kube-proxy, the CNI plugins and NodeLocal DNSCache.
const IPTABLES_PATTERN: &str = "KUBE-|FLANNEL|cali-|CILIUM|169\\.254\\.25\\.10";
/// CNI state directories.
const CNI_STATE: &str = "/var/lib/cni /run/flannel /var/run/calico /var/lib/calico /var/run/cilium";

impl Module for KubeadmDeleteModule {
    fn name(&self) -> &str {
        "delete-kubeadm"
    }
    fn skip(&self) -> Option<String> {
        KubeadmModule(self.0.clone()).skip()
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
        let bins = "/usr/local/bin/kubeadm /usr/local/bin/kubelet /usr/local/bin/kubectl /usr/local/bin/helm";
        let staging = "/var/lib/kubexm/artifacts/kubeadm /var/lib/kubexm/artifacts/kubelet /var/lib/kubexm/artifacts/kubectl /var/lib/kubexm/artifacts/helm /var/lib/kubexm/extract/helm-*";
        let etcd = if self.stacked {
            config::STACKED_ETCD_DATA
        } else {
            ""
        };
        let files = format!(
            "{KUBELET_UNIT} {KUBELET_DROPIN} {bins} /etc/kubernetes /var/lib/kubelet {} {etcd}",
            super::internal_lb::PROXY_DIR
        );
        let gone: Vec<String> = files
            .split_whitespace()
            .map(|p| format!("[ ! -e {p} ]"))
            .collect();
        let cni_bins: Vec<String> = CNI_PLUGIN_BINARIES
            .split_whitespace()
            .map(|b| format!("/opt/cni/bin/{b}"))
            .collect();
        Ok(vec![
            Op::Run(
                RunCommand::new(format!(
                    "{KUBEADM} reset -f >/dev/null 2>&1 || true"
                ))
                .unless(format!(
                    "[ ! -x {KUBEADM} ] || {{ [ ! -e /etc/kubernetes/kubelet.conf ] && [ ! -e {ADMIN_CONF} ] && [ -z \"$(ls -A /etc/kubernetes/manifests 2>/dev/null)\" ]; }}"
                )),
            ),
            Op::Run(
                RunCommand::new(
                    "systemctl disable --now kubelet 2>/dev/null || systemctl stop kubelet 2>/dev/null || true",
                )
                .unless(format!(
                    "! {} || {{ ! systemctl is-enabled -q kubelet 2>/dev/null && ! systemctl is-active -q kubelet; }}",
                    super::delete::written_by_kubexm(KUBELET_UNIT)
                )),
            ),
            Op::Run(
                RunCommand::new(format!(
                    "grep -o ' /var/lib/kubelet/[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true\nrm -rf -- {files} {staging}\nrmdir /etc/systemd/system/kubelet.service.d 2>/dev/null || true\nsystemctl daemon-reload"
                ))
                .unless(format!(
                    "{} && ! ls -d {staging} >/dev/null 2>&1",
                    gone.join(" && ")
                )),
            ),
            Op::Run(
                RunCommand::new(format!(
                    "rm -f -- {cni} /etc/cni/net.d/*flannel* /etc/cni/net.d/*calico* /etc/cni/net.d/*cilium* /etc/cni/net.d/calico-kubeconfig\nrmdir /etc/cni/net.d /etc/cni 2>/dev/null || true\nrm -rf -- {CNI_STATE}\nfor i in {INTERFACES}; do ip link delete \"$i\" 2>/dev/null || true; done\nif command -v ipvsadm >/dev/null 2>&1; then ipvsadm --clear 2>/dev/null || true; fi\nfor t in iptables ip6tables; do\n  command -v $t-save >/dev/null 2>&1 || continue\n  if $t-save 2>/dev/null | grep -qE '{IPTABLES_PATTERN}'; then $t-save | grep -vE '{IPTABLES_PATTERN}' | $t-restore; fi\ndone",
                    cni = cni_bins.join(" ")
                ))
                .unless(format!(
                    "{cni_gone} && ! ls /etc/cni/net.d/*flannel* /etc/cni/net.d/*calico* /etc/cni/net.d/*cilium* >/dev/null 2>&1 && ! ls -d {CNI_STATE} >/dev/null 2>&1 && for i in {INTERFACES}; do ! ip link show \"$i\" >/dev/null 2>&1 || exit 1; done && for t in iptables ip6tables; do ! $t-save 2>/dev/null | grep -qE '{IPTABLES_PATTERN}' || exit 1; done",
                    cni_gone = cni_bins
                        .iter()
                        .map(|b| format!("[ ! -e {b} ]"))
                        .collect::<Vec<_>>()
                        .join(" && ")
                )),
            ),
        ])
    }
}
