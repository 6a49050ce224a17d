//! The checks every day-2 command runs on the facts before anything changes. Each returns every
//! problem at once (what is wrong, and what to do), and warnings that do not stop the command.
//!
//! * Never the last master, never the registry host or a node others take their time from.
//! * etcd quorum: a member is removed only while the members left that are healthy are a
//!   quorum of the new size; a member is added only while every member is healthy (the new,
//!   larger quorum counts on all of them until it has started).
//! * An even number of etcd members (no more failures tolerated than one less) only with
//!   `--allow-even-etcd`.
//! * Never two membership changes at once: one etcd member per command, one stacked master, and
//!   no member left half-added by an earlier command (unless it is the one being resumed).
//! * The kubelets run the cluster's Kubernetes minor version (day-2 does not upgrade).

use kubexm_manifests::model::EtcdType;
use kubexm_manifests::resolve::Role;
use kubexm_manifests::validate::Problem;

use super::ClusterFacts;
use crate::context::InstallContext;
use crate::modules::etcd::EtcdLayout;

/// What the command line allows.
#[derive(Debug, Clone, Copy, Default)]
pub struct Guards {
    /// Accept an even number of etcd members.
    pub allow_even_etcd: bool,
    /// The node is gone: only cluster-side steps run (delete-node).
    pub unreachable: bool,
}

/// The outcome of the checks.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// What stops the command.
    pub problems: Vec<Problem>,
    /// What the operator should know.
    pub warnings: Vec<String>,
    /// Set when the change is already in place (the command then only says so).
    pub nothing_to_do: Option<String>,
}

impl Verdict {
    fn problem(&mut self, path: &str, message: impl Into<String>, hint: impl Into<String>) {
        self.problems.push(Problem {
            path: path.to_string(),
            message: message.into(),
            hint: hint.into(),
        });
    }
}

/// The hint every even-count refusal carries.
const EVEN_HINT: &str = "an even number of members tolerates no more failures than one less; pass --allow-even-etcd to accept it for now (e.g. while replacing a member), or change two members";

fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The API answered on a master that will run the cluster-side steps, and the kubelets run
/// the cluster's minor version.
fn api(v: &mut Verdict, desired: &InstallContext, facts: &ClusterFacts) {
    let Some(api) = &facts.api_node else {
        v.problem(
            "cluster",
            format!(
                "no master answered `kubectl get nodes`{}",
                if facts.notes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", facts.notes.join("; "))
                }
            ),
            "the API server must answer through KubeXM's admin kubeconfig on a master: check the masters and the control plane first",
        );
        return;
    };
    let _ = api;
    if let Ok(first) = desired.first_master() {
        if facts.unreachable.contains(&first.name) {
            v.problem(
                "spec.roleGroups.master[0]",
                format!(
                    "{} runs the cluster-side steps (kubectl, join credentials) but cannot be reached",
                    first.name
                ),
                "bring it back, or delete it first with `kubexm-install delete-node --node NAME --unreachable`",
            );
        } else if facts.api_node.as_deref() != Some(first.name.as_str()) && !facts.assumed {
            v.warnings.push(format!(
                "the API answered on {} but not on {}, where the cluster-side steps run",
                facts.api_node.as_deref().unwrap_or("-"),
                first.name
            ));
        }
    }
    let want = desired.cluster.version;
    for n in &facts.nodes {
        let minor = n
            .kubelet_version
            .trim_start_matches('v')
            .split('.')
            .take(2)
            .collect::<Vec<_>>()
            .join(".");
        if minor != format!("{}.{}", want.major, want.minor) {
            v.problem(
                "spec.kubernetes.version",
                format!(
                    "node {} runs kubelet {} but cluster.yaml says {want}",
                    n.name, n.kubelet_version
                ),
                "day-2 commands do not upgrade or downgrade: every node must run the cluster's minor version",
            );
        }
    }
}

/// etcd members the kubexm layout of `ctx` has, by name.
fn layout_members(ctx: &InstallContext) -> Vec<String> {
    EtcdLayout::from_context(ctx)
        .members
        .iter()
        .map(|m| m.name.clone())
        .collect()
}

/// The etcd facts, or a problem saying they are needed `before`.
fn asked<'a>(
    v: &mut Verdict,
    facts: &'a ClusterFacts,
    before: &str,
) -> Option<&'a super::EtcdFacts> {
    if facts.etcd.is_none() {
        v.problem(
            "etcd",
            "the etcd members could not be asked (see the notes above)",
            format!("etcd must answer `etcdctl member list` on a member {before}"),
        );
    }
    facts.etcd.as_ref()
}

/// Checks for adding the etcd member `node` (kubexm etcd) to the members the facts show.
fn etcd_add(
    v: &mut Verdict,
    desired: &InstallContext,
    node: &str,
    facts: &ClusterFacts,
    g: Guards,
) {
    let layout = EtcdLayout::from_context(desired);
    let Some(member) = layout.member(node) else {
        return;
    };
    let Some(e) = asked(v, facts, "before one is added") else {
        return;
    };
    let peer = layout.peer_url(member);
    for m in &e.members {
        let this = m.name == node || m.peer_urls.contains(&peer);
        if !m.started() && !this {
            v.problem(
                "etcd",
                format!(
                    "member {} ({}) was added but never started: an earlier membership change did not finish",
                    m.hex_id(),
                    m.peer_urls.join(",")
                ),
                "finish it with `kubexm-install etcd add-member --node NAME --resume`, or remove it with etcdctl member remove, then retry",
            );
        }
        if m.started() && !this && !e.healthy(m) {
            v.problem(
                "etcd",
                format!("member {} is not healthy", m.name),
                "adding a member raises the quorum: every member must be healthy first",
            );
        }
    }
    let after = e.members.len() + usize::from(e.member(node, &peer).is_none());
    even(v, &format!("adding {node}"), after, g);
}

/// An even member count after `change`: refused without `--allow-even-etcd`, else a warning.
fn even(v: &mut Verdict, change: &str, after: usize, g: Guards) {
    if after % 2 != 0 {
        return;
    }
    if g.allow_even_etcd {
        v.warnings.push(format!(
            "{after} etcd members (even, accepted with --allow-even-etcd): add or remove one more soon"
        ));
    } else {
        v.problem(
            "etcd",
            format!("{change} leaves {after} etcd members, an even number"),
            EVEN_HINT,
        );
    }
}

/// Checks for removing the etcd member `node` from the members the facts show.
fn etcd_remove(v: &mut Verdict, node: &str, peer: &str, facts: &ClusterFacts, g: Guards) {
    let Some(e) = asked(
        v,
        facts,
        "before a member is removed: quorum is checked first",
    ) else {
        return;
    };
    if e.member(node, peer).is_none() {
        return;
    }
    let after = e.members.len() - 1;
    if after == 0 {
        v.problem(
            "etcd",
            format!("{node} is the last etcd member"),
            "a cluster keeps at least one etcd member: add another first",
        );
        return;
    }
    let healthy_left = e
        .members
        .iter()
        .filter(|m| m.name != node && !m.peer_urls.iter().any(|u| u == peer) && e.healthy(m))
        .count();
    if healthy_left < quorum(after) {
        v.problem(
            "etcd",
            format!(
                "removing {node} leaves {after} member(s) of which {healthy_left} are healthy, below the quorum of {}",
                quorum(after)
            ),
            "bring the unhealthy members back first: removing a member now would break etcd's quorum",
        );
    }
    even(v, &format!("removing {node}"), after, g);
}

/// Stacked (kubeadm) etcd: each master is a member, so masters count as members.
fn stacked_masters_change(v: &mut Verdict, facts: &ClusterFacts, masters_after: usize, g: Guards) {
    if let Some(e) = &facts.etcd {
        let unhealthy: Vec<&str> = e
            .members
            .iter()
            .filter(|m| !e.healthy(m))
            .map(|m| {
                if m.started() {
                    m.name.as_str()
                } else {
                    "(not started)"
                }
            })
            .collect();
        if !unhealthy.is_empty() {
            v.problem(
                "etcd",
                format!("stacked etcd members not healthy: {}", unhealthy.join(", ")),
                "every member must be healthy before a master (an etcd member) joins or leaves",
            );
        }
    } else {
        v.warnings.push(
            "stacked etcd could not be asked: quorum is judged from the masters' Ready state"
                .into(),
        );
        let ready = facts
            .nodes
            .iter()
            .filter(|n| n.control_plane && n.ready)
            .count();
        if ready < quorum(masters_after) && !facts.assumed {
            v.problem(
                "etcd",
                format!(
                    "{ready} master(s) Ready, below the quorum of {} for {masters_after} stacked etcd members",
                    quorum(masters_after)
                ),
                "bring the masters back first",
            );
        }
    }
    even(
        v,
        &format!("{masters_after} masters (each a stacked etcd member)"),
        masters_after,
        g,
    );
}

/// add-node: `new` (names) join the installed cluster, giving `desired`.
pub fn check_add(
    installed: &InstallContext,
    desired: &InstallContext,
    new: &[String],
    facts: &ClusterFacts,
    g: Guards,
) -> Verdict {
    let mut v = Verdict::default();
    api(&mut v, desired, facts);
    if let Ok(first) = desired.first_master() {
        if installed.node(&first.name).is_none() {
            v.problem(
                "spec.roleGroups.master[0]",
                format!("{} is the first master but is not in the cluster yet", first.name),
                "the first master is where the cluster was initialised: keep an installed master first in roleGroups.master",
            );
        }
    }
    let kind = desired.cluster.file.spec.etcd.kind;
    let mut etcd_new = Vec::new();
    let mut masters_new = 0;
    for name in new {
        let Some(n) = desired.node(name) else {
            continue;
        };
        if n.has_role(Role::Registry) {
            v.problem(
                "spec.roleGroups.registry",
                format!("{name} would run the private registry, which already runs on {}", installed.with_role(Role::Registry).join(",")),
                "the registry host is chosen at install time: add the node without the registry role",
            );
        }
        if facts.unreachable.contains(name) {
            v.problem(
                "--node",
                format!("{name} cannot be reached over SSH"),
                "start it and check spec.hosts (address, user, key), then retry",
            );
        }
        if facts.api(name).is_some() {
            v.warnings.push(format!(
                "{name} is registered in the API already (an earlier add-node?): its join is skipped if it has joined"
            ));
        }
        if n.has_role(Role::Etcd) && kind == EtcdType::Kubexm {
            etcd_new.push(name.clone());
        }
        if n.has_role(Role::Master) {
            masters_new += 1;
        }
    }
    if etcd_new.len() > 1 {
        v.problem(
            "spec.roleGroups.etcd",
            format!("{} new etcd members ({})", etcd_new.len(), etcd_new.join(", ")),
            "etcd membership changes one member at a time: add them with one `add-node --node NAME` each",
        );
    } else if let Some(m) = etcd_new.first() {
        etcd_add(&mut v, desired, m, facts, g);
    }
    if kind == EtcdType::Kubeadm && masters_new > 0 {
        if masters_new > 1 {
            v.problem(
                "spec.roleGroups.master",
                format!("{masters_new} new masters: each one adds a stacked etcd member"),
                "add masters one at a time (`add-node --node NAME`)",
            );
        } else {
            stacked_masters_change(&mut v, facts, desired.with_role(Role::Master).len(), g);
        }
    }
    v
}

/// delete-node: `node` leaves the installed cluster, giving `desired`.
pub fn check_delete(
    installed: &InstallContext,
    desired: &InstallContext,
    node: &str,
    facts: &ClusterFacts,
    g: Guards,
) -> Verdict {
    let mut v = Verdict::default();
    let Some(n) = installed.node(node) else {
        v.nothing_to_do = Some(format!("{node} is not in the cluster"));
        return v;
    };
    api(&mut v, desired, facts);
    if n.has_role(Role::Master) && desired.with_role(Role::Master).is_empty() {
        v.problem(
            "--node",
            format!("{node} is the last master"),
            "a cluster keeps at least one master: add another first, or delete the whole cluster with `kubexm-install delete`",
        );
    }
    if n.has_role(Role::Registry) {
        v.problem(
            "--node",
            format!("{node} runs the private registry every node pulls from"),
            "the registry cannot move: keep this node",
        );
    }
    let ntp = &installed.cluster.file.spec.system.ntp_servers;
    if ntp
        .iter()
        .any(|s| s == node || *s == n.internal_address || *s == n.address)
    {
        v.problem(
            "spec.system.ntpServers",
            format!("the other nodes take their time from {node}"),
            "name another time server in spec.system.ntpServers and apply it (`kubexm-install install`) first",
        );
    }
    match (facts.unreachable.contains(node), g.unreachable) {
        (true, false) => v.problem(
            "--node",
            format!("{node} cannot be reached over SSH"),
            "if it is gone for good, pass --unreachable: only the cluster-side steps run (drain, etcd member, Node object, load balancers) and the machine is left as it is",
        ),
        (false, true) => v.warnings.push(format!(
            "{node} is reachable but --unreachable was given: nothing is done on it (it keeps its files and services)"
        )),
        _ => {}
    }
    match installed.cluster.file.spec.etcd.kind {
        EtcdType::Kubexm if n.has_role(Role::Etcd) => {
            let layout = EtcdLayout::from_context(installed);
            let peer = layout
                .member(node)
                .map(|m| layout.peer_url(m))
                .unwrap_or_default();
            etcd_remove(&mut v, node, &peer, facts, g);
        }
        EtcdType::Kubeadm if n.has_role(Role::Master) => {
            let after = desired.with_role(Role::Master).len();
            if after > 0 {
                stacked_masters_change(&mut v, facts, after, g);
            }
        }
        _ => {}
    }
    if facts.api(node).is_none() && facts.api_node.is_some() {
        v.warnings.push(format!(
            "{node} is not registered in the API: cordon, drain and the Node's deletion are skipped"
        ));
    }
    v
}

/// etcd add-member: the cluster node `node` becomes an etcd member.
pub fn check_etcd_add(
    installed: &InstallContext,
    desired: &InstallContext,
    node: &str,
    facts: &ClusterFacts,
    g: Guards,
) -> Verdict {
    let mut v = Verdict::default();
    kubexm_etcd(&mut v, installed);
    if installed.node(node).is_none() {
        v.problem(
            "--node",
            format!("{node} is not in the cluster"),
            "add it first with `kubexm-install add-node` (with the etcd role, it joins etcd too)",
        );
    }
    if facts.unreachable.contains(node) {
        v.problem(
            "--node",
            format!("{node} cannot be reached over SSH"),
            "start it and retry",
        );
    }
    if !v.problems.is_empty() {
        return v;
    }
    let layout = EtcdLayout::from_context(desired);
    if let (Some(e), Some(m)) = (&facts.etcd, layout.member(node)) {
        if let Some(existing) = e.member(node, &layout.peer_url(m)) {
            if e.healthy(existing) && layout_members(installed).iter().any(|x| x == node) {
                v.nothing_to_do = Some(format!("{node} is an etcd member already, and healthy"));
                return v;
            }
        }
    }
    etcd_add(&mut v, desired, node, facts, g);
    v
}

/// etcd remove-member: `node` stops being an etcd member (it stays in the cluster).
pub fn check_etcd_remove(
    installed: &InstallContext,
    node: &str,
    facts: &ClusterFacts,
    g: Guards,
) -> Verdict {
    let mut v = Verdict::default();
    kubexm_etcd(&mut v, installed);
    if !v.problems.is_empty() {
        return v;
    }
    let layout = EtcdLayout::from_context(installed);
    let peer = layout
        .member(node)
        .map(|m| layout.peer_url(m))
        .unwrap_or_default();
    let in_etcd = facts
        .etcd
        .as_ref()
        .is_some_and(|e| e.member(node, &peer).is_some());
    if layout.member(node).is_none() && !in_etcd {
        v.nothing_to_do = Some(format!("{node} is not an etcd member"));
        return v;
    }
    etcd_remove(&mut v, node, &peer, facts, g);
    v
}

fn kubexm_etcd(v: &mut Verdict, ctx: &InstallContext) {
    match ctx.cluster.file.spec.etcd.kind {
        EtcdType::Kubexm => {}
        EtcdType::Kubeadm => v.problem(
            "spec.etcd.type",
            "etcd.type is kubeadm: the stacked etcd members are the masters",
            "add or delete a master instead (`add-node` / `delete-node`): kubeadm adds and removes its etcd member",
        ),
        EtcdType::External => v.problem(
            "spec.etcd.type",
            "etcd.type is external: its members are not KubeXM's",
            "change the external etcd with its own tools, then the endpoints in cluster.yaml",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_sizes() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }
}
