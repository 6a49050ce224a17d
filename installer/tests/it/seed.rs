//! Seeding into Debian's `docker-registry` on loopback (anonymous, htpasswd basic auth with TLS
//! from a test-made certificate), checked with `skopeo` as the independent client. Harbor cannot
//! run here: its project API is tested against a small stand-in server implementing the two
//! endpoints as Harbor documents them.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubexm_bundles::manifest::{BundleManifest, ImageRecord};
use kubexm_install::seed::harbor::ensure_projects;
use kubexm_install::seed::{
    seed, target_reference, PushClient, RegistryTarget, SeedError, SeedOptions, CHUNK,
};
use kubexm_manifests::model::RewriteMode;
use kubexm_manifests::secret::Secret;
use kubexm_testkit::{
    images, skopeo_copy, skopeo_inspect_digest, Registry, RegistryOptions, TlsFiles,
};

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// An unpacked bundle tree (`bundle.json` + `images/`) built from real umoci images.
pub(crate) struct Tree {
    _tmp: tempfile::TempDir,
    pub(crate) dir: PathBuf,
    pub(crate) manifest: BundleManifest,
}

fn copy_blobs(layout: &Path, blobs: &Path) {
    for e in std::fs::read_dir(layout.join("blobs/sha256")).expect("layout blobs") {
        let e = e.expect("entry");
        let dest = blobs.join(e.file_name());
        if !dest.exists() {
            std::fs::copy(e.path(), dest).expect("copy blob");
        }
    }
}

fn record(reference: &str, digest: &str, media_type: &str, size: u64) -> ImageRecord {
    ImageRecord {
        reference: reference.to_owned(),
        source: reference.to_owned(),
        digest: digest.to_owned(),
        source_digest: None,
        layout_digest: None,
        media_type: media_type.to_owned(),
        size,
        platforms: BTreeSet::from(["linux/amd64".to_owned()]),
        roles: BTreeSet::new(),
    }
}

/// `extra` more single-platform images, each with its own variant (distinct blobs).
pub(crate) fn tree(source: &Registry, extra: usize) -> Tree {
    let tmp = tempfile::tempdir().expect("tmp");
    let work = tmp.path().join("work");
    let dir = tmp.path().join("bundle");
    let blobs = dir.join("images/blobs/sha256");
    std::fs::create_dir_all(&blobs).expect("mkdir");
    std::fs::create_dir_all(&work).expect("mkdir");
    let amd = images::busybox_layout(&work, "pause", "amd64");
    let arm = images::busybox_layout(&work, "pause-arm", "arm64");
    copy_blobs(&amd, &blobs);
    copy_blobs(&arm, &blobs);
    // A real two-platform index (its bytes exactly as a registry serves them).
    let index = images::push_index(
        source,
        "src/pause:3.10",
        &[(&amd, "amd64"), (&arm, "arm64")],
        None,
    );
    std::fs::write(
        blobs.join(index.index.trim_start_matches("sha256:")),
        &index.index_json,
    )
    .expect("index blob");
    let mut records = vec![record(
        "registry.k8s.io/pause:3.10",
        &index.index,
        OCI_INDEX,
        index.index_json.len() as u64,
    )];
    // The amd64 manifest again as its own image in another repository: its blobs get mounted.
    let single = images::layout_manifest_digest(&amd, images::LAYOUT_TAG);
    let size = std::fs::metadata(blobs.join(single.trim_start_matches("sha256:")))
        .expect("manifest")
        .len();
    records.push(record(
        "registry.k8s.io/coredns/coredns:v1.12.0",
        &single,
        OCI_MANIFEST,
        size,
    ));
    for i in 0..extra {
        let l = images::busybox_layout(&work, &format!("extra{i}"), "amd64");
        copy_blobs(&l, &blobs);
        let d = images::layout_manifest_digest(&l, images::LAYOUT_TAG);
        let size = std::fs::metadata(blobs.join(d.trim_start_matches("sha256:")))
            .expect("manifest")
            .len();
        records.push(record(
            &format!("docker.io/test/extra{i}:v1"),
            &d,
            OCI_MANIFEST,
            size,
        ));
    }
    let manifest = BundleManifest {
        format_version: kubexm_bundles::FORMAT_VERSION,
        tool_version: "test".into(),
        cluster: "t".into(),
        kubernetes_version: "v1.33.11".into(),
        zone: "default".into(),
        arches: BTreeSet::from(["amd64".to_owned()]),
        created: 0,
        files: Vec::new(),
        images: records,
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        sizes: Default::default(),
    };
    Tree {
        _tmp: tmp,
        dir,
        manifest,
    }
}

pub(crate) fn options(
    reg: &Registry,
    creds: Option<(&str, &str)>,
    ca: Option<Vec<u8>>,
) -> SeedOptions {
    SeedOptions {
        target: RegistryTarget {
            host: reg.host(),
            plain_http: ca.is_none(),
            ca_pem: ca,
            username: creds.map(|c| c.0.to_owned()),
            password: creds.map(|c| Secret::new(c.1)),
        },
        project: Some("kubexm".into()),
        rewrite: RewriteMode::KeepPath,
        harbor: None,
        harbor_projects: Vec::new(),
        jobs: 4,
        attempts: 3,
        retry_delay: Duration::from_millis(100),
        chunk_size: kubexm_install::seed::CHUNK,
    }
}

fn run(tree: &Tree, opts: &SeedOptions) -> Result<kubexm_install::seed::SeedReport, SeedError> {
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(seed(&tree.dir, &tree.manifest, opts))
}

fn uploads(reg: &Registry) -> usize {
    reg.count_requests("POST", "/blobs/uploads/")
        + reg.count_requests("PATCH", "/blobs/uploads/")
        + reg.count_requests("PUT", "/blobs/uploads/")
}

/// skopeo sees every seeded image with the digest bundle.json records, and pulls it back.
fn assert_seeded(tree: &Tree, opts: &SeedOptions, creds: Option<(&str, &str)>, tls_verify: bool) {
    let out = tempfile::tempdir().expect("tmp");
    for (i, r) in tree.manifest.images.iter().enumerate() {
        let target = target_reference(r, opts).expect("target");
        let docker = format!("docker://{target}");
        let digest = skopeo_inspect_digest(&docker, tls_verify, creds)
            .unwrap_or_else(|e| panic!("inspect {docker}: {e}"));
        assert_eq!(digest, r.digest, "{target}: digest preserved");
        let mut args = vec!["--all".to_owned(), format!("--src-tls-verify={tls_verify}")];
        if let Some((u, p)) = creds {
            args.push(format!("--src-creds={u}:{p}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        skopeo_copy(
            &docker,
            &format!("oci:{}:i{i}", out.path().display()),
            &args,
        )
        .unwrap_or_else(|e| panic!("copy {docker}: {e}"));
    }
}

#[test]
fn seeds_an_anonymous_registry_then_reseeds_nothing() {
    let source = Registry::start(RegistryOptions::default());
    let target = Registry::start(RegistryOptions::default());
    let tree = tree(&source, 0);
    let opts = options(&target, None, None);
    let first = run(&tree, &opts).expect("seed");
    assert_eq!(first.images, 2);
    assert!(
        first.blobs_uploaded > 0 && first.blobs_mounted > 0,
        "shared blobs are mounted: {first:?}"
    );
    assert_eq!(
        first.manifests_pushed, 4,
        "2 children + index, 1 single: {first:?}"
    );
    assert_seeded(&tree, &opts, None, false);
    assert_eq!(
        target_reference(&tree.manifest.images[1], &opts)
            .expect("t")
            .to_string(),
        format!("{}/kubexm/coredns/coredns:v1.12.0", target.host())
    );

    let before = uploads(&target);
    let again = run(&tree, &opts).expect("re-seed");
    assert_eq!(
        again.images_complete, 2,
        "complete images are recognised by their tag: {again:?}"
    );
    assert_eq!(
        (
            again.blobs_uploaded,
            again.blobs_mounted,
            again.manifests_pushed
        ),
        (0, 0, 0),
        "{again:?}"
    );
    assert_eq!(uploads(&target), before, "a re-seed uploads nothing");
}

#[test]
fn large_blobs_go_up_in_chunks() {
    let source = Registry::start(RegistryOptions::default());
    let target = Registry::start(RegistryOptions::default());
    let tree = tree(&source, 0);
    let mut opts = options(&target, None, None);
    opts.chunk_size = 64 * 1024; // busybox layers (~1 MB) become many chunks
    run(&tree, &opts).expect("chunked seed");
    let patches = target.count_requests("PATCH", "/blobs/uploads/");
    let log: Vec<String> = target
        .access_log()
        .iter()
        .map(|e| format!("{} {} {}", e.method, e.uri, e.status))
        .collect();
    assert!(
        patches > 4,
        "uploads went up in PATCH chunks: {patches}; {log:#?}"
    );
    assert_seeded(&tree, &opts, None, false);
}

#[test]
fn seeds_over_tls_with_basic_auth_and_refuses_without_credentials() {
    let certs = tempfile::tempdir().expect("tmp");
    let (tls, ca_path) = TlsFiles::signed_by_test_ca(certs.path());
    let ca = std::fs::read(&ca_path).expect("ca");
    let source = Registry::start(RegistryOptions::default());
    let target = Registry::start(
        RegistryOptions::default()
            .with_basic_auth("admin", "s3cret-pw")
            .with_tls(tls),
    );
    let tree = tree(&source, 0);

    let e = run(&tree, &options(&target, None, Some(ca.clone()))).expect_err("no credentials");
    assert!(matches!(e, SeedError::Unauthorized { .. }), "{e}");
    assert!(e.to_string().contains("--username"), "{e}");
    let e = run(
        &tree,
        &options(&target, Some(("admin", "wrong")), Some(ca.clone())),
    )
    .expect_err("bad credentials");
    assert!(matches!(e, SeedError::Unauthorized { .. }), "{e}");
    assert!(
        !e.to_string().contains("wrong"),
        "the password never shows: {e}"
    );

    let opts = options(&target, Some(("admin", "s3cret-pw")), Some(ca));
    run(&tree, &opts).expect("seed with credentials");
    // skopeo trusts the test CA through --cert-dir-less flags: tls-verify off, creds on.
    assert_seeded(&tree, &opts, Some(("admin", "s3cret-pw")), false);
}

fn has_layer_link(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            has_layer_link(&p)
        } else {
            // A link whose write has completed (`sha256:` + 64 hex digits): the kill may land
            // inside the write of the next one (the broken-link test below covers that).
            p.file_name().is_some_and(|n| n == "link")
                && p.to_string_lossy().contains("/_layers/")
                && std::fs::read(&p).is_ok_and(|c| c.len() == 71 && c.starts_with(b"sha256:"))
        }
    })
}

#[test]
fn a_registry_killed_mid_seed_is_resumed_by_a_rerun() {
    let source = Registry::start(RegistryOptions::default());
    let mut target = Registry::start(RegistryOptions::default());
    let tree = tree(&source, 12);
    let mut opts = options(&target, None, None);
    opts.jobs = 1;
    opts.attempts = 2;
    let data = target.storage_dir().join("docker/registry/v2/repositories");
    let (first, killed) = std::thread::scope(|s| {
        let h = s.spawn(|| run(&tree, &opts));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        // Kill the registry as soon as its first blob is linked into a repository (the
        // registry's `_layers/sha256/<hex>/link`, written in full: what makes a HEAD answer 200).
        while std::time::Instant::now() < deadline && !has_layer_link(&data) {
            std::thread::sleep(Duration::from_millis(1));
        }
        target.stop();
        (h.join().expect("seed thread"), true)
    });
    assert!(killed);
    assert!(
        first.is_err(),
        "the seed must fail when its registry dies mid-way"
    );
    target.restart();
    let second = run(&tree, &opts).expect("re-run completes");
    assert!(
        second.blobs_present > 0,
        "what the first run pushed is skipped: {second:?}"
    );
    assert_seeded(&tree, &opts, None, false);
}

fn first_layer_link(dir: &Path) -> Option<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    entries.into_iter().find_map(|p| {
        if p.is_dir() {
            first_layer_link(&p)
        } else {
            (p.file_name().is_some_and(|n| n == "link")
                && p.to_string_lossy().contains("/_layers/"))
            .then_some(p)
        }
    })
}

/// What a registry killed while writing a repository's blob link leaves behind (the registry's
/// filesystem driver writes the link in place): an empty link, for which it answers HEAD with
/// 500 until the link is written again, in an image whose manifest was not pushed yet. The
/// re-run uploads that blob again and completes (found as a flake of the test above, when the
/// kill landed inside the link's write).
#[test]
fn a_broken_blob_link_left_by_a_killed_registry_is_repaired_by_a_rerun() {
    let source = Registry::start(RegistryOptions::default());
    let mut target = Registry::start(RegistryOptions::default());
    let tree = tree(&source, 2);
    let opts = options(&target, None, None);
    run(&tree, &opts).expect("first seed");
    target.stop();
    let data = target.storage_dir().join("docker/registry/v2/repositories");
    let link = first_layer_link(&data).expect("a layer link in the registry's storage");
    std::fs::write(&link, b"").expect("empty the link");
    // .../repositories/<repo...>/_layers/sha256/<hex>/link
    let rel = link.strip_prefix(&data).expect("under repositories");
    let parts: Vec<_> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let at = parts.iter().position(|c| c == "_layers").expect("_layers");
    let (repo, hex) = (parts[..at].join("/"), &parts[at + 2]);
    // The image was not complete yet: its tags are not there.
    std::fs::remove_dir_all(data.join(&repo).join("_manifests/tags")).expect("drop the tags");
    target.restart();
    let url = format!(
        "http://127.0.0.1:{}/v2/{repo}/blobs/sha256:{hex}",
        target.port()
    );
    let status = |url: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-I", url])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(
        status(&url),
        "500",
        "the broken link makes the registry answer 500"
    );
    let second = run(&tree, &opts).expect("the re-run completes despite the broken link");
    assert!(
        second.blobs_present > 0,
        "the other blobs are skipped: {second:?}"
    );
    assert_eq!(status(&url), "200", "the re-run rewrote the link");
    assert_seeded(&tree, &opts, None, false);
}

/// A stand-in for Harbor's project API: `GET /api/v2.0/projects?name=X` and
/// `POST /api/v2.0/projects`, with basic auth, as Harbor v2.0 documents them.
pub(crate) struct HarborStandIn {
    pub(crate) port: u16,
    pub(crate) projects: Arc<Mutex<Vec<(String, String)>>>,
}

pub(crate) fn harbor_stand_in(existing: &[&str]) -> HarborStandIn {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let projects = Arc::new(Mutex::new(
        existing
            .iter()
            .map(|p| ((*p).to_owned(), "true".to_owned()))
            .collect::<Vec<_>>(),
    ));
    let state = Arc::clone(&projects);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let (mut len, mut auth) = (0usize, String::new());
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                    break;
                }
                let lower = h.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    auth = h["authorization:".len()..].trim().to_owned();
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let expected = "Basic YWRtaW46SGFyYm9yVGVzdDE="; // admin:HarborTest1
            let (status, out) = if auth != expected {
                (
                    "401 Unauthorized",
                    r#"{"errors":[{"code":"UNAUTHORIZED","message":"unauthorized"}]}"#.to_owned(),
                )
            } else if line.starts_with("GET /api/v2.0/projects?name=") {
                let name = line
                    .split("name=")
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .unwrap_or("")
                    .to_owned();
                let list = state.lock().expect("lock");
                let hits: Vec<String> = list
                    .iter()
                    .filter(|(n, _)| n.contains(&name))
                    .map(|(n, _)| format!(r#"{{"name":"{n}"}}"#))
                    .collect();
                ("200 OK", format!("[{}]", hits.join(",")))
            } else if line.starts_with("POST /api/v2.0/projects ") {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let name = v["project_name"].as_str().unwrap_or("").to_owned();
                let public = v["metadata"]["public"].as_str().unwrap_or("").to_owned();
                if name == "forbidden" {
                    ("403 Forbidden", r#"{"errors":[{"code":"FORBIDDEN","message":"only admin can create projects"}]}"#.to_owned())
                } else {
                    state.lock().expect("lock").push((name, public));
                    ("201 Created", String::new())
                }
            } else {
                ("404 Not Found", String::new())
            };
            let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}", out.len());
        }
    });
    HarborStandIn { port, projects }
}

/// The push client Harbor's API goes through, one try per request.
pub(crate) fn harbor_client(target: &RegistryTarget) -> PushClient {
    PushClient::new(target, 1, Duration::from_millis(10), CHUNK).expect("client")
}

#[test]
fn harbor_projects_are_created_once_with_clear_errors() {
    let stand_in = harbor_stand_in(&["library"]);
    let target = RegistryTarget {
        host: format!("127.0.0.1:{}", stand_in.port),
        plain_http: true,
        ca_pem: None,
        username: Some("admin".into()),
        password: Some(Secret::new("HarborTest1")),
    };
    let client = harbor_client(&target);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let wanted = vec!["library".to_owned(), "kubexm".to_owned(), "kube".to_owned()];
    let created = rt
        .block_on(ensure_projects(&client, &wanted, false))
        .expect("projects");
    assert_eq!(
        created,
        vec!["kubexm".to_owned(), "kube".to_owned()],
        "`kube` is not `kubexm`: exact names"
    );
    assert!(
        stand_in
            .projects
            .lock()
            .expect("lock")
            .contains(&("kubexm".to_owned(), "false".to_owned())),
        "private when asked"
    );
    let again = rt
        .block_on(ensure_projects(&client, &wanted, false))
        .expect("projects");
    assert!(again.is_empty(), "nothing created twice");

    let e = rt
        .block_on(ensure_projects(&client, &["forbidden".to_owned()], true))
        .expect_err("403");
    let msg = e.to_string();
    assert!(
        msg.contains("403")
            && msg.contains("FORBIDDEN: only admin can create projects")
            && msg.contains("right to create projects"),
        "{msg}"
    );
    let mut bad = target.clone();
    bad.password = Some(Secret::new("nope"));
    let e = rt
        .block_on(ensure_projects(&harbor_client(&bad), &wanted, true))
        .expect_err("401");
    assert!(
        e.to_string().contains("401") && !e.to_string().contains("nope"),
        "{e}"
    );
}

/// Packs a tree into a real bundle (bundle.json, SHA256SUMS, images/ layout).
fn pack_tree(tree: &Tree, out: &Path) {
    use kubexm_bundles::pack::{pack, Entry, PackOptions, Source};
    let blobs = tree.dir.join("images/blobs/sha256");
    let index: Vec<serde_json::Value> = tree
        .manifest
        .images
        .iter()
        .map(|r| serde_json::json!({"mediaType": r.media_type, "digest": r.digest, "size": r.size, "annotations": {"org.opencontainers.image.ref.name": r.reference}}))
        .collect();
    let index = serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": index}))
        .expect("index");
    let mut entries = vec![
        Entry {
            path: "images/oci-layout".into(),
            source: Source::Bytes(br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
            sha256: None,
            mode: 0o644,
        },
        Entry {
            path: "images/index.json".into(),
            source: Source::Bytes(index),
            sha256: None,
            mode: 0o644,
        },
    ];
    for e in std::fs::read_dir(&blobs).expect("blobs") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        entries.push(Entry {
            path: format!("images/blobs/sha256/{name}"),
            source: Source::File(e.path()),
            sha256: Some(name),
            mode: 0o644,
        });
    }
    pack(
        out,
        &tree.manifest,
        entries,
        &PackOptions {
            level: 3,
            threads: 0,
            mtime: 0,
        },
    )
    .expect("pack");
}

fn install_cli(work: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubexm-install"))
        .arg("--work-dir")
        .arg(work)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubexm-install starts");
    if let Some(s) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(s.as_bytes())
            .expect("write stdin");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("kubexm-install finishes")
}

#[test]
fn cli_seeds_a_bundle_and_refuses_a_tampered_one_before_pushing() {
    let source = Registry::start(RegistryOptions::default());
    let target =
        Registry::start(RegistryOptions::default().with_basic_auth("seeder", "pw-from-stdin"));
    let tree = tree(&source, 1);
    let work = tempfile::tempdir().expect("tmp");
    let bundle = work.path().join("b.tar.zst");
    pack_tree(&tree, &bundle);

    // Tampered: one byte flipped inside a blob; nothing may reach the registry.
    let mut bytes =
        zstd::decode_all(std::fs::read(&bundle).expect("read").as_slice()).expect("decompress");
    let mut archive = tar::Archive::new(std::io::Cursor::new(bytes.clone()));
    let (name, offset) = archive
        .entries()
        .expect("entries")
        .filter_map(Result::ok)
        .find(|e| e.path().is_ok_and(|p| p.starts_with("images/blobs")) && e.size() > 1000)
        .map(|e| {
            (
                e.path().expect("path").to_string_lossy().into_owned(),
                e.raw_file_position(),
            )
        })
        .expect("a blob entry");
    bytes[usize::try_from(offset).expect("offset") + 500] ^= 0x55;
    let bad = work.path().join("bad.tar.zst");
    std::fs::write(
        &bad,
        zstd::encode_all(bytes.as_slice(), 3).expect("compress"),
    )
    .expect("write");
    let host = target.host();
    let out = install_cli(
        work.path(),
        &[
            "seed",
            "--bundle",
            &bad.display().to_string(),
            "--registry",
            &host,
            "--plain-http",
            "--username",
            "seeder",
            "--password-stdin",
        ],
        Some("pw-from-stdin\n"),
    );
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&name), "the tampered entry is named: {err}");
    assert_eq!(uploads(&target), 0, "nothing pushed from a bad bundle");

    let out = install_cli(
        work.path(),
        &[
            "seed",
            "--bundle",
            &bundle.display().to_string(),
            "--registry",
            &host,
            "--plain-http",
            "--project",
            "kubexm",
            "--username",
            "seeder",
            "--password-stdin",
        ],
        Some("pw-from-stdin\n"),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("seeded 3 images into {host}")),
        "{stdout}"
    );
    assert!(
        !stderr.contains("pw-from-stdin") && !stdout.contains("pw-from-stdin"),
        "the password never shows"
    );
    let opts = SeedOptions {
        project: Some("kubexm".into()),
        ..options(&target, Some(("seeder", "pw-from-stdin")), None)
    };
    assert_seeded(&tree, &opts, Some(("seeder", "pw-from-stdin")), false);
}
