//! The nodes a module applies to. Create runs every module on every node it concerns
//! ([`Scope::All`]); a day-2 pipeline (add-node, delete-node) reuses the same modules, each
//! wrapped in [`Scoped`] with the nodes concerned, so node preparation, runtime and join logic
//! exist once.

use std::collections::BTreeSet;

use crate::inventory::CONTROL_HOST;
use crate::pipeline::{Module, Pipeline, StepError, Task};

/// The set of nodes a module applies to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    /// Every node the module concerns (what the create and delete pipelines use).
    #[default]
    All,
    /// Only these nodes (cluster.yaml host names) and the control host.
    Nodes(BTreeSet<String>),
}

impl Scope {
    /// Whether `node` is in scope. The control host ([`CONTROL_HOST`]) always is: its tasks
    /// (certificates, kubeconfigs, registry seeding) prepare what the nodes in scope need.
    pub fn contains(&self, node: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Nodes(names) => node == CONTROL_HOST || names.contains(node),
        }
    }
}

/// A node named for a scope is not in cluster.yaml.
#[derive(Debug, thiserror::Error)]
#[error("node {name:?} is not in cluster.yaml's spec.hosts (known: {known})")]
pub struct UnknownNode {
    /// The name given.
    pub name: String,
    /// The hosts cluster.yaml names, comma-separated.
    pub known: String,
}

/// A module restricted to a [`Scope`]: every task keeps only the hosts in scope, and a task
/// left without hosts is dropped. With [`Scope::All`] the module's tasks are unchanged.
pub struct Scoped {
    module: Box<dyn Module>,
    scope: Scope,
}

impl Scoped {
    /// `module` restricted to `scope`.
    pub fn new(module: impl Module + 'static, scope: Scope) -> Self {
        Self::boxed(Box::new(module), scope)
    }

    /// A boxed module (as a [`Pipeline`] holds them) restricted to `scope`.
    pub fn boxed(module: Box<dyn Module>, scope: Scope) -> Self {
        Self { module, scope }
    }
}

/// Every module of `pipeline` restricted to `scope` (e.g. the create pipeline's node
/// preparation, runtime and join for the nodes add-node joins).
pub fn scoped(pipeline: Pipeline, scope: &Scope) -> Pipeline {
    Pipeline {
        name: pipeline.name,
        modules: pipeline
            .modules
            .into_iter()
            .map(|m| Box::new(Scoped::boxed(m, scope.clone())) as Box<dyn Module>)
            .collect(),
    }
}

impl Module for Scoped {
    fn name(&self) -> &str {
        self.module.name()
    }

    fn skip(&self) -> Option<String> {
        self.module.skip()
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let mut tasks = self.module.tasks()?;
        if self.scope == Scope::All {
            return Ok(tasks);
        }
        for t in &mut tasks {
            t.hosts.retain(|h| self.scope.contains(h));
        }
        tasks.retain(|t| !t.hosts.is_empty());
        Ok(tasks)
    }
}

/// `module.scoped(scope)` for any module.
pub trait ScopeExt: Module + Sized + 'static {
    /// This module restricted to `scope`.
    fn scoped(self, scope: Scope) -> Scoped {
        Scoped::new(self, scope)
    }
}

impl<M: Module + Sized + 'static> ScopeExt for M {}
