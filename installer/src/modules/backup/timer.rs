//! Finalization: the scheduled backup cluster.yaml asks for (`spec.backup`), on the control
//! host, last in the install. The units are those `kubexm-install backup schedule` writes
//! ([`Schedule::render`]: a oneshot service running `backup create --keep N` and its timer),
//! installed with generic steps, so a re-run with the same `spec.backup` changes nothing, and a
//! changed schedule rewrites the units. Before anything is written the key file must be there
//! with mode 0600 and systemd must accept the calendar (`systemd-analyze calendar`, where
//! present); the key itself is never read here: only its path goes into the unit.
//! `delete` ([`BackupTimerDeleteModule`]) removes the cluster's backup and certificate-renewal
//! timers, whichever way they were set up.

use crate::script;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backup::schedule::{Job, Schedule};
use crate::context::InstallContext;
use crate::modules::delete::Ops;
use crate::pipeline::ops::{Check, Op, RunCommand, Systemd, SystemdAction, UploadFile};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::run::CONTROL_HOST;
use crate::runner::shell;

/// Where the units go on the control host (as `backup schedule`'s default `--systemd-dir`).
pub const SYSTEMD_DIR: &str = "/etc/systemd/system";

/// The work directory `ctx` was loaded from (`WORK/pki/<cluster>` is its PKI directory).
fn work_dir(ctx: &InstallContext) -> PathBuf {
    ctx.pki_dir
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The schedule `spec.backup` asks for, run by `binary`; `None` without `spec.backup`.
pub fn schedule_of(ctx: &InstallContext, binary: PathBuf) -> Result<Option<Schedule>, StepError> {
    let Some(b) = &ctx.cluster.file.spec.backup else {
        return Ok(None);
    };
    let work_dir = std::path::absolute(work_dir(ctx)).map_err(|e| {
        StepError::Invalid(format!("the work directory cannot be made absolute: {e}"))
    })?;
    Ok(Some(Schedule {
        cluster: ctx.cluster.cluster_name().to_string(),
        binary,
        work_dir,
        job: Job::Backup {
            key_file: PathBuf::from(&b.key_file),
            keep: b.keep,
        },
        on_calendar: b.on_calendar.clone(),
        known_hosts: None,
    }))
}

/// The scheduled backup module.
pub struct BackupTimerModule(pub Arc<InstallContext>);

impl Module for BackupTimerModule {
    fn name(&self) -> &str {
        "backup-timer"
    }

    fn skip(&self) -> Option<String> {
        self.0.cluster.file.spec.backup.is_none().then(|| {
            "spec.backup is not set: no scheduled backup (`kubexm-install backup schedule` sets one up by hand)".to_string()
        })
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let binary = std::env::current_exe().map_err(|e| {
            StepError::Invalid(format!(
                "cannot find this program's path for the backup unit: {e}"
            ))
        })?;
        let Some(schedule) = schedule_of(&self.0, binary)? else {
            return Ok(Vec::new());
        };
        Ok(vec![Task::new("backup-timer", [CONTROL_HOST])
            .step(BackupTimer::new(schedule, SYSTEMD_DIR)?)])
    }
}

/// The backup timer's units, checked and enabled.
pub struct BackupTimer {
    /// The schedule.
    pub schedule: Schedule,
    /// Where the units go.
    pub systemd_dir: String,
    service: String,
    timer: String,
}

impl BackupTimer {
    /// The units of `schedule` in `systemd_dir` (rendered now: an invalid schedule is refused
    /// by the plan).
    pub fn new(schedule: Schedule, systemd_dir: &str) -> Result<Self, StepError> {
        let (service, timer) = schedule.render()?;
        Ok(Self {
            schedule,
            systemd_dir: systemd_dir.to_string(),
            service,
            timer,
        })
    }

    /// The rendered service and timer.
    pub fn units(&self) -> (&str, &str) {
        (&self.service, &self.timer)
    }
}

impl Step for BackupTimer {
    fn name(&self) -> &str {
        "backup-timer"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let unit = self.schedule.unit();
        let Job::Backup { key_file, .. } = &self.schedule.job else {
            return Err(StepError::Invalid("not a backup schedule".into()));
        };
        let k = shell::quoted(&key_file.to_string_lossy());
        let cal = shell::quoted(&self.schedule.on_calendar);
        Ok(vec![
            Op::Check(Check::new(
                "backup key and calendar",
                format!(
                    "k={k}\n\
                     if [ ! -f \"$k\" ]; then echo \"spec.backup.keyFile $k is not a file on the control host: make it with kubexm-install backup keygen --key-file $k\" >&2; exit 1; fi\n\
                     m=$(stat -c %a \"$k\")\n\
                     if [ \"$m\" != 600 ]; then echo \"spec.backup.keyFile $k has mode $m; a backup key must be readable by root only: chmod 600 $k\" >&2; exit 1; fi\n\
                     if command -v systemd-analyze >/dev/null 2>&1 && ! systemd-analyze calendar {cal} >/dev/null 2>&1; then echo \"spec.backup.onCalendar \"{cal}\" is not a calendar systemd accepts (systemd-analyze calendar); write e.g. daily or '*-*-* 02:30:00'\" >&2; exit 1; fi"
                ),
            )),
            Op::Upload(UploadFile::bytes(
                self.service.clone().into_bytes(),
                format!("{}/{unit}.service", self.systemd_dir),
                0o644,
            )),
            Op::Upload(UploadFile::bytes(
                self.timer.clone().into_bytes(),
                format!("{}/{unit}.timer", self.systemd_dir),
                0o644,
            )),
            Op::Run(RunCommand::new("systemctl daemon-reload").when_changed()),
            Op::Systemd(Systemd::new(SystemdAction::EnableNow(format!("{unit}.timer")))),
        ])
    }
}

/// The cluster's timers on the control host (`backup` and `certs schedule`, or `spec.backup`),
/// stopped and removed by `delete`: the cluster they run against is gone.
pub struct BackupTimerDeleteModule(pub Arc<InstallContext>);

/// The timers' delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> BackupTimerDeleteModule {
    BackupTimerDeleteModule(ctx.clone())
}

impl Module for BackupTimerDeleteModule {
    fn name(&self) -> &str {
        "delete-timers"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let c = self.0.cluster.cluster_name();
        let units = [
            format!("kubexm-backup-{c}"),
            format!("kubexm-certs-renew-{c}"),
        ];
        let mut ops = Vec::new();
        for unit in units {
            let files = format!("{SYSTEMD_DIR}/{unit}.service {SYSTEMD_DIR}/{unit}.timer");
            let listed = shell::globs(&files);
            let u = shell::quoted(&format!("{unit}.timer"));
            ops.push(Op::Run(
                RunCommand::new(script!(
                    "systemctl disable --now {u} 2>/dev/null || true\nrm -f {files}\nsystemctl daemon-reload",
                    u = u,
                    files = listed
                ))
                .unless(crate::modules::runtime::none_exist(&files)),
            ));
        }
        Ok(vec![Task::new("delete-timers", [CONTROL_HOST]).step(Ops {
            name: "remove-timers",
            ops,
        })])
    }
}
