//! REAL Kubernetes v1.37.2 (Go modules), kubeadm path, day 1 and day 2: the proof of
//! `tests/lab/kubernetes/install-real kubeadm` (REAL v1.20.2) on the Kubernetes users install.
//! node1..node3 each master + worker + kubeadm's stacked etcd (the REAL etcd image), the external
//! load balancer of install-real's kubeadm lane (`kubexm-kh`: keepalived + haproxy on node1..node3
//! holding the lab's VIP), the REAL flannel and CoreDNS when built, the lab-web Deployment. Then, in
//! this order, each a timed section that fails with what it saw:
//!
//! 1. install + the cluster checks (nodes, versions, lab-web across the nodes with logs/exec, its
//!    Service from a pod and from every node, DNS, `verify-cluster -o json`, /readyz through the
//!    VIP, controller-manager and scheduler on every master, the kubelets' serving certificates);
//! 2. a re-run changes nothing (the journal);
//! 3. a node stopped mid-run, then `--resume`;
//! 4. the first master stopped: the API answers through the VIP;
//! 5. `certs check -o json`, `certs renew` (dry run, refusal, a failure on node2 then `--resume`),
//!    a kubelet's new serving CSR, then every certificate really expired and renewed;
//! 6. backup / restore;
//! 7. `apply` of a changed cluster.yaml (a refused CIDR change; a feature gate, maxPods, an API
//!    server SAN and flag, one master at a time);
//! 8. add-node of a worker (node4) and of a master (node5), delete-node of both;
//! 9. delete (every node as before), `restore --fresh` from a control host that kept nothing,
//!    delete again.
//!
//! Every install, apply and `restore --fresh` runs with `--no-verify` (as labkit's
//! `Kubexm::install`): `verify-cluster -o json` is run and judged by the scenario itself.
//!
//! Root, opt-in: `tests/lab/labkit real_day2` (`KEEP_LAB=1` keeps the lab; `REAL_DAY2_SKIP=certs,
//! apply,...` skips sections by name: resume, failover, certs, backup, apply, nodes, fresh).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kubexm_labkit::kube::{Deployment, Kubectl, List, Node, Pod};
use kubexm_labkit::real::{
    changed_steps, check_cluster, cluster_yaml_with, diff, dir_of, env_or, join, kubectl_for, tail,
    verify_cluster, wait_for, Built, ClusterOpts, Lb, Net, Parts, LAB_WEB, NODES, REPLICAS,
};
use kubexm_labkit::{check, yaml_docs, Kubexm, Lab, LabSpec, Output, Scenario, Tools};
use kubexm_testkit::{HttpMirror, Registry, RegistryOptions};
use serde::Deserialize;
use serde_json::Value;

const ALL: [&str; 5] = ["node1", "node2", "node3", "node4", "node5"];
const SAN: &str = "api.realtest.example";
const GATE: &str = "ContainerStopSignals";
/// Without a working NodeLocal DNS image (REAL or the lab's SUBSTITUTE; a fill-registry
/// STAND-IN never becomes available) the install and apply wait for the nodes only.
const READY: &str = "    readyWait:\n      workloads: false\n";

/// What section 7 applies under `spec.kubernetes` (install-real's apply, for v1.37).
fn changes() -> String {
    format!(
        "    maxPods: 120\n    apiserverCertExtraSans: [{SAN}]\n    apiserverArgs: {{audit-log-maxage: \"7\"}}\n    featureGates: {{{GATE}: true}}\n"
    )
}

/// `certs check -o json`.
#[derive(Debug, Clone, Deserialize)]
struct Inventory {
    certificates: Vec<Cert>,
    /// A list or a map (node → why), empty when every node answered.
    #[serde(default)]
    unreachable: Value,
    #[serde(default)]
    problems: Value,
}

#[derive(Debug, Clone, Deserialize)]
struct Cert {
    node: String,
    path: String,
    source: String,
    #[serde(default)]
    common_name: String,
    days_left: i64,
    not_after: Value,
    is_ca: bool,
    #[serde(default)]
    serial: String,
}

impl Inventory {
    fn on(&self, node: &str, path: &str) -> Vec<&Cert> {
        self.certificates
            .iter()
            .filter(|c| c.node == node && c.path == path)
            .collect()
    }
    fn serial(&self, node: &str, path: &str) -> String {
        self.on(node, path)
            .first()
            .map(|c| c.serial.clone())
            .unwrap_or_default()
    }
    fn brief(&self) -> String {
        self.certificates
            .iter()
            .map(|c| {
                format!(
                    "{} {} [{}] ca={} days={} serial={}",
                    c.node, c.path, c.source, c.is_ca, c.days_left, c.serial
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Null, `[]` or `{}`.
fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// `not_after` ordered (an RFC 3339 string or seconds).
fn later(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => a.as_str().unwrap_or("").cmp(b.as_str().unwrap_or("")),
    }
}

/// What a certificate is, as `installer/src/certs/renew.rs` sorts them (kubeadm's stacked etcd).
fn kind(node: &str, path: &str) -> &'static str {
    if node == "control-host" {
        return if path.contains("/etcd/") {
            "etcd"
        } else if path.contains("/kubernetes/") || path.contains("/kubeadm/") {
            "kubernetes"
        } else if path.contains("/registry/") {
            "registry"
        } else {
            "other"
        };
    }
    if path.starts_with("/etc/ssl/etcd/ssl/")
        || path.starts_with("/etc/kubernetes/pki/etcd/")
        || path == "/etc/kubernetes/pki/apiserver-etcd-client.crt"
    {
        "etcd"
    } else if path.starts_with("/etc/kubernetes/")
        || path == "/var/lib/kubelet/pki/kubelet-client-current.pem"
    {
        "kubernetes"
    } else if path == "/var/lib/kubelet/pki/kubelet-server-current.pem" {
        "kubelet-serving"
    } else if path.starts_with("/etc/kubexm-registry/tls/") {
        "registry"
    } else {
        "other"
    }
}

/// `kubectl get csr -o json`.
#[derive(Debug, Deserialize)]
struct Csr {
    metadata: kubexm_labkit::kube::Meta,
    spec: CsrSpec,
    #[serde(default)]
    status: CsrStatus,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CsrSpec {
    signer_name: String,
    #[serde(default)]
    username: String,
}

#[derive(Debug, Default, Deserialize)]
struct CsrStatus {
    #[serde(default)]
    conditions: Vec<CsrCondition>,
}

#[derive(Debug, Deserialize)]
struct CsrCondition {
    #[serde(rename = "type")]
    kind: String,
}

impl Csr {
    fn serving_of(&self, node: &str) -> bool {
        self.spec.signer_name == "kubernetes.io/kubelet-serving"
            && self.spec.username == format!("system:node:{node}")
    }
    fn approved(&self) -> bool {
        self.status.conditions.iter().any(|c| c.kind == "Approved")
    }
    fn pending(&self) -> bool {
        self.status.conditions.is_empty()
    }
}

/// Everything a section needs.
struct Ctx<'a> {
    scenario: &'a Scenario,
    lab: &'a Lab,
    tools: &'a Tools,
    kx: Kubexm<'a>,
    /// kubectl through every master by address.
    kc: Kubectl,
    /// kubectl through the control-plane endpoint (the VIP).
    ep: Kubectl,
    w: &'a Path,
    cluster: PathBuf,
    coredns_real: bool,
    dns_real: bool,
    probe_real: bool,
    web_image: String,
}

impl Ctx<'_> {
    /// `kubexm-install ARGS` must succeed (timed under `key` when given).
    #[track_caller]
    fn ok(&self, what: &str, args: &[&str]) -> Output {
        let out = self.kx.run(args);
        self.kx
            .ok(out, &format!("{what}: kubexm-install {}", args.join(" ")))
    }

    /// The latest run changed nothing (or none was started).
    #[track_caller]
    fn unchanged(&self, what: &str, runs_before: usize, out: &Output) {
        if self.kx.runs().len() == runs_before {
            self.scenario.note(&format!("{what}: no run started"));
            return;
        }
        let s = self.kx.last_summary();
        check(
            s.succeeded && s.changed == 0,
            &format!("{what} changes nothing (journal: no step `changed`)"),
            &format!("{s:?}\n{}{out}", changed_steps(&self.kx.last_events())),
        );
        self.scenario
            .note(&format!("{what}: succeeded, 0 steps changed"));
    }

    fn ready(&self, kc: &Kubectl) -> bool {
        kc.run(&["get", "--raw=/readyz"]).stdout_trimmed() == "ok"
    }

    fn kubelet_back(&self, node: &str) -> bool {
        self.kc
            .run(&[
                "get",
                "--raw",
                &format!("/api/v1/nodes/{node}/proxy/healthz"),
            ])
            .stdout_trimmed()
            == "ok"
    }

    /// Waits until exactly `names` are the Nodes and every one is Ready.
    fn wait_nodes(&self, names: &[&str], limit: u64) -> List<Node> {
        wait_for(
            Duration::from_secs(limit),
            &format!("the Nodes are {names:?}, all Ready"),
            || {
                let l: List<Node> = self
                    .kc
                    .try_get(&["get", "nodes"])
                    .map_err(|o| o.to_string())?;
                let seen: BTreeMap<&str, bool> = l
                    .items
                    .iter()
                    .map(|n| (n.metadata.name.as_str(), n.ready()))
                    .collect();
                if seen.keys().copied().collect::<BTreeSet<_>>() == names.iter().copied().collect()
                    && seen.values().all(|r| *r)
                {
                    Ok(l)
                } else {
                    Err(format!("{seen:?}"))
                }
            },
        )
    }

    fn kubelet_back_all(&self, nodes: &[&str]) {
        for n in nodes {
            wait_for(
                Duration::from_secs(300),
                &format!("{n}'s kubelet answering the API server"),
                || {
                    if self.kubelet_back(n) {
                        Ok(())
                    } else {
                        Err("no".into())
                    }
                },
            );
        }
    }

    fn certs(&self) -> (Output, Inventory) {
        let out = self.kx.run(&["certs", "check", "-o", "json"]);
        let inv = out.json();
        (out, inv)
    }

    /// Every etcd member healthy, from `status -o json`.
    fn etcd_healthy(&self, what: &str) {
        wait_for(
            Duration::from_secs(120),
            &format!("{what}: status -o json shows 3 etcd members, all healthy"),
            || {
                let (out, st) = self.kx.status_json();
                match &st.etcd {
                    Some(e) if e.members.len() == 3 && e.members.iter().all(|m| m.healthy) => {
                        Ok(())
                    }
                    _ => Err(format!("{:?}\n{out}", st.etcd)),
                }
            },
        );
    }

    fn check_cluster(&self) -> Vec<Pod> {
        let pods = check_cluster(
            self.scenario,
            self.lab,
            &self.kc,
            "v1.37.2",
            self.coredns_real,
        );
        verify_cluster(self.scenario, &self.kx, self.dns_real, self.probe_real);
        pods
    }

    fn cmdline(&self, node: &str, process: &str) -> Vec<String> {
        let comm: String = process.chars().take(15).collect();
        self.lab
            .ssh(
                node,
                &format!("tr '\\0' '\\n' </proc/$(pgrep -xo {comm})/cmdline"),
            )
            .stdout
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.w.join(name);
        fs_err::write(&p, text).expect("write a file in the work dir");
        p
    }
}

fn skip(section: &str) -> bool {
    env_or("REAL_DAY2_SKIP", "")
        .split(',')
        .any(|s| s.trim() == section)
}

#[test]
#[ignore = "lab: root + nspawn + REAL Kubernetes v1.37.2 from Go modules; tests/lab/labkit real_day2"]
fn real_day2() {
    let v = "v1.37.2";
    let scenario = Scenario::start(&format!("real day 2 ({v}, kubeadm, external LB)"));
    scenario.step("build kubexm-build and kubexm-install");
    let tools = Tools::build();
    let work = tempfile::Builder::new()
        .prefix("kubexm-real-day2.")
        .tempdir_in("/var/tmp")
        .expect("work dir");
    let w = work.path();

    scenario.step(&format!(
        "Kubernetes {v} from Go modules, the gomod mirror, images"
    ));
    let kdir = kubexm_labkit::lab_dir().join("kubernetes");
    let (built, mirror) = scenario.timed("0 build (cached)", || {
        let k8s = dir_of(
            Command::new(kdir.join("build-kubernetes-gomod")).arg(v),
            "build-kubernetes-gomod",
        );
        let images = dir_of(
            Command::new("bash")
                .arg(kdir.join("build-images"))
                .args(["--k8s", v]),
            "build-images --k8s",
        );
        let mirror = dir_of(
            Command::new(kubexm_labkit::lab_dir().join("mirror/build-mirror"))
                .env("KUBEXM_LAB_GOMOD", "1"),
            "KUBEXM_LAB_GOMOD=1 build-mirror",
        );
        (
            Built {
                version: v.to_string(),
                k8s,
                images,
            },
            mirror,
        )
    });
    let flannel_real = built
        .built_images()
        .get("flannel-io/flannel:v0.27.4")
        .is_some_and(|k| k == "real");
    let gomod_catalog = mirror.join("catalog-gomod.yaml");
    let net = if flannel_real && gomod_catalog.is_file() {
        Net::Flannel
    } else {
        Net::LabCni
    };
    let catalog = if net == Net::Flannel {
        gomod_catalog
    } else {
        kubexm_labkit::lab_dir().join("mirror/catalog-lab.yaml")
    };
    check(
        mirror
            .join(format!(
                "files/dl.k8s.io/release/{v}/bin/linux/amd64/kubeadm"
            ))
            .is_file(),
        &format!("the gomod mirror serves kubeadm {v}"),
        &mirror.display(),
    );

    scenario.step("lab up (5 nodes: node4 and node5 join on day 2)");
    let lab = Lab::up(&LabSpec::new("rday2", 5));
    let before: BTreeMap<&str, String> = ALL.iter().map(|n| (*n, lab.node_state(n))).collect();
    let addon = w.join("lab-web.yaml");
    fs_err::write(&addon, LAB_WEB).expect("write lab-web.yaml");
    let opts = {
        let mut o = ClusterOpts::new(v, net, &addon);
        o.lb = Lb::External;
        // The nodes' image filesystem is this host's disk, which other builds fill: image GC
        // would remove pause and a re-run pull it again (install-real-gomod).
        o.kubelet_extra = "      image-gc-high-threshold: \"100\"\n".to_string();
        let nodecache_works = built.built_images().iter().any(|(r, k)| {
            r.starts_with("dns/k8s-dns-node-cache:") && (k == "real" || k == "substitute")
        });
        if !nodecache_works {
            o.kubernetes_extra = READY.to_string();
        }
        o
    };
    let cluster = w.join("cluster.yaml");
    fs_err::write(&cluster, cluster_yaml_with(&lab, &opts)).expect("write cluster.yaml");

    scenario.step("source registry + kubexm-build bundle");
    let bundle = scenario.timed("0 bundle", || {
        make_bundle(
            &scenario,
            &tools,
            w,
            &mirror.join("files"),
            &catalog,
            &built,
            &cluster,
        )
    });
    let parts = Parts::of(&bundle, &catalog, &built.built_images());
    scenario.note(&format!("REAL:     {}", join(&parts.real)));
    scenario.note(&format!("STAND-IN: {}", join(&parts.standin)));
    for item in [
        format!("kubeadm {v}"),
        format!("kubelet {v}"),
        format!("image registry.k8s.io/kube-apiserver:{v}"),
    ] {
        check(
            parts.has_real(&item),
            &format!("the bundle holds the REAL {item}"),
            &join(&parts.real),
        );
    }
    let coredns_real = parts.real_image("coredns/coredns:");
    let dns_real = coredns_real && parts.working_image("dns/k8s-dns-node-cache:");
    let probe_real = parts.working_image("library/busybox:");

    // 1. Install + checks.
    let kxw = w.join("kubexm");
    let kx = Kubexm::new(&lab, &tools, &kxw, &bundle, &cluster);
    scenario.step(&format!(
        "1 kubexm-install ({v}, kubeadm, external LB kubexm-kh, stacked etcd)"
    ));
    let t = Instant::now();
    let out = kx.install(&[]);
    let out = kx.ok(out, "the install succeeds");
    scenario.record("1 install", t.elapsed());
    eprint!("{}", tail(&out.stdout, 4));
    let admin = kx.pki().join("admin.conf");
    let kc = kubectl_for(&lab, &admin, built.kubectl());
    let ep_host = kc.tls_server_name.clone().unwrap_or_default();
    let ep = Kubectl {
        servers: vec![format!("https://{}:6443", lab.vip())],
        ..kc.clone()
    };
    let c = Ctx {
        scenario: &scenario,
        lab: &lab,
        tools: &tools,
        kx,
        kc,
        ep,
        w,
        cluster: cluster.clone(),
        coredns_real,
        dns_real,
        probe_real,
        web_image: format!("{}:5000/kubexm/lab-web:v1", lab.ip("node1")),
    };
    scenario.step("1 checks");
    scenario.timed("1 checks", || install_checks(&c, &ep_host));

    scenario.step("2 re-run: nothing changes");
    scenario.timed("2 re-run", || {
        let runs = c.kx.runs().len();
        let out = c.ok(
            "re-run",
            &["--bundle", &s(&bundle), "-f", &s(&cluster), "--no-verify"],
        );
        c.unchanged("the re-run", runs, &out);
    });

    if !skip("resume") {
        scenario.step("3 a node stopped mid-run, then --resume");
        scenario.timed("3 resume", || resume(&c, &bundle));
    }
    if !skip("failover") {
        scenario.step("4 the first master stopped: the API answers through the VIP");
        scenario.timed("4 failover", || failover(&c));
    }
    if !skip("certs") {
        scenario.step("5 certs check / renew / expired certificates");
        scenario.timed("5 certs", || certs(&c));
    }
    let backup = if skip("backup") {
        None
    } else {
        scenario.step("6 backup, then restore");
        Some(scenario.timed("6 backup+restore", || backup_restore(&c)))
    };
    if !skip("apply") {
        scenario.step("7 apply of a changed cluster.yaml");
        scenario.timed("7 apply", || apply(&c, &opts));
    }
    if !skip("nodes") {
        scenario.step("8 add-node node4 (worker), node5 (master); delete-node both");
        scenario.timed("8 add/delete nodes", || day2_nodes(&c, &opts, &before));
    }
    if backup.is_some() {
        // The cluster's identity, compared after `restore --fresh`: its CA and a token of the
        // lab namespace's default service account (bound, signed with the backed-up sa.key).
        let _ = fs_err::write(
            w.join("ca-before-delete.crt"),
            lab.read("node1", "/etc/kubernetes/pki/ca.crt"),
        );
        let tok =
            c.kc.run(&["-n", "lab", "create", "token", "default", "--duration=48h"])
                .ok("a service-account token");
        check(
            token_ok(&c, tok.stdout_trimmed()),
            "the API accepts the new token",
            &tok,
        );
        let _ = fs_err::write(w.join("token-before-delete"), tok.stdout_trimmed());
    }
    scenario.step("9 delete --yes: every node as before");
    scenario.timed("9 delete", || delete_as_before(&c, &before, net));
    if let Some(b) = backup.filter(|_| !skip("fresh")) {
        scenario.step("9 restore --fresh from a control host that kept nothing, delete again");
        scenario.timed("9 restore --fresh", || fresh(&c, &b, &before, net));
    }
    let _ = c.tools;
    scenario.note(&format!("REAL:     {}", join(&parts.real)));
    scenario.note(&format!("STAND-IN: {}", join(&parts.standin)));
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// resolve, fill-registry and `kubexm-build bundle` of `cluster` from the mirror's `files`.
fn make_bundle(
    scenario: &Scenario,
    tools: &Tools,
    w: &Path,
    files: &Path,
    catalog: &Path,
    built: &Built,
    cluster: &Path,
) -> PathBuf {
    let http = HttpMirror::start(files);
    let registry = Registry::start(RegistryOptions::default());
    let zone = fs_err::read_to_string(kubexm_labkit::lab_dir().join("mirror/zone-lab.yaml"))
        .expect("zone-lab.yaml")
        .replace("127.0.0.1:28080", &http.addr().to_string())
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
    let bundle = w.join("real.tar.zst");
    let t = Instant::now();
    let _ = Output::run(
        Command::new(tools.build_bin())
            .arg("bundle")
            .args(&args)
            .arg("-o")
            .arg(&bundle)
            .env("KUBEXM_CACHE_DIR", w.join("cache")),
    )
    .ok("kubexm-build bundle");
    scenario.note(&format!(
        "bundle: {} MB in {} s",
        fs_err::metadata(&bundle)
            .map(|m| m.len() >> 20)
            .unwrap_or(0),
        t.elapsed().as_secs()
    ));
    drop((http, registry));
    let _ = fs_err::remove_dir_all(w.join("cache"));
    bundle
}

/// Section 1: real.rs's checks, plus install-real's: the endpoint's name is the VIP on the
/// nodes and /readyz answers through it, controller-manager and scheduler healthy on every
/// master, lab-web's pods run the private registry's image, the kubelets serve certificates of
/// the cluster CA approved by KubeXM.
fn install_checks(c: &Ctx, ep_host: &str) {
    let lab = c.lab;
    let hosts = lab.ssh("node1", &format!("getent hosts {ep_host}"));
    check(
        hosts.stdout.split_whitespace().next() == Some(lab.vip()),
        &format!(
            "admin.conf's endpoint {ep_host} is the VIP {} on the nodes",
            lab.vip()
        ),
        &hosts,
    );
    wait_for(
        Duration::from_secs(120),
        "/readyz ok through the VIP",
        || {
            if c.ready(&c.ep) {
                Ok(())
            } else {
                Err(c.ep.run(&["get", "--raw=/readyz"]).to_string())
            }
        },
    );
    let pods = c.check_cluster();
    for n in NODES {
        let out = lab.ssh(
            n,
            "curl -fsSk https://127.0.0.1:10257/healthz; echo; curl -fsSk https://127.0.0.1:10259/healthz",
        );
        check(
            out.stdout.lines().collect::<Vec<_>>() == ["ok", "ok"],
            &format!("{n}: controller-manager (10257) and scheduler (10259) /healthz ok"),
            &out,
        );
    }
    for p in &pods {
        check(
            p.image_of("web") == Some(c.web_image.as_str()),
            &format!("{} runs lab-web from the private registry", p.metadata.name),
            &format!("{:?}", p.spec.containers),
        );
    }
    let csrs: List<Csr> = c.kc.get(&["get", "csr"]);
    for n in NODES {
        check(
            csrs.items.iter().any(|r| r.serving_of(n) && r.approved()),
            &format!("{n}: an approved kubernetes.io/kubelet-serving CSR"),
            &format!(
                "{:?}",
                csrs.items
                    .iter()
                    .map(|r| (&r.metadata.name, &r.spec.username, r.approved()))
                    .collect::<Vec<_>>()
            ),
        );
        serving_of_cluster_ca(c, n);
    }
    c.scenario.note("endpoint = the VIP, /readyz ok through it; controller-manager and scheduler healthy on node1-3; lab-web from the private registry; every kubelet serves a certificate of the cluster CA (its CSR approved by KubeXM)");
}

/// `node`'s kubelet serving certificate verifies against the cluster CA and names the node.
fn serving_of_cluster_ca(c: &Ctx, n: &str) {
    let out = wait_for(
        Duration::from_secs(60),
        &format!("{n}'s kubelet serving certificate, of the cluster CA, naming {n}"),
        || {
            let out = c.lab.ssh(
                n,
                "f=/var/lib/kubelet/pki/kubelet-server-current.pem; openssl verify -CAfile /etc/kubernetes/pki/ca.crt $f >/dev/null && openssl x509 -in $f -noout -ext subjectAltName | tail -n +2",
            );
            let names: Vec<&str> = out.stdout.split(',').map(str::trim).collect();
            if out.success() && names.contains(&format!("DNS:{n}").as_str()) {
                Ok(out)
            } else {
                Err(out.to_string())
            }
        },
    );
    let _ = out;
}

/// Section 3 (install-real "a node stopped mid-run, then --resume").
fn resume(c: &Ctx, bundle: &Path) {
    let _ = c.lab.ssh("node2", "rm -f /etc/sysctl.d/99-kubexm.conf");
    let runs = c.kx.runs().len();
    let running = c.kx.spawn_install(&[]);
    let seen = c.kx.wait_for_event(runs, Duration::from_secs(120), |e| {
        e.event == "TaskSucceeded" && e.module.as_deref() == Some("preflight")
    });
    c.lab.stop_node("node2");
    let out = running.finish();
    check(
        seen,
        "the install passed preflight before node2 was stopped",
        &out,
    );
    check(!out.success(), "the install fails with node2 stopped", &out);
    let failed: Vec<String> =
        c.kx.last_events()
            .iter()
            .filter(|e| e.event.ends_with("Failed"))
            .map(|e| format!("{} {:?} {:?} {}", e.event, e.task, e.node, e.message))
            .collect();
    check(
        c.kx.last_events()
            .iter()
            .any(|e| e.event.ends_with("Failed") && e.node.as_deref() == Some("node2")),
        "the journal shows a step or task failed on node2",
        &format!("{failed:?}\n{}", c.kx.journal_tail(15)),
    );
    c.scenario.note(&format!("failed: {}", failed.join("; ")));
    c.lab.start_node("node2");
    let t = Instant::now();
    let out = c.ok(
        "--resume",
        &[
            "--bundle",
            &s(bundle),
            "-f",
            &s(&c.cluster),
            "--no-verify",
            "--resume",
        ],
    );
    let sum = c.kx.last_summary();
    check(
        sum.succeeded && sum.resumed >= 3,
        "--resume skipped the completed tasks (3 preflight at least) and succeeded",
        &format!("{sum:?}\n{}", tail(&out.stdout, 3)),
    );
    check(
        c.lab.exists("node2", "/etc/sysctl.d/99-kubexm.conf"),
        "node2 finished by --resume (its sysctl file back)",
        &"",
    );
    c.kubelet_back_all(&["node2"]);
    let _ = c.wait_nodes(&NODES, 300);
    c.scenario.note(&format!(
        "node2 stopped after preflight: the run failed on node2; --resume ({} s, {} tasks resumed); 3 Ready",
        t.elapsed().as_secs(),
        sum.resumed
    ));
}

/// Section 4 (install-real "the first master stopped").
fn failover(c: &Ctx) {
    c.lab.stop_node("node1");
    let t = Instant::now();
    wait_for(
        Duration::from_secs(90),
        "/readyz through the VIP with node1 stopped",
        || {
            if c.ready(&c.ep) {
                Ok(())
            } else {
                Err(c.ep.run(&["get", "--raw=/readyz"]).to_string())
            }
        },
    );
    let secs = t.elapsed().as_secs();
    let d: Deployment = c.ep.get(&["-n", "lab", "get", "deployment", "lab-web"]);
    check(
        d.spec.replicas == Some(REPLICAS),
        "the API serves lab-web's Deployment through the VIP with node1 stopped",
        &format!("{:?}", d.spec.replicas),
    );
    let holders = c.lab.vip_holders(&["node2", "node3"]);
    check(
        holders.len() == 1,
        "node2 or node3 holds the VIP with node1 stopped",
        &format!("{holders:?}"),
    );
    c.scenario.note(&format!(
        "node1 stopped: the VIP on {}, /readyz and reads through it after {secs} s",
        holders.join(",")
    ));
    c.lab.start_node("node1");
    c.kubelet_back_all(&["node1"]);
    let _ = c.wait_nodes(&NODES, 300);
}

/// Section 5 (install-real 5b without the CA rotations).
fn certs(c: &Ctx) {
    let lab = c.lab;
    let (out, inv) = c.certs();
    let ev = format!("{}\n{}", inv.brief(), out.stderr);
    check(
        empty(&inv.unreachable) && empty(&inv.problems),
        "certs check: nothing unreachable, no problem",
        &format!("{:?} {:?}", inv.unreachable, inv.problems),
    );
    for n in NODES {
        let api = inv.on(n, "/etc/kubernetes/pki/apiserver.crt");
        check(
            api.len() == 1 && api.iter().all(|c| c.days_left > 300 && c.days_left <= 366),
            &format!("{n}: apiserver.crt listed once, one year"),
            &ev,
        );
        check(
            inv.on(n, "/etc/kubernetes/pki/ca.crt")
                .iter()
                .any(|c| c.is_ca && c.days_left > 3000),
            &format!("{n}: the cluster CA (10 years)"),
            &ev,
        );
        check(
            inv.certificates
                .iter()
                .any(|c| c.node == n && c.source == "kubeconfig-client"),
            &format!("{n}: a kubeconfig's client certificate"),
            &ev,
        );
        check(
            inv.certificates
                .iter()
                .any(|c| c.node == n && c.path.starts_with("/etc/kubernetes/pki/etcd/")),
            &format!("{n}: the stacked etcd's certificates"),
            &ev,
        );
        check(
            inv.certificates
                .iter()
                .any(|c| c.node == n && c.path.contains("kubelet")),
            &format!("{n}: the kubelet's certificates"),
            &ev,
        );
    }
    let mut sorted = inv.certificates.clone();
    sorted.sort_by(|a, b| later(&a.not_after, &b.not_after));
    check(
        inv.certificates.iter().any(|c| c.node == "control-host")
            && inv.certificates.iter().all(|c| c.days_left >= 0)
            && sorted
                .iter()
                .zip(&inv.certificates)
                .all(|(a, b)| a.not_after == b.not_after)
            && !out.stdout.contains("PRIVATE KEY"),
        "certs check: the control host's copies too, none expired, soonest first, no key",
        &ev,
    );
    c.scenario.note(&format!(
        "certs check: {} certificates; soonest {} on {} ({} days)",
        inv.certificates.len(),
        inv.certificates.first().map_or("-", |c| c.path.as_str()),
        inv.certificates.first().map_or("-", |c| c.node.as_str()),
        inv.certificates.first().map_or(0, |c| c.days_left)
    ));
    let out = c.kx.run(&[
        "certs",
        "check",
        "--warn-days",
        "400",
        "--fail-under-days",
        "400",
    ]);
    check(
        out.code == Some(7),
        "certs check --fail-under-days 400 exits 7 (the API server certificates live one year)",
        &out,
    );

    // Renew: dry run, refusal, a failure on node2 then --resume.
    let api = "/etc/kubernetes/pki/apiserver.crt";
    let serial = |n: &str| c.certs().1.serial(n, api);
    let s2 = serial("node2");
    let runs = c.kx.runs().len();
    let dry = c.ok(
        "renew --dry-run",
        &["certs", "renew", "--under-days", "400", "--dry-run"],
    );
    check(
        serial("node2") == s2 && c.kx.runs().len() == runs,
        "certs renew --dry-run changes nothing (node2's apiserver.crt, no run)",
        &dry,
    );
    let out = c.kx.run(&["certs", "renew", "--under-days", "400"]);
    check(
        out.code == Some(2),
        "certs renew without --yes exits 2",
        &out,
    );
    let s1 = serial("node1");
    let _ = lab.ssh(
        "node2",
        "mkdir -p /etc/kubernetes/kubexm && rm -rf /etc/kubernetes/kubexm/renewed && touch /etc/kubernetes/kubexm/renewed",
    );
    let t = Instant::now();
    let out =
        c.kx.run(&["certs", "renew", "--under-days", "400", "--yes"]);
    check(
        !out.success(),
        "certs renew fails when node2 cannot record its progress",
        &out,
    );
    check(
        c.kx.last_events()
            .iter()
            .any(|e| e.event.ends_with("Failed") && e.node.as_deref() == Some("node2")),
        "the failed renewal's journal names node2",
        &c.kx.journal_tail(15),
    );
    let s1_mid = serial("node1");
    check(
        s1_mid != s1,
        "node1 was renewed before node2 failed",
        &format!("{s1} -> {s1_mid}"),
    );
    let _ = lab.ssh("node2", "rm -f /etc/kubernetes/kubexm/renewed");
    let out = c.ok(
        "renew --resume",
        &["certs", "renew", "--under-days", "400", "--yes", "--resume"],
    );
    let renew_s = t.elapsed().as_secs();
    let sum = c.kx.last_summary();
    let (_, after) = c.certs();
    check(
        sum.resumed >= 1 && after.serial("node1", api) == s1_mid,
        "--resume skipped node1 (renewed by the failed run) and resumed tasks",
        &format!("{sum:?}\n{}", tail(&out.stdout, 5)),
    );
    let now: BTreeMap<(String, String, String, String), &Cert> = after
        .certificates
        .iter()
        .map(|x| {
            (
                (
                    x.node.clone(),
                    x.path.clone(),
                    x.source.clone(),
                    x.common_name.clone(),
                ),
                x,
            )
        })
        .collect();
    let mut renewed = 0;
    let mut kinds = BTreeSet::new();
    let mut bad = Vec::new();
    let mut nodes = BTreeSet::new();
    for b in &inv.certificates {
        let k = (
            b.node.clone(),
            b.path.clone(),
            b.source.clone(),
            b.common_name.clone(),
        );
        if b.is_ca || b.source == "kubeconfig-ca" {
            if now.get(&k).map(|x| &x.serial) != Some(&b.serial) {
                bad.push(format!("a CA changed: {k:?}"));
            }
            continue;
        }
        let kd = kind(&b.node, &b.path);
        if kd == "other" || b.days_left >= 400 {
            continue;
        }
        nodes.insert(b.node.clone());
        match now.get(&k) {
            None if b.path == "/etc/kubernetes/kubelet.conf" => {}
            None => bad.push(format!("gone after the renewal: {k:?}")),
            Some(x) => {
                if later(&x.not_after, &b.not_after).is_gt() && x.serial != b.serial {
                    renewed += 1;
                    kinds.insert(kd);
                } else {
                    bad.push(format!(
                        "not renewed: {k:?} {:?} -> {:?}",
                        b.not_after, x.not_after
                    ));
                }
            }
        }
    }
    let want: BTreeSet<&str> = ["etcd", "kubernetes", "registry", "kubelet-serving"].into();
    check(
        bad.is_empty()
            && renewed >= 20
            && ["node1", "node2", "node3", "control-host"]
                .iter()
                .all(|n| nodes.contains(*n))
            && want.is_subset(&kinds),
        "certs renew: every leaf due expires later (etcd, kubernetes, registry, kubelet-serving on node1-3 and the control host), no CA changed",
        &format!("renewed {renewed}, kinds {kinds:?}, nodes {nodes:?}\n{}", bad.join("\n")),
    );
    c.scenario.note(&format!(
        "renewed {renewed} leaves ({kinds:?}) in {renew_s} s, a failure on node2 resumed ({} tasks); no CA changed",
        sum.resumed
    ));
    let _ = c.check_cluster();
    let runs = c.kx.runs().len();
    let (_, inv2) = c.certs();
    let out = c.ok("a second renew", &["certs", "renew", "--yes"]);
    let (_, inv3) = c.certs();
    let serials = |i: &Inventory| -> BTreeSet<String> {
        i.certificates.iter().map(|c| c.serial.clone()).collect()
    };
    check(
        serials(&inv2) == serials(&inv3),
        "a second certs renew (under 30 days) renews nothing",
        &out,
    );
    c.unchanged("the second certs renew", runs, &out);

    // A kubelet's new serving CSR, approved by `certs renew` with nothing due.
    let old = lab.ssh(
        "node3",
        "openssl x509 -in /var/lib/kubelet/pki/kubelet-server-current.pem -noout -serial",
    );
    let _ = lab
        .ssh(
            "node3",
            "rm -f /var/lib/kubelet/pki/kubelet-server-*.pem && systemctl restart kubelet",
        )
        .ok("node3: the serving certificate removed, the kubelet restarted");
    wait_for(
        Duration::from_secs(120),
        "node3's kubelet asks for a new serving certificate (a pending CSR)",
        || {
            let l: List<Csr> = c.kc.try_get(&["get", "csr"]).map_err(|o| o.to_string())?;
            if l.items.iter().any(|r| r.serving_of("node3") && r.pending()) {
                Ok(())
            } else {
                Err(format!(
                    "{:?}",
                    l.items
                        .iter()
                        .map(|r| (&r.spec.username, r.approved()))
                        .collect::<Vec<_>>()
                ))
            }
        },
    );
    let (_, before_csr) = c.certs();
    let out = c.ok("renew with a pending CSR", &["certs", "renew", "--yes"]);
    let l: List<Csr> = c.kc.get(&["get", "csr"]);
    check(
        !l.items.iter().any(|r| r.serving_of("node3") && r.pending()),
        "certs renew approved node3's pending serving CSR",
        &out,
    );
    let (_, after_csr) = c.certs();
    let leaves = |i: &Inventory| -> BTreeSet<String> {
        i.certificates
            .iter()
            .filter(|c| !c.path.contains("kubelet-server"))
            .map(|c| c.serial.clone())
            .collect()
    };
    check(
        leaves(&before_csr) == leaves(&after_csr),
        "certs renew with a pending CSR renewed no certificate",
        &out,
    );
    wait_for(
        Duration::from_secs(60),
        "node3's kubelet serves a new certificate",
        || {
            let now = lab.ssh(
                "node3",
                "openssl x509 -in /var/lib/kubelet/pki/kubelet-server-current.pem -noout -serial",
            );
            if now.success() && now.stdout != old.stdout {
                Ok(())
            } else {
                Err(now.to_string())
            }
        },
    );
    serving_of_cluster_ca(c, "node3");
    c.kubelet_back_all(&["node3"]);
    c.scenario.note("node3's new serving CSR approved by certs renew (nothing else renewed); it serves the new certificate, of the cluster CA");

    expired(c);
}

/// install-real "certs renew after real expiry": every Kubernetes and etcd leaf on the nodes
/// re-signed valid until yesterday (tests/lab/kubernetes/expire-certs), the kubelets restarted
/// on them, the API refused; `certs renew` brings the cluster back.
fn expired(c: &Ctx) {
    let lab = c.lab;
    let cadir = c.w.join("expire-ca");
    fs_err::create_dir_all(&cadir).expect("expire-ca");
    for (remote, local) in [
        ("/etc/kubernetes/pki/ca", "ca"),
        ("/etc/kubernetes/pki/front-proxy-ca", "front-proxy-ca"),
        ("/etc/kubernetes/pki/etcd/ca", "etcd-ca"),
    ] {
        for x in ["crt", "key"] {
            let text = lab.read("node1", &format!("{remote}.{x}"));
            check(
                text.contains("-----BEGIN"),
                &format!("node1: {remote}.{x} read"),
                &"",
            );
            fs_err::write(cadir.join(format!("{local}.{x}")), text).expect("CA");
        }
    }
    let expire_certs = kubexm_labkit::lab_dir().join("kubernetes/expire-certs");
    for n in NODES {
        let d = c.w.join(format!("expire-{n}"));
        fs_err::create_dir_all(&d).expect("expire dir");
        let list = lab
            .ssh(
                n,
                "cd / && find etc/kubernetes -maxdepth 3 -type f \\( -name '*.crt' -o -name '*.conf' \\); readlink -f var/lib/kubelet/pki/kubelet-client-current.pem | sed 's|^/||'",
            )
            .ok("the node's certificates listed");
        let files: Vec<&str> = list.stdout.lines().filter(|l| !l.is_empty()).collect();
        let tarb64 = lab
            .ssh(
                n,
                &format!("cd / && tar -cf - {} | base64 -w0", files.join(" ")),
            )
            .ok("the node's certificates fetched");
        let tarf = c.w.join(format!("expire-{n}.tar"));
        let mut dec = Command::new("sh");
        dec.arg("-c").arg(format!(
            "printf %s \"$B\" | base64 -d > '{}' && tar -C '{}' -xf '{}'",
            tarf.display(),
            d.display(),
            tarf.display()
        ));
        dec.env("B", tarb64.stdout.trim());
        let _ = Output::run(&mut dec).ok("unpack the node's certificates");
        let out = Output::run(
            Command::new(&expire_certs)
                .arg(&cadir)
                .args(&files)
                .current_dir(&d),
        )
        .ok("expire-certs");
        let count: usize = out.stdout_trimmed().parse().unwrap_or(0);
        check(
            count >= 10,
            &format!("{n}: expire-certs expired its leaves"),
            &out,
        );
        let _ = Output::run(
            Command::new("tar")
                .arg("-C")
                .arg(&d)
                .arg("-cf")
                .arg(&tarf)
                .args(&files),
        )
        .ok("pack the expired certificates");
        lab.copy(&tarf, n, "/root/kubexm-lab-expired.tar");
        let _ = lab
            .ssh(
                n,
                "tar -C / -xf /root/kubexm-lab-expired.tar && rm -f /root/kubexm-lab-expired.tar && systemctl restart kubelet",
            )
            .ok("the expired certificates written, the kubelet restarted");
        let _ = fs_err::remove_dir_all(&d);
        let _ = fs_err::remove_file(&tarf);
        c.scenario.note(&format!(
            "{n}: {count} certificates made expired, the kubelet restarted"
        ));
    }
    let _ = fs_err::remove_dir_all(&cadir);
    for n in NODES {
        wait_for(
            Duration::from_secs(60),
            &format!("{n}: the kubelet reports its expired client certificate"),
            || {
                let j = lab.unit_journal(n, "kubelet", 300);
                if j.mentions("bootstrap client certificate is expired") || j.mentions("expired") {
                    Ok(())
                } else {
                    Err(j.to_string())
                }
            },
        );
    }
    wait_for(
        Duration::from_secs(180),
        "kubectl refused by the API server (expired certificates)",
        || {
            let out = c.ep.run(&["get", "nodes"]);
            if out.success() {
                Err(out.to_string())
            } else {
                Ok(out)
            }
        },
    );
    let out = c.kx.run(&["certs", "check", "-o", "json"]);
    let inv: Inventory = out.json();
    let expired: Vec<String> = inv
        .certificates
        .iter()
        .filter(|c| c.days_left < 0)
        .map(|c| format!("{} {}", c.node, c.path))
        .collect();
    check(
        out.code == Some(7)
            && expired
                .iter()
                .any(|e| e == "node1 /etc/kubernetes/pki/etcd/server.crt")
            && expired
                .iter()
                .any(|e| e == "node2 /etc/kubernetes/pki/apiserver.crt"),
        "certs check exits 7 and lists the expired certificates (node1's etcd server, node2's API server...)",
        &format!("exit {:?}; expired: {expired:?}\n{}", out.code, out.stderr),
    );
    let t = Instant::now();
    let out = c.ok("renew after expiry", &["certs", "renew", "--yes"]);
    c.scenario.note(&format!(
        "{} certificates expired; certs renew brought the cluster back in {} s",
        expired.len(),
        t.elapsed().as_secs()
    ));
    let _ = out;
    c.etcd_healthy("after the renewal of the expired certificates");
    c.kubelet_back_all(&NODES);
    let _ = c.check_cluster();
    let out = c.kx.run(&["certs", "check"]);
    check(out.success(), "certs check exits 0 after the renewal", &out);
}

/// Section 6 (install-real 5c).
fn backup_restore(c: &Ctx) -> (PathBuf, PathBuf) {
    let lab = c.lab;
    let key = c.w.join("backup.key");
    let other = c.w.join("other.key");
    let bak = c.w.join("cluster.kxbak");
    let kxl = |args: &[&str]| -> Output {
        Output::run(
            lab.command(c.tools.install_bin())
                .arg("--work-dir")
                .arg(&c.kx.work)
                .args(args),
        )
    };
    let _ = kxl(&["backup", "keygen", "--key-file", &s(&key)]).ok("backup keygen");
    let _ = kxl(&["backup", "keygen", "--key-file", &s(&other)]).ok("backup keygen (another)");
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        fs_err::metadata(p).map_or(0, |m| m.permissions().mode() & 0o777)
    };
    check(
        mode(&key) == 0o600,
        "the backup key is mode 600",
        &mode(&key),
    );
    let _ =
        c.kc.run(&[
            "-n",
            "lab",
            "create",
            "configmap",
            "kxm-before-backup",
            "--from-literal=at=before",
        ])
        .ok("ConfigMap kxm-before-backup");
    let t = Instant::now();
    let _ = c.ok(
        "backup create",
        &["backup", "create", "--key-file", &s(&key), "-o", &s(&bak)],
    );
    let backup_s = t.elapsed().as_secs();
    let bytes = fs_err::read(&bak).expect("the backup");
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    check(
        mode(&bak) == 0o600
            && bytes.starts_with(b"KUBEXM-BACKUP-1")
            && !has(b"kxm-before-backup")
            && !has(b"PRIVATE KEY"),
        "the backup: mode 600, KUBEXM-BACKUP-1, encrypted (no ConfigMap name, no key in clear)",
        &format!("mode {:o}, {} bytes", mode(&bak), bytes.len()),
    );
    for n in NODES {
        check(
            !lab.exists(n, "/var/lib/kubexm/backup"),
            &format!("{n}: no backup staging left"),
            &"",
        );
    }
    let out = kxl(&[
        "backup",
        "verify",
        "--backup",
        &s(&bak),
        "--key-file",
        &s(&key),
    ])
    .ok("backup verify");
    let entries: BTreeSet<&str> = out
        .stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("  ")
                .and_then(|r| r.split_whitespace().next())
        })
        .collect();
    for e in [
        "etcd/snapshot.db",
        "nodes/node1/files.tar",
        "nodes/node2/files.tar",
        "nodes/node3/files.tar",
        "control/pki.tar",
        "control/record.tar",
    ] {
        check(entries.contains(e), &format!("the backup holds {e}"), &out);
    }
    let out = kxl(&[
        "backup",
        "verify",
        "--backup",
        &s(&bak),
        "--key-file",
        &s(&other),
    ]);
    check(!out.success(), "another key does not open the backup", &out);
    let _ =
        c.kc.run(&[
            "-n",
            "lab",
            "create",
            "configmap",
            "kxm-after-backup",
            "--from-literal=at=after",
        ])
        .ok("ConfigMap kxm-after-backup");
    let restore = ["restore", "--backup", &s(&bak), "--key-file", &s(&key)];
    let out = c.kx.run(&restore);
    check(out.code == Some(2), "restore without --yes exits 2", &out);
    check(
        c.kc.run(&["-n", "lab", "get", "configmap", "kxm-after-backup"])
            .success(),
        "restore without --yes changed nothing",
        &"",
    );
    let t = Instant::now();
    let mut with_yes = restore.to_vec();
    with_yes.extend(["--yes", "--no-verify"]);
    let _ = c.ok("restore", &with_yes);
    let restore_s = t.elapsed().as_secs();
    wait_for(
        Duration::from_secs(120),
        "/readyz through the VIP after the restore",
        || {
            if c.ready(&c.ep) {
                Ok(())
            } else {
                Err("not ready".into())
            }
        },
    );
    cms_as_at_backup(c, "the restore");
    for n in NODES {
        let out = lab.ssh(
            n,
            "ls -d /var/lib/etcd.before-restore-* && [ ! -e /var/lib/kubexm/restore ]",
        );
        check(
            out.success(),
            &format!("{n}: the replaced etcd data kept beside it, no snapshot copy left"),
            &out,
        );
    }
    c.etcd_healthy("after the restore");
    c.kubelet_back_all(&NODES);
    let _ = c.check_cluster();
    c.scenario.note(&format!(
        "backup {backup_s} s (mode 600, encrypted, 6 entries, another key refused); restore {restore_s} s: the ConfigMap from before back, the one after gone; etcd 3/3 healthy"
    ));
    (bak, key)
}

/// kxm-before-backup is there, kxm-after-backup is not.
fn cms_as_at_backup(c: &Ctx, what: &str) {
    #[derive(Deserialize)]
    struct Cm {
        data: BTreeMap<String, String>,
    }
    let cm: Cm =
        c.kc.get(&["-n", "lab", "get", "configmap", "kxm-before-backup"]);
    check(
        cm.data.get("at").map(String::as_str) == Some("before"),
        &format!("after {what}, the ConfigMap written before the backup is there"),
        &format!("{:?}", cm.data),
    );
    let out = c.kc.run(&[
        "-n",
        "lab",
        "get",
        "configmap",
        "kxm-after-backup",
        "-o",
        "json",
    ]);
    check(
        !out.success() && out.stderr.contains("NotFound"),
        &format!("after {what}, the ConfigMap written after the backup is gone (NotFound)"),
        &out,
    );
}

/// Section 7 (install-real "apply"), on v1.37: a refused pod CIDR change; a feature gate
/// ({GATE}, alpha in v1.37), maxPods, an API server SAN and flag applied one master at a time.
fn apply(c: &Ctx, opts: &ClusterOpts) {
    let lab = c.lab;
    let recorded = c.kx.record_dir().join("cluster.yaml");
    let rec_before = fs_err::read(&recorded).expect("the recorded cluster.yaml");
    let base = cluster_yaml_with(lab, opts);
    let cidr = c.write(
        "cluster-cidr.yaml",
        &base.replacen(
            "  network:\n",
            "  network:\n    podCidr: 10.199.0.0/16\n",
            1,
        ),
    );
    let runs = c.kx.runs().len();
    let out = c.kx.run(&["apply", "-f", &s(&cidr)]);
    check(
        out.code == Some(2) && out.stderr.contains("spec.network.podCidr"),
        "apply of a pod CIDR change exits 2 naming spec.network.podCidr",
        &out,
    );
    check(
        c.kx.runs().len() == runs && fs_err::read(&recorded).is_ok_and(|b| b == rec_before),
        "the refused apply ran nothing and left the record",
        &out,
    );
    let mut o = opts.clone();
    o.kubernetes_extra = format!("{}{}", opts.kubernetes_extra, changes());
    let changed = c.write("cluster.yaml", &cluster_yaml_with(lab, &o));
    let t = Instant::now();
    let out = c.ok("apply", &["apply", "-f", &s(&changed), "--no-verify"]);
    let apply_s = t.elapsed().as_secs();
    eprint!("{}", tail(&out.stdout, 2));
    let mut ages = Vec::new();
    for n in NODES {
        let a = lab.ssh(n, "ps -o etimes= -p \"$(pgrep -xo kube-apiserver)\"");
        let age: u64 = a.stdout_trimmed().parse().unwrap_or(u64::MAX);
        check(
            age < apply_s,
            &format!("{n}: its API server was restarted by the apply ({apply_s} s)"),
            &a,
        );
        ages.push(age);
    }
    check(
        ages[0] > ages[1] && ages[1] > ages[2],
        "the API servers restarted one master after the other, in order",
        &format!("up {ages:?} s"),
    );
    for n in NODES {
        let sans = lab.ssh(
            n,
            &format!(
                "echo | openssl s_client -connect {}:6443 2>/dev/null | openssl x509 -noout -ext subjectAltName | tail -n +2",
                lab.ip(n)
            ),
        );
        check(
            sans.stdout
                .split(',')
                .any(|x| x.trim() == format!("DNS:{SAN}")),
            &format!("{n}: the running API server serves the new SAN"),
            &sans,
        );
        for comp in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ] {
            let args = c.cmdline(n, comp);
            let gates: Vec<&str> = args
                .iter()
                .filter_map(|a| a.strip_prefix("--feature-gates="))
                .flat_map(|g| g.split(','))
                .collect();
            check(
                gates.contains(&format!("{GATE}=true").as_str()),
                &format!("{n}: {comp} runs with {GATE}=true"),
                &args.join(" "),
            );
        }
        let args = c.cmdline(n, "kube-apiserver");
        check(
            args.iter().any(|a| a == "--audit-log-maxage=7"),
            &format!("{n}: the API server runs with --audit-log-maxage=7"),
            &args.join(" "),
        );
    }
    for n in NODES {
        let cfg: Value = wait_for(
            Duration::from_secs(120),
            &format!("{n}'s kubelet /configz with {GATE} and maxPods 120"),
            || {
                let out =
                    c.kc.run(&["get", "--raw", &format!("/api/v1/nodes/{n}/proxy/configz")]);
                let v: Value = serde_json::from_str(&out.stdout).map_err(|_| out.to_string())?;
                let k = &v["kubeletconfig"];
                if k["featureGates"][GATE] == Value::Bool(true) && k["maxPods"] == 120 {
                    Ok(v)
                } else {
                    Err(format!("{}", k))
                }
            },
        );
        let _ = cfg;
        let node: Value = c.kc.get(&["get", "node", n]);
        check(
            node.pointer("/status/capacity/pods")
                .and_then(Value::as_str)
                == Some("120"),
            &format!("{n}: its Node reports 120 pods"),
            &node.pointer("/status/capacity").unwrap_or(&Value::Null),
        );
    }
    #[derive(Deserialize)]
    struct Cm {
        data: BTreeMap<String, String>,
    }
    let kcfg: Cm =
        c.kc.get(&["-n", "kube-system", "get", "configmap", "kubeadm-config"]);
    let cc = yaml_docs(
        kcfg.data
            .get("ClusterConfiguration")
            .map_or("", String::as_str),
    );
    let sans: Vec<&str> = cc
        .first()
        .and_then(|d| d.pointer("/apiServer/certSANs"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    check(
        sans.contains(&SAN),
        "kubeadm-config (uploaded) lists the new SAN",
        &format!("{sans:?}"),
    );
    let kl: Cm =
        c.kc.get(&["-n", "kube-system", "get", "configmap", "kubelet-config"]);
    let kd = yaml_docs(kl.data.get("kubelet").map_or("", String::as_str));
    check(
        kd.first().and_then(|d| d.get("maxPods")) == Some(&Value::from(120)),
        "the kubelet-config ConfigMap (later joins) has maxPods 120",
        &format!("{kd:?}"),
    );
    c.scenario.note(&format!(
        "CIDR refused (exit 2, nothing run); applied in {apply_s} s: API servers restarted in order (up {ages:?} s), SAN and flag served, {GATE} on every component, every kubelet 120 pods"
    ));
    wait_for(
        Duration::from_secs(120),
        "/readyz through the VIP after the apply",
        || {
            if c.ready(&c.ep) {
                Ok(())
            } else {
                Err("not ready".into())
            }
        },
    );
    let _ = c.check_cluster();
    let runs = c.kx.runs().len();
    let out = c.ok(
        "a second apply",
        &["apply", "-f", &s(&changed), "--no-verify"],
    );
    c.unchanged("the second apply", runs, &out);
    let runs = c.kx.runs().len();
    let out = c.ok(
        "re-run after the apply",
        &[
            "--bundle",
            &s(&c.kx.bundle),
            "-f",
            &s(&changed),
            "--no-verify",
        ],
    );
    c.unchanged("a re-run after the apply", runs, &out);
}

/// Section 8 (install-real 6, without the node4/registry expiry part).
fn day2_nodes(c: &Ctx, opts: &ClusterOpts, before: &BTreeMap<&str, String>) {
    let lab = c.lab;
    let mut o = opts.clone();
    o.hosts = ALL.to_vec();
    o.masters = r#"["node[1:3]", node5]"#.to_string();
    o.workers = r#"["node[1:4]"]"#.to_string();
    // The apply's changes stay (the recorded cluster).
    o.kubernetes_extra = format!("{}{}", opts.kubernetes_extra, changes());
    if skip("apply") {
        o.kubernetes_extra.clone_from(&opts.kubernetes_extra);
    }
    let c5 = c.write("cluster5.yaml", &cluster_yaml_with(lab, &o));
    let t = Instant::now();
    let _ = c.ok(
        "add-node node4",
        &["add-node", "-f", &s(&c5), "--node", "node4"],
    );
    let add4 = t.elapsed().as_secs();
    let nodes = c.wait_nodes(&["node1", "node2", "node3", "node4"], 300);
    let n4 = nodes.items.iter().find(|n| n.metadata.name == "node4");
    check(
        n4.is_some_and(|n| {
            n.roles().contains(&"worker".to_string())
                && !n.roles().contains(&"control-plane".to_string())
        }),
        "node4: Ready with the worker role only",
        &format!("{:?}", n4.map(Node::roles)),
    );
    let _ =
        c.kc.run(&["-n", "lab", "scale", "deployment/lab-web", "--replicas=4"])
            .ok("scale lab-web to 4");
    let pod4: Pod = wait_for(
        Duration::from_secs(240),
        "a Ready lab-web pod on node4",
        || {
            let l: List<Pod> =
                c.kc.try_get(&["-n", "lab", "get", "pods", "-l", "app=lab-web"])
                    .map_err(|o| o.to_string())?;
            l.items
                .into_iter()
                .find(|p| p.spec.node_name.as_deref() == Some("node4") && p.ready())
                .ok_or_else(|| "none yet".to_string())
        },
    );
    let name = &pod4.metadata.name;
    let logs = c.kc.run(&["-n", "lab", "logs", name]);
    check(
        logs.stdout.lines().next() == Some(&format!("lab-web {name} serving"))
            && pod4.image_of("web") == Some(c.web_image.as_str()),
        &format!("{name} on node4: the private registry's image, kubectl logs reach its kubelet"),
        &logs,
    );
    let svc: kubexm_labkit::kube::Service = c.kc.get(&["-n", "lab", "get", "service", "lab-web"]);
    let ip = svc.spec.cluster_ip;
    wait_for(
        Duration::from_secs(60),
        &format!("Service lab-web ({ip}) answers from node4"),
        || {
            let out = lab.ssh("node4", &format!("curl -fsS --max-time 3 http://{ip}/"));
            if out.success() && out.stdout_trimmed().starts_with("lab-web-") {
                Ok(())
            } else {
                Err(out.to_string())
            }
        },
    );
    let runs = c.kx.runs().len();
    let out = c.ok(
        "add-node node4 again",
        &["add-node", "-f", &s(&c5), "--node", "node4"],
    );
    c.unchanged("add-node node4 again", runs, &out);
    c.scenario.note(&format!("node4 Ready (worker) in {add4} s, runs {name}, the Service answers from it; again: nothing changed"));

    let t = Instant::now();
    let _ = c.ok(
        "add-node node5",
        &["add-node", "-f", &s(&c5), "--node", "node5"],
    );
    let add5 = t.elapsed().as_secs();
    let nodes = c.wait_nodes(&ALL, 300);
    let n5: Option<Value> = c.kc.try_get(&["get", "node", "node5"]).ok();
    let tainted = n5
        .as_ref()
        .and_then(|n| n.pointer("/spec/taints"))
        .and_then(Value::as_array)
        .is_some_and(|t| t.iter().any(|x| x["effect"] == "NoSchedule"));
    let roles5 = nodes
        .items
        .iter()
        .find(|n| n.metadata.name == "node5")
        .map(Node::roles)
        .unwrap_or_default();
    check(
        tainted && roles5.contains(&"control-plane".to_string()),
        "node5: Ready, a control-plane node tainted NoSchedule",
        &format!(
            "{roles5:?} {:?}",
            n5.as_ref().and_then(|n| n.pointer("/spec/taints"))
        ),
    );
    let one = Kubectl {
        servers: vec![format!("https://{}:6443", lab.ip("node5"))],
        ..c.kc.clone()
    };
    check(
        c.ready(&one),
        "node5's own API server answers /readyz",
        &one.run(&["get", "--raw=/readyz"]),
    );
    let out = lab.ssh(
        "node5",
        "curl -fsSk https://127.0.0.1:10257/healthz; echo; curl -fsSk https://127.0.0.1:10259/healthz",
    );
    check(
        out.stdout.lines().collect::<Vec<_>>() == ["ok", "ok"],
        "node5: controller-manager and scheduler /healthz ok",
        &out,
    );
    for n in NODES {
        check(
            haproxy_servers(c, n).contains(&"node5".to_string()),
            &format!("{n}: haproxy lists node5"),
            &haproxy_servers(c, n).join(" "),
        );
    }
    let holders = lab.vip_holders(&NODES);
    let holder = holders.first().cloned().unwrap_or_default();
    wait_for(
        Duration::from_secs(90),
        &format!("haproxy on {holder} (the VIP) sees node5's API server UP"),
        || {
            let out = lab.ssh(&holder, "curl -fsS 'http://127.0.0.1:8081/stats;csv'");
            let up = out.stdout.lines().any(|l| {
                let f: Vec<&str> = l.split(',').collect();
                f.len() > 17 && f[0] == "kube-apiserver" && f[1] == "node5" && f[17] == "UP"
            });
            if up {
                Ok(())
            } else {
                Err(out.to_string())
            }
        },
    );
    let runs = c.kx.runs().len();
    let out = c.ok(
        "add-node node5 again",
        &["add-node", "-f", &s(&c5), "--node", "node5"],
    );
    c.unchanged("add-node node5 again", runs, &out);
    c.scenario.note(&format!("node5 Ready (master, tainted) in {add5} s; its API server, controller-manager, scheduler ok; every haproxy lists it, UP on {holder}"));

    let t = Instant::now();
    let _ = c.ok("delete-node node5", &["delete-node", "--node", "node5"]);
    let del5 = t.elapsed().as_secs();
    wait_for(
        Duration::from_secs(120),
        "/readyz through the VIP after node5 left",
        || {
            if c.ready(&c.ep) {
                Ok(())
            } else {
                Err("not ready".into())
            }
        },
    );
    for n in NODES {
        check(
            !haproxy_servers(c, n).contains(&"node5".to_string()),
            &format!("{n}: haproxy no longer lists node5"),
            &haproxy_servers(c, n).join(" "),
        );
    }
    as_before(c, "node5", before, "delete-node", Net::Flannel);
    let _ =
        c.kc.run(&["-n", "lab", "scale", "deployment/lab-web", "--replicas=3"])
            .ok("scale lab-web to 3");
    let t = Instant::now();
    let _ = c.ok("delete-node node4", &["delete-node", "--node", "node4"]);
    let del4 = t.elapsed().as_secs();
    as_before(c, "node4", before, "delete-node", Net::Flannel);
    let _ = c.wait_nodes(&NODES, 300);
    let _ = c.check_cluster();
    c.scenario.note(&format!(
        "delete-node node5 {del5} s, node4 {del4} s: gone from the API (node5 from every haproxy), both machines as before they joined"
    ));
}

/// The `server` names of `node`'s haproxy.cfg.
fn haproxy_servers(c: &Ctx, node: &str) -> Vec<String> {
    c.lab
        .read(node, "/etc/haproxy/haproxy.cfg")
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("server")).then(|| w.next().unwrap_or("").to_string())
        })
        .collect()
}

/// `node`'s state equals the one before the install (the lab CNI's own files removed first).
fn as_before(c: &Ctx, node: &str, before: &BTreeMap<&str, String>, when: &str, net: Net) {
    if net == Net::LabCni {
        let _ = c.lab.ssh(
            node,
            "systemctl disable -q kubexm-lab-pod-routes.service; rm -f /etc/systemd/system/kubexm-lab-pod-routes.service
             while read -r c v; do ip route del \"$c\" via \"$v\"; done </etc/kubexm-lab/pod-routes
             rm -rf /etc/kubexm-lab /etc/cni/net.d/10-kubexm-lab.conflist; rmdir /etc/cni/net.d /etc/cni 2>/dev/null; systemctl daemon-reload",
        );
    }
    let after = c.lab.node_state(node);
    let b = before.get(node).map_or("", String::as_str);
    check(
        after == b,
        &format!("{node}: after {when}, as before the install"),
        &diff(b, &after),
    );
}

/// The token of a new service-account token (bound, 48 h) and whether the API accepts it.
fn token_ok(c: &Ctx, token: &str) -> bool {
    c.lab
        .ssh(
            "node1",
            &format!(
                "curl -sk -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {token}' https://{}:6443/apis",
                c.lab.ip("node1")
            ),
        )
        .stdout_trimmed()
        == "200"
}

/// Section 9a: delete, every node as before; a second delete changes nothing.
fn delete_as_before(c: &Ctx, before: &BTreeMap<&str, String>, net: Net) {
    let t = Instant::now();
    let out = c.kx.delete(&["--yes"]);
    let _ = c.kx.ok(out, "delete --yes");
    let secs = t.elapsed().as_secs();
    for n in NODES {
        as_before(c, n, before, "delete", net);
    }
    let runs = c.kx.runs().len();
    let out = c.kx.delete(&["--yes"]);
    let out = c.kx.ok(out, "a second delete --yes");
    c.unchanged("a second delete", runs, &out);
    c.scenario
        .note(&format!("delete {secs} s: node1-3 as before the install"));
}

/// Section 9b (install-real 8): `restore --fresh` of section 6's backup onto the wiped nodes
/// from a control host that kept nothing; then delete again.
fn fresh(c: &Ctx, backup: &(PathBuf, PathBuf), before: &BTreeMap<&str, String>, net: Net) {
    // (The identity to compare is read before the first delete: see `identity`.)
    let ca = fs_err::read_to_string(c.w.join("ca-before-delete.crt")).unwrap_or_default();
    let token = fs_err::read_to_string(c.w.join("token-before-delete")).unwrap_or_default();
    check(
        !ca.is_empty() && !token.is_empty(),
        "the CA and a token kept before the delete",
        &"",
    );
    let _ = fs_err::remove_dir_all(&c.kx.work);
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "restore",
            "--fresh",
            "--no-verify",
            "--bundle",
            &s(&c.kx.bundle),
            "-f",
            &s(&c.cluster_now()),
            "--backup",
            &s(&backup.0),
            "--key-file",
            &s(&backup.1),
        ]
        .iter()
        .map(|x| (*x).to_string())
        .collect();
        v.extend(extra.iter().map(|x| (*x).to_string()));
        v
    };
    let out = c.kx.run(&args(&["--dry-run"]));
    check(
        out.success() && !c.kx.pki().exists(),
        "restore --fresh --dry-run succeeds and writes no keys",
        &out,
    );
    let out = c.kx.run(&args(&[]));
    check(
        out.code == Some(2),
        "restore --fresh without --yes exits 2",
        &out,
    );
    let t = Instant::now();
    let out = c.kx.run(&args(&["--yes"]));
    let _ = c.kx.ok(out, "restore --fresh --yes");
    let secs = t.elapsed().as_secs();
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        fs_err::metadata(c.kx.pki()).map_or(0, |m| m.permissions().mode() & 0o777)
    };
    check(
        mode == 0o700,
        "the restored key directory is mode 700",
        &format!("{mode:o}"),
    );
    wait_for(
        Duration::from_secs(120),
        "/readyz through the VIP after restore --fresh",
        || {
            if c.ready(&c.ep) {
                Ok(())
            } else {
                Err("not ready".into())
            }
        },
    );
    check(
        c.lab.read("node1", "/etc/kubernetes/pki/ca.crt") == ca,
        "after restore --fresh, the cluster CA is the backup's",
        &"",
    );
    cms_as_at_backup(c, "restore --fresh");
    wait_for(
        Duration::from_secs(120),
        "a service-account token from before accepted after restore --fresh",
        || {
            if token_ok(c, token.trim()) {
                Ok(())
            } else {
                Err("not accepted".into())
            }
        },
    );
    c.etcd_healthy("after restore --fresh");
    let web = c.web_image.clone();
    wait_for(
        Duration::from_secs(300),
        &format!("every node pulling {web} for the restored pods"),
        || {
            for n in NODES {
                let out = c.lab.ssh(n, "ctr -n k8s.io images ls -q");
                if !out.stdout.lines().any(|l| l == web) {
                    return Err(format!("{n}: {out}"));
                }
            }
            Ok(())
        },
    );
    c.kubelet_back_all(&NODES);
    let _ = c.check_cluster();
    c.scenario.note(&format!(
        "restore --fresh {secs} s: the same CA, an old token accepted, the ConfigMaps as at the backup, etcd 3/3, checks pass"
    ));
    delete_as_before(c, before, net);
}

impl Ctx<'_> {
    /// The cluster.yaml last applied (the apply's when it ran).
    fn cluster_now(&self) -> PathBuf {
        self.cluster.clone()
    }
}

#[test]
fn certificates_sort_as_the_renewal_does() {
    assert_eq!(kind("node1", "/etc/kubernetes/pki/etcd/server.crt"), "etcd");
    assert_eq!(
        kind("node1", "/etc/kubernetes/pki/apiserver-etcd-client.crt"),
        "etcd"
    );
    assert_eq!(
        kind("node1", "/etc/kubernetes/pki/apiserver.crt"),
        "kubernetes"
    );
    assert_eq!(
        kind("node1", "/var/lib/kubelet/pki/kubelet-server-current.pem"),
        "kubelet-serving"
    );
    assert_eq!(
        kind("node1", "/etc/kubexm-registry/tls/server.crt"),
        "registry"
    );
    assert_eq!(kind("node1", "/etc/ssh/x.crt"), "other");
    assert_eq!(
        later(
            &Value::from("2027-01-01T00:00:00Z"),
            &Value::from("2026-01-01T00:00:00Z")
        ),
        std::cmp::Ordering::Greater
    );
}
