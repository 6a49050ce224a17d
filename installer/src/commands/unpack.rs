//! `unpack`: take a bundle in — signature, split parts, delta completion — and extract it into
//! the work directory.

use std::path::Path;

use anyhow::Result;
use kubexm_install::intake::trust::TrustPolicy;

use super::{registry_options, take_in};
use crate::cli::RegistryArgs;

pub(crate) fn run(
    bundle: &Path,
    registry: &RegistryArgs,
    work_dir: &Path,
    trust: &TrustPolicy,
) -> Result<()> {
    let site_registry = registry_options(registry, 8, 4, std::time::Duration::from_millis(500))?;
    let u = take_in(bundle, work_dir, trust, site_registry.as_ref())?.unpacked;
    let how = if u.reused {
        "already unpacked"
    } else {
        "unpacked"
    };
    println!("{}: {how} in {}", bundle.display(), u.dir.display());
    Ok(())
}
