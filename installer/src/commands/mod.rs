//! One file per verb; this file holds what several verbs share: loading the context and
//! running a pipeline over SSH with a one-line summary.

pub(crate) mod check;
pub(crate) mod delete;
pub(crate) mod install;
pub(crate) mod plan;
pub(crate) mod seed;
pub(crate) mod unpack;

use std::path::PathBuf;

use anyhow::{Context, Result};
use kubexm_install::unpack::unpack;

use crate::cli::ConnectArgs;

/// Loads the install context: cluster.yaml and catalog override from `-f`/`--catalog` when
/// given, else the bundle's own; the bundle (when given) is verified and unpacked first.
pub(crate) fn install_context(
    file: Option<&std::path::Path>,
    catalog: Option<&std::path::Path>,
    bundle: Option<&std::path::Path>,
    work_dir: &std::path::Path,
) -> Result<kubexm_install::context::InstallContext> {
    let unpacked = match bundle {
        Some(b) => Some(
            unpack(b, work_dir).with_context(|| format!("Failed to unpack `{}`", b.display()))?,
        ),
        None => None,
    };
    let bundled_catalog = unpacked
        .as_ref()
        .map(|u| u.dir.join(kubexm_bundles::manifest::CATALOG_PATH))
        .filter(|p| p.exists());
    let (file, catalog) = match (file, &unpacked) {
        (Some(f), _) => (
            f.to_path_buf(),
            catalog.map(PathBuf::from).or(bundled_catalog),
        ),
        (None, Some(u)) => {
            let bundled = u.dir.join(kubexm_bundles::manifest::CATALOG_PATH);
            let catalog = catalog
                .map(PathBuf::from)
                .or_else(|| bundled.exists().then_some(bundled));
            (u.dir.join(kubexm_bundles::manifest::CLUSTER_PATH), catalog)
        }
        (None, None) => anyhow::bail!("pass -f CLUSTER_YAML or --bundle FILE"),
    };
    let bundle = unpacked.map(|u| kubexm_install::context::BundleRef {
        dir: u.dir,
        manifest: u.manifest,
    });
    Ok(kubexm_install::context::load_context(
        &file,
        catalog.as_deref(),
        bundle,
        work_dir,
    )?)
}
/// Connects to every node, runs `pipeline` and prints a one-line summary.
pub(crate) fn run_and_report(
    ctx: &kubexm_install::context::InstallContext,
    pipeline: &kubexm_install::pipeline::Pipeline,
    opts: &kubexm_install::run::RunOptions,
    failed: &'static str,
    done: &str,
) -> Result<()> {
    use kubexm_install::run::{connect_all, run_pipeline};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("Failed to start the async runtime")?;
    let started = std::time::Instant::now();
    let (report, journal) = runtime
        .block_on(async {
            let runners = connect_all(ctx, opts).await?;
            run_pipeline(ctx, pipeline, runners, opts).await
        })
        .context(failed)?;
    println!(
        "{done} cluster {} in {:.1}s: {} task(s) run, {} resumed, {} step(s) changed, {} checked, {} already done; journal in {}",
        ctx.cluster.cluster_name(),
        started.elapsed().as_secs_f64(),
        report.tasks_run,
        report.tasks_resumed,
        report.steps_changed,
        report.steps_checked,
        report.steps_unchanged,
        journal.paths().log.parent().map(|p| p.display().to_string()).unwrap_or_default()
    );
    Ok(())
}
pub(crate) fn run_options(
    file: Option<&std::path::Path>,
    connect: &ConnectArgs,
    resume: bool,
    work_dir: &std::path::Path,
) -> Result<kubexm_install::run::RunOptions> {
    let base_dir = match file {
        Some(f) => f.parent().map(PathBuf::from).unwrap_or_default(),
        None => std::env::current_dir().context("Failed to read the current directory")?,
    };
    Ok(kubexm_install::run::RunOptions {
        work_dir: work_dir.to_path_buf(),
        base_dir,
        known_hosts: connect
            .known_hosts
            .clone()
            .unwrap_or_else(|| work_dir.join("known_hosts")),
        accept_new_host_keys: connect.accept_new_host_keys,
        resume,
        concurrency: connect.concurrency,
        connect_timeout: std::time::Duration::from_secs(15),
    })
}
