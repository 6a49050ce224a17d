//! Phases: how a day-2 pipeline reuses a module. A [`Phase`] is a module under a title (its name
//! in the plan, the journal and the resume state), skipped when the facts say so, restricted to
//! a [`Scope`], optionally to some of its tasks, and optionally one node at a time (a load
//! balancer or an API server is changed on one node while the others serve).
//!
//! A day-2 command is its list of phases: the plan (`--dry-run`) and the run come from the same
//! list, so what would change and what changes cannot differ.

use crate::context::{Scope, Scoped};
use crate::pipeline::{Module, StepError, Task};

/// Which of the module's tasks a phase keeps.
#[derive(Debug, Clone, Default)]
enum Tasks {
    #[default]
    All,
    Only(Vec<&'static str>),
    Except(Vec<&'static str>),
}

/// A module as one phase of a day-2 pipeline.
pub struct Phase {
    title: String,
    module: Scoped,
    skip: Option<String>,
    serial: bool,
    tasks: Tasks,
}

impl Phase {
    /// `module` as the phase `title`, on every node it concerns.
    pub fn new(title: impl Into<String>, module: impl Module + 'static) -> Self {
        Self {
            title: title.into(),
            module: Scoped::new(module, Scope::All),
            skip: None,
            serial: false,
            tasks: Tasks::All,
        }
    }

    /// Only on the nodes of `scope` (and the control host).
    #[must_use]
    pub fn scope(self, scope: Scope) -> Self {
        let Self {
            title,
            module,
            skip,
            serial,
            tasks,
        } = self;
        Self {
            title,
            module: Scoped::boxed(Box::new(module), scope),
            skip,
            serial,
            tasks,
        }
    }

    /// Every task one node at a time.
    #[must_use]
    pub fn one_at_a_time(mut self) -> Self {
        self.serial = true;
        self
    }

    /// Only the named tasks of the module.
    #[must_use]
    pub fn only(mut self, tasks: &[&'static str]) -> Self {
        self.tasks = Tasks::Only(tasks.to_vec());
        self
    }

    /// All but the named tasks of the module.
    #[must_use]
    pub fn except(mut self, tasks: &[&'static str]) -> Self {
        self.tasks = Tasks::Except(tasks.to_vec());
        self
    }

    /// Skipped, for `reason`, when `cond` holds (decided from the facts and the change).
    #[must_use]
    pub fn skip_if(mut self, cond: bool, reason: impl Into<String>) -> Self {
        if cond && self.skip.is_none() {
            self.skip = Some(reason.into());
        }
        self
    }
}

impl Module for Phase {
    fn name(&self) -> &str {
        &self.title
    }

    fn skip(&self) -> Option<String> {
        self.skip.clone().or_else(|| self.module.skip())
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let mut tasks = self.module.tasks()?;
        match &self.tasks {
            Tasks::All => {}
            Tasks::Only(names) => tasks.retain(|t| names.contains(&t.name.as_str())),
            Tasks::Except(names) => tasks.retain(|t| !names.contains(&t.name.as_str())),
        }
        if self.serial {
            for t in &mut tasks {
                t.parallel = false;
            }
        }
        Ok(tasks)
    }
}
