//! [`Facts`]: values learned while a pipeline runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
