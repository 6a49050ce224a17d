//! systemd: daemon-reload, enable --now, restart, is-active.

use std::time::Duration;

use async_trait::async_trait;

use super::generic::{run_ok, run_test, GenericStep, OpPlan};
use crate::pipeline::error::StepError;
use crate::runner::{shell, Runner};

/// What to do with systemd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemdAction {
    /// `systemctl daemon-reload`.
    DaemonReload,
    /// `systemctl enable --now UNIT`, then wait until it is active.
    EnableNow(String),
    /// `systemctl restart UNIT` when an earlier op of the same step changed something (or
    /// always, when `always` is set), then wait until it is active.
    Restart {
        /// Unit.
        unit: String,
        /// Restart even when nothing changed.
        always: bool,
    },
    /// `systemctl reload-or-restart UNIT` when an earlier op of the same step changed
    /// something, then wait until it is active: a running service re-reads its configuration
    /// without dropping connections (haproxy, nginx, keepalived), a stopped one starts.
    ReloadWhenChanged(String),
    /// Wait until the unit is active (a check; fails with the unit's status and last log lines).
    IsActive(String),
    /// `systemctl disable --now UNIT` (delete pipelines).
    DisableNow(String),
}

/// A systemd operation with how long the unit may take to become active.
#[derive(Debug, Clone)]
pub struct Systemd {
    /// The action.
    pub action: SystemdAction,
    /// How long to wait for `active`.
    pub settle: Duration,
}

impl Systemd {
    /// An action with a 60 s settle time.
    pub fn new(action: SystemdAction) -> Self {
        Self {
            action,
            settle: Duration::from_secs(60),
        }
    }

    fn unit(&self) -> Option<&str> {
        match &self.action {
            SystemdAction::DaemonReload => None,
            SystemdAction::EnableNow(u)
            | SystemdAction::Restart { unit: u, .. }
            | SystemdAction::ReloadWhenChanged(u)
            | SystemdAction::IsActive(u)
            | SystemdAction::DisableNow(u) => Some(u),
        }
    }

    async fn wait_active(&self, runner: &dyn Runner, unit: &str) -> Result<(), StepError> {
        let u = shell::quote(unit);
        let secs = self.settle.as_secs().max(1);
        let script = format!(
            "i=0\nwhile [ $i -lt {ticks} ]; do\n  systemctl is-active -q {u} && exit 0\n  sleep 0.2; i=$((i+1))\ndone\nprintf 'unit %s is %s after %ss\\n' {u} \"$(systemctl is-active {u})\" {secs} >&2\nsystemctl status --no-pager -n 0 {u} >&2 || true\njournalctl -u {u} -n 15 --no-pager -o cat >&2 || true\nexit 1",
            ticks = secs * 5,
        );
        run_ok(runner, &script, self.settle + Duration::from_secs(30))
            .await
            .map(drop)
    }
}

/// `systemctl ACTION UNIT`; on failure the unit's last log lines go to stderr (into the error).
fn with_journal(action: &str, unit: &str) -> String {
    let u = shell::quote(unit);
    format!("{action} {u} || {{ rc=$?; journalctl -u {u} -n 15 --no-pager -o cat >&2; exit $rc; }}")
}

#[async_trait]
impl GenericStep for Systemd {
    fn plan(&self) -> OpPlan {
        let detail = match &self.action {
            SystemdAction::DaemonReload => "systemctl daemon-reload".to_string(),
            SystemdAction::EnableNow(u) => format!("systemctl enable --now {u}"),
            SystemdAction::Restart { unit, always: true } => format!("systemctl restart {unit}"),
            SystemdAction::Restart {
                unit,
                always: false,
            } => {
                format!("systemctl restart {unit} (when changed)")
            }
            SystemdAction::ReloadWhenChanged(u) => {
                format!("systemctl reload-or-restart {u} (when changed)")
            }
            SystemdAction::IsActive(u) => format!("systemctl is-active {u}"),
            SystemdAction::DisableNow(u) => format!("systemctl disable --now {u}"),
        };
        OpPlan {
            kind: "systemd",
            detail,
            input: None,
        }
    }

    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        match &self.action {
            SystemdAction::DaemonReload
            | SystemdAction::Restart { .. }
            | SystemdAction::ReloadWhenChanged(_)
            | SystemdAction::IsActive(_) => Ok(false),
            SystemdAction::EnableNow(u) => {
                let u = shell::quote(u);
                run_test(
                    runner,
                    &format!("systemctl is-enabled -q {u} && systemctl is-active -q {u}"),
                )
                .await
            }
            SystemdAction::DisableNow(u) => {
                let u = shell::quote(u);
                run_test(
                    runner,
                    &format!(
                        "! systemctl is-enabled -q {u} 2>/dev/null && ! systemctl is-active -q {u}"
                    ),
                )
                .await
            }
        }
    }

    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let t = Duration::from_secs(120);
        match &self.action {
            SystemdAction::DaemonReload => {
                run_ok(runner, "systemctl daemon-reload", t).await.map(drop)
            }
            SystemdAction::EnableNow(u) => {
                run_ok(runner, &with_journal("systemctl enable --now", u), t).await?;
                self.wait_active(runner, u).await
            }
            SystemdAction::Restart { unit, .. } => {
                run_ok(runner, &with_journal("systemctl restart", unit), t).await?;
                self.wait_active(runner, unit).await
            }
            SystemdAction::ReloadWhenChanged(unit) => {
                run_ok(runner, &with_journal("systemctl reload-or-restart", unit), t).await?;
                self.wait_active(runner, unit).await
            }
            SystemdAction::IsActive(u) => self.wait_active(runner, u).await,
            SystemdAction::DisableNow(u) => run_ok(
                runner,
                &format!(
                    "systemctl disable --now {u} 2>/dev/null || systemctl stop {u} 2>/dev/null || true",
                    u = shell::quote(u)
                ),
                t,
            )
            .await
            .map(drop),
        }
    }

    async fn verify(&self, runner: &dyn Runner) -> Result<(), StepError> {
        match &self.action {
            // apply already waited for `active`.
            SystemdAction::DaemonReload
            | SystemdAction::Restart { .. }
            | SystemdAction::ReloadWhenChanged(_)
            | SystemdAction::IsActive(_) => Ok(()),
            _ => {
                if self.is_done(runner).await? {
                    Ok(())
                } else {
                    Err(StepError::Verify(format!(
                        "`{}` did not take effect on unit {}",
                        self.plan().detail,
                        self.unit().unwrap_or("")
                    )))
                }
            }
        }
    }

    fn revert(&self) -> Option<String> {
        match &self.action {
            SystemdAction::DaemonReload => Some("systemctl daemon-reload".to_string()),
            SystemdAction::EnableNow(u) => Some(format!(
                "systemctl disable --now {} 2>/dev/null || true",
                shell::quote(u)
            )),
            _ => None,
        }
    }

    fn mutates(&self) -> bool {
        !matches!(self.action, SystemdAction::IsActive(_))
    }

    fn only_when_changed(&self) -> bool {
        matches!(
            self.action,
            SystemdAction::Restart { always: false, .. } | SystemdAction::ReloadWhenChanged(_)
        )
    }
}
