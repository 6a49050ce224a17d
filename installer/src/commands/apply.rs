//! `apply`: an edited cluster.yaml's settings applied to the installed cluster. The change is
//! shown first, grouped by how it is applied ([`kubexm_install::apply_change`]); what cannot
//! change in place (CIDRs, the cluster domain, the bootstrap path, the version, etcd, the
//! runtime, node membership) is refused with what to do instead, before anything connects.
//!
//! A change of the pod network plugin is refused unless confirmed with
//! `--allow-network-plugin-change`; the plan then carries a loud warning. Its files and images
//! come from the installed bundle when it holds them, else from a `--bundle` built from the
//! edited cluster.yaml, which takes the installed bundle's place once checked
//! ([`kubexm_install::apply_change::replacement_problems`]: same Kubernetes version, the new
//! plugin's file, every other component the same file).
//!
//! Once something was applied, the cluster is verified (the checks of `verify-cluster`,
//! unless `--no-verify`); nothing to apply, or `--dry-run`, verifies nothing.

use anyhow::Result;
use kubexm_install::apply_change::{classify_with, missing_plugin_file, replacement_problems};
use kubexm_install::change::diff_nodes;
use kubexm_install::intake::trust::TrustPolicy;
use kubexm_install::pipelines::apply::apply_pipeline;

use super::day2::{connect, require_every_node, run_on, Operate, Session};
use super::verify::Change;
use crate::cli::ApplyArgs;

pub(crate) fn run(args: &ApplyArgs, work_dir: &std::path::Path, trust: &TrustPolicy) -> Result<()> {
    let c = &args.common;
    let allow = args.allow_network_plugin_change;
    // Another bundle is taken in either way, so that without the confirmation the refusal
    // names it (exit 2) rather than the bundle's digest.
    let mut s = Session::open_accepting(c, work_dir, Some(trust))?;
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
    let change = classify_with(
        &s.installed.cluster,
        &s.desired_full,
        &s.desired_origin,
        allow,
    );
    println!("changes of {}:\n{change}", s.desired_origin);
    refused.extend(change.refused.iter().map(|p| p.to_string()));
    let version = s.installed.cluster.version.to_string();
    match (&s.replaced_bundle, change.plugin_change) {
        (Some(r), None) => refused.push(format!(
            "`{}` is not the bundle the cluster was installed with: apply takes another bundle only for a change of the pod network plugin, confirmed with --allow-network-plugin-change",
            r.path.display()
        )),
        (Some(r), Some(pc)) => {
            let origin = format!("`{}`", r.path.display());
            if let Some(new) = s.bundle_manifest() {
                refused.extend(replacement_problems(
                    r.previous.as_ref(),
                    new,
                    &version,
                    pc.to,
                    &origin,
                ));
            }
        }
        (None, Some(pc)) => {
            if let Some(component) = missing_plugin_file(s.bundle_manifest(), pc.to) {
                refused.push(format!(
                    "the installed bundle holds no {component} for network.plugin {}: build a bundle from {} with `kubexm-build bundle -f` and pass it with --bundle",
                    pc.to.primary.as_str(),
                    s.desired_origin
                ));
            }
        }
        (None, None) => {}
    }
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
    if let Some(r) = &s.replaced_bundle {
        // Recorded with the operation: day-2 commands use this bundle from now on.
        s.record.installed.bundle_digest = Some(r.digest.clone());
    }
    let desired = s.desired(&s.record.installed.nodes)?;
    let opts = s.run_options(&c.connect, c.resume);
    let conn = connect(&s, &desired, &opts)?;
    require_every_node(
        &conn,
        "apply",
        "every node (any node's settings may change)",
    )?;
    let pipeline = apply_pipeline(&desired, change.plugin_change);
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
    let journal = run_on(&s, &conn, &pipeline, op, &opts, c.dry_run)?;
    drop(conn);
    match journal {
        // A dry run changed nothing: nothing to verify.
        None => Ok(()),
        Some(journal) => super::verify::after(
            Change::Apply,
            args.verify.no_verify,
            &s.name,
            &c.connect,
            work_dir,
            Some(&journal),
        ),
    }
}
