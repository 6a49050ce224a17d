//! The runtime module on the lab cluster, for each runtime type: the rendered files
//! (snapshots; TOML and JSON parsed by real parsers, containerd's config by a real containerd),
//! the binaries' layout, the pause pull, the plans (snapshots) and the delete plans.

use std::sync::Arc;

use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::modules::runtime::{delete_module, RuntimeModule};
use kubexm_install::pipeline::{plan, Facts, Module, Pipeline};

use crate::common::Edit as _;
use crate::lb::{check_with, file_of, lab_context, rendered, repo};

fn plan_lines(module: &dyn Module, ctx: &kubexm_install::context::InstallContext) -> Vec<String> {
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
fn attack_registry_credentials_in_argv_on_the_nodes_containerd() {
    // The pull ran `ctr ... --user "$(cat /etc/containerd/kubexm-pull.auth)"`: the password in
    // the process list of every node. Now containerd's CRI pulls with the credentials of its
    // root-only config.toml.
    let ctx = lab_context(|t| {
        t.edit(
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
        plan.contains("-> /etc/containerd/config.toml (600)"),
        "the config holding the password is root-only: {plan}"
    );
    assert!(
        !plan.contains("pa\"ss"),
        "the password is not in the plan: {plan}"
    );
    assert!(
        !plan.contains("$(cat") && !plan.contains("--user") && !plan.contains("kubexm-pull.auth"),
        "no credentials on any command line: {plan}"
    );
    assert!(
        plan.contains("/usr/local/bin/crictl pull 10.88.10.11:5000/pause:3.10"),
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
        "/usr/local/bin/crictl pull 10.88.10.11:5000/pause:3.10",
        "systemctl restart containerd (when changed)",
    ] {
        assert!(plan.contains(expected), "missing `{expected}` in:\n{plan}");
    }
}

#[test]
fn containerd_2_gets_a_version_3_config() {
    let ctx = lab_context(|t| t.edit("version: 1.6.20", "version: 2.0.5"));
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
fn plain_http_registry_gets_an_http_host_and_a_plain_http_pull() {
    let ctx = lab_context(|t| {
        t.edit(
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
    // Through CRI, which reads the http server from hosts.toml.
    assert!(
        plan.contains("/usr/local/bin/crictl pull 10.88.10.11:5000/pause:3.10"),
        "{plan}"
    );
}

#[test]
fn with_a_bundle_files_and_the_pause_image_come_from_bundle_json() {
    use kubexm_bundles::manifest::{BundleManifest, FileRecord, ImageRecord};
    use kubexm_install::context::{load_context, BundleRef};

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
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        sizes: Default::default(),
    };
    // A bundle built for an upgrade path also holds another version of a component (listed
    // first here): the one cluster.yaml resolves to is taken.
    let mut manifest = manifest;
    let mut other = manifest
        .files
        .iter()
        .find(|f| f.name == "containerd" && f.arch == "amd64")
        .expect("containerd")
        .clone();
    other.path = other.path.edit("1.6.20", "1.5.0");
    other.version = "1.5.0".into();
    manifest.files.insert(0, other);
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
    assert!(!plan.contains("1.5.0"), "{plan}");
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

/// The lab cluster with runtime `kind` (and `version`) instead of containerd 1.6.20.
fn with_runtime(kind: &str, version: Option<&str>) -> impl Fn(String) -> String {
    let to = match version {
        Some(v) => format!("type: {kind}\n    version: {v}"),
        None => format!("type: {kind}"),
    };
    move |t: String| t.edit("type: containerd\n    version: 1.6.20", &to)
}

/// The plan of `module` alone, as `kubexm-install plan` prints it.
pub(crate) fn module_plan(ctx: &InstallContext, module: Box<dyn Module>, name: &str) -> String {
    let pipeline = Pipeline {
        name: name.to_string(),
        modules: vec![module],
    };
    plan::build(&pipeline, &ctx.plan_nodes(), &Facts::default())
        .expect("plan")
        .to_text()
}

/// A real TOML parser (Python's tomllib) accepts `text`.
/// The drop-in parsed by Python's TOML reader, as JSON.
fn toml_json(text: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("file.toml");
    std::fs::write(&path, text).expect("write toml");
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, tomllib, json; print(json.dumps(tomllib.load(open(sys.argv[1], 'rb'))))",
        ])
        .arg(&path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("tomllib's JSON")
}

/// Issue 33 item 10: cri-o's monitor (conmon) is configured on every runtime handler
/// (`monitor_path`/`monitor_cgroup`/`monitor_env`), never with the deprecated `[crio.runtime]`
/// `conmon*` options.
fn crio_monitor_per_handler(dropin: &str) {
    let doc = toml_json(dropin);
    let runtime = doc["crio"]["runtime"].as_object().expect("[crio.runtime]");
    let deprecated: Vec<&String> = runtime.keys().filter(|k| k.starts_with("conmon")).collect();
    assert!(
        deprecated.is_empty(),
        "deprecated options {deprecated:?}: {dropin}"
    );
    let handlers = runtime["runtimes"]
        .as_object()
        .expect("[crio.runtime.runtimes]");
    assert_eq!(
        handlers.keys().map(String::as_str).collect::<Vec<_>>(),
        ["crun", "runc"]
    );
    for (name, h) in handlers {
        assert_eq!(
            h["monitor_path"], "/usr/local/libexec/crio/conmon",
            "{name}"
        );
        assert_eq!(h["monitor_cgroup"], "system.slice", "{name}");
        let env = h["monitor_env"].as_array().expect("monitor_env");
        assert!(
            env.iter().any(|e| e
                .as_str()
                .is_some_and(|e| e.starts_with("PATH=/usr/local/libexec/crio:"))),
            "{name}: {env:?}"
        );
    }
}

fn check_toml(text: &str, name: &str) {
    check_with(
        "python3",
        &[
            "-c",
            "import sys, tomllib; tomllib.load(open(sys.argv[1], 'rb'))",
            "FILE",
        ],
        text,
        name,
    );
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

#[test]
fn docker_with_cri_dockerd_files_and_plan() {
    let ctx = lab_context(with_runtime("docker", Some("24.0.9")));
    let module = RuntimeModule(ctx.clone());
    let files = rendered(&ctx, &module);
    let daemon = file_of(&files, "node1", "/etc/docker/daemon.json");
    let v = json(&daemon);
    assert_eq!(
        v["exec-opts"],
        serde_json::json!(["native.cgroupdriver=systemd"])
    );
    assert_eq!(v["log-opts"]["max-size"], "100m");
    assert_eq!(
        v["insecure-registries"],
        serde_json::json!([]),
        "TLS registry: its CA in certs.d instead"
    );
    insta::assert_snapshot!("docker-daemon.json", daemon);
    let service = file_of(&files, "node2", "/etc/systemd/system/docker.service");
    assert!(
        service.contains("Environment=PATH=/usr/local/libexec/kubexm-docker:"),
        "dockerd runs its own containerd first in PATH: {service}"
    );
    assert!(
        service.contains(
            "ExecStart=/usr/local/bin/dockerd -H fd:// --config-file=/etc/docker/daemon.json"
        ),
        "{service}"
    );
    insta::assert_snapshot!("docker.service", service);
    insta::assert_snapshot!(
        "docker.socket",
        file_of(&files, "node3", "/etc/systemd/system/docker.socket")
    );
    let cri = file_of(&files, "node1", "/etc/systemd/system/cri-docker.service");
    for flag in [
        "--pod-infra-container-image=10.88.10.11:5000/pause:3.10",
        "--network-plugin=cni",
        "--cni-bin-dir=/opt/cni/bin",
        "--container-runtime-endpoint fd://",
    ] {
        assert!(cri.contains(flag), "{flag} missing: {cri}");
    }
    insta::assert_snapshot!("cri-docker.service", cri);
    insta::assert_snapshot!(
        "cri-docker.socket",
        file_of(&files, "node1", "/etc/systemd/system/cri-docker.socket")
    );
    let crictl = file_of(&files, "node1", "/etc/crictl.yaml");
    assert!(
        crictl.contains("runtime-endpoint: unix:///run/cri-dockerd.sock"),
        "{crictl}"
    );
    insta::assert_snapshot!(
        "runtime-docker-plan",
        module_plan(&ctx, Box::new(module), "install")
    );
}

#[test]
fn docker_plain_http_registry_is_insecure_and_credentials_stay_out_of_the_plan() {
    let ctx = lab_context(|t| {
        with_runtime("docker", None)(t).edit(
            "    type: registry\n",
            "    type: registry\n    auths:\n      \"10.88.10.11:5000\": {username: puller, password: 'd0cker-secret', plainHTTP: true}\n",
        )
    });
    let module = RuntimeModule(ctx.clone());
    let daemon = file_of(&rendered(&ctx, &module), "node1", "/etc/docker/daemon.json");
    assert_eq!(
        json(&daemon)["insecure-registries"],
        serde_json::json!(["10.88.10.11:5000"])
    );
    let plan = module_plan(&ctx, Box::new(module), "install");
    assert!(!plan.contains("d0cker-secret"), "{plan}");
    assert!(
        plan.contains("-> /etc/docker/kubexm-pull/config.json (600)"),
        "{plan}"
    );
    assert!(
        plan.contains("/usr/local/bin/docker --config /etc/docker/kubexm-pull pull 10.88.10.11:5000/pause:3.10"),
        "{plan}"
    );
}

#[test]
fn cri_o_files_and_plan() {
    let ctx = lab_context(with_runtime("cri-o", Some("1.33.12")));
    let module = RuntimeModule(ctx.clone());
    let files = rendered(&ctx, &module);
    let dropin = file_of(&files, "node1", "/etc/crio/crio.conf.d/10-kubexm.conf");
    check_toml(&dropin, "10-kubexm.conf");
    for line in [
        "cgroup_manager = \"systemd\"",
        "pause_image = \"10.88.10.11:5000/pause:3.10\"",
        "runtime_path = \"/usr/local/libexec/crio/crun\"",
        "signature_policy = \"/etc/crio/kubexm-policy.json\"",
    ] {
        assert!(dropin.contains(line), "{line} missing: {dropin}");
    }
    assert!(
        !dropin.contains("global_auth_file"),
        "no credentials configured: {dropin}"
    );
    crio_monitor_per_handler(&dropin);
    insta::assert_snapshot!("crio-10-kubexm.conf", dropin);
    let registries = file_of(
        &files,
        "node2",
        "/etc/containers/registries.conf.d/10-kubexm.conf",
    );
    check_toml(&registries, "registries.conf");
    assert!(registries.contains("insecure = false"), "{registries}");
    insta::assert_snapshot!("crio-registries.conf", registries);
    let policy = file_of(&files, "node1", "/etc/crio/kubexm-policy.json");
    assert_eq!(
        json(&policy)["default"][0]["type"],
        "insecureAcceptAnything"
    );
    insta::assert_snapshot!("crio-policy.json", policy);
    insta::assert_snapshot!(
        "crio.service",
        file_of(&files, "node1", "/etc/systemd/system/crio.service")
    );
    let crictl = file_of(&files, "node3", "/etc/crictl.yaml");
    assert!(
        crictl.contains("unix:///var/run/crio/crio.sock"),
        "{crictl}"
    );
    insta::assert_snapshot!(
        "runtime-cri-o-plan",
        module_plan(&ctx, Box::new(module), "install")
    );
}

#[test]
fn cri_o_registry_credentials_go_to_a_root_only_auth_file() {
    let ctx = lab_context(|t| {
        with_runtime("cri-o", Some("1.33.12"))(t).edit(
            "    type: registry\n",
            "    type: registry\n    auths:\n      \"10.88.10.11:5000\": {username: puller, password: 'cr10-secret'}\n",
        )
    });
    let module = RuntimeModule(ctx.clone());
    let dropin = file_of(
        &rendered(&ctx, &module),
        "node1",
        "/etc/crio/crio.conf.d/10-kubexm.conf",
    );
    assert!(
        dropin.contains("global_auth_file = \"/etc/crio/kubexm-auth.json\""),
        "{dropin}"
    );
    assert!(!dropin.contains("cr10-secret"), "{dropin}");
    let plan = module_plan(&ctx, Box::new(module), "install");
    assert!(
        plan.contains("-> /etc/crio/kubexm-auth.json (600)"),
        "{plan}"
    );
    assert!(!plan.contains("cr10-secret"), "{plan}");
}

/// The lab catalog plus an operator's pin of iSulad (there is no public one).
fn isulad_context() -> Arc<InstallContext> {
    isulad_context_with(|t| t)
}

fn isulad_context_with(edit: impl FnOnce(String) -> String) -> Arc<InstallContext> {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab yaml");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, edit(with_runtime("isulad", Some("2.1.5"))(text))).expect("write");
    let catalog = std::fs::read_to_string(repo().join("tests/lab/mirror/catalog-lab.yaml"))
        .expect("lab catalog")
        .edit(
            "components:\n",
            &format!(
                "components:\n  - name: isulad\n    url: \"https://mirror.example/isulad/{{version}}/isulad-{{version}}-linux-{{arch}}.tar.gz\"\n    versions: {{\"2.1.5\": {{amd64: \"{}\"}}}}\n",
                "5".repeat(64)
            ),
        );
    let catalog_file = dir.path().join("catalog.yaml");
    std::fs::write(&catalog_file, catalog).expect("write catalog");
    let work = dir.path().join("work");
    Arc::new(load_context(&file, Some(&catalog_file), None, &work).expect("loads"))
}

#[test]
fn attack_registry_credentials_in_argv_on_the_nodes_isulad() {
    // The pull ran `crictl pull --auth "$(cat /etc/isulad/kubexm-pull.auth)"`. Now `isula login`
    // reads the password on standard input from the root-only file.
    let ctx = isulad_context_with(|t| {
        t.edit(
            "    type: registry\n",
            "    type: registry\n    auths:\n      \"10.88.10.11:5000\": {username: puller, password: s3cret-pw}\n",
        )
    });
    let plan = module_plan(&ctx, Box::new(RuntimeModule(ctx.clone())), "install");
    assert!(
        !plan.contains("s3cret-pw"),
        "the password is not in the plan: {plan}"
    );
    assert!(
        !plan.contains("--auth") && !plan.contains("$(cat"),
        "{plan}"
    );
    assert!(
        plan.contains("-> /etc/isulad/kubexm-pull.auth (600)"),
        "{plan}"
    );
    assert!(
        plan.contains("/usr/local/bin/isula login -u puller --password-stdin 10.88.10.11:5000 </etc/isulad/kubexm-pull.auth >/dev/null && /usr/local/bin/isula pull 10.88.10.11:5000/pause:3.10"),
        "{plan}"
    );
}

#[test]
fn isulad_files_and_plan() {
    let ctx = isulad_context();
    let module = RuntimeModule(ctx.clone());
    let files = rendered(&ctx, &module);
    let daemon = file_of(&files, "node1", "/etc/isulad/daemon.json");
    let v = json(&daemon);
    assert_eq!(v["pod-sandbox-image"], "10.88.10.11:5000/pause:3.10");
    assert_eq!(v["systemd-cgroup"], true);
    assert_eq!(v["network-plugin"], "cni");
    assert_eq!(
        v["registry-mirrors"],
        serde_json::json!(["10.88.10.11:5000"])
    );
    assert_eq!(v["insecure-registries"], serde_json::json!([]));
    insta::assert_snapshot!("isulad-daemon.json", daemon);
    insta::assert_snapshot!(
        "isulad.service",
        file_of(&files, "node2", "/etc/systemd/system/isulad.service")
    );
    insta::assert_snapshot!(
        "isulad-ld.so.conf",
        file_of(&files, "node1", "/etc/ld.so.conf.d/kubexm-isulad.conf")
    );
    let crictl = file_of(&files, "node1", "/etc/crictl.yaml");
    assert!(crictl.contains("unix:///var/run/isulad.sock"), "{crictl}");
    let plan = module_plan(&ctx, Box::new(module), "install");
    for line in [
        "/var/lib/kubexm/extract/isulad-2.1.5/bin/isulad -> /usr/local/bin/isulad (755)",
        "/var/lib/kubexm/artifacts/runc/v1.1.5/runc.amd64 -> /usr/local/sbin/runc (755)",
        "/usr/local/bin/isula pull 10.88.10.11:5000/pause:3.10",
    ] {
        assert!(plan.contains(line), "{line} missing:\n{plan}");
    }
    insta::assert_snapshot!("runtime-isulad-plan", plan);
}

#[test]
fn every_runtime_has_a_delete_plan_removing_what_it_installed() {
    let cases: Vec<(&str, Arc<InstallContext>, Vec<&str>)> = vec![
        (
            "containerd",
            lab_context(|t| t),
            vec!["/usr/local/bin/containerd", "/etc/containerd/config.toml"],
        ),
        (
            "docker",
            lab_context(with_runtime("docker", None)),
            vec![
                "systemctl disable --now cri-docker.service cri-docker.socket",
                "/usr/local/bin/cri-dockerd",
                "systemctl disable --now docker.service docker.socket",
                "/usr/local/libexec/kubexm-docker/containerd",
                "/etc/docker/daemon.json",
                "/etc/docker/certs.d/10.88.10.11:5000/ca.crt",
                "find /var/lib/docker -mindepth 1",
            ],
        ),
        (
            "cri-o",
            lab_context(with_runtime("cri-o", Some("1.33.12"))),
            vec![
                "systemctl disable --now crio",
                "/usr/local/libexec/crio/conmon",
                "/etc/crio/crio.conf.d/10-kubexm.conf",
                "/etc/containers/certs.d/10.88.10.11:5000/ca.crt",
                "find /var/lib/containers/storage -mindepth 1",
            ],
        ),
        (
            "isulad",
            isulad_context(),
            vec![
                "systemctl disable --now isulad",
                "/usr/local/bin/isula ",
                "/etc/isulad/daemon.json",
                "rm -rf -- /usr/local/lib/kubexm-isulad",
                "find /var/lib/isulad -mindepth 1",
            ],
        ),
    ];
    for (kind, ctx, expected) in cases {
        let plan = module_plan(&ctx, Box::new(delete_module(&ctx)), "delete");
        for e in &expected {
            assert!(plan.contains(e), "{kind}: `{e}` missing:\n{plan}");
        }
        assert!(
            plan.contains("/opt/cni/bin"),
            "{kind}: CNI plugins:\n{plan}"
        );
        if kind != "containerd" {
            insta::assert_snapshot!(format!("delete-runtime-{kind}-plan"), plan);
        }
    }
}

#[test]
fn upstream_registries_are_mirrored_to_the_private_registry() {
    // Issue 13 item 8: an image name no manifest rewrote (a Helm chart's default
    // `registry.k8s.io/metrics-server/metrics-server`) still pulls offline. containerd reads
    // `<config_path>/<registry host>/hosts.toml` (containerd docs/hosts.md); `docker.io` is the
    // directory name for Docker Hub.
    let ctx = lab_context(|t| t);
    let module = RuntimeModule(ctx.clone());
    let files = rendered(&ctx, &module);
    for upstream in [
        "registry.k8s.io",
        "k8s.gcr.io",
        "docker.io",
        "quay.io",
        "ghcr.io",
    ] {
        let hosts = file_of(
            &files,
            "node2",
            &format!("/etc/containerd/certs.d/{upstream}/hosts.toml"),
        );
        assert!(
            hosts.contains(&format!("server = \"https://{upstream}\"")),
            "{hosts}"
        );
        assert!(
            hosts.contains("[host.\"https://10.88.10.11:5000\"]"),
            "{hosts}"
        );
        assert!(
            hosts.contains("ca = \"/etc/containerd/certs.d/10.88.10.11:5000/ca.crt\""),
            "{hosts}"
        );
        // No namespace: keep-path pushes `registry.k8s.io/a/b` to `REG/a/b`, the path
        // containerd asks the mirror for, so no override.
        assert!(!hosts.contains("override_path"), "{hosts}");
    }
    insta::assert_snapshot!(
        "containerd-mirror-registry.k8s.io.toml",
        file_of(
            &files,
            "node1",
            "/etc/containerd/certs.d/registry.k8s.io/hosts.toml"
        )
    );
    // The private registry itself is no mirror of itself.
    let mirrors = kubexm_install::modules::runtime::containerd::mirrored_registries(&ctx);
    assert!(
        !mirrors.iter().any(|m| m == "10.88.10.11:5000"),
        "{mirrors:?}"
    );

    // Under a namespace, the mirror's path is the API root: `registry.k8s.io/coredns/coredns`
    // is fetched as `REG/v2/kubexm/coredns/coredns`, where keep-path pushed it.
    let ns = lab_context(|t| {
        t.edit(
            "    type: registry\n",
            "    type: registry\n    namespace: kubexm\n",
        )
    });
    let files = rendered(&ns, &RuntimeModule(ns.clone()));
    let hosts = file_of(
        &files,
        "node1",
        "/etc/containerd/certs.d/registry.k8s.io/hosts.toml",
    );
    assert!(
        hosts.contains("[host.\"https://10.88.10.11:5000/v2/kubexm\"]")
            && hosts.contains("override_path = true"),
        "{hosts}"
    );
    assert_eq!(
        ns.pull_reference("registry.k8s.io/coredns/coredns:v1.12.0")
            .expect("ref"),
        "10.88.10.11:5000/kubexm/coredns/coredns:v1.12.0"
    );

    // Flattened paths cannot be expressed as a mirror: no mirror files, only rewritten pulls.
    let flat = lab_context(|t| {
        t.edit(
            "    type: registry\n",
            "    type: registry\n    rewrite: flatten\n",
        )
    });
    let files = rendered(&flat, &RuntimeModule(flat.clone()));
    assert!(
        !files
            .iter()
            .any(|(_, path, _)| path.contains("registry.k8s.io")),
        "no mirror with flatten"
    );
}

#[test]
fn containerd_2_1_lists_cni_bin_dirs() {
    // containerd 2.1 deprecated the CRI plugin's `cni.bin_dir` for the list `bin_dirs`
    // (containerd RELEASES.md "Deprecated config properties", docs/cri/config.md v2.1);
    // 2.0 still reads `bin_dir` only. Issue 13 item 10.
    let conf = |version: &str| {
        let ctx = lab_context(|t| t.edit("version: 1.6.20", &format!("version: {version}")));
        let files = rendered(&ctx, &RuntimeModule(ctx.clone()));
        file_of(&files, "node1", "/etc/containerd/config.toml")
    };
    let v21 = conf("2.1.4");
    assert!(v21.contains("bin_dirs = [\"/opt/cni/bin\"]"), "{v21}");
    assert!(!v21.contains("bin_dir = "), "{v21}");
    assert!(v21.contains("version = 3"), "{v21}");
    insta::assert_snapshot!("containerd-config-v3-2.1.toml", v21);
    let v20 = conf("2.0.5");
    assert!(v20.contains("bin_dir = \"/opt/cni/bin\""), "{v20}");
    assert!(!v20.contains("bin_dirs"), "{v20}");
}
