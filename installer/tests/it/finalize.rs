//! Finalization (issue 19; the seed's ChownModule): the admin kubeconfig in `~/.kube/config` of
//! every master's SSH user that is not root, on both paths, planned only where it applies.

use kubexm_install::modules::finalize::FinalizeModule;
use kubexm_install::pipeline::ops::Op;
use kubexm_install::pipeline::{Facts, Module};

use crate::common::Edit as _;
use crate::versions::cluster;

fn ops_on(module: &FinalizeModule, node: &str) -> Vec<String> {
    let ctx = &module.0;
    let tasks = module.tasks().expect("tasks");
    let n = ctx.node(node).expect("node");
    tasks
        .iter()
        .filter(|t| t.hosts.iter().any(|h| h == node))
        .flat_map(|t| t.steps.iter())
        .flat_map(|s| s.ops(n, &Facts::default()).expect("ops"))
        .map(|op| match op {
            Op::Run(r) => r.command.into_string(),
            other => panic!("a run command, not {other:?}"),
        })
        .collect()
}

#[test]
fn the_admin_kubeconfig_goes_to_the_masters_non_root_ssh_users() {
    let work = tempfile::tempdir().expect("tempdir");
    let ops = |t: String| {
        t.edit(
            "{name: master2, address: 192.168.50.12}",
            "{name: master2, address: 192.168.50.12, user: ops}",
        )
        .edit(
            "{name: worker1, address: 192.168.50.21}",
            "{name: worker1, address: 192.168.50.21, user: ops}",
        )
    };
    for (kind, admin) in [
        ("kubeadm", "/etc/kubernetes/admin.conf"),
        ("kubexm", "/etc/kubernetes/admin.conf"),
    ] {
        let ctx = cluster(work.path(), "v1.31.13", kind, ops);
        let m = FinalizeModule(ctx.clone());
        assert_eq!(m.skip(), None, "{kind}");
        let tasks = m.tasks().expect("tasks");
        assert_eq!(tasks.len(), 1, "{kind}");
        // Masters only (worker1's user has no admin kubeconfig to get), root's left alone.
        assert_eq!(tasks[0].hosts, ["master2"], "{kind}");
        let cmds = ops_on(&m, "master2");
        assert_eq!(cmds.len(), 1, "{kind}");
        assert!(cmds[0].contains("u=ops\n"), "{kind}: {}", cmds[0]);
        assert!(
            cmds[0].contains(&format!("install -m 0600 -o \"$u\" -g \"$g\" {admin} ")),
            "{kind}: {}",
            cmds[0]
        );
        assert!(
            cmds[0].contains("install -d -m 0700 -o \"$u\""),
            "{}",
            cmds[0]
        );
    }
    // Every master logs in as root: nothing to do, and the plan says why.
    let ctx = cluster(work.path(), "v1.31.13", "kubeadm", |t| t);
    let m = FinalizeModule(ctx);
    assert!(m
        .skip()
        .is_some_and(|s| s.contains("every master's SSH user is root")));
    assert!(m.tasks().expect("tasks").is_empty());
}

mod backup_timer {
    //! `spec.backup` (issue 19 finalization / issue 18's timer): the install's last module sets
    //! up on the control host the timer `backup schedule` writes, idempotently; validation
    //! refuses what the timer would refuse; `delete` removes it.

    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::Mutex;

    use async_trait::async_trait;
    use kubexm_install::backup::schedule::{Job, Schedule};
    use kubexm_install::modules::backup::timer::{
        delete_module, schedule_of, BackupTimer, BackupTimerModule,
    };
    use kubexm_install::pipeline::ops::Op;
    use kubexm_install::pipeline::{plan, Facts, Module, Pipeline, Step};
    use kubexm_install::runner::{
        shell, Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome,
    };

    use crate::common::Edit as _;
    use crate::lb::{lab_context, repo};

    const BACKUP: &str =
        "  backup: {onCalendar: '*-*-* 02:30:00', keep: 5, keyFile: /root/kubexm-backup.key}\n  system:\n";

    fn with_backup(t: String) -> String {
        assert!(t.contains("\n  system:\n"), "the lab cluster changed");
        t.replacen("  system:\n", BACKUP, 1)
    }

    /// A control host that keeps what was uploaded, answers sha256 queries for it and exits 0
    /// for everything else (checks pass, systemctl says enabled and active).
    #[derive(Default)]
    struct ControlHost {
        uploads: Mutex<BTreeMap<String, (Vec<u8>, String)>>,
    }

    #[async_trait]
    impl Runner for ControlHost {
        fn node(&self) -> &str {
            "localhost"
        }
        async fn exec(&self, e: &Exec) -> Result<ExecOutput, RunError> {
            let stdout = self
                .uploads
                .lock()
                .expect("lock")
                .iter()
                .find(|(dest, _)| e.script == shell::remote_sha256(dest))
                .map(|(_, (_, sha))| format!("{sha}\n"))
                .unwrap_or_default();
            Ok(ExecOutput {
                code: Some(0),
                stdout,
                stderr: String::new(),
            })
        }
        async fn upload(&self, u: &Upload) -> Result<UploadOutcome, RunError> {
            let bytes = match &u.source {
                kubexm_install::runner::UploadSource::Bytes(b) => b.clone(),
                kubexm_install::runner::UploadSource::File(_) => Vec::new(),
            };
            self.uploads
                .lock()
                .expect("lock")
                .insert(u.dest.clone(), (bytes, u.sha256.clone()));
            Ok(UploadOutcome::Uploaded(0))
        }
    }

    /// The ops that change something when not done (checks and "when changed" commands aside).
    fn changing(op: &Op) -> bool {
        match op {
            Op::Check(_) => false,
            Op::Run(r) => !r.when_changed,
            _ => true,
        }
    }

    #[tokio::test]
    async fn the_install_sets_up_backup_schedules_timer_and_a_re_run_changes_nothing() {
        let ctx = lab_context(with_backup);
        let b = ctx.cluster.file.spec.backup.clone().expect("spec.backup");
        assert_eq!((b.keep, b.on_calendar.as_str()), (5, "*-*-* 02:30:00"));
        // After finalization, on the control host; only the post-install scripts and the
        // readiness wait come later.
        let p = kubexm_install::pipelines::install_pipeline(&ctx);
        let names: Vec<&str> = p.modules.iter().map(|m| m.name()).collect();
        assert_eq!(
            names[names.len() - 4..],
            ["finalize", "backup-timer", "post-install", "cluster-ready"]
        );
        let module = BackupTimerModule(ctx.clone());
        assert_eq!(module.skip(), None);
        let tasks = module.tasks().expect("tasks");
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].hosts, ["localhost"]);

        // The units are `backup schedule`'s, for this cluster and its work directory.
        let binary = std::path::PathBuf::from("/usr/local/bin/kubexm-install");
        let schedule = schedule_of(&ctx, binary.clone())
            .expect("schedule")
            .expect("set");
        let step = BackupTimer::new(schedule.clone(), "/etc/systemd/system").expect("step");
        let by_hand = Schedule {
            cluster: "lab".into(),
            binary,
            work_dir: schedule.work_dir.clone(),
            job: Job::Backup {
                key_file: "/root/kubexm-backup.key".into(),
                keep: 5,
            },
            on_calendar: "*-*-* 02:30:00".into(),
            known_hosts: None,
        }
        .render()
        .expect("render");
        let (service, timer) = step.units();
        assert_eq!((service, timer), (by_hand.0.as_str(), by_hand.1.as_str()));
        let work = schedule.work_dir.display().to_string();
        insta::assert_snapshot!(
            "backup-timer-units",
            format!("{service}\n----\n{timer}").replace(&work, "<WORK>")
        );
        assert!(
            service.contains(
                "backup create --cluster lab --key-file /root/kubexm-backup.key --keep 5\n"
            ),
            "{service}"
        );
        assert!(timer.contains("OnCalendar=*-*-* 02:30:00\n"), "{timer}");

        // The plan: check, both units, daemon-reload when they changed, the timer enabled.
        let pipeline = Pipeline {
            name: "install".into(),
            modules: vec![Box::new(BackupTimerModule(ctx.clone()))],
        };
        let text = plan::build(&pipeline, &ctx.plan_nodes(), &Facts::default())
            .expect("plan")
            .to_text();
        for part in [
            "task backup-timer on localhost",
            "check    backup key and calendar",
            "-> /etc/systemd/system/kubexm-backup-lab.service (644)",
            "-> /etc/systemd/system/kubexm-backup-lab.timer (644)",
            "systemctl daemon-reload (when changed)",
            "systemctl enable --now kubexm-backup-lab.timer",
        ] {
            assert!(text.contains(part), "{part}:\n{text}");
        }

        // First run applies; a re-run finds every op done.
        let host = ControlHost::default();
        let node = ctx
            .plan_nodes()
            .into_iter()
            .find(|n| n.name == "localhost")
            .expect("control host");
        let ops = step.ops(&node, &Facts::default()).expect("ops");
        for op in &ops {
            if !op.generic().is_done(&host).await.expect("is_done") {
                op.generic().apply(&host).await.expect("apply");
            }
        }
        {
            let up = host.uploads.lock().expect("lock");
            assert_eq!(
                up.get("/etc/systemd/system/kubexm-backup-lab.timer")
                    .map(|(b, _)| b.as_slice()),
                Some(timer.as_bytes())
            );
        }
        let again = step.ops(&node, &Facts::default()).expect("ops");
        for op in again.iter().filter(|o| changing(o)) {
            assert!(
                op.generic().is_done(&host).await.expect("is_done"),
                "a re-run would change: {}",
                op.generic().plan().detail
            );
        }
    }

    #[test]
    fn the_key_file_must_exist_with_mode_0600_before_anything_is_written() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("backup.key");
        let step = |key: &Path| {
            BackupTimer::new(
                Schedule {
                    cluster: "lab".into(),
                    binary: "/usr/local/bin/kubexm-install".into(),
                    work_dir: "/var/lib/kubexm".into(),
                    job: Job::Backup {
                        key_file: key.to_path_buf(),
                        keep: 7,
                    },
                    on_calendar: "daily".into(),
                    known_hosts: None,
                },
                "/etc/systemd/system",
            )
            .expect("step")
        };
        let ctx = lab_context(with_backup);
        let node = ctx.plan_nodes().into_iter().next().expect("node");
        let check = |s: &BackupTimer| {
            let Op::Check(c) = s.ops(&node, &Facts::default()).expect("ops").remove(0) else {
                panic!("a check first");
            };
            std::process::Command::new("sh")
                .args(["-c", &c.script])
                .output()
                .expect("sh")
        };
        let out = check(&step(&key));
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("backup keygen --key-file"));
        std::fs::write(&key, "k").expect("write");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let out = check(&step(&key));
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("has mode 644"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(check(&step(&key)).status.success());
    }

    #[test]
    fn validation_refuses_what_the_timer_would_refuse() {
        let load = |edit: &dyn Fn(String) -> String| {
            let dir = tempfile::tempdir().expect("tempdir");
            let text =
                std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab yaml");
            let file = dir.path().join("cluster.yaml");
            std::fs::write(&file, edit(text)).expect("write");
            kubexm_install::context::load_context(
                &file,
                Some(&repo().join("tests/lab/mirror/catalog-lab.yaml")),
                None,
                dir.path(),
            )
            .err()
            .map(|e| format!("{e:?}"))
        };
        assert_eq!(load(&with_backup), None);
        for (yaml, path) in [
            ("{keep: 0, keyFile: /root/k.key}", "spec.backup.keep"),
            (
                "{onCalendar: \"daily\\nExecStart=/bin/sh\", keyFile: /root/k.key}",
                "spec.backup.onCalendar",
            ),
            ("{keyFile: relative.key}", "spec.backup.keyFile"),
            ("{keyFile: '/root/my key'}", "spec.backup.keyFile"),
        ] {
            let e = load(&|t: String| {
                t.replacen("  system:\n", &format!("  backup: {yaml}\n  system:\n"), 1)
            })
            .unwrap_or_else(|| panic!("{yaml} accepted"));
            assert!(e.contains(path), "{yaml}: {e}");
        }
        let e = load(&|t: String| {
            with_backup(t).edit(
                "    type: kubexm\n    version: v3.4.23",
                "    type: kubeadm",
            )
        });
        assert!(e.is_some_and(|e| e.contains("spec.backup")));
        // Without spec.backup the module is skipped.
        let plain = lab_context(|t| t);
        assert!(BackupTimerModule(plain.clone()).skip().is_some());
    }

    #[test]
    fn delete_removes_the_clusters_timers_first() {
        let ctx = lab_context(with_backup);
        let p = kubexm_install::pipelines::delete_pipeline(&ctx);
        assert_eq!(p.modules[1].name(), "delete-timers");
        let tasks = delete_module(&ctx).tasks().expect("tasks");
        assert_eq!(tasks[0].hosts, ["localhost"]);
        let node = ctx.plan_nodes().into_iter().next().expect("node");
        let cmds: Vec<String> = tasks[0].steps[0]
            .ops(&node, &Facts::default())
            .expect("ops")
            .into_iter()
            .map(|op| match op {
                Op::Run(r) => r.command.into_string(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(cmds.len(), 2);
        assert!(
            cmds[0].contains("systemctl disable --now kubexm-backup-lab.timer"),
            "{cmds:?}"
        );
        assert!(cmds[0].contains("rm -f /etc/systemd/system/kubexm-backup-lab.service /etc/systemd/system/kubexm-backup-lab.timer"), "{cmds:?}");
        assert!(cmds[1].contains("kubexm-certs-renew-lab.timer"), "{cmds:?}");
    }
}
