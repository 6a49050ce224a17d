//! iSulad from the bundle, plus runc, crictl and the CNI plugins.
//!
//! iSulad publishes no release tarball (it ships as openEuler RPMs), so the `isulad` component
//! is pinned by the operator (`--catalog FILE`) and its archive must hold `bin/isulad`,
//! `bin/isula` and `bin/isulad-shim`, and optionally `lib/` with the shared libraries they link
//! (lcr, libisula, …). The binaries go to `/usr/local/bin`, the libraries to [`LIB_DIR`] (named
//! in `/etc/ld.so.conf.d/kubexm-isulad.conf`, then `ldconfig`); runc is `/usr/local/sbin/runc`.
//! `/etc/isulad/daemon.json` uses runc with the systemd cgroup driver, the CRI v1 API, CNI, the
//! pause image from the private registry as `pod-sandbox-image`, the private registry in
//! `registry-mirrors` (and `insecure-registries` when it speaks plain HTTP; else its CA is
//! `/etc/isulad/certs.d/<registry>/ca.crt`, uploaded by the registry module).

use crate::script;
use std::sync::Arc;

use super::common::{
    cni_plugin_ops, component_version, copy, crictl_config, crictl_ops, runc_ops, runtime_hosts,
    sandbox_image, start_daemon, upload_and_extract, PrivateRegistry, PullPause, ARTIFACTS,
    BIN_DIR, CNI_BIN_DIR, EXTRACT, RUNC,
};
use crate::context::InstallContext;
use crate::modules::delete::Ops;
use crate::pipeline::ops::{Op, RenderTemplate, RunCommand};
use crate::pipeline::{Facts, Node, Step, StepError, Task};
use crate::runner::shell;

/// Files of the archive's `bin/` installed into [`BIN_DIR`].
pub const BIN_FILES: [&str; 3] = ["isulad", "isula", "isulad-shim"];
/// The archive's `lib/` (when it has one).
pub const LIB_DIR: &str = "/usr/local/lib/kubexm-isulad";
/// The loader configuration naming [`LIB_DIR`].
pub const LD_CONF: &str = "/etc/ld.so.conf.d/kubexm-isulad.conf";
/// iSulad's configuration.
pub const DAEMON_JSON: &str = "/etc/isulad/daemon.json";
/// iSulad's registry certificate directory (`<registry>/ca.crt`).
pub const CERTS_DIR: &str = "/etc/isulad/certs.d";
/// The unit file KubeXM writes.
pub const UNIT_FILE: &str = "/etc/systemd/system/isulad.service";
/// iSulad's root.
pub const DATA_DIR: &str = "/var/lib/isulad";
/// Written when KubeXM started iSulad on an absent or empty [`DATA_DIR`].
pub const DATA_MARKER: &str = "/etc/kubexm/isulad-data.created";
/// Root-only file with the registry password `isula login --password-stdin` reads.
pub const PULL_AUTH: &str = "/etc/isulad/kubexm-pull.auth";

/// The `install-isulad` task on every master and worker.
pub(super) fn tasks(ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
    let config = IsuladConfig::new(ctx)?;
    let registry = PrivateRegistry::of(ctx);
    let login = registry
        .as_ref()
        .and_then(|r| r.credentials().map(|(u, p)| (r.endpoint.as_str(), u, p)));
    let pull = PullPause::isula(&config.sandbox_image, login, PULL_AUTH);
    Ok(vec![Task::new("install-isulad", runtime_hosts(ctx))
        .step(IsuladBinaries::new(ctx)?)
        .step(config)
        .step(pull)])
}

/// iSulad's binaries and libraries, runc, the CNI plugins and crictl from the bundle.
struct IsuladBinaries {
    ctx: Arc<InstallContext>,
    ld_conf: RenderTemplate,
}

impl IsuladBinaries {
    fn new(ctx: &Arc<InstallContext>) -> Result<Self, StepError> {
        let mut c = tera::Context::new();
        c.insert("cluster", ctx.cluster.cluster_name());
        c.insert("lib_dir", LIB_DIR);
        Ok(Self {
            ctx: ctx.clone(),
            ld_conf: RenderTemplate::new("isulad/ld.so.conf.tera", &c, LD_CONF, 0o644)?,
        })
    }
}

impl Step for IsuladBinaries {
    fn name(&self) -> &str {
        "install-isulad-binaries"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let (mut ops, dir) = upload_and_extract(&self.ctx, "isulad", node)?;
        for bin in BIN_FILES {
            ops.push(copy(format!("{dir}/bin/{bin}"), format!("{BIN_DIR}/{bin}")));
        }
        ops.push(Op::Template(self.ld_conf.clone()));
        let (src, lib) = (shell::quoted(&format!("{dir}/lib")), shell::quoted(LIB_DIR));
        ops.push(Op::Run(
            RunCommand::new(script!(
                "set -e\n[ -d {src} ] || exit 0\nrm -rf -- {lib}\nmkdir -p -- {lib}\ncp -a -- {src}/. {lib}/\nldconfig", src = src, lib = lib
            ))
            .unless(script!("[ ! -d {src} ] || diff -rq -- {src} {lib} >/dev/null 2>&1", src = src, lib = lib))
            .undo(script!("rm -rf -- {lib}; ldconfig", lib = lib)),
        ));
        ops.extend(runc_ops(&self.ctx, node)?);
        ops.extend(cni_plugin_ops(&self.ctx, node)?);
        ops.extend(crictl_ops(&self.ctx, node)?);
        Ok(ops)
    }
}

/// daemon.json, crictl.yaml and the unit; iSulad enabled, restarted when something changed,
/// and answering.
pub struct IsuladConfig {
    /// The sandbox (pause) image as nodes pull it.
    pub sandbox_image: String,
    files: Vec<RenderTemplate>,
}

impl IsuladConfig {
    /// Renders every file for the cluster (the same on every node).
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let sandbox_image = sandbox_image(ctx)?;
        let registry = PrivateRegistry::of(ctx);
        let mirrors: Vec<String> = registry.iter().map(|r| r.endpoint.clone()).collect();
        let insecure: Vec<String> = registry
            .iter()
            .filter(|r| r.plain_http)
            .map(|r| r.endpoint.clone())
            .collect();
        let mut c = tera::Context::new();
        c.insert("cluster", ctx.cluster.cluster_name());
        c.insert("version", &component_version(ctx, "isulad")?);
        c.insert("sandbox_image", &sandbox_image);
        c.insert("cni_bin_dir", CNI_BIN_DIR);
        c.insert("registry_mirrors", &mirrors);
        c.insert("insecure_registries", &insecure);
        c.insert("bin_dir", BIN_DIR);
        Ok(Self {
            sandbox_image,
            files: vec![
                RenderTemplate::new("isulad/daemon.json.tera", &c, DAEMON_JSON, 0o644)?,
                crictl_config(ctx, &super::cri::Cri::Isulad.endpoint())?,
                RenderTemplate::new("isulad/isulad.service.tera", &c, UNIT_FILE, 0o644)?,
            ],
        })
    }

    /// The rendered files.
    pub fn files(&self) -> &[RenderTemplate] {
        &self.files
    }
}

impl Step for IsuladConfig {
    fn name(&self) -> &str {
        "configure-isulad"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops: Vec<Op> = self.files.iter().cloned().map(Op::Template).collect();
        ops.extend(start_daemon(
            &["isulad"],
            (DATA_MARKER, DATA_DIR),
            ("iSulad", format!("{BIN_DIR}/isula info >/dev/null")),
        ));
        Ok(ops)
    }
}

/// iSulad's part of the `delete` pipeline, on every master and worker: iSulad stopped and
/// disabled (when its unit is KubeXM's); its binaries, crictl, runc, the unit, daemon.json, the
/// pull credentials, the private registry's CA, `/etc/crictl.yaml` and the loader
/// configuration removed (emptied directories too), its libraries (then `ldconfig`); the CNI
/// plugins KubeXM copied; its root when [`DATA_MARKER`] says KubeXM created it; run state and
/// staging files.
pub(super) fn delete_tasks(ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
    let mut files: Vec<String> = BIN_FILES
        .iter()
        .chain(["crictl"].iter())
        .map(|b| format!("{BIN_DIR}/{b}"))
        .collect();
    files.extend(
        [
            RUNC,
            UNIT_FILE,
            DAEMON_JSON,
            PULL_AUTH,
            LD_CONF,
            super::common::CRICTL_CONFIG,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut dirs = Vec::new();
    if let Some(e) = ctx.registry_endpoint() {
        files.push(format!("{CERTS_DIR}/{e}/ca.crt"));
        dirs.push(format!("{CERTS_DIR}/{e}"));
    }
    dirs.extend([CERTS_DIR.to_string(), "/etc/isulad".to_string()]);
    let also = format!(
        "/var/run/isulad /var/run/isulad.sock /var/run/isulad.pid {ARTIFACTS}/isulad {ARTIFACTS}/runc {ARTIFACTS}/crictl {EXTRACT}/isulad-* {EXTRACT}/crictl-*"
    );
    Ok(vec![Task::new("delete-isulad", runtime_hosts(ctx)).step(
        Ops {
            name: "remove-isulad",
            ops: vec![
                super::common::stop_units(&["isulad"], UNIT_FILE),
                super::common::remove_paths(&files, &dirs),
                Op::Run(
                    RunCommand::new(script!("rm -rf -- {LIB_DIR}\nldconfig"))
                        .unless(script!("[ ! -e {LIB_DIR} ]")),
                ),
                super::common::remove_cni_plugins(),
                super::common::remove_data(DATA_MARKER, &[DATA_DIR], &also),
            ],
        },
    )])
}
