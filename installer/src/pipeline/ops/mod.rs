//! Generic steps: the small, typed actions every specific step is made of.
//!
//! A generic step knows how to tell whether it is already done, how to do it, how to check it
//! worked, and the shell that undoes it. It never appears in a task on its own: specific steps
//! (see [`super::Step`]) return a list of them from `ops()`, so a task cannot hold one directly.

mod command;
mod files;
mod generic;
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
pub use wait::{Judge, WaitFor, WaitOutput};

pub use generic::{Applied, GenericStep, OpPlan, Written};

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
    /// Poll a script until a judge accepts its output.
    WaitOutput(WaitOutput),
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
            Op::WaitOutput(o) => o,
            Op::Seed(o) => o,
            Op::Learn(o) => o,
            Op::Fetch(o) => o,
            Op::Require(o) => o,
            Op::Reboot(o) => o,
        }
    }
}
