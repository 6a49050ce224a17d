//! `seed`: push every image of a bundle into a registry.

use anyhow::{Context, Result};
use kubexm_install::intake::trust::TrustPolicy;
use kubexm_install::seed::seed;

use super::{registry_options, take_in};
use crate::cli::SeedArgs;

pub(crate) fn run(args: &SeedArgs, work_dir: &std::path::Path, trust: &TrustPolicy) -> Result<()> {
    let Some(mut opts) = registry_options(
        &args.target,
        args.jobs,
        args.retries,
        std::time::Duration::from_millis(args.retry_delay_ms),
    )?
    else {
        anyhow::bail!("seed needs --registry HOST[:PORT]: the registry to push into");
    };
    opts.harbor = args.harbor.then_some(!args.private_projects);
    let unpacked = take_in(&args.bundle, work_dir, trust, None)?.unpacked;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.jobs.clamp(2, 8))
        .enable_all()
        .build()
        .context("Failed to start the async runtime")?;
    let registry = opts.target.host.clone();
    let report = runtime
        .block_on(seed(&unpacked.dir, &unpacked.manifest, &opts))
        .with_context(|| format!("Failed to seed `{registry}`"))?;
    println!(
        "seeded {} images into {} ({} already complete; {} blobs uploaded, {} mounted, {} already present; {} manifests pushed)",
        report.images, registry, report.images_complete, report.blobs_uploaded, report.blobs_mounted, report.blobs_present, report.manifests_pushed
    );
    Ok(())
}
