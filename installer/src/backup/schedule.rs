//! Scheduled jobs on the control host: a systemd timer and a oneshot service running
//! `kubexm-install` for one cluster. `backup schedule` runs `backup create --keep N` (with the
//! retention that `--keep` applies to the default backup directory,
//! `WORK/backups/<cluster>-<time>.kxbak`); `certs schedule` runs `certs renew --under-days N
//! --yes` (from the control host, so the renewal still goes one node at a time with health
//! checks, as when run by hand).

use std::path::{Path, PathBuf};

use crate::pipeline::StepError;

/// The default directory of a cluster's backups under the work directory.
pub fn default_dir(work_dir: &Path) -> PathBuf {
    work_dir.join("backups")
}

/// The default backup file name for `cluster` taken at `stamp` (`record::now()` without `:`,
/// so names sort by time).
pub fn default_name(cluster: &str, stamp: &str) -> String {
    format!("{cluster}-{}.kxbak", stamp.replace(':', ""))
}

/// Whether `name` is a backup of `cluster` named by [`default_name`].
fn is_backup_of(name: &str, cluster: &str) -> bool {
    name.strip_prefix(cluster)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|r| r.strip_suffix(".kxbak"))
        .is_some_and(|stamp| {
            stamp.len() >= 16
                && stamp.starts_with(|c: char| c.is_ascii_digit())
                && stamp
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b'-' || b == b'T' || b == b'Z' || b == b'.')
        })
}

/// Removes all but the newest `keep` backups of `cluster` in `dir` (by name: the time is in
/// it); returns what was removed. Other files are never touched.
pub fn prune(dir: &Path, cluster: &str, keep: usize) -> std::io::Result<Vec<PathBuf>> {
    let mut found: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if !e.file_type()?.is_file() {
            continue;
        }
        if let Some(name) = e.file_name().to_str() {
            if is_backup_of(name, cluster) {
                found.push(name.to_string());
            }
        }
    }
    found.sort();
    let excess = found.len().saturating_sub(keep.max(1));
    let mut removed = Vec::new();
    for name in found.into_iter().take(excess) {
        let p = dir.join(name);
        std::fs::remove_file(&p)?;
        removed.push(p);
    }
    Ok(removed)
}

/// What a scheduled service runs.
#[derive(Debug, Clone)]
pub enum Job {
    /// `backup create --key-file K --keep N`.
    Backup {
        /// The backup key.
        key_file: PathBuf,
        /// Backups kept.
        keep: usize,
    },
    /// `certs renew --under-days N --yes`.
    CertsRenew {
        /// The threshold in days.
        under_days: i64,
    },
}

/// A scheduled job of one cluster.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Cluster name.
    pub cluster: String,
    /// The kubexm-install binary the service runs.
    pub binary: PathBuf,
    /// The work directory.
    pub work_dir: PathBuf,
    /// What it runs.
    pub job: Job,
    /// systemd `OnCalendar=` expression.
    pub on_calendar: String,
    /// known_hosts file, when not the work directory's.
    pub known_hosts: Option<PathBuf>,
}

/// A word systemd's `ExecStart=` takes without quoting: an absolute path of plain characters.
fn plain_path(what: &str, p: &Path) -> Result<String, StepError> {
    let s = p.to_str().unwrap_or_default();
    if !p.is_absolute()
        || s.is_empty()
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+@".contains(&b))
    {
        return Err(StepError::Invalid(format!(
            "{what} {:?} must be an absolute path of letters, digits and /._-+@ (it goes into a systemd unit unquoted)",
            s.escape_debug().to_string()
        )));
    }
    Ok(s.to_string())
}

impl Schedule {
    /// The units' name (`kubexm-backup-<cluster>`, `kubexm-certs-renew-<cluster>`).
    pub fn unit(&self) -> String {
        match self.job {
            Job::Backup { .. } => format!("kubexm-backup-{}", self.cluster),
            Job::CertsRenew { .. } => format!("kubexm-certs-renew-{}", self.cluster),
        }
    }

    /// The command that writes (and with `--remove`, removes) the schedule.
    pub fn verb(&self) -> &'static str {
        match self.job {
            Job::Backup { .. } => "backup schedule",
            Job::CertsRenew { .. } => "certs schedule",
        }
    }

    /// The service and the timer, checked and rendered.
    pub fn render(&self) -> Result<(String, String), StepError> {
        if self.cluster.is_empty()
            || !self
                .cluster
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(StepError::Invalid(format!(
                "cluster name {:?} cannot name a systemd unit",
                self.cluster.escape_debug().to_string()
            )));
        }
        if self.on_calendar.is_empty()
            || self.on_calendar.len() > 100
            || !self
                .on_calendar
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b" :*,./~-".contains(&b))
        {
            return Err(StepError::Invalid(format!(
                "--on-calendar {:?} is not a systemd calendar expression (e.g. daily, hourly, \"*-*-* 02:30:00\")",
                self.on_calendar.escape_debug().to_string()
            )));
        }
        let c = &self.cluster;
        let (command, description) = match &self.job {
            Job::Backup { key_file, keep } => {
                if *keep == 0 {
                    return Err(StepError::Invalid("--keep must be at least 1".into()));
                }
                (
                    vec![
                        "backup".to_owned(),
                        "create".to_owned(),
                        "--cluster".to_owned(),
                        c.clone(),
                        "--key-file".to_owned(),
                        plain_path("--key-file", key_file)?,
                        "--keep".to_owned(),
                        keep.to_string(),
                    ],
                    format!("KubeXM backup of cluster {c} (the newest {keep} kept)"),
                )
            }
            Job::CertsRenew { under_days } => {
                if *under_days < 1 {
                    return Err(StepError::Invalid("--under-days must be at least 1".into()));
                }
                (
                    vec![
                        "certs".to_owned(),
                        "renew".to_owned(),
                        "--cluster".to_owned(),
                        c.clone(),
                        "--under-days".to_owned(),
                        under_days.to_string(),
                        "--yes".to_owned(),
                    ],
                    format!(
                        "KubeXM certificate renewal of cluster {c} (under {under_days} days left)"
                    ),
                )
            }
        };
        let mut c = tera::Context::new();
        c.insert("cluster", &self.cluster);
        c.insert("unit", &self.unit());
        c.insert("verb", self.verb());
        c.insert(
            "binary",
            &plain_path("the kubexm-install binary", &self.binary)?,
        );
        c.insert("work_dir", &plain_path("--work-dir", &self.work_dir)?);
        c.insert("command", &command);
        c.insert("description", &description);
        c.insert("on_calendar", &self.on_calendar);
        let kh = match &self.known_hosts {
            Some(k) => Some(plain_path("--known-hosts", k)?),
            None => None,
        };
        c.insert("known_hosts", &kh);
        Ok((
            crate::templates::render("backup/kubexm-job.service.tera", &c)?,
            crate::templates::render("backup/kubexm-job.timer.tera", &c)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> Schedule {
        Schedule {
            cluster: "prod".into(),
            binary: "/usr/local/bin/kubexm-install".into(),
            work_dir: "/var/lib/kubexm".into(),
            job: Job::Backup {
                key_file: "/root/kubexm-backup.key".into(),
                keep: 7,
            },
            on_calendar: "*-*-* 02:30:00".into(),
            known_hosts: None,
        }
    }

    #[test]
    fn units_run_backup_create_with_retention_on_the_calendar() {
        let (service, timer) = schedule().render().expect("render");
        assert!(service.contains("ExecStart=/usr/local/bin/kubexm-install --work-dir /var/lib/kubexm --log-format json backup create --cluster prod --key-file /root/kubexm-backup.key --keep 7\n"), "{service}");
        assert!(service.contains("Type=oneshot") && service.contains("UMask=0077"));
        assert!(
            timer.contains("OnCalendar=*-*-* 02:30:00\n") && timer.contains("Persistent=true"),
            "{timer}"
        );
        let mut s = schedule();
        s.known_hosts = Some("/etc/kubexm/known_hosts".into());
        assert!(s
            .render()
            .expect("render")
            .0
            .contains(" --known-hosts /etc/kubexm/known_hosts\n"));
    }

    #[test]
    fn a_certificate_renewal_runs_certs_renew_from_the_control_host() {
        let mut s = schedule();
        s.job = Job::CertsRenew { under_days: 45 };
        s.on_calendar = "weekly".into();
        assert_eq!(s.unit(), "kubexm-certs-renew-prod");
        let (service, timer) = s.render().expect("render");
        assert!(service.contains("ExecStart=/usr/local/bin/kubexm-install --work-dir /var/lib/kubexm --log-format json certs renew --cluster prod --under-days 45 --yes\n"), "{service}");
        assert!(
            service.contains(
                "Description=KubeXM certificate renewal of cluster prod (under 45 days left)"
            ),
            "{service}"
        );
        assert!(
            service.contains("kubexm-install certs schedule --cluster prod --remove"),
            "{service}"
        );
        assert!(timer.contains("OnCalendar=weekly\n"), "{timer}");
    }

    #[test]
    fn what_would_break_the_unit_is_refused() {
        for edit in [
            (|s: &mut Schedule| {
                s.job = Job::Backup {
                    key_file: "/root/my key".into(),
                    keep: 7,
                }
            }) as fn(&mut Schedule),
            |s| {
                s.job = Job::Backup {
                    key_file: "relative.key".into(),
                    keep: 7,
                }
            },
            |s| s.work_dir = "/var/lib/kubexm\nExecStartPre=/bin/evil".into(),
            |s| s.on_calendar = "daily\nExecStart=/bin/evil".into(),
            |s| s.on_calendar = "$(reboot)".into(),
            |s| s.cluster = "../x".into(),
            |s| {
                s.job = Job::Backup {
                    key_file: "/root/k.key".into(),
                    keep: 0,
                }
            },
            |s| s.job = Job::CertsRenew { under_days: 0 },
        ] {
            let mut s = schedule();
            edit(&mut s);
            assert!(s.render().is_err(), "{s:?}");
        }
    }

    #[test]
    fn prune_keeps_the_newest_and_touches_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let names = [
            "prod-2026-11-20T020000Z.kxbak",
            "prod-2026-11-21T020000Z.kxbak",
            "prod-2026-11-22T020000Z.kxbak",
            "prod-2026-11-23T020000Z.kxbak",
            "prod-copy.kxbak",
            "prodx-2026-11-19T020000Z.kxbak",
            "staging-2026-11-19T020000Z.kxbak",
            "prod-2026-11-19T020000Z.kxbak.note",
        ];
        for n in names {
            std::fs::write(dir.path().join(n), n).expect("write");
        }
        let removed = prune(dir.path(), "prod", 2).expect("prune");
        let removed: Vec<String> = removed
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            removed,
            [
                "prod-2026-11-20T020000Z.kxbak",
                "prod-2026-11-21T020000Z.kxbak"
            ]
        );
        for kept in &names[2..] {
            assert!(dir.path().join(kept).exists(), "{kept}");
        }
        assert_eq!(
            default_name("prod", "2026-11-24T01:39:05Z"),
            "prod-2026-11-24T013905Z.kxbak"
        );
        assert!(is_backup_of(
            &default_name("prod", "2026-11-24T01:39:05Z"),
            "prod"
        ));
    }
}
