//! `delete-node`: one node leaves the installed cluster (see
//! [`kubexm_install::pipelines::delete_node`]).

use anyhow::Result;
use kubexm_install::change::diff;
use kubexm_install::facts::checks::{check_delete, Guards};
use kubexm_install::pipelines::delete_node::{delete_node_pipeline, DeleteNode};

use super::day2::{connect, execute, judge, Operate, Session};
use crate::cli::DeleteNodeArgs;

pub(crate) fn run(args: &DeleteNodeArgs, work_dir: &std::path::Path) -> Result<()> {
    let c = &args.common;
    let s = Session::open(c, work_dir)?;
    println!("{}", s.header());
    let node = args.node.as_str();
    if !s.record.installed.nodes.contains_key(node) {
        let when = s
            .record
            .installed
            .history
            .iter()
            .rev()
            .find(|o| o.operation == "delete-node" && o.nodes.iter().any(|n| n == node))
            .map(|o| format!(" (deleted {})", o.finished_at))
            .unwrap_or_default();
        println!(
            "nothing to delete: {node} is not in cluster {}{when}",
            s.name
        );
        return Ok(());
    }
    let change = diff(&s.installed.cluster, &s.desired_full, &s.desired_origin);
    let mut refused: Vec<String> = change.problems.iter().map(ToString::to_string).collect();
    for r in change.removed.iter().filter(|r| *r != node) {
        refused.push(format!(
            "{r} is missing from {} too: delete-node removes one node per run (--node {r} next)",
            s.desired_origin
        ));
    }
    for r in change.roles.iter().filter(|r| r.name != node) {
        refused.push(format!(
            "{} changes roles in {}: delete-node does not change other nodes",
            r.name, s.desired_origin
        ));
    }
    s.refuse("delete-node", &refused)?;
    let mut nodes = s.record.installed.nodes.clone();
    nodes.remove(node);
    let desired = s.desired(&nodes)?;
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &s.installed, &opts)?;
    let guards = Guards {
        allow_even_etcd: c.allow_even_etcd,
        unreachable: args.unreachable,
    };
    let verdict = check_delete(&s.installed, &desired, node, &conn.facts, guards);
    judge(
        "delete-node",
        &format!("  - {node}\n"),
        &conn.facts,
        &verdict,
    )?;
    let drain = args.drain.options();
    let mut notes = verdict.warnings.clone();
    notes.extend(args.drain.forced_warning(&format!("the pods on {node}")));
    if args.unreachable {
        notes.push(format!("--unreachable: nothing was done on {node} itself"));
    }
    let pipeline = delete_node_pipeline(&DeleteNode {
        installed: &s.installed,
        desired: &desired,
        node,
        facts: &conn.facts,
        drain,
        unreachable: args.unreachable,
    })?;
    let op = Operate {
        operation: "delete-node",
        done: "deleted",
        nodes: vec![node.to_string()],
        desired: desired.clone(),
        journal_ctx: s.installed.clone(),
        notes,
    };
    execute(&s, conn, &pipeline, op, &opts, c.dry_run)
}
