//! REAL Kubernetes, kubeadm path, installed and upgraded one minor (issues 31, 32, 33, 37):
//! v1.36.3 built from Go modules (`tests/lab/kubernetes/build-kubernetes-gomod`), installed on
//! three lab nodes (each master + worker + stacked etcd) behind the internal load balancer
//! (`loadBalancer.mode: internal`, haproxy), checked (nodes, versions, a Deployment with a pod per
//! node and its PodDisruptionBudget, logs/exec, its Service from a pod and from every node, DNS
//! when CoreDNS is real, `verify-cluster -o json`), upgraded to v1.37.2 with `kubexm-install
//! upgrade` while a watcher reads the Deployment every second (never fewer available pods than the
//! budget's minAvailable), checked again (kubelets and API servers, the stacked etcd and CoreDNS
//! images the catalog pairs with v1.37, kube-proxy still on the local endpoint and in the same
//! mode), upgraded again (nothing changes), deleted (every node as before). Opt-in (the first run
//! builds both versions: ~30-40 min each on 2 cores), root:
//!
//! `tests/lab/labkit real` (`KEEP_LAB=1` keeps the lab; `REAL_FROM`/`REAL_TO` choose the versions;
//! `REAL_FROM=v1.37.2` runs the install part alone, said loudly, when v1.36.3 is not built).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kubexm_labkit::kube::{Deployment, Kubectl, Pod};
use kubexm_labkit::real::{
    changed_steps, check_cluster, cluster_yaml, diff, dir_of, env_or, join, kube_proxy,
    kubectl_for, name_tag, overlay, tail, verify_cluster, Built, Net, Parts, Resolved, LAB_WEB,
    LOCAL_API, NODES, REPLICAS,
};
use kubexm_labkit::{check, Kubexm, Lab, LabSpec, Output, Scenario, Tools};
use kubexm_testkit::{HttpMirror, Registry, RegistryOptions};
use serde_json::Value;
#[test]
#[ignore = "lab: root + nspawn + REAL Kubernetes from Go modules; run by hand (tests/lab/labkit real)"]
fn real_install_and_upgrade() {
    let from_v = env_or("REAL_FROM", "v1.36.3");
    let to_v = env_or("REAL_TO", "v1.37.2");
    let upgrade = from_v != to_v;
    let scenario = Scenario::start(&format!("real {from_v} -> {to_v}"));
    if !upgrade {
        eprintln!(
            "!! REAL_FROM = REAL_TO = {to_v}: the INSTALL PART ALONE (steps 2-3); no upgrade is proven by this run"
        );
    }
    scenario.step("build kubexm-build and kubexm-install");
    let tools = Tools::build();
    let work = tempfile::Builder::new()
        .prefix("kubexm-real.")
        .tempdir_in("/var/tmp")
        .expect("work dir");
    let w = work.path();

    // 1. REAL Kubernetes of both versions, the gomod mirror, the images.
    scenario.step(&format!(
        "Kubernetes {from_v} and {to_v} from Go modules, the gomod mirror, images"
    ));
    let kdir = kubexm_labkit::lab_dir().join("kubernetes");
    let (versions, mirror) = scenario.timed("build (cached: reuse)", || {
        let mut vs = Vec::new();
        for v in BTreeSet::from([from_v.clone(), to_v.clone()]) {
            let k8s = dir_of(
                Command::new(kdir.join("build-kubernetes-gomod")).arg(&v),
                &format!("build-kubernetes-gomod {v}"),
            );
            let images = dir_of(
                Command::new("bash")
                    .arg(kdir.join("build-images"))
                    .args(["--k8s", &v]),
                &format!("build-images --k8s {v}"),
            );
            scenario.note(&format!("{v}: {} and {}", k8s.display(), images.display()));
            vs.push(Built {
                version: v,
                k8s,
                images,
            });
        }
        let mirror = dir_of(
            Command::new(kubexm_labkit::lab_dir().join("mirror/build-mirror"))
                .env("KUBEXM_LAB_GOMOD", "1"),
            "KUBEXM_LAB_GOMOD=1 build-mirror",
        );
        (vs, mirror)
    });
    let ver = |v: &str| versions.iter().find(|x| x.version == v).expect("built");
    let kubeadm_in = |files: &Path, v: &str| {
        files
            .join(format!("dl.k8s.io/release/{v}/bin/linux/amd64/kubeadm"))
            .is_file()
    };
    check(
        kubeadm_in(&mirror.join("files"), &to_v),
        &format!("the gomod mirror serves kubeadm {to_v} (build-mirror's GOMOD_K8S)"),
        &mirror.display(),
    );
    let flannel_real = [&from_v, &to_v].iter().all(|v| {
        ver(v)
            .built_images()
            .get("flannel-io/flannel:v0.27.4")
            .is_some_and(|k| k == "real")
    });
    let gomod_catalog = mirror.join("catalog-gomod.yaml");
    let net = match std::env::var("REAL_NET").as_deref() {
        Ok("lab") => Net::LabCni,
        Ok("flannel") => Net::Flannel,
        _ if flannel_real && gomod_catalog.is_file() => Net::Flannel,
        _ => Net::LabCni,
    };
    let catalog = if net == Net::Flannel {
        check(
            gomod_catalog.is_file() && flannel_real,
            "REAL_NET=flannel: the mirror has the REAL kube-flannel.yml and build-images the REAL flannel image",
            &mirror.display(),
        );
        gomod_catalog
    } else {
        kubexm_labkit::lab_dir().join("mirror/catalog-lab.yaml")
    };
    // The mirror holds only the versions build-mirror's GOMOD_K8S lists: another one is laid over
    // it here (its REAL binaries under upstream's paths, its catalog entries next to TO's).
    let (files, catalog) = if kubeadm_in(&mirror.join("files"), &from_v) {
        (mirror.join("files"), catalog)
    } else {
        let o = overlay(w, &mirror, &catalog, ver(&from_v), &to_v);
        scenario.note(&format!(
            "!! {from_v} is not in the gomod mirror (build-mirror's GOMOD_K8S): laid over it by this test ({} + {})",
            o.0.display(),
            o.1.display()
        ));
        o
    };
    scenario.note(&format!(
        "pod network: {} (catalog {})",
        match net {
            Net::Flannel => "REAL flannel v0.27.4 (vxlan)",
            Net::LabCni =>
                "the lab's bridge CNI (postInstall lab-cni.sh): a STAND-IN for a CNI plugin",
        },
        catalog.display()
    ));

    // 2. The lab, the cluster.yaml of each version, the bundles.
    scenario.step("lab up (3 nodes)");
    let lab = Lab::up(&LabSpec::new("real", 3));
    let before: Vec<String> = NODES.iter().map(|n| lab.node_state(n)).collect();
    let addon = w.join("lab-web.yaml");
    fs_err::write(&addon, LAB_WEB).expect("write lab-web.yaml");
    let cluster_of = |v: &str| {
        let path = w.join(format!("cluster-{v}.yaml"));
        fs_err::write(&path, cluster_yaml(&lab, v, net, &addon)).expect("write cluster.yaml");
        path
    };
    let from_cluster = cluster_of(&from_v);
    let to_cluster = cluster_of(&to_v);

    scenario.step("source registry + kubexm-build bundle of each version");
    let (from_bundle, to_bundle, to_resolved) = scenario.timed("bundle", || {
        let files = HttpMirror::start(&files);
        let registry = Registry::start(RegistryOptions::default());
        let zone_in = fs_err::read_to_string(kubexm_labkit::lab_dir().join("mirror/zone-lab.yaml"))
            .expect("zone-lab.yaml");
        let zone = zone_in
            .replace("127.0.0.1:28080", &files.addr().to_string())
            .replace("127.0.0.1:25000", &registry.host());
        let zone_file = w.join("zone.yaml");
        fs_err::write(&zone_file, zone).expect("zone.yaml");
        let mut built = Vec::new();
        for (v, cluster) in [(&from_v, &from_cluster), (&to_v, &to_cluster)]
            .into_iter()
            .take(if upgrade { 2 } else { 1 })
        {
            let args: Vec<std::ffi::OsString> = vec![
                "-f".into(),
                cluster.into(),
                "--catalog".into(),
                catalog.clone().into(),
                "--zone-file".into(),
                zone_file.clone().into(),
            ];
            let resolve = Output::run(
                Command::new(tools.build_bin())
                    .arg("resolve")
                    .args(&args)
                    .args(["-o", "json"]),
            )
            .ok(&format!("kubexm-build resolve ({v})"));
            let resolve_json = w.join(format!("resolve-{v}.json"));
            fs_err::write(&resolve_json, &resolve.stdout).expect("resolve.json");
            let _ = Output::run(
                Command::new(kubexm_labkit::lab_dir().join("mirror/fill-registry"))
                    .arg("--images")
                    .arg(&ver(v).images)
                    .arg(&resolve_json),
            )
            .ok(&format!("fill-registry ({v})"));
            let bundle = w.join(format!("real-{v}.tar.zst"));
            let t = Instant::now();
            let _ = Output::run(
                Command::new(tools.build_bin())
                    .arg("bundle")
                    .args(&args)
                    .arg("-o")
                    .arg(&bundle)
                    .env("KUBEXM_CACHE_DIR", w.join("cache")),
            )
            .ok(&format!("kubexm-build bundle ({v})"));
            scenario.note(&format!(
                "{v}: {} MB in {} s",
                fs_err::metadata(&bundle)
                    .map(|m| m.len() >> 20)
                    .unwrap_or(0),
                t.elapsed().as_secs()
            ));
            let resolved: Resolved = resolve.json();
            built.push((bundle, resolved));
        }
        drop((files, registry));
        let _ = fs_err::remove_dir_all(w.join("cache"));
        let (to_bundle, to_resolved) = built.pop().expect("to");
        let from_bundle = built.pop().map_or_else(|| to_bundle.clone(), |b| b.0);
        (from_bundle, to_bundle, to_resolved)
    });
    if upgrade {
        scenario.step("kubexm-build diff of the two bundles (issue 37)");
        scenario.timed("diff", || {
            diff_matches_resolves(&tools, w, (&from_v, &from_bundle), (&to_v, &to_bundle))
        });
    }
    let from_parts = Parts::of(&from_bundle, &catalog, &ver(&from_v).built_images());
    let to_parts = Parts::of(&to_bundle, &catalog, &ver(&to_v).built_images());
    for (v, p) in [(&from_v, &from_parts), (&to_v, &to_parts)] {
        scenario.note(&format!("{v} REAL:      {}", join(&p.real)));
        scenario.note(&format!("{v} STAND-IN:  {}", join(&p.standin)));
        for item in [
            format!("kubeadm {v}"),
            format!("kubelet {v}"),
            format!("image registry.k8s.io/kube-apiserver:{v}"),
        ] {
            check(
                p.has_real(&item),
                &format!("the {v} bundle holds the REAL {item}"),
                &join(&p.real),
            );
        }
    }
    // DNS is checked where CoreDNS is REAL in that version's bundle; verify-cluster's dns check
    // asks NodeLocal DNS (169.254.25.10), so it can pass only when that works too (REAL, or the
    // lab's SUBSTITUTE: the REAL CoreDNS serving NodeLocal DNS's Corefile), the probe likewise.
    let coredns_from = from_parts.real_image("coredns/coredns:");
    let coredns_to = to_parts.real_image("coredns/coredns:");
    let nodelocal_from = from_parts.working_image("dns/k8s-dns-node-cache:");
    let nodelocal_to = to_parts.working_image("dns/k8s-dns-node-cache:");
    let probe_from = from_parts.working_image("library/busybox:");
    let probe_to = to_parts.working_image("library/busybox:");

    // Install FROM.
    let kx = Kubexm::new(&lab, &tools, w, &from_bundle, &from_cluster);
    scenario.step(&format!(
        "kubexm-install ({from_v}, kubeadm, internal haproxy, stacked etcd)"
    ));
    let out = scenario.timed("install", || kx.install(&[]));
    let out = kx.ok(out, &format!("the install of {from_v} succeeds"));
    eprint!("{}", tail(&out.stdout, 6));

    let admin = kx.pki().join("admin.conf");
    let kc = kubectl_for(&lab, &admin, ver(&from_v).kubectl());
    scenario.note(&format!(
        "kubectl through {} (certificate name {:?})",
        kc.servers.join(", "),
        kc.tls_server_name
    ));

    // 3. Checks.
    scenario.step("checks");
    let (pods, proxy_before) = scenario.timed("checks", || {
        let pods = check_cluster(&scenario, &lab, &kc, &from_v, coredns_from);
        verify_cluster(&scenario, &kx, coredns_from && nodelocal_from, probe_from);
        (pods, kube_proxy(&kc))
    });
    check(
        proxy_before.0 == LOCAL_API,
        "kube-proxy's kubeconfig (ConfigMap kube-proxy, kubeconfig.conf) names the internal load balancer's local endpoint",
        &format!("server: {:?}", proxy_before.0),
    );
    scenario.note(&format!(
        "kube-proxy: server {} (the internal load balancer's local endpoint), mode {:?}",
        proxy_before.0, proxy_before.1
    ));
    let _ = pods;

    let kx = if upgrade {
        // 4. The upgrade, watched.
        let kx = Kubexm::new(&lab, &tools, w, &to_bundle, &to_cluster);
        let kc_to = Kubectl {
            bin: ver(&to_v).kubectl(),
            ..kc.clone()
        };
        scenario.step(&format!(
            "kubexm-install upgrade {from_v} -> {to_v}, the Deployment watched every second"
        ));
        let to_bundle_s = to_bundle.to_string_lossy().into_owned();
        let to_cluster_s = to_cluster.to_string_lossy().into_owned();
        let upgrade_args = [
            "upgrade",
            "--bundle",
            &to_bundle_s,
            "-f",
            &to_cluster_s,
            "--no-backup",
            "--yes",
        ];
        let (out, watch) = scenario.timed("upgrade", || {
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                let watcher = s.spawn(|| watch_deployment(&kc, &stop));
                let out = kx.run(&upgrade_args);
                stop.store(true, Ordering::SeqCst);
                (out, watcher.join().expect("the watcher thread"))
            })
        });
        let out = kx.ok(out, &format!("the upgrade to {to_v} succeeds"));
        eprint!("{}", tail(&out.stdout, 6));
        scenario.note(&format!(
            "watcher: {} reads, {} without an answer, fewest available {} (minAvailable {})",
            watch.reads,
            watch.errors.len(),
            watch.fewest,
            REPLICAS - 1
        ));
        check(
            watch.reads >= 30 && watch.violations.is_empty(),
            &format!(
                "during the upgrade lab-web never had fewer than {} available pods (the PodDisruptionBudget), read every second",
                REPLICAS - 1
            ),
            &format!(
                "{} reads; below minAvailable: {:?}; unanswered: {:?}",
                watch.reads, watch.violations, watch.errors
            ),
        );

        scenario.step(&format!("checks after the upgrade ({to_v})"));
        scenario.timed("checks after the upgrade", || {
            let _ = check_cluster(&scenario, &lab, &kc_to, &to_v, coredns_to);
            paired_images(&scenario, &kc_to, &to_resolved);
            let proxy_after = kube_proxy(&kc_to);
            check(
                proxy_after.0 == LOCAL_API && proxy_after.1 == proxy_before.1,
                "after the upgrade kube-proxy still uses the internal load balancer's local endpoint, in the same mode (issue 33 item 5)",
                &format!("before {proxy_before:?}, after {proxy_after:?}"),
            );
            scenario.note(&format!(
                "kube-proxy: server {}, mode {:?}, as before",
                proxy_after.0, proxy_after.1
            ));
            verify_cluster(&scenario, &kx, coredns_to && nodelocal_to, probe_to);
        });

        // 5. Again: nothing to do.
        scenario.step("the upgrade again changes nothing");
        let runs_before = kx.runs().len();
        let history_before = kx.record().history.len();
        let out = kx.ok(kx.run(&upgrade_args), "a second upgrade succeeds");
        if kx.runs().len() > runs_before {
            let s = kx.last_summary();
            check(
                s.changed == 0 && s.succeeded,
                "the second upgrade's run changed nothing (journal: no step `changed`)",
                &format!("{s:?}\n{}\n{}", changed_steps(&kx.last_events()), out),
            );
            scenario.note("second upgrade: its run succeeded, 0 steps changed");
        } else {
            check(
                kx.record().history.len() == history_before
                    && kx.record().last().is_some_and(|o| o.operation.contains("upgrade")),
                "the second upgrade started no run and recorded nothing (the record's last operation is still the upgrade)",
                &out,
            );
            scenario.note(&format!(
                "second upgrade: no run started (nothing to do): {}",
                out.stdout.lines().last().unwrap_or("")
            ));
        }
        kx
    } else {
        kx
    };

    scenario.step("delete --yes");
    let out = scenario.timed("delete", || kx.delete(&["--yes"]));
    eprint!("{}", tail(&kx.ok(out, "delete --yes succeeds").stdout, 3));
    for (i, n) in NODES.iter().enumerate() {
        if net == Net::LabCni {
            // The lab CNI's own files (a postInstall script's, not KubeXM's to remove).
            let _ = lab.ssh(
                n,
                "systemctl disable -q kubexm-lab-pod-routes.service; rm -f /etc/systemd/system/kubexm-lab-pod-routes.service
                 while read -r c v; do ip route del \"$c\" via \"$v\"; done </etc/kubexm-lab/pod-routes
                 rm -rf /etc/kubexm-lab /etc/cni/net.d/10-kubexm-lab.conflist; rmdir /etc/cni/net.d /etc/cni 2>/dev/null; systemctl daemon-reload",
            );
        }
        let after = lab.node_state(n);
        check(
            after == before[i],
            &format!("{n}: after delete, as before the install"),
            &diff(&before[i], &after),
        );
    }
    scenario.note("every node as before the install");
    for (k, label) in [
        ("build (cached: reuse)", "build"),
        ("bundle", "bundle"),
        ("install", "install"),
        ("checks", "checks"),
        ("upgrade", "upgrade"),
        ("checks after the upgrade", "checks after"),
        ("delete", "delete"),
    ] {
        if let Some(d) = scenario.time(k) {
            scenario.note(&format!("phase {label:<14} {:>7.1} s", d.as_secs_f64()));
        }
    }
    scenario.note(&format!(
        "REAL ({to_v} bundle):     {}",
        join(&to_parts.real)
    ));
    scenario.note(&format!(
        "STAND-IN ({to_v} bundle): {}",
        join(&to_parts.standin)
    ));
    if net == Net::LabCni {
        scenario.note("STAND-IN: the pod network (lab bridge CNI, postInstall)");
    }
    if !upgrade {
        eprintln!("!! install part alone ({to_v}); the upgrade was NOT run");
    }
}

/// After the upgrade: the stacked etcd's static pods and CoreDNS's Deployment run the images the
/// catalog pairs with the new version (resolve -o json of the new cluster) — issue 33 item 4.
fn paired_images(scenario: &Scenario, kc: &Kubectl, resolved: &Resolved) {
    let etcd_want = name_tag(resolved.image("etcd", "etcd")).to_string();
    let coredns_want = name_tag(resolved.image("kubernetes", "coredns")).to_string();
    for n in NODES {
        let p: Pod = kc.get(&["-n", "kube-system", "get", "pod", &format!("etcd-{n}")]);
        let got = p.image_of("etcd").unwrap_or_default();
        check(
            name_tag(got) == etcd_want,
            &format!(
                "{n}: the stacked etcd runs {etcd_want}, the catalog's etcd for the new version"
            ),
            &got,
        );
    }
    let d: Deployment = kc.get(&["-n", "kube-system", "get", "deployment", "coredns"]);
    let got: Vec<&str> = d
        .spec
        .template
        .spec
        .containers
        .iter()
        .map(|c| c.image.as_str())
        .collect();
    check(
        got.iter().any(|i| name_tag(i) == coredns_want),
        &format!(
            "the CoreDNS Deployment runs {coredns_want}, the catalog's CoreDNS for the new version"
        ),
        &format!("{got:?}"),
    );
    scenario.note(&format!("etcd static pods on node1-3 run {etcd_want}; CoreDNS runs {coredns_want} (as resolve pairs them)"));
}

/// What the watcher saw.
#[derive(Debug)]
struct Watch {
    reads: usize,
    fewest: u32,
    /// (seconds since the start, available, ready) below minAvailable.
    violations: Vec<(u64, u32, u32)>,
    /// (seconds since the start, the error) when no API server answered.
    errors: Vec<(u64, String)>,
}

/// Reads lab-web's Deployment every second until `stop`.
fn watch_deployment(kc: &Kubectl, stop: &AtomicBool) -> Watch {
    let t0 = Instant::now();
    let mut w = Watch {
        reads: 0,
        fewest: REPLICAS,
        violations: Vec::new(),
        errors: Vec::new(),
    };
    while !stop.load(Ordering::SeqCst) {
        let tick = Instant::now();
        match kc.try_get::<Deployment>(&["-n", "lab", "get", "deployment", "lab-web"]) {
            Ok(d) => {
                w.reads += 1;
                w.fewest = w.fewest.min(d.status.available_replicas);
                if d.status.available_replicas < REPLICAS - 1 {
                    w.violations.push((
                        t0.elapsed().as_secs(),
                        d.status.available_replicas,
                        d.status.ready_replicas,
                    ));
                }
            }
            Err(e) => w.errors.push((
                t0.elapsed().as_secs(),
                e.stderr.lines().last().unwrap_or("").to_string(),
            )),
        }
        if let Some(rest) = Duration::from_secs(1).checked_sub(tick.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    w
}

/// A `resolve -o json` list's field values (`binaries[].path`, `images[].reference`).
fn resolved_set(r: &Value, list: &str, key: &str) -> BTreeSet<String> {
    r[list]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x[key].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A diff list's field values (`/files/added` + `/path`, `/images/retagged` + `/new/reference`).
fn diff_set(d: &Value, pointer: &str, key: &str) -> BTreeSet<String> {
    d.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.pointer(key).and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 37: `kubexm-build diff FROM TO -o json` of the two REAL lab bundles (a minor apart)
/// lists exactly what their two resolves differ by — Kubernetes' version, the files by path, the
/// images by reference (added/removed or retagged, none changed in place) — and nothing else: no
/// OS package, no other entry.
fn diff_matches_resolves(tools: &Tools, w: &Path, from: (&str, &Path), to: (&str, &Path)) {
    let out = Output::run(
        Command::new(tools.build_bin())
            .arg("diff")
            .arg(from.1)
            .arg(to.1)
            .args(["-o", "json"]),
    )
    .ok("kubexm-build diff FROM TO -o json");
    let d: Value = out.json();
    let resolved = |v: &str| -> Value {
        let text = fs_err::read_to_string(w.join(format!("resolve-{v}.json"))).expect("resolve");
        serde_json::from_str(&text).expect("resolve -o json is JSON")
    };
    let (r_old, r_new) = (resolved(from.0), resolved(to.0));
    let seen = serde_json::to_string_pretty(&d).unwrap_or_default();
    check(
        d["kubernetes"]["old"] == from.0 && d["kubernetes"]["new"] == to.0,
        &format!("diff: Kubernetes {} -> {}", from.0, to.0),
        &seen,
    );
    for (list, key, what) in [
        ("binaries", "path", "files"),
        ("images", "reference", "images"),
    ] {
        let (o, n) = (
            resolved_set(&r_old, list, key),
            resolved_set(&r_new, list, key),
        );
        let (re_new, re_old) = if what == "files" {
            ("/new/path", "/old/path")
        } else {
            ("/new/reference", "/old/reference")
        };
        let pair = if what == "files" {
            "changed"
        } else {
            "retagged"
        };
        let mut listed_new = diff_set(&d, &format!("/{what}/added"), &format!("/{key}"));
        listed_new.extend(diff_set(&d, &format!("/{what}/{pair}"), re_new));
        let mut listed_old = diff_set(&d, &format!("/{what}/removed"), &format!("/{key}"));
        listed_old.extend(diff_set(&d, &format!("/{what}/{pair}"), re_old));
        let only_new: BTreeSet<String> = n.difference(&o).cloned().collect();
        let only_old: BTreeSet<String> = o.difference(&n).cloned().collect();
        check(
            !only_new.is_empty() && listed_new == only_new && listed_old == only_old,
            &format!(
                "diff: the {what} only in {} / only in {} are exactly the resolves' difference",
                to.0, from.0
            ),
            &format!(
                "resolves: +{only_new:?} -{only_old:?}\ndiff: +{listed_new:?} -{listed_old:?}"
            ),
        );
    }
    check(
        d["images"]["changed"].as_array().is_some_and(Vec::is_empty)
            && d["osPackages"].as_array().is_some_and(Vec::is_empty)
            && ["added", "removed", "changed"]
                .iter()
                .all(|k| d["otherEntries"][k].as_array().is_some_and(Vec::is_empty)),
        "diff: no image changed in place, no OS package and no other entry differs",
        &seen,
    );
    eprintln!(
        "   diff {} -> {}: {} file(s) added, {} removed, {} changed; {} image(s) added, {} removed, {} retagged",
        from.0,
        to.0,
        d["files"]["added"].as_array().map_or(0, Vec::len),
        d["files"]["removed"].as_array().map_or(0, Vec::len),
        d["files"]["changed"].as_array().map_or(0, Vec::len),
        d["images"]["added"].as_array().map_or(0, Vec::len),
        d["images"]["removed"].as_array().map_or(0, Vec::len),
        d["images"]["retagged"].as_array().map_or(0, Vec::len),
    );
}
