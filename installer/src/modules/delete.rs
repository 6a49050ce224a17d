//! What every module's removal shares: the delete preflight, the [`Ops`] step and the helpers
//! that keep and restore what KubeXM overwrote. The `delete` pipeline
//! ([`crate::pipelines::delete`]) removes what the create pipeline put on the nodes, module by
//! module in reverse install order.
//!
//! Every component module owns its removal as `pub fn delete_module(ctx: &Arc<InstallContext>)
//! -> impl Module` in its own file (see [`super::etcd::delete_module`]); the pipeline only
//! assembles them. Conventions every delete step follows:
//!
//! * **Idempotent**: each generic step has an `unless` check that is true when there is nothing
//!   (left) to do, so a second `delete`, or a `delete` of a node that was never installed, skips
//!   it; no step fails because the thing is already gone.
//! * **Not reverted**: deleting is the point, so delete steps have no `undo`.
//! * **Only what KubeXM wrote**: files KubeXM renders start with `# Written by KubeXM`; configs of
//!   OS packages KubeXM overwrote (haproxy, nginx, keepalived) are put back from the pristine copy
//!   kept in [`ORIG_DIR`] at install time (else from a leftover `.kubexm-orig` backup, else
//!   removed), and their units are disabled only when KubeXM had enabled them.
//! * **OS packages stay installed** (an air-gapped host may have no way to get them back).
//!
//! Order: `delete-preflight` (refuses nodes marked for another cluster), Kubernetes (kubexm
//! path: services, pods, kubelet state, files; kubeadm path: kubeadm reset, kubelet, CNI
//! traces), runtime, registry,
//! load balancer, etcd, node preparation (last: it removes `/etc/kubexm` and the staging
//! directories the other modules read).

use crate::runner::shell::Script;
use crate::script;
use std::sync::Arc;

use crate::context::{InstallContext, NODE_MARKER};
use crate::pipeline::ops::{Check, Op, RunCommand};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::shell;

/// Where pristine copies of OS-package configs KubeXM overwrites are kept (`ORIG_DIR/<path>`),
/// with `<path>.absent` when there was none and `<path>.unit` holding the unit's state before
/// KubeXM enabled it (`enabled` or `disabled`).
pub const ORIG_DIR: &str = "/etc/kubexm/orig";

/// First line of every file KubeXM renders.
pub const WRITTEN_BY: &str = "# Written by KubeXM";

/// Shell test: `path` exists and was written by KubeXM.
pub fn written_by_kubexm(path: &str) -> Script {
    script!(
        "head -n 1 -- {} 2>/dev/null | grep -q '^{WRITTEN_BY}'",
        shell::quoted(path)
    )
}

/// Install side: before KubeXM first writes `path` (a config owned by an OS package), keeps the
/// original in [`ORIG_DIR`] (or notes it was absent) and whether `unit` was enabled, so
/// [`restore_original`] can put the node back. Runs once: a file that is already KubeXM's is
/// noted as absent.
pub fn keep_original(path: &str, unit: &str) -> Op {
    let o = shell::quoted(&format!("{ORIG_DIR}{path}"));
    let p = shell::quoted(path);
    let u = shell::quoted(unit);
    Op::Run(
        RunCommand::new(script!(
            "set -e\no={o}\nmkdir -p \"$(dirname -- \"$o\")\"\nif [ -e {p} ] && ! {kx}; then cp -a -- {p} \"$o\"; else : > \"$o.absent\"; fi\n[ -e \"$o.unit\" ] || if systemctl is-enabled -q {u} 2>/dev/null; then echo enabled; else echo disabled; fi > \"$o.unit\"",
            kx = written_by_kubexm(path), o = o, p = p, u = u
        ))
        .unless(script!("[ -e {o} ] || [ -e {o}.absent ]", o = o))
        .undo(script!("rm -f -- {o} {o}.absent {o}.unit", o = o)),
    )
}

/// Install side, before KubeXM installs the OS package that brings `unit`: notes whether `unit`
/// was enabled then (`ORIG_DIR/<path>.unit`, kept by [`keep_original`]), so that a unit the
/// package enabled on its own is left disabled again by [`restore_original`].
pub fn keep_unit_state(path: &str, unit: &str) -> Op {
    let o = shell::quoted(&format!("{ORIG_DIR}{path}"));
    let u = shell::quoted(unit);
    Op::Run(
        RunCommand::new(script!(
            "set -e\no={o}\nmkdir -p \"$(dirname -- \"$o\")\"\nif systemctl is-enabled -q {u} 2>/dev/null; then echo enabled; else echo disabled; fi > \"$o.unit\"", o = o, u = u
        ))
        .unless(script!("[ -e {o}.unit ]", o = o))
        .undo(script!("rm -f -- {o}.unit", o = o)),
    )
}

/// Delete side: when `path` is KubeXM's, stops and disables `unit` (KubeXM enabled it), puts the
/// original back (from [`ORIG_DIR`], else from `path.kubexm-orig`, else removes `path`) and
/// re-enables `unit` if it was enabled before the install.
pub fn restore_original(path: &str, unit: &str) -> Op {
    let o = shell::quoted(&format!("{ORIG_DIR}{path}"));
    let p = shell::quoted(path);
    let b = shell::quoted(&format!("{path}.kubexm-orig"));
    let u = shell::quoted(unit);
    Op::Run(
        RunCommand::new(script!(
            "o={o}\nwas=$(cat \"$o.unit\" 2>/dev/null || echo disabled)\nif {kx}; then\n  systemctl disable --now {u} 2>/dev/null || systemctl stop {u} 2>/dev/null || true\n  if [ -e \"$o\" ]; then mv -f -- \"$o\" {p}\n  elif [ -e {b} ]; then mv -f -- {b} {p}\n  else rm -f -- {p}; fi\n  if [ \"$was\" = enabled ]; then systemctl enable --now {u} || true; fi\nfi\nrm -f -- \"$o\" \"$o.absent\" \"$o.unit\"",
            kx = written_by_kubexm(path), o = o, u = u, p = p, b = b
        ))
        .unless(script!(
            "! {kx} && [ ! -e {o} ] && [ ! -e {o}.absent ] && [ ! -e {o}.unit ]",
            kx = written_by_kubexm(path), o = o
        )),
    )
}

/// Refuses to touch a node whose marker names another cluster.
pub struct DeletePreflight(pub Arc<InstallContext>);

impl Module for DeletePreflight {
    fn name(&self) -> &str {
        "delete-preflight"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(vec![Task::new("check-cluster-marker", self.0.all()).step(
            MarkerCheck {
                cluster: self.0.cluster.cluster_name().to_string(),
            },
        )])
    }
}

/// `/etc/kubexm/cluster` is absent (nothing installed, or already deleted) or names this cluster.
pub struct MarkerCheck {
    cluster: String,
}

impl Step for MarkerCheck {
    fn name(&self) -> &str {
        "cluster-marker"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let want = shell::quoted(&format!("name={}", self.cluster));
        Ok(vec![Op::Check(Check::new(
            "cluster marker",
            format!(
                "[ -e {NODE_MARKER} ] || exit 0\ngrep -qxF {want} {NODE_MARKER} && exit 0\necho \"this node belongs to another cluster ($(head -n 1 {NODE_MARKER})), not {c}: check cluster.yaml's hosts\" >&2\nexit 1",
                c = self.cluster,
            ),
        ))])
    }
}

/// A delete step made of fixed generic steps (the same on every node of its task).
pub struct Ops {
    /// Step name.
    pub name: &'static str,
    /// The generic steps.
    pub ops: Vec<Op>,
}

impl Step for Ops {
    fn name(&self) -> &str {
        self.name
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(self.ops.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_original_only_acts_on_kubexm_files() {
        let Op::Run(r) = restore_original("/etc/haproxy/haproxy.cfg", "haproxy") else {
            panic!("run op");
        };
        assert!(r
            .command
            .contains("if head -n 1 -- /etc/haproxy/haproxy.cfg"));
        assert!(r
            .command
            .contains("mv -f -- \"$o\" /etc/haproxy/haproxy.cfg"));
        assert!(r.undo.is_none(), "delete steps are not reverted");
        let unless = r.unless.expect("unless");
        assert!(unless.starts_with("! head -n 1"), "{unless}");
    }

    #[test]
    fn keep_original_runs_once() {
        let Op::Run(r) = keep_original("/etc/keepalived/keepalived.conf", "keepalived") else {
            panic!("run op");
        };
        assert_eq!(
            r.unless.as_deref(),
            Some("[ -e /etc/kubexm/orig/etc/keepalived/keepalived.conf ] || [ -e /etc/kubexm/orig/etc/keepalived/keepalived.conf.absent ]")
        );
    }
}
