//! What `kubexm-install certs renew` renews, decided from the inventory ([`super::gather`]):
//! the leaf certificates (never a CA: CA rotation is `rotate-ca`'s) with fewer than
//! `--under-days` days left, or every leaf with `--all`.
//!
//! | kind | which certificates |
//! |---|---|
//! | [`Kind::Etcd`] | KubeXM's etcd (`/etc/ssl/etcd/ssl/`, the kubeadm path's copies `/etc/kubernetes/pki/apiserver-etcd-client.crt` and `pki/etcd/`), the control host's `etcd/` |
//! | [`Kind::Kubernetes`] | the rest of `/etc/kubernetes/` (PKI and kubeconfig clients), the kubelet's client certificate `kubelet-client-current.pem`, the control host's `kubernetes/` |
//! | [`Kind::KubeletServing`] | the kubelet's serving certificate `kubelet-server-current.pem` (kubeadm path: signed through a CSR KubeXM approves) |
//! | [`Kind::Registry`] | the registry's and Harbor's server certificate (`/etc/kubexm-registry/tls/`, `/etc/kubexm-harbor/tls/`, the control host's `registry/`) |
//! | [`Kind::Other`] | anything else (the kubelet's self-signed `kubelet.crt`): not renewed here |
//!
//! The default threshold, [`UNDER_DAYS`], is the margin under which an install re-run re-issues
//! KubeXM's leaves too ([`crate::pki::RENEW_BEFORE_DAYS`]), so both agree on "due".

use std::collections::BTreeSet;

use super::{Entry, Inventory, Source, CONTROL_HOST};

/// Default `--under-days`.
pub const UNDER_DAYS: i64 = crate::pki::RENEW_BEFORE_DAYS;

/// Which renewal a certificate belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// KubeXM's etcd.
    Etcd,
    /// Kubernetes (kubeadm's or KubeXM's).
    Kubernetes,
    /// The kubelet's serving certificate signed through a CSR.
    KubeletServing,
    /// The registry's or Harbor's server certificate.
    Registry,
    /// Not renewed by `certs renew`.
    Other,
}

/// The kind of the certificate at `path` on `node`.
pub fn kind(node: &str, path: &str) -> Kind {
    if node == CONTROL_HOST {
        return if path.contains("/etcd/") {
            Kind::Etcd
        } else if path.contains("/kubernetes/") {
            Kind::Kubernetes
        } else if path.contains("/registry/") {
            Kind::Registry
        } else {
            Kind::Other
        };
    }
    if path.starts_with("/etc/ssl/etcd/ssl/")
        || path.starts_with("/etc/kubernetes/pki/etcd/")
        || path == "/etc/kubernetes/pki/apiserver-etcd-client.crt"
    {
        Kind::Etcd
    } else if path.starts_with("/etc/kubernetes/")
        || path == "/var/lib/kubelet/pki/kubelet-client-current.pem"
    {
        Kind::Kubernetes
    } else if path == "/var/lib/kubelet/pki/kubelet-server-current.pem" {
        Kind::KubeletServing
    } else if path.starts_with("/etc/kubexm-registry/tls/")
        || path.starts_with("/etc/kubexm-harbor/tls/")
    {
        Kind::Registry
    } else {
        Kind::Other
    }
}

/// Whether a leaf with `days_left` is renewed.
pub fn is_due(days_left: i64, under_days: i64, all: bool) -> bool {
    all || days_left < under_days
}

/// What is due.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Due {
    /// KubeXM's etcd has a leaf due (on a node or on the control host).
    pub etcd: bool,
    /// Nodes with a Kubernetes leaf due.
    pub kubernetes_nodes: BTreeSet<String>,
    /// The control host keeps a Kubernetes leaf due (kubexm path).
    pub kubernetes_control_host: bool,
    /// Nodes whose kubelet serving certificate (CSR-signed) is due.
    pub kubelet_serving: BTreeSet<String>,
    /// The registry's server certificate is due (on its host or on the control host).
    pub registry: bool,
    /// Every leaf due (etcd and Kubernetes), soonest first as in the inventory.
    pub certificates: Vec<Entry>,
}

impl Due {
    /// Nothing to renew.
    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty()
    }
}

/// The leaves of `inv` due under `under_days` (every leaf with `all`). Kubeconfig CA fields
/// and CAs are never due.
pub fn due(inv: &Inventory, under_days: i64, all: bool) -> Due {
    let mut d = Due::default();
    for e in &inv.certificates {
        if e.cert.is_ca
            || e.cert.source == Source::KubeconfigCa
            || !is_due(e.days_left, under_days, all)
        {
            continue;
        }
        match kind(&e.node, &e.cert.path) {
            Kind::Etcd => d.etcd = true,
            Kind::Kubernetes if e.node == CONTROL_HOST => d.kubernetes_control_host = true,
            Kind::Kubernetes => {
                d.kubernetes_nodes.insert(e.node.clone());
            }
            Kind::KubeletServing => {
                d.kubelet_serving.insert(e.node.clone());
            }
            Kind::Registry => d.registry = true,
            Kind::Other => continue,
        }
        d.certificates.push(e.clone());
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Found;

    fn entry(node: &str, path: &str, days_left: i64, is_ca: bool, source: Source) -> Entry {
        Entry {
            node: node.into(),
            cert: Found {
                path: path.into(),
                source,
                subject: "CN=x".into(),
                common_name: "x".into(),
                issuer: "CN=ca".into(),
                not_after: days_left * 86_400,
                not_before: 0,
                is_ca,
                sans: vec![],
                serial: "01".into(),
            },
            days_left,
        }
    }

    #[test]
    fn the_threshold_is_strict_and_all_takes_everything() {
        assert!(is_due(29, 30, false));
        assert!(!is_due(30, 30, false), "30 days left is not under 30");
        assert!(is_due(-3, 30, false), "expired certificates are due");
        assert!(is_due(3000, 30, true));
        assert!(is_due(364, 400, false));
        assert_eq!(UNDER_DAYS, 30);
    }

    #[test]
    fn certificates_are_sorted_into_etcd_kubernetes_and_others() {
        assert_eq!(
            kind("node1", "/etc/ssl/etcd/ssl/member-node1.pem"),
            Kind::Etcd
        );
        assert_eq!(
            kind("node1", "/etc/kubernetes/pki/apiserver-etcd-client.crt"),
            Kind::Etcd
        );
        assert_eq!(
            kind("node1", "/etc/kubernetes/pki/apiserver.crt"),
            Kind::Kubernetes
        );
        assert_eq!(
            kind("node1", "/etc/kubernetes/admin.conf"),
            Kind::Kubernetes
        );
        assert_eq!(
            kind("node1", "/var/lib/kubelet/pki/kubelet-client-current.pem"),
            Kind::Kubernetes
        );
        assert_eq!(
            kind("node1", "/var/lib/kubelet/pki/kubelet.crt"),
            Kind::Other
        );
        assert_eq!(
            kind("node1", "/etc/kubexm-registry/tls/server.crt"),
            Kind::Registry
        );
        assert_eq!(
            kind("node1", "/etc/kubexm-harbor/tls/server.crt"),
            Kind::Registry
        );
        assert_eq!(
            kind("node1", "/var/lib/kubelet/pki/kubelet-server-current.pem"),
            Kind::KubeletServing
        );
        assert_eq!(
            kind(CONTROL_HOST, "/w/pki/c/etcd/member-node1.crt"),
            Kind::Etcd
        );
        assert_eq!(
            kind(CONTROL_HOST, "/w/pki/c/kubernetes/apiserver.crt"),
            Kind::Kubernetes
        );
        assert_eq!(
            kind(CONTROL_HOST, "/w/pki/c/registry/registry-server.crt"),
            Kind::Registry
        );
    }

    #[test]
    fn only_leaves_under_the_threshold_are_due_never_cas() {
        let inv = Inventory {
            certificates: vec![
                entry(
                    "node1",
                    "/etc/kubernetes/pki/apiserver.crt",
                    20,
                    false,
                    Source::Certificate,
                ),
                entry(
                    "node1",
                    "/etc/kubernetes/pki/ca.crt",
                    5,
                    true,
                    Source::Certificate,
                ),
                entry(
                    "node2",
                    "/etc/kubernetes/pki/apiserver.crt",
                    200,
                    false,
                    Source::Certificate,
                ),
                entry(
                    "node2",
                    "/etc/kubernetes/admin.conf",
                    5,
                    false,
                    Source::KubeconfigCa,
                ),
                entry(
                    "node3",
                    "/etc/ssl/etcd/ssl/peer-node3.pem",
                    10,
                    false,
                    Source::Certificate,
                ),
                entry(
                    "node3",
                    "/var/lib/kubelet/pki/kubelet.crt",
                    1,
                    false,
                    Source::Certificate,
                ),
            ],
            ..Inventory::default()
        };
        let mut with_more = inv.clone();
        with_more.certificates.push(entry(
            "node1",
            "/etc/kubexm-registry/tls/server.crt",
            10,
            false,
            Source::Certificate,
        ));
        with_more.certificates.push(entry(
            "node3",
            "/var/lib/kubelet/pki/kubelet-server-current.pem",
            5,
            false,
            Source::Certificate,
        ));
        let m = due(&with_more, 30, false);
        assert!(m.registry);
        assert_eq!(m.kubelet_serving, BTreeSet::from(["node3".to_string()]));
        assert_eq!(m.certificates.len(), 4);
        let d = due(&inv, 30, false);
        assert!(!d.registry && d.kubelet_serving.is_empty());
        assert!(d.etcd);
        assert_eq!(d.kubernetes_nodes, BTreeSet::from(["node1".to_string()]));
        assert!(!d.kubernetes_control_host);
        let paths: Vec<(&str, &str)> = d
            .certificates
            .iter()
            .map(|e| (e.node.as_str(), e.cert.path.as_str()))
            .collect();
        assert_eq!(
            paths,
            [
                ("node1", "/etc/kubernetes/pki/apiserver.crt"),
                ("node3", "/etc/ssl/etcd/ssl/peer-node3.pem")
            ]
        );

        let all = due(&inv, 30, true);
        assert_eq!(
            all.kubernetes_nodes,
            BTreeSet::from(["node1".to_string(), "node2".to_string()])
        );
        assert_eq!(all.certificates.len(), 3);
        assert!(due(&inv, 5, false).is_empty());
    }
}
