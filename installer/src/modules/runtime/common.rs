//! What every runtime shares: where bundle files and archives go on the nodes, the CNI plugins
//! and crictl, the private registry as runtimes reach it, the pause image (see the runtime
//! module's documentation). Each runtime's file and [`super::kind`] use it; it imports neither.

use crate::runner::shell::Script;
use crate::script;
use kubexm_manifests::resolve::Role;
use std::path::PathBuf;

use base64::Engine;
use kubexm_bundles::manifest::FileRecord;
use kubexm_manifests::image_ref::ImageRef;
use kubexm_manifests::secret::Secret;

use crate::context::InstallContext;
use crate::pipeline::ops::{
    CopyFile, ExtractTarball, Op, RenderTemplate, RunCommand, Systemd, SystemdAction, UploadFile,
    WaitFor,
};
use crate::pipeline::{Facts, Node, Step, StepError};
use crate::runner::shell::{globs, Sh};
use crate::runner::{shell, UploadSource};

/// Where bundle files are kept on nodes: `ARTIFACTS/<name>/<version>/<file>`.
pub const ARTIFACTS: &str = "/var/lib/kubexm/artifacts";
/// Where archives are extracted on nodes: `EXTRACT/<name>-<version>`.
pub const EXTRACT: &str = "/var/lib/kubexm/extract";
/// runc (containerd and iSulad; docker and cri-o bring their own).
pub const RUNC: &str = "/usr/local/sbin/runc";
/// Runtime binaries and crictl.
pub const BIN_DIR: &str = "/usr/local/bin";
/// CNI plugins.
pub const CNI_BIN_DIR: &str = "/opt/cni/bin";
/// crictl's configuration.
pub const CRICTL_CONFIG: &str = "/etc/crictl.yaml";

/// The nodes that run a container runtime: masters and workers.
pub fn runtime_hosts(ctx: &InstallContext) -> Vec<String> {
    ctx.nodes
        .iter()
        .filter(|n| n.has_role(Role::Master) || n.has_role(Role::Worker))
        .map(|n| n.name.clone())
        .collect()
}

/// The private registry as the runtimes reach it.
#[derive(Debug, Clone)]
pub struct PrivateRegistry {
    /// `host[:port]`.
    pub endpoint: String,
    /// `registry.auths.<endpoint>.plainHTTP`.
    pub plain_http: bool,
    /// `registry.auths.<endpoint>.skipTLSVerify` (never with plain HTTP).
    pub skip_verify: bool,
    credentials: Option<(String, Secret)>,
}

impl PrivateRegistry {
    /// The cluster's private registry; `None` when `registry.type` is none.
    pub fn of(ctx: &InstallContext) -> Option<Self> {
        let endpoint = ctx.registry_endpoint()?;
        let auths = &ctx.cluster.file.spec.registry.auths;
        let auth = auths
            .get(&endpoint)
            .or_else(|| auths.get(endpoint.split(':').next().unwrap_or(&endpoint)));
        let credentials = auth.and_then(|a| match (&a.username, &a.password) {
            (Some(u), Some(p)) => Some((u.clone(), p.clone())),
            _ => None,
        });
        let plain_http = auth.is_some_and(|a| a.plain_http);
        Some(Self {
            plain_http,
            skip_verify: auth.is_some_and(|a| a.skip_tls_verify) && !plain_http,
            credentials,
            endpoint,
        })
    }

    /// User name and password, when `registry.auths` has them.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.credentials
            .as_ref()
            .map(|(u, p)| (u.as_str(), p.expose()))
    }

    /// `{"auths":{"<endpoint>":{"auth":"<base64 user:password>"}}}`: the credentials file format
    /// docker (`--config DIR`), cri-o (`global_auth_file`) and containers/image read. Uploaded
    /// as bytes to a root-only file, never on a command line.
    pub fn auth_json(&self) -> Option<Vec<u8>> {
        let (u, p) = self.credentials()?;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        let doc = serde_json::json!({ "auths": { &self.endpoint: { "auth": auth } } });
        serde_json::to_vec_pretty(&doc).ok()
    }
}

/// A component's bundle file for `node` (the first one; runtime components have one per arch).
pub(crate) fn bundle_file(
    ctx: &InstallContext,
    component: &str,
    node: &Node,
) -> Result<(PathBuf, FileRecord), StepError> {
    ctx.files_for(component, node)
        .into_iter()
        .next()
        .ok_or_else(|| {
            StepError::Invalid(format!(
            "the bundle has no {component} file for {} ({}): rebuild the bundle for this cluster",
            node.arch, node.name
        ))
        })
}

/// Upload of a bundle file to `ARTIFACTS/<name>/<version>/<file>`; returns the op and the path.
pub(crate) fn upload(
    path: PathBuf,
    rec: &FileRecord,
    mode: u32,
) -> Result<(Op, String), StepError> {
    let file = rec.path.rsplit('/').next().unwrap_or(&rec.path);
    let mut parts: Vec<&str> = rec.name.split('/').collect();
    parts.extend([rec.version.as_str(), file]);
    let dest = crate::modules::remote_path::remote_path(ARTIFACTS, &parts)?;
    Ok((
        Op::Upload(UploadFile {
            source: UploadSource::File(path),
            sha256: rec.sha256.clone(),
            dest: dest.clone(),
            mode,
        }),
        dest,
    ))
}

/// Extraction of an uploaded archive into `EXTRACT/<name>-<version>`; returns the op and the
/// directory.
pub(crate) fn extract(archive: &str, rec: &FileRecord) -> Result<(Op, String), StepError> {
    let dir = format!("{}-{}", rec.name.replace('/', "-"), rec.version);
    let dest = crate::modules::remote_path::remote_path(EXTRACT, &[&dir])?;
    Ok((
        Op::Extract(ExtractTarball {
            archive: archive.to_string(),
            sha256: rec.sha256.clone(),
            dest: dest.clone(),
        }),
        dest,
    ))
}

/// Uploads and extracts `component`'s archive; returns the ops and the extracted directory.
pub(crate) fn upload_and_extract(
    ctx: &InstallContext,
    component: &str,
    node: &Node,
) -> Result<(Vec<Op>, String), StepError> {
    let (path, rec) = bundle_file(ctx, component, node)?;
    let (up, archive) = upload(path, &rec, 0o644)?;
    let (ex, dir) = extract(&archive, &rec)?;
    Ok((vec![up, ex], dir))
}

/// An executable copied into place.
pub(crate) fn copy(src: String, dest: impl Into<String>) -> Op {
    Op::Copy(CopyFile {
        src,
        dest: dest.into(),
        mode: 0o755,
    })
}

/// runc from the bundle as [`RUNC`].
pub(crate) fn runc_ops(ctx: &InstallContext, node: &Node) -> Result<Vec<Op>, StepError> {
    let (path, rec) = bundle_file(ctx, "runc", node)?;
    let (op, runc) = upload(path, &rec, 0o755)?;
    Ok(vec![op, copy(runc, RUNC)])
}

/// The CNI plugins archive extracted and its files copied into [`CNI_BIN_DIR`].
pub(crate) fn cni_plugin_ops(ctx: &InstallContext, node: &Node) -> Result<Vec<Op>, StepError> {
    let (mut ops, dir) = upload_and_extract(ctx, "cni-plugins", node)?;
    let (d, c) = (shell::quoted(&dir), shell::quoted(CNI_BIN_DIR));
    ops.push(Op::Run(
        RunCommand::new(script!(
            "set -e\nmkdir -p {c}\nfor f in {d}/*; do [ -f \"$f\" ] || continue; cp -f -- \"$f\" {c}/; chmod 0755 {c}/\"${{f##*/}}\"; done", c = c, d = d
        ))
        .unless(script!(
            "[ -d {c} ] && for f in {d}/*; do [ -f \"$f\" ] || continue; cmp -s -- \"$f\" {c}/\"${{f##*/}}\" || exit 1; done", c = c, d = d
        ))
        .undo(script!(
            "for f in {d}/*; do [ -f \"$f\" ] && rm -f -- {c}/\"${{f##*/}}\"; done; rmdir {c} 2>/dev/null || true", d = d, c = c
        )),
    ));
    Ok(ops)
}

/// crictl from the bundle into [`BIN_DIR`].
pub(crate) fn crictl_ops(ctx: &InstallContext, node: &Node) -> Result<Vec<Op>, StepError> {
    let (mut ops, dir) = upload_and_extract(ctx, "crictl", node)?;
    ops.push(copy(format!("{dir}/crictl"), format!("{BIN_DIR}/crictl")));
    Ok(ops)
}

/// `/etc/crictl.yaml` pointing crictl at `cri_endpoint` (`unix:///…`).
pub(crate) fn crictl_config(
    ctx: &InstallContext,
    cri_endpoint: &str,
) -> Result<RenderTemplate, StepError> {
    let mut c = tera::Context::new();
    c.insert("cluster", ctx.cluster.cluster_name());
    c.insert("cri_endpoint", cri_endpoint);
    RenderTemplate::new("crictl/crictl.yaml.tera", &c, CRICTL_CONFIG, 0o644)
}

/// Install side: writes `marker` when `data_dir` is absent or empty before the runtime first
/// starts, so `delete` knows the data is KubeXM's.
pub(crate) fn data_marker(marker: &str, data_dir: &str) -> Op {
    Op::Run(
        RunCommand::new(script!(
            "mkdir -p /etc/kubexm\n{}",
            Sh::new("echo").arg(data_dir).op(">").arg(marker)
        ))
        .unless(script!(
            "[ -e {m} ] || [ -n \"$(ls -A {d} 2>/dev/null)\" ]",
            m = marker,
            d = data_dir,
        ))
        .undo(Sh::new("rm").arg("-f").arg(marker)),
    )
}

/// Starts a runtime daemon after its files were written: `daemon-reload` when a unit changed,
/// the data marker (see [`data_marker`]), `enable --now` of every unit in `units`, a restart of
/// the last one when its configuration changed, then a wait until `ready` (a command proving the
/// daemon answers on its socket) succeeds.
pub(crate) fn start_daemon(
    units: &[&str],
    (marker, data_dir): (&str, &str),
    (what, ready): (&str, String),
) -> Vec<Op> {
    let mut ops = vec![
        Op::Run(
            RunCommand::new("systemctl daemon-reload")
                .when_changed()
                .undo("systemctl daemon-reload"),
        ),
        data_marker(marker, data_dir),
    ];
    for unit in units {
        ops.push(Op::Systemd(Systemd::new(SystemdAction::EnableNow(
            (*unit).to_string(),
        ))));
    }
    if let Some(main) = units.last() {
        ops.push(Op::Systemd(Systemd::new(SystemdAction::Restart {
            unit: (*main).to_string(),
            always: false,
        })));
    }
    ops.push(Op::Wait(WaitFor {
        what: format!("{what} answers on its socket"),
        check: ready,
        timeout: std::time::Duration::from_secs(60),
        interval: std::time::Duration::from_secs(1),
    }));
    ops
}

/// Pulls the sandbox image with the runtime's own client unless it is already there. Registry
/// credentials never appear on a command line (where every user of the node sees them in the
/// process list) or in the plan: the runtime reads them from its own configuration (containerd's
/// `registry.configs` auth in its root-only config.toml, cri-o's global auth file, docker's
/// `config.json`), or, for iSulad, `isula login` reads the password on standard input from a
/// root-only file.
pub(crate) struct PullPause {
    /// Pulls the image.
    pull: Script,
    /// Succeeds when the image is present.
    present: Script,
    /// Removes the image (the revert).
    remove: Script,
    /// Credentials: content and root-only destination.
    credentials: Option<(Vec<u8>, String)>,
}

/// Succeeds when the runtime's CRI reports the (quoted) image. crictl exits 1 both for "no such
/// image" and for a CRI call that timed out (seen on a loaded node right after the runtime's
/// restart: a re-run then pulled again and reported a change), so a failure is asked once more
/// after a pause before the image counts as missing.
pub(super) fn crictl_present(quoted_image: &Script) -> Script {
    let once = script!(
        "{BIN_DIR}/crictl inspecti {image} >/dev/null 2>&1",
        image = quoted_image
    );
    script!("{once} || {{ sleep 3; {once}; }}", once = once)
}

impl PullPause {
    /// `crictl pull` through the runtime's CRI (containerd, cri-o), which holds the registry
    /// credentials in its own configuration.
    pub(crate) fn crictl(image: &str) -> Self {
        let i = shell::quoted(image);
        Self {
            pull: script!("{BIN_DIR}/crictl pull {i} >/dev/null", i = i),
            present: crictl_present(&i),
            remove: script!("{BIN_DIR}/crictl rmi {i} >/dev/null 2>&1 || true", i = i),
            credentials: None,
        }
    }

    /// iSulad: `isula login --password-stdin` fed from the root-only `file` holding the
    /// password (when the registry needs credentials), then `isula pull`.
    pub(crate) fn isula(image: &str, login: Option<(&str, &str, &str)>, file: &str) -> Self {
        let i = shell::quoted(image);
        let (login_cmd, credentials) = match login {
            Some((registry, user, password)) => (
                script!(
                    "{BIN_DIR}/isula login -u {user} --password-stdin {registry} <{file} >/dev/null && ",
                    user = user,
                    registry = registry,
                    file = file
                ),
                Some((format!("{password}\n").into_bytes(), file.to_string())),
            ),
            None => (Script::empty(), None),
        };
        Self {
            pull: script!(
                "{login_cmd}{BIN_DIR}/isula pull {i} >/dev/null",
                login_cmd = login_cmd,
                i = i
            ),
            present: crictl_present(&i),
            remove: script!("{BIN_DIR}/crictl rmi {i} >/dev/null 2>&1 || true", i = i),
            credentials,
        }
    }

    /// docker; `auth_json` is a docker `config.json` placed in `config_dir`.
    pub(crate) fn docker(image: &str, auth_json: Option<Vec<u8>>, config_dir: &str) -> Self {
        let i = shell::quoted(image);
        let config = if auth_json.is_some() {
            script!(" --config {config_dir}", config_dir = config_dir)
        } else {
            Script::empty()
        };
        Self {
            pull: script!(
                "{BIN_DIR}/docker{config} pull {i} >/dev/null",
                config = config,
                i = i
            ),
            present: script!("{BIN_DIR}/docker image inspect {i} >/dev/null 2>&1", i = i),
            remove: script!(
                "{BIN_DIR}/docker image rm {i} >/dev/null 2>&1 || true",
                i = i
            ),
            credentials: auth_json.map(|j| (j, format!("{config_dir}/config.json"))),
        }
    }
}

impl Step for PullPause {
    fn name(&self) -> &str {
        "pull-pause"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = Vec::new();
        if let Some((content, dest)) = &self.credentials {
            ops.push(Op::Upload(UploadFile::bytes(
                content.clone(),
                dest.clone(),
                0o600,
            )));
        }
        ops.push(Op::Run(
            RunCommand::new(self.pull.clone())
                .unless(self.present.clone())
                .undo(self.remove.clone()),
        ));
        Ok(ops)
    }
}

/// Delete side: stops and disables `units` when `unit_file` is KubeXM's and any is enabled or
/// active.
pub(crate) fn stop_units(units: &[&str], unit_file: &str) -> Op {
    let list = shell::words(units);
    let quiet = Script::join(
        units.iter().map(|u| {
            script!(
                "! systemctl is-enabled -q {u} 2>/dev/null && ! systemctl is-active -q {u}",
                u = u
            )
        }),
        " && ",
    );
    Op::Run(
        RunCommand::new(script!(
            "systemctl disable --now {list} 2>/dev/null || systemctl stop {list} 2>/dev/null || true", list = list
        ))
        .unless(script!(
            "! {} || {{ {}; }}",
            crate::modules::delete::written_by_kubexm(unit_file),
            quiet
        )),
    )
}

/// Delete side: removes `files`, then `dirs` that are empty, then reloads systemd; skipped when
/// none of them exists.
pub(crate) fn remove_paths(files: &[String], dirs: &[String]) -> Op {
    let q = |v: &[String]| shell::words(v);
    let gone = Script::join(
        files
            .iter()
            .chain(dirs.iter())
            .map(|p| script!("[ ! -e {} ]", p)),
        " && ",
    );
    Op::Run(
        RunCommand::new(script!(
            "rm -f -- {files}\nfor d in {dirs}; do rmdir -- \"$d\" 2>/dev/null || true; done\nsystemctl daemon-reload",
            files = q(files),
            dirs = q(dirs),
        ))
        .unless(gone),
    )
}

/// Delete side: the files of [`CNI_BIN_DIR`] whose names are in KubeXM's extracted CNI archive
/// are removed, then the directory if empty, then the staging copy. When the staging copy is
/// already gone (a partial earlier delete) the plugins are left.
pub(crate) fn remove_cni_plugins() -> Op {
    let cni_extract = script!("{EXTRACT}/cni-plugins-*");
    Op::Run(
        RunCommand::new(script!(
            "for x in {cni_extract}; do [ -d \"$x\" ] || continue; for f in \"$x\"/*; do [ -f \"$f\" ] && rm -f -- {CNI_BIN_DIR}/\"${{f##*/}}\"; done; done\nrmdir {CNI_BIN_DIR} 2>/dev/null && rmdir /opt/cni 2>/dev/null || true\nrm -rf -- {cni_extract} {ARTIFACTS}/cni-plugins", cni_extract = cni_extract
        ))
        .unless(none_exist(&format!("{cni_extract} {ARTIFACTS}/cni-plugins"))),
    )
}

/// Delete side: the runtime's data (`data_dirs`, the first being the one the marker names) is
/// removed only when `marker` says KubeXM created it — the first directory is kept when it is a
/// mount point, only its content removed — then `also` (run state, staging globs) is removed.
pub(crate) fn remove_data(marker: &str, data_dirs: &[&str], also: &str) -> Op {
    let (first, rest) = data_dirs.split_first().unwrap_or((&"", &[]));
    let (marker_q, first) = (shell::quoted(marker), shell::quoted(first));
    Op::Run(
        RunCommand::new(script!(
            "if [ -e {marker_q} ]; then\n  find {first} -mindepth 1 -maxdepth 1 -exec rm -rf -- {{}} +\n  mountpoint -q {first} || rmdir {first} 2>/dev/null || true\n{more}  rm -f {marker_q}\nfi\n{also_rm}",
            more = if rest.is_empty() {
                Script::empty()
            } else {
                script!("  {rm}\n", rm = Sh::new("rm").arg("-rf").arg("--").args(rest))
            },
            also_rm = Sh::new("rm").arg("-rf").arg("--").globs(also),
            marker_q = marker_q,
            first = first
        ))
        .unless(script!(
            "[ ! -e {marker_q} ] && {{ {none}; }}",
            marker_q = marker_q,
            none = none_exist(also)
        )),
    )
}

/// Shell test: none of the space-separated `paths` (globs allowed) exists.
pub(crate) fn none_exist(paths: &str) -> Script {
    script!(
        "for p in {}; do [ -e \"$p\" ] && exit 1; done; true",
        globs(paths)
    )
}

/// The pause image's canonical reference: the bundle's (or the resolution's) image whose
/// repository's last component is `pause`.
pub fn pause_reference(ctx: &InstallContext) -> Result<String, StepError> {
    bundled_image(ctx, "pause")
}

/// The canonical reference of the bundle's (or the resolution's) image whose repository's last
/// component is `basename` (`pause`, `coredns`).
pub fn bundled_image(ctx: &InstallContext, basename: &str) -> Result<String, StepError> {
    ctx.image_references()
        .into_iter()
        .find(|r| r.parse::<ImageRef>().is_ok_and(|i| i.basename() == basename))
        .ok_or_else(|| {
            StepError::Invalid(format!(
                "no {basename} image in the bundle (or the catalog's resolution): rebuild the bundle for this cluster"
            ))
        })
}

/// The pause image as nodes pull it (from the private registry).
pub fn sandbox_image(ctx: &InstallContext) -> Result<String, StepError> {
    ctx.pull_reference(&pause_reference(ctx)?)
}

/// The version of `component` the cluster installs: the bundle's (or the resolution's) file,
/// else `runtime.version`.
pub(crate) fn component_version(
    ctx: &InstallContext,
    component: &str,
) -> Result<String, StepError> {
    if let Some(v) = ctx
        .nodes
        .iter()
        .find_map(|n| ctx.files_for(component, n).into_iter().next())
        .map(|(_, r)| r.version)
    {
        return Ok(v);
    }
    ctx.cluster
        .file
        .spec
        .runtime
        .version
        .clone()
        .ok_or_else(|| {
            StepError::Invalid(format!(
                "the {component} version is unknown: set runtime.version or install from a bundle"
            ))
        })
}
