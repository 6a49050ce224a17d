//! Scheduled backups on the control host (`kubexm-install backup schedule`): a systemd timer and
//! a oneshot service running `backup create --keep N`, and the retention that `--keep` applies
//! to the default backup directory (`WORK/backups/<cluster>-<time>.kxbak`).

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

/// A scheduled backup.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Cluster name.
    pub cluster: String,
    /// The kubexm-install binary the service runs.
    pub binary: PathBuf,
    /// The work directory.
    pub work_dir: PathBuf,
    /// The backup key.
    pub key_file: PathBuf,
    /// Backups kept.
    pub keep: usize,
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
    /// The units' name (`kubexm-backup-<cluster>`).
    pub fn unit(&self) -> String {
        format!("kubexm-backup-{}", self.cluster)
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
        if self.keep == 0 {
            return Err(StepError::Invalid("--keep must be at least 1".into()));
        }
        let mut c = tera::Context::new();
        c.insert("cluster", &self.cluster);
        c.insert("unit", &self.unit());
        c.insert(
            "binary",
            &plain_path("the kubexm-install binary", &self.binary)?,
        );
        c.insert("work_dir", &plain_path("--work-dir", &self.work_dir)?);
        c.insert("key_file", &plain_path("--key-file", &self.key_file)?);
        c.insert("keep", &self.keep);
        c.insert("on_calendar", &self.on_calendar);
        let kh = match &self.known_hosts {
            Some(k) => Some(plain_path("--known-hosts", k)?),
            None => None,
        };
        c.insert("known_hosts", &kh);
        Ok((
            crate::templates::render("backup/kubexm-backup.service.tera", &c)?,
            crate::templates::render("backup/kubexm-backup.timer.tera", &c)?,
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
            key_file: "/root/kubexm-backup.key".into(),
            keep: 7,
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
    fn what_would_break_the_unit_is_refused() {
        for edit in [
            (|s: &mut Schedule| s.key_file = "/root/my key".into()) as fn(&mut Schedule),
            |s| s.key_file = "relative.key".into(),
            |s| s.work_dir = "/var/lib/kubexm\nExecStartPre=/bin/evil".into(),
            |s| s.on_calendar = "daily\nExecStart=/bin/evil".into(),
            |s| s.on_calendar = "$(reboot)".into(),
            |s| s.cluster = "../x".into(),
            |s| s.keep = 0,
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
