//! Phases: how a day-2 pipeline reuses a module. A [`Phase`] is a module under a title (its name
//! in the plan, the journal and the resume state), skipped when the facts say so, restricted to
//! a [`Scope`], optionally to some of its tasks, and optionally one node at a time (a load
//! balancer or an API server is changed on one node while the others serve).
//!
//! A day-2 command is its list of phases: the plan (`--dry-run`) and the run come from the same
//! list, so what would change and what changes cannot differ.

use crate::context::Scope;
use crate::modules::task_id::TaskId;
use crate::pipeline::{Module, StepError, Task};

/// Which of the module's tasks a phase keeps.
#[derive(Debug, Clone, Default)]
enum Tasks {
    #[default]
    All,
    Only(Vec<TaskId>),
    Except(Vec<TaskId>),
}

/// A module as one phase of a day-2 pipeline.
pub struct Phase {
    title: String,
    module: Box<dyn Module>,
    /// Every scope given, in order (a node must be in all of them).
    scopes: Vec<Scope>,
    skip: Option<String>,
    serial: bool,
    tasks: Tasks,
}

impl Phase {
    /// `module` as the phase `title`, on every node it concerns.
    pub fn new(title: impl Into<String>, module: impl Module + 'static) -> Self {
        Self {
            title: title.into(),
            module: Box::new(module),
            scopes: Vec::new(),
            skip: None,
            serial: false,
            tasks: Tasks::All,
        }
    }

    /// Only on the nodes of `scope` (and the control host).
    #[must_use]
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scopes.push(scope);
        self
    }

    /// Every task one node at a time.
    #[must_use]
    pub fn one_at_a_time(mut self) -> Self {
        self.serial = true;
        self
    }

    /// Only these tasks of the module; planning fails when the module has none of them (a
    /// phase that selects nothing is a mistake, not an empty phase).
    #[must_use]
    pub fn only(mut self, tasks: &[TaskId]) -> Self {
        self.tasks = Tasks::Only(tasks.to_vec());
        self
    }

    /// All but these tasks of the module.
    #[must_use]
    pub fn except(mut self, tasks: &[TaskId]) -> Self {
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
        let named = |ids: &[TaskId], t: &Task| ids.iter().any(|id| id.as_str() == t.name);
        match &self.tasks {
            Tasks::All => {}
            Tasks::Only(ids) => {
                let names: Vec<String> = tasks.iter().map(|t| t.name.clone()).collect();
                tasks.retain(|t| named(ids, t));
                if tasks.is_empty() {
                    return Err(StepError::Invalid(format!(
                        "phase {}: module {} has none of the tasks it selects ({}); its tasks: {}",
                        self.title,
                        self.module.name(),
                        ids.iter()
                            .map(|id| id.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    )));
                }
            }
            Tasks::Except(ids) => tasks.retain(|t| !named(ids, t)),
        }
        // As `Scoped` does: a task keeps the hosts in scope, and is dropped without any.
        for scope in &self.scopes {
            if *scope == Scope::All {
                continue;
            }
            for t in &mut tasks {
                t.hosts.retain(|h| scope.contains(h));
            }
            tasks.retain(|t| !t.hosts.is_empty());
        }
        if self.serial {
            for t in &mut tasks {
                t.parallel = false;
            }
        }
        Ok(tasks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: TaskId = TaskId::new("a");
    const RENAMED: TaskId = TaskId::new("renamed");

    struct Two;

    impl Module for Two {
        fn name(&self) -> &str {
            "two"
        }
        fn tasks(&self) -> Result<Vec<Task>, StepError> {
            Ok(vec![Task::new(A, ["n1"]), Task::new("b", ["n2"])])
        }
    }

    fn names(p: &Phase) -> Vec<String> {
        p.tasks()
            .expect("tasks")
            .into_iter()
            .map(|t| t.name)
            .collect()
    }

    #[test]
    fn only_keeps_the_named_tasks_and_except_drops_them() {
        assert_eq!(names(&Phase::new("p", Two).only(&[A])), ["a"]);
        assert_eq!(names(&Phase::new("p", Two).except(&[A])), ["b"]);
        assert_eq!(names(&Phase::new("p", Two)), ["a", "b"]);
    }

    #[test]
    fn a_phase_that_selects_nothing_fails() {
        let Err(e) = Phase::new("p", Two).only(&[RENAMED]).tasks() else {
            panic!("a phase selecting nothing planned");
        };
        let e = e.to_string();
        assert!(
            e.contains("phase p: module two has none of the tasks it selects (renamed)"),
            "{e}"
        );
        assert!(e.contains("its tasks: a, b"), "{e}");
    }

    #[test]
    fn a_scope_that_leaves_a_selected_task_without_hosts_drops_it_as_before() {
        let scope = Scope::Nodes(["n2".to_string()].into());
        assert!(names(&Phase::new("p", Two).only(&[A]).scope(scope)).is_empty());
    }
}
