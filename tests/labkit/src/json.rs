//! Typed views of the JSON the checks read: `kubexm-install status -o json`, the installed-cluster
//! record (`installed.json`), the journal (`runs/*/events.jsonl`, `runs/*/verify.json`),
//! `kubectl get nodes -o json` and `etcdctl -w json`. Only the fields the checks use; unknown
//! fields are ignored (the product's own types are strict where they are read back).

use std::collections::BTreeMap;

use serde::Deserialize;

/// `kubexm-install status -o json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// The cluster's name.
    pub cluster: String,
    /// The record's view.
    pub record: StatusRecord,
    /// Every node of the record.
    pub nodes: Vec<StatusNode>,
    /// The etcd members, as one member answered.
    pub etcd: Option<StatusEtcd>,
    /// Certificates, soonest expiry first.
    pub certificates: Vec<StatusCert>,
    /// What is wrong (exit 7 when not empty).
    pub problems: Vec<String>,
}

impl Status {
    /// The node named `name`.
    #[must_use]
    pub fn node(&self, name: &str) -> Option<&StatusNode> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// `record` of [`Status`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRecord {
    /// The last operation.
    pub last_operation: Option<Operation>,
}

/// One node of [`Status`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusNode {
    /// Its name.
    pub name: String,
    /// Its roles.
    pub roles: Vec<String>,
    /// Whether SSH reached it.
    pub reachable: bool,
    /// Why not.
    pub error: Option<String>,
    /// Whether the API lists it.
    pub registered: bool,
    /// Its Ready condition.
    pub ready: Option<bool>,
    /// binary → version.
    pub versions: BTreeMap<String, String>,
    /// Container runtimes found.
    pub runtimes: Vec<String>,
    /// Enabled units and their state.
    pub services: Vec<Unit>,
}

impl StatusNode {
    /// `systemctl is-active` of `unit`, if enabled.
    #[must_use]
    pub fn unit(&self, unit: &str) -> Option<&str> {
        self.services
            .iter()
            .find(|u| u.unit == unit)
            .map(|u| u.active.as_str())
    }
}

/// A unit's state.
#[derive(Debug, Clone, Deserialize)]
pub struct Unit {
    /// Without `.service`.
    pub unit: String,
    /// `active`, `failed`...
    pub active: String,
}

/// `etcd` of [`Status`].
#[derive(Debug, Clone, Deserialize)]
pub struct StatusEtcd {
    /// The members.
    pub members: Vec<StatusEtcdMember>,
}

/// One etcd member of [`Status`].
#[derive(Debug, Clone, Deserialize)]
pub struct StatusEtcdMember {
    /// Its name.
    pub name: String,
    /// Whether its endpoint answered healthy.
    pub healthy: bool,
}

/// One certificate of [`Status`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusCert {
    /// The node.
    pub node: String,
    /// The file.
    pub path: String,
    /// Whole days left.
    pub days_left: i64,
}

/// The installed-cluster record, `WORK/clusters/NAME/installed.json`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Installed {
    /// The cluster.
    pub cluster: String,
    /// Node → roles.
    pub nodes: BTreeMap<String, Vec<String>>,
    /// Operations, oldest first.
    pub history: Vec<Operation>,
}

impl Installed {
    /// The node names, sorted.
    #[must_use]
    pub fn node_names(&self) -> Vec<&str> {
        self.nodes.keys().map(String::as_str).collect()
    }

    /// The last operation.
    #[must_use]
    pub fn last(&self) -> Option<&Operation> {
        self.history.last()
    }
}

/// One operation of the record.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// `install`, `add-node`...
    pub operation: String,
    /// The nodes it concerned.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Seconds it took.
    #[serde(default)]
    pub seconds: f64,
    /// `succeeded` or `failed`.
    pub result: String,
    /// Notes (forced drain, unreachable node...).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// One line of a run's `events.jsonl`.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    /// `TaskSucceeded`, `StepSucceeded`, `Warning`...
    pub event: String,
    /// Module.
    pub module: Option<String>,
    /// Task.
    pub task: Option<String>,
    /// Step.
    pub step: Option<String>,
    /// Node.
    pub node: Option<String>,
    /// Message.
    #[serde(default)]
    pub message: String,
}

/// `verify-cluster -o json`, also what an install, upgrade, apply or `restore --fresh` that
/// verified the cluster at its end leaves beside its journal (`runs/<id>/verify.json`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// The cluster.
    pub cluster: String,
    /// `pass` or `fail`.
    pub result: String,
    /// `complete`, `timedOut` or `interrupted`.
    pub outcome: String,
    /// Every check, in order.
    pub checks: Vec<VerifyCheck>,
}

impl VerifyReport {
    /// The names of the checks with `status`.
    #[must_use]
    pub fn named(&self, status: &str) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.name.as_str())
            .collect()
    }
}

/// One check of a [`VerifyReport`].
#[derive(Debug, Clone, Deserialize)]
pub struct VerifyCheck {
    /// `nodes`, `control-plane`, `etcd`, `certificates`, `metrics`, `pod-network`, `service`,
    /// `dns`, `logs-exec`.
    pub name: String,
    /// `pass`, `fail` or `skip`.
    pub status: String,
    /// One line.
    #[serde(default)]
    pub summary: String,
    /// What does not work.
    #[serde(default)]
    pub failures: Vec<String>,
}

/// `kubectl get nodes -o json`, names only.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeList {
    /// The Node objects.
    pub items: Vec<KubeObject>,
}

impl NodeList {
    /// The node names, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.items.iter().map(|i| i.metadata.name.clone()).collect();
        v.sort();
        v
    }
}

/// A Kubernetes object's metadata.
#[derive(Debug, Clone, Deserialize)]
pub struct KubeObject {
    /// `metadata`.
    pub metadata: KubeMetadata,
}

/// `metadata.name`.
#[derive(Debug, Clone, Deserialize)]
pub struct KubeMetadata {
    /// The name.
    pub name: String,
}

/// `etcdctl member list -w json`.
#[derive(Debug, Clone, Deserialize)]
pub struct EtcdMemberList {
    /// The members.
    pub members: Vec<EtcdMember>,
}

impl EtcdMemberList {
    /// Member names, sorted (`(unstarted)` for a member that has not started).
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .members
            .iter()
            .map(|m| m.name.clone().unwrap_or_else(|| "(unstarted)".into()))
            .collect();
        v.sort();
        v
    }
}

/// One member.
#[derive(Debug, Clone, Deserialize)]
pub struct EtcdMember {
    /// Absent until it started.
    pub name: Option<String>,
}

/// One entry of `etcdctl endpoint health -w json`.
#[derive(Debug, Clone, Deserialize)]
pub struct EtcdHealth {
    /// The endpoint.
    pub endpoint: String,
    /// Whether it is healthy.
    pub health: bool,
}

/// One entry of `journalctl -o json`: only its message.
#[derive(Debug, Clone, Deserialize)]
pub struct JournalEntry {
    /// `MESSAGE`: a string, or an array of bytes when it is not UTF-8.
    #[serde(rename = "MESSAGE", default)]
    pub message: serde_json::Value,
}

impl JournalEntry {
    /// The message as text.
    #[must_use]
    pub fn text(&self) -> String {
        match &self.message {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(bytes) => {
                let b: Vec<u8> = bytes
                    .iter()
                    .filter_map(|x| x.as_u64().and_then(|x| u8::try_from(x).ok()))
                    .collect();
                String::from_utf8_lossy(&b).into_owned()
            }
            _ => String::new(),
        }
    }
}
