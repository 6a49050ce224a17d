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
pub mod executor;
pub mod journal;
pub mod ops;
pub mod plan;
pub mod state;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubexm_manifests::resolve::Role;

use crate::runner::RunError;
use ops::Op;

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The node could not be reached or the command could not run.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A command exited non-zero.
    #[error("`{command}` exited with {}: {stderr}", code.map_or_else(|| "a signal".to_string(), |c| format!("status {c}")))]
    Command {
        /// First line of the command.
        command: String,
        /// Exit status.
        code: Option<i32>,
        /// Its stderr.
        stderr: String,
    },
    /// A check on the node failed (the message says what is wrong and what to do).
    #[error("{what}: {message}")]
    Check {
        /// What was checked.
        what: String,
        /// The check's message.
        message: String,
    },
    /// The action ran but its verification failed.
    #[error("verification failed: {0}")]
    Verify(String),
    /// The step ran longer than its policy allows.
    #[error("step timed out after {0:?}")]
    Timeout(Duration),
    /// A template failed to render.
    #[error("template {name}: {message}")]
    Template {
        /// Template name.
        name: String,
        /// Tera's explanation.
        message: String,
    },
    /// Seeding the registry failed.
    #[error("seeding the registry: {0}")]
    Seed(String),
    /// The step cannot be built for this node (bad input; names what to fix).
    #[error("{0}")]
    Invalid(String),
    /// Certificates or keys could not be made or read (the cause says which file and why).
    #[error("{what}")]
    Pki {
        /// Which certificates (e.g. "Kubernetes certificates").
        what: &'static str,
        /// Cause.
        #[source]
        source: crate::pki::PkiError,
    },
}

impl StepError {
    /// Worth another try (transient); bad input and templates are not.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            StepError::Template { .. }
                | StepError::Invalid(_)
                | StepError::Pki { .. }
                | StepError::Check { .. }
                | StepError::Run(RunError::Auth { .. })
                | StepError::Run(RunError::HostKey { .. })
        )
    }
}

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

/// Values learned while the pipeline runs (e.g. the join credentials), readable by later
/// steps: a step's `ops()` is built when its task starts on a node, so a task sees what earlier
/// tasks learned ([`ops::LearnFacts`] stores them).
///
/// The plan is built without running anything, so nothing is learned: [`Facts::is_planning`]
/// tells steps to describe placeholders instead of failing on a missing value.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    values: Arc<Mutex<BTreeMap<String, String>>>,
    planning: bool,
}

impl Facts {
    /// Stores a value.
    pub fn set(&self, key: impl Into<String>, value: impl Into<String>) {
        if let Ok(mut m) = self.values.lock() {
            m.insert(key.into(), value.into());
        }
    }

    /// Reads a value.
    pub fn get(&self, key: &str) -> Option<String> {
        self.values.lock().ok().and_then(|m| m.get(key).cloned())
    }

    /// The same facts, marked as seen by the plan (nothing runs, nothing is learned).
    #[must_use]
    pub fn for_plan(&self) -> Self {
        Self {
            values: self.values.clone(),
            planning: true,
        }
    }

    /// Whether the steps are being planned rather than run.
    pub fn is_planning(&self) -> bool {
        self.planning
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
