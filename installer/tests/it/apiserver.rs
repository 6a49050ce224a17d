//! Rendered manifests checked by a real API server: Debian's `etcd` and the lab's Kubernetes
//! v1.20.2 `kube-apiserver` (built from Debian's source, `tests/lab/kubernetes/build-kubernetes`)
//! on loopback, then `kubectl apply --server-side --dry-run=server` of every object, with the
//! Namespaces and CRDs applied for real first (objects in them need them to exist). The server
//! checks each object against its schema (and the CRDs' own schemas): what the install applies
//! would be accepted. Nothing is scheduled: no controller-manager, scheduler or kubelet runs.
//!
//! Skipped, with a message naming what is missing, when the binaries are absent: `etcd` on the
//! PATH (or `KUBEXM_TEST_ETCD`) and `kube-apiserver` + `kubectl` in `KUBEXM_TEST_K8S_BIN` or the
//! lab's cache (`$KUBEXM_LAB_ROOT/cache/kubernetes-*/bin`, default root `/var/tmp/kubexm-lab`).
//! Without them the tests are skipped, unless `KUBEXM_TEST_REQUIRE_APISERVER` is set (`tests/run-all`
//! sets it once the lab has built Kubernetes: `tests/lab/kubernetes/validate-manifests`).

use crate::common::free_port;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binaries the test needs, or why it is skipped.
struct Binaries {
    etcd: PathBuf,
    apiserver: PathBuf,
    kubectl: PathBuf,
}

fn find_binaries() -> Result<Binaries, String> {
    let etcd = std::env::var_os("KUBEXM_TEST_ETCD")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH").and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("etcd"))
                    .find(|f| f.is_file())
            })
        })
        .ok_or(
            "no etcd on the PATH (Debian: apt-get install etcd-server) or in KUBEXM_TEST_ETCD",
        )?;
    let dir = match std::env::var_os("KUBEXM_TEST_K8S_BIN") {
        Some(d) => PathBuf::from(d),
        None => {
            let root = std::env::var_os("KUBEXM_LAB_ROOT")
                .map_or_else(|| PathBuf::from("/var/tmp/kubexm-lab"), PathBuf::from);
            let cache = root.join("cache");
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(&cache)
                .map_err(|_| {
                    format!(
                        "no lab cache at {} (tests/lab/kubernetes/build-kubernetes builds kube-apiserver there), and KUBEXM_TEST_K8S_BIN is unset",
                        cache.display()
                    )
                })?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        // The real build, not a relinked STAND-IN of another version
                        // (build-kubernetes-standin's kubernetes-standin-*).
                        .is_some_and(|n| {
                            n.starts_with("kubernetes-") && !n.starts_with("kubernetes-standin-")
                        })
                        && p.join("bin/kube-apiserver").is_file()
                        && p.join("bin/kubectl").is_file()
                })
                .collect();
            dirs.sort();
            dirs.pop().map(|d| d.join("bin")).ok_or_else(|| {
                format!("no kubernetes-*/bin/kube-apiserver in {}", cache.display())
            })?
        }
    };
    let (apiserver, kubectl) = (dir.join("kube-apiserver"), dir.join("kubectl"));
    if !apiserver.is_file() || !kubectl.is_file() {
        return Err(format!(
            "no kube-apiserver and kubectl in {}",
            dir.display()
        ));
    }
    Ok(Binaries {
        etcd,
        apiserver,
        kubectl,
    })
}

/// A child process killed (and reaped) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// etcd and kube-apiserver on loopback, and a kubeconfig for them.
pub(crate) struct ApiServer {
    kubectl: PathBuf,
    kubeconfig: PathBuf,
    // Dropped in this order: the API server before its etcd, the directory last.
    _apiserver: Running,
    _etcd: Running,
    _dir: tempfile::TempDir,
}

impl ApiServer {
    /// Started and ready (`/readyz`), or why not; `Ok(None)` when the binaries are absent.
    pub(crate) fn start() -> Result<Option<Self>, String> {
        let bins = match find_binaries() {
            Ok(b) => b,
            Err(why) if std::env::var_os("KUBEXM_TEST_REQUIRE_APISERVER").is_some() => {
                return Err(format!(
                    "KUBEXM_TEST_REQUIRE_APISERVER is set but there is no API server to validate against: {why}"
                ));
            }
            Err(why) => {
                eprintln!("SKIPPED: no API server to validate against: {why}");
                return Ok(None);
            }
        };
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (client, peer, secure) = (free_port(), free_port(), free_port());
        let log = |name: &str| {
            std::fs::File::create(dir.path().join(name))
                .map(Stdio::from)
                .map_err(|e| e.to_string())
        };
        let etcd = Command::new(&bins.etcd)
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().join("etcd").display()))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=test=http://127.0.0.1:{peer}"))
            .stdout(log("etcd.log")?)
            .stderr(log("etcd.err")?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bins.etcd.display()))?;
        let etcd = Running(etcd);
        let token = "kubexm-test-token";
        std::fs::write(
            dir.path().join("tokens.csv"),
            format!("{token},kubexm-test,kubexm-test,\"system:masters\"\n"),
        )
        .map_err(|e| e.to_string())?;
        let certs = dir.path().join("certs");
        // Service account tokens: v1.20 requires an issuer and a signing key (ECDSA P-256 here).
        let sa_key = dir.path().join("sa.key");
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        std::fs::write(&sa_key, key.serialize_pem()).map_err(|e| e.to_string())?;
        let sa_pub = dir.path().join("sa.pub");
        std::fs::write(&sa_pub, key.public_key_pem()).map_err(|e| e.to_string())?;
        let apiserver = Command::new(&bins.apiserver)
            .arg(format!("--etcd-servers=http://127.0.0.1:{client}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={secure}"))
            .arg(format!("--cert-dir={}", certs.display()))
            .arg(format!(
                "--token-auth-file={}",
                dir.path().join("tokens.csv").display()
            ))
            .arg("--authorization-mode=RBAC")
            // As kubeadm's and KubeXM's API servers (CNI and node agents run privileged).
            .arg("--allow-privileged=true")
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg(format!(
                "--service-account-signing-key-file={}",
                sa_key.display()
            ))
            .arg(format!("--service-account-key-file={}", sa_pub.display()))
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            // No kubernetes Service endpoints for a loopback address.
            .arg("--endpoint-reconciler-type=none")
            .stdout(log("apiserver.log")?)
            .stderr(log("apiserver.err")?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bins.apiserver.display()))?;
        let apiserver = Running(apiserver);
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {{server: 'https://127.0.0.1:{secure}', insecure-skip-tls-verify: true}}\nusers:\n- name: t\n  user: {{token: {token}}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: t}}\ncurrent-context: t\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        let mut server = Self {
            kubectl: bins.kubectl,
            kubeconfig,
            _apiserver: apiserver,
            _etcd: etcd,
            _dir: dir,
        };
        // Ready within two minutes (the first start writes its certificates and bootstrap
        // objects; the machine may be busy).
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = server.kubectl(&["get", "--raw", "/readyz"], None)?;
            if out.0 {
                break;
            }
            let exited = server._apiserver.0.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let err = std::fs::read_to_string(server._dir.path().join("apiserver.err"))
                    .unwrap_or_default();
                let tail: String = err.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                return Err(format!(
                    "kube-apiserver not ready ({}): {}\n(last lines, newest first)\n{tail}",
                    exited.map_or_else(|| "120 s".to_string(), |s| format!("exited: {s}")),
                    out.1
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        // The kube-system namespace and the system PriorityClasses are made by the server's
        // own bootstrap, shortly after /readyz.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !server
            .kubectl(
                &[
                    "get",
                    "namespace/kube-system",
                    "priorityclass/system-node-critical",
                ],
                None,
            )?
            .0
        {
            if Instant::now() > deadline {
                return Err("kube-system or system-node-critical missing after 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(Some(server))
    }

    /// `kubectl ARGS` (stdin: `input`): (success, stdout + stderr).
    fn kubectl(&self, args: &[&str], input: Option<&str>) -> Result<(bool, String), String> {
        let mut child = Command::new(&self.kubectl)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg("--request-timeout=30s")
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.kubectl.display()))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            use std::io::Write;
            stdin
                .write_all(text.as_bytes())
                .map_err(|e| e.to_string())?;
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        Ok((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    }

    /// [`Self::validate`], and every object of `manifest` accepted (one line per object, each
    /// "serverside-applied (server dry run)"); the server's answer.
    pub(crate) fn accepts_every_object(&self, name: &str, manifest: &str) -> String {
        let out = self
            .validate(name, manifest)
            .unwrap_or_else(|e| panic!("{e}"));
        let objects = crate::kubeadm::yaml_docs(manifest).len();
        let accepted = out.matches("(server dry run)").count();
        assert_eq!(accepted, objects, "{name}: {out}");
        out
    }

    /// Applies the Namespaces and CRDs of `manifest` for real, then every object with
    /// `--dry-run=server` (the install's own flags); the server's answer on failure.
    pub(crate) fn validate(&self, name: &str, manifest: &str) -> Result<String, String> {
        let docs = crate::kubeadm::yaml_docs(manifest);
        let real: Vec<String> = docs
            .iter()
            .filter(|d| d["kind"] == "Namespace" || d["kind"] == "CustomResourceDefinition")
            .map(|d| serde_json::to_string(d).expect("JSON"))
            .collect();
        let apply = [
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=kubexm",
            "-f",
            "-",
        ];
        for doc in &real {
            let (ok, out) = self.kubectl(&apply, Some(doc))?;
            if !ok {
                return Err(format!("{name}: applying {doc} failed: {out}"));
            }
            if doc.contains("\"CustomResourceDefinition\"") {
                let crd = serde_json::from_str::<serde_json::Value>(doc).expect("JSON");
                let crd = format!("crd/{}", crd["metadata"]["name"].as_str().unwrap_or(""));
                let (ok, out) = self.kubectl(
                    &["wait", "--for=condition=Established", &crd, "--timeout=60s"],
                    None,
                )?;
                if !ok {
                    return Err(format!("{name}: {crd} not established: {out}"));
                }
            }
        }
        let mut args = apply.to_vec();
        args.push("--dry-run=server");
        let (ok, out) = self.kubectl(&args, Some(manifest))?;
        if ok {
            Ok(out)
        } else {
            Err(format!("{name}: the server refused it:\n{out}"))
        }
    }
}

/// Every object the install applies for multus (over flannel), Kata Containers and Node
/// Feature Discovery, and the NodeLocal DNSCache manifest, is accepted by a real v1.20.2 API
/// server.
#[test]
fn rendered_plugin_manifests_are_accepted_by_a_real_api_server() {
    let server = match ApiServer::start() {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => panic!("{e}"),
    };
    let ctx = crate::plugins::lab_with_everything();
    let manifests = [
        (
            "multus",
            kubexm_install::modules::network::render_multus(&ctx).expect("multus"),
        ),
        (
            "kata",
            kubexm_install::modules::plugins::render_kata(&ctx).expect("kata"),
        ),
        (
            "node-feature-discovery",
            kubexm_install::modules::plugins::render_nfd(&ctx).expect("nfd"),
        ),
        (
            "nodelocaldns",
            kubexm_install::modules::dns::render(&ctx).expect("nodelocaldns"),
        ),
    ];
    for (name, text) in &manifests {
        server.accepts_every_object(name, text);
    }
    // And the server does refuse what is wrong (the check is not vacuous).
    let broken = manifests[2].1.replace("replicas: 1", "replicas: one");
    let err = server
        .validate("broken", &broken)
        .expect_err("a Deployment with replicas: one is refused");
    assert!(err.contains("replicas"), "{err}");
}

/// The storage manifests (issue 19: nfs-subdir-external-provisioner with its StorageClass
/// `nfs-client`, OpenEBS local PV with its StorageClass `local`) are accepted by the real
/// v1.20.2 API server: RBAC, Deployments and StorageClasses, both with NFS the default and with
/// local volumes the default. No NFS runs here (this kernel has none): the objects are checked,
/// not run.
#[test]
fn rendered_storage_manifests_are_accepted_by_a_real_api_server() {
    let server = match ApiServer::start() {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => panic!("{e}"),
    };
    use kubexm_install::modules::storage::{render_local_volume, render_nfs_provisioner};
    let both = crate::storage::lab_with_both();
    let local = crate::storage::lab_with_local_default();
    let manifests = [
        (
            "nfs-provisioner",
            render_nfs_provisioner(&both).expect("nfs"),
        ),
        (
            "local-volume (not the default)",
            render_local_volume(&both).expect("local"),
        ),
        (
            "local-volume (the default)",
            render_local_volume(&local).expect("local"),
        ),
    ];
    for (name, text) in &manifests {
        let out = server.accepts_every_object(name, text);
        for kind in [
            "storageclass.storage.k8s.io/",
            "deployment.apps/",
            "clusterrole.",
        ] {
            assert!(out.contains(kind), "{name}: no {kind} in {out}");
        }
    }
    // A StorageClass with a field of the wrong type is refused (the check is not vacuous).
    let broken = manifests[0]
        .1
        .replace("allowVolumeExpansion: true", "allowVolumeExpansion: always");
    let err = server
        .validate("broken", &broken)
        .expect_err("allowVolumeExpansion: always is refused");
    assert!(err.contains("allowVolumeExpansion"), "{err}");
}
