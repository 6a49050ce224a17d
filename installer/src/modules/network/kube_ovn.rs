//! kube-ovn: the release's Helm chart (as KubeKey v4 installs it) with KubeXM's values
//! (`templates/cni/kube-ovn-values.yaml.tera`), after every master is labelled
//! `kube-ovn/role=master` (the chart schedules ovn-central and its controller there).
//!
//! The values set what the cluster decides: the IP stack (`ipv4`, `ipv6` or `dual_stack`) with
//! the pod CIDR, its gateway (the CIDR's first address), the service CIDR and the join CIDR
//! (`network.kubeOvn.joinCidr`, or kube-ovn's default), the tunnel (`network.kubeOvn.mode`), the
//! masters' internal addresses (`MASTER_NODES`, which the chart would otherwise look up from
//! the labelled nodes) and where the images are pulled from (the private registry).

use crate::script;
use std::net::IpAddr;

use kubexm_manifests::resolve::Role;
use serde::Serialize;

use super::common::{cidrs, plugin_chart, split_image, ImageLocation};
use crate::context::InstallContext;
use crate::modules::apply::{values_file, HelmRelease};
use crate::modules::k8s::image_named;
use crate::modules::k8s::kubectl;
use crate::modules::kubeadm::labels::LABELS;
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Facts, Node, Step, StepError};
use crate::runner::shell;

/// The label kube-ovn's chart selects its control plane (ovn-central, the controller) by.
pub const MASTER_LABEL: &str = "kube-ovn/role=master";
/// kube-ovn's join subnet when `network.kubeOvn.joinCidr` is unset (its chart's default).
const DEFAULT_JOIN_V4: &str = "100.64.0.0/16";
/// Its IPv6 join subnet.
const DEFAULT_JOIN_V6: &str = "fd00:100:64::/112";

/// One address family's section of the values (`ipv4`, `ipv6` or `dual_stack`).
#[derive(Debug, Clone, Serialize)]
struct Family {
    pod_cidr: String,
    pod_gateway: String,
    service_cidr: String,
    join_cidr: String,
}

/// The first address of a CIDR (the gateway kube-ovn gives its default subnet).
fn gateway(cidr: &str) -> Result<String, StepError> {
    let bad = || StepError::Invalid(format!("spec.network.podCidr `{cidr}` is not a CIDR"));
    let (addr, prefix) = cidr.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let prefix: u32 = prefix.parse().map_err(|_| bad())?;
    Ok(match addr {
        IpAddr::V4(a) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
            IpAddr::from(((u32::from(a) & mask).saturating_add(1)).to_be_bytes()).to_string()
        }
        IpAddr::V6(a) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
            IpAddr::from(((u128::from(a) & mask).saturating_add(1)).to_be_bytes()).to_string()
        }
        _ => return Err(bad()),
    })
}

/// The values template.
const TEMPLATE: &str = "cni/kube-ovn-values.yaml.tera";

/// The rendered values file (what [`KubeOvn`] uploads).
pub fn render_kube_ovn_values(ctx: &InstallContext) -> Result<String, StepError> {
    crate::templates::render(TEMPLATE, &values(ctx)?)
}

/// The values template's context.
fn values(ctx: &InstallContext) -> Result<tera::Context, StepError> {
    let net = &ctx.cluster.file.spec.network;
    let (pod4, pod6) = cidrs(&net.pod_cidr);
    let (svc4, svc6) = cidrs(&net.service_cidr);
    let (join4, join6) = net
        .kube_ovn
        .join_cidr
        .as_deref()
        .map(cidrs)
        .unwrap_or_default();
    let family =
        |pod: &Option<String>, svc: &Option<String>, join: Option<String>, default: &str| {
            pod.as_ref()
                .map(|p| {
                    Ok::<_, StepError>(Family {
                        pod_cidr: p.clone(),
                        pod_gateway: gateway(p)?,
                        service_cidr: svc.clone().unwrap_or_default(),
                        join_cidr: join.unwrap_or_else(|| default.to_string()),
                    })
                })
                .transpose()
        };
    let v4 = family(&pod4, &svc4, join4, DEFAULT_JOIN_V4)?;
    let v6 = family(&pod6, &svc6, join6, DEFAULT_JOIN_V6)?;
    let (stack, section) = match (v4, v6) {
        (Some(a), Some(b)) => (
            "dual_stack",
            Family {
                pod_cidr: format!("{},{}", a.pod_cidr, b.pod_cidr),
                pod_gateway: format!("{},{}", a.pod_gateway, b.pod_gateway),
                service_cidr: format!("{},{}", a.service_cidr, b.service_cidr),
                join_cidr: format!("{},{}", a.join_cidr, b.join_cidr),
            },
        ),
        (Some(a), None) => ("ipv4", a),
        (None, Some(b)) => ("ipv6", b),
        (None, None) => {
            return Err(StepError::Invalid(
                "spec.network.podCidr: kube-ovn needs a pod CIDR".into(),
            ))
        }
    };
    let masters: Vec<&str> = ctx
        .nodes
        .iter()
        .filter(|n| n.has_role(Role::Master))
        .map(|n| n.internal_address.as_str())
        .collect();
    let image = split_image(ctx, &image_named(ctx, "kube-ovn")?)?;
    let nat = split_image(ctx, &image_named(ctx, "vpc-nat-gateway")?)?;
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("address", &address(&image));
    c.insert("repository", &basename(&image));
    c.insert("tag", &image.tag);
    c.insert("nat_repository", &basename(&nat));
    c.insert("nat_tag", &nat.tag);
    c.insert("masters", &masters.join(","));
    c.insert("master_label", MASTER_LABEL);
    c.insert("stack", stack);
    c.insert("section", &section);
    c.insert(
        "tunnel",
        net.kube_ovn.common.mode.as_deref().unwrap_or("geneve"),
    );
    Ok(c)
}

/// Where kube-ovn's images sit: the registry and any path above the image's own name (the chart
/// composes `address/repository:tag`).
fn address(i: &ImageLocation) -> String {
    match i.image.rsplit_once('/') {
        Some((parent, _)) => format!("{}/{parent}", i.registry),
        None => i.registry.clone(),
    }
}

/// The image's own name (`kube-ovn` of `kubeovn/kube-ovn`).
fn basename(i: &ImageLocation) -> String {
    i.image.rsplit('/').next().unwrap_or(&i.image).to_string()
}

/// kube-ovn's chart, installed.
pub struct KubeOvn(HelmRelease);

impl KubeOvn {
    /// The release with the cluster's values.
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let values = values_file(TEMPLATE, &values(ctx)?, "kube-ovn-values.yaml")?;
        Ok(Self(plugin_chart(
            ctx,
            "kube-ovn-chart",
            "kube-ovn",
            "kube-system",
            values,
        )?))
    }
}

impl Step for KubeOvn {
    fn name(&self) -> &str {
        "kube-ovn"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        self.0.ops(node, facts)
    }
}

/// Every master labelled `kube-ovn/role=master` (checked first; the revert removes the label).
pub struct KubeOvnMasters {
    masters: Vec<String>,
}

impl KubeOvnMasters {
    /// The cluster's masters.
    pub fn new(ctx: &InstallContext) -> Self {
        Self {
            masters: ctx
                .nodes
                .iter()
                .filter(|n| n.has_role(Role::Master))
                .map(|n| n.name.clone())
                .collect(),
        }
    }
}

impl Step for KubeOvnMasters {
    fn name(&self) -> &str {
        "kube-ovn-masters"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl();
        let key = MASTER_LABEL.split('=').next().unwrap_or(MASTER_LABEL);
        let label = shell::quoted(MASTER_LABEL);
        Ok(self
            .masters
            .iter()
            .map(|m| {
                let n = shell::quoted(m);
                Op::Run(
                    RunCommand::new(script!("{k} label node {n} --overwrite {label} >/dev/null", k = k, n = n, label = label))
                        .unless(script!(
                            "l=$({k} get node {n} -o {labels}) && printf '%s\\n' \"$l\" | grep -qxF -- {label}",
                            k = k,
                            n = n,
                            labels = LABELS,
                            label = label
                        ))
                        .undo(script!(
                            "{k} label node {n} {key} >/dev/null 2>&1 || true",
                            k = k,
                            n = n,
                            key = format!("{key}-")
                        )),
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::gateway;

    #[test]
    fn the_gateway_is_the_first_address_of_the_cidr() {
        assert_eq!(gateway("10.233.64.0/18").expect("v4"), "10.233.64.1");
        assert_eq!(gateway("10.233.64.7/18").expect("host bits"), "10.233.64.1");
        assert_eq!(gateway("fd00:10:233::/64").expect("v6"), "fd00:10:233::1");
        assert_eq!(gateway("0.0.0.0/0").expect("whole"), "0.0.0.1");
        assert!(gateway("10.0.0.0/33").is_err());
        assert!(gateway("10.0.0.0").is_err());
    }
}
