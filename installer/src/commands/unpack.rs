//! `unpack`: verify and extract a bundle into the work directory.

use std::path::Path;

use anyhow::{Context, Result};
use kubexm_install::unpack::unpack;

pub(crate) fn run(bundle: &Path, work_dir: &Path) -> Result<()> {
    let u = unpack(bundle, work_dir)
        .with_context(|| format!("Failed to unpack `{}`", bundle.display()))?;
    let how = if u.reused {
        "already unpacked"
    } else {
        "unpacked"
    };
    println!("{}: {how} in {}", bundle.display(), u.dir.display());
    Ok(())
}
