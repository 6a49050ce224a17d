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
    let plan =
        kubexm_install::pipeline::plan::build(&pipeline, &ctx.plan_nodes(), &Default::default())
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
