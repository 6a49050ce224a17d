//! The etcd module: rendered configuration and unit (snapshots), the module's plan for the lab
//! cluster, and a REAL 3-member TLS etcd cluster (Debian's etcd 3.4 on 127.0.0.1/2/3) started
//! from our rendered configuration and our certificates.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubexm_install::context::load_context;
use kubexm_install::modules::etcd::{certificates, EtcdLayout, Member};
use kubexm_install::pipeline::plan;
use kubexm_install::pipelines::install_pipeline;
use kubexm_install::pki::{KeyDir, Keys};

fn three_members(prefix: &str) -> Vec<Member> {
    (1..=3)
        .map(|i| Member {
            name: format!("node{i}"),
            address: format!("{prefix}{i}"),
        })
        .collect()
}

#[test]
fn rendered_config_and_unit_of_a_three_member_cluster() {
    let layout = EtcdLayout::new("lab", three_members("10.88.10.1"));
    let config = layout.render_config("node2").expect("config");
    assert!(config.contains(
        "initial-cluster: \"node1=https://10.88.10.11:2380,node2=https://10.88.10.12:2380,node3=https://10.88.10.13:2380\""
    ));
    insta::assert_snapshot!("etcd_conf_node2", config);
    insta::assert_snapshot!(
        "etcd_service_amd64",
        layout.render_unit("amd64").expect("unit")
    );
    let arm = layout.render_unit("arm64").expect("unit");
    assert!(
        arm.contains("Environment=ETCD_UNSUPPORTED_ARCH=arm64"),
        "{arm}"
    );
    assert!(layout.render_config("node9").is_err(), "not a member");
}

fn lab_cluster() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab/cluster.yaml")
}

fn lab_catalog() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab/mirror/catalog-lab.yaml")
}

#[test]
fn the_lab_plan_has_certificates_install_and_health_and_reuses_the_pki() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = Arc::new(
        load_context(&lab_cluster(), Some(&lab_catalog()), None, work.path()).expect("context"),
    );
    let build = || {
        plan::build(
            &install_pipeline(&ctx),
            &ctx.plan_nodes(),
            &Default::default(),
        )
        .expect("plan")
    };
    let p = build();
    let etcd = p
        .modules
        .iter()
        .find(|m| m.name == "etcd")
        .expect("etcd module");
    assert!(etcd.skipped.is_none());
    let tasks: Vec<(&str, Vec<String>)> = etcd
        .tasks
        .iter()
        .map(|t| (t.name.as_str(), t.hosts.clone()))
        .collect();
    let all: Vec<String> = ["node1", "node2", "node3"].map(String::from).to_vec();
    assert_eq!(
        tasks,
        [
            ("etcd-certificates", all.clone()),
            ("install-etcd", all.clone()),
            ("etcd-health", vec!["node1".to_string()]),
        ]
    );
    let install = &etcd.tasks[1];
    assert!(install.parallel, "members must start together");
    let steps: Vec<&str> = install.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(steps, ["etcd-binaries", "etcd-config", "start-etcd"]);
    let start = &install.steps[2].groups[0].ops[0].detail;
    assert!(start.contains("systemctl start --no-block etcd"), "{start}");
    let text = p.to_text();
    for want in [
        "/etc/ssl/etcd/ssl/member-node2-key.pem (600)",
        "/etc/ssl/etcd/ssl/node-node3.pem (644)",
        "etcd-v3.4.23-linux-amd64/etcdctl -> /usr/local/bin/etcdctl (755)",
        "endpoint health --cluster",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
    // A second plan reuses the CA and certificates: the same uploads. Planning writes nothing:
    // they are held in the context's memory, not in the work directory.
    assert_eq!(build().to_text(), text);
    assert!(!work.path().join("pki").exists());
    // An executing context keeps them, and a second one reuses them.
    let keep = |work: &std::path::Path| {
        let ctx = Arc::new(
            load_context(&lab_cluster(), Some(&lab_catalog()), None, work)
                .expect("context")
                .for_execution(),
        );
        plan::build(
            &install_pipeline(&ctx),
            &ctx.plan_nodes(),
            &Default::default(),
        )
        .expect("plan")
        .to_text()
    };
    let first = keep(work.path());
    assert!(work.path().join("pki/lab/etcd/etcd-ca.key").exists());
    assert_eq!(keep(work.path()), first);
}

#[test]
fn the_module_is_skipped_for_other_etcd_types() {
    let work = tempfile::tempdir().expect("tempdir");
    let yaml = std::fs::read_to_string(lab_cluster()).expect("lab cluster");
    let yaml = yaml.replace("type: kubexm\n    version: v3.4.23", "type: kubeadm");
    let yaml = yaml.replace("etcd: [\"node[1:3]\"]", "etcd: []");
    let file = work.path().join("cluster.yaml");
    std::fs::write(&file, yaml).expect("write");
    let ctx = Arc::new(load_context(&file, Some(&lab_catalog()), None, work.path()).expect("ctx"));
    let p = plan::build(
        &install_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Default::default(),
    )
    .expect("plan");
    let etcd = p.modules.iter().find(|m| m.name == "etcd").expect("etcd");
    let reason = etcd.skipped.as_deref().expect("skipped");
    assert!(reason.contains("kubeadm"), "{reason}");
}

/// A running etcd, killed when dropped.
struct Etcd(Child);

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port free on 127.0.0.1, .2 and .3.
fn free_port(taken: &[u16]) -> u16 {
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        if taken.contains(&port) {
            continue;
        }
        if (1..=3)
            .all(|i| TcpListener::bind(("127.0.0.".to_string() + &i.to_string(), port)).is_ok())
        {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1-3");
}

fn which(bin: &str) -> PathBuf {
    for dir in ["/usr/local/bin", "/usr/bin", "/bin"] {
        let p = Path::new(dir).join(bin);
        if p.exists() {
            return p;
        }
    }
    panic!("{bin} is not installed: apt-get install etcd-server etcd-client (tests/run-all does)");
}

fn sh(script: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .expect("sh")
}

#[test]
fn a_real_three_member_tls_cluster_from_our_config_and_certificates() {
    let etcd_bin = which("etcd");
    let etcdctl = which("etcdctl");
    let tmp = tempfile::tempdir().expect("tempdir");
    let client = free_port(&[]);
    let peer = free_port(&[client]);
    let metrics = free_port(&[client, peer]);

    let mut layout = EtcdLayout::new("it", three_members("127.0.0."));
    layout.client_port = client;
    layout.peer_port = peer;
    layout.metrics_port = metrics;
    layout.cert_dir = tmp.path().join("ssl").display().to_string();
    layout.bin_dir = etcdctl.parent().expect("dir").display().to_string();

    let files = certificates(
        &layout,
        &[],
        &KeyDir::new(tmp.path().join("pki"), Keys::Keep),
    )
    .expect("certificates");
    std::fs::create_dir_all(&layout.cert_dir).expect("cert dir");
    for f in files.values().flatten() {
        std::fs::write(Path::new(&layout.cert_dir).join(&f.name), &f.content).expect("cert");
    }

    let mut running = Vec::new();
    for m in &layout.members {
        let mut own = layout.clone();
        own.data_dir = tmp
            .path()
            .join(format!("data-{}", m.name))
            .display()
            .to_string();
        let config = tmp.path().join(format!("{}.yml", m.name));
        std::fs::write(&config, own.render_config(&m.name).expect("render")).expect("config");
        let log = std::fs::File::create(tmp.path().join(format!("{}.log", m.name))).expect("log");
        let child = Command::new(&etcd_bin)
            .arg(format!("--config-file={}", config.display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        running.push(Etcd(child));
    }

    let logs = || {
        let mut s = String::new();
        for m in &layout.members {
            let l = std::fs::read_to_string(tmp.path().join(format!("{}.log", m.name)))
                .unwrap_or_default();
            let tail: Vec<&str> = l.lines().rev().take(15).collect();
            s.push_str(&format!(
                "--- {}\n{}\n",
                m.name,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        s
    };

    // The module's own health check, with the admin certificate.
    let health = layout.health_command("node1");
    let deadline = Instant::now() + Duration::from_secs(60);
    // Early in the bootstrap `endpoint health --cluster` can succeed listing only the members
    // that have published their client URLs: wait until every member answers.
    let all_healthy = |out: &std::process::Output| {
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        out.status.success()
            && layout
                .client_endpoints()
                .iter()
                .all(|ep| said.contains(&format!("{ep} is healthy")))
    };
    loop {
        let out = sh(&health);
        if all_healthy(&out) {
            break;
        }
        for (i, e) in running.iter_mut().enumerate() {
            if let Ok(Some(status)) = e.0.try_wait() {
                panic!("etcd member {} exited with {status}\n{}", i + 1, logs());
            }
        }
        assert!(
            Instant::now() < deadline,
            "cluster not healthy after 60s: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Reads and writes over TLS with the admin certificate.
    let put = sh(&format!("{} put kubexm ok", layout.etcdctl("node2")));
    assert!(put.status.success(), "{put:?}");
    let get = sh(&format!(
        "{} get kubexm --print-value-only",
        layout.etcdctl("node3")
    ));
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "ok", "{get:?}");

    // Without a client certificate the members refuse (client-cert-auth).
    let ca = format!("{}/ca.pem", layout.cert_dir);
    let anonymous = sh(&format!(
        "ETCDCTL_API=3 {} --endpoints={} --cacert={ca} --dial-timeout=3s --command-timeout=5s endpoint health",
        etcdctl.display(),
        layout.client_endpoints().join(",")
    ));
    assert!(
        !anonymous.status.success(),
        "a client without a certificate was accepted: {anonymous:?}"
    );
    // Nor do they accept a certificate from another CA.
    let other = tempfile::tempdir().expect("tempdir");
    let foreign =
        certificates(&layout, &[], &KeyDir::new(other.path(), Keys::Keep)).expect("foreign");
    let admin = &foreign["node1"];
    let find = |n: &str| admin.iter().find(|f| f.name == n).expect(n);
    std::fs::write(other.path().join("a.pem"), &find("admin-node1.pem").content).expect("w");
    std::fs::write(
        other.path().join("a-key.pem"),
        &find("admin-node1-key.pem").content,
    )
    .expect("w");
    let forged = sh(&format!(
        "ETCDCTL_API=3 {} --endpoints={} --cacert={ca} --cert={d}/a.pem --key={d}/a-key.pem --dial-timeout=3s --command-timeout=5s endpoint health",
        etcdctl.display(),
        layout.client_endpoints()[0],
        d = other.path().display()
    ));
    assert!(
        !forged.status.success(),
        "a foreign certificate was accepted: {forged:?}"
    );
    drop(running);
}

#[test]
fn the_delete_module_stops_etcd_and_removes_its_files_and_data() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = Arc::new(
        load_context(&lab_cluster(), Some(&lab_catalog()), None, work.path()).expect("context"),
    );
    let pipeline = kubexm_install::pipeline::Pipeline {
        name: "delete".to_string(),
        modules: vec![Box::new(kubexm_install::modules::etcd::delete_module(&ctx))],
    };
    let text = plan::build(&pipeline, &ctx.plan_nodes(), &Default::default())
        .expect("plan")
        .to_text();
    for want in [
        "task delete-etcd on node1,node2,node3",
        "systemctl disable --now etcd",
        "rm -rf -- /etc/ssl/etcd/ssl /var/lib/etcd",
        "/usr/local/bin/etcdctl",
    ] {
        assert!(text.contains(want), "{want} missing from\n{text}");
    }
}

#[tokio::test]
async fn a_failed_wait_reports_what_its_check_said() {
    use kubexm_install::pipeline::ops::{GenericStep, WaitFor};
    let runner = kubexm_install::runner::local::LocalRunner::new("node1");
    let wait = WaitFor {
        what: "etcd cluster healthy".into(),
        check: "echo 'https://127.0.0.2:2379 is unhealthy: connection refused' >&2; exit 1".into(),
        timeout: Duration::from_millis(600),
        interval: Duration::from_millis(200),
    };
    let err = wait.apply(&runner).await.expect_err("never healthy");
    let msg = err.to_string();
    assert!(
        msg.contains("https://127.0.0.2:2379 is unhealthy: connection refused"),
        "{msg}"
    );
}
