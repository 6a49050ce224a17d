//! Poll until a condition holds on the node: a script's exit status ([`WaitFor`]) or a judge of
//! its output ([`WaitOutput`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kubexm_manifests::display::UntrustedMax;

use super::generic::{GenericStep, OpPlan};
use crate::pipeline::error::StepError;
use crate::runner::Runner;

/// Polls `check` until it exits 0 or `timeout` passes.
#[derive(Debug, Clone)]
pub struct WaitFor {
    /// What is awaited, for messages (e.g. "etcd cluster healthy").
    pub what: String,
    /// The check.
    pub check: String,
    /// Give up after this long.
    pub timeout: Duration,
    /// Pause between tries.
    pub interval: Duration,
}

#[async_trait]
impl GenericStep for WaitFor {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "wait",
            detail: format!("{} ({}; up to {:?})", self.what, self.check, self.timeout),
            input: None,
        }
    }
    async fn is_done(&self, _runner: &dyn Runner) -> Result<bool, StepError> {
        Ok(false)
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let out = runner
                .exec(&crate::runner::Exec::root(&self.check).with_timeout(Duration::from_secs(60)))
                .await?;
            if out.success() {
                return Ok(());
            }
            if tokio::time::Instant::now() + self.interval > deadline {
                // The last attempt's output says what is still wrong (e.g. which endpoints).
                let said = [out.stdout.trim(), out.stderr.trim()]
                    .iter()
                    .filter(|s| !s.is_empty())
                    .copied()
                    .collect::<Vec<_>>()
                    .join("\n");
                let said = if said.is_empty() {
                    String::new()
                } else {
                    format!(":\n{said}")
                };
                return Err(StepError::Verify(format!(
                    "waited {:?} for {}; `{}` still fails{said}",
                    self.timeout, self.what, self.check
                )));
            }
            tokio::time::sleep(self.interval).await;
        }
    }
    async fn verify(&self, _runner: &dyn Runner) -> Result<(), StepError> {
        Ok(())
    }
    fn revert(&self) -> Option<String> {
        None
    }
    fn mutates(&self) -> bool {
        false
    }
}

/// Decides from a script's standard output whether what is awaited holds: `Ok(())`, or what is
/// still missing (escaped already; shown when the wait gives up).
pub type Judge = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Runs `script` until it succeeds and [`Judge`] accepts its output, or `timeout` passes; then
/// the error says what the judge (or the script) last said. For waits whose condition is read
/// from typed output (`kubectl … -o json`) rather than an exit status.
#[derive(Clone)]
pub struct WaitOutput {
    /// What is awaited, for messages (e.g. "every node Ready").
    pub what: String,
    /// The script whose standard output is judged (read-only).
    pub script: String,
    /// The judge.
    pub judge: Judge,
    /// Give up after this long.
    pub timeout: Duration,
    /// Pause between tries.
    pub interval: Duration,
}

impl std::fmt::Debug for WaitOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitOutput")
            .field("what", &self.what)
            .field("script", &self.script)
            .field("timeout", &self.timeout)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl GenericStep for WaitOutput {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "wait",
            detail: format!("{} ({}; up to {:?})", self.what, self.script, self.timeout),
            input: None,
        }
    }
    async fn is_done(&self, _runner: &dyn Runner) -> Result<bool, StepError> {
        Ok(false)
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let out = runner
                .exec(
                    &crate::runner::Exec::root(&self.script)
                        .with_timeout(left.clamp(Duration::from_secs(5), Duration::from_secs(60))),
                )
                .await?;
            let last = if out.success() {
                match (self.judge)(&out.stdout) {
                    Ok(()) => return Ok(()),
                    Err(why) => why,
                }
            } else {
                format!(
                    "`{}` failed: {}",
                    self.script,
                    UntrustedMax(out.stderr.trim(), 2000)
                )
            };
            if tokio::time::Instant::now() + self.interval > deadline {
                return Err(StepError::Verify(format!(
                    "waited {:?} for {}; still not so:\n{last}",
                    self.timeout, self.what
                )));
            }
            tokio::time::sleep(self.interval).await;
        }
    }
    async fn verify(&self, _runner: &dyn Runner) -> Result<(), StepError> {
        Ok(())
    }
    fn revert(&self) -> Option<String> {
        None
    }
    fn mutates(&self) -> bool {
        false
    }
}
