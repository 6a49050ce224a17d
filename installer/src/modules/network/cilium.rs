//! cilium: the release's Helm chart with KubeXM's values.

use std::collections::BTreeMap;

use super::common::{cidrs, plugin_file, split_image, ImageLocation};
use crate::context::InstallContext;
use crate::modules::apply::{bundle_upload, values_file, HelmRelease, MANIFESTS_DIR};
use crate::modules::k8s::image_named;
use crate::pipeline::ops::Op;
use crate::pipeline::{Facts, Node, Step, StepError};

/// The chart's image values and the cluster image each one is (by last path component); the
/// chart appends `-generic` to the operator's repository itself.
const IMAGES: &[(&str, &str)] = &[
    ("cilium", "cilium"),
    ("operator", "operator-generic"),
    ("envoy", "cilium-envoy"),
    ("relay", "hubble-relay"),
    ("ui_frontend", "hubble-ui"),
    ("ui_backend", "hubble-ui-backend"),
    ("certgen", "certgen"),
    ("clustermesh", "clustermesh-apiserver"),
    ("nodeinit", "startup-script"),
];

/// cilium's chart, installed.
pub struct Cilium(HelmRelease);

impl Cilium {
    /// The release with the cluster's values.
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let net = &ctx.cluster.file.spec.network;
        let (path, rec) = plugin_file(ctx, "cilium-chart")?;
        let chart_file = rec.path.rsplit('/').next().unwrap_or("cilium.tgz");
        let mut images: BTreeMap<&str, ImageLocation> = BTreeMap::new();
        for (key, name) in IMAGES {
            let mut loc = split_image(ctx, &image_named(ctx, name)?)?;
            if *key == "operator" {
                loc.image = loc
                    .image
                    .strip_suffix("-generic")
                    .unwrap_or(&loc.image)
                    .to_string();
            }
            images.insert(key, loc);
        }
        let repositories: BTreeMap<&str, String> =
            images.iter().map(|(k, v)| (*k, v.repository())).collect();
        let tags: BTreeMap<&str, String> =
            images.iter().map(|(k, v)| (*k, v.tag.clone())).collect();
        let (v4, v6) = cidrs(&net.pod_cidr);
        // The agents run on the host network: the endpoint that survives any one master.
        let (api_host, api_port) = crate::modules::internal_lb::api_for_host_network(ctx)?;
        let mut c = tera::Context::new();
        c.insert("cluster", &ctx.cluster.file.metadata.name);
        c.insert("cluster_name", ctx.cluster.cluster_name());
        c.insert("api_host", &api_host);
        c.insert("api_port", &api_port);
        c.insert("tunnel", net.cilium.mode.as_deref().unwrap_or("vxlan"));
        c.insert("mtu", &net.cilium.mtu);
        c.insert("v4", &v4);
        c.insert("v6", &v6);
        c.insert("repository", &repositories);
        c.insert("tag", &tags);
        // Under multus, cilium must leave the other CNI configurations in place.
        c.insert(
            "exclusive",
            &(net.plugin != kubexm_manifests::model::Plugin::Multus),
        );
        let values = values_file("cni/cilium-values.yaml.tera", &c, "cilium-values.yaml")?;
        Ok(Self(HelmRelease {
            name: "cilium".into(),
            release: "cilium".into(),
            namespace: "kube-system".into(),
            chart: bundle_upload(path, &rec, format!("{MANIFESTS_DIR}/{chart_file}")),
            values,
        }))
    }
}

impl Step for Cilium {
    fn name(&self) -> &str {
        "cilium"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        self.0.ops(node, facts)
    }
}
