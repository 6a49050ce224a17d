//! `kubexm-build`: resolves, downloads and packs KubeXM offline bundles.

mod addons;
mod bundle_diff;
mod cache;
mod cli;
mod commands;
mod completeness;
mod credentials;
mod exit;
mod fetch;
mod images;
mod oci_layout;
mod osrepo;
mod output;
mod progress;
mod sbom;
mod upgrade_bundle;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};
use exit::ExitStatus;

fn main() -> ExitCode {
    kubexm_bundles::pipe::exit_quietly_on_broken_pipe();
    let cli = Cli::parse();
    cli.output.init();
    progress::set_enabled(cli.output.progress());
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = match &cli.command {
        Command::Resolve(args) => commands::resolve::run(args, &mut out),
        Command::Validate(args) => commands::validate::run(args, &mut out),
        Command::Bundle(args) => commands::bundle::run(args, &mut out),
        Command::Verify(args) => commands::verify::run(args, &mut out),
        Command::Diff(args) => commands::diff::run(args, &mut out),
        Command::Import(args) => match &args.from {
            cli::ImportFrom::Kubekey(a) => commands::import::run(a, &mut out),
        },
        Command::Keygen(args) => commands::keygen::run(args, &mut out),
        Command::Completions { shell } => output::completions(*shell),
        Command::Man { output } => output::man(output.as_deref()),
    };
    let _ = out.flush();
    match result {
        Ok(()) => ExitStatus::Success.code(),
        Err(err) => {
            let status = ExitStatus::of(&err, matches!(cli.command, Command::Verify(_)));
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "error: {err}");
            for cause in err.chain().skip(1) {
                let _ = writeln!(stderr, "  caused by: {cause}");
            }
            status.code()
        }
    }
}
