//! Container image references, normalised the way Docker does (`calico/cni:v3` →
//! `docker.io/calico/cni:v3`, `haproxy:2.9` → `docker.io/library/haproxy:2.9`).

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};
use thiserror::Error;

/// Docker Hub's canonical registry name.
pub const DOCKER_HUB: &str = "docker.io";

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageRef {
    /// Registry host, with port if any (`registry.k8s.io`, `127.0.0.1:5000`).
    pub registry: String,
    /// Repository path (`coredns/coredns`).
    pub repository: String,
    /// Tag, if any.
    pub tag: Option<String>,
    /// Digest (`sha256:…`), if any.
    pub digest: Option<String>,
}

/// A string that is not an image reference.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("`{reference}` is not a valid image reference: {reason}")]
pub struct ImageRefError {
    /// The text as written.
    pub reference: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl FromStr for ImageRef {
    type Err = ImageRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ImageRefError {
            reference: s.to_owned(),
            reason,
        };
        if s.is_empty() {
            return Err(err("it is empty"));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .ok_or_else(|| err("the digest must start with `sha256:`"))?;
                if !crate::catalog::is_sha256_hex(hex) {
                    return Err(err("the digest is not 64 lowercase hex digits"));
                }
                (r, Some(d.to_owned()))
            }
            None => (s, None),
        };
        // A tag is after the last ':' that comes after the last '/'.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (
                &rest[..last_slash + i],
                Some(rest[last_slash + i + 1..].to_owned()),
            ),
            None => (rest, None),
        };
        if let Some(t) = &tag {
            let ok = !t.is_empty()
                && t.len() <= 128
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
                && !t.starts_with(['.', '-']);
            if !ok {
                return Err(err(
                    "the tag may hold only letters, digits, `_`, `.`, `-` (128 at most)",
                ));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_owned(), path.to_owned())
            }
            _ => (DOCKER_HUB.to_owned(), name.to_owned()),
        };
        let repository = if registry == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        let repo_ok = !repository.is_empty()
            && repository.split('/').all(|c| {
                !c.is_empty()
                    && c.bytes().all(|b| {
                        b.is_ascii_lowercase()
                            || b.is_ascii_digit()
                            || matches!(b, b'.' | b'_' | b'-')
                    })
            });
        if !repo_ok {
            return Err(err("the repository path may hold only lowercase letters, digits, `.`, `_`, `-` and `/`"));
        }
        if tag.is_none() && digest.is_none() {
            return Err(err(
                "it needs a tag or a digest (e.g. `:v1.0`); bundles pin exact images",
            ));
        }
        Ok(ImageRef {
            registry,
            repository,
            tag,
            digest,
        })
    }
}

impl ImageRef {
    /// The last path component (`coredns/coredns` → `coredns`).
    pub fn basename(&self) -> &str {
        self.repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository)
    }

    /// `registry/repository`, without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The same image under another registry and repository.
    pub fn with_location(&self, registry: &str, repository: String) -> ImageRef {
        ImageRef {
            registry: registry.to_owned(),
            repository,
            tag: self.tag.clone(),
            digest: self.digest.clone(),
        }
    }
}

impl ImageRef {
    /// Where this image lives in the private registry `host`: under `project` (if any), with
    /// its repository path kept (`registry.k8s.io/coredns/coredns:v1` → `HOST/P/coredns/coredns:v1`)
    /// or flattened to the last component (`HOST/P/coredns:v1`). The source registry's host is
    /// dropped; the tag and digest are kept.
    pub fn in_private_registry(
        &self,
        host: &str,
        project: Option<&str>,
        mode: crate::model::RewriteMode,
    ) -> ImageRef {
        let path = match mode {
            crate::model::RewriteMode::KeepPath => self.repository.clone(),
            crate::model::RewriteMode::Flatten => self.basename().to_owned(),
        };
        let repository = match project.filter(|p| !p.is_empty()) {
            Some(p) => format!("{}/{path}", p.trim_matches('/')),
            None => path,
        };
        self.with_location(host, repository)
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl Serialize for ImageRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::ImageRef;

    fn canon(s: &str) -> String {
        s.parse::<ImageRef>()
            .map(|r| r.to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn normalises_like_docker() {
        assert_eq!(canon("haproxy:2.9"), "docker.io/library/haproxy:2.9");
        assert_eq!(canon("calico/cni:v3.28.2"), "docker.io/calico/cni:v3.28.2");
        assert_eq!(
            canon("registry.k8s.io/coredns/coredns:v1.11.3"),
            "registry.k8s.io/coredns/coredns:v1.11.3"
        );
        assert_eq!(
            canon("127.0.0.1:5000/k8s/pause:3.10"),
            "127.0.0.1:5000/k8s/pause:3.10"
        );
        assert_eq!(canon("localhost/x:1"), "localhost/x:1");
        let d = format!("quay.io/cilium/cilium:v1.16.5@sha256:{}", "a".repeat(64));
        assert_eq!(canon(&d), d);
    }

    #[test]
    fn private_registry_names() {
        use crate::model::RewriteMode::{Flatten, KeepPath};
        let r: ImageRef = "registry.k8s.io/coredns/coredns:v1.12.0"
            .parse()
            .expect("valid");
        assert_eq!(
            r.in_private_registry("reg:5000", Some("kubexm"), KeepPath)
                .to_string(),
            "reg:5000/kubexm/coredns/coredns:v1.12.0"
        );
        assert_eq!(
            r.in_private_registry("reg:5000", Some("kubexm"), Flatten)
                .to_string(),
            "reg:5000/kubexm/coredns:v1.12.0"
        );
        let p: ImageRef = "registry.k8s.io/pause:3.9".parse().expect("valid");
        assert_eq!(
            p.in_private_registry("reg", None, KeepPath).to_string(),
            "reg/pause:3.9"
        );
        let h: ImageRef = "haproxy:2.9".parse().expect("valid");
        assert_eq!(
            h.in_private_registry("reg", Some("p"), KeepPath)
                .to_string(),
            "reg/p/library/haproxy:2.9"
        );
    }

    #[test]
    fn rejects_bad_references() {
        for (bad, why) in [
            ("", "empty"),
            ("Calico/cni:v1", "lowercase"),
            ("calico/cni", "needs a tag"),
            ("calico/cni:", "tag may hold"),
            ("x:1@sha256:abc", "64 lowercase"),
            ("x@md5:abc", "sha256:"),
            ("a//b:1", "repository path"),
        ] {
            let e = bad.parse::<ImageRef>().expect_err(bad);
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }
}
