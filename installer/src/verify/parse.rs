//! Typed readings of what `kubectl … -o json`, `kubectl get --raw` and the probes print for
//! `verify-cluster`. Everything here came from a node: the text is bounded before it is parsed
//! ([`MAX_ANSWER`]), unknown fields are ignored, names are checked before use, and errors never
//! quote the text.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::facts::parse::{is_node_name, Condition, K8sNode as Node, Metadata as Meta, ParseError};

/// The most text read from one answer; a longer one is refused, not cut (cut JSON would not
/// parse anyway, and a list that long is not a cluster KubeXM installed).
pub const MAX_ANSWER: usize = 8 << 20;

/// A node as `verify-cluster` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyNode {
    /// `metadata.name`.
    pub name: String,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// The `Ready` condition's reason when it is not (`KubeletNotReady`, `NodeStatusUnknown`).
    pub reason: String,
    /// Cordoned.
    pub unschedulable: bool,
    /// `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: String,
    /// `status.nodeInfo.containerRuntimeVersion` (`containerd://1.6.20`).
    pub runtime_version: String,
}

/// A pod as `verify-cluster` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyPod {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.nodeName` (empty while unscheduled).
    pub node: String,
    /// `status.phase`.
    pub phase: String,
    /// `status.podIP` (empty until it has one).
    pub ip: String,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// Why a container is waiting (`ImagePullBackOff`, `ContainerCreating`), the first one.
    pub waiting: String,
}

#[derive(Deserialize)]
struct List<T> {
    items: Vec<T>,
}

#[derive(Deserialize)]
struct Pod {
    metadata: Meta,
    #[serde(default)]
    spec: PodSpec,
    #[serde(default)]
    status: PodStatus,
}

#[derive(Deserialize, Default)]
struct PodSpec {
    #[serde(default, rename = "nodeName")]
    node_name: String,
}

#[derive(Deserialize, Default)]
struct PodStatus {
    #[serde(default)]
    phase: String,
    #[serde(default, rename = "podIP")]
    pod_ip: String,
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(default, rename = "containerStatuses")]
    containers: Vec<ContainerStatus>,
}

#[derive(Deserialize)]
struct ContainerStatus {
    #[serde(default)]
    state: ContainerState,
}

#[derive(Deserialize, Default)]
struct ContainerState {
    waiting: Option<Waiting>,
}

#[derive(Deserialize)]
struct Waiting {
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
struct NodeMetrics {
    metadata: Meta,
    #[serde(default)]
    usage: BTreeMap<String, String>,
}

/// A short printable token (versions, phases, reasons): at most 128 visible ASCII characters,
/// else `?`.
fn token(s: String) -> String {
    if s.len() <= 128 && s.chars().all(|c| c.is_ascii_graphic()) {
        s
    } else {
        "?".into()
    }
}

/// A label value as Kubernetes allows it: at most 63 of `[A-Za-z0-9._-]` (empty allowed).
fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of 1 to 63 of
/// `[A-Za-z0-9._-]`.
fn is_label_key(s: &str) -> bool {
    let (prefix, name) = s.rsplit_once('/').map_or((None, s), |(p, n)| (Some(p), n));
    prefix.is_none_or(is_node_name) && !name.is_empty() && is_label_value(name)
}

fn bounded<'a>(text: &'a str, what: &'static str) -> Result<&'a str, ParseError> {
    if text.len() > MAX_ANSWER {
        return Err(ParseError::Invalid {
            what,
            message: format!("{} bytes, over the limit of {MAX_ANSWER}", text.len()),
        });
    }
    Ok(text)
}

fn invalid(what: &'static str, message: &str) -> ParseError {
    ParseError::Invalid {
        what,
        message: message.to_string(),
    }
}

/// `kubectl get nodes -o json`.
pub fn nodes(json: &str) -> Result<Vec<VerifyNode>, ParseError> {
    const WHAT: &str = "the node list";
    let list: List<Node> = serde_json::from_str(bounded(json, WHAT)?).map_err(
        crate::facts::parse::json_err(WHAT, "kubectl get nodes -o json"),
    )?;
    list.items
        .into_iter()
        .map(|n| {
            if !is_node_name(&n.metadata.name) {
                return Err(invalid(WHAT, "a node name that is not a DNS subdomain"));
            }
            let ready = n.status.conditions.iter().find(|c| c.kind == "Ready");
            Ok(VerifyNode {
                ready: ready.is_some_and(|c| c.status == "True"),
                reason: token(
                    ready.map_or_else(|| "no Ready condition".into(), |c| c.reason.clone()),
                ),
                unschedulable: n.spec.unschedulable,
                kubelet_version: token(n.status.node_info.kubelet_version),
                runtime_version: token(n.status.node_info.runtime_version),
                name: n.metadata.name,
            })
        })
        .collect()
}

/// `kubectl get pods -o json` (one namespace or `-A`).
pub fn pods(json: &str) -> Result<Vec<VerifyPod>, ParseError> {
    const WHAT: &str = "the pod list";
    let list: List<Pod> = serde_json::from_str(bounded(json, WHAT)?).map_err(
        crate::facts::parse::json_err(WHAT, "kubectl get pods -o json"),
    )?;
    list.items
        .into_iter()
        .map(|p| {
            // Pod and namespace names are DNS labels/subdomains: the node-name rule holds.
            if !is_node_name(&p.metadata.name) || !is_node_name(&p.metadata.namespace) {
                return Err(invalid(
                    WHAT,
                    "a pod or namespace name that is not a DNS name",
                ));
            }
            if !p.spec.node_name.is_empty() && !is_node_name(&p.spec.node_name) {
                return Err(invalid(WHAT, "a node name that is not a DNS subdomain"));
            }
            let ip = p.status.pod_ip;
            if !ip.is_empty() && ip.parse::<std::net::IpAddr>().is_err() {
                return Err(invalid(WHAT, "a pod IP that is not an address"));
            }
            Ok(VerifyPod {
                ready: p
                    .status
                    .conditions
                    .iter()
                    .any(|c| c.kind == "Ready" && c.status == "True"),
                waiting: token(
                    p.status
                        .containers
                        .iter()
                        .find_map(|c| c.state.waiting.as_ref().map(|w| w.reason.clone()))
                        .unwrap_or_default(),
                ),
                phase: token(p.status.phase),
                ip,
                node: p.spec.node_name,
                labels: p
                    .metadata
                    .labels
                    .into_iter()
                    .filter(|(k, v)| is_label_key(k) && is_label_value(v))
                    .collect(),
                namespace: p.metadata.namespace,
                name: p.metadata.name,
            })
        })
        .collect()
}

/// `kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes`: the nodes that report CPU and
/// memory usage, with their usage (`cpu`, `memory` as Kubernetes quantities).
pub fn node_metrics(json: &str) -> Result<BTreeMap<String, (String, String)>, ParseError> {
    const WHAT: &str = "the node metrics";
    let list: List<NodeMetrics> = serde_json::from_str(bounded(json, WHAT)?).map_err(
        crate::facts::parse::json_err(WHAT, "kubectl get --raw /apis/metrics.k8s.io/v1beta1/nodes"),
    )?;
    let mut out = BTreeMap::new();
    for m in list.items {
        if !is_node_name(&m.metadata.name) {
            return Err(invalid(WHAT, "a node name that is not a DNS subdomain"));
        }
        let (Some(cpu), Some(mem)) = (m.usage.get("cpu"), m.usage.get("memory")) else {
            continue;
        };
        out.insert(m.metadata.name, (token(cpu.clone()), token(mem.clone())));
    }
    Ok(out)
}

/// A ClusterIP Service's address: `kubectl get service -o json`'s `spec.clusterIP`.
pub fn cluster_ip(json: &str) -> Result<std::net::IpAddr, ParseError> {
    const WHAT: &str = "the probe Service";
    #[derive(Deserialize)]
    struct Service {
        spec: ServiceSpec,
    }
    #[derive(Deserialize)]
    struct ServiceSpec {
        #[serde(rename = "clusterIP")]
        cluster_ip: String,
    }
    let s: Service = serde_json::from_str(bounded(json, WHAT)?).map_err(
        crate::facts::parse::json_err(WHAT, "kubectl get service -o json"),
    )?;
    s.spec
        .cluster_ip
        .parse()
        .map_err(|_| invalid(WHAT, "a clusterIP that is not an address"))
}

/// What one probe pod said when asked to reach its peers and resolve a name ([`probe_script`]
/// prints it): each peer's answer (`None`: no answer) and the DNS answer (`None`: the lookup
/// failed).
///
/// [`probe_script`]: super::probe_script
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// Peer address → the node name its probe served, or `None`.
    pub peers: BTreeMap<String, Option<String>>,
    /// The address the name resolved to, or `None`.
    pub dns: Option<String>,
}

/// Reads a probe's lines: `peer ADDR ok NODE`, `peer ADDR fail`, `dns ok ADDR`, `dns fail`.
/// Other lines are ignored; values that are not addresses or node names count as no answer.
pub fn probe_answer(text: &str) -> Result<ProbeAnswer, ParseError> {
    let text = bounded(text, "a probe's answer")?;
    let mut a = ProbeAnswer::default();
    for line in text.lines().take(10_000) {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["peer", addr, "ok", node] if addr.parse::<std::net::IpAddr>().is_ok() => {
                let node = is_node_name(node).then(|| (*node).to_string());
                a.peers.insert((*addr).to_string(), node);
            }
            ["peer", addr, ..] if addr.parse::<std::net::IpAddr>().is_ok() => {
                a.peers.insert((*addr).to_string(), None);
            }
            ["dns", "ok", addr] => {
                a.dns = addr
                    .parse::<std::net::IpAddr>()
                    .ok()
                    .map(|ip| ip.to_string());
            }
            _ => {}
        }
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = include_str!("testdata/nodes-v1.20.2.json");
    const PODS: &str = include_str!("testdata/probe-pods.json");

    #[test]
    fn a_node_list_gives_readiness_and_versions() {
        let n = nodes(NODES).expect("parses");
        assert_eq!(n.len(), 3);
        assert_eq!(n[0].name, "node1");
        assert!(n[0].ready);
        assert_eq!(n[0].kubelet_version, "v1.20.2");
        assert_eq!(n[0].runtime_version, "containerd://1.6.20");
        assert!(!n[2].ready);
        assert_eq!(n[2].reason, "NodeStatusUnknown");
    }

    #[test]
    fn a_pod_list_gives_nodes_ips_and_waiting_reasons() {
        let p = pods(PODS).expect("parses");
        assert_eq!(p.len(), 3);
        assert_eq!(
            (p[0].node.as_str(), p[0].ip.as_str()),
            ("node1", "10.244.0.4")
        );
        assert!(p[0].ready);
        assert_eq!(p[2].waiting, "ImagePullBackOff");
        assert!(!p[2].ready);
    }

    #[test]
    fn hostile_answers_are_refused_or_neutralised() {
        let bad_name = NODES.replacen("\"name\": \"node1\"", "\"name\": \"node1\\u001b[2J\"", 1);
        assert_ne!(bad_name, NODES);
        let err = nodes(&bad_name).expect_err("refused");
        assert!(!err.to_string().contains('\u{1b}'), "{err}");
        let bad_version = NODES.replacen(
            "\"kubeletVersion\": \"v1.20.2\"",
            "\"kubeletVersion\": \"v1.20.2 \\u001b[31m\"",
            1,
        );
        assert_ne!(bad_version, NODES);
        assert_eq!(nodes(&bad_version).expect("parses")[0].kubelet_version, "?");
        let huge = " ".repeat(MAX_ANSWER + 1);
        assert!(nodes(&huge).is_err());
        let bad_ip = PODS.replacen("10.244.0.4", "10.244.0.4; rm -rf /", 1);
        assert_ne!(bad_ip, PODS);
        assert!(pods(&bad_ip).is_err());
    }

    /// Labels are kept only when key and value are what Kubernetes allows: a value or key with
    /// control characters or spaces is dropped, the others stay.
    #[test]
    fn labels_that_kubernetes_would_refuse_are_dropped() {
        let bad = PODS
            .replacen(
                "\"app.kubernetes.io/managed-by\": \"kubexm\"",
                "\"app.kubernetes.io/managed-by\": \"kubexm\\u001b[2J\"",
                1,
            )
            .replacen("\"controller-revision-hash\"", "\"bad key/with space\"", 1);
        assert_ne!(bad, PODS);
        let p = pods(&bad).expect("parses");
        let labels = &p[0].labels;
        assert!(
            !labels.contains_key("app.kubernetes.io/managed-by"),
            "{labels:?}"
        );
        assert!(!labels.contains_key("bad key/with space"), "{labels:?}");
        assert_eq!(labels["app.kubernetes.io/name"], "kubexm-verify-probe");
        assert!(pods(PODS).expect("parses")[0]
            .labels
            .contains_key("app.kubernetes.io/managed-by"));
    }

    #[test]
    fn probe_lines_are_read_strictly() {
        let a = probe_answer(
            "peer 10.244.1.3 ok node2\npeer 10.244.2.5 fail\npeer fd00::5 ok \u{1b}[2J\nnoise\npeer x ok node9\ndns ok 10.96.0.44\n",
        )
        .expect("reads");
        assert_eq!(a.peers.len(), 3);
        assert_eq!(a.peers["10.244.1.3"].as_deref(), Some("node2"));
        assert_eq!(a.peers["10.244.2.5"], None);
        assert_eq!(a.peers["fd00::5"], None);
        assert_eq!(a.dns.as_deref(), Some("10.96.0.44"));
        assert_eq!(probe_answer("dns fail\n").expect("reads").dns, None);
    }

    #[test]
    fn node_metrics_and_cluster_ip() {
        let m = node_metrics(include_str!("testdata/node-metrics.json")).expect("parses");
        assert_eq!(m.len(), 2);
        assert_eq!(m["node1"].0, "212m");
        let ip = cluster_ip(r#"{"kind":"Service","spec":{"clusterIP":"10.96.140.7","ports":[]}}"#)
            .expect("parses");
        assert_eq!(ip.to_string(), "10.96.140.7");
        assert!(cluster_ip(r#"{"spec":{"clusterIP":"None"}}"#).is_err());
    }
}
