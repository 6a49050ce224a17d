//! Facts first: what the day-2 commands learn about the running cluster before deciding
//! anything, gathered once over the SSH connections the run then uses ([`gather`]):
//!
//! * the nodes as the API server sees them (`kubectl get nodes -o json` with KubeXM's admin
//!   kubeconfig, on the first master that answers): registered, Ready, cordoned, kubelet version;
//! * etcd: the member list and every member's health (`etcdctl member list` / `endpoint health
//!   --cluster`, with a member's admin certificate for `etcd.type: kubexm`; through the first
//!   answering master's etcd pod for kubeadm's stacked etcd);
//! * which nodes could not be reached.
//!
//! The checks ([`checks`]) and the phases of each day-2 pipeline read these facts; no phase
//! probes again. What could not be learned is kept as a note: the checks decide whether it
//! matters.

pub mod checks;
pub mod deprecated;
pub mod fio;
pub mod harbor;
pub mod host;
pub mod kata;
pub mod kernel;
pub mod net;
pub mod node;
pub mod parse;

use futures_util::future::join_all;
use kubexm_manifests::resolve::Role;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::EtcdType;

use crate::context::InstallContext;
use crate::modules::etcd::EtcdLayout;
use crate::modules::lifecycle::membership::kubectl_on;
use crate::runner::{Exec, Runner};
pub use parse::{ApiNode, EndpointHealth, EtcdMember};

/// How long one probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the Node list may take on one master. kubectl's own `--request-timeout` bounds
/// each request but not its retries: an API server that answers 500 (its etcd down, seen in the
/// lab) is asked again up to ten times, so one master's `kubectl get nodes` ran until the
/// [`PROBE_TIMEOUT`] cut it, and a day-2 command on a broken cluster spent 3 x 60 s asking the
/// masters before its plan. The masters are now asked at once, each bounded by this.
pub const API_PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long kubectl waits for one answer of the API server (below [`API_PROBE_TIMEOUT`], so
/// that one request that hangs ends with kubectl's own message).
pub const API_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The Node list asked of the API server through `kubectl` on a master, each request bounded.
fn nodes_query(kubectl: &str) -> String {
    format!(
        "{kubectl} --request-timeout={}s get nodes -o json",
        API_REQUEST_TIMEOUT.as_secs()
    )
}

/// etcd as a member reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EtcdFacts {
    /// The node etcdctl ran on.
    pub from: String,
    /// The members.
    pub members: Vec<EtcdMember>,
    /// Every started member's health.
    pub health: Vec<EndpointHealth>,
}

impl EtcdFacts {
    /// The member named `name`, or the one (possibly not started) whose peer URL is `peer_url`.
    pub fn member(&self, name: &str, peer_url: &str) -> Option<&EtcdMember> {
        self.members
            .iter()
            .find(|m| m.name == name || m.peer_urls.iter().any(|u| u == peer_url))
    }

    /// Whether the member's client URLs answered healthy.
    pub fn healthy(&self, m: &EtcdMember) -> bool {
        m.started()
            && m.client_urls
                .iter()
                .any(|u| self.health.iter().any(|h| h.endpoint == *u && h.health))
    }

    /// Started members.
    pub fn started(&self) -> usize {
        self.members.iter().filter(|m| m.started()).count()
    }
}

/// What the day-2 commands know about the running cluster.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClusterFacts {
    /// Nodes that could not be reached over SSH.
    pub unreachable: BTreeSet<String>,
    /// The master whose kubectl answered; `None` when none did.
    pub api_node: Option<String>,
    /// The nodes the API server knows.
    pub nodes: Vec<ApiNode>,
    /// etcd, when it could be asked (`None` for external etcd or when no member answered).
    pub etcd: Option<EtcdFacts>,
    /// What could not be learned, and why.
    pub notes: Vec<String>,
    /// Assumed from the record instead of gathered (plans made without connecting).
    pub assumed: bool,
}

impl ClusterFacts {
    /// The node as the API server knows it.
    pub fn api(&self, name: &str) -> Option<&ApiNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// What a plan made without connecting assumes: every node of `ctx` registered and Ready
    /// at the cluster's version, every etcd member of the record started and healthy.
    pub fn assumed(ctx: &InstallContext) -> Self {
        let version = ctx.cluster.version.to_string();
        let nodes = ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
            .map(|n| ApiNode {
                name: n.name.clone(),
                ready: true,
                unschedulable: false,
                kubelet_version: version.clone(),
                control_plane: n.has_role(Role::Master),
            })
            .collect();
        let etcd = (ctx.cluster.file.spec.etcd.kind == EtcdType::Kubexm).then(|| {
            let layout = EtcdLayout::from_context(ctx);
            let members: Vec<EtcdMember> = layout
                .members
                .iter()
                .enumerate()
                .map(|(i, m)| EtcdMember {
                    id: 0x1000 + i as u64,
                    name: m.name.clone(),
                    peer_urls: vec![layout.peer_url(m)],
                    client_urls: vec![layout.client_url(m)],
                })
                .collect();
            EtcdFacts {
                from: layout
                    .members
                    .first()
                    .map(|m| m.name.clone())
                    .unwrap_or_default(),
                health: members
                    .iter()
                    .flat_map(|m| m.client_urls.clone())
                    .map(|endpoint| EndpointHealth {
                        endpoint,
                        health: true,
                        error: None,
                    })
                    .collect(),
                members,
            }
        });
        Self {
            unreachable: BTreeSet::new(),
            api_node: ctx.first_master().ok().map(|n| n.name.clone()),
            nodes,
            etcd,
            notes: Vec::new(),
            assumed: true,
        }
    }
}

impl fmt::Display for ClusterFacts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "facts{}:",
            if self.assumed {
                " (assumed from the record: nothing was asked)"
            } else {
                " (gathered over SSH)"
            }
        )?;
        match &self.api_node {
            Some(m) => {
                let list: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| {
                        format!(
                            "{} {}{}{} {}",
                            n.name,
                            if n.ready { "Ready" } else { "NotReady" },
                            if n.unschedulable { ",cordoned" } else { "" },
                            if n.control_plane {
                                ",control-plane"
                            } else {
                                ""
                            },
                            n.kubelet_version
                        )
                    })
                    .collect();
                writeln!(f, "  API (kubectl on {m}): {}", list.join("; "))?;
            }
            None => writeln!(f, "  API: no master answered")?,
        }
        if let Some(e) = &self.etcd {
            let mut members: Vec<&EtcdMember> = e.members.iter().collect();
            members.sort_by(|a, b| (a.name.is_empty(), &a.name).cmp(&(b.name.is_empty(), &b.name)));
            let list: Vec<String> = members
                .iter()
                .map(|m| {
                    let name = if m.started() {
                        m.name.clone()
                    } else {
                        format!("{} (added, not started)", m.hex_id())
                    };
                    let health = if e.healthy(m) { "healthy" } else { "unhealthy" };
                    format!("{name} {health}")
                })
                .collect();
            writeln!(
                f,
                "  etcd (etcdctl on {}): {} member(s): {}",
                e.from,
                e.members.len(),
                list.join(", ")
            )?;
        }
        if !self.unreachable.is_empty() {
            let v: Vec<&str> = self.unreachable.iter().map(String::as_str).collect();
            writeln!(f, "  unreachable over SSH: {}", v.join(", "))?;
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        Ok(())
    }
}

/// A short, printable excerpt of a command's stderr for a note.
fn excerpt(s: &str) -> String {
    let s: String = s
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    if s.is_empty() {
        "no output".into()
    } else {
        s
    }
}

async fn probe(runner: &dyn Runner, script: &str) -> Result<(bool, String, String), String> {
    probe_within(runner, script, PROBE_TIMEOUT).await
}

/// A probe's exit status, stdout and stderr; `Err` is the runner's error, which names the node.
async fn probe_within(
    runner: &dyn Runner,
    script: &str,
    timeout: Duration,
) -> Result<(bool, String, String), String> {
    match runner.exec(&Exec::root(script).with_timeout(timeout)).await {
        Ok(out) => Ok((out.success(), out.stdout, out.stderr)),
        Err(e) => Err(e.to_string()),
    }
}

/// Gathers the facts of the cluster `ctx` describes (the installed cluster), over `runners`
/// (one per reachable node, by name); `unreachable` are the nodes that could not be connected.
pub async fn gather(
    ctx: &Arc<InstallContext>,
    runners: &BTreeMap<String, Arc<dyn Runner>>,
    unreachable: BTreeSet<String>,
) -> ClusterFacts {
    let mut f = ClusterFacts {
        unreachable,
        ..ClusterFacts::default()
    };
    // Every master is asked at once (a master whose API server hangs costs its whole
    // API_PROBE_TIMEOUT), then the answers are read in the masters' order, as if asked in turn:
    // each answer is the Node list's JSON or the note saying why there is none.
    let asks = ctx.with_role(Role::Master).into_iter().filter_map(|m| {
        let runner = runners.get(&m)?.clone();
        let kubectl = kubectl_on(ctx, ctx.node(&m)?);
        Some(async move {
            let query = nodes_query(&kubectl.map_err(|e| format!("{m}: {e}"))?);
            match probe_within(runner.as_ref(), &query, API_PROBE_TIMEOUT).await {
                Ok((true, out, _)) => Ok((m, out)),
                Ok((false, _, err)) => Err(format!(
                    "{m}: `kubectl get nodes` failed: {}",
                    excerpt(&err)
                )),
                // The runner's error names the node already.
                Err(e) => Err(e),
            }
        })
    });
    for answer in join_all(asks).await {
        match answer.and_then(|(m, out)| {
            parse::nodes(&out)
                .map(|nodes| (m.clone(), nodes))
                .map_err(|e| format!("{m}: {e}"))
        }) {
            Ok((m, nodes)) => {
                f.api_node = Some(m);
                f.nodes = nodes;
                break;
            }
            Err(note) => f.notes.push(note),
        }
    }
    match ctx.cluster.file.spec.etcd.kind {
        EtcdType::Kubexm => {
            let layout = EtcdLayout::from_context(ctx);
            // Every member at once, the answers read in the members' order (as for masters).
            let asks = layout.members.iter().filter_map(|member| {
                let runner = runners.get(&member.name)?.clone();
                let etcdctl = format!("{} --command-timeout=10s", layout.etcdctl(&member.name));
                Some(async move { etcd_facts(runner.as_ref(), &member.name, &etcdctl).await })
            });
            for answer in join_all(asks).await {
                match answer {
                    Ok(e) => {
                        f.etcd = Some(e);
                        break;
                    }
                    Err(e) => f.notes.push(e),
                }
            }
            if f.etcd.is_none() {
                f.notes
                    .push("no etcd member answered `etcdctl member list`".to_string());
            }
        }
        EtcdType::Kubeadm => {
            // Stacked etcd runs in a static pod on each master: ask it through the API.
            if let (Some(m), Some(runner)) = (
                f.api_node.clone(),
                f.api_node.as_ref().and_then(|m| runners.get(m)),
            ) {
                let etcdctl = match ctx.node(&m).map(|n| kubectl_on(ctx, n)) {
                    Some(Ok(k)) => Some(crate::modules::lifecycle::etcd_member::stacked_etcdctl(
                        &k, &m,
                    )),
                    _ => None,
                };
                if let Some(etcdctl) = etcdctl {
                    match etcd_facts(runner.as_ref(), &m, &etcdctl).await {
                        Ok(e) => f.etcd = Some(e),
                        Err(e) => f.notes.push(format!("stacked etcd: {e}")),
                    }
                }
            }
        }
        EtcdType::External => f
            .notes
            .push("etcd.type is external: its members are not KubeXM's to check".into()),
    }
    f
}

async fn etcd_facts(runner: &dyn Runner, node: &str, etcdctl: &str) -> Result<EtcdFacts, String> {
    let members = match probe(runner, &format!("{etcdctl} member list -w json")).await {
        Ok((true, out, _)) => parse::etcd_members(&out).map_err(|e| format!("{node}: {e}"))?,
        Ok((false, _, err)) => {
            return Err(format!(
                "{node}: `etcdctl member list` failed: {}",
                excerpt(&err)
            ))
        }
        Err(e) => return Err(e),
    };
    // Exits 1 when a member is unhealthy, still printing every endpoint.
    let health = match probe(
        runner,
        &format!("{etcdctl} endpoint health --cluster -w json"),
    )
    .await
    {
        Ok((_, out, err)) => parse::etcd_health(&out)
            .map_err(|e| format!("{node}: {e} (stderr: {})", excerpt(&err)))?,
        Err(e) => return Err(e),
    };
    Ok(EtcdFacts {
        from: node.to_string(),
        members,
        health,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_list_is_bounded_below_the_probe() {
        let q = nodes_query("/usr/local/bin/kubectl --kubeconfig /etc/kubernetes/admin.conf");
        assert_eq!(
            q,
            "/usr/local/bin/kubectl --kubeconfig /etc/kubernetes/admin.conf --request-timeout=15s get nodes -o json"
        );
        // One hung request ends with kubectl's own message before the probe is cut off, and
        // the masters (asked at once) cost less than one general probe's limit.
        assert!(API_REQUEST_TIMEOUT < API_PROBE_TIMEOUT);
        assert!(API_PROBE_TIMEOUT < PROBE_TIMEOUT);
    }
}
