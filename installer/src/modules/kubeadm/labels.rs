//! Node labels and taints per role, set with kubectl on the first master (idempotent: each node
//! is checked first):
//!
//! * workers are labelled `node-role.kubernetes.io/worker=`;
//! * masters that are also workers lose the control-plane taints kubeadm of the version set
//!   (`node-role.kubernetes.io/master:NoSchedule` up to v1.23, both it and
//!   `node-role.kubernetes.io/control-plane:NoSchedule` in v1.24, the latter only from v1.25),
//!   so pods may run there; master-only nodes keep them;
//! * `spec.hosts[].labels` are set on their node.

use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::context::InstallContext;
use crate::modules::k8s::kubectl;
use crate::pipeline::ops::{Op, RunCommand, WaitFor};
use crate::pipeline::{Facts, Node, Step, StepError};
use crate::runner::shell;

/// The label of worker nodes.
pub const WORKER_LABEL: &str = "node-role.kubernetes.io/worker";

/// `kubectl -o go-template` printing a node's labels as `key=value` lines.
pub(crate) const LABELS: &str =
    r#"go-template={{range $k, $v := .metadata.labels}}{{$k}}={{$v}}{{"\n"}}{{end}}"#;
/// `kubectl -o go-template` printing a node's taints as `key:effect` lines.
const TAINTS: &str = r#"go-template={{range .spec.taints}}{{.key}}:{{.effect}}{{"\n"}}{{end}}"#;

/// What one node should carry.
#[derive(Debug, Clone)]
struct Wanted {
    name: String,
    labels: BTreeMap<String, String>,
    untaint: bool,
}

/// Labels and taints of every master and worker.
pub struct NodeRoles {
    nodes: Vec<Wanted>,
    /// The control-plane taints (`key:effect`) kubeadm of the cluster's version sets.
    taints: Vec<String>,
}

impl NodeRoles {
    /// From the cluster's roles and host labels.
    pub fn new(ctx: &InstallContext) -> Self {
        let nodes = ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
            .map(|n| {
                let mut labels: BTreeMap<String, String> = ctx
                    .cluster
                    .file
                    .spec
                    .hosts
                    .iter()
                    .find(|h| h.name == n.name)
                    .map(|h| h.labels.clone())
                    .unwrap_or_default();
                if n.has_role(Role::Worker) {
                    labels.insert(WORKER_LABEL.to_string(), String::new());
                }
                Wanted {
                    name: n.name.clone(),
                    labels,
                    untaint: n.has_role(Role::Master) && n.has_role(Role::Worker),
                }
            })
            .collect();
        let taints = ctx
            .cluster
            .version
            .control_plane_taints()
            .iter()
            .map(ToString::to_string)
            .collect();
        Self { nodes, taints }
    }
}

impl Step for NodeRoles {
    fn name(&self) -> &str {
        "node-roles"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl();
        let mut ops = Vec::new();
        for w in &self.nodes {
            let n = shell::quoted(&w.name);
            ops.push(Op::Wait(WaitFor {
                what: format!("node {} registered", w.name),
                check: format!("{k} get node {n} -o name >/dev/null"),
                timeout: Duration::from_secs(180),
                interval: Duration::from_secs(2),
            }));
            if !w.labels.is_empty() {
                let pairs: Vec<String> = w
                    .labels
                    .iter()
                    .map(|(key, v)| format!("{key}={v}"))
                    .collect();
                let checks = Script::join(
                    pairs
                        .iter()
                        .map(|p| script!("printf '%s\\n' \"$l\" | grep -qxF -- {p}", p = p)),
                    " && ",
                );
                ops.push(Op::Run(
                    RunCommand::new(script!(
                        "{k} label node {n} --overwrite {pairs} >/dev/null",
                        k = k,
                        n = n,
                        pairs = shell::words(&pairs)
                    ))
                    .unless(script!(
                        "l=$({k} get node {n} -o {labels}) && {checks}",
                        k = k,
                        n = n,
                        labels = LABELS,
                        checks = checks
                    ))
                    .undo(script!(
                        "{k} label node {n} {keys} >/dev/null 2>&1 || true",
                        k = k,
                        n = n,
                        keys = shell::words(w.labels.keys().map(|key| format!("{key}-")))
                    )),
                ));
            }
            if !w.untaint {
                continue;
            }
            for taint in &self.taints {
                ops.push(Op::Run(
                    RunCommand::new(script!("{k} taint node {n} {taint}- >/dev/null", k = k, n = n, taint = taint))
                        .unless(script!(
                            "t=$({k} get node {n} -o {taints}) && ! printf '%s\\n' \"$t\" | grep -qxF {taint}",
                            k = k,
                            n = n,
                            taints = TAINTS,
                            taint = taint
                        ))
                        .undo(script!(
                            "{k} taint node {n} {taint} --overwrite >/dev/null 2>&1 || true", k = k, n = n, taint = taint
                        )),
                ));
            }
        }
        Ok(ops)
    }
}
