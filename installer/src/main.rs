//! `kubexm-install`: installs Kubernetes from a KubeXM bundle on air-gapped hosts.
//!
//! `main` parses the flags ([`cli`]), runs one verb ([`commands`]) and maps the result to an
//! exit code; the work is done by the `kubexm_install` library.

mod cli;
mod commands;
mod exit;
mod output;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

use cli::{Cli, Command};
use exit::{ExitStatus, UsageError};

fn run(cli: Cli) -> Result<()> {
    // `--no-verify` before a verb belongs to the install without a verb: with `install` it is
    // that install's; with any other verb it would be ignored, so it is refused.
    let top_no_verify = cli.install.verify.no_verify;
    if top_no_verify && !matches!(cli.command, None | Some(Command::Install(_))) {
        return Err(UsageError(
            "--no-verify goes after the verb (`install`, `upgrade`, `apply`, `restore --fresh`): given before another verb it would not apply".into(),
        )
        .into());
    }
    match &cli.command {
        Some(Command::Completions { shell }) => return output::completions(*shell),
        Some(Command::Man { output }) => return output::man(output.as_deref()),
        _ => {}
    }
    let trust = kubexm_install::intake::trust::TrustPolicy::load(&cli.trusted_keys)
        .context("Failed to load the trusted keys")?
        .require_signature(cli.require_signature);
    match (cli.command, cli.bundle) {
        (Some(Command::Install(mut args)), top_bundle) => {
            let Some(bundle) = args.bundle.take().or(top_bundle) else {
                return Err(UsageError(
                    "install needs --bundle FILE: the bundle to install".into(),
                )
                .into());
            };
            args.install.verify.no_verify |= top_no_verify;
            commands::install::run(&bundle, &args.install, &cli.work_dir, &trust)
        }
        (Some(Command::Check { file, catalog }), _) => {
            commands::check::run(&file, catalog.as_deref())
        }
        (Some(Command::Unpack { bundle, registry }), _) => {
            commands::unpack::run(&bundle, &registry, &cli.work_dir, &trust)
        }
        (Some(Command::Inventory(args)), _) => commands::inventory::run(&args, &cli.work_dir),
        (Some(Command::Seed(args)), _) => commands::seed::run(&args, &cli.work_dir, &trust),
        (Some(Command::Plan(args)), _) => commands::plan::run(&args, &cli.work_dir, &trust),
        (Some(Command::Delete(args)), bundle) => {
            commands::delete::run(&args, bundle, &cli.work_dir, &trust)
        }
        (Some(Command::AddNode(args)), _) => commands::add_node::run(&args, &cli.work_dir),
        (Some(Command::DeleteNode(args)), _) => commands::delete_node::run(&args, &cli.work_dir),
        (Some(Command::Apply(args)), _) => commands::apply::run(&args, &cli.work_dir, &trust),
        (Some(Command::Etcd(cmd)), _) => commands::etcd::run(&cmd, &cli.work_dir),
        (Some(Command::Certs(cmd)), _) => commands::certs::run(&cmd, &cli.work_dir),
        (Some(Command::Backup(cmd)), _) => commands::backup::run(&cmd, &cli.work_dir),
        (Some(Command::Restore(args)), _) if args.fresh => {
            commands::restore_fresh::run(&args, &cli.work_dir, &trust)
        }
        (Some(Command::Restore(args)), _) => commands::backup::restore(&args, &cli.work_dir),
        (Some(Command::RotateCa(args)), _) => commands::rotate::run(&args, &cli.work_dir),
        (Some(Command::KernelUpgrade(args)), _) => {
            commands::kernel_upgrade::run(&args, &cli.work_dir)
        }
        (Some(Command::Upgrade(args)), _) => commands::upgrade::run(&args, &cli.work_dir, &trust),
        (Some(Command::Status(args)), _) => commands::status::run(&args, &cli.work_dir),
        (Some(Command::VerifyCluster(args)), _) => commands::verify::run(&args, &cli.work_dir),
        (Some(Command::Completions { .. } | Command::Man { .. }), _) => Ok(()),
        // The original form: `kubexm-install --bundle FILE [install flags]` means `install`.
        (None, Some(bundle)) => {
            commands::install::run(&bundle, &cli.install, &cli.work_dir, &trust)
        }
        (None, None) => Err(UsageError(
            "nothing to do: pass --bundle FILE or a subcommand (see --help)".into(),
        )
        .into()),
    }
}

fn main() -> ExitCode {
    kubexm_bundles::pipe::exit_quietly_on_broken_pipe();
    let cli = Cli::parse();
    cli.output.init();
    match run(cli) {
        Ok(()) => ExitStatus::Success.code(),
        Err(err) => {
            let status = ExitStatus::of(&err);
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            status.code()
        }
    }
}
