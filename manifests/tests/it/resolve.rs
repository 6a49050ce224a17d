//! Snapshot matrix of the resolver: each runtime, etcd type, LB mode, plugin, registry type,
//! both Kubernetes types, two arches, and the default, cn and a local user zone.

use std::fmt::Write;
use std::path::Path;

use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::model::*;
use kubexm_manifests::resolve::{resolve, Resolution};
use kubexm_manifests::secret::Secret;
use kubexm_manifests::validate::validate;
use kubexm_manifests::zone::Zone;

use crate::common::{base, builtin};

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn zone(name: &str) -> Zone {
    match name {
        "local" => Zone::select(None, Some(&fixture("zone-local.yaml"))).expect("local zone"),
        other => Zone::select(Some(other), None).expect("built-in zone"),
    }
}

fn roles<T: std::fmt::Debug>(r: &std::collections::BTreeSet<T>) -> String {
    r.iter()
        .map(|x| format!("{x:?}").to_lowercase())
        .collect::<Vec<_>>()
        .join(",")
}

/// One line per file and per image: compact enough to review in a diff.
fn render(r: &Resolution) -> String {
    let mut s = format!(
        "zone={} arches={:?} type={:?}\n",
        r.zone, r.arches, r.kubernetes_type
    );
    for b in &r.binaries {
        let _ = writeln!(
            s,
            "file  {} {} {} [{}] {} {}",
            b.name,
            b.version,
            b.arch,
            roles(&b.roles),
            b.url,
            if b.unpinned {
                "UNPINNED".to_string()
            } else {
                format!("sha256:{}", &b.sha256[..16])
            }
        );
        assert_eq!(b.unpinned, b.sha256.is_empty(), "{}", b.name);
        assert!(
            b.path
                .starts_with(&format!("files/{}/{}/{}/", b.name, b.version, b.arch)),
            "{}",
            b.path
        );
    }
    for a in &r.addons {
        let _ = writeln!(
            s,
            "addon {} {:?} {:?} sha256:{} -> {}/",
            a.addon,
            a.kind,
            a.source,
            a.sha256.as_deref().unwrap_or("-"),
            a.dir
        );
    }
    for i in &r.images {
        let _ = writeln!(
            s,
            "image {} <- {} [{}] [{}]",
            i.reference,
            i.source,
            i.platforms.iter().cloned().collect::<Vec<_>>().join(","),
            roles(&i.roles)
        );
    }
    s
}

fn run(catalog: &Catalog, zone_name: &str, edit: impl FnOnce(&mut ClusterFile)) -> String {
    let mut f = base();
    edit(&mut f);
    let valid = validate(f, catalog).unwrap_or_else(|p| panic!("variant must be valid: {p:#?}"));
    match resolve(&valid, catalog, &zone(zone_name)) {
        Ok(r) => render(&r),
        Err(problems) => problems.iter().map(|p| format!("PROBLEM {p}\n")).collect(),
    }
}

macro_rules! snap {
    ($name:ident, $zone:expr, $edit:expr) => {
        #[test]
        fn $name() {
            insta::assert_snapshot!(stringify!($name), run(&builtin(), $zone, $edit));
        }
    };
}

snap!(default_containerd_calico_haproxy, "default", |_| {});
snap!(zone_cn, "cn", |_| {});
snap!(zone_local_mirror, "local", |_| {});
snap!(mixed_arches_arm64_worker, "default", |f| f.spec.hosts[3]
    .arch =
    Arch::Arm64);
snap!(runtime_docker_with_cri_dockerd, "default", |f| f
    .spec
    .runtime
    .kind =
    RuntimeType::Docker);
snap!(runtime_cri_o_bundle_crictl_and_cni, "default", |f| f
    .spec
    .runtime
    .kind =
    RuntimeType::CriO);
snap!(runtime_isulad_needs_a_pin, "default", |f| f
    .spec
    .runtime
    .kind =
    RuntimeType::Isulad);
snap!(etcd_kubeadm_stacked, "default", |f| {
    f.spec.etcd.kind = EtcdType::Kubeadm;
    f.spec.role_groups.etcd.clear();
});
snap!(etcd_external, "default", |f| {
    f.spec.etcd.kind = EtcdType::External;
    f.spec.role_groups.etcd.clear();
    f.spec.etcd.endpoints = vec!["https://10.1.0.1:2379".into()];
    f.spec.etcd.ca_file = Some("ca.pem".into());
    f.spec.etcd.cert_file = Some("c.pem".into());
    f.spec.etcd.key_file = Some("k.pem".into());
});
snap!(lb_none_single_master, "default", |f| {
    f.spec.load_balancer.mode = LbMode::None;
    f.spec.role_groups.master = vec!["m1".into()];
    f.spec.role_groups.etcd = vec!["m1".into()];
});
snap!(lb_internal_nginx, "default", |f| f
    .spec
    .load_balancer
    .internal
    .kind =
    InternalLbType::Nginx);
snap!(lb_internal_kube_vip, "default", |f| {
    f.spec.load_balancer.internal.kind = InternalLbType::KubeVip;
    f.spec.load_balancer.vip = Some("10.0.0.100".into());
    f.spec.load_balancer.interface = Some("eth0".into());
});
snap!(lb_external_keepalived_haproxy, "default", |f| {
    f.spec.load_balancer.mode = LbMode::External;
    f.spec.load_balancer.vip = Some("10.0.0.100".into());
    f.spec.load_balancer.interface = Some("eth0".into());
    f.spec.role_groups.loadbalancer = vec!["r1".into()];
});
snap!(plugin_flannel, "default", |f| f.spec.network.plugin =
    Plugin::Flannel);
/// flannel v0.28.4: the images of that release's kube-flannel.yml (ghcr.io), not Docker Hub's.
#[test]
fn plugin_flannel_v0_28_4_bundles_the_images_its_manifest_runs() {
    let out = run(&builtin(), "default", |f| {
        f.spec.network.plugin = Plugin::Flannel;
        f.spec.network.flannel.version = Some("v0.28.4".into());
    });
    for image in [
        "ghcr.io/flannel-io/flannel:v0.28.4",
        "ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel1",
    ] {
        assert!(
            out.contains(&format!("image {image} <-")),
            "{image} missing:\n{out}"
        );
    }
    assert!(!out.contains("docker.io/flannel/"), "{out}");
}
snap!(plugin_cilium, "default", |f| f.spec.network.plugin =
    Plugin::Cilium);
snap!(plugin_kube_ovn, "default", |f| f.spec.network.plugin =
    Plugin::KubeOvn);
snap!(plugin_hybridnet, "default", |f| f.spec.network.plugin =
    Plugin::Hybridnet);
snap!(plugin_multus_over_calico, "default", |f| {
    f.spec.network.plugin = Plugin::Multus;
    f.spec.network.multus.delegate = Some(Plugin::Calico);
});
snap!(plugin_multus_over_flannel, "default", |f| {
    f.spec.network.plugin = Plugin::Multus;
    f.spec.network.multus.delegate = Some(Plugin::Flannel);
});
snap!(plugins_kata_and_node_feature_discovery, "default", |f| {
    f.spec.kubernetes.kata.enabled = true;
    f.spec.kubernetes.node_feature_discovery.enabled = true;
});
snap!(storage_nfs_and_local_volume, "default", |f| {
    f.spec.role_groups.nfs = vec!["r1".into()];
    f.spec.storage.local_volume = Some(kubexm_manifests::model::LocalVolume {
        enabled: true,
        base_path: kubexm_manifests::model::DEFAULT_LOCAL_BASE_PATH.into(),
        default: true,
    });
});
snap!(plugin_version_pinned_by_user, "default", |f| f
    .spec
    .network
    .calico
    .version =
    Some("v3.30.5".into()));
snap!(registry_harbor_amd64, "default", |f| {
    f.spec.registry.kind = RegistryType::Harbor;
    f.spec.registry.harbor_config.admin_password = Some(Secret::new("pw"));
});
snap!(registry_harbor_on_arm64_host_fails, "default", |f| {
    f.spec.registry.kind = RegistryType::Harbor;
    f.spec.registry.harbor_config.admin_password = Some(Secret::new("pw"));
    f.spec.hosts[4].arch = Arch::Arm64;
});
snap!(
    registry_harbor_with_docker_runtime_uses_its_docker,
    "default",
    |f| {
        f.spec.registry.kind = RegistryType::Harbor;
        f.spec.registry.harbor_config.admin_password = Some(Secret::new("pw"));
        f.spec.runtime.kind = RuntimeType::Docker;
        f.spec.runtime.version = Some("24.0.6".into());
    }
);
snap!(registry_external, "default", |f| {
    f.spec.registry.kind = RegistryType::External;
    f.spec.registry.private_registry = Some("reg.corp:5000".into());
    f.spec.role_groups.registry.clear();
});
snap!(
    kubernetes_kubexm_with_builtin_catalog_fails,
    "default",
    |f| f.spec.kubernetes.kind = KubernetesType::Kubexm
);
snap!(unknown_component_version, "default", |f| f
    .spec
    .runtime
    .version =
    Some("1.0.0".into()));
snap!(helm_addon_adds_helm_and_images, "default", |f| {
    f.spec.addons = vec![Addon {
        name: "ingress".into(),
        namespace: "ingress-nginx".into(),
        kind: AddonType::Helm,
        source: AddonSource {
            chart: Chart {
                name: Some("ingress-nginx".into()),
                version: Some("4.11.3".into()),
                repo: Some("https://kubernetes.github.io/ingress-nginx".into()),
            },
            ..AddonSource::default()
        },
        values: Default::default(),
        images: vec![
            "registry.k8s.io/ingress-nginx/controller:v1.11.3".into(),
            "registry.k8s.io/pause:3.10".into(),
        ],
    }];
});

#[test]
fn kubernetes_kubexm_with_pinned_server_binaries() {
    let catalog =
        Catalog::builtin_with_override(Some(&fixture("catalog-stand-in-server-binaries.yaml")))
            .expect("stand-in catalog merges");
    insta::assert_snapshot!(
        "kubernetes_kubexm_with_pinned_server_binaries",
        run(&catalog, "default", |f| {
            f.spec.kubernetes.kind = KubernetesType::Kubexm;
            f.spec.hosts[3].arch = Arch::Arm64;
        })
    );
}

#[test]
fn runtime_isulad_with_a_pin_gets_runc_crictl_and_cni() {
    let catalog = Catalog::builtin_with_override(Some(&fixture("catalog-isulad-pin.yaml")))
        .expect("isulad pin merges");
    insta::assert_snapshot!(
        "runtime_isulad_with_a_pin_gets_runc_crictl_and_cni",
        run(&catalog, "default", |f| {
            f.spec.runtime.kind = RuntimeType::Isulad;
            f.spec.runtime.version = Some("2.1.5".into());
        })
    );
}

#[test]
fn every_builtin_release_resolves_the_default_cluster() {
    let catalog = builtin();
    let versions = catalog.kubernetes_versions();
    let minors: std::collections::BTreeSet<&str> = versions.iter().map(|v| &v[..5]).collect();
    assert!(minors.len() >= 3, "at least three minors: {minors:?}");
    for v in &versions {
        // Releases without a calico default (v1.20 → v1.22) resolve with network.plugin none;
        // validation refuses calico there (tests/it/validation.rs).
        let has_calico = v
            .parse()
            .ok()
            .and_then(|k| catalog.release(k))
            .is_some_and(|r| r.defaults.contains_key("calico"));
        // One run per release with both arches among the masters and among the nodes (m1 and w1
        // amd64, the others arm64): every file is resolved for both arches.
        let out = run(&catalog, "default", |f| {
            f.spec.kubernetes.version = v.clone();
            f.spec.hosts.iter_mut().for_each(|h| {
                h.arch = if h.name == "m1" || h.name == "w1" {
                    Arch::Amd64
                } else {
                    Arch::Arm64
                };
            });
            if !has_calico {
                f.spec.network.plugin = Plugin::None;
            }
        });
        assert!(!out.contains("PROBLEM"), "{v}: {out}");
        for arch in [Arch::Amd64, Arch::Arm64] {
            assert!(
                out.contains(&format!("file  kubeadm {v} {arch}")),
                "{v} {arch}: {out}"
            );
        }
    }
}

#[test]
fn catalog_override_adds_versions_and_rejects_bad_sums() {
    let dir = std::env::temp_dir().join(format!("kubexm-cat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let good = dir.join("good.yaml");
    let sum = "ab".repeat(32);
    std::fs::write(&good, format!("components:\n  - name: containerd\n    versions:\n      \"9.9.9\": {{amd64: \"{sum}\"}}\n")).expect("write");
    let c = Catalog::builtin_with_override(Some(&good)).expect("override merges");
    assert_eq!(
        c.components["containerd"].versions["9.9.9"][&Arch::Amd64],
        sum
    );
    assert!(
        c.components["containerd"].versions.len() > 1,
        "existing versions are kept"
    );

    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "components:\n  - name: containerd\n    versions:\n      \"9.9.9\": {amd64: \"XYZ\"}\n  - name: newthing\n    versions: {}\n").expect("write");
    let e = Catalog::builtin_with_override(Some(&bad))
        .expect_err("bad override")
        .to_string();
    assert!(e.contains(&bad.display().to_string()), "{e}");
    assert!(
        e.contains("containerd` 9.9.9 amd64: `XYZ` is not a sha256"),
        "{e}"
    );
    assert!(
        e.contains("`newthing` is new, so it needs both `archive` and `url`"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `kubeadm config images list --kubernetes-version v1.20.2` prints with kubeadm v1.20.2
/// (its source: DefaultImageRepository k8s.gcr.io, PauseVersion 3.2, CoreDNSVersion 1.7.0 under
/// `coredns`, DefaultEtcdVersion 3.4.13-0); compared with the real binary when the lab has built it.
const KUBEADM_V1_20_2_IMAGES: [&str; 7] = [
    "k8s.gcr.io/kube-apiserver:v1.20.2",
    "k8s.gcr.io/kube-controller-manager:v1.20.2",
    "k8s.gcr.io/kube-scheduler:v1.20.2",
    "k8s.gcr.io/kube-proxy:v1.20.2",
    "k8s.gcr.io/pause:3.2",
    "k8s.gcr.io/etcd:3.4.13-0",
    "k8s.gcr.io/coredns:1.7.0",
];

fn kubeadm_cluster(version: &str) -> Resolution {
    let catalog = builtin();
    let mut f = base();
    f.spec.kubernetes.version = version.into();
    f.spec.etcd.kind = EtcdType::Kubeadm;
    f.spec.role_groups.etcd = Vec::new();
    f.spec.network.plugin = Plugin::None;
    let valid = validate(f, &catalog).unwrap_or_else(|p| panic!("{p:#?}"));
    resolve(&valid, &catalog, &zone("default")).unwrap_or_else(|p| panic!("{p:#?}"))
}

fn kubeadm_images(r: &Resolution) -> std::collections::BTreeSet<String> {
    r.images
        .iter()
        .filter(|i| i.group == "kubernetes" || i.group == "etcd")
        .map(|i| i.reference.clone())
        .collect()
}

#[test]
fn v1_20_2_bundles_exactly_the_images_kubeadm_lists() {
    let r = kubeadm_cluster("v1.20.2");
    let want: std::collections::BTreeSet<String> = KUBEADM_V1_20_2_IMAGES
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(kubeadm_images(&r), want);

    // The lab's build (tests/lab/kubernetes/build-kubernetes), or KUBEXM_KUBEADM naming one.
    let built = std::env::var_os("KUBEXM_KUBEADM")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain(
            std::fs::read_dir("/var/tmp/kubexm-lab/cache")
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join("bin/kubeadm")),
        )
        .find(|p| {
            p.is_file()
                && (std::env::var_os("KUBEXM_KUBEADM").is_some_and(|k| p.as_os_str() == k)
                    || p.parent()
                        .and_then(Path::parent)
                        .and_then(Path::file_name)
                        .is_some_and(|n| n.to_string_lossy().starts_with("kubernetes-")))
        });
    match built {
        Some(kubeadm) => {
            let out = std::process::Command::new(&kubeadm)
                .args(["config", "images", "list", "--kubernetes-version", "v1.20.2"])
                .output()
                .expect("run the lab's kubeadm");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let listed: std::collections::BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect();
            assert_eq!(listed, want, "real kubeadm v1.20.2 ({})", kubeadm.display());
        }
        None => eprintln!(
            "no lab-built kubeadm under /var/tmp/kubexm-lab/cache/kubernetes-*/bin: compared with the pinned list only"
        ),
    }
}

#[test]
fn image_registry_follows_kubeadm_per_patch() {
    // k8s.gcr.io until the backports v1.22.17 / v1.23.15 / v1.24.9; registry.k8s.io after.
    for (v, repo, etcd, coredns) in [
        (
            "v1.22.16",
            "k8s.gcr.io",
            "3.5.0-0",
            "coredns/coredns:v1.8.4",
        ),
        (
            "v1.22.17",
            "registry.k8s.io",
            "3.5.6-0",
            "coredns/coredns:v1.8.4",
        ),
        (
            "v1.23.14",
            "k8s.gcr.io",
            "3.5.5-0",
            "coredns/coredns:v1.8.6",
        ),
        (
            "v1.23.15",
            "registry.k8s.io",
            "3.5.6-0",
            "coredns/coredns:v1.8.6",
        ),
        ("v1.24.8", "k8s.gcr.io", "3.5.5-0", "coredns/coredns:v1.8.6"),
        (
            "v1.24.9",
            "registry.k8s.io",
            "3.5.6-0",
            "coredns/coredns:v1.8.6",
        ),
        (
            "v1.30.4",
            "registry.k8s.io",
            "3.5.12-0",
            "coredns/coredns:v1.11.1",
        ),
        (
            "v1.30.5",
            "registry.k8s.io",
            "3.5.15-0",
            "coredns/coredns:v1.11.3",
        ),
    ] {
        let images = kubeadm_images(&kubeadm_cluster(v));
        assert_eq!(images.len(), 7, "{v}: {images:?}");
        assert!(
            images.iter().all(|i| i.starts_with(&format!("{repo}/"))),
            "{v}: {images:?}"
        );
        assert!(
            images.contains(&format!("{repo}/etcd:{etcd}")),
            "{v}: {images:?}"
        );
        assert!(
            images.contains(&format!("{repo}/{coredns}")),
            "{v}: {images:?}"
        );
        assert!(
            images.contains(&format!("{repo}/kube-apiserver:{v}")),
            "{v}: {images:?}"
        );
    }
}

#[test]
fn network_plugin_none_bundles_no_cni() {
    let r = kubeadm_cluster("v1.33.11");
    for b in &r.binaries {
        assert!(
            ![
                "calicoctl",
                "calico-chart",
                "cilium-chart",
                "flannel-manifest",
                "helm"
            ]
            .contains(&b.name.as_str()),
            "{}",
            b.name
        );
    }
    for i in &r.images {
        assert!(
            [
                "kubernetes",
                "etcd",
                "nodelocaldns",
                "haproxy",
                kubexm_manifests::resolve::PROBE_GROUP
            ]
            .contains(&i.group.as_str()),
            "{} ({})",
            i.reference,
            i.group
        );
    }
    // The CNI plugins binaries (loopback, bridge, …) still come with the runtime.
    assert!(r.binaries.iter().any(|b| b.name == "cni-plugins"));
}

snap!(v1_20_2_kubeadm_network_none, "default", |f| {
    f.spec.kubernetes.version = "v1.20.2".into();
    f.spec.network.plugin = Plugin::None;
});
snap!(v1_23_17_docker_dockershim, "default", |f| {
    f.spec.kubernetes.version = "v1.23.17".into();
    f.spec.runtime.kind = RuntimeType::Docker;
});

#[test]
fn os_packages_follow_the_cluster() {
    use kubexm_manifests::ospackages::{
        for_cluster, kube_proxy, ETCD_DISK_CHECK, LB_HAPROXY, LB_NGINX, NODE_PREP, RUNTIME_DEPS,
    };
    use kubexm_manifests::osrelease::Family;
    use kubexm_manifests::resolve::Role;
    let catalog = crate::common::builtin();
    let mut f = crate::common::base();
    f.spec.system.debs = vec!["jq".into(), "socat".into()];
    f.spec.load_balancer.mode = kubexm_manifests::model::LbMode::External;
    f.spec.load_balancer.vip = Some("10.0.0.100".into());
    f.spec.load_balancer.interface = Some("eth0".into());
    f.spec.load_balancer.external.kind = kubexm_manifests::model::ExternalLbType::KubexmKn;
    f.spec.role_groups.loadbalancer = vec!["w1".into()];
    let cluster = kubexm_manifests::validate::validate(f, &catalog).expect("valid");
    let debs = for_cluster(&cluster, Family::Deb);
    let names: Vec<&str> = debs.iter().map(|n| n.name.as_str()).collect();
    let mut want: Vec<&str> = NODE_PREP.debs.to_vec();
    want.extend(RUNTIME_DEPS.debs);
    for p in kube_proxy(cluster.proxy_mode()).debs {
        if !want.contains(p) {
            want.push(p);
        }
    }
    want.push("jq");
    want.extend(ETCD_DISK_CHECK.debs);
    want.extend(LB_NGINX.debs);
    assert_eq!(
        names, want,
        "socat is listed once (node preparation asks first)"
    );
    let jq = debs.iter().find(|n| n.name == "jq").expect("jq");
    assert_eq!(jq.reason, "spec.system.debs[0]");
    assert!(jq.roles.is_empty(), "system.debs go on every host");
    let nginx = debs.iter().find(|n| n.name == "nginx").expect("nginx");
    assert_eq!(nginx.roles, [Role::Loadbalancer].into());
    assert!(!names
        .iter()
        .any(|n| LB_HAPROXY.debs.contains(n) && *n != "keepalived"));
    let rpms: Vec<String> = for_cluster(&cluster, Family::Rpm)
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert!(
        rpms.contains(&"conntrack-tools".to_owned())
            && rpms.contains(&"nginx-mod-stream".to_owned()),
        "{rpms:?}"
    );
    assert!(!rpms.contains(&"jq".to_owned()), "system.debs are not rpms");
    // fio on the etcd members (etcd.type kubexm: the etcd role), for preflight's disk check;
    // not bundled when the check is off.
    let fio = debs.iter().find(|n| n.name == "fio").expect("fio");
    assert_eq!(fio.roles, [Role::Etcd].into());
    let mut off = cluster.file.clone();
    off.spec.system.preflight.etcd_fsync_check = Some(false);
    let off = kubexm_manifests::validate::validate(off, &catalog).expect("valid");
    assert!(!for_cluster(&off, Family::Deb)
        .iter()
        .any(|n| n.name == "fio"));
    assert!(
        !names.iter().any(|n| n.starts_with("nfs-")),
        "no NFS without an nfs host"
    );
    // An nfs host: its server package, and the client on every Kubernetes node (bundled for
    // every osReleases entry like the others).
    let mut nfs = cluster.file.clone();
    nfs.spec.role_groups.nfs = vec!["r1".into()];
    let nfs = kubexm_manifests::validate::validate(nfs, &catalog).expect("valid");
    let debs = for_cluster(&nfs, Family::Deb);
    let server = debs
        .iter()
        .find(|n| n.name == "nfs-kernel-server")
        .expect("server");
    assert_eq!(server.roles, [Role::Nfs].into());
    assert_eq!(server.reason, "NFS server");
    let client = debs
        .iter()
        .find(|n| n.name == "nfs-common")
        .expect("client");
    assert_eq!(client.roles, [Role::Master, Role::Worker].into());
    // On RPM both are nfs-utils: one package, on both.
    let rpms = for_cluster(&nfs, Family::Rpm);
    let utils: Vec<_> = rpms.iter().filter(|n| n.name == "nfs-utils").collect();
    assert_eq!(utils.len(), 1);
    assert_eq!(
        utils[0].roles,
        [Role::Master, Role::Worker, Role::Nfs].into()
    );
}

/// Every bundle carries `verify-cluster`'s probe image (issue 37), whatever the configuration.
#[test]
fn every_resolve_carries_the_probe_image() {
    for r in [kubeadm_cluster("v1.33.11"), kubeadm_cluster("v1.20.2")] {
        let probes: Vec<&str> = r
            .images
            .iter()
            .filter(|i| i.group == kubexm_manifests::resolve::PROBE_GROUP)
            .map(|i| i.reference.as_str())
            .collect();
        assert_eq!(probes, ["docker.io/library/busybox:1.36.1"]);
    }
}
