//! Modules of `kubexm-install restore` (see [`crate::pipelines::restore`]): KubeXM's etcd
//! (`etcd.type: kubexm`) rebuilt from a backup's snapshot on the same members.
//!
//! Order, each a module: the control plane stops on every master (no API server writes while
//! etcd is replaced), etcd stops on every member, every member's data directory is replaced by
//! one restored from the snapshot (`etcdutl`/`etcdctl snapshot restore` with the member's name,
//! peer URL, the cluster's initial-cluster and token; the old directory kept beside it as
//! `<data>.before-restore-<id>`), etcd starts everywhere and must be healthy, the control plane
//! starts one master at a time (each API server must answer `/readyz`), and the kubelets and
//! kube-proxies restart so nothing keeps state newer than the snapshot (Kubernetes' "Operating
//! etcd clusters" guide: restart components after a restore so they do not rely on stale data).
//!
//! A member whose data directory already holds this restore (`<data>.kubexm-restore` records
//! the restore id) is not restored again, so `--resume` after a failure finishes the job
//! without replacing data a member already serves.

use crate::runner::shell::Script;
use crate::script;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::model::{EtcdType, KubernetesType};
use kubexm_manifests::resolve::Role;

use crate::context::InstallContext;
use crate::modules::etcd::EtcdLayout;
use crate::pipeline::ops::{CreateDir, Op, RunCommand, UploadFile, WaitFor};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::{shell, UploadSource};

/// Where the snapshot is placed on each member (removed once restored).
pub const SNAPSHOT_ON_NODE: &str = "/var/lib/kubexm/restore/snapshot.db";
/// Its directory.
pub const RESTORE_DIR: &str = "/var/lib/kubexm/restore";
/// Where kubeadm's control-plane manifests wait while etcd is replaced.
pub const PARKED: &str = "/etc/kubernetes/kubexm-restore-parked";
const MANIFESTS: &str = "/etc/kubernetes/manifests";
const COMPONENTS: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The snapshot to restore.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The file on the control host (inside the opened backup).
    pub file: PathBuf,
    /// Its sha256.
    pub sha256: String,
    /// This restore's id: the same for a `--resume` of it, different for a later restore.
    pub id: String,
}

/// What every restore module shares.
#[derive(Clone)]
pub struct Restore {
    /// The cluster.
    pub ctx: Arc<InstallContext>,
    /// The snapshot.
    pub snapshot: Snapshot,
}

impl Restore {
    fn layout(&self) -> EtcdLayout {
        EtcdLayout::from_context(&self.ctx)
    }
    fn kind(&self) -> KubernetesType {
        self.ctx.cluster.file.spec.kubernetes.kind
    }
    fn members(&self) -> Vec<String> {
        self.layout()
            .members
            .iter()
            .map(|m| m.name.clone())
            .collect()
    }
    fn not_kubexm_etcd(&self) -> Option<String> {
        (self.ctx.cluster.file.spec.etcd.kind != EtcdType::Kubexm)
            .then(|| "etcd.type is not kubexm: restore rebuilds KubeXM's etcd only".to_string())
    }
}

/// A pgrep test: is this control-plane component's process running on the node?
fn running(component: &str) -> Script {
    script!("pgrep -x {component} >/dev/null", component = component)
}

/// The control plane stops on every master.
pub struct StopControlPlaneModule(pub Restore);

impl Module for StopControlPlaneModule {
    fn name(&self) -> &str {
        "stop-control-plane"
    }
    fn skip(&self) -> Option<String> {
        self.0.not_kubexm_etcd()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(vec![Task::new(
            "stop-control-plane",
            self.0.ctx.with_role(Role::Master),
        )
        .step(StopControlPlane {
            kind: self.0.kind(),
        })])
    }
}

/// kube-apiserver, kube-controller-manager and kube-scheduler stopped: their units (kubexm
/// path) or their static pod manifests moved to [`PARKED`] (kubeadm path: the API server then
/// killed once the kubelet is stopping its pod, `kill_lingering_apiserver`), then their
/// processes awaited gone. Reverted by starting them again.
pub struct StopControlPlane {
    /// Which bootstrap path runs them.
    pub kind: KubernetesType,
}

impl Step for StopControlPlane {
    fn name(&self) -> &str {
        "stop-control-plane"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let stop = match self.kind {
            KubernetesType::Kubexm => RunCommand::new(script!(
                "systemctl stop {}",
                shell::words(COMPONENTS)
            ))
            .unless(Script::join(
                COMPONENTS
                    .iter()
                    .map(|c| script!("! systemctl is-active -q {c}", c = c)),
                " && ",
            ))
            .undo(script!("systemctl start {}", shell::words(COMPONENTS))),
            KubernetesType::Kubeadm => RunCommand::new(script!(
                "mkdir -p -m 700 {PARKED} && for c in {}; do if [ -f {MANIFESTS}/$c.yaml ]; then mv -f {MANIFESTS}/$c.yaml {PARKED}/; fi; done",
                shell::words(COMPONENTS)
            ))
            .unless(script!("! ls {MANIFESTS}/kube-*.yaml 2>/dev/null | grep -qE 'kube-(apiserver|controller-manager|scheduler)\\.yaml$'"))
            .undo(unpark()),
        };
        let mut ops = vec![Op::Run(stop)];
        if self.kind == KubernetesType::Kubeadm {
            ops.push(Op::Run(kill_lingering_apiserver()));
        }
        ops.push(Op::Wait(WaitFor {
            what: "the control plane stopped".into(),
            check: COMPONENTS
                .iter()
                .map(|c| format!("! {}", running(c)))
                .collect::<Vec<_>>()
                .join(" && "),
            timeout: Duration::from_secs(180),
            interval: Duration::from_secs(2),
        }));
        Ok(ops)
    }
}

/// kubeadm path: the API server whose manifest is parked, killed once the kubelet is stopping
/// its pod. On SIGTERM kube-apiserver closes its listener at once but then waits for its open
/// connections (watches) longer than the static pod's 30 s grace period, so the kubelet kills it
/// after 30 s anyway (seen in the lab on v1.20.2: the controller-manager and scheduler gone
/// within a second, the API server killed at 30 s, on every master and every stop). The kubelet
/// stops the three pods together, in the order their manifests were moved, the API server's
/// first: so once the controller-manager and the scheduler are gone, the kubelet has taken the
/// API server's removal too and will not start it again. Before that (either still running after
/// 20 s) nothing is killed and the wait goes on as before. Run only just after the manifests
/// were parked.
fn kill_lingering_apiserver() -> RunCommand {
    let others = Script::join(
        COMPONENTS
            .iter()
            .filter(|c| **c != "kube-apiserver")
            .map(|c| running(c)),
        " || ",
    );
    RunCommand::new(script!(
        "for i in $(seq 20); do {{ {others}; }} || break; sleep 1; done; \
         if [ ! -e {MANIFESTS}/kube-apiserver.yaml ] && ! {{ {others}; }} && {apiserver}; then pkill -KILL -x kube-apiserver || true; fi",
        others = others,
        apiserver = running("kube-apiserver")
    ))
    .when_changed()
}

fn unpark() -> Script {
    script!(
        "for c in {}; do if [ -f {PARKED}/$c.yaml ]; then mv -f {PARKED}/$c.yaml {MANIFESTS}/; fi; done; rmdir {PARKED} 2>/dev/null || true",
        shell::words(COMPONENTS)
    )
}

/// etcd stops on every member.
pub struct StopEtcdModule(pub Restore);

impl Module for StopEtcdModule {
    fn name(&self) -> &str {
        "stop-etcd"
    }
    fn skip(&self) -> Option<String> {
        self.0.not_kubexm_etcd()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(vec![Task::new("stop-etcd", self.0.members()).step(StopEtcd)])
    }
}

/// `systemctl stop etcd`; reverted by starting it.
pub struct StopEtcd;

impl Step for StopEtcd {
    fn name(&self) -> &str {
        "stop-etcd"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new("systemctl stop etcd")
                .unless("! systemctl is-active -q etcd")
                .undo("systemctl start --no-block etcd"),
        )])
    }
}

/// Every member's data restored from the snapshot.
pub struct RestoreDataModule(pub Restore);

impl Module for RestoreDataModule {
    fn name(&self) -> &str {
        "restore-etcd-data"
    }
    fn skip(&self) -> Option<String> {
        self.0.not_kubexm_etcd()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(vec![
            Task::new("restore-etcd-data", self.0.members()).step(RestoreData(self.0.clone()))
        ])
    }
}

/// The snapshot uploaded (sha256-checked) and restored into a new data directory that replaces
/// the member's; the old one kept as `<data>.before-restore-<id>`. Skipped when the member holds
/// this restore already; reverted by putting the old directory back.
pub struct RestoreData(pub Restore);

impl RestoreData {
    /// The restore script for `member` (the snapshot at [`SNAPSHOT_ON_NODE`]).
    pub fn script(&self, member: &str) -> Result<Script, StepError> {
        let l = self.0.layout();
        let m = l.members.iter().find(|m| m.name == member).ok_or_else(|| {
            StepError::Invalid(format!("{member} is not an etcd member of this cluster"))
        })?;
        let data = shell::quoted(&l.data_dir);
        let staging = shell::quoted(&format!("{}.kubexm-restoring", l.data_dir));
        let before = shell::quoted(&format!(
            "{}.before-restore-{}",
            l.data_dir, self.0.snapshot.id
        ));
        let args = script!(
            "snapshot restore {SNAPSHOT_ON_NODE} --name {} --initial-cluster {} --initial-cluster-token {} --initial-advertise-peer-urls {} --data-dir {}",
            shell::quoted(&m.name),
            shell::quoted(&l.initial_cluster()),
            shell::quoted(&format!("kubexm-{}-etcd", l.cluster)),
            shell::quoted(&l.peer_url(m)),
            staging,
        );
        Ok(script!(
            "set -e\n\
             rm -rf {staging}\n\
             # etcd 3.5+ ships etcdutl for offline snapshot work (etcdctl's restore is gone in 3.6).\n\
             if [ -x {bin}/etcdutl ]; then {bin}/etcdutl {args} >/dev/null; else ETCDCTL_API=3 {bin}/etcdctl {args} >/dev/null; fi\n\
             if [ -e {data} ]; then rm -rf {before}; mv {data} {before}; fi\n\
             mv {staging} {data}\n\
             chmod 700 {data}\n\
             echo {id} > {marker}",
            bin = l.bin_dir,
            id = shell::quoted(&self.0.snapshot.id),
            marker = self.marker(&l), staging = staging, args = args, data = data, before = before
        ))
    }

    fn marker(&self, l: &EtcdLayout) -> Script {
        shell::quoted(&format!("{}.kubexm-restore", l.data_dir))
    }
}

impl Step for RestoreData {
    fn name(&self) -> &str {
        "restore-etcd-data"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let l = self.0.layout();
        let data = shell::quoted(&l.data_dir);
        let before = shell::quoted(&format!(
            "{}.before-restore-{}",
            l.data_dir, self.0.snapshot.id
        ));
        let s = &self.0.snapshot;
        Ok(vec![
            Op::Mkdir(CreateDir {
                path: RESTORE_DIR.into(),
                mode: 0o700,
            }),
            Op::Upload(UploadFile {
                source: UploadSource::File(s.file.clone()),
                sha256: s.sha256.clone(),
                dest: SNAPSHOT_ON_NODE.into(),
                mode: 0o600,
            }),
            Op::Run(
                RunCommand::new(self.script(&node.name)?)
                    .unless(script!(
                        "[ \"$(cat {} 2>/dev/null)\" = {} ]",
                        self.marker(&l),
                        &s.id
                    ))
                    .undo(script!(
                        "if [ -d {before} ]; then rm -rf {data}; mv {before} {data}; fi; rm -f {marker}",
                        before = before,
                        data = data,
                        marker = self.marker(&l)
                    ))
                    .timeout(Duration::from_secs(600)),
            ),
            // The snapshot holds every Secret of the cluster: no copy stays on the node.
            Op::Run(RunCommand::new(script!("rm -rf {RESTORE_DIR}"))),
        ])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(1200),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// etcd starts on every member, then must be healthy.
pub struct StartEtcdModule(pub Restore);

impl Module for StartEtcdModule {
    fn name(&self) -> &str {
        "start-etcd"
    }
    fn skip(&self) -> Option<String> {
        self.0.not_kubexm_etcd()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let l = self.0.layout();
        let first = self.0.members().into_iter().next().ok_or_else(|| {
            StepError::Invalid("the cluster has no etcd member to restore".into())
        })?;
        Ok(vec![
            Task::new("start-etcd", self.0.members()).step(StartEtcd),
            Task::new("etcd-health", [first.clone()]).step(EtcdHealthy {
                check: l.health_command(&first),
            }),
        ])
    }
}

/// `systemctl start --no-block etcd` (a member waits for a quorum, so none is awaited alone).
///
/// etcd's unit is `Type=notify` and a member tells systemd it is ready only once a quorum of
/// the restored members runs: until the others are started it stays `activating`, which is
/// what this step verifies; the health task that follows waits for the cluster.
pub struct StartEtcd;

/// The unit was started: running, or waiting for its peers.
pub const ETCD_STARTED: &str =
    "case \"$(systemctl show -p ActiveState --value etcd)\" in active|activating) true ;; *) false ;; esac";

impl Step for StartEtcd {
    fn name(&self) -> &str {
        "start-etcd"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Run(
            RunCommand::new("systemctl start --no-block etcd")
                .unless("systemctl is-active -q etcd")
                .verify(ETCD_STARTED),
        )])
    }
}

/// Every member answers `endpoint health`.
pub struct EtcdHealthy {
    /// The health command.
    pub check: String,
}

impl Step for EtcdHealthy {
    fn name(&self) -> &str {
        "etcd-healthy"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Wait(WaitFor {
            what: "every etcd member healthy after the restore".into(),
            check: self.check.clone(),
            timeout: Duration::from_secs(300),
            interval: Duration::from_secs(3),
        })])
    }
}

/// The control plane starts again, one master at a time.
pub struct StartControlPlaneModule(pub Restore);

impl Module for StartControlPlaneModule {
    fn name(&self) -> &str {
        "start-control-plane"
    }
    fn skip(&self) -> Option<String> {
        self.0.not_kubexm_etcd()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(vec![Task::new(
            "start-control-plane",
            self.0.ctx.with_role(Role::Master),
        )
        .serial()
        .step(StartControlPlane {
            kind: self.0.kind(),
            after: "the restore",
        })])
    }
}

/// The components started (units, or manifests back from [`PARKED`]); the API server on this
/// master must answer `/readyz`.
pub struct StartControlPlane {
    /// Which bootstrap path runs them.
    pub kind: KubernetesType,
    /// What they were stopped for (`the restore`), in the wait's message.
    pub after: &'static str,
}

impl Step for StartControlPlane {
    fn name(&self) -> &str {
        "start-control-plane"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let api = crate::modules::k8s::host_url(
            &node.internal_address,
            crate::modules::k8s::APISERVER_PORT,
        );
        let (start, ready) = match self.kind {
            KubernetesType::Kubexm => {
                let l = crate::modules::kubexm::Layout::default();
                (
                    RunCommand::new(script!("systemctl start {}", shell::words(COMPONENTS))),
                    format!(
                        "{} --kubeconfig {} --server {api} get --raw=/readyz >/dev/null 2>&1",
                        l.bin("kubectl"),
                        l.conf("super-admin.conf")
                    ),
                )
            }
            KubernetesType::Kubeadm => (
                RunCommand::new(unpark()).unless(script!("[ ! -d {PARKED} ]")),
                format!(
                    "{} --kubeconfig {} --server {api} get --raw=/readyz >/dev/null 2>&1",
                    crate::modules::k8s::KUBECTL,
                    crate::modules::k8s::ADMIN_CONF
                ),
            ),
        };
        Ok(vec![
            Op::Run(start),
            Op::Wait(WaitFor {
                what: format!("kube-apiserver on {} ready after {}", node.name, self.after),
                check: ready,
                timeout: Duration::from_secs(300),
                interval: Duration::from_secs(3),
            }),
        ])
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(600),
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// The kubelet (and kube-proxy, where it runs as a unit) restarts on every node.
pub struct RestartNodeAgentsModule(pub Restore);

impl Module for RestartNodeAgentsModule {
    fn name(&self) -> &str {
        "restart-node-agents"
    }
    fn skip(&self) -> Option<String> {
        self.0.not_kubexm_etcd()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let mut hosts = self.0.ctx.with_role(Role::Master);
        for w in self.0.ctx.with_role(Role::Worker) {
            if !hosts.contains(&w) {
                hosts.push(w);
            }
        }
        Ok(vec![
            Task::new("restart-node-agents", hosts).step(RestartNodeAgents)
        ])
    }
}

/// `systemctl try-restart` of the kubelet and kube-proxy units (those installed), then the kubelet must answer
/// its health endpoint again (`127.0.0.1:10248`, the KubeletConfiguration default) before the
/// restore counts as done: until then `kubectl logs`/`exec` to the node fail.
pub struct RestartNodeAgents;

/// The kubelet's health check (`127.0.0.1:10248`, the KubeletConfiguration default), true where
/// no kubelet is installed.
pub const KUBELET_HEALTHY: &str = "! systemctl is-enabled -q kubelet || curl -fsS --max-time 3 -o /dev/null http://127.0.0.1:10248/healthz";

impl Step for RestartNodeAgents {
    fn name(&self) -> &str {
        "restart-node-agents"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![
            // kube-proxy is a unit on the kubexm path only (a DaemonSet with kubeadm).
            Op::Run(RunCommand::new(
                "for u in kubelet kube-proxy; do ! systemctl is-enabled -q $u 2>/dev/null || systemctl try-restart $u; done",
            )),
            Op::Wait(WaitFor {
                what: format!("the kubelet on {} healthy after its restart", node.name),
                check: KUBELET_HEALTHY.into(),
                timeout: Duration::from_secs(180),
                interval: Duration::from_secs(2),
            }),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The hastened stop run in sh with fake `pgrep`/`pkill` (processes named in a file) and a
    /// temporary manifest directory: what it kills, and when it leaves the API server alone.
    fn hasten(running_now: &[&str], manifest_present: bool) -> Vec<String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let procs = d.join("procs");
        std::fs::write(&procs, running_now.join("\n") + "\n").expect("procs");
        let killed = d.join("killed");
        let bin = d.join("bin");
        std::fs::create_dir(&bin).expect("bin");
        for (name, body) in [
            (
                "pgrep",
                format!("#!/bin/sh\ngrep -qx \"$2\" {}\n", procs.display()),
            ),
            (
                "pkill",
                format!("#!/bin/sh\necho \"$1 $2 $3\" >>{}\n", killed.display()),
            ),
        ] {
            let f = bin.join(name);
            std::fs::write(&f, body).expect("fake");
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).expect("mode");
        }
        let manifests = d.join("manifests");
        std::fs::create_dir(&manifests).expect("manifests");
        if manifest_present {
            std::fs::write(manifests.join("kube-apiserver.yaml"), "").expect("manifest");
        }
        let op = kill_lingering_apiserver();
        assert!(op.when_changed, "only just after the manifests were parked");
        let cmd = op
            .command
            .replace(MANIFESTS, &manifests.display().to_string())
            .replace("sleep 1", "sleep 0.01");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .expect("sh");
        assert!(out.status.success(), "{out:?}");
        std::fs::read_to_string(&killed)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_lingering_api_server_is_killed_once_its_pod_is_being_stopped() {
        assert_eq!(
            hasten(&["kube-apiserver"], false),
            ["-KILL -x kube-apiserver"]
        );
        // The kubelet has not taken the removal yet (the others still run): nothing killed.
        assert!(hasten(&["kube-apiserver", "kube-scheduler"], false).is_empty());
        // The manifest is back in place: the kubelet runs it.
        assert!(hasten(&["kube-apiserver"], true).is_empty());
        // Already gone.
        assert!(hasten(&[], false).is_empty());
    }
}
