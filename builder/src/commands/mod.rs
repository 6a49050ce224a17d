//! One module per subcommand.

pub mod bundle;
pub mod bundle_extras;
pub mod diff;
pub mod import;
pub mod keygen;
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
        refuse_foreign(&args.file)?;
        let cluster = load_cluster(&args.file, &catalog)
            .with_context(|| format!("Failed to load `{}`", args.file.display()))?;
        Ok(Self {
            catalog,
            zone,
            cluster,
        })
    }
}

/// A KubeKey file given where a cluster.yaml belongs: say what it is and how to convert it.
fn refuse_foreign(file: &std::path::Path) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(file) else {
        // The loader reports unreadable files with their own message.
        return Ok(());
    };
    let Some(format) = kubexm_manifests::import::detect(&text) else {
        return Ok(());
    };
    let shown = file.display();
    let how = match format {
        kubexm_manifests::import::Format::KubeKeyCluster => {
            format!("kubexm-build import kubekey -f {shown} -o cluster.yaml")
        }
        kubexm_manifests::import::Format::KubeKeyConfig => format!(
            "kubexm-build import kubekey -f {shown} --inventory INVENTORY.yaml -o cluster.yaml"
        ),
        _ => format!(
            "kubexm-build import kubekey -f CONFIG.yaml --inventory {shown} -o cluster.yaml"
        ),
    };
    Err(crate::exit::InvalidConfig(format!(
        "`{shown}` is a {}, not a KubeXM cluster.yaml\nhint: convert it first: {how}",
        format.describe()
    ))
    .into())
}

/// Formats resolver problems as an error.
pub fn problems_error(file: &std::path::Path, problems: &[Problem]) -> anyhow::Error {
    let list: Vec<String> = problems.iter().map(|p| format!("  - {p}")).collect();
    crate::exit::InvalidConfig(format!(
        "`{}` cannot be resolved ({} problem{}):\n{}",
        file.display(),
        problems.len(),
        if problems.len() == 1 { "" } else { "s" },
        list.join("\n")
    ))
    .into()
}
