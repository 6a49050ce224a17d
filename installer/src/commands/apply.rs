//! `apply`: an edited cluster.yaml's settings applied to the installed cluster. The change is
//! shown first, grouped by how it is applied ([`kubexm_install::apply_change`]); what cannot
//! change in place (CIDRs, the cluster domain, the bootstrap path, the version, etcd, the
//! runtime, node membership) is refused with what to do instead, before anything connects.

use anyhow::Result;
use kubexm_install::apply_change::classify;
use kubexm_install::change::diff_nodes;
use kubexm_install::pipelines::apply::apply_pipeline;

use super::day2::{connect, execute, require_every_node, Operate, Session};
use crate::cli::ApplyArgs;

pub(crate) fn run(args: &ApplyArgs, work_dir: &std::path::Path) -> Result<()> {
    let c = &args.common;
    let s = Session::open(c, work_dir)?;
    println!("{}", s.header());
    let membership = diff_nodes(&s.installed.cluster, &s.desired_full, &s.desired_origin);
    let mut refused: Vec<String> = membership.problems.iter().map(|p| p.to_string()).collect();
    for a in &membership.added {
        refused.push(format!(
            "{} is in {} but not in the cluster: apply changes settings, not nodes (`kubexm-install add-node --node {}`), or take it out",
            a.name, s.desired_origin, a.name
        ));
    }
    for r in &membership.removed {
        refused.push(format!(
            "{r} is in the cluster but not in {}: apply does not remove nodes (`kubexm-install delete-node --node {r}`), or put it back",
            s.desired_origin
        ));
    }
    for r in &membership.roles {
        refused.push(format!(
            "{} changes roles: apply does not change roles (delete the node and add it again with its new roles)",
            r.name
        ));
    }
    let change = classify(&s.installed.cluster, &s.desired_full, &s.desired_origin);
    println!("changes of {}:\n{change}", s.desired_origin);
    refused.extend(change.refused.iter().map(|p| p.to_string()));
    if !refused.is_empty() {
        return Err(crate::exit::UsageError(format!(
            "{} differs from the installed cluster in ways `apply` does not change (nothing was changed):\n  - {}",
            s.desired_origin,
            refused.join("\n  - ")
        ))
        .into());
    }
    if change.applied.is_empty() {
        println!("nothing to apply");
        return Ok(());
    }
    let desired = s.desired(&s.record.installed.nodes)?;
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &desired, &opts)?;
    require_every_node(
        &conn,
        "apply",
        "every node (any node's settings may change)",
    )?;
    let pipeline = apply_pipeline(&desired);
    let op = Operate {
        operation: "apply",
        done: "applied to",
        nodes: desired.nodes.iter().map(|n| n.name.clone()).collect(),
        desired: desired.clone(),
        journal_ctx: desired.clone(),
        notes: change
            .applied
            .iter()
            .map(|a| format!("{}: {} -> {}", a.path, a.was, a.now))
            .collect(),
    };
    execute(&s, conn, &pipeline, op, &opts, c.dry_run)
}
