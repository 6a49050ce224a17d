//! `install` (also `kubexm-install --bundle FILE`): verify and unpack the bundle, then run the
//! create pipeline over SSH and verify the cluster (the checks of `verify-cluster`, unless
//! `--no-verify`), or print its plan with `--dry-run`.

use anyhow::{Context, Result};

use super::verify::Change;
use super::{install_context, run_options};
use crate::cli::InstallArgs;

pub(crate) fn run(
    bundle: &std::path::Path,
    args: &InstallArgs,
    work_dir: &std::path::Path,
    trust: &kubexm_install::intake::trust::TrustPolicy,
) -> Result<()> {
    let mut ctx = install_context(args.file.as_deref(), None, Some(bundle), work_dir, trust)?;
    if args.security_enhancement {
        ctx.cluster.file.spec.kubernetes.security_enhancement = true;
    }
    // Before planning or connecting: a bundle built for another configuration is refused here,
    // not half-way through the install on the nodes.
    ctx.check_bundle_coverage()
        .context("Bundle refused: it does not match cluster.yaml")?;
    if args.dry_run {
        // Planning: keys and certificates that do not exist yet are made in memory only.
        let ctx = std::sync::Arc::new(ctx);
        let pipeline = kubexm_install::pipelines::install_pipeline(&ctx);
        super::plan::print_plan(&ctx, &pipeline, args.file.as_deref(), args.files)?;
        return Ok(());
    }
    let opts = run_options(args.file.as_deref(), &args.connect, args.resume, work_dir)?;
    let ctx = std::sync::Arc::new(ctx.for_execution());
    let pipeline = kubexm_install::pipelines::install_pipeline(&ctx);
    // Recorded for the day-2 commands (add-node, delete-node, etcd).
    let journal = super::run_and_record(
        &ctx,
        &pipeline,
        &opts,
        args.file.as_deref(),
        "install",
        "Install failed",
        "installed",
    )?;
    // "Installed" means verified working: the checks of verify-cluster, unless --no-verify.
    super::verify::after(
        Change::Install,
        args.verify.no_verify,
        ctx.cluster.cluster_name(),
        &args.connect,
        work_dir,
        Some(&journal),
    )
}
