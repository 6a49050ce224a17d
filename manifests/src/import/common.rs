//! What both KubeKey formats share once read: the cluster being built, the decisions, the
//! secrets moved to files, and the mappings whose rules are the same (versions, feature gates,
//! component flags, the API endpoint, role groups, registry hosts).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde_json::Value;

use super::doc::{Doc, FieldPath};
use super::report::{Decision, Report};
use super::{ImportError, ImportOptions, Imported, SecretFile};
use crate::catalog::Catalog;
use crate::model::{
    Arch, ClusterFile, ClusterSpec, Etcd, Extra, Host, InternalLbType, Kubernetes, KubernetesType,
    LbMode, LoadBalancer, Metadata, Network, ProxyMode, Registry, RoleGroups, Runtime, RuntimeType,
    System, API_VERSION, KIND_CLUSTER,
};
use crate::ranges;
use crate::secret::Secret;
use crate::version::KubeVersion;

/// The cluster being built and everything said about it.
pub(crate) struct Ctx<'a> {
    /// The file named in errors.
    pub(crate) file: String,
    pub(crate) opts: &'a ImportOptions,
    pub(crate) catalog: &'a Catalog,
    pub(crate) cluster: ClusterFile,
    pub(crate) secret_files: Vec<SecretFile>,
    pub(crate) decisions: Vec<Decision>,
}

impl<'a> Ctx<'a> {
    pub(crate) fn new(file: &str, opts: &'a ImportOptions, catalog: &'a Catalog) -> Self {
        Self {
            file: file.to_owned(),
            opts,
            catalog,
            cluster: base_cluster(),
            secret_files: Vec::new(),
            decisions: Vec::new(),
        }
    }

    /// Records a choice the importer made.
    pub(crate) fn decide(&mut self, field: &str, what: impl Into<String>) {
        self.decisions.push(Decision {
            field: field.to_owned(),
            what: what.into(),
        });
    }

    /// An error about a KubeKey field.
    pub(crate) fn field_error(
        &self,
        field: &FieldPath,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> ImportError {
        ImportError::Field {
            file: self.file.clone(),
            field: field.to_string(),
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// The result, with the unmapped fields of `docs` (named by file when there are several).
    pub(crate) fn finish(self, source: &str, docs: Vec<(&str, Doc)>, unknown: &str) -> Imported {
        let several = docs.len() > 1;
        let mut report = Report {
            source: source.to_owned(),
            decisions: self.decisions,
            ..Report::default()
        };
        for (file, doc) in docs {
            let (unmapped, mapped) = doc.finish(unknown);
            report.mapped += mapped;
            report.unmapped.extend(unmapped.into_iter().map(|mut u| {
                if several {
                    u.field = format!("{file}: {}", u.field);
                }
                u
            }));
        }
        Imported {
            cluster: self.cluster,
            secret_files: self.secret_files,
            report,
        }
    }

    /// `metadata.name`: `--name`, else the KubeKey name.
    pub(crate) fn set_name(
        &mut self,
        from: Option<String>,
        field: &FieldPath,
    ) -> Result<(), ImportError> {
        let name = match (&self.opts.name, from) {
            (Some(n), _) => n.clone(),
            (None, Some(n)) => n,
            (None, None) => {
                return Err(self.field_error(field, "no cluster name is given", "pass --name NAME"))
            }
        };
        if !is_dns_label(&name) {
            return Err(self.field_error(
                field,
                format!("`{name}` is not a valid KubeXM cluster name"),
                "pass --name with lowercase letters, digits and `-`",
            ));
        }
        self.cluster.metadata.name = name;
        Ok(())
    }

    /// `spec.kubernetes.version`: `--kubernetes-version`, else KubeKey's when the catalog has it.
    pub(crate) fn set_version(
        &mut self,
        from: Option<String>,
        field: &FieldPath,
    ) -> Result<KubeVersion, ImportError> {
        let versions = self.catalog.kubernetes_versions();
        let supported = format!(
            "newest: {}",
            crate::catalog::newest_versions(versions.iter(), 6)
        );
        if let Some(v) = &self.opts.kubernetes_version {
            let parsed: KubeVersion = v.parse().map_err(|e: crate::version::VersionError| {
                self.field_error(field, e.to_string(), supported.clone())
            })?;
            if let Some(kk) = &from {
                if kk != v {
                    self.decide(
                        "spec.kubernetes.version",
                        format!("{v} from --kubernetes-version (KubeKey asked for {kk})"),
                    );
                }
            }
            self.cluster.spec.kubernetes.version = v.clone();
            return Ok(parsed);
        }
        let Some(v) = from else {
            return Err(self.field_error(
                field,
                "no Kubernetes version is given",
                format!("pass --kubernetes-version ({supported})"),
            ));
        };
        let parsed: Option<KubeVersion> = v.parse().ok();
        match parsed {
            Some(p) if self.catalog.release(p).is_some() => {
                self.cluster.spec.kubernetes.version = v;
                Ok(p)
            }
            _ => Err(self.field_error(
                field,
                format!("Kubernetes {v} is not in KubeXM's catalog"),
                format!("pass --kubernetes-version with one it has ({supported}), or add {v} with --catalog FILE"),
            )),
        }
    }

    /// Moves a host password into a 0600 file and points `passwordFile` at it.
    pub(crate) fn host_password(&mut self, host: usize, password: String) {
        let name = self.cluster.spec.hosts[host].name.clone();
        let path = format!("{}/{name}.password", self.opts.secrets_dir);
        self.secret_files.push(SecretFile {
            path: path.clone(),
            content: Secret::new(format!("{password}\n")),
        });
        self.cluster.spec.hosts[host].password_file = Some(path);
    }

    /// Moves an inline SSH private key into a 0600 file and points `privateKeyPath` at it.
    pub(crate) fn host_key(&mut self, host: usize, key: String) {
        let name = self.cluster.spec.hosts[host].name.clone();
        let path = format!("{}/{name}.key", self.opts.secrets_dir);
        let content = if key.ends_with('\n') {
            key
        } else {
            format!("{key}\n")
        };
        self.secret_files.push(SecretFile {
            path: path.clone(),
            content: Secret::new(content),
        });
        self.cluster.spec.hosts[host].private_key_path = Some(path);
    }

    /// Expands role group entries against the hosts; names that are not hosts are dropped and
    /// reported (KubeKey fails on them at run time; KubeXM at validation).
    pub(crate) fn role_entries(
        &mut self,
        doc: &mut Doc,
        field: &FieldPath,
        entries: Vec<String>,
    ) -> Vec<String> {
        let known: BTreeSet<String> = self
            .cluster
            .spec
            .hosts
            .iter()
            .map(|h| h.name.clone())
            .collect();
        let mut out: Vec<String> = Vec::new();
        for (i, entry) in entries.into_iter().enumerate() {
            let at = field.index(i);
            let names = match ranges::expand(&entry) {
                Ok(n) => n,
                Err(e) => {
                    doc.reject(&at, &Value::String(entry.clone()), e.to_string());
                    continue;
                }
            };
            let (kept, dropped): (Vec<String>, Vec<String>) =
                names.into_iter().partition(|n| known.contains(n));
            if !dropped.is_empty() {
                doc.reject(
                    &at,
                    &Value::String(entry.clone()),
                    format!(
                        "{} not in spec.hosts, dropped{}",
                        name_list(&dropped),
                        if kept.is_empty() {
                            String::new()
                        } else {
                            format!(" (kept {})", kept.join(", "))
                        }
                    ),
                );
            }
            for name in kept {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        out
    }
}

fn name_list(names: &[String]) -> String {
    match names {
        [one] => format!("host `{one}` is"),
        [first, .., last] if names.len() > 4 => {
            format!("hosts `{first}` … `{last}` ({}) are", names.len())
        }
        _ => format!(
            "hosts {} are",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// An empty description with KubeXM's defaults; the importers fill it in.
fn base_cluster() -> ClusterFile {
    ClusterFile {
        api_version: API_VERSION.to_owned(),
        kind: KIND_CLUSTER.to_owned(),
        metadata: Metadata {
            name: String::new(),
        },
        spec: ClusterSpec {
            hosts: Vec::new(),
            role_groups: RoleGroups::default(),
            kubernetes: Kubernetes {
                kind: KubernetesType::Kubeadm,
                version: String::new(),
                cluster_name: None,
                dns_domain: "cluster.local".to_owned(),
                // KubeKey's default mode.
                proxy_mode: Some(ProxyMode::Ipvs),
                max_pods: 110,
                feature_gates: BTreeMap::new(),
                apiserver_cert_extra_sans: Vec::new(),
                apiserver_args: BTreeMap::new(),
                controller_manager_args: BTreeMap::new(),
                scheduler_args: BTreeMap::new(),
                kubelet_args: BTreeMap::new(),
                kube_proxy_args: BTreeMap::new(),
                kube_proxy: crate::model::KubeProxyOptions::default(),
                kubelet: crate::model::KubeletOptions::default(),
                ready_wait: crate::model::ReadyWait::default(),
                kata: crate::model::Switch::default(),
                node_feature_discovery: crate::model::Switch::default(),
                security_enhancement: false,
            },
            etcd: Etcd::default(),
            runtime: Runtime::default(),
            network: Network::default(),
            load_balancer: LoadBalancer::default(),
            registry: Registry::default(),
            system: System::default(),
            extra: Extra::default(),
            addons: Vec::new(),
            storage: crate::model::Storage::default(),
            backup: None,
        },
    }
}

/// Adds `names` to role group `slot` (0 etcd, 1 master, 2 worker, else registry) of `groups`,
/// each name once; both KubeKey formats map their groups onto these slots.
pub(crate) fn add_to_role_group(
    groups: &mut crate::model::RoleGroups,
    slot: usize,
    names: impl IntoIterator<Item = String>,
) {
    let target = match slot {
        0 => &mut groups.etcd,
        1 => &mut groups.master,
        2 => &mut groups.worker,
        3 => &mut groups.registry,
        _ => &mut groups.nfs,
    };
    for n in names {
        if !target.contains(&n) {
            target.push(n);
        }
    }
}

/// A host with KubeXM's defaults.
pub(crate) fn new_host(name: String, address: String) -> Host {
    Host {
        name,
        address,
        internal_address: None,
        internal_address_v6: None,
        port: 22,
        user: "root".to_owned(),
        password: None,
        password_env: None,
        password_file: None,
        private_key_path: None,
        arch: Arch::Amd64,
        labels: BTreeMap::new(),
    }
}

/// `amd64`/`x86_64` and `arm64`/`aarch64`.
/// The fields both KubeKey formats give a host alike: `port` and `user` under `conn` (the host
/// itself in v1alpha2, its `connector` in v4), `arch` and `labels` under `at`.
///
/// # Errors
///
/// An architecture KubeXM does not bundle.
pub(crate) fn host_fields(
    doc: &mut Doc,
    ctx: &Ctx<'_>,
    host: &mut Host,
    conn: &FieldPath,
    at: &FieldPath,
) -> Result<(), ImportError> {
    if let Some(port) = doc.integer(&conn.key("port")) {
        match u16::try_from(port) {
            Ok(p) if p > 0 => host.port = p,
            _ => doc.reject(&conn.key("port"), &Value::from(port), "not a TCP port"),
        }
    }
    if let Some(user) = doc.string(&conn.key("user")) {
        host.user = user;
    }
    if let Some(arch) = doc.string(&at.key("arch")) {
        host.arch = parse_arch(&arch).ok_or_else(|| {
            ctx.field_error(
                &at.key("arch"),
                format!("architecture `{arch}` is not one KubeXM bundles"),
                "use amd64 or arm64",
            )
        })?;
    }
    for key in doc.keys(&at.key("labels")) {
        if let Some(v) = doc.string(&at.key("labels").key(&key)) {
            host.labels.insert(key, v);
        }
    }
    Ok(())
}

/// Adds `host` with its credentials: the key path as given, an inline key and a password each
/// written to its own 0600 file. Returns the host's index.
pub(crate) fn push_host(
    ctx: &mut Ctx<'_>,
    mut host: Host,
    key_path: Option<String>,
    inline_key: Option<String>,
    password: Option<String>,
) -> usize {
    host.private_key_path = key_path;
    ctx.cluster.spec.hosts.push(host);
    let idx = ctx.cluster.spec.hosts.len() - 1;
    if let Some(key) = inline_key {
        ctx.host_key(idx, key);
    }
    if let Some(pw) = password {
        ctx.host_password(idx, pw);
    }
    idx
}

pub(crate) fn parse_arch(s: &str) -> Option<Arch> {
    match s {
        "amd64" | "x86_64" => Some(Arch::Amd64),
        "arm64" | "aarch64" => Some(Arch::Arm64),
        _ => None,
    }
}

/// Picks the in-cluster address from KubeKey's `IPv4,IPv6` pair: the IPv4 one when there are
/// two (KubeXM keeps one address per host). Returns the address and the part left out.
pub(crate) fn split_internal(value: &str) -> (String, Option<String>) {
    let parts: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let v4 = parts
        .iter()
        .position(|p| p.parse::<IpAddr>().is_ok_and(|ip| ip.is_ipv4()));
    match (parts.as_slice(), v4) {
        ([one], _) => ((*one).to_owned(), None),
        (many, Some(i)) => {
            let rest: Vec<&str> = many
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| *p)
                .collect();
            (many[i].to_owned(), Some(rest.join(",")))
        }
        (many, None) if !many.is_empty() => (many[0].to_owned(), Some(many[1..].join(","))),
        _ => (String::new(), None),
    }
}

/// `--name=value` / `name=value` / `--flag` component flags as a map. Returns the flags that
/// could not be read.
pub(crate) fn parse_flags(items: &[String]) -> (BTreeMap<String, String>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut bad = Vec::new();
    for item in items {
        let flag = item.trim().trim_start_matches('-');
        match flag.split_once('=') {
            Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => {
                out.insert(k.to_owned(), v.to_owned());
            }
            _ => bad.push(item.clone()),
        }
    }
    (out, bad)
}

/// Keeps the gates the target version still takes; reports the others (removed, or locked to
/// the other value: [`crate::feature_gates`], the list `cluster.yaml` validation uses too).
pub(crate) fn map_feature_gates(
    doc: &mut Doc,
    field: &FieldPath,
    version: KubeVersion,
) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    for key in doc.keys(field) {
        let at = field.key(&key);
        let Some(on) = doc.boolean(&at) else { continue };
        match crate::feature_gates::refusal(&key, on, version) {
            Some(refusal) => doc.reject(&at, &Value::Bool(on), refusal.to_string()),
            None => {
                out.insert(key, on);
            }
        }
    }
    out
}

/// How KubeKey reaches the API servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// haproxy on every worker (v1alpha2 `internalLoadbalancer: haproxy`, v4 `type: haproxy`).
    Haproxy,
    /// kube-vip on the masters, holding `vip`.
    KubeVip { vip: Option<String> },
    /// An address KubeKey does not manage (a load balancer, or a DNS name).
    Address(String),
    /// Nothing: every node reaches the first master.
    FirstMaster,
}

/// Sets `spec.loadBalancer` from KubeKey's endpoint.
pub(crate) fn set_endpoint(
    ctx: &mut Ctx<'_>,
    endpoint: Endpoint,
    field: &FieldPath,
    port: Option<u16>,
    masters: usize,
) -> Result<(), ImportError> {
    let lb = &mut ctx.cluster.spec.load_balancer;
    match endpoint {
        Endpoint::Haproxy => {
            lb.mode = LbMode::Internal;
            lb.internal.kind = InternalLbType::Haproxy;
        }
        Endpoint::KubeVip { vip } => {
            let Some(vip) = vip else {
                return Err(ctx.field_error(
                    field,
                    "kube-vip needs the virtual IP of the API servers",
                    "set the VIP in the KubeKey file (controlPlaneEndpoint.address, or kubernetes.control_plane_endpoint.kube_vip.address)",
                ));
            };
            let Some(iface) = ctx.opts.vip_interface.clone() else {
                return Err(ctx.field_error(
                    field,
                    "kube-vip needs the network interface that carries the VIP; KubeKey detects it on each master, KubeXM takes it from cluster.yaml",
                    "pass --vip-interface IFACE (e.g. eth0)",
                ));
            };
            let lb = &mut ctx.cluster.spec.load_balancer;
            lb.mode = LbMode::Internal;
            lb.internal.kind = InternalLbType::KubeVip;
            lb.vip = Some(vip);
            lb.interface = Some(iface.clone());
            ctx.decide(
                "spec.loadBalancer.interface",
                format!("{iface} from --vip-interface"),
            );
        }
        Endpoint::Address(address) => {
            if address.parse::<IpAddr>().is_ok() {
                lb.mode = LbMode::External;
                lb.external.kind = crate::model::ExternalLbType::External;
                lb.vip = Some(address);
                if let Some(p) = port {
                    lb.port = p;
                }
                return Ok(());
            }
            return Err(ctx.field_error(
                field,
                format!("`{address}` is not an IP address; KubeXM writes the API domain into /etc/hosts itself and needs the load balancer's IP"),
                "give the load balancer's IP address",
            ));
        }
        Endpoint::FirstMaster if masters > 1 => {
            lb.mode = LbMode::Internal;
            lb.internal.kind = InternalLbType::Haproxy;
            ctx.decide(
                "spec.loadBalancer",
                format!("internal haproxy: KubeKey would point every node at the first of the {masters} masters; KubeXM refuses a multi-master cluster without a load balancer and uses KubeKey's own localhost load balancing (a haproxy on every worker)"),
            );
        }
        Endpoint::FirstMaster => {
            lb.mode = LbMode::None;
        }
    }
    if let Some(p) = port {
        if p != 6443 {
            ctx.decide(
                "spec.loadBalancer.port",
                format!(
                    "6443: an internal load balancer serves the API servers' own port, not {p}"
                ),
            );
        }
    }
    Ok(())
}

/// KubeXM gives every node a /64 of IPv6 pod addresses (a /24 of IPv4). KubeKey's samples
/// use a /112 IPv6 pod range with a /120 per node; that range cannot hold one KubeXM node
/// range, so the IPv6 halves of both CIDRs are dropped (single-stack IPv4) and reported.
pub(crate) fn fit_dual_stack(
    doc: &mut Doc,
    ctx: &mut Ctx<'_>,
    pod_field: &FieldPath,
    svc_field: &FieldPath,
) {
    let net = &ctx.cluster.spec.network;
    let pods: Vec<&str> = net.pod_cidr.split(',').map(str::trim).collect();
    let services: Vec<&str> = net.service_cidr.split(',').map(str::trim).collect();
    let too_small = |c: &&&str| {
        c.parse::<ipnet::IpNet>()
            .is_ok_and(|n| !n.addr().is_ipv4() && n.prefix_len() > 64)
    };
    let Some(small) = pods.iter().find(too_small).map(|s| (*s).to_owned()) else {
        return;
    };
    let v4 = |list: &[&str]| -> Option<String> {
        list.iter()
            .find(|c| c.parse::<ipnet::IpNet>().is_ok_and(|n| n.addr().is_ipv4()))
            .map(|c| (*c).to_owned())
    };
    let (Some(pod4), Some(svc4)) = (v4(&pods), v4(&services)) else {
        return;
    };
    let old_svc = net.service_cidr.clone();
    let old_pod = net.pod_cidr.clone();
    let net = &mut ctx.cluster.spec.network;
    net.pod_cidr = pod4;
    net.service_cidr = svc4;
    let reason = format!("the IPv6 pod range `{small}` is smaller than the /64 KubeXM gives each node, so the cluster is single-stack IPv4 (the IPv4 halves are kept)");
    doc.reject(pod_field, &Value::String(old_pod), reason.clone());
    if old_svc.contains(',') {
        doc.reject(svc_field, &Value::String(old_svc), reason);
    }
}

/// Maps KubeKey's container manager name.
pub(crate) fn runtime_type(name: &str) -> Option<RuntimeType> {
    match name {
        "containerd" => Some(RuntimeType::Containerd),
        "docker" => Some(RuntimeType::Docker),
        "crio" | "cri-o" => Some(RuntimeType::CriO),
        "isula" | "isulad" => Some(RuntimeType::Isulad),
        _ => None,
    }
}

/// Maps KubeKey's network plugin name.
pub(crate) fn plugin(name: &str) -> Option<crate::model::Plugin> {
    use crate::model::Plugin;
    match name {
        "calico" => Some(Plugin::Calico),
        "flannel" => Some(Plugin::Flannel),
        "cilium" => Some(Plugin::Cilium),
        "kubeovn" | "kube-ovn" => Some(Plugin::KubeOvn),
        "hybridnet" => Some(Plugin::Hybridnet),
        // KubeKey's `none` and v4's `other`: the user brings the CNI.
        "none" | "other" => Some(Plugin::None),
        _ => None,
    }
}

/// `ipvs`/`iptables`/`nftables`.
pub(crate) fn proxy_mode(name: &str) -> Option<ProxyMode> {
    match name {
        "ipvs" => Some(ProxyMode::Ipvs),
        "iptables" => Some(ProxyMode::Iptables),
        "nftables" => Some(ProxyMode::Nftables),
        _ => None,
    }
}

/// Splits `host[:port][/namespace]` (KubeKey allows a project in the registry address).
pub(crate) fn split_registry(value: &str) -> (String, Option<String>) {
    let value = value
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    match value.split_once('/') {
        Some((host, ns)) if !ns.is_empty() => (host.to_owned(), Some(ns.to_owned())),
        _ => (value.to_owned(), None),
    }
}

/// Whether a KubeKey value is an unrendered template (`{{ .x }}`): it sets nothing KubeXM can use.
pub(crate) fn is_template(s: &str) -> bool {
    s.contains("{{")
}

/// RFC 1123 label.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Writes the real registry and Harbor passwords into the serialized description (the model
/// redacts them when serialized).
pub(crate) fn expose_inline_secrets(cluster: &ClusterFile, value: &mut Value) {
    let registry = &cluster.spec.registry;
    for (host, auth) in &registry.auths {
        if let Some(p) = &auth.password {
            if let Some(slot) = value
                .pointer_mut("/spec/registry/auths")
                .and_then(|a| a.get_mut(host))
                .and_then(|a| a.get_mut("password"))
            {
                *slot = Value::String(p.expose().to_owned());
            }
        }
    }
    if let Some(p) = &registry.harbor_config.admin_password {
        if let Some(slot) = value.pointer_mut("/spec/registry/harborConfig/adminPassword") {
            *slot = Value::String(p.expose().to_owned());
        }
    }
}

/// Whether the description holds passwords inline.
pub(crate) fn has_inline_secrets(cluster: &ClusterFile) -> bool {
    let r = &cluster.spec.registry;
    r.auths.values().any(|a| a.password.is_some())
        || r.harbor_config.admin_password.is_some()
        || cluster.spec.hosts.iter().any(|h| h.password.is_some())
}

/// Fields left out of the written file when they hold KubeXM's default, so the file shows what
/// the import set. (`*` is every item of a list or every value of a map.)
const DEFAULTS: &[(&[&str], &str)] = &[
    (&["spec", "hosts", "*", "port"], "22"),
    (&["spec", "hosts", "*", "user"], "\"root\""),
    (&["spec", "hosts", "*", "arch"], "\"amd64\""),
    (&["spec", "kubernetes", "dnsDomain"], "\"cluster.local\""),
    (&["spec", "kubernetes", "maxPods"], "110"),
    (&["spec", "kubernetes", "proxyMode"], "\"ipvs\""),
    (&["spec", "loadBalancer", "port"], "6443"),
    (
        &["spec", "loadBalancer", "domain"],
        "\"lb.kubexm.internal\"",
    ),
    (&["spec", "registry", "rewrite"], "\"keep-path\""),
    (&["spec", "registry", "auths", "*", "plainHTTP"], "false"),
    (
        &["spec", "registry", "auths", "*", "skipTlsVerify"],
        "false",
    ),
    (
        &["spec", "system", "preflight"],
        r#"{"maxClockSkewSeconds":5,"minCpus":2,"minMasterMemoryMiB":3500,"minWorkerMemoryMiB":1700}"#,
    ),
];

/// Drops fields holding their default: the [`DEFAULTS`], the load balancer options of the
/// modes not chosen, nulls, and empty lists and maps.
pub(crate) fn prune(value: &mut Value) {
    prune_empty(value);
    for (path, default) in DEFAULTS {
        if let Ok(default) = serde_json::from_str::<Value>(default) {
            drop_default(value, path, &default);
        }
    }
    if let Some(lb) = value
        .pointer_mut("/spec/loadBalancer")
        .and_then(Value::as_object_mut)
    {
        let mode = lb
            .get("mode")
            .and_then(Value::as_str)
            .unwrap_or("none")
            .to_owned();
        if mode != "internal" {
            lb.remove("internal");
        }
        if mode != "external" {
            lb.remove("external");
        }
    }
    prune_empty(value);
}

fn drop_default(value: &mut Value, path: &[&str], default: &Value) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    match (value, *first) {
        (Value::Array(items), "*") => items
            .iter_mut()
            .for_each(|v| drop_default(v, rest, default)),
        (Value::Object(map), "*") => map
            .values_mut()
            .for_each(|v| drop_default(v, rest, default)),
        (Value::Object(map), key) if rest.is_empty() && map.get(key) == Some(default) => {
            map.remove(key);
        }
        (Value::Object(_), _) if rest.is_empty() => {}
        (Value::Object(map), key) => {
            if let Some(v) = map.get_mut(key) {
                drop_default(v, rest, default);
            }
        }
        _ => {}
    }
}

fn prune_empty(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for v in map.values_mut() {
                prune_empty(v);
            }
            map.retain(|_, v| match v {
                Value::Null => false,
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                _ => true,
            });
        }
        Value::Array(items) => items.iter_mut().for_each(prune_empty),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_address_keeps_ipv4_of_a_dual_stack_pair() {
        assert_eq!(
            split_internal("172.16.0.2,2022::2"),
            ("172.16.0.2".to_owned(), Some("2022::2".to_owned()))
        );
        assert_eq!(
            split_internal("2022::2,172.16.0.2"),
            ("172.16.0.2".to_owned(), Some("2022::2".to_owned()))
        );
        assert_eq!(split_internal("10.0.0.1"), ("10.0.0.1".to_owned(), None));
    }

    #[test]
    fn flags_parse_with_or_without_dashes() {
        let (flags, bad) = parse_flags(&[
            "--root-dir=/var/lib/kubelet".into(),
            "v=2".into(),
            "--no-value".into(),
        ]);
        assert_eq!(flags["root-dir"], "/var/lib/kubelet");
        assert_eq!(flags["v"], "2");
        assert_eq!(bad, ["--no-value"]);
    }

    #[test]
    fn registry_address_splits_off_a_project() {
        assert_eq!(
            split_registry("dockerhub.kubekey.local/library"),
            ("dockerhub.kubekey.local".into(), Some("library".into()))
        );
        assert_eq!(
            split_registry("10.0.0.9:5000"),
            ("10.0.0.9:5000".into(), None)
        );
    }
}
