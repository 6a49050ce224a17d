//! `etcd add-member|remove-member`: one node joins or leaves KubeXM's etcd (see
//! [`kubexm_install::pipelines::etcd_member`]).

use anyhow::{bail, Result};
use kubexm_install::change::diff;
use kubexm_install::facts::checks::{check_etcd_add, check_etcd_remove, Guards};
use kubexm_install::pipelines::etcd_member::{
    add_member_pipeline, remove_member_pipeline, EtcdChange,
};

use super::day2::{connect, execute, judge, Operate, Session};
use crate::cli::{EtcdCommand, EtcdMemberArgs};

pub(crate) fn run(cmd: &EtcdCommand, work_dir: &std::path::Path) -> Result<()> {
    let (args, add) = match cmd {
        EtcdCommand::AddMember(a) => (a, true),
        EtcdCommand::RemoveMember(a) => (a, false),
    };
    member(args, add, work_dir)
}

fn member(args: &EtcdMemberArgs, add: bool, work_dir: &std::path::Path) -> Result<()> {
    let c = &args.common;
    let verb = if add {
        "etcd add-member"
    } else {
        "etcd remove-member"
    };
    let s = Session::open(c, work_dir)?;
    println!("{}", s.header());
    let node = args.node.as_str();
    let Some(roles) = s.record.installed.nodes.get(node) else {
        bail!(
            "{node} is not in cluster {} (nodes: {}): add it first with `kubexm-install add-node`",
            s.name,
            s.record
                .installed
                .nodes
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let change = diff(&s.installed.cluster, &s.desired_full, &s.desired_origin);
    let mut refused: Vec<String> = change.problems.iter().map(ToString::to_string).collect();
    // A host the cluster.yaml lists but the cluster does not have (not added yet, or deleted with
    // `delete-node` and still in the file) is left out: membership changes touch only members.
    let left_out: Vec<String> = change
        .added
        .iter()
        .map(|a| {
            format!(
                "{} is in {} but not in the cluster: `{verb}` leaves it out (add it with `kubexm-install add-node`)",
                a.name, s.desired_origin
            )
        })
        .collect();
    for l in &left_out {
        println!("note: {l}");
    }
    refused.extend(change.removed.iter().filter(|r| *r != node).map(|r| {
        format!(
            "{r} is missing from {}: pass the cluster.yaml the cluster was applied with",
            s.desired_origin
        )
    }));
    s.refuse(verb, &refused)?;
    let mut nodes = s.record.installed.nodes.clone();
    let mut r: Vec<String> = roles.iter().filter(|r| *r != "etcd").cloned().collect();
    if add {
        r.push("etcd".to_string());
        r.sort();
    }
    nodes.insert(node.to_string(), r);
    let desired = s.desired(&nodes)?;
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &s.installed, &opts)?;
    let guards = Guards {
        allow_even_etcd: c.allow_even_etcd,
        unreachable: false,
    };
    let verdict = if add {
        check_etcd_add(&s.installed, &desired, node, &conn.facts, guards)
    } else {
        check_etcd_remove(&s.installed, node, &conn.facts, guards)
    };
    let line = format!("  ~ {node} roles {}etcd\n", if add { "+" } else { "-" });
    if let Some(why) = &verdict.nothing_to_do {
        print!("change:\n{line}{}", conn.facts);
        println!("nothing to do: {why}");
        return Ok(());
    }
    judge(verb, &line, &conn.facts, &verdict)?;
    let change = EtcdChange {
        installed: &s.installed,
        desired: &desired,
        node,
        facts: &conn.facts,
    };
    let pipeline = if add {
        add_member_pipeline(&change)?
    } else {
        remove_member_pipeline(&change)?
    };
    let op = Operate {
        operation: verb,
        done: if add {
            "etcd member added:"
        } else {
            "etcd member removed:"
        },
        nodes: vec![node.to_string()],
        desired: desired.clone(),
        journal_ctx: s.installed.clone(),
        notes: verdict.warnings.into_iter().chain(left_out).collect(),
    };
    execute(&s, conn, &pipeline, op, &opts, c.dry_run)
}
