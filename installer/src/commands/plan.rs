//! `plan`: the full ordered create plan, printed without connecting anywhere.

use anyhow::{Context, Result};

use super::install_context;
use crate::cli::{PlanArgs, PlanFormat};

pub(crate) fn run(
    args: &PlanArgs,
    work_dir: &std::path::Path,
    trust: &kubexm_install::intake::trust::TrustPolicy,
) -> Result<()> {
    let ctx = std::sync::Arc::new(install_context(
        args.file.as_deref(),
        args.catalog.as_deref(),
        args.bundle.as_deref(),
        work_dir,
        trust,
    )?);
    let pipeline = kubexm_install::pipelines::install_pipeline(&ctx);
    let plan = kubexm_install::pipeline::plan::build_with(
        &pipeline,
        &ctx.plan_nodes(),
        &Default::default(),
        &plan_options(&ctx, args.file.as_deref(), args.files),
    )
    .context("Failed to build the plan")?;
    match args.output {
        PlanFormat::Text => print!("{}", plan.to_text()),
        PlanFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&plan).context("Failed to encode the plan")?
        ),
    }
    Ok(())
}

/// The plan's options: with `files`, the content of every file written, redacted with every
/// secret the cluster description holds or points to (as the run's journal redacts).
pub(crate) fn plan_options(
    ctx: &kubexm_install::context::InstallContext,
    file: Option<&std::path::Path>,
    files: bool,
) -> kubexm_install::pipeline::plan::PlanOptions {
    let base = file
        .and_then(std::path::Path::parent)
        .unwrap_or(std::path::Path::new("."));
    kubexm_install::pipeline::plan::PlanOptions {
        files: files.then(|| kubexm_install::inventory::secrets(&ctx.cluster, base)),
    }
}

/// Prints the plan of `pipeline` for every node of `ctx` (`--dry-run` of install and
/// `restore --fresh`); `files` prints every file's content too (redacted).
pub(crate) fn print_plan(
    ctx: &kubexm_install::context::InstallContext,
    pipeline: &kubexm_install::pipeline::Pipeline,
    file: Option<&std::path::Path>,
    files: bool,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let nodes = ctx.plan_nodes();
    let options = plan_options(ctx, file, files);
    let plan =
        kubexm_install::pipeline::plan::build_with(pipeline, &nodes, &Default::default(), &options)
            .context("Failed to build the plan")?;
    print!("{}", plan.to_text());
    Ok(())
}
