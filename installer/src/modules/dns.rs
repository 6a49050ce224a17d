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
use crate::context::InstallContext;
use crate::modules::k8s::image_named;
use crate::pipeline::{Module, StepError, Task};

/// The address NodeLocal DNSCache answers on, on every node (the kubelet's `clusterDNS`), on
/// clusters with IPv4 services.
pub const NODELOCAL_DNS_IP: &str = kubexm_manifests::validate::NODELOCAL_DNS_IPV4;
/// The address it answers on for IPv6 services: a Unique Local Address, as the Kubernetes
/// documentation recommends for the cache's listen address on IPv6 ("Using NodeLocal DNSCache
/// in Kubernetes Clusters": any address that cannot collide, from 169.254.0.0/16 for IPv4 or
/// fd00::/8 for IPv6). `fd6b:786d::/32` ("kxm") holds 169.254.25.10 in its last 32 bits,
/// far from the `fd00::/…` ranges pod and service CIDRs usually take.
pub const NODELOCAL_DNS_IPV6: &str = kubexm_manifests::validate::NODELOCAL_DNS_IPV6;

/// The addresses NodeLocal DNSCache answers on and the kubelet's `clusterDNS`: one per family
/// of the service CIDR, in its order (IPv4-only: [`NODELOCAL_DNS_IP`]; IPv6-only:
/// [`NODELOCAL_DNS_IPV6`]; dual-stack: both, the primary family first).
pub fn local_ips(ctx: &InstallContext) -> Vec<&'static str> {
    let mut ips = Vec::new();
    for cidr in ctx.cluster.file.spec.network.service_cidr.split(',') {
        let ip = if cidr.contains(':') {
            NODELOCAL_DNS_IPV6
        } else {
            NODELOCAL_DNS_IP
        };
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    if ips.is_empty() {
        ips.push(NODELOCAL_DNS_IP);
    }
    ips
}

/// The kubelet's `--node-ip` for `node`: its internal address, and on a dual-stack cluster
/// (pod CIDRs of both families) also its `internalAddressV6` when cluster.yaml gives one.
pub fn node_ip(ctx: &InstallContext, node: &crate::pipeline::Node) -> String {
    let net = &ctx.cluster.file.spec.network;
    let dual = net.pod_cidr.contains(':') && net.pod_cidr.contains('.');
    let v6 = ctx
        .cluster
        .file
        .spec
        .hosts
        .iter()
        .find(|h| h.name == node.name)
        .and_then(|h| h.internal_address_v6.as_deref());
    match v6 {
        Some(v6) if dual && !node.internal_address.contains(':') => {
            format!("{},{v6}", node.internal_address)
        }
        _ => node.internal_address.clone(),
    }
}
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
    let ips = local_ips(ctx);
    c.insert("local_ip", ips[0]);
    c.insert("local_ips", &ips);
    // CoreDNS's `health` takes HOST:PORT: an IPv6 address in brackets.
    c.insert(
        "health_host",
        &if ips[0].contains(':') {
            format!("[{}]", ips[0])
        } else {
            ips[0].to_string()
        },
    );
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
