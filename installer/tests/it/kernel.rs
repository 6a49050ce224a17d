//! `kernel-upgrade` without connecting anywhere: the plans of both Kubernetes paths (snapshots),
//! with `--nodes`, the order (masters first, one node at a time, every node's health checked
//! before the next starts), the drains from another master, and nodes already on the newest
//! kernel left alone. The lab runs it for real (`tests/lab/kubernetes/install-real`,
//! `REAL_KERNEL=1`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::facts::kernel::{KernelPackage, KernelRelease, KernelState};
use kubexm_install::facts::ClusterFacts;
use kubexm_install::modules::lifecycle::kernel::REBOOT_BOUNDS;
use kubexm_install::modules::lifecycle::membership::DrainOptions;
use kubexm_install::modules::osrepo::package_source;
use kubexm_install::pipeline::plan::{self, Plan};
use kubexm_install::pipelines::kernel_upgrade::{kernel_upgrade_pipeline, order, KernelUpgrade};

use crate::common::Edit as _;
use crate::day2::outline;

use crate::common::repo;

fn load(work: &Path, text: &str, catalog: &Path) -> Arc<InstallContext> {
    let file = work.join("cluster.yaml");
    std::fs::write(&file, text).expect("write cluster.yaml");
    Arc::new(load_context(&file, Some(catalog), None, work).expect("cluster loads"))
}

/// The lab cluster (kubeadm path, KubeXM's etcd on the three masters) plus node4, a worker;
/// `edit` changes the text further.
fn lab(work: &Path, edit: impl Fn(String) -> String) -> Arc<InstallContext> {
    let text = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab yaml");
    let key = "privateKeyPath: /var/tmp/kubexm-lab/labs/e2e/id_ed25519";
    let text = edit(
        text.edit(
            "  roleGroups:\n",
            &format!(
                "    - {{name: node4, address: 10.88.10.14, user: root, {key}}}\n  roleGroups:\n"
            ),
        )
        .edit("    worker: [\"node[1:3]\"]", "    worker: [\"node[1:4]\"]"),
    );
    load(
        work,
        &text,
        &repo().join("tests/lab/mirror/catalog-lab.yaml"),
    )
}

/// The kubexm-path fixture: master1..3 (etcd members, load balancers), worker1..2.
fn kubexm(work: &Path) -> Arc<InstallContext> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubexm");
    let text = std::fs::read_to_string(dir.join("cluster.yaml")).expect("fixture");
    load(work, &text, &dir.join("catalog-stand-in.yaml"))
}

fn release(s: &str) -> KernelRelease {
    KernelRelease::parse(s, "test").expect("release")
}

/// A node that needs the upgrade: its package not installed yet (the lab's first run).
fn needs(package: &str) -> KernelState {
    KernelState {
        package: KernelPackage::parse(package).expect("package"),
        current: false,
        running: release("6.1.0-18-amd64"),
        newest: None,
        pending: false,
    }
}

/// A node already on the newest installed kernel.
fn done(package: &str) -> KernelState {
    KernelState {
        current: true,
        newest: Some(release("6.1.0-18-amd64")),
        ..needs(package)
    }
}

fn pipeline_plan(
    ctx: &Arc<InstallContext>,
    nodes: &[&str],
    states: &BTreeMap<String, KernelState>,
) -> Plan {
    let nodes: Vec<String> = nodes.iter().map(ToString::to_string).collect();
    let facts = ClusterFacts::assumed(ctx);
    let p = kernel_upgrade_pipeline(&KernelUpgrade {
        ctx,
        nodes: &nodes,
        states,
        facts: &facts,
        drain: DrainOptions::default(),
        source: package_source(ctx),
        reboot: REBOOT_BOUNDS,
    })
    .expect("pipeline");
    plan::build(&p, &ctx.plan_nodes(), &Default::default()).expect("plan")
}

fn all_need(ctx: &InstallContext, package: &str) -> BTreeMap<String, KernelState> {
    ctx.all().into_iter().map(|n| (n, needs(package))).collect()
}

/// (phase, task) → hosts.
fn tasks(p: &Plan) -> Vec<(String, String, Vec<String>)> {
    p.modules
        .iter()
        .flat_map(|m| {
            m.tasks
                .iter()
                .map(|t| (m.name.clone(), t.name.clone(), t.hosts.clone()))
        })
        .collect()
}

#[test]
fn kubeadm_path_plan_masters_first_one_node_at_a_time() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = lab(work.path(), |t| t);
    let p = pipeline_plan(
        &ctx,
        &["node4", "node2", "node1", "node3"],
        &all_need(&ctx, "linux-image-amd64"),
    );
    assert_eq!(
        p.modules
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>(),
        [
            "kernel-node1",
            "kernel-node2",
            "kernel-node3",
            "kernel-node4"
        ]
    );
    // Every task of a phase runs on one host: the node, or the master that drains it (never
    // the node itself while another master exists).
    for (phase, task, hosts) in tasks(&p) {
        assert_eq!(hosts.len(), 1, "{phase}/{task}: {hosts:?}");
        let node = phase.trim_start_matches("kernel-");
        match task.as_str() {
            "cordon-drain" | "uncordon" => assert_ne!(hosts[0], node, "{phase}/{task}"),
            _ => assert_eq!(hosts[0], node, "{phase}/{task}"),
        }
    }
    let text = p.to_text();
    // Health after each master: its API server and its etcd member.
    assert!(
        text.contains("the API server on node1 answering /readyz"),
        "{text}"
    );
    assert!(text.contains("etcd healthy with node2 back"), "{text}");
    assert!(text.contains("endpoint health --cluster"), "{text}");
    // The drain respects budgets; the reboot waits for a new boot id.
    assert!(
        text.contains("drain node1 --ignore-daemonsets --delete-emptydir-data --timeout=300s"),
        "{text}"
    );
    assert!(!text.contains("--disable-eviction"), "{text}");
    assert!(text.contains("/proc/sys/kernel/random/boot_id"), "{text}");
    assert!(text.contains("systemd-run --quiet --on-active=2"), "{text}");
    insta::assert_snapshot!("kernel-upgrade-kubeadm-outline", outline(&p));
    insta::assert_snapshot!(
        "kernel-upgrade-kubeadm-node1-plan",
        phase_text(&text, "kernel-node1")
    );
}

/// The plan text of one phase.
fn phase_text(text: &str, phase: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if !line.starts_with(' ') && line.contains("kernel-") {
            inside = line.contains(&format!(" {phase}"));
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(!out.is_empty(), "no phase {phase} in\n{text}");
    out
}

#[test]
fn kubexm_path_plan_and_a_worker_without_etcd_or_api_server_checks() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = kubexm(work.path());
    let p = pipeline_plan(&ctx, &[], &all_need(&ctx, "kernel"));
    assert!(
        p.modules.is_empty(),
        "no --nodes given to the pipeline: nothing"
    );
    let all: Vec<String> = ctx.all();
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let p = pipeline_plan(&ctx, &refs, &all_need(&ctx, "kernel"));
    assert_eq!(
        p.modules
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>(),
        [
            "kernel-master1",
            "kernel-master2",
            "kernel-master3",
            "kernel-worker1",
            "kernel-worker2"
        ]
    );
    let text = p.to_text();
    let worker = phase_text(&text, "kernel-worker1");
    assert!(
        !worker.contains("etcd")
            && !worker.contains("/readyz >/dev/null (the API server on worker1"),
        "{worker}"
    );
    assert!(worker.contains("node worker1 Ready"), "{worker}");
    insta::assert_snapshot!("kernel-upgrade-kubexm-outline", outline(&p));
    insta::assert_snapshot!(
        "kernel-upgrade-kubexm-master2-plan",
        phase_text(&text, "kernel-master2")
    );
}

#[test]
fn nodes_subset_and_up_to_date_nodes_left_alone() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = lab(work.path(), |t| t);
    let mut states = all_need(&ctx, "linux-image-amd64");
    states.insert("node2".into(), done("linux-image-amd64"));
    let p = pipeline_plan(&ctx, &["node4", "node2"], &states);
    insta::assert_snapshot!("kernel-upgrade-nodes-subset-outline", outline(&p));
    assert_eq!(p.modules.len(), 2);
    assert!(p.modules[0]
        .skipped
        .as_deref()
        .is_some_and(|r| r.contains("left alone")));
    assert!(p.modules[1].skipped.is_none());
    assert_eq!(
        order(&ctx, &["node4".into(), "node3".into(), "node1".into()]),
        ["node1", "node3", "node4"]
    );
}

#[test]
fn stacked_etcd_is_checked_through_the_masters_etcd_pod_and_the_bundle_repository_is_the_source() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = lab(work.path(), |t| {
        t.edit(
            "  etcd:\n    type: kubexm\n    version: v3.4.23\n",
            "  etcd:\n    type: kubeadm\n",
        )
        .edit("  system:\n", "  system:\n    osReleases: [debian-12]\n")
    });
    let p = pipeline_plan(
        &ctx,
        &["node1", "node4"],
        &all_need(&ctx, "linux-image-amd64"),
    );
    let text = p.to_text();
    assert!(text.contains("exec etcd-node1 -- etcdctl"), "{text}");
    assert!(
        text.contains("Dir::Etc::SourceList=/etc/apt/sources.list.d/kubexm.sources"),
        "{text}"
    );
    assert!(text.contains("--enablerepo=kubexm-bundle"), "{text}");
    let worker = phase_text(&text, "kernel-node4");
    assert!(!worker.contains("etcdctl"), "{worker}");
}

#[test]
fn a_single_master_is_drained_from_itself() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = lab(work.path(), |t| {
        t.edit("    master: [\"node[1:3]\"]", "    master: [node1]")
    });
    let p = pipeline_plan(
        &ctx,
        &["node1", "node2"],
        &all_need(&ctx, "linux-image-amd64"),
    );
    let t = tasks(&p);
    assert!(
        t.contains(&(
            "kernel-node1".into(),
            "cordon-drain".into(),
            vec!["node1".into()]
        )),
        "{t:?}"
    );
    assert!(
        t.contains(&(
            "kernel-node2".into(),
            "cordon-drain".into(),
            vec!["node1".into()]
        )),
        "{t:?}"
    );
}

/// On a lab node (a fresh one: the stand-in not installed yet), over real SSH: its kernel facts,
/// the stand-in kernel package installed from the node's own sources, the expected release
/// learned, the reboot (a new boot id, a fresh connection) and `uname -r` checked; the facts then
/// say "left alone". Run inside the lab's namespace after offering the stand-in to the node as
/// install-real's kernel part does (its `KREPO`/`KSRC` lines):
/// `ip netns exec kxl-NAME env KUBEXM_KERNEL_LAB=IP,KEY,KNOWN_HOSTS,PACKAGE target/debug/deps/it-* --ignored lab_node_installs`.
#[test]
#[ignore = "needs a lab node offering the stand-in kernel package"]
fn lab_node_installs_the_stand_in_and_reboots_into_it() {
    use kubexm_install::facts::kernel::gather;
    use kubexm_install::modules::lifecycle::kernel::{
        InstallKernel, LearnExpected, RebootIntoKernel,
    };
    use kubexm_install::pipeline::ops::PackageSource;
    use kubexm_install::pipeline::{Facts, Node, Step};
    use kubexm_install::runner::ssh::{SshOptions, SshRunner};
    let spec = std::env::var("KUBEXM_KERNEL_LAB").expect("KUBEXM_KERNEL_LAB");
    let v: Vec<&str> = spec.split(',').collect();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut o = SshOptions::new("node1", v[0], "root", v[2]);
        o.private_key = Some(v[1].into());
        let runner = SshRunner::connect(o).await.expect("connect");
        let pkg = KernelPackage::parse(v[3]).expect("package");
        let before = gather(&runner, "amd64", Some(&pkg), &PackageSource::Node)
            .await
            .expect("facts");
        eprintln!("before: {before:?} -> {}", before.summary());
        let node = Node {
            name: "node1".into(),
            address: v[0].into(),
            internal_address: v[0].into(),
            roles: vec![],
            arch: "amd64".into(),
        };
        let facts = Facts::default();
        let steps: Vec<Box<dyn Step>> = vec![
            Box::new(InstallKernel {
                package: pkg.clone(),
                source: PackageSource::Node,
            }),
            Box::new(LearnExpected),
            Box::new(RebootIntoKernel {
                bounds: REBOOT_BOUNDS,
            }),
        ];
        let started = std::time::Instant::now();
        for s in &steps {
            for op in s.ops(&node, &facts).expect("ops") {
                let g = op.generic();
                let done = g.is_done(&runner).await.expect("is_done");
                eprintln!("{}: {} done={done}", s.name(), g.plan().kind);
                if !done {
                    g.apply(&runner).await.expect("apply");
                    g.verify(&runner).await.expect("verify");
                }
            }
        }
        eprintln!(
            "took {:?}, {} connection(s)",
            started.elapsed(),
            runner.connections()
        );
        let after = gather(&runner, "amd64", Some(&pkg), &PackageSource::Node)
            .await
            .expect("facts");
        eprintln!("after: {after:?} -> {}", after.summary());
        assert!(after.up_to_date());
        assert!(runner.connections() >= 2);
    });
}

/// What the stand-in nodes of [`rollout`] did, in order: `(node, event)`.
type Events = Arc<std::sync::Mutex<Vec<(String, String)>>>;
/// The nodes the stand-in API has cordoned.
type Cordoned = Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

/// A stand-in node for the rollout: it answers the kernel-upgrade's commands as a node would
/// (a boot id that changes with each reboot, the package installed once, `kubectl` from a
/// master) and records what changed it. `fail_install` makes its package install fail.
struct StandIn {
    name: String,
    events: Events,
    cordoned: Cordoned,
    boots: std::sync::Mutex<u32>,
    rebooting: std::sync::atomic::AtomicBool,
    installed: std::sync::atomic::AtomicBool,
    /// The kubelet runs (it is enabled: every boot starts it).
    kubelet: std::sync::atomic::AtomicBool,
    fail_install: std::sync::atomic::AtomicBool,
}

impl StandIn {
    fn new(name: &str, events: &Events, cordoned: &Cordoned) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_string(),
            events: events.clone(),
            cordoned: cordoned.clone(),
            boots: std::sync::Mutex::new(1),
            rebooting: false.into(),
            installed: false.into(),
            kubelet: true.into(),
            fail_install: false.into(),
        })
    }
    fn record(&self, what: String) {
        self.events
            .lock()
            .expect("events")
            .push((self.name.clone(), what));
    }
}

#[async_trait::async_trait]
impl kubexm_install::runner::Runner for StandIn {
    fn node(&self) -> &str {
        &self.name
    }
    async fn exec(
        &self,
        exec: &kubexm_install::runner::Exec,
    ) -> Result<kubexm_install::runner::ExecOutput, kubexm_install::runner::RunError> {
        use std::sync::atomic::Ordering::SeqCst;
        let s = exec.script.as_str();
        let out = |code: i32, stdout: String| {
            Ok(kubexm_install::runner::ExecOutput {
                code: Some(code),
                stdout,
                stderr: if code == 0 {
                    String::new()
                } else {
                    "stand-in failure".into()
                },
            })
        };
        if self.rebooting.load(SeqCst) {
            return Err(kubexm_install::runner::RunError::Connection {
                node: self.name.clone(),
                message: "connection reset by peer".into(),
            });
        }
        let boot = *self.boots.lock().expect("boots");
        if s == "cat /proc/sys/kernel/random/boot_id" {
            return out(0, format!("0b6a7c1e-2f3d-4e5f-8a9b-{boot:012x}\n"));
        }
        if s.contains("systemctl reboot") {
            self.record("reboot".into());
            self.rebooting.store(true, SeqCst);
            return out(0, String::new());
        }
        if s.starts_with("[ ! -e /run/kubexm/kernel-reboot-pending ]") {
            // Rebooted since the install (the marker is in /run): no reboot needed.
            return out(if boot > 1 { 0 } else { 1 }, String::new());
        }
        if s.contains("apt-get $o install") {
            if self.fail_install.load(SeqCst) {
                return out(1, String::new());
            }
            self.record("install".into());
            self.installed.store(true, SeqCst);
            return out(0, String::new());
        }
        if s.contains("apt-cache $o policy") {
            return out(
                if self.installed.load(SeqCst) { 0 } else { 1 },
                String::new(),
            );
        }
        if s.contains("sed -n 's/^vmlinuz-//p'") {
            return out(0, "6.1.0-18-amd64\n".into());
        }
        if s == "systemctl stop kubelet" || s == "systemctl start kubelet || true" {
            self.kubelet.store(s.contains("start"), SeqCst);
            self.record(s.to_string());
            return out(0, String::new());
        }
        if s == "! systemctl is-active -q kubelet" {
            return out(i32::from(self.kubelet.load(SeqCst)), String::new());
        }
        if s.contains("kubectl") {
            // The API, shared by the masters: which nodes are cordoned.
            let target = [" uncordon ", " cordon ", " drain ", " get node "]
                .iter()
                .filter_map(|v| s.find(v).map(|i| (i, &s[i + v.len()..])))
                .min_by_key(|(i, _)| *i)
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or_default()
                .trim_matches('\'')
                .to_string();
            let mut cordoned = self.cordoned.lock().expect("cordoned");
            let is = cordoned.contains(&target);
            let code = |b: bool| i32::from(!b);
            if s.starts_with("! ") && s.contains(" || ") {
                return out(code(is), String::new()); // cordon: done when cordoned
            }
            if s.starts_with("! ") {
                return out(1, String::new()); // drain: done when the Node is gone
            }
            if s.starts_with("[ ") && s.contains("!= true") {
                return out(code(!is), String::new()); // uncordon: done when schedulable
            }
            if s.starts_with("[ ") && s.contains("= true") {
                return out(code(is), String::new()); // drained: cordoned
            }
            for (verb, now) in [(" uncordon ", false), (" drain ", true), (" cordon ", true)] {
                if s.contains(verb) {
                    if now {
                        cordoned.insert(target.clone());
                    } else {
                        cordoned.remove(&target);
                    }
                    drop(cordoned);
                    self.record(format!("{}{target}", verb.trim_start()));
                    return out(0, String::new());
                }
            }
        }
        out(0, String::new())
    }
    async fn upload(
        &self,
        _: &kubexm_install::runner::Upload,
    ) -> Result<kubexm_install::runner::UploadOutcome, kubexm_install::runner::RunError> {
        Ok(kubexm_install::runner::UploadOutcome::Skipped)
    }
    async fn renew(&self) -> Result<(), kubexm_install::runner::RunError> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.rebooting.swap(false, SeqCst) {
            *self.boots.lock().expect("boots") += 1;
            self.kubelet.store(true, SeqCst);
            self.record("back".into());
        }
        Ok(())
    }
}

/// Runs the kernel-upgrade pipeline of the lab cluster (node1..3 masters, node4 a worker)
/// over stand-in nodes; `resume` as `--resume`.
fn rollout(
    ctx: &Arc<InstallContext>,
    work: &Path,
    nodes: &[Arc<StandIn>],
    resume: bool,
) -> Result<(), String> {
    use kubexm_install::pipeline::ops::WaitBounds;
    let names: Vec<String> = ctx.all();
    let facts = ClusterFacts::assumed(ctx);
    let states = all_need(ctx, "linux-image-amd64");
    let p = kernel_upgrade_pipeline(&KernelUpgrade {
        ctx,
        nodes: &names,
        states: &states,
        facts: &facts,
        drain: DrainOptions::default(),
        source: package_source(ctx),
        reboot: WaitBounds {
            timeout: std::time::Duration::from_secs(10),
            interval: std::time::Duration::from_millis(10),
        },
    })
    .map_err(|e| e.to_string())?;
    let mut runners: Vec<(
        kubexm_install::pipeline::Node,
        Arc<dyn kubexm_install::runner::Runner>,
    )> = nodes
        .iter()
        .map(|r| {
            let node = ctx.node(&r.name).cloned().expect("node");
            (node, r.clone() as Arc<dyn kubexm_install::runner::Runner>)
        })
        .collect();
    runners.push((
        kubexm_install::run::control_node(),
        Arc::new(kubexm_install::runner::local::LocalRunner::new(
            kubexm_install::run::CONTROL_HOST,
        )),
    ));
    let opts = kubexm_install::run::RunOptions {
        work_dir: work.to_path_buf(),
        base_dir: work.to_path_buf(),
        known_hosts: work.join("known_hosts"),
        accept_new_host_keys: false,
        resume,
        concurrency: 10,
        connect_timeout: std::time::Duration::from_secs(1),
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(kubexm_install::run::run_pipeline(ctx, &p, runners, &opts))
        .map(drop)
        .map_err(|e| e.to_string())
}

#[test]
fn the_rollout_goes_node_by_node_stops_at_a_failure_and_resumes_with_that_node() {
    use std::sync::atomic::Ordering::SeqCst;
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = lab(work.path(), |t| t);
    let events: Events = Arc::default();
    let cordoned: Cordoned = Arc::default();
    let nodes: Vec<Arc<StandIn>> = ["node1", "node2", "node3", "node4"]
        .iter()
        .map(|n| StandIn::new(n, &events, &cordoned))
        .collect();
    nodes[1].fail_install.store(true, SeqCst);
    let e = rollout(&ctx, work.path(), &nodes, false).expect_err("node2's install fails");
    assert!(e.contains("kernel-node2/install-kernel failed"), "{e}");
    assert!(e.contains("node2: step install-kernel-package"), "{e}");
    let log = |from: usize| -> Vec<String> {
        events.lock().expect("events")[from..]
            .iter()
            .map(|(n, w)| format!("{n}: {w}"))
            .collect()
    };
    // node1 done (drained from node2, its own steps on itself); node2 cordoned and drained from
    // node1, its kubelet stopped and started again by the rollback; node3 and node4 untouched.
    assert_eq!(
        log(0),
        [
            "node2: cordon node1",
            "node2: drain node1",
            "node1: systemctl stop kubelet",
            "node1: install",
            "node1: reboot",
            "node1: back",
            "node2: uncordon node1",
            "node1: cordon node2",
            "node1: drain node2",
            "node2: systemctl stop kubelet",
            "node2: systemctl start kubelet || true",
        ]
    );
    // Fixed, then --resume: node1 is not drained, installed or rebooted again; node2 goes on
    // where it stopped (already cordoned and drained: those tasks finished), then node3, then
    // the worker.
    nodes[1].fail_install.store(false, SeqCst);
    let seen = events.lock().expect("events").len();
    rollout(&ctx, work.path(), &nodes, true).expect("resumed");
    assert_eq!(
        log(seen),
        [
            "node2: systemctl stop kubelet",
            "node2: install",
            "node2: reboot",
            "node2: back",
            "node1: uncordon node2",
            "node1: cordon node3",
            "node1: drain node3",
            "node3: systemctl stop kubelet",
            "node3: install",
            "node3: reboot",
            "node3: back",
            "node1: uncordon node3",
            "node1: cordon node4",
            "node1: drain node4",
            "node4: systemctl stop kubelet",
            "node4: install",
            "node4: reboot",
            "node4: back",
            "node1: uncordon node4",
        ]
    );
    for n in &nodes {
        assert_eq!(
            *n.boots.lock().expect("boots"),
            2,
            "{} booted once more",
            n.name
        );
    }
}

#[test]
fn cli_kernel_upgrade_is_discoverable_checks_its_package_and_needs_a_recorded_cluster() {
    use crate::day2::cli;
    let work = tempfile::tempdir().expect("tempdir");
    let top = cli(work.path(), &["--help"]);
    assert!(String::from_utf8_lossy(&top.stdout).contains("kernel-upgrade"));
    let h = cli(work.path(), &["kernel-upgrade", "--help"]);
    let h = String::from_utf8_lossy(&h.stdout);
    for flag in [
        "--nodes",
        "--package",
        "--yes",
        "--resume",
        "--force-drain",
        "--dry-run",
        "Examples:",
    ] {
        assert!(h.contains(flag), "{flag} missing:\n{h}");
    }
    // A package name that is not one is refused before anything is read or reached (exit 2),
    // shown escaped.
    let out = cli(
        work.path(),
        &["kernel-upgrade", "--package", "kernel;\u{1b}[2Jreboot"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a package name") && !err.contains('\u{1b}'),
        "{err}"
    );
    let out = cli(work.path(), &["kernel-upgrade", "--yes"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cluster is recorded"));
}
