//! KubeKey v1alpha2 `Cluster` (KubeKey v1–v3, `kk create config`) → cluster.yaml.
//!
//! Field names and defaults are KubeKey's (`cmd/kk/apis/kubekey/v1alpha2/*_types.go` and
//! `default.go` of kubesphere/kubekey, branch 3.x).

use serde_json::Value;

use super::common::{
    self, host_fields, is_dns_label, map_feature_gates, new_host, parse_flags, push_host,
    set_endpoint, split_internal, split_registry, Ctx, Endpoint,
};
use super::doc::{Doc, FieldPath};
use super::{ImportError, ImportOptions, Imported};
use crate::catalog::Catalog;
use crate::model::{
    Addon, AddonSource, AddonType, Chart, EtcdType, HybridnetNetworkType, KubernetesType,
    MultusOptions, Plugin, RegistryAuth, RegistryType, RewriteMode, RuntimeType,
};
use crate::secret::Secret;
use crate::version::KubeVersion;

const UNKNOWN: &str = "not a KubeKey v1alpha2 field the importer knows; not mapped";

/// Imports one v1alpha2 Cluster document.
pub(crate) fn import(
    file: &str,
    root: Value,
    opts: &ImportOptions,
    catalog: &Catalog,
) -> Result<Imported, ImportError> {
    let mut doc = Doc::new(root);
    let mut ctx = Ctx::new(file, opts, catalog);
    let p = FieldPath::parse;
    doc.get(&p("apiVersion"));
    doc.get(&p("kind"));
    let name = doc.string(&p("metadata.name"));
    ctx.set_name(name, &p("metadata.name"))?;
    doc.unmapped(
        &p("metadata.labels"),
        "KubeXM's metadata holds only the cluster name",
    );
    doc.unmapped(
        &p("metadata.annotations"),
        "KubeXM's metadata holds only the cluster name",
    );

    hosts(&mut doc, &mut ctx)?;
    role_groups(&mut doc, &mut ctx)?;
    let version = kubernetes(&mut doc, &mut ctx)?;
    endpoint(&mut doc, &mut ctx)?;
    system(&mut doc, &mut ctx);
    etcd(&mut doc, &mut ctx)?;
    network(&mut doc, &mut ctx)?;
    registry(&mut doc, &mut ctx)?;
    addons(&mut doc, &mut ctx);
    let _ = version;
    if let Some(base_path) = doc.string(&p("spec.storage.openebs.basePath")) {
        // KubeKey v3 deploys OpenEBS local PV, the default class, with --with-local-storage or
        // KubeSphere; a basePath says it is wanted.
        ctx.cluster.spec.storage.local_volume = Some(crate::model::LocalVolume {
            enabled: true,
            base_path,
            default: true,
        });
        ctx.decide(
            "spec.storage.localVolume",
            "enabled, the default StorageClass `local`, with storage.openebs.basePath: KubeKey deploys it with --with-local-storage or KubeSphere (set enabled: false to leave it out)",
        );
    }
    doc.unmapped(
        &p("spec.dns"),
        "KubeXM's CoreDNS and NodeLocal DNSCache take no extra zones, hosts or rewrites; add them to the Corefile after install",
    );
    doc.unmapped(
        &p("spec.kubesphere"),
        "KubeXM does not install KubeSphere; install it as an addon (its chart and images bundled)",
    );
    Ok(ctx.finish(
        "kubekey.kubesphere.io/v1alpha2 Cluster",
        vec![(file, doc)],
        UNKNOWN,
    ))
}

fn hosts(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let list = FieldPath::parse("spec.hosts");
    for i in 0..doc.len(&list) {
        let at = list.index(i);
        let Some(name) = doc.string(&at.key("name")) else {
            return Err(ctx.field_error(
                &at.key("name"),
                "a host has no name",
                "give every host a name",
            ));
        };
        let address = doc.string(&at.key("address"));
        let internal = doc.string(&at.key("internalAddress"));
        let (internal, left_out) = match &internal {
            Some(v) => {
                let (ip, rest) = split_internal(v);
                (Some(ip), rest)
            }
            None => (None, None),
        };
        // KubeKey: a missing address defaults to the internal one and vice versa.
        let Some(address) = address.or_else(|| internal.clone()) else {
            return Err(ctx.field_error(
                &at.key("address"),
                format!("host `{name}` has no address"),
                "set address (the SSH address) or internalAddress",
            ));
        };
        let mut host = new_host(name.clone(), address.clone());
        if let Some(ip) = internal.filter(|ip| *ip != address) {
            host.internal_address = Some(ip);
        }
        if let Some(rest) = left_out {
            ctx.decide(
                &format!("spec.hosts[{i}].internalAddress"),
                format!("kept the IPv4 address; KubeXM keeps one in-cluster address per host, so `{rest}` (dual-stack) is not used"),
            );
        }
        host_fields(doc, ctx, &mut host, &at, &at)?;
        doc.unmapped(
            &at.key("timeout"),
            "KubeXM has no per-host SSH timeout; its connections use one connect timeout",
        );
        let key_path = doc.string(&at.key("privateKeyPath"));
        let inline_key = doc.string(&at.key("privateKey"));
        let password = doc.string(&at.key("password"));
        let inline = inline_key.is_some();
        let idx = push_host(ctx, host, key_path, inline_key, password);
        if inline {
            ctx.decide(
                &format!("spec.hosts[{i}].privateKeyPath"),
                "the inline privateKey is written to its own 0600 file",
            );
        }
        let h = &ctx.cluster.spec.hosts[idx];
        if h.private_key_path.is_none() && h.password_file.is_none() {
            ctx.cluster.spec.hosts[idx].private_key_path = Some("~/.ssh/id_rsa".to_owned());
            ctx.decide(
                &format!("spec.hosts[{i}].privateKeyPath"),
                "~/.ssh/id_rsa, KubeKey's default when neither a password nor a key is given",
            );
        }
    }
    if ctx.cluster.spec.hosts.is_empty() {
        return Err(ctx.field_error(
            &list,
            "no hosts are listed",
            "list the machines under spec.hosts",
        ));
    }
    Ok(())
}

fn role_groups(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let rg = FieldPath::parse("spec.roleGroups");
    for group in doc.keys(&rg) {
        let at = rg.key(&group);
        let slot = match group.as_str() {
            "etcd" => 0,
            "master" | "control-plane" => 1,
            "worker" => 2,
            "registry" => 3,
            _ => {
                doc.unmapped(
                    &at,
                    "KubeXM's role groups are etcd, master (control-plane), worker, registry and loadbalancer",
                );
                continue;
            }
        };
        let entries = doc.strings(&at);
        let names = ctx.role_entries(doc, &at, entries);
        super::common::add_to_role_group(&mut ctx.cluster.spec.role_groups, slot, names);
    }
    if ctx.cluster.spec.role_groups.master.is_empty() {
        return Err(ctx.field_error(
            &rg.key("master"),
            "no control-plane host",
            "list at least one host under roleGroups.master or roleGroups.control-plane",
        ));
    }
    Ok(())
}

fn kubernetes(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<KubeVersion, ImportError> {
    let k = FieldPath::parse("spec.kubernetes");
    if let Some(kind) = doc.string(&k.key("type")) {
        if kind != "kubernetes" {
            return Err(ctx.field_error(
                &k.key("type"),
                format!("`{kind}` clusters are another distribution; KubeXM installs upstream Kubernetes"),
                "remove kubernetes.type (or set it to kubernetes) to import the rest",
            ));
        }
    }
    ctx.cluster.spec.kubernetes.kind = KubernetesType::Kubeadm;
    let from = doc.string(&k.key("version"));
    let version = ctx.set_version(from, &k.key("version"))?;
    let kube = &mut ctx.cluster.spec.kubernetes;
    if let Some(name) = doc.string(&k.key("clusterName")) {
        if is_dns_label(&name) {
            kube.cluster_name = Some(name);
        } else {
            doc.reject(
                &k.key("clusterName"),
                &Value::String(name),
                "KubeKey writes it into kubeadm's clusterName (default `cluster.local`); KubeXM's clusterName is a DNS label and defaults to metadata.name",
            );
        }
    }
    if let Some(domain) = doc.string(&k.key("dnsDomain")) {
        kube.dns_domain = domain;
    }
    if let Some(max) = doc.integer(&k.key("maxPods")) {
        kube.max_pods = u32::try_from(max).unwrap_or(u32::MAX);
    }
    kube.apiserver_cert_extra_sans = doc.strings(&k.key("apiserverCertExtraSans"));
    if let Some(mode) = doc.string(&k.key("proxyMode")) {
        match common::proxy_mode(&mode) {
            Some(m) => kube.proxy_mode = Some(m),
            None => doc.reject(
                &k.key("proxyMode"),
                &Value::String(mode),
                "KubeXM's kube-proxy modes are ipvs, iptables and nftables",
            ),
        }
    }
    if doc.boolean(&k.key("masqueradeAll")) == Some(true) {
        ctx.cluster
            .spec
            .kubernetes
            .kube_proxy_args
            .insert("masquerade-all".into(), "true".into());
    }
    for (field, flag, default) in [
        ("nodeCidrMaskSize", "node-cidr-mask-size", 24),
        ("nodeCidrMaskSizeIPv6", "node-cidr-mask-size-ipv6", 64),
    ] {
        if let Some(size) = doc.integer(&k.key(field)) {
            if size != default {
                ctx.cluster
                    .spec
                    .kubernetes
                    .controller_manager_args
                    .insert(flag.into(), size.to_string());
            }
        }
    }
    for (field, name) in [
        ("apiserverArgs", "apiserver"),
        ("controllerManagerArgs", "controllerManager"),
        ("schedulerArgs", "scheduler"),
        ("kubeletArgs", "kubelet"),
        ("kubeProxyArgs", "kubeProxy"),
    ] {
        let items = doc.strings(&k.key(field));
        let (flags, bad) = parse_flags(&items);
        let kube = &mut ctx.cluster.spec.kubernetes;
        let target = match name {
            "apiserver" => &mut kube.apiserver_args,
            "controllerManager" => &mut kube.controller_manager_args,
            "scheduler" => &mut kube.scheduler_args,
            "kubelet" => &mut kube.kubelet_args,
            _ => &mut kube.kube_proxy_args,
        };
        target.extend(flags);
        for b in bad {
            doc.reject(
                &k.key(field),
                &Value::String(b),
                "not a `--name=value` flag; KubeXM's component args are name: value pairs",
            );
        }
    }
    let gates = map_feature_gates(doc, &k.key("featureGates"), version);
    ctx.cluster.spec.kubernetes.feature_gates = gates;
    match doc.string(&k.key("containerManager")).as_deref() {
        None => {
            ctx.cluster.spec.runtime.kind = RuntimeType::Docker;
            ctx.decide(
                "spec.runtime.type",
                "docker, KubeKey v1alpha2's default container manager (with cri-dockerd from Kubernetes v1.24)",
            );
        }
        Some(name) => match common::runtime_type(name) {
            Some(t) => ctx.cluster.spec.runtime.kind = t,
            None => {
                return Err(ctx.field_error(
                    &k.key("containerManager"),
                    format!("container manager `{name}` is not one KubeXM installs"),
                    "use containerd, docker, crio or isula",
                ))
            }
        },
    }
    if doc.boolean(&k.key("nodelocaldns")) == Some(false) {
        doc.reject(
            &k.key("nodelocaldns"),
            &Value::Bool(false),
            "KubeXM always deploys NodeLocal DNSCache (kubelets use its address)",
        );
    }
    doc.unmapped(
        &k.key("autoRenewCerts"),
        "KubeXM installs no certificate renewal timer; renew with the day-2 certificate commands",
    );
    doc.unmapped(&k.key("disableKubeProxy"), "KubeXM always runs kube-proxy");
    doc.unmapped(&k.key("podPidsLimit"), "KubeXM sets no per-pod PID limit; pass it with kubernetes.kubeletArgs (`pod-max-pids`) if you need one");
    doc.unmapped(
        &k.key("containerRuntimeEndpoint"),
        "KubeXM derives the CRI socket from runtime.type",
    );
    // The same switches, at the same place, in KubeXM's cluster.yaml.
    if doc.boolean(&k.join("nodeFeatureDiscovery.enabled")) == Some(true) {
        ctx.cluster.spec.kubernetes.node_feature_discovery.enabled = true;
    }
    if doc.boolean(&k.join("kata.enabled")) == Some(true) {
        ctx.cluster.spec.kubernetes.kata.enabled = true;
    }
    doc.unmapped(
        &k.key("nvidiaRuntime"),
        "KubeXM does not install the NVIDIA container runtime",
    );
    doc.unmapped(&k.key("kubeletConfiguration"), "free-form KubeletConfiguration is not taken; use kubernetes.kubeletArgs for single settings");
    doc.unmapped(&k.key("kubeProxyConfiguration"), "free-form KubeProxyConfiguration is not taken; use kubernetes.kubeProxyArgs for single settings");
    // KubeXM's audit logging is part of its security enhancement (policy and log rotation fixed).
    let hardened = doc.boolean(&k.key("securityEnhancement")) == Some(true);
    let audited = doc.boolean(&k.join("audit.enabled")) == Some(true);
    if hardened || audited {
        ctx.cluster.spec.kubernetes.security_enhancement = true;
    }
    for key in doc.keys(&k.key("audit")) {
        if key != "enabled" {
            doc.unmapped(&k.join(&format!("audit.{key}")), "KubeXM's audit policy and log rotation are its own (kubernetes.securityEnhancement); change the flags with kubernetes.apiserverArgs");
        }
    }
    Ok(version)
}

fn endpoint(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let e = FieldPath::parse("spec.controlPlaneEndpoint");
    let internal = doc.string(&e.key("internalLoadbalancer"));
    let address = doc.string(&e.key("address")).filter(|a| a != "127.0.0.1");
    let port = doc
        .integer(&e.key("port"))
        .and_then(|p| u16::try_from(p).ok());
    if let Some(domain) = doc.string(&e.key("domain")) {
        ctx.cluster.spec.load_balancer.domain = domain;
    }
    if doc.boolean(&e.key("externalDNS")) == Some(true) {
        doc.reject(
            &e.key("externalDNS"),
            &Value::Bool(true),
            "KubeXM resolves the API domain through /etc/hosts on every node, not an external DNS server",
        );
    }
    match doc.string(&e.join("kubevip.mode")).as_deref() {
        None | Some("ARP") => {}
        Some(other) => doc.reject(
            &e.join("kubevip.mode"),
            &Value::String(other.to_owned()),
            "KubeXM's kube-vip announces the VIP with ARP",
        ),
    }
    let masters = ctx.cluster.spec.role_groups.master.len();
    let endpoint = match internal.as_deref() {
        Some("haproxy") => Endpoint::Haproxy,
        Some("kube-vip") => Endpoint::KubeVip { vip: address },
        Some(other) => {
            return Err(ctx.field_error(
                &e.key("internalLoadbalancer"),
                format!("internal load balancer `{other}` is not haproxy or kube-vip"),
                "use haproxy or kube-vip",
            ))
        }
        None => match address {
            Some(a) => Endpoint::Address(a),
            None => Endpoint::FirstMaster,
        },
    };
    set_endpoint(ctx, endpoint, &e, port, masters)
}

fn system(doc: &mut Doc, ctx: &mut Ctx<'_>) {
    let s = FieldPath::parse("spec.system");
    let sys = &mut ctx.cluster.spec.system;
    sys.ntp_servers = doc.strings(&s.key("ntpServers"));
    sys.timezone = doc.string(&s.key("timezone"));
    sys.rpms = doc.strings(&s.key("rpms"));
    sys.debs = doc.strings(&s.key("debs"));
    for field in ["preInstall", "postInstall", "postClusterInstall"] {
        doc.unmapped(
            &s.key(field),
            "KubeKey runs inline bash with copied materials; KubeXM's system.preInstall/postInstall take script paths on the control host: put the commands in a script and list it",
        );
    }
    doc.unmapped(
        &s.key("skipConfigureOS"),
        "KubeXM always prepares the OS (modules, sysctl, hosts, time)",
    );
}

fn etcd(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let e = FieldPath::parse("spec.etcd");
    let kind = doc.string(&e.key("type"));
    let etcd = &mut ctx.cluster.spec.etcd;
    match kind.as_deref() {
        None | Some("kubekey") => etcd.kind = EtcdType::Kubexm,
        Some("kubeadm") => etcd.kind = EtcdType::Kubeadm,
        Some("external") => {
            etcd.kind = EtcdType::External;
            etcd.endpoints = doc.strings(&e.join("external.endpoints"));
            etcd.ca_file = doc.string(&e.join("external.caFile"));
            etcd.cert_file = doc.string(&e.join("external.certFile"));
            etcd.key_file = doc.string(&e.join("external.keyFile"));
        }
        Some(other) => {
            return Err(ctx.field_error(
                &e.key("type"),
                format!("etcd type `{other}` is not kubekey, kubeadm or external"),
                "use kubekey, kubeadm or external",
            ))
        }
    }
    if kind.as_deref() != Some("external") {
        doc.unmapped(&e.key("external"), "only read with etcd.type external");
    }
    etcd.data_dir = doc.string(&e.key("dataDir"));
    let kind = ctx.cluster.spec.etcd.kind;
    let groups = &mut ctx.cluster.spec.role_groups;
    match kind {
        EtcdType::Kubexm if groups.etcd.is_empty() => {
            groups.etcd = groups.master.clone();
            ctx.decide(
                "spec.roleGroups.etcd",
                "the masters: etcd type kubekey needs etcd hosts and none were named",
            );
        }
        EtcdType::Kubeadm | EtcdType::External
            if !groups.etcd.is_empty()
                && (kind == EtcdType::External || groups.etcd != groups.master) =>
        {
            groups.etcd.clear();
            ctx.decide(
                "spec.roleGroups.etcd",
                "emptied: etcd runs on the masters (kubeadm) or outside the cluster (external), so KubeXM names no etcd hosts",
            );
        }
        _ => {}
    }
    for (field, default) in [("port", 2379), ("peerPort", 2380)] {
        if let Some(v) = doc.integer(&e.key(field)) {
            if v != default {
                doc.reject(
                    &e.key(field),
                    &Value::from(v),
                    format!("KubeXM's etcd listens on etcd's standard port {default}"),
                );
            }
        }
    }
    let tuning =
        "KubeXM runs etcd with etcd's own defaults for this setting; there is no field for it";
    for field in [
        "extraArgs",
        "heartbeatInterval",
        "electionTimeout",
        "snapshotCount",
        "autoCompactionRetention",
        "metrics",
        "quotaBackendBytes",
        "maxRequestBytes",
        "maxSnapshots",
        "maxWals",
        "logLevel",
    ] {
        doc.unmapped(&e.key(field), tuning);
    }
    let backup = "KubeXM installs no periodic etcd backup; back up with the day-2 backup command";
    for field in [
        "backupDir",
        "backupPeriod",
        "keepBackupNumber",
        "backupScript",
    ] {
        doc.unmapped(&e.key(field), backup);
    }
    Ok(())
}

fn network(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let n = FieldPath::parse("spec.network");
    let plugin = match doc.string(&n.key("plugin")) {
        None => Plugin::Calico,
        Some(name) => common::plugin(&name).ok_or_else(|| {
            ctx.field_error(
                &n.key("plugin"),
                format!("network plugin `{name}` is not one KubeXM installs"),
                "use calico, flannel, cilium, kubeovn, hybridnet or none",
            )
        })?,
    };
    let net = &mut ctx.cluster.spec.network;
    net.plugin = plugin;
    if let Some(cidr) = doc.string(&n.key("kubePodsCIDR")) {
        net.pod_cidr = cidr;
    }
    if let Some(cidr) = doc.string(&n.key("kubeServiceCIDR")) {
        net.service_cidr = cidr;
    }
    common::fit_dual_stack(doc, ctx, &n.key("kubePodsCIDR"), &n.key("kubeServiceCIDR"));
    // Calico: one encapsulation mode.
    let c = n.key("calico");
    let ipip = doc.string(&c.key("ipipMode"));
    let vxlan = doc.string(&c.key("vxlanMode"));
    let mode = match (ipip.as_deref(), vxlan.as_deref()) {
        (Some("Always"), None | Some("Never")) | (None, None | Some("Never")) => "ipip",
        (None | Some("Never"), Some("Always")) => "vxlan",
        (Some("Never"), None | Some("Never")) => "none",
        _ => {
            for (field, v) in [("ipipMode", &ipip), ("vxlanMode", &vxlan)] {
                if let Some(v) = v {
                    doc.reject(
                        &c.key(field),
                        &Value::String(v.clone()),
                        "KubeXM's calico mode is ipip, vxlan or none (Always/Never); CrossSubnet is not offered, so the pool uses calico's default (ipip)",
                    );
                }
            }
            "ipip"
        }
    };
    if plugin == Plugin::Calico && mode != "ipip" {
        ctx.cluster.spec.network.calico.mode = Some(mode.to_owned());
    }
    if let Some(mtu) = doc.integer(&c.key("vethMTU")).filter(|m| *m > 0) {
        ctx.cluster.spec.network.calico.mtu = u32::try_from(mtu).ok();
    }
    for field in [
        "ipAutoDetectionMethod",
        "ipv4NatOutgoing",
        "ipv6NatOutgoing",
        "defaultIPPOOL",
        "typha",
        "controller",
    ] {
        doc.unmapped(
            &c.key(field),
            "KubeXM's calico takes version, mode and MTU only; the operator's defaults apply",
        );
    }
    if let Some(backend) = doc.string(&n.join("flannel.backendMode")) {
        ctx.cluster.spec.network.flannel.mode = Some(backend);
    }
    doc.unmapped(
        &n.join("flannel.directRouting"),
        "KubeXM's flannel takes its backend mode only",
    );
    kube_ovn(doc, ctx, &n.key("kubeovn"), plugin);
    hybridnet(doc, ctx, &n.key("hybridnet"), plugin);
    if doc.boolean(&n.join("multusCNI.enabled")) == Some(true) {
        // The delegate keeps its options under its own key.
        let net = &mut ctx.cluster.spec.network;
        net.plugin = Plugin::Multus;
        net.multus = MultusOptions {
            delegate: Some(plugin),
            ..MultusOptions::default()
        };
    }
    Ok(())
}

/// KubeKey's `network.kubeovn`: the join CIDR and the tunnel type map (to `kubeOvn.joinCidr` and
/// `kubeOvn.mode`); the rest is left to kube-ovn's chart defaults.
fn kube_ovn(doc: &mut Doc, ctx: &mut Ctx<'_>, k: &FieldPath, plugin: Plugin) {
    let opts = &mut ctx.cluster.spec.network.kube_ovn;
    for key in doc.keys(k) {
        let field = k.key(&key);
        match key.as_str() {
            "joinCIDR" | "tunnelType" if plugin != Plugin::KubeOvn => doc.unmapped(
                &field,
                "applies to the kube-ovn plugin only, which this cluster does not use",
            ),
            "joinCIDR" => opts.join_cidr = doc.string(&field),
            "tunnelType" => match doc.string(&field) {
                Some(t) if ["geneve", "vxlan", "stt"].contains(&t.as_str()) => {
                    opts.common.mode = Some(t);
                }
                Some(t) => doc.reject(
                    &field,
                    &Value::String(t),
                    "kube-ovn's tunnel is geneve, vxlan or stt; its default (geneve) applies",
                ),
                None => {}
            },
            _ => doc.unmapped(
                &field,
                "KubeXM's kube-ovn takes its version, tunnel type (mode) and join CIDR; its SSL, DPDK, gateway, VLAN and per-component settings are the chart's defaults",
            ),
        }
    }
}

/// KubeKey's `network.hybridnet`: the default network type maps (to
/// `hybridnet.defaultNetworkType`); the chart's init network always covers the pod CIDR.
fn hybridnet(doc: &mut Doc, ctx: &mut Ctx<'_>, h: &FieldPath, plugin: Plugin) {
    for key in doc.keys(h) {
        let field = h.key(&key);
        match key.as_str() {
            "defaultNetworkType" if plugin != Plugin::Hybridnet => doc.unmapped(
                &field,
                "applies to the hybridnet plugin only, which this cluster does not use",
            ),
            "defaultNetworkType" => match doc.string(&field).map(|t| t.to_ascii_lowercase()) {
                Some(t) if t == "overlay" => {
                    ctx.cluster.spec.network.hybridnet.default_network_type =
                        Some(HybridnetNetworkType::Overlay);
                }
                Some(t) if t == "underlay" => {
                    ctx.cluster.spec.network.hybridnet.default_network_type =
                        Some(HybridnetNetworkType::Underlay);
                }
                Some(t) => doc.reject(
                    &field,
                    &Value::String(t),
                    "hybridnet's default network type is Overlay or Underlay; Overlay applies",
                ),
                None => {}
            },
            "networks" => doc.unmapped(
                &field,
                "KubeXM creates only the chart's init overlay network (over the pod CIDR); define these networks and subnets with hybridnet's own Network and Subnet resources after install",
            ),
            _ => doc.unmapped(
                &field,
                "KubeXM's hybridnet takes its version and default network type; its init, network policy and interface settings are the chart's defaults",
            ),
        }
    }
}

fn registry(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let r = FieldPath::parse("spec.registry");
    let kind = doc.string(&r.key("type"));
    let private = doc.string(&r.key("privateRegistry"));
    let has_host = !ctx.cluster.spec.role_groups.registry.is_empty();
    let reg = &mut ctx.cluster.spec.registry;
    reg.kind = match (kind.as_deref(), has_host, &private) {
        (Some("harbor"), true, _) => RegistryType::Harbor,
        (None | Some("registry" | "docker-registry"), true, _) => RegistryType::Registry,
        (_, false, Some(_)) => RegistryType::External,
        (_, false, None) => RegistryType::None,
        (Some(other), true, _) => {
            return Err(ctx.field_error(
                &r.key("type"),
                format!("registry type `{other}` is not registry or harbor"),
                "use harbor, or leave type empty for the docker registry",
            ))
        }
    };
    if let Some(p) = &private {
        let (host, ns) = split_registry(p);
        reg.private_registry = Some(host);
        if let Some(ns) = ns {
            reg.namespace = Some(ns);
        }
    }
    if kind.is_some() && !has_host {
        ctx.decide(
            "spec.registry.type",
            "external: KubeKey deploys a registry only on a roleGroups.registry host, and none is named; KubeXM seeds the privateRegistry",
        );
    }
    if let Some(ns) = doc.string(&r.key("namespaceOverride")) {
        let reg = &mut ctx.cluster.spec.registry;
        reg.namespace = Some(ns);
        reg.rewrite = RewriteMode::Flatten;
        ctx.decide(
            "spec.registry.rewrite",
            "flatten: KubeKey's namespaceOverride replaces each image's namespace (`registry.k8s.io/coredns/coredns` → `<privateRegistry>/<namespace>/coredns`)",
        );
    }
    if let Some(dir) = doc.string(&r.key("registryDataDir")) {
        ctx.cluster.spec.registry.data_dir = Some(dir);
    }
    let auths = r.key("auths");
    for host in doc.keys(&auths) {
        let at = auths.key(&host);
        let mut auth = RegistryAuth {
            username: doc.string(&at.key("username")),
            password: doc.string(&at.key("password")).map(Secret::new),
            plain_http: doc.boolean(&at.key("plainHTTP")).unwrap_or(false),
            skip_tls_verify: doc.boolean(&at.key("skipTLSVerify")).unwrap_or(false),
            ..RegistryAuth::default()
        };
        doc.unmapped(
            &at.key("certsPath"),
            "a directory of certificates on the nodes; KubeXM takes caFile, certFile and keyFile on the control host: set them in spec.registry.auths",
        );
        if auth.plain_http && auth.skip_tls_verify {
            auth.skip_tls_verify = false;
            ctx.decide(
                &format!("spec.registry.auths[\"{host}\"].skipTLSVerify"),
                "dropped: plainHTTP speaks no TLS",
            );
        }
        let (host_only, _) = split_registry(&host);
        ctx.cluster.spec.registry.auths.insert(host_only, auth);
    }
    let insecure = r.key("insecureRegistries");
    for (i, host) in doc.strings(&insecure).into_iter().enumerate() {
        let (host, _) = split_registry(&host);
        let auth = ctx
            .cluster
            .spec
            .registry
            .auths
            .entry(host.clone())
            .or_default();
        if !auth.plain_http {
            auth.skip_tls_verify = true;
            ctx.decide(
                &format!("spec.registry.auths[\"{host}\"].skipTLSVerify"),
                format!("true, from insecureRegistries[{i}]"),
            );
        }
    }
    if ctx.cluster.spec.registry.kind == RegistryType::Harbor {
        let private = ctx.cluster.spec.registry.private_registry.clone();
        let admin = private
            .as_ref()
            .and_then(|p| ctx.cluster.spec.registry.auths.get(p))
            .filter(|a| a.username.as_deref() == Some("admin"))
            .and_then(|a| a.password.clone());
        match admin {
            Some(pw) => {
                ctx.cluster.spec.registry.harbor_config.admin_password = Some(pw);
                ctx.decide(
                    "spec.registry.harborConfig.adminPassword",
                    "the password of auths[privateRegistry] for user admin, which KubeKey logs in to Harbor with",
                );
            }
            None => {
                return Err(ctx.field_error(
                    &r.key("auths"),
                    "Harbor needs an admin password and the auths of privateRegistry give none for user admin",
                    "add auths[privateRegistry] with username admin and the password to install Harbor with",
                ))
            }
        }
    }
    doc.unmapped(
        &r.key("registryMirrors"),
        "nodes pull every image from the private registry seeded from the bundle; KubeXM configures no Docker Hub mirrors",
    );
    doc.unmapped(
        &r.key("containerdDataDir"),
        "KubeXM keeps containerd's data in its default /var/lib/containerd",
    );
    doc.unmapped(
        &r.key("dockerDataDir"),
        "KubeXM keeps docker's data in its default /var/lib/docker",
    );
    doc.unmapped(
        &r.key("bridgeIP"),
        "KubeXM leaves docker's bridge address at its default",
    );
    doc.unmapped(
        &r.key("namespaceRewrite"),
        "KubeXM rewrites image paths with registry.namespace and registry.rewrite (keep-path or flatten) only",
    );
    doc.unmapped(
        &r.key("remoteMirrors"),
        "KubeXM's nodes pull from the private registry only",
    );
    Ok(())
}

fn addons(doc: &mut Doc, ctx: &mut Ctx<'_>) {
    let list = FieldPath::parse("spec.addons");
    for i in 0..doc.len(&list) {
        let at = list.index(i);
        let Some(name) = doc.string(&at.key("name")) else {
            doc.unmapped(&at, "an addon without a name");
            continue;
        };
        let namespace = doc
            .string(&at.key("namespace"))
            .unwrap_or_else(|| "default".to_owned());
        for field in ["preInstall", "postInstall"] {
            doc.unmapped(&at.key(field), "KubeXM runs no scripts around an addon");
        }
        for field in ["retries", "delay"] {
            doc.unmapped(
                &at.key(field),
                "KubeXM's addon install uses its own retry policy",
            );
        }
        let chart = at.join("sources.chart");
        let yaml = at.join("sources.yaml");
        if doc.has(&chart) {
            if !doc.has(&chart.key("version")) {
                doc.unmapped(
                    &chart,
                    format!("addon `{name}` has no chart version; KubeXM bundles one exact version: add it with source.chart.version"),
                );
                continue;
            }
            let chart_name = doc.string(&chart.key("name"));
            let repo = doc.string(&chart.key("repo"));
            let path = doc.string(&chart.key("path"));
            let version = doc.string(&chart.key("version"));
            let values = doc.strings(&chart.key("values"));
            doc.unmapped(
                &chart.key("valuesFile"),
                "KubeXM takes chart values inline (addons[].values); copy the file's settings there",
            );
            doc.unmapped(&chart.key("wait"), "KubeXM always waits for the release");
            let (values, bad) = parse_flags(&values);
            for b in bad {
                doc.reject(
                    &chart.key("values"),
                    &Value::String(b),
                    "not a `key=value` setting",
                );
            }
            ctx.cluster.spec.addons.push(Addon {
                name,
                namespace,
                kind: AddonType::Helm,
                source: AddonSource {
                    path,
                    url: None,
                    chart: Chart {
                        name: chart_name,
                        version,
                        repo,
                    },
                    sha256: None,
                },
                values,
                images: Vec::new(),
            });
        } else if doc.has(&yaml) {
            let paths = doc.strings(&yaml.key("path"));
            doc.unmapped(
                &yaml.key("values"),
                "KubeXM's YAML addons take flat string values only; set them in addons[].values",
            );
            let several = paths.len() > 1;
            for (j, p) in paths.into_iter().enumerate() {
                let is_url = p.starts_with("http://") || p.starts_with("https://");
                let addon_name = if several {
                    format!("{name}-{}", j + 1)
                } else {
                    name.clone()
                };
                if is_url {
                    ctx.decide(
                        &format!("spec.addons[\"{addon_name}\"].source.sha256"),
                        format!("missing: `kubexm-build bundle` needs the sha256 of {p}"),
                    );
                }
                ctx.cluster.spec.addons.push(Addon {
                    name: addon_name,
                    namespace: namespace.clone(),
                    kind: AddonType::Yaml,
                    source: AddonSource {
                        path: (!is_url).then(|| p.clone()),
                        url: is_url.then_some(p),
                        chart: Chart::default(),
                        sha256: None,
                    },
                    values: Default::default(),
                    images: Vec::new(),
                });
            }
            if several {
                ctx.decide(
                    &format!("spec.addons (from `{name}`)"),
                    "one YAML addon per path (KubeXM's addon has one source)",
                );
            }
        }
    }
}
