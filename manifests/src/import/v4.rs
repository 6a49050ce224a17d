//! KubeKey v4 `Config` + `Inventory` (`kk create config`, `kk create inventory`) → cluster.yaml.
//!
//! KubeKey v4's Config is a tree of playbook variables; the names read here are those of its
//! documentation (`docs/en/reference/config.md`, `docs/en/installation/*.md`) and built-in
//! defaults (`builtin/core/defaults/config/*.yaml`) in kubesphere/kubekey, branch main.

use serde_json::Value;

use super::common::{
    self, host_fields, is_dns_label, is_template, map_feature_gates, new_host, push_host,
    set_endpoint, split_registry, Ctx, Endpoint,
};
use super::doc::{Doc, FieldPath};
use super::{ImportError, ImportOptions, Imported};
use crate::catalog::Catalog;
use crate::model::{
    EtcdType, KubernetesType, MultusOptions, Plugin, RegistryAuth, RegistryType, RuntimeType,
};
use crate::secret::Secret;

const UNKNOWN: &str = "not a KubeKey v4 setting the importer knows; not mapped";

/// Imports a v4 Config with its Inventory.
pub(crate) fn import(
    (cfile, config): (&str, Value),
    (ifile, inventory): (&str, Value),
    opts: &ImportOptions,
    catalog: &Catalog,
) -> Result<Imported, ImportError> {
    let mut cdoc = Doc::new(config);
    let mut idoc = Doc::new(inventory);
    let p = FieldPath::parse;
    for d in [&mut cdoc, &mut idoc] {
        d.get(&p("apiVersion"));
        d.get(&p("kind"));
    }
    let mut ctx = Ctx::new(ifile, opts, catalog);
    let name = idoc
        .string(&p("metadata.name"))
        .or_else(|| cdoc.string(&p("metadata.name")));
    ctx.set_name(name, &p("metadata.name"))?;

    inventory_hosts(&mut idoc, &mut ctx)?;
    groups(&mut idoc, &mut ctx)?;

    ctx.file = cfile.to_owned();
    let s = p("spec");
    let version = {
        let field = s.join("kubernetes.kube_version");
        let from = cdoc.string(&field).filter(|v| !is_template(v));
        ctx.set_version(from, &field)?
    };
    kubernetes(&mut cdoc, &mut ctx, version)?;
    endpoint(&mut cdoc, &mut ctx)?;
    etcd(&mut cdoc, &mut ctx);
    cri(&mut cdoc, &mut ctx)?;
    cni(&mut cdoc, &mut ctx)?;
    image_registry(&mut cdoc, &mut ctx)?;
    dns_and_native(&mut cdoc, &mut ctx);
    cdoc.unmapped(
        &s.key("zone"),
        "the download zone is chosen when building the bundle: `kubexm-build bundle --zone cn`",
    );
    storage_class(&mut cdoc, &mut ctx);
    cdoc.unmapped(
        &s.key("image_manifests"),
        "extra images: list them under an addon's images to bundle and seed them",
    );
    for field in [
        "work_dir",
        "binary_dir",
        "scripts_dir",
        "artifact_dir",
        "tmp_dir",
    ] {
        cdoc.unmapped(
            &s.key(field),
            "KubeKey's own working directories; KubeXM's is --work-dir",
        );
    }
    cdoc.unmapped(
        &s.key("transform_architectures"),
        "KubeXM reads amd64/x86_64 and arm64/aarch64 itself",
    );
    // The same hardening (file modes, kubelet anonymous access off, audit logging), without
    // KubeKey's kernel panic sysctls.
    if cdoc.boolean(&s.key("security_enhancement")) == Some(true) {
        ctx.cluster.spec.kubernetes.security_enhancement = true;
    }
    let audit = s.key("audit");
    let audited = if cdoc.keys(&audit).is_empty() {
        cdoc.boolean(&audit) == Some(true)
    } else {
        cdoc.boolean(&audit.key("enabled")) == Some(true)
    };
    if audited {
        ctx.cluster.spec.kubernetes.security_enhancement = true;
    }
    for key in cdoc.keys(&audit) {
        if key != "enabled" {
            cdoc.unmapped(&audit.key(&key), "KubeXM's audit policy and log rotation are its own (kubernetes.securityEnhancement); change the flags with kubernetes.apiserverArgs");
        }
    }
    cdoc.unmapped(
        &s.key("delete"),
        "what `kubexm-install delete` removes is not configured in cluster.yaml",
    );
    cdoc.unmapped(&s.key("cluster_require"), "KubeXM's preflight limits are spec.system.preflight; its supported versions are its catalog's");
    cdoc.unmapped(&s.key("certs"), "KubeXM makes its own CA and certificates");
    cdoc.unmapped(
        &s.key("download"),
        "packaging options of `kk artifact export`; KubeXM's bundle holds what cluster.yaml needs, for the hosts' architectures",
    );
    Ok(ctx.finish(
        "kubekey.kubesphere.io/v1 Config + Inventory",
        vec![(cfile, cdoc), (ifile, idoc)],
        UNKNOWN,
    ))
}

fn inventory_hosts(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let hosts = FieldPath::parse("spec.hosts");
    for name in doc.keys(&hosts) {
        let at = hosts.key(&name);
        let c = at.key("connector");
        let kind = doc.string(&c.key("type"));
        let local = kind.as_deref() == Some("local") || (kind.is_none() && name == "localhost");
        let host_addr = doc.string(&c.key("host"));
        let v4 = doc.string(&at.key("internal_ipv4"));
        let v6 = doc.string(&at.key("internal_ipv6"));
        let address = match (host_addr, local) {
            (Some(a), _) => a,
            (None, true) => "127.0.0.1".to_owned(),
            (None, false) => v4
                .clone()
                .or_else(|| v6.clone())
                .unwrap_or_else(|| name.clone()),
        };
        if local {
            ctx.decide(
                &format!("spec.hosts[\"{name}\"].address"),
                format!("{address}: KubeKey runs on `{name}` itself (local connector); KubeXM reaches every host over SSH, so sshd must accept the control host there"),
            );
        }
        let mut host = new_host(name.clone(), address.clone());
        match (v4, v6) {
            (Some(ip), other) => {
                if ip != address {
                    host.internal_address = Some(ip);
                }
                if let Some(v6) = other {
                    doc.reject(
                        &at.key("internal_ipv6"),
                        &Value::String(v6),
                        "KubeXM keeps one in-cluster address per host (the IPv4 one)",
                    );
                }
            }
            (None, Some(ip)) if ip != address => host.internal_address = Some(ip),
            _ => {}
        }
        host_fields(doc, ctx, &mut host, &c, &at)?;
        let key_path = doc.string(&c.key("private_key"));
        let key_content = doc.string(&c.key("private_key_content"));
        let password = doc.string(&c.key("password"));
        doc.unmapped(
            &at.key("taints"),
            "KubeXM taints masters only (kubeadm's default); add other taints after install",
        );
        doc.unmapped(
            &at.key("storage"),
            "KubeXM does not partition or mount disks",
        );
        doc.unmapped(
            &at.key("kubernetes"),
            "per-host storage and multipath settings are not KubeXM's",
        );
        push_host(ctx, host, key_path, key_content, password);
    }
    Ok(())
}

/// The hosts of a group, following nested `groups`.
fn group_members(doc: &mut Doc, groups: &FieldPath, name: &str, depth: u32) -> Vec<String> {
    let at = groups.key(name);
    let mut out = doc.strings(&at.key("hosts"));
    if depth < 8 {
        for inner in doc.strings(&at.key("groups")) {
            for h in group_members(doc, groups, &inner, depth + 1) {
                if !out.contains(&h) {
                    out.push(h);
                }
            }
        }
    }
    out
}

fn groups(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let groups = FieldPath::parse("spec.groups");
    let mut wanted = Vec::new();
    for group in doc.keys(&groups) {
        let slot = match group.as_str() {
            "kube_control_plane" => 1,
            "kube_worker" => 2,
            "etcd" => 0,
            "image_registry" => 3,
            "k8s_cluster" => {
                // The union of control plane and workers: nothing of its own.
                group_members(doc, &groups, &group, 0);
                continue;
            }
            "nfs" => 4,
            _ => {
                doc.unmapped(
                    &groups.key(&group),
                    "KubeXM's role groups are etcd, master, worker, registry, loadbalancer and nfs",
                );
                continue;
            }
        };
        doc.unmapped(
            &groups.join(&format!("{group}.vars")),
            "group variables are KubeKey playbook settings",
        );
        let members = group_members(doc, &groups, &group, 0);
        wanted.push((slot, group, members));
    }
    // Hosts named in groups only (KubeKey's default inventory names `localhost` that way).
    for (_, group, members) in &wanted {
        for m in members {
            if ctx.cluster.spec.hosts.iter().any(|h| &h.name == m) {
                continue;
            }
            let address = if m == "localhost" {
                "127.0.0.1".to_owned()
            } else if m.parse::<std::net::IpAddr>().is_ok() {
                m.clone()
            } else {
                return Err(ctx.field_error(
                    &groups.join(&format!("{group}.hosts")),
                    format!(
                        "host `{m}` is in a group but not in spec.hosts, so its address is unknown"
                    ),
                    "define it under spec.hosts with connector.host and internal_ipv4",
                ));
            };
            ctx.decide(
                &format!("spec.hosts[\"{m}\"]"),
                format!("added with address {address}: named in groups (first `{group}`) but not under spec.hosts, as KubeKey's local connector allows; KubeXM reaches it over SSH"),
            );
            ctx.cluster.spec.hosts.push(new_host(m.clone(), address));
        }
    }
    for (slot, _, members) in wanted {
        super::common::add_to_role_group(&mut ctx.cluster.spec.role_groups, slot, members);
    }
    if ctx.cluster.spec.role_groups.master.is_empty() {
        return Err(ctx.field_error(
            &groups.key("kube_control_plane"),
            "no control-plane host",
            "list at least one host under groups.kube_control_plane.hosts",
        ));
    }
    Ok(())
}

fn kubernetes(
    doc: &mut Doc,
    ctx: &mut Ctx<'_>,
    version: crate::version::KubeVersion,
) -> Result<(), ImportError> {
    let k = FieldPath::parse("spec.kubernetes");
    ctx.cluster.spec.kubernetes.kind = KubernetesType::Kubeadm;
    if let Some(name) = doc.string(&k.key("cluster_name")) {
        if is_dns_label(&name) {
            ctx.cluster.spec.kubernetes.cluster_name = Some(name);
        } else {
            doc.reject(
                &k.key("cluster_name"),
                &Value::String(name),
                "KubeXM's clusterName is a DNS label",
            );
        }
    }
    let kube = &mut ctx.cluster.spec.kubernetes;
    kube.apiserver_cert_extra_sans = doc
        .strings(&k.join("apiserver.certSANs"))
        .into_iter()
        .filter(|s| !is_template(s))
        .collect();
    if let Some(port) = doc.integer(&k.join("apiserver.port")) {
        if port != 6443 {
            doc.reject(
                &k.join("apiserver.port"),
                &Value::from(port),
                "KubeXM's API servers listen on 6443",
            );
        }
    }
    for (path, which) in [
        ("apiserver.extra_args", 0),
        ("controller_manager.extra_args", 1),
        ("scheduler.extra_args", 2),
        ("kubelet.extra_args", 3),
    ] {
        let at = k.join(path);
        for key in doc.keys(&at) {
            let Some(v) = doc.string(&at.key(&key)) else {
                continue;
            };
            if is_template(&v) {
                doc.reject(
                    &at.key(&key),
                    &Value::String(v),
                    "a KubeKey template; not rendered",
                );
                continue;
            }
            let kube = &mut ctx.cluster.spec.kubernetes;
            let target = match which {
                0 => &mut kube.apiserver_args,
                1 => &mut kube.controller_manager_args,
                2 => &mut kube.scheduler_args,
                _ => &mut kube.kubelet_args,
            };
            target.insert(key, v);
        }
    }
    if let Some(mode) = doc.string(&k.join("kube_proxy.mode")) {
        match common::proxy_mode(&mode) {
            Some(m) => ctx.cluster.spec.kubernetes.proxy_mode = Some(m),
            None => doc.reject(
                &k.join("kube_proxy.mode"),
                &Value::String(mode),
                "KubeXM's kube-proxy modes are ipvs, iptables and nftables",
            ),
        }
    }
    if let Some(max) = doc.integer(&k.join("kubelet.max_pods")) {
        ctx.cluster.spec.kubernetes.max_pods = u32::try_from(max).unwrap_or(u32::MAX);
    }
    let gates = map_feature_gates(doc, &k.join("kubelet.feature_gates"), version);
    ctx.cluster.spec.kubernetes.feature_gates = gates;
    doc.unmapped(
        &k.key("helm_version"),
        "KubeXM bundles the helm its catalog pairs with the charts",
    );
    doc.unmapped(
        &k.key("sandbox_image"),
        "KubeXM takes the pause image its catalog pairs with the Kubernetes version",
    );
    doc.unmapped(
        &k.key("image_repository"),
        "KubeXM pulls Kubernetes images from the private registry seeded from the bundle",
    );
    doc.unmapped(
        &k.join("kube_proxy.manage"),
        "kube-proxy is deployed by kubeadm",
    );
    doc.unmapped(&k.join("kube_proxy.config"), "free-form kube-proxy configuration is not taken; use kubernetes.kubeProxyArgs for single settings");
    for field in [
        "pod_pids_limit",
        "container_log_max_size",
        "container_log_max_files",
    ] {
        doc.unmapped(
            &k.join(&format!("kubelet.{field}")),
            "KubeXM has no field for this kubelet setting; pass it with kubernetes.kubeletArgs if you need it",
        );
    }
    doc.unmapped(
        &k.key("certs"),
        "KubeXM makes its own CA and certificates (kubeadm's, or KubeXM's PKI)",
    );
    doc.unmapped(&k.key("patches"), "KubeXM applies no kubeadm patches");
    doc.unmapped(
        &k.key("skip_phases"),
        "KubeXM runs every kubeadm init phase",
    );
    doc.unmapped(
        &k.key("backup"),
        "KubeXM keeps no kubeadm-config backups on the masters",
    );
    Ok(())
}

fn endpoint(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let e = FieldPath::parse("spec.kubernetes.control_plane_endpoint");
    if let Some(host) = doc.string(&e.key("host")).filter(|h| !is_template(h)) {
        ctx.cluster.spec.load_balancer.domain = host;
    }
    let port = doc
        .string(&e.key("port"))
        .filter(|p| !is_template(p))
        .and_then(|p| p.parse::<u16>().ok());
    let kind = doc.string(&e.key("type"));
    let vip = doc
        .string(&e.join("kube_vip.address"))
        .filter(|a| !is_template(a));
    let local = doc
        .string(&e.join("local.address"))
        .filter(|a| !is_template(a));
    match doc.string(&e.join("kube_vip.mode")).as_deref() {
        None | Some("ARP") => {}
        Some(other) => doc.reject(
            &e.join("kube_vip.mode"),
            &Value::String(other.to_owned()),
            "KubeXM's kube-vip announces the VIP with ARP",
        ),
    }
    for field in [
        "kube_vip.env",
        "kube_vip.image",
        "haproxy.address",
        "haproxy.health_port",
        "haproxy.image",
    ] {
        doc.unmapped(
            &e.join(field),
            "KubeXM renders its own kube-vip and haproxy static pods (images from the catalog)",
        );
    }
    let masters = ctx.cluster.spec.role_groups.master.len();
    let endpoint = match kind.as_deref() {
        None | Some("local") => match local {
            Some(a) => Endpoint::Address(a),
            None => Endpoint::FirstMaster,
        },
        Some("haproxy") => Endpoint::Haproxy,
        Some("kube-vip") => Endpoint::KubeVip { vip },
        Some(other) => {
            return Err(ctx.field_error(
                &e.key("type"),
                format!("endpoint type `{other}` is not local, kube-vip or haproxy"),
                "use local, kube-vip or haproxy",
            ))
        }
    };
    set_endpoint(ctx, endpoint, &e, port, masters)
}

fn etcd(doc: &mut Doc, ctx: &mut Ctx<'_>) {
    let e = FieldPath::parse("spec.etcd");
    let kind = doc.string(&e.key("deployment_type"));
    match kind.as_deref() {
        // v4's default: etcd as a service on the etcd group, certificates by KubeKey.
        None | Some("external") => ctx.cluster.spec.etcd.kind = EtcdType::Kubexm,
        Some("internal") => ctx.cluster.spec.etcd.kind = EtcdType::Kubeadm,
        Some(other) => doc.reject(
            &e.key("deployment_type"),
            &Value::String(other.to_owned()),
            "not internal or external; KubeXM's etcd type kubexm is used",
        ),
    }
    if let Some(dir) = doc
        .string(&e.join("env.data_dir"))
        .filter(|d| !is_template(d))
    {
        ctx.cluster.spec.etcd.data_dir = Some(dir);
    }
    let groups = &mut ctx.cluster.spec.role_groups;
    match ctx.cluster.spec.etcd.kind {
        EtcdType::Kubexm if groups.etcd.is_empty() => {
            groups.etcd = groups.master.clone();
            ctx.decide(
                "spec.roleGroups.etcd",
                "the masters: no etcd group was given",
            );
        }
        EtcdType::Kubeadm if !groups.etcd.is_empty() && groups.etcd != groups.master => {
            groups.etcd.clear();
            ctx.decide(
                "spec.roleGroups.etcd",
                "emptied: with deployment_type internal, etcd runs on the masters",
            );
        }
        _ => {}
    }
    doc.unmapped(
        &e.key("etcd_version"),
        "KubeXM takes the etcd version its catalog pairs with the Kubernetes version; set spec.etcd.version to pin one the catalog has",
    );
    for (field, default) in [("port", 2379), ("peer_port", 2380)] {
        if let Some(v) = doc.integer(&e.key(field)) {
            if v != default {
                doc.reject(
                    &e.key(field),
                    &Value::from(v),
                    format!("KubeXM's etcd listens on {default}"),
                );
            }
        }
    }
    doc.unmapped(
        &e.key("env"),
        "KubeXM runs etcd with etcd's own defaults for these settings",
    );
    doc.unmapped(
        &e.key("backup"),
        "KubeXM installs no periodic etcd backup; back up with the day-2 backup command",
    );
    doc.unmapped(&e.key("performance"), "KubeXM applies no etcd host tuning");
    doc.unmapped(
        &e.key("traffic_priority"),
        "KubeXM applies no etcd traffic shaping",
    );
    doc.unmapped(
        &e.key("image"),
        "KubeXM runs etcd from the bundled binaries, not an image",
    );
    for field in [
        "ca_file",
        "server_cert_file",
        "server_key_file",
        "client_cert_file",
        "client_key_file",
    ] {
        doc.unmapped(&e.key(field), "KubeXM makes etcd's certificates itself");
    }
}

fn cri(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let c = FieldPath::parse("spec.cri");
    match doc.string(&c.key("container_manager")) {
        None => ctx.cluster.spec.runtime.kind = RuntimeType::Containerd,
        Some(name) => match common::runtime_type(&name) {
            Some(t) => ctx.cluster.spec.runtime.kind = t,
            None => {
                return Err(ctx.field_error(
                    &c.key("container_manager"),
                    format!("container manager `{name}` is not one KubeXM installs"),
                    "use containerd or docker",
                ))
            }
        },
    }
    match doc.string(&c.key("cgroup_driver")).as_deref() {
        None | Some("systemd") => {}
        Some(other) => doc.reject(
            &c.key("cgroup_driver"),
            &Value::String(other.to_owned()),
            "KubeXM configures the systemd cgroup driver",
        ),
    }
    for field in [
        "crictl_version",
        "docker_version",
        "cridockerd_version",
        "containerd_version",
        "runc_version",
    ] {
        doc.unmapped(
            &c.key(field),
            "KubeXM takes the versions its catalog pairs with the Kubernetes version; set spec.runtime.version to pin one the catalog has",
        );
    }
    doc.unmapped(
        &c.key("cri_socket"),
        "KubeXM derives the CRI socket from runtime.type",
    );
    doc.unmapped(&c.key("docker"), "KubeXM writes its own docker daemon.json");
    doc.unmapped(
        &c.key("containerd"),
        "KubeXM writes its own containerd config.toml",
    );
    let r = c.key("registry");
    doc.unmapped(
        &r.key("mirrors"),
        "nodes pull every image from the private registry seeded from the bundle; KubeXM configures no mirrors",
    );
    let list = r.key("auths");
    for i in 0..doc.len(&list) {
        let at = list.index(i);
        let Some(host) = doc.string(&at.key("registry")) else {
            doc.unmapped(&at, "an auth entry without a registry");
            continue;
        };
        let (host, _) = split_registry(&host);
        let auth = RegistryAuth {
            username: doc.string(&at.key("username")),
            password: doc.string(&at.key("password")).map(Secret::new),
            skip_tls_verify: doc.boolean(&at.key("skip_tls_verify")).unwrap_or(false),
            plain_http: doc.boolean(&at.key("plain_http")).unwrap_or(false),
            ca_file: doc
                .string(&at.key("ca_cert"))
                .or_else(|| doc.string(&at.key("ca_file"))),
            cert_file: doc.string(&at.key("cert_file")),
            key_file: doc.string(&at.key("key_file")),
        };
        ctx.cluster.spec.registry.auths.insert(host, auth);
    }
    for (i, host) in doc
        .strings(&r.key("insecure_registries"))
        .into_iter()
        .enumerate()
    {
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
                format!("true, from cri.registry.insecure_registries[{i}]"),
            );
        }
    }
    Ok(())
}

fn cni(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let n = FieldPath::parse("spec.cni");
    let plugin = match doc.string(&n.key("type")) {
        None => Plugin::Calico,
        Some(name) => common::plugin(&name).ok_or_else(|| {
            ctx.field_error(
                &n.key("type"),
                format!("network plugin `{name}` is not one KubeXM installs"),
                "use calico, cilium, flannel, kubeovn, hybridnet or other",
            )
        })?,
    };
    let net = &mut ctx.cluster.spec.network;
    net.plugin = plugin;
    if let Some(cidr) = doc.string(&n.key("pod_cidr")).filter(|c| !is_template(c)) {
        net.pod_cidr = cidr;
    }
    if let Some(cidr) = doc
        .string(&n.key("service_cidr"))
        .filter(|c| !is_template(c))
    {
        net.service_cidr = cidr;
    }
    common::fit_dual_stack(doc, ctx, &n.key("pod_cidr"), &n.key("service_cidr"));
    for (field, flag, default) in [
        ("ipv4_mask_size", "node-cidr-mask-size", 24),
        ("ipv6_mask_size", "node-cidr-mask-size-ipv6", 64),
    ] {
        if let Some(size) = doc.integer(&n.key(field)) {
            if size != default {
                ctx.cluster
                    .spec
                    .kubernetes
                    .controller_manager_args
                    .insert(flag.into(), size.to_string());
            }
        }
    }
    match doc.string(&n.key("multi_cni")).as_deref() {
        None | Some("none") => {}
        Some("multus") => {
            let net = &mut ctx.cluster.spec.network;
            net.plugin = Plugin::Multus;
            net.multus = MultusOptions {
                delegate: Some(plugin),
                ..MultusOptions::default()
            };
        }
        Some(other) => doc.reject(
            &n.key("multi_cni"),
            &Value::String(other.to_owned()),
            "KubeXM's only multi-CNI is multus",
        ),
    }
    // kube-ovn's and hybridnet's versions map when the catalog has them: kube-ovn's is its
    // image group's; hybridnet's is its chart's (0.6.8), whose image group the catalog's
    // `hybridnet-chart` fileVersions names (v0.8.8).
    if plugin == Plugin::KubeOvn {
        let field = n.key("kubeovn_version");
        if let Some(v) = doc.string(&field).filter(|v| !is_template(v)) {
            if ctx
                .catalog
                .addon_images
                .get(Plugin::KubeOvn.as_str())
                .is_some_and(|g| g.contains_key(&v))
            {
                ctx.cluster.spec.network.kube_ovn.common.version = Some(v);
            } else {
                doc.reject(
                    &field,
                    &Value::String(v),
                    "the catalog has no kube-ovn image list for this version; the catalog's version for the Kubernetes version applies (add one with --catalog FILE and set spec.network.kubeOvn.version)",
                );
            }
        }
    }
    if plugin == Plugin::Hybridnet {
        let field = n.key("hybridnet_version");
        if let Some(v) = doc.string(&field).filter(|v| !is_template(v)) {
            let image = ctx.catalog.components.get("hybridnet-chart").and_then(|c| {
                c.file_versions
                    .iter()
                    .find(|(_, chart)| chart.trim_start_matches('v') == v.trim_start_matches('v'))
                    .map(|(image, _)| image.clone())
            });
            match image {
                Some(image) => ctx.cluster.spec.network.hybridnet.common.version = Some(image),
                None => doc.reject(
                    &field,
                    &Value::String(v),
                    "the catalog knows no hybridnet chart of this version; the catalog's version for the Kubernetes version applies (add it with --catalog FILE: hybridnet-chart fileVersions)",
                ),
            }
        }
    }
    for field in [
        "calico_version",
        "cilium_version",
        "flannel_version",
        "kubeovn_version",
        "hybridnet_version",
        "spiderpool_version",
    ] {
        if (field == "kubeovn_version" && plugin == Plugin::KubeOvn)
            || (field == "hybridnet_version" && plugin == Plugin::Hybridnet)
        {
            continue;
        }
        doc.unmapped(
            &n.key(field),
            "KubeXM takes the plugin version its catalog pairs with the Kubernetes version; set spec.network.<plugin>.version to pin one the catalog has",
        );
    }
    doc.unmapped(
        &n.key("multus"),
        "KubeXM takes multus's image from its catalog",
    );
    for plugin in ["calico", "cilium", "flannel", "spiderpool"] {
        doc.unmapped(
            &n.key(plugin),
            "KubeXM's plugins take version, mode and MTU only; the plugin's defaults apply",
        );
    }
    doc.unmapped(
        &n.key("kubeovn"),
        "KubeXM writes kube-ovn's chart values itself (pod, service and join CIDRs, the masters, images from the private registry); set spec.network.kubeOvn.joinCidr and mode for the join CIDR and tunnel",
    );
    doc.unmapped(
        &n.key("hybridnet"),
        "KubeXM writes hybridnet's chart values itself (the init network over the pod CIDR, the image from the private registry); set spec.network.hybridnet.defaultNetworkType for the default network",
    );
    Ok(())
}

fn image_registry(doc: &mut Doc, ctx: &mut Ctx<'_>) -> Result<(), ImportError> {
    let r = FieldPath::parse("spec.image_registry");
    let kind = doc.string(&r.key("type"));
    let registry = doc
        .string(&r.join("auth.registry"))
        .filter(|v| !is_template(v));
    let has_host = !ctx.cluster.spec.role_groups.registry.is_empty();
    let reg = &mut ctx.cluster.spec.registry;
    reg.kind = match (kind.as_deref(), has_host, &registry) {
        (Some("harbor"), true, _) => RegistryType::Harbor,
        (Some("docker-registry"), true, _) => RegistryType::Registry,
        (_, _, Some(_)) => RegistryType::External,
        (_, _, None) => RegistryType::None,
    };
    if kind.is_some() && !has_host {
        ctx.decide(
            "spec.registry.type",
            "no registry is deployed: KubeKey deploys one only on the image_registry group, and it is empty",
        );
    }
    if let Some(value) = &registry {
        let (host, ns) = split_registry(value);
        let reg = &mut ctx.cluster.spec.registry;
        reg.private_registry = Some(host.clone());
        reg.namespace = ns;
        let a = r.key("auth");
        let auth = RegistryAuth {
            username: doc.string(&a.key("username")).filter(|v| !is_template(v)),
            password: doc
                .string(&a.key("password"))
                .filter(|v| !is_template(v))
                .map(Secret::new),
            plain_http: doc.boolean(&a.key("plain_http")).unwrap_or(false),
            skip_tls_verify: doc.boolean(&a.key("skip_tls_verify")).unwrap_or(false),
            ca_file: doc.string(&a.key("ca_file")).filter(|v| !is_template(v)),
            cert_file: doc.string(&a.key("cert_file")).filter(|v| !is_template(v)),
            key_file: doc.string(&a.key("key_file")).filter(|v| !is_template(v)),
        };
        let has_any = auth.username.is_some()
            || auth.plain_http
            || auth.skip_tls_verify
            || auth.ca_file.is_some();
        if has_any {
            ctx.cluster.spec.registry.auths.insert(host, auth);
        }
    } else {
        doc.unmapped(
            &r.key("auth"),
            "no registry address is set, so its credentials are not used",
        );
    }
    if ctx.cluster.spec.registry.kind == RegistryType::Harbor {
        let private = ctx.cluster.spec.registry.private_registry.clone();
        let admin = private
            .as_ref()
            .and_then(|p| ctx.cluster.spec.registry.auths.get(p))
            .filter(|a| a.username.as_deref() == Some("admin"))
            .and_then(|a| a.password.clone());
        let Some(pw) = admin else {
            return Err(ctx.field_error(
                &r.key("auth"),
                "Harbor needs an admin password and image_registry.auth gives none for user admin",
                "set image_registry.auth.username admin and the password to install Harbor with",
            ));
        };
        ctx.cluster.spec.registry.harbor_config.admin_password = Some(pw);
        ctx.decide(
            "spec.registry.harborConfig.adminPassword",
            "image_registry.auth.password (user admin), which KubeKey installs Harbor with",
        );
    }
    doc.unmapped(
        &r.key("ha_vip"),
        "KubeXM deploys one registry host; no registry VIP",
    );
    for field in [
        "harbor_version",
        "docker_registry_version",
        "dockercompose_version",
        "keepalived_version",
    ] {
        doc.unmapped(
            &r.key(field),
            "KubeXM takes the registry's version from its catalog",
        );
    }
    for field in ["http_port", "https_port"] {
        doc.unmapped(
            &r.key(field),
            "KubeXM's registry serves HTTPS on the port in privateRegistry",
        );
    }
    for field in [
        "dockerio_registry",
        "quayio_registry",
        "ghcrio_registry",
        "k8sio_registry",
    ] {
        doc.unmapped(&r.key(field), "KubeXM rewrites every image to the private registry (registry.namespace, registry.rewrite)");
    }
    Ok(())
}

/// `storage_class.local` → `spec.storage.localVolume`; `storage_class.nfs` → `spec.storage.nfs`
/// (served by the host of the `nfs` group, `roleGroups.nfs`).
fn storage_class(doc: &mut Doc, ctx: &mut Ctx<'_>) {
    use crate::model::{LocalVolume, NfsStorage, DEFAULT_LOCAL_BASE_PATH, DEFAULT_NFS_PATH};
    let sc = FieldPath::parse("spec.storage_class");
    let versions = "KubeXM's manifests are written for one release each (catalog groups openebs-localpv, nfs-subdir-external-provisioner)";
    doc.unmapped(&sc.key("localpv_provisioner_version"), versions);
    doc.unmapped(&sc.key("nfs_provisioner_version"), versions);
    let local = sc.key("local");
    // KubeKey's defaults: local volumes on, the default class.
    let local_on = doc.boolean(&local.key("enabled")).unwrap_or(true);
    let mut local_default = doc.boolean(&local.key("default")).unwrap_or(true);
    let local_path = doc.string(&local.key("path"));
    let nfs = sc.key("nfs");
    let nfs_on = doc.boolean(&nfs.key("enabled")).unwrap_or(false);
    let nfs_default = doc.boolean(&nfs.key("default")).unwrap_or(false);
    let nfs_path = doc.string(&nfs.key("path"));
    doc.unmapped(
        &nfs.key("server"),
        "the NFS server is the host of the nfs group (roleGroups.nfs), at its internal address",
    );
    let has_nfs_host = !ctx.cluster.spec.role_groups.nfs.is_empty();
    if nfs_on && has_nfs_host {
        if local_on && local_default && nfs_default {
            local_default = false;
            ctx.decide(
                "spec.storage.localVolume.default",
                "false: storage_class.nfs.default is true too, and a cluster has one default class",
            );
        }
        ctx.cluster.spec.storage.nfs = Some(NfsStorage {
            path: nfs_path.unwrap_or_else(|| DEFAULT_NFS_PATH.to_owned()),
            default: nfs_default,
        });
    } else if nfs_on {
        doc.reject(
            &nfs.key("enabled"),
            &Value::Bool(true),
            "KubeXM serves NFS from the host under roleGroups.nfs, and the inventory's nfs group names none; add one and set spec.storage.nfs",
        );
    } else if has_nfs_host {
        ctx.decide(
            "spec.roleGroups.nfs",
            "kept: the nfs group's host serves NFS, and KubeXM installs the nfs-client StorageClass with it (storage_class.nfs.enabled is false)",
        );
    }
    if local_on {
        ctx.cluster.spec.storage.local_volume = Some(LocalVolume {
            enabled: true,
            base_path: local_path.unwrap_or_else(|| DEFAULT_LOCAL_BASE_PATH.to_owned()),
            default: local_default,
        });
    }
}

fn dns_and_native(doc: &mut Doc, ctx: &mut Ctx<'_>) {
    let d = FieldPath::parse("spec.dns");
    if let Some(domain) = doc.string(&d.key("domain")).filter(|v| !is_template(v)) {
        ctx.cluster.spec.kubernetes.dns_domain = domain;
    }
    if doc.boolean(&d.join("nodelocaldns.enabled")) == Some(false) {
        doc.reject(
            &d.join("nodelocaldns.enabled"),
            &Value::Bool(false),
            "KubeXM always deploys NodeLocal DNSCache (kubelets use its address)",
        );
    }
    doc.unmapped(
        &d.join("nodelocaldns.ip"),
        "KubeXM's NodeLocal DNSCache listens on 169.254.25.10",
    );
    doc.unmapped(
        &d.join("nodelocaldns.image"),
        "KubeXM takes the node-cache image from its catalog",
    );
    doc.unmapped(&d.key("coredns"), "KubeXM's CoreDNS takes no custom zones, hosts or forwarders; edit the Corefile after install");
    let n = FieldPath::parse("spec.native");
    let enabled = doc.boolean(&n.join("ntp.enabled")).unwrap_or(true);
    let servers = doc.strings(&n.join("ntp.servers"));
    if enabled {
        ctx.cluster.spec.system.ntp_servers = servers;
    } else if !servers.is_empty() {
        ctx.decide(
            "spec.system.ntpServers",
            "empty: native.ntp.enabled is false",
        );
    }
    if let Some(tz) = doc.string(&n.key("timezone")) {
        ctx.cluster.spec.system.timezone = Some(tz);
    }
    doc.unmapped(
        &n.key("nfs"),
        "KubeXM's NFS server exports one directory, spec.storage.nfs.path (storage_class.nfs.path)",
    );
    doc.unmapped(
        &n.key("set_hostname"),
        "KubeXM always sets each host's name to its spec.hosts name",
    );
    doc.unmapped(
        &n.key("localDNS"),
        "KubeXM writes its entries to /etc/hosts",
    );
}
