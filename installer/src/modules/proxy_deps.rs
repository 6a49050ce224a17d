//! The host packages kube-proxy's mode needs (issue 13 item 7). On the kubexm path kube-proxy
//! runs on the host and calls these programs; on the kubeadm path it runs in its image, but
//! kubeadm's preflight still looks for `iptables` on the host.
//!
//! Upstream facts: the iptables and ipvs proxiers program rules with `iptables-restore`; the
//! ipvs proxier also runs `ipset` (kubernetes pkg/util/ipset) — `ipvsadm` is the operator's
//! tool to read IPVS state (kube-proxy itself talks netlink); the nftables proxier runs `nft`
//! (sigs.k8s.io/knftables execs the nft binary) and needs kernel 5.13+ (checked by preflight).

use kubexm_manifests::model::ProxyMode;

/// Package names (the same on Debian- and RPM-family systems) `mode` needs on every node.
pub fn packages(mode: ProxyMode) -> &'static [&'static str] {
    match mode {
        ProxyMode::Iptables => &["iptables"],
        ProxyMode::Ipvs => &["iptables", "ipset", "ipvsadm"],
        ProxyMode::Nftables => &["iptables", "nftables"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_gets_the_programs_kube_proxy_runs() {
        assert_eq!(packages(ProxyMode::Iptables), ["iptables"]);
        assert!(packages(ProxyMode::Ipvs).contains(&"ipset"));
        assert!(packages(ProxyMode::Ipvs).contains(&"ipvsadm"));
        assert!(packages(ProxyMode::Nftables).contains(&"nftables"));
        assert!(!packages(ProxyMode::Nftables).contains(&"ipset"));
    }
}
