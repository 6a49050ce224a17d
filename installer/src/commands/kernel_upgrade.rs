//! `kernel-upgrade`: the nodes' kernels upgraded and booted, one node at a time (see
//! [`kubexm_install::pipelines::kernel_upgrade`]). Facts first: the cluster's (nodes Ready,
//! etcd healthy) and every node's kernel ([`kubexm_install::facts::kernel`]); nodes already on
//! the newest installed kernel are left alone. Without --yes the plan is printed and nothing
//! changes.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};
use futures_util::future::join_all;
use kubexm_install::change::diff;
use kubexm_install::facts::checks::Verdict;
use kubexm_install::facts::kernel::{self, KernelPackage, KernelState};
use kubexm_install::facts::ClusterFacts;
use kubexm_install::modules::osrepo::package_source;
use kubexm_install::pipelines::kernel_upgrade::{kernel_upgrade_pipeline, order, KernelUpgrade};
use kubexm_manifests::resolve::Role;

use super::day2::{connect, execute, judge, require_every_node, rollout_health, Operate, Session};
use crate::cli::KernelUpgradeArgs;
use crate::exit::UsageError;

/// The nodes `--nodes` names (each once, each a node of the cluster), or every node.
fn targets(args: &KernelUpgradeArgs, s: &Session) -> Result<Vec<String>> {
    if args.nodes.is_empty() {
        return Ok(s.installed.all());
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for n in &args.nodes {
        let n = n.trim();
        if s.installed.node(n).is_none() {
            return Err(UsageError(format!(
                "--nodes: {n:?} is not a node of cluster {} ({})",
                s.name,
                s.installed.all().join(", ")
            ))
            .into());
        }
        if seen.insert(n.to_string()) {
            out.push(n.to_string());
        }
    }
    Ok(out)
}

/// The cluster must be healthy before a node goes down ([`rollout_health`]).
fn check(facts: &ClusterFacts, targets: &[String], resume: bool) -> Verdict {
    rollout_health(facts, targets, resume, "a kernel upgrade", "kernel-upgrade")
}

pub(crate) fn run(args: &KernelUpgradeArgs, work_dir: &std::path::Path) -> Result<()> {
    let c = &args.common;
    let package = args
        .package
        .as_deref()
        .map(KernelPackage::parse)
        .transpose()
        .map_err(|e| UsageError(e.to_string()))?;
    let s = Session::open(c, work_dir)?;
    println!("{}", s.header());
    // kernel-upgrade changes no setting: a cluster.yaml (-f) that does is refused (hosts it
    // lists beyond the cluster's, as a recorded cluster.yaml may keep, do not matter).
    let change = diff(&s.installed.cluster, &s.desired_full, &s.desired_origin);
    let mut refused: Vec<String> = change.problems.iter().map(ToString::to_string).collect();
    for r in &change.roles {
        refused.push(format!(
            "{} changes roles in {}: apply role changes with add-node/delete-node",
            r.name, s.desired_origin
        ));
    }
    s.refuse("kernel-upgrade", &refused)?;
    let nodes = targets(args, &s)?;
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &s.installed, &opts)?;
    require_every_node(
        &conn,
        "kernel-upgrade",
        "every node (each node is drained from a master and the cluster checked healthy after each reboot)",
    )?;
    let runners = conn.node_runners();
    let source = package_source(&s.installed);
    let gathered = conn.runtime.block_on(join_all(nodes.iter().map(|n| {
        let runner = runners.get(n).cloned();
        let arch = s
            .installed
            .node(n)
            .map(|x| x.arch.clone())
            .unwrap_or_default();
        let (package, source) = (package.clone(), source.clone());
        async move {
            let Some(runner) = runner else {
                return (n.clone(), Err(format!("{n}: no connection")));
            };
            let r = kernel::gather(runner.as_ref(), &arch, package.as_ref(), &source).await;
            (
                n.clone(),
                r.map_err(|e| {
                    let mut msg = e.to_string();
                    let mut cause = std::error::Error::source(&e);
                    while let Some(c) = cause {
                        msg.push_str(&format!(": {c}"));
                        cause = c.source();
                    }
                    msg
                }),
            )
        }
    })));
    let mut states: BTreeMap<String, KernelState> = BTreeMap::new();
    let mut failed = Vec::new();
    for (n, r) in gathered {
        match r {
            Ok(st) => {
                states.insert(n, st);
            }
            Err(e) => failed.push(e),
        }
    }
    if !failed.is_empty() {
        let hint = if package.is_none() {
            "\nhint: pass --package NAME when a node's OS has no default kernel package"
        } else {
            ""
        };
        bail!(
            "the kernel facts of {} node(s) could not be gathered:\n  - {}{hint}",
            failed.len(),
            failed.join("\n  - ")
        );
    }
    let ordered = order(&s.installed, &nodes);
    let mut text = String::new();
    for n in &ordered {
        if let Some(st) = states.get(n) {
            text.push_str(&format!("  - {n}: {}\n", st.summary()));
        }
    }
    let mut verdict = check(&conn.facts, &ordered, c.resume);
    if s.installed.with_role(Role::Master).len() == 1
        && ordered
            .iter()
            .any(|n| s.installed.with_role(Role::Master).contains(n))
    {
        verdict.warnings.push(
            "the cluster has one master: its API server is down while it reboots".to_string(),
        );
    }
    for n in conn.facts.nodes.iter().filter(|a| a.unschedulable) {
        if ordered.contains(&n.name) && !c.resume {
            verdict.warnings.push(format!(
                "{} is cordoned already: the upgrade uncordons it when done",
                n.name
            ));
        }
    }
    judge("kernel-upgrade", &text, &conn.facts, &verdict)?;
    let drain = args.drain.options();
    let pipeline = kernel_upgrade_pipeline(&KernelUpgrade {
        ctx: &s.installed,
        nodes: &ordered,
        states: &states,
        facts: &conn.facts,
        drain,
        source,
        reboot: kubexm_install::modules::lifecycle::kernel::REBOOT_BOUNDS,
    })?;
    let mut notes = verdict.warnings.clone();
    notes.extend(args.drain.forced_warning("pods"));
    let op = Operate {
        operation: "kernel-upgrade",
        done: "upgraded the kernel of",
        nodes: ordered,
        desired: s.installed.clone(),
        journal_ctx: s.installed.clone(),
        notes,
    };
    if !c.dry_run && !args.yes {
        execute(&s, conn, &pipeline, op, &opts, true)?;
        return Err(UsageError(
            "kernel-upgrade drains and reboots the nodes above one at a time. Review the plan, then pass --yes".into(),
        )
        .into());
    }
    execute(&s, conn, &pipeline, op, &opts, c.dry_run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubexm_install::facts::ApiNode;

    fn facts(not_ready: &str) -> ClusterFacts {
        ClusterFacts {
            api_node: Some("node1".into()),
            nodes: ["node1", "node2", "node3"]
                .iter()
                .map(|n| ApiNode {
                    name: (*n).to_string(),
                    ready: *n != not_ready,
                    unschedulable: *n == not_ready,
                    kubelet_version: "v1.20.2".into(),
                    control_plane: true,
                })
                .collect(),
            ..ClusterFacts::default()
        }
    }

    #[test]
    fn a_node_not_ready_refuses_unless_resuming_with_it() {
        let all: Vec<String> = ["node1", "node2", "node3"].map(String::from).to_vec();
        assert!(check(&facts("none"), &all, false).problems.is_empty());
        let v = check(&facts("node2"), &all, false);
        assert_eq!(v.problems.len(), 1);
        assert_eq!(v.problems[0].message, "node2 is not Ready");
        let v = check(&facts("node2"), &all, true);
        assert!(v.problems.is_empty());
        assert!(v.warnings[0].contains("--resume"), "{:?}", v.warnings);
        // Not one of the nodes upgraded: refused even with --resume.
        let v = check(&facts("node2"), &["node3".to_string()], true);
        assert_eq!(v.problems.len(), 1);
        let mut no_api = facts("none");
        no_api.api_node = None;
        assert_eq!(check(&no_api, &all, false).problems[0].path, "cluster");
    }
}
