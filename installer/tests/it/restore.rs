//! `restore`: the plan of the restore pipeline on the lab cluster (kubeadm path, KubeXM's
//! etcd) and on the kubexm path, and what each step does on the nodes.

use std::path::Path;
use std::sync::Arc;

use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::modules::backup::restore::{
    Restore, RestoreData, Snapshot, PARKED, SNAPSHOT_ON_NODE,
};
use kubexm_install::pipeline::plan::{self, Plan};
use kubexm_install::pipelines::restore_pipeline;

use crate::common::repo;
use crate::common::Edit as _;

fn context(work: &Path, edit: impl Fn(String) -> String) -> Arc<InstallContext> {
    let text = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab yaml");
    let file = work.join("cluster.yaml");
    std::fs::write(&file, edit(text)).expect("write");
    let catalog = repo().join("tests/lab/mirror/catalog-lab.yaml");
    Arc::new(load_context(&file, Some(&catalog), None, work).expect("cluster loads"))
}

fn restore(ctx: &Arc<InstallContext>, work: &Path) -> Restore {
    let snap = work.join("snapshot.db");
    std::fs::write(&snap, b"etcd snapshot stand-in bytes").expect("write");
    Restore {
        ctx: ctx.clone(),
        snapshot: Snapshot {
            file: snap,
            sha256: kubexm_bundles::hash::sha256_hex(b"etcd snapshot stand-in bytes"),
            id: "0123456789abcdef-0".into(),
        },
    }
}

fn plan_of(r: &Restore) -> Plan {
    plan::build(
        &restore_pipeline(r),
        &r.ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan")
}

fn outline(p: &Plan) -> String {
    outline_with(p, false)
}

/// One line per task (`module / task on hosts`), with its steps' names when `steps`.
pub(crate) fn outline_with(p: &Plan, steps: bool) -> String {
    let mut s = String::new();
    for m in &p.modules {
        match &m.skipped {
            Some(why) => s.push_str(&format!("{} — skipped: {why}\n", m.name)),
            None => {
                for t in &m.tasks {
                    let names: Vec<&str> = t.steps.iter().map(|st| st.name.as_str()).collect();
                    s.push_str(&format!(
                        "{} / {} on {}{}{}\n",
                        m.name,
                        t.name,
                        t.hosts.join(","),
                        if t.parallel { "" } else { " (one at a time)" },
                        if steps {
                            format!(": {}", names.join(", "))
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
    }
    s
}

#[test]
fn the_restore_stops_everything_replaces_each_members_data_then_starts_in_order() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| t);
    let r = restore(&ctx, work.path());
    let p = plan_of(&r);
    let o = outline(&p);
    insta::assert_snapshot!("restore-outline-kubeadm", o);
    let order: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        order,
        [
            "stop-control-plane",
            "stop-etcd",
            "restore-etcd-data",
            "start-etcd",
            "start-control-plane",
            "restart-node-agents"
        ]
    );
    assert!(
        o.contains(
            "start-control-plane / start-control-plane on node1,node2,node3 (one at a time)"
        ),
        "{o}"
    );
    let text = p.to_text();
    assert!(text.contains(&format!("-> {SNAPSHOT_ON_NODE}")), "{text}");
    assert!(
        text.contains(PARKED),
        "kubeadm path parks the static pod manifests:\n{text}"
    );
    // Each member restores under its own name and peer URL, with the cluster's token.
    let layout = kubexm_install::modules::etcd::EtcdLayout::from_context(&ctx);
    for m in &layout.members {
        let script = RestoreData(r.clone()).script(&m.name).expect("script");
        assert!(script.contains(&format!("--name {}", m.name)), "{script}");
        assert!(script.contains(&layout.peer_url(m)), "{script}");
        assert!(script.contains(&layout.initial_cluster()), "{script}");
        assert!(
            script.contains(&format!("kubexm-{}-etcd", layout.cluster)),
            "{script}"
        );
        assert!(
            script.contains(&format!(
                "mv {} {}.before-restore-0123456789abcdef-0",
                layout.data_dir, layout.data_dir
            )),
            "the old data is kept:\n{script}"
        );
    }
    assert!(RestoreData(r.clone())
        .script("registry-not-a-member")
        .is_err());
}

#[test]
fn the_kubexm_path_stops_and_starts_units_and_stacked_etcd_is_not_restored() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| {
        t.edit("    type: kubeadm\n", "    type: kubexm\n")
    });
    let p = plan_of(&restore(&ctx, work.path()));
    let text = p.to_text();
    assert!(
        text.contains("systemctl stop kube-apiserver kube-controller-manager kube-scheduler"),
        "{text}"
    );
    assert!(!text.contains(PARKED), "{text}");
    assert!(
        text.contains("super-admin.conf"),
        "readyz with the kubexm path's kubeconfig:\n{text}"
    );

    let work = tempfile::tempdir().expect("tempdir");
    let stacked = context(work.path(), |t| {
        t.edit(
            "  etcd:\n    type: kubexm\n",
            "  etcd:\n    type: kubeadm\n",
        )
    });
    let p = plan_of(&restore(&stacked, work.path()));
    assert!(
        p.modules.iter().all(|m| m
            .skipped
            .as_deref()
            .is_some_and(|w| w.contains("etcd.type is not kubexm"))),
        "{}",
        outline(&p)
    );
}

/// `restore --fresh` is the install pipeline with etcd's data restored on every member before
/// its first start, and (kubeadm path) the backup's CAs on the first master before `kubeadm init`.
#[test]
fn the_fresh_restore_is_an_install_that_keeps_the_backups_identity_and_data() {
    use kubexm_install::modules::backup::restore_fresh::{
        FreshRestore, IdentityFile, KubeadmCaModule, KUBEADM_IDENTITY,
    };
    use kubexm_install::pipeline::Module;
    use kubexm_install::pipelines::{install_pipeline, restore_fresh_pipeline};

    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| t);
    let identity: Vec<IdentityFile> = KUBEADM_IDENTITY
        .iter()
        .map(|(name, mode)| {
            let local = work.path().join(name);
            std::fs::write(&local, name.as_bytes()).expect("write");
            IdentityFile {
                name,
                local,
                sha256: kubexm_bundles::hash::sha256_hex(name.as_bytes()),
                mode: *mode,
            }
        })
        .collect();
    let f = FreshRestore {
        restore: restore(&ctx, work.path()),
        kubeadm_identity: identity,
    };
    let p = plan::build(
        &restore_fresh_pipeline(&f),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    let o = outline_with(&p, true);
    insta::assert_snapshot!("restore-fresh-outline-kubeadm", o);
    // The same modules as an install, etcd's replaced and the CAs put before kubeadm.
    let install = plan::build(
        &install_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("install plan");
    let mut want: Vec<String> = install.modules.iter().map(|m| m.name.clone()).collect();
    let etcd = want.iter().position(|m| m == "etcd").expect("etcd module");
    want[etcd] = "etcd-from-backup".into();
    let kubeadm = want
        .iter()
        .position(|m| m == "kubeadm")
        .expect("kubeadm module");
    want.insert(kubeadm, "kubeadm-ca-from-backup".into());
    let got: Vec<String> = p.modules.iter().map(|m| m.name.clone()).collect();
    assert_eq!(got, want);
    assert!(
        o.contains("install-etcd on node1,node2,node3: etcd-binaries, etcd-config, restore-etcd-data, start-etcd"),
        "the data is restored after the configuration and before the first start:\n{o}"
    );
    assert!(
        o.contains("kubeadm-ca-from-backup / restore-kubeadm-ca on node1: restore-kubeadm-ca"),
        "{o}"
    );
    let text = p.to_text();
    for (name, mode) in KUBEADM_IDENTITY {
        assert!(
            text.contains(&format!("-> /etc/kubernetes/pki/{name} ({mode:o})")),
            "{name} uploaded with mode {mode:o}:\n{text}"
        );
    }

    // A missing identity file is refused when the plan is built, naming what is needed.
    let short = FreshRestore {
        kubeadm_identity: f.kubeadm_identity[..5].to_vec(),
        ..f.clone()
    };
    let err = plan::build(
        &restore_fresh_pipeline(&short),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect_err("5 of 6");
    assert!(
        err.to_string().contains("5 of kubeadm's 6 identity files"),
        "{err}"
    );

    // kubexm path: the CAs come from the control host's key directory.
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| {
        t.edit("    type: kubeadm\n", "    type: kubexm\n")
    });
    let f = FreshRestore {
        restore: restore(&ctx, work.path()),
        kubeadm_identity: Vec::new(),
    };
    let skipped = KubeadmCaModule(f)
        .skip()
        .expect("skipped on the kubexm path");
    assert!(
        skipped.contains("control host's key directory"),
        "{skipped}"
    );
}

use crate::day2::cli;

/// keygen never overwrites a key; verify refuses a backup changed by one byte, and a key file
/// others can read; restore needs a recorded cluster and says how to get one.
#[test]
fn cli_backup_keys_and_verification() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().expect("tempdir");
    let key = work.path().join("k.key");
    let k = key.display().to_string();
    let out = cli(work.path(), &["backup", "keygen", "--key-file", &k]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::metadata(&key).expect("key").permissions().mode() & 0o777,
        0o600
    );
    let first = std::fs::read(&key).expect("read");
    let again = cli(work.path(), &["backup", "keygen", "--key-file", &k]);
    assert!(!again.status.success());
    assert_eq!(
        std::fs::read(&key).expect("read"),
        first,
        "an existing key is never overwritten"
    );

    // A backup made by the library with that key, then changed by one byte.
    let loaded = kubexm_install::backup::BackupKey::load(&key).expect("key loads");
    let mut s =
        kubexm_install::backup::Staging::new(&work.path().join("scratch")).expect("staging");
    std::fs::write(s.path_for("etcd/snapshot.db").expect("path"), b"snap").expect("write");
    s.add("etcd/snapshot.db", "etcd snapshot").expect("add");
    let file = work.path().join("b.kxbak");
    s.seal(&loaded, "lab", "node1", &file).expect("seal");
    let f = file.display().to_string();
    let ok = cli(
        work.path(),
        &["backup", "verify", "--backup", &f, "--key-file", &k],
    );
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success() && said.contains("cluster lab") && said.contains("etcd/snapshot.db"),
        "{said}"
    );
    let mut bytes = std::fs::read(&file).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&file, &bytes).expect("write");
    let bad = cli(
        work.path(),
        &["backup", "verify", "--backup", &f, "--key-file", &k],
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("wrong key, or the file was changed"),
        "{err}"
    );

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let open = cli(
        work.path(),
        &["backup", "verify", "--backup", &f, "--key-file", &k],
    );
    let err = String::from_utf8_lossy(&open.stderr);
    assert!(!open.status.success() && err.contains("chmod 600"), "{err}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let r = cli(
        work.path(),
        &["restore", "--backup", &f, "--key-file", &k, "--yes"],
    );
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && err.contains("no cluster is recorded"),
        "{err}"
    );

    // A fresh restore needs the bundle the new nodes are installed from (a usage error, exit 2).
    let r = cli(
        work.path(),
        &[
            "restore",
            "--fresh",
            "--backup",
            &f,
            "--key-file",
            &k,
            "--yes",
        ],
    );
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        r.status.code() == Some(2) && err.contains("restore --fresh needs --bundle FILE"),
        "{err}"
    );
}

/// Records `ctx` (its cluster.yaml in `work`) as installed in the work directory `work`, as
/// `install` does when it finishes; returns the cluster name.
pub(crate) fn record_installed(work: &Path, ctx: &InstallContext) -> String {
    use kubexm_install::record::{self, Applied, Operation, Outcome, Records};
    let yaml = std::fs::read_to_string(work.join("cluster.yaml")).expect("read");
    let op = Operation {
        operation: "install".into(),
        nodes: ctx.all(),
        started_at: record::now(),
        finished_at: record::now(),
        seconds: 1.0,
        result: Outcome::Succeeded,
        error: None,
        notes: Vec::new(),
        cluster_yaml_sha256: record::sha256_hex(yaml.as_bytes()),
        bundle_digest: None,
    };
    let name = ctx.cluster.cluster_name().to_string();
    Records::new(work)
        .finish(
            &name,
            op,
            Some(Applied {
                cluster_yaml: &yaml,
                base_dir: work,
                bundle_digest: None,
                nodes: record::membership(&ctx.cluster),
                present: true,
            }),
        )
        .expect("record");
    name
}

/// `backup schedule` writes a timer and a service that systemd accepts, running `backup create
/// --keep N` for the recorded cluster; `--remove` takes them away.
#[test]
fn cli_backup_schedule_writes_units_systemd_accepts() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| t);
    let name = record_installed(work.path(), &ctx);
    let key = work.path().join("k.key");
    let k = key.display().to_string();
    assert!(cli(work.path(), &["backup", "keygen", "--key-file", &k])
        .status
        .success());
    // A units directory that does not exist yet is made.
    let units = work.path().join("units");
    let u = units.display().to_string();
    let out = cli(
        work.path(),
        &[
            "backup",
            "schedule",
            "--key-file",
            &k,
            "--on-calendar",
            "*-*-* 02:30:00",
            "--keep",
            "3",
            "--systemd-dir",
            &u,
            "--write-only",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let service = units.join(format!("kubexm-backup-{name}.service"));
    let timer = units.join(format!("kubexm-backup-{name}.timer"));
    let text = std::fs::read_to_string(&service).expect("service");
    assert!(
        text.contains(&format!(
            "backup create --cluster {name} --key-file {k} --keep 3"
        )),
        "{text}"
    );
    assert!(
        text.contains(env!("CARGO_BIN_EXE_kubexm-install")),
        "{text}"
    );
    assert!(std::fs::read_to_string(&timer)
        .expect("timer")
        .contains("OnCalendar=*-*-* 02:30:00"));
    verify_units(&service, &timer);
    let bad = cli(
        work.path(),
        &[
            "backup",
            "schedule",
            "--key-file",
            &k,
            "--on-calendar",
            "daily\nExecStartPre=/bin/sh",
            "--systemd-dir",
            &u,
            "--write-only",
        ],
    );
    assert!(!bad.status.success());
    remove_units(work.path(), "backup", &units, &service, &timer);
}

/// systemd accepts the units (where systemd-analyze is installed).
pub(crate) fn verify_units(service: &Path, timer: &Path) {
    if Path::new("/usr/bin/systemd-analyze").exists() {
        let v = std::process::Command::new("systemd-analyze")
            .arg("verify")
            .arg(service)
            .arg(timer)
            .output()
            .expect("systemd-analyze");
        let said = String::from_utf8_lossy(&v.stderr);
        assert!(v.status.success(), "systemd-analyze verify: {said}");
    }
}

/// `<verb> schedule --remove` removes both units from `units`.
pub(crate) fn remove_units(work: &Path, verb: &str, units: &Path, service: &Path, timer: &Path) {
    let u = units.display().to_string();
    let gone = cli(
        work,
        &[
            verb,
            "schedule",
            "--remove",
            "--systemd-dir",
            &u,
            "--write-only",
        ],
    );
    assert!(
        gone.status.success(),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    assert!(!service.exists() && !timer.exists());
}

/// The backup format as documented, written by an independent implementation (Python's
/// `cryptography` AESGCM + `tarfile`, tests/fuzz/seeds/make-seeds), is read by KubeXM.
#[test]
fn a_backup_written_by_another_implementation_of_the_documented_format_opens() {
    let seed = repo().join("tests/fuzz/corpus/backup_archive/encrypted");
    let work = tempfile::tempdir().expect("tempdir");
    let key = work.path().join("k.key");
    std::fs::write(&key, format!("{}\n", "2a".repeat(32))).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let key = kubexm_install::backup::BackupKey::load(&key).expect("key");
    let opened = kubexm_install::backup::open(&seed, &key, &work.path().join("s")).expect("opens");
    assert_eq!(opened.manifest.cluster, "lab");
    let snap = opened.file("etcd/snapshot.db").expect("snapshot");
    assert_eq!(std::fs::read(snap).expect("read"), b"etcd snapshot bytes");
}
