//! Putting things into the cluster from the first master, for both installation paths: YAML
//! manifests applied with kubectl (server-side apply, so large CRDs fit), Helm charts from the
//! bundle installed with the bundle's helm (no repository access), namespaces.
//!
//! Each applied file is kept under [`MANIFESTS_DIR`] on the first master; an `.applied` file next
//! to it records the sha256 of what was last applied successfully, so a re-run applies again only
//! when the file changed (an apply that failed leaves no record and is retried).

use crate::modules::k8s::{kubectl, ADMIN_CONF};
use crate::runner::shell::Script;
use crate::script;
use std::path::PathBuf;
use std::time::Duration;

use kubexm_bundles::manifest::FileRecord;

use super::runtime::{bundle_file, copy, extract, upload, BIN_DIR};
use crate::context::InstallContext;
use crate::pipeline::ops::{CreateDir, Op, RenderTemplate, RunCommand, UploadFile};
use crate::pipeline::{Facts, Node, Step, StepError};
use crate::runner::{shell, UploadSource};

/// Where the first master keeps what KubeXM applied (root only).
pub const MANIFESTS_DIR: &str = "/etc/kubernetes/kubexm/manifests";
/// helm on the first master.
pub const HELM: &str = "/usr/local/bin/helm";

/// A file for the first master: rendered bytes, or a bundle file (with its record).
pub fn bundle_upload(path: PathBuf, rec: &FileRecord, dest: String) -> UploadFile {
    UploadFile {
        source: UploadSource::File(path),
        // Planning without a bundle, a file the catalog cannot pin has no sum yet.
        sha256: if rec.sha256.is_empty() {
            "UNPINNED".to_string()
        } else {
            rec.sha256.clone()
        },
        dest,
        mode: 0o600,
    }
}

/// `sha256sum -c` check of an `.applied` record.
fn applied(marker: &str) -> Script {
    script!("sha256sum -c --status {} 2>/dev/null", marker)
}

/// One manifest written to [`MANIFESTS_DIR`] and applied with `kubectl apply --server-side`.
pub struct ApplyManifest {
    /// Step name.
    pub name: String,
    /// The file (its `dest` is under [`MANIFESTS_DIR`]).
    pub file: UploadFile,
    /// Apply into this namespace (created when missing), for manifests without one.
    pub namespace: Option<String>,
}

impl ApplyManifest {
    /// A rendered manifest named `file` under [`MANIFESTS_DIR`].
    pub fn rendered(name: &str, file: &str, text: Vec<u8>) -> Self {
        Self {
            name: name.to_string(),
            file: UploadFile::bytes(text, format!("{MANIFESTS_DIR}/{file}"), 0o600),
            namespace: None,
        }
    }
}

impl Step for ApplyManifest {
    fn name(&self) -> &str {
        &self.name
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let dest = &self.file.dest;
        let dir = dest.rsplit_once('/').map_or(MANIFESTS_DIR, |(d, _)| d);
        let marker = format!("{dest}.applied");
        let k = kubectl();
        let mut ops = vec![Op::Mkdir(CreateDir {
            path: dir.to_string(),
            mode: 0o700,
        })];
        let mut ns = Script::empty();
        if let Some(n) = &self.namespace {
            ops.push(namespace_op(n));
            ns = script!(" -n {n}", n = n);
        }
        ops.push(Op::Upload(self.file.clone()));
        let (d, m) = (shell::quoted(dest), shell::quoted(&marker));
        ops.push(Op::Run(
            RunCommand::new(script!(
                "set -e\n{k}{ns} apply --server-side --force-conflicts --field-manager=kubexm -f {d} >/dev/null\nsha256sum {d} > {m}", k = k, ns = ns, d = d, m = m
            ))
            .unless(applied(&marker))
            .undo(script!(
                "{k}{ns} delete --ignore-not-found -f {d} >/dev/null 2>&1 || true\nrm -f {m}", k = k, ns = ns, d = d, m = m
            ))
            .timeout(Duration::from_secs(300)),
        ));
        Ok(ops)
    }
}

/// `kubectl create namespace` unless it exists.
pub fn namespace_op(namespace: &str) -> Op {
    let k = kubectl();
    let n = shell::quoted(namespace);
    Op::Run(
        RunCommand::new(script!("{k} create namespace {n} >/dev/null", k = k, n = n)).unless(
            script!(
                "{k} get namespace {n} -o name >/dev/null 2>&1",
                k = k,
                n = n
            ),
        ),
    )
}

/// A chart from the bundle installed (or upgraded) as release `release` with a values file.
pub struct HelmRelease {
    /// Step name.
    pub name: String,
    /// Release name.
    pub release: String,
    /// Namespace (created by helm when missing).
    pub namespace: String,
    /// The chart archive.
    pub chart: UploadFile,
    /// The values file.
    pub values: UploadFile,
}

impl Step for HelmRelease {
    fn name(&self) -> &str {
        &self.name
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let marker = format!("{MANIFESTS_DIR}/{}.helm.applied", self.release);
        let (c, v, m) = (
            shell::quoted(&self.chart.dest),
            shell::quoted(&self.values.dest),
            shell::quoted(&marker),
        );
        let (r, n) = (shell::quoted(&self.release), shell::quoted(&self.namespace));
        let common = script!("--namespace {n} --kubeconfig {ADMIN_CONF}", n = n);
        Ok(vec![
            Op::Mkdir(CreateDir {
                path: MANIFESTS_DIR.to_string(),
                mode: 0o700,
            }),
            Op::Upload(self.chart.clone()),
            Op::Upload(self.values.clone()),
            Op::Run(
                RunCommand::new(script!(
                    "set -e\n{HELM} upgrade --install {r} {c} {common} --create-namespace -f {v} >/dev/null\nsha256sum {c} {v} > {m}", r = r, c = c, common = common, v = v, m = m
                ))
                .unless(applied(&marker))
                .undo(script!(
                    "{HELM} uninstall {r} {common} >/dev/null 2>&1 || true\nrm -f {m}", r = r, common = common, m = m
                ))
                .timeout(Duration::from_secs(600)),
            ),
        ])
    }
}

/// A values file rendered from `template` under [`MANIFESTS_DIR`].
pub fn values_file(
    template: &'static str,
    context: &tera::Context,
    file: &str,
) -> Result<UploadFile, StepError> {
    Ok(RenderTemplate::new(template, context, format!("{MANIFESTS_DIR}/{file}"), 0o600)?.file)
}

/// helm from the bundle's release tarball (`linux-ARCH/helm`) into `/usr/local/bin`.
pub struct HelmBinary {
    /// The install context.
    pub ctx: std::sync::Arc<InstallContext>,
}

impl Step for HelmBinary {
    fn name(&self) -> &str {
        "helm-binary"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let (path, rec) = bundle_file(&self.ctx, "helm", node)?;
        let (up, archive) = upload(path, &rec, 0o644)?;
        let (ex, dir) = extract(&archive, &rec)?;
        Ok(vec![
            up,
            ex,
            copy(
                format!("{dir}/linux-{}/helm", node.arch),
                format!("{BIN_DIR}/helm"),
            ),
        ])
    }
}
