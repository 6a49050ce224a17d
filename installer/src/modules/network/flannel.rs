//! flannel: the release's `kube-flannel.yml` from the bundle, rendered for the cluster.

use super::common::{cidrs, plugin_file, rewrite_images};
use crate::context::InstallContext;
use crate::modules::apply::{ApplyManifest, MANIFESTS_DIR};
use crate::pipeline::ops::{Op, UploadFile};
use crate::pipeline::{Facts, Node, Step, StepError};
use crate::runner::UploadSource;

/// The rendered manifest on the first master.
pub const FLANNEL_MANIFEST: &str = "kube-flannel.yml";

/// flannel's manifest, applied.
pub struct Flannel(ApplyManifest);

impl Flannel {
    /// Renders the bundle's manifest (planning without a bundle: the bundle path, unrendered).
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let (path, rec) = plugin_file(ctx, "flannel-manifest")?;
        let dest = format!("{MANIFESTS_DIR}/{FLANNEL_MANIFEST}");
        let file = match &ctx.bundle {
            Some(_) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    StepError::Invalid(format!(
                        "cannot read the bundle's flannel manifest {}: {e}",
                        path.display()
                    ))
                })?;
                UploadFile::bytes(render_flannel(ctx, &text)?.into_bytes(), dest, 0o600)
            }
            None => UploadFile {
                source: UploadSource::File(path),
                sha256: format!("{} (rendered from the bundle)", rec.sha256),
                dest,
                mode: 0o600,
            },
        };
        Ok(Self(ApplyManifest {
            name: "flannel".into(),
            file,
            namespace: None,
        }))
    }
}

impl Step for Flannel {
    fn name(&self) -> &str {
        "flannel"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        self.0.ops(node, facts)
    }
}

/// Sets `"<key>": "<value>"` in flannel's `net-conf.json` (the first occurrence of the key).
fn set_json_string(text: &str, key: &str, value: &str) -> Option<String> {
    let needle = format!("\"{key}\": \"");
    let start = text.find(&needle)? + needle.len();
    let end = start + text[start..].find('"')?;
    Some(format!("{}{value}{}", &text[..start], &text[end..]))
}

/// `kube-flannel.yml` for the cluster: the pod CIDR in `net-conf.json` (with `EnableIPv6` and
/// `IPv6Network` for dual-stack), the backend type from `network.flannel.mode`, images where
/// nodes pull them.
pub fn render_flannel(ctx: &InstallContext, text: &str) -> Result<String, StepError> {
    let net = &ctx.cluster.file.spec.network;
    let unknown = |what: &str| {
        StepError::Invalid(format!(
            "the bundle's kube-flannel.yml has no {what} in net-conf.json: it is not a flannel manifest this KubeXM can render"
        ))
    };
    let (v4, v6) = cidrs(&net.pod_cidr);
    let v4 = v4.ok_or_else(|| {
        StepError::Invalid(
            "flannel needs an IPv4 pod CIDR (network.podCidr): IPv6-only is not supported".into(),
        )
    })?;
    let mut out = set_json_string(text, "Network", &v4).ok_or_else(|| unknown("\"Network\""))?;
    if let Some(v6) = v6 {
        let at = out
            .find("\"Network\":")
            .ok_or_else(|| unknown("\"Network\""))?;
        let indent: String = out[..at]
            .rsplit('\n')
            .next()
            .unwrap_or("")
            .chars()
            .take_while(|c| c.is_whitespace())
            .collect();
        out.insert_str(
            at,
            &format!("\"EnableIPv6\": true,\n{indent}\"IPv6Network\": \"{v6}\",\n{indent}"),
        );
    }
    if let Some(mode) = &net.flannel.mode {
        out = set_json_string(&out, "Type", mode).ok_or_else(|| unknown("backend \"Type\""))?;
    }
    rewrite_images(ctx, &out)
}
