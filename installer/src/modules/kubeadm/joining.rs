//! `kubeadm join` on the other masters (as control-plane nodes) and on the workers, with the
//! credentials the first master provided ([`super::init::LearnJoinCredentials`]).

use crate::modules::k8s::STATE_DIR;
use crate::script;
use std::time::Duration;

use super::binaries::KUBEADM;
use super::config::{planned_credentials, Settings, JOIN_CONFIG};
use super::join::JoinCredentials;
use crate::pipeline::ops::{CreateDir, Op, RunCommand, Systemd, SystemdAction};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// The output of `kubeadm join` on the node (root only).
pub const JOIN_LOG: &str = "/etc/kubernetes/kubexm/kubeadm-join.log";
/// A joined node has it.
pub const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";

/// The join configuration (root only: it holds the token) and `kubeadm join`; skipped on a node
/// that has joined already. A rejected token is named as such: the next run issues a new one.
pub struct JoinNode {
    /// Cluster settings.
    pub settings: Settings,
    /// Join as a control-plane node.
    pub control_plane: bool,
}

impl Step for JoinNode {
    fn name(&self) -> &str {
        if self.control_plane {
            "kubeadm-join-control-plane"
        } else {
            "kubeadm-join"
        }
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let creds = match JoinCredentials::from_facts(facts) {
            Some(c) => c,
            None if facts.is_planning() => planned_credentials(&self.settings),
            None => {
                return Err(StepError::Invalid(
                    "the join credentials were not learned: the first master's join-credentials task must run before any join".into(),
                ))
            }
        };
        if self.control_plane && creds.certificate_key.is_none() {
            return Err(StepError::Invalid(format!(
                "{} joins as a control-plane node but no certificate key was learned (kubeadm init must run with --upload-certs)",
                node.name
            )));
        }
        let n = self.settings.node(node, self.control_plane, false);
        let mut ops = vec![Op::Mkdir(CreateDir {
            path: STATE_DIR.to_string(),
            mode: 0o700,
        })];
        if self.control_plane {
            ops.extend(self.settings.control_plane_files(&n)?);
        }
        // The join configuration holds the credentials of this run (a new token once the last
        // one nears expiry, a new certificate key once kubeadm's uploaded certificates are gone):
        // a node that has joined keeps the one it joined with, so a re-run changes nothing.
        ops.push(Op::Template(
            self.settings
                .render_join(&n, &creds)?
                .unless(script!("[ -s {KUBELET_CONF} ]")),
        ));
        // What a join applies is recorded for later re-runs and `apply` to compare (workers:
        // the kubelet's settings; masters: the control plane's too).
        ops.extend(self.settings.drift_files()?.upload_wanted());
        let record = script!("\n{r}", r = super::reconfigure::record_applied());
        let patches = self.settings.patches_flag(&n);
        ops.push(Op::Run(
            RunCommand::new(script!(
                "set -e\numask 077\nif ! {KUBEADM} join --config {JOIN_CONFIG}{patches} >{JOIN_LOG} 2>&1; then\n  if grep -qiE 'token id .*invalid|has expired|could not find a JWS signature|Unauthorized' {JOIN_LOG}; then\n    echo 'the bootstrap token was rejected (expired or revoked): run the install again; before joining, the first master checks the token and issues a fresh one' >&2\n  fi\n  echo \"kubeadm join failed; the last lines of {JOIN_LOG}:\" >&2\n  tail -n 25 {JOIN_LOG} >&2\n  exit 1\nfi{record}", patches = patches, record = record
            ))
            .unless(script!("[ -s {KUBELET_CONF} ]"))
            .verify(script!("[ -s {KUBELET_CONF} ]"))
            .undo(script!("{KUBEADM} reset -f >/dev/null 2>&1 || true"))
            .timeout(Duration::from_secs(900)),
        ));
        if self.control_plane {
            // kubeadm's download-certs replaced the etcd client pair with the first master's;
            // the node's own pair is put back (both are valid: the API server reads them at its
            // next start), so a re-run finds nothing to change.
            ops.extend(self.settings.control_plane_files(&n)?);
        }
        ops.push(Op::Systemd(Systemd::new(SystemdAction::IsActive(
            "kubelet".into(),
        ))));
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
