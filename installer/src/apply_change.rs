//! What `apply` (issue 17) would do with an edited cluster.yaml: every difference from the
//! installed cluster outside `spec.hosts` and `spec.roleGroups` (those are add-node's and
//! delete-node's, [`crate::change`]), each either put in the group of changes that applies it or
//! refused with why and what to do instead. `kubexm-install apply` prints it and runs
//! [`crate::pipelines::apply`] when nothing is refused.
//!
//! Refused too: moving the control-plane endpoint (the load balancer's mode, VIP, port, domain,
//! external address, internal type), and turning off what apply installs but does not take out of
//! a running cluster (an add-on, storage, Kata, Node Feature Discovery, the security
//! enhancement, the backup schedule).

use std::fmt;

use kubexm_manifests::validate::{Problem, ValidCluster};

use crate::change::spec_differences;
use crate::modules::network::switch::PluginChange;

/// At most this many differences are looked at (a cluster.yaml rewritten wholesale is not an
/// edit; the rest are reported as one refusal).
const MAX_DIFFERENCES: usize = 200;

/// How a change is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// API server, controller-manager and scheduler flags, feature gates, the API server's
    /// SANs: a rolling restart of the control plane, one master at a time.
    ControlPlane,
    /// The kubelet's flags and configuration: each node's kubelet restarted (kubeadm path: one
    /// node at a time).
    Kubelet,
    /// kube-proxy's mode, flags and configuration.
    KubeProxy,
    /// What node preparation writes: NTP, time zone, extra hosts and resolvers, OS packages,
    /// the registry's settings on the nodes.
    Nodes,
    /// The load balancer's settings.
    LoadBalancer,
    /// The pod network plugin's options.
    Network,
    /// The pod network plugin itself (with `--allow-network-plugin-change`): the old one
    /// removed, the new one installed, the pods recreated node by node
    /// ([`crate::modules::network::switch`]).
    NetworkPlugin,
    /// Add-ons, plugins, storage, the backup schedule, the security enhancement.
    Extras,
}

impl Group {
    /// Its name in a plan.
    pub fn as_str(self) -> &'static str {
        match self {
            Group::ControlPlane => "control plane (rolling restart of each master)",
            Group::Kubelet => "kubelet (restarted on each node; its pods keep running)",
            Group::KubeProxy => "kube-proxy",
            Group::Nodes => "node preparation",
            Group::LoadBalancer => "load balancer",
            Group::Network => "pod network options",
            Group::NetworkPlugin => "pod network plugin (old one removed, new one installed, pods recreated node by node)",
            Group::Extras => "add-ons, plugins, storage, backup, security",
        }
    }
}

/// One difference and how it is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Its group.
    pub group: Group,
    /// The field path (`spec.kubernetes.featureGates.Foo`).
    pub path: String,
    /// The installed value (short).
    pub was: String,
    /// The wanted value (short).
    pub now: String,
}

/// The differences of an edited cluster.yaml, grouped, and those refused.
#[derive(Debug, Clone, Default)]
pub struct ApplyChange {
    /// What apply changes, by group then path.
    pub applied: Vec<Applied>,
    /// What it refuses.
    pub refused: Vec<Problem>,
    /// The pod network plugin's change, when one is applied.
    pub plugin_change: Option<PluginChange>,
}

impl fmt::Display for ApplyChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.applied.is_empty() && self.refused.is_empty() {
            return writeln!(
                f,
                "  no change: cluster.yaml describes the installed cluster"
            );
        }
        let mut group = None;
        for a in &self.applied {
            if group != Some(a.group) {
                writeln!(f, "  {}:", a.group.as_str())?;
                group = Some(a.group);
            }
            writeln!(f, "    ~ {}: {} -> {}", a.path, a.was, a.now)?;
        }
        for p in &self.refused {
            writeln!(f, "  ! {p}")?;
        }
        if let Some(c) = &self.plugin_change {
            writeln!(f, "\n  !!! {}", c.warning())?;
        }
        Ok(())
    }
}

/// Why a path cannot change in place, and what to do; `None` when it can.
fn refusal(path: &str) -> Option<(&'static str, &'static str)> {
    const FIXED: [(&str, &str, &str); 15] = [
        (
            "spec.network.podCidr",
            "the pod CIDR is in every node's pod range and every pod's address",
            "keep the installed value; a new pod CIDR needs a new cluster (backup, install, restore the workloads)",
        ),
        (
            "spec.network.serviceCidr",
            "the service CIDR holds every Service's cluster IP and the API server's certificate",
            "keep the installed value; a new service CIDR needs a new cluster",
        ),
        (
            "spec.loadBalancer.mode",
            "the control-plane endpoint's kind decides what every node and kubeconfig talks to",
            "keep the installed load balancer mode",
        ),
        (
            "spec.loadBalancer.vip",
            "the control-plane endpoint is in every kubeconfig and the API server certificates",
            "keep the installed VIP",
        ),
        (
            "spec.loadBalancer.port",
            "the control-plane endpoint is in every kubeconfig",
            "keep the installed port",
        ),
        (
            "spec.loadBalancer.domain",
            "the control-plane endpoint is in every kubeconfig and the API server certificates",
            "keep the installed domain",
        ),
        (
            "spec.loadBalancer.external",
            "the external load balancer is the control-plane endpoint every kubeconfig names",
            "keep the installed external load balancer",
        ),
        (
            "spec.loadBalancer.internal.type",
            "apply would set up the new local proxy beside the old one, which keeps its port",
            "keep the installed internal load balancer type",
        ),
        (
            "spec.kubernetes.dnsDomain",
            "the cluster domain is in every Service's DNS name and every pod's resolver",
            "keep the installed value",
        ),
        (
            "spec.kubernetes.clusterName",
            "the cluster name is in kubeadm's configuration and the kubeconfigs",
            "keep the installed value",
        ),
        (
            "spec.kubernetes.type",
            "the bootstrap path (kubeadm or kubexm) decides how every component runs",
            "keep the installed value; another path needs a new cluster",
        ),
        (
            "spec.kubernetes.version",
            "a version change is an upgrade",
            "keep the installed version: a version change is an upgrade (one minor at a time, with a bundle holding each version), which apply does not do",
        ),
        (
            "spec.etcd",
            "etcd's type, version and data directory do not change in place",
            "keep the installed etcd settings",
        ),
        (
            "spec.runtime.type",
            "the container runtime holds every pod of its node",
            "keep the installed runtime; to move a node to another runtime, delete-node it and add-node it with the new one",
        ),
        (
            "spec.registry.type",
            "the private registry's kind (registry or Harbor) holds every image the nodes pull",
            "keep the installed registry type",
        ),
    ];
    FIXED
        .iter()
        .find(|(p, _, _)| path == *p || path.starts_with(&format!("{p}.")))
        .map(|(_, why, what)| (*why, *what))
}

/// The group applying `path`, or `None` for a path apply does not know.
fn group_of(path: &str) -> Option<Group> {
    const GROUPS: [(&str, Group); 25] = [
        ("spec.kubernetes.featureGates", Group::ControlPlane),
        ("spec.kubernetes.apiserverArgs", Group::ControlPlane),
        ("spec.kubernetes.controllerManagerArgs", Group::ControlPlane),
        ("spec.kubernetes.schedulerArgs", Group::ControlPlane),
        (
            "spec.kubernetes.apiserverCertExtraSans",
            Group::ControlPlane,
        ),
        ("spec.kubernetes.kubeletArgs", Group::Kubelet),
        ("spec.kubernetes.kubelet", Group::Kubelet),
        ("spec.kubernetes.maxPods", Group::Kubelet),
        ("spec.kubernetes.proxyMode", Group::KubeProxy),
        ("spec.kubernetes.kubeProxyArgs", Group::KubeProxy),
        ("spec.kubernetes.kubeProxy", Group::KubeProxy),
        ("spec.kubernetes.kata", Group::Extras),
        ("spec.kubernetes.nodeFeatureDiscovery", Group::Extras),
        ("spec.kubernetes.securityEnhancement", Group::Extras),
        ("spec.system.ntpServers", Group::Nodes),
        ("spec.system.timezone", Group::Nodes),
        ("spec.system.rpms", Group::Nodes),
        ("spec.system.debs", Group::Nodes),
        ("spec.extra", Group::Nodes),
        ("spec.registry", Group::Nodes),
        ("spec.loadBalancer", Group::LoadBalancer),
        ("spec.network", Group::Network),
        ("spec.addons", Group::Extras),
        ("spec.storage", Group::Extras),
        ("spec.backup", Group::Extras),
    ];
    GROUPS
        .iter()
        .find(|(p, _)| path == *p || path.starts_with(&format!("{p}.")))
        .map(|(_, g)| *g)
}

/// What `desired` turns off that `installed` has: apply installs and changes these parts but
/// does not take them out of a running cluster, so turning one off is refused (path, what, how
/// to remove it by hand).
fn removals(installed: &ValidCluster, desired: &ValidCluster) -> Vec<(String, String, String)> {
    let (i, d) = (&installed.file.spec, &desired.file.spec);
    let mut out = Vec::new();
    let mut off = |path: &str, what: String, how: &str| {
        out.push((path.to_string(), what, how.to_string()));
    };
    for a in &i.addons {
        if !d.addons.iter().any(|b| b.name == a.name) {
            off(
                "spec.addons",
                format!("add-on {} is removed", a.name),
                "keep it in cluster.yaml; to remove it, delete its objects with kubectl (its manifest or chart is on the first master under /etc/kubernetes/addons), then take it out",
            );
        }
    }
    if i.storage.nfs.is_some() && d.storage.nfs.is_none() {
        off(
            "spec.storage.nfs",
            "NFS storage is turned off".into(),
            "keep it; its provisioner, StorageClass and the nfs host's export stay until deleted by hand",
        );
    }
    if i.storage.local_enabled() && !d.storage.local_enabled() {
        off(
            "spec.storage.localVolume",
            "local volumes are turned off".into(),
            "keep them; the local PV provisioner and its StorageClass stay until deleted by hand",
        );
    }
    let k = (&i.kubernetes, &d.kubernetes);
    if k.0.kata.enabled && !k.1.kata.enabled {
        off(
            "spec.kubernetes.kata",
            "Kata Containers is turned off".into(),
            "keep it on; kata-deploy, its RuntimeClass and the runtime handler stay until deleted",
        );
    }
    if k.0.node_feature_discovery.enabled && !k.1.node_feature_discovery.enabled {
        off(
            "spec.kubernetes.nodeFeatureDiscovery",
            "Node Feature Discovery is turned off".into(),
            "keep it on; its master, workers and the node labels stay until deleted",
        );
    }
    if k.0.security_enhancement && !k.1.security_enhancement {
        off(
            "spec.kubernetes.securityEnhancement",
            "the security enhancement is turned off".into(),
            "keep it on; apply does not loosen file modes, the kubelets' authentication or the audit log",
        );
    }
    if i.backup.is_some() && d.backup.is_none() {
        off(
            "spec.backup",
            "the scheduled backup is removed".into(),
            "keep it; stop the timer with systemctl on the control host (`systemctl list-timers 'kubexm-*'`)",
        );
    }
    out
}

/// The differences between `installed` and `desired` (read from `origin`) outside the nodes,
/// grouped or refused (see the module's documentation); a change of the pod network plugin is
/// refused.
pub fn classify(installed: &ValidCluster, desired: &ValidCluster, origin: &str) -> ApplyChange {
    classify_with(installed, desired, origin, false)
}

/// The paths that name the pod network's plugins.
const PLUGIN_PATHS: [&str; 2] = ["spec.network.plugin", "spec.network.multus.delegate"];

/// [`classify`], with a change of the pod network plugin applied when `plugin_change_allowed`
/// (`--allow-network-plugin-change`), else refused with how to confirm it.
pub fn classify_with(
    installed: &ValidCluster,
    desired: &ValidCluster,
    origin: &str,
    plugin_change_allowed: bool,
) -> ApplyChange {
    let paths = spec_differences(installed, desired, MAX_DIFFERENCES);
    let mut change = ApplyChange::default();
    let plugin_change =
        PluginChange::between(&installed.file.spec.network, &desired.file.spec.network);
    if paths.len() >= MAX_DIFFERENCES {
        change.refused.push(Problem {
            path: "spec".into(),
            message: format!(
                "{origin} differs from the installed cluster in {MAX_DIFFERENCES} or more places"
            ),
            hint: "start from the cluster.yaml last applied (the work directory's clusters/<cluster>/cluster.yaml) and edit what should change".into(),
        });
        return change;
    }
    let removed = removals(installed, desired);
    for (path, what, how) in &removed {
        change.refused.push(Problem {
            path: path.clone(),
            message: format!("{what} in {origin}: apply installs and changes it but does not take it out of the cluster"),
            hint: how.clone(),
        });
    }
    for (path, was, now) in paths {
        if removed
            .iter()
            .any(|(p, _, _)| path == *p || path.starts_with(&format!("{p}.")))
        {
            continue;
        }
        if let (Some(c), true) = (plugin_change, PLUGIN_PATHS.contains(&path.as_str())) {
            if plugin_change_allowed {
                change.plugin_change = Some(c);
                change.applied.push(Applied {
                    group: Group::NetworkPlugin,
                    path,
                    was,
                    now,
                });
            } else {
                change.refused.push(Problem {
                    message: format!(
                        "is {now} in {origin} but {was} in the installed cluster: the pod network changes from {} to {}, which replaces every pod's network",
                        c.from, c.to
                    ),
                    hint: "keep the installed plugin, or confirm the change with --allow-network-plugin-change and a bundle built from the edited cluster.yaml (--bundle): the old plugin is removed first, then the new one installed and every pod recreated, node by node".into(),
                    path,
                });
            }
        } else if let Some((why, what)) = refusal(&path) {
            change.refused.push(Problem {
                message: format!("is {now} in {origin} but {was} in the installed cluster: {why}"),
                hint: what.into(),
                path,
            });
        } else if let Some(group) = group_of(&path) {
            change.applied.push(Applied {
                group,
                path,
                was,
                now,
            });
        } else {
            change.refused.push(Problem {
                message: format!(
                    "is {now} in {origin} but {was} in the installed cluster, and apply does not change it"
                ),
                hint: "keep the installed value".into(),
                path,
            });
        }
    }
    change
        .applied
        .sort_by(|a, b| (a.group, &a.path).cmp(&(b.group, &b.path)));
    change
}

/// The bundle file the network `to` needs that `bundle` (none: no bundle) does not hold.
pub fn missing_plugin_file(
    bundle: Option<&kubexm_bundles::manifest::BundleManifest>,
    to: crate::modules::network::switch::NetworkPlugins,
) -> Option<&'static str> {
    let component = kubexm_manifests::resolve::network_file(to.primary)?;
    let held = bundle.is_some_and(|b| b.files.iter().any(|f| f.name == component));
    (!held).then_some(component)
}

/// Why `new` (read from `origin`) cannot stand in for the installed bundle (`previous`, when
/// still unpacked) in a change of the pod network to `to`: it must hold the installed
/// Kubernetes `version` and the new plugin's file, and every component both bundles hold must be
/// the same file (a plugin change does not upgrade anything else). Empty when it can.
pub fn replacement_problems(
    previous: Option<&kubexm_bundles::manifest::BundleManifest>,
    new: &kubexm_bundles::manifest::BundleManifest,
    version: &str,
    to: crate::modules::network::switch::NetworkPlugins,
    origin: &str,
) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut out = Vec::new();
    if new.kubernetes_version != version {
        out.push(format!(
            "{origin} holds Kubernetes {} but the cluster runs {version}: build the bundle from the edited cluster.yaml (same version)",
            new.kubernetes_version
        ));
    }
    if let Some(component) = missing_plugin_file(Some(new), to) {
        out.push(format!(
            "{origin} holds no {component} for network.plugin {}: build it with `kubexm-build bundle -f` the edited cluster.yaml",
            to.primary.as_str()
        ));
    }
    let Some(previous) = previous else {
        out.push(format!(
            "the bundle the cluster was installed with is no longer unpacked, so {origin} cannot be compared with it: unpack it again (`kubexm-install unpack --bundle FILE`)"
        ));
        return out;
    };
    type Files = BTreeMap<(String, String), BTreeSet<(String, String)>>;
    let by_component = |m: &kubexm_bundles::manifest::BundleManifest| -> Files {
        let mut f: Files = BTreeMap::new();
        for r in &m.files {
            f.entry((r.name.clone(), r.arch.clone()))
                .or_default()
                .insert((r.version.clone(), r.sha256.clone()));
        }
        f
    };
    let (old, new_files) = (by_component(previous), by_component(new));
    for (key, files) in &new_files {
        if let Some(was) = old.get(key) {
            if was != files {
                let versions = |s: &BTreeSet<(String, String)>| {
                    s.iter()
                        .map(|(v, sum)| format!("{v} ({})", &sum[..sum.len().min(12)]))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                out.push(format!(
                    "{origin} holds {} {} for {} but the installed bundle {}: a network plugin change changes nothing else; build the bundle with the catalog the cluster was installed with",
                    key.0,
                    versions(files),
                    key.1,
                    versions(was)
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::network::switch::NetworkPlugins;
    use kubexm_bundles::manifest::{BundleManifest, FileRecord};
    use kubexm_manifests::model::Plugin;

    fn file(name: &str, version: &str, sha: char) -> FileRecord {
        FileRecord {
            name: name.into(),
            version: version.into(),
            arch: "amd64".into(),
            path: format!("files/{name}/{version}/amd64/{name}"),
            sha256: sha.to_string().repeat(64),
            size: 1,
            url: String::new(),
            roles: Default::default(),
        }
    }

    fn bundle(version: &str, files: Vec<FileRecord>) -> BundleManifest {
        BundleManifest {
            format_version: 2,
            tool_version: "test".into(),
            cluster: "lab".into(),
            kubernetes_version: version.into(),
            zone: "default".into(),
            arches: ["amd64".to_string()].into(),
            created: 0,
            files,
            images: Vec::new(),
            sizes: Default::default(),
            os_repos: Vec::new(),
            upgrade_path: Vec::new(),
        }
    }

    const CALICO: NetworkPlugins = NetworkPlugins {
        primary: Plugin::Calico,
        multus: false,
    };

    #[test]
    fn a_replacement_bundle_holds_the_new_plugin_and_changes_nothing_else() {
        let installed = bundle(
            "v1.20.2",
            vec![
                file("kubelet", "v1.20.2", 'a'),
                file("flannel-manifest", "v0.27.4", 'b'),
            ],
        );
        let good = bundle(
            "v1.20.2",
            vec![
                file("kubelet", "v1.20.2", 'a'),
                file("calico-chart", "v3.31.3", 'c'),
                file("helm", "v3.18.4", 'd'),
            ],
        );
        assert_eq!(
            replacement_problems(Some(&installed), &good, "v1.20.2", CALICO, "`new`"),
            Vec::<String>::new()
        );

        // Another kubelet (a catalog that moved on), another version, no calico chart.
        let bad = bundle(
            "v1.21.14",
            vec![
                file("kubelet", "v1.20.2", 'e'),
                file("flannel-manifest", "v0.27.4", 'b'),
            ],
        );
        let problems = replacement_problems(Some(&installed), &bad, "v1.20.2", CALICO, "`new`");
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(
            problems[0].contains("Kubernetes v1.21.14"),
            "{}",
            problems[0]
        );
        assert!(problems[1].contains("no calico-chart"), "{}", problems[1]);
        assert!(
            problems[2].contains("kubelet v1.20.2 (eeeeeeeeeeee) for amd64")
                && problems[2].contains("v1.20.2 (aaaaaaaaaaaa)"),
            "{}",
            problems[2]
        );

        // The installed bundle gone from the work directory: nothing to compare with.
        let problems = replacement_problems(None, &good, "v1.20.2", CALICO, "`new`");
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(
            problems[0].contains("kubexm-install unpack"),
            "{}",
            problems[0]
        );
    }
}
