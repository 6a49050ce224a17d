//! Day-2 end to end on one machine, no internet (was `tests/lab/day2`): the three-node lab
//! cluster installed on a five-node lab, then grown and shrunk with kubexm-install's day-2
//! commands, in this order:
//!
//! 1. add a worker (node4), node4 stopped mid-run: a clear error, `--resume` ends it;
//! 2. add a master (node5): every haproxy lists it, reloaded (same process); the VIP serves it;
//! 3. etcd add-member node5 (refused without `--allow-even-etcd`) and remove-member, checked
//!    with etcdctl from outside the nodes;
//! 4. delete the master node5, then the worker node4 (a PodDisruptionBudget refuses its drain:
//!    the error names `--force-drain`, which then succeeds);
//! 5. add node4 again, stop it: delete-node points to `--unreachable`, which removes it from the
//!    cluster side only.
//!
//! Every operation is re-run and must change nothing. The Kubernetes binaries are the lab's
//! STAND-INs, which record their calls: joins, drains, resets and Node deletions are asserted
//! from those records, in order. Root only:
//!
//! `cargo test -p kubexm-labkit --test day2 -- --ignored --nocapture` (`KEEP_LAB=1` keeps it).

use std::path::Path;
use std::time::Duration;

use kubexm_labkit::cluster::ClusterYaml;
use kubexm_labkit::json::{EtcdHealth, EtcdMemberList, NodeList};
use kubexm_labkit::standin::{self, Calls};
use kubexm_labkit::{bundle, check, Kubexm, Lab, LabSpec, Output, Scenario, Tools};

/// The scenario's lab, runner and clock.
struct Day2<'a> {
    lab: &'a Lab,
    kx: Kubexm<'a>,
    scenario: &'a Scenario,
    c5: String,
}

impl Day2<'_> {
    /// `kubexm-install ARGS`, timed under `key`; fails with the output and the journal's tail.
    fn run(&self, key: &str, args: &[&str]) -> Output {
        let out = self.scenario.timed(key, || self.kx.run(args));
        let out = self
            .kx
            .ok(out, &format!("{key}: kubexm-install {}", args.join(" ")));
        for l in out.stdout.lines().filter(|l| {
            ["added", "deleted", "etcd member", "nothing"]
                .iter()
                .any(|p| l.starts_with(p))
        }) {
            self.scenario.note(l);
        }
        out
    }

    /// `kubexm-install ARGS` must fail.
    fn refused(&self, key: &str, args: &[&str]) -> Output {
        let out = self.kx.run(args);
        check(
            !out.success(),
            &format!("{key}: kubexm-install {} refuses", args.join(" ")),
            &out,
        );
        out
    }

    /// The re-run `out` changed no step (from its journal).
    fn unchanged(&self, key: &str, out: &Output) {
        let s = self.kx.last_summary();
        check(
            s.changed == 0,
            &format!("{key}: a re-run changes nothing"),
            &format!("{s:?}\n{out}"),
        );
    }

    /// Exactly `nodes` are registered in the API (the stand-in kubectl on node1).
    fn expect_nodes(&self, nodes: &[&str]) {
        let out = self.lab.ssh(
            "node1",
            "/usr/local/bin/kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o json",
        );
        let got = serde_json::from_str::<NodeList>(&out.stdout)
            .map(|l| l.names())
            .unwrap_or_default();
        check(
            got == nodes,
            &format!("the API lists exactly {nodes:?}"),
            &out,
        );
        self.scenario.note(&format!("API: nodes {nodes:?}"));
    }

    /// Every one of `nodes` lists exactly `nodes` in its managed `/etc/hosts` block.
    fn expect_hosts_blocks(&self, nodes: &[&str]) {
        for n in nodes {
            let block = self.lab.hosts_block(n).unwrap_or_default();
            check(
                block == nodes,
                &format!("{n}'s /etc/hosts block lists {nodes:?}"),
                &self.lab.read(n, "/etc/hosts"),
            );
        }
        self.scenario
            .note(&format!("/etc/hosts blocks on {nodes:?}"));
    }

    fn haproxy_pid(&self, n: &str) -> String {
        self.lab
            .ssh(n, "systemctl show -p MainPID --value haproxy")
            .stdout_trimmed()
            .to_string()
    }

    /// haproxy's `server` names on `n`.
    fn backends(&self, n: &str) -> Vec<String> {
        self.lab
            .read(n, "/etc/haproxy/haproxy.cfg")
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next() == Some("server")).then(|| w.next().map(str::to_string))?
            })
            .collect()
    }

    /// Debian's etcdctl from the lab namespace (outside every node) with node1's admin
    /// certificate kept on the control host.
    fn etcd_outside(&self, eps: &str, args: &[&str]) -> Output {
        let pki = self.kx.pki().join("etcd");
        let mut c = self.lab.command("env");
        c.arg("ETCDCTL_API=3")
            .arg("etcdctl")
            .arg(format!("--endpoints={eps}"))
            .arg(format!("--cacert={}", pki.join("etcd-ca.crt").display()))
            .arg(format!("--cert={}", pki.join("admin-node1.crt").display()))
            .arg(format!("--key={}", pki.join("admin-node1.key").display()))
            .arg("--command-timeout=10s")
            .args(args);
        Output::run(&mut c)
    }

    fn expect_members(&self, eps: &str, want: &[&str]) {
        let list = self.etcd_outside(eps, &["member", "list", "-w", "json"]);
        let names = serde_json::from_str::<EtcdMemberList>(&list.stdout)
            .map(|m| m.names())
            .unwrap_or_default();
        check(
            names == want,
            &format!("etcd members from outside: {want:?}"),
            &list,
        );
        let health = self.etcd_outside(eps, &["endpoint", "health", "--cluster", "-w", "json"]);
        let healthy = serde_json::from_str::<Vec<EtcdHealth>>(&health.stdout)
            .map(|h| h.iter().filter(|e| e.health).count())
            .unwrap_or(0);
        check(
            healthy == want.len(),
            &format!("{} healthy etcd endpoints from outside", want.len()),
            &health,
        );
    }

    fn kubeadm_calls(&self, nodes: &[&str]) -> Vec<Vec<String>> {
        nodes
            .iter()
            .map(|n| {
                Calls::read(self.lab, n, "kubeadm")
                    .lines()
                    .iter()
                    .map(|s| (*s).to_string())
                    .collect()
            })
            .collect()
    }

    /// kubeadm's calls and the manifests applied on `nodes` (a re-run must not change them).
    fn fingerprint(&self, nodes: &[&str]) -> Vec<(Vec<String>, usize)> {
        nodes
            .iter()
            .map(|n| {
                (
                    Calls::read(self.lab, n, "kubeadm")
                        .lines()
                        .iter()
                        .map(|s| (*s).to_string())
                        .collect(),
                    Calls::read(self.lab, n, "kubectl")
                        .matching(" apply ")
                        .len(),
                )
            })
            .collect()
    }

    fn record_nodes(&self) -> Vec<String> {
        self.kx
            .record()
            .node_names()
            .iter()
            .map(|s| (*s).to_string())
            .collect()
    }
}

#[test]
#[ignore = "lab: root + nspawn; run by tests/run-all"]
fn day2() {
    let scenario = Scenario::start("day2");
    scenario.step("build kubexm-build and kubexm-install");
    let tools = Tools::build();
    let work = tempfile::Builder::new()
        .prefix("kubexm-day2.")
        .tempdir_in("/var/tmp")
        .expect("work dir");
    let w = work.path();

    scenario.step("local mirror, source registry, bundle");
    let bundle = bundle::build(&tools, w, &kubexm_labkit::lab_dir().join("cluster.yaml"));

    scenario.step("lab up (5 nodes), the lab cluster on node1-3");
    let lab = Lab::up(&LabSpec::new("d2", 5));
    let c3_text = lab.cluster_yaml();
    let c3 = w.join("cluster.yaml");
    fs_err::write(&c3, &c3_text).expect("write cluster.yaml");
    let key = lab.env().ssh_key.clone();
    let c5 = w.join("cluster5.yaml");
    ClusterYaml::parse(&c3_text)
        .with_hosts(
            &[("node4", lab.ip("node4")), ("node5", lab.ip("node5"))],
            &key,
        )
        .with_role_group("master", &["node[1:3]", "node5"])
        .with_role_group("worker", &["node[1:4]"])
        .write(&c5);
    let d = Day2 {
        lab: &lab,
        kx: Kubexm::new(&lab, &tools, w, &bundle, &c3),
        scenario: &scenario,
        c5: c5.to_string_lossy().into_owned(),
    };
    let eps = |nodes: &[&str]| {
        nodes
            .iter()
            .map(|n| format!("https://{}:2379", lab.ip(n)))
            .collect::<Vec<_>>()
            .join(",")
    };
    let eps3 = eps(&["node1", "node2", "node3"]);
    let eps4 = eps(&["node1", "node2", "node3", "node5"]);

    scenario.step("install (3 nodes)");
    let out = scenario.timed("install (3 nodes)", || d.kx.install(&[]));
    let _ = d.kx.ok(out, "the install succeeds");
    the_record_after_install(&d, &c3_text);
    d.expect_nodes(&["node1", "node2", "node3"]);
    let kubeadm_before = d.kubeadm_calls(&["node1", "node2", "node3"]);

    add_a_worker(&d, &kubeadm_before, w, &c3_text, &key);
    add_a_master(&d);
    etcd_members(&d, &eps3, &eps4);
    delete_the_master(&d);
    delete_the_worker_past_a_pdb(&d);
    delete_an_unreachable_node(&d);

    scenario.step("the record");
    let r = d.kx.record();
    check(
        r.node_names() == ["node1", "node2", "node3"],
        "the record ends with the three nodes",
        &format!("{r:?}"),
    );
    for o in &r.history {
        scenario.note(&format!(
            "{:<18} {:<14} {:<9} {:6.1} s",
            o.operation,
            o.nodes.join(","),
            o.result,
            o.seconds
        ));
    }
}

fn the_record_after_install(d: &Day2, c3_text: &str) {
    let rec = d.kx.record_dir();
    let mode = Output::run(
        std::process::Command::new("stat")
            .args(["-c", "%a"])
            .arg(&rec)
            .arg(rec.join("installed.json")),
    );
    check(
        mode.stdout.lines().collect::<Vec<_>>() == ["700", "600"],
        "the record is private (0700, 0600)",
        &mode,
    );
    let r = d.kx.record();
    check(
        r.node_names() == ["node1", "node2", "node3"]
            && r.last()
                .is_some_and(|o| o.operation == "install" && o.result == "succeeded"),
        "the record lists the three installed nodes after a succeeded install",
        &format!("{r:?}"),
    );
    let kept = fs_err::read_to_string(rec.join("cluster.yaml")).unwrap_or_default();
    check(
        kept == c3_text,
        "the record keeps the cluster.yaml applied",
        &kept,
    );
    d.scenario.note(&format!(
        "record: {} (0700): installed.json + cluster.yaml as applied, 3 nodes",
        rec.display()
    ));
}

fn add_a_worker(d: &Day2, kubeadm_before: &[Vec<String>], w: &Path, c3_text: &str, key: &Path) {
    let (lab, c5) = (d.lab, d.c5.as_str());
    d.scenario
        .step("add-node --dry-run (node4): the change, the facts, the plan; nothing changes");
    let plan = d.run(
        "add4-plan",
        &["add-node", "-f", c5, "--node", "node4", "--dry-run"],
    );
    let has = |l: &str| plan.stdout.lines().any(|x| x.contains(l));
    let starts = |l: &str| plan.stdout.lines().any(|x| x.starts_with(l));
    check(
        starts("  + node4 (worker)") && starts("  + node5 (master)"),
        "dry run: the change lists node4 and node5",
        &plan,
    );
    check(
        has("API (kubectl on node1): node1 Ready"),
        "dry run: the API facts",
        &plan,
    );
    check(
        has("etcd (etcdctl on node1): 3 member(s): node1 healthy, node2 healthy, node3 healthy"),
        "dry run: the etcd facts",
        &plan,
    );
    check(
        has("task join-workers on node4"),
        "dry run: node4's join planned",
        &plan,
    );
    check(
        !lab.exists("node4", "/etc/kubexm/cluster"),
        "the dry run changed nothing on node4",
        &plan,
    );

    d.scenario
        .step("add-node node4, node4 stopped mid-run, then --resume");
    let runs_before = d.kx.runs().len();
    let t = std::time::Instant::now();
    let running = d.kx.spawn(&["add-node", "-f", c5, "--node", "node4"]);
    let seen =
        d.kx.wait_for_event(runs_before, Duration::from_secs(60), |e| {
            e.event == "TaskSucceeded" && e.module.as_deref() == Some("preflight")
        });
    lab.stop_node("node4");
    let out = running.finish();
    check(
        seen,
        "add-node passed its preflight before node4 was stopped",
        &out,
    );
    check(!out.success(), "add-node fails with node4 stopped", &out);
    let err = error_section(&out.stderr, 5);
    check(err.contains("node4"), "the error names node4", &out);
    check(
        out.stderr.contains("--resume"),
        "the error says --resume",
        &out,
    );
    d.scenario.note(&err);
    lab.start_node("node4");
    let resumed = d.run(
        "add4-resume",
        &["add-node", "-f", c5, "--node", "node4", "--resume"],
    );
    d.scenario.record("add worker (+resume)", t.elapsed());
    check(
        d.kx.last_summary().resumed >= 1,
        "--resume skipped the completed tasks",
        &resumed,
    );
    let r = d.kx.record();
    let results: Vec<&str> = r
        .history
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(|o| o.result.as_str())
        .collect();
    check(
        results == ["failed", "succeeded"],
        "the record holds the failed then the resumed add-node",
        &format!("{:?}", r.history),
    );

    d.scenario.step("check node4 joined as a worker");
    d.expect_nodes(&["node1", "node2", "node3", "node4"]);
    d.expect_hosts_blocks(&["node1", "node2", "node3", "node4"]);
    let marker = lab.read("node4", "/etc/kubexm/cluster");
    check(
        marker.lines().any(|l| l == format!("name={}", lab.name()))
            && lab.unit_active("node4", "containerd")
            && lab.unit_active("node4", "kubelet"),
        "node4: marker, containerd and kubelet",
        &marker,
    );
    let images = lab.ssh("node4", "ctr -n k8s.io images ls -q");
    let pause = format!("{}:5000/pause:3.10", lab.ip("node1"));
    check(
        images.stdout.lines().any(|l| l == pause),
        "node4: pause from the private registry",
        &images,
    );
    check(
        lab.chrony_follows("node4", lab.ip("node1")),
        "node4 follows node1's time",
        &lab.read("node4", "/etc/chrony/chrony.conf"),
    );
    let calls = Calls::read(lab, "node4", "kubeadm");
    check(
        calls.lines() == ["kubeadm join --config /etc/kubernetes/kubexm/kubeadm-join.yaml"],
        "node4: kubeadm called exactly once, for a join",
        &calls,
    );
    let join = kubexm_labkit::yaml_docs(&standin::given(lab, "node4", "kubeadm-join.yaml"));
    let j = kubexm_labkit::doc_of_kind(&join, "JoinConfiguration")
        .cloned()
        .unwrap_or_default();
    check(
        j.get("controlPlane").is_none(),
        "node4 joined as a worker (no controlPlane)",
        &j,
    );
    let creds = lab.read("node1", "/etc/kubernetes/kubexm/join-credentials");
    let token = creds
        .lines()
        .rev()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            w.position(|x| x == "--token")?;
            w.next().map(str::to_string)
        })
        .unwrap_or_default();
    check(
        !token.is_empty()
            && j.pointer("/discovery/bootstrapToken/token")
                .and_then(|t| t.as_str())
                == Some(token.as_str()),
        "node4 joined with node1's current token",
        &format!("credentials: {creds}\njoin: {j}"),
    );
    let kc = Calls::read(lab, "node1", "kubectl");
    check(
        kc.first("label node node4 --overwrite node-role.kubernetes.io/worker=")
            .is_some(),
        "node1: node4 labelled a worker",
        &kc,
    );
    check(
        d.kubeadm_calls(&["node1", "node2", "node3"]) == kubeadm_before,
        "kubeadm not called again on node1-3",
        &"",
    );
    d.scenario.note("kubeadm (stand-in): one join on node4 with node1's token; node1-3 untouched; node4 labelled worker");

    d.scenario
        .step("add-node node4 again changes nothing; a file without new hosts adds nothing");
    let four = ["node1", "node2", "node3", "node4"];
    let fp = d.fingerprint(&four);
    let again = d.run("add4-again", &["add-node", "-f", c5, "--node", "node4"]);
    d.unchanged("add4-again", &again);
    check(
        d.fingerprint(&four) == fp,
        "the re-run called kubeadm or applied no manifest",
        &again,
    );
    let c4 = w.join("cluster4.yaml");
    ClusterYaml::parse(c3_text)
        .with_hosts(&[("node4", lab.ip("node4"))], key)
        .with_role_group("worker", &["node[1:4]"])
        .write(&c4);
    let none = d.run("add4-none", &["add-node", "-f", &c4.to_string_lossy()]);
    check(
        none.stdout.lines().any(|l| l.contains("nothing to add")),
        "add-node without new hosts adds nothing",
        &none,
    );
}

fn add_a_master(d: &Day2) {
    let (lab, c5) = (d.lab, d.c5.as_str());
    let lbs = ["node1", "node2", "node3"];
    d.scenario.step("add-node node5 (a master)");
    let pids: Vec<String> = lbs.iter().map(|n| d.haproxy_pid(n)).collect();
    let vip_before = lab.vip_holders(&lbs);
    let _ = d.run("add master", &["add-node", "-f", c5, "--node", "node5"]);
    d.expect_nodes(&["node1", "node2", "node3", "node4", "node5"]);
    d.expect_hosts_blocks(&["node1", "node2", "node3", "node4", "node5"]);
    for (i, n) in lbs.iter().enumerate() {
        let b = d.backends(n);
        check(
            b == ["node1", "node2", "node3", "node5"],
            &format!("{n}: haproxy backends node1-3 and node5"),
            &format!("{b:?}"),
        );
        check(
            d.haproxy_pid(n) == pids[i],
            &format!("{n}: haproxy reloaded, not restarted"),
            &pids[i],
        );
    }
    let vip_after = lab.vip_holders(&lbs);
    check(
        vip_after == vip_before && vip_after.len() == 1,
        "the VIP stays where it was",
        &format!("before {vip_before:?}, after {vip_after:?}"),
    );
    let holder = vip_after[0].clone();
    d.scenario.note(&format!("haproxy on node1-3: backends node1 node2 node3 node5, reloaded (same process), VIP stays on {holder}"));
    let calls = Calls::read(lab, "node5", "kubeadm");
    check(
        calls.lines() == ["kubeadm join --config /etc/kubernetes/kubexm/kubeadm-join.yaml"],
        "node5: kubeadm called exactly once, for a join",
        &calls,
    );
    let join = kubexm_labkit::yaml_docs(&standin::given(lab, "node5", "kubeadm-join.yaml"));
    let j = kubexm_labkit::doc_of_kind(&join, "JoinConfiguration")
        .cloned()
        .unwrap_or_default();
    let ck = j
        .pointer("/controlPlane/certificateKey")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    check(
        ck.len() == 64 && ck.chars().all(|c| c.is_ascii_hexdigit()),
        "node5 joined as a control plane with a certificate key",
        &j,
    );
    check(
        lab.ssh_ok(
            "node5",
            "cmp -s /etc/ssl/etcd/ssl/node-node5.pem /etc/kubernetes/pki/apiserver-etcd-client.crt",
        ),
        "node5: the etcd client certificate in place",
        &"",
    );
    // The lab has no API servers: a STAND-IN API server (openssl s_server, its own certificate)
    // on node5:6443 shows that haproxy health-checks node5 and the VIP reaches it.
    let ip5 = lab.ip("node5");
    let _ = lab
        .ssh(
            "node5",
            &format!(
                "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
                 -subj /CN=kubexm-lab-standin-apiserver-node5 -keyout /run/standin-api.key -out /run/standin-api.crt 2>/dev/null && \
                 systemd-run --unit kubexm-standin-apiserver openssl s_server -quiet -accept {ip5}:6443 \
                 -cert /run/standin-api.crt -key /run/standin-api.key -www >/dev/null"
            ),
        )
        .ok("a stand-in API server on node5");
    let mut stats = Output::run(&mut std::process::Command::new("true"));
    let mut up = false;
    for _ in 0..60 {
        stats = lab.ssh(&holder, "curl -fsS 'http://127.0.0.1:8081/stats;csv'");
        up = stats.stdout.lines().any(|l| {
            let f: Vec<&str> = l.split(',').collect();
            f.first() == Some(&"kube-apiserver")
                && f.get(1) == Some(&"node5")
                && f.get(17) == Some(&"UP")
        });
        if up {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    check(up, &format!("haproxy on {holder} sees node5 UP"), &stats);
    let tls = lab.exec(&[
        "sh",
        "-c",
        &format!(
            "echo | openssl s_client -connect {}:6443 2>/dev/null",
            lab.vip()
        ),
    ]);
    check(
        tls.stdout.lines().any(|l| {
            l.replace(' ', "")
                .contains("CN=kubexm-lab-standin-apiserver-node5")
        }),
        "the VIP's :6443 reaches node5's (stand-in) API server",
        &tls,
    );
    d.scenario
        .note("from outside: haproxy stats show node5 UP; the VIP reaches node5's API server");
    let again = d.run("add5-again", &["add-node", "-f", c5, "--node", "node5"]);
    d.unchanged("add5-again", &again);
}

fn etcd_members(d: &Day2, eps3: &str, eps4: &str) {
    let lab = d.lab;
    d.scenario
        .step("etcd add-member node5: refused without --allow-even-etcd (4 members)");
    let even = d.refused(
        "add-member-even",
        &["etcd", "add-member", "--node", "node5"],
    );
    check(
        even.stderr.contains("--allow-even-etcd"),
        "the refusal names --allow-even-etcd",
        &even,
    );
    check(
        even.stderr
            .contains("leaves 4 etcd members, an even number"),
        "the refusal says why",
        &even,
    );
    d.expect_members(eps3, &["node1", "node2", "node3"]);

    d.scenario.step("etcd add-member node5 --allow-even-etcd");
    let _ = d.run(
        "etcd add-member",
        &["etcd", "add-member", "--node", "node5", "--allow-even-etcd"],
    );
    d.expect_members(eps4, &["node1", "node2", "node3", "node5"]);
    let conf = lab.read("node5", "/etc/etcd/etcd.conf.yml");
    check(
        conf.lines()
            .any(|l| l == "initial-cluster-state: \"existing\""),
        "node5 joined an existing etcd cluster",
        &conf,
    );
    let servers = |eps: &str| format!("    - --etcd-servers={eps}");
    for n in ["node1", "node2", "node3", "node5"] {
        let m = lab.read(n, "/etc/kubernetes/manifests/kube-apiserver.yaml");
        check(
            m.lines().any(|l| l == servers(eps4)),
            &format!("{n}: the API server's manifest has the 4 etcd endpoints"),
            &m,
        );
        let ps = lab.ssh(n, "pgrep -a -f -- 'kube-apiserver '");
        let flag = format!("--etcd-servers={eps4}");
        check(
            ps.stdout
                .lines()
                .any(|l| l.split_whitespace().any(|a| a == flag)),
            &format!("{n}: the (stand-in) API server restarted with the 4 endpoints"),
            &ps,
        );
    }
    let kubeadm = Calls::read(lab, "node1", "kubeadm");
    check(
        kubeadm.first("init phase upload-config kubeadm").is_some(),
        "node1: the ClusterConfiguration uploaded",
        &kubeadm,
    );
    d.scenario.note("every API server (node1-3, node5) runs with the 4 endpoints; ClusterConfiguration uploaded");
    let again = d.run(
        "add-member-again",
        &["etcd", "add-member", "--node", "node5", "--allow-even-etcd"],
    );
    check(
        again
            .stdout
            .contains("nothing to do: node5 is an etcd member already"),
        "add-member again does nothing",
        &again,
    );

    d.scenario.step("etcd remove-member node5");
    let _ = d.run(
        "etcd remove-member",
        &["etcd", "remove-member", "--node", "node5"],
    );
    d.expect_members(eps3, &["node1", "node2", "node3"]);
    check(
        !lab.unit_active("node5", "etcd")
            && !lab.exists("node5", "/var/lib/etcd")
            && !lab.exists("node5", "/etc/etcd/etcd.conf.yml"),
        "etcd gone from node5",
        &lab.ssh(
            "node5",
            "systemctl status etcd --no-pager; ls -d /var/lib/etcd /etc/etcd/etcd.conf.yml",
        ),
    );
    for n in ["node1", "node2", "node3", "node5"] {
        let m = lab.read(n, "/etc/kubernetes/manifests/kube-apiserver.yaml");
        check(
            m.lines().any(|l| l == servers(eps3)),
            &format!("{n}: the API server back on 3 etcd endpoints"),
            &m,
        );
    }
    let again = d.run(
        "remove-member-again",
        &["etcd", "remove-member", "--node", "node5"],
    );
    check(
        again
            .stdout
            .contains("nothing to do: node5 is not an etcd member"),
        "remove-member again does nothing",
        &again,
    );
}

fn delete_the_master(d: &Day2) {
    let lab = d.lab;
    let lbs = ["node1", "node2", "node3"];
    d.scenario.step("delete-node node5 (a master)");
    let _ = lab.ssh("node5", "systemctl stop kubexm-standin-apiserver");
    let pids: Vec<String> = lbs.iter().map(|n| d.haproxy_pid(n)).collect();
    let plan = d.run(
        "del5-plan",
        &["delete-node", "--node", "node5", "--dry-run"],
    );
    check(
        plan.stdout.contains("task cordon-drain on node1")
            && plan.stdout.contains("task delete-kubernetes on node5"),
        "delete-node --dry-run plans the drain and node5's removal",
        &plan,
    );
    let _ = d.run("delete master", &["delete-node", "--node", "node5"]);
    d.expect_nodes(&["node1", "node2", "node3", "node4"]);
    d.expect_hosts_blocks(&["node1", "node2", "node3", "node4"]);
    for (i, n) in lbs.iter().enumerate() {
        let b = d.backends(n);
        check(
            b == ["node1", "node2", "node3"],
            &format!("{n}: haproxy backends node1-3 (node5 gone)"),
            &format!("{b:?}"),
        );
        check(
            d.haproxy_pid(n) == pids[i],
            &format!("{n}: haproxy reloaded, not restarted"),
            &pids[i],
        );
    }
    let left = lab.ssh("node5", "ls -d /etc/kubexm /etc/kubernetes /usr/local/bin/kubelet /etc/containerd /etc/ssl/etcd 2>/dev/null");
    check(
        left.stdout_trimmed().is_empty(),
        "node5: the files of the install removed",
        &left,
    );
    check(
        !lab.unit_active("node5", "containerd")
            && !lab.unit_active("node5", "kubelet")
            && lab.hosts_block("node5").is_none(),
        "node5: services stopped and the hosts block removed",
        &"",
    );
    let kc1 = Calls::read(lab, "node1", "kubectl");
    let ka5 = Calls::read(lab, "node5", "kubeadm");
    let drain = kc1.first("drain node5 --ignore-daemonsets").map(|c| c.at);
    let reset = ka5.first("kubeadm reset -f").map(|c| c.at);
    let del = kc1.first("delete node node5").map(|c| c.at);
    check(
        matches!((drain, reset, del), (Some(a), Some(b), Some(c)) if a < b && b < c),
        "order: kubectl drain node5 < kubeadm reset on node5 < kubectl delete node node5",
        &format!("drain {drain:?}, reset {reset:?}, delete {del:?}\nnode1 kubectl:\n{kc1}node5 kubeadm:\n{ka5}"),
    );
    check(
        !kc1.matching("drain node5")
            .iter()
            .any(|c| c.line.contains("--disable-eviction")),
        "node5 drained through the eviction API",
        &kc1,
    );
    let again = d.run("del5-again", &["delete-node", "--node", "node5"]);
    check(
        again
            .stdout
            .contains("nothing to delete: node5 is not in cluster"),
        "delete-node again does nothing",
        &again,
    );
}

fn delete_the_worker_past_a_pdb(d: &Day2) {
    let lab = d.lab;
    d.scenario
        .step("delete-node node4 (a worker): a PodDisruptionBudget refuses the drain");
    let _ = lab
        .ssh(
            "node1",
            &format!("touch {}/state/pdb-blocks-node4", standin::DIR),
        )
        .ok("make the stand-in kubectl refuse node4's drain");
    let out = d.refused(
        "del4-pdb",
        &["delete-node", "--node", "node4", "--drain-timeout", "10"],
    );
    check(
        out.stderr.contains("--force-drain"),
        "the drain failure names --force-drain",
        &out,
    );
    check(
        out.stderr.contains("disruption budget"),
        "the drain failure shows kubectl's reason",
        &out,
    );
    let kc = Calls::read(lab, "node1", "kubectl");
    check(
        kc.matching("drain node4").len() == 3,
        "the drain tried 3 times",
        &kc,
    );
    check(
        !lab.exists(
            "node1",
            &format!("{}/state/nodes/node4/unschedulable", standin::DIR),
        ),
        "node4 uncordoned after the failed drain",
        &kc,
    );
    check(
        lab.unit_active("node4", "kubelet"),
        "node4 unchanged after its failed drain",
        &out,
    );
    let forced = d.run(
        "delete worker (forced)",
        &[
            "delete-node",
            "--node",
            "node4",
            "--force-drain",
            "--resume",
        ],
    );
    d.expect_nodes(&["node1", "node2", "node3"]);
    d.expect_hosts_blocks(&["node1", "node2", "node3"]);
    check(
        !lab.exists("node4", "/etc/kubexm") && !lab.unit_active("node4", "kubelet"),
        "node4 cleaned",
        &"",
    );
    check(
        forced.stderr.contains("warning: --force-drain"),
        "--force-drain is logged",
        &forced,
    );
    let kc = Calls::read(lab, "node1", "kubectl");
    check(
        kc.matching("drain node4")
            .last()
            .is_some_and(|c| c.line.contains("--disable-eviction")),
        "--force-drain bypasses the eviction API",
        &kc,
    );
    let reset = Calls::read(lab, "node4", "kubeadm")
        .first("kubeadm reset -f")
        .map(|c| c.at);
    let del = kc.first("delete node node4").map(|c| c.at);
    check(
        matches!((reset, del), (Some(a), Some(b)) if a < b),
        "order: kubeadm reset on node4 before kubectl delete node",
        &format!("reset {reset:?}, delete {del:?}"),
    );
    let r = d.kx.record();
    check(
        r.last()
            .is_some_and(|o| o.notes.iter().any(|n| n.contains("--force-drain"))),
        "the record notes the forced drain",
        &format!("{:?}", r.last()),
    );
    let again = d.run("del4-again", &["delete-node", "--node", "node4"]);
    check(
        again.stdout.contains("nothing to delete"),
        "delete-node again does nothing",
        &again,
    );
}

fn delete_an_unreachable_node(d: &Day2) {
    let lab = d.lab;
    d.scenario
        .step("add node4 again, stop it, delete-node --unreachable (cluster side only)");
    let _ = d.run(
        "add worker again",
        &["add-node", "-f", &d.c5, "--node", "node4"],
    );
    d.expect_nodes(&["node1", "node2", "node3", "node4"]);
    lab.stop_node("node4");
    let gone = d.refused("del4-gone", &["delete-node", "--node", "node4"]);
    check(
        gone.stderr.contains("node4 cannot be reached over SSH")
            && gone.stderr.contains("--unreachable"),
        "deleting an unreachable node points to --unreachable",
        &gone,
    );
    let out = d.run(
        "delete unreachable",
        &["delete-node", "--node", "node4", "--unreachable"],
    );
    let phase_skipped = out
        .stdout
        .contains("delete-kubeadm — skipped: --unreachable");
    check(phase_skipped, "--unreachable runs no node-side phase", &out);
    d.expect_nodes(&["node1", "node2", "node3"]);
    d.expect_hosts_blocks(&["node1", "node2", "node3"]);
    let r = d.kx.record();
    check(
        d.record_nodes() == ["node1", "node2", "node3"]
            && r.last()
                .is_some_and(|o| o.notes.iter().any(|n| n.contains("--unreachable"))),
        "the record drops node4 and notes --unreachable",
        &format!("{r:?}"),
    );
    lab.start_node("node4");
    let marker = lab.read("node4", "/etc/kubexm/cluster");
    check(
        marker.lines().any(|l| l == format!("name={}", lab.name()))
            && lab.exists("node4", "/etc/kubernetes/kubelet.conf"),
        "--unreachable left the machine itself untouched",
        &marker,
    );
    d.scenario.note("refused without --unreachable; with it: Node object, hosts blocks and record without node4; the machine untouched");
}

/// The `error:` line of a failed command's stderr and the `after` lines after it.
fn error_section(stderr: &str, after: usize) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    lines
        .iter()
        .position(|l| l.starts_with("error:"))
        .map(|i| lines[i..(i + after).min(lines.len())].join("\n"))
        .unwrap_or_default()
}
