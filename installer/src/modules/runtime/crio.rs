//! cri-o from the bundle's static tarball (`cri-o.<arch>.v<version>.tar.gz`, whose `cri-o/bin`
//! holds crio, pinns, conmon, conmonrs, crun and runc), plus crictl and the CNI plugins.
//!
//! Layout: crio and pinns in `/usr/local/bin`; conmon, conmonrs, crun and runc in [`LIBEXEC`].
//! The configuration is a drop-in ([`DROP_IN`]) over cri-o's built-in defaults: the systemd
//! cgroup manager, crun as default runtime (runc beside it), the pause image from the private
//! registry, the signature policy KubeXM writes ([`POLICY`], accept anything: images are
//! trusted by digest through the bundle) and, when the registry needs credentials, a root-only
//! auth file ([`AUTH_FILE`]). `/etc/containers/registries.conf.d/10-kubexm.conf` names the
//! private registry (insecure when it speaks plain HTTP); its CA is
//! `/etc/containers/certs.d/<registry>/ca.crt`, uploaded by the registry module.

use std::sync::Arc;

use super::common::{
    cni_plugin_ops, component_version, copy, crictl_config, crictl_ops, runtime_hosts,
    sandbox_image, start_daemon, upload_and_extract, PrivateRegistry, PullPause, ARTIFACTS,
    BIN_DIR, CNI_BIN_DIR, EXTRACT,
};
use crate::context::InstallContext;
use crate::modules::delete::Ops;
use crate::pipeline::ops::{Op, RenderTemplate, UploadFile};
use crate::pipeline::{Facts, Node, Step, StepError, Task};

/// conmon, conmonrs, crun and runc.
pub const LIBEXEC: &str = "/usr/local/libexec/crio";
/// Files of the bundle's `cri-o/bin` installed into [`BIN_DIR`].
pub const BIN_FILES: [&str; 2] = ["crio", "pinns"];
/// Files of the bundle's `cri-o/bin` installed into [`LIBEXEC`].
pub const LIBEXEC_FILES: [&str; 4] = ["conmon", "conmonrs", "crun", "runc"];
/// KubeXM's configuration drop-in.
pub const DROP_IN: &str = "/etc/crio/crio.conf.d/10-kubexm.conf";
/// The signature policy cri-o uses.
pub const POLICY: &str = "/etc/crio/kubexm-policy.json";
/// The private registry's credentials (root only).
pub const AUTH_FILE: &str = "/etc/crio/kubexm-auth.json";
/// The private registry for containers/image.
pub const REGISTRIES_CONF: &str = "/etc/containers/registries.conf.d/10-kubexm.conf";
/// containers/image's registry certificate directory (`<registry>/ca.crt`).
pub const CERTS_DIR: &str = "/etc/containers/certs.d";
/// The unit file KubeXM writes.
pub const UNIT_FILE: &str = "/etc/systemd/system/crio.service";
/// cri-o's image and container storage.
pub const DATA_DIR: &str = "/var/lib/containers/storage";
/// Written when KubeXM started cri-o on an absent or empty [`DATA_DIR`].
pub const DATA_MARKER: &str = "/etc/kubexm/crio-data.created";

/// The `install-cri-o` task on every master and worker.
pub(super) fn tasks(ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
    let config = CrioConfig::new(ctx)?;
    // cri-o reads the registry credentials from its own auth file (see the config step).
    let pull = PullPause::crictl(&config.sandbox_image);
    Ok(vec![Task::new("install-cri-o", runtime_hosts(ctx))
        .step(CrioBinaries { ctx: ctx.clone() })
        .step(config)
        .step(pull)])
}

/// cri-o's binaries, the CNI plugins and crictl from the bundle.
struct CrioBinaries {
    ctx: Arc<InstallContext>,
}

impl Step for CrioBinaries {
    fn name(&self) -> &str {
        "install-cri-o-binaries"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let (mut ops, dir) = upload_and_extract(&self.ctx, "cri-o", node)?;
        for bin in BIN_FILES {
            ops.push(copy(
                format!("{dir}/cri-o/bin/{bin}"),
                format!("{BIN_DIR}/{bin}"),
            ));
        }
        for bin in LIBEXEC_FILES {
            ops.push(copy(
                format!("{dir}/cri-o/bin/{bin}"),
                format!("{LIBEXEC}/{bin}"),
            ));
        }
        ops.extend(cni_plugin_ops(&self.ctx, node)?);
        ops.extend(crictl_ops(&self.ctx, node)?);
        Ok(ops)
    }
}

/// The drop-in, policy, registries.conf, crictl.yaml, unit and credentials; cri-o enabled,
/// restarted when something changed, and answering.
pub struct CrioConfig {
    /// The sandbox (pause) image as nodes pull it.
    pub sandbox_image: String,
    files: Vec<RenderTemplate>,
    auth_json: Option<Vec<u8>>,
}

impl CrioConfig {
    /// Renders every file for the cluster (the same on every node).
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let sandbox_image = sandbox_image(ctx)?;
        let registry = PrivateRegistry::of(ctx);
        let auth_json = registry.as_ref().and_then(PrivateRegistry::auth_json);
        let mut c = tera::Context::new();
        c.insert("cluster", ctx.cluster.cluster_name());
        c.insert("version", &component_version(ctx, "cri-o")?);
        c.insert("libexec", LIBEXEC);
        c.insert("bin_dir", BIN_DIR);
        c.insert("cni_bin_dir", CNI_BIN_DIR);
        c.insert("sandbox_image", &sandbox_image);
        c.insert("policy", POLICY);
        c.insert("auth_file", &auth_json.as_ref().map(|_| AUTH_FILE));
        let mut files = vec![
            RenderTemplate::new("crio/crio.conf.tera", &c, DROP_IN, 0o644)?,
            RenderTemplate::new("crio/policy.json.tera", &c, POLICY, 0o644)?,
        ];
        if let Some(r) = &registry {
            c.insert("endpoint", &r.endpoint);
            c.insert("insecure", &r.plain_http);
            c.insert("ca", &format!("{CERTS_DIR}/{}/ca.crt", r.endpoint));
            files.push(RenderTemplate::new(
                "crio/registries.conf.tera",
                &c,
                REGISTRIES_CONF,
                0o644,
            )?);
        }
        files.push(crictl_config(ctx, &super::cri::Cri::CriO.endpoint())?);
        files.push(RenderTemplate::new(
            "crio/crio.service.tera",
            &c,
            UNIT_FILE,
            0o644,
        )?);
        Ok(Self {
            sandbox_image,
            files,
            auth_json,
        })
    }

    /// The rendered files.
    pub fn files(&self) -> &[RenderTemplate] {
        &self.files
    }
}

impl Step for CrioConfig {
    fn name(&self) -> &str {
        "configure-cri-o"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops: Vec<Op> = self.files.iter().cloned().map(Op::Template).collect();
        if let Some(json) = &self.auth_json {
            ops.push(Op::Upload(UploadFile::bytes(
                json.clone(),
                AUTH_FILE,
                0o600,
            )));
        }
        ops.extend(start_daemon(
            &["crio"],
            (DATA_MARKER, DATA_DIR),
            ("cri-o", format!("{BIN_DIR}/crio status info >/dev/null")),
        ));
        Ok(ops)
    }
}

/// cri-o's part of the `delete` pipeline, on every master and worker: cri-o stopped and
/// disabled (when its unit is KubeXM's); its binaries, [`LIBEXEC`], crictl, the unit, the
/// drop-in, policy, credentials, registries.conf drop-in, the private registry's CA and
/// `/etc/crictl.yaml` removed (emptied directories too); the CNI plugins KubeXM copied; the
/// image storage when [`DATA_MARKER`] says KubeXM created it; run state and staging files.
pub(super) fn delete_tasks(ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
    let mut files: Vec<String> = BIN_FILES
        .iter()
        .chain(["crictl"].iter())
        .map(|b| format!("{BIN_DIR}/{b}"))
        .chain(LIBEXEC_FILES.iter().map(|b| format!("{LIBEXEC}/{b}")))
        .collect();
    files.extend(
        [
            UNIT_FILE,
            DROP_IN,
            POLICY,
            AUTH_FILE,
            REGISTRIES_CONF,
            super::common::CRICTL_CONFIG,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut dirs = vec![
        LIBEXEC.to_string(),
        "/etc/crio/crio.conf.d".to_string(),
        "/etc/crio".to_string(),
        "/etc/containers/registries.conf.d".to_string(),
    ];
    if let Some(e) = ctx.registry_endpoint() {
        files.push(format!("{CERTS_DIR}/{e}/ca.crt"));
        dirs.push(format!("{CERTS_DIR}/{e}"));
    }
    dirs.extend([CERTS_DIR.to_string(), "/etc/containers".to_string()]);
    let also = format!(
        "/run/containers /var/run/crio /var/lib/crio /var/log/crio {ARTIFACTS}/cri-o {ARTIFACTS}/crictl {EXTRACT}/cri-o-* {EXTRACT}/crictl-*"
    );
    Ok(vec![Task::new("delete-cri-o", runtime_hosts(ctx)).step(
        Ops {
            name: "remove-cri-o",
            ops: vec![
                super::common::stop_units(&["crio"], UNIT_FILE),
                super::common::remove_paths(&files, &dirs),
                super::common::remove_cni_plugins(),
                super::common::remove_data(DATA_MARKER, &[DATA_DIR], &also),
            ],
        },
    )])
}
