//! calico: the release's `tigera-operator` Helm chart with KubeXM's values.

use serde::Serialize;

use super::common::{cidrs, plugin_file, split_image, ImageLocation};
use crate::context::InstallContext;
use crate::modules::apply::{bundle_upload, values_file, HelmRelease, MANIFESTS_DIR};
use crate::modules::k8s::image_named;
use crate::pipeline::ops::Op;
use crate::pipeline::{Facts, Node, Step, StepError};

/// One calico IP pool.
#[derive(Debug, Clone, Serialize)]
struct Pool {
    name: &'static str,
    cidr: String,
    encapsulation: &'static str,
    block_size: u8,
}

/// calico's chart, installed.
pub struct Calico(HelmRelease);

impl Calico {
    /// The release with the cluster's values.
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let net = &ctx.cluster.file.spec.network;
        let (path, rec) = plugin_file(ctx, "calico-chart")?;
        let chart_file = rec.path.rsplit('/').next().unwrap_or("tigera-operator.tgz");
        let mode = net.calico.mode.as_deref().unwrap_or("ipip");
        let (encapsulation, bgp) = match mode {
            "vxlan" => ("VXLAN", "Disabled"),
            "ipip" => ("IPIP", "Enabled"),
            _ => ("None", "Enabled"),
        };
        let (v4, v6) = cidrs(&net.pod_cidr);
        let mut pools = Vec::new();
        if let Some(c) = v4 {
            pools.push(Pool {
                name: "default-ipv4-ippool",
                cidr: c,
                encapsulation,
                block_size: 26,
            });
        }
        if let Some(c) = v6 {
            pools.push(Pool {
                name: "default-ipv6-ippool",
                cidr: c,
                // IPIP carries IPv4 only.
                encapsulation: if encapsulation == "IPIP" {
                    "None"
                } else {
                    encapsulation
                },
                block_size: 122,
            });
        }
        let operator = split_image(ctx, &image_named(ctx, "operator")?)?;
        let node = split_image(ctx, &image_named(ctx, "node")?)?;
        // calico's images share one registry and path: `<registry>/<imagePath>/<name>`.
        let (registry, image_path) = match node.registry.split_once('/') {
            Some((host, path)) => (format!("{host}/"), format!("{path}/{}", parent(&node))),
            None => (format!("{}/", node.registry), parent(&node)),
        };
        let image_path = image_path.trim_matches('/').to_string();
        if image_path.is_empty() {
            return Err(StepError::Invalid(
                "calico needs its images under a path in the registry: set registry.namespace, or registry.rewrite keep-path".into(),
            ));
        }
        let mut c = tera::Context::new();
        c.insert("cluster", &ctx.cluster.file.metadata.name);
        c.insert("registry", &registry);
        c.insert("image_path", &image_path);
        c.insert("bgp", bgp);
        c.insert("pools", &pools);
        c.insert("mtu", &net.calico.mtu);
        c.insert("operator", &operator);
        let values = values_file("cni/calico-values.yaml.tera", &c, "calico-values.yaml")?;
        Ok(Self(HelmRelease {
            name: "calico".into(),
            release: "calico".into(),
            namespace: "tigera-operator".into(),
            chart: bundle_upload(path, &rec, format!("{MANIFESTS_DIR}/{chart_file}")),
            values,
        }))
    }
}

/// The path of an image above its own name (`calico` of `calico/node`; empty when flattened).
fn parent(i: &ImageLocation) -> String {
    i.image
        .rsplit_once('/')
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

impl Step for Calico {
    fn name(&self) -> &str {
        "calico"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        self.0.ops(node, facts)
    }
}
