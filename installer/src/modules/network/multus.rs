//! multus: KubeXM's own manifest of the thin plugin (`templates/cni/multus.yaml.tera`) over a
//! delegate installed as it would be alone.
//!
//! Upstream ships a quick-start manifest only ("does not care about various configuration
//! options ... upgrade/update/uninstall"), with its image at a moving tag, so KubeXM writes the
//! few objects itself: the NetworkAttachmentDefinition CRD, RBAC and the DaemonSet, whose image
//! is the catalog's `multus` group (bundled and pulled from the private registry like every
//! other). The DaemonSet generates multus's configuration from the delegate's (the first other
//! file in `/etc/cni/net.d`), so nothing of the delegate's own configuration is repeated here.

use std::time::Duration;

use crate::context::InstallContext;
use crate::modules::apply::ApplyManifest;
use crate::modules::images::node_image;
use crate::modules::k8s::image_named;
use crate::modules::k8s::kubectl;
use crate::pipeline::ops::{Op, WaitFor};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// The rendered manifest's file name on the first master.
pub const MULTUS_MANIFEST: &str = "multus.yaml";

/// The multus image's last path component in the catalog's `multus` group.
const IMAGE: &str = "multus-cni";

/// The rendered manifest: the image where nodes pull it, the delegate named in its header.
pub fn render_multus(ctx: &InstallContext) -> Result<String, StepError> {
    let net = &ctx.cluster.file.spec.network;
    let delegate = net.multus.delegate.ok_or_else(|| {
        StepError::Invalid(
            "spec.network.multus.delegate: multus needs a primary plugin to delegate to".into(),
        )
    })?;
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("delegate", delegate.as_str());
    c.insert("image", &node_image(ctx, &image_named(ctx, IMAGE)?)?);
    crate::templates::render("cni/multus.yaml.tera", &c)
}

/// multus's manifest, applied.
pub struct Multus(ApplyManifest);

impl Multus {
    /// The rendered manifest.
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        Ok(Self(ApplyManifest::rendered(
            "multus",
            MULTUS_MANIFEST,
            render_multus(ctx)?.into_bytes(),
        )))
    }
}

impl Step for Multus {
    fn name(&self) -> &str {
        "multus"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        self.0.ops(node, facts)
    }
}

/// Waits until multus runs on every node it is scheduled to (its DaemonSet rolled out).
pub struct MultusReady;

impl Step for MultusReady {
    fn name(&self) -> &str {
        "multus-ready"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: "the multus DaemonSet rolled out".into(),
            check: format!(
                "{} -n kube-system rollout status daemonset/kube-multus-ds --timeout=10s >/dev/null",
                kubectl()
            ),
            timeout: Duration::from_secs(600),
            interval: Duration::from_secs(3),
        })])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(660),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}
