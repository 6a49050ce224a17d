//! Import of KubeKey's own published sample configurations (`tests/fixtures/kubekey/`, sources
//! in its README): every sample maps to a valid cluster.yaml or is refused with the field and
//! the flag to pass; every field that does not map is reported with a reason.

use kubexm_manifests::import::{
    detect, import_kubekey, Format, ImportError, ImportOptions, Imported,
};
use kubexm_manifests::load::load_cluster_str;
use kubexm_manifests::model::{
    EtcdType, InternalLbType, LbMode, Plugin, RegistryType, RewriteMode, RuntimeType,
};

use crate::common::builtin;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/kubekey/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn opts() -> ImportOptions {
    ImportOptions::new("cluster.yaml.secrets")
}

fn run(files: &[&str], opts: &ImportOptions) -> Result<Imported, ImportError> {
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|f| ((*f).to_owned(), fixture(f)))
        .collect();
    let inputs: Vec<(&str, &str)> = texts
        .iter()
        .map(|(f, t)| (f.as_str(), t.as_str()))
        .collect();
    import_kubekey(&inputs, opts, &builtin())
}

fn unmapped<'a>(imported: &'a Imported, field: &str) -> &'a str {
    imported
        .report
        .unmapped
        .iter()
        .find(|u| u.field == field)
        .map(|u| u.reason.as_str())
        .unwrap_or_else(|| {
            panic!(
                "`{field}` is not reported as unmapped: {:#?}",
                imported.report.unmapped
            )
        })
}

/// The written file is what `kubexm-build validate` reads: it must load and validate.
fn reloads(imported: &Imported, origin: &str) -> String {
    let text = imported.render(origin).expect("renders");
    load_cluster_str(&text, "cluster.yaml", &builtin())
        .unwrap_or_else(|e| panic!("the written cluster.yaml does not validate: {e}\n{text}"));
    text
}

#[test]
fn detects_kubekey_documents() {
    assert_eq!(
        detect(&fixture("v1alpha2-config-example.yaml")),
        Some(Format::KubeKeyCluster)
    );
    assert_eq!(
        detect(&fixture("v4-config-v1.33.yaml")),
        Some(Format::KubeKeyConfig)
    );
    assert_eq!(
        detect(&fixture("v4-inventory-ha.yaml")),
        Some(Format::KubeKeyInventory)
    );
    assert_eq!(
        detect("apiVersion: kubexm.io/v1alpha1\nkind: Cluster\n"),
        None
    );
}

#[test]
fn config_example_as_written_is_refused_with_what_to_change() {
    // KubeKey's sample asks for Kubernetes v1.21.5 with calico: the catalog has the release but
    // no calico for it.
    let err = run(&["v1alpha2-config-example.yaml"], &opts()).expect_err("no calico for v1.21.5");
    let msg = err.to_string();
    assert!(
        msg.contains("spec.network.plugin") && msg.contains("v1.21.5"),
        "{msg}"
    );
    assert!(msg.contains("--kubernetes-version"), "{msg}");
    // A version the catalog does not have at all is refused on the version itself.
    let text =
        fixture("v1alpha2-config-example.yaml").replace("version: v1.21.5", "version: v1.19.16");
    let err =
        import_kubekey(&[("old.yaml", text.as_str())], &opts(), &builtin()).expect_err("v1.19");
    let msg = err.to_string();
    assert!(
        msg.contains("spec.kubernetes.version") && msg.contains("--kubernetes-version"),
        "{msg}"
    );
}

#[test]
fn config_example_maps_to_a_valid_cluster() {
    let mut o = opts();
    o.kubernetes_version = Some("v1.33.11".into());
    let imported = run(&["v1alpha2-config-example.yaml"], &o).expect("imports");
    let c = &imported.cluster;
    let spec = &c.spec;
    assert_eq!(c.metadata.name, "sample");
    assert_eq!(spec.kubernetes.version, "v1.33.11");
    // Hosts: port, user, the IPv4 half of a dual-stack pair, labels, keys and passwords.
    let names: Vec<&str> = spec.hosts.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["node1", "node2", "node3"]);
    let node1 = &spec.hosts[0];
    assert_eq!((node1.port, node1.user.as_str()), (8022, "ubuntu"));
    assert_eq!(node1.internal(), "172.16.0.2");
    assert_eq!(
        node1.password_file.as_deref(),
        Some("cluster.yaml.secrets/node1.password")
    );
    assert!(node1.password.is_none(), "no inline host password");
    assert_eq!(spec.hosts[1].labels["disk"], "SSD");
    assert_eq!(
        spec.hosts[2].private_key_path.as_deref(),
        Some("~/.ssh/id_rsa")
    );
    let pw: Vec<(&str, &str)> = imported
        .secret_files
        .iter()
        .map(|s| (s.path.as_str(), s.content.expose()))
        .collect();
    assert_eq!(
        pw,
        [
            ("cluster.yaml.secrets/node1.password", "Qcloud@123\n"),
            ("cluster.yaml.secrets/node2.password", "Qcloud@123\n")
        ]
    );
    // Role groups: ranges naming hosts that do not exist are cut to the hosts that do.
    assert_eq!(spec.role_groups.master, ["node1", "node2", "node3"]);
    assert_eq!(spec.role_groups.worker, ["node1"]);
    assert_eq!(spec.role_groups.etcd, ["node1"]);
    assert!(unmapped(&imported, "spec.roleGroups.master[1]")
        .contains("`node4` … `node10` (7) are not in spec.hosts"));
    assert!(unmapped(&imported, "spec.roleGroups.worker[1]").contains("(91) are not in spec.hosts"));
    // Endpoint, runtime, Kubernetes.
    assert_eq!(spec.load_balancer.mode, LbMode::Internal);
    assert_eq!(spec.load_balancer.internal.kind, InternalLbType::Haproxy);
    assert_eq!(spec.load_balancer.domain, "lb.kubesphere.local");
    assert_eq!(spec.runtime.kind, RuntimeType::Docker);
    assert_eq!(spec.etcd.kind, EtcdType::Kubexm);
    assert_eq!(spec.etcd.data_dir.as_deref(), Some("/var/lib/etcd"));
    assert_eq!(
        spec.kubernetes.apiserver_cert_extra_sans,
        ["192.168.8.8", "lb.kubespheredev.local"]
    );
    assert_eq!(
        spec.kubernetes.feature_gates.keys().collect::<Vec<_>>(),
        ["RotateKubeletServerCertificate"],
        "gates Kubernetes v1.33 no longer knows are dropped"
    );
    assert!(
        unmapped(&imported, "spec.kubernetes.featureGates.TTLAfterFinished")
            .contains("removed after Kubernetes v1.24")
    );
    assert!(unmapped(&imported, "spec.kubernetes.clusterName").contains("DNS label"));
    // Network and registry.
    assert_eq!(spec.network.plugin, Plugin::Calico);
    assert_eq!(spec.network.pod_cidr, "10.233.64.0/18");
    assert_eq!(spec.network.service_cidr, "10.233.0.0/18");
    assert!(unmapped(&imported, "spec.network.kubePodsCIDR").contains("smaller than the /64"));
    assert_eq!(spec.registry.kind, RegistryType::Registry);
    assert_eq!(
        spec.registry.private_registry.as_deref(),
        Some("dockerhub.kubekey.local")
    );
    assert_eq!(spec.registry.data_dir.as_deref(), Some("/mnt/registry"));
    let auth = &spec.registry.auths["dockerhub.kubekey.local"];
    assert_eq!(auth.username.as_deref(), Some("xxx"));
    assert!(unmapped(
        &imported,
        "spec.registry.auths[\"dockerhub.kubekey.local\"].certsPath"
    )
    .contains("caFile"));
    // What does not map, each with its reason.
    for field in [
        "spec.etcd.heartbeatInterval",
        "spec.etcd.quotaBackendBytes",
        "spec.kubernetes.autoRenewCerts",
        "spec.kubernetes.kubeProxyConfiguration",
        "spec.kubernetes.podPidsLimit",
        "spec.registry.namespaceRewrite",
        "spec.registry.containerdDataDir",
    ] {
        assert!(!unmapped(&imported, field).is_empty());
    }
    assert_eq!(spec.system.rpms, ["nfs-utils"]);
    // storage.openebs.basePath: KubeKey's local PV, the default class.
    let local = spec.storage.local_volume.as_ref().expect("localVolume");
    assert!(local.enabled && local.default);
    assert_eq!(local.base_path, "/var/openebs/local");
    assert!(!imported
        .report
        .unmapped
        .iter()
        .any(|u| u.field.starts_with("spec.storage")));
    assert!(imported.report.mapped > 30, "{}", imported.report.mapped);

    // Secrets: the report never shows them; the file holds only the registry one inline.
    let report = format!("{:?}", imported.report);
    assert!(!report.contains("Qcloud@123"), "{report}");
    let text = reloads(&imported, "config-example.yaml");
    assert!(
        !text.contains("Qcloud@123"),
        "host passwords are in their own files"
    );
    assert!(
        text.contains("password: '***'") || text.contains("password: \"***\""),
        "{text}"
    );
    assert!(imported.has_inline_secrets());
    insta::assert_snapshot!("import_config_example", text);
}

#[test]
fn registry_sample_maps_control_plane_and_registry_host() {
    let mut o = opts();
    o.kubernetes_version = Some("v1.33.11".into());
    let imported = run(&["v1alpha2-registry.yaml"], &o).expect("imports");
    let spec = &imported.cluster.spec;
    assert_eq!(
        spec.role_groups.master,
        ["node1"],
        "control-plane is the master group"
    );
    assert_eq!(spec.role_groups.registry, ["node1"]);
    assert_eq!(spec.registry.kind, RegistryType::Registry);
    assert_eq!(
        spec.load_balancer.mode,
        LbMode::None,
        "one master, no load balancer"
    );
    assert_eq!(
        spec.registry.auths["dockerhub.kubekey.local"]
            .password
            .as_ref()
            .map(|p| p.expose()),
        Some("Harbor12345")
    );
    assert!(imported
        .report
        .decisions
        .iter()
        .any(|d| d.field == "spec.kubernetes.version" && d.what.contains("v1.21.5")));
    let text = reloads(&imported, "registry.yaml");
    insta::assert_snapshot!("import_registry", text);
}

#[test]
fn addons_sample_is_elided_and_refused_naming_the_missing_groups() {
    let err = run(&["v1alpha2-addons.yaml"], &opts()).expect_err("no roleGroups in the sample");
    let msg = err.to_string();
    assert!(msg.contains("spec.roleGroups.master"), "{msg}");
}

#[test]
fn addons_map_charts_with_versions_and_report_the_rest() {
    let text = fixture("v1alpha2-addons.yaml").replace(
        "  addons:\n",
        "  roleGroups: {etcd: [node1], master: [node1], worker: [node2, node3]}\n  kubernetes: {version: v1.33.11}\n  addons:\n",
    );
    let text = text.replace(
        "        name: sonarqube\n",
        "        name: sonarqube\n        version: 10.5.0\n",
    );
    let imported =
        import_kubekey(&[("addons.yaml", text.as_str())], &opts(), &builtin()).expect("imports");
    let addons: Vec<&str> = imported
        .cluster
        .spec
        .addons
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(addons, ["glusterfs", "sonarqube"]);
    let sonar = &imported.cluster.spec.addons[1];
    assert_eq!(
        sonar.source.chart.repo.as_deref(),
        Some("https://charts.kubesphere.io/main")
    );
    assert!(unmapped(&imported, "spec.addons[0].sources.chart").contains("no chart version"));
    let secret = unmapped(&imported, "spec.addons[3].sources.chart");
    assert!(secret.contains("no chart version"), "{secret}");
    reloads(&imported, "addons.yaml");
}

#[test]
fn kube_vip_needs_the_vip_interface() {
    let base = fixture("v1alpha2-registry.yaml")
        .replace(
            "#internalLoadbalancer: haproxy",
            "internalLoadbalancer: kube-vip",
        )
        .replace("address: \"\"", "address: 192.168.6.100")
        .replace("version: v1.21.5", "version: v1.33.11");
    let err = import_kubekey(&[("vip.yaml", base.as_str())], &opts(), &builtin())
        .expect_err("no interface");
    assert!(err.to_string().contains("--vip-interface"), "{err}");
    let mut o = opts();
    o.vip_interface = Some("eth0".into());
    let imported = import_kubekey(&[("vip.yaml", base.as_str())], &o, &builtin()).expect("imports");
    let lb = &imported.cluster.spec.load_balancer;
    assert_eq!(lb.internal.kind, InternalLbType::KubeVip);
    assert_eq!(lb.vip.as_deref(), Some("192.168.6.100"));
    assert_eq!(lb.interface.as_deref(), Some("eth0"));
    reloads(&imported, "vip.yaml");
}

#[test]
fn v4_default_config_and_localhost_inventory() {
    let imported = run(
        &["v4-config-v1.33.yaml", "v4-inventory-localhost.yaml"],
        &opts(),
    )
    .expect("imports");
    let spec = &imported.cluster.spec;
    assert_eq!(imported.cluster.metadata.name, "default");
    assert_eq!(spec.kubernetes.version, "v1.33.1");
    assert_eq!(spec.hosts.len(), 1);
    assert_eq!(
        (spec.hosts[0].name.as_str(), spec.hosts[0].address.as_str()),
        ("localhost", "127.0.0.1")
    );
    assert_eq!(spec.role_groups.master, ["localhost"]);
    assert_eq!(spec.role_groups.etcd, ["localhost"]);
    assert_eq!(
        spec.etcd.kind,
        EtcdType::Kubexm,
        "v4's external etcd is KubeXM's own etcd service"
    );
    assert_eq!(spec.runtime.kind, RuntimeType::Containerd);
    assert_eq!(spec.network.plugin, Plugin::Calico);
    assert_eq!(spec.load_balancer.mode, LbMode::None);
    for field in [
        "v4-config-v1.33.yaml: spec.kubernetes.helm_version",
        "v4-config-v1.33.yaml: spec.cni.calico_version",
        "v4-config-v1.33.yaml: spec.storage_class.localpv_provisioner_version",
        "v4-config-v1.33.yaml: spec.dns.coredns",
        "v4-config-v1.33.yaml: spec.etcd.etcd_version",
    ] {
        assert!(!unmapped(&imported, field).is_empty());
    }
    let text = reloads(
        &imported,
        "v4-config-v1.33.yaml + v4-inventory-localhost.yaml",
    );
    insta::assert_snapshot!("import_v4_localhost", text);
}

#[test]
fn v4_ha_inventory_gets_a_load_balancer_and_password_files() {
    let imported =
        run(&["v4-config-v1.33.yaml", "v4-inventory-ha.yaml"], &opts()).expect("imports");
    let spec = &imported.cluster.spec;
    assert_eq!(imported.cluster.metadata.name, "ha-cluster");
    assert_eq!(spec.role_groups.master, ["master1", "master2", "master3"]);
    assert_eq!(spec.role_groups.worker, ["worker1", "worker2"]);
    assert_eq!(spec.load_balancer.mode, LbMode::Internal);
    assert!(imported
        .report
        .decisions
        .iter()
        .any(|d| d.field == "spec.loadBalancer" && d.what.contains("first of the 3 masters")));
    assert_eq!(imported.secret_files.len(), 5);
    assert!(spec
        .hosts
        .iter()
        .all(|h| h.password_file.is_some() && h.password.is_none()));
    reloads(&imported, "ha");
}

#[test]
fn v4_offline_registry_config_seeds_the_existing_registry() {
    let mut o = opts();
    o.kubernetes_version = Some("v1.34.3".into());
    let imported = run(
        &["v4-config-offline-registry.yaml", "v4-inventory-ha.yaml"],
        &o,
    )
    .expect("imports");
    let reg = &imported.cluster.spec.registry;
    assert_eq!(reg.kind, RegistryType::External);
    assert_eq!(
        reg.private_registry.as_deref(),
        Some("dockerhub.kubekey.local")
    );
    assert_eq!(reg.rewrite, RewriteMode::KeepPath);
    assert_eq!(
        reg.auths["dockerhub.kubekey.local"].username.as_deref(),
        Some("admin")
    );
    assert!(!unmapped(&imported, "v4-config-offline-registry.yaml: spec.download").is_empty());
    reloads(&imported, "offline");
}

#[test]
fn v4_config_alone_asks_for_the_inventory() {
    let err = run(&["v4-config-v1.33.yaml"], &opts()).expect_err("no inventory");
    assert!(err.to_string().contains("--inventory"), "{err}");
}

#[test]
fn kata_and_node_feature_discovery_switches_map_to_the_same_fields() {
    // The sample's commented-out switches, turned on (with containerd: KubeXM's Kata handler is
    // containerd's).
    let text = fixture("v1alpha2-config-example.yaml")
        .replace(
            "    # kata:\n    #   enabled: true\n    # nodeFeatureDiscovery\n    #   enabled: true\n",
            "    kata:\n      enabled: true\n    nodeFeatureDiscovery:\n      enabled: true\n",
        )
        .replace("containerManager: docker", "containerManager: containerd");
    assert!(
        text.contains("    kata:\n      enabled: true\n"),
        "fixture changed"
    );
    let mut o = opts();
    o.kubernetes_version = Some("v1.33.11".into());
    let imported = import_kubekey(&[("config.yaml", &text)], &o, &builtin()).expect("imports");
    let k = &imported.cluster.spec.kubernetes;
    assert!(k.kata.enabled && k.node_feature_discovery.enabled);
    assert!(
        imported
            .report
            .unmapped
            .iter()
            .all(|u| !u.field.contains("kata") && !u.field.contains("nodeFeatureDiscovery")),
        "{:#?}",
        imported.report.unmapped
    );
    let written = reloads(&imported, "config.yaml");
    assert!(
        written.contains("kata:\n      enabled: true")
            && written.contains("nodeFeatureDiscovery:\n      enabled: true"),
        "{written}"
    );
}

#[test]
fn security_enhancement_and_audit_map_to_security_enhancement() {
    // v1alpha2: `kubernetes.securityEnhancement`, and `audit.enabled` (KubeXM's audit logging is
    // part of its security enhancement); audit settings KubeXM fixes itself are reported.
    let text = fixture("v1alpha2-config-example.yaml").replace(
        "  kubernetes:\n",
        "  kubernetes:\n    audit:\n      enabled: true\n      auditPolicy: /tmp/p.yaml\n",
    );
    let mut o = opts();
    o.kubernetes_version = Some("v1.33.11".into());
    let imported = import_kubekey(&[("config.yaml", &text)], &o, &builtin()).expect("imports");
    assert!(imported.cluster.spec.kubernetes.security_enhancement);
    let fields: Vec<&str> = imported
        .report
        .unmapped
        .iter()
        .map(|u| u.field.as_str())
        .filter(|f| f.contains("audit"))
        .collect();
    assert_eq!(fields, ["spec.kubernetes.audit.auditPolicy"]);
    assert!(reloads(&imported, "config.yaml").contains("securityEnhancement: true"));

    let text = fixture("v1alpha2-config-example.yaml").replace(
        "  kubernetes:\n",
        "  kubernetes:\n    securityEnhancement: true\n",
    );
    let imported = import_kubekey(&[("config.yaml", &text)], &o, &builtin()).expect("imports");
    assert!(imported.cluster.spec.kubernetes.security_enhancement);
    assert!(imported
        .report
        .unmapped
        .iter()
        .all(|u| !u.field.contains("securityEnhancement")));
    let plain = import_kubekey(
        &[("config.yaml", &fixture("v1alpha2-config-example.yaml"))],
        &o,
        &builtin(),
    )
    .expect("imports");
    assert!(!plain.cluster.spec.kubernetes.security_enhancement);

    // v4: `security_enhancement` at the top of spec.
    let config =
        fixture("v4-config-v1.33.yaml").replace("spec:\n", "spec:\n  security_enhancement: true\n");
    let inventory = fixture("v4-inventory-ha.yaml");
    let imported = import_kubekey(
        &[("config.yaml", &config), ("inventory.yaml", &inventory)],
        &opts(),
        &builtin(),
    )
    .expect("imports");
    assert!(imported.cluster.spec.kubernetes.security_enhancement);
    assert!(imported
        .report
        .unmapped
        .iter()
        .all(|u| !u.field.contains("security_enhancement")));
}

#[test]
fn kube_ovn_join_cidr_and_tunnel_map_and_the_rest_is_reported() {
    let text = fixture("v1alpha2-config-example.yaml").replace(
        "    plugin: calico\n",
        "    plugin: kubeovn\n    kubeovn:\n      joinCIDR: 100.65.0.0/16\n      tunnelType: vxlan\n      enableSSL: true\n",
    );
    assert!(text.contains("plugin: kubeovn"), "fixture changed");
    let mut o = opts();
    o.kubernetes_version = Some("v1.33.11".into());
    let imported = import_kubekey(&[("config.yaml", &text)], &o, &builtin()).expect("imports");
    let net = &imported.cluster.spec.network;
    assert_eq!(net.plugin, Plugin::KubeOvn);
    assert_eq!(net.kube_ovn.join_cidr.as_deref(), Some("100.65.0.0/16"));
    assert_eq!(net.kube_ovn.common.mode.as_deref(), Some("vxlan"));
    assert!(
        unmapped(&imported, "spec.network.kubeovn.enableSSL").contains("chart's defaults"),
        "{:#?}",
        imported.report.unmapped
    );
    let written = reloads(&imported, "config.yaml");
    assert!(written.contains("joinCidr: 100.65.0.0/16"), "{written}");

    // Under another plugin, the kube-ovn settings are reported, not carried.
    let other = fixture("v1alpha2-config-example.yaml").replace(
        "    plugin: calico\n",
        "    plugin: calico\n    kubeovn:\n      joinCIDR: 100.64.0.0/16\n",
    );
    let imported = import_kubekey(&[("config.yaml", &other)], &o, &builtin()).expect("imports");
    assert!(imported.cluster.spec.network.kube_ovn.join_cidr.is_none());
    assert!(unmapped(&imported, "spec.network.kubeovn.joinCIDR").contains("kube-ovn plugin only"));
}

#[test]
fn hybridnet_default_network_type_maps_and_its_networks_are_reported() {
    let text = fixture("v1alpha2-config-example.yaml")
        .replace(
            "    plugin: calico\n",
            "    plugin: hybridnet\n    hybridnet:\n      defaultNetworkType: Underlay\n      networks:\n        - {name: net1, type: Underlay}\n",
        )
        .replace(
            "kubePodsCIDR: 10.233.64.0/18,fd85:ee78:d8a6:8607::1:0000/112",
            "kubePodsCIDR: 10.233.64.0/18",
        )
        .replace(
            "kubeServiceCIDR: 10.233.0.0/18,fd85:ee78:d8a6:8607::1000/116",
            "kubeServiceCIDR: 10.233.0.0/18",
        );
    assert!(text.contains("plugin: hybridnet"), "fixture changed");
    let mut o = opts();
    o.kubernetes_version = Some("v1.33.11".into());
    let imported = import_kubekey(&[("config.yaml", &text)], &o, &builtin()).expect("imports");
    let net = &imported.cluster.spec.network;
    assert_eq!(net.plugin, Plugin::Hybridnet);
    assert_eq!(
        net.hybridnet.default_network_type,
        Some(kubexm_manifests::model::HybridnetNetworkType::Underlay)
    );
    assert!(
        unmapped(&imported, "spec.network.hybridnet.networks").contains("Network and Subnet"),
        "{:#?}",
        imported.report.unmapped
    );
    let written = reloads(&imported, "config.yaml");
    assert!(
        written.contains("defaultNetworkType: underlay"),
        "{written}"
    );
}

#[test]
fn v4_kube_ovn_and_hybridnet_versions_map_to_the_catalog_s() {
    for (plugin, line, want) in [
        ("kubeovn", "kubeovn_version: v1.15.0", "v1.15.0"),
        // hybridnet's chart 0.6.8 deploys the image group v0.8.8.
        ("hybridnet", "hybridnet_version: 0.6.8", "v0.8.8"),
    ] {
        let text = fixture("v4-config-v1.33.yaml").replace(
            "    type: calico\n",
            &format!("    type: {plugin}\n    {line}\n"),
        );
        assert!(text.contains(line), "fixture changed");
        let imported = run_texts(&[
            ("config.yaml", &text),
            ("inventory.yaml", &fixture("v4-inventory-localhost.yaml")),
        ]);
        let net = &imported.cluster.spec.network;
        let got = if plugin == "kubeovn" {
            &net.kube_ovn.common.version
        } else {
            &net.hybridnet.common.version
        };
        assert_eq!(got.as_deref(), Some(want), "{plugin}");
        assert!(
            imported
                .report
                .unmapped
                .iter()
                .all(|u| !u.field.ends_with("_version") || !u.field.contains(plugin)),
            "{:#?}",
            imported.report.unmapped
        );
    }
}

fn run_texts(inputs: &[(&str, &str)]) -> Imported {
    import_kubekey(inputs, &opts(), &builtin()).expect("imports")
}

/// v4's `storage_class` and `nfs` group (issue 19): local volumes as KubeKey's defaults have
/// them, and NFS from the nfs group's host with its path; two defaults become one.
#[test]
fn v4_storage_class_and_the_nfs_group() {
    let config = fixture("v4-config-v1.33.yaml");
    let inventory = fixture("v4-inventory-localhost.yaml");
    // KubeKey's default config: local volumes on, the default class.
    let imported = import_kubekey(
        &[("c.yaml", config.as_str()), ("i.yaml", inventory.as_str())],
        &opts(),
        &builtin(),
    )
    .expect("imports");
    let st = &imported.cluster.spec.storage;
    let local = st.local_volume.as_ref().expect("localVolume");
    assert!(local.enabled && local.default);
    assert_eq!(local.base_path, "/var/openebs/local");
    assert!(st.nfs.is_none() && imported.cluster.spec.role_groups.nfs.is_empty());

    // NFS on, the default, from the nfs group's host.
    let config = config.replace(
        "      enabled: false  # Enable the NFS storage class.",
        "      enabled: true\n      default: true\n      path: /data/nfs\n      server: 10.0.0.9",
    );
    let with_group = inventory.replace(
        "#    nfs:\n#      hosts:\n#        - localhost",
        "    nfs:\n      hosts:\n        - localhost",
    );
    assert_ne!(
        with_group, inventory,
        "the fixture has the nfs group commented out"
    );
    let imported = import_kubekey(
        &[("c.yaml", config.as_str()), ("i.yaml", with_group.as_str())],
        &opts(),
        &builtin(),
    )
    .expect("imports");
    let spec = &imported.cluster.spec;
    assert_eq!(spec.role_groups.nfs, ["localhost"]);
    let nfs = spec.storage.nfs.as_ref().expect("nfs");
    assert_eq!((nfs.path.as_str(), nfs.default), ("/data/nfs", true));
    assert!(
        !spec.storage.local_volume.as_ref().expect("local").default,
        "one default class"
    );
    assert!(unmapped(&imported, "c.yaml: spec.storage_class.nfs.server").contains("nfs group"));
    reloads(&imported, "c.yaml + i.yaml");

    // NFS on without an nfs host: not mapped, with what to do.
    let imported = import_kubekey(
        &[("c.yaml", config.as_str()), ("i.yaml", inventory.as_str())],
        &opts(),
        &builtin(),
    )
    .expect("imports");
    assert!(imported.cluster.spec.storage.nfs.is_none());
    assert!(
        unmapped(&imported, "c.yaml: spec.storage_class.nfs.enabled").contains("roleGroups.nfs")
    );
}
