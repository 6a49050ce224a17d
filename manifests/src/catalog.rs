//! The component catalog: which versions of each binary exist, where they are downloaded from,
//! their pinned sha256 per arch, and the defaults and images that go with each Kubernetes version.
//!
//! The built-in catalog is `manifests/catalog/catalog.yaml`, embedded at compile time. A user
//! catalog (`--catalog FILE`, same schema, every field optional) is merged over it: components
//! by name (versions merged per version and arch), Kubernetes releases by version (replaced),
//! image groups per version (replaced).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::display::{Untrusted, UntrustedMax};
use crate::model::Arch;
use crate::name::check_component;
use crate::osrelease::{OsRelease, BUILTIN_OS_RELEASES};
use crate::version::KubeVersion;
use crate::yaml::{self, YamlError};

/// The built-in catalog source.
pub const BUILTIN_CATALOG: &str = include_str!("../catalog/catalog.yaml");
/// `kind` of a catalog document.
pub const KIND_CATALOG: &str = "Catalog";

/// How a downloaded file is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Archive {
    /// The URL is the executable itself.
    #[serde(rename = "binary")]
    Binary,
    /// A gzip-compressed tarball.
    #[serde(rename = "tar.gz")]
    TarGz,
    /// A zip archive.
    #[serde(rename = "zip")]
    Zip,
    /// A file used as it is (e.g. a Kubernetes manifest applied with kubectl).
    #[serde(rename = "file")]
    File,
}

/// sha256 per arch for one version.
pub type ArchSums = BTreeMap<Arch, String>;

/// One component as written in a catalog file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ComponentDoc {
    /// Component name, e.g. `containerd`.
    pub name: String,
    /// Archive type (required for a new component).
    #[serde(default)]
    pub archive: Option<Archive>,
    /// Upstream URL template (required for a new component).
    #[serde(default)]
    pub url: Option<String>,
    /// URL templates for named zones, overriding the zone's rewrite rules.
    #[serde(default)]
    pub zone_urls: BTreeMap<String, String>,
    /// Where the sums come from.
    #[serde(default)]
    pub source: Option<String>,
    /// The catalog cannot pin these files (no public sha256 list exists, and sums are never
    /// invented): the user pins every version they bundle with `--catalog FILE`. An unpinned
    /// version still resolves (marked `unpinned`, so `resolve` and `plan` work), but
    /// `kubexm-build bundle` refuses it.
    #[serde(default)]
    pub user_pinned: Option<bool>,
    /// Pinned sums per version and arch.
    #[serde(default)]
    pub versions: BTreeMap<String, ArchSums>,
    /// The file's own version where it differs from the version it is resolved at (a network
    /// plugin's chart resolves at the plugin's version, but hybridnet numbers its chart apart
    /// from its image: chart 0.6.8 deploys image v0.8.8). Fills `{version}`/`{version_nov}` in
    /// the URL; the bundle path keeps the resolved version.
    #[serde(default)]
    pub file_versions: BTreeMap<String, String>,
}

/// What goes with one Kubernetes version.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesRelease {
    /// The Kubernetes version.
    pub version: String,
    /// Tag of kubeadm's pause image. The registry (`k8s.gcr.io` or `registry.k8s.io`) and the
    /// full references come from [`KubeVersion::kubeadm_images`](crate::version::KubeVersion).
    pub pause: String,
    /// Tag of kubeadm's CoreDNS image (`1.7.0` under `coredns` for v1.20, `vX` under
    /// `coredns/coredns` from v1.21).
    pub coredns: String,
    /// Tag of kubeadm's etcd image, used by stacked (kubeadm) etcd.
    pub etcd_image: String,
    /// Default version of every other component and image group for this release.
    #[serde(default)]
    pub defaults: BTreeMap<String, String>,
}

/// A catalog document (built-in or user override).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CatalogDoc {
    /// `kubexm.io/v1alpha1`.
    #[serde(default)]
    pub api_version: Option<String>,
    /// `Catalog`.
    #[serde(default)]
    pub kind: Option<String>,
    /// Components.
    #[serde(default)]
    pub components: Vec<ComponentDoc>,
    /// Kubernetes releases.
    #[serde(default)]
    pub kubernetes: Vec<KubernetesRelease>,
    /// Image groups: group name → version → image references.
    #[serde(default)]
    pub addon_images: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// OS releases (replaced by name).
    #[serde(default)]
    pub os_releases: Vec<OsRelease>,
}

/// A component ready to resolve.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// Name.
    pub name: String,
    /// Archive type.
    pub archive: Archive,
    /// Upstream URL template.
    pub url: String,
    /// Per-zone URL templates.
    pub zone_urls: BTreeMap<String, String>,
    /// Where the sums come from.
    pub source: Option<String>,
    /// Versions the catalog does not pin resolve as `unpinned` (see [`ComponentDoc::user_pinned`]).
    pub user_pinned: bool,
    /// Pinned sums.
    pub versions: BTreeMap<String, ArchSums>,
    /// The file's own version per resolved version (see [`ComponentDoc::file_versions`]).
    pub file_versions: BTreeMap<String, String>,
}

/// The merged catalog.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Components by name.
    pub components: BTreeMap<String, Component>,
    /// Kubernetes releases by version.
    pub kubernetes: BTreeMap<KubeVersion, KubernetesRelease>,
    /// Image groups.
    pub addon_images: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    /// OS releases by name.
    pub os_releases: BTreeMap<String, OsRelease>,
}

/// A catalog that cannot be used.
#[derive(Debug, Error)]
pub enum CatalogError {
    /// The file could not be read.
    #[error("cannot read catalog `{path}`")]
    Read {
        /// File.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The YAML is malformed.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// The document is well-formed but wrong.
    #[error("catalog `{}`: {}", Untrusted(.origin), UntrustedMax(.problems.join("; "), 4000))]
    Invalid {
        /// File or `built-in`.
        origin: String,
        /// Every problem found.
        problems: Vec<String>,
    },
}

/// Placeholders a URL template may use.
pub const URL_PLACEHOLDERS: [&str; 4] = ["{version}", "{version_nov}", "{arch}", "{uname_arch}"];

impl Catalog {
    /// The built-in catalog.
    pub fn builtin() -> Result<Self, CatalogError> {
        let doc = parse_doc(BUILTIN_CATALOG, "built-in catalog")?;
        let mut catalog = Catalog::default();
        catalog.merge(doc, "built-in catalog")?;
        let os = parse_doc(BUILTIN_OS_RELEASES, "built-in OS releases")?;
        catalog.merge(os, "built-in OS releases")?;
        Ok(catalog)
    }

    /// The built-in catalog with the user catalog at `path` merged over it.
    pub fn builtin_with_override(path: Option<&Path>) -> Result<Self, CatalogError> {
        let mut catalog = Self::builtin()?;
        if let Some(path) = path {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
                path: origin.clone(),
                source,
            })?;
            let doc = parse_doc(&text, &origin)?;
            catalog.merge(doc, &origin)?;
        }
        Ok(catalog)
    }

    /// Merges a document over this catalog, then checks the whole.
    pub fn merge(&mut self, doc: CatalogDoc, origin: &str) -> Result<(), CatalogError> {
        let mut problems = Vec::new();
        if let Some(api) = &doc.api_version {
            if api != crate::model::API_VERSION {
                problems.push(format!(
                    "apiVersion `{api}` is not supported; use `{}`",
                    crate::model::API_VERSION
                ));
            }
        }
        if let Some(kind) = &doc.kind {
            if kind != KIND_CATALOG {
                problems.push(format!("kind `{kind}` must be `{KIND_CATALOG}`"));
            }
        }
        for (i, c) in doc.components.into_iter().enumerate() {
            if let Some(existing) = self.components.get_mut(&c.name) {
                if let Some(a) = c.archive {
                    existing.archive = a;
                }
                if let Some(u) = c.url {
                    existing.url = u;
                }
                if c.source.is_some() {
                    existing.source = c.source;
                }
                if let Some(u) = c.user_pinned {
                    existing.user_pinned = u;
                }
                existing.zone_urls.extend(c.zone_urls);
                existing.file_versions.extend(c.file_versions);
                for (version, sums) in c.versions {
                    existing.versions.entry(version).or_default().extend(sums);
                }
                continue;
            }
            let (Some(archive), Some(url)) = (c.archive, c.url) else {
                problems.push(format!(
                    "components[{i}] `{}` is new, so it needs both `archive` and `url`",
                    c.name
                ));
                continue;
            };
            self.components.insert(
                c.name.clone(),
                Component {
                    name: c.name,
                    archive,
                    url,
                    zone_urls: c.zone_urls,
                    source: c.source,
                    user_pinned: c.user_pinned.unwrap_or(false),
                    versions: c.versions,
                    file_versions: c.file_versions,
                },
            );
        }
        for (i, rel) in doc.kubernetes.into_iter().enumerate() {
            match rel.version.parse::<KubeVersion>() {
                Ok(v) => {
                    self.kubernetes.insert(v, rel);
                }
                Err(e) => problems.push(format!("kubernetes[{i}].version: {e}")),
            }
        }
        for (group, versions) in doc.addon_images {
            self.addon_images.entry(group).or_default().extend(versions);
        }
        for rel in doc.os_releases {
            problems.extend(rel.check());
            self.os_releases.insert(rel.name.clone(), rel);
        }
        problems.extend(self.check());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(CatalogError::Invalid {
                origin: origin.to_owned(),
                problems,
            })
        }
    }

    /// Consistency of the merged catalog: sums are sha256 hex, URL templates use known
    /// placeholders, and every default names a version the catalog has.
    fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for c in self.components.values() {
            // Names and versions become parts of bundle paths (`files/<name>/<version>/<arch>/`).
            if let Err(e) = check_component(&c.name) {
                problems.push(format!("component name {e}"));
            }
            for version in c.versions.keys() {
                if let Err(e) = check_component(version) {
                    problems.push(format!("component `{}` version {e}", c.name));
                }
            }
            for (zone, url) in std::iter::once(("default", &c.url))
                .chain(c.zone_urls.iter().map(|(z, u)| (z.as_str(), u)))
            {
                if let Some(bad) = unknown_placeholder(url) {
                    problems.push(format!(
                        "component `{}` url for zone `{zone}` uses unknown placeholder `{bad}` (known: {})",
                        c.name,
                        URL_PLACEHOLDERS.join(", ")
                    ));
                }
            }
            for (version, sums) in &c.versions {
                for (arch, sum) in sums {
                    if !is_sha256_hex(sum) {
                        problems.push(format!(
                            "component `{}` {version} {arch}: `{sum}` is not a sha256 (64 lowercase hex digits)",
                            c.name
                        ));
                    }
                }
            }
        }
        for rel in self.kubernetes.values() {
            for (name, version) in &rel.defaults {
                let known = self
                    .components
                    .get(name)
                    .map(|c| c.versions.contains_key(version))
                    .or_else(|| self.addon_images.get(name).map(|g| g.contains_key(version)));
                match known {
                    Some(true) => {}
                    Some(false) => problems.push(format!(
                        "kubernetes {}: default `{name}: {version}` is not a version the catalog lists for `{name}`",
                        rel.version
                    )),
                    None => problems.push(format!(
                        "kubernetes {}: default `{name}` is neither a component nor an image group",
                        rel.version
                    )),
                }
            }
        }
        problems
    }

    /// Supported Kubernetes versions, oldest first.
    pub fn kubernetes_versions(&self) -> Vec<String> {
        self.kubernetes.keys().map(ToString::to_string).collect()
    }

    /// The release entry of `version`.
    pub fn release(&self, version: KubeVersion) -> Option<&KubernetesRelease> {
        self.kubernetes.get(&version)
    }
}

fn parse_doc(text: &str, origin: &str) -> Result<CatalogDoc, CatalogError> {
    Ok(yaml::from_str(text, origin)?)
}

fn unknown_placeholder(url: &str) -> Option<String> {
    let mut rest = url;
    while let Some(start) = rest.find('{') {
        let end = rest[start..]
            .find('}')
            .map_or(rest.len(), |e| start + e + 1);
        let token = &rest[start..end];
        if !URL_PLACEHOLDERS.contains(&token) {
            return Some(token.to_owned());
        }
        rest = &rest[end..];
    }
    None
}

/// Orders version strings numerically (`2.0.2` < `2.0.10`, `v1.9.0` < `v1.31.0`).
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(s: &str) -> Vec<(u64, String)> {
        s.trim_start_matches('v')
            .split(['.', '-', '+'])
            .map(|p| {
                let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
                (digits.parse().unwrap_or(0), p[digits.len()..].to_owned())
            })
            .collect()
    }
    key(a).cmp(&key(b))
}

/// At most the `n` newest of `versions`, newest last, with a count of the others.
pub fn newest_versions<'a>(versions: impl IntoIterator<Item = &'a String>, n: usize) -> String {
    let mut all: Vec<&str> = versions.into_iter().map(String::as_str).collect();
    all.sort_by(|a, b| version_order(a, b));
    let skip = all.len().saturating_sub(n);
    let shown = all[skip..].join(", ");
    if skip > 0 {
        format!("{shown} (and {skip} older)")
    } else {
        shown
    }
}

pub use crate::digest::is_sha256_hex;
