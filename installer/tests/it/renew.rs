//! `certs renew`: the plan of the renewal on the lab cluster (kubeadm path, KubeXM's etcd) and
//! on the kubexm path, the control host's leaves re-issued once from the kept CAs, and the
//! command's refusals.

use std::path::Path;
use std::sync::Arc;

use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::modules::certs::renew::{kubeadm_renew_command, KubeletClient, Marker, Renew};
use kubexm_install::pipeline::plan::{self, Plan};
use kubexm_install::pipelines::renew::renew_pipeline;
use kubexm_install::pki::{KeyDir, Keys, Reissue};

use crate::common::Edit as _;
use crate::day2::cli;

use crate::common::repo;

/// The lab cluster (edited), its PKI kept under `work/pki` and seen through `keys` (a
/// renewal's re-issue, a rotation's phase).
pub(crate) fn lab_context(
    work: &Path,
    edit: impl Fn(String) -> String,
    keys: impl FnOnce(KeyDir) -> KeyDir,
) -> Arc<InstallContext> {
    let text = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab yaml");
    let file = work.join("cluster.yaml");
    std::fs::write(&file, edit(text)).expect("write");
    let catalog = repo().join("tests/lab/mirror/catalog-lab.yaml");
    let mut ctx = load_context(&file, Some(&catalog), None, work).expect("cluster loads");
    ctx.keys = keys(KeyDir::new(ctx.pki_dir.clone(), Keys::Keep));
    Arc::new(ctx)
}

/// The lab cluster (edited), its PKI re-issued as `reissue` says.
fn context(
    work: &Path,
    edit: impl Fn(String) -> String,
    reissue: Option<Reissue>,
) -> Arc<InstallContext> {
    lab_context(work, edit, |keys| match reissue {
        Some(r) => keys.with_reissue(r),
        None => keys,
    })
}

pub(crate) fn kubexm(t: String) -> String {
    t.edit("    type: kubeadm\n", "    type: kubexm\n")
}

fn renew(ctx: &Arc<InstallContext>, masters: &[&str]) -> Renew {
    Renew {
        ctx: ctx.clone(),
        id: "1700000000".into(),
        under_days: 30,
        all: false,
        masters: masters.iter().map(|m| (*m).to_string()).collect(),
        etcd: true,
        etcd_expired: false,
        kubernetes: true,
        workers: Vec::new(),
        serving: Vec::new(),
        registry: false,
    }
}

fn plan_of(r: &Renew) -> Plan {
    plan::build(&renew_pipeline(r), &r.ctx.plan_nodes(), &Default::default()).expect("plan")
}

fn outline(p: &Plan) -> String {
    crate::restore::outline_with(p, true)
}

#[test]
fn kubeadm_path_renews_etcd_members_then_each_master_through_kubeadm() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| t, None);
    let r = renew(&ctx, &["node1", "node2"]);
    let p = plan_of(&r);
    let o = outline(&p);
    insta::assert_snapshot!("renew-outline-kubeadm", o);
    assert!(
        o.contains("renew-control-plane / renew-master on node1,node2 (one at a time)"),
        "only the masters due, one at a time:\n{o}"
    );
    assert!(
        o.contains(
            "renew-etcd-certificates / renew-etcd-members on node1,node2,node3 (one at a time)"
        ),
        "{o}"
    );
    let text = p.to_text();
    assert!(
        text.contains("{ [ ! -e /etc/kubernetes/pki/apiserver.crt ] || /usr/local/bin/kubeadm certs renew apiserver; }"),
        "v1.20+ syntax, each certificate by name (KubeXM's etcd: no `all`):\n{text}"
    );
    assert!(!text.contains("certs renew all"), "{text}");
    assert!(text.contains("endpoint health --cluster"), "{text}");
    assert!(text.contains("/readyz"), "{text}");
    assert!(
        text.contains("kubexm-restore-parked"),
        "the static pods restart by parking their manifests:\n{text}"
    );
    let first = ctx.first_master().expect("master").name.clone();
    assert!(
        o.contains(&format!(
            "renew-control-plane / fetch-admin-kubeconfig on {first}"
        )),
        "{o}"
    );

    // Expired etcd certificates: every member restarts together (peers on expired certificates
    // refuse a renewed member, so one at a time the cluster is never healthy in between).
    let o = outline(&plan_of(&Renew {
        etcd_expired: true,
        ..renew(&ctx, &["node1"])
    }));
    assert!(
        o.contains("renew-etcd-certificates / renew-etcd-members on node1,node2,node3: "),
        "{o}"
    );

    // Nothing due: both modules skip themselves and say why.
    let idle = Renew {
        masters: vec![],
        etcd: false,
        kubernetes: false,
        ..r
    };
    let o = outline(&plan_of(&idle));
    assert!(
        o.contains(
            "renew-etcd-certificates — skipped: no etcd certificate has fewer than 30 days left"
        ),
        "{o}"
    );
    assert!(
        o.contains("renew-control-plane — skipped: no master has a certificate with fewer than 30 days left"),
        "{o}"
    );
}

/// kubeadm path, what the masters' renewal does not reach: a worker's kubelet client
/// certificate (requested on the worker, signed on the first master, installed on the worker),
/// kubelet serving certificates (a new CSR, approved with the install's checks) and the
/// registry's TLS (the registry module's deploy task, then the served certificate checked).
#[test]
fn kubeadm_path_renews_workers_kubelets_and_the_registry() {
    let work = tempfile::tempdir().expect("tempdir");
    // node3 a worker only.
    let ctx = context(
        work.path(),
        |t| {
            t.edit(
                "    master: [\"node[1:3]\"]\n",
                "    master: [\"node[1:2]\"]\n",
            )
        },
        None,
    );
    let r = Renew {
        workers: vec!["node3".into()],
        serving: vec!["node1".into(), "node3".into()],
        registry: true,
        etcd: false,
        ..renew(&ctx, &[])
    };
    let p = plan_of(&r);
    let o = outline(&p);
    insta::assert_snapshot!("renew-outline-kubeadm-workers-serving-registry", o);
    for want in [
        "renew-registry-tls / deploy-registry on node1: install-registry-binary, configure-registry",
        "renew-registry-tls / registry-serves-renewed-certificate on node1",
        "renew-worker-kubelet-clients / kubelet-client-requests on node3: kubelet-client-request",
        "renew-worker-kubelet-clients / sign-kubelet-clients on node1: sign-kubelet-clients",
        "renew-worker-kubelet-clients / install-kubelet-clients on node3 (one at a time): install-kubelet-client, kubelet-healthy",
        "renew-kubelet-serving / request-serving-certificates on node1,node3: request-serving-certificate",
        "renew-kubelet-serving / approve-kubelet-serving-csrs on node1: approve-kubelet-serving-csrs",
        "renew-kubelet-serving / serving-certificates-settle on node1,node3: serving-certificate-settle",
        "renew-kubelet-serving / kubelet-serving-csrs-again on node1: kubelet-serving-csrs",
        "renew-kubelet-serving / approve-kubelet-serving-csrs-again on node1: approve-kubelet-serving-csrs",
        "renew-kubelet-serving / serving-certificates-renewed on node1,node3: serving-certificate-renewed",
    ] {
        assert!(o.contains(want), "{want}\n{o}");
    }
    // Two approval rounds: a kubelet restarted on its new client certificate may have asked
    // before the serving renewal restarted it; that stale CSR ends the first round's wait.
    let at = |task: &str| {
        o.find(&format!("renew-kubelet-serving / {task} on"))
            .unwrap_or_else(|| panic!("{task} missing:\n{o}"))
    };
    let order = [
        "request-serving-certificates",
        "kubelet-serving-csrs",
        "approve-kubelet-serving-csrs",
        "serving-certificates-settle",
        "kubelet-serving-csrs-again",
        "approve-kubelet-serving-csrs-again",
        "serving-certificates-renewed",
    ];
    for w in order.windows(2) {
        assert!(at(w[0]) < at(w[1]), "{} before {}:\n{o}", w[0], w[1]);
    }
    let order: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        order,
        [
            "renew-registry-tls",
            "renew-etcd-certificates",
            "renew-kubernetes-certificates",
            "renew-control-plane",
            "renew-worker-kubelet-clients",
            "renew-kubelet-serving",
            "kubelet-serving-certificates"
        ]
    );
    let text = p.to_text();
    assert!(
        text.contains(
            "# node3: its request (learned when it runs) checked and signed with the cluster CA"
        ),
        "{text}"
    );
    assert!(
        text.contains("-> /var/lib/kubelet/pki/kubelet-client-kubexm-1700000000.crt (644)"),
        "the plan shows where the certificate goes:\n{text}"
    );
    assert!(
        text.contains("kubelet-server-current.pem.kubexm-before-1700000000"),
        "the serving certificate is set aside, not deleted:\n{text}"
    );

    // The kubexm path: none of these three (KubeXM issues the kubelets' certificates).
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), kubexm, None);
    let o = outline(&plan_of(&Renew {
        workers: vec!["node3".into()],
        serving: vec!["node3".into()],
        ..renew(&ctx, &[])
    }));
    assert!(
        o.contains("renew-worker-kubelet-clients — skipped: kubernetes.type is kubexm"),
        "{o}"
    );
    assert!(
        o.contains("renew-kubelet-serving — skipped: kubernetes.type is kubexm"),
        "{o}"
    );
    assert!(
        o.contains(
            "renew-registry-tls — skipped: the registry's certificate has 30 days left or more"
        ),
        "{o}"
    );
}

/// A kubelet's renewed serving certificate (issue 13 item 8): `certs renew` on the kubeadm path
/// approves the pending kubelet-serving CSRs on the first master with the install's checks,
/// after the renewal, also when nothing else is due, and without the install's wait for every
/// node's CSR; the kubexm path issues serving certificates itself and skips it.
#[test]
fn certs_renew_approves_renewed_kubelet_serving_csrs_on_the_kubeadm_path() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| t, None);
    let first = ctx.first_master().expect("master").name.clone();
    let idle = Renew {
        masters: vec![],
        etcd: false,
        kubernetes: false,
        ..renew(&ctx, &[])
    };
    for r in [renew(&ctx, &["node1"]), idle] {
        let p = plan_of(&r);
        let o = outline(&p);
        let learn = format!(
            "kubelet-serving-certificates / kubelet-serving-csrs on {first}: kubelet-serving-csrs\n"
        );
        let approve = format!(
            "kubelet-serving-certificates / approve-kubelet-serving-csrs on {first}: approve-kubelet-serving-csrs\n"
        );
        let (Some(l), Some(a)) = (o.find(&learn), o.find(&approve)) else {
            panic!("no approval of the kubelet serving CSRs on {first}:\n{o}")
        };
        assert!(l < a, "{o}");
        assert!(
            o.lines().last().is_some_and(|x| approve.starts_with(x)),
            "the approval comes last, after any renewal:\n{o}"
        );
        let text = p.to_text();
        let learned = text
            .lines()
            .find(|l| l.contains("get csr -o json"))
            .unwrap_or_else(|| panic!("no CSR listing:\n{text}"));
        assert!(
            !text.contains("sleep 3"),
            "no wait for every node's CSR:\n{text}"
        );
        assert!(
            learned.contains("--kubeconfig /etc/kubernetes/admin.conf"),
            "{learned}"
        );
        for n in ["node1", "node2", "node3"] {
            assert!(
                text.contains(&format!("CSR of system:node:{n}, checked>")),
                "{n}:\n{text}"
            );
        }
    }
    let kx = context(work.path(), kubexm, None);
    let o = outline(&plan_of(&renew(&kx, &[])));
    assert!(
        o.contains("kubelet-serving-certificates — skipped: kubernetes.type is kubexm: KubeXM issues the kubelet serving certificates itself"),
        "{o}"
    );
}

#[test]
fn kubeadm_syntax_follows_the_version() {
    use kubexm_manifests::version::KubeVersion;
    assert_eq!(
        kubeadm_renew_command(KubeVersion::new(1, 20, 2), true),
        "/usr/local/bin/kubeadm certs renew all"
    );
    assert_eq!(
        kubeadm_renew_command(KubeVersion::new(1, 19, 16), true),
        "/usr/local/bin/kubeadm alpha certs renew all"
    );
    // Not kubeadm's etcd: each certificate by name, never the etcd ones (`all` would need the
    // etcd CA's key when kubeadm falls back to its defaults).
    let v120 = kubeadm_renew_command(KubeVersion::new(1, 20, 2), false);
    assert_eq!(
        v120,
        "{ [ ! -e /etc/kubernetes/pki/apiserver.crt ] || /usr/local/bin/kubeadm certs renew apiserver; } && { [ ! -e /etc/kubernetes/pki/apiserver-kubelet-client.crt ] || /usr/local/bin/kubeadm certs renew apiserver-kubelet-client; } && { [ ! -e /etc/kubernetes/pki/front-proxy-client.crt ] || /usr/local/bin/kubeadm certs renew front-proxy-client; } && { [ ! -e /etc/kubernetes/admin.conf ] || /usr/local/bin/kubeadm certs renew admin.conf; } && { [ ! -e /etc/kubernetes/controller-manager.conf ] || /usr/local/bin/kubeadm certs renew controller-manager.conf; } && { [ ! -e /etc/kubernetes/scheduler.conf ] || /usr/local/bin/kubeadm certs renew scheduler.conf; }"
    );
    assert!(!v120.contains("etcd"));
    let v133 = kubeadm_renew_command(KubeVersion::new(1, 33, 1), false);
    assert!(
        v133.ends_with("{ [ ! -e /etc/kubernetes/super-admin.conf ] || /usr/local/bin/kubeadm certs renew super-admin.conf; }"),
        "{v133}"
    );
}

/// The kubelet's client certificate: pointed at the rotated file when kubelet.conf embeds it,
/// re-issued from the CA on the master under the threshold; guarded by the renewal's marker.
#[test]
fn kubelet_client_script_reissues_under_the_threshold_and_points_at_the_rotated_file() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| t, None);
    let node = ctx.node("node2").expect("node2");
    let marker = Marker {
        file: "/etc/kubernetes/kubexm/renewed/kubelet-client".into(),
        id: "42".into(),
    };
    let k = KubeletClient {
        under_days: 400,
        all: false,
        marker: marker.clone(),
    };
    let s = k.script(node);
    assert!(s.contains("-checkend 34560000"), "400 days:\n{s}");
    assert!(
        s.contains("-subj /O=system:nodes/CN=system:node:node2 "),
        "{s}"
    );
    assert!(s.contains("-CAkey \"$pki/ca.key\""), "{s}");
    assert!(s.contains("client-certificate: $cur"), "{s}");
    assert!(s.ends_with(marker.record().as_str()), "{s}");
    assert!(!s.contains("due=yes; openssl"), "{s}");
    let all = KubeletClient { all: true, ..k };
    assert!(all.script(node).contains("due=yes; openssl"));
    assert_eq!(
        marker.done(),
        "[ \"$(cat /etc/kubernetes/kubexm/renewed/kubelet-client 2>/dev/null)\" = 42 ]"
    );
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).expect("read")
}

#[test]
fn kubexm_path_reissues_the_kept_leaves_once_and_restarts_node_by_node() {
    let work = tempfile::tempdir().expect("tempdir");
    // The install: every CA and leaf made and kept.
    let installed = context(work.path(), kubexm, None);
    let _ = plan_of(&renew(&installed, &[]));
    let pki = installed.pki_dir.join("kubernetes");
    let etcd = installed.pki_dir.join("etcd");
    let api = read(&pki.join("apiserver.crt"));
    let ca = read(&pki.join("kubernetes-ca.crt"));
    let member = read(&etcd.join("member-node1.crt"));
    // The renewal starts after the install (certificates carry whole seconds).
    let since = time::OffsetDateTime::now_utc().unix_timestamp() + 1;
    std::thread::sleep(std::time::Duration::from_millis(2100));

    // Under 30 days: nothing is (one-year leaves), the files stay.
    let under30 = context(
        work.path(),
        kubexm,
        Some(Reissue {
            under_days: 30,
            all: false,
            since,
        }),
    );
    let _ = plan_of(&renew(&under30, &[]));
    assert_eq!(read(&pki.join("apiserver.crt")), api);

    // Under 400 days: every leaf re-issued from the same CA, once.
    let r400 = Reissue {
        under_days: 400,
        all: false,
        since,
    };
    let ctx = context(work.path(), kubexm, Some(r400));
    let r = renew(&ctx, &[]);
    let p = plan_of(&r);
    let renewed = read(&pki.join("apiserver.crt"));
    assert_ne!(renewed, api, "apiserver.crt re-issued");
    assert_ne!(
        read(&etcd.join("member-node1.crt")),
        member,
        "etcd leaves too"
    );
    assert_eq!(read(&pki.join("kubernetes-ca.crt")), ca, "never a CA");
    let _ = plan_of(&r);
    assert_eq!(
        read(&pki.join("apiserver.crt")),
        renewed,
        "building the tasks again (the run after the plan, or --resume) keeps what this renewal issued"
    );

    let o = outline(&p);
    insta::assert_snapshot!("renew-outline-kubexm", o);
    assert!(
        o.contains("renew-kubernetes-certificates / renew-masters on node1,node2,node3 (one at a time): kubernetes-certificates, restart-kubernetes-services, wait-control-plane, kubelet-healthy"),
        "{o}"
    );
    assert!(
        o.contains("renew-control-plane — skipped: kubernetes.type is kubexm"),
        "{o}"
    );
    let text = p.to_text();
    assert!(
        text.contains("/etc/kubernetes/pki/apiserver.crt"),
        "the new leaf is uploaded:\n{text}"
    );
    assert!(
        text.contains("systemctl restart $u"),
        "services restarted by the renewal:\n{text}"
    );
}

#[test]
fn reissue_takes_leaves_under_the_threshold_issued_before_the_renewal() {
    let day = 86_400;
    let r = Reissue {
        under_days: 30,
        all: false,
        since: 100 * day,
    };
    // Issued long ago, 10 days left: due.
    assert!(r.due(0, 110 * day, 100 * day));
    // 40 days left: not due; unless --all.
    assert!(!r.due(0, 140 * day, 100 * day));
    assert!(Reissue { all: true, ..r }.due(0, 140 * day, 100 * day));
    // Issued by this renewal (starts an hour before it was issued): kept, even with --all.
    assert!(!Reissue { all: true, ..r }.due(100 * day - 3600, 465 * day, 100 * day + 60));
}

/// `args` exits 2 (usage) asking to review with --dry-run and pass --yes.
pub(crate) fn refused_asking_for_yes(work: &Path, args: &[&str]) {
    let out = cli(work, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.contains("pass --yes") && err.contains("--dry-run"),
        "{args:?}: {err}"
    );
}

#[test]
fn renew_refuses_without_yes_and_contradictory_thresholds() {
    let work = tempfile::tempdir().expect("tempdir");
    refused_asking_for_yes(work.path(), &["certs", "renew"]);
    assert!(
        !work.path().join("state").exists(),
        "a refused renewal writes nothing"
    );

    let both = cli(
        work.path(),
        &["certs", "renew", "--all", "--under-days", "5", "--yes"],
    );
    assert_eq!(both.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&both.stderr).contains("cannot be used with"));

    let negative = cli(work.path(), &["certs", "renew", "--under-days=-1", "--yes"]);
    assert_eq!(negative.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&negative.stderr).contains("negative"));

    let none = cli(work.path(), &["certs", "renew", "--yes"]);
    assert!(!none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no cluster is recorded"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
}

/// `certs schedule` writes a timer and a service that systemd accepts, running `certs renew
/// --under-days N --yes` for the recorded cluster on this host; `--remove` takes them away.
#[test]
fn cli_certs_schedule_writes_units_systemd_accepts() {
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = context(work.path(), |t| t, None);
    let name = crate::restore::record_installed(work.path(), &ctx);
    let units = work.path().join("units");
    std::fs::create_dir(&units).expect("mkdir");
    let u = units.display().to_string();
    let out = cli(
        work.path(),
        &[
            "certs",
            "schedule",
            "--under-days",
            "45",
            "--on-calendar",
            "weekly",
            "--systemd-dir",
            &u,
            "--write-only",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let service = units.join(format!("kubexm-certs-renew-{name}.service"));
    let timer = units.join(format!("kubexm-certs-renew-{name}.timer"));
    let text = std::fs::read_to_string(&service).expect("service");
    assert!(
        text.contains(&format!(
            "--log-format json certs renew --cluster {name} --under-days 45 --yes\n"
        )) && text.contains(env!("CARGO_BIN_EXE_kubexm-install")),
        "{text}"
    );
    assert!(std::fs::read_to_string(&timer)
        .expect("timer")
        .contains("OnCalendar=weekly\n"));
    crate::restore::verify_units(&service, &timer);
    let zero = cli(
        work.path(),
        &[
            "certs",
            "schedule",
            "--under-days",
            "0",
            "--systemd-dir",
            &u,
            "--write-only",
        ],
    );
    assert!(!zero.status.success());
    crate::restore::remove_units(work.path(), "certs", &units, &service, &timer);
}
