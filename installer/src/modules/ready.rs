//! The install's last step (issue 33 item 12): "installed" only when the cluster is. From the
//! first master, bounded by `spec.kubernetes.readyWait.timeoutSeconds` (default 300), it waits until every master and worker is
//! registered and `Ready`, and every Deployment and DaemonSet of the cluster is rolled out —
//! CoreDNS, NodeLocal DNS, the pod network, the add-ons and whatever the `postInstall` scripts
//! applied (on a fresh install every workload is one of these). On timeout it fails naming each
//! node and workload that is not, with its conditions or replica counts.
//!
//! Read-only: nothing to revert, and a re-run waits again. What it reads is `kubectl get nodes`
//! and `kubectl get deployments,daemonsets --all-namespaces`, both `-o json`, judged by
//! [`not_ready`] on typed values (the Node shape of [`crate::facts::parse`]).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::display::Untrusted;
use kubexm_manifests::model::KubernetesType;
use kubexm_manifests::resolve::Role;
use serde::Deserialize;

use crate::context::InstallContext;
use crate::facts::parse::{json_err, K8sNode, ParseError};
use crate::modules::k8s::kubectl;
use crate::modules::kubexm::KubexmCluster;
use crate::modules::task_id::TaskId;
use crate::pipeline::ops::{Op, WaitOutput};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};

/// The task: every node Ready and every workload rolled out.
pub const CLUSTER_READY: TaskId = TaskId::new("cluster-ready");

/// Pause between two readings.
const INTERVAL: Duration = Duration::from_secs(5);

/// The line between the two JSON documents the script prints (never inside JSON: strings hold
/// no raw newline).
const SEPARATOR: &str = "---kubexm-workloads---";

/// Waits for the cluster to be ready, on the first master, after everything else.
pub struct ClusterReadyModule(pub Arc<InstallContext>);

impl Module for ClusterReadyModule {
    fn name(&self) -> &str {
        "cluster-ready"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let first = self.0.first_master()?;
        let mut nodes: BTreeSet<String> = self.0.with_role(Role::Master).into_iter().collect();
        nodes.extend(self.0.with_role(Role::Worker));
        // kubectl with the admin kubeconfig, as each path installs them on the masters.
        let kubectl = match self.0.cluster.file.spec.kubernetes.kind {
            KubernetesType::Kubeadm => kubectl(),
            KubernetesType::Kubexm => KubexmCluster::new(&self.0)?.kubectl(first),
        }
        .into_string();
        let first = first.name.clone();
        let wait = &self.0.cluster.file.spec.kubernetes.ready_wait;
        Ok(vec![Task::new(CLUSTER_READY, [first]).step(ClusterReady {
            kubectl,
            nodes,
            workloads: wait.workloads,
            timeout: Duration::from_secs(wait.timeout_seconds),
        })])
    }
}

/// Every node of cluster.yaml registered and Ready, every Deployment and DaemonSet rolled out
/// ([`not_ready`]), polled until [`Self::timeout`].
pub struct ClusterReady {
    /// kubectl with the admin kubeconfig on the master.
    kubectl: String,
    /// The masters and workers of cluster.yaml.
    nodes: BTreeSet<String>,
    /// Also every Deployment and DaemonSet rolled out (`spec.kubernetes.readyWait.workloads`).
    workloads: bool,
    /// Give up after this long.
    timeout: Duration,
}

impl ClusterReady {
    /// The read-only script: the nodes, the separator, the workloads.
    fn script(&self) -> String {
        let k = &self.kubectl;
        if self.workloads {
            format!(
                "set -e\n{k} get nodes -o json\necho {SEPARATOR}\n{k} get deployments,daemonsets --all-namespaces -o json"
            )
        } else {
            format!("set -e\n{k} get nodes -o json\necho {SEPARATOR}")
        }
    }
}

impl Step for ClusterReady {
    fn name(&self) -> &str {
        "cluster-ready"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let nodes = self.nodes.clone();
        let workloads = self.workloads;
        Ok(vec![Op::WaitOutput(WaitOutput {
            what: if workloads {
                format!(
                    "{} node(s) Ready and every Deployment and DaemonSet rolled out",
                    self.nodes.len()
                )
            } else {
                format!(
                    "{} node(s) Ready (spec.kubernetes.readyWait.workloads: false)",
                    self.nodes.len()
                )
            },
            script: self.script(),
            judge: Arc::new(move |out: &str| {
                let Some((nodes_json, workloads_json)) = out.split_once(SEPARATOR) else {
                    return Err("the script printed no workload list".to_string());
                };
                let workloads_json = if workloads {
                    workloads_json
                } else {
                    r#"{"items":[]}"#
                };
                match not_ready(&nodes, nodes_json, workloads_json) {
                    Ok(list) if list.is_empty() => Ok(()),
                    Ok(list) => Err(list
                        .iter()
                        .map(|n| format!("  - {n}"))
                        .collect::<Vec<_>>()
                        .join("\n")),
                    Err(e) => Err(e.to_string()),
                }
            }),
            timeout: self.timeout,
            interval: INTERVAL,
        })])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: self.timeout + Duration::from_secs(90),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// What is not ready yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// A node of cluster.yaml the API server does not list.
    Unregistered {
        /// Node name.
        node: String,
    },
    /// A node whose `Ready` condition is not `True`.
    Node {
        /// Node name.
        node: String,
        /// Its conditions that are not as they should be (`Ready=False (KubeletNotReady: …)`).
        conditions: Vec<String>,
    },
    /// A Deployment or DaemonSet not rolled out.
    Workload {
        /// `Deployment` or `DaemonSet`.
        kind: String,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What is missing (`1 of 3 available`).
        detail: String,
    },
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unregistered { node } => {
                write!(f, "node {}: not registered", Untrusted(node))
            }
            Self::Node { node, conditions } => write!(
                f,
                "node {}: not Ready: {}",
                Untrusted(node),
                Untrusted(conditions.join("; "))
            ),
            Self::Workload {
                kind,
                namespace,
                name,
                detail,
            } => write!(
                f,
                "{} {}/{}: {}",
                Untrusted(kind),
                Untrusted(namespace),
                Untrusted(name),
                Untrusted(detail)
            ),
        }
    }
}

#[derive(Deserialize)]
struct List<T> {
    #[serde(default = "Vec::new")]
    items: Vec<T>,
}

#[derive(Deserialize)]
struct Workload {
    #[serde(default)]
    kind: String,
    metadata: WorkloadMeta,
    #[serde(default)]
    spec: WorkloadSpec,
    #[serde(default)]
    status: WorkloadStatus,
}

#[derive(Deserialize)]
struct WorkloadMeta {
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    generation: i64,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WorkloadSpec {
    /// Deployments: desired replicas (1 when absent).
    #[serde(default)]
    replicas: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WorkloadStatus {
    #[serde(default)]
    observed_generation: i64,
    // Deployment.
    #[serde(default)]
    replicas: i64,
    #[serde(default)]
    updated_replicas: i64,
    #[serde(default)]
    available_replicas: i64,
    // DaemonSet.
    #[serde(default)]
    desired_number_scheduled: i64,
    #[serde(default)]
    updated_number_scheduled: i64,
    #[serde(default)]
    number_available: i64,
}

/// Every node of `expected` not registered or not `Ready`, and every Deployment and DaemonSet
/// not rolled out (as `kubectl rollout status` decides: the controller saw the latest spec, every
/// replica updated and available, no old replica left), from the JSON of `kubectl get nodes -o
/// json` and `kubectl get deployments,daemonsets --all-namespaces -o json`. Empty: ready.
///
/// # Errors
///
/// [`ParseError`] when either is not the JSON those commands print.
pub fn not_ready(
    expected: &BTreeSet<String>,
    nodes_json: &str,
    workloads_json: &str,
) -> Result<Vec<NotReady>, ParseError> {
    let nodes: List<K8sNode> = serde_json::from_str(nodes_json)
        .map_err(json_err("the node list", "kubectl get nodes -o json"))?;
    let workloads: List<Workload> = serde_json::from_str(workloads_json).map_err(json_err(
        "the workload list",
        "kubectl get deployments,daemonsets --all-namespaces -o json",
    ))?;
    let mut out = Vec::new();
    let listed: BTreeSet<&str> = nodes
        .items
        .iter()
        .map(|n| n.metadata.name.as_str())
        .collect();
    for name in expected {
        if !listed.contains(name.as_str()) {
            out.push(NotReady::Unregistered { node: name.clone() });
        }
    }
    for n in &nodes.items {
        let ready = n
            .status
            .conditions
            .iter()
            .any(|c| c.kind == "Ready" && c.status == "True");
        if ready {
            continue;
        }
        let mut conditions: Vec<String> = n
            .status
            .conditions
            .iter()
            // Ready shown as it is; the pressure conditions only when they are True.
            .filter(|c| c.kind == "Ready" || c.status == "True")
            .map(|c| {
                let why = match (c.reason.is_empty(), c.message.is_empty()) {
                    (true, true) => String::new(),
                    (false, true) => format!(" ({})", c.reason),
                    (true, false) => format!(" ({})", c.message),
                    (false, false) => format!(" ({}: {})", c.reason, c.message),
                };
                format!("{}={}{why}", c.kind, c.status)
            })
            .collect();
        if conditions.is_empty() {
            conditions.push("no Ready condition yet".to_string());
        }
        out.push(NotReady::Node {
            node: n.metadata.name.clone(),
            conditions,
        });
    }
    for w in &workloads.items {
        if let Some(detail) = rollout_gap(w) {
            out.push(NotReady::Workload {
                kind: w.kind.clone(),
                namespace: w.metadata.namespace.clone(),
                name: w.metadata.name.clone(),
                detail,
            });
        }
    }
    Ok(out)
}

/// Why `w` is not rolled out, or `None` when it is.
fn rollout_gap(w: &Workload) -> Option<String> {
    let s = &w.status;
    if s.observed_generation < w.metadata.generation {
        return Some(format!(
            "the controller has not seen generation {} yet (observed {})",
            w.metadata.generation, s.observed_generation
        ));
    }
    let (want, updated, available, total) = match w.kind.as_str() {
        "DaemonSet" => (
            s.desired_number_scheduled,
            s.updated_number_scheduled,
            s.number_available,
            s.desired_number_scheduled,
        ),
        _ => (
            w.spec.replicas.unwrap_or(1),
            s.updated_replicas,
            s.available_replicas,
            s.replicas,
        ),
    };
    let mut gaps = Vec::new();
    if updated < want {
        gaps.push(format!("{updated} of {want} updated"));
    }
    if total > updated {
        gaps.push(format!(
            "{} old replica(s) pending termination",
            total - updated
        ));
    }
    if available < want.max(updated) {
        gaps.push(format!("{available} of {} available", want.max(updated)));
    }
    (!gaps.is_empty()).then(|| gaps.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_string()).collect()
    }

    /// `kubectl get nodes -o json` (trimmed) while node2's CNI is not up yet.
    const NODES_ONE_NOT_READY: &str = r#"{"apiVersion":"v1","kind":"List","items":[
      {"metadata":{"name":"node1","labels":{"node-role.kubernetes.io/control-plane":""}},
       "spec":{},"status":{"conditions":[
         {"type":"MemoryPressure","status":"False","reason":"KubeletHasSufficientMemory","message":"kubelet has sufficient memory available"},
         {"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status"}],
         "nodeInfo":{"kubeletVersion":"v1.33.1"}}},
      {"metadata":{"name":"node2","labels":{}},
       "spec":{},"status":{"conditions":[
         {"type":"MemoryPressure","status":"False","reason":"KubeletHasSufficientMemory","message":"kubelet has sufficient memory available"},
         {"type":"Ready","status":"False","reason":"KubeletNotReady","message":"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"}],
         "nodeInfo":{"kubeletVersion":"v1.33.1"}}}]}"#;

    /// `kubectl get deployments,daemonsets -A -o json` (trimmed): CoreDNS rolled out, flannel's
    /// DaemonSet on 1 of 2 nodes.
    const WORKLOADS_DS_ROLLING: &str = r#"{"apiVersion":"v1","kind":"List","items":[
      {"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"coredns","namespace":"kube-system","generation":1},
       "spec":{"replicas":2},"status":{"observedGeneration":1,"replicas":2,"updatedReplicas":2,"readyReplicas":2,"availableReplicas":2}},
      {"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"kube-flannel-ds","namespace":"kube-flannel","generation":1},
       "spec":{},"status":{"observedGeneration":1,"desiredNumberScheduled":2,"currentNumberScheduled":2,"updatedNumberScheduled":2,"numberReady":1,"numberAvailable":1}}]}"#;

    const WORKLOADS_READY: &str = r#"{"apiVersion":"v1","kind":"List","items":[
      {"kind":"Deployment","metadata":{"name":"coredns","namespace":"kube-system","generation":2},
       "spec":{"replicas":2},"status":{"observedGeneration":2,"replicas":2,"updatedReplicas":2,"availableReplicas":2}},
      {"kind":"DaemonSet","metadata":{"name":"kube-flannel-ds","namespace":"kube-flannel","generation":1},
       "spec":{},"status":{"observedGeneration":1,"desiredNumberScheduled":2,"updatedNumberScheduled":2,"numberAvailable":2}}]}"#;

    const NODES_READY: &str = r#"{"items":[
      {"metadata":{"name":"node1"},"status":{"conditions":[{"type":"Ready","status":"True"}]}},
      {"metadata":{"name":"node2"},"status":{"conditions":[{"type":"Ready","status":"True"}]}}]}"#;

    #[test]
    fn a_not_ready_node_and_a_daemonset_rolling_out_are_named_with_why() {
        let list = not_ready(
            &expected(&["node1", "node2"]),
            NODES_ONE_NOT_READY,
            WORKLOADS_DS_ROLLING,
        )
        .expect("parses");
        let shown: Vec<String> = list.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "node node2: not Ready: Ready=False (KubeletNotReady: container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized)",
                "DaemonSet kube-flannel/kube-flannel-ds: 1 of 2 available",
            ]
        );
    }

    #[test]
    fn ready_nodes_and_rolled_out_workloads_are_ready() {
        let list = not_ready(&expected(&["node1", "node2"]), NODES_READY, WORKLOADS_READY)
            .expect("parses");
        assert_eq!(list, []);
    }

    #[test]
    fn a_node_not_registered_and_a_deployment_behind_are_named() {
        let workloads = r#"{"items":[
          {"kind":"Deployment","metadata":{"name":"metrics-server","namespace":"kube-system","generation":3},
           "spec":{"replicas":1},"status":{"observedGeneration":2,"replicas":1,"updatedReplicas":1,"availableReplicas":1}},
          {"kind":"Deployment","metadata":{"name":"web","namespace":"default","generation":1},
           "spec":{"replicas":3},"status":{"observedGeneration":1,"replicas":4,"updatedReplicas":2,"availableReplicas":3}}]}"#;
        let list = not_ready(
            &expected(&["node1", "node2", "node3"]),
            NODES_READY,
            workloads,
        )
        .expect("parses");
        let shown: Vec<String> = list.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "node node3: not registered",
                "Deployment kube-system/metrics-server: the controller has not seen generation 3 yet (observed 2)",
                "Deployment default/web: 2 of 3 updated, 2 old replica(s) pending termination",
            ]
        );
    }

    #[test]
    fn hostile_names_are_escaped_and_bad_json_is_an_error() {
        let nodes = r#"{"items":[{"metadata":{"name":"node1"},"status":{"conditions":[{"type":"Ready","status":"False","reason":"\u001b[31mred"}]}}]}"#;
        let list = not_ready(&expected(&["node1"]), nodes, r#"{"items":[]}"#).expect("parses");
        let shown = list[0].to_string();
        assert!(!shown.contains('\u{1b}'), "{shown}");
        assert!(not_ready(&expected(&[]), "not json", "{}").is_err());
    }

    #[test]
    fn the_judge_refuses_until_ready() {
        let step = ClusterReady {
            kubectl: "kubectl".into(),
            nodes: expected(&["node1", "node2"]),
            workloads: true,
            timeout: Duration::from_secs(1),
        };
        let node = crate::inventory::control_node();
        let ops = step.ops(&node, &Facts::default()).expect("ops");
        let [Op::WaitOutput(w)] = ops.as_slice() else {
            panic!("one WaitOutput");
        };
        let not = format!("{NODES_ONE_NOT_READY}\n{SEPARATOR}\n{WORKLOADS_READY}");
        let why = (w.judge)(&not).expect_err("node2 is NotReady");
        assert!(why.contains("node node2: not Ready"), "{why}");
        let ready = format!("{NODES_READY}\n{SEPARATOR}\n{WORKLOADS_READY}");
        assert_eq!((w.judge)(&ready), Ok(()));
        assert!(w.script.contains("get nodes -o json"), "{}", w.script);
    }

    #[test]
    fn without_workloads_only_the_nodes_are_waited_for() {
        let step = ClusterReady {
            kubectl: "kubectl".into(),
            nodes: expected(&["node1", "node2"]),
            workloads: false,
            timeout: Duration::from_secs(1),
        };
        let node = crate::inventory::control_node();
        let ops = step.ops(&node, &Facts::default()).expect("ops");
        let [Op::WaitOutput(w)] = ops.as_slice() else {
            panic!("one WaitOutput");
        };
        assert!(!w.script.contains("daemonsets"), "{}", w.script);
        // A DaemonSet still rolling out (even printed) does not hold the install; a node does.
        let rolling = format!("{NODES_READY}\n{SEPARATOR}\n{WORKLOADS_DS_ROLLING}");
        assert_eq!((w.judge)(&rolling), Ok(()));
        let not = format!("{NODES_ONE_NOT_READY}\n{SEPARATOR}\n");
        assert!((w.judge)(&not).is_err());
    }
}
