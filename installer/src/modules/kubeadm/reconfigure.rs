//! Re-runs of an initialised cluster: what cluster.yaml asks of the control plane is compared
//! with what kubeadm last applied, and what kubeadm can change on a running cluster is applied;
//! the rest is reported plainly, never skipped silently (`kubeadm init` and `join` themselves
//! are skipped once a node has joined).
//!
//! KubeXM keeps five small canonical files per node (root only, in
//! `/etc/kubernetes/kubexm/{wanted,applied}/`), written from the same settings as the kubeadm
//! configuration ([`DriftFiles`]):
//!
//! | file | what | a change is applied by |
//! |---|---|---|
//! | `cert-sans` | the API server certificate's SANs | the certificate re-issued on every master (`kubeadm init phase certs apiserver`, the old pair kept in `replaced/`), the API server restarted |
//! | `control-plane` | API server / controller-manager / scheduler flags and feature gates | `kubeadm init phase control-plane all` on every master (the kubelet restarts the changed static pods) |
//! | `kubelet` | the kubelet's configuration and flags, feature gates | `kubeadm init phase kubelet-start` on every node in turn, the kubelet's health waited for (the first master also uploads the cluster's kubelet ConfigMap for later joins): [`super::node_settings`] |
//! | `kube-proxy` | kube-proxy's mode and configuration, feature gates | `kubeadm init phase addon kube-proxy` on the first master (ConfigMap and DaemonSet), then a rolling restart of the DaemonSet: [`super::node_settings`] |
//! | `cluster` | everything else: the version, networking, etcd, images | nothing: a warning names the changed settings (`kubexm-install apply` refuses them, `upgrade` changes the version) |
//!
//! `applied/` is written when `kubeadm init`/`join` succeed on the node, and after a
//! reconfiguration; a cluster set up by an older KubeXM gets it on the first re-run (the current
//! settings are taken as applied, with a note). After the first master is reconfigured, its
//! configuration is uploaded (`kubeadm init phase upload-config kubeadm`) so that later joins get
//! it. Masters are reconfigured one at a time, each waiting until its API server answers again.

use crate::modules::k8s::{KUBECTL, STATE_DIR};
use crate::runner::shell::{self, Script};
use crate::script;
use std::time::Duration;

use super::binaries::KUBEADM;
use super::config::{NodeSettings, Settings};
use crate::modules::k8s::host_url;
use crate::modules::k8s::ADMIN_CONF;
use crate::modules::k8s::APISERVER_PORT;
use crate::pipeline::ops::{Check, CreateDir, Op, RunCommand, UploadFile};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// The configuration a reconfiguration runs kubeadm's phases with (this node's
/// `InitConfiguration` and the cluster's `ClusterConfiguration`).
pub const RECONFIGURE_CONFIG: &str = "/etc/kubernetes/kubexm/kubeadm-reconfigure.yaml";
/// Where the wanted settings are uploaded on every run.
pub const WANTED_DIR: &str = "/etc/kubernetes/kubexm/wanted";
/// Where the settings kubeadm last applied on the node are kept.
pub const APPLIED_DIR: &str = "/etc/kubernetes/kubexm/applied";
/// How long a master's API server may take to answer again after a change.
pub const RESTART_TIMEOUT: Duration = Duration::from_secs(300);

/// The canonical text of the three kinds of settings (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriftFiles {
    /// The API server certificate's SANs, one per line, sorted.
    pub cert_sans: String,
    /// The control-plane components' flags and feature gates.
    pub control_plane: String,
    /// The kubelet's configuration and flags.
    pub kubelet: String,
    /// kube-proxy's configuration.
    pub kube_proxy: String,
    /// Every other cluster-wide setting.
    pub cluster: String,
}

impl DriftFiles {
    /// The files as (name, content).
    pub fn files(&self) -> [(&'static str, &str); 5] {
        [
            ("cert-sans", &self.cert_sans),
            ("control-plane", &self.control_plane),
            ("kubelet", &self.kubelet),
            ("kube-proxy", &self.kube_proxy),
            ("cluster", &self.cluster),
        ]
    }

    /// Upload ops writing them to [`WANTED_DIR`] (root only).
    pub fn upload_wanted(&self) -> Vec<Op> {
        let mut ops = vec![
            Op::Mkdir(CreateDir {
                path: STATE_DIR.to_string(),
                mode: 0o700,
            }),
            Op::Mkdir(CreateDir {
                path: WANTED_DIR.to_string(),
                mode: 0o700,
            }),
        ];
        for (name, text) in self.files() {
            ops.push(Op::Upload(UploadFile::bytes(
                text.as_bytes().to_vec(),
                format!("{WANTED_DIR}/{name}"),
                0o600,
            )));
        }
        ops
    }
}

/// Shell appended to a successful `kubeadm init`/`join`: what was just applied is recorded.
pub fn record_applied() -> Script {
    script!("rm -rf {APPLIED_DIR}\ncp -a {WANTED_DIR} {APPLIED_DIR}")
}

/// On a master that has joined: applies certificate SAN and control-plane flag changes, reports
/// the others.
pub struct Reconfigure {
    /// Cluster settings.
    pub settings: Settings,
    /// The first master (it uploads the new configuration).
    pub first: String,
}

impl Reconfigure {
    fn script(&self, n: &NodeSettings, first: bool) -> Script {
        let patches = self.settings.patches_flag(n);
        let api = host_url(&n.address, APISERVER_PORT);
        let manifest = "/etc/kubernetes/manifests/kube-apiserver.yaml";
        let ready = script!(
            "{KUBECTL} --kubeconfig {ADMIN_CONF} --server {api} get --raw=/readyz >/dev/null 2>&1",
            api = api
        );
        let wait = RESTART_TIMEOUT.as_secs();
        let upload = if first {
            script!(
                "if [ -n \"$changed\" ]; then {KUBEADM} init phase upload-config kubeadm --config {RECONFIGURE_CONFIG} >>\"$log\" 2>&1; fi\n"
            )
        } else {
            Script::empty()
        };
        script!(
            "# kubeadm reconfiguration of {name}: API server certificate SANs, control-plane flags\n\
set -e\n\
umask 077\n\
log={STATE_DIR}/kubeadm-reconfigure.log\n\
: >\"$log\"\n\
if [ ! -d {APPLIED_DIR} ]; then\n\
  cp -a {WANTED_DIR} {APPLIED_DIR}\n\
  echo 'NOTE: no record of what kubeadm applied (a cluster set up before KubeXM kept one): the current cluster.yaml is taken as applied'\n\
  exit 0\n\
fi\n\
changed=''\n\
restart=''\n\
fail() {{ echo \"$1; kubeadm's output:\" >&2; tail -n 20 \"$log\" >&2; exit 1; }}\n\
if ! cmp -s {WANTED_DIR}/cert-sans {APPLIED_DIR}/cert-sans; then\n\
  mkdir -p {STATE_DIR}/replaced\n\
  mv -f /etc/kubernetes/pki/apiserver.crt /etc/kubernetes/pki/apiserver.key {STATE_DIR}/replaced/\n\
  {KUBEADM} init phase certs apiserver --config {RECONFIGURE_CONFIG} >>\"$log\" 2>&1 || {{ mv -f {STATE_DIR}/replaced/apiserver.* /etc/kubernetes/pki/; fail 'kubeadm could not re-issue the API server certificate with the new SANs'; }}\n\
  changed=\"$changed cert-sans\"; restart=1\n\
fi\n\
if ! cmp -s {WANTED_DIR}/control-plane {APPLIED_DIR}/control-plane; then\n\
  before=$(sha256sum {manifest})\n\
  {KUBEADM} init phase control-plane all --config {RECONFIGURE_CONFIG}{patches} >>\"$log\" 2>&1 || fail 'kubeadm could not write the control-plane manifests'\n\
  changed=\"$changed control-plane\"\n\
  [ \"$before\" != \"$(sha256sum {manifest})\" ] && restart=''\n\
fi\n\
if [ -n \"$restart\" ]; then\n\
  # Same manifest, new certificate: the kubelet recreates the pod when its manifest comes back.\n\
  mv -f {manifest} {STATE_DIR}/kube-apiserver.yaml.restart\n\
  i=0; while {ready} && [ $i -lt 60 ]; do sleep 1; i=$((i + 1)); done\n\
  mv -f {STATE_DIR}/kube-apiserver.yaml.restart {manifest}\n\
fi\n\
if [ -n \"$changed\" ]; then\n\
  sleep 5\n\
  i=0; until {ready}; do\n\
    i=$((i + 3)); [ $i -lt {wait} ] || {{ echo \"the API server on {name} did not answer /readyz within {wait} s after the reconfiguration ($changed)\" >&2; exit 1; }}\n\
    sleep 3\n\
  done\n\
fi\n\
{upload}cp -f {WANTED_DIR}/cert-sans {WANTED_DIR}/control-plane {APPLIED_DIR}/\n\
[ -z \"$changed\" ] || echo \"reconfigured:$changed\"",
            name = shell::in_double_quotes(&n.name), manifest = manifest, patches = patches, ready = ready, wait = wait, upload = upload
        )
    }
}

impl Step for Reconfigure {
    fn name(&self) -> &str {
        "kubeadm-reconfigure"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let n = self.settings.node(node, true, false);
        let mut ops = self.settings.drift_files()?.upload_wanted();
        let mut config = self.settings.render_init(&n)?;
        config.file.dest = RECONFIGURE_CONFIG.to_string();
        ops.push(Op::Template(config));
        ops.push(Op::Run(
            RunCommand::new(self.script(&n, node.name == self.first))
                .unless(script!(
                    "[ -d {APPLIED_DIR} ] && cmp -s {WANTED_DIR}/cert-sans {APPLIED_DIR}/cert-sans && cmp -s {WANTED_DIR}/control-plane {APPLIED_DIR}/control-plane"
                ))
                .timeout(RESTART_TIMEOUT * 2),
        ));
        ops.push(Op::Check(Check::new(
            "settings kubeadm cannot change on a running cluster",
            format!(
                "[ -d {APPLIED_DIR} ] || exit 0\n\
if ! cmp -s {WANTED_DIR}/cluster {APPLIED_DIR}/cluster; then\n\
  echo \"WARNING: cluster.yaml changed settings of the running cluster that cannot change in place (the version, networking, etcd, images): they are NOT applied (\\`kubexm-install apply --dry-run\\` says why for each). Changed (- applied, + wanted):\"\n\
  diff {APPLIED_DIR}/cluster {WANTED_DIR}/cluster | grep '^[<>]' | sed 's/^</WARNING:   -/; s/^>/WARNING:   +/' | head -n 40\n\
fi"
            ),
        )));
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: RESTART_TIMEOUT * 3,
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}
