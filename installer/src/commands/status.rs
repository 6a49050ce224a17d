//! `status`: the installed cluster as KubeXM recorded it, and what its nodes say now. The
//! record comes from `WORK/clusters/<cluster>/` ([`kubexm_install::record`]); the live facts
//! from [`kubexm_install::facts::gather`] (the API server's nodes, etcd members and health, the
//! same facts the day-2 commands decide on) and [`kubexm_install::facts::node`] (versions,
//! units, certificates), over one SSH connection per node. A node that cannot be reached is
//! listed as unreachable; the command then ends with [`PartialError`] (exit 7), as it does when
//! anything is unhealthy.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;
use futures_util::future::join_all;
use kubexm_install::facts::node::{gather_node, CertExpiry, NodeFacts};
use kubexm_install::facts::ClusterFacts;
use kubexm_install::record::Operation;
use kubexm_manifests::display::Untrusted;
use serde::Serialize;

use super::day2::{connect, Session};
use crate::cli::{Day2Args, PlanFormat, StatusArgs};
use crate::exit::PartialError;

/// Certificates shown in the text form (all of them are in the JSON form).
const SOONEST_SHOWN: usize = 5;

/// The answer for a cluster KubeXM deleted (`state: "deleted"`): what the record says, and
/// no node is asked (nothing of the cluster runs on them any more).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Deleted {
    cluster: String,
    /// Always `deleted`.
    state: &'static str,
    /// When the delete finished.
    deleted_at: Option<String>,
    /// The operation that deleted it (normally `delete`).
    last_operation: Option<Operation>,
    /// The cluster.yaml last applied before (in the work directory).
    cluster_yaml: String,
}

impl Deleted {
    fn text(&self) -> String {
        let mut t = format!("cluster {}: deleted", self.cluster);
        if let Some(op) = &self.last_operation {
            let _ = write!(
                t,
                " by `{}` at {} ({:?}, {} s)",
                op.operation, op.finished_at, op.result, op.seconds
            );
        }
        let _ = write!(
            t,
            "\nnothing of it runs on its nodes any more; its last cluster.yaml is {}\nput it back with `kubexm-install install --bundle BUNDLE -f {}`\n",
            self.cluster_yaml, self.cluster_yaml
        );
        t
    }
}

/// `Some` when the cluster `common` names was deleted by KubeXM.
fn deleted_cluster(common: &Day2Args, work_dir: &std::path::Path) -> Result<Option<Deleted>> {
    let name = super::day2::recorded_name(common, None, work_dir)?;
    let records = kubexm_install::record::Records::new(work_dir);
    let Some(rec) = records.load(&name)? else {
        return Ok(None);
    };
    if rec.installed.present {
        return Ok(None);
    }
    let last = rec.installed.history.last().cloned();
    Ok(Some(Deleted {
        cluster: name,
        state: "deleted",
        deleted_at: last.as_ref().map(|o| o.finished_at.clone()),
        last_operation: last,
        cluster_yaml: rec.cluster_yaml_path.display().to_string(),
    }))
}

/// The whole answer (`status -o json`; schema in installer/docs/guide.md).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    cluster: String,
    /// `installed` (a deleted cluster answers [`Deleted`]).
    state: &'static str,
    record: RecordView,
    nodes: Vec<NodeView>,
    api_node: Option<String>,
    etcd: Option<EtcdView>,
    certificates: Vec<CertView>,
    notes: Vec<String>,
    problems: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RecordView {
    applied_at: String,
    cluster_yaml_sha256: String,
    cluster_yaml: String,
    bundle_digest: Option<String>,
    last_operation: Option<Operation>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeView {
    name: String,
    address: String,
    roles: Vec<String>,
    reachable: bool,
    error: Option<String>,
    registered: bool,
    ready: Option<bool>,
    cordoned: Option<bool>,
    kubelet_version: Option<String>,
    versions: BTreeMap<String, String>,
    runtimes: Vec<String>,
    services: Vec<kubexm_install::facts::node::UnitState>,
    services_down: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct EtcdView {
    from: String,
    members: Vec<EtcdMemberView>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct EtcdMemberView {
    id: String,
    name: String,
    started: bool,
    healthy: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CertView {
    node: String,
    #[serde(flatten)]
    cert: CertExpiry,
}

pub(crate) fn run(args: &StatusArgs, work_dir: &std::path::Path) -> Result<()> {
    let common = Day2Args {
        file: None,
        cluster: args.cluster.clone(),
        bundle: args.bundle.clone(),
        dry_run: true,
        resume: false,
        allow_even_etcd: false,
        connect: args.connect.clone(),
    };
    if let Some(deleted) = deleted_cluster(&common, work_dir)? {
        match args.output {
            PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&deleted)?),
            PlanFormat::Text => print!("{}", deleted.text()),
        }
        return Ok(());
    }
    let s = Session::open(&common, work_dir)?;
    let opts = s.run_options(&args.connect, false);
    let conn = connect(&s, &s.installed, &opts)?;
    let gathered: Vec<(String, Result<NodeFacts, String>)> = conn.runtime.block_on(join_all(
        conn.runners
            .iter()
            .filter(|(n, _)| s.record.installed.nodes.contains_key(&n.name))
            .map(|(n, r)| async move { (n.name.clone(), gather_node(r.as_ref()).await) }),
    ));
    let status = assemble(&s, &conn.facts, gathered.into_iter().collect());
    match args.output {
        PlanFormat::Json => println!("{}", serde_json::to_string_pretty(&status)?),
        PlanFormat::Text => print!("{}", text(&status)),
    }
    if status.problems.is_empty() {
        Ok(())
    } else {
        Err(PartialError(format!(
            "cluster {} is not fully healthy ({} problem(s)):\n  - {}",
            status.cluster,
            status.problems.len(),
            status.problems.join("\n  - ")
        ))
        .into())
    }
}

fn assemble(
    s: &Session,
    facts: &ClusterFacts,
    mut gathered: BTreeMap<String, Result<NodeFacts, String>>,
) -> Status {
    let i = &s.record.installed;
    let mut problems = Vec::new();
    let mut notes = facts.notes.clone();
    let mut certificates = Vec::new();
    let mut nodes = Vec::new();
    for (name, roles) in &i.nodes {
        let address = s
            .installed
            .cluster
            .file
            .spec
            .hosts
            .iter()
            .find(|h| h.name == *name)
            .map(|h| h.address.clone())
            .unwrap_or_default();
        let api = facts.api(name);
        let kube_node = roles.iter().any(|r| r == "master" || r == "worker");
        let (reachable, error, nf) = match gathered.remove(name) {
            _ if facts.unreachable.contains(name) => {
                problems.push(format!("{name}: unreachable over SSH"));
                (false, Some("cannot connect over SSH".to_string()), None)
            }
            Some(Ok(f)) => (true, None, Some(f)),
            Some(Err(e)) => {
                problems.push(format!("{name}: did not answer: {}", Untrusted(&e)));
                (false, Some(e), None)
            }
            None => (false, Some("no connection".to_string()), None),
        };
        if kube_node && facts.api_node.is_some() {
            match api {
                None => problems.push(format!("{name}: not registered with the API server")),
                Some(a) if !a.ready => problems.push(format!("{name}: NotReady")),
                Some(_) => {}
            }
        }
        let nf = nf.unwrap_or_default();
        let down: Vec<String> = nf
            .units
            .iter()
            .filter(|u| u.down())
            .map(|u| u.unit.clone())
            .collect();
        for u in &down {
            problems.push(format!("{name}: service {u} is down"));
        }
        for c in &nf.certificates {
            if c.days_left < 0 {
                problems.push(format!(
                    "{name}: certificate {} expired {}",
                    c.path, c.not_after
                ));
            }
            certificates.push(CertView {
                node: name.clone(),
                cert: c.clone(),
            });
        }
        notes.extend(nf.notes.iter().map(|n| format!("{name}: {n}")));
        nodes.push(NodeView {
            name: name.clone(),
            address,
            roles: roles.clone(),
            reachable,
            error,
            registered: api.is_some(),
            ready: api.map(|a| a.ready),
            cordoned: api.map(|a| a.unschedulable),
            kubelet_version: api.map(|a| a.kubelet_version.clone()),
            versions: nf.versions,
            runtimes: nf.runtimes,
            services: nf.units,
            services_down: down,
        });
    }
    if facts.api_node.is_none() && nodes.iter().any(|n| n.roles.iter().any(|r| r == "master")) {
        problems.push("no master's API server answered `kubectl get nodes`".into());
    }
    let etcd = facts.etcd.as_ref().map(|e| {
        for m in &e.members {
            if !e.healthy(m) {
                problems.push(format!(
                    "etcd member {} is unhealthy",
                    if m.name.is_empty() {
                        m.hex_id()
                    } else {
                        m.name.clone()
                    }
                ));
            }
        }
        EtcdView {
            from: e.from.clone(),
            members: e
                .members
                .iter()
                .map(|m| EtcdMemberView {
                    id: m.hex_id(),
                    name: m.name.clone(),
                    started: m.started(),
                    healthy: e.healthy(m),
                })
                .collect(),
        }
    });
    certificates.sort_by_key(|c| c.cert.not_after_unix);
    Status {
        state: "installed",
        cluster: s.name.clone(),
        record: RecordView {
            applied_at: i.applied_at.clone(),
            cluster_yaml_sha256: i.cluster_yaml_sha256.clone(),
            cluster_yaml: s.record.cluster_yaml_path.display().to_string(),
            bundle_digest: i.bundle_digest.clone(),
            last_operation: i.history.last().cloned(),
        },
        nodes,
        api_node: facts.api_node.clone(),
        etcd,
        certificates,
        notes,
        problems,
    }
}

/// The first 12 characters of a digest read from the record.
fn short(digest: &str) -> String {
    Untrusted(digest.chars().take(12).collect::<String>()).to_string()
}

/// The text form: untrusted values (versions and units come from the nodes) are escaped.
fn text(st: &Status) -> String {
    let mut o = String::new();
    let r = &st.record;
    let _ = writeln!(o, "cluster {}", st.cluster);
    let _ = writeln!(
        o,
        "  applied {} with cluster.yaml {} (sha256 {}), bundle {}",
        r.applied_at,
        r.cluster_yaml,
        short(&r.cluster_yaml_sha256),
        r.bundle_digest.as_deref().map_or("none".to_string(), short)
    );
    if let Some(op) = &r.last_operation {
        let _ = writeln!(
            o,
            "  last operation: {} {:?} at {} ({}s){}",
            op.operation,
            op.result,
            op.finished_at,
            op.seconds,
            op.error
                .as_deref()
                .map(|e| format!(": {}", Untrusted(e)))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(o, "nodes:");
    for n in &st.nodes {
        let state = if !n.reachable {
            format!(
                "UNREACHABLE ({})",
                Untrusted(n.error.as_deref().unwrap_or(""))
            )
        } else {
            match n.ready {
                Some(true) => "Ready".to_string(),
                Some(false) => "NotReady".to_string(),
                None => "reachable".to_string(),
            }
        };
        let versions: Vec<String> = n
            .versions
            .iter()
            .map(|(k, v)| format!("{k} {}", Untrusted(v)))
            .collect();
        let _ = writeln!(
            o,
            "  {:<12} {:<15} {:<28} {}{}",
            n.name,
            n.address,
            n.roles.join(","),
            state,
            if n.cordoned == Some(true) {
                ",cordoned"
            } else {
                ""
            }
        );
        if !versions.is_empty() {
            let _ = writeln!(o, "      versions: {}", versions.join(", "));
        }
        if !n.services_down.is_empty() {
            let _ = writeln!(o, "      services down: {}", n.services_down.join(", "));
        }
    }
    match &st.etcd {
        Some(e) => {
            let list: Vec<String> = e
                .members
                .iter()
                .map(|m| {
                    format!(
                        "{} {}",
                        if m.name.is_empty() { &m.id } else { &m.name },
                        if m.healthy { "healthy" } else { "UNHEALTHY" }
                    )
                })
                .collect();
            let _ = writeln!(o, "etcd (asked on {}): {}", e.from, list.join(", "));
        }
        None => {
            let _ = writeln!(o, "etcd: not asked (see notes)");
        }
    }
    if !st.certificates.is_empty() {
        let _ = writeln!(o, "soonest certificate expiries:");
        for c in st.certificates.iter().take(SOONEST_SHOWN) {
            let _ = writeln!(
                o,
                "  {} days  {}  {}:{} ({})",
                c.cert.days_left,
                c.cert.not_after,
                c.node,
                Untrusted(&c.cert.path),
                Untrusted(&c.cert.subject)
            );
        }
    }
    for n in &st.notes {
        let _ = writeln!(o, "note: {}", Untrusted(n));
    }
    if st.problems.is_empty() {
        let _ = writeln!(o, "healthy: every node reachable, every service up");
    }
    o
}
