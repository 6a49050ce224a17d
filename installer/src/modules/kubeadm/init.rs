//! The first master: `kubeadm init`, the admin kubeconfig fetched to the control host, and the
//! join credentials learned for the other nodes.

use crate::modules::k8s::{kubectl, ADMIN_CONF, STATE_DIR};
use crate::script;
use std::path::PathBuf;
use std::time::Duration;

use super::binaries::KUBEADM;
use super::config::{Settings, INIT_CONFIG};
use super::join;
use crate::pipeline::ops::{
    CreateDir, FetchFile, LearnFacts, Op, RunCommand, Systemd, SystemdAction, WaitFor,
};
use crate::pipeline::{Facts, Node, Policy, Step, StepError};

/// The full output of `kubeadm init` (root only: it holds the join token and certificate key).
pub const INIT_LOG: &str = "/etc/kubernetes/kubexm/kubeadm-init.log";
/// The newest kubeadm output holding valid join credentials (root only).
pub const CREDENTIALS: &str = "/etc/kubernetes/kubexm/join-credentials";
/// A bootstrap token with less than this left is replaced before joining.
pub const TOKEN_MARGIN: Duration = Duration::from_secs(3600);

/// Shell check: the API server answers `/readyz`.
pub fn api_ready() -> String {
    format!("{} get --raw=/readyz >/dev/null", kubectl())
}

/// `kubeadm init --upload-certs` with KubeXM's configuration; the whole output kept in
/// [`INIT_LOG`]; then the API server must answer.
pub struct InitControlPlane {
    /// Cluster settings.
    pub settings: Settings,
    /// Static pods are placed before init (kube-vip), so kubeadm must accept a non-empty
    /// manifests directory.
    pub manifests_prefilled: bool,
}

impl Step for InitControlPlane {
    fn name(&self) -> &str {
        "kubeadm-init"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let n = self.settings.node(node, true, self.manifests_prefilled);
        let mut ops = vec![Op::Mkdir(CreateDir {
            path: STATE_DIR.to_string(),
            mode: 0o700,
        })];
        ops.extend(self.settings.control_plane_files(&n)?);
        ops.push(Op::Template(self.settings.render_init(&n)?));
        ops.extend(self.settings.drift_files()?.upload_wanted());
        let patches = self.settings.patches_flag(&n);
        ops.push(Op::Run(
            RunCommand::new(script!(
                "set -e\numask 077\nif ! {KUBEADM} init --config {INIT_CONFIG} --upload-certs{patches} >{INIT_LOG} 2>&1; then\n  echo \"kubeadm init failed; the last lines of {INIT_LOG}:\" >&2\n  tail -n 25 {INIT_LOG} >&2\n  exit 1\nfi\n{record}",
                patches = patches,
                record = super::reconfigure::record_applied()
            ))
            .unless(script!("[ -s {ADMIN_CONF} ]"))
            .verify(script!("[ -s {ADMIN_CONF} ]"))
            .undo(script!(
                "{KUBEADM} reset -f >/dev/null 2>&1 || true\nrm -f {INIT_LOG} {CREDENTIALS}"
            ))
            .timeout(Duration::from_secs(900)),
        ));
        ops.push(Op::Systemd(Systemd::new(SystemdAction::IsActive(
            "kubelet".into(),
        ))));
        ops.push(Op::Wait(WaitFor {
            what: "the API server answering /readyz".into(),
            check: api_ready(),
            timeout: Duration::from_secs(300),
            interval: Duration::from_secs(2),
        }));
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

/// The admin kubeconfig copied to the control host (root only there too).
pub struct FetchAdminKubeconfig {
    /// The admin kubeconfig on the first master.
    pub src: String,
    /// Where it goes on the control host.
    pub dest: PathBuf,
}

impl Step for FetchAdminKubeconfig {
    fn name(&self) -> &str {
        "fetch-admin-kubeconfig"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Fetch(FetchFile {
            src: self.src.clone(),
            dest: self.dest.clone(),
            mode: 0o600,
        })])
    }
}

/// The cluster CA file on a master; its first certificate is the signing CA.
pub const CA_CRT: &str = "/etc/kubernetes/pki/ca.crt";

/// Shell setting `pin` to the join pin of the first certificate in `crt` (the sha256 of its
/// DER-encoded SubjectPublicKeyInfo, as in `--discovery-token-ca-cert-hash sha256:<pin>`), or
/// to nothing when the file holds no certificate openssl reads (then nothing is checked
/// against it: the hash of empty input must never stand for a CA).
pub fn ca_pin_command(crt: &str) -> String {
    format!(
        "pin=''\nif pub=$(openssl x509 -in {crt} -noout -pubkey 2>/dev/null) && [ -n \"$pub\" ] && der=$(printf '%s\\n' \"$pub\" | openssl pkey -pubin -outform der 2>/dev/null | base64 -w0) && [ -n \"$der\" ]; then pin=$(printf %s \"$der\" | base64 -d | sha256sum | cut -d' ' -f1); fi"
    )
}

/// Learns the join credentials on the first master, for the joins that follow: from
/// [`CREDENTIALS`] (first a copy of the init output) while its bootstrap token has at least
/// [`TOKEN_MARGIN`] left (the token's Secret says when it expires; an expired token's Secret is
/// gone) and it pins the signing CA of [`CA_CRT`] (after a rotation of the cluster CA it pins
/// the old one, which `kube-public/cluster-info` no longer holds), else from a fresh
/// `kubeadm token create --print-join-command` (which pins every CA `admin.conf` trusts). When control-plane
/// nodes are to join, the certificate key must belong to certificates still uploaded (kubeadm
/// deletes them after two hours): otherwise `kubeadm init phase upload-certs --upload-certs`
/// uploads them again with a new key.
pub struct LearnJoinCredentials {
    /// Control-plane nodes will join (the certificate key is needed).
    pub control_planes: bool,
}

impl LearnJoinCredentials {
    /// The script whose output holds the credentials.
    pub fn script(&self) -> String {
        let k = kubectl();
        let margin = TOKEN_MARGIN.as_secs();
        let pin = ca_pin_command(CA_CRT);
        let mut s = format!(
            "set -e\numask 077\ncur={CREDENTIALS}\nif [ ! -s \"$cur\" ] && [ -s {INIT_LOG} ]; then cp {INIT_LOG} \"$cur\"; fi\nid=$(sed -n 's/.*--token \\([a-z0-9]\\{{6\\}}\\)\\.[a-z0-9]\\{{16\\}}.*/\\1/p' \"$cur\" 2>/dev/null | tail -n 1)\nexp=''\nif [ -n \"$id\" ]; then exp=$({k} -n kube-system get secret \"bootstrap-token-$id\" -o 'jsonpath={{.data.expiration}}' 2>/dev/null | base64 -d 2>/dev/null || true); fi\nleft=$(( $(date -d \"${{exp:-1970-01-01T00:00:00Z}}\" +%s 2>/dev/null || echo 0) - $(date +%s) ))\n{pin}\nif [ \"$left\" -lt {margin} ] || {{ [ -n \"$pin\" ] && ! grep -q \"sha256:$pin\" \"$cur\"; }}; then\n  {KUBEADM} token create --print-join-command >\"$cur.new\"\n  mv -f \"$cur.new\" \"$cur\"\nfi"
        );
        if self.control_planes {
            s.push_str(&format!(
                "\nif ! grep -q -e '--certificate-key [0-9a-f]\\{{64\\}}' -e 'Using certificate key:' \"$cur\" || ! {k} -n kube-system get secret kubeadm-certs -o name >/dev/null 2>&1; then\n  {KUBEADM} init phase upload-certs --upload-certs --config {INIT_CONFIG} >>\"$cur\" 2>&1\nfi"
            ));
        }
        s.push_str("\ncat \"$cur\"");
        s
    }
}

impl Step for LearnJoinCredentials {
    fn name(&self) -> &str {
        "join-credentials"
    }
    fn ops(&self, _: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "join credentials".into(),
            script: self.script(),
            parse: join::learn,
            facts: facts.clone(),
            prefix: String::new(),
            timeout: Duration::from_secs(300),
        })])
    }
}
