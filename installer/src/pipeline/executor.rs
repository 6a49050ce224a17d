//! Runs a [`Pipeline`]: modules in order, each task on its nodes (in parallel up to a cap),
//! each step with its timeout and retries, reverts pushed on a rollback stack before every change
//! and run LIFO when the task fails on a node, and a state file for `--resume`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::Semaphore;

use super::journal::{At, Event, Journal};
use super::ops::{Op, OpPlan};
use super::state::{inputs_hash, StateError, StateFile};
use super::{Facts, Node, Pipeline, Step, StepError, Task};
use crate::error_chain::{chain, Chain};
use crate::runner::{Exec, Runner};

/// How to run.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Most nodes working at the same time.
    pub concurrency: usize,
    /// Skip (task, node) pairs the state file records with the same inputs.
    pub resume: bool,
    /// The state file.
    pub state_path: PathBuf,
}

/// One node's failure within a task.
#[derive(Debug, Clone)]
pub struct HostFailure {
    /// Node.
    pub node: String,
    /// The step that failed.
    pub step: String,
    /// Why (redacted).
    pub error: String,
    /// Changes undone by the rollback.
    pub reverted: usize,
    /// Reverts that failed themselves (redacted).
    pub revert_errors: Vec<String>,
}

/// Why a pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A task failed on one or more nodes (every node's error is listed).
    #[error("{}", TaskFailedDisplay { module, task, failures, hosts: *hosts })]
    TaskFailed {
        /// Module.
        module: String,
        /// Task.
        task: String,
        /// Nodes the task ran on.
        hosts: usize,
        /// Each failing node.
        failures: Vec<HostFailure>,
    },
    /// A module could not build its tasks.
    #[error("module {module}")]
    Build {
        /// Module.
        module: String,
        /// Cause.
        #[source]
        source: StepError,
    },
    /// A task names a node that has no runner.
    #[error("task {task} runs on `{node}`, which is not a known node")]
    UnknownNode {
        /// Task.
        task: String,
        /// Node.
        node: String,
    },
    /// The state file could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
}

struct TaskFailedDisplay<'a> {
    module: &'a str,
    task: &'a str,
    failures: &'a [HostFailure],
    hosts: usize,
}

impl fmt::Display for TaskFailedDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task {}/{} failed on {} of {} node(s):",
            self.module,
            self.task,
            self.failures.len(),
            self.hosts
        )?;
        for h in self.failures {
            write!(f, "\n  {}: step {}: {}", h.node, h.step, h.error)?;
            write!(f, "\n    rolled back {} change(s)", h.reverted)?;
            for e in &h.revert_errors {
                write!(f, "\n    revert failed: {e}")?;
            }
        }
        Ok(())
    }
}

/// What a successful run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// (task, node) pairs run.
    pub tasks_run: usize,
    /// (task, node) pairs skipped by `--resume`.
    pub tasks_resumed: usize,
    /// Modules skipped by their conditions.
    pub modules_skipped: usize,
    /// Steps that changed something.
    pub steps_changed: usize,
    /// Steps that only checked something (preflight, waits).
    pub steps_checked: usize,
    /// Steps already done.
    pub steps_unchanged: usize,
}

struct Revert {
    step: String,
    op: String,
    script: String,
}

/// What a task has done on one node so far: the rollback stack and the clean-ups to run once
/// the task succeeded.
#[derive(Default)]
struct Ledger {
    stack: Vec<Revert>,
    commits: Vec<String>,
}

enum StepOutcome {
    Changed,
    Checked,
    Unchanged,
}

/// What one step's attempts did so far (kept across retries: a change made by a failed attempt
/// still counts for restart handlers).
#[derive(Default)]
struct StepProgress {
    changed: bool,
    checked: bool,
}

/// Runs pipelines over a fixed set of nodes.
pub struct Executor {
    nodes: BTreeMap<String, (Node, Arc<dyn Runner>)>,
    facts: Facts,
    journal: Arc<Journal>,
    options: ExecOptions,
}

impl Executor {
    /// An executor over `nodes`, each with its runner (one connection per node for the run).
    pub fn new(
        nodes: Vec<(Node, Arc<dyn Runner>)>,
        journal: Arc<Journal>,
        options: ExecOptions,
    ) -> Self {
        Self {
            nodes: nodes
                .into_iter()
                .map(|(n, r)| (n.name.clone(), (n, r)))
                .collect(),
            facts: Facts::default(),
            journal,
            options,
        }
    }

    /// Facts shared by steps.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    /// Runs the pipeline to the end or the first failed task.
    pub async fn run(&self, pipeline: &Pipeline) -> Result<RunReport, PipelineError> {
        let started = Instant::now();
        let state = Mutex::new(StateFile::open(
            &self.options.state_path,
            &pipeline.name,
            self.options.resume,
        )?);
        self.journal.record(
            Event::PipelineStarted,
            &At::default(),
            &format!(
                "pipeline {} on {} node(s){}",
                pipeline.name,
                self.nodes.len(),
                if self.options.resume { " (resume)" } else { "" }
            ),
            None,
        );
        let result = self.run_modules(pipeline, &state).await;
        let elapsed = started.elapsed();
        match &result {
            Ok(_) => self.journal.record(
                Event::PipelineSucceeded,
                &At::default(),
                &format!("pipeline {} succeeded", pipeline.name),
                Some(elapsed),
            ),
            Err(e) => self.journal.record(
                Event::PipelineFailed,
                &At::default(),
                &chain(e),
                Some(elapsed),
            ),
        }
        if let Err(e) = self.journal.write_metrics(result.is_ok(), elapsed) {
            tracing::warn!("could not write metrics: {e}");
        }
        result
    }

    async fn run_modules(
        &self,
        pipeline: &Pipeline,
        state: &Mutex<StateFile>,
    ) -> Result<RunReport, PipelineError> {
        let mut report = RunReport::default();
        let cap = Arc::new(Semaphore::new(self.options.concurrency.max(1)));
        for module in &pipeline.modules {
            let at = At {
                module: Some(module.name()),
                ..At::default()
            };
            if let Some(reason) = module.skip() {
                self.journal
                    .record(Event::ModuleSkipped, &at, &reason, None);
                report.modules_skipped += 1;
                continue;
            }
            let tasks = module.tasks().map_err(|source| PipelineError::Build {
                module: module.name().to_string(),
                source,
            })?;
            self.journal.record(Event::ModuleStarted, &at, "", None);
            for task in &tasks {
                self.run_task(module.name(), task, state, &cap, &mut report)
                    .await?;
            }
        }
        Ok(report)
    }

    async fn run_task(
        &self,
        module: &str,
        task: &Task,
        state: &Mutex<StateFile>,
        cap: &Arc<Semaphore>,
        report: &mut RunReport,
    ) -> Result<(), PipelineError> {
        for h in &task.hosts {
            if !self.nodes.contains_key(h) {
                return Err(PipelineError::UnknownNode {
                    task: task.name.clone(),
                    node: h.clone(),
                });
            }
        }
        let at = At {
            module: Some(module),
            task: Some(&task.name),
            ..At::default()
        };
        let started = Instant::now();
        self.journal.record(
            Event::TaskStarted,
            &at,
            &format!("on {}", task.hosts.join(",")),
            None,
        );
        let key = format!("{module}/{}", task.name);
        let outcomes: Vec<(String, Result<HostRun, HostFailure>)> = if task.parallel {
            join_all(task.hosts.iter().map(|h| async {
                let _permit = cap.acquire().await;
                (h.clone(), self.run_host(module, task, h, &key, state).await)
            }))
            .await
        } else {
            let mut v = Vec::new();
            for h in &task.hosts {
                let _permit = cap.acquire().await;
                let r = self.run_host(module, task, h, &key, state).await;
                let failed = r.is_err();
                v.push((h.clone(), r));
                if failed {
                    break;
                }
            }
            v
        };
        let mut failures = Vec::new();
        for (_, r) in outcomes {
            match r {
                Ok(HostRun::Resumed) => report.tasks_resumed += 1,
                Ok(HostRun::Ran {
                    changed,
                    checked,
                    unchanged,
                }) => {
                    report.tasks_run += 1;
                    report.steps_changed += changed;
                    report.steps_checked += checked;
                    report.steps_unchanged += unchanged;
                }
                Err(f) => failures.push(f),
            }
        }
        if failures.is_empty() {
            self.journal
                .record(Event::TaskSucceeded, &at, "", Some(started.elapsed()));
            Ok(())
        } else {
            let err = PipelineError::TaskFailed {
                module: module.to_string(),
                task: task.name.clone(),
                hosts: task.hosts.len(),
                failures,
            };
            self.journal.record(
                Event::TaskFailed,
                &at,
                &err.to_string(),
                Some(started.elapsed()),
            );
            Err(err)
        }
    }

    async fn run_host(
        &self,
        module: &str,
        task: &Task,
        host: &str,
        key: &str,
        state: &Mutex<StateFile>,
    ) -> Result<HostRun, HostFailure> {
        let fail = |step: &str, error: String| HostFailure {
            node: host.to_string(),
            step: step.to_string(),
            error: self.journal.redact(&error),
            reverted: 0,
            revert_errors: Vec::new(),
        };
        let Some((node, runner)) = self.nodes.get(host) else {
            return Err(fail("-", "unknown node".to_string()));
        };
        let at = At {
            module: Some(module),
            task: Some(&task.name),
            node: Some(host),
            step: None,
        };
        // Build every step's generic steps first: the inputs hash covers them all.
        let mut built: Vec<(&Arc<dyn Step>, Vec<Op>)> = Vec::new();
        for step in &task.steps {
            let ops = step
                .ops(node, &self.facts)
                .map_err(|e| fail(step.name(), chain(&e)))?;
            built.push((step, ops));
        }
        let plans: Vec<(String, Vec<OpPlan>)> = built
            .iter()
            .map(|(s, ops)| {
                (
                    s.name().to_string(),
                    ops.iter().map(|o| o.generic().plan()).collect(),
                )
            })
            .collect();
        let inputs = inputs_hash(key, &plans);
        // What a task learns lives in this run's memory only: a task that learns facts for
        // later tasks always runs.
        let learns = built
            .iter()
            .any(|(_, ops)| ops.iter().any(|o| matches!(o, Op::Learn(_))));
        if self.options.resume
            && !learns
            && state
                .lock()
                .map(|s| s.is_done(key, host, &inputs))
                .unwrap_or(false)
        {
            self.journal.record(
                Event::TaskSkipped,
                &at,
                "done in an earlier run (--resume)",
                None,
            );
            return Ok(HostRun::Resumed);
        }

        let mut ledger = Ledger::default();
        let (mut changed, mut checked, mut unchanged) = (0, 0, 0);
        for (step, ops) in &built {
            let step_at = At {
                step: Some(step.name()),
                ..at.clone()
            };
            match self
                .run_step(runner.as_ref(), step.as_ref(), ops, &step_at, &mut ledger)
                .await
            {
                Ok(StepOutcome::Changed) => changed += 1,
                Ok(StepOutcome::Checked) => checked += 1,
                Ok(StepOutcome::Unchanged) => unchanged += 1,
                Err(e) => {
                    let mut failure = fail(step.name(), chain(&e));
                    self.rollback(runner.as_ref(), &at, &mut ledger.stack, &mut failure)
                        .await;
                    if let Ok(mut s) = state.lock() {
                        let _ = s.forget(key, host);
                    }
                    return Err(failure);
                }
            }
        }
        if !ledger.commits.is_empty() {
            let script = ledger.commits.join("\n");
            if let Err(e) = runner.exec(&Exec::root(script)).await {
                tracing::warn!("{host}: dropping rollback backups failed: {e}");
            }
        }
        if let Ok(mut s) = state.lock() {
            s.record(key, host, &inputs)
                .map_err(|e| fail("-", chain(&e)))?;
        }
        Ok(HostRun::Ran {
            changed,
            checked,
            unchanged,
        })
    }

    async fn run_step(
        &self,
        runner: &dyn Runner,
        step: &dyn Step,
        ops: &[Op],
        at: &At<'_>,
        ledger: &mut Ledger,
    ) -> Result<StepOutcome, StepError> {
        let policy = step.policy();
        let attempts = policy.attempts.max(1);
        let started = Instant::now();
        self.journal.record(Event::StepStarted, at, "", None);
        let mut attempt = 1;
        let mut progress = StepProgress::default();
        loop {
            let result = match tokio::time::timeout(
                policy.timeout,
                apply_ops(
                    &self.journal,
                    at,
                    runner,
                    step.name(),
                    ops,
                    ledger,
                    &mut progress,
                ),
            )
            .await
            {
                Ok(r) => r.map(|()| {
                    if progress.changed {
                        StepOutcome::Changed
                    } else if progress.checked {
                        StepOutcome::Checked
                    } else {
                        StepOutcome::Unchanged
                    }
                }),
                Err(_) => Err(StepError::Timeout(policy.timeout)),
            };
            match result {
                Ok(StepOutcome::Checked) => {
                    self.journal.record(
                        Event::StepSucceeded,
                        at,
                        "checked",
                        Some(started.elapsed()),
                    );
                    return Ok(StepOutcome::Checked);
                }
                Ok(StepOutcome::Changed) => {
                    self.journal.record(
                        Event::StepSucceeded,
                        at,
                        "changed",
                        Some(started.elapsed()),
                    );
                    return Ok(StepOutcome::Changed);
                }
                Ok(StepOutcome::Unchanged) => {
                    self.journal.record(
                        Event::StepSkipped,
                        at,
                        "already done",
                        Some(started.elapsed()),
                    );
                    return Ok(StepOutcome::Unchanged);
                }
                Err(e) if attempt < attempts && e.is_retryable() => {
                    self.journal.record(
                        Event::StepRetried,
                        at,
                        &format!(
                            "attempt {attempt}/{attempts} failed: {}; retrying in {:?}",
                            Chain(&e),
                            policy.retry_delay
                        ),
                        None,
                    );
                    attempt += 1;
                    tokio::time::sleep(policy.retry_delay).await;
                }
                Err(e) => {
                    self.journal
                        .record(Event::StepFailed, at, &chain(&e), Some(started.elapsed()));
                    return Err(e);
                }
            }
        }
    }

    async fn rollback(
        &self,
        runner: &dyn Runner,
        at: &At<'_>,
        stack: &mut Vec<Revert>,
        failure: &mut HostFailure,
    ) {
        if stack.is_empty() {
            return;
        }
        self.journal.record(
            Event::RollbackStarted,
            at,
            &format!("undoing {} change(s)", stack.len()),
            None,
        );
        while let Some(r) = stack.pop() {
            let step_at = At {
                step: Some(&r.step),
                ..at.clone()
            };
            let exec = Exec::root(r.script.clone()).with_timeout(Duration::from_secs(120));
            match runner.exec(&exec).await {
                Ok(out) if out.success() => {
                    failure.reverted += 1;
                    self.journal.record(
                        Event::StepReverted,
                        &step_at,
                        &format!("reverted {}", r.op),
                        None,
                    );
                }
                Ok(out) => {
                    let msg = self.journal.redact(&format!(
                        "{}: revert of {} exited {:?}: {}",
                        r.step,
                        r.op,
                        out.code,
                        out.stderr.trim()
                    ));
                    self.journal
                        .record(Event::RevertFailed, &step_at, &msg, None);
                    failure.revert_errors.push(msg);
                }
                Err(e) => {
                    let msg = self.journal.redact(&format!(
                        "{}: revert of {}: {}",
                        r.step,
                        r.op,
                        Chain(&e)
                    ));
                    self.journal
                        .record(Event::RevertFailed, &step_at, &msg, None);
                    failure.revert_errors.push(msg);
                }
            }
        }
    }
}

enum HostRun {
    Resumed,
    Ran {
        changed: usize,
        checked: usize,
        unchanged: usize,
    },
}

/// Applies a step's generic steps in order: each is checked first (skipped when done), its
/// revert is pushed before it runs, and it is verified after. Returns whether anything changed.
async fn apply_ops(
    journal: &Journal,
    at: &At<'_>,
    runner: &dyn Runner,
    step: &str,
    ops: &[Op],
    ledger: &mut Ledger,
    progress: &mut StepProgress,
) -> Result<(), StepError> {
    for op in ops {
        let g = op.generic();
        if g.only_when_changed() && !progress.changed {
            continue;
        }
        if g.is_done(runner).await? {
            continue;
        }
        if let Some(script) = g.revert() {
            ledger.stack.push(Revert {
                step: step.to_string(),
                op: g.plan().detail,
                script,
            });
        }
        let applied = g.apply_noted(runner).await?;
        for note in &applied.notes {
            journal.record(Event::Warning, at, note, None);
        }
        g.verify(runner).await?;
        if let Some(c) = g.commit() {
            ledger.commits.push(c);
        }
        if g.mutates() && applied.changed {
            progress.changed = true;
        } else {
            progress.checked = true;
        }
    }
    Ok(())
}
