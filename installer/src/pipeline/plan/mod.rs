//! `kubexm-install plan` / `--dry-run`: the full ordered plan (module, task, step, nodes, and the
//! exact commands and file destinations) without connecting anywhere.

mod files;

pub use files::redact;

use std::fmt::Write as _;

use serde::Serialize;

use super::ops::OpPlan;
use super::{Facts, Node, Pipeline, StepError};

/// The plan of one pipeline.
#[derive(Debug, Serialize)]
pub struct Plan {
    /// Pipeline name.
    pub pipeline: String,
    /// Modules in order.
    pub modules: Vec<ModulePlan>,
}

/// One module.
#[derive(Debug, Serialize)]
pub struct ModulePlan {
    /// Name.
    pub name: String,
    /// Why it is skipped, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Tasks in order.
    pub tasks: Vec<TaskPlan>,
}

/// One task.
#[derive(Debug, Serialize)]
pub struct TaskPlan {
    /// Name.
    pub name: String,
    /// Nodes.
    pub hosts: Vec<String>,
    /// Parallel over nodes.
    pub parallel: bool,
    /// Steps in order.
    pub steps: Vec<StepPlan>,
}

/// One step, with its generic steps grouped by the nodes that get identical ones.
#[derive(Debug, Serialize)]
pub struct StepPlan {
    /// Name.
    pub name: String,
    /// Timeout in seconds.
    pub timeout_secs: u64,
    /// Attempts.
    pub attempts: u32,
    /// (nodes, generic steps) groups.
    pub groups: Vec<OpGroup>,
}

/// Nodes that run the same generic steps.
#[derive(Debug, Serialize)]
pub struct OpGroup {
    /// Nodes.
    pub nodes: Vec<String>,
    /// What runs.
    pub ops: Vec<OpPlan>,
    /// With `--files`: what the ops that write a file write (secrets redacted).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileShown>,
}

/// The content an op of a group writes (`plan --files`).
#[derive(Debug, Clone, Serialize)]
pub struct FileShown {
    /// The op's index in the group's `ops`.
    pub op: usize,
    /// The content, secrets redacted.
    pub content: String,
}

/// What [`build_with`] adds to a plan.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// Show the content of every file written, with these secret values redacted.
    pub files: Option<Vec<String>>,
}

/// Builds the plan. Nodes named by tasks but missing from `nodes` are an error.
pub fn build(pipeline: &Pipeline, nodes: &[Node], facts: &Facts) -> Result<Plan, StepError> {
    build_with(pipeline, nodes, facts, &PlanOptions::default())
}

/// Builds the plan with `options` (e.g. the content of every file written).
pub fn build_with(
    pipeline: &Pipeline,
    nodes: &[Node],
    facts: &Facts,
    options: &PlanOptions,
) -> Result<Plan, StepError> {
    let facts = &facts.for_plan();
    let mut modules = Vec::new();
    for m in &pipeline.modules {
        if let Some(reason) = m.skip() {
            modules.push(ModulePlan {
                name: m.name().to_string(),
                skipped: Some(reason),
                tasks: Vec::new(),
            });
            continue;
        }
        let mut tasks = Vec::new();
        for t in m.tasks()? {
            let mut steps = Vec::new();
            for s in &t.steps {
                let mut groups: Vec<OpGroup> = Vec::new();
                for h in &t.hosts {
                    let node = nodes.iter().find(|n| &n.name == h).ok_or_else(|| {
                        StepError::Invalid(format!(
                            "module {}, task {}: `{h}` is not a node of this cluster",
                            m.name(),
                            t.name
                        ))
                    })?;
                    let built = s.ops(node, facts)?;
                    let ops: Vec<OpPlan> = built.iter().map(|o| o.generic().plan()).collect();
                    match groups.iter_mut().find(|g| g.ops == ops) {
                        Some(g) => g.nodes.push(h.clone()),
                        None => {
                            let files = match &options.files {
                                Some(secrets) => built
                                    .iter()
                                    .enumerate()
                                    .filter_map(|(op, o)| {
                                        o.generic().written().map(|w| FileShown {
                                            op,
                                            content: files::shown(&w, secrets),
                                        })
                                    })
                                    .collect(),
                                None => Vec::new(),
                            };
                            groups.push(OpGroup {
                                nodes: vec![h.clone()],
                                ops,
                                files,
                            });
                        }
                    }
                }
                let policy = s.policy();
                steps.push(StepPlan {
                    name: s.name().to_string(),
                    timeout_secs: policy.timeout.as_secs(),
                    attempts: policy.attempts,
                    groups,
                });
            }
            tasks.push(TaskPlan {
                name: t.name.clone(),
                hosts: t.hosts.clone(),
                parallel: t.parallel,
                steps,
            });
        }
        modules.push(ModulePlan {
            name: m.name().to_string(),
            skipped: None,
            tasks,
        });
    }
    Ok(Plan {
        pipeline: pipeline.name.clone(),
        modules,
    })
}

impl Plan {
    /// Readable text: numbered modules/tasks, each step's commands per node group.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "pipeline {}", self.pipeline);
        for (mi, m) in self.modules.iter().enumerate() {
            let mi = mi + 1;
            if let Some(reason) = &m.skipped {
                let _ = writeln!(s, "[{mi}] module {} — skipped: {reason}", m.name);
                continue;
            }
            let _ = writeln!(s, "[{mi}] module {}", m.name);
            for (ti, t) in m.tasks.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "  [{mi}.{}] task {} on {} ({})",
                    ti + 1,
                    t.name,
                    t.hosts.join(","),
                    if t.parallel {
                        "parallel"
                    } else {
                        "one at a time"
                    }
                );
                for st in &t.steps {
                    let _ = writeln!(
                        s,
                        "    step {} (timeout {}s, {} attempt{})",
                        st.name,
                        st.timeout_secs,
                        st.attempts,
                        if st.attempts == 1 { "" } else { "s" }
                    );
                    for g in &st.groups {
                        if t.hosts.len() > 1 || g.nodes.len() != t.hosts.len() {
                            let _ = writeln!(s, "      on {}:", g.nodes.join(","));
                        }
                        for (oi, op) in g.ops.iter().enumerate() {
                            let mut lines = op.detail.lines();
                            let first = lines.next().unwrap_or("");
                            let _ = write!(s, "        {:<8} {first}", op.kind);
                            let mut extra = None;
                            match op.input.as_deref() {
                                Some(i) if i.starts_with("sha256:") && i.len() > 19 => {
                                    let _ = write!(s, "  [{}]", &i[..19]);
                                }
                                Some(i) => extra = Some(i),
                                None => {}
                            }
                            s.push('\n');
                            for l in lines {
                                let _ = writeln!(s, "        {:<8} {l}", "");
                            }
                            if let Some(i) = extra {
                                for l in i.lines() {
                                    let _ = writeln!(s, "        {:<8}   {l}", "");
                                }
                            }
                            for f in g.files.iter().filter(|f| f.op == oi) {
                                for l in f.content.lines() {
                                    let _ = writeln!(s, "        {:<8} | {l}", "");
                                }
                            }
                        }
                    }
                }
            }
        }
        s
    }
}
