//! `verify-cluster` checked from outside on REAL Kubernetes (issue 37, "the four broken-cluster
//! cases above are each detected by name on the real lab"): v1.37.2 from Go modules installed on
//! three lab nodes (node1 master + worker + stacked etcd, node2 and node3 workers; internal
//! haproxy) with the REAL flannel (vxlan), CoreDNS, etcd, CNI plugins and
//! crictl, installed with `--no-verify`; then `verify-cluster -o json` must pass on the healthy
//! cluster and name each of four breakages, and pass again once each is repaired:
//!
//! 1. the pod network broken on node3 (flannel's VXLAN, UDP 8472, dropped in node3): `pod-network`
//!    fails, every failure names node3, node1 ⇄ node2 pass;
//! 2. DNS stopped (CoreDNS scaled to 0): `dns` fails, for every node;
//! 3. the kubelet of the worker node3 stopped (until the node is NotReady): `nodes` fails naming
//!    node3;
//! 4. an expired certificate (node1's `/etc/kubernetes/pki/etcd/healthcheck-client.crt` signed
//!    again by its CA, valid until yesterday: tests/lab/kubernetes/expire-certs): `certificates`
//!    fails naming the file and node1 (`etcd` may fail too: KubeXM's etcdctl uses that
//!    certificate).
//!
//! STAND-INs on the checks' path, said in the output: NodeLocal DNS (KubeXM always deploys it:
//! the kubelets' clusterDNS and the `dns` check's server are 169.254.25.10; no cluster.yaml field
//! turns it off) is build-images' SUBSTITUTE for k8s-dns-node-cache (not buildable here): the REAL
//! CoreDNS binary serving the DaemonSet's Corefile on that address, forwarding to the REAL CoreDNS
//! pods through `kube-dns-upstream`; the probe image `docker.io/library/busybox` is Debian 12's
//! busybox-static (another SUBSTITUTE).
//!
//! Opt-in, root: `tests/lab/labkit real_verify` (`KEEP_LAB=1` keeps the lab).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kubexm_labkit::kube::{Deployment, Kubectl, List, Node, Pod};
use kubexm_labkit::real::{
    cluster_yaml, dir_of, join, kubectl_for, tail, wait_for, Built, Net, Parts, NODES,
};
use kubexm_labkit::{check, Kubexm, Lab, LabSpec, Output, Scenario, Tools};
use kubexm_testkit::{HttpMirror, Registry, RegistryOptions};
use serde::Deserialize;

/// The version under test.
const VERSION: &str = "v1.37.2";
/// The iptables comment on the rules that break node3's pod network.
const BREAK_TAG: &str = "kubexm-lab-break-vxlan";
/// The certificate made expired: no Kubernetes component uses it (etcd's liveness probe is HTTP
/// on the metrics port), KubeXM's etcdctl on the kubeadm path does (the `etcd` check's facts).
const EXPIRED_CERT: &str = "/etc/kubernetes/pki/etcd/healthcheck-client.crt";
/// Its original, kept on the node (outside every place the inventory reads).
const EXPIRED_BACKUP: &str = "/root/kubexm-lab-healthcheck-client.crt.orig";

/// `verify-cluster -o json` (installer/src/verify/mod.rs `Report`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    result: String,
    outcome: String,
    seconds: f64,
    checks: Vec<VCheck>,
    cleanup: Cleanup,
}

#[derive(Debug, Deserialize)]
struct VCheck {
    name: String,
    status: String,
    seconds: f64,
    summary: String,
    #[serde(default)]
    evidence: Vec<String>,
    #[serde(default)]
    failures: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Cleanup {
    created: bool,
    removed: bool,
    #[serde(default)]
    note: Option<String>,
}

impl Report {
    fn check(&self, name: &str) -> &VCheck {
        self.checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("verify-cluster reports no check {name}: {self:?}"))
    }

    fn failed(&self) -> BTreeSet<&str> {
        self.checks
            .iter()
            .filter(|c| c.status == "fail")
            .map(|c| c.name.as_str())
            .collect()
    }

    /// Every check, its status, summary, failures and evidence (the evidence of a failed step).
    fn table(&self) -> String {
        let mut s = format!(
            "result {}, outcome {}, {:.1} s; cleanup created={} removed={} note={:?}\n",
            self.result,
            self.outcome,
            self.seconds,
            self.cleanup.created,
            self.cleanup.removed,
            self.cleanup.note
        );
        for c in &self.checks {
            s.push_str(&format!(
                "  {:<4} {:<14} {:>5.1}s {}\n",
                c.status, c.name, c.seconds, c.summary
            ));
            for f in &c.failures {
                s.push_str(&format!("         - {f}\n"));
            }
            for e in &c.evidence {
                s.push_str(&format!("           {e}\n"));
            }
        }
        s
    }
}

/// When the last `verify-cluster` ended.
static LAST_RUN: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
/// NodeLocal DNS caches an answer up to 30 s (its Corefile's `cache`). Each `verify-cluster`
/// makes its probe Service anew, with a new ClusterIP under the same name, so a run that starts
/// within that time of the previous one is answered the previous Service's address and its
/// `dns` check fails on a healthy cluster (seen here, 2026-11-28: "→ 10.233.40.19, not the
/// Service's 10.233.59.113" on every node). Until the check copes with that, the runs here are
/// spaced by more than the cache's time.
const DNS_CACHE_GAP: Duration = Duration::from_secs(35);

/// `verify-cluster -o json`: its exit code and report (printed).
fn verify(scenario: &Scenario, kx: &Kubexm, label: &str) -> (Option<i32>, Report) {
    let last = *LAST_RUN.lock().expect("LAST_RUN");
    if let Some(rest) = last.and_then(|l| DNS_CACHE_GAP.checked_sub(l.elapsed())) {
        scenario.note(&format!(
            "waiting {} s: {} s since the last verify-cluster (NodeLocal DNS's cache, see DNS_CACHE_GAP)",
            rest.as_secs(),
            DNS_CACHE_GAP.as_secs()
        ));
        std::thread::sleep(rest);
    }
    let t = Instant::now();
    let out = kx.run(&["verify-cluster", "-o", "json", "--timeout", "300"]);
    *LAST_RUN.lock().expect("LAST_RUN") = Some(Instant::now());
    let d = t.elapsed();
    scenario.record(&format!("verify {label}"), d);
    let report: Report = match serde_json::from_str(&out.stdout) {
        Ok(r) => r,
        Err(e) => {
            check(
                false,
                &format!("verify-cluster -o json ({label}) prints its report"),
                &format!("{e}\n{out}"),
            );
            unreachable!("check(false) panics")
        }
    };
    scenario.note(&format!(
        "verify-cluster ({label}): exit {:?} in {:.1} s, failed {:?}",
        out.code,
        d.as_secs_f64(),
        report.failed()
    ));
    eprint!("{}", report.table());
    (out.code, report)
}

/// The healthy cluster: exit 0, every check passes, metrics skipped only because metrics-server
/// is really absent, the probes removed.
fn verify_passes(scenario: &Scenario, kx: &Kubexm, kc: &Kubectl, label: &str) {
    let (code, r) = verify(scenario, kx, label);
    let table = r.table();
    check(
        code == Some(0) && r.result == "pass" && r.outcome == "complete" && r.failed().is_empty(),
        &format!("verify-cluster ({label}) exits 0, result pass, no check failed"),
        &format!("exit {code:?}\n{table}"),
    );
    for c in &r.checks {
        let ok = match (c.name.as_str(), c.status.as_str()) {
            (_, "pass") => true,
            ("metrics", "skip") => {
                // True only when no metrics API is registered.
                let out = kc.run(&[
                    "get",
                    "apiservices",
                    "v1beta1.metrics.k8s.io",
                    "--ignore-not-found",
                    "-o",
                    "name",
                ]);
                out.success() && out.stdout.trim().is_empty()
            }
            _ => false,
        };
        check(
            ok,
            &format!(
                "verify-cluster ({label}): {} passes (or is skipped for a true reason)",
                c.name
            ),
            &table,
        );
    }
    for n in [
        "nodes",
        "control-plane",
        "etcd",
        "certificates",
        "pod-network",
        "service",
        "dns",
        "logs-exec",
    ] {
        check(
            r.check(n).status == "pass",
            &format!("verify-cluster ({label}): {n} passes"),
            &table,
        );
    }
    // Every node named in the evidence of the per-node checks.
    for n in NODES {
        for c in ["nodes", "pod-network", "service", "dns", "logs-exec"] {
            check(
                r.check(c)
                    .evidence
                    .iter()
                    .any(|e| e.starts_with(&format!("{n}:")) || e.starts_with(&format!("{n} "))),
                &format!("verify-cluster ({label}): {c}'s evidence names {n}"),
                &table,
            );
        }
    }
    check(
        r.cleanup.created && r.cleanup.removed,
        &format!("verify-cluster ({label}) removed its probes"),
        &table,
    );
}

/// A broken cluster: exit 7, complete, `must` among the failed checks, every failed check in
/// `may` ∪ `must`; returns the report.
fn verify_fails(
    scenario: &Scenario,
    kx: &Kubexm,
    label: &str,
    must: &[&str],
    may: &[&str],
) -> Report {
    let (code, r) = verify(scenario, kx, label);
    let failed = r.failed();
    let allowed: BTreeSet<&str> = must.iter().chain(may).copied().collect();
    check(
        code == Some(7)
            && r.result == "fail"
            && r.outcome == "complete"
            && must.iter().all(|m| failed.contains(m))
            && failed.is_subset(&allowed),
        &format!(
            "verify-cluster ({label}) exits 7 (partial), failing {must:?} (and at most {may:?} besides)"
        ),
        &format!("exit {code:?}\n{}", r.table()),
    );
    r
}

/// kubectl get nodes: node → Ready.
fn ready_nodes(kc: &Kubectl) -> Result<BTreeMap<String, bool>, String> {
    let l: List<Node> = kc.try_get(&["get", "nodes"]).map_err(|o| o.to_string())?;
    Ok(l.items
        .iter()
        .map(|n| (n.metadata.name.clone(), n.ready()))
        .collect())
}

#[test]
#[ignore = "lab: root + nspawn + REAL Kubernetes from Go modules; run by hand (tests/lab/labkit real_verify)"]
fn verify_cluster_names_each_broken_part() {
    let scenario = Scenario::start(&format!("real verify-cluster ({VERSION})"));
    scenario.step("build kubexm-build and kubexm-install");
    let tools = Tools::build();
    let work = tempfile::Builder::new()
        .prefix("kubexm-real-verify.")
        .tempdir_in("/var/tmp")
        .expect("work dir");
    let w = work.path();

    scenario.step(&format!(
        "REAL Kubernetes {VERSION}, the gomod mirror, images (cached)"
    ));
    let kdir = kubexm_labkit::lab_dir().join("kubernetes");
    let (built, mirror) = scenario.timed("build (cached)", || {
        let k8s = dir_of(
            Command::new(kdir.join("build-kubernetes-gomod")).arg(VERSION),
            &format!("build-kubernetes-gomod {VERSION}"),
        );
        let images = dir_of(
            Command::new("bash")
                .arg(kdir.join("build-images"))
                .args(["--k8s", VERSION]),
            &format!("build-images --k8s {VERSION}"),
        );
        let mirror = dir_of(
            Command::new(kubexm_labkit::lab_dir().join("mirror/build-mirror"))
                .env("KUBEXM_LAB_GOMOD", "1"),
            "KUBEXM_LAB_GOMOD=1 build-mirror",
        );
        (
            Built {
                version: VERSION.to_string(),
                k8s,
                images,
            },
            mirror,
        )
    });
    let catalog = mirror.join("catalog-gomod.yaml");
    check(
        catalog.is_file()
            && mirror
                .join(format!("files/dl.k8s.io/release/{VERSION}/bin/linux/amd64/kubeadm"))
                .is_file()
            && built
                .built_images()
                .get("flannel-io/flannel:v0.27.4")
                .is_some_and(|k| k == "real")
            ,
        &format!("the gomod mirror serves kubeadm {VERSION} with its catalog, the REAL flannel image is built"),
        &mirror.display(),
    );

    scenario.step("lab up (3 nodes)");
    let lab = Lab::up(&LabSpec::new("rverify", 3));
    let addon = w.join("lab-web.yaml");
    fs_err::write(&addon, kubexm_labkit::real::LAB_WEB).expect("write lab-web.yaml");
    let cluster = w.join("cluster.yaml");
    // node1 master + worker + etcd, node2 and node3 workers. No field turns NodeLocal DNS off
    // (KubeXM always deploys it; see the module documentation).
    let yaml = cluster_yaml(&lab, VERSION, Net::Flannel, &addon);
    let mut roles = yaml.clone();
    for group in ["etcd", "master"] {
        let all = format!("    {group}: [\"node[1:3]\"]\n");
        check(
            roles.matches(&all).count() == 1,
            &format!("the lab cluster.yaml's {group} group is node1-3 (made node1's alone)"),
            &yaml,
        );
        roles = roles.replace(&all, &format!("    {group}: [node1]\n"));
    }
    fs_err::write(&cluster, roles).expect("write cluster.yaml");

    scenario.step("source registry + kubexm-build bundle");
    let bundle = scenario.timed("bundle", || {
        make_bundle(&tools, w, &mirror, &catalog, &built, &cluster)
    });
    let parts = Parts::of(&bundle, &catalog, &built.built_images());
    scenario.note(&format!("REAL:     {}", join(&parts.real)));
    scenario.note(&format!("STAND-IN: {}", join(&parts.standin)));
    for item in [
        format!("kubeadm {VERSION}"),
        format!("kubelet {VERSION}"),
        format!("image registry.k8s.io/kube-apiserver:{VERSION}"),
    ] {
        check(
            parts.has_real(&item),
            &format!("the bundle holds the REAL {item}"),
            &join(&parts.real),
        );
    }
    for repo in ["coredns/coredns:", "flannel-io/flannel:"] {
        check(
            parts.real_image(repo),
            &format!("the bundle's {repo} image is REAL"),
            &join(&parts.real),
        );
    }
    let probe_real = parts.real_image("library/busybox:");
    let nodelocal_real = parts.real_image("dns/k8s-dns-node-cache:");

    let kx = Kubexm::new(&lab, &tools, w, &bundle, &cluster);
    scenario.step(&format!(
        "kubexm-install --no-verify ({VERSION}, kubeadm, node1 master + etcd, node1-3 workers, flannel)"
    ));
    let out = scenario.timed("install", || kx.install(&[]));
    let out = kx.ok(out, "the install succeeds");
    eprint!("{}", tail(&out.stdout, 4));
    let kc = kubectl_for(&lab, &kx.pki().join("admin.conf"), built.kubectl());
    wait_for(Duration::from_secs(300), "3 nodes Ready", || {
        let r = ready_nodes(&kc)?;
        if r.len() == 3 && r.values().all(|x| *x) {
            Ok(())
        } else {
            Err(format!("{r:?}"))
        }
    });

    // NodeLocal DNS: node-local-dns Ready on every node (in the lab, build-images' SUBSTITUTE:
    // the REAL CoreDNS serving the DaemonSet's Corefile on 169.254.25.10).
    scenario.step("NodeLocal DNS on every node");
    scenario.timed("nodelocal", || {
        wait_for(
            Duration::from_secs(240),
            "a Ready node-local-dns pod on node1-3",
            || {
                let l: List<Pod> = kc
                    .try_get(&[
                        "-n",
                        "kube-system",
                        "get",
                        "pods",
                        "-l",
                        "k8s-app=node-local-dns",
                    ])
                    .map_err(|o| o.to_string())?;
                let on: BTreeSet<&str> = l
                    .items
                    .iter()
                    .filter(|p| p.ready())
                    .filter_map(|p| p.spec.node_name.as_deref())
                    .collect();
                if on == BTreeSet::from(NODES) {
                    Ok(())
                } else {
                    Err(format!("Ready on {on:?}"))
                }
            },
        )
    });
    let mut through_standins = vec![];
    if !nodelocal_real {
        through_standins.push("dns: NodeLocal DNS = build-images' SUBSTITUTE for k8s-dns-node-cache (the REAL CoreDNS binary serving the DaemonSet's Corefile on 169.254.25.10), forwarding to the REAL CoreDNS pods");
    }
    if !probe_real {
        through_standins.push("pod-network, service, dns, logs-exec: the probe image docker.io/library/busybox = Debian 12's busybox-static (build-images' SUBSTITUTE)");
    }
    for s in &through_standins {
        scenario.note(&format!("!! through a STAND-IN: {s}"));
    }

    // 0. Healthy.
    scenario.step("0. verify-cluster on the healthy cluster");
    scenario.timed("0 healthy", || {
        verify_passes(&scenario, &kx, &kc, "healthy")
    });

    // 1. The pod network broken on node3.
    scenario.step("1. pod network broken on node3 (flannel VXLAN UDP 8472 dropped in node3)");
    scenario.timed("1 pod network", || {
        let rules = format!(
            "iptables -w -I INPUT -p udp --dport 8472 -m comment --comment {BREAK_TAG} -j DROP && iptables -w -I OUTPUT -p udp --dport 8472 -m comment --comment {BREAK_TAG} -j DROP && ip -d link show flannel.1"
        );
        let out = lab.ssh("node3", &rules);
        check(out.success() && out.stdout.contains("vxlan"), "node3: VXLAN (flannel.1) blocked in INPUT and OUTPUT", &out);
        let r = verify_fails(&scenario, &kx, "node3's pod network broken", &["pod-network"], &["service", "dns"]);
        let pn = r.check("pod-network");
        let table = r.table();
        check(
            !pn.failures.is_empty() && pn.failures.iter().all(|f| f.contains("node3")),
            "pod-network: every failure names node3",
            &table,
        );
        for pair in [("node1", "node3"), ("node3", "node1"), ("node2", "node3"), ("node3", "node2")] {
            check(
                pn.failures.iter().any(|f| f.starts_with(&format!("{} → {} (", pair.0, pair.1))),
                &format!("pod-network: {} → {} fails", pair.0, pair.1),
                &table,
            );
        }
        for (from, to) in [("node1", "node2"), ("node2", "node1")] {
            check(
                pn.evidence.iter().any(|e| e.strip_prefix(&format!("{from} → ")).is_some_and(|rest| rest.split(", ").any(|x| x == to))),
                &format!("pod-network: {from} → {to} still passes"),
                &table,
            );
        }
        scenario.note(&format!("pod-network failures: {:?}", pn.failures));
        let out = lab.ssh(
            "node3",
            &format!("for c in INPUT OUTPUT; do iptables -w -D $c -p udp --dport 8472 -m comment --comment {BREAK_TAG} -j DROP; done; ! iptables -w -S | grep -q {BREAK_TAG}"),
        );
        check(out.success(), "node3: the VXLAN rules removed", &out);
        verify_passes(&scenario, &kx, &kc, "node3's pod network repaired");
    });

    // 2. DNS stopped.
    scenario.step("2. DNS stopped (CoreDNS scaled to 0)");
    scenario.timed("2 dns", || {
        let d: Deployment = kc.get(&["-n", "kube-system", "get", "deployment", "coredns"]);
        let replicas = d.spec.replicas.unwrap_or(1).max(1).to_string();
        let out = kc.run(&[
            "-n",
            "kube-system",
            "scale",
            "deployment",
            "coredns",
            "--replicas=0",
        ]);
        check(out.success(), "CoreDNS scaled to 0", &out);
        wait_for(Duration::from_secs(120), "no CoreDNS pod left", || {
            let l: List<Pod> = kc
                .try_get(&["-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns"])
                .map_err(|o| o.to_string())?;
            if l.items.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{:?}",
                    l.items.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
                ))
            }
        });
        let r = verify_fails(&scenario, &kx, "CoreDNS at 0", &["dns"], &[]);
        let dns = r.check("dns");
        for n in NODES {
            check(
                dns.failures
                    .iter()
                    .any(|f| f.starts_with(&format!("{n}: ")) && f.contains("not resolved")),
                &format!("dns: {n}'s probe could not resolve the Service name"),
                &r.table(),
            );
        }
        scenario.note(&format!("dns failures: {:?}", dns.failures));
        let out = kc.run(&[
            "-n",
            "kube-system",
            "scale",
            "deployment",
            "coredns",
            &format!("--replicas={replicas}"),
        ]);
        check(
            out.success(),
            &format!("CoreDNS scaled back to {replicas}"),
            &out,
        );
        let out = kc.run(&[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment/coredns",
            "--timeout=240s",
        ]);
        check(out.success(), "CoreDNS rolled out again", &out);
        verify_passes(&scenario, &kx, &kc, "CoreDNS back");
    });

    // 3. A kubelet stopped.
    scenario.step("3. node3's kubelet stopped");
    scenario.timed("3 kubelet", || {
        let out = lab.ssh("node3", "systemctl stop kubelet && ! systemctl is-active --quiet kubelet");
        check(out.success(), "node3: kubelet stopped", &out);
        let t = Instant::now();
        wait_for(Duration::from_secs(180), "node3 NotReady", || {
            let r = ready_nodes(&kc)?;
            if r.get("node3") == Some(&false) {
                Ok(())
            } else {
                Err(format!("{r:?}"))
            }
        });
        scenario.note(&format!("node3 NotReady {} s after its kubelet stopped", t.elapsed().as_secs()));
        let r = verify_fails(&scenario, &kx, "node3's kubelet stopped", &["nodes"], &["logs-exec"]);
        let nodes = r.check("nodes");
        let table = r.table();
        check(
            nodes.failures.len() == 1 && nodes.failures[0].starts_with("node3: NotReady"),
            "nodes: exactly node3 NotReady",
            &table,
        );
        let le = r.check("logs-exec");
        check(
            le.status == "pass" || le.failures.iter().all(|f| f.starts_with("node3")),
            "logs-exec: fails for node3 only, if at all",
            &table,
        );
        scenario.note(&format!(
            "nodes failures: {:?}; logs-exec {} ({})",
            nodes.failures, le.status, le.summary
        ));
        if le.status == "pass" {
            scenario.note("!! logs-exec passes with node3's kubelet down: the probe checks run on Ready, schedulable nodes only (node3 is NotReady, named by `nodes`)");
        }
        let out = lab.ssh("node3", "systemctl start kubelet && systemctl is-active kubelet");
        check(out.success(), "node3: kubelet started", &out);
        wait_for(Duration::from_secs(240), "node3 Ready again", || {
            let r = ready_nodes(&kc)?;
            if r.len() == 3 && r.values().all(|x| *x) {
                Ok(())
            } else {
                Err(format!("{r:?}"))
            }
        });
        verify_passes(&scenario, &kx, &kc, "node3's kubelet back");
    });

    // 4. An expired certificate.
    scenario.step(&format!("4. node1's {EXPIRED_CERT} expired"));
    scenario.timed("4 certificate", || {
        expire_cert(&lab, w);
        let out = lab.ssh("node1", &format!("openssl x509 -in {EXPIRED_CERT} -noout -enddate -checkend 0"));
        check(out.code == Some(1) && out.stdout.contains("will expire"), &format!("node1: openssl says {EXPIRED_CERT} has expired"), &out);
        scenario.note(&format!("node1: {EXPIRED_CERT} {}", out.stdout.lines().next().unwrap_or("")));
        // KubeXM's own etcdctl (the facts the etcd check reads) uses this client certificate on
        // the kubeadm path: the etcd check may fail with it, naming node1.
        let r = verify_fails(
            &scenario,
            &kx,
            "an expired certificate",
            &["certificates"],
            &["etcd"],
        );
        let etcd = r.check("etcd");
        check(
            etcd.status == "pass" || etcd.failures.iter().all(|f| f.contains("node1")),
            "etcd: passes, or fails asking node1's etcd (with the expired client certificate)",
            &r.table(),
        );
        scenario.note(&format!("etcd {}: {:?}", etcd.status, etcd.failures));
        let c = r.check("certificates");
        check(
            c.failures.len() == 1
                && c.failures[0].starts_with(&format!("node1: {EXPIRED_CERT} ("))
                && c.failures[0].contains(" expired "),
            &format!("certificates: exactly node1's {EXPIRED_CERT}, expired"),
            &r.table(),
        );
        scenario.note(&format!("certificates failures: {:?}", c.failures));
        let out = lab.ssh(
            "node1",
            &format!("cp -p {EXPIRED_BACKUP} {EXPIRED_CERT} && rm -f {EXPIRED_BACKUP} && openssl x509 -in {EXPIRED_CERT} -noout -checkend 7776000"),
        );
        check(out.success(), &format!("node1: {EXPIRED_CERT} restored (valid 90 days more)"), &out);
        verify_passes(&scenario, &kx, &kc, "certificate restored");
    });

    for s in &through_standins {
        scenario.note(&format!("!! through a STAND-IN: {s}"));
    }
    for (k, label) in [
        ("build (cached)", "build"),
        ("bundle", "bundle"),
        ("install", "install"),
        ("nodelocal", "nodelocal dns"),
        ("0 healthy", "0 healthy"),
        ("1 pod network", "1 pod network"),
        ("2 dns", "2 dns"),
        ("3 kubelet", "3 kubelet"),
        ("4 certificate", "4 certificate"),
    ] {
        if let Some(d) = scenario.time(k) {
            scenario.note(&format!("step {label:<16} {:>7.1} s", d.as_secs_f64()));
        }
    }
}

/// The source registry filled, `kubexm-build bundle` of `cluster`.
fn make_bundle(
    tools: &Tools,
    w: &Path,
    mirror: &Path,
    catalog: &Path,
    built: &Built,
    cluster: &Path,
) -> std::path::PathBuf {
    let files = HttpMirror::start(&mirror.join("files"));
    let registry = Registry::start(RegistryOptions::default());
    let zone = fs_err::read_to_string(kubexm_labkit::lab_dir().join("mirror/zone-lab.yaml"))
        .expect("zone-lab.yaml")
        .replace("127.0.0.1:28080", &files.addr().to_string())
        .replace("127.0.0.1:25000", &registry.host());
    let zone_file = w.join("zone.yaml");
    fs_err::write(&zone_file, zone).expect("zone.yaml");
    let args: Vec<std::ffi::OsString> = vec![
        "-f".into(),
        cluster.into(),
        "--catalog".into(),
        catalog.into(),
        "--zone-file".into(),
        zone_file.into(),
    ];
    let resolve = Output::run(
        Command::new(tools.build_bin())
            .arg("resolve")
            .args(&args)
            .args(["-o", "json"]),
    )
    .ok("kubexm-build resolve");
    let resolve_json = w.join("resolve.json");
    fs_err::write(&resolve_json, &resolve.stdout).expect("resolve.json");
    let _ = Output::run(
        Command::new(kubexm_labkit::lab_dir().join("mirror/fill-registry"))
            .arg("--images")
            .arg(&built.images)
            .arg(&resolve_json),
    )
    .ok("fill-registry");
    let bundle = w.join(format!("real-{VERSION}.tar.zst"));
    let _ = Output::run(
        Command::new(tools.build_bin())
            .arg("bundle")
            .args(&args)
            .arg("-o")
            .arg(&bundle)
            .env("KUBEXM_CACHE_DIR", w.join("cache")),
    )
    .ok("kubexm-build bundle");
    drop((files, registry));
    let _ = fs_err::remove_dir_all(w.join("cache"));
    bundle
}

/// node1's [`EXPIRED_CERT`] signed again by the etcd CA, valid until yesterday
/// (tests/lab/kubernetes/expire-certs), its original kept in [`EXPIRED_BACKUP`].
fn expire_cert(lab: &Lab, w: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let dir = w.join("expire-ca");
    fs_err::create_dir_all(&dir).expect("expire-ca");
    fs_err::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod 700");
    for (from, to) in [
        ("/etc/kubernetes/pki/etcd/ca.crt", "etcd-ca.crt"),
        ("/etc/kubernetes/pki/etcd/ca.key", "etcd-ca.key"),
        (EXPIRED_CERT, "healthcheck-client.crt"),
    ] {
        let text = lab.read("node1", from);
        check(!text.is_empty(), &format!("node1: {from} read"), &from);
        fs_err::write(dir.join(to), text).expect("write");
    }
    let out = Output::run(
        Command::new(kubexm_labkit::lab_dir().join("kubernetes/expire-certs"))
            .arg(&dir)
            .arg(dir.join("healthcheck-client.crt")),
    );
    check(
        out.success() && out.stdout_trimmed() == "1",
        "expire-certs re-signed exactly the one certificate",
        &out,
    );
    let pem = fs_err::read(dir.join("healthcheck-client.crt")).expect("read");
    let _ = fs_err::remove_dir_all(&dir);
    let b64 = base64_encode(&pem);
    let out = lab.ssh(
        "node1",
        &format!("set -e; cp -p {EXPIRED_CERT} {EXPIRED_BACKUP}; echo {b64} | base64 -d > {EXPIRED_CERT}.new; chmod --reference={EXPIRED_CERT} {EXPIRED_CERT}.new; mv {EXPIRED_CERT}.new {EXPIRED_CERT}"),
    );
    check(
        out.success(),
        &format!("node1: the expired {EXPIRED_CERT} written"),
        &out,
    );
}

/// Standard base64 (no line breaks).
fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}
