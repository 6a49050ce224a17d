//! Learn values from a node (e.g. kubeadm's join credentials) for later tasks, and fetch a file
//! from a node to the control host.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;

use super::generic::{run_ok, GenericStep, OpPlan};
use crate::pipeline::error::StepError;
use crate::pipeline::facts::Facts;
use crate::runner::{shell, Runner};

/// Turns a script's standard output into `(key, value)` facts; the error says what is missing
/// without quoting the output (it may hold secrets).
pub type FactParser = fn(&str) -> Result<Vec<(String, String)>, String>;

/// Runs a script and stores what [`FactParser`] finds in its output as [`Facts`] for later
/// tasks. The output is never logged or shown (it may hold tokens); the plan shows the script.
///
/// Always runs (there is no "already done": the facts live in this run's memory only), and a
/// task holding one is never skipped by `--resume`. It counts as a check, not a change: what it
/// reads is the node's state, and what the script may refresh on the node (a join token past
/// its lifetime) is not something the install changed.
#[derive(Debug, Clone)]
pub struct LearnFacts {
    /// What is learned, for messages (e.g. "join credentials").
    pub what: String,
    /// The script whose output is parsed.
    pub script: String,
    /// The parser.
    pub parse: FactParser,
    /// Where the facts go.
    pub facts: Facts,
    /// Put before every key the parser returns (e.g. `host/node1/` for per-node facts).
    pub prefix: String,
    /// Time limit of the script.
    pub timeout: Duration,
}

#[async_trait]
impl GenericStep for LearnFacts {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "learn",
            detail: format!("{}: {}", self.what, self.script),
            input: None,
        }
    }
    async fn is_done(&self, _runner: &dyn Runner) -> Result<bool, StepError> {
        Ok(false)
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let out = run_ok(runner, &self.script, self.timeout).await?;
        let learned = (self.parse)(&out).map_err(|message| StepError::Check {
            what: self.what.clone(),
            message,
        })?;
        for (k, v) in learned {
            self.facts.set(format!("{}{k}", self.prefix), v);
        }
        Ok(())
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

/// The largest file a pipeline fetches (kubeconfigs and the like; backups fetch with their own
/// bound, [`crate::runner::fetch`]).
pub const FETCH_MAX: u64 = 64 << 20;

/// Copies a file from the node to the control host (e.g. the cluster's admin kubeconfig),
/// written atomically with `mode` in a directory only its owner can read; skipped when the
/// control host's copy already has the node's sha256. Not reverted: the copy is the operator's.
#[derive(Debug, Clone)]
pub struct FetchFile {
    /// The file on the node.
    pub src: String,
    /// Where it goes on the control host.
    pub dest: PathBuf,
    /// Mode of the copy.
    pub mode: u32,
}

impl FetchFile {
    async fn remote_sha256(&self, runner: &dyn Runner) -> Result<String, StepError> {
        let out = run_ok(
            runner,
            &shell::remote_sha256(&self.src),
            Duration::from_secs(60),
        )
        .await?;
        let sum = out.trim().to_string();
        if sum.is_empty() {
            return Err(StepError::Check {
                what: format!("fetch {}", self.src),
                message: format!("{} does not exist on the node", self.src),
            });
        }
        Ok(sum)
    }

    fn local_sha256(&self) -> Option<String> {
        std::fs::read(&self.dest)
            .ok()
            .map(|b| kubexm_bundles::hash::sha256_hex(&b))
    }

    /// The temporary copy beside the destination, renamed into place once checked.
    fn part(&self) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt as _;
        let dir = self
            .dest
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(self.dest.with_extension("kubexm-part"))
    }
}

#[async_trait]
impl GenericStep for FetchFile {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "fetch",
            detail: format!(
                "{} -> control host {} ({:o})",
                self.src,
                self.dest.display(),
                self.mode
            ),
            input: None,
        }
    }
    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        let Some(local) = self.local_sha256() else {
            return Ok(false);
        };
        Ok(self.remote_sha256(runner).await? == local)
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        use std::os::unix::fs::PermissionsExt as _;
        let local = |e: std::io::Error| {
            StepError::Invalid(format!("cannot write {}: {e}", self.dest.display()))
        };
        let part = self.part().map_err(local)?;
        crate::runner::fetch::fetch_file(runner, &self.src, &part, FETCH_MAX)
            .await
            .map_err(|e| match e {
                crate::runner::fetch::FetchError::Run(r) => StepError::from(r),
                other => {
                    StepError::Verify(format!("{}; run again", crate::error_chain::Chain(&other)))
                }
            })?;
        std::fs::set_permissions(&part, std::fs::Permissions::from_mode(self.mode))
            .map_err(local)?;
        std::fs::rename(&part, &self.dest).map_err(local)
    }
    fn revert(&self) -> Option<String> {
        None
    }
}
