//! The install pipeline: modules built from a validated cluster description.

pub mod os;
pub mod preflight;

use std::sync::Arc;

use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::load::load_cluster;
use kubexm_manifests::validate::ValidCluster;

use crate::pipeline::{Node, Pipeline};

/// Everything the install modules read.
#[derive(Debug)]
pub struct InstallContext {
    /// The cluster.
    pub cluster: ValidCluster,
    /// Its nodes.
    pub nodes: Vec<Node>,
}

impl InstallContext {
    /// Names of the nodes with `role`.
    pub fn with_role(&self, role: &str) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.has_role(role))
            .map(|n| n.name.clone())
            .collect()
    }

    /// Every node name.
    pub fn all(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// Loads and validates cluster.yaml (against the built-in catalog merged with `catalog`).
pub fn load_context(
    file: &std::path::Path,
    catalog: Option<&std::path::Path>,
) -> Result<InstallContext, LoadError> {
    let catalog = Catalog::builtin_with_override(catalog).map_err(LoadError::Catalog)?;
    let cluster = load_cluster(file, &catalog).map_err(LoadError::Cluster)?;
    let nodes = crate::inventory::nodes(&cluster);
    Ok(InstallContext { cluster, nodes })
}

/// cluster.yaml or the catalog could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The catalog override is bad.
    #[error(transparent)]
    Catalog(kubexm_manifests::catalog::CatalogError),
    /// cluster.yaml is unreadable or invalid.
    #[error(transparent)]
    Cluster(kubexm_manifests::load::LoadError),
}

/// The `install` pipeline in order.
pub fn install_pipeline(ctx: &Arc<InstallContext>) -> Pipeline {
    Pipeline {
        name: "install".to_string(),
        modules: vec![
            Box::new(preflight::PreflightModule(ctx.clone())),
            Box::new(os::NodePrepModule(ctx.clone())),
        ],
    }
}

/// Where KubeXM keeps its marker on every node: the cluster it belongs to.
pub const NODE_MARKER: &str = "/etc/kubexm/cluster";
