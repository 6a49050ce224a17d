//! Module: storage classes (KubeKey's `roleGroups.nfs` + `storage_class.nfs`, and its OpenEBS
//! local PV, `storage.openebs.basePath` / `storage_class.local`), after the plugins.
//!
//! * **NFS** (a host under `roleGroups.nfs`, at most one): first, on that host and on every
//!   node, a check that the kernel has NFS ([`nfs_kernel_check`]); on that host the NFS server package
//!   ([`kubexm_manifests::ospackages::NFS_SERVER`]), the export directory
//!   (`spec.storage.nfs.path`, made when missing and then noted in [`EXPORT_DIR_CREATED`]),
//!   KubeXM's managed block in `/etc/exports` (the directory to every Kubernetes node's internal
//!   address, [`EXPORT_OPTIONS`]), `nfs-server` enabled and `exportfs -ra` when the block
//!   changed. On every master and worker the NFS client ([`kubexm_manifests::ospackages::NFS_CLIENT`]:
//!   the kubelet mounts NFS volumes with the host's `mount.nfs`). From the first master,
//!   nfs-subdir-external-provisioner ([`NFS_PROVISIONER_VERSION`], KubeXM's manifest
//!   `templates/storage/nfs-provisioner.yaml.tera`) and the StorageClass `nfs-client`.
//! * **Local volumes** (`spec.storage.localVolume.enabled`): OpenEBS's local PV provisioner
//!   ([`LOCAL_PV_VERSION`], hostpath, `templates/storage/local-volume.yaml.tera`) and the
//!   StorageClass `local`, volumes made under `basePath` on the node of the pod.
//!
//! At most one of the two classes is the default (`default: true`; validation refuses two).
//! The nodes added later by `add-node` are not in the export's client list until the install
//! runs again (the block is rewritten from the cluster's nodes).
//!
//! `delete` ([`StorageDeleteModule`]) on the nfs host: the block out of `/etc/exports` (and
//! `exportfs -ra`), `nfs-server` disabled unless it was enabled before KubeXM installed it, the
//! export directory removed only when KubeXM made it and it is empty. The volumes' data (the
//! export's subdirectories, local volumes under `basePath`) and the OS packages stay.

use crate::runner::shell::Script;
use crate::script;
use std::sync::Arc;

use kubexm_manifests::ospackages::{PackageSet, NFS_CLIENT, NFS_SERVER};
use kubexm_manifests::resolve::{Role, LOCAL_PV_VERSION, NFS_PROVISIONER_VERSION};

use super::apply::ApplyManifest;
use super::delete::{keep_unit_state, Ops, ORIG_DIR};
use super::images::node_image;
use crate::context::InstallContext;
use crate::modules::k8s::image_named;
use crate::pipeline::ops::{
    Check, GenericStep, ManagedBlock, Op, Package, PackageSource, RunCommand, Systemd,
    SystemdAction,
};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::shell;

/// The NFS server's unit (Debian's `nfs-kernel-server` is an alias of it).
pub const NFS_UNIT: &str = "nfs-server";
/// The exports file KubeXM keeps its block in.
pub const EXPORTS: &str = "/etc/exports";
/// The export's options for every node: read-write, written to disk before the reply, no
/// subtree checks (the export is a whole directory), root not squashed (the provisioner makes
/// each volume's directory as root, and pods running as root write to it).
pub const EXPORT_OPTIONS: &str = "rw,sync,no_subtree_check,no_root_squash";
/// Where the nfs host notes that KubeXM made the export directory (its path, one line).
pub const EXPORT_DIR_CREATED: &str = "/etc/kubexm/storage/nfs-export-created";
/// The NFS provisioner's name (its StorageClass's `provisioner`).
pub const NFS_PROVISIONER: &str = "k8s-sigs.io/nfs-subdir-external-provisioner";
/// The NFS manifest's file name on the first master.
pub const NFS_MANIFEST: &str = "nfs-provisioner.yaml";
/// The local volume manifest's file name on the first master.
pub const LOCAL_MANIFEST: &str = "local-volume.yaml";

/// Whether the cluster asks for any storage (an nfs host, or local volumes).
pub fn enabled(ctx: &InstallContext) -> bool {
    !ctx.cluster.roles.nfs.is_empty() || ctx.cluster.file.spec.storage.local_enabled()
}

/// The NFS export as the cluster describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfsExport {
    /// The nfs host's name.
    pub host: String,
    /// Its internal address (the provisioner's server).
    pub server: String,
    /// The exported directory.
    pub path: String,
    /// Whether `nfs-client` is the default StorageClass.
    pub default: bool,
}

/// The NFS export, when a host is named under `roleGroups.nfs`.
pub fn nfs_export(ctx: &InstallContext) -> Option<NfsExport> {
    let host = ctx.with_role(Role::Nfs).into_iter().next()?;
    let node = ctx.node(&host)?;
    let nfs = ctx
        .cluster
        .file
        .spec
        .storage
        .nfs
        .clone()
        .unwrap_or_default();
    Some(NfsExport {
        server: node.internal_address.clone(),
        host,
        path: nfs.path,
        default: nfs.default,
    })
}

fn nfs_or_invalid(ctx: &InstallContext) -> Result<NfsExport, StepError> {
    nfs_export(ctx).ok_or_else(|| {
        StepError::Invalid("no host is named under roleGroups.nfs: there is no NFS server".into())
    })
}

fn is_default(on: bool) -> &'static str {
    if on {
        "true"
    } else {
        "false"
    }
}

/// The rendered NFS provisioner manifest (RBAC, Deployment, StorageClass `nfs-client`).
pub fn render_nfs_provisioner(ctx: &InstallContext) -> Result<String, StepError> {
    let nfs = nfs_or_invalid(ctx)?;
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("version", NFS_PROVISIONER_VERSION);
    c.insert(
        "image",
        &node_image(ctx, &image_named(ctx, "nfs-subdir-external-provisioner")?)?,
    );
    c.insert("provisioner", NFS_PROVISIONER);
    c.insert("server_name", &nfs.host);
    c.insert("server", &nfs.server);
    c.insert("path", &nfs.path);
    c.insert("default", is_default(nfs.default));
    crate::templates::render("storage/nfs-provisioner.yaml.tera", &c)
}

/// The rendered local volume manifest (RBAC, the provisioner's Deployment, StorageClass `local`).
pub fn render_local_volume(ctx: &InstallContext) -> Result<String, StepError> {
    let Some(local) = ctx.cluster.file.spec.storage.local_volume.as_ref() else {
        return Err(StepError::Invalid(
            "spec.storage.localVolume is not set".into(),
        ));
    };
    let mut c = tera::Context::new();
    c.insert("cluster", &ctx.cluster.file.metadata.name);
    c.insert("version", LOCAL_PV_VERSION);
    c.insert(
        "image",
        &node_image(ctx, &image_named(ctx, "provisioner-localpv")?)?,
    );
    c.insert(
        "helper_image",
        &node_image(ctx, &image_named(ctx, "linux-utils")?)?,
    );
    c.insert("base_path", &local.base_path);
    c.insert("default", is_default(local.default));
    crate::templates::render("storage/local-volume.yaml.tera", &c)
}

/// The lines of KubeXM's block in `/etc/exports`: the export to every master's and worker's
/// internal address.
pub fn exports_block(ctx: &InstallContext) -> Result<Vec<String>, StepError> {
    let nfs = nfs_or_invalid(ctx)?;
    let clients: Vec<String> = super::runtime::runtime_hosts(ctx)
        .iter()
        .filter_map(|n| ctx.node(n))
        .map(|n| n.internal_address.clone())
        .collect();
    let mut c = tera::Context::new();
    c.insert("cluster", ctx.cluster.cluster_name());
    c.insert("path", &nfs.path);
    c.insert("clients", &clients);
    c.insert("options", EXPORT_OPTIONS);
    let text = crate::templates::render("storage/exports-block.tera", &c)?;
    Ok(text.lines().map(str::to_string).collect())
}

/// One line of an exports file: a directory and its clients, each with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportLine {
    /// The exported directory.
    pub path: String,
    /// `(client, options)` in the order written.
    pub clients: Vec<(String, String)>,
}

/// The export lines of an exports file's text (exports(5): comments and blank lines skipped,
/// `client(options)` separated by blanks; a client without options has empty options).
/// Continuation lines and quoted paths are not read (KubeXM writes neither).
pub fn parse_exports(text: &str) -> Vec<ExportLine> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let path = words.next()?.to_string();
            let clients = words
                .map(|w| match w.split_once('(') {
                    Some((client, rest)) => (
                        client.to_string(),
                        rest.strip_suffix(')').unwrap_or(rest).to_string(),
                    ),
                    None => (w.to_string(), String::new()),
                })
                .collect();
            Some(ExportLine { path, clients })
        })
        .collect()
}

/// The storage module.
pub struct StorageModule(pub Arc<InstallContext>);

impl Module for StorageModule {
    fn name(&self) -> &str {
        "storage"
    }

    fn skip(&self) -> Option<String> {
        (!enabled(&self.0)).then(|| {
            "no host under roleGroups.nfs and spec.storage.localVolume is not enabled".to_string()
        })
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let source = super::osrepo::package_source(ctx);
        let first = ctx.first_master()?.name.clone();
        let mut tasks = Vec::new();
        if let Some(nfs) = nfs_export(ctx) {
            tasks.push(
                Task::new("nfs-server", [nfs.host.clone()])
                    .step(NfsKernelCheck { server: true })
                    .step(NfsServerPackages {
                        source: source.clone(),
                    })
                    .step(NfsExportDir {
                        path: nfs.path.clone(),
                    })
                    .step(NfsExports {
                        lines: exports_block(ctx)?,
                        path: nfs.path.clone(),
                    }),
            );
            tasks.push(
                Task::new("nfs-client", super::runtime::runtime_hosts(ctx))
                    .step(NfsKernelCheck { server: false })
                    .step(NfsClientPackages { source }),
            );
            tasks.push(Task::new("nfs-provisioner", [first.clone()]).step(
                ApplyManifest::rendered(
                    "nfs-provisioner",
                    NFS_MANIFEST,
                    render_nfs_provisioner(ctx)?.into_bytes(),
                ),
            ));
        }
        if ctx.cluster.file.spec.storage.local_enabled() {
            tasks.push(
                Task::new("local-volume", [first]).step(ApplyManifest::rendered(
                    "local-volume",
                    LOCAL_MANIFEST,
                    render_local_volume(ctx)?.into_bytes(),
                )),
            );
        }
        Ok(tasks)
    }
}

fn package(set: PackageSet, source: &PackageSource) -> Op {
    let v = |s: &[&str]| s.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
    Op::Package(Package {
        debs: v(set.debs),
        rpms: v(set.rpms),
        source: source.clone(),
    })
}

/// The check that the host's kernel has NFS, before anything is installed: the server (`nfsd`)
/// on the nfs host, the client (`nfs` / `nfs4`) on the nodes, in `/proc/filesystems` or as a
/// module `modprobe` finds. A kernel without it (a container's, a kernel built without NFS)
/// cannot serve or mount the export, whatever packages are installed.
pub fn nfs_kernel_check(server: bool) -> String {
    if server {
        "if grep -qw nfsd /proc/filesystems 2>/dev/null || modprobe -n nfsd 2>/dev/null; then exit 0; fi\n\
         echo \"this host's kernel has no NFS server: nfsd is not in /proc/filesystems and modprobe finds no nfsd module; name a host whose kernel has nfsd (CONFIG_NFSD) under roleGroups.nfs (a container, or a kernel built without NFS, cannot serve it)\" >&2\n\
         exit 1"
            .to_string()
    } else {
        "if grep -qwE 'nfs|nfs4' /proc/filesystems 2>/dev/null || modprobe -n nfs 2>/dev/null; then exit 0; fi\n\
         echo \"this node's kernel has no NFS client: nfs is not in /proc/filesystems and modprobe finds no nfs module; the kubelet cannot mount the nfs-client volumes here (use a kernel with CONFIG_NFS_FS, or leave roleGroups.nfs out)\" >&2\n\
         exit 1"
            .to_string()
    }
}

/// [`nfs_kernel_check`] on the node.
pub struct NfsKernelCheck {
    server: bool,
}

impl Step for NfsKernelCheck {
    fn name(&self) -> &str {
        if self.server {
            "nfs-server-kernel"
        } else {
            "nfs-client-kernel"
        }
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let what = if self.server {
            "kernel NFS server (nfsd)"
        } else {
            "kernel NFS client"
        };
        Ok(vec![Op::Check(Check::new(
            what,
            nfs_kernel_check(self.server),
        ))])
    }
}

/// The NFS server package on the nfs host (skipped when installed), after noting whether
/// `nfs-server` was enabled before (the delete leaves it as it found it).
pub struct NfsServerPackages {
    source: PackageSource,
}

impl Step for NfsServerPackages {
    fn name(&self) -> &str {
        "install-nfs-server"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![
            keep_unit_state(EXPORTS, NFS_UNIT),
            package(NFS_SERVER, &self.source),
        ])
    }
}

/// The NFS client on every master and worker (skipped when installed).
pub struct NfsClientPackages {
    source: PackageSource,
}

impl Step for NfsClientPackages {
    fn name(&self) -> &str {
        "install-nfs-client"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![package(NFS_CLIENT, &self.source)])
    }
}

/// The export directory: made (mode 0755) when missing, and then noted in
/// [`EXPORT_DIR_CREATED`]; an existing directory is used as it is.
pub struct NfsExportDir {
    path: String,
}

impl Step for NfsExportDir {
    fn name(&self) -> &str {
        "nfs-export-dir"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let p = shell::quoted(&self.path);
        let m = shell::quoted(EXPORT_DIR_CREATED);
        Ok(vec![Op::Run(
            RunCommand::new(script!(
                "set -e\nmkdir -p -- {p}\nchmod 0755 -- {p}\nmkdir -p -- \"$(dirname -- {m})\"\nprintf '%s\\n' {p} > {m}", p = p, m = m
            ))
            .unless(script!("[ -d {p} ]", p = p))
            .undo(script!(
                "if [ -e {m} ]; then rmdir -- {p} 2>/dev/null || true; rm -f -- {m}; fi", m = m, p = p
            )),
        )])
    }
}

/// KubeXM's block in `/etc/exports`, `nfs-server` enabled and running, and the kernel's export
/// table read again (`exportfs -ra`) when the block changed.
pub struct NfsExports {
    lines: Vec<String>,
    path: String,
}

impl Step for NfsExports {
    fn name(&self) -> &str {
        "nfs-exports"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let p = shell::quoted(&self.path);
        Ok(vec![
            Op::Block(ManagedBlock::new(EXPORTS, self.lines.clone())),
            Op::Systemd(Systemd::new(SystemdAction::EnableNow(NFS_UNIT.to_string()))),
            Op::Run(
                RunCommand::new("exportfs -ra")
                    .when_changed()
                    .verify(script!(
                        "exportfs -v | awk '{{print $1}}' | grep -qxF -- {p}",
                        p = p
                    ))
                    .undo("exportfs -ra 2>/dev/null || true"),
            ),
        ])
    }
}

/// Storage's part of the `delete` pipeline, on the nfs host (before node preparation's, which
/// removes `/etc/kubexm`): KubeXM's block out of `/etc/exports` and the export table read again,
/// `nfs-server` disabled unless it was enabled before the install, and the export directory
/// removed when KubeXM made it and it is empty. Skipped without an nfs host.
pub struct StorageDeleteModule(pub Arc<InstallContext>);

/// The storage delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> StorageDeleteModule {
    StorageDeleteModule(ctx.clone())
}

impl Module for StorageDeleteModule {
    fn name(&self) -> &str {
        "delete-storage"
    }

    fn skip(&self) -> Option<String> {
        self.0
            .cluster
            .roles
            .nfs
            .is_empty()
            .then(|| "no host is named under roleGroups.nfs".to_string())
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let nfs = nfs_or_invalid(&self.0)?;
        let block = ManagedBlock::new(EXPORTS, Vec::new());
        // trusted_shell: the revert script of a ManagedBlock op, which builds it with quote().
        let strip = Script::trusted_shell(block.revert().unwrap_or_default());
        let has_block = script!(
            "grep -qxF '{begin}' {EXPORTS} 2>/dev/null",
            begin = shell::in_single_quotes(crate::pipeline::ops::BLOCK_BEGIN)
        );
        let state = shell::quoted(&format!("{ORIG_DIR}{EXPORTS}.unit"));
        let u = shell::quoted(NFS_UNIT);
        let m = shell::quoted(EXPORT_DIR_CREATED);
        let run = |cmd: Script, unless: Script| Op::Run(RunCommand::new(cmd).unless(unless));
        Ok(vec![Task::new("delete-nfs-server", [nfs.host])
            .step(Ops {
                name: "remove-nfs-exports",
                ops: vec![run(
                    script!("{strip}\nif systemctl is-active -q {u}; then exportfs -ra; fi", strip = strip, u = u),
                    script!("! {has_block}", has_block = has_block),
                )],
            })
            .step(Ops {
                name: "disable-nfs-server",
                ops: vec![run(
                    script!("if [ \"$(cat {state} 2>/dev/null)\" != enabled ]; then systemctl disable --now {u} 2>/dev/null || systemctl stop {u} 2>/dev/null || true; fi\nrm -f -- {state}", state = state, u = u),
                    script!("[ ! -e {state} ]", state = state),
                )],
            })
            .step(Ops {
                name: "remove-nfs-export-dir",
                ops: vec![run(
                    script!("d=$(head -n 1 {m})\nrmdir -- \"$d\" 2>/dev/null || echo \"$d is not empty: kept (the volumes' data)\" >&2\nrm -f -- {m}", m = m),
                    script!("[ ! -e {m} ]", m = m),
                )],
            })])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_lines_parse_back() {
        let text = "# a comment\n\n/share/kubernetes 10.0.0.1(rw,sync) 10.0.0.2(ro)\n/srv host\n";
        let lines = parse_exports(text);
        assert_eq!(
            lines,
            [
                ExportLine {
                    path: "/share/kubernetes".into(),
                    clients: vec![
                        ("10.0.0.1".into(), "rw,sync".into()),
                        ("10.0.0.2".into(), "ro".into())
                    ],
                },
                ExportLine {
                    path: "/srv".into(),
                    clients: vec![("host".into(), String::new())],
                }
            ]
        );
    }
}
