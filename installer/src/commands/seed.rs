//! `seed`: push every image of a bundle into a registry.

use std::io::Read;

use anyhow::{Context, Result};
use kubexm_install::seed::{seed, RegistryTarget, SeedOptions};
use kubexm_install::unpack::unpack;
use kubexm_manifests::model::RewriteMode;
use kubexm_manifests::secret::Secret;

use crate::cli::SeedArgs;

pub(crate) fn run(args: &SeedArgs, work_dir: &std::path::Path) -> Result<()> {
    let password = if args.password_stdin {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("Failed to read the password from standard input")?;
        Some(Secret::new(s.trim_end_matches(['\n', '\r'])))
    } else {
        None
    };
    let ca_pem = match &args.ca_file {
        Some(f) => Some(
            std::fs::read(f)
                .with_context(|| format!("Failed to read --ca-file `{}`", f.display()))?,
        ),
        None => None,
    };
    let unpacked = unpack(&args.bundle, work_dir)
        .with_context(|| format!("Failed to unpack `{}`", args.bundle.display()))?;
    let opts = SeedOptions {
        target: RegistryTarget {
            host: args.registry.clone(),
            plain_http: args.plain_http,
            ca_pem,
            username: args.username.clone(),
            password,
        },
        project: args.project.clone(),
        rewrite: if args.flatten {
            RewriteMode::Flatten
        } else {
            RewriteMode::KeepPath
        },
        harbor: args.harbor.then_some(!args.private_projects),
        harbor_projects: Vec::new(),
        jobs: args.jobs.max(1),
        attempts: args.retries.max(1),
        retry_delay: std::time::Duration::from_millis(args.retry_delay_ms),
        chunk_size: kubexm_install::seed::CHUNK,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.jobs.clamp(2, 8))
        .enable_all()
        .build()
        .context("Failed to start the async runtime")?;
    let report = runtime
        .block_on(seed(&unpacked.dir, &unpacked.manifest, &opts))
        .with_context(|| format!("Failed to seed `{}`", args.registry))?;
    println!(
        "seeded {} images into {} ({} already complete; {} blobs uploaded, {} mounted, {} already present; {} manifests pushed)",
        report.images, args.registry, report.images_complete, report.blobs_uploaded, report.blobs_mounted, report.blobs_present, report.manifests_pushed
    );
    Ok(())
}
