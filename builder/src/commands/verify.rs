//! `kubexm-build verify`: one streaming pass over a bundle, checking every entry.

use std::io::Write;

use anyhow::{Context, Result};
use kubexm_bundles::verify::{verify, NullSink};
use kubexm_manifests::display::Untrusted;

use crate::cli::VerifyArgs;

/// Verifies and prints a summary.
pub fn run(args: &VerifyArgs, out: &mut dyn Write) -> Result<()> {
    let file = std::fs::File::open(&args.bundle)
        .with_context(|| format!("Failed to open `{}`", args.bundle.display()))?;
    let report = verify(
        std::io::BufReader::with_capacity(1 << 20, file),
        &mut NullSink,
    )
    .with_context(|| format!("`{}` failed verification", args.bundle.display()))?;
    let pinned = if report.pinned_bytes.is_some() {
        "sizes pinned"
    } else {
        "formatVersion 1: sizes not pinned"
    };
    writeln!(
        out,
        "{}: OK ({} entries; takes {} bytes on disk unpacked, {pinned}; cluster {}, Kubernetes {}, {} files, {} images)",
        args.bundle.display(),
        report.entries,
        report.bytes,
        Untrusted(&report.manifest.cluster),
        Untrusted(&report.manifest.kubernetes_version),
        report.manifest.files.len(),
        report.manifest.images.len()
    )?;
    Ok(())
}
