//! KubeXM manifests: the cluster model (`cluster.yaml`), its validation, the component catalog,
//! zones and the resolver that turns them into the exact list of files and images a bundle holds.
//!
//! ```no_run
//! use kubexm_manifests::{catalog::Catalog, load::load_cluster, resolve::resolve, zone::Zone};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let catalog = Catalog::builtin_with_override(None)?;
//! let cluster = load_cluster("cluster.yaml".as_ref(), &catalog)?;
//! let zone = Zone::select(Some("cn"), None)?;
//! let lists = resolve(&cluster, &catalog, &zone).map_err(|p| format!("{p:?}"))?;
//! println!("{} files, {} images", lists.binaries.len(), lists.images.len());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod catalog;
pub mod digest;
pub mod display;
pub mod feature_gates;
pub mod image_ref;
pub mod import;
pub mod kube_components;
pub mod kube_version;
pub mod load;
pub mod model;
pub mod name;
pub mod ospackages;
pub mod osrelease;
pub mod ranges;
pub mod resolve;
pub mod secret;
pub mod upgrade_path;
pub mod validate;
pub mod version;
pub mod yaml;
pub mod zone;
