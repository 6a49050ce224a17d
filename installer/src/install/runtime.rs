//! Module: the container runtime on every master and worker. containerd is installed from the
//! bundle (containerd, runc, CNI plugins, crictl); docker, cri-o and iSulad are skipped with a
//! reason until their modules exist.
//!
//! Bundle files go to `/var/lib/kubexm/artifacts/<name>/<version>/<file>` (sha256-checked,
//! skipped when present), archives are extracted into `/var/lib/kubexm/extract/<name>-<version>`
//! and the binaries copied into place: containerd, containerd-shim-runc-v2 and ctr in
//! `/usr/local/bin`, runc as `/usr/local/sbin/runc`, crictl in `/usr/local/bin`, the CNI plugins
//! in `/opt/cni/bin`. `/etc/containerd/config.toml` (format 2 for containerd 1.x, 3 for 2.x)
//! uses the systemd cgroup driver, the pause image from the private registry as sandbox image,
//! and `/etc/containerd/certs.d` for registry hosts; the private registry gets a `hosts.toml`
//! (its CA, `ca.crt` beside it, is uploaded by the registry module).

use std::path::PathBuf;
use std::sync::Arc;

use kubexm_bundles::manifest::FileRecord;
use kubexm_manifests::image_ref::ImageRef;
use kubexm_manifests::model::RuntimeType;
use serde::Serialize;

use super::InstallContext;
use crate::pipeline::ops::{
    CopyFile, ExtractTarball, Op, RenderTemplate, RunCommand, Systemd, SystemdAction, UploadFile,
    WaitFor,
};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::{shell, UploadSource};

/// Where bundle files are kept on nodes: `ARTIFACTS/<name>/<version>/<file>`.
pub const ARTIFACTS: &str = "/var/lib/kubexm/artifacts";
/// Where archives are extracted on nodes: `EXTRACT/<name>-<version>`.
pub const EXTRACT: &str = "/var/lib/kubexm/extract";
/// containerd's registry host directory.
pub const CERTS_DIR: &str = "/etc/containerd/certs.d";
/// containerd's configuration.
pub const CONFIG: &str = "/etc/containerd/config.toml";
/// runc.
pub const RUNC: &str = "/usr/local/sbin/runc";
/// containerd, ctr, the shim and crictl.
pub const BIN_DIR: &str = "/usr/local/bin";
/// CNI plugins.
pub const CNI_BIN_DIR: &str = "/opt/cni/bin";
/// containerd's root (images, snapshots, content).
pub const DATA_DIR: &str = "/var/lib/containerd";
/// Written when KubeXM started containerd on an absent or empty [`DATA_DIR`]: `delete` then
/// removes the data; without it the data was there before and is kept.
pub const DATA_MARKER: &str = "/etc/kubexm/containerd-data.created";
/// The unit file KubeXM writes.
pub const UNIT_FILE: &str = "/etc/systemd/system/containerd.service";
/// crictl's configuration.
pub const CRICTL_CONFIG: &str = "/etc/crictl.yaml";

/// The container runtime.
pub struct RuntimeModule(pub Arc<InstallContext>);

impl Module for RuntimeModule {
    fn name(&self) -> &str {
        "runtime"
    }

    fn skip(&self) -> Option<String> {
        let kind = self.0.cluster.file.spec.runtime.kind;
        let name = match kind {
            RuntimeType::Containerd => return None,
            RuntimeType::Docker => "docker (with cri-dockerd)",
            RuntimeType::CriO => "cri-o",
            RuntimeType::Isulad => "isulad",
        };
        Some(format!(
            "runtime.type is {name}: this build installs containerd only; the {name} module is not implemented yet (use runtime.type: containerd)"
        ))
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let hosts = runtime_hosts(ctx);
        let config = ContainerdConfig::new(ctx)?;
        let pull = PullPause {
            sandbox_image: config.sandbox_image.clone(),
            auth: config.pull_auth.clone(),
            plain_http: config.plain_http,
        };
        Ok(vec![Task::new("install-containerd", hosts)
            .step(ContainerdBinaries { ctx: ctx.clone() })
            .step(config)
            .step(pull)])
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
pub(crate) fn upload(path: PathBuf, rec: &FileRecord, mode: u32) -> (Op, String) {
    let file = rec.path.rsplit('/').next().unwrap_or(&rec.path);
    let dest = format!("{ARTIFACTS}/{}/{}/{file}", rec.name, rec.version);
    (
        Op::Upload(UploadFile {
            source: UploadSource::File(path),
            sha256: rec.sha256.clone(),
            dest: dest.clone(),
            mode,
        }),
        dest,
    )
}

/// Extraction of an uploaded archive into `EXTRACT/<name>-<version>`; returns the op and the
/// directory.
pub(crate) fn extract(archive: &str, rec: &FileRecord) -> (Op, String) {
    let dest = format!("{EXTRACT}/{}-{}", rec.name, rec.version);
    (
        Op::Extract(ExtractTarball {
            archive: archive.to_string(),
            sha256: rec.sha256.clone(),
            dest: dest.clone(),
        }),
        dest,
    )
}

/// An executable copied into place (0755).
pub(crate) fn copy(src: String, dest: impl Into<String>) -> Op {
    Op::Copy(CopyFile {
        src,
        dest: dest.into(),
        mode: 0o755,
    })
}

/// The containerd, runc, CNI plugin and crictl binaries from the bundle.
pub struct ContainerdBinaries {
    ctx: Arc<InstallContext>,
}

impl Step for ContainerdBinaries {
    fn name(&self) -> &str {
        "install-containerd-binaries"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let ctx = &self.ctx;
        let mut ops = Vec::new();

        let (path, rec) = bundle_file(ctx, "containerd", node)?;
        let (op, archive) = upload(path, &rec, 0o644);
        ops.push(op);
        let (op, dir) = extract(&archive, &rec);
        ops.push(op);
        for bin in ["containerd", "containerd-shim-runc-v2", "ctr"] {
            ops.push(copy(format!("{dir}/bin/{bin}"), format!("{BIN_DIR}/{bin}")));
        }

        let (path, rec) = bundle_file(ctx, "runc", node)?;
        let (op, runc) = upload(path, &rec, 0o755);
        ops.push(op);
        ops.push(copy(runc, RUNC));

        let (path, rec) = bundle_file(ctx, "cni-plugins", node)?;
        let (op, archive) = upload(path, &rec, 0o644);
        ops.push(op);
        let (op, dir) = extract(&archive, &rec);
        ops.push(op);
        let (d, c) = (shell::quote(&dir), shell::quote(CNI_BIN_DIR));
        ops.push(Op::Run(
            RunCommand::new(format!(
                "set -e\nmkdir -p {c}\nfor f in {d}/*; do [ -f \"$f\" ] || continue; cp -f -- \"$f\" {c}/; chmod 0755 {c}/\"${{f##*/}}\"; done"
            ))
            .unless(format!(
                "[ -d {c} ] && for f in {d}/*; do [ -f \"$f\" ] || continue; cmp -s -- \"$f\" {c}/\"${{f##*/}}\" || exit 1; done"
            ))
            .undo(format!(
                "for f in {d}/*; do [ -f \"$f\" ] && rm -f -- {c}/\"${{f##*/}}\"; done; rmdir {c} 2>/dev/null || true"
            )),
        ));

        let (path, rec) = bundle_file(ctx, "crictl", node)?;
        let (op, archive) = upload(path, &rec, 0o644);
        ops.push(op);
        let (op, dir) = extract(&archive, &rec);
        ops.push(op);
        ops.push(copy(format!("{dir}/crictl"), format!("{BIN_DIR}/crictl")));
        Ok(ops)
    }
}

#[derive(Debug, Clone, Serialize)]
struct AuthEntry {
    /// TOML-quoted host.
    host: String,
    /// TOML-quoted user name.
    username: String,
    /// TOML-quoted password.
    password: String,
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The major version of a containerd version string (`1.6.20`, `v2.0.4`).
fn major(version: &str) -> Option<u32> {
    version
        .trim_start_matches('v')
        .split('.')
        .next()?
        .parse()
        .ok()
}

/// The pause image's canonical reference: the bundle's (or the resolution's) image whose
/// repository's last component is `pause`.
pub fn pause_reference(ctx: &InstallContext) -> Result<String, StepError> {
    ctx.image_references()
        .into_iter()
        .find(|r| r.parse::<ImageRef>().is_ok_and(|i| i.basename() == "pause"))
        .ok_or_else(|| {
            StepError::Invalid(
                "no pause image in the bundle (or the catalog's resolution): rebuild the bundle for this cluster"
                    .to_string(),
            )
        })
}

/// config.toml, the private registry's hosts.toml, crictl.yaml and the systemd unit; the unit
/// reloaded, enabled and restarted when something changed.
pub struct ContainerdConfig {
    /// The sandbox (pause) image as nodes pull it.
    pub sandbox_image: String,
    /// `user:password` for the private registry, when `registry.auths` has one.
    pull_auth: Option<String>,
    /// The private registry speaks plain HTTP (`registry.auths.<endpoint>.plainHTTP`).
    plain_http: bool,
    files: Vec<RenderTemplate>,
}

impl ContainerdConfig {
    /// Renders every file for the cluster (the same on every node).
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let spec = &ctx.cluster.file.spec;
        let cluster = ctx.cluster.cluster_name().to_string();
        let version = containerd_version(ctx)?;
        let sandbox_image = ctx.pull_reference(&pause_reference(ctx)?)?;
        let endpoint = ctx.registry_endpoint();
        let auth = endpoint.as_deref().and_then(|e| {
            spec.registry
                .auths
                .get(e)
                .or_else(|| spec.registry.auths.get(e.split(':').next().unwrap_or(e)))
        });
        let auths: Vec<AuthEntry> = match (endpoint.as_deref(), auth) {
            (Some(e), Some(a)) => match (&a.username, &a.password) {
                (Some(u), Some(p)) => vec![AuthEntry {
                    host: toml_str(e),
                    username: toml_str(u),
                    password: toml_str(p.expose()),
                }],
                _ => Vec::new(),
            },
            _ => Vec::new(),
        };
        let mut context = tera::Context::new();
        context.insert("cluster", &cluster);
        context.insert("version", &version);
        context.insert("sandbox_image", &toml_str(&sandbox_image));
        context.insert("runc", RUNC);
        context.insert("certs_dir", CERTS_DIR);
        context.insert("auths", &auths);
        context.insert("bin_dir", BIN_DIR);
        context.insert("config", CONFIG);
        let config_template = match major(&version) {
            Some(1) => "containerd/config-v2.toml.tera",
            Some(2) => "containerd/config-v3.toml.tera",
            _ => {
                return Err(StepError::Invalid(format!(
                    "containerd {version} is not supported: use a 1.x or 2.x release"
                )))
            }
        };
        let mut files = vec![RenderTemplate::new(
            config_template,
            &context,
            CONFIG,
            // 0600: it may hold the registry password.
            if auths.is_empty() { 0o644 } else { 0o600 },
        )?];
        if let Some(e) = &endpoint {
            let plain = auth.is_some_and(|a| a.plain_http);
            let skip_verify = auth.is_some_and(|a| a.skip_tls_verify);
            context.insert("endpoint", e);
            context.insert("scheme", if plain { "http" } else { "https" });
            let ca = (!plain).then(|| format!("{CERTS_DIR}/{e}/ca.crt"));
            context.insert("ca", &ca);
            context.insert("skip_verify", &(skip_verify && !plain));
            files.push(RenderTemplate::new(
                "containerd/hosts.toml.tera",
                &context,
                format!("{CERTS_DIR}/{e}/hosts.toml"),
                0o644,
            )?);
        }
        files.push(RenderTemplate::new(
            "containerd/crictl.yaml.tera",
            &context,
            CRICTL_CONFIG,
            0o644,
        )?);
        files.push(RenderTemplate::new(
            "containerd/containerd.service.tera",
            &context,
            UNIT_FILE,
            0o644,
        )?);
        let pull_auth = auth.and_then(|a| match (&a.username, &a.password) {
            (Some(u), Some(p)) => Some(format!("{u}:{}", p.expose())),
            _ => None,
        });
        Ok(Self {
            sandbox_image,
            pull_auth,
            plain_http: auth.is_some_and(|a| a.plain_http),
            files,
        })
    }

    /// The rendered files.
    pub fn files(&self) -> &[RenderTemplate] {
        &self.files
    }
}

/// The containerd version: the bundle's (or the resolution's) file, else `runtime.version`.
fn containerd_version(ctx: &InstallContext) -> Result<String, StepError> {
    if let Some(v) = ctx
        .nodes
        .iter()
        .find_map(|n| ctx.files_for("containerd", n).into_iter().next())
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
            StepError::Invalid(
                "the containerd version is unknown: set runtime.version or install from a bundle"
                    .to_string(),
            )
        })
}

impl Step for ContainerdConfig {
    fn name(&self) -> &str {
        "configure-containerd"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops: Vec<Op> = self.files.iter().cloned().map(Op::Template).collect();
        ops.push(Op::Run(
            RunCommand::new("systemctl daemon-reload")
                .when_changed()
                .undo("systemctl daemon-reload"),
        ));
        ops.push(Op::Run(
            RunCommand::new(format!(
                "mkdir -p /etc/kubexm\necho {DATA_DIR} > {DATA_MARKER}"
            ))
            .unless(format!(
                "[ -e {DATA_MARKER} ] || [ -n \"$(ls -A {DATA_DIR} 2>/dev/null)\" ]"
            ))
            .undo(format!("rm -f {DATA_MARKER}")),
        ));
        ops.push(Op::Systemd(Systemd::new(SystemdAction::EnableNow(
            "containerd".to_string(),
        ))));
        ops.push(Op::Systemd(Systemd::new(SystemdAction::Restart {
            unit: "containerd".to_string(),
            always: false,
        })));
        ops.push(Op::Wait(WaitFor {
            what: "containerd answers on its socket".to_string(),
            check: format!(
                "{BIN_DIR}/ctr --address /run/containerd/containerd.sock version >/dev/null"
            ),
            timeout: std::time::Duration::from_secs(60),
            interval: std::time::Duration::from_secs(1),
        }));
        Ok(ops)
    }
}

/// The sandbox image pulled into containerd's `k8s.io` namespace (from the private registry).
pub struct PullPause {
    sandbox_image: String,
    /// `user:password` for the registry (kept in a root-only file on the node, never in the
    /// command line or the plan).
    auth: Option<String>,
    /// Add `--plain-http`.
    plain_http: bool,
}

/// Root-only file with `user:password` for `ctr images pull --user`.
pub const PULL_AUTH: &str = "/etc/containerd/kubexm-pull.auth";

impl Step for PullPause {
    fn name(&self) -> &str {
        "pull-pause"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let i = shell::quote(&self.sandbox_image);
        let mut ops = Vec::new();
        let user = match &self.auth {
            Some(a) => {
                ops.push(Op::Upload(UploadFile::bytes(
                    a.clone().into_bytes(),
                    PULL_AUTH,
                    0o600,
                )));
                format!(" --user \"$(cat {PULL_AUTH})\"")
            }
            None => String::new(),
        };
        let plain = if self.plain_http { " --plain-http" } else { "" };
        ops.push(Op::Run(
            RunCommand::new(format!(
                "{BIN_DIR}/ctr -n k8s.io images pull --hosts-dir {CERTS_DIR}{plain}{user} {i} >/dev/null"
            ))
            .unless(format!(
                "{BIN_DIR}/ctr -n k8s.io images ls -q | grep -qxF {i}"
            ))
            .undo(format!(
                "{BIN_DIR}/ctr -n k8s.io images rm {i} >/dev/null 2>&1 || true"
            )),
        ));
        Ok(ops)
    }
}

/// The runtime part of the `delete` pipeline, on every master and worker:
///
/// 1. containerd stopped and disabled (when its unit is KubeXM's); the Kubernetes delete module,
///    which runs before it, removes the pods (`kubeadm reset`), so no containers are left.
/// 2. What KubeXM installed is removed: containerd, containerd-shim-runc-v2, ctr and crictl in
///    `/usr/local/bin`, `/usr/local/sbin/runc`, the unit, `/etc/containerd/config.toml`, the
///    pull credentials, the private registry's `hosts.toml` (and its `ca.crt`) under
///    `/etc/containerd/certs.d`, `/etc/crictl.yaml`; emptied directories are removed.
/// 3. CNI plugins: the files of `/opt/cni/bin` whose names are in KubeXM's extracted CNI archive
///    (`/var/lib/kubexm/extract/cni-plugins-*`) are removed, then the directory if empty. When
///    the staging copy is already gone (a partial earlier delete) the plugins are left.
/// 4. containerd's data (`/var/lib/containerd`: images, snapshots; and `/opt/containerd`) is removed only when
///    [`DATA_MARKER`] says KubeXM started containerd on an absent or empty directory; data that
///    was there before the install is kept. The directory itself is kept when it is a mount
///    point, only its content removed.
/// 5. The runtime's bundle files and staging directories under `/var/lib/kubexm`.
pub struct RuntimeDeleteModule(pub Arc<InstallContext>);

/// The runtime delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> RuntimeDeleteModule {
    RuntimeDeleteModule(ctx.clone())
}

impl Module for RuntimeDeleteModule {
    fn name(&self) -> &str {
        "delete-runtime"
    }

    fn skip(&self) -> Option<String> {
        RuntimeModule(self.0.clone()).skip()
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        use super::delete::{written_by_kubexm, Ops};
        let ctx = &self.0;
        let hosts = runtime_hosts(ctx);
        let mut files: Vec<String> = ["containerd", "containerd-shim-runc-v2", "ctr", "crictl"]
            .iter()
            .map(|b| format!("{BIN_DIR}/{b}"))
            .collect();
        files.extend(
            [RUNC, UNIT_FILE, CONFIG, PULL_AUTH, CRICTL_CONFIG]
                .iter()
                .map(|s| s.to_string()),
        );
        let mut dirs = Vec::new();
        if let Some(e) = ctx.registry_endpoint() {
            let d = format!("{CERTS_DIR}/{e}");
            files.push(format!("{d}/hosts.toml"));
            files.push(format!("{d}/ca.crt"));
            dirs.push(d);
        }
        dirs.extend([CERTS_DIR.to_string(), "/etc/containerd".to_string()]);
        let q = |v: &[String]| {
            v.iter()
                .map(|p| shell::quote(p))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let gone: Vec<String> = files
            .iter()
            .chain(dirs.iter())
            .map(|p| format!("[ ! -e {} ]", shell::quote(p)))
            .collect();
        let cni_extract = format!("{EXTRACT}/cni-plugins-*");
        let staging = format!(
            "{ARTIFACTS}/containerd {ARTIFACTS}/runc {ARTIFACTS}/cni-plugins {ARTIFACTS}/crictl {EXTRACT}/containerd-* {EXTRACT}/crictl-*"
        );
        let ops = vec![
            Op::Run(
                RunCommand::new(
                    "systemctl disable --now containerd 2>/dev/null || systemctl stop containerd 2>/dev/null || true",
                )
                .unless(format!(
                    "! {} || {{ ! systemctl is-enabled -q containerd 2>/dev/null && ! systemctl is-active -q containerd; }}",
                    written_by_kubexm(UNIT_FILE)
                )),
            ),
            Op::Run(
                RunCommand::new(format!(
                    "rm -f -- {files}\nfor d in {dirs}; do rmdir -- \"$d\" 2>/dev/null || true; done\nsystemctl daemon-reload",
                    files = q(&files),
                    dirs = q(&dirs),
                ))
                .unless(gone.join(" && ")),
            ),
            Op::Run(
                RunCommand::new(format!(
                    "for x in {cni_extract}; do [ -d \"$x\" ] || continue; for f in \"$x\"/*; do [ -f \"$f\" ] && rm -f -- {CNI_BIN_DIR}/\"${{f##*/}}\"; done; done\nrmdir {CNI_BIN_DIR} 2>/dev/null && rmdir /opt/cni 2>/dev/null || true\nrm -rf -- {cni_extract} {ARTIFACTS}/cni-plugins"
                ))
                .unless(format!("! ls -d {cni_extract} {ARTIFACTS}/cni-plugins >/dev/null 2>&1")),
            ),
            Op::Run(
                RunCommand::new(format!(
                    "if [ -e {DATA_MARKER} ]; then\n  find {DATA_DIR} -mindepth 1 -maxdepth 1 -exec rm -rf -- {{}} +\n  mountpoint -q {DATA_DIR} || rmdir {DATA_DIR} 2>/dev/null || true\n  rm -rf /opt/containerd\n  rm -f {DATA_MARKER}\nfi\nrm -rf -- /run/containerd {staging}"
                ))
                .unless(format!(
                    "[ ! -e {DATA_MARKER} ] && [ ! -e /run/containerd ] && ! ls -d {staging} >/dev/null 2>&1"
                )),
            ),
        ];
        Ok(vec![Task::new("delete-containerd", hosts).step(Ops {
            name: "remove-containerd",
            ops,
        })])
    }
}

/// The nodes that run a container runtime: masters and workers.
fn runtime_hosts(ctx: &InstallContext) -> Vec<String> {
    ctx.nodes
        .iter()
        .filter(|n| n.has_role("master") || n.has_role("worker"))
        .map(|n| n.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str("plain"), "\"plain\"");
        assert_eq!(toml_str(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(toml_str("x\ny\u{1}"), "\"x\\ny\\u0001\"");
    }

    #[test]
    fn containerd_major_versions() {
        assert_eq!(major("1.6.20"), Some(1));
        assert_eq!(major("v2.0.5"), Some(2));
        assert_eq!(major("nightly"), None);
    }
}
