//! The cluster's nodes as the engine sees them, and the secrets they carry.

use std::path::{Path, PathBuf};

use kubexm_manifests::model::Host;
use kubexm_manifests::resolve::Role;
use kubexm_manifests::secret::Secret;
use kubexm_manifests::validate::ValidCluster;

use crate::pipeline::Node;

/// A host's credentials could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// `passwordEnv` names a variable that is not set.
    #[error("spec.hosts[{host}].passwordEnv: environment variable {var} is not set; export it or use passwordFile")]
    MissingEnv {
        /// Host.
        host: String,
        /// Variable.
        var: String,
    },
    /// `passwordFile` cannot be read.
    #[error("spec.hosts[{host}].passwordFile: cannot read {path}")]
    PasswordFile {
        /// Host.
        host: String,
        /// File.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Every node with its roles, in the order of `spec.hosts`.
pub fn nodes(cluster: &ValidCluster) -> Vec<Node> {
    let r = &cluster.roles;
    cluster
        .file
        .spec
        .hosts
        .iter()
        .map(|h| {
            let mut roles = Vec::new();
            for (role, members) in [
                (Role::Etcd, &r.etcd),
                (Role::Master, &r.master),
                (Role::Worker, &r.worker),
                (Role::Registry, &r.registry),
                (Role::Loadbalancer, &r.loadbalancer),
                (Role::Nfs, &r.nfs),
            ] {
                if members.iter().any(|m| m == &h.name) {
                    roles.push(role);
                }
            }
            Node {
                name: h.name.clone(),
                address: h.address.clone(),
                internal_address: h.internal().to_string(),
                roles,
                arch: h.arch.to_string(),
            }
        })
        .collect()
}

/// The host's password from `password`, `passwordEnv` or `passwordFile` (relative paths are
/// relative to cluster.yaml's directory).
pub fn host_password(host: &Host, base: &Path) -> Result<Option<Secret>, InventoryError> {
    if let Some(p) = &host.password {
        return Ok(Some(p.clone()));
    }
    if let Some(var) = &host.password_env {
        return std::env::var(var)
            .map(|v| Some(Secret::new(v)))
            .map_err(|_| InventoryError::MissingEnv {
                host: host.name.clone(),
                var: var.clone(),
            });
    }
    if let Some(file) = &host.password_file {
        let path = base.join(file);
        let text =
            std::fs::read_to_string(&path).map_err(|source| InventoryError::PasswordFile {
                host: host.name.clone(),
                path: path.clone(),
                source,
            })?;
        let first = text.lines().next().unwrap_or("").to_string();
        return Ok(Some(Secret::new(first)));
    }
    Ok(None)
}

/// Every secret value the cluster description holds or points to (host passwords, registry
/// passwords, the Harbor admin password), for the journal's redactor.
pub fn secrets(cluster: &ValidCluster, base: &Path) -> Vec<String> {
    let spec = &cluster.file.spec;
    let mut out: Vec<String> = spec
        .hosts
        .iter()
        .filter_map(|h| host_password(h, base).ok().flatten())
        .map(|s| s.expose().to_string())
        .collect();
    out.extend(
        spec.registry
            .auths
            .values()
            .filter_map(|a| a.password.as_ref())
            .map(|s| s.expose().to_string()),
    );
    if let Some(p) = &spec.registry.harbor_config.admin_password {
        out.push(p.expose().to_string());
    }
    out.retain(|s| !s.is_empty());
    out.sort();
    out.dedup();
    out
}

/// The control host's node name in tasks.
pub const CONTROL_HOST: &str = "localhost";

/// The control host as a node (for tasks that run where the installer runs).
pub fn control_node() -> Node {
    Node {
        name: CONTROL_HOST.to_string(),
        address: "127.0.0.1".to_string(),
        internal_address: "127.0.0.1".to_string(),
        roles: Vec::new(),
        arch: std::env::consts::ARCH
            .replace("x86_64", "amd64")
            .replace("aarch64", "arm64"),
    }
}
