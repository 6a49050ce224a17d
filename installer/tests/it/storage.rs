//! Storage (issue 19): the `nfs` role and local volumes. This machine's kernel has no NFS
//! (neither `nfs` nor `nfsd` in /proc/filesystems, no modules to load), so neither the server
//! nor a client mount can run here, not even in the lab: what is proven is the plan of each
//! configuration (nfs on one host, local PV as the default, both with nfs as the default, none),
//! KubeXM's `/etc/exports` block written into a file and parsed back, the rendered manifests
//! (snapshotted here, accepted by a real API server in `apiserver.rs`) and the delete plan.

use std::sync::Arc;

use kubexm_install::context::InstallContext;
use kubexm_install::modules::storage::{
    exports_block, parse_exports, render_local_volume, render_nfs_provisioner, StorageModule,
    EXPORT_OPTIONS,
};
use kubexm_install::pipeline::ops::{GenericStep, ManagedBlock};
use kubexm_install::pipeline::{plan, Facts, Module};
use kubexm_install::runner::local::LocalRunner;
use kubexm_install::runner::Runner;

use crate::common::Edit as _;
use crate::kubeadm::yaml_docs;
use crate::lb::lab_context;

/// The lab cluster with a fourth host, `nfs1`, serving NFS (and `storage` as `extra` says).
pub(crate) fn lab_with_nfs(storage: &str) -> Arc<InstallContext> {
    let storage = storage.to_string();
    lab_context(move |t| {
        t.edit(
            "  roleGroups:\n",
            "    - {name: nfs1, address: 10.88.10.14, user: root, privateKeyPath: /var/tmp/kubexm-lab/labs/e2e/id_ed25519}\n  roleGroups:\n    nfs: [nfs1]\n",
        )
        .edit("  kubernetes:\n", &format!("{storage}  kubernetes:\n"))
    })
}

/// The lab cluster with local volumes as the default class, no NFS.
pub(crate) fn lab_with_local_default() -> Arc<InstallContext> {
    lab_context(|t| {
        t.edit(
            "  kubernetes:\n",
            "  storage:\n    localVolume: {enabled: true, default: true}\n  kubernetes:\n",
        )
    })
}

/// Both classes, NFS the default, a path of one's own.
pub(crate) fn lab_with_both() -> Arc<InstallContext> {
    lab_with_nfs(
        "  storage:\n    nfs: {path: /data/nfs, default: true}\n    localVolume: {enabled: true, basePath: /data/local}\n",
    )
}

/// Every task and the ops of its first host, one line each.
fn plan_text(ctx: &Arc<InstallContext>, module: &dyn Module) -> String {
    let nodes = ctx.plan_nodes();
    let mut out = Vec::new();
    for task in module.tasks().expect("tasks") {
        out.push(format!("task {} on {}", task.name, task.hosts.join(",")));
        let node = nodes
            .iter()
            .find(|n| n.name == task.hosts[0])
            .expect("node");
        for step in &task.steps {
            out.push(format!("  step {}", step.name()));
            for op in step.ops(node, &Facts::default()).expect("ops") {
                let p = op.generic().plan();
                out.push(format!("    {} {}", p.kind, p.detail));
            }
        }
    }
    out.join("\n") + "\n"
}

fn task_names(module: &dyn Module) -> Vec<String> {
    module
        .tasks()
        .expect("tasks")
        .into_iter()
        .map(|t| t.name)
        .collect()
}

fn install_modules(ctx: &Arc<InstallContext>) -> Vec<String> {
    kubexm_install::pipelines::install_pipeline(ctx)
        .modules
        .iter()
        .map(|m| m.name().to_string())
        .collect()
}

#[test]
fn no_nfs_in_this_kernel_so_nfs_on_one_host_is_proven_by_its_plan() {
    let ctx = lab_with_nfs("");
    let module = StorageModule(ctx.clone());
    assert!(module.skip().is_none());
    assert_eq!(
        task_names(&module),
        ["nfs-server", "nfs-client", "nfs-provisioner"]
    );
    let plan = plan_text(&ctx, &module);
    for want in [
        "task nfs-server on nfs1",
        "task nfs-client on node1,node2,node3",
        "task nfs-provisioner on node1",
        "nfs-kernel-server",
        "/share/kubernetes 10.88.10.11(rw,sync,no_subtree_check,no_root_squash)",
        "systemctl enable --now nfs-server",
        "exportfs -ra",
        "nfs-common",
    ] {
        assert!(plan.contains(want), "{want} missing from\n{plan}");
    }
    insta::assert_snapshot!("storage-nfs-plan", plan);
    // The whole install plans with the nfs-only host (node preparation and the OS repository on
    // it too, as on a registry host).
    let p = plan::build(
        &kubexm_install::pipelines::install_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("the install plans");
    let storage = p
        .modules
        .iter()
        .find(|m| m.name == "storage")
        .expect("storage planned");
    assert!(storage.skipped.is_none());
    // In the install after the plugins, before the addons.
    let modules = install_modules(&ctx);
    let at = modules
        .iter()
        .position(|m| m == "storage")
        .expect("storage");
    assert_eq!(modules[at - 1], "plugins");
    assert_eq!(modules[at + 1], "addons");
}

#[test]
fn local_volume_as_the_default_class_plan() {
    let ctx = lab_with_local_default();
    let module = StorageModule(ctx.clone());
    assert_eq!(task_names(&module), ["local-volume"]);
    let plan = plan_text(&ctx, &module);
    assert!(
        plan.contains("-f /etc/kubernetes/kubexm/manifests/local-volume.yaml"),
        "{plan}"
    );
    insta::assert_snapshot!("storage-local-default-plan", plan);
    let text = render_local_volume(&ctx).expect("rendered");
    let docs = yaml_docs(&text);
    let class = docs.last().expect("StorageClass");
    assert_eq!(class["kind"], "StorageClass");
    assert_eq!(class["metadata"]["name"], "local");
    assert_eq!(
        class["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"],
        "true"
    );
    assert!(class["metadata"]["annotations"]["cas.openebs.io/config"]
        .as_str()
        .is_some_and(|c| c.contains("value: \"/var/openebs/local\"")));
}

#[test]
fn both_classes_with_nfs_the_default_plan() {
    let ctx = lab_with_both();
    let module = StorageModule(ctx.clone());
    assert_eq!(
        task_names(&module),
        [
            "nfs-server",
            "nfs-client",
            "nfs-provisioner",
            "local-volume"
        ]
    );
    let plan = plan_text(&ctx, &module);
    assert!(plan.contains("/data/nfs 10.88.10.11("), "{plan}");
    insta::assert_snapshot!("storage-both-nfs-default-plan", plan);
    let default_of = |text: &str| {
        yaml_docs(text)
            .last()
            .expect("StorageClass")
            .pointer("/metadata/annotations/storageclass.kubernetes.io~1is-default-class")
            .cloned()
            .expect("annotation")
    };
    assert_eq!(
        default_of(&render_nfs_provisioner(&ctx).expect("nfs")),
        "true"
    );
    assert_eq!(
        default_of(&render_local_volume(&ctx).expect("local")),
        "false"
    );
}

#[test]
fn without_storage_nothing_is_planned() {
    let ctx = lab_context(|t| t);
    let module = StorageModule(ctx.clone());
    let reason = module.skip().expect("skipped");
    assert!(reason.contains("roleGroups.nfs"), "{reason}");
    assert!(!install_modules(&ctx).iter().any(|m| m == "storage"));
    let deletes: Vec<String> = kubexm_install::pipelines::delete_pipeline(&ctx)
        .modules
        .iter()
        .map(|m| m.name().to_string())
        .collect();
    assert!(
        !deletes.iter().any(|m| m == "delete-storage"),
        "{deletes:?}"
    );
    // A disabled localVolume is none too.
    let off = lab_context(|t| {
        t.edit(
            "  kubernetes:\n",
            "  storage:\n    localVolume: {enabled: false}\n  kubernetes:\n",
        )
    });
    assert!(StorageModule(off).skip().is_some());
}

#[test]
fn nfs_manifest_points_at_the_nfs_host_and_pulls_from_the_private_registry() {
    let ctx = lab_with_nfs("");
    let text = render_nfs_provisioner(&ctx).expect("rendered");
    let docs = yaml_docs(&text);
    assert_eq!(
        crate::plugins::kinds(&text),
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "StorageClass"
        ]
    );
    let pod = &docs[5]["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "10.88.10.11:5000/sig-storage/nfs-subdir-external-provisioner:v4.0.2"
    );
    assert_eq!(pod["volumes"][0]["nfs"]["server"], "10.88.10.14");
    assert_eq!(pod["volumes"][0]["nfs"]["path"], "/share/kubernetes");
    assert_eq!(docs[6]["metadata"]["name"], "nfs-client");
    assert_eq!(
        docs[6]["provisioner"],
        pod["containers"][0]["env"][0]["value"]
    );
    assert_eq!(
        docs[6]["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"],
        "false"
    );
    insta::assert_snapshot!("storage-nfs-provisioner-lab", text);

    let local = render_local_volume(&lab_with_local_default()).expect("rendered");
    let docs = yaml_docs(&local);
    let c = &docs[3]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["image"],
        "10.88.10.11:5000/openebs/provisioner-localpv:4.4.0"
    );
    let helper = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "OPENEBS_IO_HELPER_IMAGE")
        .expect("helper image");
    assert_eq!(
        helper["value"],
        "10.88.10.11:5000/openebs/linux-utils:4.3.0"
    );
    insta::assert_snapshot!("storage-local-volume-lab", local);
}

#[tokio::test]
async fn the_exports_block_written_to_a_file_parses_back_and_is_removed_by_its_revert() {
    let ctx = lab_with_nfs("");
    let lines = exports_block(&ctx).expect("block");
    let dir = tempfile::tempdir().expect("tempdir");
    let exports = dir.path().join("exports");
    std::fs::write(&exports, "# the host's own\n/srv/other 10.0.0.9(ro)\n").expect("write");
    let block = ManagedBlock::new(exports.display().to_string(), lines);
    let runner = LocalRunner::new("nfs1");
    assert!(!block.is_done(&runner).await.expect("check"));
    block.apply(&runner).await.expect("apply");
    assert!(
        block.is_done(&runner).await.expect("check"),
        "a second run changes nothing"
    );
    let text = std::fs::read_to_string(&exports).expect("read");
    let parsed = parse_exports(&text);
    assert_eq!(parsed.len(), 2, "{text}");
    assert_eq!(parsed[0].path, "/srv/other", "the host's own line is kept");
    assert_eq!(parsed[1].path, "/share/kubernetes");
    let want: Vec<(String, String)> = ["10.88.10.11", "10.88.10.12", "10.88.10.13"]
        .iter()
        .map(|a| ((*a).to_string(), EXPORT_OPTIONS.to_string()))
        .collect();
    assert_eq!(
        parsed[1].clients, want,
        "every node, not the nfs host itself"
    );

    let revert = block.revert().expect("revert");
    let out = runner
        .exec(&kubexm_install::runner::Exec::root(revert))
        .await
        .expect("exec");
    assert!(out.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&exports).expect("read"),
        "# the host's own\n/srv/other 10.0.0.9(ro)\n"
    );
}

#[test]
fn delete_plan_on_the_nfs_host() {
    let ctx = lab_with_nfs("");
    let p = plan::build(
        &kubexm_install::pipelines::delete_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    let modules: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    let at = modules
        .iter()
        .position(|m| *m == "delete-storage")
        .expect("delete-storage");
    assert!(
        at < modules
            .iter()
            .position(|m| *m == "delete-node-prep")
            .expect("node prep"),
        "before /etc/kubexm goes"
    );
    let module = kubexm_install::modules::storage::delete_module(&ctx);
    let plan = plan_text(&ctx, &module);
    for want in [
        "task delete-nfs-server on nfs1",
        "step remove-nfs-exports",
        "step disable-nfs-server",
        "step remove-nfs-export-dir",
    ] {
        assert!(plan.contains(want), "{want} missing from\n{plan}");
    }
    insta::assert_snapshot!("storage-delete-plan", plan);
}

/// The run ops (command, unless) of every step of the first task of `module`, by step name.
fn run_ops(ctx: &Arc<InstallContext>, module: &dyn Module) -> Vec<(String, String, String)> {
    let task = module.tasks().expect("tasks").remove(0);
    let node = ctx
        .plan_nodes()
        .into_iter()
        .find(|n| n.name == task.hosts[0])
        .expect("node");
    let mut out = Vec::new();
    for step in &task.steps {
        for op in step.ops(&node, &Facts::default()).expect("ops") {
            if let kubexm_install::pipeline::ops::Op::Run(r) = op {
                out.push((
                    step.name().to_string(),
                    r.command.to_string(),
                    r.unless.clone().unwrap_or_default().into_string(),
                ));
            }
        }
    }
    out
}

/// The nfs host's scripts run over a stand-in root (`/etc` and the export directory moved
/// under a temporary directory; `systemctl` and `exportfs` stand-ins that log their calls): the
/// install makes the export directory once and notes it; the delete strips the exports block and
/// re-exports, disables `nfs-server` only when KubeXM enabled it, removes the directory only
/// when KubeXM made it and it is empty; a second delete does nothing.
#[test]
fn nfs_host_scripts_over_a_stand_in_root() {
    let ctx = lab_with_nfs("");
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path().display().to_string();
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let log = root.path().join("calls.log");
    for tool in ["systemctl", "exportfs"] {
        let path = bin.join(tool);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"{tool} $*\" >> {}\nexit 0\n",
                log.display()
            ),
        )
        .expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // The unit's noted state first: its path holds /etc/ twice.
    // Scripts, not fixtures: each names some of these paths.
    let moved = |s: &str| {
        s.replace(
            "/etc/kubexm/orig/etc/exports.unit",
            &format!("{r}/unit-state"),
        )
        .replace("/etc/kubexm/storage/", &format!("{r}/etc/kubexm/storage/"))
        .replace("/etc/exports", &format!("{r}/etc/exports"))
        .replace("/share/kubernetes", &format!("{r}/share/kubernetes"))
    };
    let sh = |s: &str| {
        std::process::Command::new("sh")
            .args(["-c", &moved(s)])
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .status()
            .expect("sh")
            .success()
    };
    let calls = || std::fs::read_to_string(&log).unwrap_or_default();
    let export = root.path().join("share/kubernetes");
    let marker = root.path().join("etc/kubexm/storage/nfs-export-created");

    // Install: the export directory, once.
    let install = run_ops(&ctx, &StorageModule(ctx.clone()));
    let (_, make, made) = install
        .iter()
        .find(|(s, _, _)| s == "nfs-export-dir")
        .expect("export dir step");
    assert!(!sh(made), "missing: the step runs");
    assert!(sh(make));
    assert!(export.is_dir());
    assert_eq!(
        std::fs::read_to_string(&marker).expect("marker").trim(),
        export.display().to_string()
    );
    assert!(sh(made), "a second run skips it");

    // What the install left: the block among the host's own lines, nfs-server noted disabled.
    let exports = root.path().join("etc/exports");
    let block = exports_block(&ctx).expect("block").join("\n");
    std::fs::write(
        &exports,
        format!("/srv/own 10.0.0.9(ro)\n# BEGIN KubeXM Managed Block\n{block}\n# END KubeXM Managed Block\n"),
    )
    .expect("write");
    let unit = root.path().join("unit-state");
    std::fs::write(&unit, "disabled\n").expect("write");

    let delete = run_ops(&ctx, &kubexm_install::modules::storage::delete_module(&ctx));
    let names: Vec<&str> = delete.iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(
        names,
        [
            "remove-nfs-exports",
            "disable-nfs-server",
            "remove-nfs-export-dir"
        ]
    );
    for (name, command, unless) in &delete {
        assert!(!sh(unless), "{name}: there is something to do");
        assert!(sh(command), "{name}");
        assert!(sh(unless), "{name}: done, a second delete skips it");
    }
    assert_eq!(
        std::fs::read_to_string(&exports).expect("read"),
        "/srv/own 10.0.0.9(ro)\n",
        "only KubeXM's block goes"
    );
    assert_eq!(
        calls(),
        "systemctl is-active -q nfs-server\nexportfs -ra\nsystemctl disable --now nfs-server\n"
    );
    assert!(!export.exists() && !marker.exists() && !unit.exists());

    // A server that was enabled before stays enabled; a directory holding volumes stays.
    std::fs::write(&log, "").expect("truncate");
    std::fs::write(&unit, "enabled\n").expect("write");
    std::fs::create_dir_all(export.join("default-data-pvc-1")).expect("mkdir");
    std::fs::write(&marker, format!("{}\n", export.display())).expect("write");
    for (name, command, _) in &delete[1..] {
        assert!(sh(command), "{name}");
    }
    assert_eq!(calls(), "", "nfs-server left as it was");
    assert!(
        export.join("default-data-pvc-1").is_dir(),
        "the volumes' data is kept"
    );
    assert!(!marker.exists());
}

/// This machine's kernel has no NFS (measured: neither `nfs` nor `nfsd` in /proc/filesystems,
/// no /lib/modules for modprobe): the install's first step on the nfs host and on the nodes
/// refuses it, saying what is missing and what to do, before any package is installed.
#[test]
fn this_kernel_has_no_nfs_so_the_kernel_checks_refuse_it() {
    use kubexm_install::modules::storage::nfs_kernel_check;
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let has = |name: &str| {
        filesystems
            .lines()
            .any(|l| l.split_whitespace().last() == Some(name))
    };
    let run = |server: bool| {
        std::process::Command::new("sh")
            .args(["-c", &nfs_kernel_check(server)])
            .output()
            .expect("sh")
    };
    let modules = std::path::Path::new("/lib/modules").exists();
    if has("nfsd") || modules {
        eprintln!("SKIPPED: this kernel may have nfsd; the refusal is proven where it has none");
    } else {
        let out = run(true);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no NFS server") && err.contains("roleGroups.nfs"),
            "{err}"
        );
    }
    if has("nfs") || has("nfs4") || modules {
        eprintln!("SKIPPED: this kernel may have the NFS client");
    } else {
        let out = run(false);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no NFS client"), "{err}");
    }
    // The checks come first, on the hosts they are about.
    let ctx = lab_with_nfs("");
    let plan = plan_text(&ctx, &StorageModule(ctx.clone()));
    assert!(
        plan.contains(
            "task nfs-server on nfs1\n  step nfs-server-kernel\n    check kernel NFS server (nfsd)"
        ),
        "{plan}"
    );
    assert!(
        plan.contains("task nfs-client on node1,node2,node3\n  step nfs-client-kernel"),
        "{plan}"
    );
}
