//! hybridnet: the release's Helm chart (as KubeKey installs it) with KubeXM's values
//! (`templates/cni/hybridnet-values.yaml.tera`).
//!
//! The chart creates, at install, an `init` overlay Network and Subnet: its CIDR is the pod CIDR
//! (as KubeKey v3 sets `init.cidr`). Pods that ask for no network get
//! `network.hybridnet.defaultNetworkType` (`overlay`, or `underlay`: then an Underlay Network
//! and Subnet must be created with hybridnet's own resources before such pods start). The
//! manager, webhook and typha run as many replicas as there are masters, up to the chart's 3;
//! the image is pulled from the private registry.

use kubexm_manifests::resolve::Role;

use super::common::{cidrs, plugin_chart, split_image};
use crate::context::InstallContext;
use crate::modules::apply::{values_file, HelmRelease};
use crate::modules::k8s::image_named;
use crate::pipeline::ops::Op;
use crate::pipeline::{Facts, Node, Step, StepError};

/// The values template.
const TEMPLATE: &str = "cni/hybridnet-values.yaml.tera";

/// The rendered values file (what [`Hybridnet`] uploads).
pub fn render_hybridnet_values(ctx: &InstallContext) -> Result<String, StepError> {
    crate::templates::render(TEMPLATE, &values(ctx)?)
}

/// The values template's context.
fn values(ctx: &InstallContext) -> Result<tera::Context, StepError> {
    let net = &ctx.cluster.file.spec.network;
    let (init, version, family) = match cidrs(&net.pod_cidr) {
        (Some(v4), None) => (v4, "4", "IPv4"),
        (None, Some(v6)) => (v6, "6", "IPv6"),
        _ => {
            return Err(StepError::Invalid(
                "spec.network.podCidr: hybridnet takes one pod CIDR here (its chart creates one init subnet); dual-stack is not offered with hybridnet".into(),
            ))
        }
    };
    let masters = ctx
        .nodes
        .iter()
        .filter(|n| n.has_role(Role::Master))
        .count();
    let image = split_image(ctx, &image_named(ctx, "hybridnet")?)?;
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("image", &image);
    c.insert("init_cidr", &init);
    c.insert("ip_version", version);
    c.insert("ip_family", family);
    c.insert(
        "network_type",
        net.hybridnet
            .default_network_type
            .unwrap_or_default()
            .chart_value(),
    );
    c.insert("replicas", &masters.clamp(1, 3));
    Ok(c)
}

/// hybridnet's chart, installed.
pub struct Hybridnet(HelmRelease);

impl Hybridnet {
    /// The release with the cluster's values.
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let values = values_file(TEMPLATE, &values(ctx)?, "hybridnet-values.yaml")?;
        Ok(Self(plugin_chart(
            ctx,
            "hybridnet-chart",
            "hybridnet",
            "kube-system",
            values,
        )?))
    }
}

impl Step for Hybridnet {
    fn name(&self) -> &str {
        "hybridnet"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        self.0.ops(node, facts)
    }
}
