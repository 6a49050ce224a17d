//! Command-line interface of `kubexm-build`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Build KubeXM offline bundles on a connected machine.
///
/// Reads a cluster description (cluster.yaml), resolves exactly which binaries and container
/// images it needs for the chosen zone, downloads and verifies them, and writes one .tar.zst
/// bundle that `kubexm-install` installs on air-gapped hosts.
#[derive(Debug, Parser)]
#[command(
    name = "kubexm-build",
    version,
    propagate_version = true,
    args_override_self = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the files, images and OS packages a cluster needs (only the OS repositories'
    /// signed indexes are downloaded).
    Resolve(ResolveArgs),
    /// Check a cluster.yaml and report every problem.
    Validate(SourceArgs),
    /// Download and verify everything the cluster needs and write one .tar.zst bundle.
    Bundle(BundleArgs),
    /// Check every entry of a bundle against its SHA256SUMS and bundle.json.
    Verify(VerifyArgs),
}

/// `bundle` options.
#[derive(Debug, Args)]
pub struct BundleArgs {
    /// Inputs.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Bundle to write (default: kubexm-CLUSTER-VERSION.tar.zst in the current directory).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Content-addressed cache shared by files and image blobs (default: ~/.cache/kubexm).
    #[arg(long, value_name = "DIR", env = "KUBEXM_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Parallel downloads.
    #[arg(long, default_value_t = 8)]
    pub jobs: usize,
    /// zstd compression level (1–19).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    pub level: i32,
    /// Tries per download before giving up.
    #[arg(long, default_value_t = 4)]
    pub retries: u32,
    /// First retry delay in milliseconds (doubles each retry).
    #[arg(long, default_value_t = 500, value_name = "MS")]
    pub retry_delay_ms: u64,
    /// A docker config.json with registry credentials (default: $DOCKER_CONFIG or ~/.docker).
    #[arg(long, value_name = "FILE")]
    pub docker_config: Option<PathBuf>,
    /// Files the catalog cannot pin (the CNI manifests and charts, marked userPinned: no public
    /// sha256 exists) are downloaded once, their sha256 recorded in the bundle and printed with
    /// the catalog entry that pins them next time. Without it such files are refused.
    #[arg(long)]
    pub accept_unpinned: bool,
    /// OS repositories (spec.system.osReleases): reuse a signed index (InRelease, repomd.xml)
    /// cached less than this many seconds ago instead of fetching it again (0: always fetch).
    /// It is verified again either way.
    #[arg(long, default_value_t = 86_400, value_name = "SECONDS")]
    pub os_index_max_age: u64,
}

/// `verify` options.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The bundle to check.
    #[arg(value_name = "FILE.tar.zst")]
    pub bundle: PathBuf,
}

/// Where the cluster description, catalog and zone come from.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// The cluster description.
    #[arg(short = 'f', long = "file", value_name = "CLUSTER_YAML")]
    pub file: PathBuf,
    /// Zone: `default` (upstream), `cn` (mirrors), or the zone defined by --zone-file.
    #[arg(long, env = "KMZONE", value_name = "ZONE")]
    pub zone: Option<String>,
    /// A zone file (file URL and image registry rewrites), e.g. a local mirror.
    #[arg(long, value_name = "FILE")]
    pub zone_file: Option<PathBuf>,
    /// A catalog file merged over the built-in catalog (add versions, URLs, sha256).
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
}

/// `resolve` options.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Inputs.
    #[command(flatten)]
    pub source: SourceArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Cache for the OS repositories' signed indexes (default: ~/.cache/kubexm). Only used when
    /// the cluster lists spec.system.osReleases: their indexes are fetched and verified to list
    /// the packages, no package is downloaded.
    #[arg(long, value_name = "DIR", env = "KUBEXM_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Reuse a signed index cached less than this many seconds ago (0: always fetch).
    #[arg(long, default_value_t = 86_400, value_name = "SECONDS")]
    pub os_index_max_age: u64,
}

/// Output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    /// A readable table.
    Table,
    /// Stable JSON (see `formatVersion`).
    Json,
}
