//! Poll until a condition holds on the node.

use std::time::Duration;

use async_trait::async_trait;

use super::{run_test, GenericStep, OpPlan};
use crate::pipeline::StepError;
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
            if run_test(runner, &self.check).await? {
                return Ok(());
            }
            if tokio::time::Instant::now() + self.interval > deadline {
                return Err(StepError::Verify(format!(
                    "waited {:?} for {}; `{}` still fails",
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
