//! The pipeline engine on real shells: idempotence, parallel failures, retries, timeouts, LIFO
//! rollback, resume, journal files, redaction and the plan. The nodes here are local runners
//! (each "node" owns a directory); the same engine over real sshd is in `pipeline_ssh.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kubexm_install::pipeline::executor::{ExecOptions, Executor, PipelineError, RunReport};
use kubexm_install::pipeline::journal::Journal;
use kubexm_install::pipeline::ops::{
    CreateDir, FetchFile, LearnFacts, ManagedBlock, Op, RunCommand, UploadFile,
};
use kubexm_install::pipeline::{
    plan, Facts, Module, Node, Pipeline, Policy, Step, StepError, Task,
};
use kubexm_install::runner::local::LocalRunner;
use kubexm_install::runner::shell::Script;
use kubexm_install::runner::Runner;

/// Writes `content` to `<root>/<node>/<file>` (creating the node's directory).
struct WriteFile {
    name: &'static str,
    root: PathBuf,
    file: &'static str,
    content: String,
}

impl Step for WriteFile {
    fn name(&self) -> &str {
        self.name
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let dir = self.root.join(&node.name);
        Ok(vec![
            Op::Mkdir(CreateDir {
                path: dir.display().to_string(),
                mode: 0o755,
            }),
            Op::Upload(UploadFile::bytes(
                self.content.clone().into_bytes(),
                dir.join(self.file).display().to_string(),
                0o640,
            )),
        ])
    }
}

/// Runs `command` (with `{dir}` replaced by the node's directory), undone by appending
/// `undo <name>` to `<dir>/undo.log`.
struct Command {
    name: &'static str,
    root: PathBuf,
    command: &'static str,
    unless: Option<&'static str>,
    policy: Policy,
}

impl Command {
    fn new(name: &'static str, root: &Path, command: &'static str) -> Self {
        Self {
            name,
            root: root.to_path_buf(),
            command,
            unless: None,
            policy: Policy {
                timeout: Duration::from_secs(30),
                attempts: 1,
                retry_delay: Duration::from_millis(10),
            },
        }
    }
}

impl Step for Command {
    fn name(&self) -> &str {
        self.name
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let dir = self.root.join(&node.name).display().to_string();
        // A test's own shell text, with the scratch directory (no quoting needed: tempdir).
        let mut cmd =
            RunCommand::new(Script::trusted_shell(self.command.replace("{dir}", &dir))).undo(
                Script::trusted_shell(format!("echo 'undo {}' >> {dir}/undo.log", self.name)),
            );
        if let Some(u) = self.unless {
            cmd = cmd.unless(Script::trusted_shell(u.replace("{dir}", &dir)));
        }
        Ok(vec![Op::Run(cmd)])
    }
    fn policy(&self) -> Policy {
        self.policy
    }
}

struct Tasks {
    name: &'static str,
    skip: Option<String>,
    tasks: std::sync::Mutex<Vec<Task>>,
}

impl Module for Tasks {
    fn name(&self) -> &str {
        self.name
    }
    fn skip(&self) -> Option<String> {
        self.skip.clone()
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(std::mem::take(&mut *self.tasks.lock().expect("lock")))
    }
}

fn module(name: &'static str, tasks: Vec<Task>) -> Box<dyn Module> {
    Box::new(Tasks {
        name,
        skip: None,
        tasks: std::sync::Mutex::new(tasks),
    })
}

fn nodes(n: usize) -> Vec<Node> {
    (1..=n)
        .map(|i| Node {
            name: format!("node{i}"),
            address: format!("10.0.0.{i}"),
            internal_address: format!("10.0.0.{i}"),
            roles: vec![kubexm_manifests::resolve::Role::Worker],
            arch: "amd64".to_string(),
        })
        .collect()
}

struct Lab {
    work: tempfile::TempDir,
    root: PathBuf,
}

impl Lab {
    fn new() -> Self {
        let work = tempfile::tempdir().expect("tempdir");
        let root = work.path().join("nodes");
        Self { work, root }
    }

    fn executor(&self, n: usize, resume: bool, secrets: Vec<String>) -> (Executor, Arc<Journal>) {
        let journal =
            Arc::new(Journal::create(self.work.path(), "test", secrets).expect("journal"));
        let runners = nodes(n)
            .into_iter()
            .map(|node| {
                let r: Arc<dyn Runner> = Arc::new(LocalRunner::new(node.name.clone()));
                (node, r)
            })
            .collect();
        let exec = Executor::new(
            runners,
            journal.clone(),
            ExecOptions {
                concurrency: 4,
                resume,
                state_path: self.work.path().join("state.json"),
            },
        );
        (exec, journal)
    }

    fn node_file(&self, node: &str, file: &str) -> PathBuf {
        self.root.join(node).join(file)
    }

    fn read(&self, node: &str, file: &str) -> Option<String> {
        std::fs::read_to_string(self.node_file(node, file)).ok()
    }
}

fn events(journal: &Journal) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&journal.paths().events)
        .expect("events file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("event is JSON"))
        .collect()
}

fn count(events: &[serde_json::Value], event: &str) -> usize {
    events.iter().filter(|e| e["event"] == event).count()
}

fn write_pipeline(lab: &Lab, content: &str) -> Pipeline {
    Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "files",
            vec![
                Task::new("write", ["node1", "node2", "node3"]).step(WriteFile {
                    name: "write-config",
                    root: lab.root.clone(),
                    file: "config",
                    content: content.to_string(),
                }),
            ],
        )],
    }
}

#[tokio::test]
async fn second_run_changes_nothing_and_a_changed_input_is_reapplied() {
    let lab = Lab::new();
    let (exec, _) = lab.executor(3, false, vec![]);
    let first = exec
        .run(&write_pipeline(&lab, "v1\n"))
        .await
        .expect("first run");
    assert_eq!(first.steps_changed, 3);
    for n in ["node1", "node2", "node3"] {
        assert_eq!(lab.read(n, "config").as_deref(), Some("v1\n"));
        // The task succeeded: no rollback backups or markers are left behind.
        assert!(!lab.node_file(n, ".kubexm-created").exists());
    }
    let mtime = std::fs::metadata(lab.node_file("node1", "config"))
        .and_then(|m| m.modified())
        .expect("mtime");

    let (exec, journal) = lab.executor(3, false, vec![]);
    let second = exec
        .run(&write_pipeline(&lab, "v1\n"))
        .await
        .expect("second run");
    assert_eq!(
        second,
        RunReport {
            tasks_run: 3,
            steps_changed: 0,
            steps_unchanged: 3,
            ..RunReport::default()
        }
    );
    assert_eq!(count(&events(&journal), "StepSkipped"), 3);
    let mtime2 = std::fs::metadata(lab.node_file("node1", "config"))
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(mtime, mtime2, "an unchanged file is not rewritten");

    let (exec, _) = lab.executor(3, false, vec![]);
    let third = exec
        .run(&write_pipeline(&lab, "v2\n"))
        .await
        .expect("third run");
    assert_eq!(third.steps_changed, 3);
    assert_eq!(lab.read("node2", "config").as_deref(), Some("v2\n"));
    assert!(
        !lab.node_file("node2", "config.kubexm-orig").exists(),
        "the backup kept for rollback is dropped once the task succeeded"
    );
}

#[tokio::test]
async fn a_failing_step_rolls_back_lifo_and_every_failing_node_is_reported() {
    let lab = Lab::new();
    // node2 has a file it had before the install: the rollback must restore it, not delete it.
    std::fs::create_dir_all(lab.root.join("node2")).expect("mkdir");
    std::fs::write(lab.node_file("node2", "config"), "operator's own\n").expect("write");
    let fail_on_1_and_3 = "case {dir} in */node2) exit 0;; esac; echo 'disk on fire' >&2; exit 7";
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "m",
            vec![Task::new("t", ["node1", "node2", "node3"])
                .step(WriteFile {
                    name: "write-config",
                    root: lab.root.clone(),
                    file: "config",
                    content: "new\n".to_string(),
                })
                .step(Command::new(
                    "first",
                    &lab.root,
                    "echo first >> {dir}/did.log",
                ))
                .step(Command::new(
                    "second",
                    &lab.root,
                    "echo second >> {dir}/did.log",
                ))
                .step(Command::new("breaks", &lab.root, fail_on_1_and_3))],
        )],
    };
    let (exec, journal) = lab.executor(3, false, vec![]);
    let err = exec.run(&pipeline).await.expect_err("must fail");
    let text = err.to_string();
    assert!(text.contains("task m/t failed on 2 of 3 node(s)"), "{text}");
    assert!(text.contains("node1: step breaks"), "{text}");
    assert!(text.contains("node3: step breaks"), "{text}");
    assert!(text.contains("disk on fire"), "{text}");
    assert!(!text.contains("node2: step"), "{text}");
    let PipelineError::TaskFailed { failures, .. } = &err else {
        panic!("not a task failure: {err}")
    };
    // breaks(its own revert) + second + first + file + dir were pushed before the failure.
    assert_eq!(failures[0].reverted, 5, "{failures:?}");

    // LIFO: the failing step's revert first, then second, then first; then the file and the
    // directory this run created are gone.
    assert_eq!(
        lab.read("node1", "undo.log").as_deref(),
        Some("undo breaks\nundo second\nundo first\n")
    );
    assert!(
        !lab.node_file("node1", "config").exists(),
        "the uploaded file is removed"
    );
    assert!(!lab.node_file("node3", "config").exists());
    // node2 succeeded: untouched by the rollback, and its own file replaced by the install.
    assert_eq!(lab.read("node2", "config").as_deref(), Some("new\n"));
    assert_eq!(lab.read("node2", "undo.log"), None);

    let ev = events(&journal);
    let reverted: Vec<String> = ev
        .iter()
        .filter(|e| e["event"] == "StepReverted" && e["node"] == "node1")
        .map(|e| e["step"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        reverted,
        ["breaks", "second", "first", "write-config", "write-config"],
        "reverts run last-in first-out"
    );
    assert_eq!(count(&ev, "PipelineFailed"), 1);
}

#[tokio::test]
async fn rollback_restores_a_file_the_node_had_before() {
    let lab = Lab::new();
    std::fs::create_dir_all(lab.root.join("node1")).expect("mkdir");
    std::fs::write(lab.node_file("node1", "config"), "operator's own\n").expect("write");
    std::fs::write(lab.node_file("node1", "hosts"), "127.0.0.1 localhost\n").expect("write");
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "m",
            vec![Task::new("t", ["node1"])
                .step(WriteFile {
                    name: "write-config",
                    root: lab.root.clone(),
                    file: "config",
                    content: "new\n".to_string(),
                })
                .step(Block {
                    path: lab.node_file("node1", "hosts"),
                })
                .step(Command::new("undo-order", &lab.root, "true"))
                .step(Command::new("breaks", &lab.root, "exit 1"))],
        )],
    };
    let (exec, _) = lab.executor(1, false, vec![]);
    exec.run(&pipeline).await.expect_err("must fail");
    assert_eq!(
        lab.read("node1", "config").as_deref(),
        Some("operator's own\n")
    );
    assert_eq!(
        lab.read("node1", "hosts").as_deref(),
        Some("127.0.0.1 localhost\n")
    );
    assert_eq!(
        lab.read("node1", "undo.log").as_deref(),
        Some("undo breaks\nundo undo-order\n")
    );
    assert!(!lab.node_file("node1", "config.kubexm-orig").exists());
}

struct Block {
    path: PathBuf,
}

impl Step for Block {
    fn name(&self) -> &str {
        "hosts-block"
    }
    fn ops(&self, _: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Block(ManagedBlock::new(
            self.path.display().to_string(),
            vec!["10.0.0.1 node1".to_string(), "10.0.0.2 node2".to_string()],
        ))])
    }
}

#[tokio::test]
async fn managed_block_is_added_once_updated_in_place_and_removed_by_revert() {
    let lab = Lab::new();
    std::fs::create_dir_all(lab.root.join("node1")).expect("mkdir");
    let hosts = lab.node_file("node1", "hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n# keep me\n").expect("write");
    let pipeline = || Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "m",
            vec![Task::new("t", ["node1"]).step(Block {
                path: hosts.clone(),
            })],
        )],
    };
    for _ in 0..2 {
        let (exec, _) = lab.executor(1, false, vec![]);
        exec.run(&pipeline()).await.expect("run");
    }
    let text = std::fs::read_to_string(&hosts).expect("read");
    assert_eq!(
        text,
        "127.0.0.1 localhost\n# keep me\n# BEGIN KubeXM Managed Block\n10.0.0.1 node1\n10.0.0.2 node2\n# END KubeXM Managed Block\n"
    );
    let op = ManagedBlock::new(hosts.display().to_string(), vec![]);
    let revert = kubexm_install::pipeline::ops::GenericStep::revert(&op).expect("revert");
    let out = LocalRunner::new("node1")
        .exec(&kubexm_install::runner::Exec::root(revert))
        .await
        .expect("exec");
    assert!(out.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&hosts).expect("read"),
        "127.0.0.1 localhost\n# keep me\n"
    );
}

#[tokio::test]
async fn a_transient_failure_is_retried() {
    let lab = Lab::new();
    std::fs::create_dir_all(lab.root.join("node1")).expect("mkdir");
    let mut flaky = Command::new(
        "flaky",
        &lab.root,
        "n=$(cat {dir}/count 2>/dev/null || echo 0); echo $((n+1)) > {dir}/count; [ \"$n\" -ge 2 ]",
    );
    flaky.policy.attempts = 3;
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![module("m", vec![Task::new("t", ["node1"]).step(flaky)])],
    };
    let (exec, journal) = lab.executor(1, false, vec![]);
    exec.run(&pipeline).await.expect("third attempt succeeds");
    assert_eq!(lab.read("node1", "count").as_deref(), Some("3\n"));
    assert_eq!(count(&events(&journal), "StepRetried"), 2);
}

#[tokio::test]
async fn a_step_timeout_fails_the_step_and_kills_the_command() {
    let lab = Lab::new();
    std::fs::create_dir_all(lab.root.join("node1")).expect("mkdir");
    let marker = format!("kubexm-timeout-marker-{}", std::process::id());
    let mut slow = Command::new("slow", &lab.root, "");
    // The command's own limit (coreutils timeout on the node) fires first.
    let script: &'static str = Box::leak(format!("sleep 300 # {marker}").into_boxed_str());
    slow.command = script;
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "m",
            vec![Task::new("t", ["node1"]).step(SlowStep { inner: slow })],
        )],
    };
    let (exec, _) = lab.executor(1, false, vec![]);
    let started = std::time::Instant::now();
    let err = exec.run(&pipeline).await.expect_err("times out");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .expect("ps");
    let ps = String::from_utf8_lossy(&ps.stdout);
    assert!(
        !ps.lines()
            .any(|l| l.contains(&marker) && !l.contains("ps -eo")),
        "the command was killed:\n{ps}"
    );
}

/// A step whose command has a 1 s limit.
struct SlowStep {
    inner: Command,
}

impl Step for SlowStep {
    fn name(&self) -> &str {
        "slow"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = self.inner.ops(node, facts)?;
        if let Some(Op::Run(r)) = ops.first_mut() {
            r.timeout = Duration::from_secs(1);
        }
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        Policy {
            timeout: Duration::from_secs(20),
            attempts: 1,
            retry_delay: Duration::ZERO,
        }
    }
}

fn resume_pipeline(lab: &Lab, first_content: &str) -> Pipeline {
    Pipeline {
        name: "test".to_string(),
        modules: vec![
            module(
                "one",
                vec![Task::new("a", ["node1", "node2"])
                    .step(WriteFile {
                        name: "write-a",
                        root: lab.root.clone(),
                        file: "a",
                        content: first_content.to_string(),
                    })
                    .step(Command::new("count-a", &lab.root, "echo x >> {dir}/a.runs"))],
            ),
            module(
                "two",
                vec![Task::new("b", ["node1", "node2"]).step(Command::new(
                    "needs-flag",
                    &lab.root,
                    "[ ! -e {dir}/broken ] && echo x >> {dir}/b.runs",
                ))],
            ),
        ],
    }
}

#[tokio::test]
async fn resume_skips_completed_tasks_and_a_changed_input_invalidates_them() {
    let lab = Lab::new();
    std::fs::create_dir_all(lab.root.join("node2")).expect("mkdir");
    std::fs::write(lab.node_file("node2", "broken"), "").expect("inject failure");
    let (exec, _) = lab.executor(2, false, vec![]);
    let err = exec
        .run(&resume_pipeline(&lab, "A"))
        .await
        .expect_err("node2 fails");
    assert!(err.to_string().contains("node2: step needs-flag"), "{err}");

    std::fs::remove_file(lab.node_file("node2", "broken")).expect("repair");
    let (exec, journal) = lab.executor(2, true, vec![]);
    let report = exec.run(&resume_pipeline(&lab, "A")).await.expect("resume");
    assert_eq!(
        report.tasks_resumed, 3,
        "a on both nodes and b on node1 were done"
    );
    assert_eq!(report.tasks_run, 1, "only b on node2 runs");
    assert_eq!(lab.read("node1", "a.runs").as_deref(), Some("x\n"));
    assert_eq!(lab.read("node2", "b.runs").as_deref(), Some("x\n"));
    assert_eq!(count(&events(&journal), "TaskSkipped"), 3);

    // A changed input for task a: it re-runs on both nodes, b stays done.
    let (exec, _) = lab.executor(2, true, vec![]);
    let report = exec
        .run(&resume_pipeline(&lab, "A2"))
        .await
        .expect("changed");
    assert_eq!((report.tasks_run, report.tasks_resumed), (2, 2));
    assert_eq!(lab.read("node1", "a.runs").as_deref(), Some("x\nx\n"));

    // Without --resume everything runs again.
    let (exec, _) = lab.executor(2, false, vec![]);
    let report = exec.run(&resume_pipeline(&lab, "A2")).await.expect("full");
    assert_eq!((report.tasks_run, report.tasks_resumed), (4, 0));
}

#[tokio::test]
async fn journal_files_have_every_field_metrics_accumulate_and_secrets_never_appear() {
    let lab = Lab::new();
    std::fs::create_dir_all(lab.root.join("node1")).expect("mkdir");
    let secret = "S3cr3t-pa55word";
    let leaky: &'static str =
        Box::leak(format!("echo 'login with {secret} failed' >&2; exit 1").into_boxed_str());
    let pipeline = || Pipeline {
        name: "test".to_string(),
        modules: vec![
            Box::new(Tasks {
                name: "skipped-module",
                skip: Some("loadBalancer.type is not kubexm-kh".to_string()),
                tasks: std::sync::Mutex::new(vec![]),
            }) as Box<dyn Module>,
            module(
                "m",
                vec![Task::new("t", ["node1"])
                    .step(Command::new("ok", &lab.root, "true"))
                    .step(Command::new("leaky", &lab.root, leaky))],
            ),
        ],
    };
    let (exec, journal) = lab.executor(1, false, vec![secret.to_string()]);
    let err = exec.run(&pipeline()).await.expect_err("fails");
    assert!(!err.to_string().contains(secret), "{err}");
    assert!(err.to_string().contains("login with *** failed"), "{err}");

    let log = std::fs::read_to_string(&journal.paths().log).expect("log");
    assert!(!log.contains(secret));
    let events_text = std::fs::read_to_string(&journal.paths().events).expect("events");
    assert!(!events_text.contains(secret));
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let step_done = lines
        .iter()
        .find(|l| l["event"] == "StepSucceeded" && l["step"] == "ok")
        .expect("a StepSucceeded line");
    for field in [
        "timestamp",
        "level",
        "pipeline_id",
        "module",
        "task",
        "step",
        "node",
        "message",
        "duration_ms",
    ] {
        assert!(
            !step_done[field].is_null(),
            "missing {field} in {step_done}"
        );
    }
    assert_eq!(step_done["pipeline_id"], journal.pipeline_id());
    assert_eq!(step_done["node"], "node1");
    let ev = events(&journal);
    for e in [
        "PipelineStarted",
        "ModuleSkipped",
        "TaskStarted",
        "StepSucceeded",
        "StepFailed",
        "TaskFailed",
        "PipelineFailed",
    ] {
        assert_eq!(count(&ev, e), 1, "{e} in {ev:?}");
    }

    // A second (successful) run: counters accumulate per status.
    let ok = Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "m",
            vec![Task::new("t", ["node1"]).step(Command::new("ok", &lab.root, "true"))],
        )],
    };
    let (exec, _) = lab.executor(1, false, vec![]);
    exec.run(&ok).await.expect("ok");
    let metrics = std::fs::read_to_string(&journal.paths().metrics).expect("metrics");
    assert!(
        metrics.contains("kubexm_pipeline_total{pipeline=\"test\",status=\"failure\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kubexm_pipeline_total{pipeline=\"test\",status=\"success\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kubexm_pipeline_duration_seconds{pipeline=\"test\",status=\"success\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kubexm_step_duration_seconds_count{step=\"ok\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn serial_tasks_stop_at_the_first_failing_node() {
    let lab = Lab::new();
    for n in ["node1", "node2", "node3"] {
        std::fs::create_dir_all(lab.root.join(n)).expect("mkdir");
    }
    std::fs::write(lab.node_file("node2", "broken"), "").expect("inject");
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "m",
            vec![Task::new("join", ["node1", "node2", "node3"])
                .serial()
                .step(Command::new(
                    "join",
                    &lab.root,
                    "[ ! -e {dir}/broken ] && touch {dir}/joined",
                ))],
        )],
    };
    let (exec, _) = lab.executor(3, false, vec![]);
    exec.run(&pipeline).await.expect_err("node2 fails");
    assert!(lab.node_file("node1", "joined").exists());
    assert!(
        !lab.node_file("node3", "joined").exists(),
        "node3 never started"
    );
}

#[test]
fn plan_lists_every_module_task_step_and_command_without_connecting() {
    let root = PathBuf::from("/srv/lab");
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![
            Box::new(Tasks {
                name: "lb",
                skip: Some("loadBalancer.type is kube-vip".to_string()),
                tasks: std::sync::Mutex::new(vec![]),
            }) as Box<dyn Module>,
            module(
                "files",
                vec![
                    Task::new("write", ["node1", "node2"]).step(WriteFile {
                        name: "write-config",
                        root: root.clone(),
                        file: "config",
                        content: "x".to_string(),
                    }),
                    Task::new("once", ["node1"]).serial().step(Command::new(
                        "multi",
                        &root,
                        "set -e\necho {dir}",
                    )),
                ],
            ),
        ],
    };
    let plan = plan::build(&pipeline, &nodes(2), &Facts::default()).expect("plan");
    insta::assert_snapshot!(plan.to_text());
}

/// Learns `key=value` lines from `<dir>/secret` into facts.
struct LearnSecret {
    root: PathBuf,
}

fn key_values(out: &str) -> Result<Vec<(String, String)>, String> {
    let v: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if v.is_empty() {
        Err("no key=value line in the output".to_string())
    } else {
        Ok(v)
    }
}

impl Step for LearnSecret {
    fn name(&self) -> &str {
        "learn-secret"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "the secret".into(),
            script: format!("cat {}/{}/secret", self.root.display(), node.name),
            parse: key_values,
            facts: facts.clone(),
            prefix: String::new(),
            timeout: Duration::from_secs(10),
        })])
    }
}

/// Writes the learned `token` into `<dir>/learned` (a placeholder when planning).
struct UseSecret {
    root: PathBuf,
}

impl Step for UseSecret {
    fn name(&self) -> &str {
        "use-secret"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let token = match facts.get("token") {
            Some(t) => t,
            None if facts.is_planning() => "<learned>".to_string(),
            None => return Err(StepError::Invalid("token not learned".into())),
        };
        WriteFile {
            name: "use-secret",
            root: self.root.clone(),
            file: "learned",
            content: token,
        }
        .ops(node, facts)
    }
}

fn learn_pipeline(lab: &Lab) -> Pipeline {
    Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "learn",
            vec![
                Task::new("learn", ["node1"]).step(LearnSecret {
                    root: lab.root.clone(),
                }),
                Task::new("use", ["node2", "node3"]).step(UseSecret {
                    root: lab.root.clone(),
                }),
            ],
        )],
    }
}

#[tokio::test]
async fn learned_facts_reach_later_tasks_stay_out_of_the_journal_and_are_relearned_on_resume() {
    let lab = Lab::new();
    std::fs::create_dir_all(lab.root.join("node1")).expect("mkdir");
    std::fs::write(lab.node_file("node1", "secret"), "token=s3cret-t0ken\n").expect("secret");
    let (exec, journal) = lab.executor(3, false, vec![]);
    let report = exec.run(&learn_pipeline(&lab)).await.expect("run");
    for n in ["node2", "node3"] {
        assert_eq!(lab.read(n, "learned").as_deref(), Some("s3cret-t0ken"));
    }
    assert_eq!(report.steps_checked, 1, "learning is a check, not a change");
    for f in [&journal.paths().log, &journal.paths().events] {
        let text = std::fs::read_to_string(f).expect("journal");
        assert!(!text.contains("s3cret-t0ken"), "{}: {text}", f.display());
    }

    // --resume: `use` is done with the same inputs and skipped, but the facts it needs live in
    // memory only, so `learn` runs again.
    let (exec, journal) = lab.executor(3, true, vec![]);
    let report = exec.run(&learn_pipeline(&lab)).await.expect("resume");
    assert_eq!((report.tasks_run, report.tasks_resumed), (1, 2));
    let ev = events(&journal);
    assert!(ev
        .iter()
        .any(|e| e["event"] == "TaskSucceeded" && e["task"] == "learn"));

    // A changed fact changes the inputs of `use`: it runs again.
    std::fs::write(lab.node_file("node1", "secret"), "token=n3w\n").expect("secret");
    let (exec, _) = lab.executor(3, true, vec![]);
    let report = exec.run(&learn_pipeline(&lab)).await.expect("changed");
    assert_eq!((report.tasks_run, report.tasks_resumed), (3, 0));
    assert_eq!(lab.read("node3", "learned").as_deref(), Some("n3w"));

    // Output the parser cannot read: the step fails with the parser's message, not the output.
    std::fs::write(lab.node_file("node1", "secret"), "garbage s3cret\n").expect("secret");
    let (exec, _) = lab.executor(3, false, vec![]);
    let err = exec
        .run(&learn_pipeline(&lab))
        .await
        .expect_err("unparsable");
    let msg = err.to_string();
    assert!(msg.contains("no key=value line"), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");

    // The plan shows the script, and later steps plan with placeholders.
    let text = plan::build(&learn_pipeline(&lab), &nodes(3), &Facts::default())
        .expect("plan")
        .to_text();
    assert!(text.contains("learn    the secret: cat "), "{text}");
    assert!(text.contains("upload   <9 bytes>"), "{text}");
}

struct Fetch {
    root: PathBuf,
    dest: PathBuf,
}

impl Step for Fetch {
    fn name(&self) -> &str {
        "fetch"
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Fetch(FetchFile {
            src: self
                .root
                .join(&node.name)
                .join("admin.conf")
                .display()
                .to_string(),
            dest: self.dest.clone(),
            mode: 0o600,
        })])
    }
}

#[tokio::test]
async fn a_node_file_is_fetched_to_the_control_host_once() {
    use std::os::unix::fs::PermissionsExt as _;
    let lab = Lab::new();
    std::fs::create_dir_all(lab.root.join("node1")).expect("mkdir");
    std::fs::write(lab.node_file("node1", "admin.conf"), "kind: Config\n").expect("write");
    let dest = lab.work.path().join("control/pki/admin.conf");
    let pipeline = || Pipeline {
        name: "test".to_string(),
        modules: vec![module(
            "fetch",
            vec![Task::new("fetch", ["node1"]).step(Fetch {
                root: lab.root.clone(),
                dest: dest.clone(),
            })],
        )],
    };
    let (exec, _) = lab.executor(1, false, vec![]);
    let report = exec.run(&pipeline()).await.expect("fetch");
    assert_eq!(report.steps_changed, 1);
    assert_eq!(
        std::fs::read_to_string(&dest).expect("fetched"),
        "kind: Config\n"
    );
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&dest), 0o600);
    assert_eq!(mode(dest.parent().expect("dir")), 0o700);
    let (exec, _) = lab.executor(1, false, vec![]);
    let report = exec.run(&pipeline()).await.expect("again");
    assert_eq!((report.steps_changed, report.steps_unchanged), (0, 1));
    // A changed node file is fetched again; a missing one is an error naming it.
    std::fs::write(lab.node_file("node1", "admin.conf"), "kind: Config\nv: 2\n").expect("write");
    let (exec, _) = lab.executor(1, false, vec![]);
    exec.run(&pipeline()).await.expect("refetch");
    assert!(std::fs::read_to_string(&dest)
        .expect("fetched")
        .contains("v: 2"));
    std::fs::remove_file(lab.node_file("node1", "admin.conf")).expect("rm");
    let (exec, _) = lab.executor(1, false, vec![]);
    let err = exec
        .run(&pipeline())
        .await
        .expect_err("missing")
        .to_string();
    assert!(
        err.contains("admin.conf does not exist on the node"),
        "{err}"
    );
}

#[tokio::test]
async fn a_template_with_unless_is_left_alone_once_its_condition_holds() {
    use kubexm_install::pipeline::ops::{GenericStep, RenderTemplate};
    let lab = Lab::new();
    let dir = lab.root.join("node1");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let dest = dir.join("join.yaml");
    let joined = dir.join("kubelet.conf");
    let render = |token: &str| {
        let mut c = tera::Context::new();
        c.insert(
            "hosts",
            &vec![serde_json::json!({"address": "10.0.0.1", "names": [token]})],
        );
        RenderTemplate::new(
            "hosts/managed-block.tera",
            &c,
            dest.display().to_string(),
            0o600,
        )
        .expect("render")
        .unless(format!("[ -s '{}' ]", joined.display()))
    };
    let runner = LocalRunner::new("node1");
    let first = render("token-a");
    assert!(!first.is_done(&runner).await.expect("check"), "absent file");
    first.apply(&runner).await.expect("apply");
    assert!(first.is_done(&runner).await.expect("check"));
    let written = std::fs::read_to_string(&dest).expect("read");
    // Before the condition holds, new content is written.
    let second = render("token-b");
    assert!(
        !second.is_done(&runner).await.expect("check"),
        "content differs"
    );
    // Once it holds, the file stays as it is whatever the content.
    std::fs::write(&joined, "joined\n").expect("write");
    assert!(second.is_done(&runner).await.expect("check"));
    assert_eq!(std::fs::read_to_string(&dest).expect("read"), written);
    assert!(second.plan().detail.contains("unless: [ -s "));
}
