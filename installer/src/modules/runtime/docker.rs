//! docker from the bundle's static tarball, with cri-dockerd as the CRI kubelet talks to.
//!
//! Layout: `docker` and `dockerd` in `/usr/local/bin`; the tarball's containerd,
//! containerd-shim-runc-v2, ctr, runc, docker-init and docker-proxy in [`LIBEXEC`], first in
//! dockerd's `PATH`: dockerd starts that containerd itself (its socket and state under
//! `/run/docker/containerd` and `/var/lib/docker/containerd`), so docker never touches a
//! containerd KubeXM or the OS runs on the same host (the Harbor host may run both).
//! `docker.socket` + `docker.service` (`dockerd -H fd://`), `/etc/docker/daemon.json` with the
//! systemd cgroup driver, json-file logs capped at 5 × 100 MB, and the private registry under
//! `insecure-registries` when it speaks plain HTTP (else its CA is
//! `/etc/docker/certs.d/<registry>/ca.crt`, uploaded by the registry module).
//!
//! cri-dockerd (`/usr/local/bin/cri-dockerd`, `cri-docker.socket` + `cri-docker.service` on
//! `/run/cri-dockerd.sock`) runs pods with the pause image from the private registry and the CNI
//! plugins in `/opt/cni/bin`. The Harbor registry host installs the same engine
//! ([`DockerEngine`]) before Harbor.

use crate::runner::shell;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::sync::Arc;

use kubexm_manifests::model::RegistryType;

use super::common::{
    cni_plugin_ops, component_version, copy, crictl_config, crictl_ops, none_exist, runtime_hosts,
    sandbox_image, start_daemon, upload_and_extract, PrivateRegistry, PullPause, ARTIFACTS,
    BIN_DIR, CNI_BIN_DIR, EXTRACT,
};
use super::cri::Cri;
use crate::context::InstallContext;
use crate::modules::delete::Ops;
use crate::pipeline::ops::{Op, RenderTemplate, RunCommand, Systemd, SystemdAction, WaitFor};
use crate::pipeline::{Facts, Node, Step, StepError, Task};

/// docker's own containerd, runc and helpers (first in dockerd's `PATH`).
pub const LIBEXEC: &str = "/usr/local/libexec/kubexm-docker";
/// Files of the docker tarball installed into [`BIN_DIR`].
pub const BIN_FILES: [&str; 2] = ["docker", "dockerd"];
/// Files of the docker tarball installed into [`LIBEXEC`].
pub const LIBEXEC_FILES: [&str; 6] = [
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "docker-init",
    "docker-proxy",
];
/// dockerd's configuration.
pub const DAEMON_JSON: &str = "/etc/docker/daemon.json";
/// docker's registry certificate directory (`<registry>/ca.crt`).
pub const CERTS_DIR: &str = "/etc/docker/certs.d";
/// The service unit KubeXM writes.
pub const UNIT_FILE: &str = "/etc/systemd/system/docker.service";
/// The socket unit KubeXM writes.
pub const SOCKET_FILE: &str = "/etc/systemd/system/docker.socket";
/// docker's data root.
pub const DATA_DIR: &str = "/var/lib/docker";
/// Written when KubeXM started docker on an absent or empty [`DATA_DIR`].
pub const DATA_MARKER: &str = "/etc/kubexm/docker-data.created";
/// `docker --config` directory holding the private registry's credentials (root only).
pub const PULL_CONFIG_DIR: &str = "/etc/docker/kubexm-pull";
/// cri-dockerd.
pub const CRI_DOCKERD: &str = "/usr/local/bin/cri-dockerd";
/// cri-dockerd's service unit.
pub const CRI_UNIT_FILE: &str = "/etc/systemd/system/cri-docker.service";
/// cri-dockerd's socket unit.
pub const CRI_SOCKET_FILE: &str = "/etc/systemd/system/cri-docker.socket";

/// The `install-docker` task on every master and worker.
pub(super) fn tasks(ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
    let with_cri_dockerd = Cri::of(ctx) == Cri::CriDockerd;
    let mut task = Task::new("install-docker", runtime_hosts(ctx))
        .step(DockerEngine::new(ctx)?)
        .step(CniAndCrictl::new(ctx, with_cri_dockerd)?);
    if with_cri_dockerd {
        task = task.step(CriDockerd::new(ctx)?);
    }
    let registry = PrivateRegistry::of(ctx);
    Ok(vec![task.step(PullPause::docker(
        &sandbox_image(ctx)?,
        registry.as_ref().and_then(PrivateRegistry::auth_json),
        PULL_CONFIG_DIR,
    ))])
}

/// The docker engine: static binaries, daemon.json, `docker.socket` and `docker.service`,
/// enabled and restarted when something changed, answering `docker version`. Used by the
/// runtime module and, on the Harbor host, by the registry module.
pub struct DockerEngine {
    ctx: Arc<InstallContext>,
    files: Vec<RenderTemplate>,
}

impl DockerEngine {
    /// Renders daemon.json and the units (the same on every node).
    pub fn new(ctx: &Arc<InstallContext>) -> Result<Self, StepError> {
        let registry = PrivateRegistry::of(ctx);
        let insecure: Vec<String> = registry
            .iter()
            .filter(|r| r.plain_http)
            .map(|r| r.endpoint.clone())
            .collect();
        let mut c = tera::Context::new();
        c.insert("cluster", ctx.cluster.cluster_name());
        c.insert("version", &component_version(ctx, "docker")?);
        c.insert("data_root", DATA_DIR);
        c.insert("insecure_registries", &insecure);
        c.insert("libexec", LIBEXEC);
        c.insert("bin_dir", BIN_DIR);
        c.insert("daemon_json", DAEMON_JSON);
        Ok(Self {
            ctx: ctx.clone(),
            files: vec![
                RenderTemplate::new("docker/daemon.json.tera", &c, DAEMON_JSON, 0o644)?,
                RenderTemplate::new("docker/docker.socket.tera", &c, SOCKET_FILE, 0o644)?,
                RenderTemplate::new("docker/docker.service.tera", &c, UNIT_FILE, 0o644)?,
            ],
        })
    }

    /// The rendered files.
    pub fn files(&self) -> &[RenderTemplate] {
        &self.files
    }
}

impl Step for DockerEngine {
    fn name(&self) -> &str {
        "install-docker-engine"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let (mut ops, dir) = upload_and_extract(&self.ctx, "docker", node)?;
        for bin in BIN_FILES {
            ops.push(copy(
                format!("{dir}/docker/{bin}"),
                format!("{BIN_DIR}/{bin}"),
            ));
        }
        for bin in LIBEXEC_FILES {
            ops.push(copy(
                format!("{dir}/docker/{bin}"),
                format!("{LIBEXEC}/{bin}"),
            ));
        }
        ops.extend(self.files.iter().cloned().map(Op::Template));
        ops.extend(start_daemon(
            &["docker.socket", "docker.service"],
            (DATA_MARKER, DATA_DIR),
            ("docker", format!("{BIN_DIR}/docker version >/dev/null")),
        ));
        Ok(ops)
    }
}

/// The CNI plugins and crictl (pointed at cri-dockerd, or at dockershim without it).
struct CniAndCrictl {
    ctx: Arc<InstallContext>,
    crictl_yaml: RenderTemplate,
}

impl CniAndCrictl {
    fn new(ctx: &Arc<InstallContext>, with_cri_dockerd: bool) -> Result<Self, StepError> {
        let cri = if with_cri_dockerd {
            Cri::CriDockerd
        } else {
            Cri::Dockershim
        };
        Ok(Self {
            ctx: ctx.clone(),
            crictl_yaml: crictl_config(ctx, &cri.endpoint())?,
        })
    }
}

impl Step for CniAndCrictl {
    fn name(&self) -> &str {
        "install-cni-and-crictl"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = cni_plugin_ops(&self.ctx, node)?;
        ops.extend(crictl_ops(&self.ctx, node)?);
        ops.push(Op::Template(self.crictl_yaml.clone()));
        Ok(ops)
    }
}

/// cri-dockerd: the binary, its socket and service units, enabled and restarted when something
/// changed, its socket present.
pub struct CriDockerd {
    ctx: Arc<InstallContext>,
    files: Vec<RenderTemplate>,
}

impl CriDockerd {
    /// Renders the units (the same on every node).
    pub fn new(ctx: &Arc<InstallContext>) -> Result<Self, StepError> {
        let mut c = tera::Context::new();
        c.insert("cluster", ctx.cluster.cluster_name());
        c.insert("version", &component_version(ctx, "cri-dockerd")?);
        c.insert("binary", CRI_DOCKERD);
        c.insert("sandbox_image", &sandbox_image(ctx)?);
        c.insert("cni_bin_dir", CNI_BIN_DIR);
        Ok(Self {
            ctx: ctx.clone(),
            files: vec![
                RenderTemplate::new("docker/cri-docker.socket.tera", &c, CRI_SOCKET_FILE, 0o644)?,
                RenderTemplate::new("docker/cri-docker.service.tera", &c, CRI_UNIT_FILE, 0o644)?,
            ],
        })
    }
}

impl Step for CriDockerd {
    fn name(&self) -> &str {
        "install-cri-dockerd"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let (mut ops, dir) = upload_and_extract(&self.ctx, "cri-dockerd", node)?;
        ops.push(copy(format!("{dir}/cri-dockerd/cri-dockerd"), CRI_DOCKERD));
        ops.extend(self.files.iter().cloned().map(Op::Template));
        ops.push(Op::Run(
            RunCommand::new("systemctl daemon-reload")
                .when_changed()
                .undo("systemctl daemon-reload"),
        ));
        for unit in ["cri-docker.socket", "cri-docker.service"] {
            ops.push(Op::Systemd(Systemd::new(SystemdAction::EnableNow(
                unit.to_string(),
            ))));
        }
        ops.push(Op::Systemd(Systemd::new(SystemdAction::Restart {
            unit: "cri-docker.service".to_string(),
            always: false,
        })));
        ops.push(Op::Wait(WaitFor {
            what: "cri-dockerd's socket".to_string(),
            check: format!("test -S {}", Cri::CriDockerd.socket()),
            timeout: std::time::Duration::from_secs(60),
            interval: std::time::Duration::from_secs(1),
        }));
        Ok(ops)
    }
}

/// The engine's part of `delete` (runtime module, and the registry module on the Harbor host):
/// docker stopped and disabled (when its unit is KubeXM's), its binaries, [`LIBEXEC`], units,
/// daemon.json, pull credentials and the private registry's CA removed (emptied directories
/// too), its data when [`DATA_MARKER`] says KubeXM created it, its run state and staging files.
pub fn engine_delete_ops(ctx: &InstallContext) -> Vec<Op> {
    let mut files: Vec<String> = BIN_FILES
        .iter()
        .map(|b| format!("{BIN_DIR}/{b}"))
        .chain(LIBEXEC_FILES.iter().map(|b| format!("{LIBEXEC}/{b}")))
        .collect();
    files.extend(
        [UNIT_FILE, SOCKET_FILE, DAEMON_JSON]
            .iter()
            .map(|s| s.to_string()),
    );
    files.push(format!("{PULL_CONFIG_DIR}/config.json"));
    let mut dirs = vec![LIBEXEC.to_string(), PULL_CONFIG_DIR.to_string()];
    if let Some(e) = ctx.registry_endpoint() {
        files.push(format!("{CERTS_DIR}/{e}/ca.crt"));
        dirs.push(format!("{CERTS_DIR}/{e}"));
    }
    dirs.extend([CERTS_DIR.to_string(), "/etc/docker".to_string()]);
    let also = format!("/run/docker /run/docker.sock {ARTIFACTS}/docker {EXTRACT}/docker-*");
    vec![
        super::common::stop_units(&["docker.service", "docker.socket"], UNIT_FILE),
        super::common::remove_paths(&files, &dirs),
        super::common::remove_data(DATA_MARKER, &[DATA_DIR], &also),
    ]
}

/// docker's part of the `delete` pipeline, on every master and worker: cri-dockerd stopped and
/// removed with crictl, `/etc/crictl.yaml`, the CNI plugins KubeXM copied and cri-dockerd's
/// state; then the engine ([`engine_delete_ops`]) — except on the Harbor host, where the
/// registry delete module removes it after stopping Harbor.
pub(super) fn delete_tasks(ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
    let hosts = runtime_hosts(ctx);
    let files: Vec<String> = [
        CRI_DOCKERD,
        CRI_UNIT_FILE,
        CRI_SOCKET_FILE,
        super::common::CRICTL_CONFIG,
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(std::iter::once(format!("{BIN_DIR}/crictl")))
    .collect();
    let state = format!(
        "/var/lib/cri-dockerd /run/cri-dockerd.sock {ARTIFACTS}/cri-dockerd {ARTIFACTS}/crictl {EXTRACT}/cri-dockerd-* {EXTRACT}/crictl-*"
    );
    let mut tasks = vec![Task::new("delete-cri-dockerd", hosts.clone()).step(Ops {
        name: "remove-cri-dockerd",
        ops: vec![
            super::common::stop_units(&["cri-docker.service", "cri-docker.socket"], CRI_UNIT_FILE),
            super::common::remove_paths(&files, &[]),
            super::common::remove_cni_plugins(),
            Op::Run(
                RunCommand::new(script!("rm -rf -- {state}", state = shell::globs(&state)))
                    .unless(none_exist(&state)),
            ),
        ],
    })];
    let harbor_host = (ctx.cluster.file.spec.registry.kind == RegistryType::Harbor)
        .then(|| ctx.with_role(Role::Registry).into_iter().next())
        .flatten();
    let engine_hosts: Vec<String> = hosts
        .into_iter()
        .filter(|h| Some(h) != harbor_host.as_ref())
        .collect();
    if !engine_hosts.is_empty() {
        tasks.push(Task::new("delete-docker", engine_hosts).step(Ops {
            name: "remove-docker-engine",
            ops: engine_delete_ops(ctx),
        }));
    }
    Ok(tasks)
}
