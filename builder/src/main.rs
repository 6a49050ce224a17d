//! `kubexm-build`: resolves, downloads and packs KubeXM offline bundles.

mod cli;
mod commands;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = match &cli.command {
        Command::Resolve(args) => commands::resolve::run(args, &mut out),
        Command::Validate(args) => commands::validate::run(args, &mut out),
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
