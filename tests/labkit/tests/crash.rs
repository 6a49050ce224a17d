//! Crashes: `kubexm-install` killed with SIGKILL (no clean-up, as a crash or a power cut) at
//! points of an install and of a day-2 operation, then `--resume` completes. On the lab cluster
//! (three nodes, the lab's STAND-IN kubeadm/kubelet/kubectl) plus a fourth node for the day-2
//! `add-node`:
//!
//! 1. the install killed mid-upload of a large file: node2's link is slowed down (`tc`) so that
//!    the containerd/CNI/etcd archives take seconds, and the kill comes while one is being
//!    written on node2 (its `*.kubexm-part` seen growing);
//! 2. `--resume` killed mid-`kubeadm join` on node2 (the stand-in holds the join while a file
//!    exists, its call already recorded);
//! 3. `--resume` killed mid-journal write (while the run writes its first burst of events);
//! 4. `--resume` completes; the cluster's checks pass; a re-run changes nothing;
//! 5. `add-node node4` killed mid-join, `add-node --resume` completes.
//!
//! After every kill and at the end: every journal, state and record file in the work directory
//! parses whole, no temporary file is left there, and no partial upload is left on a node once
//! the resumed run has passed. Root only:
//!
//! `cargo test -p kubexm-labkit --test crash -- --ignored --nocapture` (`KEEP_LAB=1` keeps it).

use std::time::{Duration, Instant};

use kubexm_labkit::cluster::ClusterYaml;
use kubexm_labkit::json::NodeList;
use kubexm_labkit::standin::{self, Calls};
use kubexm_labkit::{bundle, check, Kubexm, Lab, LabSpec, Output, Running, Scenario, Tools};

const NODES: [&str; 3] = ["node1", "node2", "node3"];
/// Where the kubeadm stand-in looks for the file that holds a join.
const HOLD_JOIN: &str = "state/hold-join";

#[test]
#[ignore = "lab: root + nspawn; run by tests/lab/labkit crash"]
fn crash() {
    let scenario = Scenario::start("crash");
    scenario.step("build kubexm-build and kubexm-install");
    let tools = Tools::build();
    let work = tempfile::Builder::new()
        .prefix("kubexm-crash.")
        .tempdir_in("/var/tmp")
        .expect("work dir");
    let w = work.path();
    scenario.step("local mirror, source registry, bundle");
    let bundle = bundle::build(&tools, w, &kubexm_labkit::lab_dir().join("cluster.yaml"));

    scenario.step("lab up (4 nodes), the lab cluster on node1-3");
    let lab = Lab::up(&LabSpec::new("crash", 4));
    let c3_text = lab.cluster_yaml();
    let c3 = w.join("cluster.yaml");
    fs_err::write(&c3, &c3_text).expect("write cluster.yaml");
    let c4 = w.join("cluster4.yaml");
    ClusterYaml::parse(&c3_text)
        .with_hosts(&[("node4", lab.ip("node4"))], &lab.env().ssh_key)
        .with_role_group("worker", &["node[1:4]"])
        .write(&c4);
    let kx = Kubexm::new(&lab, &tools, w, &bundle, &c3);

    scenario.step("1. install killed mid-upload of a large file on node2 (its link slowed)");
    killed_mid_upload(&scenario, &lab, &kx);
    after_a_kill(&scenario, &kx);

    scenario.step("2. --resume killed mid-kubeadm join on node2");
    killed_mid_join(&scenario, &lab, "node2", || kx.spawn_install(&["--resume"]));
    after_a_kill(&scenario, &kx);

    scenario.step("3. --resume killed mid-journal write");
    killed_mid_journal(&scenario, &kx);
    after_a_kill(&scenario, &kx);

    scenario.step("4. --resume completes");
    let out = scenario.timed("resume to the end", || kx.install(&["--resume"]));
    let out = kx.ok(out, "--resume after three kills completes");
    eprint!("{}", out.stdout);
    check(
        kx.last_summary().resumed > 0,
        "--resume skipped what the killed runs finished",
        &out,
    );
    cluster_checks(&scenario, &lab, &kx, &NODES);
    let init = Calls::read(&lab, "node1", "kubeadm");
    check(
        init.matching("kubeadm init ").len() == 1,
        "node1: kubeadm init ran once over all the runs",
        &init,
    );
    let again = kx.ok(kx.install(&[]), "a re-run succeeds");
    let s = kx.last_summary();
    check(
        s.changed == 0,
        "a re-run after the resumed install changes nothing",
        &format!("{s:?}\n{again}"),
    );
    no_partial_uploads(&scenario, &lab, &NODES);
    scenario.note(&format!(
        "{} journal, state and record files whole",
        kx.check_work_dir_whole()
    ));

    scenario.step("5. add-node node4 killed mid-join, then add-node --resume");
    let c4s = c4.to_string_lossy().into_owned();
    killed_mid_join(&scenario, &lab, "node4", || {
        kx.spawn(&["add-node", "-f", &c4s, "--node", "node4"])
    });
    after_a_kill(&scenario, &kx);
    let out = scenario.timed("add-node --resume", || {
        kx.run(&["add-node", "-f", &c4s, "--node", "node4", "--resume"])
    });
    let out = kx.ok(out, "add-node --resume after the kill completes");
    eprint!("{}", out.stdout);
    let all = ["node1", "node2", "node3", "node4"];
    cluster_checks(&scenario, &lab, &kx, &all);
    let r = kx.record();
    check(
        r.node_names() == all
            && r.last()
                .is_some_and(|o| o.operation == "add-node" && o.result == "succeeded"),
        "the record lists node4 after the resumed add-node",
        &format!("{r:?}"),
    );
    no_partial_uploads(&scenario, &lab, &all);
    scenario.note(&format!(
        "{} journal, state and record files whole",
        kx.check_work_dir_whole()
    ));
}

/// Polls `f` every `every` until it returns `Some` or `timeout` passes.
fn poll<T>(timeout: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if t.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Kills `running` and checks that it died by the signal.
fn kill(scenario: &Scenario, running: Running, when: &str) -> Output {
    let pid = running.pid();
    let out = running.kill();
    check(
        out.code.is_none(),
        &format!("kubexm-install (pid {pid}) was killed {when}, not ended by itself"),
        &out,
    );
    scenario.note(&format!("SIGKILL to kubexm-install (pid {pid}) {when}"));
    out
}

/// The work directory's files are whole right after a kill (before anything cleans up).
fn after_a_kill(scenario: &Scenario, kx: &Kubexm) {
    let n = kx.check_work_dir_whole();
    scenario.note(&format!(
        "after the kill: {n} journal, state and record files whole, no temporary file"
    ));
}

fn killed_mid_upload(scenario: &Scenario, lab: &Lab, kx: &Kubexm) {
    // The lab namespace's side of node2's link (a port of the lab bridge named after the node).
    let slow = [
        "tc", "qdisc", "add", "dev", "node2", "root", "tbf", "rate", "40mbit", "burst", "64kb",
        "latency", "400ms",
    ];
    let _ = lab
        .exec(&slow)
        .ok("slow down node2's link (tc tbf 40 Mbit/s)");
    let running = kx.spawn_install(&[]);
    // A partial upload on node2 that is growing: the kill lands inside the transfer.
    let find = "find /var/lib/kubexm /usr/local /opt -name '*.kubexm-part' -size +1024k \
                -printf '%s %p\\n' 2>/dev/null | head -n 1";
    let seen = poll(Duration::from_secs(600), Duration::from_millis(200), || {
        let first = lab.ssh("node2", find).stdout_trimmed().to_string();
        let (size, path) = first.split_once(' ')?;
        let size: u64 = size.parse().ok()?;
        std::thread::sleep(Duration::from_millis(300));
        let again = lab.ssh("node2", &format!("stat -c %s {path} 2>/dev/null"));
        let later: u64 = again.stdout_trimmed().parse().ok()?;
        (later > size).then(|| format!("{path}: {size} then {later} bytes"))
    });
    let out = match &seen {
        Some(what) => kill(scenario, running, &format!("mid-upload ({what})")),
        None => running.kill(),
    };
    let _ = lab
        .exec(&["tc", "qdisc", "del", "dev", "node2", "root"])
        .ok("node2's link at full speed again");
    check(
        seen.is_some(),
        "a partial upload on node2 was seen growing before the kill",
        &format!("{out}{}", kx.journal_tail(10)),
    );
}

/// The `kubexm-install` that `start` starts, killed while the stand-in kubeadm holds its join
/// on `node`; the join is then let go.
fn killed_mid_join(scenario: &Scenario, lab: &Lab, node: &str, start: impl FnOnce() -> Running) {
    let hold = format!("{}/{HOLD_JOIN}", standin::DIR);
    let _ = lab
        .ssh(
            node,
            &format!("mkdir -p {}/state && touch {hold}", standin::DIR),
        )
        .ok("hold the next kubeadm join");
    let joins_before = Calls::read(lab, node, "kubeadm")
        .matching("kubeadm join")
        .len();
    let running = start();
    let held = poll(Duration::from_secs(900), Duration::from_millis(500), || {
        let calls = Calls::read(lab, node, "kubeadm");
        let joined = calls.matching("kubeadm join").len() > joins_before;
        (joined && lab.ssh_ok(node, "pgrep -f '[k]ubeadm join' >/dev/null")).then_some(())
    });
    let out = match held {
        Some(()) => kill(
            scenario,
            running,
            &format!("while kubeadm join runs on {node}"),
        ),
        None => running.kill(),
    };
    let _ = lab
        .ssh(node, &format!("rm -f {hold}"))
        .ok("let the held join go");
    check(
        held.is_some(),
        &format!("kubeadm join started on {node} and was held there when the kill came"),
        &format!("{out}{}", Calls::read(lab, node, "kubeadm")),
    );
}

fn killed_mid_journal(scenario: &Scenario, kx: &Kubexm) {
    let runs_before = kx.runs().len();
    let running = kx.spawn_install(&["--resume"]);
    // The run's first burst of events (preflight on every node): kill at the 30th line.
    let lines = |_: &()| {
        kx.runs()
            .get(runs_before)
            .and_then(|r| fs_err::read_to_string(r.join("log.jsonl")).ok())
            .map_or(0, |t| t.lines().count())
    };
    let busy = poll(Duration::from_secs(120), Duration::from_millis(5), || {
        (lines(&()) >= 30).then_some(())
    });
    let out = match busy {
        Some(()) => kill(scenario, running, "while it writes its journal"),
        None => running.kill(),
    };
    check(
        busy.is_some(),
        "the resumed run wrote 30 journal lines before the kill",
        &out,
    );
    scenario.note(&format!(
        "the killed run's journal had {} lines at the end",
        lines(&())
    ));
}

/// The cluster's checks: `status -o json` (every node reachable, registered and Ready, etcd
/// healthy, no problem) and the API's Node list (the stand-in kubectl on node1).
fn cluster_checks(scenario: &Scenario, lab: &Lab, kx: &Kubexm, nodes: &[&str]) {
    let (out, s) = kx.status_json();
    let mut names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    names.sort_unstable();
    check(names == nodes, "status: every node", &out);
    for n in &s.nodes {
        check(
            n.reachable && n.registered && n.ready == Some(true),
            &format!("status: {} reachable, registered and Ready", n.name),
            &out,
        );
        check(
            n.unit("containerd") == Some("active") && n.unit("kubelet") == Some("active"),
            &format!("status: containerd and kubelet active on {}", n.name),
            &out,
        );
    }
    let members = s
        .etcd
        .as_ref()
        .map(|e| e.members.clone())
        .unwrap_or_default();
    check(
        members.len() == 3 && members.iter().all(|m| m.healthy),
        "status: 3 healthy etcd members",
        &out,
    );
    // As the e2e's status check: exit 0 without problems, 7 with them.
    check(
        (out.code == Some(0)) == s.problems.is_empty() && matches!(out.code, Some(0 | 7)),
        "status: the exit code agrees with the problems",
        &out,
    );
    let api = lab.ssh(
        "node1",
        "/usr/local/bin/kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o json",
    );
    let registered = serde_json::from_str::<NodeList>(&api.stdout)
        .map(|l| l.names())
        .unwrap_or_default();
    check(registered == nodes, "the API lists every node", &api);
    scenario.note(&format!(
        "status: {nodes:?} reachable, registered, Ready; etcd 3/3 healthy; exit {:?}, problems {:?}",
        out.code, s.problems
    ));
}

fn no_partial_uploads(scenario: &Scenario, lab: &Lab, nodes: &[&str]) {
    for n in nodes {
        let left = lab.partial_uploads(n);
        check(
            left.is_empty(),
            &format!("{n}: no partial upload left after the resumed run"),
            &left.join("\n"),
        );
    }
    scenario.note(&format!("no partial upload left on {nodes:?}"));
}
