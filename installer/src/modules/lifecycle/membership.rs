//! Module area: a node's membership in the Kubernetes cluster, from the API side (the day-2
//! pipelines `add-node` / `delete-node`), run with kubectl and KubeXM's admin kubeconfig on the
//! first master:
//!
//! * [`DrainModule`]: cordon, then drain through the **eviction API** (`kubectl drain` without
//!   `--disable-eviction`), so PodDisruptionBudgets are respected: kubectl retries an eviction a
//!   budget refuses until its `--timeout`, and the step is retried a bounded number of times.
//!   The error names `--force-drain`, which deletes the pods without eviction (budgets bypassed)
//!   and is logged as a warning. A failed drain uncordons the node (its rollback).
//! * [`DeleteNodeObjectModule`]: `kubectl delete node`, checked gone. The delete-node pipeline
//!   runs it **after** `kubeadm reset` on the node: deleting the Node first leaves kubeadm's
//!   stacked etcd member behind (reset finds no cluster configuration for it).
//! * [`LocalProxiesModule`]: the internal load balancer's local API proxies on the workers get
//!   the new list of masters.

use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::KubernetesType;

use crate::context::InstallContext;
use crate::modules::internal_lb::{LocalProxy, LocalProxyKind};
use crate::modules::kubexm::KubexmCluster;
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// kubectl with KubeXM's admin kubeconfig on the master `node` (the kubexm path talks to that
/// master's own API server, as its modules do).
pub fn kubectl_on(ctx: &Arc<InstallContext>, node: &Node) -> Result<Script, StepError> {
    match ctx.cluster.file.spec.kubernetes.kind {
        KubernetesType::Kubeadm => Ok(crate::modules::k8s::kubectl()),
        KubernetesType::Kubexm => Ok(KubexmCluster::new(ctx)?.kubectl(node)),
    }
}

/// How long `kubectl drain` waits for the evictions (a PodDisruptionBudget holds them).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);
/// Tries of a drain that did not finish.
pub const DRAIN_ATTEMPTS: u32 = 3;

/// How a node is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainOptions {
    /// Delete the pods without the eviction API (PodDisruptionBudgets bypassed) and with
    /// `--force` (pods no controller manages).
    pub force: bool,
    /// kubectl's `--timeout` for one try.
    pub timeout: Duration,
}

impl Default for DrainOptions {
    fn default() -> Self {
        Self {
            force: false,
            timeout: DRAIN_TIMEOUT,
        }
    }
}

/// Cordon and drain `node`, from the first master of `ctx` (the cluster without the node).
pub struct DrainModule {
    /// The cluster the node leaves.
    pub ctx: Arc<InstallContext>,
    /// The node.
    pub node: String,
    /// How.
    pub options: DrainOptions,
}

impl Module for DrainModule {
    fn name(&self) -> &str {
        "drain"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let first = self.ctx.first_master()?.name.clone();
        Ok(vec![Task::new("cordon-drain", [first])
            .step(Cordon {
                ctx: self.ctx.clone(),
                node: self.node.clone(),
            })
            .step(Drain {
                ctx: self.ctx.clone(),
                node: self.node.clone(),
                options: self.options,
            })])
    }
}

/// Shell test: the Node object `name` does not exist.
fn node_absent(kubectl: &Script, name: &str) -> Script {
    script!(
        "! {kubectl} get node {name} -o name >/dev/null 2>&1",
        kubectl = kubectl,
        name = name
    )
}

/// `kubectl cordon` (skipped when the Node is gone or cordoned); undone by `uncordon`.
pub struct Cordon {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// The node cordoned.
    pub node: String,
}

impl Step for Cordon {
    fn name(&self) -> &str {
        "cordon"
    }
    fn ops(&self, master: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl_on(&self.ctx, master)?;
        let n = shell::quoted(&self.node);
        Ok(vec![Op::Run(
            RunCommand::new(script!("{k} cordon {n} >/dev/null", k = k, n = n))
                .unless(script!(
                    "{absent} || [ \"$({k} get node {n} -o jsonpath='{{.spec.unschedulable}}')\" = true ]",
                    absent = node_absent(&k, &self.node),
                    k = k,
                    n = n
                ))
                .undo(script!("{k} uncordon {n} >/dev/null 2>&1 || true", k = k, n = n)),
        )])
    }
}

/// `kubectl drain` through the eviction API (see the module documentation).
pub struct Drain {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// The node drained.
    pub node: String,
    /// How.
    pub options: DrainOptions,
}

impl Drain {
    /// The flags of `kubectl drain`.
    pub fn flags(&self) -> Script {
        let t = self.options.timeout.as_secs();
        if self.options.force {
            script!("--ignore-daemonsets --delete-emptydir-data --force --disable-eviction --grace-period=30 --timeout={t}s", t = t)
        } else {
            script!(
                "--ignore-daemonsets --delete-emptydir-data --timeout={t}s",
                t = t
            )
        }
    }
}

impl Step for Drain {
    fn name(&self) -> &str {
        if self.options.force {
            "drain-forced"
        } else {
            "drain"
        }
    }
    fn ops(&self, master: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl_on(&self.ctx, master)?;
        let n = shell::quoted(&self.node);
        let t = self.options.timeout.as_secs();
        let hint = if self.options.force {
            format!("the forced drain of {} did not finish within {t}s (pods without the eviction API are being deleted): check the pods on it and retry with --resume", self.node)
        } else {
            format!("the drain of {} did not finish within {t}s: PodDisruptionBudgets (or pods no controller manages) keep pods on it. Fix them and retry with --resume, or retry with --force-drain to delete the pods without the eviction API (PodDisruptionBudgets are bypassed)", self.node)
        };
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "if ! out=$({k} drain {n} {flags} 2>&1); then\n  printf '%s\\n' \"$out\" | tail -n 12 >&2\n  echo {hint} >&2\n  exit 1\nfi",
                flags = self.flags(),
                hint = &hint, k = k, n = n
            ))
            .unless(node_absent(&k, &self.node))
            // A drained node is cordoned (kubectl drain cordons first).
            .verify(script!(
                "[ \"$({k} get node {n} -o jsonpath='{{.spec.unschedulable}}')\" = true ]", k = k, n = n
            ))
            .timeout(self.options.timeout + Duration::from_secs(60)),
        )])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: self.options.timeout + Duration::from_secs(90),
            attempts: DRAIN_ATTEMPTS,
            retry_delay: Duration::from_secs(10),
        }
    }
}

/// `kubectl delete node`, from the first master of `ctx` (the cluster without the node).
pub struct DeleteNodeObjectModule {
    /// The cluster the node left.
    pub ctx: Arc<InstallContext>,
    /// The node.
    pub node: String,
}

impl Module for DeleteNodeObjectModule {
    fn name(&self) -> &str {
        "delete-node-object"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let first = self.ctx.first_master()?.name.clone();
        Ok(vec![Task::new("delete-node-object", [first]).step(
            DeleteNodeObject {
                ctx: self.ctx.clone(),
                node: self.node.clone(),
            },
        )])
    }
}

/// `kubectl delete node NAME`, skipped when it is gone, checked gone after.
pub struct DeleteNodeObject {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// The node.
    pub node: String,
}

impl Step for DeleteNodeObject {
    fn name(&self) -> &str {
        "delete-node-object"
    }
    fn ops(&self, master: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl_on(&self.ctx, master)?;
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "{k} delete node {node} --wait=true --timeout=120s >/dev/null",
                k = k,
                node = self.node
            ))
            .unless(node_absent(&k, &self.node))
            .timeout(Duration::from_secs(180)),
        )])
    }
}

/// The internal load balancer's local API proxy (haproxy or nginx static pod) on every worker
/// that is not a master, with the masters of `ctx` as backends. None with kube-vip or an
/// external load balancer.
pub struct LocalProxiesModule {
    /// The cluster as it is after the change.
    pub ctx: Arc<InstallContext>,
    /// Workers that are joining in this run (their join task writes the proxy).
    pub except: Vec<String>,
}

impl LocalProxiesModule {
    fn kind(&self) -> Option<LocalProxyKind> {
        crate::modules::internal_lb::local_proxy_kind(&self.ctx)
    }
}

impl Module for LocalProxiesModule {
    fn name(&self) -> &str {
        "local-api-proxies"
    }
    fn skip(&self) -> Option<String> {
        self.kind()
            .is_none()
            .then(|| "no local API proxies: loadBalancer is not internal haproxy/nginx".to_string())
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let Some(kind) = self.kind() else {
            return Ok(Vec::new());
        };
        let workers: Vec<String> = self
            .ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Worker) && !n.has_role(Role::Master))
            .filter(|n| !self.except.contains(&n.name))
            .map(|n| n.name.clone())
            .collect();
        if workers.is_empty() {
            return Ok(Vec::new());
        }
        Ok(vec![Task::new("local-api-proxy", workers)
            .serial()
            .step(LocalProxy::new(&self.ctx, kind)?)])
    }
}
