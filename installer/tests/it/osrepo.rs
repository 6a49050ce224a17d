//! The bundle's OS package repository on the nodes (`spec.system.osReleases`): the plan (detect
//! the release, upload the repository, a signed source; every package step uses that source
//! alone; delete removes it), and the tree upload against a real OpenSSH server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubexm_install::context::load_context;
use kubexm_install::pipeline::ops::{GenericStep, TreeFile, UploadTree};
use kubexm_install::pipeline::{plan, Facts};
use kubexm_install::pipelines::create::install_pipeline;
use kubexm_install::pipelines::delete::delete_pipeline;
use kubexm_install::runner::ssh::{SshOptions, SshRunner};
use kubexm_install::runner::Runner as _;
use kubexm_testkit::{sha256_hex, Sshd};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The lab cluster with `osReleases: [debian-12]` and `lb` as the external load balancer type;
/// with `lb` empty, as it is (without `osReleases`).
pub(crate) fn lab_with_os_release(
    lb: &str,
) -> (
    tempfile::TempDir,
    Arc<kubexm_install::context::InstallContext>,
) {
    let lab = std::fs::read_to_string(repo().join("tests/lab/cluster.yaml")).expect("lab cluster");
    assert!(
        lab.contains("\n  system:\n"),
        "the lab cluster has a system section"
    );
    let lab = if lb.is_empty() {
        lab
    } else {
        // As tests/lab/lib.sh's with_os_releases writes it for the e2e scripts.
        lab.replace(
            "\n  system:\n",
            "\n  system:\n    osReleases: [debian-12]\n",
        )
        .replace("type: kubexm-kh", &format!("type: {lb}"))
    };
    let text = lab;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, text).expect("write");
    let ctx = load_context(
        &file,
        Some(&repo().join("tests/lab/mirror/catalog-lab.yaml")),
        None,
        dir.path(),
    )
    .expect("context");
    (dir, Arc::new(ctx))
}

#[test]
fn the_plan_sets_up_the_bundle_repository_first_and_installs_only_from_it() {
    let (_dir, ctx) = lab_with_os_release("kubexm-kn");
    let p = plan::build(
        &install_pipeline(&ctx),
        &ctx.plan_nodes(),
        &Facts::default(),
    )
    .expect("plan");
    let modules: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        modules[..4],
        ["preflight", "os-repository", "pre-install", "node-prep"]
    );
    let text = p.to_text();
    // The release is read from the node's /etc/os-release (matched against the bundle's
    // repositories on the control host).
    assert!(
        text.contains(
            "printf '%s=%s\\n' os.node1.id \"${ID:-}\" os.node1.version \"${VERSION_ID:-}\""
        ),
        "{text}"
    );
    // The repository, its key and a source naming the key.
    for want in [
        "upload-tree 0 files (0 bytes) -> /var/lib/kubexm/repos/debian-12/",
        "-> /etc/apt/sources.list.d/kubexm.sources (644)",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
    // Node preparation and the nginx load balancer install from it alone.
    let only = "(only from the bundle's repository: apt /etc/apt/sources.list.d/kubexm.sources, dnf/yum repo kubexm-bundle)";
    let package_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("package"))
        .collect();
    assert_eq!(package_lines.len(), 2, "{package_lines:?}");
    assert!(
        package_lines.iter().all(|l| l.ends_with(only)),
        "{package_lines:?}"
    );
    assert!(package_lines[1].contains("install deb: nginx libnginx-mod-stream keepalived"));
    let section: String = text
        .lines()
        .skip_while(|l| !l.contains("module os-repository"))
        .take_while(|l| !l.contains("module pre-install"))
        .map(|l| format!("{l}\n"))
        .collect();
    insta::assert_snapshot!("os-repository-plan", section);
    insta::assert_snapshot!("os-packages-plan", package_lines.join("\n"));

    // Without osReleases nothing changes: the module is skipped, packages come from the node.
    let (_dir, plain) = lab_with_os_release("");
    let text = plan::build(
        &install_pipeline(&plain),
        &plain.plan_nodes(),
        &Facts::default(),
    )
    .expect("plan")
    .to_text();
    assert!(text.contains("module os-repository — skipped: spec.system.osReleases is empty"));
    assert!(!text.contains("only from the bundle"));
}

#[test]
fn delete_removes_the_repository_and_its_source() {
    let (_dir, ctx) = lab_with_os_release("kubexm-kh");
    let p =
        plan::build(&delete_pipeline(&ctx), &ctx.plan_nodes(), &Facts::default()).expect("plan");
    let modules: Vec<&str> = p.modules.iter().map(|m| m.name.as_str()).collect();
    let at = modules
        .iter()
        .position(|m| *m == "delete-os-repository")
        .expect("module");
    assert_eq!(
        modules[at + 1..],
        ["delete-scripts", "delete-node-prep"],
        "before /etc/kubexm and /var/lib/kubexm go"
    );
    let text = p.to_text();
    assert!(
        text.contains("rm -rf -- /etc/apt/sources.list.d/kubexm.sources /etc/yum.repos.d/kubexm.repo /var/lib/kubexm/repos /var/lib/kubexm/apt"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_tree_uploads_checks_repairs_and_reverts() {
    let sshd = Sshd::start();
    let tmp = tempfile::tempdir().expect("tmp");
    sshd.write_known_hosts(&tmp.path().join("known_hosts"));
    let mut o = SshOptions::new("node1", sshd.host(), "root", tmp.path().join("known_hosts"));
    o.port = sshd.port();
    o.private_key = Some(sshd.user_key());
    o.connect_timeout = Duration::from_secs(10);
    let runner = SshRunner::connect(o).await.expect("connect");

    let src = tmp.path().join("bundle");
    std::fs::create_dir_all(src.join("pool")).expect("mkdir");
    let mut files = Vec::new();
    for (path, content) in [
        ("InRelease", b"signed index\n".to_vec()),
        ("pool/a_1_all.deb", vec![1u8; 4096]),
        ("pool/b_2_amd64.deb", vec![2u8; 100]),
    ] {
        std::fs::write(src.join(path), &content).expect("write");
        files.push(TreeFile {
            source: src.join(path),
            path: path.to_string(),
            sha256: sha256_hex(&content),
            size: content.len() as u64,
        });
    }
    let dest = tmp.path().join("node/var/lib/kubexm/repos/debian-12");
    let tree = UploadTree {
        files,
        dest: dest.display().to_string(),
    };
    assert!(!tree.is_done(&runner).await.expect("check"));
    tree.apply(&runner).await.expect("upload");
    tree.verify(&runner).await.expect("verified");
    assert!(tree.is_done(&runner).await.expect("check"));
    assert_eq!(
        std::fs::read(dest.join("pool/b_2_amd64.deb")).expect("read"),
        vec![2u8; 100]
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dest.join("pool"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o755,
        "apt's _apt user must read the repository"
    );

    // A changed file is noticed and replaced.
    std::fs::write(dest.join("pool/a_1_all.deb"), b"tampered").expect("write");
    assert!(!tree.is_done(&runner).await.expect("check"));
    tree.apply(&runner).await.expect("repair");
    assert_eq!(
        std::fs::read(dest.join("pool/a_1_all.deb")).expect("read"),
        vec![1u8; 4096]
    );

    // The revert removes the directory.
    let revert = tree.revert().expect("revert script");
    let out = runner
        .exec(&kubexm_install::runner::Exec::root(revert))
        .await
        .expect("revert runs");
    assert!(out.success());
    assert!(!dest.exists());
}

/// A node whose release the bundle has no repository for stops the install at
/// `install-os-repository`, naming the node, its release, what the bundle has and the field to
/// add. The node is this machine (a real `/etc/os-release`, read by the real detect step through
/// the local runner); the bundle carries a repository for rocky-9 only.
#[tokio::test]
async fn a_node_whose_release_has_no_repository_is_refused_naming_it() {
    use kubexm_bundles::manifest::{OsRepoRecord, SigningKeyRecord};
    use kubexm_install::context::BundleRef;
    use kubexm_install::pipeline::executor::{ExecOptions, Executor};
    use kubexm_install::pipeline::journal::Journal;
    use kubexm_install::pipeline::Pipeline;
    use kubexm_install::runner::local::LocalRunner;

    let os = std::fs::read_to_string("/etc/os-release").expect("this host's os-release");
    let field = |k: &str| {
        os.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_string())
            .expect(k)
    };
    let (id, version) = (field("ID"), field("VERSION_ID"));
    assert_ne!(id, "rocky", "the test needs a host that is not Rocky Linux");

    let (dir, ctx) = lab_with_os_release("kubexm-kh");
    let mut manifest = crate::intake::manifest_with(&[]);
    manifest.os_repos = vec![OsRepoRecord {
        release: "rocky-9".into(),
        family: "rpm".into(),
        os_id: "rocky".into(),
        version_id: "9".into(),
        path: "repos/rocky-9".into(),
        signing_key: SigningKeyRecord {
            fingerprint: "00".repeat(20),
            armored: "repos/kubexm-repo-key.asc".into(),
            binary: "repos/kubexm-repo-key.gpg".into(),
        },
        sources: Vec::new(),
        packages: Vec::new(),
    }];
    let ctx = Arc::new(kubexm_install::context::InstallContext {
        cluster: ctx.cluster.clone(),
        nodes: ctx.nodes.clone(),
        bundle: Some(BundleRef {
            dir: dir.path().to_path_buf(),
            manifest,
        }),
        keys: ctx.keys.clone(),
        pki_dir: ctx.pki_dir.clone(),
        resolution: ctx.resolution.clone(),
        os_releases: ctx.os_releases.clone(),
    });
    let node = ctx.nodes[0].clone();
    let pipeline = Pipeline {
        name: "test".to_string(),
        modules: vec![Box::new(kubexm_install::modules::osrepo::OsRepoModule(
            ctx.clone(),
        ))],
    };
    let work = tempfile::tempdir().expect("tempdir");
    let runners: Vec<(
        kubexm_install::pipeline::Node,
        Arc<dyn kubexm_install::runner::Runner>,
    )> = ctx
        .nodes
        .iter()
        .map(|n| {
            (
                n.clone(),
                Arc::new(LocalRunner::new(&n.name)) as Arc<dyn kubexm_install::runner::Runner>,
            )
        })
        .collect();
    let journal = Arc::new(Journal::create(work.path(), "test", vec![]).expect("journal"));
    let exec = Executor::new(
        runners,
        journal,
        ExecOptions {
            concurrency: 1,
            resume: false,
            state_path: work.path().join("state.json"),
        },
    );
    let err = format!(
        "{:#}",
        exec.run(&pipeline)
            .await
            .expect_err("no repository for this release")
    );
    for want in [
        "install-os-repository".to_string(),
        format!("node {} runs {id} {version}", node.name),
        "rocky-9 (rocky 9)".to_string(),
        "spec.system.osReleases".to_string(),
        "kubexm-build bundle".to_string(),
    ] {
        assert!(err.contains(&want), "`{want}` not in:\n{err}");
    }
    // Nothing was written: the refusal comes before any upload.
    assert!(!std::path::Path::new("/etc/apt/sources.list.d/kubexm.sources").exists());
}
