//! Where nodes pull an image from: the private registry (as the registry module seeded it), or,
//! without one (`registry.type: none`), the source the bundle recorded for it (the zone's
//! mirror or upstream). Every manifest, static pod and config KubeXM writes names images
//! through [`node_image`], so they match what was seeded.

use kubexm_manifests::image_ref::ImageRef;

use crate::context::InstallContext;
use crate::pipeline::StepError;

/// The reference nodes pull for the canonical `reference` (as written in the catalog). It must
/// be one of the cluster's images: anything else was not bundled and cannot be pulled offline.
pub fn node_image(ctx: &InstallContext, reference: &str) -> Result<String, StepError> {
    let canonical = canonical(reference)?;
    let bundled = ctx.image_references();
    let known = bundled.contains(&canonical);
    // Already where nodes pull a bundled image from (written so by hand): kept as it is.
    if !known
        && ctx.registry_endpoint().is_some()
        && bundled
            .iter()
            .any(|r| ctx.pull_reference(r).is_ok_and(|p| p == canonical))
    {
        return Ok(canonical);
    }
    if !known {
        return Err(StepError::Invalid(format!(
            "image {canonical} is not in the bundle (or the catalog's resolution): add it to the catalog's image group or rebuild the bundle"
        )));
    }
    if ctx.registry_endpoint().is_some() {
        return ctx.pull_reference(&canonical);
    }
    Ok(source_of(ctx, &canonical).unwrap_or(canonical))
}

/// `reference` in its canonical form (`haproxy:3` → `docker.io/library/haproxy:3`).
pub fn canonical(reference: &str) -> Result<String, StepError> {
    reference
        .parse::<ImageRef>()
        .map(|r| r.to_string())
        .map_err(|e| StepError::Invalid(format!("image reference {reference}: {e}")))
}

/// The source the bundle (or the resolution) recorded for a canonical reference.
fn source_of(ctx: &InstallContext, canonical: &str) -> Option<String> {
    if let Some(b) = &ctx.bundle {
        return b
            .manifest
            .images
            .iter()
            .find(|i| i.reference == canonical)
            .map(|i| i.source.clone());
    }
    ctx.resolution
        .as_ref()?
        .images
        .iter()
        .find(|i| i.reference == canonical)
        .map(|i| i.source.clone())
}

/// An image split the way Kubernetes tools ask for it: the repository it lives under (without
/// its own last path component), that component, and the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageParts {
    /// `REGISTRY/PATH` above the image (`10.0.0.1:5000/kubexm`).
    pub repository: String,
    /// The image's own name (`kube-apiserver`).
    pub name: String,
    /// The tag (`v1.33.11`).
    pub tag: String,
}

impl ImageParts {
    /// Splits a full reference with a tag.
    pub fn of(image: &str) -> Result<Self, StepError> {
        let r: ImageRef = image
            .parse()
            .map_err(|e| StepError::Invalid(format!("image reference {image}: {e}")))?;
        let tag = r.tag.clone().ok_or_else(|| {
            StepError::Invalid(format!("image {image} has no tag (a tag is required here)"))
        })?;
        let (parent, name) = match r.repository.rsplit_once('/') {
            Some((p, n)) => (format!("{}/{p}", r.registry), n.to_string()),
            None => (r.registry.clone(), r.repository.clone()),
        };
        Ok(Self {
            repository: parent,
            name,
            tag,
        })
    }

    /// `repository/name` (no tag).
    pub fn name_with_repository(&self) -> String {
        format!("{}/{}", self.repository, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_of_keep_path_and_flattened_references() {
        let p = ImageParts::of("10.0.0.1:5000/kubexm/kube-apiserver:v1.33.11").expect("parts");
        assert_eq!(p.repository, "10.0.0.1:5000/kubexm");
        assert_eq!(p.name, "kube-apiserver");
        assert_eq!(p.tag, "v1.33.11");
        let p = ImageParts::of("10.0.0.1:5000/coredns/coredns:v1.12.0").expect("parts");
        assert_eq!(p.repository, "10.0.0.1:5000/coredns");
        let p = ImageParts::of("registry.k8s.io/pause:3.10").expect("parts");
        assert_eq!(
            (p.repository.as_str(), p.name.as_str()),
            ("registry.k8s.io", "pause")
        );
        assert!(ImageParts::of("registry.k8s.io/pause@sha256:abc").is_err());
    }
}
