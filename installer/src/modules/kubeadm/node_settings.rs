//! The kubelet's and kube-proxy's settings applied to a running kubeadm cluster (what
//! `kubexm-install apply` changes for `featureGates`, the kubelet's flags and configuration,
//! and kube-proxy's mode; a re-run of the install applies them too).
//!
//! Both compare the node's `wanted/` drift file with its `applied/` one
//! ([`super::reconfigure`]) and do nothing when they are equal; a node with no record (a
//! worker joined by an older KubeXM) is applied once.
//!
//! * [`KubeletSettings`], every node in turn: `kubeadm init phase kubelet-start` with the
//!   node's own configuration writes `/var/lib/kubelet/config.yaml` and `kubeadm-flags.env`
//!   and restarts the kubelet (it touches no certificate and no kubeconfig); KubeXM then waits
//!   for the kubelet's `/healthz`. On the first master, which goes first, the cluster's
//!   `kubelet-config` ConfigMap is uploaded too, so later joins get the same settings.
//! * [`KubeProxySettings`], on the first master: `kubeadm init phase addon kube-proxy`
//!   rewrites kube-proxy's ConfigMap and DaemonSet; its pods are then restarted one node at a
//!   time by the DaemonSet's rolling update, and KubeXM waits for the rollout.

use crate::modules::k8s::STATE_DIR;
use crate::runner::shell::{self, Script};
use crate::script;
use std::time::Duration;

use super::binaries::KUBEADM;
use super::config::{NodeSettings, Settings};
use super::reconfigure::{APPLIED_DIR, RECONFIGURE_CONFIG, WANTED_DIR};
use crate::modules::k8s::kubectl;
use crate::pipeline::ops::{Op, RunCommand};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// How long a kubelet or kube-proxy's rollout may take after a change.
pub const SETTINGS_TIMEOUT: Duration = Duration::from_secs(300);

/// Both steps: one attempt (a half-applied setting is not retried blindly), bounded by the
/// rollout's wait.
fn policy() -> Policy {
    Policy {
        timeout: SETTINGS_TIMEOUT * 2,
        attempts: 1,
        retry_delay: Duration::from_secs(0),
    }
}

/// `unless` of a step comparing one drift file.
fn unchanged(file: &'static str) -> Script {
    script!(
        "cmp -s {WANTED_DIR}/{file} {APPLIED_DIR}/{file}",
        file = file
    )
}

/// The node's own configuration (workers get an `InitConfiguration` too: `kubelet-start`
/// reads only its node registration and the kubelet's configuration from it).
fn node_config(settings: &Settings, node: &Node, master: bool) -> Result<Op, StepError> {
    let n: NodeSettings = settings.node(node, master, false);
    let mut config = settings.render_init(&n)?;
    config.file.dest = RECONFIGURE_CONFIG.to_string();
    Ok(Op::Template(config))
}

/// The kubelet's settings on one node (see the module's documentation).
pub struct KubeletSettings {
    /// Cluster settings.
    pub settings: Settings,
    /// The first master (uploads the cluster's kubelet ConfigMap).
    pub first: String,
    /// The masters (their configuration is a control-plane node's).
    pub masters: Vec<String>,
}

impl KubeletSettings {
    fn script(&self, node: &Node) -> Script {
        let upload = if node.name == self.first {
            script!(
                "{KUBEADM} init phase upload-config kubelet --config {RECONFIGURE_CONFIG} >>\"$log\" 2>&1 || fail 'kubeadm could not upload the kubelet configuration for later joins'\n"
            )
        } else {
            Script::empty()
        };
        let wait = SETTINGS_TIMEOUT.as_secs();
        script!(
            "# the kubelet's settings on {name}\n\
set -e\n\
umask 077\n\
log={STATE_DIR}/kubeadm-kubelet-settings.log\n\
: >\"$log\"\n\
fail() {{ echo \"$1; kubeadm's output:\" >&2; tail -n 20 \"$log\" >&2; exit 1; }}\n\
mkdir -p {APPLIED_DIR}\n\
if [ ! -f {APPLIED_DIR}/kubelet ] && [ -f {APPLIED_DIR}/cluster ]; then\n\
  # Recorded by a KubeXM that kept the kubelet's settings in the cluster file.\n\
  cp -f {WANTED_DIR}/cluster {APPLIED_DIR}/cluster\n\
fi\n\
{KUBEADM} init phase kubelet-start --config {RECONFIGURE_CONFIG} >>\"$log\" 2>&1 || fail 'kubeadm could not write the kubelet configuration'\n\
{upload}sleep 2\n\
i=0; until curl -fsS -o /dev/null http://127.0.0.1:10248/healthz; do\n\
  i=$((i + 2)); [ $i -lt {wait} ] || {{ echo \"the kubelet on {name} was not healthy within {wait} s after its new settings\" >&2; journalctl -u kubelet -n 20 --no-pager >&2 || true; exit 1; }}\n\
  sleep 2\n\
done\n\
cp -f {WANTED_DIR}/kubelet {APPLIED_DIR}/kubelet\n\
echo 'kubelet settings applied'",
            name = shell::in_double_quotes(&node.name), upload = upload, wait = wait
        )
    }
}

impl Step for KubeletSettings {
    fn name(&self) -> &str {
        "kubelet-settings"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let master = self.masters.contains(&node.name);
        let mut ops = self.settings.drift_files()?.upload_wanted();
        ops.push(node_config(&self.settings, node, master)?);
        ops.push(Op::Run(
            RunCommand::new(self.script(node))
                .unless(unchanged("kubelet"))
                .timeout(SETTINGS_TIMEOUT + Duration::from_secs(60)),
        ));
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        policy()
    }
}

/// kube-proxy's settings, from the first master (see the module's documentation).
pub struct KubeProxySettings {
    /// Cluster settings.
    pub settings: Settings,
}

impl Step for KubeProxySettings {
    fn name(&self) -> &str {
        "kube-proxy-settings"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl();
        let wait = SETTINGS_TIMEOUT.as_secs();
        let mut ops = self.settings.drift_files()?.upload_wanted();
        ops.push(node_config(&self.settings, node, true)?);
        ops.push(Op::Run(
            RunCommand::new(script!(
                "# kube-proxy's settings\n\
set -e\n\
umask 077\n\
log={STATE_DIR}/kubeadm-kube-proxy-settings.log\n\
{KUBEADM} init phase addon kube-proxy --config {RECONFIGURE_CONFIG} >\"$log\" 2>&1 || {{ echo \"kubeadm could not write kube-proxy's ConfigMap and DaemonSet; kubeadm's output:\" >&2; tail -n 20 \"$log\" >&2; exit 1; }}\n\
{k} -n kube-system rollout restart daemonset kube-proxy >/dev/null\n\
if ! {k} -n kube-system rollout status daemonset kube-proxy --timeout={wait}s >/dev/null; then\n\
  echo 'kube-proxy did not finish restarting with its new settings:' >&2\n\
  {k} -n kube-system get pods -l k8s-app=kube-proxy -o wide >&2 || true\n\
  exit 1\n\
fi\n\
mkdir -p {APPLIED_DIR}\n\
cp -f {WANTED_DIR}/kube-proxy {APPLIED_DIR}/kube-proxy\n\
echo 'kube-proxy settings applied'", k = k, wait = wait
            ))
            .unless(unchanged("kube-proxy"))
            .timeout(SETTINGS_TIMEOUT + Duration::from_secs(60)),
        ));
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        policy()
    }
}
