//! `check`: validate a cluster.yaml against the built-in catalog (and an override).

use std::path::Path;

use anyhow::{Context, Result};
use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::load::load_cluster;

pub(crate) fn run(file: &Path, catalog: Option<&Path>) -> Result<()> {
    let catalog = Catalog::builtin_with_override(catalog).context("Failed to load the catalog")?;
    let cluster = load_cluster(file, &catalog)
        .with_context(|| format!("Failed to load `{}`", file.display()))?;
    println!(
        "{}: valid ({} hosts, Kubernetes {})",
        file.display(),
        cluster.file.spec.hosts.len(),
        cluster.version
    );
    Ok(())
}
