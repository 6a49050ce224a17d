//! Poll until a condition holds on the node.

use std::time::Duration;

use async_trait::async_trait;

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
