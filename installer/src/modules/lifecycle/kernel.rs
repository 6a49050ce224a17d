//! Module area: a node's kernel upgraded, for `kernel-upgrade` (see
//! [`crate::pipelines::kernel_upgrade`], which runs one [`KernelNodeModule`] per node, one node
//! at a time). For one node, in order:
//!
//! 1. `cordon-drain` (on `via`, a master other than the node when there is one): cordon, then
//!    drain through the eviction API — [`crate::modules::lifecycle::membership`]'s own steps, so budgets are
//!    respected and a failed drain uncordons the node (its rollback).
//! 2. `install-kernel` (the node): the kubelet stopped (started again if the install fails), the
//!    kernel package installed or upgraded with the package manager, from the bundle's
//!    repository when the cluster has one (the same source as the install's OS packages,
//!    [`crate::modules::osrepo::package_source`]); a change leaves [`PENDING`] in `/run`.
//! 3. `expected-kernel` (the node): the newest kernel in `/boot`, checked into a
//!    [`KernelRelease`]: the release the node must run after its reboot.
//! 4. `reboot` (the node): rebooted unless it already runs that release with nothing pending,
//!    waited for over SSH from a new boot id ([`crate::pipeline::ops::Reboot`]), `uname -r`
//!    verified, the container runtime active and answering (crictl; docker itself with
//!    dockershim), the kubelet started.
//! 5. `uncordon` (on `via`): the API answers, the node uncordoned, its Node `Ready` with its
//!    kubelet answering through the API server.
//! 6. `health` (the node): a master's API server answers `/readyz`; an etcd member (KubeXM's
//!    etcd, or kubeadm's stacked etcd on a master) is healthy with the whole cluster.
//!
//! Nodes that are not masters or workers (an etcd-only, load-balancer or registry host) get
//! steps 2 to 4 and 6 only.

use crate::script;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::{EtcdType, KubernetesType};
use kubexm_manifests::resolve::Role;

use super::membership::{kubectl_on, Cordon, Drain, DrainOptions};
use crate::context::InstallContext;
use crate::facts::kernel::{KernelPackage, KernelRelease, NEWEST_SCRIPT, PENDING};
use crate::modules::k8s::host_url;
use crate::modules::k8s::ADMIN_CONF;
use crate::modules::k8s::APISERVER_PORT;
use crate::modules::k8s::KUBECTL;
use crate::modules::runtime::cri::Cri;
use crate::pipeline::ops::{
    Check, LearnFacts, Op, PackageSource, Reboot, RunCommand, Systemd, SystemdAction, WaitBounds,
    WaitFor,
};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// How long a node may take to come back from its reboot.
pub const REBOOT_TIMEOUT: Duration = Duration::from_secs(900);
/// How long a node may take to come back from its reboot, and how often SSH is tried.
pub const REBOOT_BOUNDS: WaitBounds = WaitBounds {
    timeout: REBOOT_TIMEOUT,
    interval: Duration::from_secs(5),
};
/// How long the Node may take to be Ready again, and a master's API server or an etcd member
/// to answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(600);

/// A wait of up to [`READY_TIMEOUT`], tried every 3 s.
fn ready_wait(what: String, check: String) -> Op {
    Op::Wait(WaitFor {
        what,
        check,
        timeout: READY_TIMEOUT,
        interval: Duration::from_secs(3),
    })
}

/// One attempt of a step that waits up to [`READY_TIMEOUT`].
fn ready_policy() -> Policy {
    Policy {
        timeout: READY_TIMEOUT + Duration::from_secs(60),
        attempts: 1,
        retry_delay: Duration::from_secs(0),
    }
}

/// The fact key of the release `node` must run after its reboot.
pub fn expected_key(node: &str) -> String {
    format!("kernel/{node}/expected")
}

/// The etcd a node is a member of, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdMembership {
    /// Not a member (or external etcd).
    None,
    /// A member of KubeXM's etcd (`etcd.type: kubexm`).
    Kubexm,
    /// kubeadm's stacked etcd on a master.
    Stacked,
}

/// One node to upgrade and what it is.
#[derive(Debug, Clone)]
pub struct KernelTarget {
    /// The node.
    pub node: Node,
    /// The kernel package it gets.
    pub package: KernelPackage,
    /// Where the master-side steps run (a master other than the node when there is one).
    pub via: String,
    /// The API server knows the node (cordon, drain and uncordon apply).
    pub registered: bool,
    /// Its etcd membership.
    pub etcd: EtcdMembership,
}

impl KernelTarget {
    /// A master or a worker: it runs a kubelet.
    pub fn kube(&self) -> bool {
        self.node.has_role(Role::Master) || self.node.has_role(Role::Worker)
    }

    /// `target`'s etcd membership in `ctx`.
    pub fn etcd_of(ctx: &InstallContext, node: &Node) -> EtcdMembership {
        match ctx.cluster.file.spec.etcd.kind {
            EtcdType::Kubexm if node.has_role(Role::Etcd) => EtcdMembership::Kubexm,
            EtcdType::Kubeadm if node.has_role(Role::Master) => EtcdMembership::Stacked,
            _ => EtcdMembership::None,
        }
    }
}

/// One node's kernel upgrade (see the module documentation).
pub struct KernelNodeModule {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// The node.
    pub target: KernelTarget,
    /// How it is drained.
    pub drain: DrainOptions,
    /// Where the package comes from.
    pub source: PackageSource,
    /// How long the node may take to come back from its reboot ([`REBOOT_BOUNDS`]).
    pub reboot: WaitBounds,
    /// Its title (`kernel-<node>`).
    pub title: String,
}

impl Module for KernelNodeModule {
    fn name(&self) -> &str {
        &self.title
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let t = &self.target;
        let name = t.node.name.clone();
        let kube = t.kube();
        let drained = kube && t.registered;
        let mut tasks = Vec::new();
        if drained {
            tasks.push(
                Task::new("cordon-drain", [t.via.clone()])
                    .step(Cordon {
                        ctx: self.ctx.clone(),
                        node: name.clone(),
                    })
                    .step(Drain {
                        ctx: self.ctx.clone(),
                        node: name.clone(),
                        options: self.drain,
                    }),
            );
        }
        let mut install = Task::new("install-kernel", [name.clone()]);
        if kube {
            install = install.step(StopKubelet);
        }
        tasks.push(install.step(InstallKernel {
            package: t.package.clone(),
            source: self.source.clone(),
        }));
        tasks.push(Task::new("expected-kernel", [name.clone()]).step(LearnExpected));
        let mut reboot = Task::new("reboot", [name.clone()]).step(RebootIntoKernel {
            bounds: self.reboot,
        });
        if kube {
            reboot = reboot
                .step(RuntimeAnswers {
                    cri: Cri::of(&self.ctx),
                })
                .step(StartKubelet);
        }
        tasks.push(reboot);
        if drained {
            tasks.push(
                Task::new("uncordon", [t.via.clone()])
                    .step(Uncordon {
                        ctx: self.ctx.clone(),
                        node: name.clone(),
                    })
                    .step(NodeReady {
                        ctx: self.ctx.clone(),
                        node: name.clone(),
                    }),
            );
        }
        let mut health = Task::new("health", [name]);
        if t.node.has_role(Role::Master) {
            health = health.step(ApiServerReady {
                ctx: self.ctx.clone(),
            });
        }
        if t.etcd != EtcdMembership::None {
            health = health.step(EtcdHealthy {
                ctx: self.ctx.clone(),
                etcd: t.etcd,
            });
        }
        if !health.steps.is_empty() {
            tasks.push(health);
        }
        Ok(tasks)
    }
}

/// `systemctl stop kubelet` (skipped when it is not running); undone by starting it.
pub struct StopKubelet;

impl Step for StopKubelet {
    fn name(&self) -> &str {
        "stop-kubelet"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new("systemctl stop kubelet")
                .unless("! systemctl is-active -q kubelet")
                .undo("systemctl start kubelet || true"),
        )])
    }
}

/// The kernel package installed or upgraded (skipped when current); a change leaves
/// [`PENDING`]. Not reverted: removing a kernel could leave the node unbootable.
pub struct InstallKernel {
    /// The package.
    pub package: KernelPackage,
    /// Where from.
    pub source: PackageSource,
}

impl Step for InstallKernel {
    fn name(&self) -> &str {
        "install-kernel-package"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let p = self.package.as_str();
        let marker_dir = PENDING.rsplit_once('/').map_or("/run", |(d, _)| d);
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "{upgrade}\nmkdir -p {marker_dir} && echo {p} >{PENDING}",
                upgrade = self.source.upgrade_script(p),
                marker_dir = marker_dir,
                p = p
            ))
            .unless(self.source.current_script(p))
            .timeout(Duration::from_secs(1800)),
        )])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(1900),
            attempts: 2,
            retry_delay: Duration::from_secs(10),
        }
    }
}

/// Learns the newest kernel in `/boot` as a checked [`KernelRelease`] (the fact
/// [`expected_key`]).
pub struct LearnExpected;

/// `release=<newest>` into the fact `expected`; anything but a kernel release is refused.
fn parse_expected(out: &str) -> Result<Vec<(String, String)>, String> {
    let line = out.strip_suffix('\n').unwrap_or(out);
    if line.is_empty() {
        return Err("no kernel image in /boot (no /boot/vmlinuz-*) after the install: the package did not install a kernel".to_string());
    }
    KernelRelease::parse(line, "the newest /boot/vmlinuz-*")
        .map(|r| vec![("expected".to_string(), r.as_str().to_string())])
        .map_err(|e| e.to_string())
}

impl Step for LearnExpected {
    fn name(&self) -> &str {
        "newest-installed-kernel"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: format!("the newest kernel installed on {}", node.name),
            script: NEWEST_SCRIPT.to_string(),
            parse: parse_expected,
            facts: facts.clone(),
            prefix: format!("kernel/{}/", node.name),
            timeout: Duration::from_secs(60),
        })])
    }
}

/// The release `node` must run, from the facts (a placeholder in the plan).
fn expected(node: &Node, facts: &Facts) -> Result<String, StepError> {
    match facts.get(&expected_key(&node.name)) {
        Some(r) => KernelRelease::parse(&r, "the expected release")
            .map(|r| r.as_str().to_string())
            .map_err(|e| StepError::Invalid(e.to_string())),
        None if facts.is_planning() => Ok("<newest installed kernel>".to_string()),
        None => Err(StepError::Invalid(format!(
            "the newest installed kernel of {} was not learned (the expected-kernel task did not run)",
            node.name
        ))),
    }
}

/// Reboots the node unless it runs the expected release with nothing pending; waits for it
/// from a new boot; checks `uname -r`.
pub struct RebootIntoKernel {
    /// How long it may take to come back.
    pub bounds: WaitBounds,
}

impl Step for RebootIntoKernel {
    fn name(&self) -> &str {
        "reboot-into-kernel"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let release = expected(node, facts)?;
        let r = shell::quoted(&release);
        Ok(vec![
            Op::Reboot(Reboot {
                why: format!("{} into kernel {release}", node.name),
                unless: Some(format!(
                    "[ ! -e {PENDING} ] && [ \"$(uname -r)\" = {r} ]"
                )),
                bounds: self.bounds,
            }),
            Op::Check(Check::new(
                format!("{} runs kernel {release}", node.name),
                format!(
                    "k=$(uname -r)\n[ \"$k\" = {r} ] && exit 0\necho \"{} runs kernel $(printf %s \"$k\" | tr -cd 'A-Za-z0-9._+~-' | cut -c1-64) after its reboot, not {release} (the newest installed): check its boot loader's default entry, then run again with --resume\" >&2\nexit 1",
                    node.name
                ),
            )),
        ])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: self.bounds.timeout + Duration::from_secs(120),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// The container runtime active and answering after the reboot (crictl against its CRI
/// socket; with dockershim, which lives in the kubelet, docker itself).
pub struct RuntimeAnswers {
    /// How the kubelet reaches it.
    pub cri: Cri,
}

impl Step for RuntimeAnswers {
    fn name(&self) -> &str {
        "runtime-answers"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops: Vec<Op> = self
            .cri
            .kubelet_after()
            .iter()
            .map(|u| Op::Systemd(Systemd::new(SystemdAction::IsActive((*u).to_string()))))
            .collect();
        let check = if self.cri == Cri::Dockershim {
            format!(
                "{}/docker info >/dev/null",
                crate::modules::runtime::BIN_DIR
            )
        } else {
            format!(
                "{}/crictl --runtime-endpoint {} info >/dev/null",
                crate::modules::runtime::BIN_DIR,
                self.cri.endpoint()
            )
        };
        ops.push(Op::Wait(WaitFor {
            what: "the container runtime answering after the reboot".to_string(),
            check,
            timeout: Duration::from_secs(180),
            interval: Duration::from_secs(2),
        }));
        Ok(ops)
    }
}

/// `systemctl enable --now kubelet` (it is enabled: this starts it if the boot did not).
pub struct StartKubelet;

impl Step for StartKubelet {
    fn name(&self) -> &str {
        "start-kubelet"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Systemd(Systemd::new(SystemdAction::EnableNow(
            "kubelet".to_string(),
        )))])
    }
}

/// The API answers through `via`'s kubectl; `kubectl uncordon` (skipped when schedulable).
pub struct Uncordon {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// The node.
    pub node: String,
}

impl Step for Uncordon {
    fn name(&self) -> &str {
        "uncordon"
    }
    fn ops(&self, via: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl_on(&self.ctx, via)?;
        let n = shell::quoted(&self.node);
        Ok(vec![
            ready_wait(
                format!("the API server answering kubectl on {}", via.name),
                format!("{k} get --raw=/readyz >/dev/null"),
            ),
            Op::Run(
                RunCommand::new(script!("{k} uncordon {n} >/dev/null", k = k, n = n)).unless(
                    script!(
                        "[ \"$({k} get node {n} -o jsonpath='{{.spec.unschedulable}}')\" != true ]",
                        k = k,
                        n = n
                    ),
                ),
            ),
        ])
    }
}

/// The Node `Ready` and its kubelet answering through the API server (a `Ready` condition
/// alone may date from before the reboot).
pub struct NodeReady {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// The node.
    pub node: String,
}

impl Step for NodeReady {
    fn name(&self) -> &str {
        "node-ready"
    }
    fn ops(&self, via: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl_on(&self.ctx, via)?;
        let n = shell::quoted(&self.node);
        let proxy = shell::quoted(&format!("/api/v1/nodes/{}/proxy/healthz", self.node));
        Ok(vec![ready_wait(
            format!("node {} Ready, its kubelet answering", self.node),
            format!(
                "[ \"$({k} get node {n} -o jsonpath='{{.status.conditions[?(@.type==\"Ready\")].status}}')\" = True ] && [ \"$({k} get --raw {proxy})\" = ok ]"
            ),
        )])
    }
    fn policy(&self) -> Policy {
        ready_policy()
    }
}

/// The master's own API server answers `/readyz`.
pub struct ApiServerReady {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
}

impl Step for ApiServerReady {
    fn name(&self) -> &str {
        "apiserver-ready"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let check = match self.ctx.cluster.file.spec.kubernetes.kind {
            KubernetesType::Kubeadm => format!(
                "{KUBECTL} --kubeconfig {ADMIN_CONF} --server {} get --raw=/readyz >/dev/null",
                host_url(&node.internal_address, APISERVER_PORT)
            ),
            KubernetesType::Kubexm => format!(
                "{} get --raw=/readyz >/dev/null",
                kubectl_on(&self.ctx, node)?
            ),
        };
        Ok(vec![ready_wait(
            format!("the API server on {} answering /readyz", node.name),
            check,
        )])
    }
    fn policy(&self) -> Policy {
        ready_policy()
    }
}

/// etcd healthy with every member, checked on the member itself.
pub struct EtcdHealthy {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// Which etcd.
    pub etcd: EtcdMembership,
}

impl Step for EtcdHealthy {
    fn name(&self) -> &str {
        "etcd-healthy"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let check = match self.etcd {
            EtcdMembership::None => return Ok(Vec::new()),
            EtcdMembership::Kubexm => {
                crate::modules::etcd::EtcdLayout::from_context(&self.ctx).health_command(&node.name)
            }
            EtcdMembership::Stacked => format!(
                "{} endpoint health --cluster",
                super::etcd_member::stacked_etcdctl(&crate::modules::k8s::kubectl(), &node.name)
            ),
        };
        Ok(vec![ready_wait(
            format!("etcd healthy with {} back", node.name),
            format!("{check} >/dev/null"),
        )])
    }
    fn policy(&self) -> Policy {
        ready_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_release_is_checked_before_use() {
        assert_eq!(
            parse_expected("6.1.0-18-amd64\n"),
            Ok(vec![("expected".to_string(), "6.1.0-18-amd64".to_string())])
        );
        assert!(parse_expected("")
            .expect_err("none")
            .contains("no kernel image in /boot"));
        for bad in ["6.1.0'; reboot; '\n", "$(reboot)\n", "6.1.0\n6.2.0\n"] {
            let e = parse_expected(bad).expect_err("refused");
            assert!(!e.contains("reboot") && !e.contains("6.2.0"), "{e}");
        }
        let facts = Facts::default();
        let node = Node {
            name: "node1".into(),
            address: "10.0.0.1".into(),
            internal_address: "10.0.0.1".into(),
            roles: vec![Role::Master],
            arch: "amd64".into(),
        };
        assert!(matches!(
            expected(&node, &facts),
            Err(StepError::Invalid(_))
        ));
        assert_eq!(
            expected(&node, &facts.for_plan()).expect("placeholder"),
            "<newest installed kernel>"
        );
        facts.set(expected_key("node1"), "6.1.0-18-amd64");
        assert_eq!(expected(&node, &facts).expect("learned"), "6.1.0-18-amd64");
        facts.set(expected_key("node1"), "6.1'");
        assert!(expected(&node, &facts).is_err());
    }
}
