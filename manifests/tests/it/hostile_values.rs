//! Values that reach the nodes are refused at load time when they could change a file's
//! structure (issue 34 items 4 and 5) or stop every component (issue 33 item 9): control
//! characters anywhere, data directories that are not plain, normalised, non-system paths,
//! flag and feature gate names that are not names, gates the version locked or removed.

use kubexm_manifests::load::load_cluster_str;
use kubexm_manifests::model::ClusterFile;
use kubexm_manifests::secret::Secret;
use kubexm_manifests::validate::{validate, Problem};

use crate::common::{base, builtin, BASE};

fn problems(edit: impl FnOnce(&mut ClusterFile)) -> Vec<Problem> {
    let mut f = base();
    edit(&mut f);
    validate(f, &builtin()).err().unwrap_or_default()
}

#[track_caller]
fn refused(edit: impl FnOnce(&mut ClusterFile), path: &str, needle: &str) {
    let problems = problems(edit);
    assert!(
        problems
            .iter()
            .any(|p| p.path == path && p.message.contains(needle) && !p.hint.is_empty()),
        "expected a problem at `{path}` containing `{needle}`, got:\n{problems:#?}"
    );
}

#[test]
fn the_load_balancer_domain_is_a_dns_name() {
    for bad in [
        "lb.\"example\".internal",
        "lb.example.internal\nserver: https://evil:6443",
        "lb example",
        "lb.example.internal'; rm -rf /",
        "-lb.example",
        "",
    ] {
        refused(
            |f| f.spec.load_balancer.domain = bad.into(),
            "spec.loadBalancer.domain",
            "is not a DNS name",
        );
    }
    assert_eq!(
        problems(|f| f.spec.load_balancer.domain = "api.prod-1.example.com".into()),
        Vec::<Problem>::new()
    );
}

#[test]
fn data_directories_are_plain_normalised_and_not_system_directories() {
    // The value: a newline and a quote turned etcd.dataDir into a top-level
    // `force-new-cluster: true` in etcd's configuration.
    refused(
        |f| f.spec.etcd.data_dir = Some("/var/lib/etcd\"\nforce-new-cluster: true\n#".into()),
        "spec.etcd.dataDir",
        "holds '\"'",
    );
    refused(
        |f| f.spec.registry.data_dir = Some("/data\nproxy:\n  remoteurl: http://x".into()),
        "spec.registry.dataDir",
        "holds '\\n'",
    );
    // `delete` runs `rm -rf` on them.
    for (dir, why) in [
        ("/var/lib", "system directory /var/lib"),
        ("/", "system directory /"),
        ("/etc/cron.d", "system directory /etc"),
        ("/var/lib/../../etc", "not normalised"),
        ("var/lib/etcd", "is relative"),
    ] {
        refused(
            |f| f.spec.etcd.data_dir = Some(dir.into()),
            "spec.etcd.dataDir",
            why,
        );
        refused(
            |f| f.spec.registry.data_dir = Some(dir.into()),
            "spec.registry.dataDir",
            why,
        );
    }
    assert_eq!(
        problems(|f| {
            f.spec.etcd.data_dir = Some("/data/etcd".into());
            f.spec.registry.data_dir = Some("/var/lib/registry".into());
        }),
        Vec::<Problem>::new()
    );
}

#[test]
fn control_characters_are_refused_in_every_string_keys_and_secrets_included() {
    // Item 5: a newline in an apiserverArgs value became an ExecStartPre= line.
    refused(
        |f| {
            f.spec.kubernetes.apiserver_args.insert(
                "audit-log-path".into(),
                "/var/log/a\nExecStartPre=/bin/sh -c id".into(),
            );
        },
        "spec.kubernetes.apiserverArgs.audit-log-path",
        "control character '\\n'",
    );
    refused(
        |f| {
            f.spec
                .kubernetes
                .feature_gates
                .insert("A\nExecStart=/bin/sh".into(), true);
        },
        "spec.kubernetes.featureGates.A\nExecStart=/bin/sh",
        "control character",
    );
    refused(
        |f| {
            f.spec.hosts[0]
                .labels
                .insert("disk".into(), "ssd\u{1b}[2J".into());
        },
        "spec.hosts[0].labels.disk",
        "control character '\\u{1b}'",
    );
    refused(
        |f| f.spec.system.ntp_servers.push("pool.ntp.org\u{85}x".into()),
        "spec.system.ntpServers[0]",
        "U+0085",
    );
    refused(
        |f| f.spec.hosts[1].password = Some(Secret::new("pw\nx")),
        "spec.hosts[1].password",
        "control character",
    );
    // From the YAML text too (a quoted "\n" escape), with the field named.
    let text = BASE.replace(
        "kubernetes: {version: v1.33.11}",
        "kubernetes: {version: v1.33.11, schedulerArgs: {v: \"2\\nExecStartPre=/bin/sh\"}}",
    );
    let err = load_cluster_str(&text, "cluster.yaml", &builtin()).expect_err("refused");
    assert!(
        err.to_string()
            .contains("spec.kubernetes.schedulerArgs.v: holds the control character"),
        "{err}"
    );
}

#[test]
fn flag_and_gate_names_are_names() {
    refused(
        |f| {
            f.spec
                .kubernetes
                .kubelet_args
                .insert("v=2 --anonymous-auth".into(), "true".into());
        },
        "spec.kubernetes.kubeletArgs.v=2 --anonymous-auth",
        "not a command-line flag name",
    );
    refused(
        |f| {
            f.spec
                .kubernetes
                .feature_gates
                .insert("A=true,B".into(), false);
        },
        "spec.kubernetes.featureGates.A=true,B",
        "not a feature gate name",
    );
    assert_eq!(
        problems(|f| {
            f.spec
                .kubernetes
                .apiserver_args
                .insert("--audit-log-maxage".into(), "30".into());
            f.spec
                .kubernetes
                .feature_gates
                .insert("RotateKubeletServerCertificate".into(), true);
        }),
        Vec::<Problem>::new()
    );
}

#[test]
fn gates_locked_or_removed_in_the_version_are_refused_naming_gate_and_version() {
    // NFTablesProxyMode is GA, locked to true, from v1.33 (base: v1.33.11).
    refused(
        |f| {
            f.spec
                .kubernetes
                .feature_gates
                .insert("NFTablesProxyMode".into(), false);
        },
        "spec.kubernetes.featureGates.NFTablesProxyMode",
        "NFTablesProxyMode: the gate is locked to true from Kubernetes v1.33; v1.33.11 refuses to start with NFTablesProxyMode: false",
    );
    // Set to the value it is locked to: accepted.
    assert_eq!(
        problems(|f| {
            f.spec
                .kubernetes
                .feature_gates
                .insert("NFTablesProxyMode".into(), true);
        }),
        Vec::<Problem>::new()
    );
    // Removed after v1.24: refused whatever its value (the KubeKey importer's list, now shared).
    refused(
        |f| {
            f.spec
                .kubernetes
                .feature_gates
                .insert("TTLAfterFinished".into(), true);
        },
        "spec.kubernetes.featureGates.TTLAfterFinished",
        "TTLAfterFinished: the gate was removed after Kubernetes v1.24; v1.33.11 refuses to start with it",
    );
}
