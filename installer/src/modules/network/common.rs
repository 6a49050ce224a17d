//! What the network plugins share: the primary plugin, their bundle files and charts, their
//! images as nodes pull them, the cluster's CIDRs split by family. Each plugin's file uses it;
//! it imports none of them.

use kubexm_manifests::model::Plugin;

use crate::context::InstallContext;
use crate::modules::apply::{bundle_upload, HelmRelease, MANIFESTS_DIR};
use crate::modules::images::node_image;
use crate::pipeline::ops::UploadFile;
use crate::pipeline::StepError;

/// The plugin that gives pods their default network: multus's delegate under multus, else
/// `network.plugin` (validation refuses multus without a delegate; it reads as multus here, which
/// is not implemented alone).
pub fn primary_plugin(net: &kubexm_manifests::model::Network) -> Plugin {
    match (net.plugin, net.multus.delegate) {
        (Plugin::Multus, Some(delegate)) => delegate,
        (p, _) => p,
    }
}

/// The bundle file of a network component (or, planning without a bundle, the resolver's).
pub(crate) fn plugin_file(
    ctx: &InstallContext,
    component: &str,
) -> Result<(std::path::PathBuf, kubexm_bundles::manifest::FileRecord), StepError> {
    let first = ctx.first_master()?;
    crate::modules::runtime::bundle_file(ctx, component, first)
}

/// The Helm release of a network plugin's bundled chart (`component`) with `values`.
pub(crate) fn plugin_chart(
    ctx: &InstallContext,
    component: &str,
    release: &str,
    namespace: &str,
    values: UploadFile,
) -> Result<HelmRelease, StepError> {
    let (path, rec) = plugin_file(ctx, component)?;
    let chart_file = rec.path.rsplit('/').next().unwrap_or(component).to_string();
    Ok(HelmRelease {
        name: release.into(),
        release: release.into(),
        namespace: namespace.into(),
        chart: bundle_upload(path, &rec, format!("{MANIFESTS_DIR}/{chart_file}")),
        values,
    })
}

/// Every `image:` of a YAML text rewritten to where nodes pull it; an image the bundle does not
/// have is an error naming it.
pub fn rewrite_images(ctx: &InstallContext, text: &str) -> Result<String, StepError> {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let end = &line[body.len()..];
        let trimmed = body.trim_start();
        let rest = trimmed
            .strip_prefix("- ")
            .unwrap_or(trimmed)
            .strip_prefix("image:");
        match rest {
            Some(value) if !value.trim().is_empty() && !value.trim().starts_with('#') => {
                let raw = value.split(" #").next().unwrap_or(value).trim();
                let unquoted = raw.trim_matches(|c| c == '"' || c == '\'');
                let image = node_image(ctx, unquoted)?;
                let prefix = &body[..body.len() - value.len()];
                out.push_str(prefix);
                out.push(' ');
                out.push_str(&image);
                out.push_str(end);
            }
            _ => out.push_str(line),
        }
    }
    Ok(out)
}

/// `REGISTRY/PATH` and the image's path as upstream names it (`tigera/operator`), split from
/// the reference nodes pull for the canonical `reference`: the longest tail of the canonical
/// repository path that the pulled reference ends with is the image, the rest the registry.
pub fn split_image(ctx: &InstallContext, reference: &str) -> Result<ImageLocation, StepError> {
    let canonical: kubexm_manifests::image_ref::ImageRef = reference
        .parse()
        .map_err(|e| StepError::Invalid(format!("image reference {reference}: {e}")))?;
    let pulled: kubexm_manifests::image_ref::ImageRef = node_image(ctx, reference)?
        .parse()
        .map_err(|e| StepError::Invalid(format!("image reference {reference}: {e}")))?;
    let full = format!("{}/{}", pulled.registry, pulled.repository);
    let parts: Vec<&str> = canonical.repository.split('/').collect();
    let image = (0..parts.len())
        .map(|i| parts[i..].join("/"))
        .find(|tail| full.ends_with(&format!("/{tail}")))
        .unwrap_or_else(|| canonical.basename().to_string());
    let registry = full[..full.len() - image.len() - 1].to_string();
    Ok(ImageLocation {
        registry,
        image,
        tag: pulled.tag.unwrap_or_default(),
    })
}

/// Where an image is pulled from, split for Helm values.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImageLocation {
    /// Registry host with any path above the image (`10.0.0.1:5000/kubexm`).
    pub registry: String,
    /// The image's path as upstream names it (`tigera/operator`, or `operator` flattened).
    pub image: String,
    /// Tag.
    pub tag: String,
}

impl ImageLocation {
    /// `registry/image` (a Helm chart's `repository`).
    pub fn repository(&self) -> String {
        format!("{}/{}", self.registry, self.image)
    }
}

/// The first IPv4 and IPv6 CIDRs of a (possibly dual-stack) CIDR list.
pub(crate) fn cidrs(list: &str) -> (Option<String>, Option<String>) {
    let mut v4 = None;
    let mut v6 = None;
    for c in list.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        if c.contains(':') {
            v6.get_or_insert_with(|| c.to_string());
        } else {
            v4.get_or_insert_with(|| c.to_string());
        }
    }
    (v4, v6)
}
