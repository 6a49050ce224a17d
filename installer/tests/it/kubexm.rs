//! `kubernetes.type: kubexm`: every rendered file (snapshots over a matrix of versions, etcd
//! types and load-balancer modes), the certificates checked with the real `openssl` (chain,
//! subjects, SANs, usages) and served by a real TLS server, every kubeconfig loaded by a real
//! `kubectl`, the certificate step run twice through the engine (nothing changes the second
//! time), the install plan of a 3-master/2-worker cluster and the delete plan.
//!
//! No Kubernetes server binaries exist here: the catalog override in
//! `tests/fixtures/kubexm/catalog-stand-in.yaml` pins STAND-IN sums for kube-apiserver,
//! kube-controller-manager, kube-scheduler and kube-proxy, and `openssl s_server` is the
//! STAND-IN for kube-apiserver's TLS endpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::modules::kubexm::certs::{certificates, KubernetesCertificates, NodeFile};
use kubexm_install::modules::kubexm::control_plane::KubexmControlPlaneModule;
use kubexm_install::modules::kubexm::coredns::CoreDnsModule;
use kubexm_install::modules::kubexm::node::KubexmNodesModule;
use kubexm_install::modules::kubexm::{KubexmCluster, Layout};
use kubexm_install::pipeline::executor::{ExecOptions, Executor, RunReport};
use kubexm_install::pipeline::journal::Journal;
use kubexm_install::pipeline::{plan, Module, Pipeline, StepError, Task};
use kubexm_install::pipelines::delete_pipeline;
use kubexm_install::pipelines::install_pipeline;
use kubexm_install::pki::{KeyDir, Keys};
use kubexm_install::runner::local::LocalRunner;
use kubexm_install::runner::Runner;

use crate::common::free_port;
use crate::common::Edit as _;
use crate::lb::{file_of, rendered};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kubexm")
        .join(name)
}

/// The fixture cluster with `edit` applied to its text, loaded with the stand-in catalog; its
/// PKI goes under `work`.
fn context(work: &Path, edit: impl Fn(String) -> String) -> Arc<InstallContext> {
    let text = std::fs::read_to_string(fixture("cluster.yaml")).expect("fixture");
    let file = work.join("cluster.yaml");
    std::fs::write(&file, edit(text)).expect("write cluster.yaml");
    Arc::new(
        load_context(&file, Some(&fixture("catalog-stand-in.yaml")), None, work)
            .expect("the kubexm cluster loads"),
    )
}

/// v1.31, etcd kubexm on the masters, keepalived + haproxy on the masters (the API servers
/// bind their own address), proxy mode ipvs.
fn v131_kubexm_etcd_external_lb(work: &Path) -> Arc<InstallContext> {
    context(work, |t| t)
}

/// v1.35, an external etcd (files made here), the internal load balancer, nftables, a custom
/// domain and networks, feature gates and extra arguments.
fn v135_external_etcd_internal_lb(work: &Path) -> Arc<InstallContext> {
    let etcd = work.join("ext-etcd");
    let ca = kubexm_install::pki::Ca::load_or_create(&etcd, "ext", "external-etcd-ca").expect("ca");
    ca.load_or_issue(
        &etcd,
        "client",
        &kubexm_install::pki::CertSpec::new("apiserver", kubexm_install::pki::Usage::Client),
    )
    .expect("client");
    let d = etcd.display();
    context(work, |t| {
        t.edit("version: v1.31.13", "version: v1.35.4\n    dnsDomain: corp.example\n    proxyMode: nftables\n    maxPods: 120\n    featureGates: {InPlacePodVerticalScaling: true, UserNamespacesSupport: false}\n    apiserverCertExtraSans: [api.corp.example, 203.0.113.10]\n    apiserverArgs: {v: \"2\", audit-log-path: /var/log/kubernetes/audit.log}\n    kubeletArgs: {v: \"2\"}\n    controllerManagerArgs: {node-cidr-mask-size: \"25\"}\n    schedulerArgs: {v: \"3\"}\n    kubeProxyArgs: {v: \"4\"}")
            .edit("    etcd: [\"master[1:3]\"]\n", "")
            .edit("    loadbalancer: [\"master[1:3]\"]\n", "")
            .edit(
                "  etcd:\n    type: kubexm\n",
                &format!("  etcd:\n    type: external\n    endpoints: [https://10.1.0.5:2379, https://10.1.0.6:2379, https://10.1.0.7:2379]\n    caFile: {d}/ext-ca.crt\n    certFile: {d}/client.crt\n    keyFile: {d}/client.key\n"),
            )
            .edit(
                "  network:\n    plugin: calico\n",
                "  network:\n    plugin: flannel\n    podCidr: 10.244.0.0/16\n    serviceCidr: 10.96.0.0/12\n",
            )
            .edit(
                "    mode: external\n    external:\n      type: kubexm-kh\n    vip: 192.168.50.100\n    interface: eth0\n",
                "    mode: internal\n",
            )
    })
}

/// v1.31, one master and one worker, no load balancer.
fn v131_single_master_no_lb(work: &Path) -> Arc<InstallContext> {
    context(work, |t| {
        t.edit("[\"master[1:3]\"]", "[master1]")
            .edit("[\"worker[1:2]\"]", "[worker1]")
            .edit(
                "    mode: external\n    external:\n      type: kubexm-kh\n    vip: 192.168.50.100\n    interface: eth0\n",
                "    mode: none\n",
            )
            .edit("    loadbalancer: [master1]\n", "")
    })
}

/// Modules of the kubexm path that render files.
fn kubexm_modules(ctx: &Arc<InstallContext>) -> Vec<Box<dyn Module>> {
    vec![
        Box::new(kubexm_install::modules::kubexm::certs::KubexmCertsModule(
            ctx.clone(),
        )),
        Box::new(KubexmControlPlaneModule(ctx.clone())),
        Box::new(KubexmNodesModule(ctx.clone())),
        Box::new(CoreDnsModule(ctx.clone())),
    ]
}

/// Every rendered file of the kubexm modules: (node, destination, text).
fn all_rendered(ctx: &Arc<InstallContext>) -> Vec<(String, String, String)> {
    kubexm_modules(ctx)
        .iter()
        .flat_map(|m| rendered(ctx, m.as_ref()))
        .collect()
}

/// Embedded base64 (certificates and keys, new in every work directory) replaced.
fn redact_kubeconfig(text: &str) -> String {
    text.lines()
        .map(|l| match l.split_once("-data: ") {
            Some((k, _)) => format!("{k}-data: <base64 PEM>"),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Every file rendered for `node`, one after another, kubeconfigs redacted.
fn node_snapshot(files: &[(String, String, String)], node: &str) -> String {
    let mut s = String::new();
    for (n, dest, text) in files {
        if n != node {
            continue;
        }
        let text = if dest.ends_with(".conf") {
            redact_kubeconfig(text)
        } else {
            text.clone()
        };
        s.push_str(&format!("===== {dest}\n{text}"));
    }
    s
}

/// The words of a unit's `ExecStart=` (continuation lines joined).
fn exec_start(unit: &str) -> Vec<String> {
    let joined = unit.edit(" \\\n", " ");
    let line = joined
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    line.split_whitespace().map(str::to_string).collect()
}

fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
    serde_saphyr::from_multiple::<serde_json::Value>(text)
        .unwrap_or_else(|e| panic!("not YAML: {e}\n{text}"))
}

fn yaml(text: &str) -> serde_json::Value {
    let docs = yaml_docs(text);
    assert_eq!(docs.len(), 1, "{text}");
    docs.into_iter().next().expect("one document")
}

#[test]
fn v1_31_kubexm_etcd_external_lb_files() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = v131_kubexm_etcd_external_lb(work.path());
    let files = all_rendered(&ctx);
    let f = |node: &str, dest: &str| file_of(&files, node, dest);

    let api = exec_start(&f("master2", "/etc/systemd/system/kube-apiserver.service"));
    for want in [
        "/usr/local/bin/kube-apiserver",
        "--advertise-address=192.168.50.12",
        // keepalived + haproxy on this master hold VIP:6443.
        "--bind-address=192.168.50.12",
        "--etcd-servers=https://192.168.50.11:2379,https://192.168.50.12:2379,https://192.168.50.13:2379",
        "--etcd-cafile=/etc/ssl/etcd/ssl/ca.pem",
        "--etcd-certfile=/etc/ssl/etcd/ssl/node-master2.pem",
        "--etcd-keyfile=/etc/ssl/etcd/ssl/node-master2-key.pem",
        "--service-cluster-ip-range=10.233.0.0/18",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--kubelet-certificate-authority=/etc/kubernetes/pki/ca.crt",
    ] {
        assert!(api.contains(&want.to_string()), "{want} missing: {api:?}");
    }
    assert!(!api.iter().any(|w| w.starts_with("--feature-gates")));

    let kubelet = exec_start(&f("worker1", "/etc/systemd/system/kubelet.service"));
    assert!(
        kubelet.contains(&"--pod-infra-container-image=192.168.50.11:5000/pause:3.10".to_string()),
        "before v1.35 kubelet is told the pause image: {kubelet:?}"
    );
    assert!(kubelet.contains(&"--node-ip=192.168.50.21".to_string()));
    let kc = yaml(&f("worker1", "/etc/kubernetes/kubelet-config.yaml"));
    assert_eq!(kc["kind"], "KubeletConfiguration");
    // NodeLocal DNSCache on every node; CoreDNS keeps the tenth service address behind it.
    assert_eq!(kc["clusterDNS"][0], "169.254.25.10");
    assert_eq!(kc["clusterDomain"], "cluster.local");
    assert_eq!(kc["cgroupDriver"], "systemd");
    assert_eq!(
        kc["containerRuntimeEndpoint"],
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(
        kc["authentication"]["x509"]["clientCAFile"],
        "/etc/kubernetes/pki/ca.crt"
    );
    assert_eq!(kc["authorization"]["mode"], "Webhook");
    assert!(
        kc.get("registerWithTaints").is_none(),
        "workers are not tainted"
    );
    let mc = yaml(&f("master1", "/etc/kubernetes/kubelet-config.yaml"));
    assert_eq!(
        mc["registerWithTaints"][0]["key"],
        "node-role.kubernetes.io/control-plane"
    );
    let kp = yaml(&f("worker2", "/etc/kubernetes/kube-proxy.yaml"));
    assert_eq!(kp["mode"], "ipvs");
    assert_eq!(kp["clusterCIDR"], "10.233.64.0/18");
    assert_eq!(kp["hostnameOverride"], "worker2");
    let sched = yaml(&f("master3", "/etc/kubernetes/kube-scheduler.yaml"));
    assert_eq!(sched["kind"], "KubeSchedulerConfiguration");
    assert_eq!(
        sched["clientConnection"]["kubeconfig"],
        "/etc/kubernetes/scheduler.conf"
    );

    let coredns = yaml_docs(&f("master1", "/etc/kubernetes/addons/coredns.yaml"));
    let kinds: Vec<&str> = coredns
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "Service"
        ]
    );
    assert_eq!(coredns[5]["spec"]["clusterIP"], "10.233.0.10");
    assert_eq!(
        coredns[4]["spec"]["template"]["spec"]["containers"][0]["image"],
        "192.168.50.11:5000/coredns/coredns:v1.11.3"
    );
    let corefile = coredns[3]["data"]["Corefile"].as_str().expect("Corefile");
    assert!(
        corefile.contains("kubernetes cluster.local in-addr.arpa ip6.arpa"),
        "{corefile}"
    );
    let rbac = yaml(&f("master1", "/etc/kubernetes/addons/kubexm-rbac.yaml"));
    assert_eq!(rbac["subjects"][0]["name"], "kubeadm:cluster-admins");
    assert_eq!(rbac["roleRef"]["name"], "cluster-admin");

    insta::assert_snapshot!(
        "v1.31-kubexm-etcd-external-lb-master1",
        node_snapshot(&files, "master1")
    );
    insta::assert_snapshot!(
        "v1.31-kubexm-etcd-external-lb-worker1",
        node_snapshot(&files, "worker1")
    );
}

#[test]
fn v1_35_external_etcd_internal_lb_files() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = v135_external_etcd_internal_lb(work.path());
    let files = all_rendered(&ctx);
    let f = |node: &str, dest: &str| file_of(&files, node, dest);

    let api = exec_start(&f("master1", "/etc/systemd/system/kube-apiserver.service"));
    for want in [
        "--bind-address=0.0.0.0",
        "--etcd-servers=https://10.1.0.5:2379,https://10.1.0.6:2379,https://10.1.0.7:2379",
        "--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt",
        "--etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt",
        "--service-cluster-ip-range=10.96.0.0/12",
        "--service-account-issuer=https://kubernetes.default.svc.corp.example",
        "--feature-gates=InPlacePodVerticalScaling=true,UserNamespacesSupport=false",
        "--audit-log-path=/var/log/kubernetes/audit.log",
        "--v=2",
    ] {
        assert!(api.contains(&want.to_string()), "{want} missing: {api:?}");
    }
    let cm = exec_start(&f(
        "master1",
        "/etc/systemd/system/kube-controller-manager.service",
    ));
    assert!(
        cm.contains(&"--cluster-cidr=10.244.0.0/16".to_string()),
        "{cm:?}"
    );
    assert!(
        cm.contains(&"--node-cidr-mask-size=25".to_string()),
        "{cm:?}"
    );
    let sched = exec_start(&f("master1", "/etc/systemd/system/kube-scheduler.service"));
    assert!(sched.contains(&"--v=3".to_string()), "{sched:?}");
    let kubelet = exec_start(&f("worker1", "/etc/systemd/system/kubelet.service"));
    assert!(
        !kubelet
            .iter()
            .any(|w| w.starts_with("--pod-infra-container-image")),
        "v1.35 removed the flag: {kubelet:?}"
    );
    assert!(kubelet.contains(&"--v=2".to_string()));
    let kc = yaml(&f("worker1", "/etc/kubernetes/kubelet-config.yaml"));
    assert_eq!(kc["clusterDNS"][0], "169.254.25.10");
    assert_eq!(kc["clusterDomain"], "corp.example");
    assert_eq!(kc["maxPods"], 120);
    assert_eq!(kc["featureGates"]["InPlacePodVerticalScaling"], true);
    assert_eq!(kc["featureGates"]["UserNamespacesSupport"], false);
    let kp = yaml(&f("worker1", "/etc/kubernetes/kube-proxy.yaml"));
    assert_eq!(kp["mode"], "nftables");
    assert_eq!(kp["clusterCIDR"], "10.244.0.0/16");
    assert_eq!(kp["featureGates"]["InPlacePodVerticalScaling"], true);
    assert!(
        exec_start(&f("worker1", "/etc/systemd/system/kube-proxy.service"))
            .contains(&"--v=4".to_string())
    );
    let coredns = yaml_docs(&f("master1", "/etc/kubernetes/addons/coredns.yaml"));
    assert_eq!(coredns[5]["spec"]["clusterIP"], "10.96.0.10");
    assert_eq!(
        coredns[4]["spec"]["template"]["spec"]["containers"][0]["image"],
        "192.168.50.11:5000/coredns/coredns:v1.13.1"
    );
    // The internal load balancer has no VIP: clients use the domain (the first master).
    let admin = f("master1", "/etc/kubernetes/admin.conf");
    assert!(
        admin.contains("server: \"https://lb.kubexm.internal:6443\""),
        "{admin}"
    );

    insta::assert_snapshot!(
        "v1.35-external-etcd-internal-lb-master1",
        node_snapshot(&files, "master1")
    );
    insta::assert_snapshot!(
        "v1.35-external-etcd-internal-lb-worker1",
        node_snapshot(&files, "worker1")
    );
}

#[test]
fn v1_31_single_master_without_load_balancer_files() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = v131_single_master_no_lb(work.path());
    let files = all_rendered(&ctx);
    let api = exec_start(&file_of(
        &files,
        "master1",
        "/etc/systemd/system/kube-apiserver.service",
    ));
    assert!(
        api.contains(&"--bind-address=0.0.0.0".to_string()),
        "{api:?}"
    );
    assert!(
        api.contains(&"--etcd-servers=https://192.168.50.11:2379".to_string()),
        "{api:?}"
    );
    let admin = file_of(&files, "master1", "/etc/kubernetes/admin.conf");
    assert!(
        admin.contains("server: \"https://lb.kubexm.internal:6443\""),
        "{admin}"
    );
    insta::assert_snapshot!(
        "v1.31-single-master-no-lb-master1",
        node_snapshot(&files, "master1")
    );
}

fn openssl(args: &[&str]) -> (bool, String) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is installed (tests/run-all installs it)");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

fn kubectl(args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl").args(args).output().expect(
        "kubectl is installed (tests/run-all installs kubernetes-client when it is missing)",
    );
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        s.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), s)
}

/// Writes every file of every node under `root/<node>/<dest>`; returns the node roots.
fn write_node_files(
    root: &Path,
    files: &BTreeMap<String, Vec<NodeFile>>,
) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for (node, list) in files {
        let dir = root.join(node);
        for f in list {
            let path = dir.join(f.dest().trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, f.content()).expect("write");
        }
        out.insert(node.clone(), dir);
    }
    out
}

struct Cert {
    cn: String,
    o: Vec<String>,
    sans: BTreeSet<String>,
    server: bool,
    client: bool,
    key_usage: (bool, bool),
    ca: bool,
}

fn parse_cert(pem: &[u8]) -> Cert {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).expect("PEM");
    let c = p.parse_x509().expect("certificate");
    let attr = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
        it.map(|a| a.as_str().expect("utf-8").to_string())
            .collect::<Vec<_>>()
    };
    let sans = match c.subject_alternative_name().expect("SAN extension") {
        None => BTreeSet::new(),
        Some(ext) => ext
            .value
            .general_names
            .iter()
            .map(|g| match g {
                x509_parser::extensions::GeneralName::DNSName(d) => format!("DNS:{d}"),
                x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                    4 => format!(
                        "IP:{}",
                        std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).expect("v4"))
                    ),
                    _ => format!(
                        "IP:{}",
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).expect("v6"))
                    ),
                },
                other => panic!("unexpected SAN {other:?}"),
            })
            .collect(),
    };
    let (server, client) = c
        .extended_key_usage()
        .expect("EKU")
        .map_or((false, false), |e| {
            (e.value.server_auth, e.value.client_auth)
        });
    let key_usage = c.key_usage().expect("KU").map_or((false, false), |k| {
        (k.value.digital_signature(), k.value.key_encipherment())
    });
    let cn = attr(&mut c.subject().iter_common_name()).join(",");
    let o = attr(&mut c.subject().iter_organization());
    let ca = c.is_ca();
    Cert {
        cn,
        o,
        sans,
        server,
        client,
        key_usage,
        ca,
    }
}

#[test]
fn certificates_chain_to_their_ca_with_kubernetes_subjects_sans_and_usages() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = v131_kubexm_etcd_external_lb(work.path());
    let k = KubexmCluster::new(&ctx).expect("cluster");
    let files =
        certificates(&k, &KeyDir::new(work.path().join("pki"), Keys::Keep)).expect("certificates");
    assert_eq!(
        files.keys().cloned().collect::<Vec<_>>(),
        ["master1", "master2", "master3", "worker1", "worker2"]
    );
    let roots = write_node_files(&work.path().join("nodes"), &files);
    let m1 = &roots["master1"];
    let pki = |root: &Path, f: &str| root.join("etc/kubernetes/pki").join(f);
    let s = |p: PathBuf| p.display().to_string();
    let ca = s(pki(m1, "ca.crt"));

    // Chain: each leaf verifies against its CA with openssl (for its purpose).
    for (file, purpose, ca_file) in [
        ("apiserver.crt", "sslserver", ca.clone()),
        ("apiserver-kubelet-client.crt", "sslclient", ca.clone()),
        ("kubelet.crt", "sslserver", ca.clone()),
        ("kubelet.crt", "sslclient", ca.clone()),
        (
            "front-proxy-client.crt",
            "sslclient",
            s(pki(m1, "front-proxy-ca.crt")),
        ),
    ] {
        let (ok, out) = openssl(&[
            "verify",
            "-purpose",
            purpose,
            "-CAfile",
            &ca_file,
            &s(pki(m1, file)),
        ]);
        assert!(ok, "{file} ({purpose}): {out}");
    }
    let (ok, out) = openssl(&[
        "verify",
        "-CAfile",
        &ca,
        &s(pki(&roots["worker2"], "kubelet.crt")),
    ]);
    assert!(ok, "{out}");
    // The front-proxy client is NOT trusted by the cluster CA (a separate CA), and a server
    // certificate is no client certificate.
    let (ok, _) = openssl(&[
        "verify",
        "-CAfile",
        &ca,
        &s(pki(m1, "front-proxy-client.crt")),
    ]);
    assert!(
        !ok,
        "the front-proxy client must not chain to the cluster CA"
    );
    let (ok, _) = openssl(&[
        "verify",
        "-purpose",
        "sslclient",
        "-CAfile",
        &ca,
        &s(pki(m1, "apiserver.crt")),
    ]);
    assert!(
        !ok,
        "the API server certificate is not a client certificate"
    );

    // Subjects, usages and SANs.
    let cert = |root: &Path, f: &str| parse_cert(&std::fs::read(pki(root, f)).expect("read"));
    let root_ca = cert(m1, "ca.crt");
    assert!(root_ca.ca);
    assert_eq!(root_ca.cn, "kubernetes");
    assert!(cert(m1, "front-proxy-ca.crt").ca);
    let api = cert(m1, "apiserver.crt");
    assert_eq!(
        (api.cn.as_str(), api.server, api.client),
        ("kube-apiserver", true, false)
    );
    assert_eq!(api.key_usage, (true, true));
    let want: BTreeSet<String> = [
        "DNS:kubernetes",
        "DNS:kubernetes.default",
        "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local",
        "IP:10.233.0.1",
        "DNS:master1",
        "DNS:master2",
        "DNS:master3",
        "IP:192.168.50.11",
        "IP:192.168.50.12",
        "IP:192.168.50.13",
        "DNS:lb.kubexm.internal",
        "IP:192.168.50.100",
        "IP:127.0.0.1",
        "DNS:localhost",
    ]
    .map(String::from)
    .into();
    assert_eq!(api.sans, want);
    let kc = cert(m1, "apiserver-kubelet-client.crt");
    assert_eq!(
        (kc.cn.as_str(), kc.o.clone(), kc.server, kc.client),
        (
            "kube-apiserver-kubelet-client",
            vec!["kubeadm:cluster-admins".to_string()],
            false,
            true
        )
    );
    let fp = cert(m1, "front-proxy-client.crt");
    assert_eq!((fp.cn.as_str(), fp.client), ("front-proxy-client", true));
    let w1 = cert(&roots["worker1"], "kubelet.crt");
    assert_eq!(w1.cn, "system:node:worker1");
    assert_eq!(w1.o, ["system:nodes"]);
    assert!(w1.server && w1.client);
    assert_eq!(
        w1.sans,
        ["DNS:worker1", "IP:192.168.50.21"].map(String::from).into()
    );

    // Keys match their certificates / public keys; keys are 0600.
    let pubkey = |args: &[&str]| {
        let (ok, out) = openssl(args);
        assert!(ok, "{out}");
        out
    };
    for (crt, key) in [
        ("ca.crt", "ca.key"),
        ("apiserver.crt", "apiserver.key"),
        ("kubelet.crt", "kubelet.key"),
    ] {
        assert_eq!(
            pubkey(&["x509", "-noout", "-pubkey", "-in", &s(pki(m1, crt))]),
            pubkey(&["pkey", "-pubout", "-in", &s(pki(m1, key))]),
            "{key} does not match {crt}"
        );
    }
    assert_eq!(
        pubkey(&["pkey", "-pubout", "-in", &s(pki(m1, "sa.key"))]),
        std::fs::read_to_string(pki(m1, "sa.pub")).expect("sa.pub"),
        "sa.pub is sa.key's public key"
    );
    for f in &files["master1"] {
        let secret = f.dest().ends_with(".key") || f.dest().ends_with(".conf");
        assert_eq!(f.mode(), if secret { 0o600 } else { 0o644 }, "{}", f.dest());
    }
    // Workers get no control-plane secrets.
    let worker: Vec<&str> = files["worker1"].iter().map(NodeFile::dest).collect();
    assert_eq!(
        worker,
        [
            "/etc/kubernetes/pki/ca.crt",
            "/etc/kubernetes/pki/kubelet.crt",
            "/etc/kubernetes/pki/kubelet.key",
            "/etc/kubernetes/kubelet.conf",
            "/etc/kubernetes/kube-proxy.conf",
        ]
    );

    // Every kubeconfig loads in kubectl and names the right server, user and identity.
    let b64 = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s.trim())
            .expect("base64")
    };
    for (node, file, server, user, cn, o) in [
        (
            "master1",
            "admin.conf",
            "https://lb.kubexm.internal:6443",
            "kubernetes-admin",
            "kubernetes-admin",
            Some("kubeadm:cluster-admins"),
        ),
        (
            "master2",
            "super-admin.conf",
            "https://192.168.50.12:6443",
            "kubernetes-super-admin",
            "kubernetes-super-admin",
            Some("system:masters"),
        ),
        (
            "master3",
            "controller-manager.conf",
            "https://192.168.50.13:6443",
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            None,
        ),
        (
            "master1",
            "scheduler.conf",
            "https://192.168.50.11:6443",
            "system:kube-scheduler",
            "system:kube-scheduler",
            None,
        ),
        (
            "worker2",
            "kubelet.conf",
            "https://lb.kubexm.internal:6443",
            "system:node:worker2",
            "system:node:worker2",
            Some("system:nodes"),
        ),
        (
            "worker1",
            "kube-proxy.conf",
            "https://lb.kubexm.internal:6443",
            "system:kube-proxy",
            "system:kube-proxy",
            None,
        ),
    ] {
        let path = s(roots[node].join("etc/kubernetes").join(file));
        let (ok, raw) = kubectl(&["--kubeconfig", &path, "config", "view", "--raw"]);
        assert!(ok, "{file}: {raw}");
        let get = |jsonpath: &str| {
            let (ok, out) = kubectl(&[
                "--kubeconfig",
                &path,
                "config",
                "view",
                "--raw",
                "-o",
                &format!("jsonpath={jsonpath}"),
            ]);
            assert!(ok, "{file} {jsonpath}: {out}");
            out
        };
        assert_eq!(get("{.clusters[0].cluster.server}"), server, "{file}");
        assert_eq!(get("{.users[0].name}"), user, "{file}");
        assert_eq!(get("{.current-context}"), format!("{user}@kx"), "{file}");
        assert_eq!(
            b64(&get("{.clusters[0].cluster.certificate-authority-data}")),
            std::fs::read(pki(m1, "ca.crt")).expect("ca"),
            "{file}: embedded CA"
        );
        let client = b64(&get("{.users[0].user.client-certificate-data}"));
        let c = parse_cert(&client);
        assert_eq!(c.cn, cn, "{file}");
        assert_eq!(
            c.o,
            o.map(String::from).into_iter().collect::<Vec<_>>(),
            "{file}"
        );
        assert!(c.client, "{file}: client auth");
        let leaf = work.path().join(format!("{node}-{file}.crt"));
        std::fs::write(&leaf, &client).expect("write");
        let (ok, out) = openssl(&["verify", "-purpose", "sslclient", "-CAfile", &ca, &s(leaf)]);
        assert!(ok, "{file}: {out}");
    }
}

#[test]
fn external_etcd_files_are_the_users_and_a_missing_file_is_named() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = v135_external_etcd_internal_lb(work.path());
    let k = KubexmCluster::new(&ctx).expect("cluster");
    let files =
        certificates(&k, &KeyDir::new(work.path().join("pki"), Keys::Keep)).expect("certificates");
    let find = |dest: &str| {
        files["master2"]
            .iter()
            .find(|f| f.dest() == dest)
            .unwrap_or_else(|| panic!("{dest} missing"))
    };
    let etcd = work.path().join("ext-etcd");
    assert_eq!(
        find("/etc/kubernetes/pki/etcd/ca.crt").content(),
        std::fs::read(etcd.join("ext-ca.crt")).expect("ca")
    );
    assert_eq!(
        find("/etc/kubernetes/pki/apiserver-etcd-client.key").mode(),
        0o600
    );
    assert!(files["worker1"].iter().all(|f| !f.dest().contains("etcd")));
    // The API server certificate carries the extra SANs and the custom domain.
    let api = parse_cert(find("/etc/kubernetes/pki/apiserver.crt").content());
    for san in [
        "DNS:api.corp.example",
        "IP:203.0.113.10",
        "DNS:kubernetes.default.svc.corp.example",
        "IP:10.96.0.1",
    ] {
        assert!(api.sans.contains(san), "{san}: {:?}", api.sans);
    }

    std::fs::remove_file(etcd.join("client.key")).expect("rm");
    let err = certificates(&k, &KeyDir::new(work.path().join("pki"), Keys::Keep))
        .expect_err("missing key")
        .to_string();
    assert!(
        err.contains("spec.etcd.keyFile: cannot read") && err.contains("client.key"),
        "{err}"
    );
}

/// `openssl s_server` killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn kubectl_with_our_kubeconfig_talks_tls_to_a_server_with_our_apiserver_certificate() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = v131_kubexm_etcd_external_lb(work.path());
    let k = KubexmCluster::new(&ctx).expect("cluster");
    let files =
        certificates(&k, &KeyDir::new(work.path().join("pki"), Keys::Keep)).expect("certificates");
    let roots = write_node_files(&work.path().join("nodes"), &files);
    let m1 = &roots["master1"];
    let p = |f: &str| m1.join("etc/kubernetes").join(f).display().to_string();

    // STAND-IN for kube-apiserver: openssl s_server with our serving certificate, requiring a
    // client certificate signed by the cluster CA.
    let port = free_port();
    let server = Server(
        Command::new("openssl")
            .args([
                "s_server",
                "-accept",
                &format!("127.0.0.1:{port}"),
                "-www",
                "-quiet",
            ])
            .args([
                "-cert",
                &p("pki/apiserver.crt"),
                "-key",
                &p("pki/apiserver.key"),
            ])
            .args([
                "-CAfile",
                &p("pki/ca.crt"),
                "-Verify",
                "1",
                "-verify_return_error",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "s_server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The certificate names 127.0.0.1 and localhost; kubectl checks it against the embedded CA
    // and presents the embedded client certificate.
    for host in ["127.0.0.1", "localhost"] {
        for conf in ["admin.conf", "kubelet.conf", "controller-manager.conf"] {
            let (ok, out) = kubectl(&[
                "--kubeconfig",
                &p(conf),
                "--server",
                &format!("https://{host}:{port}"),
                "--request-timeout=10s",
                "get",
                "--raw",
                "/",
            ]);
            assert!(ok, "{conf} via {host}: {out}");
            assert!(out.contains("s_server"), "{out}");
        }
    }
    // A kubeconfig of another cluster (another CA) does not trust this server.
    let other = tempfile::tempdir().expect("tempdir");
    let other_files = certificates(&k, &KeyDir::new(other.path().join("pki"), Keys::Keep))
        .expect("other certificates");
    let other_roots = write_node_files(&other.path().join("nodes"), &other_files);
    let foreign = other_roots["master1"]
        .join("etc/kubernetes/admin.conf")
        .display()
        .to_string();
    let (ok, out) = kubectl(&[
        "--kubeconfig",
        &foreign,
        "--server",
        &format!("https://127.0.0.1:{port}"),
        "--request-timeout=10s",
        "get",
        "--raw",
        "/",
    ]);
    assert!(!ok, "a foreign CA must not accept the server: {out}");
    assert!(out.contains("certificate"), "{out}");
    // And the server refuses a client certificate of another CA (curl skips server checks).
    let other_pki = other_roots["master1"].join("etc/kubernetes/pki");
    let curl = |cert: &Path, key: &Path| {
        Command::new("curl")
            .args(["-sk", "--max-time", "10", "-o", "/dev/null", "--cert"])
            .arg(cert)
            .arg("--key")
            .arg(key)
            .arg(format!("https://127.0.0.1:{port}/"))
            .status()
            .expect("curl")
            .success()
    };
    assert!(!curl(
        &other_pki.join("apiserver-kubelet-client.crt"),
        &other_pki.join("apiserver-kubelet-client.key")
    ));
    let own = m1.join("etc/kubernetes/pki");
    assert!(curl(
        &own.join("apiserver-kubelet-client.crt"),
        &own.join("apiserver-kubelet-client.key")
    ));
    drop(server);
}

struct OneTask(Mutex<Vec<Task>>);

impl Module for OneTask {
    fn name(&self) -> &str {
        "kubexm-certs"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(std::mem::take(&mut *self.0.lock().expect("lock")))
    }
}

/// Runs the certificate step for master1 through the engine on this machine, with the layout
/// under `root` and the control-host PKI in `pki`.
async fn run_certificates(
    ctx: &Arc<InstallContext>,
    root: &Path,
    pki: &Path,
    work: &Path,
) -> RunReport {
    let layout = Layout {
        kube_dir: root.join("etc/kubernetes").display().to_string(),
        bin_dir: root.join("bin").display().to_string(),
        unit_dir: root.join("units").display().to_string(),
        kubelet_dir: root.join("var/lib/kubelet").display().to_string(),
    };
    let k = KubexmCluster::with_layout(ctx, layout.clone()).expect("cluster");
    let files = certificates(&k, &KeyDir::new(pki, Keys::Keep)).expect("certificates");
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![Box::new(OneTask(Mutex::new(vec![Task::new(
            "kubernetes-certificates",
            ["master1"],
        )
        .step(KubernetesCertificates {
            layout,
            files,
            restart: true,
        })])))],
    };
    let node = ctx.node("master1").expect("master1").clone();
    let runner: Arc<dyn Runner> = Arc::new(LocalRunner::new("master1"));
    let journal = Arc::new(Journal::create(work, "test", vec![]).expect("journal"));
    let exec = Executor::new(
        vec![(node, runner)],
        journal,
        ExecOptions {
            concurrency: 1,
            resume: false,
            state_path: work.join("state.json"),
        },
    );
    exec.run(&pipeline).await.expect("run")
}

#[tokio::test]
async fn the_certificate_step_is_idempotent_and_a_new_san_reissues_only_the_api_server_certificate()
{
    let work = tempfile::tempdir().expect("tempdir");
    let root = work.path().join("node");
    let pki = work.path().join("pki");
    let ctx = v131_kubexm_etcd_external_lb(work.path());
    let first = run_certificates(&ctx, &root, &pki, work.path()).await;
    assert_eq!(first.steps_changed, 1, "{first:?}");
    let kube = root.join("etc/kubernetes");
    let read = |f: &str| std::fs::read(kube.join(f)).expect(f);
    let (ca, api) = (read("pki/ca.crt"), read("pki/apiserver.crt"));
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |f: &str| {
            std::fs::metadata(kube.join(f))
                .expect(f)
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("pki"), 0o700);
        assert_eq!(mode("pki/ca.key"), 0o600);
        assert_eq!(mode("admin.conf"), 0o600);
        assert_eq!(mode("pki/ca.crt"), 0o644);
    }
    let admin = kube.join("admin.conf").display().to_string();
    let (ok, out) = kubectl(&[
        "--kubeconfig",
        &admin,
        "config",
        "view",
        "--raw",
        "-o",
        "jsonpath={.users[0].name}",
    ]);
    assert!(ok && out == "kubernetes-admin", "{out}");
    let (ok, out) = openssl(&[
        "verify",
        "-CAfile",
        &kube.join("pki/ca.crt").display().to_string(),
        &kube.join("pki/apiserver.crt").display().to_string(),
    ]);
    assert!(ok, "{out}");

    // Again: the same CA and certificates are reused, so nothing changes on the node.
    let second = run_certificates(&ctx, &root, &pki, work.path()).await;
    assert_eq!(
        second,
        RunReport {
            tasks_run: 1,
            steps_unchanged: 1,
            ..RunReport::default()
        }
    );

    // A new SAN: the API server certificate is re-issued, the CA is kept.
    let edited = context(work.path(), |t| {
        t.edit(
            "version: v1.31.13",
            "version: v1.31.13\n    apiserverCertExtraSans: [api.example.org]",
        )
    });
    let third = run_certificates(&edited, &root, &pki, work.path()).await;
    assert_eq!(third.steps_changed, 1, "{third:?}");
    assert_eq!(read("pki/ca.crt"), ca);
    assert_ne!(read("pki/apiserver.crt"), api);
    assert!(parse_cert(&read("pki/apiserver.crt"))
        .sans
        .contains("DNS:api.example.org"));
    assert!(
        !kube.join("pki/apiserver.crt.kubexm-orig").exists(),
        "no rollback backups are left once the task succeeded"
    );
}

#[test]
fn plan_of_a_three_master_two_worker_kubexm_cluster() {
    let out = crate::plan_cli::plan(&[
        "-f",
        &fixture("cluster.yaml").display().to_string(),
        "--catalog",
        &fixture("catalog-stand-in.yaml").display().to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let modules: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            l.split_once("] module ")
                .map(|(_, m)| m.split(' ').next().unwrap_or(m))
        })
        .collect();
    let at = |m: &str| {
        modules
            .iter()
            .position(|x| *x == m)
            .unwrap_or_else(|| panic!("{m} not in {modules:?}"))
    };
    assert!(at("runtime") < at("kubexm-certs"));
    assert!(at("kubexm-certs") < at("kubexm-control-plane"));
    assert!(at("kubexm-control-plane") < at("kubexm-nodes"));
    assert!(at("kubexm-nodes") < at("coredns"));
    for want in [
        "task kubernetes-certificates on master1,master2,master3,worker1,worker2 (parallel)",
        "task control-plane-binaries on master1,master2,master3 (parallel)",
        // One master at a time, each answering /readyz before the next changes.
        "task install-control-plane on master1,master2,master3 (one at a time)",
        "task install-node-services on master1,master2,master3,worker1,worker2 (parallel)",
        "-> /etc/kubernetes/pki/ca.key (600)",
        "files/kube-apiserver/v1.31.13/amd64/kube-apiserver -> /var/lib/kubexm/artifacts/kube-apiserver/v1.31.13/kube-apiserver (755)",
        "copy     /var/lib/kubexm/artifacts/kubectl/v1.31.13/kubectl -> /usr/local/bin/kubectl (755)",
        "systemctl enable --now kube-apiserver",
        "get --raw=/readyz",
        // The admin kubeconfig on the control host, as on the kubeadm path.
        "fetch    /etc/kubernetes/admin.conf -> control host WORK/pki/kx/admin.conf (600)",
        "apply -f /etc/kubernetes/addons/coredns.yaml",
        "label node worker2 --overwrite disk=ssd node-role.kubernetes.io/worker=",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
    // No private key material in the plan.
    assert!(!text.contains("PRIVATE KEY"), "a key leaked into the plan");
    insta::assert_snapshot!(crate::plan_cli::without_generated_keys(&text));
}

#[test]
fn the_kubexm_modules_are_skipped_for_kubeadm_and_deleted_before_the_runtime() {
    let work = tempfile::tempdir().expect("tempdir");
    let kubeadm = context(work.path(), |t| {
        t.edit("type: kubexm\n    version", "type: kubeadm\n    version")
    });
    let p = plan::build(
        &install_pipeline(&kubeadm),
        &kubeadm.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    for name in [
        "kubexm-certs",
        "kubexm-control-plane",
        "kubexm-nodes",
        "coredns",
    ] {
        let m = p.modules.iter().find(|m| m.name == name).expect(name);
        let reason = m.skipped.as_deref().expect("skipped");
        assert!(reason.contains("kubernetes.type is kubeadm"), "{reason}");
    }

    let ctx = v131_kubexm_etcd_external_lb(work.path());
    let p = plan::build(
        &delete_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("delete plan");
    let names: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names[..7],
        [
            "delete-preflight",
            "delete-timers",
            "delete-finalize",
            "delete-kubexm",
            "delete-kubeadm",
            "delete-kata",
            "delete-runtime"
        ]
    );
    let m = &p.modules[3];
    assert!(m.skipped.is_none());
    assert_eq!(
        m.tasks[0].hosts,
        ["master1", "master2", "master3", "worker1", "worker2"]
    );
    let text = p.to_text();
    for want in [
        "systemctl disable --now kube-apiserver",
        "/usr/local/bin/crictl --runtime-endpoint unix:///run/containerd/containerd.sock rmp -a -f",
        "/usr/local/bin/kube-proxy --cleanup",
        // The pod network's traces go on this path too (one shared op).
        "ip netns delete \"${n##*/}\"",
        "for i in cni0 flannel.1",
        "umount -l",
        "rm -rf -- /var/lib/kubelet /var/log/pods /var/log/containers",
        "/etc/kubernetes/admin.conf",
        // KubeXM's applied manifests and addons too (left behind once, found on real nodes).
        "rm -rf -- /etc/kubernetes/pki /etc/kubernetes/kubexm /var/lib/kubexm/artifacts/kube-apiserver",
        "/etc/systemd/system/kubelet.service",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
}

/// `loadBalancer.mode: internal` on the binary path: haproxy/nginx → workers that are not
/// masters run the local API proxy (static pod) and their kubelet and kube-proxy kubeconfigs
/// point at it; kube-vip → its static pod on every master before their kubelets start.
#[test]
fn the_internal_load_balancer_serves_the_binary_path_too() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = v135_external_etcd_internal_lb(work.path());
    let files = all_rendered(&ctx);
    let f = |node: &str, dest: &str| file_of(&files, node, dest);
    let server = |node: &str, file: &str| {
        yaml(&f(node, &format!("/etc/kubernetes/{file}")))["clusters"][0]["cluster"]["server"]
            .as_str()
            .map(str::to_string)
    };
    for file in ["kubelet.conf", "kube-proxy.conf"] {
        assert_eq!(
            server("worker1", file).as_deref(),
            Some("https://127.0.0.1:6443"),
            "{file} on a worker goes through the local proxy"
        );
        assert_eq!(
            server("master1", file).as_deref(),
            Some("https://192.168.50.11:6443"),
            "{file} on a master talks to its own API server (issue 13 item 6: no master depends on the first)"
        );
        // Every master, not only the first: each its own address.
        for m in ctx
            .nodes
            .iter()
            .filter(|n| n.has_role(kubexm_manifests::resolve::Role::Master))
        {
            assert_eq!(
                server(&m.name, file),
                Some(format!("https://{}:6443", m.internal_address)),
                "{file} on {}",
                m.name
            );
        }
        assert_eq!(
            server("worker2", file).as_deref(),
            Some("https://127.0.0.1:6443"),
            "{file} on worker2"
        );
    }
    let p = plan::build(
        &install_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    let text = p.to_text();
    let services = text
        .find("task install-node-services")
        .expect("node services");
    let proxy = text
        .find("task local-api-proxy on worker1,worker2")
        .expect("local proxy task on the workers only");
    let register = text.find("task register-nodes").expect("register");
    assert!(services < proxy && proxy < register, "{text}");
    assert!(text.contains("/etc/kubernetes/manifests/kube-lb.yaml"));
    assert!(!text.contains("kube-vip.yaml"));

    let vip = context(work.path(), |t| {
        t.edit("    loadbalancer: [\"master[1:3]\"]\n", "").edit(
            "    mode: external\n    external:\n      type: kubexm-kh\n",
            "    mode: internal\n    internal:\n      type: kube-vip\n",
        )
    });
    let p = plan::build(
        &install_pipeline(&vip),
        &vip.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    let text = p.to_text();
    let kube_vip = text
        .find("task kube-vip on master1,master2,master3")
        .expect("kube-vip on the masters");
    let services = text
        .find("task install-node-services")
        .expect("node services");
    assert!(kube_vip < services, "{text}");
    assert!(text.contains("-> /etc/kubernetes/manifests/kube-vip.yaml"));
    assert!(!text.contains("task local-api-proxy"));

    // Delete removes both static pods.
    let d = plan::build(
        &delete_pipeline(&vip),
        &vip.plan_nodes(),
        &Default::default(),
    )
    .expect("delete plan")
    .to_text();
    assert!(d.contains("/etc/kubernetes/manifests/kube-vip.yaml"), "{d}");
    assert!(d.contains("/etc/kubernetes/manifests/kube-lb.yaml"), "{d}");
}
