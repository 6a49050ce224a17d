//! `kubexm-build validate`.

use std::io::Write;

use anyhow::Result;

use super::Inputs;
use crate::cli::SourceArgs;

/// Loads and validates; prints a one-line summary.
pub fn run(args: &SourceArgs, out: &mut dyn Write) -> Result<()> {
    let inputs = Inputs::load(args)?;
    let c = &inputs.cluster;
    writeln!(
        out,
        "{}: valid ({} hosts, Kubernetes {}, zone {})",
        args.file.display(),
        c.file.spec.hosts.len(),
        c.version,
        inputs.zone.name()
    )?;
    Ok(())
}
