//! Kubernetes read through `kubectl -o json` in the lab's namespace: [`Kubectl`] (one API server
//! named, others tried when it does not answer) and the few object shapes the real-Kubernetes
//! scenario checks, typed (no parsing of kubectl's prose).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::command::Output;

/// `kubectl` run in the lab's network namespace with the cluster's admin.conf, against the API
/// servers listed (each tried in turn until one answers: a master restarting during an upgrade
/// does not fail a read). Owns its data, so it can be moved into a watcher thread.
#[derive(Debug, Clone)]
pub struct Kubectl {
    /// The lab's network namespace.
    pub netns: String,
    /// The kubectl binary (of the version under test).
    pub bin: PathBuf,
    /// admin.conf.
    pub kubeconfig: PathBuf,
    /// `https://HOST:PORT` of each API server to try, in order (empty: admin.conf's own server).
    pub servers: Vec<String>,
    /// The name the API server's certificate is checked for (`--tls-server-name`), when the
    /// servers are addressed by IP.
    pub tls_server_name: Option<String>,
}

impl Kubectl {
    fn command(&self, server: Option<&str>, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns])
            .arg(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--request-timeout=20s");
        if let Some(s) = server {
            c.arg("--server").arg(s);
            if let Some(n) = &self.tls_server_name {
                c.arg("--tls-server-name").arg(n);
            }
        }
        c.args(args);
        c
    }

    /// `kubectl ARGS` on the first API server that answers (a failure that is not a connection
    /// problem is returned as it is).
    #[must_use]
    pub fn run(&self, args: &[&str]) -> Output {
        let servers: Vec<Option<&str>> = if self.servers.is_empty() {
            vec![None]
        } else {
            self.servers.iter().map(|s| Some(s.as_str())).collect()
        };
        let mut last = None;
        for s in servers {
            let out = Output::run(&mut self.command(s, args));
            if out.success() || !unreachable(&out) {
                return out;
            }
            last = Some(out);
        }
        last.expect("at least one server tried")
    }

    /// `kubectl ARGS -o json` parsed as `T`.
    ///
    /// # Errors
    /// The output, when kubectl failed or printed something else.
    pub fn try_get<T: DeserializeOwned>(&self, args: &[&str]) -> Result<T, Output> {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let out = self.run(&a);
        if !out.success() {
            return Err(out);
        }
        serde_json::from_str(&out.stdout).map_err(|e| Output {
            stderr: format!("{}\n(not the JSON expected: {e})", out.stderr),
            ..out
        })
    }

    /// `kubectl ARGS -o json` parsed as `T`.
    ///
    /// # Panics
    /// When kubectl fails or prints something else, with its output.
    #[must_use]
    #[track_caller]
    pub fn get<T: DeserializeOwned>(&self, args: &[&str]) -> T {
        self.try_get(args)
            .unwrap_or_else(|out| panic!("kubectl {}: {out}", args.join(" ")))
    }
}

/// Whether kubectl failed for want of an API server (connection refused, timeout, EOF, 5xx while
/// it starts), not because of what was asked.
fn unreachable(out: &Output) -> bool {
    let e = &out.stderr;
    [
        "connection refused",
        "i/o timeout",
        "Client.Timeout",
        "EOF",
        "connection reset",
        "no route to host",
        "ServiceUnavailable",
        "the server is currently unable",
        "TLS handshake timeout",
        "context deadline exceeded",
        "etcdserver",
    ]
    .iter()
    .any(|m| e.contains(m))
}

/// `metadata`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The name.
    pub name: String,
    /// The labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A list (`kubectl get KIND -o json`).
#[derive(Debug, Clone, Deserialize)]
pub struct List<T> {
    /// The objects.
    pub items: Vec<T>,
}

/// A Node.
#[derive(Debug, Clone, Deserialize)]
pub struct Node {
    /// Name and labels.
    pub metadata: Meta,
    /// Conditions and versions.
    pub status: NodeStatus,
}

/// A Node's status.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// Ready and the pressure conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// What the kubelet reports.
    pub node_info: NodeInfo,
}

/// A condition.
#[derive(Debug, Clone, Deserialize)]
pub struct Condition {
    /// `Ready`, `Available`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// A kubelet's versions.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// The kubelet's version.
    pub kubelet_version: String,
    /// The container runtime and its version.
    #[serde(default)]
    pub container_runtime_version: String,
}

impl Node {
    /// Whether its Ready condition is True.
    #[must_use]
    pub fn ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.kind == "Ready" && c.status == "True")
    }

    /// Its roles (`node-role.kubernetes.io/ROLE` labels), sorted.
    #[must_use]
    pub fn roles(&self) -> Vec<String> {
        self.metadata
            .labels
            .keys()
            .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
            .map(str::to_string)
            .collect()
    }
}

/// A Deployment.
#[derive(Debug, Clone, Deserialize)]
pub struct Deployment {
    /// Name.
    pub metadata: Meta,
    /// Replicas wanted and the pod template.
    pub spec: DeploymentSpec,
    /// What runs.
    #[serde(default)]
    pub status: DeploymentStatus,
}

/// A Deployment's spec.
#[derive(Debug, Clone, Deserialize)]
pub struct DeploymentSpec {
    /// Replicas wanted.
    #[serde(default)]
    pub replicas: Option<u32>,
    /// The pod template.
    pub template: PodTemplate,
}

/// A pod template.
#[derive(Debug, Clone, Deserialize)]
pub struct PodTemplate {
    /// The pods' spec.
    pub spec: PodSpec,
}

/// A Deployment's status.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    /// Pods available (ready for minReadySeconds).
    #[serde(default)]
    pub available_replicas: u32,
    /// Pods ready.
    #[serde(default)]
    pub ready_replicas: u32,
    /// Pods of the current template.
    #[serde(default)]
    pub updated_replicas: u32,
}

/// A Pod.
#[derive(Debug, Clone, Deserialize)]
pub struct Pod {
    /// Name and labels.
    pub metadata: Meta,
    /// Node and containers.
    pub spec: PodSpec,
    /// Phase and address.
    #[serde(default)]
    pub status: PodStatus,
}

/// A pod's spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// The node it runs on.
    #[serde(default)]
    pub node_name: Option<String>,
    /// Its containers.
    pub containers: Vec<Container>,
}

/// A container.
#[derive(Debug, Clone, Deserialize)]
pub struct Container {
    /// Name.
    pub name: String,
    /// Image reference.
    pub image: String,
    /// Command.
    #[serde(default)]
    pub command: Vec<String>,
}

/// A pod's status.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// `Running`, ...
    #[serde(default)]
    pub phase: String,
    /// The pod's address.
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<String>,
    /// Its conditions (`Ready`).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

impl Pod {
    /// Whether it runs and is Ready.
    #[must_use]
    pub fn ready(&self) -> bool {
        self.status.phase == "Running"
            && self
                .status
                .conditions
                .iter()
                .any(|c| c.kind == "Ready" && c.status == "True")
    }

    /// The image of its container `name`.
    #[must_use]
    pub fn image_of(&self, name: &str) -> Option<&str> {
        self.spec
            .containers
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.image.as_str())
    }
}

/// A ConfigMap.
#[derive(Debug, Clone, Deserialize)]
pub struct ConfigMap {
    /// Its data.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
}

/// A Service.
#[derive(Debug, Clone, Deserialize)]
pub struct Service {
    /// Its spec.
    pub spec: ServiceSpec,
}

/// A Service's spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// Its ClusterIP.
    #[serde(rename = "clusterIP")]
    pub cluster_ip: String,
}

/// A PodDisruptionBudget.
#[derive(Debug, Clone, Deserialize)]
pub struct Pdb {
    /// Its spec.
    pub spec: PdbSpec,
    /// What the disruption controller computed.
    #[serde(default)]
    pub status: PdbStatus,
}

/// A PodDisruptionBudget's spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PdbSpec {
    /// minAvailable (a number here).
    #[serde(default)]
    pub min_available: Option<serde_json::Value>,
}

/// A PodDisruptionBudget's status.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PdbStatus {
    /// Healthy pods now.
    #[serde(default)]
    pub current_healthy: u32,
    /// Healthy pods wanted.
    #[serde(default)]
    pub desired_healthy: u32,
    /// Evictions allowed now.
    #[serde(default)]
    pub disruptions_allowed: u32,
}

/// `kubectl version -o json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    /// The API server's version.
    pub server_version: Option<VersionInfo>,
}

/// A version report.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionInfo {
    /// `vX.Y.Z`.
    pub git_version: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_reads_its_roles_readiness_and_kubelet() {
        let n: Node = serde_json::from_str(
            r#"{"metadata":{"name":"node1","labels":{"kubernetes.io/hostname":"node1",
            "node-role.kubernetes.io/control-plane":"","node-role.kubernetes.io/worker":""}},
            "status":{"conditions":[{"type":"MemoryPressure","status":"False"},{"type":"Ready","status":"True"}],
            "nodeInfo":{"kubeletVersion":"v1.37.2","containerRuntimeVersion":"containerd://1.6.20"}}}"#,
        )
        .expect("a Node");
        assert!(n.ready());
        assert_eq!(n.roles(), ["control-plane", "worker"]);
        assert_eq!(n.status.node_info.kubelet_version, "v1.37.2");
        let not: Node = serde_json::from_str(
            r#"{"metadata":{"name":"n"},"status":{"conditions":[{"type":"Ready","status":"Unknown"}],"nodeInfo":{"kubeletVersion":"v1"}}}"#,
        )
        .expect("a Node");
        assert!(!not.ready());
        assert!(not.roles().is_empty());
    }

    #[test]
    fn a_pod_is_ready_only_running_with_its_ready_condition() {
        let p: Pod = serde_json::from_str(
            r#"{"metadata":{"name":"p"},"spec":{"nodeName":"node2","containers":[{"name":"web","image":"r/x:1"}]},
            "status":{"phase":"Running","podIP":"10.1.2.3","conditions":[{"type":"Ready","status":"False"}]}}"#,
        )
        .expect("a Pod");
        assert!(!p.ready());
        assert_eq!(p.image_of("web"), Some("r/x:1"));
        assert_eq!(p.status.pod_ip.as_deref(), Some("10.1.2.3"));
    }

    #[test]
    fn only_connection_failures_move_to_the_next_server() {
        let o = |e: &str| Output {
            command: "kubectl".into(),
            code: Some(1),
            stdout: String::new(),
            stderr: e.into(),
        };
        assert!(unreachable(&o(
            "dial tcp 10.0.0.1:6443: connect: connection refused"
        )));
        assert!(!unreachable(&o(
            "Error from server (NotFound): deployments.apps \"x\" not found"
        )));
    }
}
