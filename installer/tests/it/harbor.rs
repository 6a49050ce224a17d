//! `registry.type: harbor` on the lab cluster: the rendered harbor.yml (snapshot, parsed by a
//! real YAML parser), the shared docker engine, the plan's exact command sequence (snapshot),
//! the admin password kept out of every command, plan and journal, the install step run for real
//! against a STAND-IN `install.sh` and a STAND-IN `docker` (Harbor itself cannot run here), the
//! seed creating the listed projects (against the STAND-IN Harbor project API of `seed.rs`),
//! the CA trust per runtime, and the delete plan.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kubexm_install::context::{load_context, InstallContext};
use kubexm_install::modules::registry::harbor::InstallHarbor;
use kubexm_install::modules::registry::{delete_module, RegistryModule};
use kubexm_install::modules::runtime::docker::DockerEngine;
use kubexm_install::pipeline::executor::{ExecOptions, Executor};
use kubexm_install::pipeline::journal::Journal;
use kubexm_install::pipeline::{plan, Facts, Module, Node, Pipeline, Step, StepError, Task};
use kubexm_install::runner::local::LocalRunner;
use kubexm_install::runner::{
    shell, Exec, ExecOutput, RunError, Runner, Upload, UploadOutcome, UploadSource,
};

use crate::common::Edit as _;
use crate::lb::{check_with, file_of, rendered, repo};
use crate::runtime::module_plan;

const ADMIN_PASSWORD: &str = "Harb0r-Adm1n-S3cret";
/// Stands for the database password KubeXM generates once per cluster (fixed here so the
/// snapshots are stable).
const DB_PASSWORD: &str = "0123456789abcdef0123456789abcdef";

/// The lab cluster with Harbor on node1 instead of the plain registry; `edit` applies after.
/// The work directory (PKI, generated passwords) lives as long as the returned guard.
fn harbor_context(edit: impl Fn(String) -> String) -> (Arc<InstallContext>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml"))
        .expect("lab yaml")
        .edit(
            "  registry:\n    type: registry\n    version: 2.8.2\n",
            &format!(
                "  registry:\n    type: harbor\n    harborConfig:\n      adminPassword: '{ADMIN_PASSWORD}'\n      projects:\n        - {{name: apps, public: false}}\n"
            ),
        );
    assert!(
        text.contains("type: harbor"),
        "the lab cluster changed: {text}"
    );
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, edit(text)).expect("write yaml");
    let work = dir.path().join("work");
    let registry_pki = work.join("pki/lab/registry");
    std::fs::create_dir_all(&registry_pki).expect("mkdir");
    std::fs::write(
        registry_pki.join("harbor-database.password"),
        format!("{DB_PASSWORD}\n"),
    )
    .expect("write db password");
    let ctx = load_context(
        &file,
        Some(&repo().join("tests/lab/mirror/catalog-lab.yaml")),
        None,
        &work,
    )
    .expect("harbor lab cluster loads");
    // These tests run the registry module for real too: keys are kept as an install keeps them.
    (Arc::new(ctx.for_execution()), dir)
}

const HARBOR_YML: &str = "/opt/kubexm-harbor/harbor/harbor.yml";

#[test]
fn harbor_yml_from_harbor_config_and_the_same_docker_engine_as_the_runtime() {
    let (ctx, _work) = harbor_context(|t| t);
    let module = RegistryModule(ctx.clone());
    assert_eq!(module.skip(), None);
    let files = rendered(&ctx, &module);
    let yml = file_of(&files, "node1", HARBOR_YML);
    check_with(
        "python3",
        &[
            "-c",
            "import sys, yaml; yaml.safe_load(open(sys.argv[1]))",
            "FILE",
        ],
        &yml,
        "harbor.yml",
    );
    for line in [
        "hostname: 10.88.10.11\n",
        "  port: 443\n",
        "  certificate: /etc/kubexm-harbor/tls/server.crt\n",
        "  private_key: /etc/kubexm-harbor/tls/server.key\n",
        &format!("harbor_admin_password: \"{ADMIN_PASSWORD}\"\n"),
        &format!("  password: \"{DB_PASSWORD}\"\n"),
        "data_volume: /var/lib/kubexm-harbor\n",
        "_version: 2.10.0\n",
        "  skip_update: true\n",
    ] {
        assert!(yml.contains(line), "`{line}` missing:\n{yml}");
    }
    insta::assert_snapshot!("harbor.yml", yml);

    // The registry host runs the docker engine the docker runtime installs, file for file.
    let engine = DockerEngine::new(&ctx).expect("engine");
    for f in engine.files() {
        let text = String::from_utf8(f.text().to_vec()).expect("utf-8");
        assert_eq!(
            file_of(&files, "node1", &f.file.dest),
            text,
            "{}",
            f.file.dest
        );
    }
    let daemon = file_of(&files, "node1", "/etc/docker/daemon.json");
    insta::assert_snapshot!("harbor-host-docker-daemon.json", daemon);
}

#[test]
fn harbor_options_change_the_endpoint_data_volume_and_refuse_conflicts() {
    let (ctx, _work) = harbor_context(|t| {
        t.edit(
            "      adminPassword:",
            "      httpsPort: 8443\n      adminPassword:",
        )
        .edit(
            "    type: harbor\n",
            "    type: harbor\n    dataDir: /data/harbor\n",
        )
    });
    assert_eq!(ctx.registry_endpoint().as_deref(), Some("10.88.10.11:8443"));
    let files = rendered(&ctx, &RegistryModule(ctx.clone()));
    let yml = file_of(&files, "node1", HARBOR_YML);
    assert!(yml.contains("  port: 8443\n"), "{yml}");
    assert!(yml.contains("data_volume: /data/harbor\n"), "{yml}");
    // Images live in Harbor's `library` project unless registry.namespace names another.
    assert_eq!(
        ctx.pull_reference("registry.k8s.io/pause:3.10")
            .expect("ref"),
        "10.88.10.11:8443/library/pause:3.10"
    );

    let (ctx, _work) = harbor_context(|t| {
        t.edit(
            "      adminPassword:",
            "      httpsPort: 8443\n      adminPassword:",
        )
        .edit(
            "    type: harbor\n",
            "    type: harbor\n    privateRegistry: harbor.lab.example\n",
        )
    });
    let err = match RegistryModule(ctx).tasks() {
        Ok(_) => panic!("privateRegistry without :8443 and httpsPort 8443 must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("harborConfig.httpsPort is 8443") && err.contains("HOST:8443"),
        "{err}"
    );
}

/// The plan with the digests and sizes of generated certificates and keys replaced.
fn masked(ctx: &InstallContext, text: &str, work: &Path) -> String {
    let cert = std::fs::read(work.join("work/pki/lab/registry/registry-server.crt"))
        .expect("server certificate");
    let cert_sha = kubexm_bundles::hash::sha256_hex(&cert);
    let _ = ctx;
    text.edit(&cert_sha, "<SERVER-CERT-SHA256>")
        .lines()
        .map(|l| {
            let generated = ["registry-ca.crt", "/tls/", "/certs.d/"];
            if !(l.contains("upload") && generated.iter().any(|g| l.contains(g))) {
                return l.to_string();
            }
            match (l.find('<'), l.find(" bytes>"), l.find("[sha256:")) {
                (Some(open), Some(close), Some(d)) => {
                    format!("{}<N{}[sha256:GENERATED]", &l[..open], &l[close..d])
                }
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn harbor_plan_shows_the_exact_command_sequence() {
    let (ctx, work) = harbor_context(|t| t);
    let text = module_plan(&ctx, Box::new(RegistryModule(ctx.clone())), "install");
    let order = [
        "task deploy-harbor on node1",
        "step install-docker-engine",
        "systemctl enable --now docker.service",
        "step install-docker-compose",
        "-> /usr/local/lib/docker/cli-plugins/docker-compose (755)",
        "step harbor-files",
        "check    Harbor installer version",
        "-> /opt/kubexm-harbor/  [sha256:",
        "-> /etc/kubexm-harbor/tls/server.key (600)",
        "template harbor/harbor.yml.tera -> /opt/kubexm-harbor/harbor/harbor.yml (600)",
        "step install-harbor (timeout 2400s",
        "cd /opt/kubexm-harbor/harbor",
        "./install.sh",
        "wait     Harbor healthy (/api/v2.0/health)",
        "task trust-registry on node1,node2,node3",
        "task seed-registry on localhost",
        "-> https://10.88.10.11 (KeepPath, project library, Harbor: missing projects created first (public unless listed: apps private))",
    ];
    let mut at = 0;
    for o in order {
        match text[at..].find(o) {
            Some(i) => at += i + o.len(),
            None => panic!("`{o}` missing or out of order after byte {at}:\n{text}"),
        }
    }
    insta::assert_snapshot!("harbor-plan", masked(&ctx, &text, work.path()));
}

/// What a recording node received at one destination: the bytes (when uploaded from memory),
/// the mode and the sha256.
type Received = (Option<Vec<u8>>, u32, String);

/// A node that records every script and upload, answers sha256 queries for what was uploaded
/// and exits 0 for everything else: every check passes, so only uploads are applied. Used to
/// see everything the registry module would send to a node.
#[derive(Default)]
struct RecordingNode {
    name: String,
    scripts: Mutex<Vec<String>>,
    uploads: Mutex<BTreeMap<String, Received>>,
}

#[async_trait]
impl Runner for RecordingNode {
    fn node(&self) -> &str {
        &self.name
    }
    async fn exec(&self, exec: &Exec) -> Result<ExecOutput, RunError> {
        self.scripts.lock().expect("lock").push(exec.script.clone());
        let uploads = self.uploads.lock().expect("lock");
        let stdout = uploads
            .iter()
            .find(|(dest, _)| exec.script == shell::remote_sha256(dest))
            .map(|(_, (_, _, sha))| format!("{sha}\n"))
            .unwrap_or_default();
        Ok(ExecOutput {
            code: Some(0),
            stdout,
            stderr: String::new(),
        })
    }
    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, RunError> {
        let bytes = match &upload.source {
            UploadSource::Bytes(b) => Some(b.clone()),
            UploadSource::File(_) => None,
        };
        self.uploads.lock().expect("lock").insert(
            upload.dest.clone(),
            (bytes, upload.mode, upload.sha256.clone()),
        );
        Ok(UploadOutcome::Uploaded(0))
    }
}

/// A module made of the given tasks.
struct Tasks(Mutex<Vec<Task>>);

impl Module for Tasks {
    fn name(&self) -> &str {
        "registry"
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        Ok(std::mem::take(&mut *self.0.lock().expect("lock")))
    }
}

#[tokio::test]
async fn the_admin_password_is_only_ever_inside_harbor_yml() {
    let (ctx, work) = harbor_context(|t| t);
    let pipeline = Pipeline {
        name: "install".into(),
        modules: vec![Box::new(RegistryModule(ctx.clone()))],
    };
    let built = plan::build(&pipeline, &ctx.plan_nodes(), &Facts::default()).expect("plan");
    let json = serde_json::to_string(&built).expect("plan JSON");
    for (what, text) in [("plan", built.to_text()), ("plan JSON", json)] {
        for secret in [ADMIN_PASSWORD, DB_PASSWORD] {
            assert!(!text.contains(secret), "{what} shows a password");
        }
    }

    // Deploy and trust (everything but seeding, which needs a bundle) on recording nodes, with
    // a journal that redacts nothing: a leak could not hide behind `***`.
    let tasks: Vec<Task> = RegistryModule(ctx.clone())
        .tasks()
        .expect("tasks")
        .into_iter()
        .filter(|t| t.name != "seed-registry")
        .collect();
    let nodes: Vec<Arc<RecordingNode>> = ctx
        .nodes
        .iter()
        .map(|n| {
            Arc::new(RecordingNode {
                name: n.name.clone(),
                ..RecordingNode::default()
            })
        })
        .collect();
    let runners: Vec<(Node, Arc<dyn Runner>)> = ctx
        .nodes
        .iter()
        .cloned()
        .zip(nodes.iter().map(|r| r.clone() as Arc<dyn Runner>))
        .collect();
    let journal = Arc::new(
        Journal::create(&work.path().join("runs"), "install", Vec::new()).expect("journal"),
    );
    let exec = Executor::new(
        runners,
        journal.clone(),
        ExecOptions {
            concurrency: 3,
            resume: false,
            state_path: work.path().join("state.json"),
        },
    );
    let report = exec
        .run(&Pipeline {
            name: "install".into(),
            modules: vec![Box::new(Tasks(Mutex::new(tasks)))],
        })
        .await
        .expect("deploy + trust on recording nodes");
    assert!(report.steps_changed > 0, "{report:?}");

    for path in [&journal.paths().log, &journal.paths().events] {
        let text = std::fs::read_to_string(path).expect("journal file");
        assert!(!text.is_empty());
        for secret in [ADMIN_PASSWORD, DB_PASSWORD] {
            assert!(
                !text.contains(secret),
                "{} shows a password",
                path.display()
            );
        }
    }
    let mut holders = Vec::new();
    for node in &nodes {
        for script in node.scripts.lock().expect("lock").iter() {
            for secret in [ADMIN_PASSWORD, DB_PASSWORD] {
                assert!(
                    !script.contains(secret),
                    "a command on {} holds a password: {script}",
                    node.name
                );
            }
        }
        for (dest, (bytes, mode, _)) in node.uploads.lock().expect("lock").iter() {
            let text = String::from_utf8_lossy(bytes.as_deref().unwrap_or_default());
            if text.contains(ADMIN_PASSWORD) || text.contains(DB_PASSWORD) {
                holders.push((node.name.clone(), dest.clone(), *mode));
            }
        }
    }
    assert_eq!(
        holders,
        vec![("node1".to_string(), HARBOR_YML.to_string(), 0o600)],
        "only harbor.yml (root-only, on the Harbor host) holds the passwords"
    );
}

/// A temp root with a STAND-IN Harbor installer and a STAND-IN docker CLI.
struct StandIn {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl StandIn {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let harbor = root.join("opt/harbor");
        std::fs::create_dir_all(&harbor).expect("mkdir");
        std::fs::create_dir_all(root.join("bin")).expect("mkdir");
        let r = root.display();
        write_exec(
            &harbor.join("install.sh"),
            &format!(
                "#!/bin/sh\n# STAND-IN for Harbor's install.sh: records the run and \"starts\" Harbor.\nset -e\n[ -e harbor.yml ] || {{ echo 'harbor.yml missing' >&2; exit 1; }}\n[ ! -e {r}/fail ] || {{ echo 'stand-in install.sh fails as asked' >&2; exit 1; }}\necho \"install $(sha256sum harbor.yml | cut -c1-12)\" >> {r}/install.log\n: > docker-compose.yml\n: > {r}/up\n"
            ),
        );
        write_exec(
            &root.join("bin/docker"),
            &format!(
                "#!/bin/sh\n# STAND-IN for the docker CLI: Harbor's containers run while {r}/up exists.\necho \"docker $*\" >> {r}/docker.log\ncase \"$1\" in\n  inspect) [ -e {r}/up ] || exit 1; shift 3; for c in \"$@\"; do echo true; done ;;\n  compose) [ \"$2\" = down ] && rm -f {r}/up ;;\nesac\n"
            ),
        );
        std::fs::write(harbor.join("harbor.yml"), "hostname: one\n").expect("harbor.yml");
        Self { _dir: dir, root }
    }

    fn step(&self, stamp: &str) -> InstallHarbor {
        let r = self.root.display();
        InstallHarbor {
            dir: format!("{r}/opt"),
            stamp_file: format!("{r}/opt/.kubexm-installed"),
            docker: format!("{r}/bin/docker"),
            stamp: stamp.to_string(),
            health: format!("[ -e {r}/up ]"),
            health_timeout: Duration::from_secs(5),
        }
    }

    fn installs(&self) -> usize {
        std::fs::read_to_string(self.root.join("install.log"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    async fn run(&self, stamp: &str) -> Result<usize, String> {
        let node = Node {
            name: "node1".into(),
            address: "127.0.0.1".into(),
            internal_address: "127.0.0.1".into(),
            roles: vec![kubexm_manifests::resolve::Role::Registry],
            arch: "amd64".into(),
        };
        let runner: Arc<dyn Runner> = Arc::new(LocalRunner::new("node1"));
        let journal = Arc::new(
            Journal::create(&self.root.join("work"), "install", Vec::new()).expect("journal"),
        );
        let exec = Executor::new(
            vec![(node, runner)],
            journal,
            ExecOptions {
                concurrency: 1,
                resume: false,
                state_path: self.root.join("work/state.json"),
            },
        );
        let pipeline = Pipeline {
            name: "install".into(),
            modules: vec![Box::new(Tasks(Mutex::new(vec![Task::new(
                "deploy-harbor",
                ["node1"],
            )
            .step(self.step(stamp))])))],
        };
        exec.run(&pipeline)
            .await
            .map(|r| r.steps_changed)
            .map_err(|e| e.to_string())
    }
}

fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[tokio::test]
async fn install_sh_runs_once_and_again_only_when_harbor_yml_changes_or_harbor_is_down() {
    let s = StandIn::new();
    assert_eq!(
        s.run("yml-1 installer cert").await,
        Ok(1),
        "first run installs"
    );
    assert_eq!(s.installs(), 1);
    assert_eq!(
        std::fs::read_to_string(s.root.join("opt/.kubexm-installed")).expect("stamp"),
        "yml-1 installer cert\n"
    );
    assert_eq!(
        s.run("yml-1 installer cert").await,
        Ok(0),
        "re-run changes nothing"
    );
    assert_eq!(s.installs(), 1, "install.sh not run again");

    std::fs::remove_file(s.root.join("up")).expect("stop harbor");
    assert_eq!(
        s.run("yml-1 installer cert").await,
        Ok(1),
        "Harbor down: installed again"
    );
    assert_eq!(s.installs(), 2);

    std::fs::write(s.root.join("opt/harbor/harbor.yml"), "hostname: two\n").expect("edit");
    assert_eq!(
        s.run("yml-2 installer cert").await,
        Ok(1),
        "harbor.yml changed"
    );
    assert_eq!(s.installs(), 3);
    assert_eq!(s.run("yml-2 installer cert").await, Ok(0));

    // A failing install.sh fails the step and is rolled back: Harbor brought down, the stamp
    // removed, so the next run installs again.
    std::fs::write(s.root.join("fail"), "").expect("fail flag");
    let err = s
        .run("yml-3 installer cert")
        .await
        .expect_err("install.sh fails");
    assert!(err.contains("stand-in install.sh fails as asked"), "{err}");
    assert!(
        !s.root.join("opt/.kubexm-installed").exists(),
        "stamp removed by the rollback"
    );
    let docker_log = std::fs::read_to_string(s.root.join("docker.log")).expect("docker log");
    assert!(docker_log.contains("docker compose down"), "{docker_log}");
    std::fs::remove_file(s.root.join("fail")).expect("unfail");
    assert_eq!(s.run("yml-3 installer cert").await, Ok(1));
    assert_eq!(s.installs(), 4);
}

#[test]
fn seeding_creates_the_listed_projects_with_their_visibility_first() {
    use kubexm_install::seed::{seed, RegistryTarget, SeedOptions};
    use kubexm_manifests::secret::Secret;

    let stand_in = crate::seed::harbor_stand_in(&["library"]);
    let bundle = tempfile::tempdir().expect("tempdir");
    let manifest = kubexm_bundles::manifest::BundleManifest {
        format_version: 1,
        tool_version: "test".into(),
        cluster: "lab".into(),
        kubernetes_version: "v1.33.11".into(),
        zone: "default".into(),
        arches: Default::default(),
        created: 0,
        files: Vec::new(),
        images: Vec::new(),
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        sizes: Default::default(),
    };
    let opts = SeedOptions {
        target: RegistryTarget {
            host: format!("127.0.0.1:{}", stand_in.port),
            plain_http: true,
            ca_pem: None,
            username: Some("admin".into()),
            password: Some(Secret::new("HarborTest1")),
        },
        project: Some("library".into()),
        rewrite: Default::default(),
        harbor: Some(true),
        harbor_projects: vec![("apps".into(), false), ("tools".into(), true)],
        jobs: 2,
        attempts: 1,
        retry_delay: Duration::from_millis(10),
        chunk_size: kubexm_install::seed::CHUNK,
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let report = rt
        .block_on(seed(bundle.path(), &manifest, &opts))
        .expect("seed");
    let mut created = report.projects_created.clone();
    created.sort();
    assert_eq!(created, vec!["apps".to_string(), "tools".to_string()]);
    let projects = stand_in.projects.lock().expect("lock").clone();
    assert!(
        projects.contains(&("apps".into(), "false".into())),
        "{projects:?}"
    );
    assert!(
        projects.contains(&("tools".into(), "true".into())),
        "{projects:?}"
    );
    let again = rt
        .block_on(seed(bundle.path(), &manifest, &opts))
        .expect("seed again");
    assert!(again.projects_created.is_empty(), "{again:?}");
}

#[test]
fn every_node_trusts_the_harbor_ca_where_its_runtime_reads_it() {
    for (runtime, dir) in [
        ("containerd\n    version: 1.6.20", "/etc/containerd/certs.d"),
        ("docker", "/etc/docker/certs.d"),
        ("cri-o\n    version: 1.33.12", "/etc/containers/certs.d"),
    ] {
        let (ctx, _work) = harbor_context(|t| {
            t.edit(
                "type: containerd\n    version: 1.6.20",
                &format!("type: {runtime}"),
            )
        });
        let text = module_plan(&ctx, Box::new(RegistryModule(ctx.clone())), "install");
        let trust = &text[text.find("task trust-registry").expect("trust task")..];
        assert!(
            trust.contains(&format!("-> {dir}/10.88.10.11/ca.crt (644)")),
            "{runtime}: {trust}"
        );
        assert!(
            trust.contains("-> /etc/kubexm/registry-ca.crt (644)"),
            "{trust}"
        );
    }
}

#[test]
fn delete_stops_harbor_then_removes_its_files_compose_and_docker() {
    let (ctx, _work) =
        harbor_context(|t| t.edit("type: containerd\n    version: 1.6.20", "type: docker"));
    let text = module_plan(&ctx, Box::new(delete_module(&ctx)), "delete");
    let order = [
        "task delete-harbor on node1",
        "cd /opt/kubexm-harbor/harbor && /usr/local/bin/docker compose down",
        "rm -rf -- /opt/kubexm-harbor /etc/kubexm-harbor /var/lib/kubexm-harbor /var/log/harbor",
        "/usr/local/lib/docker/cli-plugins/docker-compose",
        "step remove-docker-engine",
        "systemctl disable --now docker.service docker.socket",
        "task untrust-registry-ca on node1,node2,node3",
    ];
    let mut at = 0;
    for o in order {
        match text[at..].find(o) {
            Some(i) => at += i + o.len(),
            None => panic!("`{o}` missing or out of order after byte {at}:\n{text}"),
        }
    }
    insta::assert_snapshot!("harbor-delete-plan", text);

    // With runtime docker, the runtime's delete leaves the Harbor host's engine to this module.
    let runtime = module_plan(
        &ctx,
        Box::new(kubexm_install::modules::runtime::delete_module(&ctx)),
        "delete",
    );
    assert!(
        runtime.contains("task delete-cri-dockerd on node1,node2,node3"),
        "{runtime}"
    );
    assert!(
        runtime.contains("task delete-docker on node2,node3 "),
        "{runtime}"
    );
}

/// `certs renew` with Harbor's certificate due: Harbor's own deploy task again (the certificate is
/// part of the installation's stamp, so its installer runs and Harbor restarts on the new one),
/// then Harbor must serve a certificate valid beyond the threshold.
#[test]
fn certs_renew_redeploys_harbor_on_its_renewed_certificate() {
    use kubexm_install::modules::certs::renew::Renew;
    use kubexm_install::modules::certs::renew_registry::RenewRegistryModule;
    let (ctx, _work) = harbor_context(|t| t);
    let r = Renew {
        ctx: ctx.clone(),
        id: "1700000000".into(),
        under_days: 30,
        all: false,
        masters: Vec::new(),
        etcd: false,
        etcd_expired: false,
        kubernetes: false,
        workers: Vec::new(),
        serving: Vec::new(),
        registry: true,
    };
    let m = RenewRegistryModule(r);
    assert_eq!(m.skip(), None);
    let tasks = m.tasks().expect("tasks");
    let names: Vec<(&str, Vec<&str>)> = tasks
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.steps.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(names[0].0, "deploy-harbor");
    assert!(names[0].1.contains(&"install-harbor"), "{names:?}");
    assert_eq!(
        names[1],
        (
            "registry-serves-renewed-certificate",
            vec!["registry-serves-renewed-certificate"]
        )
    );
    assert_eq!(tasks[1].hosts, ["node1"]);
}

/// A stand-in registry host: answers every script with `probe`.
struct HarborHostAnswer(String);

#[async_trait]
impl Runner for HarborHostAnswer {
    fn node(&self) -> &str {
        "node1"
    }
    async fn exec(&self, _: &Exec) -> Result<ExecOutput, RunError> {
        Ok(ExecOutput {
            code: Some(0),
            stdout: self.0.clone(),
            stderr: String::new(),
        })
    }
    async fn upload(&self, _: &Upload) -> Result<UploadOutcome, RunError> {
        Ok(UploadOutcome::Uploaded(0))
    }
}

/// Issue 19: preflight checks the Harbor host for what the bundle cannot bring (plan snapshot),
/// and refuses a host that cannot run it, naming it, before anything changes.
#[tokio::test]
async fn preflight_checks_the_harbor_host_before_anything_changes() {
    use kubexm_install::modules::preflight::{
        CheckHarborHost, GatherHarborFacts, HarborRules, PreflightModule,
    };
    let (ctx, _work) = harbor_context(|t| t);
    let text = module_plan(&ctx, Box::new(PreflightModule(ctx.clone())), "install");
    let start = text.find("task check-harbor-host").expect("harbor task");
    let task: String = text[start..]
        .lines()
        .take_while(|l| !l.trim_start().starts_with("[1.") || l.contains("check-harbor-host"))
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!("harbor-host-preflight-plan", task);

    let rules = std::sync::Arc::new(HarborRules::of(&ctx).expect("harbor rules"));
    let node = ctx.node("node1").expect("node1");
    let run = |probe: &str| {
        let runner = HarborHostAnswer(probe.to_string());
        let rules = rules.clone();
        async move {
            let facts = Facts::default();
            let mut ops = GatherHarborFacts(rules.clone())
                .ops(node, &facts)
                .expect("gather");
            for op in ops.drain(..) {
                op.generic()
                    .apply(&runner)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let mut notes = Vec::new();
            for op in CheckHarborHost(rules).ops(node, &facts).expect("check") {
                notes.extend(
                    op.generic()
                        .apply_noted(&runner)
                        .await
                        .map_err(|e| e.to_string())?
                        .notes,
                );
            }
            Ok::<_, String>(notes)
        }
    };
    let ready = "arch=x86_64\ncpus=4\nmemkib=8005184\navailkib=104857600\ninstalled=no\n";
    assert_eq!(run(ready).await, Ok(vec![]));
    let e = run(
        "arch=x86_64\ncpus=4\nmemkib=8005184\navailkib=104857600\ninstalled=no\nlisten=443 httpd\n",
    )
    .await
    .expect_err("busy port");
    assert!(
        e.contains("registry host node1: port 443 is in use by httpd"),
        "{e}"
    );
}
