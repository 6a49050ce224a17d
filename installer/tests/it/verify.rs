//! `verify-cluster` against stand-in nodes: runners that answer kubectl, curl and the facts
//! script as the lab's nodes do, and record every command. What is proven: the exact commands
//! (each kubectl request bounded, the probes created from stdin in their own namespace and that
//! namespace deleted at the end, nothing else changed), the checks' verdicts on a healthy and a
//! broken cluster, and the cleanup after an interrupt and after the time limit.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kubexm_install::facts::parse::{EndpointHealth, EtcdMember};
use kubexm_install::facts::{ClusterFacts, EtcdFacts};
use kubexm_install::runner::{Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome};
use kubexm_install::verify::{self, CheckId, Options, Outcome, Status, Target};
use tokio::sync::Notify;

use crate::lb::lab_context;

const PROBE_IPS: [&str; 3] = ["10.244.0.4", "10.244.1.3", "10.244.2.5"];
const CLUSTER_IP: &str = "10.96.140.7";

/// What the stand-in cluster does wrong.
#[derive(Clone, Copy, Default)]
struct Faults {
    /// node3's probe cannot be reached over the pod network.
    pod_network_node3: bool,
    /// DNS does not answer.
    dns: bool,
    /// `kubectl get pods` never answers.
    pods_hang: bool,
    /// `kubectl get pods` takes a while (an interrupt comes first).
    pods_slow: bool,
}

/// Everything the nodes were asked: (node, script, stdin).
type Log = Arc<Mutex<Vec<(String, String, Option<String>)>>>;

struct StandIn {
    name: String,
    kubelet: String,
    faults: Faults,
    log: Log,
    applied: Arc<Notify>,
}

fn ok(stdout: impl Into<String>) -> ExecOutput {
    ExecOutput {
        code: Some(0),
        stdout: stdout.into(),
        stderr: String::new(),
    }
}

fn node_list(kubelet: &str) -> String {
    let items: Vec<String> = (1..=3)
        .map(|i| {
            format!(
                r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"node{i}","labels":{{"kubernetes.io/hostname":"node{i}"}}}},
                "spec":{{"podCIDR":"10.244.{}.0/24"}},
                "status":{{"conditions":[{{"type":"Ready","status":"True","reason":"KubeletReady"}}],
                "nodeInfo":{{"kubeletVersion":"{kubelet}","containerRuntimeVersion":"containerd://1.6.20"}}}}}}"#,
                i - 1
            )
        })
        .collect();
    format!(
        r#"{{"apiVersion":"v1","kind":"List","items":[{}]}}"#,
        items.join(",")
    )
}

fn probe_pods() -> String {
    let items: Vec<String> = (1..=3)
        .map(|i| {
            format!(
                r#"{{"metadata":{{"name":"kubexm-verify-probe-p{i}","namespace":"kubexm-verify","labels":{{"app.kubernetes.io/name":"kubexm-verify-probe"}}}},
                "spec":{{"nodeName":"node{i}"}},
                "status":{{"phase":"Running","podIP":"{}","conditions":[{{"type":"Ready","status":"True"}}]}}}}"#,
                PROBE_IPS[i - 1]
            )
        })
        .collect();
    format!(r#"{{"kind":"List","items":[{}]}}"#, items.join(","))
}

#[async_trait]
impl Runner for StandIn {
    fn node(&self) -> &str {
        &self.name
    }
    async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError> {
        let s = exec.script.clone();
        self.log.lock().expect("lock").push((
            self.name.clone(),
            s.clone(),
            exec.stdin
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned()),
        ));
        let out = if s.contains(" get nodes -o json") {
            ok(node_list(&self.kubelet))
        } else if s.contains("https://127.0.0.1:10257/healthz") {
            ok("kube-apiserver 200\nkube-controller-manager 200\nkube-scheduler 200\n")
        } else if s.contains("end=") {
            // The facts script: no certificate on these stand-ins.
            ok("version=kubelet Kubernetes v1.33.11\nend=\n@@END\n")
        } else if s.contains(" get apiservices v1beta1.metrics.k8s.io") {
            ok("")
        } else if s.contains(" delete namespace kubexm-verify ") {
            ok("namespace \"kubexm-verify\" deleted\n")
        } else if s.ends_with(" apply -f -") {
            self.applied.notify_one();
            ok("namespace/kubexm-verify created\n")
        } else if s.contains(" get pods -n kubexm-verify -o json") {
            if self.faults.pods_hang {
                std::future::pending::<()>().await;
            }
            if self.faults.pods_slow {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            ok(probe_pods())
        } else if s.contains(" get service -n kubexm-verify kubexm-verify-probe-") {
            ok(format!(r#"{{"spec":{{"clusterIP":"{CLUSTER_IP}"}}}}"#))
        } else if s.contains(" exec -n kubexm-verify ") {
            // The peers are the words after `probe`.
            let peers = s.rsplit_once(" probe ").map_or("", |(_, p)| p);
            let mut out = String::new();
            for ip in peers.split_whitespace() {
                let i = PROBE_IPS.iter().position(|p| p == &ip).expect("a probe IP") + 1;
                if self.faults.pod_network_node3 && i == 3 {
                    out.push_str(&format!("peer {ip} fail\n"));
                } else {
                    out.push_str(&format!("peer {ip} ok node{i}\n"));
                }
            }
            out.push_str(if self.faults.dns {
                "dns fail\n"
            } else {
                "dns ok 10.96.140.7\n"
            });
            ok(out)
        } else if s.contains(" logs -n kubexm-verify ") {
            let pod = s.split_whitespace().nth_back(1).expect("pod");
            let i = pod.trim_start_matches("kubexm-verify-probe-p");
            ok(format!("kubexm-verify probe on node{i}\n"))
        } else if s.starts_with("curl -fsS --max-time 5 http://10.96.140.7:80/node") {
            ok("node2\n")
        } else {
            ExecOutput {
                code: Some(127),
                stdout: String::new(),
                stderr: "stand-in: unexpected call".into(),
            }
        };
        Ok(out)
    }
    async fn upload(&self, _: &Upload) -> Result<UploadOutcome, RunError> {
        panic!("verify-cluster uploads nothing");
    }
}

fn etcd_facts() -> EtcdFacts {
    EtcdFacts {
        from: "node1".into(),
        members: (1..=3)
            .map(|i| EtcdMember {
                id: i,
                name: format!("node{i}"),
                peer_urls: vec![format!("https://10.88.10.1{i}:2380")],
                client_urls: vec![format!("https://10.88.10.1{i}:2379")],
            })
            .collect(),
        health: (1..=3)
            .map(|i| EndpointHealth {
                endpoint: format!("https://10.88.10.1{i}:2379"),
                health: true,
                error: None,
            })
            .collect(),
    }
}

/// The lab cluster (3 masters/workers, kubexm etcd, containerd) whose resolution carries a
/// busybox probe image, on stand-in nodes.
struct Lab {
    ctx: Arc<kubexm_install::context::InstallContext>,
    facts: ClusterFacts,
    runners: BTreeMap<String, Arc<dyn Runner>>,
    log: Log,
    applied: Arc<Notify>,
}

fn lab(faults: Faults) -> Lab {
    let mut ctx = lab_context(|t| t);
    let c = Arc::get_mut(&mut ctx).expect("one owner");
    let r = c.resolution.as_mut().expect("a resolution");
    r.images.push(kubexm_manifests::resolve::ImageEntry {
        reference: "docker.io/library/busybox:1.36.1".into(),
        source: "docker.io/library/busybox:1.36.1".into(),
        group: "kubexm-probe".into(),
        platforms: BTreeSet::from(["linux/amd64".to_string()]),
        roles: BTreeSet::new(),
    });
    let log: Log = Arc::default();
    let applied = Arc::new(Notify::new());
    let kubelet = ctx.cluster.version.to_string();
    let runners = ["node1", "node2", "node3"]
        .into_iter()
        .map(|n| {
            let r: Arc<dyn Runner> = Arc::new(StandIn {
                name: n.to_string(),
                kubelet: kubelet.clone(),
                faults,
                log: log.clone(),
                applied: applied.clone(),
            });
            (n.to_string(), r)
        })
        .collect();
    Lab {
        ctx,
        facts: ClusterFacts {
            api_node: Some("node1".into()),
            etcd: Some(etcd_facts()),
            ..ClusterFacts::default()
        },
        runners,
        log,
        applied,
    }
}

impl Lab {
    async fn verify(&self, timeout: Duration, interrupt_on_apply: bool) -> verify::Report {
        let target = Target {
            ctx: &self.ctx,
            facts: &self.facts,
            runners: &self.runners,
        };
        let opts = Options {
            timeout,
            ..Options::default()
        };
        let asked = Arc::new(Mutex::new(0));
        verify::verify(&target, &opts, || {
            let applied = self.applied.clone();
            let asked = asked.clone();
            async move {
                let first = {
                    let mut n = asked.lock().expect("lock");
                    *n += 1;
                    *n == 1
                };
                if interrupt_on_apply && first {
                    applied.notified().await;
                } else {
                    std::future::pending::<()>().await;
                }
            }
        })
        .await
    }

    fn scripts(&self) -> Vec<(String, String, Option<String>)> {
        self.log.lock().expect("lock").clone()
    }
}

fn status(r: &verify::Report, id: CheckId) -> Status {
    r.checks
        .iter()
        .find(|c| c.name == id)
        .map(|c| c.status)
        .expect("check")
}

#[tokio::test]
async fn a_healthy_cluster_passes_with_bounded_commands_and_its_probes_deleted() {
    let lab = lab(Faults::default());
    let r = lab.verify(Duration::from_secs(60), false).await;
    let failed: Vec<_> = r
        .failed()
        .iter()
        .map(|c| (c.name, c.failures.clone()))
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(r.outcome, Outcome::Complete);
    assert_eq!(r.result, Status::Pass);
    assert_eq!(status(&r, CheckId::Metrics), Status::Skip);
    assert_eq!(r.checks.len(), CheckId::ALL.len());
    assert!(r.cleanup.created && r.cleanup.removed, "{:?}", r.cleanup);
    // Pulled from the private registry (the lab's registry on node1), not from upstream.
    let image = r.probe_image.clone().expect("probe image");
    assert!(
        image.ends_with("busybox:1.36.1") && !image.starts_with("docker.io"),
        "{image}"
    );

    let scripts = lab.scripts();
    assert!(
        !scripts.iter().any(|(_, s, _)| s.is_empty()),
        "an empty command"
    );
    // Every kubectl ran on the API node, each request bounded.
    let kubectl: Vec<&(String, String, Option<String>)> = scripts
        .iter()
        .filter(|(_, s, _)| s.contains("kubectl"))
        .collect();
    assert!(kubectl.len() >= 10, "{kubectl:?}");
    for (node, s, _) in &kubectl {
        assert_eq!(node, "node1", "{s}");
        assert!(s.contains(" --request-timeout=15s "), "{s}");
    }
    // What changes the cluster: the probes applied from stdin, their namespace deleted before
    // (a previous run's) and after. Nothing else.
    let verbs: Vec<&str> = kubectl
        .iter()
        .map(|(_, s, _)| {
            let rest = s.split(" --request-timeout=15s ").nth(1).expect("args");
            rest.split_whitespace().next().expect("verb")
        })
        .collect();
    for v in &verbs {
        assert!(
            ["get", "apply", "delete", "exec", "logs"].contains(v),
            "{v}"
        );
    }
    let changes: Vec<&str> = kubectl
        .iter()
        .map(|(_, s, _)| s.split(" --request-timeout=15s ").nth(1).expect("args"))
        .filter(|a| a.starts_with("apply") || a.starts_with("delete"))
        .collect();
    assert_eq!(
        changes,
        [
            "delete namespace kubexm-verify --ignore-not-found --wait=true --timeout=60s",
            "apply -f -",
            "delete namespace kubexm-verify --ignore-not-found --wait=true --timeout=60s",
        ]
    );
    let manifest = kubectl
        .iter()
        .find_map(|(_, s, stdin)| s.ends_with("apply -f -").then(|| stdin.clone()))
        .flatten()
        .expect("the manifest on stdin");
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&manifest).expect("the manifest is YAML");
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().expect("kind"),
                d["metadata"]["namespace"]
                    .as_str()
                    .or(d["metadata"]["name"].as_str())
                    .expect("namespace"),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("Namespace", "kubexm-verify"),
            ("DaemonSet", "kubexm-verify"),
            ("Service", "kubexm-verify")
        ]
    );
    let container = &docs[1]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"].as_str(), Some(image.as_str()));
    // The Service from every node over SSH; the control plane's health on every master.
    for n in ["node1", "node2", "node3"] {
        assert!(
            scripts.iter().any(|(node, s, _)| node == n
                && s == "curl -fsS --max-time 5 http://10.96.140.7:80/node"),
            "{n}"
        );
        assert!(scripts
            .iter()
            .any(|(node, s, _)| node == n && s.contains("https://127.0.0.1:10259/healthz")));
    }
    // Every probe asked both others, and DNS through NodeLocal DNS.
    let execs: Vec<&String> = kubectl
        .iter()
        .filter(|(_, s, _)| s.contains(" exec -n kubexm-verify "))
        .map(|(_, s, _)| s)
        .collect();
    assert_eq!(execs.len(), 3);
    // The Service this run asked for by name (`kubexm-verify-probe-XXXXXXXX`, new each run: no
    // DNS cache holds it) is the name every probe resolves.
    let service = kubectl
        .iter()
        .find_map(|(_, s, _)| {
            s.split_once(" get service -n kubexm-verify ")
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .map(str::to_owned)
        })
        .expect("the Service is asked for");
    let suffix = service
        .strip_prefix("kubexm-verify-probe-")
        .expect("the probe's name and a suffix");
    assert!(
        suffix.len() == 8 && suffix.bytes().all(|c| c.is_ascii_hexdigit()),
        "{service}"
    );
    for e in &execs {
        assert!(
            e.contains(&format!(
                "nslookup {service}.kubexm-verify.svc.cluster.local 169.254.25.10"
            )),
            "{e}"
        );
    }
    let text = r.text();
    assert!(text.contains("PASS  pod-network"), "{text}");
    assert!(
        text.contains("verified: 8 check(s) passed, 0 failed, 1 skipped"),
        "{text}"
    );
}

#[tokio::test]
async fn a_broken_pod_network_and_dns_are_named() {
    let lab = lab(Faults {
        pod_network_node3: true,
        dns: true,
        ..Faults::default()
    });
    let r = lab.verify(Duration::from_secs(60), false).await;
    assert_eq!(r.result, Status::Fail);
    let names: Vec<CheckId> = r.failed().iter().map(|c| c.name).collect();
    assert_eq!(names, [CheckId::PodNetwork, CheckId::Dns]);
    let net = &r.failed()[0].failures;
    assert_eq!(
        net,
        &[
            "node1 → node3 (10.244.2.5): no answer",
            "node2 → node3 (10.244.2.5): no answer"
        ]
    );
    assert_eq!(r.failed()[1].failures.len(), 3);
    assert!(r.cleanup.removed);
}

#[tokio::test]
async fn an_interrupt_stops_the_checks_and_still_deletes_the_probes() {
    let lab = lab(Faults {
        pods_slow: true,
        ..Faults::default()
    });
    let r = lab.verify(Duration::from_secs(60), true).await;
    assert_eq!(r.outcome, Outcome::Interrupted);
    assert_eq!(status(&r, CheckId::Nodes), Status::Pass);
    for id in [
        CheckId::PodNetwork,
        CheckId::Service,
        CheckId::Dns,
        CheckId::LogsExec,
    ] {
        let c = r.checks.iter().find(|c| c.name == id).expect("check");
        assert_eq!(c.failures, ["not run: interrupted"], "{id:?}");
    }
    assert!(r.cleanup.removed);
    let last = lab.scripts().pop().expect("commands");
    assert!(
        last.1.ends_with(
            " delete namespace kubexm-verify --ignore-not-found --wait=true --timeout=60s"
        ),
        "{}",
        last.1
    );
}

#[tokio::test]
async fn the_time_limit_stops_a_hung_wait_and_still_deletes_the_probes() {
    let lab = lab(Faults {
        pods_hang: true,
        ..Faults::default()
    });
    let r = lab.verify(Duration::from_secs(3), false).await;
    assert_eq!(r.outcome, Outcome::TimedOut);
    let c = r
        .checks
        .iter()
        .find(|c| c.name == CheckId::PodNetwork)
        .expect("check");
    assert_eq!(c.failures, ["not run: the time limit of 3 s ran out"]);
    assert!(r.cleanup.created && r.cleanup.removed);
    assert!(r.seconds < 10.0, "{}", r.seconds);
}

/// The lab cluster's masters also run keepalived + haproxy on port 6443 (`kubexm-kh`), so their
/// API servers bind their own address only and `127.0.0.1:6443` has no one behind it (seen on
/// real v1.37.2: "kube-apiserver does not answer on /readyz" on every master of a healthy
/// cluster): the control-plane check asks each API server where it binds. With the internal
/// load balancer it stays 127.0.0.1.
#[test]
fn the_api_server_is_asked_where_it_binds() {
    let ctx = lab_context(|t| t);
    let node1 = ctx.node("node1").expect("node1");
    let host = verify::apiserver_host(&ctx, "node1");
    assert_eq!(host, node1.internal_address);
    let script = verify::control_plane_script(&host);
    assert!(
        script.contains(&format!("https://{host}:6443/readyz"))
            && script.contains("https://127.0.0.1:10257/healthz"),
        "{script}"
    );
    let internal = lab_context(|t| {
        t.replace("    loadbalancer: [\"node[1:3]\"]\n", "").replace(
            "    mode: external\n    external:\n      type: kubexm-kh\n    vip: 10.88.10.100\n    interface: eth0\n",
            "    mode: internal\n    internal:\n      type: haproxy\n",
        )
    });
    assert_eq!(
        internal.cluster.file.spec.load_balancer.mode,
        kubexm_manifests::model::LbMode::Internal
    );
    assert_eq!(verify::apiserver_host(&internal, "node1"), "127.0.0.1");
}
