//! Reading `cluster.yaml`: parse with positions, then validate against the catalog.

use std::path::Path;

use thiserror::Error;

use crate::catalog::Catalog;
use crate::model::ClusterFile;
use crate::validate::{validate, Problem, ValidCluster};
use crate::yaml::{self, YamlError};

/// Why a cluster description cannot be used.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read `{path}`")]
    Read {
        /// File.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// YAML syntax or schema error, with its position.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// The document parsed but breaks the rules.
    #[error("`{path}` is not valid ({} problem{}):\n{}", .problems.len(), if .problems.len() == 1 { "" } else { "s" }, render(.problems))]
    Invalid {
        /// File.
        path: String,
        /// Every problem.
        problems: Vec<Problem>,
    },
}

fn render(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses cluster YAML text; `origin` names the file in errors.
pub fn parse_cluster(text: &str, origin: &str) -> Result<ClusterFile, LoadError> {
    Ok(yaml::from_str(text, origin)?)
}

/// Parses and validates cluster YAML text.
pub fn load_cluster_str(
    text: &str,
    origin: &str,
    catalog: &Catalog,
) -> Result<ValidCluster, LoadError> {
    let file = parse_cluster(text, origin)?;
    validate(file, catalog).map_err(|problems| LoadError::Invalid {
        path: origin.to_owned(),
        problems,
    })
}

/// Reads, parses and validates `cluster.yaml`.
pub fn load_cluster(path: &Path, catalog: &Catalog) -> Result<ValidCluster, LoadError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: origin.clone(),
        source,
    })?;
    load_cluster_str(&text, &origin, catalog)
}
