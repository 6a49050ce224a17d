//! `add-node`: the nodes cluster.yaml has and the installed cluster does not join it (see
//! [`kubexm_install::pipelines::add_node`]).

use anyhow::{bail, Result};
use kubexm_install::change::diff;
use kubexm_install::facts::checks::{check_add, Guards};
use kubexm_install::pipelines::add_node::{add_node_pipeline, AddNodes};

use super::day2::{connect, execute, judge, Operate, Session};
use crate::cli::AddNodeArgs;

pub(crate) fn run(args: &AddNodeArgs, work_dir: &std::path::Path) -> Result<()> {
    let c = &args.common;
    let s = Session::open(c, work_dir)?;
    println!("{}", s.header());
    let change = diff(&s.installed.cluster, &s.desired_full, &s.desired_origin);
    let mut refused = Vec::new();
    for p in &change.problems {
        refused.push(p.to_string());
    }
    for r in &change.removed {
        refused.push(format!(
            "{r} is in the cluster but not in {}: add-node does not remove nodes (`kubexm-install delete-node --node {r}`), or put it back",
            s.desired_origin
        ));
    }
    for r in &change.roles {
        refused.push(format!(
            "{} changes roles ({}): add-node only adds nodes; etcd membership changes with `kubexm-install etcd add-member|remove-member`, other roles by deleting and adding the node",
            r.name,
            r.gained.iter().map(|g| format!("+{g}")).chain(r.lost.iter().map(|l| format!("-{l}"))).collect::<Vec<_>>().join(" ")
        ));
    }
    s.refuse("add-node", &refused)?;
    let added: Vec<String> = change.added.iter().map(|a| a.name.clone()).collect();
    let new: Vec<String> = if args.nodes.is_empty() {
        added.clone()
    } else {
        for n in &args.nodes {
            let member = s.record.installed.nodes.contains_key(n);
            if !added.contains(n) && !member {
                bail!(
                    "--node {n}: {} has no host {n} (hosts not in the cluster: {})",
                    s.desired_origin,
                    if added.is_empty() {
                        "none".to_string()
                    } else {
                        added.join(", ")
                    }
                );
            }
        }
        args.nodes.clone()
    };
    if new.is_empty() {
        println!(
            "nothing to add: every host of {} is in the cluster",
            s.desired_origin
        );
        return Ok(());
    }
    let want = kubexm_install::record::membership(&s.desired_full);
    let new_masters: Vec<&String> = new
        .iter()
        .filter(|n| {
            want.get(*n)
                .is_some_and(|r| r.iter().any(|r| r == "master"))
        })
        .collect();
    if !new_masters.is_empty() {
        if let Some(why) =
            kubexm_install::modules::certs::rotate_kubeadm_ca::master_join_refused(&s.installed)?
        {
            return Err(crate::exit::UsageError(format!(
                "add-node {}: {why}",
                new_masters
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .into());
        }
    }
    for n in new
        .iter()
        .filter(|n| s.record.installed.nodes.contains_key(*n))
    {
        println!("note: {n} is in the cluster already: its phases are applied again (nothing should change)");
    }
    let mut nodes = s.record.installed.nodes.clone();
    for n in &new {
        if !nodes.contains_key(n) {
            nodes.insert(n.clone(), want.get(n).cloned().unwrap_or_default());
        }
    }
    let desired = s.desired(&nodes)?;
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &desired, &opts)?;
    let guards = Guards {
        allow_even_etcd: c.allow_even_etcd,
        unreachable: false,
    };
    let verdict = check_add(&s.installed, &desired, &new, &conn.facts, guards);
    judge("add-node", &change.to_string(), &conn.facts, &verdict)?;
    let pipeline = add_node_pipeline(&AddNodes {
        installed: &s.installed,
        desired: &desired,
        new: &new,
        facts: &conn.facts,
    })?;
    let op = Operate {
        operation: "add-node",
        done: "added",
        nodes: new,
        desired: desired.clone(),
        journal_ctx: desired.clone(),
        notes: verdict.warnings,
    };
    execute(&s, conn, &pipeline, op, &opts, c.dry_run)
}
