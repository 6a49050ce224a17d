//! Reading `cluster.yaml`: parse with positions, then validate against the catalog.

use std::path::Path;

use thiserror::Error;

use crate::catalog::Catalog;
use crate::model::ClusterFile;
use crate::validate::{validate, Problem, ValidCluster};
use crate::yaml::{self, YamlError};

/// Largest `cluster.yaml` read: a description of a thousand hosts is well under 1 MiB.
pub const MAX_CLUSTER_YAML: u64 = 1 << 20;

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
    /// The file is larger than any real cluster description.
    #[error("`{path}` is {size} bytes; a cluster description is at most {MAX_CLUSTER_YAML} bytes")]
    TooLarge {
        /// File.
        path: String,
        /// Its size.
        size: u64,
    },
    /// YAML syntax or schema error, with its position.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// The document could not be written back.
    #[error("cannot write `{path}` back as YAML: {message}")]
    Serialize {
        /// File.
        path: String,
        /// The serializer's message.
        message: String,
    },
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
    if text.len() as u64 > MAX_CLUSTER_YAML {
        return Err(LoadError::TooLarge {
            path: origin.to_owned(),
            size: text.len() as u64,
        });
    }
    let file = parse_cluster(text, origin)?;
    validate(file, catalog).map_err(|problems| LoadError::Invalid {
        path: origin.to_owned(),
        problems,
    })
}

/// Reads, parses and validates `cluster.yaml`.
pub fn load_cluster(path: &Path, catalog: &Catalog) -> Result<ValidCluster, LoadError> {
    use std::io::Read;
    let origin = path.display().to_string();
    let read_err = |source| LoadError::Read {
        path: origin.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    file.take(MAX_CLUSTER_YAML + 1)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    if text.len() as u64 > MAX_CLUSTER_YAML {
        let size = std::fs::metadata(path).map_or(text.len() as u64, |m| m.len());
        return Err(LoadError::TooLarge { path: origin, size });
    }
    load_cluster_str(&text, &origin, catalog)
}

/// The same cluster description at another Kubernetes version: `text` with only
/// `spec.kubernetes.version` set to `version`, re-written (comments are lost) under a comment that
/// says so. For a bundle built for an upgrade path (`kubexm-build bundle --upgrade-from`).
///
/// # Errors
///
/// The text does not parse ([`LoadError::Yaml`]), is too large, or cannot be written back.
pub fn at_kubernetes_version(text: &str, origin: &str, version: &str) -> Result<String, LoadError> {
    if text.len() as u64 > MAX_CLUSTER_YAML {
        return Err(LoadError::TooLarge {
            path: origin.to_owned(),
            size: text.len() as u64,
        });
    }
    let mut file = parse_cluster(text, origin)?;
    file.spec.kubernetes.version = version.to_owned();
    let body = serde_saphyr::to_string(&file).map_err(|e| LoadError::Serialize {
        path: origin.to_owned(),
        message: e.to_string(),
    })?;
    Ok(format!(
        "# Written by kubexm-build for an upgrade path: {origin} with spec.kubernetes.version\n# {version} (the original's comments are not kept).\n{body}"
    ))
}

/// `cluster.yaml` as it may be carried in a bundle: the text unchanged when it holds no inline
/// secret, else the document re-written without them (comments are lost) under a comment that
/// names the fields removed. Returns the text and the removed fields' paths.
///
/// # Errors
///
/// The text does not parse ([`LoadError::Yaml`]) or is too large.
pub fn without_inline_secrets(
    text: &str,
    origin: &str,
) -> Result<(String, Vec<String>), LoadError> {
    if text.len() as u64 > MAX_CLUSTER_YAML {
        return Err(LoadError::TooLarge {
            path: origin.to_owned(),
            size: text.len() as u64,
        });
    }
    let mut file = parse_cluster(text, origin)?;
    let removed = file.strip_inline_secrets();
    if removed.is_empty() {
        return Ok((text.to_owned(), removed));
    }
    let body = serde_saphyr::to_string(&file).map_err(|e| LoadError::Serialize {
        path: origin.to_owned(),
        message: e.to_string(),
    })?;
    let mut out = String::from(
        "# Written by kubexm-build: the inline secrets of the original were removed (a bundle\n# never carries them). Give them at install time with passwordEnv/passwordFile, or pass\n# the original with -f.\n",
    );
    for field in &removed {
        out.push_str("#   removed: ");
        out.push_str(field);
        out.push('\n');
    }
    out.push_str(&body);
    Ok((out, removed))
}
