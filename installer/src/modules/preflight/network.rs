//! The network each node really has, against what cluster.yaml says (issue 19, prechecks):
//!
//! * every node's internal address (and on a dual-stack cluster its `internalAddressV6`, both
//!   go into the kubelet's `--node-ip`) is assigned to one of its interfaces;
//! * `spec.loadBalancer.interface` exists on every node that puts the VIP on it (kube-vip: the
//!   masters; keepalived: the `loadbalancer` hosts);
//! * the VIP does not answer before it is ours: probed from the first holder (ping, and iputils
//!   arping where present); an answer is refused unless the VIP is on an interface of one of
//!   this cluster's nodes (a re-run, or day-2 on the installed cluster, where kube-vip or
//!   keepalived already holds it).
//!
//! Decided on the control host from the facts gathered on the nodes ([`crate::facts::net`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use kubexm_manifests::model::{ExternalLbType, InternalLbType, LbMode};
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::facts::net::{self, IfaceName, NetFacts, VipProbe};
use crate::pipeline::ops::{LearnFacts, Op, Require, Verdict};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// An address a node must hold, with the field that sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedAddress {
    /// `spec.hosts[1].internalAddress`.
    pub field: String,
    /// The address.
    pub addr: IpAddr,
}

/// The VIP and who may hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipRule {
    /// `spec.loadBalancer.vip`.
    pub vip: IpAddr,
    /// `spec.loadBalancer.interface`.
    pub interface: String,
    /// What puts it there (`kube-vip`, `keepalived`).
    pub holder_kind: &'static str,
    /// The nodes that may hold it, in order; the first probes it.
    pub holders: Vec<String>,
}

/// The network rules for one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetRules {
    /// Per node: the addresses it must hold.
    pub addresses: BTreeMap<String, Vec<WantedAddress>>,
    /// The VIP, when kube-vip or keepalived (KubeXM's) puts one on an interface.
    pub vip: Option<VipRule>,
    /// Every node of the cluster (whose facts show who holds the VIP).
    pub nodes: Vec<String>,
}

fn dual_stack(pod_cidr: &str) -> bool {
    let nets: Vec<&str> = pod_cidr.split(',').collect();
    nets.iter().any(|n| n.contains(':')) && nets.iter().any(|n| n.contains('.'))
}

impl NetRules {
    /// The rules `ctx`'s cluster sets.
    pub fn of(ctx: &InstallContext) -> Self {
        let spec = &ctx.cluster.file.spec;
        let dual = dual_stack(&spec.network.pod_cidr);
        let mut addresses = BTreeMap::new();
        for (i, h) in spec.hosts.iter().enumerate() {
            let mut want = Vec::new();
            let field = if h.internal_address.is_some() {
                "internalAddress"
            } else {
                "address"
            };
            if let Ok(addr) = h.internal().parse::<IpAddr>() {
                want.push(WantedAddress {
                    field: format!("spec.hosts[{i}].{field}"),
                    addr,
                });
            }
            // As the kubelet's `--node-ip` takes it (`dns::node_ip`): beside an IPv4 address.
            let v4 = !h.internal().contains(':');
            if let Some(v6) = h.internal_address_v6.as_deref().filter(|_| dual && v4) {
                if let Ok(addr) = v6.parse::<IpAddr>() {
                    want.push(WantedAddress {
                        field: format!("spec.hosts[{i}].internalAddressV6"),
                        addr,
                    });
                }
            }
            addresses.insert(h.name.clone(), want);
        }
        let lb = &spec.load_balancer;
        let holder = match lb.mode {
            LbMode::Internal if lb.internal.kind == InternalLbType::KubeVip => {
                Some(("kube-vip", Role::Master))
            }
            LbMode::External
                if matches!(
                    lb.external.kind,
                    ExternalLbType::KubexmKh | ExternalLbType::KubexmKn
                ) =>
            {
                Some(("keepalived", Role::Loadbalancer))
            }
            _ => None,
        };
        let vip = match (holder, lb.vip.as_deref(), lb.interface.as_deref()) {
            (Some((kind, role)), Some(vip), Some(interface)) => {
                vip.parse::<IpAddr>().ok().map(|vip| VipRule {
                    vip,
                    interface: interface.to_string(),
                    holder_kind: kind,
                    holders: ctx.with_role(role),
                })
            }
            _ => None,
        };
        Self {
            addresses,
            vip,
            nodes: ctx.all(),
        }
    }

    /// The per-node rules in one line (the plan).
    pub fn describe(&self, node: &str) -> String {
        let mut parts: Vec<String> = self
            .addresses
            .get(node)
            .into_iter()
            .flatten()
            .map(|w| format!("{} ({}) assigned to an interface", w.addr, w.field))
            .collect();
        if let Some(v) = self
            .vip
            .as_ref()
            .filter(|v| v.holders.iter().any(|h| h == node))
        {
            parts.push(format!(
                "interface {} present (spec.loadBalancer.interface, {})",
                v.interface, v.holder_kind
            ));
        }
        if parts.is_empty() {
            "nothing to check".to_string()
        } else {
            parts.join("; ")
        }
    }

    /// The verdict for `node` with its `facts`: every problem at once.
    pub fn judge(&self, node: &str, facts: &NetFacts) -> Verdict {
        let mut errors = Vec::new();
        for w in self.addresses.get(node).into_iter().flatten() {
            if facts.holder_of(w.addr).is_none() {
                errors.push(format!(
                    "node {node}: {} {} is not assigned to any interface of the node (`ip -o addr` shows {}); set {} to an address the node has, or assign {} to one of its interfaces",
                    w.field,
                    w.addr,
                    facts.describe_family(w.addr.is_ipv4()),
                    w.field,
                    w.addr
                ));
            }
        }
        if let Some(v) = self
            .vip
            .as_ref()
            .filter(|v| v.holders.iter().any(|h| h == node))
        {
            let present =
                IfaceName::new(&v.interface).is_some_and(|i| facts.interfaces.contains(&i));
            if !present {
                errors.push(format!(
                    "node {node} has no network interface `{}` (spec.loadBalancer.interface: {} puts the VIP {} on it there); its interfaces: {}; set spec.loadBalancer.interface to an interface every {} has",
                    v.interface,
                    v.holder_kind,
                    v.vip,
                    facts.describe_interfaces(),
                    if v.holder_kind == "kube-vip" { "master" } else { "loadbalancer host" }
                ));
            }
        }
        if errors.is_empty() {
            Ok(Vec::new())
        } else {
            Err(errors.join("\n"))
        }
    }
}

impl VipRule {
    /// The rule in one line (the plan).
    pub fn describe(&self) -> String {
        format!(
            "the VIP {} (spec.loadBalancer.vip) answers only when one of this cluster's nodes holds it",
            self.vip
        )
    }

    /// The verdict from `probe` (run on `from`) and every node's network facts (`None`: not
    /// gathered on that node).
    pub fn judge(
        &self,
        from: &str,
        probe: VipProbe,
        nodes: &[(String, Option<NetFacts>)],
    ) -> Verdict {
        use crate::facts::net::ProbeAnswer;
        let ours = nodes.iter().find_map(|(name, f)| {
            f.as_ref()
                .and_then(|f| f.holder_of(self.vip))
                .map(|i| (name, i))
        });
        if let Some((name, iface)) = ours {
            return Ok(vec![format!(
                "the VIP {} is already on {iface} of node {name} (this cluster's {}): not checked for another user",
                self.vip, self.holder_kind
            )]);
        }
        if !probe.answered() {
            if probe.ping == ProbeAnswer::Absent && probe.arping == ProbeAnswer::Absent {
                return Ok(vec![format!(
                    "node {from} has neither ping nor iputils arping: whether the VIP {} is already in use was not checked",
                    self.vip
                )]);
            }
            return Ok(Vec::new());
        }
        let unknown: Vec<&str> = nodes
            .iter()
            .filter(|(_, f)| f.is_none())
            .map(|(n, _)| n.as_str())
            .collect();
        let mut msg = format!(
            "the VIP {} (spec.loadBalancer.vip) is already in use: probed from node {from}, it answers ({}), and no node of this cluster has it on an interface",
            self.vip,
            probe.summary()
        );
        if !unknown.is_empty() {
            msg.push_str(&format!(
                " (the interfaces of {} were not learned)",
                unknown.join(", ")
            ));
        }
        msg.push_str(&format!(
            "; {} would fight another machine for it: set spec.loadBalancer.vip to a free address of the nodes' network, or free {}",
            self.holder_kind, self.vip
        ));
        Err(msg)
    }
}

/// Learns the node's interfaces and addresses ([`crate::facts::net::PROBE`]).
pub struct GatherNetFacts;

impl Step for GatherNetFacts {
    fn name(&self) -> &str {
        "gather-net-facts"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "interfaces and addresses".into(),
            script: net::PROBE.into(),
            parse: net::learn,
            facts: facts.clone(),
            prefix: net::fact_prefix(&node.name),
            timeout: std::time::Duration::from_secs(60),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

/// Decides from the gathered facts whether the node holds its addresses and the VIP's
/// interface.
pub struct CheckNodeNetwork(pub Arc<NetRules>);

impl Step for CheckNodeNetwork {
    fn name(&self) -> &str {
        "check-node-network"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Require(Require {
            what: "node network".into(),
            rules: self.0.describe(&node.name),
            verdict: NetFacts::from_facts(facts, &node.name).map(|f| self.0.judge(&node.name, &f)),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

/// Probes the VIP from the node (ping; iputils arping on the VIP's interface).
pub struct ProbeVip(pub VipRule);

impl Step for ProbeVip {
    fn name(&self) -> &str {
        "probe-vip"
    }
    fn ops(&self, _: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let iface = IfaceName::new(&self.0.interface).ok_or_else(|| {
            StepError::Invalid(format!(
                "spec.loadBalancer.interface `{}` is not a network interface name",
                kubexm_manifests::display::UntrustedMax(&self.0.interface, 40)
            ))
        })?;
        Ok(vec![Op::Learn(LearnFacts {
            what: format!("whether the VIP {} answers", self.0.vip),
            script: net::vip_probe_script(self.0.vip, &iface),
            parse: net::learn_vip,
            facts: facts.clone(),
            prefix: net::VIP_PREFIX.into(),
            timeout: std::time::Duration::from_secs(30),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

/// Refuses a VIP another machine answers for.
pub struct CheckVipFree(pub Arc<NetRules>);

impl Step for CheckVipFree {
    fn name(&self) -> &str {
        "check-vip-free"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let Some(rule) = &self.0.vip else {
            return Ok(Vec::new());
        };
        let nodes: Vec<(String, Option<NetFacts>)> = self
            .0
            .nodes
            .iter()
            .map(|n| (n.clone(), NetFacts::from_facts(facts, n)))
            .collect();
        Ok(vec![Op::Require(Require {
            what: "VIP not in use".into(),
            rules: rule.describe(),
            verdict: VipProbe::from_facts(facts).map(|p| rule.judge(&node.name, p, &nodes)),
        })])
    }
    fn policy(&self) -> Policy {
        super::policy::check_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::net::{parse, ProbeAnswer};

    fn rules() -> NetRules {
        let mut addresses = BTreeMap::new();
        addresses.insert(
            "node1".to_string(),
            vec![
                WantedAddress {
                    field: "spec.hosts[0].internalAddress".into(),
                    addr: "10.0.0.11".parse().expect("ip"),
                },
                WantedAddress {
                    field: "spec.hosts[0].internalAddressV6".into(),
                    addr: "fd00::11".parse().expect("ip"),
                },
            ],
        );
        NetRules {
            addresses,
            vip: Some(VipRule {
                vip: "10.0.0.100".parse().expect("ip"),
                interface: "eth0".into(),
                holder_kind: "kube-vip",
                holders: vec!["node1".into()],
            }),
            nodes: vec!["node1".into(), "node2".into()],
        }
    }

    const GOOD: &str = "#links\nlo\neth0\n#addrs\n1: lo    inet 127.0.0.1/8 scope host lo\n2: eth0    inet 10.0.0.11/24 brd 10.0.0.255 scope global eth0\n2: eth0    inet6 fd00::11/64 scope global\n";

    #[test]
    fn addresses_and_interface_present() {
        let r = rules();
        assert_eq!(r.judge("node1", &parse(GOOD).expect("probe")), Ok(vec![]));
        assert!(r
            .describe("node1")
            .contains("10.0.0.11 (spec.hosts[0].internalAddress)"));
        assert!(r.describe("node1").contains("interface eth0 present"));
        assert_eq!(r.describe("node9"), "nothing to check");
    }

    #[test]
    fn missing_address_is_refused_naming_node_address_and_what_was_found() {
        let r = rules();
        let other = "#links\nlo\neth0\n#addrs\n2: eth0    inet 10.0.0.99/24 scope global eth0\n";
        let e = r
            .judge("node1", &parse(other).expect("probe"))
            .expect_err("missing");
        assert!(
            e.contains("node node1: spec.hosts[0].internalAddress 10.0.0.11 is not assigned to any interface of the node (`ip -o addr` shows 10.0.0.99 on eth0)"),
            "{e}"
        );
        assert!(
            e.contains("spec.hosts[0].internalAddressV6 fd00::11 is not assigned to any interface of the node (`ip -o addr` shows no IPv6 address)"),
            "{e}"
        );
    }

    #[test]
    fn missing_interface_is_refused_naming_node_and_interface() {
        let r = rules();
        let ens = "#links\nlo\nens3\n#addrs\n2: ens3    inet 10.0.0.11/24 scope global ens3\n2: ens3    inet6 fd00::11/64 scope global\n";
        let e = r
            .judge("node1", &parse(ens).expect("probe"))
            .expect_err("no eth0");
        assert!(
            e.contains("node node1 has no network interface `eth0` (spec.loadBalancer.interface: kube-vip puts the VIP 10.0.0.100 on it there); its interfaces: ens3, lo"),
            "{e}"
        );
        // node2 does not hold the VIP: its interfaces are not its business.
        let mut r2 = rules();
        r2.addresses.clear();
        assert_eq!(r2.judge("node2", &parse(ens).expect("probe")), Ok(vec![]));
    }

    fn probe(ping: ProbeAnswer, arping: ProbeAnswer) -> VipProbe {
        VipProbe { ping, arping }
    }

    #[test]
    fn vip_in_use_by_another_machine_is_refused() {
        let rule = rules().vip.expect("vip");
        let nodes = vec![
            ("node1".to_string(), Some(parse(GOOD).expect("probe"))),
            ("node2".to_string(), None),
        ];
        let e = rule
            .judge(
                "node1",
                probe(ProbeAnswer::Silent, ProbeAnswer::Answered),
                &nodes,
            )
            .expect_err("in use");
        assert!(e.contains("the VIP 10.0.0.100 (spec.loadBalancer.vip) is already in use: probed from node node1, it answers (ping silent, arping answered)"), "{e}");
        assert!(
            e.contains("the interfaces of node2 were not learned"),
            "{e}"
        );
        assert!(
            e.contains("set spec.loadBalancer.vip to a free address"),
            "{e}"
        );
        // Nothing answers: free.
        assert_eq!(
            rule.judge(
                "node1",
                probe(ProbeAnswer::Silent, ProbeAnswer::Silent),
                &nodes
            ),
            Ok(vec![])
        );
        // Nothing to probe with: a warning, not a refusal.
        let w = rule
            .judge(
                "node1",
                probe(ProbeAnswer::Absent, ProbeAnswer::Absent),
                &nodes,
            )
            .expect("warning");
        assert!(w[0].contains("was not checked"), "{w:?}");
    }

    #[test]
    fn vip_held_by_one_of_our_nodes_passes() {
        // A re-run or day-2: kube-vip on node2 holds it.
        let rule = rules().vip.expect("vip");
        let held = "#links\nlo\neth0\n#addrs\n2: eth0    inet 10.0.0.12/24 scope global eth0\n2: eth0    inet 10.0.0.100/32 scope global eth0\n";
        let nodes = vec![
            ("node1".to_string(), Some(parse(GOOD).expect("probe"))),
            ("node2".to_string(), Some(parse(held).expect("probe"))),
        ];
        let w = rule
            .judge(
                "node1",
                probe(ProbeAnswer::Answered, ProbeAnswer::Answered),
                &nodes,
            )
            .expect("ours");
        assert_eq!(
            w,
            vec!["the VIP 10.0.0.100 is already on eth0 of node node2 (this cluster's kube-vip): not checked for another user".to_string()]
        );
    }
}
