//! Typed task names. A day-2 phase keeps some of a module's tasks
//! ([`crate::pipelines::phase::Phase::only`]) by the [`TaskId`] constant defined next to the task,
//! never by a string literal: the module and the phase share one name.

use std::fmt;

/// A task's name, as a constant next to the module that makes the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(&'static str);

impl TaskId {
    /// The task named `name`.
    pub const fn new(name: &'static str) -> Self {
        Self(name)
    }

    /// Its name (as in the plan, the journal and the resume state).
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> Self {
        id.0.to_string()
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
