//! Module: NodeLocal DNSCache, from the first master, for both installation paths.
//!
//! A `node-local-dns` DaemonSet (image from the private registry) answers on the link-local
//! [`NODELOCAL_DNS_IP`] on every node and caches: the cluster domain and reverse zones go to
//! CoreDNS through the `kube-dns-upstream` Service (the cache fills in that Service's address
//! at start), everything else to the node's resolvers. The kubelet's `clusterDNS` is that
//! address (see the kubeadm configuration), so pods ask the cache on their own node. Only the
//! link-local address is bound, which works with every kube-proxy mode (in IPVS mode the
//! kube-dns Service address is taken by kube-ipvs0).
//!
//! The manifest is KubeXM's own template (`templates/dns/nodelocaldns.yaml.tera`): the addon
//! is a few standard objects, and its upstream file is a template with placeholders, not a
//! release asset to bundle.

use std::sync::Arc;

use super::apply::ApplyManifest;
use super::images::node_image;
use super::kubeadm::config::image_named;
use crate::context::InstallContext;
use crate::pipeline::{Module, StepError, Task};

/// The address NodeLocal DNSCache answers on, on every node (the kubelet's `clusterDNS`).
pub const NODELOCAL_DNS_IP: &str = "169.254.25.10";
/// The manifest's file name on the first master.
pub const MANIFEST: &str = "nodelocaldns.yaml";

/// The NodeLocal DNSCache module.
pub struct NodeLocalDnsModule(pub Arc<InstallContext>);

/// The rendered manifest.
pub fn render(ctx: &InstallContext) -> Result<String, StepError> {
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert(
        "image",
        &node_image(ctx, &image_named(ctx, "k8s-dns-node-cache")?)?,
    );
    c.insert("local_ip", NODELOCAL_DNS_IP);
    c.insert("dns_domain", &ctx.cluster.file.spec.kubernetes.dns_domain);
    crate::templates::render("dns/nodelocaldns.yaml.tera", &c)
}

impl Module for NodeLocalDnsModule {
    fn name(&self) -> &str {
        "nodelocaldns"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let first = ctx.first_master()?.name.clone();
        Ok(vec![Task::new("nodelocaldns", [first]).step(
            ApplyManifest::rendered("nodelocaldns", MANIFEST, render(ctx)?.into_bytes()),
        )])
    }
}
