//! Typed readings of what `kubectl` and `etcdctl` print (`-o json` / `-w json`). Everything here
//! came from a host: names are checked before use, unknown fields ignored, and errors never
//! quote the text.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A node as the API server sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApiNode {
    /// `metadata.name`.
    pub name: String,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
    /// `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: String,
    /// Has the control-plane (or legacy master) role label.
    pub control_plane: bool,
}

/// An etcd member as `etcdctl member list` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EtcdMember {
    /// Member ID.
    pub id: u64,
    /// Its name; empty for a member added but not started yet.
    pub name: String,
    /// Peer URLs.
    pub peer_urls: Vec<String>,
    /// Client URLs (empty until started).
    pub client_urls: Vec<String>,
}

impl EtcdMember {
    /// The ID as etcdctl takes it (hex).
    pub fn hex_id(&self) -> String {
        format!("{:x}", self.id)
    }

    /// Started (it has a name and client URLs).
    pub fn started(&self) -> bool {
        !self.name.is_empty()
    }
}

/// One endpoint of `etcdctl endpoint health`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EndpointHealth {
    /// The client URL.
    pub endpoint: String,
    /// Healthy.
    pub health: bool,
    /// etcdctl's error, when unhealthy.
    pub error: Option<String>,
}

/// The output could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not the JSON shape expected.
    #[error("{what}: not the JSON `{command}` prints ({message})")]
    Json {
        /// What was read.
        what: &'static str,
        /// The command that printed it.
        command: &'static str,
        /// serde's position and reason (no content).
        message: String,
    },
    /// A value that is not acceptable (named, not quoted).
    #[error("{what}: {message}")]
    Invalid {
        /// What was read.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
}

pub(crate) fn json_err(
    what: &'static str,
    command: &'static str,
) -> impl FnOnce(serde_json::Error) -> ParseError {
    move |e| ParseError::Json {
        what,
        command,
        message: format!(
            "line {} column {}: {:?}",
            e.line(),
            e.column(),
            e.classify()
        ),
    }
}

/// A Kubernetes node name: a DNS subdomain (lowercase alphanumerics, `-` and `.`, at most 253).
pub fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

/// A printable token of at most 128 characters (versions, URLs): no spaces or control
/// characters.
fn is_token(s: &str) -> bool {
    s.len() <= 128 && s.chars().all(|c| c.is_ascii_graphic())
}

#[derive(Deserialize)]
struct NodeList {
    items: Vec<K8sNode>,
}

/// A Node of `kubectl get nodes -o json`: the fields `facts` and `verify` read (one shape for both).
#[derive(Deserialize)]
pub(crate) struct K8sNode {
    pub(crate) metadata: Metadata,
    #[serde(default)]
    pub(crate) spec: NodeSpec,
    #[serde(default)]
    pub(crate) status: NodeStatus,
}

/// An object's metadata.
#[derive(Deserialize)]
pub(crate) struct Metadata {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) namespace: String,
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
pub(crate) struct NodeSpec {
    #[serde(default)]
    pub(crate) unschedulable: bool,
}

#[derive(Deserialize, Default)]
pub(crate) struct NodeStatus {
    #[serde(default)]
    pub(crate) conditions: Vec<Condition>,
    #[serde(default, rename = "nodeInfo")]
    pub(crate) node_info: NodeInfo,
}

/// A Node's or a Pod's condition.
#[derive(Deserialize)]
pub(crate) struct Condition {
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) status: String,
    #[serde(default)]
    pub(crate) reason: String,
    #[serde(default)]
    pub(crate) message: String,
}

#[derive(Deserialize, Default)]
pub(crate) struct NodeInfo {
    #[serde(default, rename = "kubeletVersion")]
    pub(crate) kubelet_version: String,
    #[serde(default, rename = "containerRuntimeVersion")]
    pub(crate) runtime_version: String,
}

/// `kubectl get nodes -o json`.
pub fn nodes(json: &str) -> Result<Vec<ApiNode>, ParseError> {
    let list: NodeList = serde_json::from_str(json)
        .map_err(json_err("the node list", "kubectl get nodes -o json"))?;
    list.items
        .into_iter()
        .map(|n| {
            if !is_node_name(&n.metadata.name) {
                return Err(ParseError::Invalid {
                    what: "the node list",
                    message: "a node name that is not a DNS subdomain".into(),
                });
            }
            let version = n.status.node_info.kubelet_version;
            if !is_token(&version) {
                return Err(ParseError::Invalid {
                    what: "the node list",
                    message: format!("node {}: an unreadable kubelet version", n.metadata.name),
                });
            }
            Ok(ApiNode {
                ready: n
                    .status
                    .conditions
                    .iter()
                    .any(|c| c.kind == "Ready" && c.status == "True"),
                unschedulable: n.spec.unschedulable,
                kubelet_version: version,
                control_plane: n
                    .metadata
                    .labels
                    .contains_key("node-role.kubernetes.io/control-plane")
                    || n.metadata
                        .labels
                        .contains_key("node-role.kubernetes.io/master"),
                name: n.metadata.name,
            })
        })
        .collect()
}

#[derive(Deserialize)]
struct MemberList {
    #[serde(default)]
    members: Vec<RawMember>,
}

#[derive(Deserialize)]
struct RawMember {
    #[serde(rename = "ID")]
    id: u64,
    #[serde(default)]
    name: String,
    #[serde(default, rename = "peerURLs")]
    peer_urls: Vec<String>,
    #[serde(default, rename = "clientURLs")]
    client_urls: Vec<String>,
}

/// `etcdctl member list -w json`.
pub fn etcd_members(json: &str) -> Result<Vec<EtcdMember>, ParseError> {
    let list: MemberList = serde_json::from_str(json).map_err(json_err(
        "the etcd member list",
        "etcdctl member list -w json",
    ))?;
    list.members
        .into_iter()
        .map(|m| {
            let ok = (m.name.is_empty() || is_node_name(&m.name))
                && m.peer_urls
                    .iter()
                    .chain(&m.client_urls)
                    .all(|u| is_token(u));
            if !ok {
                return Err(ParseError::Invalid {
                    what: "the etcd member list",
                    message: format!("member {:x}: a name or URL KubeXM cannot use", m.id),
                });
            }
            Ok(EtcdMember {
                id: m.id,
                name: m.name,
                peer_urls: m.peer_urls,
                client_urls: m.client_urls,
            })
        })
        .collect()
}

#[derive(Deserialize)]
struct RawHealth {
    endpoint: String,
    health: bool,
    #[serde(default)]
    error: Option<String>,
}

/// `etcdctl endpoint health -w json` (printed also when some endpoints are unhealthy).
pub fn etcd_health(json: &str) -> Result<Vec<EndpointHealth>, ParseError> {
    let list: Vec<RawHealth> = serde_json::from_str(json.trim()).map_err(json_err(
        "etcd endpoint health",
        "etcdctl endpoint health -w json",
    ))?;
    list.into_iter()
        .map(|h| {
            if !is_token(&h.endpoint) {
                return Err(ParseError::Invalid {
                    what: "etcd endpoint health",
                    message: "an endpoint that is not a URL".into(),
                });
            }
            Ok(EndpointHealth {
                endpoint: h.endpoint,
                health: h.health,
                // etcd's own words, kept short and printable.
                error: h
                    .error
                    .map(|e| e.chars().filter(|c| !c.is_control()).take(200).collect()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shapes printed by etcdctl 3.4.23 (Debian's etcd-client) against a real etcd, with a
    // member added but not started.
    const MEMBERS: &str = r#"{"header":{"cluster_id":15118495548433857066,"member_id":13668033151171901709,"raft_term":2},"members":[{"ID":9305927779192744883,"peerURLs":["http://127.0.0.1:23802"]},{"ID":13668033151171901709,"name":"a","peerURLs":["http://127.0.0.1:23801"],"clientURLs":["http://127.0.0.1:23791"]}]}"#;
    const HEALTH: &str = r#"[{"endpoint":"http://127.0.0.1:23791","health":false,"took":"5.00142892s","error":"context deadline exceeded"}]"#;

    #[test]
    fn etcd_member_list_and_health() {
        let m = etcd_members(MEMBERS).expect("members");
        assert_eq!(m.len(), 2);
        assert!(!m[0].started());
        assert_eq!(m[0].hex_id(), "81254c02a0392bb3");
        assert_eq!(m[1].name, "a");
        assert_eq!(m[1].client_urls, vec!["http://127.0.0.1:23791".to_string()]);
        let h = etcd_health(&format!("{HEALTH}\n")).expect("health");
        assert!(!h[0].health);
        assert_eq!(h[0].error.as_deref(), Some("context deadline exceeded"));
    }

    #[test]
    fn node_list() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[
          {"metadata":{"name":"node1","labels":{"node-role.kubernetes.io/control-plane":""}},
           "spec":{},"status":{"conditions":[{"type":"MemoryPressure","status":"False"},{"type":"Ready","status":"True"}],
           "nodeInfo":{"kubeletVersion":"v1.20.2"}}},
          {"metadata":{"name":"node4"},"spec":{"unschedulable":true},
           "status":{"conditions":[{"type":"Ready","status":"Unknown"}],"nodeInfo":{"kubeletVersion":"v1.20.2"}}}]}"#;
        let n = nodes(json).expect("nodes");
        assert_eq!(n.len(), 2);
        assert!(n[0].ready && n[0].control_plane && !n[0].unschedulable);
        assert!(!n[1].ready && n[1].unschedulable && !n[1].control_plane);
        assert_eq!(n[1].kubelet_version, "v1.20.2");
    }

    #[test]
    fn hostile_values_are_refused_without_being_quoted() {
        let json = r#"{"items":[{"metadata":{"name":"x\u001b[31m"}}]}"#;
        let e = nodes(json).expect_err("bad name").to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
        let e = etcd_members(r#"{"members":[{"ID":1,"name":"a b","peerURLs":[]}]}"#)
            .expect_err("bad name")
            .to_string();
        assert!(e.contains("member 1"), "{e}");
        let e = nodes("secret-token-here")
            .expect_err("not json")
            .to_string();
        assert!(!e.contains("secret-token-here"), "{e}");
    }
}
