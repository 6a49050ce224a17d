//! `system.preInstall` / `postInstall`: the scripts run through the engine on this machine (a
//! real shell, files under a temporary directory): copied under their numbered names (0755) and
//! run in order with the node's identity in their environment, skipped on a re-run with the same
//! content, run again when their content changes, and a failure stops the run naming the node,
//! the cluster.yaml entry, the copy and the exit status, with the script's last output. The
//! modules' place in the install and delete pipelines and their plan.

use std::path::Path;
use std::sync::{Arc, Mutex};

use kubexm_install::modules::scripts::{script_name, RunScripts, Script, ScriptDirs};
use kubexm_install::pipeline::executor::{ExecOptions, Executor, RunReport};
use kubexm_install::pipeline::journal::Journal;
use kubexm_install::pipeline::{plan, Module, Node, Pipeline, StepError, Task};
use kubexm_install::pipelines::{delete_pipeline, install_pipeline};
use kubexm_install::runner::local::LocalRunner;
use kubexm_install::runner::Runner;
use kubexm_manifests::resolve::{Role, ScriptPhase};

use crate::kubeadm::example_context;

struct OneTask(Mutex<Vec<Task>>);

impl Module for OneTask {
    fn name(&self) -> &str {
        "scripts-test"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(std::mem::take(&mut *self.0.lock().expect("lock")))
    }
}

/// Writes `text` as a script under `dir` and describes it as the bundle would.
fn script(dir: &Path, name: &str, index: usize, text: &str) -> Script {
    let file = dir.join(name);
    std::fs::write(&file, text).expect("write script");
    Script {
        entry: format!("spec.system.preInstall[{index}] `{name}`"),
        file,
        sha256: kubexm_bundles::hash::sha256_hex(text.as_bytes()),
    }
}

async fn run(root: &Path, scripts: Vec<Script>) -> Result<RunReport, String> {
    let dirs = ScriptDirs {
        scripts: root.join("etc/kubexm/scripts").display().to_string(),
        logs: root.join("var/log/kubexm").display().to_string(),
    };
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![Box::new(OneTask(Mutex::new(vec![Task::new(
            "pre-install",
            ["node1"],
        )
        .step(RunScripts::new(
            "lab",
            ScriptPhase::PreInstall,
            scripts,
            dirs,
        ))])))],
    };
    let node = Node {
        name: "node1".into(),
        address: "127.0.0.1".into(),
        internal_address: "127.0.0.1".into(),
        roles: vec![Role::Master, Role::Worker],
        arch: "amd64".into(),
    };
    let runner: Arc<dyn Runner> = Arc::new(LocalRunner::new("node1"));
    let journal = Arc::new(Journal::create(root, "test", vec![]).expect("journal"));
    let exec = Executor::new(
        vec![(node, runner)],
        journal,
        ExecOptions {
            concurrency: 1,
            resume: false,
            state_path: root.join("state.json"),
        },
    );
    exec.run(&pipeline)
        .await
        .map_err(|e| format!("{e:#}\n{:?}", e))
}

#[tokio::test]
async fn scripts_run_in_order_once_per_content_and_a_failure_names_node_script_and_status() {
    let work = tempfile::tempdir().expect("tempdir");
    let root = work.path();
    let src = root.join("src");
    std::fs::create_dir_all(&src).expect("src");
    let out = root.join("ran.txt");
    let o = out.display();
    let first = |n: &str| {
        format!("#!/bin/sh\necho \"first {n} $KUBEXM_NODE $KUBEXM_ROLES $KUBEXM_PHASE $KUBEXM_CLUSTER\" >>{o}\necho hello from the first script\n")
    };
    let second = |v: &str| format!("#!/bin/sh\necho \"second {v}\" >>{o}\n");
    let scripts = |second_text: &str| {
        vec![
            script(&src, "a.sh", 0, &first("v1")),
            script(&src, "b.sh", 1, second_text),
        ]
    };

    let report = run(root, scripts(&second("v1"))).await.expect("first run");
    assert_eq!(report.steps_changed, 1, "{report:?}");
    assert_eq!(
        std::fs::read_to_string(&out).expect("ran"),
        "first v1 node1 master,worker pre-install lab\nsecond v1\n",
        "both scripts ran, in list order, with the node's identity"
    );
    let copies = root.join("etc/kubexm/scripts");
    for (i, text) in [(0, first("v1")), (1, second("v1"))] {
        let name = script_name(ScriptPhase::PreInstall, "node1", i, 2);
        assert_eq!(name, format!("pre_install_node1-0{}.sh", i + 1));
        let copy = copies.join(&name);
        assert_eq!(std::fs::read_to_string(&copy).expect("copy"), text);
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&copy).expect("copy").permissions().mode() & 0o777,
            0o755
        );
    }
    let log = root.join("var/log/kubexm/pre_install_node1-01.sh.log");
    assert_eq!(
        std::fs::read_to_string(&log).expect("log"),
        "hello from the first script\n"
    );

    // The same content again: nothing runs.
    let again = run(root, scripts(&second("v1"))).await.expect("second run");
    assert_eq!(again.steps_changed, 0, "{again:?}");
    assert_eq!(again.steps_unchanged, 1, "{again:?}");
    assert_eq!(
        std::fs::read_to_string(&out).expect("ran").lines().count(),
        2
    );

    // The second script changed: only it runs again.
    let changed = run(root, scripts(&second("v2"))).await.expect("third run");
    assert_eq!(changed.steps_changed, 1, "{changed:?}");
    assert_eq!(
        std::fs::read_to_string(&out).expect("ran"),
        "first v1 node1 master,worker pre-install lab\nsecond v1\nsecond v2\n"
    );

    // A failing script stops the run with the node, the entry, the copy and the exit status.
    let failing = "#!/bin/sh\necho 'cannot reach the NTP server' >&2\nexit 7\n";
    let err = run(root, scripts(failing))
        .await
        .expect_err("a failing script fails the run");
    for want in [
        "node1",
        "spec.system.preInstall[1] `b.sh`",
        "pre_install_node1-02.sh",
        "exited with status 7",
        "cannot reach the NTP server",
    ] {
        assert!(err.contains(want), "`{want}` not in:\n{err}");
    }
}

#[test]
fn the_script_modules_run_first_and_last_and_their_delete_before_node_preparation() {
    let ctx = example_context(|t| {
        t.replace(
            "    timezone: Asia/Shanghai\n",
            "    timezone: Asia/Shanghai\n    preInstall: [setup.sh]\n    postInstall: [cni.sh, check.sh]\n",
        )
    });
    let p = plan::build(
        &install_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    let names: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names[..4],
        ["preflight", "os-repository", "pre-install", "node-prep"]
    );
    // Last but the readiness wait (which waits for what the scripts applied too).
    assert_eq!(names[names.len() - 2..], ["post-install", "cluster-ready"]);
    let text = p.to_text();
    for want in [
        "task pre-install on master1,master2,master3,node1,node2,registry1",
        "-> /etc/kubexm/scripts/pre_install_master1.sh (755)",
        "-> /etc/kubexm/scripts/post_install_node2-01.sh (755)",
        "-> /etc/kubexm/scripts/post_install_node2-02.sh (755)",
        "systemd-cat -t kubexm-post-install",
    ] {
        assert!(text.contains(want), "`{want}` not in the plan");
    }
    let d = plan::build(
        &delete_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("delete plan");
    let names: Vec<&str> = d.modules.iter().map(|m| m.name.as_str()).collect();
    let at = |n: &str| names.iter().position(|m| *m == n).expect(n);
    assert_eq!(at("delete-scripts") + 1, at("delete-node-prep"));
    assert!(d.modules[at("delete-scripts")].skipped.is_none());
    assert!(d.to_text().contains("rm -rf -- /etc/kubexm/scripts"));
}
