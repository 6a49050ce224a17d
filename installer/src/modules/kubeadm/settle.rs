//! What a real kubeadm cluster needs after `kubeadm init` / `join --control-plane` before the
//! next step may rely on it (measured with real kubeadm v1.20.2 in the lab, and true on real
//! hosts: `/work/shared/LAB.md`, "kubeadm v1.20.2 in lab nodes"):
//!
//! * **The node's control plane settles** ([`ControlPlaneSettled`]): after a control-plane join
//!   the stacked etcd member add briefly loses the leader and the controller-manager restarts;
//!   etcd, controller-manager and scheduler sit at 0/1 for ~80 s on their startup probes. KubeXM
//!   waits, bounded, for the node's own API server (`/readyz`), controller-manager and scheduler
//!   (`/healthz` on 10257 / 10259) and says which one it still waits for.
//! * **kube-proxy is restarted once all control-plane joins are done** ([`RestartKubeProxy`]):
//!   kube-proxy pods started before a control-plane join stopped seeing new Services (2 of 3
//!   real runs) until `kubectl -n kube-system rollout restart ds kube-proxy`. The restart is
//!   done once per set of joined control-plane nodes (a stamp on the first master records it),
//!   then KubeXM waits for the rollout.

use crate::modules::k8s::{kubectl, ADMIN_CONF};
use crate::script;
use std::time::Duration;

use crate::modules::k8s::host_url;
use crate::modules::k8s::APISERVER_PORT;
use crate::pipeline::ops::{Op, RunCommand, WaitFor};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};
use crate::runner::shell;

/// How long a node's control plane may take to settle after a join.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Where the first master records for which control-plane nodes kube-proxy was restarted.
pub const KUBE_PROXY_STAMP: &str = "/etc/kubernetes/kubexm/kube-proxy-restarted-for";

/// The node's own API server, controller-manager and scheduler answer.
pub struct ControlPlaneSettled;

impl Step for ControlPlaneSettled {
    fn name(&self) -> &str {
        "control-plane-settled"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let api = host_url(&node.internal_address, APISERVER_PORT);
        let wait = |what: String, check: String| {
            Op::Wait(WaitFor {
                what,
                check,
                timeout: SETTLE_TIMEOUT,
                interval: Duration::from_secs(3),
            })
        };
        Ok(vec![
            wait(
                format!("the API server on {} answering /readyz", node.name),
                format!(
                    "{} --kubeconfig {ADMIN_CONF} --server {api} get --raw=/readyz >/dev/null",
                    crate::modules::k8s::KUBECTL
                ),
            ),
            wait(
                format!(
                    "kube-controller-manager on {} healthy (its startup probe can take ~80 s after a join)",
                    node.name
                ),
                "curl -fsSk -o /dev/null https://127.0.0.1:10257/healthz".to_string(),
            ),
            wait(
                format!(
                    "kube-scheduler on {} healthy (its startup probe can take ~80 s after a join)",
                    node.name
                ),
                "curl -fsSk -o /dev/null https://127.0.0.1:10259/healthz".to_string(),
            ),
        ])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: SETTLE_TIMEOUT * 4,
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// `kubectl -n kube-system rollout restart ds kube-proxy` on the first master, once per set of
/// joined control-plane nodes, then the rollout awaited.
pub struct RestartKubeProxy {
    /// The control-plane nodes that joined (not the first master), in order.
    pub joined: Vec<String>,
}

impl Step for RestartKubeProxy {
    fn name(&self) -> &str {
        "restart-kube-proxy-after-control-plane-joins"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let k = kubectl();
        let set = shell::quoted(&self.joined.join(","));
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "set -e\n{k} -n kube-system rollout restart daemonset kube-proxy >/dev/null\nif ! {k} -n kube-system rollout status daemonset kube-proxy --timeout={secs}s >/dev/null; then\n  echo 'kube-proxy did not finish restarting (after the control-plane joins):' >&2\n  {k} -n kube-system get pods -l k8s-app=kube-proxy -o wide >&2 || true\n  exit 1\nfi\necho {set} >{KUBE_PROXY_STAMP}",
                k = k,
                secs = SETTLE_TIMEOUT.as_secs(),
                set = set
            ))
            .unless(script!("[ \"$(cat {KUBE_PROXY_STAMP} 2>/dev/null)\" = {set} ]", set = set))
            .undo(script!("rm -f {KUBE_PROXY_STAMP}"))
            .timeout(SETTLE_TIMEOUT + Duration::from_secs(60)),
        )])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: SETTLE_TIMEOUT * 2,
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}
