//! `install` (also `kubexm-install --bundle FILE`): verify and unpack the bundle, then run the
//! create pipeline over SSH, or print its plan with `--dry-run`.

use anyhow::{Context, Result};

use super::{install_context, run_options};
use crate::cli::InstallArgs;

pub(crate) fn run(
    bundle: &std::path::Path,
    args: &InstallArgs,
    work_dir: &std::path::Path,
    trust: &kubexm_install::intake::trust::TrustPolicy,
) -> Result<()> {
    let ctx = install_context(args.file.as_deref(), None, Some(bundle), work_dir, trust)?;
    if args.dry_run {
        // Planning: keys and certificates that do not exist yet are made in memory only.
        let ctx = std::sync::Arc::new(ctx);
        let pipeline = kubexm_install::pipelines::install_pipeline(&ctx);
        let nodes = ctx.plan_nodes();
        let options = super::plan::plan_options(&ctx, args.file.as_deref(), args.files);
        let plan = kubexm_install::pipeline::plan::build_with(
            &pipeline,
            &nodes,
            &Default::default(),
            &options,
        )
        .context("Failed to build the plan")?;
        print!("{}", plan.to_text());
        return Ok(());
    }
    let opts = run_options(args.file.as_deref(), &args.connect, args.resume, work_dir)?;
    let ctx = std::sync::Arc::new(ctx.for_execution());
    let pipeline = kubexm_install::pipelines::install_pipeline(&ctx);
    // Recorded for the day-2 commands (add-node, delete-node, etcd).
    super::run_and_record(
        &ctx,
        &pipeline,
        &opts,
        args.file.as_deref(),
        "install",
        "Install failed",
        "installed",
    )
}
