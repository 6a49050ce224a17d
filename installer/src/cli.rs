//! The command line of `kubexm-install`: flags only; each verb's behaviour is in
//! `commands/<verb>.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
pub(crate) struct Cli {
    /// The bundle to install (`kubexm-build bundle` output).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// Work directory: unpacked bundles, state and logs.
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        env = "KUBEXM_WORK_DIR",
        default_value = "/var/lib/kubexm"
    )]
    pub(crate) work_dir: PathBuf,
    /// Steps other than a full install.
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    #[command(flatten)]
    pub(crate) install: InstallArgs,
}

/// Flags of a full install (`install`, or `--bundle` without a subcommand).
#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    /// Use this cluster.yaml instead of the one inside the bundle.
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    pub(crate) file: Option<PathBuf>,
    /// Print the full ordered plan and exit without connecting anywhere.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Skip tasks an earlier run completed with the same inputs (state file in the work dir).
    #[arg(long)]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// `install`: the bundle and the flags of a full install.
#[derive(Debug, Args)]
pub(crate) struct InstallCmd {
    /// The bundle to install (`kubexm-build bundle` output).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) install: InstallArgs,
}

/// How the nodes are reached (install and delete).
#[derive(Debug, Args)]
pub(crate) struct ConnectArgs {
    /// Record host keys of nodes not yet in the known_hosts file (changed keys are always
    /// refused).
    #[arg(long)]
    pub(crate) accept_new_host_keys: bool,
    /// OpenSSH known_hosts file the nodes' host keys are checked against
    /// (default: WORK_DIR/known_hosts).
    #[arg(long, value_name = "FILE")]
    pub(crate) known_hosts: Option<PathBuf>,
    /// Most nodes worked on at the same time.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub(crate) concurrency: usize,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Verify and unpack the bundle, then run the install pipeline over SSH on every host (the
    /// same as `kubexm-install --bundle FILE`).
    Install(InstallCmd),
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
pub(crate) struct DeleteArgs {
    /// The bundle the cluster was installed from (its cluster.yaml unless -f is given).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// The cluster description (default: the one inside --bundle).
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    pub(crate) file: Option<PathBuf>,
    /// A catalog file merged over the built-in catalog (default: the bundle's).
    #[arg(long, value_name = "FILE")]
    pub(crate) catalog: Option<PathBuf>,
    /// Really delete (without it, only say what would be deleted).
    #[arg(long)]
    pub(crate) yes: bool,
    /// Print the full ordered delete plan and exit without connecting anywhere.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Skip tasks an earlier delete completed with the same inputs.
    #[arg(long)]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The cluster description (default: the one inside --bundle).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "CLUSTER_YAML",
        required_unless_present = "bundle"
    )]
    pub(crate) file: Option<PathBuf>,
    /// The bundle whose cluster.yaml (and catalog override) to plan.
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: Option<PathBuf>,
    /// A catalog file merged over the built-in catalog.
    #[arg(long, value_name = "FILE")]
    pub(crate) catalog: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Text)]
    pub(crate) output: PlanFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum PlanFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct SeedArgs {
    /// The bundle (unpacked into the work directory first if needed).
    #[arg(long, value_name = "FILE.tar.zst")]
    pub(crate) bundle: PathBuf,
    /// Target registry, HOST[:PORT].
    #[arg(long, value_name = "HOST[:PORT]")]
    pub(crate) registry: String,
    /// Project (Harbor) or namespace every image goes under.
    #[arg(long, value_name = "P")]
    pub(crate) project: Option<String>,
    /// Keep only the image's last path component (`registry.k8s.io/coredns/coredns` → `P/coredns`).
    #[arg(long)]
    pub(crate) flatten: bool,
    /// User name for the registry.
    #[arg(long, value_name = "U", requires = "password_stdin")]
    pub(crate) username: Option<String>,
    /// Read the registry password from standard input.
    #[arg(long, requires = "username")]
    pub(crate) password_stdin: bool,
    /// CA certificate (PEM) the registry's TLS certificate is signed by.
    #[arg(long, value_name = "FILE", conflicts_with = "plain_http")]
    pub(crate) ca_file: Option<PathBuf>,
    /// Speak plain HTTP to the registry.
    #[arg(long)]
    pub(crate) plain_http: bool,
    /// Create missing projects through Harbor's API (v2.0) before pushing.
    #[arg(long)]
    pub(crate) harbor: bool,
    /// Make created Harbor projects private.
    #[arg(long, requires = "harbor")]
    pub(crate) private_projects: bool,
    /// Parallel uploads.
    #[arg(long, default_value_t = 8)]
    pub(crate) jobs: usize,
    /// Tries per request before giving up.
    #[arg(long, default_value_t = 4)]
    pub(crate) retries: u32,
    /// First retry delay in milliseconds (doubles each retry).
    #[arg(long, default_value_t = 500, value_name = "MS")]
    pub(crate) retry_delay_ms: u64,
}
