//! A requirement decided on the control host from facts learned earlier in the run (e.g. the
//! kernel and cgroup version preflight gathered): nothing runs on the node.

use async_trait::async_trait;

use super::generic::{Applied, GenericStep, OpPlan};
use crate::pipeline::error::StepError;
use crate::runner::Runner;

/// What a requirement found on a node: warnings for the operator, or why the node cannot run
/// the cluster (with what to do).
pub type Verdict = Result<Vec<String>, String>;

/// Checks a node against rules using facts an earlier task learned. The plan shows the rules;
/// the run fails with the verdict's message, or passes with its warnings as notes. A verdict
/// that could not be made (the facts were never learned) fails: a requirement never passes
/// unchecked.
#[derive(Debug, Clone)]
pub struct Require {
    /// What is required, e.g. "host requirements".
    pub what: String,
    /// The rules, for the plan (the same on every node).
    pub rules: String,
    /// The verdict for this node; `None` when the facts are missing (always so in a plan).
    pub verdict: Option<Verdict>,
}

#[async_trait]
impl GenericStep for Require {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "require",
            detail: format!("{}: {}", self.what, self.rules),
            input: None,
        }
    }
    async fn is_done(&self, _runner: &dyn Runner) -> Result<bool, StepError> {
        Ok(false)
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        self.apply_noted(runner).await.map(drop)
    }
    async fn apply_noted(&self, _runner: &dyn Runner) -> Result<Applied, StepError> {
        match &self.verdict {
            Some(Ok(warnings)) => Ok(Applied {
                notes: warnings
                    .iter()
                    .map(|w| format!("{}: {w}", self.what))
                    .collect(),
                changed: false,
            }),
            Some(Err(message)) => Err(StepError::Check {
                what: self.what.clone(),
                message: message.clone(),
            }),
            None => Err(StepError::Check {
                what: self.what.clone(),
                message: "the facts this check needs were not gathered on the node".into(),
            }),
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
