//! Cross-field validation of a parsed `cluster.yaml`. Every problem names the field path, says
//! what is wrong and what to do; one run reports all of them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use crate::catalog::Catalog;
use crate::display::UntrustedMax;
use crate::image_ref::ImageRef;
use crate::kube_version::{
    DualStack, EtcdVersion, ProxyModeStatus, NEWEST_SUPPORTED_MINOR, OLDEST_SUPPORTED,
};
use crate::model::{
    AddonType, ClusterFile, EtcdType, ExternalLbType, InternalLbType, KubernetesType, LbMode,
    NodePath, Plugin, ProxyMode, ReadyWait, RegistryType, RuntimeType, API_VERSION, KIND_CLUSTER,
};
use crate::name::{
    check_component, is_dns_label, is_dns_subdomain, is_interface_name, INTERFACE_NAME_MAX,
};
use crate::ranges;
use crate::version::KubeVersion;

/// One thing wrong with the cluster description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Field path, e.g. `spec.hosts[2].address`.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub hint: String,
}

/// Characters of a problem's message shown: messages quote values from the file, which may be
/// of any length and hold anything.
const MAX_MESSAGE_SHOWN: usize = 400;
/// Hints are ours, but may list many catalog versions.
const MAX_HINT_SHOWN: usize = 2000;

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            UntrustedMax(&self.path, MAX_MESSAGE_SHOWN),
            UntrustedMax(&self.message, MAX_MESSAGE_SHOWN)
        )?;
        if !self.hint.is_empty() {
            write!(
                f,
                "\n    hint: {}",
                UntrustedMax(&self.hint, MAX_HINT_SHOWN)
            )?;
        }
        Ok(())
    }
}

/// Host names per role, expanded and in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Roles {
    /// etcd members (type kubexm).
    pub etcd: Vec<String>,
    /// Control-plane nodes.
    pub master: Vec<String>,
    /// Workers.
    pub worker: Vec<String>,
    /// Registry hosts.
    pub registry: Vec<String>,
    /// Load balancer hosts.
    pub loadbalancer: Vec<String>,
    /// The NFS server (at most one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nfs: Vec<String>,
}

/// A cluster description that passed validation, with its derived facts.
#[derive(Debug, Clone)]
pub struct ValidCluster {
    /// The document.
    pub file: ClusterFile,
    /// Expanded role groups.
    pub roles: Roles,
    /// Kubernetes version.
    pub version: KubeVersion,
}

impl ValidCluster {
    /// kube-proxy's mode: `spec.kubernetes.proxyMode`, or the default for the version
    /// ([`KubeVersion::default_proxy_mode`]).
    pub fn proxy_mode(&self) -> ProxyMode {
        self.file
            .spec
            .kubernetes
            .proxy_mode
            .unwrap_or_else(|| self.version.default_proxy_mode())
    }

    /// The cluster name Kubernetes uses.
    pub fn cluster_name(&self) -> &str {
        self.file
            .spec
            .kubernetes
            .cluster_name
            .as_deref()
            .unwrap_or(&self.file.metadata.name)
    }
}

struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn add(
        &mut self,
        path: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
            hint: hint.into(),
        });
    }
}

/// Validates `file` against the rules and the `catalog`.
pub fn validate(mut file: ClusterFile, catalog: &Catalog) -> Result<ValidCluster, Vec<Problem>> {
    file.spec.network.normalize();
    let mut c = Checker {
        problems: Vec::new(),
    };
    check_header(&file, &mut c);
    check_no_control_characters(&file, &mut c);
    check_hosts(&file, &mut c);
    let roles = expand_roles(&file, &mut c);
    let version = check_kubernetes(&file, catalog, &mut c);
    check_etcd(&file, &roles, &mut c);
    check_network(&file, version, catalog, &roles, &mut c);
    check_runtime(&file, version, &mut c);
    check_etcd_version(&file, version, catalog, &mut c);
    check_load_balancer(&file, &roles, &mut c);
    check_registry(&file, &roles, &mut c);
    check_system_and_extra(&file, &mut c);
    check_os_releases(&file, catalog, &mut c);
    check_addons(&file, &mut c);
    check_backup(&file, &mut c);
    check_storage(&file, &roles, &mut c);
    match version {
        Some(version) if c.problems.is_empty() => Ok(ValidCluster {
            file,
            roles,
            version,
        }),
        _ => Err(c.problems),
    }
}

/// `spec.backup`: what `backup schedule` would refuse, refused here; whether the key file is
/// there (mode 0600) and systemd accepts the calendar are checked at install time on the
/// control host.
fn check_backup(f: &ClusterFile, c: &mut Checker) {
    let Some(b) = &f.spec.backup else {
        return;
    };
    if f.spec.etcd.kind != EtcdType::Kubexm {
        c.add(
            "spec.backup",
            format!(
                "a scheduled backup covers KubeXM's etcd, but etcd.type is {:?}",
                f.spec.etcd.kind
            ),
            "use etcd.type kubexm, or remove spec.backup and back up that etcd with its own tools",
        );
    }
    if b.keep == 0 {
        c.add(
            "spec.backup.keep",
            "is 0",
            "keep at least 1 backup (older ones are removed after each new one)",
        );
    }
    if !is_calendar(&b.on_calendar) {
        c.add(
            "spec.backup.onCalendar",
            format!("`{}` is not a systemd calendar expression", crate::display::UntrustedMax(&b.on_calendar, 100)),
            "write what systemd's OnCalendar= takes: daily, weekly, hourly, \"*-*-* 02:30:00\" (check it with `systemd-analyze calendar`)",
        );
    }
    if !is_plain_absolute_path(&b.key_file) {
        c.add(
            "spec.backup.keyFile",
            format!("`{}` is not an absolute path of letters, digits and /._-+@", crate::display::UntrustedMax(&b.key_file, 200)),
            "name the key `kubexm-install backup keygen --key-file FILE` wrote, e.g. /root/kubexm-backup.key (it goes into a systemd unit unquoted)",
        );
    }
}

/// `spec.storage` and `roleGroups.nfs`: one NFS host, plain absolute paths (they go into
/// `/etc/exports` and the provisioners' manifests), at most one default StorageClass.
fn check_storage(f: &ClusterFile, roles: &Roles, c: &mut Checker) {
    let st = &f.spec.storage;
    if roles.nfs.len() > 1 {
        c.add(
            "spec.roleGroups.nfs",
            format!(
                "{} hosts are named ({}); KubeXM serves NFS from one host",
                roles.nfs.len(),
                roles.nfs.join(", ")
            ),
            "name exactly one host under roleGroups.nfs (the one whose disk holds the volumes)",
        );
    }
    let nfs_host = !f.spec.role_groups.nfs.is_empty();
    if let Some(nfs) = &st.nfs {
        if !nfs_host {
            c.add(
                "spec.storage.nfs",
                "is set but no host is named under roleGroups.nfs",
                "name the NFS server under roleGroups.nfs (one host of spec.hosts), or remove spec.storage.nfs",
            );
        }
        plain_directory(
            c,
            "spec.storage.nfs.path",
            &nfs.path,
            format!(
                "name the directory the nfs host exports, e.g. {} (it goes into /etc/exports)",
                crate::model::DEFAULT_NFS_PATH
            ),
        );
    }
    if let Some(local) = &st.local_volume {
        plain_directory(
            c,
            "spec.storage.localVolume.basePath",
            &local.base_path,
            format!(
                "name the directory on each node that holds the local volumes, e.g. {}",
                crate::model::DEFAULT_LOCAL_BASE_PATH
            ),
        );
        if local.default && !local.enabled {
            c.add(
                "spec.storage.localVolume.default",
                "asks for the default StorageClass but localVolume.enabled is false",
                "set localVolume.enabled: true, or remove default",
            );
        }
    }
    let nfs_default = nfs_host && st.nfs.as_ref().is_some_and(|n| n.default);
    let local_default = st.local_volume.as_ref().is_some_and(|l| l.default);
    if nfs_default && local_default {
        c.add(
            "spec.storage.localVolume.default",
            "both spec.storage.nfs.default and spec.storage.localVolume.default are true",
            "mark one StorageClass as the default: set default: false on the other (a cluster has one default class)",
        );
    }
}

/// A directory written into host files and manifests: a [`NodePath`], or a problem at `field`
/// with `hint`.
fn plain_directory(c: &mut Checker, field: &str, value: &str, hint: String) {
    node_directory(c, field, Some(value), &hint);
}

/// A directory on the nodes, when set: a [`NodePath`] (the one check), or a problem at `field`.
fn node_directory(c: &mut Checker, field: &str, value: Option<&str>, hint: &str) {
    let Some(value) = value else { return };
    if let Err(e) = NodePath::parse(value) {
        c.add(
            field,
            format!(
                "`{}` is not an absolute path KubeXM may use on the nodes: it {e}",
                UntrustedMax(value, 200)
            ),
            hint,
        );
    }
}

/// Every string of the document, keys included, is free of control characters: each one ends
/// up in a unit, a YAML, TOML or INI file, a script or a terminal on some node, where a newline
/// or an escape changes what the file says. Secrets (serialized redacted) are checked apart.
fn check_no_control_characters(f: &ClusterFile, c: &mut Checker) {
    fn walk(v: &serde_json::Value, at: &str, c: &mut Checker) {
        match v {
            serde_json::Value::String(s) => control_free(c, at, s),
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{at}[{i}]"), c);
                }
            }
            serde_json::Value::Object(map) => {
                for (k, item) in map {
                    let here = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    if k.chars().any(char::is_control) {
                        control_free(c, &here, k);
                    } else {
                        walk(item, &here, c);
                    }
                }
            }
            _ => {}
        }
    }
    match serde_json::to_value(f) {
        Ok(doc) => walk(&doc, "", c),
        Err(e) => c.add("", format!("cannot be read back: {e}"), ""),
    }
    for (i, h) in f.spec.hosts.iter().enumerate() {
        if let Some(p) = &h.password {
            control_free(c, &format!("spec.hosts[{i}].password"), p.expose());
        }
    }
    for (host, auth) in &f.spec.registry.auths {
        if let Some(p) = &auth.password {
            control_free(
                c,
                &format!("spec.registry.auths.{host}.password"),
                p.expose(),
            );
        }
    }
    if let Some(p) = &f.spec.registry.harbor_config.admin_password {
        control_free(c, "spec.registry.harborConfig.adminPassword", p.expose());
    }
}

fn control_free(c: &mut Checker, at: &str, value: &str) {
    if let Some(bad) = value.chars().find(|ch| ch.is_control()) {
        c.add(
            at,
            format!(
                "holds the control character {:?} (U+{:04X})",
                bad,
                u32::from(bad)
            ),
            "remove it: every value is written into files on the nodes, where a newline or escape would change what the file says",
        );
    }
}

/// The characters a systemd calendar expression is written with (what `backup schedule`
/// accepts), at most 100; systemd's own parser judges it at install time.
pub fn is_calendar(s: &str) -> bool {
    !s.trim().is_empty()
        && s.len() <= 100
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b" :*,./~-".contains(&b))
}

/// An absolute path of plain characters (what a systemd unit takes unquoted).
pub fn is_plain_absolute_path(s: &str) -> bool {
    s.len() > 1
        && s.len() <= 4096
        && s.starts_with('/')
        && !s.split('/').any(|p| p == "..")
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+@".contains(&b))
}

fn check_header(f: &ClusterFile, c: &mut Checker) {
    if f.api_version != API_VERSION {
        c.add(
            "apiVersion",
            format!("`{}` is not supported", f.api_version),
            format!("use `apiVersion: {API_VERSION}`"),
        );
    }
    if f.kind != KIND_CLUSTER {
        c.add(
            "kind",
            format!("`{}` is not `{KIND_CLUSTER}`", f.kind),
            format!("use `kind: {KIND_CLUSTER}`"),
        );
    }
    if !is_dns_label(&f.metadata.name) {
        c.add(
            "metadata.name",
            format!("`{}` is not a valid name", f.metadata.name),
            "use lowercase letters, digits and `-` (at most 63, starting and ending with a letter or digit)",
        );
    }
}

fn check_hosts(f: &ClusterFile, c: &mut Checker) {
    let hosts = &f.spec.hosts;
    if hosts.is_empty() {
        c.add(
            "spec.hosts",
            "no hosts are listed",
            "list every machine of the cluster under spec.hosts",
        );
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut addresses: BTreeMap<String, usize> = BTreeMap::new();
    for (i, h) in hosts.iter().enumerate() {
        let at = format!("spec.hosts[{i}]");
        if !is_dns_subdomain(&h.name) {
            c.add(
                format!("{at}.name"),
                format!("`{}` is not a valid host name", h.name),
                "a node name is lowercase letters, digits, `-` and `.` (RFC 1123), e.g. `node1`",
            );
        }
        if let Some(first) = names.insert(&h.name, i) {
            c.add(
                format!("{at}.name"),
                format!("`{}` is already the name of spec.hosts[{first}]", h.name),
                "give every host its own name",
            );
        }
        let address_ok = h.address.parse::<IpAddr>().is_ok() || is_dns_subdomain(&h.address);
        if !address_ok {
            c.add(
                format!("{at}.address"),
                format!("`{}` is neither an IP address nor a DNS name", h.address),
                "write the address the control host reaches this machine at over SSH",
            );
        }
        let internal_field = if h.internal_address.is_some() {
            "internalAddress"
        } else {
            "address"
        };
        match h.internal().parse::<IpAddr>() {
            Err(_) if h.internal_address.is_none() && !address_ok => {}
            Err(_) if h.internal_address.is_some() => c.add(
                format!("{at}.internalAddress"),
                format!("`{}` is not an IP address", h.internal()),
                "internalAddress must be the host's IP inside the cluster network",
            ),
            Err(_) => c.add(
                format!("{at}.internalAddress"),
                format!(
                    "`address` `{}` is a DNS name, so the in-cluster IP is unknown",
                    h.address
                ),
                "set internalAddress to the host's IP inside the cluster network",
            ),
            Ok(ip) => {
                if let Some(first) = addresses.insert(ip.to_string(), i) {
                    c.add(
                        format!("{at}.{internal_field}"),
                        format!("`{ip}` is already the address of spec.hosts[{first}]"),
                        "every host needs its own address",
                    );
                }
            }
        }
        if let Some(v6) = &h.internal_address_v6 {
            if v6.parse::<std::net::Ipv6Addr>().is_err() {
                c.add(
                    format!("{at}.internalAddressV6"),
                    format!("`{v6}` is not an IPv6 address"),
                    "give the host's IPv6 address inside the cluster network (dual-stack)",
                );
            }
        }
        let sources = [
            h.password.is_some(),
            h.password_env.is_some(),
            h.password_file.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            c.add(
                at.clone(),
                "more than one of password, passwordEnv, passwordFile is set",
                "keep exactly one password source",
            );
        }
        if h.port == 0 {
            c.add(
                format!("{at}.port"),
                "port 0 is not a valid SSH port",
                "use the sshd port, usually 22",
            );
        }
        for key in h.labels.keys() {
            if key.is_empty() || key.len() > 253 || key.contains(char::is_whitespace) {
                c.add(
                    format!("{at}.labels"),
                    format!("`{key}` is not a valid label key"),
                    "label keys are `[prefix/]name` without spaces",
                );
            }
        }
    }
}

fn expand_roles(f: &ClusterFile, c: &mut Checker) -> Roles {
    let known: BTreeSet<&str> = f.spec.hosts.iter().map(|h| h.name.as_str()).collect();
    let rg = &f.spec.role_groups;
    let mut expand = |group: &str, entries: &[String]| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("spec.roleGroups.{group}[{i}]");
            match ranges::expand(entry) {
                Err(e) => c.add(
                    at,
                    e.to_string(),
                    "write a host name or a range such as `node[1:3]`",
                ),
                Ok(names) => {
                    for name in names {
                        if !known.contains(name.as_str()) {
                            c.add(
                                at.clone(),
                                format!("host `{name}` is not in spec.hosts"),
                                "add the host to spec.hosts or fix the name",
                            );
                        } else if out.contains(&name) {
                            c.add(
                                at.clone(),
                                format!("host `{name}` is listed twice"),
                                "list each host once per group",
                            );
                        } else {
                            out.push(name);
                        }
                    }
                }
            }
        }
        out
    };
    let roles = Roles {
        etcd: expand("etcd", &rg.etcd),
        master: expand("master", &rg.master),
        worker: expand("worker", &rg.worker),
        registry: expand("registry", &rg.registry),
        loadbalancer: expand("loadbalancer", &rg.loadbalancer),
        nfs: expand("nfs", &rg.nfs),
    };
    if rg.master.is_empty() {
        c.add(
            "spec.roleGroups.master",
            "no control-plane host",
            "name at least one host under roleGroups.master",
        );
    }
    if rg.worker.is_empty() {
        c.add(
            "spec.roleGroups.worker",
            "no worker host",
            "name at least one host under roleGroups.worker (a master may also be listed as a worker)",
        );
    }
    roles
}

fn check_kubernetes(f: &ClusterFile, catalog: &Catalog, c: &mut Checker) -> Option<KubeVersion> {
    let k = &f.spec.kubernetes;
    let version = match k.version.parse::<KubeVersion>() {
        Err(e) => {
            c.add("spec.kubernetes.version", e.to_string(), supported(catalog));
            None
        }
        Ok(v) if !v.is_supported() => {
            c.add(
                "spec.kubernetes.version",
                format!("KubeXM does not install Kubernetes {v}"),
                format!(
                    "use a version from {OLDEST_SUPPORTED} to v{}.{}.x; {}",
                    NEWEST_SUPPORTED_MINOR.0,
                    NEWEST_SUPPORTED_MINOR.1,
                    supported(catalog)
                ),
            );
            None
        }
        Ok(v) if catalog.release(v).is_none() => {
            c.add(
                "spec.kubernetes.version",
                format!("{v} is not in the catalog"),
                format!("{}, or add it with --catalog FILE", supported(catalog)),
            );
            None
        }
        Ok(v) => Some(v),
    };
    if let Some(name) = &k.cluster_name {
        if !is_dns_label(name) {
            c.add(
                "spec.kubernetes.clusterName",
                format!("`{name}` is not a valid cluster name"),
                "use lowercase letters, digits and `-`",
            );
        }
    }
    if !is_dns_subdomain(&k.dns_domain) {
        c.add(
            "spec.kubernetes.dnsDomain",
            format!("`{}` is not a DNS domain", k.dns_domain),
            "use a domain such as `cluster.local`",
        );
    }
    let wait = &k.ready_wait;
    if !(ReadyWait::MIN_SECONDS..=ReadyWait::MAX_SECONDS).contains(&wait.timeout_seconds) {
        c.add(
            "spec.kubernetes.readyWait.timeoutSeconds",
            format!(
                "{} is outside {}..={}",
                wait.timeout_seconds,
                ReadyWait::MIN_SECONDS,
                ReadyWait::MAX_SECONDS
            ),
            "the default is 300 (five minutes); a cluster that needs longer to start its add-ons can wait up to an hour",
        );
    }
    if !(10..=1024).contains(&k.max_pods) {
        c.add(
            "spec.kubernetes.maxPods",
            format!("{} is outside 10..=1024", k.max_pods),
            "kubelet's default is 110; raise it only with a pod CIDR per node to match",
        );
    }
    if let (Some(v), Some(mode)) = (version, k.proxy_mode) {
        let usable = match v.proxy_mode_status(mode) {
            ProxyModeStatus::Unavailable => false,
            ProxyModeStatus::FeatureGate(gate) => k.feature_gates.get(gate) == Some(&true),
            ProxyModeStatus::Beta | ProxyModeStatus::Stable | ProxyModeStatus::Deprecated => true,
        };
        if !usable {
            c.add(
                "spec.kubernetes.proxyMode",
                format!("{} mode is not available in {v}", mode.as_str()),
                "use ipvs or iptables, or Kubernetes v1.31+ (v1.29–v1.30 with featureGates.NFTablesProxyMode: true)",
            );
        }
    }
    if let (Some(v), Some(fail)) = (version, k.kubelet.fail_cgroup_v1) {
        // KEP-4569: the kubelet's failCgroupV1 field exists from v1.31.
        if !v.kubelet_has_fail_cgroup_v1() {
            c.add(
                "spec.kubernetes.kubelet.failCgroupV1",
                format!(
                    "failCgroupV1: {fail} is not a kubelet setting in {v} (it exists from v1.31)"
                ),
                "remove it: kubelets before v1.31 run on cgroup v1 hosts anyway",
            );
        }
    }
    for (i, san) in k.apiserver_cert_extra_sans.iter().enumerate() {
        if san.parse::<IpAddr>().is_err() && !is_dns_subdomain(san.trim_start_matches("*.")) {
            c.add(
                format!("spec.kubernetes.apiserverCertExtraSans[{i}]"),
                format!("`{san}` is neither an IP address nor a DNS name"),
                "list IP addresses or DNS names the API server is reached at",
            );
        }
    }
    check_feature_gates(&k.feature_gates, version, c);
    for (field, args) in [
        ("apiserverArgs", &k.apiserver_args),
        ("controllerManagerArgs", &k.controller_manager_args),
        ("schedulerArgs", &k.scheduler_args),
        ("kubeletArgs", &k.kubelet_args),
        ("kubeProxyArgs", &k.kube_proxy_args),
    ] {
        for name in args.keys() {
            if !is_flag_name(name) {
                c.add(
                    format!("spec.kubernetes.{field}.{name}"),
                    "is not a command-line flag name",
                    "write the flag's name without its value, e.g. `audit-log-maxage: \"30\"` (letters, digits, `-`, `_`, `.`; leading `--` allowed)",
                );
            }
        }
    }
    version
}

/// `spec.kubernetes.featureGates`: names a component reads, and no gate `version` has locked to
/// the other value or removed ([`crate::feature_gates`], the list the KubeKey importer uses).
fn check_feature_gates(
    gates: &BTreeMap<String, bool>,
    version: Option<KubeVersion>,
    c: &mut Checker,
) {
    for (name, on) in gates {
        let at = format!("spec.kubernetes.featureGates.{name}");
        if !crate::feature_gates::is_gate_name(name) {
            c.add(
                at,
                "is not a feature gate name",
                "write the gate's name as Kubernetes documents it (letters and digits, e.g. NFTablesProxyMode)",
            );
        } else if let Some(refusal) =
            version.and_then(|v| crate::feature_gates::refusal(name, *on, v))
        {
            c.add(at, format!("{name}: {refusal}"), refusal.hint());
        }
    }
}

/// A component flag's name as `apiserverArgs` and friends take it: `--` optional, then a
/// letter or digit and letters, digits, `-`, `_`, `.` (it is written as `--name=value` into
/// units and as a YAML key into kubeadm's configuration).
pub fn is_flag_name(name: &str) -> bool {
    let bare = name
        .strip_prefix("--")
        .or_else(|| name.strip_prefix('-'))
        .unwrap_or(name);
    bare.len() <= 128
        && bare
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn supported(catalog: &Catalog) -> String {
    format!(
        "supported versions: {}",
        catalog.kubernetes_versions().join(", ")
    )
}

fn check_etcd(f: &ClusterFile, roles: &Roles, c: &mut Checker) {
    let e = &f.spec.etcd;
    node_directory(
        c,
        "spec.etcd.dataDir",
        e.data_dir.as_deref(),
        "name etcd's own directory, e.g. /var/lib/etcd (it goes into etcd's configuration and `delete` removes it)",
    );
    match e.kind {
        EtcdType::Kubexm => {
            if f.spec.role_groups.etcd.is_empty() {
                c.add(
                    "spec.roleGroups.etcd",
                    "etcd.type is kubexm but no etcd host is named",
                    "name 1, 3 or 5 hosts under roleGroups.etcd (often the masters)",
                );
            } else if roles.etcd.len() % 2 == 0 && !roles.etcd.is_empty() {
                c.add(
                    "spec.roleGroups.etcd",
                    format!("{} etcd members is an even number", roles.etcd.len()),
                    "use an odd number (1, 3, 5): an even member count tolerates no more failures than one less",
                );
            }
        }
        EtcdType::Kubeadm => {
            if f.spec.kubernetes.kind == KubernetesType::Kubexm {
                c.add(
                    "spec.etcd.type",
                    "etcd.type kubeadm (etcd static pods made by kubeadm) does not work with kubernetes.type kubexm, which runs no kubeadm",
                    "use etcd.type kubexm (etcd as a systemd service on roleGroups.etcd) or external, or kubernetes.type kubeadm",
                );
            }
            if !roles.etcd.is_empty() && roles.etcd != roles.master {
                c.add(
                    "spec.roleGroups.etcd",
                    "etcd.type kubeadm runs etcd on the masters, but roleGroups.etcd names other hosts",
                    "remove roleGroups.etcd, or use etcd.type kubexm for dedicated etcd hosts",
                );
            }
        }
        EtcdType::External => {
            if e.endpoints.is_empty() {
                c.add(
                    "spec.etcd.endpoints",
                    "etcd.type is external but no endpoints are given",
                    "list the client URLs, e.g. https://10.0.0.5:2379",
                );
            } else if e.endpoints.len() % 2 == 0 {
                c.add(
                    "spec.etcd.endpoints",
                    format!(
                        "{} endpoints is an even number of etcd members",
                        e.endpoints.len()
                    ),
                    "an etcd cluster should have an odd number of members (1, 3, 5)",
                );
            }
            for (i, ep) in e.endpoints.iter().enumerate() {
                if !(ep.starts_with("https://") || ep.starts_with("http://")) {
                    c.add(
                        format!("spec.etcd.endpoints[{i}]"),
                        format!("`{ep}` is not a URL"),
                        "write endpoints as https://HOST:2379",
                    );
                }
            }
            for (field, v) in [
                ("caFile", &e.ca_file),
                ("certFile", &e.cert_file),
                ("keyFile", &e.key_file),
            ] {
                if v.is_none() {
                    c.add(
                        format!("spec.etcd.{field}"),
                        "is required for etcd.type external",
                        "give the path of the PEM file on the control host",
                    );
                }
            }
        }
    }
}

fn parse_cidrs(c: &mut Checker, field: &str, value: &str) -> Vec<IpNet> {
    let mut nets = Vec::new();
    for part in value.split(',').map(str::trim) {
        match part.parse::<IpNet>() {
            Ok(n) if n.trunc() != n => c.add(
                format!("spec.network.{field}"),
                format!("`{part}` has host bits set"),
                format!("use `{}`", n.trunc()),
            ),
            Ok(n) => nets.push(n),
            Err(_) => c.add(
                format!("spec.network.{field}"),
                format!("`{part}` is not a CIDR"),
                "write it as ADDRESS/PREFIX, e.g. 10.233.64.0/18 (IPv4,IPv6 for dual-stack)",
            ),
        }
    }
    if nets.len() == 2 && nets[0].addr().is_ipv4() == nets[1].addr().is_ipv4() {
        c.add(
            format!("spec.network.{field}"),
            "the two CIDRs are of the same IP family",
            "dual-stack takes one IPv4 and one IPv6 CIDR",
        );
    } else if nets.len() > 2 {
        c.add(
            format!("spec.network.{field}"),
            "more than two CIDRs",
            "give one CIDR, or two for dual-stack",
        );
    }
    nets
}

/// The address NodeLocal DNSCache answers on (the kubelet's `clusterDNS`) on clusters with IPv4
/// services: link-local, as the Kubernetes documentation ("Using NodeLocal DNSCache in
/// Kubernetes Clusters") and kubespray use.
pub const NODELOCAL_DNS_IPV4: &str = "169.254.25.10";
/// Its address for IPv6 services: a Unique Local Address (fd00::/8, as the same page recommends
/// for IPv6); `fd6b:786d::/32` ("kxm") holds 169.254.25.10 in its last 32 bits.
pub const NODELOCAL_DNS_IPV6: &str = "fd6b:786d::a9fe:190a";

fn check_network(
    f: &ClusterFile,
    version: Option<KubeVersion>,
    catalog: &Catalog,
    roles: &Roles,
    c: &mut Checker,
) {
    let n = &f.spec.network;
    let pods = parse_cidrs(c, "podCidr", &n.pod_cidr);
    let services = parse_cidrs(c, "serviceCidr", &n.service_cidr);
    for p in &pods {
        for s in &services {
            if p.contains(&s.network()) || s.contains(&p.network()) {
                c.add(
                    "spec.network.serviceCidr",
                    format!("`{s}` overlaps podCidr `{p}`"),
                    "pick non-overlapping ranges for pods and services",
                );
            }
        }
    }
    for (i, h) in f.spec.hosts.iter().enumerate() {
        let Ok(ip) = h.internal().parse::<IpAddr>() else {
            continue;
        };
        for (field, nets) in [("podCidr", &pods), ("serviceCidr", &services)] {
            if let Some(net) = nets.iter().find(|net| net.contains(&ip)) {
                c.add(
                    format!("spec.network.{field}"),
                    format!(
                        "`{net}` contains the address {ip} of host `{}` (spec.hosts[{i}])",
                        h.name
                    ),
                    "pod and service ranges must not overlap the host network",
                );
            }
        }
    }
    // NodeLocal DNSCache answers on a fixed address on every node (the kubelet's clusterDNS):
    // inside a pod or service range it would shadow a pod or a Service's address.
    for (field, nets) in [("podCidr", &pods), ("serviceCidr", &services)] {
        for net in nets.iter() {
            for dns in [NODELOCAL_DNS_IPV4, NODELOCAL_DNS_IPV6] {
                let Ok(ip) = dns.parse::<IpAddr>() else {
                    continue;
                };
                if net.contains(&ip) {
                    c.add(
                        format!("spec.network.{field}"),
                        format!("`{net}` contains {dns}, the address NodeLocal DNSCache answers on on every node"),
                        "pick a range that leaves it out (169.254.0.0/16 and fd6b:786d::/32 are KubeXM's)",
                    );
                }
            }
        }
    }
    for s in &services {
        let (max_bits, limit) = if s.addr().is_ipv4() {
            (32, 12)
        } else {
            (128, 108)
        };
        if s.prefix_len() < limit {
            c.add(
                "spec.network.serviceCidr",
                format!("`{s}` is larger than kube-apiserver accepts (/{limit} at most for a {max_bits}-bit family)"),
                format!("use a prefix of /{limit} or longer"),
            );
        }
    }
    let nodes: BTreeSet<&String> = roles.master.iter().chain(&roles.worker).collect();
    let cm_args = &f.spec.kubernetes.controller_manager_args;
    for p in &pods {
        // kube-controller-manager gives each node a slice of the pod range: `--node-cidr-mask-size`
        // (single stack) or `-ipv4`/`-ipv6` (dual-stack), 24 and 64 by default
        // (kube-controller-manager reference).
        let (family_key, default_mask, bits) = if p.addr().is_ipv4() {
            ("node-cidr-mask-size-ipv4", 24u8, 32u8)
        } else {
            ("node-cidr-mask-size-ipv6", 64u8, 128u8)
        };
        let key = [family_key, "node-cidr-mask-size"]
            .into_iter()
            .find(|k| cm_args.contains_key(*k));
        let node_mask = match key.map(|k| (k, cm_args[k].trim().parse::<u8>())) {
            None => default_mask,
            Some((_, Ok(m))) if m <= bits => m,
            Some((k, _)) => {
                c.add(
                    format!("spec.kubernetes.controllerManagerArgs.{k}"),
                    format!(
                        "`{}` is not a prefix length of a {bits}-bit address",
                        UntrustedMax(&cm_args[k], 40)
                    ),
                    "give a number such as 24 (IPv4) or 64 (IPv6)",
                );
                continue;
            }
        };
        // Addresses of one node's range the kubelet can give pods (the network and broadcast
        // addresses of an IPv4 range left out).
        let host_bits = u32::from(bits - node_mask);
        let per_node: u64 = if host_bits >= 63 {
            u64::MAX
        } else if p.addr().is_ipv4() {
            (1u64 << host_bits).saturating_sub(2)
        } else {
            1u64 << host_bits
        };
        let max_pods = u64::from(f.spec.kubernetes.max_pods);
        if per_node < max_pods {
            c.add(
                "spec.kubernetes.maxPods",
                format!("{max_pods} pods do not fit a node's /{node_mask} range of `{p}` ({per_node} addresses)"),
                "lower maxPods, or give each node a larger range (a shorter node-cidr-mask-size in spec.kubernetes.controllerManagerArgs)",
            );
        }
        if p.prefix_len() > node_mask {
            c.add(
                "spec.network.podCidr",
                format!("`{p}` is smaller than one node's /{node_mask} pod range"),
                format!("use a prefix of /{node_mask} or shorter"),
            );
        } else {
            // Every node that runs a kubelet (masters and workers) gets one range of each
            // family: the pod CIDR split at the node mask must give at least as many.
            let diff = u32::from(node_mask - p.prefix_len());
            let subnets = if diff >= 64 { u64::MAX } else { 1u64 << diff };
            if (nodes.len() as u64) > subnets {
                let mask_field = key.map_or_else(
                    || "kube-controller-manager's default".to_string(),
                    |k| format!("spec.kubernetes.controllerManagerArgs.{k}: {node_mask}"),
                );
                let mask_key = if pods.len() == 2 {
                    family_key
                } else {
                    "node-cidr-mask-size"
                };
                c.add(
                    "spec.network.podCidr",
                    format!(
                        "`{p}` holds {subnets} node ranges of /{node_mask} ({mask_field}) but the cluster has {} nodes that run a kubelet (masters and workers)",
                        nodes.len()
                    ),
                    format!(
                        "use a pod CIDR of /{} or shorter, or a longer {mask_key} in spec.kubernetes.controllerManagerArgs (as long as maxPods still fits)",
                        u32::from(node_mask)
                            .saturating_sub(nodes.len().next_power_of_two().trailing_zeros())
                    ),
                );
            }
        }
    }
    let dual = pods.len() == 2 || services.len() == 2;
    if dual && pods.len() != services.len() {
        c.add(
            "spec.network",
            "dual-stack needs both podCidr and serviceCidr to list an IPv4 and an IPv6 CIDR",
            "give two CIDRs in both fields, or one in both",
        );
    }
    if let Some(v) = version {
        // IPv6DualStack: alpha behind its feature gate in v1.20, beta and on by default from
        // v1.21, GA in v1.23 (Kubernetes documentation, "IPv4/IPv6 dual-stack").
        if dual && v.dual_stack() == DualStack::Alpha {
            c.add(
                "spec.network.podCidr",
                format!("dual-stack (two CIDRs in podCidr and serviceCidr) needs Kubernetes v1.21 or later; in {v} (spec.kubernetes.version) it is alpha, behind the IPv6DualStack feature gate"),
                "use Kubernetes v1.21 or later (dual-stack beta, on by default; GA from v1.23), or one CIDR in podCidr and serviceCidr",
            );
        }
    }
    // kube-controller-manager refuses the family-less mask on a dual-stack cluster ("usage of
    // --node-cidr-mask-size is not allowed with dual-stack clusters").
    if pods.len() == 2 && cm_args.contains_key("node-cidr-mask-size") {
        c.add(
            "spec.kubernetes.controllerManagerArgs.node-cidr-mask-size",
            "kube-controller-manager refuses node-cidr-mask-size on a dual-stack cluster",
            "use node-cidr-mask-size-ipv4 and node-cidr-mask-size-ipv6 instead",
        );
    }
    if n.plugin == Plugin::Multus {
        match n.multus.delegate {
            None => c.add(
                "spec.network.multus.delegate",
                "multus needs a primary plugin to delegate to",
                "set delegate to calico, flannel, cilium, kube-ovn or hybridnet",
            ),
            Some(Plugin::Multus) => c.add(
                "spec.network.multus.delegate",
                "multus cannot delegate to itself",
                "set delegate to calico, flannel, cilium, kube-ovn or hybridnet",
            ),
            Some(Plugin::None) => c.add(
                "spec.network.multus.delegate",
                "multus cannot delegate to `none`",
                "set delegate to calico, flannel, cilium, kube-ovn or hybridnet, or use network.plugin: none without multus",
            ),
            Some(_) => {}
        }
    }
    if let Some(release) = version.and_then(|v| catalog.release(v)) {
        let mut plugins = vec![n.plugin];
        if n.plugin == Plugin::Multus {
            plugins.extend(n.multus.delegate);
        }
        for p in plugins.into_iter().filter(|p| *p != Plugin::None) {
            if n.options(p).version.is_none() && !release.defaults.contains_key(p.as_str()) {
                let with_defaults: Vec<&str> = [
                    Plugin::Calico,
                    Plugin::Flannel,
                    Plugin::Cilium,
                    Plugin::KubeOvn,
                    Plugin::Hybridnet,
                ]
                .iter()
                .map(|p| p.as_str())
                .filter(|name| release.defaults.contains_key(*name))
                .collect();
                c.add(
                    if p == n.plugin {
                        "spec.network.plugin"
                    } else {
                        "spec.network.multus.delegate"
                    },
                    format!(
                        "the catalog has no {} version for Kubernetes {}",
                        p.as_str(),
                        release.version
                    ),
                    if with_defaults.is_empty() {
                        "use network.plugin: none and install a CNI yourself (e.g. from a postInstall script), or pin the plugin's version and images with --catalog FILE".to_owned()
                    } else {
                        format!(
                            "use one of {} or none, or set the plugin's version and add its images with --catalog FILE",
                            with_defaults.join(", ")
                        )
                    },
                );
            }
        }
    }
    if n.plugin == Plugin::Flannel {
        if let Some(mode) = &n.flannel.mode {
            if !["vxlan", "host-gw", "wireguard"].contains(&mode.as_str()) {
                c.add(
                    "spec.network.flannel.mode",
                    format!("`{mode}` is not a flannel backend"),
                    "use vxlan, host-gw or wireguard",
                );
            }
        }
    }
    if n.plugin == Plugin::Calico {
        if let Some(mode) = &n.calico.mode {
            if !["ipip", "vxlan", "none", "bgp"].contains(&mode.as_str()) {
                c.add(
                    "spec.network.calico.mode",
                    format!("`{mode}` is not a calico mode"),
                    "use ipip, vxlan, bgp or none",
                );
            }
        }
    }
    check_kube_ovn_and_hybridnet(f, version, catalog, &pods, &services, c);
}

/// The Kubernetes release a kube-ovn release's chart needs (its `Chart.yaml` `kubeVersion`:
/// `>= 1.23.0-0` up to v1.13, `>= 1.29.0-0` from v1.14; KubeKey v4's `kubeovn_allowed_versions`
/// start at v1.23 too).
pub fn kube_ovn_floor(kube_ovn: &str) -> (u32, u32) {
    let minor = kube_ovn
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .and_then(|m| m.parse::<u32>().ok());
    match minor {
        Some(m) if m >= 14 => (1, 29),
        _ => (1, 23),
    }
}

/// hybridnet's floor: its chart's `kubeVersion: ">=1.16.0-0"`, and the seed's (KubeKey v3).
pub const HYBRIDNET_FLOOR: (u32, u32) = (1, 16);

/// kube-ovn and hybridnet (alone or as multus's delegate): version floors, kube-ovn's tunnel and
/// join CIDR, and the options these plugins do not take.
fn check_kube_ovn_and_hybridnet(
    f: &ClusterFile,
    version: Option<KubeVersion>,
    catalog: &Catalog,
    pods: &[IpNet],
    services: &[IpNet],
    c: &mut Checker,
) {
    let n = &f.spec.network;
    let delegate = (n.plugin == Plugin::Multus)
        .then_some(n.multus.delegate)
        .flatten();
    let field_of = |p: Plugin| {
        if p == n.plugin {
            "spec.network.plugin"
        } else {
            "spec.network.multus.delegate"
        }
    };
    let used = |p: Plugin| n.plugin == p || delegate == Some(p);
    let release = version.and_then(|v| catalog.release(v));
    if let Some(v) = version {
        if used(Plugin::KubeOvn) {
            let chosen = n.kube_ovn.common.version.clone().or_else(|| {
                release.and_then(|r| r.defaults.get(Plugin::KubeOvn.as_str()).cloned())
            });
            if let Some(ovn) = chosen {
                let (major, minor) = kube_ovn_floor(&ovn);
                if !v.at_least(major, minor) {
                    c.add(
                        field_of(Plugin::KubeOvn),
                        format!("kube-ovn {ovn} needs Kubernetes v{major}.{minor} or later (its chart's kubeVersion), but spec.kubernetes.version is {v}"),
                        if major == 1 && minor > 23 {
                            "use Kubernetes v1.29 or later, or pin kube-ovn v1.13.15 (spec.network.kubeOvn.version; Kubernetes v1.23 or later), or another plugin"
                        } else {
                            "use Kubernetes v1.23 or later, or another network plugin (calico, flannel, cilium, hybridnet)"
                        },
                    );
                }
            }
        }
        if used(Plugin::Hybridnet) && !v.at_least(HYBRIDNET_FLOOR.0, HYBRIDNET_FLOOR.1) {
            c.add(
                field_of(Plugin::Hybridnet),
                format!(
                    "hybridnet needs Kubernetes v{}.{} or later (its chart's kubeVersion), but spec.kubernetes.version is {v}",
                    HYBRIDNET_FLOOR.0, HYBRIDNET_FLOOR.1
                ),
                "use a newer Kubernetes version, or another network plugin",
            );
        }
    }
    if used(Plugin::KubeOvn) {
        if let Some(mode) = &n.kube_ovn.common.mode {
            if !["geneve", "vxlan", "stt"].contains(&mode.as_str()) {
                c.add(
                    "spec.network.kubeOvn.mode",
                    format!("`{mode}` is not a kube-ovn tunnel type"),
                    "use geneve (kube-ovn's default), vxlan or stt",
                );
            }
        }
        if let Some(join) = &n.kube_ovn.join_cidr {
            let joins = parse_cidrs(c, "kubeOvn.joinCidr", join);
            if !joins.is_empty() && joins.len() != pods.len() {
                c.add(
                    "spec.network.kubeOvn.joinCidr",
                    format!("{} CIDR(s) for {} in podCidr", joins.len(), pods.len()),
                    "give one CIDR per IP family of podCidr (IPv4,IPv6 on a dual-stack cluster)",
                );
            }
            for j in &joins {
                if !pods.is_empty()
                    && pods
                        .iter()
                        .all(|p| p.addr().is_ipv4() != j.addr().is_ipv4())
                {
                    c.add(
                        "spec.network.kubeOvn.joinCidr",
                        format!("`{j}` is of an IP family podCidr does not have"),
                        "give one CIDR per IP family of podCidr",
                    );
                }
                for (field, nets) in [("podCidr", pods), ("serviceCidr", services)] {
                    if let Some(o) = nets
                        .iter()
                        .find(|o| o.contains(&j.network()) || j.contains(&o.network()))
                    {
                        c.add(
                            "spec.network.kubeOvn.joinCidr",
                            format!("`{j}` overlaps {field} `{o}`"),
                            "pick a join CIDR apart from the pod and service ranges (kube-ovn's default is 100.64.0.0/16)",
                        );
                    }
                }
                for (i, h) in f.spec.hosts.iter().enumerate() {
                    if let Ok(ip) = h.internal().parse::<IpAddr>() {
                        if j.contains(&ip) {
                            c.add(
                                "spec.network.kubeOvn.joinCidr",
                                format!("`{j}` contains the address {ip} of host `{}` (spec.hosts[{i}])", h.name),
                                "pick a join CIDR apart from the host network",
                            );
                        }
                    }
                }
            }
        }
        if n.kube_ovn.common.mtu.is_some() {
            c.add(
                "spec.network.kubeOvn.mtu",
                "KubeXM does not set kube-ovn's MTU (its chart takes none; kube-ovn derives it from the tunnel interface)",
                "remove mtu",
            );
        }
    } else if n.kube_ovn.join_cidr.is_some() {
        c.add(
            "spec.network.kubeOvn.joinCidr",
            "applies only to network.plugin kube-ovn (or multus over kube-ovn)",
            "remove joinCidr, or use kube-ovn",
        );
    }
    if used(Plugin::Hybridnet) {
        if pods.len() == 2 {
            c.add(
                "spec.network.podCidr",
                "hybridnet is installed here with one init subnet, of one IP family; dual-stack is not offered with hybridnet",
                "give one pod and one service CIDR, or use calico, cilium, flannel or kube-ovn for dual-stack",
            );
        }
        if n.hybridnet.common.mode.is_some() {
            c.add(
                "spec.network.hybridnet.mode",
                "hybridnet has no encapsulation mode here",
                "remove mode; set defaultNetworkType (overlay or underlay) to choose pods' default network",
            );
        }
        if n.hybridnet.common.mtu.is_some() {
            c.add(
                "spec.network.hybridnet.mtu",
                "KubeXM does not set hybridnet's MTU (its chart takes none)",
                "remove mtu",
            );
        }
    }
}

/// KubeXM's etcd is an external etcd to kubeadm, whose preflight (`ExternalEtcdVersion`) refuses
/// one older than its minimum (etcd 3.5.24 from v1.36): refused here, before any host changes,
/// naming the versions (seen in the lab: kubeadm v1.37.2 refused etcd 3.4.23 at `kubeadm init`).
fn check_etcd_version(
    f: &ClusterFile,
    version: Option<KubeVersion>,
    catalog: &Catalog,
    c: &mut Checker,
) {
    let Some(v) = version else {
        return;
    };
    if f.spec.kubernetes.kind != KubernetesType::Kubeadm || f.spec.etcd.kind != EtcdType::Kubexm {
        return;
    }
    let Some(min) = v.kubeadm_min_external_etcd() else {
        return;
    };
    let (etcd, field) = match f.spec.etcd.version.as_deref() {
        Some(e) => (e, "spec.etcd.version"),
        None => match catalog.release(v).and_then(|r| r.defaults.get("etcd")) {
            Some(e) => (e.as_str(), "spec.etcd.type"),
            None => return,
        },
    };
    if let Some(got) = EtcdVersion::parse(etcd).filter(|got| *got < min) {
        c.add(
            field,
            format!("kubeadm {v} refuses an external etcd older than {min} (its ExternalEtcdVersion preflight check), and KubeXM's etcd would be {got}"),
            format!("set etcd.version to v{min} or newer, or use etcd.type kubeadm (kubeadm's own stacked etcd)"),
        );
    }
}

fn check_runtime(f: &ClusterFile, version: Option<KubeVersion>, c: &mut Checker) {
    let r = &f.spec.runtime;
    // KubeXM writes the `kata` runtime handler into containerd's configuration only.
    if f.spec.kubernetes.kata.enabled && r.kind != RuntimeType::Containerd {
        c.add(
            "spec.kubernetes.kata.enabled",
            format!(
                "Kata Containers needs containerd (its `kata` runtime handler is written into containerd's configuration), but runtime.type is {:?}",
                r.kind
            ),
            "set runtime.type: containerd, or kata.enabled: false",
        );
    }
    if r.cri_dockerd.is_some() && r.kind != RuntimeType::Docker {
        c.add(
            "spec.runtime.criDockerd",
            "applies only to runtime.type docker",
            "remove criDockerd, or set runtime.type: docker",
        );
    }
    if let Some(v) = version {
        if r.kind == RuntimeType::Docker && !v.has_dockershim() && r.cri_dockerd == Some(false) {
            c.add(
                "spec.runtime.criDockerd",
                format!("Kubernetes {v} has no dockershim, so docker needs cri-dockerd"),
                "remove `criDockerd: false`, or use runtime.type containerd",
            );
        }
        if r.kind == RuntimeType::Docker && v.has_dockershim() && r.cri_dockerd == Some(true) {
            c.add(
                "spec.runtime.criDockerd",
                format!("the kubelet of Kubernetes {v} talks to docker itself (dockershim); cri-dockerd is used from v1.24"),
                "remove `criDockerd: true`",
            );
        }
        if r.kind == RuntimeType::CriO && !v.at_least(1, 31) {
            c.add(
                "spec.runtime.type",
                format!("cri-o for Kubernetes {v} is not supported: cri-o follows Kubernetes minors and only its v1.31+ static bundles have the layout KubeXM installs"),
                "use containerd or docker for this version, or Kubernetes v1.31+",
            );
        }
        if r.kind == RuntimeType::Containerd && !v.supports_containerd_1x() {
            if let Some(ver) = r
                .version
                .as_deref()
                .filter(|s| s.trim_start_matches('v').starts_with("1."))
            {
                c.add(
                    "spec.runtime.version",
                    format!("containerd {ver} is 1.x, and Kubernetes v1.37 is the last release to support containerd 1.x"),
                    "remove runtime.version to use the catalog's containerd 2.x, or set a 2.x version",
                );
            }
        }
    }
    if r.containerd.restrict_oom_score_adj && r.kind != RuntimeType::Containerd {
        c.add(
            "spec.runtime.containerd.restrictOomScoreAdj",
            "applies only to runtime.type containerd",
            "remove runtime.containerd, or set runtime.type: containerd",
        );
    }
    if f.spec.kubernetes.kind == KubernetesType::Kubexm && r.kind == RuntimeType::Isulad {
        c.add(
            "spec.runtime.type",
            "isulad is supported only with kubernetes.type kubeadm",
            "use containerd, or kubernetes.type kubeadm",
        );
    }
}

fn check_load_balancer(f: &ClusterFile, roles: &Roles, c: &mut Checker) {
    let lb = &f.spec.load_balancer;
    // The endpoint's name goes into every kubeconfig, the API server's certificate, /etc/hosts
    // and the load balancers' configurations: a DNS name, nothing else.
    if !is_dns_subdomain(&lb.domain) {
        c.add(
            "spec.loadBalancer.domain",
            format!("`{}` is not a DNS name", lb.domain),
            "use a name such as `lb.kubexm.internal` (lowercase letters, digits, `-` and `.`)",
        );
    }
    if let Some(vip) = &lb.vip {
        match vip.parse::<IpAddr>() {
            Err(_) => c.add(
                "spec.loadBalancer.vip",
                format!("`{vip}` is not an IP address"),
                "give a free IP on the hosts' network",
            ),
            Ok(ip) => {
                if let Some((i, h)) = f
                    .spec
                    .hosts
                    .iter()
                    .enumerate()
                    .find(|(_, h)| h.internal() == ip.to_string())
                {
                    c.add(
                        "spec.loadBalancer.vip",
                        format!(
                            "{ip} is already the address of host `{}` (spec.hosts[{i}])",
                            h.name
                        ),
                        "the VIP must be a free address",
                    );
                }
            }
        }
    }
    if roles.master.len() > 1 && lb.mode == LbMode::None {
        c.add(
            "spec.loadBalancer.mode",
            format!(
                "{} masters but no load balancer: workers would depend on the first master only",
                roles.master.len()
            ),
            "use mode internal (haproxy, nginx or kube-vip) or external",
        );
    }
    let needs_iface_and_vip = match lb.mode {
        LbMode::Internal => lb.internal.kind == InternalLbType::KubeVip,
        LbMode::External => matches!(
            lb.external.kind,
            ExternalLbType::KubexmKh | ExternalLbType::KubexmKn
        ),
        LbMode::None => false,
    };
    let what = match lb.mode {
        LbMode::Internal => "kube-vip",
        _ => "keepalived",
    };
    if (needs_iface_and_vip || lb.mode == LbMode::External) && lb.vip.is_none() {
        c.add(
            "spec.loadBalancer.vip",
            format!("loadBalancer mode {} needs a VIP", mode_name(lb)),
            "set vip to the address the API server is reached at",
        );
    }
    if lb.mode == LbMode::Internal && lb.port != 6443 {
        c.add(
            "spec.loadBalancer.port",
            format!(
                "loadBalancer mode {} serves the API on the API servers' own port 6443, not {}",
                mode_name(lb),
                lb.port
            ),
            "remove port (or set 6443); only an external load balancer can listen on another port",
        );
    }
    if needs_iface_and_vip && lb.interface.is_none() {
        c.add(
            "spec.loadBalancer.interface",
            format!("{what} needs the network interface that carries the VIP"),
            "set interface, e.g. eth0",
        );
    }
    if let Some(iface) = lb.interface.as_deref() {
        if !is_interface_name(iface) {
            c.add(
                "spec.loadBalancer.interface",
                format!("`{iface}` is not a network interface name"),
                format!("write the interface's name as `ip link` shows it (at most {INTERFACE_NAME_MAX} letters, digits, `.`, `_` or `-`), e.g. eth0"),
            );
        }
    }
    let managed_external =
        lb.mode == LbMode::External && lb.external.kind != ExternalLbType::External;
    if managed_external && roles.loadbalancer.is_empty() {
        c.add(
            "spec.roleGroups.loadbalancer",
            format!("loadBalancer {} needs hosts to run on", mode_name(lb)),
            "name the load balancer hosts under roleGroups.loadbalancer",
        );
    }
    if !managed_external && !f.spec.role_groups.loadbalancer.is_empty() {
        c.add(
            "spec.roleGroups.loadbalancer",
            "load balancer hosts are named but loadBalancer is not external kubexm-kh or kubexm-kn",
            "set loadBalancer.mode: external with external.type kubexm-kh|kubexm-kn, or remove the group",
        );
    }
}

fn mode_name(lb: &crate::model::LoadBalancer) -> &'static str {
    match lb.mode {
        LbMode::None => "none",
        LbMode::Internal => match lb.internal.kind {
            InternalLbType::Haproxy => "internal/haproxy",
            InternalLbType::Nginx => "internal/nginx",
            InternalLbType::KubeVip => "internal/kube-vip",
        },
        LbMode::External => match lb.external.kind {
            ExternalLbType::KubexmKh => "external/kubexm-kh",
            ExternalLbType::KubexmKn => "external/kubexm-kn",
            ExternalLbType::External => "external/external",
        },
    }
}

fn check_registry(f: &ClusterFile, roles: &Roles, c: &mut Checker) {
    let r = &f.spec.registry;
    node_directory(
        c,
        "spec.registry.dataDir",
        r.data_dir.as_deref(),
        "name the registry's own directory, e.g. /var/lib/registry (it goes into the registry's configuration and `delete` removes it)",
    );
    match r.kind {
        RegistryType::Registry | RegistryType::Harbor => {
            let name = if r.kind == RegistryType::Harbor {
                "harbor"
            } else {
                "registry"
            };
            if roles.registry.is_empty() && f.spec.role_groups.registry.is_empty() {
                c.add(
                    "spec.roleGroups.registry",
                    format!("registry.type is {name} but no registry host is named"),
                    "name one host under roleGroups.registry, or use registry.type external|none",
                );
            } else if roles.registry.len() > 1 {
                c.add(
                    "spec.roleGroups.registry",
                    format!(
                        "{} registry hosts are named; KubeXM deploys one",
                        roles.registry.len()
                    ),
                    "name exactly one registry host",
                );
            }
        }
        RegistryType::External => {
            if r.private_registry.is_none() {
                c.add(
                    "spec.registry.privateRegistry",
                    "registry.type is external but privateRegistry is not set",
                    "set privateRegistry to the HOST[:PORT] of your registry",
                );
            }
        }
        RegistryType::None => {
            if r.private_registry.is_some() {
                c.add(
                    "spec.registry.privateRegistry",
                    "is set but registry.type is none",
                    "use registry.type external to seed an existing registry, or remove privateRegistry",
                );
            }
        }
    }
    if let Some(reg) = &r.private_registry {
        if !is_registry_host(reg) {
            c.add(
                "spec.registry.privateRegistry",
                format!("`{reg}` is not HOST[:PORT]"),
                "write it without scheme or path, e.g. dockerhub.kubexm.local or 10.0.0.9:5000",
            );
        }
    }
    if let Some(ns) = &r.namespace {
        if !ns.split('/').all(is_repo_component) {
            c.add(
                "spec.registry.namespace",
                format!("`{ns}` is not a valid repository namespace"),
                "use lowercase letters, digits, `.`, `_`, `-` (and `/` between parts)",
            );
        }
    }
    for (host, auth) in &r.auths {
        let at = format!("spec.registry.auths[\"{host}\"]");
        if !is_registry_host(host) {
            c.add(
                at.clone(),
                format!("`{host}` is not HOST[:PORT]"),
                "key auths by registry host, without scheme",
            );
        }
        if auth.plain_http && (auth.ca_file.is_some() || auth.skip_tls_verify) {
            c.add(
                at.clone(),
                "plainHTTP is combined with TLS settings",
                "use plainHTTP alone, or caFile/skipTLSVerify alone",
            );
        }
        if auth.password.is_some() && auth.username.is_none() {
            c.add(
                format!("{at}.username"),
                "a password is set without a username",
                "set username too",
            );
        }
        if auth.cert_file.is_some() != auth.key_file.is_some() {
            c.add(
                at,
                "certFile and keyFile must be given together",
                "set both or neither",
            );
        }
    }
    if r.kind == RegistryType::Harbor {
        if r.harbor_config
            .admin_password
            .as_ref()
            .is_none_or(|p| p.is_empty())
        {
            c.add(
                "spec.registry.harborConfig.adminPassword",
                "is required for registry.type harbor",
                "set an admin password (KubeXM never installs Harbor with its well-known default)",
            );
        }
        for (i, p) in r.harbor_config.projects.iter().enumerate() {
            if !is_repo_component(&p.name) {
                c.add(
                    format!("spec.registry.harborConfig.projects[{i}].name"),
                    format!("`{}` is not a valid Harbor project name", p.name),
                    "use lowercase letters, digits, `.`, `_`, `-`",
                );
            }
        }
    }
}

/// The most scripts one of `system.preInstall` / `postInstall` may list (their copies on the
/// nodes are numbered with two digits).
pub const MAX_SCRIPTS: usize = 99;

fn check_scripts(field: &str, scripts: &[String], c: &mut Checker) {
    if scripts.len() > MAX_SCRIPTS {
        c.add(
            format!("spec.system.{field}"),
            format!("lists {} scripts, more than {MAX_SCRIPTS}", scripts.len()),
            "merge scripts: one script may call others it ships itself",
        );
    }
    let mut seen = BTreeMap::new();
    for (i, s) in scripts.iter().enumerate() {
        let at = format!("spec.system.{field}[{i}]");
        if s.trim().is_empty() || s.ends_with('/') {
            c.add(
                at,
                "is not a file path",
                "give the path of a shell script on the build host (relative to cluster.yaml's directory)",
            );
        } else if s.chars().any(char::is_control) {
            c.add(at, "holds control characters", "give a plain file path");
        } else if let Some(first) = seen.insert(s.as_str(), i) {
            c.add(
                at,
                format!("`{s}` is listed twice (also at [{first}])"),
                "list each script once: a re-listed script would run twice",
            );
        }
    }
}

fn check_system_and_extra(f: &ClusterFile, c: &mut Checker) {
    let s = &f.spec.system;
    check_scripts("preInstall", &s.pre_install, c);
    check_scripts("postInstall", &s.post_install, c);
    if let Some(n) = f.spec.kubernetes.kube_proxy.conntrack_max_per_core {
        if i32::try_from(n).is_err() {
            c.add(
                "spec.kubernetes.kubeProxy.conntrackMaxPerCore",
                format!("{n} is larger than kube-proxy accepts (a 32-bit signed integer)"),
                "use 0 (leave the kernel's limit) or a value such as 32768 (kube-proxy's default)",
            );
        }
    }
    let host_names: BTreeSet<&str> = f.spec.hosts.iter().map(|h| h.name.as_str()).collect();
    for (i, ntp) in s.ntp_servers.iter().enumerate() {
        if ntp.parse::<IpAddr>().is_err()
            && !is_dns_subdomain(ntp)
            && !host_names.contains(ntp.as_str())
        {
            c.add(
                format!("spec.system.ntpServers[{i}]"),
                format!("`{ntp}` is not an IP, DNS name or cluster host"),
                "list NTP server addresses, or a host name from spec.hosts to make it the in-cluster server",
            );
        }
    }
    if let Some(tz) = &s.timezone {
        let ok = tz == "UTC"
            || (tz.contains('/')
                && tz.split('/').all(|p| {
                    !p.is_empty()
                        && p.chars()
                            .all(|ch| ch.is_ascii_alphanumeric() || "_-+".contains(ch))
                }));
        if !ok {
            c.add(
                "spec.system.timezone",
                format!("`{tz}` is not a time zone name"),
                "use an IANA name such as Asia/Shanghai or UTC",
            );
        }
    }
    for (i, h) in f.spec.extra.hosts.iter().enumerate() {
        if h.address.parse::<IpAddr>().is_err() {
            c.add(
                format!("spec.extra.hosts[{i}].address"),
                format!("`{}` is not an IP address", h.address),
                "give the IP the domain resolves to",
            );
        }
        if !is_dns_subdomain(&h.domain) {
            c.add(
                format!("spec.extra.hosts[{i}].domain"),
                format!("`{}` is not a DNS name", h.domain),
                "give a name such as registry.example.local",
            );
        }
    }
    for (i, r) in f.spec.extra.resolves.iter().enumerate() {
        if r.address.parse::<IpAddr>().is_err() {
            c.add(
                format!("spec.extra.resolves[{i}].address"),
                format!("`{}` is not an IP address", r.address),
                "give a name server's IP",
            );
        }
    }
}

/// `spec.system.osReleases` names catalog releases, each once; `system.debs`/`rpms` are package
/// names (they are passed to apt/dnf and looked up in the repositories' indexes).
fn check_os_releases(f: &ClusterFile, catalog: &Catalog, c: &mut Checker) {
    let s = &f.spec.system;
    let known = || {
        catalog
            .os_releases
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut seen = BTreeSet::new();
    for (i, name) in s.os_releases.iter().enumerate() {
        if !catalog.os_releases.contains_key(name) {
            c.add(
                format!("spec.system.osReleases[{i}]"),
                format!("`{name}` is not an OS release the catalog knows"),
                format!(
                    "use one of: {}; or describe the release (repositories and signing keys) under osReleases in a catalog file passed with --catalog",
                    known()
                ),
            );
        } else if !seen.insert(name.as_str()) {
            c.add(
                format!("spec.system.osReleases[{i}]"),
                format!("`{name}` is listed twice"),
                "list each release once",
            );
        }
    }
    for (i, d) in s.debs.iter().enumerate() {
        let ok = d.len() >= 2
            && d.len() <= 128
            && d.as_bytes()[0].is_ascii_alphanumeric()
            && d.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b));
        if !ok {
            c.add(
                format!("spec.system.debs[{i}]"),
                format!("`{d}` is not a Debian package name"),
                "use the package's name as apt knows it: lowercase letters, digits, `+`, `-`, `.`",
            );
        }
    }
    for (i, r) in s.rpms.iter().enumerate() {
        let ok = !r.is_empty()
            && r.len() <= 128
            && r.as_bytes()[0].is_ascii_alphanumeric()
            && r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-._".contains(&b));
        if !ok {
            c.add(
                format!("spec.system.rpms[{i}]"),
                format!("`{r}` is not an RPM package name"),
                "use the package's name as dnf knows it: letters, digits, `+`, `-`, `.`, `_`",
            );
        }
    }
}

fn check_addons(f: &ClusterFile, c: &mut Checker) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, a) in f.spec.addons.iter().enumerate() {
        let at = format!("spec.addons[{i}]");
        if let Some(first) = seen.insert(&a.name, i) {
            c.add(
                format!("{at}.name"),
                format!("`{}` is already the name of spec.addons[{first}]", a.name),
                "give every addon its own name",
            );
        }
        if !is_dns_label(&a.name) {
            c.add(
                format!("{at}.name"),
                format!("`{}` is not a valid addon name", a.name),
                "use a DNS-1123 label: lowercase letters, digits and `-`, at most 63 (it names files and directories on the nodes)",
            );
        }
        if let Some(chart) = &a.source.chart.name {
            if !is_chart_name(chart) {
                c.add(
                    format!("{at}.source.chart.name"),
                    format!("`{chart}` is not a valid chart name"),
                    "use lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit (Helm's rule)",
                );
            }
        }
        if let Some(version) = &a.source.chart.version {
            if check_component(version).is_err() {
                c.add(
                    format!("{at}.source.chart.version"),
                    format!("`{version}` is not a valid chart version"),
                    "write the exact chart version, e.g. 3.12.1",
                );
            }
        }
        if !is_dns_label(&a.namespace) {
            c.add(
                format!("{at}.namespace"),
                format!("`{}` is not a valid namespace", a.namespace),
                "use a lowercase DNS label",
            );
        }
        let src = &a.source;
        match a.kind {
            AddonType::Helm => {
                if src.chart.name.is_none() || src.chart.version.is_none() {
                    c.add(
                        format!("{at}.source.chart"),
                        "a helm addon needs chart name and version",
                        "set source.chart.name and source.chart.version (the exact version is bundled)",
                    );
                }
                if src.path.is_none() && src.chart.repo.is_none() && src.url.is_none() {
                    c.add(
                        format!("{at}.source"),
                        "a helm addon needs where the chart comes from",
                        "set source.path (a .tgz), source.url, or source.chart.repo",
                    );
                }
            }
            AddonType::Yaml => {
                if src.path.is_none() == src.url.is_none() {
                    c.add(
                        format!("{at}.source"),
                        "a yaml addon needs exactly one of path or url",
                        "set source.path or source.url",
                    );
                }
            }
        }
        for (j, img) in a.images.iter().enumerate() {
            if let Err(e) = img.parse::<ImageRef>() {
                c.add(
                    format!("{at}.images[{j}]"),
                    e.to_string(),
                    "write images as REGISTRY/REPOSITORY:TAG",
                );
            }
        }
    }
}

/// An OCI repository path component: lowercase letters and digits, separated by `.`, `_`,
/// `__` or dashes; never `.` or `..`, never starting or ending with a separator.
fn is_repo_component(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = s.as_bytes();
    !s.is_empty()
        && s.len() <= 255
        && bytes
            .iter()
            .all(|&b| alnum(b) || matches!(b, b'.' | b'_' | b'-'))
        && bytes.first().is_some_and(|&b| alnum(b))
        && bytes.last().is_some_and(|&b| alnum(b))
        && !s.contains("..")
}

/// A Helm chart name as Helm accepts it, which also makes it a safe path component.
fn is_chart_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    check_component(s).is_ok()
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.iter().all(|&b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        })
}

fn is_registry_host(s: &str) -> bool {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') || h.starts_with('[') => (h, Some(p)),
        _ => (s, None),
    };
    let host_ok = host.parse::<IpAddr>().is_ok()
        || is_dns_subdomain(&host.to_ascii_lowercase())
        || host == "localhost";
    host_ok && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0))
}

#[cfg(test)]
mod tests {
    use super::kube_ovn_floor;

    #[test]
    fn kube_ovn_floors_follow_its_charts() {
        for (ovn, floor) in [
            ("v1.12.21", (1, 23)),
            ("v1.13.15", (1, 23)),
            ("v1.14.10", (1, 29)),
            ("v1.15.0", (1, 29)),
            ("1.16.0", (1, 29)),
            ("latest", (1, 23)),
        ] {
            assert_eq!(kube_ovn_floor(ovn), floor, "{ovn}");
        }
    }
}
