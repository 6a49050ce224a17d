//! `registry.type: harbor`: Harbor from its offline installer on the registry host.
//!
//! The `deploy-harbor` task, on the registry host:
//! 1. **docker** — the same engine the docker runtime installs ([`DockerEngine`]: static
//!    binaries, `docker.socket` + `docker.service`, daemon.json; its containerd is private, so
//!    the host may also run KubeXM's containerd).
//! 2. **docker compose** — the bundle's binary as the CLI plugin
//!    `/usr/local/lib/docker/cli-plugins/docker-compose` and as `/usr/local/bin/docker-compose`
//!    (Harbor's `install.sh` takes either).
//! 3. **Harbor's files** — the offline installer extracted into [`DIR`] (`DIR/harbor/install.sh`),
//!    refused when a Harbor from another installer archive runs there (an upgrade needs
//!    Harbor's own migration); the CA and a server certificate from KubeXM's registry CA (SANs:
//!    the registry name, the host's addresses and name) in [`TLS_DIR`]; the data directory
//!    (`registry.dataDir`, default [`DATA_DIR`]); `DIR/harbor/harbor.yml` (0600) from
//!    `harborConfig`: `hostname` is the registry endpoint's host, https on its port
//!    (`harborConfig.httpsPort`, default 443) with that certificate, http on 80 (redirects),
//!    the admin password (uploaded inside the file, never in a command or the plan), a database
//!    password KubeXM generates once per cluster (kept under `WORK/pki/<cluster>/registry`),
//!    `data_volume`, an offline scanner, and `_version` from the installer's version.
//! 4. **install** — `./install.sh`, skipped when [`STAMP`] holds the same harbor.yml, installer
//!    and certificate digests and Harbor's core containers run; then a wait until
//!    `/api/v2.0/health` says healthy.
//!
//! Then, as for every registry type, every node trusts the CA and the control host seeds
//! Harbor as its admin (unless `registry.auths` names another user), creating
//! `harborConfig.projects` and every project the images need first (the seed's Harbor client);
//! images go under `registry.namespace`, or Harbor's `library` project.

use crate::script;
use std::sync::Arc;

use kubexm_bundles::hash::sha256_hex;

use super::{host_of, port_of, RegistryPlan};
use crate::context::InstallContext;
use crate::modules::delete::Ops;
use crate::modules::runtime::docker::{engine_delete_ops, DockerEngine};
use crate::modules::runtime::{copy, none_exist, upload, ARTIFACTS, BIN_DIR};
use crate::pipeline::ops::{
    Check, CreateDir, ExtractTarball, Op, RenderTemplate, RunCommand, UploadFile, WaitFor,
};
use crate::pipeline::{Facts, Node, Policy, Step, StepError, Task};
use crate::runner::shell;

/// Harbor's administrator account.
pub const ADMIN: &str = "admin";
/// Where the offline installer is extracted (`DIR/harbor/install.sh`, `harbor.yml`, the
/// generated `docker-compose.yml`).
pub const DIR: &str = "/opt/kubexm-harbor";
/// Harbor's CA, server certificate and key.
pub const TLS_DIR: &str = "/etc/kubexm-harbor/tls";
/// Default `data_volume`.
pub const DATA_DIR: &str = "/var/lib/kubexm-harbor";
/// Harbor's log directory.
pub const LOG_DIR: &str = "/var/log/harbor";
/// Harbor's plain HTTP port (it redirects to https).
pub const HTTP_PORT: u16 = 80;
/// docker compose as a docker CLI plugin.
pub const COMPOSE_PLUGIN: &str = "/usr/local/lib/docker/cli-plugins/docker-compose";
/// docker compose as a command.
pub const COMPOSE_BIN: &str = "/usr/local/bin/docker-compose";
/// Records what the running Harbor was installed from: `<harbor.yml sha256> <installer
/// sha256> <certificate sha256>`.
pub const STAMP: &str = "/opt/kubexm-harbor/.kubexm-installed";
/// Containers that must run for Harbor to count as up (names from Harbor's compose file).
pub const CORE_CONTAINERS: [&str; 4] = ["harbor-core", "nginx", "registry", "harbor-db"];

/// The docker CLI.
fn docker() -> String {
    format!("{BIN_DIR}/docker")
}

/// `v2.10.2` → `2.10.0`: harbor.yml's `_version`, which Harbor's `prepare` compares with its own.
pub fn config_version(version: &str) -> Option<String> {
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    Some(format!("{major}.{minor}.0"))
}

/// The `deploy-harbor` task on the registry host.
pub(super) fn deploy_task(
    ctx: &Arc<InstallContext>,
    p: &Arc<RegistryPlan>,
    node: &Node,
) -> Result<Task, StepError> {
    let config = &ctx.cluster.file.spec.registry.harbor_config;
    let https_port = port_of(&p.endpoint).unwrap_or(443);
    if let Some(port) = config.https_port.filter(|port| *port != https_port) {
        return Err(StepError::Invalid(format!(
            "spec.registry.harborConfig.httpsPort is {port} but privateRegistry `{}` says {https_port}: make them agree (write privateRegistry as HOST:{port})",
            p.endpoint
        )));
    }
    let (Some(server), Some(ca)) = (&p.server, &p.ca_pem) else {
        return Err(StepError::Invalid(
            "Harbor needs the registry certificate (internal error: none was issued)".into(),
        ));
    };
    let admin = config.admin_password.as_ref().ok_or_else(|| {
        StepError::Invalid(
            "spec.registry.harborConfig.adminPassword is required for registry.type harbor".into(),
        )
    })?;
    let (archive, archive_rec) = ctx
        .files_for("harbor", node)
        .into_iter()
        .next()
        .ok_or_else(|| {
            StepError::Invalid(format!(
                "the bundle has no Harbor installer for {} ({}): rebuild it with registry.type harbor",
                node.name, node.arch
            ))
        })?;
    let version = archive_rec.version.clone();
    let config_version = config_version(&version).ok_or_else(|| {
        StepError::Invalid(format!(
            "Harbor version `{version}` is not vMAJOR.MINOR.PATCH (spec.registry.harborConfig.version)"
        ))
    })?;
    let db_password = ctx
        .key_dir()
        .join("registry")
        .secret("harbor-database.password")
        .map_err(|e| StepError::Invalid(e.to_string()))?;
    let hostname = host_of(&p.endpoint).to_string();
    let mut c = tera::Context::new();
    c.insert("cluster", &p.cluster);
    c.insert("version", &version);
    c.insert("hostname", &hostname);
    c.insert("http_port", &HTTP_PORT);
    c.insert("https_port", &https_port);
    c.insert("tls_dir", TLS_DIR);
    c.insert("admin_password", admin.expose());
    c.insert("database_password", &db_password);
    c.insert("data_dir", &p.data_dir);
    c.insert("log_dir", LOG_DIR);
    c.insert("config_version", &config_version);
    let harbor_yml = RenderTemplate::new(
        "harbor/harbor.yml.tera",
        &c,
        format!("{DIR}/harbor/harbor.yml"),
        0o600,
    )?;
    let stamp = format!(
        "{} {} {}",
        harbor_yml.file.sha256,
        archive_rec.sha256,
        sha256_hex(server.cert_pem.as_bytes())
    );
    let (upload_archive, archive_path) = upload(archive, &archive_rec, 0o644)?;
    let files = HarborFiles {
        ops: vec![
            upload_archive,
            Op::Extract(ExtractTarball {
                archive: archive_path,
                sha256: archive_rec.sha256.clone(),
                dest: DIR.to_string(),
            }),
            Op::Mkdir(CreateDir {
                path: TLS_DIR.to_string(),
                mode: 0o700,
            }),
            Op::Upload(UploadFile::bytes(
                ca.clone().into_bytes(),
                format!("{TLS_DIR}/ca.crt"),
                0o644,
            )),
            Op::Upload(UploadFile::bytes(
                server.cert_pem.clone().into_bytes(),
                format!("{TLS_DIR}/server.crt"),
                0o644,
            )),
            Op::Upload(UploadFile::bytes(
                server.key_pem.clone().into_bytes(),
                format!("{TLS_DIR}/server.key"),
                0o600,
            )),
            Op::Mkdir(CreateDir {
                path: p.data_dir.clone(),
                mode: 0o755,
            }),
            Op::Template(harbor_yml),
        ],
        installer_sha256: archive_rec.sha256.clone(),
    };
    let h = shell::quoted(&hostname);
    Ok(Task::new("deploy-harbor", [node.name.clone()])
        .step(DockerEngine::new(ctx)?)
        .step(InstallCompose { ctx: ctx.clone() })
        .step(files)
        .step(InstallHarbor {
            dir: DIR.to_string(),
            stamp_file: STAMP.to_string(),
            docker: docker(),
            stamp,
            health: format!(
                "curl -sf --cacert {TLS_DIR}/ca.crt --resolve {h}:{https_port}:127.0.0.1 https://{h}:{https_port}/api/v2.0/health | grep -Eq '\"status\": *\"healthy\"'"
            ),
            health_timeout: std::time::Duration::from_secs(300),
        }))
}

/// docker compose from the bundle as CLI plugin and command.
struct InstallCompose {
    ctx: Arc<InstallContext>,
}

impl Step for InstallCompose {
    fn name(&self) -> &str {
        "install-docker-compose"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let (path, rec) = crate::modules::runtime::bundle_file(&self.ctx, "compose", node)?;
        let (op, file) = upload(path, &rec, 0o755)?;
        Ok(vec![
            op,
            copy(file.clone(), COMPOSE_PLUGIN),
            copy(file, COMPOSE_BIN),
        ])
    }
}

/// The installer, TLS files, data directory and harbor.yml.
struct HarborFiles {
    ops: Vec<Op>,
    installer_sha256: String,
}

impl Step for HarborFiles {
    fn name(&self) -> &str {
        "harbor-files"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let stamp = format!("{DIR}/.kubexm-sha256");
        let mut ops = vec![Op::Check(Check::new(
            "Harbor installer version",
            format!(
                "[ ! -e {stamp} ] || [ \"$(cat {stamp})\" = {sha} ] || ! {docker} inspect harbor-core >/dev/null 2>&1 && exit 0\necho \"a Harbor from another offline installer runs from {DIR}: upgrading Harbor needs its own migration steps; keep harborConfig.version, or run kubexm-install delete first\" >&2\nexit 1",
                sha = self.installer_sha256,
                docker = docker(),
            ),
        ))];
        ops.extend(self.ops.iter().cloned());
        Ok(ops)
    }
}

/// `install.sh`, unless Harbor already runs from the same harbor.yml, installer and
/// certificate; then a wait until Harbor reports healthy. Its fields are the paths and checks,
/// so tests can run it against a stand-in installer.
pub struct InstallHarbor {
    /// The extracted installer (`dir/harbor/install.sh`).
    pub dir: String,
    /// Where the digests of the running installation are recorded.
    pub stamp_file: String,
    /// The docker CLI.
    pub docker: String,
    /// The digests this run installs (see [`STAMP`]).
    pub stamp: String,
    /// Shell check that passes once Harbor is healthy.
    pub health: String,
    /// How long to wait for it.
    pub health_timeout: std::time::Duration,
}

impl Step for InstallHarbor {
    fn name(&self) -> &str {
        "install-harbor"
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: std::time::Duration::from_secs(2400),
            ..Policy::default()
        }
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let (dir, stamp_file) = (shell::quoted(&self.dir), shell::quoted(&self.stamp_file));
        let stamp = shell::quoted(&self.stamp);
        let docker = shell::quoted(&self.docker);
        let current = script!(
            "[ \"$(cat {stamp_file} 2>/dev/null)\" = {stamp} ]",
            stamp_file = stamp_file,
            stamp = stamp
        );
        Ok(vec![
            Op::Run(
                RunCommand::new(script!(
                    "set -e\ncd {dir}/harbor\n./install.sh\necho {stamp} > {stamp_file}", dir = dir, stamp = stamp, stamp_file = stamp_file
                ))
                .unless(script!(
                    "{current} && [ \"$({docker} inspect -f '{{{{.State.Running}}}}' {containers} 2>/dev/null | sort -u)\" = true ]",
                    current = current,
                    docker = docker,
                    containers = shell::words(CORE_CONTAINERS)
                ))
                .verify(current)
                .undo(script!(
                    "if [ -e {dir}/harbor/docker-compose.yml ]; then (cd {dir}/harbor && {docker} compose down) >/dev/null 2>&1 || true; fi\nrm -f {stamp_file}", dir = dir, docker = docker, stamp_file = stamp_file
                ))
                .timeout(std::time::Duration::from_secs(1800)),
            ),
            Op::Wait(WaitFor {
                what: "Harbor healthy (/api/v2.0/health)".to_string(),
                check: self.health.clone(),
                timeout: self.health_timeout,
                interval: std::time::Duration::from_secs(2),
            }),
        ])
    }
}

/// The `delete-harbor` task on the registry host: Harbor stopped (`docker compose down` in its
/// directory) and its installer, TLS files, data, logs and staging files removed; docker
/// compose removed; then the docker engine ([`engine_delete_ops`]).
pub(super) fn delete_task(ctx: &InstallContext, host: String, data_dir: String) -> Task {
    let docker = docker();
    let d = shell::quoted(&data_dir);
    let files = script!(
        "{DIR} /etc/kubexm-harbor {d} {LOG_DIR} {ARTIFACTS}/harbor {ARTIFACTS}/compose {COMPOSE_PLUGIN} {COMPOSE_BIN}",
        d = d
    );
    Task::new("delete-harbor", [host])
        .step(Ops {
            name: "remove-harbor",
            ops: vec![
                Op::Run(
                    RunCommand::new(script!(
                        "cd {DIR}/harbor && {docker} compose down", docker = docker
                    ))
                    .unless(script!(
                        "[ ! -e {DIR}/harbor/docker-compose.yml ] || ! {docker} version >/dev/null 2>&1 || [ -z \"$({docker} ps -aq --filter label=com.docker.compose.project=harbor)\" ]", docker = docker
                    )),
                ),
                Op::Run(
                    RunCommand::new(script!(
                        "rm -rf -- {files}\nrmdir /usr/local/lib/docker/cli-plugins /usr/local/lib/docker 2>/dev/null || true", files = files
                    ))
                    .unless(none_exist(&files)),
                ),
            ],
        })
        .step(Ops {
            name: "remove-docker-engine",
            ops: engine_delete_ops(ctx),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harbor_yml_version_is_major_minor_zero() {
        assert_eq!(config_version("v2.10.2").as_deref(), Some("2.10.0"));
        assert_eq!(config_version("2.5.3").as_deref(), Some("2.5.0"));
        assert_eq!(config_version("latest"), None);
    }
}
