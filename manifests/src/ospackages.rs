//! The OS packages KubeXM installs, by purpose: the one list both `kubexm-build` (which bundles
//! them with their dependency closure for every `spec.system.osReleases` entry) and the install
//! pipeline (which installs them) read, so a package the install asks for is always in the bundle.

use std::collections::BTreeSet;

use crate::model::{EtcdType, ExternalLbType, LbMode, ProxyMode};
use crate::osrelease::Family;
use crate::resolve::Role;
use crate::validate::ValidCluster;

/// Packages for one purpose, with their names in each family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackageSet {
    /// What they are for (`node preparation`, …), shown in plans and errors.
    pub purpose: &'static str,
    /// Debian/Ubuntu names.
    pub debs: &'static [&'static str],
    /// RHEL-family names.
    pub rpms: &'static [&'static str],
}

impl PackageSet {
    /// The names for `family`.
    pub fn names(&self, family: Family) -> &'static [&'static str] {
        match family {
            Family::Deb => self.debs,
            Family::Rpm => self.rpms,
        }
    }
}

/// Node preparation on every host: the tools kubeadm and the CNI plugins call, time sync, and
/// what KubeXM's own steps use (curl, tar, openssl). kube-proxy's tools follow its mode
/// ([`kube_proxy`]).
pub const NODE_PREP: PackageSet = PackageSet {
    purpose: "node preparation",
    debs: &[
        "socat",
        "conntrack",
        "ebtables",
        "chrony",
        "curl",
        "tar",
        "openssl",
    ],
    rpms: &[
        "socat",
        "conntrack-tools",
        "ebtables",
        "chrony",
        "curl",
        "tar",
        "openssl",
    ],
};

/// What the container runtimes, kubelet and kube-proxy call on every host: iptables (kube-proxy,
/// the CNI portmap plugin, dockerd), kmod (modprobe) and procps (sysctl) for the kernel settings.
pub const RUNTIME_DEPS: PackageSet = PackageSet {
    purpose: "container runtime and kernel settings",
    debs: &["iptables", "kmod", "procps"],
    rpms: &["iptables", "kmod", "procps-ng"],
};

/// kube-proxy in iptables mode programs its rules with `iptables-restore`.
///
/// Upstream facts (issue 13 item 7): the iptables and ipvs proxiers call `iptables-restore`; the
/// ipvs proxier also runs `ipset` (kubernetes pkg/util/ipset), and `ipvsadm` is the operator's
/// tool to read IPVS state (kube-proxy itself talks netlink); the nftables proxier runs `nft`
/// (sigs.k8s.io/knftables execs the binary) and needs kernel 5.13+ (checked by preflight). On
/// the kubexm path kube-proxy runs on the host and calls these; on the kubeadm path it runs in
/// its image, but kubeadm's preflight still looks for `iptables` on the host.
pub const PROXY_IPTABLES: PackageSet = PackageSet {
    purpose: "kube-proxy (iptables mode)",
    debs: &["iptables"],
    rpms: &["iptables"],
};

/// kube-proxy in ipvs mode: iptables, ipset, and ipvsadm for the operator ([`PROXY_IPTABLES`]).
pub const PROXY_IPVS: PackageSet = PackageSet {
    purpose: "kube-proxy (ipvs mode)",
    debs: &["iptables", "ipset", "ipvsadm"],
    rpms: &["iptables", "ipset", "ipvsadm"],
};

/// kube-proxy in nftables mode: nft, and iptables for kubeadm's preflight ([`PROXY_IPTABLES`]).
pub const PROXY_NFTABLES: PackageSet = PackageSet {
    purpose: "kube-proxy (nftables mode)",
    debs: &["iptables", "nftables"],
    rpms: &["iptables", "nftables"],
};

/// The host packages kube-proxy's `mode` needs on every node.
pub fn kube_proxy(mode: ProxyMode) -> PackageSet {
    match mode {
        ProxyMode::Iptables => PROXY_IPTABLES,
        ProxyMode::Ipvs => PROXY_IPVS,
        ProxyMode::Nftables => PROXY_NFTABLES,
    }
}

/// keepalived + haproxy on `loadbalancer` hosts (`loadBalancer.external.type: kubexm-kh`).
pub const LB_HAPROXY: PackageSet = PackageSet {
    purpose: "external load balancer (keepalived + haproxy)",
    debs: &["haproxy", "keepalived"],
    rpms: &["haproxy", "keepalived"],
};

/// keepalived + nginx with its stream module on `loadbalancer` hosts (`kubexm-kn`).
pub const LB_NGINX: PackageSet = PackageSet {
    purpose: "external load balancer (keepalived + nginx)",
    debs: &["nginx", "libnginx-mod-stream", "keepalived"],
    rpms: &["nginx", "nginx-mod-stream", "keepalived"],
};

/// NFS client tools (mount.nfs, which the kubelet runs to mount NFS volumes) on every
/// Kubernetes node when a host is named under `roleGroups.nfs`.
pub const NFS_CLIENT: PackageSet = PackageSet {
    purpose: "NFS client",
    debs: &["nfs-common"],
    rpms: &["nfs-utils"],
};

/// The NFS server on the `nfs` host (`roleGroups.nfs`): the kernel server's tools and unit
/// (`nfs-server.service`; Debian's `nfs-kernel-server` is an alias of it).
pub const NFS_SERVER: PackageSet = PackageSet {
    purpose: "NFS server",
    debs: &["nfs-kernel-server"],
    rpms: &["nfs-utils"],
};

/// fio on the etcd members, for preflight's measure of the etcd data disk's fdatasync latency
/// (`spec.system.preflight.etcdFsyncCheck`, on by default; etcd.type kubexm or kubeadm).
pub const ETCD_DISK_CHECK: PackageSet = PackageSet {
    purpose: "etcd data-disk fsync check (fio)",
    debs: &["fio"],
    rpms: &["fio"],
};

/// The roles whose hosts run etcd and so measure its disk (`etcd` for etcd.type kubexm, the
/// masters for kubeadm's stacked etcd), or `None` when the check does not run (turned off, or
/// an external etcd).
pub fn etcd_disk_check_role(cluster: &ValidCluster) -> Option<Role> {
    let spec = &cluster.file.spec;
    if !spec.system.preflight.etcd_fsync_check() {
        return None;
    }
    match spec.etcd.kind {
        EtcdType::Kubexm => Some(Role::Etcd),
        EtcdType::Kubeadm => Some(Role::Master),
        EtcdType::External => None,
    }
}

/// Every set above (what a lab mirror of the OS packages must hold).
pub const ALL: &[PackageSet] = &[
    NODE_PREP,
    RUNTIME_DEPS,
    PROXY_IPTABLES,
    PROXY_IPVS,
    PROXY_NFTABLES,
    LB_HAPROXY,
    LB_NGINX,
    NFS_CLIENT,
    NFS_SERVER,
    ETCD_DISK_CHECK,
];

/// One package to install, where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// Package name.
    pub name: String,
    /// Why (a purpose or `spec.system.debs[N]`).
    pub reason: String,
    /// The roles whose hosts install it; empty means every host.
    pub roles: BTreeSet<Role>,
}

/// Every OS package of `family` the install of `cluster` asks for, in install order, each once
/// (the first reason wins).
pub fn for_cluster(cluster: &ValidCluster, family: Family) -> Vec<Need> {
    let spec = &cluster.file.spec;
    let mut out: Vec<Need> = Vec::new();
    let mut add = |name: &str, reason: String, roles: BTreeSet<Role>| {
        if let Some(have) = out.iter_mut().find(|n| n.name == name) {
            if have.roles.is_empty() || roles.is_empty() {
                have.roles.clear();
            } else {
                have.roles.extend(roles);
            }
            return;
        }
        out.push(Need {
            name: name.to_owned(),
            reason,
            roles,
        });
    };
    for set in [NODE_PREP, RUNTIME_DEPS, kube_proxy(cluster.proxy_mode())] {
        for n in set.names(family) {
            add(n, set.purpose.to_owned(), BTreeSet::new());
        }
    }
    let (extra, field) = match family {
        Family::Deb => (&spec.system.debs, "spec.system.debs"),
        Family::Rpm => (&spec.system.rpms, "spec.system.rpms"),
    };
    for (i, n) in extra.iter().enumerate() {
        add(n, format!("{field}[{i}]"), BTreeSet::new());
    }
    if let Some(role) = etcd_disk_check_role(cluster) {
        for n in ETCD_DISK_CHECK.names(family) {
            add(
                n,
                ETCD_DISK_CHECK.purpose.to_owned(),
                BTreeSet::from([role]),
            );
        }
    }
    if !cluster.roles.nfs.is_empty() {
        for n in NFS_CLIENT.names(family) {
            add(
                n,
                NFS_CLIENT.purpose.to_owned(),
                BTreeSet::from([Role::Master, Role::Worker]),
            );
        }
        for n in NFS_SERVER.names(family) {
            add(
                n,
                NFS_SERVER.purpose.to_owned(),
                BTreeSet::from([Role::Nfs]),
            );
        }
    }
    if let Some(lb) = load_balancer(cluster) {
        for n in lb.names(family) {
            add(
                n,
                lb.purpose.to_owned(),
                BTreeSet::from([Role::Loadbalancer]),
            );
        }
    }
    out
}

/// The load balancer packages the cluster's `loadbalancer` hosts install, if any.
pub fn load_balancer(cluster: &ValidCluster) -> Option<PackageSet> {
    let lb = &cluster.file.spec.load_balancer;
    match (lb.mode, lb.external.kind) {
        (LbMode::External, ExternalLbType::KubexmKh) => Some(LB_HAPROXY),
        (LbMode::External, ExternalLbType::KubexmKn) => Some(LB_NGINX),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_proxy_mode_gets_the_programs_kube_proxy_runs() {
        assert_eq!(kube_proxy(ProxyMode::Iptables).debs, ["iptables"]);
        let ipvs = kube_proxy(ProxyMode::Ipvs);
        assert!(ipvs.debs.contains(&"ipset") && ipvs.debs.contains(&"ipvsadm"));
        let nft = kube_proxy(ProxyMode::Nftables);
        assert!(nft.debs.contains(&"nftables") && !nft.debs.contains(&"ipset"));
        for mode in [ProxyMode::Iptables, ProxyMode::Ipvs, ProxyMode::Nftables] {
            let set = kube_proxy(mode);
            assert!(ALL.contains(&set), "{mode:?} is mirrored");
            assert!(
                set.rpms.contains(&"iptables"),
                "kubeadm's preflight wants iptables"
            );
        }
    }
}
