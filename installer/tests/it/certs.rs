//! The certificate inventory (`certs check`) over a real OpenSSH server on loopback: a node root
//! (a temporary directory) holding the files KubeXM and kubeadm leave (PKI, kubeconfigs with
//! embedded certificates, the kubelet's rotated client pair, KubeXM's etcd pairs, keys beside
//! them), read as the inventory reads a node; the keys never leave it. The lab runs it on real
//! Kubernetes v1.20.2 (`tests/lab/kubernetes/install-real`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use kubexm_install::certs::{self, Places, Source};
use kubexm_install::runner::ssh::{SshOptions, SshRunner};
use kubexm_install::runner::Runner;
use kubexm_testkit::Sshd;

fn pair(cn: &str, days: i64, ca: bool) -> (String, String) {
    let mut p = rcgen::CertificateParams::new(vec![format!("{cn}.cluster.local")]).expect("params");
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(days);
    if ca {
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = p.self_signed(&key).expect("cert");
    (cert.pem(), key.serialize_pem())
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(&p, text).expect("write");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inventory_reads_every_kind_of_certificate_and_never_a_key() {
    let sshd = Sshd::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let kh = tmp.path().join("known_hosts");
    sshd.write_known_hosts(&kh);
    let root = tmp.path().join("node");
    let (ca, ca_key) = pair("kubernetes", 3650, true);
    let (api, api_key) = pair("kube-apiserver", 365, false);
    let (admin, admin_key) = pair("kubernetes-admin", 20, false);
    let (kubelet, kubelet_key) = pair("system:node:node1", -2, false);
    let (etcd, etcd_key) = pair("etcd-node1", 100, false);
    write(&root, "etc/kubernetes/pki/ca.crt", &ca);
    write(&root, "etc/kubernetes/pki/ca.key", &ca_key);
    write(&root, "etc/kubernetes/pki/apiserver.crt", &api);
    write(&root, "etc/kubernetes/pki/apiserver.key", &api_key);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    write(
        &root,
        "etc/kubernetes/admin.conf",
        &format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://lb:6443\n  name: k\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&ca),
            b64(&admin),
            b64(&admin_key)
        ),
    );
    // The kubelet's rotated pair: certificate and key in one file.
    write(
        &root,
        "var/lib/kubelet/pki/kubelet-client-current.pem",
        &format!("{kubelet}{kubelet_key}"),
    );
    write(&root, "etc/ssl/etcd/ssl/node-node1.pem", &etcd);
    write(&root, "etc/ssl/etcd/ssl/node-node1-key.pem", &etcd_key);
    write(
        &root,
        "etc/kubernetes/pki/huge.crt",
        &"x".repeat(300 * 1024),
    );

    let mut o = SshOptions::new("node1", sshd.host(), "root", kh);
    o.port = sshd.port();
    o.private_key = Some(sshd.user_key());
    o.connect_timeout = Duration::from_secs(10);
    let runner: Arc<dyn Runner> = Arc::new(SshRunner::connect(o).await.expect("connect"));
    let places = Places {
        root: format!("{}/", root.display()),
    };
    // What crosses the connection holds no key.
    let raw = runner
        .exec(&kubexm_install::runner::Exec::root(places.gather_script()))
        .await
        .expect("exec");
    assert!(raw.success(), "{}", raw.stderr);
    assert!(!raw.stdout.contains("PRIVATE KEY"), "a key left the node");
    assert!(
        !raw.stdout.contains(&b64(&admin_key)),
        "the kubeconfig's key left the node"
    );

    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let mut runners = BTreeMap::new();
    runners.insert("node1".to_string(), runner);
    let mut inv = certs::gather(&runners, &places, now).await;
    inv.sort();
    let found: Vec<(String, Source, i64)> = inv
        .certificates
        .iter()
        .map(|e| {
            (
                e.cert.path.trim_start_matches(&places.root).to_string(),
                e.cert.source,
                e.days_left,
            )
        })
        .collect();
    // Soonest first: the expired kubelet client, the admin client (20 days), etcd, the API server,
    // then the CA twice (file and the kubeconfig's CA data).
    let names: Vec<&str> = found.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(
        names,
        [
            "var/lib/kubelet/pki/kubelet-client-current.pem",
            "etc/kubernetes/admin.conf",
            "etc/ssl/etcd/ssl/node-node1.pem",
            "etc/kubernetes/pki/apiserver.crt",
            "etc/kubernetes/admin.conf",
            "etc/kubernetes/pki/ca.crt",
        ],
        "{found:?}"
    );
    // Whole days, rounded down: expired two days ago (less the test's own seconds) is -3.
    assert!((-3..=-2).contains(&found[0].2), "{found:?}");
    assert!((19..=20).contains(&found[1].2), "{found:?}");
    assert_eq!(found[1].1, Source::KubeconfigClient);
    assert_eq!(found[4].1, Source::KubeconfigCa);
    assert!(inv
        .certificates
        .iter()
        .any(|e| e.cert.is_ca && e.cert.subject == "CN=kubernetes"));
    assert_eq!(inv.under(30).count(), 2);
    assert_eq!(inv.problems.len(), 1, "{:?}", inv.problems);
    assert!(
        inv.problems[0].path.ends_with("pki/huge.crt") && inv.problems[0].reason.contains("larger")
    );
    let text = inv.to_text(90);
    assert!(text.contains(" EXPIRED"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("admin.conf (kubeconfig client)") && l.contains("WARNING")),
        "{text}"
    );
    let json = serde_json::to_value(&inv).expect("json");
    assert!(json["certificates"][0]["days_left"]
        .as_i64()
        .is_some_and(|d| d < 0));
    assert_eq!(json["certificates"][0]["node"], "node1");
    assert_eq!(json["certificates"][1]["source"], "kubeconfig-client");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_node_is_named_not_fatal() {
    struct Down;
    #[async_trait::async_trait]
    impl Runner for Down {
        fn node(&self) -> &str {
            "node9"
        }
        async fn exec(
            &self,
            _: &kubexm_install::runner::Exec,
        ) -> Result<kubexm_install::runner::ExecOutput, kubexm_install::runner::RunError> {
            Err(kubexm_install::runner::RunError::Connection {
                node: "node9".into(),
                message: "connection refused".into(),
            })
        }
        async fn upload(
            &self,
            _: &kubexm_install::runner::Upload,
        ) -> Result<kubexm_install::runner::UploadOutcome, kubexm_install::runner::RunError>
        {
            unreachable!("the inventory uploads nothing")
        }
    }
    let mut runners: BTreeMap<String, Arc<dyn Runner>> = BTreeMap::new();
    runners.insert("node9".into(), Arc::new(Down));
    let inv = certs::gather(&runners, &Places::default(), 0).await;
    assert!(inv.certificates.is_empty());
    assert!(
        inv.unreachable["node9"].contains("connection refused"),
        "{:?}",
        inv.unreachable
    );
}
