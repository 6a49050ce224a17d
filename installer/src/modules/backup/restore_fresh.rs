//! Modules of `kubexm-install restore --fresh` (see [`crate::pipelines::restore_fresh_pipeline`]):
//! a backup brought back onto nodes that hold nothing of the cluster (new machines, or the same
//! machines after `delete`), from the bundle like an install.
//!
//! The install pipeline runs with two changes, both taking the cluster's identity from the
//! backup rather than making a new one:
//!
//! * [`RestoredEtcdModule`] in place of the etcd module: every member gets its data directory
//!   from the backup's snapshot ([`RestoreData`], with the new members' names and peer URLs)
//!   after its binaries and configuration are in place and before etcd first starts. This is
//!   etcd's own disaster-recovery procedure (every member restored from the same snapshot with
//!   the new membership), so no member ever runs with an empty store that kube-apiserver could
//!   write to.
//! * kubeadm path: [`KubeadmCaModule`] puts the old cluster's CAs and service-account key pair
//!   on the first master before `kubeadm init` (kubeadm uses CA files it finds and issues fresh
//!   leaves for the new addresses from them; the other masters get them through kubeadm's
//!   certificate upload). So kubeconfigs, tokens and Secrets from the snapshot stay valid.
//!
//! * kubeadm path: [`RestoredKubeadmModule`] is the kubeadm module with one wait before the
//!   joins ([`RestoredNodesLapsed`]): the snapshot holds the old Node objects, still saying
//!   `Ready`, and `kubeadm join` refuses a name whose Node is Ready ("a Node with name ... and
//!   status Ready already exists in the cluster"; found on real v1.20.2 in the lab). The
//!   controller-manager's node lifecycle controller marks them `Unknown` once their kubelets
//!   have not renewed their Leases for its grace period (40 s by default); the joins wait for
//!   that, bounded. The Node objects, with their labels and taints, are kept.
//!
//! On the kubexm path the CAs come from the control host's key directory, which
//! `restore --fresh` fills from the backup before the pipeline is built.

use crate::modules::k8s::KUBEADM_PKI;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::{EtcdType, KubernetesType};

use crate::context::InstallContext;
use crate::modules::backup::restore::{Restore, RestoreData};
use crate::modules::etcd;
use crate::modules::k8s::kubectl;
use crate::modules::kubeadm::{JOIN_CONTROL_PLANE, JOIN_CREDENTIALS, JOIN_WORKERS};
use crate::pipeline::ops::{CreateDir, Op, UploadFile, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::{shell, UploadSource};

/// The files of kubeadm's PKI that make the cluster's identity (CAs and the service-account
/// key pair) with their modes; every other file kubeadm issues from them.
pub const KUBEADM_IDENTITY: [(&str, u32); 6] = [
    ("ca.crt", 0o644),
    ("ca.key", 0o600),
    ("front-proxy-ca.crt", 0o644),
    ("front-proxy-ca.key", 0o600),
    ("sa.key", 0o600),
    ("sa.pub", 0o644),
];

/// One identity file taken from the backup, on the control host.
#[derive(Debug, Clone)]
pub struct IdentityFile {
    /// Its name under [`KUBEADM_PKI`] (one of [`KUBEADM_IDENTITY`]).
    pub name: &'static str,
    /// The file on the control host (inside the opened backup's private directory).
    pub local: PathBuf,
    /// Its sha256.
    pub sha256: String,
    /// Mode on the node.
    pub mode: u32,
}

/// What the fresh-restore modules share.
#[derive(Clone)]
pub struct FreshRestore {
    /// The snapshot and the cluster (the new nodes).
    pub restore: Restore,
    /// kubeadm path: the old cluster's identity files (empty on the kubexm path).
    pub kubeadm_identity: Vec<IdentityFile>,
}

/// The etcd module of a fresh restore: [`etcd::install_tasks`] with the snapshot restored on
/// each member before its first start.
pub struct RestoredEtcdModule(pub FreshRestore);

impl Module for RestoredEtcdModule {
    fn name(&self) -> &str {
        "etcd-from-backup"
    }
    fn skip(&self) -> Option<String> {
        (self.0.restore.ctx.cluster.file.spec.etcd.kind != EtcdType::Kubexm)
            .then(|| "etcd.type is not kubexm: restore rebuilds KubeXM's etcd only".to_string())
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        etcd::install_tasks(
            &self.0.restore.ctx,
            Some(Arc::new(RestoreData(self.0.restore.clone()))),
        )
    }
}

/// kubeadm path: the old cluster's CAs and service-account keys on the first master before
/// `kubeadm init`.
pub struct KubeadmCaModule(pub FreshRestore);

impl Module for KubeadmCaModule {
    fn name(&self) -> &str {
        "kubeadm-ca-from-backup"
    }
    fn skip(&self) -> Option<String> {
        (self.0.restore.ctx.cluster.file.spec.kubernetes.kind != KubernetesType::Kubeadm).then(
            || {
                "kubernetes.type is kubexm: the CAs come from the control host's key directory"
                    .into()
            },
        )
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        if self.0.kubeadm_identity.len() != KUBEADM_IDENTITY.len() {
            return Err(StepError::Invalid(format!(
                "the backup holds {} of kubeadm's {} identity files ({}): a fresh restore needs all of them",
                self.0.kubeadm_identity.len(),
                KUBEADM_IDENTITY.len(),
                KUBEADM_IDENTITY.map(|(n, _)| n).join(", ")
            )));
        }
        let first = self.0.restore.ctx.first_master()?.name.clone();
        Ok(vec![Task::new("restore-kubeadm-ca", [first]).step(
            RestoreKubeadmIdentity {
                files: self.0.kubeadm_identity.clone(),
            },
        )])
    }
}

/// The identity files uploaded to [`KUBEADM_PKI`] (sha256-checked; skipped where the node's copy
/// already matches; each upload reverted by the executor).
pub struct RestoreKubeadmIdentity {
    /// The files.
    pub files: Vec<IdentityFile>,
}

impl Step for RestoreKubeadmIdentity {
    fn name(&self) -> &str {
        "restore-kubeadm-ca"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = vec![Op::Mkdir(CreateDir {
            path: KUBEADM_PKI.into(),
            mode: 0o755,
        })];
        ops.extend(self.files.iter().map(|f| {
            Op::Upload(UploadFile {
                source: UploadSource::File(f.local.clone()),
                sha256: f.sha256.clone(),
                dest: format!("{KUBEADM_PKI}/{}", f.name),
                mode: f.mode,
            })
        }));
        Ok(ops)
    }
}

/// How long the joins wait for the restored Node objects to stop saying `Ready`: the node
/// lifecycle controller's grace period (40 s by default) after the controller-manager started,
/// with room for a slow start.
pub const LAPSE_TIMEOUT: Duration = Duration::from_secs(300);
/// A Lease renewed this recently (seconds, by the first master's clock) belongs to a live
/// kubelet: that node has joined already (a re-run), or an old node still runs under the name.
pub const LIVE_LEASE_SECS: u64 = 60;

/// The kubeadm module of a fresh restore: [`KubeadmModule`](crate::modules::kubeadm::KubeadmModule)'s tasks with
/// [`RestoredNodesLapsed`] on the first master before the join credentials are made.
pub struct RestoredKubeadmModule {
    /// The kubeadm module (as the pipeline hands it its inputs).
    pub kubeadm: Box<dyn Module>,
    /// The cluster.
    pub ctx: Arc<InstallContext>,
}

impl Module for RestoredKubeadmModule {
    fn name(&self) -> &str {
        self.kubeadm.name()
    }
    fn skip(&self) -> Option<String> {
        self.kubeadm.skip()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let mut tasks = self.kubeadm.tasks()?;
        let joining: Vec<String> = tasks
            .iter()
            .filter(|t| t.name == JOIN_CONTROL_PLANE.as_str() || t.name == JOIN_WORKERS.as_str())
            .flat_map(|t| t.hosts.iter().cloned())
            .collect();
        if joining.is_empty() {
            return Ok(tasks);
        }
        let first = self.ctx.first_master()?.name.clone();
        let at = tasks
            .iter()
            .position(|t| t.name == JOIN_CREDENTIALS.as_str())
            .ok_or_else(|| {
                StepError::Invalid(
                    "the kubeadm module has joins but no join-credentials task".into(),
                )
            })?;
        tasks.insert(
            at,
            Task::new("restored-nodes-lapsed", [first]).step(RestoredNodesLapsed { joining }),
        );
        Ok(tasks)
    }
}

/// On the first master: waits until no node about to join has a restored Node object that says
/// `Ready` while its Lease is older than [`LIVE_LEASE_SECS`]. An absent Node, one not Ready,
/// or one whose kubelet renews its Lease (joined already) passes; an API error keeps waiting.
/// Changes nothing, so it has nothing to revert.
pub struct RestoredNodesLapsed {
    /// The nodes `kubeadm join` will run on, in order.
    pub joining: Vec<String>,
}

impl RestoredNodesLapsed {
    /// The shell check: prints the names still stale, fails while there are any.
    fn check(&self) -> String {
        let k = kubectl();
        let names = self
            .joining
            .iter()
            .map(|n| shell::quote(n))
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "stale=''; now=$(date +%s)\n\
             for n in {names}; do\n\
             r=$({k} get node \"$n\" --ignore-not-found -o jsonpath='{{.status.conditions[?(@.type==\"Ready\")].status}}') || {{ stale=\"$stale $n(API error)\"; continue; }}\n\
             [ \"$r\" = True ] || continue\n\
             t=$({k} -n kube-node-lease get lease \"$n\" --ignore-not-found -o jsonpath='{{.spec.renewTime}}') || {{ stale=\"$stale $n(API error)\"; continue; }}\n\
             if [ -n \"$t\" ] && s=$(date -d \"$t\" +%s 2>/dev/null) && [ $((now - s)) -lt {LIVE_LEASE_SECS} ]; then continue; fi\n\
             stale=\"$stale $n(Lease renewed ${{t:-never}})\"\n\
             done\n\
             [ -z \"$stale\" ] || {{ echo \"restored Node objects still Ready:$stale\"; exit 1; }}"
        )
    }
}

impl Step for RestoredNodesLapsed {
    fn name(&self) -> &str {
        "restored-nodes-lapsed"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: format!(
                "the restored Node objects of {} to lapse (kubeadm join refuses a name whose Node says Ready; the controller-manager marks them Unknown after its node-monitor-grace-period, 40 s by default — if a Lease is still renewed, an old node still runs under that name: stop it)",
                self.joining.join(", ")
            ),
            check: self.check(),
            timeout: LAPSE_TIMEOUT,
            interval: Duration::from_secs(5),
        })])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: LAPSE_TIMEOUT + Duration::from_secs(60),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::k8s::KUBECTL;
    use std::os::unix::fs::PermissionsExt;

    /// Runs [`RestoredNodesLapsed::check`] with a fake kubectl answering from files in `dir`
    /// (`node-NAME`: the Ready status, `lease-NAME`: the renewTime, `fail`: every call fails).
    fn run_check(dir: &std::path::Path, joining: &[&str]) -> (bool, String) {
        let fake = dir.join("kubectl");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nwhile [ $# -gt 0 ]; do case $1 in node|lease) kind=$1; name=$2; break;; esac; shift; done\n[ -e '{d}/fail' ] && exit 1\nf='{d}/'\"$kind-$name\"\n[ -f \"$f\" ] && cat \"$f\"\nexit 0\n",
                d = dir.display()
            ),
        )
        .expect("write fake kubectl");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let step = RestoredNodesLapsed {
            joining: joining.iter().map(|s| s.to_string()).collect(),
        };
        let script = step.check();
        assert!(script.contains(KUBECTL), "{script}");
        let script = script.replace(KUBECTL, &fake.display().to_string());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("sh");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    fn rfc3339(secs_ago: u64) -> String {
        let out = std::process::Command::new("date")
            .args([
                "-u",
                "-d",
                &format!("@{}", now() - secs_ago),
                "+%Y-%m-%dT%H:%M:%S.000000Z",
            ])
            .output()
            .expect("date");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
    }

    #[test]
    fn a_restored_node_still_ready_with_an_old_lease_holds_the_joins() {
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        std::fs::write(d.join("node-node2"), "True").expect("w");
        std::fs::write(d.join("lease-node2"), rfc3339(3600)).expect("w");
        std::fs::write(d.join("node-node3"), "Unknown").expect("w");
        let (ok, out) = run_check(d, &["node2", "node3", "node4"]);
        assert!(!ok, "a stale Ready node2 must hold the joins: {out}");
        assert!(out.contains("node2(Lease renewed 20"), "{out}");
        assert!(!out.contains("node3") && !out.contains("node4"), "{out}");

        // The controller marked it Unknown: the joins go on.
        std::fs::write(d.join("node-node2"), "Unknown").expect("w");
        let (ok, out) = run_check(d, &["node2", "node3", "node4"]);
        assert!(ok, "{out}");
    }

    #[test]
    fn a_node_whose_kubelet_renews_its_lease_has_joined_and_passes() {
        let dir = tempfile::tempdir().expect("tmp");
        let d = dir.path();
        std::fs::write(d.join("node-node2"), "True").expect("w");
        std::fs::write(d.join("lease-node2"), rfc3339(5)).expect("w");
        let (ok, out) = run_check(d, &["node2"]);
        assert!(ok, "{out}");
        // Ready without any Lease: stale.
        std::fs::remove_file(d.join("lease-node2")).expect("rm");
        let (ok, out) = run_check(d, &["node2"]);
        assert!(!ok && out.contains("node2(Lease renewed never)"), "{out}");
    }

    #[test]
    fn an_api_error_keeps_waiting() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("fail"), "").expect("w");
        let (ok, out) = run_check(dir.path(), &["node2"]);
        assert!(!ok && out.contains("node2(API error)"), "{out}");
    }
}
