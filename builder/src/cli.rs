//! Command-line interface of `kubexm-build`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Build KubeXM offline bundles on a connected machine.
///
/// Reads a cluster description (cluster.yaml), resolves exactly which binaries and container
/// images it needs for the chosen zone, downloads and verifies them, and writes one .tar.zst
/// bundle that `kubexm-install` installs on air-gapped hosts.
#[derive(Debug, Parser)]
#[command(name = "kubexm-build", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the files and images a cluster needs (nothing is downloaded).
    Resolve(ResolveArgs),
    /// Check a cluster.yaml and report every problem.
    Validate(SourceArgs),
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
}

/// Output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    /// A readable table.
    Table,
    /// Stable JSON (see `formatVersion`).
    Json,
}
