//! The install engine: Pipeline → Module → Task → Step → generic steps ([`ops`]).
//!
//! * A **generic step** ([`ops::Op`]) is one typed action (run a command, upload a file, enable
//!   a service…) with its check, verification and revert.
//! * A **specific step** ([`Step`]) is a named unit of work ("install containerd binaries") that
//!   returns the generic steps it is made of for one node. It never touches a transport.
//! * A **task** ([`Task`]) assembles specific steps and says on which nodes they run and whether
//!   in parallel.
//! * A **module** ([`Module`]) only decides whether it runs and which tasks it has.
//! * A **pipeline** ([`Pipeline`]) is an ordered list of modules, run by [`executor::Executor`].

pub mod critical_path;
pub(crate) mod error;
pub mod executor;
pub(crate) mod facts;
pub mod journal;
pub mod ops;
pub mod plan;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use kubexm_manifests::resolve::Role;

use ops::Op;

pub use error::StepError;
pub use facts::Facts;

/// How a step is run: time limit and retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Limit for one attempt of the whole step.
    pub timeout: Duration,
    /// Attempts in all (1 = no retry).
    pub attempts: u32,
    /// Pause between attempts.
    pub retry_delay: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            attempts: 2,
            retry_delay: Duration::from_secs(2),
        }
    }
}

/// A cluster node as the engine sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    /// Name (cluster.yaml host name; `localhost` for the control host).
    pub name: String,
    /// Address the control host connects to.
    pub address: String,
    /// Address inside the cluster.
    pub internal_address: String,
    /// Roles, in [`Role`]'s order (none for the control host).
    pub roles: Vec<Role>,
    /// CPU architecture as the bundle names it (`amd64`, `arm64`).
    pub arch: String,
}

impl Node {
    /// Has the role.
    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// A specific step: a named unit of work made of generic steps.
pub trait Step: Send + Sync {
    /// Name, e.g. `install-containerd-binaries`.
    fn name(&self) -> &str;
    /// The generic steps for `node`, in order. Pure: no remote calls (the plan uses it too).
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError>;
    /// Timeout and retries.
    fn policy(&self) -> Policy {
        Policy::default()
    }
}

/// Which nodes a task runs on, and how.
pub struct Task {
    /// Name, e.g. `install-containerd`.
    pub name: String,
    /// Node names, in order.
    pub hosts: Vec<String>,
    /// Run the hosts in parallel (bounded by the executor's cap) or one after another.
    pub parallel: bool,
    /// The specific steps.
    pub steps: Vec<Arc<dyn Step>>,
}

impl Task {
    /// A parallel task on `hosts` with no steps yet.
    pub fn new(
        name: impl Into<String>,
        hosts: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            hosts: hosts.into_iter().map(Into::into).collect(),
            parallel: true,
            steps: Vec::new(),
        }
    }

    /// Run the hosts one after another.
    #[must_use]
    pub fn serial(mut self) -> Self {
        self.parallel = false;
        self
    }

    /// Adds a specific step.
    #[must_use]
    pub fn step(mut self, step: impl Step + 'static) -> Self {
        self.steps.push(Arc::new(step));
        self
    }

    /// Adds a step shared with other tasks (e.g. the same uploads for masters and workers).
    #[must_use]
    pub fn step_arc(mut self, step: Arc<dyn Step>) -> Self {
        self.steps.push(step);
        self
    }
}

/// A module: decides whether it runs and which tasks it has.
pub trait Module: Send + Sync {
    /// Name, e.g. `runtime`.
    fn name(&self) -> &str;
    /// `Some(reason)` when the module does not apply to this cluster.
    fn skip(&self) -> Option<String> {
        None
    }
    /// The tasks, in order.
    fn tasks(&self) -> Result<Vec<Task>, StepError>;
}

/// An ordered list of modules.
pub struct Pipeline {
    /// Name, e.g. `install`.
    pub name: String,
    /// Modules in order.
    pub modules: Vec<Box<dyn Module>>,
}
