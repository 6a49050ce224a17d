//! `kubexm-install`: installs Kubernetes from a KubeXM bundle on air-gapped hosts.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use kubexm_install::seed::{seed, RegistryTarget, SeedOptions};
use kubexm_install::unpack::unpack;
use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::load::load_cluster;
use kubexm_manifests::model::RewriteMode;
use kubexm_manifests::secret::Secret;

/// Install Kubernetes from a KubeXM bundle on air-gapped hosts.
///
/// Verifies and unpacks the bundle made by `kubexm-build bundle`, deploys and seeds the private
/// registry, then runs the install pipeline over SSH on every host of the cluster.
#[derive(Debug, Parser)]
#[command(
    name = "kubexm-install",
    version,
    propagate_version = true,
    args_override_self = true
)]
struct Cli {
    /// The bundle to install (`kubexm-build bundle` output).
    #[arg(long, value_name = "FILE.tar.zst")]
    bundle: Option<PathBuf>,
    /// Work directory: unpacked bundles, state and logs.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "KUBEXM_WORK_DIR",
        default_value = "/var/lib/kubexm"
    )]
    work_dir: PathBuf,
    /// Steps other than a full install.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    install: InstallArgs,
}

/// Flags of a full install (`--bundle` without a subcommand).
#[derive(Debug, Args)]
struct InstallArgs {
    /// Use this cluster.yaml instead of the one inside the bundle.
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    file: Option<PathBuf>,
    /// Print the full ordered plan and exit without connecting anywhere.
    #[arg(long)]
    dry_run: bool,
    /// Skip tasks an earlier run completed with the same inputs (state file in the work dir).
    #[arg(long)]
    resume: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// How the nodes are reached (install and delete).
#[derive(Debug, Args)]
struct ConnectArgs {
    /// Record host keys of nodes not yet in the known_hosts file (changed keys are always
    /// refused).
    #[arg(long)]
    accept_new_host_keys: bool,
    /// OpenSSH known_hosts file the nodes' host keys are checked against
    /// (default: WORK_DIR/known_hosts).
    #[arg(long, value_name = "FILE")]
    known_hosts: Option<PathBuf>,
    /// Most nodes worked on at the same time.
    #[arg(long, default_value_t = 10, value_name = "N")]
    concurrency: usize,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check a cluster.yaml against the built-in catalog and report every problem.
    Check {
        /// The cluster description.
        #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
        file: PathBuf,
        /// A catalog file merged over the built-in catalog.
        #[arg(long, value_name = "FILE")]
        catalog: Option<PathBuf>,
    },
    /// Verify and unpack a bundle into the work directory (skipped when already unpacked).
    Unpack {
        /// The bundle.
        #[arg(long, value_name = "FILE.tar.zst")]
        bundle: PathBuf,
    },
    /// Push every image of a bundle into a registry.
    Seed(SeedArgs),
    /// Print the full ordered install plan (modules, tasks, steps, nodes, exact commands and
    /// file destinations) without connecting anywhere.
    Plan(PlanArgs),
    /// Delete the cluster from its nodes: everything the install put there, in reverse order
    /// (OS packages stay). Refuses without --yes, printing what would be deleted.
    Delete(DeleteArgs),
}

#[derive(Debug, Args)]
struct DeleteArgs {
    /// The bundle the cluster was installed from (its cluster.yaml unless -f is given).
    #[arg(long, value_name = "FILE.tar.zst")]
    bundle: Option<PathBuf>,
    /// The cluster description (default: the one inside --bundle).
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    file: Option<PathBuf>,
    /// A catalog file merged over the built-in catalog (default: the bundle's).
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// Really delete (without it, only say what would be deleted).
    #[arg(long)]
    yes: bool,
    /// Print the full ordered delete plan and exit without connecting anywhere.
    #[arg(long)]
    dry_run: bool,
    /// Skip tasks an earlier delete completed with the same inputs.
    #[arg(long)]
    resume: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// The cluster description (default: the one inside --bundle).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "CLUSTER_YAML",
        required_unless_present = "bundle"
    )]
    file: Option<PathBuf>,
    /// The bundle whose cluster.yaml (and catalog override) to plan.
    #[arg(long, value_name = "FILE.tar.zst")]
    bundle: Option<PathBuf>,
    /// A catalog file merged over the built-in catalog.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    output: PlanFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum PlanFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
struct SeedArgs {
    /// The bundle (unpacked into the work directory first if needed).
    #[arg(long, value_name = "FILE.tar.zst")]
    bundle: PathBuf,
    /// Target registry, HOST[:PORT].
    #[arg(long, value_name = "HOST[:PORT]")]
    registry: String,
    /// Project (Harbor) or namespace every image goes under.
    #[arg(long, value_name = "P")]
    project: Option<String>,
    /// Keep only the image's last path component (`registry.k8s.io/coredns/coredns` → `P/coredns`).
    #[arg(long)]
    flatten: bool,
    /// User name for the registry.
    #[arg(long, value_name = "U", requires = "password_stdin")]
    username: Option<String>,
    /// Read the registry password from standard input.
    #[arg(long, requires = "username")]
    password_stdin: bool,
    /// CA certificate (PEM) the registry's TLS certificate is signed by.
    #[arg(long, value_name = "FILE", conflicts_with = "plain_http")]
    ca_file: Option<PathBuf>,
    /// Speak plain HTTP to the registry.
    #[arg(long)]
    plain_http: bool,
    /// Create missing projects through Harbor's API (v2.0) before pushing.
    #[arg(long)]
    harbor: bool,
    /// Make created Harbor projects private.
    #[arg(long, requires = "harbor")]
    private_projects: bool,
    /// Parallel uploads.
    #[arg(long, default_value_t = 8)]
    jobs: usize,
    /// Tries per request before giving up.
    #[arg(long, default_value_t = 4)]
    retries: u32,
    /// First retry delay in milliseconds (doubles each retry).
    #[arg(long, default_value_t = 500, value_name = "MS")]
    retry_delay_ms: u64,
}

fn run(cli: Cli) -> Result<()> {
    match (cli.command, cli.bundle) {
        (Some(Command::Check { file, catalog }), _) => {
            let catalog = Catalog::builtin_with_override(catalog.as_deref())
                .context("Failed to load the catalog")?;
            let cluster = load_cluster(&file, &catalog)
                .with_context(|| format!("Failed to load `{}`", file.display()))?;
            println!(
                "{}: valid ({} hosts, Kubernetes {})",
                file.display(),
                cluster.file.spec.hosts.len(),
                cluster.version
            );
            Ok(())
        }
        (Some(Command::Unpack { bundle }), _) => {
            let u = unpack(&bundle, &cli.work_dir)
                .with_context(|| format!("Failed to unpack `{}`", bundle.display()))?;
            let how = if u.reused {
                "already unpacked"
            } else {
                "unpacked"
            };
            println!("{}: {how} in {}", bundle.display(), u.dir.display());
            Ok(())
        }
        (Some(Command::Seed(args)), _) => run_seed(&args, &cli.work_dir),
        (Some(Command::Plan(args)), _) => run_plan(&args, &cli.work_dir),
        (Some(Command::Delete(args)), bundle) => run_delete(&args, bundle, &cli.work_dir),
        (None, Some(bundle)) => run_install(&bundle, &cli.install, &cli.work_dir),
        (None, None) => {
            anyhow::bail!("nothing to do: pass --bundle FILE or a subcommand (see --help)")
        }
    }
}

/// Loads the install context: cluster.yaml and catalog override from `-f`/`--catalog` when
/// given, else the bundle's own; the bundle (when given) is verified and unpacked first.
fn install_context(
    file: Option<&std::path::Path>,
    catalog: Option<&std::path::Path>,
    bundle: Option<&std::path::Path>,
    work_dir: &std::path::Path,
) -> Result<kubexm_install::install::InstallContext> {
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
    let bundle = unpacked.map(|u| kubexm_install::install::BundleRef {
        dir: u.dir,
        manifest: u.manifest,
    });
    Ok(kubexm_install::install::load_context(
        &file,
        catalog.as_deref(),
        bundle,
        work_dir,
    )?)
}

fn run_install(
    bundle: &std::path::Path,
    args: &InstallArgs,
    work_dir: &std::path::Path,
) -> Result<()> {
    let ctx = std::sync::Arc::new(install_context(
        args.file.as_deref(),
        None,
        Some(bundle),
        work_dir,
    )?);
    let pipeline = kubexm_install::install::install_pipeline(&ctx);
    if args.dry_run {
        let nodes = ctx.plan_nodes();
        let plan = kubexm_install::pipeline::plan::build(&pipeline, &nodes, &Default::default())
            .context("Failed to build the plan")?;
        print!("{}", plan.to_text());
        return Ok(());
    }
    let opts = run_options(args.file.as_deref(), &args.connect, args.resume, work_dir)?;
    run_and_report(&ctx, &pipeline, &opts, "Install failed", "installed")?;
    Ok(())
}

/// Connects to every node, runs `pipeline` and prints a one-line summary.
fn run_and_report(
    ctx: &kubexm_install::install::InstallContext,
    pipeline: &kubexm_install::pipeline::Pipeline,
    opts: &kubexm_install::install::run::RunOptions,
    failed: &'static str,
    done: &str,
) -> Result<()> {
    use kubexm_install::install::run::{connect_all, run_pipeline};
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

fn run_options(
    file: Option<&std::path::Path>,
    connect: &ConnectArgs,
    resume: bool,
    work_dir: &std::path::Path,
) -> Result<kubexm_install::install::run::RunOptions> {
    let base_dir = match file {
        Some(f) => f.parent().map(PathBuf::from).unwrap_or_default(),
        None => std::env::current_dir().context("Failed to read the current directory")?,
    };
    Ok(kubexm_install::install::run::RunOptions {
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

/// What `delete` without `--yes` prints: the nodes and, per module, its tasks and hosts.
fn delete_summary(
    ctx: &kubexm_install::install::InstallContext,
    plan: &kubexm_install::pipeline::plan::Plan,
) -> String {
    use std::fmt::Write as _;
    let mut s = format!(
        "`delete` would remove cluster {} from {} node(s):\n",
        ctx.cluster.cluster_name(),
        ctx.nodes.len()
    );
    for n in &ctx.nodes {
        let _ = writeln!(s, "  {} ({}): {}", n.name, n.address, n.roles.join(","));
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

fn run_delete(
    args: &DeleteArgs,
    top_bundle: Option<PathBuf>,
    work_dir: &std::path::Path,
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
    )?);
    let pipeline = kubexm_install::install::delete::delete_pipeline(&ctx);
    let plan = kubexm_install::pipeline::plan::build(&pipeline, &ctx.nodes, &Default::default())
        .context("Failed to build the delete plan")?;
    if args.dry_run {
        print!("{}", plan.to_text());
        return Ok(());
    }
    if !args.yes {
        anyhow::bail!("{}", delete_summary(&ctx, &plan));
    }
    let opts = run_options(args.file.as_deref(), &args.connect, args.resume, work_dir)?;
    run_and_report(&ctx, &pipeline, &opts, "Delete failed", "deleted")?;
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

fn run_plan(args: &PlanArgs, work_dir: &std::path::Path) -> Result<()> {
    let ctx = std::sync::Arc::new(install_context(
        args.file.as_deref(),
        args.catalog.as_deref(),
        args.bundle.as_deref(),
        work_dir,
    )?);
    let pipeline = kubexm_install::install::install_pipeline(&ctx);
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

fn run_seed(args: &SeedArgs, work_dir: &std::path::Path) -> Result<()> {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KUBEXM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}
