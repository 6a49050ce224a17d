//! Generic steps: the small, typed actions every specific step is made of.
//!
//! A generic step knows how to tell whether it is already done, how to do it, how to check it
//! worked, and the shell that undoes it. It never appears in a task on its own: specific steps
//! (see [`super::Step`]) return a list of them from `ops()`, so a task cannot hold one directly.

mod command;
mod files;
mod learn;
mod reboot;
mod require;
mod seed;
mod systemd;
mod wait;

pub use command::{Check, Package, PackageSource, RunCommand};
pub use files::{
    CopyFile, CreateDir, ExtractTarball, ManagedBlock, RenderTemplate, SetPermission, TreeFile,
    UploadFile, UploadTree, BLOCK_BEGIN, BLOCK_END,
};
pub use learn::{FactParser, FetchFile, LearnFacts};
pub use reboot::{
    boot_id, wait_for_new_boot, BadBootId, BootId, Reboot, WaitBounds, BOOT_ID_PATH, REBOOT_COMMAND,
};
pub use require::{Require, Verdict};
pub use seed::SeedImages;
pub use systemd::{Systemd, SystemdAction};
pub use wait::WaitFor;

use async_trait::async_trait;

use super::StepError;
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

/// A generic step (closed set: the engine's vocabulary).
#[derive(Debug, Clone)]
pub enum Op {
    /// Run a command.
    Run(RunCommand),
    /// A check that fails the step with its own message.
    Check(Check),
    /// Install OS packages.
    Package(Package),
    /// Upload a file.
    Upload(UploadFile),
    /// Upload many files into a directory KubeXM owns.
    UploadTree(UploadTree),
    /// Render a template to a file.
    Template(RenderTemplate),
    /// Create a directory.
    Mkdir(CreateDir),
    /// Set mode/owner.
    Chmod(SetPermission),
    /// Copy a file already on the node.
    Copy(CopyFile),
    /// Extract a tarball on the node.
    Extract(ExtractTarball),
    /// Keep a `# BEGIN KubeXM Managed Block` in a file.
    Block(ManagedBlock),
    /// daemon-reload / enable --now / restart / is-active.
    Systemd(Systemd),
    /// Poll until a condition holds.
    Wait(WaitFor),
    /// Push the bundle's images into a registry (control host).
    Seed(SeedImages),
    /// Learn values from a node's output for later tasks.
    Learn(LearnFacts),
    /// Copy a file from the node to the control host.
    Fetch(FetchFile),
    /// A requirement decided from facts learned earlier.
    Require(Require),
    /// Reboot the node and wait for it to answer from a new boot.
    Reboot(Reboot),
}

impl Op {
    /// The generic step behind the variant.
    pub fn generic(&self) -> &dyn GenericStep {
        match self {
            Op::Run(o) => o,
            Op::Check(o) => o,
            Op::Package(o) => o,
            Op::Upload(o) => o,
            Op::UploadTree(o) => o,
            Op::Template(o) => o,
            Op::Mkdir(o) => o,
            Op::Chmod(o) => o,
            Op::Copy(o) => o,
            Op::Extract(o) => o,
            Op::Block(o) => o,
            Op::Systemd(o) => o,
            Op::Wait(o) => o,
            Op::Seed(o) => o,
            Op::Learn(o) => o,
            Op::Fetch(o) => o,
            Op::Require(o) => o,
            Op::Reboot(o) => o,
        }
    }
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
