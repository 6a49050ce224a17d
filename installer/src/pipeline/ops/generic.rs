//! What every generic step shares: [`GenericStep`], its plan line, what it applied and wrote,
//! and running a script as root. The steps' files use it; it imports none of them.

use async_trait::async_trait;

use crate::pipeline::error::StepError;
use crate::runner::Runner;

/// One line of the plan: what a generic step will do, exactly.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OpPlan {
    /// Kind, e.g. `run`, `upload`, `systemd`.
    pub kind: &'static str,
    /// The exact command or `source -> destination (mode)`.
    pub detail: String,
    /// Content digest or other input that changes what the op does but is not in `detail`.
    pub input: Option<String>,
}

/// What applying a generic step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Notes for the operator.
    pub notes: Vec<String>,
    /// Whether anything changed.
    pub changed: bool,
}

/// Behaviour shared by every generic step.
#[async_trait]
pub trait GenericStep: Send + Sync {
    /// The plan line (no connection needed).
    fn plan(&self) -> OpPlan;
    /// Already done? Then the op is skipped.
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError>;
    /// Does it.
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError>;
    /// Does it and says what happened: notes for the operator (warnings from checks) and
    /// whether the node changed (an op that finds nothing to do at run time says no). Defaults
    /// to `apply`, changed.
    async fn apply_noted(&self, runner: &dyn Runner) -> Result<Applied, StepError> {
        self.apply(runner).await.map(|()| Applied {
            notes: Vec::new(),
            changed: true,
        })
    }
    /// Checks it worked (defaults to `is_done`).
    async fn verify(&self, runner: &dyn Runner) -> Result<(), StepError> {
        if self.is_done(runner).await? {
            Ok(())
        } else {
            Err(StepError::Verify(format!(
                "`{}` did not take effect",
                self.plan().detail
            )))
        }
    }
    /// Shell that undoes `apply`, safe to run whether or not `apply` ran; `None` when there is
    /// nothing to undo (checks, waits).
    fn revert(&self) -> Option<String>;
    /// Runs only when an earlier generic step of the same step changed something (restart
    /// handlers such as "reload sysctl when its file changed").
    fn only_when_changed(&self) -> bool {
        false
    }
    /// Whether applying it changes the node (false for checks and waits).
    fn mutates(&self) -> bool {
        true
    }
    /// Shell run once the task succeeded on the node (drops backups kept for the revert).
    fn commit(&self) -> Option<String> {
        None
    }
    /// What it writes into a file on the node, for `plan --files`: the bytes when they are
    /// known on the control host, `None` for ops that write no file content.
    fn written(&self) -> Option<Written<'_>> {
        None
    }
}

/// The content a generic step writes into a file on the node.
#[derive(Debug, Clone)]
pub enum Written<'a> {
    /// These bytes (a rendered template, a key, a managed block's lines).
    Bytes(std::borrow::Cow<'a, [u8]>),
    /// A file of the control host copied as it is (a bundle file): not shown.
    File(&'a std::path::Path),
}

/// Runs a script as root and fails with its stderr when it exits non-zero.
pub(crate) async fn run_ok(
    runner: &dyn Runner,
    script: &str,
    timeout: std::time::Duration,
) -> Result<String, StepError> {
    let out = runner
        .exec(&crate::runner::Exec::root(script).with_timeout(timeout))
        .await?;
    if out.success() {
        Ok(out.stdout)
    } else {
        Err(StepError::Command {
            command: crate::runner::summary(script),
            code: out.code,
            stderr: out.stderr.trim().to_string(),
        })
    }
}

/// Runs a script as root and reports whether it exited 0 (a check).
pub(crate) async fn run_test(runner: &dyn Runner, script: &str) -> Result<bool, StepError> {
    let out = runner
        .exec(&crate::runner::Exec::root(script).with_timeout(std::time::Duration::from_secs(60)))
        .await?;
    Ok(out.success())
}
