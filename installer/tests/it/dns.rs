//! NodeLocal DNSCache and the kubelet's DNS per IP family (issue 13 item 5): an IPv6-only
//! cluster's cache listens on an IPv6 Unique Local Address — the Kubernetes documentation
//! ("Using NodeLocal DNSCache in Kubernetes Clusters") recommends a local-scope listen address,
//! 169.254.0.0/16 for IPv4 or fd00::/8 for IPv6, with IPv6 addresses in brackets in CoreDNS's
//! `IP:Port` form — a dual-stack cluster's on both; the kubelet's `clusterDNS` follows on both
//! paths, and dual-stack nodes get both families in `--node-ip`.

use kubexm_install::modules::dns::{self, NODELOCAL_DNS_IP, NODELOCAL_DNS_IPV6};
use kubexm_install::modules::kubeadm::config::KubeadmSettings;
use kubexm_install::modules::kubexm::node::KubexmNodesModule;

use crate::lb::{file_of, rendered};
use crate::versions::{cluster, exec_start, flag, text, yaml_docs};

/// The fixture with these pod and service CIDRs and worker1 given an IPv6 address.
fn with_network(pods: &'static str, services: &'static str) -> impl Fn(String) -> String {
    move |t: String| {
        t.replace(
            "    plugin: none\n",
            &format!(
                "    plugin: none\n    podCidr: \"{pods}\"\n    serviceCidr: \"{services}\"\n"
            ),
        )
        .replace(
            "{name: worker1, address: 192.168.50.21}",
            "{name: worker1, address: 192.168.50.21, internalAddressV6: \"fd00:50::21\"}",
        )
    }
}

fn manifest_args(manifest: &str) -> Vec<String> {
    let docs = yaml_docs(manifest);
    let ds = docs
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("DaemonSet");
    ds["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string").to_string())
        .collect()
}

/// The kubeadm path's KubeletConfiguration (in the first master's init configuration).
pub(crate) fn kubeadm_kubelet(ctx: &kubexm_install::context::InstallContext) -> serde_json::Value {
    let s = KubeadmSettings::new(ctx, Default::default()).expect("settings");
    let init = text(
        &s.render_init(&s.node(ctx.node("master1").expect("m1"), true, false))
            .expect("init"),
    );
    yaml_docs(&init)
        .into_iter()
        .find(|d| d["kind"] == "KubeletConfiguration")
        .expect("KubeletConfiguration")
}

#[test]
fn ipv6_only_cluster_caches_dns_on_an_ipv6_address() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = cluster(
        work.path(),
        "v1.31.13",
        "kubeadm",
        with_network("fd00:10:233::/56", "fd00:10:96::/112"),
    );
    let manifest = dns::render(&ctx).expect("render");
    insta::assert_snapshot!("nodelocaldns-ipv6-only", manifest);
    let args = manifest_args(&manifest);
    let at = args.iter().position(|a| a == "-localip").expect("-localip");
    assert_eq!(args[at + 1], NODELOCAL_DNS_IPV6);
    assert!(
        !manifest.contains(NODELOCAL_DNS_IP),
        "no IPv4 address on an IPv6-only cluster"
    );
    // CoreDNS's health takes [IPv6]:port.
    assert!(manifest.contains("health [fd6b:786d::a9fe:190a]:9254"));
    assert!(manifest.contains("bind fd6b:786d::a9fe:190a\n"));
    assert!(
        NODELOCAL_DNS_IPV6
            .parse::<std::net::Ipv6Addr>()
            .expect("v6")
            .segments()[0]
            & 0xff00
            == 0xfd00
    );
    assert_eq!(
        kubeadm_kubelet(&ctx)["clusterDNS"],
        serde_json::json!([NODELOCAL_DNS_IPV6])
    );
}

#[test]
fn dual_stack_cluster_caches_dns_on_both_families_and_nodes_get_both_node_ips() {
    let work = tempfile::tempdir().expect("tempdir");
    let net = || {
        with_network(
            "10.233.64.0/18,fd00:10:233::/56",
            "10.233.0.0/18,fd00:10:96::/112",
        )
    };
    let ctx = cluster(work.path(), "v1.31.13", "kubeadm", net());
    let manifest = dns::render(&ctx).expect("render");
    let args = manifest_args(&manifest);
    let at = args.iter().position(|a| a == "-localip").expect("-localip");
    assert_eq!(
        args[at + 1],
        format!("{NODELOCAL_DNS_IP},{NODELOCAL_DNS_IPV6}")
    );
    assert!(manifest.contains(&format!("bind {NODELOCAL_DNS_IP} {NODELOCAL_DNS_IPV6}\n")));
    assert_eq!(
        kubeadm_kubelet(&ctx)["clusterDNS"],
        serde_json::json!([NODELOCAL_DNS_IP, NODELOCAL_DNS_IPV6])
    );
    // kubeadm path: the join configuration's node-ip has both families for worker1 only.
    let s = KubeadmSettings::new(&ctx, Default::default()).expect("settings");
    let w1 = s.node(ctx.node("worker1").expect("worker1"), false, false);
    let w2 = s.node(ctx.node("worker2").expect("worker2"), false, false);
    let node_ip = |n: &kubexm_install::modules::kubeadm::config::NodeSettings| {
        n.kubelet_args
            .iter()
            .find(|a| a.name == "node-ip")
            .map(|a| a.value.clone())
            .expect("node-ip")
    };
    assert_eq!(node_ip(&w1), "192.168.50.21,fd00:50::21");
    assert_eq!(node_ip(&w2), "192.168.50.22");
    // kubexm path: the kubelet's flags and configuration.
    let ctx = cluster(work.path(), "v1.31.13", "kubexm", net());
    let files = rendered(&ctx, &KubexmNodesModule(ctx.clone()));
    let unit = exec_start(&file_of(
        &files,
        "worker1",
        "/etc/systemd/system/kubelet.service",
    ));
    assert_eq!(flag(&unit, "node-ip"), Some("192.168.50.21,fd00:50::21"));
    let conf = yaml_docs(&file_of(
        &files,
        "worker1",
        "/etc/kubernetes/kubelet-config.yaml",
    ));
    assert_eq!(
        conf[0]["clusterDNS"],
        serde_json::json!([NODELOCAL_DNS_IP, NODELOCAL_DNS_IPV6])
    );
}

#[test]
fn ipv4_only_cluster_is_as_before() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = cluster(work.path(), "v1.20.2", "kubeadm", |t| t);
    assert_eq!(dns::local_ips(&ctx), [NODELOCAL_DNS_IP]);
    let manifest = dns::render(&ctx).expect("render");
    assert!(manifest.contains("health 169.254.25.10:9254"));
    assert_eq!(
        kubeadm_kubelet(&ctx)["clusterDNS"],
        serde_json::json!([NODELOCAL_DNS_IP])
    );
}
