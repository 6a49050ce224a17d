//! A change of the pod network plugin by `apply --allow-network-plugin-change` (issue 17): the
//! old plugin removed first, the new one installed by [`super::NetworkModule`], then the pods
//! moved onto it node by node.
//!
//! 1. `network-switch-begin` (first master): the time of the switch is kept in
//!    [`SWITCH_MARKER`] (a resumed run keeps the first time).
//! 2. `remove-old-network` (first master): multus's manifest deleted when the old network had
//!    multus; the old primary plugin's objects deleted when the primary changes: flannel's
//!    manifest with `kubectl delete`, a Helm release with `helm uninstall --wait` (calico: its
//!    operator's `Installation` deleted first, so that the operator takes `calico-system` down,
//!    then the namespace), kube-ovn's master label taken off. Their `.applied` records go with
//!    them, so the network module installs afresh.
//! 3. `remove-old-network-traces` (every master and worker): what the old plugin leaves on a
//!    node ([`super::traces::plugin_traces`]: its CNI binaries and configuration, state,
//!    interfaces and iptables chains); kube-proxy's, NodeLocal DNSCache's and the runtime's
//!    stay. Nodes report NotReady from here until the new plugin writes its configuration.
//! 4. the network module installs the new plugin and waits for every node to be Ready.
//! 5. `recreate-pods-NODE`, one node at a time (masters first): every pod of the node that is
//!    not on the host's network and was created before the switch is deleted, and the step waits
//!    until none is left; their controllers recreate them on the new network. Pods that no
//!    controller owns are deleted for good (the plan's warning says so).
//! 6. `network-switch-end`: the marker removed.
//!
//! With `network.plugin: none` as the new network, nothing is installed and the pods are not
//! recreated (they would wait for the operator's CNI); the old plugin is still removed. With
//! `none` as the old one, nothing is removed: KubeXM did not install that CNI.
//!
//! Nothing here is undone by a rollback: the removed plugin is not in the new bundle.

use crate::modules::k8s::{kubectl, ADMIN_CONF};
use crate::runner::shell::Script;
use crate::script;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::{Network, Plugin};
use kubexm_manifests::resolve::Role;

use super::common::primary_plugin;
use super::flannel::FLANNEL_MANIFEST;
use super::kube_ovn::MASTER_LABEL;
use super::multus::MULTUS_MANIFEST;
use super::traces::plugin_traces;
use crate::context::InstallContext;
use crate::modules::apply::{HELM, MANIFESTS_DIR};

use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// The time the switch began (UTC, RFC 3339), on the first master while it runs.
pub const SWITCH_MARKER: &str = "/etc/kubernetes/kubexm/network-switch";
/// How long a node's pods may take to go.
const PODS_GONE: Duration = Duration::from_secs(240);

/// The plugins of a network: the primary one and multus over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkPlugins {
    /// The plugin giving pods their default network (`none`: the operator's own CNI).
    pub primary: Plugin,
    /// multus over it.
    pub multus: bool,
}

impl NetworkPlugins {
    /// The plugins of `network`.
    pub fn of(network: &Network) -> Self {
        Self {
            primary: primary_plugin(network),
            multus: network.plugin == Plugin::Multus,
        }
    }
}

impl std::fmt::Display for NetworkPlugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.multus {
            write!(f, "multus over {}", self.primary.as_str())
        } else {
            f.write_str(self.primary.as_str())
        }
    }
}

/// A change from one network to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginChange {
    /// The installed network.
    pub from: NetworkPlugins,
    /// The wanted one.
    pub to: NetworkPlugins,
}

impl PluginChange {
    /// The change from `installed` to `desired`, `None` when they have the same plugins.
    pub fn between(installed: &Network, desired: &Network) -> Option<Self> {
        let (from, to) = (NetworkPlugins::of(installed), NetworkPlugins::of(desired));
        (from != to).then_some(Self { from, to })
    }

    /// The old primary plugin, when it is removed (it changes, and KubeXM installed it).
    fn removed_primary(&self) -> Option<Plugin> {
        (self.from.primary != self.to.primary && self.from.primary != Plugin::None)
            .then_some(self.from.primary)
    }

    /// Whether multus is removed (the old network had it: it is applied again over a new
    /// delegate when the new network has it too).
    fn removes_multus(&self) -> bool {
        self.from.multus && (self.from.primary != self.to.primary || !self.to.multus)
    }

    /// The plan's warning: what the change does to the running pods.
    pub fn warning(&self) -> String {
        let mut w = format!(
            "WARNING: the pod network changes from {} to {}. Every pod not on the host's network loses its network while the old plugin is removed and the new one starts; the pods are then deleted node by node and recreated by their controllers (pods no controller owns are not recreated).",
            self.from, self.to
        );
        if self.from.primary == Plugin::None {
            w.push_str(" The installed CNI (network.plugin none) was not installed by KubeXM and is not removed: remove it first.");
        }
        if self.to.primary == Plugin::None {
            w.push_str(" network.plugin none installs no CNI: the nodes stay NotReady and the pods wait until you install one.");
        }
        w
    }
}

/// The masters and workers of `ctx`, masters first.
fn kube_nodes(ctx: &InstallContext) -> Vec<String> {
    let mut nodes: Vec<&Node> = ctx
        .nodes
        .iter()
        .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
        .collect();
    nodes.sort_by_key(|n| !n.has_role(Role::Master));
    nodes.into_iter().map(|n| n.name.clone()).collect()
}

/// Module `network-switch-out`: steps 1–3 (before the network module).
pub struct NetworkSwitchOut {
    /// The desired cluster.
    pub ctx: Arc<InstallContext>,
    /// The change.
    pub change: PluginChange,
}

impl Module for NetworkSwitchOut {
    fn name(&self) -> &str {
        "network-switch-out"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let first = self.ctx.first_master()?.name.clone();
        let mut tasks = vec![Task::new("network-switch-begin", [first.clone()]).step(SwitchBegin)];
        let primary = self.change.removed_primary();
        let multus = self.change.removes_multus();
        if primary.is_some() || multus {
            tasks.push(
                Task::new("remove-old-network", [first]).step(RemoveOldNetwork { primary, multus }),
            );
            tasks.push(
                Task::new("remove-old-network-traces", kube_nodes(&self.ctx))
                    .step(RemoveOldTraces { primary, multus }),
            );
        }
        Ok(tasks)
    }
}

/// Module `network-switch-pods`: steps 5–6 (after the network module).
pub struct NetworkSwitchPods {
    /// The desired cluster.
    pub ctx: Arc<InstallContext>,
    /// The change.
    pub change: PluginChange,
}

impl Module for NetworkSwitchPods {
    fn name(&self) -> &str {
        "network-switch-pods"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let first = self.ctx.first_master()?.name.clone();
        let mut tasks = Vec::new();
        if self.change.to.primary != Plugin::None {
            for node in kube_nodes(&self.ctx) {
                tasks.push(
                    Task::new(format!("recreate-pods-{node}"), [first.clone()])
                        .step(RecreatePods { node }),
                );
            }
        }
        tasks.push(Task::new("network-switch-end", [first]).step(SwitchEnd));
        Ok(tasks)
    }
}

/// Step 1: the switch's time kept in [`SWITCH_MARKER`].
pub struct SwitchBegin;

impl Step for SwitchBegin {
    fn name(&self) -> &str {
        "network-switch-begin"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let m = SWITCH_MARKER;
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "set -e\nmkdir -p {dir}\ndate -u +%Y-%m-%dT%H:%M:%SZ > {m}.tmp\nmv {m}.tmp {m}",
                dir = m.rsplit_once('/').map_or("/", |(d, _)| d),
                m = m
            ))
            .unless(script!("[ -s {m} ]", m = m))
            .undo(script!("rm -f {m}", m = m)),
        )])
    }
}

/// Step 6: the marker removed.
pub struct SwitchEnd;

impl Step for SwitchEnd {
    fn name(&self) -> &str {
        "network-switch-end"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new(script!("rm -f {SWITCH_MARKER}"))
                .unless(script!("[ ! -e {SWITCH_MARKER} ]")),
        )])
    }
}

/// Step 2: the old plugin's objects deleted from the cluster.
pub struct RemoveOldNetwork {
    primary: Option<Plugin>,
    multus: bool,
}

/// The Helm release (name, namespace) of a plugin KubeXM installs with its chart.
fn helm_release(plugin: Plugin) -> Option<(&'static str, &'static str)> {
    match plugin {
        Plugin::Calico => Some(("calico", "tigera-operator")),
        Plugin::Cilium => Some(("cilium", "kube-system")),
        Plugin::KubeOvn => Some(("kube-ovn", "kube-system")),
        Plugin::Hybridnet => Some(("hybridnet", "kube-system")),
        _ => None,
    }
}

/// A manifest applied by [`crate::modules::apply::ApplyManifest`], deleted with its record.
fn delete_manifest(file: &str) -> Op {
    let dest = format!("{MANIFESTS_DIR}/{file}");
    let d = shell::quoted(&dest);
    let m = shell::quoted(&format!("{dest}.applied"));
    Op::Run(
        RunCommand::new(script!(
            "set -e\n{k} delete --ignore-not-found --timeout=300s -f {d} >/dev/null\nrm -f {m} {d}",
            k = kubectl(),
            d = d,
            m = m
        ))
        .unless(script!("[ ! -e {d} ] && [ ! -e {m} ]", d = d, m = m))
        .timeout(Duration::from_secs(360)),
    )
}

/// A Helm release uninstalled with its record (values and chart files stay for the record).
fn uninstall_release(plugin: Plugin, release: &str, namespace: &str) -> Vec<Op> {
    let k = kubectl();
    let (r, n) = (shell::quoted(release), shell::quoted(namespace));
    let marker = shell::quoted(&format!("{MANIFESTS_DIR}/{release}.helm.applied"));
    let common = script!("--namespace {n} --kubeconfig {ADMIN_CONF}", n = n);
    let status = script!(
        "{HELM} status {r} {common} >/dev/null 2>&1",
        r = r,
        common = common
    );
    let mut ops = Vec::new();
    if plugin == Plugin::Calico {
        // The operator takes calico-system down when its Installation goes, so it goes first.
        ops.push(Op::Run(
            RunCommand::new(script!(
                "{k} delete installations.operator.tigera.io --all --ignore-not-found --timeout=300s >/dev/null", k = k
            ))
            .unless(script!(
                "! {k} get crd installations.operator.tigera.io >/dev/null 2>&1 || [ -z \"$({k} get installations.operator.tigera.io -o name 2>/dev/null)\" ]", k = k
            ))
            .timeout(Duration::from_secs(360)),
        ));
    }
    ops.push(Op::Run(
        RunCommand::new(script!(
            "set -e\nif {status}; then {HELM} uninstall {r} {common} --wait --timeout 5m >/dev/null; fi\nrm -f {marker}", status = status, r = r, common = common, marker = marker
        ))
        .unless(script!("! {status} && [ ! -e {marker} ]", status = status, marker = marker))
        .timeout(Duration::from_secs(360)),
    ));
    if plugin == Plugin::Calico {
        ops.push(Op::Run(
            RunCommand::new(script!(
                "{k} delete namespace calico-system --ignore-not-found --timeout=300s >/dev/null",
                k = k
            ))
            .unless(script!(
                "! {k} get namespace calico-system >/dev/null 2>&1",
                k = k
            ))
            .timeout(Duration::from_secs(360)),
        ));
    }
    if plugin == Plugin::KubeOvn {
        let key = MASTER_LABEL.split('=').next().unwrap_or(MASTER_LABEL);
        ops.push(Op::Run(
            RunCommand::new(script!(
                "{k} label nodes --all {key} >/dev/null",
                k = k,
                key = format!("{key}-")
            ))
            .unless(script!(
                "[ -z \"$({k} get nodes -l {key} -o name)\" ]",
                k = k,
                key = key
            )),
        ));
    }
    ops
}

impl Step for RemoveOldNetwork {
    fn name(&self) -> &str {
        "remove-old-network"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = Vec::new();
        if self.multus {
            ops.push(delete_manifest(MULTUS_MANIFEST));
        }
        match self.primary {
            Some(Plugin::Flannel) => ops.push(delete_manifest(FLANNEL_MANIFEST)),
            Some(p) => match helm_release(p) {
                Some((release, namespace)) => ops.extend(uninstall_release(p, release, namespace)),
                None => {
                    return Err(StepError::Invalid(format!(
                        "network.plugin {}: KubeXM does not know how to remove it",
                        p.as_str()
                    )))
                }
            },
            None => {}
        }
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(1200),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// Step 3: the old plugin's traces removed from a node.
pub struct RemoveOldTraces {
    primary: Option<Plugin>,
    multus: bool,
}

impl Step for RemoveOldTraces {
    fn name(&self) -> &str {
        "remove-old-network-traces"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut plugins: Vec<Plugin> = self.primary.into_iter().collect();
        if self.multus {
            plugins.push(Plugin::Multus);
        }
        Ok(plugins
            .into_iter()
            .filter_map(plugin_traces)
            .map(|t| t.remove())
            .collect())
    }
}

/// Step 5: one node's pods moved onto the new network.
pub struct RecreatePods {
    node: String,
}

/// A shell function `old_pods` listing `node`'s pods not on the host's network created before
/// the switch (`namespace name` lines; RFC 3339 UTC times compare as strings); it fails when the
/// marker or the API cannot be read, so that an API outage is never taken for "no pod left".
pub fn pods_before_switch(node: &str) -> Script {
    script!(
        "old_pods() {{
  t=$(cat {SWITCH_MARKER}) || return 1
  p=$({k} get pods --all-namespaces --field-selector {field} -o go-template='{{{{range .items}}}}{{{{if not .spec.hostNetwork}}}}{{{{.metadata.namespace}}}} {{{{.metadata.name}}}} {{{{.metadata.creationTimestamp}}}}{{{{\"\\n\"}}}}{{{{end}}}}{{{{end}}}}') || return 1
  printf '%s\\n' \"$p\" | awk -v t=\"$t\" '$3 < t {{print $1, $2}}'
}}",
        k = kubectl(),
        field = shell::quoted(&format!("spec.nodeName={node}"))
    )
}

impl RecreatePods {
    /// The command: the node's old pods deleted, then awaited until gone.
    fn command(&self) -> RunCommand {
        let list = pods_before_switch(&self.node);
        let k = kubectl();
        let secs = PODS_GONE.as_secs();
        RunCommand::new(script!(
            "set -e\n{list}\nold=$(old_pods)\nprintf '%s\\n' \"$old\" | while read -r ns name; do [ -n \"$name\" ] || continue; {k} delete pod -n \"$ns\" \"$name\" --wait=false >/dev/null 2>&1 || true; done\nend=$(( $(date +%s) + {secs} ))\nwhile :; do\n  left=$(old_pods) || left=\"(the API did not answer)\"\n  [ -n \"$left\" ] || exit 0\n  if [ \"$(date +%s)\" -ge \"$end\" ]; then echo \"pods of {node} still there after {secs}s: $(printf '%s' \"$left\" | tr '\\n' ',')\" >&2; exit 1; fi\n  sleep 3\ndone",
            node = shell::in_double_quotes(&self.node),
            list = list,
            k = k,
            secs = secs
        ))
        .unless(script!("{list}\nleft=$(old_pods) && [ -z \"$left\" ]", list = list))
        .timeout(PODS_GONE + Duration::from_secs(60))
    }
}

impl Step for RecreatePods {
    fn name(&self) -> &str {
        "recreate-pods"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(self.command())])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: PODS_GONE + Duration::from_secs(90),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(plugin: Plugin, delegate: Option<Plugin>) -> Network {
        let mut n: Network = serde_json::from_value(serde_json::json!({})).expect("network");
        n.plugin = plugin;
        n.multus.delegate = delegate;
        n
    }

    #[test]
    fn what_a_change_removes() {
        let flannel = net(Plugin::Flannel, None);
        let calico = net(Plugin::Calico, None);
        let multus_calico = net(Plugin::Multus, Some(Plugin::Calico));
        let multus_cilium = net(Plugin::Multus, Some(Plugin::Cilium));
        let none = net(Plugin::None, None);
        assert!(PluginChange::between(&flannel, &flannel).is_none());
        let c = PluginChange::between(&flannel, &calico).expect("change");
        assert_eq!(
            (c.removed_primary(), c.removes_multus()),
            (Some(Plugin::Flannel), false)
        );
        // multus taken off, the delegate kept: only multus goes.
        let c = PluginChange::between(&multus_calico, &calico).expect("change");
        assert_eq!((c.removed_primary(), c.removes_multus()), (None, true));
        // multus put on: nothing goes.
        let c = PluginChange::between(&calico, &multus_calico).expect("change");
        assert_eq!((c.removed_primary(), c.removes_multus()), (None, false));
        // the delegate changes under multus: both go (multus is applied again).
        let c = PluginChange::between(&multus_calico, &multus_cilium).expect("change");
        assert_eq!(
            (c.removed_primary(), c.removes_multus()),
            (Some(Plugin::Calico), true)
        );
        assert_eq!(c.from.to_string(), "multus over calico");
        // From none: nothing of KubeXM's to remove, and the warning says so.
        let c = PluginChange::between(&none, &flannel).expect("change");
        assert_eq!((c.removed_primary(), c.removes_multus()), (None, false));
        assert!(
            c.warning().contains("not installed by KubeXM"),
            "{}",
            c.warning()
        );
        let c = PluginChange::between(&calico, &none).expect("change");
        assert!(c.warning().contains("stay NotReady"), "{}", c.warning());
    }

    /// The pod list's filter on real text: pods created before the switch, not on the host's
    /// network (the go-template's output shape), are the ones named.
    #[test]
    fn pods_created_before_the_switch_are_listed() {
        let list = pods_before_switch("node1");
        // The function with a kubectl that prints what the go-template prints.
        let run = |kubectl_ok: bool| {
            let fake = list.replace(
                &format!("{} get pods", kubectl()),
                if kubectl_ok {
                    "printf '%s\\n' 'default web-1 2026-11-27T20:59:59Z' 'kube-system coredns-2 2026-11-27T21:00:01Z' 'default web-0 2025-12-31T23:00:00Z' || echo"
                } else {
                    "false"
                },
            );
            let marker = tempfile::NamedTempFile::new().expect("marker");
            std::fs::write(marker.path(), "2026-11-27T21:00:00Z\n").expect("write");
            let fake = fake.replace(SWITCH_MARKER, &marker.path().display().to_string());
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{fake}\nold_pods"))
                .output()
                .expect("sh")
        };
        let out = run(true);
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "default web-1\ndefault web-0\n"
        );
        assert!(
            !run(false).status.success(),
            "an API that does not answer is an error"
        );
        assert!(
            list.contains("--field-selector spec.nodeName=node1 "),
            "{list}"
        );
        assert!(list.contains("{{if not .spec.hostNetwork}}"), "{list}");
    }
}
