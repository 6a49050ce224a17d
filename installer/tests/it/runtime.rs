//! The containerd runtime module on the lab cluster: the rendered files (snapshots), the
//! config parsed by a real containerd, the binaries' layout, the pause pull and skip reasons.

use kubexm_install::install::runtime::RuntimeModule;
use kubexm_install::pipeline::{Facts, Module};

use crate::lb::{check_with, file_of, lab_context, rendered};

fn plan_lines(module: &dyn Module, ctx: &kubexm_install::install::InstallContext) -> Vec<String> {
    let mut out = Vec::new();
    for task in module.tasks().expect("tasks") {
        let node = ctx.node(&task.hosts[0]).expect("node");
        for step in &task.steps {
            for op in step.ops(node, &Facts::default()).expect("ops") {
                let p = op.generic().plan();
                out.push(format!("{} {}", p.kind, p.detail));
            }
        }
    }
    out
}

#[test]
fn lab_containerd_files() {
    let ctx = lab_context(|t| t);
    let module = RuntimeModule(ctx.clone());
    assert_eq!(module.skip(), None);
    let files = rendered(&ctx, &module);
    let config = file_of(&files, "node1", "/etc/containerd/config.toml");
    assert!(
        config.contains("sandbox_image = \"10.88.10.11:5000/pause:3.10\""),
        "{config}"
    );
    assert!(config.contains("SystemdCgroup = true"), "{config}");
    assert!(
        config.contains("config_path = \"/etc/containerd/certs.d\""),
        "{config}"
    );
    insta::assert_snapshot!("containerd-config-v2.toml", config);
    let hosts = file_of(
        &files,
        "node2",
        "/etc/containerd/certs.d/10.88.10.11:5000/hosts.toml",
    );
    assert!(
        hosts.contains("ca = \"/etc/containerd/certs.d/10.88.10.11:5000/ca.crt\""),
        "{hosts}"
    );
    insta::assert_snapshot!("containerd-hosts.toml", hosts);
    insta::assert_snapshot!("crictl.yaml", file_of(&files, "node3", "/etc/crictl.yaml"));
    insta::assert_snapshot!(
        "containerd.service",
        file_of(&files, "node1", "/etc/systemd/system/containerd.service")
    );
}

#[test]
fn lab_containerd_config_parses_in_containerd() {
    let ctx = lab_context(|t| t);
    let files = rendered(&ctx, &RuntimeModule(ctx.clone()));
    let config = file_of(&files, "node1", "/etc/containerd/config.toml");
    check_with(
        "containerd",
        &["--config", "FILE", "config", "dump"],
        &config,
        "config.toml",
    );
}

#[test]
fn registry_auth_goes_into_the_config_and_a_root_only_file_for_the_pull() {
    let ctx = lab_context(|t| {
        t.replace(
            "    type: registry\n",
            "    type: registry\n    auths:\n      \"10.88.10.11:5000\": {username: puller, password: 'pa\"ss\\word', skipTlsVerify: true}\n",
        )
    });
    let module = RuntimeModule(ctx.clone());
    let files = rendered(&ctx, &module);
    let config = file_of(&files, "node1", "/etc/containerd/config.toml");
    assert!(
        config.contains("registry.configs.\"10.88.10.11:5000\".auth]"),
        "{config}"
    );
    assert!(config.contains(r#"password = "pa\"ss\\word""#), "{config}");
    check_with(
        "containerd",
        &["--config", "FILE", "config", "dump"],
        &config,
        "config.toml",
    );
    let hosts = file_of(
        &files,
        "node1",
        "/etc/containerd/certs.d/10.88.10.11:5000/hosts.toml",
    );
    assert!(hosts.contains("skip_verify = true"), "{hosts}");
    let plan = plan_lines(&module, &ctx).join("\n");
    assert!(
        plan.contains("-> /etc/containerd/kubexm-pull.auth (600)"),
        "{plan}"
    );
    assert!(
        !plan.contains("pa\"ss"),
        "the password is not in the plan: {plan}"
    );
    assert!(
        plan.contains("--user \"$(cat /etc/containerd/kubexm-pull.auth)\""),
        "{plan}"
    );
}

#[test]
fn binaries_are_uploaded_extracted_and_copied_into_place() {
    let ctx = lab_context(|t| t);
    let plan = plan_lines(&RuntimeModule(ctx.clone()), &ctx).join("\n");
    for expected in [
        "upload files/containerd/1.6.20/amd64/containerd-1.6.20-linux-amd64.tar.gz -> /var/lib/kubexm/artifacts/containerd/1.6.20/containerd-1.6.20-linux-amd64.tar.gz (644)",
        "extract /var/lib/kubexm/artifacts/containerd/1.6.20/containerd-1.6.20-linux-amd64.tar.gz -> /var/lib/kubexm/extract/containerd-1.6.20/",
        "copy /var/lib/kubexm/extract/containerd-1.6.20/bin/containerd-shim-runc-v2 -> /usr/local/bin/containerd-shim-runc-v2 (755)",
        "copy /var/lib/kubexm/artifacts/runc/v1.1.5/runc.amd64 -> /usr/local/sbin/runc (755)",
        "copy /var/lib/kubexm/extract/crictl-v1.33.0/crictl -> /usr/local/bin/crictl (755)",
        "mkdir -p /opt/cni/bin",
        "ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d 10.88.10.11:5000/pause:3.10",
        "systemctl restart containerd (when changed)",
    ] {
        assert!(plan.contains(expected), "missing `{expected}` in:\n{plan}");
    }
}

#[test]
fn containerd_2_gets_a_version_3_config() {
    let ctx = lab_context(|t| t.replace("version: 1.6.20", "version: 2.0.5"));
    let files = rendered(&ctx, &RuntimeModule(ctx.clone()));
    let config = file_of(&files, "node1", "/etc/containerd/config.toml");
    assert!(config.contains("version = 3"), "{config}");
    assert!(
        config.contains("sandbox = \"10.88.10.11:5000/pause:3.10\""),
        "{config}"
    );
    insta::assert_snapshot!("containerd-config-v3.toml", config);
}

#[test]
fn other_runtimes_are_skipped_with_a_reason() {
    for (kind, name) in [
        ("docker", "docker"),
        ("cri-o", "cri-o"),
        ("isulad", "isulad"),
    ] {
        let ctx = lab_context(|t| {
            t.replace(
                "type: containerd\n    version: 1.6.20",
                &format!("type: {kind}"),
            )
        });
        let reason = RuntimeModule(ctx).skip().expect("skipped");
        assert!(reason.contains(name), "{reason}");
        assert!(reason.contains("not implemented"), "{reason}");
    }
}

#[test]
fn plain_http_registry_gets_an_http_host_and_a_plain_http_pull() {
    let ctx = lab_context(|t| {
        t.replace(
            "    type: registry\n",
            "    type: registry\n    auths:\n      \"10.88.10.11:5000\": {plainHTTP: true}\n",
        )
    });
    let module = RuntimeModule(ctx.clone());
    let files = rendered(&ctx, &module);
    let hosts = file_of(
        &files,
        "node1",
        "/etc/containerd/certs.d/10.88.10.11:5000/hosts.toml",
    );
    assert!(
        hosts.contains("server = \"http://10.88.10.11:5000\""),
        "{hosts}"
    );
    assert!(!hosts.contains("ca = "), "{hosts}");
    let plan = plan_lines(&module, &ctx).join("\n");
    assert!(
        plan.contains("images pull --hosts-dir /etc/containerd/certs.d --plain-http 10.88.10.11:5000/pause:3.10"),
        "{plan}"
    );
}

#[test]
fn with_a_bundle_files_and_the_pause_image_come_from_bundle_json() {
    use kubexm_bundles::manifest::{BundleManifest, FileRecord, ImageRecord};
    use kubexm_install::install::{load_context, BundleRef};

    let plain = lab_context(|t| t);
    let resolution = plain.resolution.as_ref().expect("lab resolves");
    let bundle_dir = tempfile::tempdir().expect("tempdir");
    let manifest = BundleManifest {
        format_version: 1,
        tool_version: "test".to_string(),
        cluster: "lab".to_string(),
        kubernetes_version: resolution.kubernetes_version.clone(),
        zone: "default".to_string(),
        arches: ["amd64".to_string()].into(),
        created: 0,
        files: resolution
            .binaries
            .iter()
            .map(|b| FileRecord {
                name: b.name.clone(),
                version: b.version.clone(),
                arch: b.arch.as_str().to_string(),
                path: b.path.clone(),
                sha256: b.sha256.clone(),
                size: 1,
                url: b.url.clone(),
                roles: Default::default(),
            })
            .collect(),
        images: vec![ImageRecord {
            reference: "registry.k8s.io/pause:3.9-bundled".to_string(),
            source: "registry.k8s.io/pause:3.9-bundled".to_string(),
            digest: format!("sha256:{}", "0".repeat(64)),
            source_digest: None,
            layout_digest: None,
            media_type: "application/vnd.oci.image.index.v1+json".to_string(),
            size: 1,
            platforms: Default::default(),
            roles: Default::default(),
        }],
    };
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = std::sync::Arc::new(
        load_context(
            &crate::lb::repo().join("tests/lab/cluster.yaml"),
            Some(&crate::lb::repo().join("tests/lab/mirror/catalog-lab.yaml")),
            Some(BundleRef {
                dir: bundle_dir.path().to_path_buf(),
                manifest,
            }),
            work.path(),
        )
        .expect("loads"),
    );
    let module = RuntimeModule(ctx.clone());
    let plan = plan_lines(&module, &ctx).join("\n");
    let source = bundle_dir
        .path()
        .join("files/containerd/1.6.20/amd64/containerd-1.6.20-linux-amd64.tar.gz");
    assert!(
        plan.contains(&format!(
            "upload {} -> /var/lib/kubexm/artifacts/containerd/1.6.20/containerd-1.6.20-linux-amd64.tar.gz",
            source.display()
        )),
        "{plan}"
    );
    let config = file_of(
        &rendered(&ctx, &module),
        "node1",
        "/etc/containerd/config.toml",
    );
    assert!(
        config.contains("sandbox_image = \"10.88.10.11:5000/pause:3.9-bundled\""),
        "{config}"
    );
}
