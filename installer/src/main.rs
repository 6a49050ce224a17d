//! `kubexm-install`: installs Kubernetes from a KubeXM bundle on air-gapped hosts.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::load::load_cluster;

/// Install Kubernetes from a KubeXM bundle on air-gapped hosts.
///
/// Verifies and unpacks the bundle made by `kubexm-build bundle`, deploys and seeds the private
/// registry, then runs the install pipeline over SSH on every host of the cluster.
#[derive(Debug, Parser)]
#[command(name = "kubexm-install", version, propagate_version = true)]
struct Cli {
    /// The bundle to install (`kubexm-build bundle` output).
    #[arg(long, value_name = "FILE.tar.zst")]
    bundle: Option<PathBuf>,
    /// Steps other than a full install.
    #[command(subcommand)]
    command: Option<Command>,
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
}

fn run(cli: Cli) -> Result<()> {
    match (cli.command, cli.bundle) {
        (Some(Command::Check { file, catalog }), _) => {
            let catalog = Catalog::builtin_with_override(catalog.as_deref()).context("Failed to load the catalog")?;
            let cluster =
                load_cluster(&file, &catalog).with_context(|| format!("Failed to load `{}`", file.display()))?;
            println!("{}: valid ({} hosts, Kubernetes {})", file.display(), cluster.file.spec.hosts.len(), cluster.version);
            Ok(())
        }
        (None, Some(bundle)) => anyhow::bail!(
            "installing `{}` needs the unpack and pipeline stages, which this build does not include yet",
            bundle.display()
        ),
        (None, None) => anyhow::bail!("nothing to do: pass --bundle FILE or a subcommand (see --help)"),
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
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
