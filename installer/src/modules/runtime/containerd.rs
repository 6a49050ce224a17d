//! containerd from the bundle (containerd, runc, CNI plugins, crictl): containerd,
//! containerd-shim-runc-v2 and ctr in `/usr/local/bin`, runc as `/usr/local/sbin/runc`.
//! `/etc/containerd/config.toml` (format 2 for containerd 1.x, 3 for 2.x) uses the systemd cgroup
//! driver, the pause image from the private registry as sandbox image, and
//! `/etc/containerd/certs.d` for registry hosts; the private registry gets a `hosts.toml` (its
//! CA, `ca.crt` beside it, is uploaded by the registry module), and every upstream registry of
//! [`mirrored_registries`] one that sends its pulls to the private registry.

use std::sync::Arc;

use serde::Serialize;

use super::common::{
    cni_plugin_ops, component_version, copy, crictl_config, crictl_ops, runc_ops, runtime_hosts,
    sandbox_image, start_daemon, upload_and_extract, PrivateRegistry, PullPause, ARTIFACTS,
    BIN_DIR, EXTRACT, RUNC,
};
use super::cri::Cri;
use crate::context::InstallContext;
use crate::pipeline::ops::{Op, RenderTemplate};
use crate::pipeline::{Facts, Node, Step, StepError, Task};

/// containerd's registry host directory.
pub const CERTS_DIR: &str = "/etc/containerd/certs.d";
/// containerd's configuration.
pub const CONFIG: &str = "/etc/containerd/config.toml";
/// containerd's root (images, snapshots, content).
pub const DATA_DIR: &str = "/var/lib/containerd";
/// Written when KubeXM started containerd on an absent or empty [`DATA_DIR`]: `delete` then
/// removes the data; without it the data was there before and is kept.
pub const DATA_MARKER: &str = "/etc/kubexm/containerd-data.created";
/// The Kata Containers configuration the `kata` runtime handler runs with (spec.kubernetes.kata):
/// kata-deploy installs Kata under `/opt/kata` and its QEMU configuration here, and puts the
/// shim `containerd-shim-kata-v2` into `/usr/local/bin`, where containerd finds it by the
/// runtime type `io.containerd.kata.v2`.
pub const KATA_CONFIG: &str = "/opt/kata/share/defaults/kata-containers/configuration-qemu.toml";
/// The unit file KubeXM writes.
pub const UNIT_FILE: &str = "/etc/systemd/system/containerd.service";
/// Root-only file older KubeXM versions kept `user:password` in for `ctr images pull --user`
/// (credentials on a command line); removed on delete.
pub const PULL_AUTH: &str = "/etc/containerd/kubexm-pull.auth";

/// The `install-containerd` task on every master and worker.
pub(super) fn tasks(ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
    let config = ContainerdConfig::new(ctx)?;
    // Through CRI: containerd reads the registry's hosts.toml and credentials from its config.
    let pull = PullPause::crictl(&config.sandbox_image);
    Ok(vec![Task::new("install-containerd", runtime_hosts(ctx))
        .step(ContainerdBinaries { ctx: ctx.clone() })
        .step(config)
        .step(pull)])
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
        let (mut ops, dir) = upload_and_extract(ctx, "containerd", node)?;
        for bin in ["containerd", "containerd-shim-runc-v2", "ctr"] {
            ops.push(copy(format!("{dir}/bin/{bin}"), format!("{BIN_DIR}/{bin}")));
        }
        ops.extend(runc_ops(ctx, node)?);
        ops.extend(cni_plugin_ops(ctx, node)?);
        ops.extend(crictl_ops(ctx, node)?);
        Ok(ops)
    }
}

#[derive(Debug, Clone, Serialize)]
struct AuthEntry {
    /// Registry host (the template quotes it for TOML).
    host: String,
    /// User name.
    username: String,
    /// Password.
    password: String,
}

/// Whether `version` is containerd 2.1 or later (`2.1.0`, `v2.2.1`).
fn at_least_2_1(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split('.');
    let major: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    (major, minor) >= (2, 1)
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

/// Upstream registries containerd resolves from the private registry whatever the manifests
/// say: the ones Kubernetes, its addons and the usual Helm charts pull from (metrics-server's
/// chart defaults to `registry.k8s.io/metrics-server/metrics-server`), plus every registry an
/// image of the bundle (or the resolution) names.
pub const MIRRORED_REGISTRIES: &[&str] = &[
    "registry.k8s.io",
    "k8s.gcr.io",
    "docker.io",
    "quay.io",
    "ghcr.io",
];

/// The registries that get a mirror `hosts.toml` (sorted, without the private registry).
pub fn mirrored_registries(ctx: &InstallContext) -> Vec<String> {
    let endpoint = ctx.registry_endpoint();
    let mut out: std::collections::BTreeSet<String> = MIRRORED_REGISTRIES
        .iter()
        .map(|r| (*r).to_string())
        .collect();
    for reference in ctx.image_references() {
        if let Ok(r) = reference.parse::<kubexm_manifests::image_ref::ImageRef>() {
            out.insert(r.registry);
        }
    }
    out.into_iter()
        // A registry name becomes a directory name: only host[:port] spellings.
        .filter(|r| {
            Some(r) != endpoint.as_ref()
                && !r.is_empty()
                && r.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
                && !r.starts_with('.')
        })
        .collect()
}

/// The path a mirror request is sent under, `/v2/<namespace>` with `override_path` when images
/// are pushed under a namespace, empty without one; `None` when the rewrite flattens paths
/// (`registry.k8s.io/metrics-server/metrics-server` is then `REG/metrics-server`, a mapping a
/// containerd mirror cannot express: only rewritten references pull).
///
/// containerd (docs/hosts.md): a host with `override_path = true` takes its URL path as the API
/// root, so `registry.k8s.io/coredns/coredns` is fetched as `<host>/v2/<namespace>/coredns/coredns`,
/// exactly where [`ImageRef::in_private_registry`](kubexm_manifests::image_ref::ImageRef::in_private_registry)
/// with `keep-path` pushed it.
pub fn mirror_path(ctx: &InstallContext) -> Option<String> {
    let r = &ctx.cluster.file.spec.registry;
    if r.rewrite != kubexm_manifests::model::RewriteMode::KeepPath {
        return None;
    }
    Some(
        ctx.registry_namespace()
            .map(|n| n.trim_matches('/').to_string())
            .filter(|n| !n.is_empty())
            .map(|n| format!("/v2/{n}"))
            .unwrap_or_default(),
    )
}

/// config.toml, the private registry's hosts.toml, crictl.yaml and the systemd unit; the unit
/// reloaded, enabled and restarted when something changed.
pub struct ContainerdConfig {
    /// The sandbox (pause) image as nodes pull it.
    pub sandbox_image: String,
    files: Vec<RenderTemplate>,
}

impl ContainerdConfig {
    /// Renders every file for the cluster (the same on every node).
    pub fn new(ctx: &InstallContext) -> Result<Self, StepError> {
        let cluster = ctx.cluster.cluster_name().to_string();
        let version = component_version(ctx, "containerd")?;
        let sandbox_image = sandbox_image(ctx)?;
        let registry = PrivateRegistry::of(ctx);
        let auths: Vec<AuthEntry> = registry
            .as_ref()
            .and_then(|r| {
                r.credentials().map(|(u, p)| AuthEntry {
                    host: r.endpoint.clone(),
                    username: u.to_owned(),
                    password: p.to_owned(),
                })
            })
            .into_iter()
            .collect();
        let mut context = tera::Context::new();
        context.insert("cluster", &cluster);
        context.insert("version", &version);
        // containerd 2.1 deprecated the CRI plugin's `cni.bin_dir` for the list `bin_dirs`
        // (containerd RELEASES / docs/cri/config.md, v2.1).
        context.insert("cni_bin_dirs", &at_least_2_1(&version));
        context.insert("sandbox_image", &sandbox_image);
        context.insert("runc", RUNC);
        context.insert("certs_dir", CERTS_DIR);
        context.insert("auths", &auths);
        context.insert("bin_dir", BIN_DIR);
        context.insert("config", CONFIG);
        context.insert(
            "restrict_oom_score_adj",
            &ctx.cluster
                .file
                .spec
                .runtime
                .containerd
                .restrict_oom_score_adj,
        );
        // spec.kubernetes.kata: the `kata` handler the RuntimeClass of the same name names.
        context.insert("kata", &ctx.cluster.file.spec.kubernetes.kata.enabled);
        context.insert("kata_config", KATA_CONFIG);
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
        if let Some(r) = &registry {
            let e = &r.endpoint;
            context.insert("endpoint", e);
            context.insert("scheme", if r.plain_http { "http" } else { "https" });
            let ca = (!r.plain_http).then(|| format!("{CERTS_DIR}/{e}/ca.crt"));
            context.insert("ca", &ca);
            context.insert("skip_verify", &r.skip_verify);
            files.push(RenderTemplate::new(
                "containerd/hosts.toml.tera",
                &context,
                format!("{CERTS_DIR}/{e}/hosts.toml"),
                0o644,
            )?);
            if let Some(path) = mirror_path(ctx) {
                context.insert("path", &path);
                for upstream in mirrored_registries(ctx) {
                    context.insert("upstream", &upstream);
                    files.push(RenderTemplate::new(
                        "containerd/mirror.toml.tera",
                        &context,
                        format!("{CERTS_DIR}/{upstream}/hosts.toml"),
                        0o644,
                    )?);
                }
            }
        }
        files.push(crictl_config(ctx, &Cri::Containerd.endpoint())?);
        files.push(RenderTemplate::new(
            "containerd/containerd.service.tera",
            &context,
            UNIT_FILE,
            0o644,
        )?);
        Ok(Self {
            sandbox_image,
            files,
        })
    }

    /// The rendered files.
    pub fn files(&self) -> &[RenderTemplate] {
        &self.files
    }
}

impl Step for ContainerdConfig {
    fn name(&self) -> &str {
        "configure-containerd"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops: Vec<Op> = self.files.iter().cloned().map(Op::Template).collect();
        ops.extend(start_daemon(
            &["containerd"],
            (DATA_MARKER, DATA_DIR),
            (
                "containerd",
                format!(
                    "{BIN_DIR}/ctr --address {} version >/dev/null",
                    Cri::Containerd.socket()
                ),
            ),
        ));
        Ok(ops)
    }
}

/// containerd's part of the `delete` pipeline, on every master and worker:
///
/// 1. containerd stopped and disabled (when its unit is KubeXM's).
/// 2. What KubeXM installed is removed: containerd, containerd-shim-runc-v2, ctr and crictl in
///    `/usr/local/bin`, `/usr/local/sbin/runc`, the unit, `/etc/containerd/config.toml`, the
///    pull credentials, the private registry's `hosts.toml` (and its `ca.crt`) under
///    `/etc/containerd/certs.d`, `/etc/crictl.yaml`; emptied directories are removed.
/// 3. The CNI plugins KubeXM copied ([`super::common::remove_cni_plugins`]).
/// 4. containerd's data (`/var/lib/containerd`: images, snapshots; and `/opt/containerd`) only
///    when [`DATA_MARKER`] says KubeXM started containerd on an absent or empty directory.
/// 5. The runtime's bundle files and staging directories under `/var/lib/kubexm`.
pub(super) fn delete_tasks(ctx: &Arc<InstallContext>) -> Result<Vec<Task>, StepError> {
    use crate::modules::delete::Ops;
    let mut files: Vec<String> = ["containerd", "containerd-shim-runc-v2", "ctr", "crictl"]
        .iter()
        .map(|b| format!("{BIN_DIR}/{b}"))
        .collect();
    files.extend(
        [
            RUNC,
            UNIT_FILE,
            CONFIG,
            PULL_AUTH,
            super::common::CRICTL_CONFIG,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut dirs = Vec::new();
    if let Some(e) = ctx.registry_endpoint() {
        let d = format!("{CERTS_DIR}/{e}");
        files.push(format!("{d}/hosts.toml"));
        files.push(format!("{d}/ca.crt"));
        dirs.push(d);
        if mirror_path(ctx).is_some() {
            for upstream in mirrored_registries(ctx) {
                let d = format!("{CERTS_DIR}/{upstream}");
                files.push(format!("{d}/hosts.toml"));
                dirs.push(d);
            }
        }
    }
    dirs.extend([CERTS_DIR.to_string(), "/etc/containerd".to_string()]);
    let staging = format!(
        "/run/containerd {ARTIFACTS}/containerd {ARTIFACTS}/runc {ARTIFACTS}/crictl {EXTRACT}/containerd-* {EXTRACT}/crictl-*"
    );
    let ops = vec![
        super::common::stop_units(&["containerd"], UNIT_FILE),
        super::common::remove_paths(&files, &dirs),
        super::common::remove_cni_plugins(),
        super::common::remove_data(DATA_MARKER, &[DATA_DIR, "/opt/containerd"], &staging),
    ];
    Ok(vec![Task::new("delete-containerd", runtime_hosts(ctx))
        .step(Ops {
            name: "remove-containerd",
            ops,
        })])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_major_versions() {
        assert_eq!(major("1.6.20"), Some(1));
        assert_eq!(major("v2.0.5"), Some(2));
        assert_eq!(major("nightly"), None);
    }

    /// containerd v2.1 deprecated the CRI plugin's `cni.bin_dir` for `bin_dirs`.
    #[test]
    fn cni_bin_dirs_from_2_1() {
        assert!(!at_least_2_1("1.7.28"));
        assert!(!at_least_2_1("2.0.5"));
        assert!(at_least_2_1("2.1.0"));
        assert!(at_least_2_1("v2.2.1"));
    }
}
