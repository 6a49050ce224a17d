//! `kubexm-build`: resolves, downloads and packs KubeXM offline bundles.

mod addons;
mod cache;
mod cli;
mod commands;
mod credentials;
mod fetch;
mod images;
mod oci_layout;
mod osrepo;
mod progress;
mod sbom;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KUBEXM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .init();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = match &cli.command {
        Command::Resolve(args) => commands::resolve::run(args, &mut out),
        Command::Validate(args) => commands::validate::run(args, &mut out),
        Command::Bundle(args) => commands::bundle::run(args, &mut out),
        Command::Verify(args) => commands::verify::run(args, &mut out),
        Command::Import(args) => match &args.from {
            cli::ImportFrom::Kubekey(a) => commands::import::run(a, &mut out),
        },
        Command::Keygen(args) => commands::keygen::run(args, &mut out),
    };
    let _ = out.flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "error: {err}");
            for cause in err.chain().skip(1) {
                let _ = writeln!(stderr, "  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}
