//! Module area: nodes upgraded to a new Kubernetes version, for `upgrade` (see
//! [`crate::pipelines::upgrade`], which runs one [`UpgradeNodesModule`] per master, then one
//! per batch of workers). Every step takes the **target** version's context: its bundle's
//! binaries, its settings.
//!
//! For one group of nodes, in order:
//!
//! 1. `cordon-drain` (on `via`, a master outside the group): each registered node cordoned and
//!    drained through the eviction API ([`crate::modules::lifecycle::membership`]'s steps: budgets are
//!    respected, a failed drain uncordons the node).
//! 2. kubeadm path, `kubeadm-upgrade` (the nodes): kubeadm, the kubelet and kubectl from the new
//!    bundle, then on the first master the target's configuration uploaded as `kubeadm-config`
//!    (kubeadm keeps the etcd and CoreDNS image tags written there: without it stacked etcd and
//!    CoreDNS stayed at the installed version's) and `kubeadm upgrade apply vX` (control plane,
//!    kube-proxy, CoreDNS, stacked etcd; with the internal load balancer's local proxy,
//!    kube-proxy's kubeconfig put back on `127.0.0.1:6443` after it, as the install does), or
//!    `kubeadm upgrade node` on the others (their static pods, their kubelet configuration); what kubeadm applied is recorded
//!    ([`crate::modules::kubeadm::reconfigure`]) and a marker names the version, so a resumed run skips
//!    a node done. kubexm path, `control-plane` (masters): the new kube-apiserver,
//!    kube-controller-manager, kube-scheduler and kubectl, their units rendered for the new
//!    version, each service restarted when it runs a replaced binary, every one answering
//!    before the next step; then `node-services`: the kubelet and kube-proxy likewise.
//! 3. `restart-kubelet` (kubeadm path): the kubelet restarted onto its new binary, `/healthz`
//!    awaited.
//! 4. `uncordon` (on `via`): each node uncordoned, `Ready` with its kubelet answering, and its
//!    kubelet reporting the new version.
//! 5. `health` (masters): the node's API server answers `/readyz` and reports the new version;
//!    its etcd member (KubeXM's or the stacked one) is healthy with the whole cluster.

use crate::modules::k8s::{host_url, KUBECTL, STATE_DIR};
use crate::runner::shell::Script;
use crate::script;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::KubernetesType;
use kubexm_manifests::resolve::Role;
use kubexm_manifests::version::KubeVersion;

use super::kernel::{ApiServerReady, EtcdHealthy, EtcdMembership, NodeReady, Uncordon};
use super::membership::{kubectl_on, Cordon, Drain, DrainOptions};
use crate::context::InstallContext;
use crate::modules::internal_lb::KubeProxyViaLocalProxy;
use crate::modules::k8s::ADMIN_CONF;
use crate::modules::k8s::APISERVER_PORT;
use crate::modules::kubeadm::binaries::{KubeBinaries, KUBEADM, KUBELET};
use crate::modules::kubeadm::config::{KubeadmSettings, Settings};
use crate::modules::kubeadm::reconfigure::record_applied;
use crate::modules::kubexm::control_plane::{
    self, ApiServer, ControllerManager, Scheduler, WaitControlPlane,
};
use crate::modules::kubexm::node::{KubeProxy, Kubelet};
use crate::modules::kubexm::{Binaries, KubexmCluster};
use crate::pipeline::ops::{Op, RunCommand, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// The target's kubeadm configuration on the first master, uploaded as the cluster's
/// `kubeadm-config` before `kubeadm upgrade apply` (the new etcd and CoreDNS image tags).
pub const UPGRADE_CONFIG: &str = "/etc/kubernetes/kubexm/kubeadm-upgrade.yaml";
/// The file naming the version `kubeadm upgrade` last brought a node to.
pub const KUBEADM_MARKER: &str = "/etc/kubernetes/kubexm/upgraded-to";
/// How long one `kubeadm upgrade apply` or `node` may take (it waits for each static pod).
pub const KUBEADM_TIMEOUT: Duration = Duration::from_secs(1200);
/// How long a restarted component may take to answer.
pub const RESTART_TIMEOUT: Duration = Duration::from_secs(300);

/// One node of a group and what the pipeline knows of it.
#[derive(Debug, Clone)]
pub struct UpgradeNode {
    /// The node (from the target's context).
    pub node: Node,
    /// The API server knows it: cordoned, drained, uncordoned, its version checked.
    pub registered: bool,
    /// Its etcd membership (checked healthy after a master).
    pub etcd: EtcdMembership,
}

/// A group of nodes upgraded together: one master, or a batch of workers.
pub struct UpgradeNodesModule {
    /// The target version's context.
    pub ctx: Arc<InstallContext>,
    /// The nodes.
    pub nodes: Vec<UpgradeNode>,
    /// Where cordon, drain and uncordon run (a master outside the group when there is one).
    pub via: String,
    /// kubeadm path: the node that runs `kubeadm upgrade apply` (the first master).
    pub first: String,
    /// How nodes are drained.
    pub drain: DrainOptions,
    /// Its title (`control-plane-node1`, `workers-1`).
    pub title: String,
}

impl UpgradeNodesModule {
    fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.node.name.clone()).collect()
    }

    fn registered(&self) -> impl Iterator<Item = &UpgradeNode> {
        self.nodes.iter().filter(|n| n.registered)
    }

    fn masters(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.node.has_role(Role::Master))
            .map(|n| n.node.name.clone())
            .collect()
    }

    fn kubeadm_tasks(&self, tasks: &mut Vec<Task>) -> Result<(), StepError> {
        let settings: Settings = Arc::new(KubeadmSettings::new(
            &self.ctx,
            crate::modules::certs::rotate_kubeadm_ca::kubeadm_inputs(&self.ctx)?,
        )?);
        let mut first = Vec::new();
        let mut others = Vec::new();
        for n in self.names() {
            if n == self.first {
                first.push(n);
            } else {
                others.push(n);
            }
        }
        let masters = self.masters();
        for (hosts, apply) in [(first, true), (others, false)] {
            if hosts.is_empty() {
                continue;
            }
            let control_plane = hosts.iter().any(|h| masters.contains(h));
            tasks.push(
                Task::new(
                    if apply {
                        "kubeadm-upgrade-apply"
                    } else {
                        "kubeadm-upgrade-node"
                    },
                    hosts,
                )
                .step(KubeBinaries {
                    ctx: self.ctx.clone(),
                })
                .step(KubeadmUpgrade {
                    settings: settings.clone(),
                    version: self.ctx.cluster.version,
                    apply,
                }),
            );
            if control_plane && crate::modules::internal_lb::local_proxy_kind(&self.ctx).is_some() {
                // kubeadm writes kube-proxy's kubeconfig back to the endpoint's name (the first
                // master): `upgrade apply`, and since kubeadm defers its addons until every
                // control-plane node runs the new version, `upgrade node` on the last master
                // (the real v1.36.3 -> v1.37.2 lab: the ConfigMap changed after node3's phase).
                // After each master's upgrade, so: every kube-proxy through 127.0.0.1:6443
                // again, as the install leaves it (skipped while the ConfigMap still says so).
                tasks.push(
                    Task::new("kube-proxy-via-local-proxy", [self.first.clone()]).step(
                        KubeProxyViaLocalProxy {
                            endpoint: self.ctx.control_plane_endpoint()?.url(),
                        },
                    ),
                );
            }
        }
        tasks.push(
            Task::new("restart-kubelet", self.names()).step(RestartReplaced {
                units: vec![("kubelet".to_string(), KUBELET.to_string())],
                kubelet: true,
            }),
        );
        Ok(())
    }

    fn kubexm_tasks(&self, tasks: &mut Vec<Task>) -> Result<(), StepError> {
        let k = Arc::new(KubexmCluster::new(&self.ctx)?);
        let masters = self.masters();
        if !masters.is_empty() {
            tasks.push(
                Task::new("control-plane", masters)
                    .serial()
                    .step(control_plane::binaries(&self.ctx, &k))
                    .step(ApiServer { k: k.clone() })
                    .step(ControllerManager::new(k.clone()))
                    .step(Scheduler::new(k.clone()))
                    .step(RestartReplaced {
                        units: control_plane::SERVICES
                            .iter()
                            .map(|c| ((*c).to_string(), k.layout.bin(c)))
                            .collect(),
                        kubelet: false,
                    })
                    .step(WaitControlPlane { k: k.clone() }),
            );
        }
        let pause = if k.version.kubelet_has_pod_infra_image_flag() {
            Some(
                self.ctx
                    .pull_reference(&crate::modules::runtime::pause_reference(&self.ctx)?)?,
            )
        } else {
            None
        };
        tasks.push(
            Task::new("node-services", self.names())
                .step(Binaries {
                    ctx: self.ctx.clone(),
                    layout: k.layout.clone(),
                    components: vec!["kubelet", "kube-proxy"],
                })
                .step(Kubelet::new(k.clone(), pause))
                .step(KubeProxy::new(k.clone()))
                .step(RestartReplaced {
                    units: vec![
                        ("kubelet".to_string(), k.layout.bin("kubelet")),
                        ("kube-proxy".to_string(), k.layout.bin("kube-proxy")),
                    ],
                    kubelet: true,
                }),
        );
        Ok(())
    }
}

impl Module for UpgradeNodesModule {
    fn name(&self) -> &str {
        &self.title
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let mut tasks = Vec::new();
        let drained: Vec<&UpgradeNode> = self.registered().collect();
        if !drained.is_empty() {
            let mut t = Task::new("cordon-drain", [self.via.clone()]);
            for n in &drained {
                t = t
                    .step(Cordon {
                        ctx: self.ctx.clone(),
                        node: n.node.name.clone(),
                    })
                    .step(Drain {
                        ctx: self.ctx.clone(),
                        node: n.node.name.clone(),
                        options: self.drain,
                    });
            }
            tasks.push(t);
        }
        match self.ctx.cluster.file.spec.kubernetes.kind {
            KubernetesType::Kubeadm => self.kubeadm_tasks(&mut tasks)?,
            KubernetesType::Kubexm => self.kubexm_tasks(&mut tasks)?,
        }
        if !drained.is_empty() {
            let mut t = Task::new("uncordon", [self.via.clone()]);
            for n in &drained {
                t = t
                    .step(Uncordon {
                        ctx: self.ctx.clone(),
                        node: n.node.name.clone(),
                    })
                    .step(NodeReady {
                        ctx: self.ctx.clone(),
                        node: n.node.name.clone(),
                    })
                    .step(KubeletVersion {
                        ctx: self.ctx.clone(),
                        node: n.node.name.clone(),
                        version: self.ctx.cluster.version,
                    });
            }
            tasks.push(t);
        }
        for n in &self.nodes {
            let mut health = Task::new("health", [n.node.name.clone()]);
            if n.node.has_role(Role::Master) {
                health = health
                    .step(ApiServerReady {
                        ctx: self.ctx.clone(),
                    })
                    .step(ApiServerVersion {
                        ctx: self.ctx.clone(),
                        version: self.ctx.cluster.version,
                    });
            }
            if n.etcd != EtcdMembership::None {
                health = health.step(EtcdHealthy {
                    ctx: self.ctx.clone(),
                    etcd: n.etcd,
                });
            }
            if !health.steps.is_empty() {
                tasks.push(health);
            }
        }
        Ok(tasks)
    }
}

/// One member of KubeXM's etcd upgraded (`etcd-<member>`): its binary and configuration from
/// the new bundle (the etcd module's own `install-etcd` task, on this member only), etcd
/// restarted when it still runs the replaced binary, then the whole cluster healthy with it
/// before the next member changes.
pub struct EtcdMemberModule {
    /// The target version's context.
    pub ctx: Arc<InstallContext>,
    /// The member.
    pub member: String,
    /// Its title (`etcd-<member>`).
    pub title: String,
}

impl Module for EtcdMemberModule {
    fn name(&self) -> &str {
        &self.title
    }
    fn skip(&self) -> Option<String> {
        crate::modules::etcd::EtcdModule(self.ctx.clone()).skip()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let layout = crate::modules::etcd::EtcdLayout::from_context(&self.ctx);
        let mut tasks: Vec<Task> = crate::modules::etcd::install_tasks(&self.ctx, None)?
            .into_iter()
            .filter(|t| t.name == "install-etcd" && t.hosts.contains(&self.member))
            .map(|mut t| {
                t.hosts = vec![self.member.clone()];
                t
            })
            .collect();
        tasks.push(
            Task::new("etcd-restart-health", [self.member.clone()])
                .step(RestartReplaced {
                    units: vec![(
                        crate::modules::etcd::UNIT.to_string(),
                        format!("{}/etcd", layout.bin_dir),
                    )],
                    kubelet: false,
                })
                .step(EtcdHealthy {
                    ctx: self.ctx.clone(),
                    etcd: EtcdMembership::Kubexm,
                }),
        );
        Ok(tasks)
    }
}

/// `kubeadm upgrade apply vX` (the first master) or `kubeadm upgrade node`, skipped when the
/// node's marker names the version already; the settings kubeadm applied recorded after it.
/// Not reverted: kubeadm rolls a failed static pod back itself, and KubeXM does not downgrade.
pub struct KubeadmUpgrade {
    /// The target's settings.
    pub settings: Settings,
    /// The target version.
    pub version: KubeVersion,
    /// `upgrade apply` (else `upgrade node`).
    pub apply: bool,
}

impl KubeadmUpgrade {
    /// The patches flag of `kubeadm upgrade` for a node with patches.
    fn patches(&self, node: &Node, control_plane: bool) -> Script {
        match self.settings.node(node, control_plane, false).patches {
            Some(dir) if self.settings.has_patches_field => script!(" --patches {dir}", dir = dir),
            Some(dir) => script!(" --experimental-patches {dir}", dir = dir),
            None => Script::empty(),
        }
    }

    fn script(&self, node: &Node) -> Script {
        let v = self.version.to_string();
        let control_plane = node.has_role(Role::Master);
        let patches = self.patches(node, control_plane);
        let preflight = self.settings.upgrade_preflight_flag();
        let (what, command) = if self.apply {
            (
                format!("kubeadm upgrade apply {v}"),
                // The cluster's configuration first: kubeadm keeps the etcd and CoreDNS image
                // tags it names, so without this they would stay at the installed version's.
                script!(
                    "{KUBEADM} init phase upload-config kubeadm --config {UPGRADE_CONFIG} && {KUBEADM} upgrade apply {v} --yes{patches}{preflight}",
                    v = v,
                    patches = patches,
                    preflight = preflight
                ),
            )
        } else {
            (
                "kubeadm upgrade node".to_string(),
                script!(
                    "{KUBEADM} upgrade node{patches}{preflight}",
                    patches = patches,
                    preflight = preflight
                ),
            )
        };
        script!(
            "# {what} on {name}\n\
set -e\n\
umask 077\n\
mkdir -p {STATE_DIR}\n\
log={STATE_DIR}/kubeadm-upgrade.log\n\
if ! {{ {command}; }} >\"$log\" 2>&1; then\n\
  echo '{what} failed on {name}; the cluster keeps serving from the nodes not yet changed. kubeadm'\"'\"'s output:' >&2\n\
  tail -n 25 \"$log\" >&2\n\
  exit 1\n\
fi\n\
{record}\n\
echo {v} >{KUBEADM_MARKER}\n\
systemctl restart kubelet\n\
echo '{name} upgraded to {v}'",
            what = shell::in_single_quotes(&what),
            name = shell::in_single_quotes(&node.name),
            command = command,
            record = record_applied(),
            v = v,
        )
    }
}

impl Step for KubeadmUpgrade {
    fn name(&self) -> &str {
        if self.apply {
            "kubeadm-upgrade-apply"
        } else {
            "kubeadm-upgrade-node"
        }
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = self.settings.drift_files()?.upload_wanted();
        if self.apply {
            let n = self.settings.node(node, true, false);
            let mut config = self.settings.render_init(&n)?;
            config.file.dest = UPGRADE_CONFIG.to_string();
            ops.push(Op::Template(config));
        }
        ops.push(Op::Run(
            RunCommand::new(self.script(node))
                .unless(script!(
                    "[ \"$(cat {KUBEADM_MARKER} 2>/dev/null)\" = {} ]",
                    self.version.to_string()
                ))
                .timeout(KUBEADM_TIMEOUT),
        ));
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: KUBEADM_TIMEOUT + Duration::from_secs(120),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// The shell test that `unit` runs `bin` as it is now (a binary replaced by a new file shows
/// as `BIN (deleted)`).
fn runs_current(unit: &str, bin: &str) -> Script {
    script!(
        "pid=$(systemctl show -p MainPID --value {u}); [ -n \"$pid\" ] && [ \"$pid\" != 0 ] && [ \"$(readlink /proc/$pid/exe)\" = {b} ]",
        u = shell::quoted(unit),
        b = shell::quoted(bin)
    )
}

/// Each service restarted when it runs a replaced binary (or is not running), so a resumed
/// run restarts what an interrupted one replaced; the kubelet's `/healthz` awaited after.
pub struct RestartReplaced {
    /// (unit, the binary it runs).
    pub units: Vec<(String, String)>,
    /// The kubelet is one of them: wait for its health.
    pub kubelet: bool,
}

impl Step for RestartReplaced {
    fn name(&self) -> &str {
        "restart-onto-new-binaries"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops: Vec<Op> = self
            .units
            .iter()
            .map(|(u, b)| {
                Op::Run(
                    RunCommand::new(script!("systemctl restart {}", u)).unless(runs_current(u, b)),
                )
            })
            .collect();
        if self.kubelet {
            ops.push(Op::Wait(WaitFor {
                what: format!("the kubelet on {} healthy", node.name),
                check: "curl -fsS -o /dev/null http://127.0.0.1:10248/healthz".to_string(),
                timeout: RESTART_TIMEOUT,
                interval: Duration::from_secs(2),
            }));
        }
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: RESTART_TIMEOUT + Duration::from_secs(120),
            attempts: 2,
            retry_delay: Duration::from_secs(5),
        }
    }
}

/// The node's kubelet reports the target version through the API server.
pub struct KubeletVersion {
    /// The target's context.
    pub ctx: Arc<InstallContext>,
    /// The node.
    pub node: String,
    /// The version.
    pub version: KubeVersion,
}

impl Step for KubeletVersion {
    fn name(&self) -> &str {
        "kubelet-version"
    }
    fn ops(&self, via: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl_on(&self.ctx, via)?;
        Ok(vec![version_wait(
            format!("node {} reporting kubelet {}", self.node, self.version),
            format!(
                "[ \"$({k} get node {} -o jsonpath='{{.status.nodeInfo.kubeletVersion}}')\" = {} ]",
                shell::quoted(&self.node),
                self.version
            ),
        )])
    }
    fn policy(&self) -> Policy {
        version_policy()
    }
}

/// A wait of up to [`RESTART_TIMEOUT`] for a component to report the new version.
fn version_wait(what: String, check: String) -> Op {
    Op::Wait(WaitFor {
        what,
        check,
        timeout: RESTART_TIMEOUT,
        interval: Duration::from_secs(3),
    })
}

/// One try of a [`version_wait`].
fn version_policy() -> Policy {
    Policy {
        timeout: RESTART_TIMEOUT + Duration::from_secs(60),
        attempts: 1,
        retry_delay: Duration::from_secs(0),
    }
}

/// The master's own API server reports the target version (`/version`).
pub struct ApiServerVersion {
    /// The target's context.
    pub ctx: Arc<InstallContext>,
    /// The version.
    pub version: KubeVersion,
}

impl Step for ApiServerVersion {
    fn name(&self) -> &str {
        "apiserver-version"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let get = match self.ctx.cluster.file.spec.kubernetes.kind {
            KubernetesType::Kubeadm => format!(
                "{KUBECTL} --kubeconfig {ADMIN_CONF} --server {} get --raw=/version",
                host_url(&node.internal_address, APISERVER_PORT)
            ),
            KubernetesType::Kubexm => {
                format!("{} get --raw=/version", kubectl_on(&self.ctx, node)?)
            }
        };
        Ok(vec![version_wait(
            format!("the API server on {} reporting {}", node.name, self.version),
            format!(
                "{get} | tr -d ' \\n' | grep -qF '\"gitVersion\":\"{}\"'",
                self.version
            ),
        )])
    }
    fn policy(&self) -> Policy {
        version_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_binary_is_detected_by_its_running_process() {
        let t = runs_current("kube-apiserver", "/usr/local/bin/kube-apiserver");
        assert!(t.contains("systemctl show -p MainPID --value kube-apiserver"));
        assert!(t.contains("readlink /proc/$pid/exe)\" = /usr/local/bin/kube-apiserver"));
        // A unit that does not run (MainPID 0) is not current: it is restarted.
        assert!(t.contains("[ \"$pid\" != 0 ]"));
    }
}
