//! One file per verb; this file holds what several verbs share: loading the context and
//! running a pipeline over SSH with a one-line summary.

pub(crate) mod add_node;
pub(crate) mod apply;
pub(crate) mod backup;
pub(crate) mod certs;
pub(crate) mod check;
pub(crate) mod day2;
pub(crate) mod delete;
pub(crate) mod delete_node;
pub(crate) mod etcd;
pub(crate) mod install;
pub(crate) mod inventory;
pub(crate) mod kernel_upgrade;
pub(crate) mod plan;
pub(crate) mod restore_fresh;
pub(crate) mod rotate;
pub(crate) mod seed;
pub(crate) mod status;
pub(crate) mod unpack;
pub(crate) mod upgrade;
pub(crate) mod verify;

use std::path::PathBuf;
use std::sync::Arc;

use std::io::Read;

use anyhow::{Context, Result};
use kubexm_install::intake::trust::TrustPolicy;
use kubexm_install::intake::{prepare, Prepared};
use kubexm_install::pipeline::journal::Journal;
use kubexm_install::seed::{RegistryTarget, SeedOptions};
use kubexm_manifests::display::{Untrusted, UntrustedMax};
use kubexm_manifests::model::RewriteMode;
use kubexm_manifests::secret::Secret;

use crate::cli::{ConnectArgs, RegistryArgs};

/// Takes a bundle in ([`kubexm_install::intake::prepare`]): its signature checked before it is
/// unpacked (a warning when no key is trusted), a split bundle read from its parts, a delta
/// completed from the site (registry-only blobs fetched from `registry`).
pub(crate) fn take_in(
    bundle: &std::path::Path,
    work_dir: &std::path::Path,
    trust: &TrustPolicy,
    registry: Option<&SeedOptions>,
) -> Result<Prepared> {
    if !trust.is_configured() && !trust.requires_signature() {
        eprint!("{}", unsigned_warning(bundle));
    }
    let shown = UntrustedMax(bundle.to_string_lossy(), 1000);
    let prepared = prepare(bundle, work_dir, trust, registry)
        .with_context(|| format!("Failed to unpack `{shown}`"))?;
    if let Some(v) = &prepared.verified {
        eprintln!(
            "{shown}: signed by trusted key {} ({})",
            Untrusted(&v.key),
            Untrusted(&v.trusted_comment)
        );
    }
    if let Some(d) = &prepared.delta_of {
        eprintln!(
            "{shown}: delta bundle {} completed from the site into {}",
            Untrusted(&d.digest),
            UntrustedMax(prepared.unpacked.dir.to_string_lossy(), 1000)
        );
    }
    Ok(prepared)
}

/// The warning every command that reads a bundle prints when no key is trusted: what is at
/// stake and the two ways out, set apart so that it is not lost among progress lines.
fn unsigned_warning(bundle: &std::path::Path) -> String {
    use kubexm_install::intake::trust::{REQUIRE_SIGNATURE_ENV, TRUSTED_KEYS_ENV};
    let shown = UntrustedMax(bundle.to_string_lossy(), 1000);
    format!(
        "warning: ==================================================================\n\
         warning: no trusted key is configured (--trusted-key or {TRUSTED_KEYS_ENV}): the signature of `{shown}` is NOT checked.\n\
         warning: Whoever could change this file on its way here decides what runs on\n\
         warning: every node. Pass --trusted-key KEY.pub with the builder's public key;\n\
         warning: --require-signature (or {REQUIRE_SIGNATURE_ENV}=1) makes this a refusal.\n\
         warning: ==================================================================\n"
    )
}

/// The registry named by `args` and how to reach it (`None` without `--registry`); the
/// password is read from standard input when asked.
pub(crate) fn registry_options(
    args: &RegistryArgs,
    jobs: usize,
    retries: u32,
    retry_delay: std::time::Duration,
) -> Result<Option<SeedOptions>> {
    let Some(host) = &args.registry else {
        return Ok(None);
    };
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
    Ok(Some(SeedOptions {
        target: RegistryTarget {
            host: host.clone(),
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
        harbor: None,
        harbor_projects: Vec::new(),
        jobs: jobs.max(1),
        attempts: retries.max(1),
        retry_delay,
        chunk_size: kubexm_install::seed::CHUNK,
    }))
}

/// Loads the install context: cluster.yaml and catalog override from `-f`/`--catalog` when
/// given, else the bundle's own; the bundle (when given) is verified and unpacked first.
pub(crate) fn install_context(
    file: Option<&std::path::Path>,
    catalog: Option<&std::path::Path>,
    bundle: Option<&std::path::Path>,
    work_dir: &std::path::Path,
    trust: &TrustPolicy,
) -> Result<kubexm_install::context::InstallContext> {
    let unpacked = match bundle {
        Some(b) => Some(take_in(b, work_dir, trust, None)?.unpacked),
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
/// Connects to every node, runs `pipeline` and prints a one-line summary; returns the run's
/// journal (what follows the run, a verification, is recorded in it).
pub(crate) fn run_and_report(
    ctx: &kubexm_install::context::InstallContext,
    pipeline: &kubexm_install::pipeline::Pipeline,
    opts: &kubexm_install::run::RunOptions,
    failed: &'static str,
    done: &str,
) -> Result<Arc<Journal>> {
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
    // Where the wall time went: the tasks, on the nodes that finished them last.
    match kubexm_install::pipeline::critical_path::CriticalPath::from_log(&journal.paths().log) {
        Ok(path) => print!("{}", path.display(12)),
        Err(e) => eprintln!("warning: {:#}", anyhow::Error::from(e)),
    }
    Ok(journal)
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

/// [`run_and_report`] for an install or delete of the whole cluster, recorded in the work
/// directory ([`record_whole`]) whether it succeeded or not.
pub(crate) fn run_and_record(
    ctx: &kubexm_install::context::InstallContext,
    pipeline: &kubexm_install::pipeline::Pipeline,
    opts: &kubexm_install::run::RunOptions,
    file: Option<&std::path::Path>,
    operation: &str,
    failed: &'static str,
    done: &str,
) -> Result<Arc<Journal>> {
    let started_at = kubexm_install::record::now();
    let started = std::time::Instant::now();
    let result = run_and_report(ctx, pipeline, opts, failed, done);
    record_whole(
        ctx,
        file,
        opts,
        operation,
        started_at,
        started.elapsed().as_secs_f64(),
        result.as_ref().err().map(|e| format!("{e:#}")),
    );
    result
}

/// Records an install or delete of the whole cluster in `WORK/clusters/<cluster>/` (see
/// [`kubexm_install::record`]): on success the cluster.yaml text and bundle applied, and the
/// nodes (none after a delete); a failure only in the history. A record that cannot be written
/// is a warning: the operation itself is done.
fn record_whole(
    ctx: &kubexm_install::context::InstallContext,
    file: Option<&std::path::Path>,
    opts: &kubexm_install::run::RunOptions,
    operation: &str,
    started_at: String,
    seconds: f64,
    error: Option<String>,
) {
    use kubexm_install::record::{self, Applied, Operation, Outcome, Records};
    let path = match (file, &ctx.bundle) {
        (Some(f), _) => f.to_path_buf(),
        (None, Some(b)) => b.dir.join(kubexm_bundles::manifest::CLUSTER_PATH),
        (None, None) => return,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "warning: the cluster record was not written: cannot read {}: {e}",
                path.display()
            );
            return;
        }
    };
    let base_dir = std::fs::canonicalize(&opts.base_dir).unwrap_or_else(|_| opts.base_dir.clone());
    let digest = ctx
        .bundle
        .as_ref()
        .and_then(|b| b.dir.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|d| kubexm_manifests::catalog::is_sha256_hex(d));
    let ok = error.is_none();
    let op = Operation {
        operation: operation.to_string(),
        nodes: ctx.all(),
        started_at,
        finished_at: record::now(),
        seconds: (seconds * 10.0).round() / 10.0,
        result: if ok {
            Outcome::Succeeded
        } else {
            Outcome::Failed
        },
        error,
        notes: Vec::new(),
        cluster_yaml_sha256: record::sha256_hex(text.as_bytes()),
        bundle_digest: digest.clone(),
    };
    let present = operation != "delete";
    let applied = ok.then(|| Applied {
        cluster_yaml: &text,
        base_dir: &base_dir,
        bundle_digest: digest.as_deref(),
        nodes: if present {
            record::membership(&ctx.cluster)
        } else {
            Default::default()
        },
        present,
    });
    if let Err(e) = Records::new(&opts.work_dir).finish(ctx.cluster.cluster_name(), op, applied) {
        eprintln!("warning: the cluster record was not written: {e}");
    }
}
