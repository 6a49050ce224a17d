//! What every module reads: the validated cluster, its nodes, the unpacked bundle and the
//! control host's PKI directory ([`InstallContext`], built by [`load_context`]), and the
//! [`Scope`] of nodes a module applies to.

mod scope;

pub use scope::{scoped, Scope, ScopeExt, Scoped, UnknownNode};

use kubexm_manifests::resolve::Role;
use std::path::PathBuf;

use kubexm_bundles::manifest::{BundleManifest, FileRecord};
use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::image_ref::ImageRef;
use kubexm_manifests::load::load_cluster;
use kubexm_manifests::model::{LbMode, RegistryType};
use kubexm_manifests::resolve::Resolution;
use kubexm_manifests::validate::ValidCluster;

use crate::pipeline::{Node, StepError};
use crate::pki::{KeyDir, Keys};

/// Everything the install modules read.
#[derive(Debug)]
pub struct InstallContext {
    /// The cluster.
    pub cluster: ValidCluster,
    /// Its nodes.
    pub nodes: Vec<Node>,
    /// The unpacked bundle (absent for `plan -f` without a bundle: uploads of bundle files are
    /// then planned from the resolver's paths).
    pub bundle: Option<BundleRef>,
    /// Control-host directory for the cluster's generated keys and certificates
    /// (`WORK/pki/<cluster>`), kept so re-runs reuse the same CAs.
    pub pki_dir: PathBuf,
    /// `pki_dir` as modules use it when they build their tasks: [`Keys::Plan`] (the default:
    /// what is missing is made in memory, nothing is written) until
    /// [`InstallContext::for_execution`].
    pub keys: KeyDir,
    /// What the cluster needs per the catalog (upstream zone), used for the plan's file and
    /// image records when there is no bundle; `None` when it cannot be resolved.
    pub resolution: Option<Resolution>,
    /// The catalog's entries for `spec.system.osReleases` (how nodes of each are recognised,
    /// for plans without a bundle).
    pub os_releases: std::collections::BTreeMap<String, kubexm_manifests::osrelease::OsRelease>,
}

/// An unpacked bundle.
#[derive(Debug, Clone)]
pub struct BundleRef {
    /// Its directory (`bundle.json`, `files/`, `images/`).
    pub dir: PathBuf,
    /// Its `bundle.json`.
    pub manifest: BundleManifest,
}

/// Where clients reach the API servers: `https://{domain}:{port}`, the domain resolving (through
/// the managed /etc/hosts block) to `address` — the VIP, or the first master without a load
/// balancer or VIP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlaneEndpoint {
    /// `loadBalancer.domain`.
    pub domain: String,
    /// The VIP or the first master's internal address.
    pub address: String,
    /// The port (`loadBalancer.port`, 6443 without a load balancer).
    pub port: u16,
}

impl ControlPlaneEndpoint {
    /// `https://domain:port`.
    pub fn url(&self) -> String {
        format!("https://{}:{}", self.domain, self.port)
    }
}

/// Port the bundled registry listens on when `privateRegistry` does not name one.
pub const REGISTRY_PORT: u16 = 5000;
/// Harbor's built-in public project, used when `registry.namespace` is not set.
pub const HARBOR_DEFAULT_PROJECT: &str = "library";

impl InstallContext {
    /// `HOST[:PORT]` nodes pull images from: `registry.privateRegistry`, else the registry host
    /// KubeXM deploys (`<address>:5000`, or `:443` for Harbor); `None` when registry.type is none.
    pub fn registry_endpoint(&self) -> Option<String> {
        let r = &self.cluster.file.spec.registry;
        if let Some(p) = &r.private_registry {
            return Some(p.clone());
        }
        let host = self.with_role(Role::Registry).into_iter().next()?;
        let node = self.node(&host)?;
        match r.kind {
            RegistryType::Registry => Some(format!("{}:{REGISTRY_PORT}", node.internal_address)),
            RegistryType::Harbor => Some(match r.harbor_config.https_port {
                Some(port) if port != 443 => format!("{}:{port}", node.internal_address),
                _ => node.internal_address.clone(),
            }),
            RegistryType::External | RegistryType::None => None,
        }
    }

    /// The project (namespace) images are pushed under and pulled from: `registry.namespace`,
    /// else `library` for Harbor (every Harbor repository lives in a project; `library` is the
    /// one Harbor creates), else none.
    pub fn registry_namespace(&self) -> Option<String> {
        let r = &self.cluster.file.spec.registry;
        r.namespace.clone().or_else(|| {
            (r.kind == RegistryType::Harbor).then(|| HARBOR_DEFAULT_PROJECT.to_string())
        })
    }

    /// Where nodes pull `reference` (as written in bundle.json) from: rewritten into the
    /// private registry, or unchanged without one.
    pub fn pull_reference(&self, reference: &str) -> Result<String, StepError> {
        let Some(endpoint) = self.registry_endpoint() else {
            return Ok(reference.to_string());
        };
        let r = &self.cluster.file.spec.registry;
        let parsed: ImageRef = reference
            .parse()
            .map_err(|e| StepError::Invalid(format!("image reference {reference}: {e}")))?;
        Ok(parsed
            .in_private_registry(&endpoint, self.registry_namespace().as_deref(), r.rewrite)
            .to_string())
    }

    /// The bundle files for `component` on `node`'s architecture (path on the control host,
    /// record). Without a bundle, the resolver's record is used with a path under `files/`.
    pub fn files_for(&self, component: &str, node: &Node) -> Vec<(PathBuf, FileRecord)> {
        let Some(b) = &self.bundle else {
            let Some(r) = &self.resolution else {
                return Vec::new();
            };
            return r
                .binaries
                .iter()
                .filter(|f| f.name == component && f.arch.as_str() == node.arch)
                .map(|f| {
                    (
                        PathBuf::from(&f.path),
                        FileRecord {
                            name: f.name.clone(),
                            version: f.version.clone(),
                            arch: f.arch.as_str().to_string(),
                            path: f.path.clone(),
                            sha256: f.sha256.clone(),
                            size: 0,
                            url: f.url.clone(),
                            roles: f.roles.iter().map(|r| r.as_str().to_string()).collect(),
                        },
                    )
                })
                .collect();
        };
        let all: Vec<&FileRecord> = b
            .manifest
            .files
            .iter()
            .filter(|f| f.name == component && f.arch == node.arch)
            .collect();
        // A bundle built for an upgrade path holds a component in several versions: the one
        // this cluster.yaml resolves to (same bundle path) is taken.
        let needed: Vec<&FileRecord> = match &self.resolution {
            Some(r) => all
                .iter()
                .copied()
                .filter(|f| r.binaries.iter().any(|x| x.path == f.path))
                .collect(),
            None => Vec::new(),
        };
        let chosen = if needed.is_empty() { all } else { needed };
        chosen
            .into_iter()
            .map(|f| (b.dir.join(&f.path), f.clone()))
            .collect()
    }

    /// Canonical references of the cluster's images (bundle.json, else the resolution).
    pub fn image_references(&self) -> Vec<String> {
        match (&self.bundle, &self.resolution) {
            (Some(b), _) => b
                .manifest
                .images
                .iter()
                .map(|i| i.reference.clone())
                .collect(),
            (None, Some(r)) => r.images.iter().map(|i| i.reference.clone()).collect(),
            (None, None) => Vec::new(),
        }
    }

    /// The API server endpoint every kubeconfig, kubeadm config and join command uses.
    pub fn control_plane_endpoint(&self) -> Result<ControlPlaneEndpoint, StepError> {
        let lb = &self.cluster.file.spec.load_balancer;
        let first = self.first_master()?;
        let address = match lb.mode {
            LbMode::None => first.internal_address.clone(),
            _ => lb
                .vip
                .clone()
                .unwrap_or_else(|| first.internal_address.clone()),
        };
        let port = match lb.mode {
            LbMode::None => crate::modules::k8s::APISERVER_PORT,
            _ => lb.port,
        };
        Ok(ControlPlaneEndpoint {
            domain: lb.domain.clone(),
            address,
            port,
        })
    }

    /// The first master (`roleGroups.master[0]`): where the cluster is initialised.
    pub fn first_master(&self) -> Result<&Node, StepError> {
        self.with_role(Role::Master)
            .first()
            .and_then(|m| self.node(m))
            .ok_or_else(|| {
                StepError::Invalid("roleGroups.master is empty: name at least one master".into())
            })
    }

    /// Names of the nodes with `role`.
    pub fn with_role(&self, role: Role) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.has_role(role))
            .map(|n| n.name.clone())
            .collect()
    }

    /// Names of the workers that are not masters.
    pub fn workers_only(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.has_role(Role::Worker) && !n.has_role(Role::Master))
            .map(|n| n.name.clone())
            .collect()
    }

    /// The cluster's nodes plus the control host (`localhost`), as the plan and the executor
    /// see them.
    pub fn plan_nodes(&self) -> Vec<Node> {
        let mut v = self.nodes.clone();
        v.push(crate::inventory::control_node());
        v
    }

    /// Every node name.
    pub fn all(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The same context for executing a pipeline: keys and certificates that do not exist yet
    /// are created in `pki_dir` and kept, so re-runs reuse them.
    #[must_use]
    pub fn for_execution(mut self) -> Self {
        self.keys = self.keys.with_keys(Keys::Keep);
        self
    }

    /// The cluster's key directory (`pki_dir`) in this context's [`Keys`] mode.
    pub fn key_dir(&self) -> KeyDir {
        self.keys.clone()
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The scope of the named nodes, each checked against cluster.yaml's hosts.
    pub fn scope<S: AsRef<str>>(&self, names: &[S]) -> Result<Scope, UnknownNode> {
        let mut set = std::collections::BTreeSet::new();
        for name in names {
            let name = name.as_ref();
            if self.node(name).is_none() {
                return Err(UnknownNode {
                    name: name.to_string(),
                    known: self.all().join(", "),
                });
            }
            set.insert(name.to_string());
        }
        Ok(Scope::Nodes(set))
    }
}

/// Loads and validates cluster.yaml (against the built-in catalog merged with `catalog`).
pub fn load_context(
    file: &std::path::Path,
    catalog: Option<&std::path::Path>,
    bundle: Option<BundleRef>,
    work_dir: &std::path::Path,
) -> Result<InstallContext, LoadError> {
    let catalog = Catalog::builtin_with_override(catalog).map_err(LoadError::Catalog)?;
    let cluster = load_cluster(file, &catalog).map_err(LoadError::Cluster)?;
    let nodes = crate::inventory::nodes(&cluster);
    let pki_dir = work_dir.join("pki").join(cluster.cluster_name());
    let resolution = kubexm_manifests::resolve::resolve(
        &cluster,
        &catalog,
        &kubexm_manifests::zone::Zone::upstream(),
    )
    .ok();
    let os_releases = cluster
        .file
        .spec
        .system
        .os_releases
        .iter()
        .filter_map(|name| catalog.os_releases.get(name))
        .map(|r| (r.name.clone(), r.clone()))
        .collect();
    Ok(InstallContext {
        cluster,
        nodes,
        bundle,
        keys: KeyDir::new(pki_dir.clone(), Keys::Plan),
        pki_dir,
        resolution,
        os_releases,
    })
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

/// Where KubeXM keeps its marker on every node: the cluster it belongs to.
pub const NODE_MARKER: &str = "/etc/kubexm/cluster";
