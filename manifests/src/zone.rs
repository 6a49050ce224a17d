//! Zones: where files and images are fetched from. `default` is upstream; `cn` uses mirrors
//! reachable from mainland China (like KubeKey's `KKZONE=cn`); a zone file (`--zone-file`)
//! defines a user zone, e.g. a local mirror for tests or a site proxy.
//!
//! A zone rewrites file URLs by prefix (longest match wins) and image references by registry
//! or `registry/path` prefix (longest match wins), optionally flattening the repository path.

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::image_ref::ImageRef;
use crate::yaml::{self, YamlError};

/// `kind` of a zone document.
pub const KIND_ZONE: &str = "Zone";
/// The environment variable that selects the zone.
pub const ZONE_ENV: &str = "KMZONE";

const BUILTIN_CN: &str = include_str!("../zones/cn.yaml");

/// One file URL rewrite.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileRewrite {
    /// URL prefix to replace.
    pub from: String,
    /// Replacement prefix.
    pub to: String,
}

/// One image rewrite.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImageRewrite {
    /// `registry` or `registry/path` prefix of canonical references; `*` matches every image.
    pub from: String,
    /// `registry[/path]` to put instead.
    pub to: String,
    /// Keep only the last path component of the repository.
    #[serde(default)]
    pub flatten: bool,
    /// The `to` registry speaks plain HTTP (a local mirror).
    #[serde(default, rename = "plainHTTP")]
    pub plain_http: bool,
}

/// `metadata` of a zone.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneMeta {
    /// Zone name (what `--zone`/`KMZONE` select; also the key in a component's `zoneUrls`).
    pub name: String,
}

/// A zone document.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Zone {
    /// `kubexm.io/v1alpha1`.
    pub api_version: String,
    /// `Zone`.
    pub kind: String,
    /// Name.
    pub metadata: ZoneMeta,
    /// File URL rewrites.
    #[serde(default)]
    pub files: Vec<FileRewrite>,
    /// Image rewrites.
    #[serde(default)]
    pub images: Vec<ImageRewrite>,
}

/// A zone that cannot be used.
#[derive(Debug, Error)]
pub enum ZoneError {
    /// File unreadable.
    #[error("cannot read zone file `{path}`")]
    Read {
        /// File.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Malformed YAML.
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// Wrong content.
    #[error("zone `{origin}`: {problem}")]
    Invalid {
        /// File or zone name.
        origin: String,
        /// The problem.
        problem: String,
    },
    /// No such zone.
    #[error("unknown zone `{name}`; known zones: {known}. Define your own with --zone-file")]
    Unknown {
        /// Requested.
        name: String,
        /// Available.
        known: String,
    },
}

impl Zone {
    /// The upstream zone: nothing is rewritten.
    pub fn upstream() -> Self {
        Zone {
            api_version: crate::model::API_VERSION.to_owned(),
            kind: KIND_ZONE.to_owned(),
            metadata: ZoneMeta {
                name: "default".to_owned(),
            },
            files: Vec::new(),
            images: Vec::new(),
        }
    }

    /// Zone name.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// Parses a zone document.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ZoneError> {
        let zone: Zone = yaml::from_str(text, origin)?;
        let invalid = |problem: String| ZoneError::Invalid {
            origin: origin.to_owned(),
            problem,
        };
        if zone.api_version != crate::model::API_VERSION {
            return Err(invalid(format!(
                "apiVersion `{}` is not supported; use `{}`",
                zone.api_version,
                crate::model::API_VERSION
            )));
        }
        if zone.kind != KIND_ZONE {
            return Err(invalid(format!(
                "kind `{}` must be `{KIND_ZONE}`",
                zone.kind
            )));
        }
        for (i, r) in zone.files.iter().enumerate() {
            for (field, v) in [("from", &r.from), ("to", &r.to)] {
                if !(v.starts_with("http://") || v.starts_with("https://")) {
                    return Err(invalid(format!(
                        "files[{i}].{field} `{v}` must be an http:// or https:// URL prefix"
                    )));
                }
            }
        }
        for (i, r) in zone.images.iter().enumerate() {
            if r.to.is_empty() || r.to.contains("://") || r.to.ends_with('/') {
                return Err(invalid(format!(
                    "images[{i}].to `{}` must be `registry[/path]` without scheme or trailing `/`",
                    r.to
                )));
            }
        }
        Ok(zone)
    }

    /// Loads a zone file.
    pub fn from_file(path: &Path) -> Result<Self, ZoneError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ZoneError::Read {
            path: origin.clone(),
            source,
        })?;
        Self::parse(&text, &origin)
    }

    /// Picks the zone: `name` (from `--zone` or `KMZONE`) among `default`, `cn` and the zone
    /// file's zone; with only a zone file, that zone; with neither, `default`.
    pub fn select(name: Option<&str>, zone_file: Option<&Path>) -> Result<Self, ZoneError> {
        let user = zone_file.map(Zone::from_file).transpose()?;
        let name = match (name, &user) {
            (Some(n), _) if !n.is_empty() => n.to_owned(),
            (_, Some(u)) => return Ok(u.clone()),
            _ => return Ok(Zone::upstream()),
        };
        if let Some(u) = user.filter(|u| u.name() == name) {
            return Ok(u);
        }
        match name.as_str() {
            "default" => Ok(Zone::upstream()),
            "cn" => Zone::parse(BUILTIN_CN, "built-in zone cn"),
            _ => Err(ZoneError::Unknown {
                name,
                known: "default, cn".to_owned(),
            }),
        }
    }

    /// Registry hosts (`host[:port]`) this zone's image rules mark as plain HTTP.
    pub fn plain_http_registries(&self) -> Vec<String> {
        self.images
            .iter()
            .filter(|r| r.plain_http)
            .map(|r| r.to.split('/').next().unwrap_or(&r.to).to_owned())
            .collect()
    }

    /// The URL of a file after the zone's rewrites.
    pub fn rewrite_url(&self, url: &str) -> String {
        self.files
            .iter()
            .filter(|r| url.starts_with(&r.from))
            .max_by_key(|r| r.from.len())
            .map_or_else(
                || url.to_owned(),
                |r| format!("{}{}", r.to, &url[r.from.len()..]),
            )
    }

    /// The reference to pull an image from after the zone's rewrites.
    pub fn rewrite_image(&self, image: &ImageRef) -> ImageRef {
        let full = image.name();
        let best = self
            .images
            .iter()
            .filter_map(|r| {
                if r.from == "*" {
                    return Some((0, r, image.repository.clone()));
                }
                let rest = full.strip_prefix(&r.from)?;
                if rest.is_empty() || rest.starts_with('/') {
                    let tail = rest.trim_start_matches('/');
                    let tail = if tail.is_empty() {
                        image.repository.clone()
                    } else {
                        tail.to_owned()
                    };
                    Some((r.from.len(), r, tail))
                } else {
                    None
                }
            })
            .max_by_key(|(len, _, _)| *len);
        let Some((_, rule, tail)) = best else {
            return image.clone();
        };
        let tail = if rule.flatten {
            image.basename().to_owned()
        } else {
            tail
        };
        let (registry, prefix) = match rule.to.split_once('/') {
            Some((reg, path)) => (reg, format!("{path}/")),
            None => (rule.to.as_str(), String::new()),
        };
        image.with_location(registry, format!("{prefix}{tail}"))
    }
}

#[cfg(test)]
mod tests {
    use super::Zone;
    use crate::image_ref::ImageRef;

    fn zone() -> Zone {
        Zone::parse(
            "apiVersion: kubexm.io/v1alpha1\nkind: Zone\nmetadata: {name: t}\nfiles:\n  - {from: 'https://github.com/', to: 'http://m/gh/'}\n  - {from: 'https://github.com/etcd-io/', to: 'http://m/etcd/'}\nimages:\n  - {from: '*', to: 'mirror.io/all', flatten: true}\n  - {from: 'registry.k8s.io', to: '127.0.0.1:5000/k8s'}\n  - {from: 'docker.io/calico', to: '127.0.0.1:5000'}\n",
            "test",
        )
        .expect("zone parses")
    }

    fn img(s: &str) -> ImageRef {
        s.parse().expect("valid reference")
    }

    #[test]
    fn longest_file_prefix_wins() {
        let z = zone();
        assert_eq!(z.rewrite_url("https://github.com/a/b"), "http://m/gh/a/b");
        assert_eq!(
            z.rewrite_url("https://github.com/etcd-io/etcd/x"),
            "http://m/etcd/etcd/x"
        );
        assert_eq!(z.rewrite_url("https://dl.k8s.io/x"), "https://dl.k8s.io/x");
    }

    #[test]
    fn image_rules_keep_path_flatten_and_boundaries() {
        let z = zone();
        assert_eq!(
            z.rewrite_image(&img("registry.k8s.io/coredns/coredns:v1.11.3"))
                .to_string(),
            "127.0.0.1:5000/k8s/coredns/coredns:v1.11.3"
        );
        assert_eq!(
            z.rewrite_image(&img("calico/node:v3")).to_string(),
            "127.0.0.1:5000/node:v3"
        );
        // `docker.io/calicoX` must not match the `docker.io/calico` rule.
        assert_eq!(
            z.rewrite_image(&img("calicox/node:v3")).to_string(),
            "mirror.io/all/node:v3"
        );
        assert_eq!(
            z.rewrite_image(&img("quay.io/cilium/cilium:v1"))
                .to_string(),
            "mirror.io/all/cilium:v1"
        );
    }

    #[test]
    fn selection() {
        assert_eq!(Zone::select(None, None).expect("default").name(), "default");
        assert_eq!(Zone::select(Some("cn"), None).expect("cn").name(), "cn");
        let e = Zone::select(Some("mars"), None).expect_err("unknown");
        assert!(
            e.to_string().contains("unknown zone `mars`") && e.to_string().contains("--zone-file"),
            "{e}"
        );
    }
}
