//! `delete`: remove the cluster from its nodes (refuses without `--yes`, printing what would be
//! removed; `--dry-run` prints every command).

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{install_context, run_options};
use crate::cli::DeleteArgs;

/// What `delete` without `--yes` prints: the nodes and, per module, its tasks and hosts.
fn delete_summary(
    ctx: &kubexm_install::context::InstallContext,
    plan: &kubexm_install::pipeline::plan::Plan,
) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "`delete` would remove cluster {} from {} node(s):\n",
        ctx.cluster.cluster_name(),
        ctx.nodes.len()
    );
    for n in &ctx.nodes {
        let _ = writeln!(
            s,
            "  {} ({}): {}",
            n.name,
            n.address,
            n.roles
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    let _ = writeln!(s, "plan:");
    for m in &plan.modules {
        match &m.skipped {
            Some(reason) => {
                let _ = writeln!(s, "  {} — skipped: {reason}", m.name);
            }
            None => {
                for t in &m.tasks {
                    let steps: Vec<&str> = t.steps.iter().map(|st| st.name.as_str()).collect();
                    let _ = writeln!(
                        s,
                        "  {} / {} on {}: {}",
                        m.name,
                        t.name,
                        t.hosts.join(","),
                        steps.join(", ")
                    );
                }
            }
        }
    }
    s.push_str(
        "OS packages stay installed. `--dry-run` prints every command; pass --yes to delete.",
    );
    s
}

pub(crate) fn run(
    args: &DeleteArgs,
    top_bundle: Option<PathBuf>,
    work_dir: &std::path::Path,
    trust: &kubexm_install::intake::trust::TrustPolicy,
) -> Result<()> {
    let bundle = args.bundle.clone().or(top_bundle);
    if bundle.is_none() && args.file.is_none() {
        anyhow::bail!("delete needs --bundle FILE or -f CLUSTER_YAML: the cluster to delete");
    }
    let ctx = std::sync::Arc::new(install_context(
        args.file.as_deref(),
        args.catalog.as_deref(),
        bundle.as_deref(),
        work_dir,
        trust,
    )?);
    let pipeline = kubexm_install::pipelines::delete_pipeline(&ctx);
    let plan =
        kubexm_install::pipeline::plan::build(&pipeline, &ctx.plan_nodes(), &Default::default())
            .context("Failed to build the delete plan")?;
    if args.dry_run {
        print!("{}", plan.to_text());
        return Ok(());
    }
    if !args.yes {
        anyhow::bail!("{}", delete_summary(&ctx, &plan));
    }
    let opts = run_options(args.file.as_deref(), &args.connect, args.resume, work_dir)?;
    super::run_and_record(
        &ctx,
        &pipeline,
        &opts,
        args.file.as_deref(),
        "delete",
        "Delete failed",
        "deleted",
    )?;
    // A later install starts from scratch: `--resume` must not skip what was just removed.
    let install_state = work_dir
        .join("state")
        .join(format!("{}-install.json", ctx.cluster.cluster_name()));
    if let Err(e) = std::fs::remove_file(&install_state) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("warning: cannot remove {}: {e}", install_state.display());
        }
    }
    Ok(())
}
