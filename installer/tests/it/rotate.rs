//! `rotate-ca --ca etcd` and `--ca front-proxy`: the plan of each phase on both bootstrap
//! paths, what each phase uploads (etcd: trust-both and drop-old the bundle alone, reissue every
//! leaf; front-proxy: the masters' trust bundle, the client certificate from reissue), each
//! phase built twice changing nothing the second time, and the command's refusals.

use std::path::Path;
use std::sync::Arc;

use kubexm_install::context::InstallContext;
use kubexm_install::modules::certs::rotate::{Rotate, RotatedCa};
use kubexm_install::pipeline::plan::{self, Plan};
use kubexm_install::pipelines::rotate::rotate_pipeline;
use kubexm_install::pki::Rotating;
use kubexm_install::rotation::{Files, Phase};

use crate::common::Edit as _;
use crate::day2::cli;
use crate::renew::{kubexm, lab_context, refused_asking_for_yes};

const ID: i64 = 1_700_000_000;

/// The lab cluster (edited), the etcd CA seen as `phase` leaves it.
fn context(
    work: &Path,
    edit: impl Fn(String) -> String,
    phase: Option<Phase>,
) -> Arc<InstallContext> {
    context_of(RotatedCa::Etcd, work, edit, phase)
}

/// The lab cluster (edited), the CA `ca` seen as `phase` leaves it.
fn context_of(
    ca: RotatedCa,
    work: &Path,
    edit: impl Fn(String) -> String,
    phase: Option<Phase>,
) -> Arc<InstallContext> {
    lab_context(work, edit, |keys| match phase {
        Some(phase) => keys.with_rotation(Rotating {
            name: ca.name().into(),
            phase,
            id: ID,
        }),
        None => keys,
    })
}

fn plan_of(ctx: &Arc<InstallContext>, phase: Phase) -> Plan {
    plan_of_ca(RotatedCa::Etcd, ctx, phase)
}

fn plan_of_ca(ca: RotatedCa, ctx: &Arc<InstallContext>, phase: Phase) -> Plan {
    let r = Rotate {
        ca,
        ctx: ctx.clone(),
        id: ID,
        phase,
    };
    plan::build(&rotate_pipeline(&r), &ctx.plan_nodes(), &Default::default()).expect("plan")
}

fn outline(p: &Plan) -> String {
    crate::restore::outline_with(p, true)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).expect("read")
}

/// The etcd files the rotation's etcd task uploads to node1 (names in the certificate
/// directory).
fn uploads_to_node1(p: &Plan) -> Vec<String> {
    let mut names: Vec<String> = p
        .modules
        .iter()
        .filter(|m| m.name == "rotate-etcd-ca")
        .flat_map(|m| &m.tasks)
        .flat_map(|t| &t.steps)
        .filter(|s| s.name == "etcd-certificates")
        .flat_map(|s| &s.groups)
        .filter(|g| g.nodes.iter().any(|n| n == "node1"))
        .flat_map(|g| &g.ops)
        .filter_map(|o| {
            o.detail
                .split_whitespace()
                .find(|w| w.starts_with("/etc/ssl/etcd/ssl/") && w.ends_with(".pem"))
                .map(|w| w.trim_start_matches("/etc/ssl/etcd/ssl/").to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every phase in turn on a fresh install's PKI: what it plans, what the control host then holds.
fn every_phase(edit: impl Fn(String) -> String + Copy, snapshot: &str) {
    let work = tempfile::tempdir().expect("tempdir");
    let installed = context(work.path(), edit, None);
    // The install made the old CA and the leaves.
    let _ = plan_of(&installed, Phase::TrustBoth);
    let etcd = installed.pki_dir.join("etcd");
    let files = Files::new(&etcd, "etcd");
    let old = read(&files.crt);
    let member = read(&etcd.join("member-node1.crt"));
    assert!(!files.next_crt.exists());

    let mut outlines = String::new();
    // `new`: nothing on the nodes (both modules skip themselves), the new CA made beside the old.
    let new = context(work.path(), edit, Some(Phase::New));
    let p = plan_of(&new, Phase::New);
    let o = outline(&p);
    assert!(
        o.contains("rotate-etcd-ca — skipped: the new etcd CA is made on the control host"),
        "{o}"
    );
    outlines.push_str(&format!("## new\n{o}"));
    new.key_dir()
        .join("etcd")
        .ca("etcd", "etcd-ca")
        .expect("new CA");
    let next = read(&files.next_crt);
    assert_ne!(next, old);
    assert_eq!(read(&files.crt), old, "the old CA is kept");

    for phase in [Phase::TrustBoth, Phase::Reissue, Phase::DropOld] {
        let ctx = context(work.path(), edit, Some(phase));
        let p = plan_of(&ctx, phase);
        let o = outline(&p);
        outlines.push_str(&format!("## {phase}\n{o}"));
        assert!(
            o.contains(&format!(
                "rotate-etcd-ca / etcd-{phase} on node1,node2,node3 (one at a time): etcd-certificates, restart-etcd-member"
            )),
            "{o}"
        );
        let text = p.to_text();
        assert!(text.contains("endpoint health --cluster"), "{text}");
        assert!(
            text.contains(&format!("kubexm-rotated-etcd-{phase}"))
                && text.contains(&ID.to_string()),
            "restarts guarded by the rotation's marker:\n{text}"
        );
        let uploads = uploads_to_node1(&p);
        if phase == Phase::Reissue {
            for f in [
                "ca.pem",
                "member-node1.pem",
                "peer-node1-key.pem",
                "admin-node1.pem",
                "node-node1.pem",
            ] {
                assert!(
                    uploads.iter().any(|u| u == f),
                    "reissue uploads {f}: {uploads:?}"
                );
            }
            assert_ne!(read(&etcd.join("member-node1.crt")), member, "reissued");
        } else {
            assert_eq!(uploads, ["ca.pem"], "{phase} uploads the bundle alone");
        }
        // Idempotent: building the phase again makes the same files.
        let leaf = read(&etcd.join("member-node1.crt"));
        let again = plan_of(&context(work.path(), edit, Some(phase)), phase);
        assert_eq!(read(&etcd.join("member-node1.crt")), leaf, "{phase}");
        assert_eq!(again.to_text(), text, "{phase} planned twice differs");
    }
    // Reissued leaves verify against the new CA only.
    let leaf = read(&etcd.join("member-node1.crt"));
    let verify = |ca: &Path| {
        std::process::Command::new("openssl")
            .arg("verify")
            .arg("-CAfile")
            .arg(ca)
            .arg(etcd.join("member-node1.crt"))
            .output()
            .expect("openssl")
            .status
            .success()
    };
    assert!(verify(&files.next_crt));
    assert!(!verify(&files.crt), "not the old CA's");
    assert!(leaf.contains("BEGIN CERTIFICATE"));
    insta::assert_snapshot!(snapshot, outlines);
}

#[test]
fn kubexm_path_rotates_the_etcd_ca_phase_by_phase_then_restarts_each_api_server() {
    every_phase(kubexm, "rotate-etcd-outline-kubexm");
}

#[test]
fn kubeadm_path_rotates_the_etcd_ca_and_refreshes_the_api_servers_copies() {
    every_phase(|t| t, "rotate-etcd-outline-kubeadm");
}

#[test]
fn rotate_ca_refuses_without_yes_unknown_phases_and_other_cas() {
    let work = tempfile::tempdir().expect("tempdir");
    refused_asking_for_yes(work.path(), &["rotate-ca", "--ca", "etcd"]);
    assert!(
        std::fs::read_dir(work.path())
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "a refused rotation writes nothing"
    );

    let bad = cli(
        work.path(),
        &["rotate-ca", "--ca", "etcd", "--phase", "trust-all", "--yes"],
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(
        err.contains("trust-all") && err.contains("trust-both"),
        "{err}"
    );

    let all = cli(work.path(), &["rotate-ca", "--ca", "all", "--yes"]);
    let err = String::from_utf8_lossy(&all.stderr);
    assert_eq!(all.status.code(), Some(2), "{err}");
    assert!(
        err.contains("one CA at a time") && err.contains("--ca kubernetes"),
        "{err}"
    );
    refused_asking_for_yes(work.path(), &["rotate-ca", "--ca", "kubernetes"]);
    refused_asking_for_yes(work.path(), &["rotate-ca", "--ca", "front-proxy"]);

    let none = cli(work.path(), &["rotate-ca", "--ca", "etcd", "--yes"]);
    assert!(!none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no cluster is recorded"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
}

/// The short sha256 a plan shows for an upload (`[sha256:<12 hex>]`).
fn sha256(text: &str) -> String {
    let sum = kubexm_bundles::hash::sha256_hex(text.as_bytes());
    format!("[sha256:{}]", &sum[..12])
}

/// The certificates in a PEM bundle, in order.
fn pems(text: &str) -> Vec<String> {
    text.split_inclusive("-----END CERTIFICATE-----")
        .map(|c| c.trim().to_string())
        .filter(|c| c.starts_with("-----BEGIN CERTIFICATE-----"))
        .collect()
}

/// `openssl verify` of `leaf` against the CA file `ca`.
fn verifies(ca: &Path, leaf: &Path) -> bool {
    std::process::Command::new("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(ca)
        .arg(leaf)
        .output()
        .expect("openssl")
        .status
        .success()
}

/// The front-proxy CA's phases on one path: what each plans on the masters, which trust bundle
/// and signing CA each distributes (by the uploads' sha256), the client certificate re-issued
/// from the new CA, and the same plan when a phase is built again.
fn front_proxy_phases(edit: impl Fn(String) -> String + Copy, kubeadm: bool, snapshot: &str) {
    let ca = RotatedCa::FrontProxy;
    let work = tempfile::tempdir().expect("tempdir");
    let installed = context_of(ca, work.path(), edit, None);
    let dir = installed
        .pki_dir
        .join(if kubeadm { "kubeadm" } else { "kubernetes" });
    if kubeadm {
        // What phase new fetches from the first master: the CA kubeadm made.
        kubexm_install::pki::Ca::load_or_create(&dir, "front-proxy", "front-proxy-ca")
            .expect("kubeadm's CA");
    } else {
        // The install made the old CA and the client certificate.
        let _ = plan_of_ca(ca, &installed, Phase::TrustBoth);
    }
    let files = Files::new(&dir, "front-proxy");
    let old = read(&files.crt);
    let old_key = read(&files.key);

    let mut outlines = String::new();
    let new = context_of(ca, work.path(), edit, Some(Phase::New));
    let p = plan_of_ca(ca, &new, Phase::New);
    let o = outline(&p);
    let text = p.to_text();
    if kubeadm {
        assert!(
            o.contains("rotate-front-proxy-ca / front-proxy-ca-to-control-host on node1:"),
            "{o}"
        );
        for f in ["front-proxy-ca.crt", "front-proxy-ca.key"] {
            assert!(
                text.contains(&format!(
                    "/etc/kubernetes/pki/{f} -> control host {}",
                    dir.join(f).display()
                )),
                "new fetches {f}:\n{text}"
            );
        }
    } else {
        assert!(
            o.contains("rotate-front-proxy-ca — skipped: the new front-proxy CA is made on the control host"),
            "{o}"
        );
    }
    assert!(
        o.contains("rotate-etcd-ca — skipped: this rotation is of the front-proxy CA"),
        "{o}"
    );
    outlines.push_str(&format!("## new\n{o}"));
    let (next, both) = make_next_ca(
        &new,
        if kubeadm { "kubeadm" } else { "kubernetes" },
        ("front-proxy", "front-proxy-ca"),
        &files,
        &old,
    );
    let next_key = read(&files.next_key);

    for phase in [Phase::TrustBoth, Phase::Reissue, Phase::DropOld] {
        let ctx = context_of(ca, work.path(), edit, Some(phase));
        let p = plan_of_ca(ca, &ctx, phase);
        let o = outline(&p);
        outlines.push_str(&format!("## {phase}\n{o}"));
        let text = p.to_text();
        assert!(
            o.contains(&format!(
                "rotate-front-proxy-ca / front-proxy-{phase} on node1,node2,node3 (one at a time)"
            )),
            "{o}"
        );
        let trust = match phase {
            Phase::TrustBoth | Phase::Reissue => both.clone(),
            _ => next.clone(),
        };
        if kubeadm {
            // The signing CA first, then the rest of the bundle; its key beside it.
            let (first, key) = if phase == Phase::TrustBoth {
                (&old, &old_key)
            } else {
                (&next, &next_key)
            };
            let file = kubexm_install::rotation::signing_first(first, &trust);
            assert_eq!(pems(&file)[0], first.trim());
            assert_eq!(
                pems(&file).len(),
                if phase == Phase::DropOld { 1 } else { 2 }
            );
            assert!(
                text.contains(&sha256(&file)),
                "{phase}: front-proxy-ca.crt\n{text}"
            );
            assert_eq!(
                text.contains(&sha256(key)),
                phase != Phase::TrustBoth,
                "{phase}: front-proxy-ca.key uploaded once the new CA signs\n{text}"
            );
            assert_eq!(
                text.contains("/etc/kubernetes/pki/front-proxy-ca.key"),
                phase != Phase::TrustBoth,
                "{phase}: trust-both keeps kubeadm's key file\n{text}"
            );
            // A later control-plane join must not get the CA files uploaded before this phase.
            assert!(
                o.contains(
                    "rotate-front-proxy-ca / kubeadm-certs-stale on node1: drop-kubeadm-certs"
                ) && text.contains("-n kube-system delete secret kubeadm-certs --ignore-not-found"),
                "{phase}: the stale kubeadm-certs Secret dropped\n{o}"
            );
            // kubeadm's certificate copy (join --control-plane) reads EC keys in SEC1 only.
            assert_eq!(
                text.contains("openssl ec -in /etc/kubernetes/kubexm/front-proxy-ca.key.pk8 -out /etc/kubernetes/pki/front-proxy-ca.key.kubexm-part"),
                phase != Phase::TrustBoth,
                "{phase}: the new key converted to SEC1\n{text}"
            );
            assert!(
                text.contains("mv -f /etc/kubernetes/manifests/$c.yaml"),
                "{phase}: the static pods restarted\n{text}"
            );
        } else {
            assert!(
                text.contains(&sha256(&trust)),
                "{phase}: the trust bundle\n{text}"
            );
            assert!(
                text.contains(&format!("kubexm-rotated-front-proxy-{phase}")),
                "{phase}: restarts guarded by the rotation's marker\n{text}"
            );
        }
        // Only drop-old takes the old CA out of what aggregated API servers are told to trust.
        assert_eq!(
            o.contains(
                "rotate-front-proxy-ca / aggregation-trust-new-ca on node1: aggregation-trust"
            ),
            phase == Phase::DropOld,
            "{phase}\n{o}"
        );
        if phase == Phase::DropOld {
            let patch = serde_json::json!({ "data": { "requestheader-client-ca-file": next } });
            assert!(
                text.contains("patch -n kube-system configmap extension-apiserver-authentication")
                    && text.contains(&serde_json::to_string(&patch).expect("json")[..60]),
                "drop-old sets the ConfigMap to the new CA alone\n{text}"
            );
        }
        let client = dir.join("front-proxy-client.crt");
        let uploads_client = text.contains("/etc/kubernetes/pki/front-proxy-client.crt");
        if phase == Phase::TrustBoth {
            if kubeadm {
                assert!(
                    !uploads_client,
                    "trust-both keeps kubeadm's client certificate"
                );
            } else {
                assert!(
                    verifies(&files.crt, &client),
                    "trust-both keeps the old CA's leaf"
                );
            }
        } else {
            assert!(uploads_client, "{phase} uploads the client certificate");
            assert!(
                verifies(&files.next_crt, &client),
                "{phase}: the new CA's leaf"
            );
            assert!(!verifies(&files.crt, &client), "{phase}: not the old CA's");
            assert!(text.contains(&sha256(&read(&client))), "{phase}\n{text}");
        }
        let again = plan_of_ca(ca, &context_of(ca, work.path(), edit, Some(phase)), phase);
        assert_eq!(again.to_text(), text, "{phase} planned twice differs");
    }
    insta::assert_snapshot!(snapshot, outlines);
}

#[test]
fn kubexm_path_rotates_the_front_proxy_ca_on_each_master_in_turn() {
    front_proxy_phases(kubexm, false, "rotate-front-proxy-outline-kubexm");
}

#[test]
fn kubeadm_path_fetches_kubeadms_front_proxy_ca_then_rotates_it_signing_ca_first() {
    front_proxy_phases(|t| t, true, "rotate-front-proxy-outline-kubeadm");
}

/// The new CA made as phase `new` makes it (in `sub` of `ctx`'s key directory), then its
/// certificate and the old + new trust bundle.
fn make_next_ca(
    ctx: &Arc<InstallContext>,
    sub: &str,
    (name, cn): (&str, &str),
    files: &Files,
    old: &str,
) -> (String, String) {
    ctx.key_dir().join(sub).ca(name, cn).expect("new CA");
    let next = read(&files.next_crt);
    assert_ne!(next, old);
    let both = format!("{}\n{}\n", old.trim_end(), next.trim_end());
    (next, both)
}

/// The lab cluster on the kubexm path with a worker-only node4.
fn kubexm_with_worker(t: String) -> String {
    with_worker(kubexm(t))
}

/// The lab cluster with a worker-only node4.
fn with_worker(t: String) -> String {
    t.edit(
            "  roleGroups:\n",
            "    - {name: node4, address: 10.88.10.14, user: root, privateKeyPath: /var/tmp/kubexm-lab/labs/e2e/id_ed25519}\n  roleGroups:\n",
        )
        .edit("    worker: [\"node[1:3]\"]\n", "    worker: [\"node[1:4]\"]\n")
}

/// The files the certificates module gives `node` as the context's phase leaves the cluster CA.
fn node_files(ctx: &Arc<InstallContext>, node: &str) -> Vec<(String, Vec<u8>)> {
    let k = kubexm_install::modules::kubexm::KubexmCluster::new(ctx).expect("kubexm");
    let files =
        kubexm_install::modules::kubexm::certs::certificates(&k, &ctx.key_dir().join("kubernetes"))
            .expect("certificates");
    files[node]
        .iter()
        .map(|f| (f.dest().to_string(), f.content().to_vec()))
        .collect()
}

fn file_of<'a>(files: &'a [(String, Vec<u8>)], dest: &str) -> &'a [u8] {
    &files
        .iter()
        .find(|(d, _)| d == dest)
        .unwrap_or_else(|| panic!("{dest} not among the node's files"))
        .1
}

#[test]
fn kubexm_path_rotates_the_cluster_ca_on_every_node_then_service_accounts_and_kube_system() {
    use base64::Engine as _;
    let ca = RotatedCa::Kubernetes;
    let edit = kubexm_with_worker;
    let work = tempfile::tempdir().expect("tempdir");
    let installed = context_of(ca, work.path(), edit, None);
    let dir = installed.pki_dir.join("kubernetes");
    // The install made the old CA and every leaf.
    let before = node_files(&installed, "node4");
    let files = Files::new(&dir, "kubernetes");
    let old = read(&files.crt);
    assert_eq!(
        file_of(&before, "/etc/kubernetes/pki/ca.crt"),
        old.as_bytes()
    );
    let master = node_files(&installed, "node1");
    assert_eq!(
        file_of(&master, "/etc/kubernetes/pki/ca-signer.crt"),
        old.as_bytes(),
        "the controller-manager's signer is the CA alone"
    );

    let mut outlines = String::new();
    let new = context_of(ca, work.path(), edit, Some(Phase::New));
    let o = outline(&plan_of_ca(ca, &new, Phase::New));
    assert!(
        o.contains(
            "rotate-kubernetes-ca — skipped: the new cluster CA is made on the control host"
        ),
        "{o}"
    );
    for other in ["rotate-etcd-ca", "rotate-front-proxy-ca"] {
        assert!(
            o.contains(&format!(
                "{other} — skipped: this rotation is of the kubernetes CA"
            )),
            "{o}"
        );
    }
    outlines.push_str(&format!("## new\n{o}"));
    let (next, both) = make_next_ca(
        &new,
        "kubernetes",
        ("kubernetes", "kubernetes"),
        &files,
        &old,
    );

    for phase in [Phase::TrustBoth, Phase::Reissue, Phase::DropOld] {
        let ctx = context_of(ca, work.path(), edit, Some(phase));
        let p = plan_of_ca(ca, &ctx, phase);
        let o = outline(&p);
        outlines.push_str(&format!("## {phase}\n{o}"));
        let text = p.to_text();
        for (task, nodes) in [("masters", "node1,node2,node3"), ("workers", "node4")] {
            assert!(
                o.contains(&format!(
                    "rotate-kubernetes-ca / kubernetes-ca-{phase}-{task} on {nodes} (one at a time)"
                )),
                "{phase} {task}\n{o}"
            );
        }
        assert!(
            text.contains(&format!("kubexm-rotated-kubernetes-{phase}-services")),
            "{phase}: restarts guarded by the rotation's marker\n{text}"
        );
        assert!(
            o.contains("rotate-kubernetes-ca / fetch-admin-kubeconfig on node1"),
            "{phase}: admin.conf fetched again\n{o}"
        );
        let trust = if phase == Phase::DropOld {
            next.clone()
        } else {
            both.clone()
        };
        let signer = if phase == Phase::TrustBoth {
            &old
        } else {
            &next
        };
        for node in ["node1", "node4"] {
            let files_now = node_files(&ctx, node);
            assert_eq!(
                file_of(&files_now, "/etc/kubernetes/pki/ca.crt"),
                trust.as_bytes(),
                "{phase} {node}: ca.crt is the phase's trust bundle"
            );
            // Every kubeconfig carries the bundle as its CA data.
            let conf = String::from_utf8_lossy(file_of(&files_now, "/etc/kubernetes/kubelet.conf"))
                .to_string();
            assert!(
                conf.contains(&base64::engine::general_purpose::STANDARD.encode(&trust)),
                "{phase} {node}: kubelet.conf trusts the bundle\n{conf}"
            );
        }
        assert!(
            text.contains(&sha256(&trust)),
            "{phase}: ca.crt uploaded\n{text}"
        );
        let master = node_files(&ctx, "node1");
        assert_eq!(
            file_of(&master, "/etc/kubernetes/pki/ca-signer.crt"),
            signer.as_bytes(),
            "{phase}: the controller-manager signs with the phase's CA, alone"
        );
        assert_eq!(pems(signer).len(), 1);
        // The leaves: the old CA's until reissue, the new CA's from then on.
        for leaf in [
            "apiserver.crt",
            "admin.crt",
            "kubelet-node4.crt",
            "kube-proxy.crt",
        ] {
            let leaf = dir.join(leaf);
            let by_new = phase != Phase::TrustBoth;
            assert_eq!(
                verifies(&files.next_crt, &leaf),
                by_new,
                "{phase}: {} signed by the new CA",
                leaf.display()
            );
            assert_eq!(verifies(&files.crt, &leaf), !by_new, "{phase}");
        }
        let sa = o.contains("rotate-kubernetes-ca / service-accounts-trust-both on node1: service-account-ca, restart-kube-system-workloads, pods-to-restart");
        assert_eq!(sa, phase == Phase::TrustBoth, "{phase}\n{o}");
        if phase == Phase::TrustBoth {
            // Only the rollouts of workloads available before the restart are awaited (a
            // crash-looping add-on would hold the rotation forever).
            assert!(
                text.contains("--timeout=1s >/dev/null 2>&1; then echo \"$w\" >>")
                    && text.contains("kubexm-rotated-kubernetes-trust-both-kube-system.rollouts"),
                "{text}"
            );
        }
        let drop = o.contains(
            "rotate-kubernetes-ca / client-ca-new-alone on node1: client-ca-trust, service-account-ca",
        );
        assert_eq!(drop, phase == Phase::DropOld, "{phase}\n{o}");
        if phase != Phase::Reissue {
            // Service-account Secrets and ConfigMaps awaited until they hold the bundle.
            let sum = kubexm_bundles::hash::sha256_hex(trust.as_bytes());
            assert!(text.contains(&format!("want={sum}")), "{phase}\n{text}");
        }
        if phase == Phase::DropOld {
            let patch = serde_json::json!({ "data": { "client-ca-file": next } });
            assert!(
                text.contains("patch -n kube-system configmap extension-apiserver-authentication")
                    && text.contains(&serde_json::to_string(&patch).expect("json")[..40]),
                "drop-old sets client-ca-file to the new CA alone\n{text}"
            );
        }
        let again = plan_of_ca(ca, &context_of(ca, work.path(), edit, Some(phase)), phase);
        assert_eq!(again.to_text(), text, "{phase} planned twice differs");
    }
    insta::assert_snapshot!("rotate-kubernetes-outline-kubexm", outlines);
}

/// kubeadm path: phase new fetches the CA kubeadm made; each later phase writes `ca.crt`
/// signing CA first on every node, the signer file on the masters (and points the
/// controller-manager at it while `ca.crt` holds two CAs), the kubeconfigs' CA data, and from
/// reissue the new key and every leaf.
#[test]
fn kubeadm_path_rotates_the_cluster_ca_on_every_node_and_points_the_signer_at_one_ca() {
    use base64::Engine as _;
    use kubexm_install::modules::kubeadm::config::KubeadmSettings;
    let ca = RotatedCa::Kubernetes;
    let edit = with_worker;
    let work = tempfile::tempdir().expect("tempdir");
    let installed = context_of(ca, work.path(), edit, None);
    let dir = installed.pki_dir.join("kubeadm");
    let signer_arg = |ctx: &Arc<InstallContext>| {
        let inputs = kubexm_install::modules::certs::rotate_kubeadm_ca::kubeadm_inputs(ctx)
            .expect("rotation state");
        let s = KubeadmSettings::new(ctx, inputs).expect("settings");
        let drift = s.drift_files().expect("drift").control_plane;
        let arg = s
            .controller_manager_args
            .iter()
            .find(|a| a.name == "cluster-signing-cert-file")
            .map(|a| a.value.clone());
        assert_eq!(
            arg.is_some(),
            drift.contains("cluster-signing-cert-file"),
            "the reconfiguration sees the signer flag"
        );
        arg
    };
    assert_eq!(
        signer_arg(&installed),
        None,
        "no rotation: kubeadm's default"
    );
    // What phase new fetches from the first master: the CA kubeadm made.
    kubexm_install::pki::Ca::load_or_create(&dir, "kubernetes", "kubernetes")
        .expect("kubeadm's CA");
    let files = Files::new(&dir, "kubernetes");
    let old = read(&files.crt);

    let mut outlines = String::new();
    let new = context_of(ca, work.path(), edit, Some(Phase::New));
    let p = plan_of_ca(ca, &new, Phase::New);
    let o = outline(&p);
    let text = p.to_text();
    assert!(
        o.contains(
            "rotate-kubeadm-cluster-ca / cluster-ca-to-control-host on node1: fetch-cluster-ca"
        ),
        "{o}"
    );
    for (from, to) in [
        ("ca.crt", "kubernetes-ca.crt"),
        ("ca.key", "kubernetes-ca.key"),
    ] {
        assert!(
            text.contains(&format!(
                "/etc/kubernetes/pki/{from} -> control host {}",
                dir.join(to).display()
            )),
            "new fetches {from}:\n{text}"
        );
    }
    assert!(
        o.contains("rotate-kubernetes-ca — skipped: kubernetes.type is kubeadm"),
        "{o}"
    );
    assert_eq!(
        signer_arg(&new),
        None,
        "phase new changes nothing on the nodes"
    );
    outlines.push_str(&format!("## new\n{o}"));
    let (next, both) = make_next_ca(&new, "kubeadm", ("kubernetes", "kubernetes"), &files, &old);
    let next_key = read(&files.next_key);

    for phase in [Phase::TrustBoth, Phase::Reissue, Phase::DropOld] {
        let ctx = context_of(ca, work.path(), edit, Some(phase));
        let p = plan_of_ca(ca, &ctx, phase);
        let o = outline(&p);
        outlines.push_str(&format!("## {phase}\n{o}"));
        let text = p.to_text();
        for (task, nodes) in [("masters", "node1,node2,node3"), ("workers", "node4")] {
            assert!(
                o.contains(&format!(
                    "rotate-kubeadm-cluster-ca / cluster-ca-{phase}-{task} on {nodes} (one at a time)"
                )),
                "{phase} {task}\n{o}"
            );
        }
        let trust = if phase == Phase::DropOld {
            next.clone()
        } else {
            both.clone()
        };
        let signer = if phase == Phase::TrustBoth {
            &old
        } else {
            &next
        };
        let ca_crt = kubexm_install::rotation::signing_first(signer, &trust);
        assert_eq!(pems(&ca_crt)[0], signer.trim(), "{phase}: signing CA first");
        assert!(
            text.contains(&format!(
                "-> /etc/kubernetes/pki/ca.crt (644)  {}",
                sha256(&ca_crt)
            )),
            "{phase}: ca.crt\n{text}"
        );
        assert!(
            text.contains(&format!(
                "-> /etc/kubernetes/pki/ca-signer.crt (644)  {}",
                sha256(signer)
            )),
            "{phase}: the signer file holds the signing CA alone\n{text}"
        );
        assert_eq!(
            text.contains(&sha256(&next_key)),
            phase != Phase::TrustBoth,
            "{phase}: the new key uploaded once it signs\n{text}"
        );
        assert_eq!(
            text.contains("openssl ec -in /etc/kubernetes/kubexm/ca.key.pk8 -out /etc/kubernetes/pki/ca.key.kubexm-part"),
            phase != Phase::TrustBoth,
            "{phase}: the new key converted to SEC1\n{text}"
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(&trust);
        assert!(
            text.contains(&format!("certificate-authority-data: {b64}")),
            "{phase}: the kubeconfigs' CA data is the bundle\n{text}"
        );
        // The controller-manager signs with the signer file while ca.crt holds two CAs.
        assert_eq!(
            signer_arg(&ctx).as_deref(),
            (phase != Phase::DropOld).then_some("/etc/kubernetes/pki/ca-signer.crt"),
            "{phase}"
        );
        assert_eq!(
            o.contains("kubeconfig-ca-data, kubeadm-reconfigure, stop-control-plane"),
            phase != Phase::Reissue,
            "{phase}: the reconfiguration applies the signer flag\n{o}"
        );
        let reissued = [
            "kubeadm-renew-cluster-ca-leaves",
            "kubelet-client-certificate",
            "kubelet-client-requests on node4",
            "sign-kubelet-clients on node1",
            "install-kubelet-client",
            "request-serving-certificates on node1,node2,node3,node4",
            "approve-kubelet-serving-csrs on node1",
        ];
        for r in reissued {
            assert_eq!(o.contains(r), phase == Phase::Reissue, "{phase}: {r}\n{o}");
        }
        if phase == Phase::Reissue {
            assert!(
                text.contains("/usr/local/bin/kubeadm certs renew apiserver; }")
                    && text.contains("/usr/local/bin/kubeadm certs renew admin.conf; }")
                    && text.contains("kubexm-rotated-kubernetes-reissue-kubeadm"),
                "{text}"
            );
        }
        assert_eq!(
            o.contains("cluster-trust-both on node1: cluster-info-ca, service-account-ca, restart-kube-system-workloads, pods-to-restart"),
            phase == Phase::TrustBoth,
            "{phase}\n{o}"
        );
        assert_eq!(
            o.contains("cluster-new-ca-alone on node1: cluster-info-ca, client-ca-trust, service-account-ca"),
            phase == Phase::DropOld,
            "{phase}\n{o}"
        );
        assert!(
            o.contains(
                "rotate-kubeadm-cluster-ca / kubeadm-certs-stale on node1: drop-kubeadm-certs"
            ) && o.contains("rotate-kubeadm-cluster-ca / fetch-admin-kubeconfig on node1"),
            "{phase}\n{o}"
        );
        let again = plan_of_ca(ca, &context_of(ca, work.path(), edit, Some(phase)), phase);
        assert_eq!(again.to_text(), text, "{phase} planned twice differs");
    }
    insta::assert_snapshot!("rotate-kubernetes-outline-kubeadm", outlines);
}

/// A master may not join while the controller-manager signs with the signer file a joining
/// master would not get (trust-both and reissue finished); before and after, it may.
#[test]
fn kubeadm_path_refuses_a_joining_master_while_ca_crt_holds_two_cas() {
    use kubexm_install::modules::certs::rotate_kubeadm_ca::master_join_refused;
    let ca = RotatedCa::Kubernetes;
    let work = tempfile::tempdir().expect("tempdir");
    let installed = context_of(ca, work.path(), |t| t, None);
    assert_eq!(master_join_refused(&installed).expect("check"), None);
    let dir = installed.pki_dir.join("kubeadm");
    kubexm_install::pki::Ca::load_or_create(&dir, "kubernetes", "kubernetes")
        .expect("kubeadm's CA");
    let files = Files::new(&dir, "kubernetes");
    for (finished, refused) in [
        (Phase::New, false),
        (Phase::TrustBoth, true),
        (Phase::Reissue, true),
        (Phase::DropOld, false),
    ] {
        files
            .save(&kubexm_install::rotation::State { finished, id: ID })
            .expect("state");
        let ctx = context_of(ca, work.path(), |t| t, None);
        let why = master_join_refused(&ctx).expect("check");
        assert_eq!(why.is_some(), refused, "after {finished}: {why:?}");
        if let Some(why) = why {
            assert!(why.contains("rotate-ca --ca kubernetes --yes"), "{why}");
        }
        // The kubexm path's masters get ca-signer.crt from KubeXM: never refused.
        let kubexm_ctx = context_of(ca, work.path(), kubexm, None);
        assert_eq!(master_join_refused(&kubexm_ctx).expect("check"), None);
    }
}

/// The service-account wait's check, run with a stand-in kubectl (a script answering from
/// files): it holds only when every token Secret and every existing kube-root-ca.crt ConfigMap
/// hold the bundle, and never when there is no token Secret or kubectl fails.
#[test]
fn the_service_account_wait_holds_only_when_every_secret_and_configmap_holds_the_bundle() {
    use base64::Engine as _;
    use kubexm_install::modules::certs::rotate_kubernetes::ServiceAccountCa;
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context_of(RotatedCa::Kubernetes, work.path(), kubexm, None);
    let k = Arc::new(kubexm_install::modules::kubexm::KubexmCluster::new(&ctx).expect("kubexm"));
    let node = ctx.nodes.iter().find(|n| n.name == "node1").expect("node1");
    let bundle = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n";
    let old = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n";
    let check = ServiceAccountCa {
        pem: bundle.into(),
        kubexm: Some(k.clone()),
    }
    .check(node);
    let real = "/usr/local/bin/kubectl";
    assert!(check.contains(real), "{check}");
    let state = work.path().join("api");
    std::fs::create_dir_all(state.join("cm")).expect("mkdir");
    let fake = work.path().join("kubectl");
    // Answers: `get secrets ...` prints one base64 ca.crt per line from api/secrets; `get
    // namespaces ...` prints api/ns; `-n NS get configmap kube-root-ca.crt -o name` succeeds
    // when api/cm/NS exists, `-o jsonpath=...` prints it. api/fail makes every call fail.
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nd={}\n[ ! -e $d/fail ] || exit 1\ncase \"$*\" in\n  *'get secrets'*) cat $d/secrets ;;\n  *'get namespaces'*) cat $d/ns ;;\n  *'get configmap kube-root-ca.crt -o name'*) ns=$(echo \"$*\" | sed 's/.* -n \\([^ ]*\\) .*/\\1/'); [ -e $d/cm/$ns ] ;;\n  *'get configmap kube-root-ca.crt -o jsonpath'*) ns=$(echo \"$*\" | sed 's/.* -n \\([^ ]*\\) .*/\\1/'); cat $d/cm/$ns ;;\n  *) exit 2 ;;\nesac\n",
            state.display()
        ),
    )
    .expect("write");
    std::process::Command::new("chmod")
        .args(["755", &fake.display().to_string()])
        .status()
        .expect("chmod");
    let script = check.edit(real, &fake.display().to_string());
    let holds = || {
        std::process::Command::new("sh")
            .args(["-c", &script])
            .status()
            .expect("sh")
            .success()
    };
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    let write = |f: &str, t: &str| std::fs::write(state.join(f), t).expect("write");
    write("ns", "default kube-system lab");
    write("secrets", &format!("{}\n{}\n", b64(bundle), b64(bundle)));
    for ns in ["default", "kube-system"] {
        write(&format!("cm/{ns}"), bundle);
    }
    assert!(
        holds(),
        "every Secret and ConfigMap holds the bundle (lab has no ConfigMap)"
    );
    write("cm/lab", old);
    assert!(!holds(), "a ConfigMap with the old CA alone");
    write("cm/lab", bundle);
    write("secrets", &format!("{}\n{}\n", b64(bundle), b64(old)));
    assert!(!holds(), "a Secret with the old CA alone");
    write("secrets", "");
    assert!(!holds(), "no token Secret at all");
    write("secrets", &format!("{}\n", b64(bundle)));
    assert!(holds());
    write("fail", "");
    assert!(!holds(), "kubectl failing");
}
