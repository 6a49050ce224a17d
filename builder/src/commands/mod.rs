//! One module per subcommand.

pub mod bundle;
pub mod resolve;
pub mod validate;
pub mod verify;

use anyhow::{Context, Result};
use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::load::load_cluster;
use kubexm_manifests::validate::{Problem, ValidCluster};
use kubexm_manifests::zone::Zone;

use crate::cli::SourceArgs;

/// The inputs every command starts from.
pub struct Inputs {
    /// Merged catalog.
    pub catalog: Catalog,
    /// Selected zone.
    pub zone: Zone,
    /// Validated cluster.
    pub cluster: ValidCluster,
}

impl Inputs {
    /// Loads catalog, zone and cluster description.
    pub fn load(args: &SourceArgs) -> Result<Self> {
        let catalog = Catalog::builtin_with_override(args.catalog.as_deref())
            .context("Failed to load the catalog")?;
        let zone = Zone::select(args.zone.as_deref(), args.zone_file.as_deref())
            .context("Failed to select the zone")?;
        let cluster = load_cluster(&args.file, &catalog)
            .with_context(|| format!("Failed to load `{}`", args.file.display()))?;
        Ok(Self {
            catalog,
            zone,
            cluster,
        })
    }
}

/// Formats resolver problems as an error.
pub fn problems_error(file: &std::path::Path, problems: &[Problem]) -> anyhow::Error {
    let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
    anyhow::anyhow!(
        "`{}` cannot be resolved ({} problem{}):\n{}",
        file.display(),
        problems.len(),
        if problems.len() == 1 { "" } else { "s" },
        list.join("\n")
    )
}
