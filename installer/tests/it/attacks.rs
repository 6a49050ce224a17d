//! Hostile bundles and hostile registries against `unpack` and `seed` (issue 15). Each test is
//! an attack that got through before the fix.
//!
//! The registries here are stand-ins: a few lines of HTTP on loopback that play the attacker
//! (a real registry never answers like this), recording every request they receive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubexm_bundles::manifest::BundleManifest;
use kubexm_install::seed::{seed, RegistryTarget, SeedOptions};
use kubexm_manifests::model::RewriteMode;
use kubexm_manifests::secret::Secret;
use serde_json::{json, Value};

use crate::unpack::chain;
use sha2::{Digest, Sha256};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One request as the stand-in saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the stand-in does with a request.
enum Reply {
    /// Status line, headers, body.
    Send(u16, Vec<(String, String)>, Vec<u8>),
    /// Send `bytes` one at a time, `every` apart (a registry that is never quite silent).
    Trickle(Vec<u8>, Duration),
    /// Send `head`, then spaces for as long as the client reads (an answer without end).
    Endless(Vec<u8>),
}

type Handler = dyn Fn(&Seen) -> Reply + Send + Sync;

/// A stand-in HTTP server on 127.0.0.1 that records requests and answers with `handler`.
struct StandIn {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl StandIn {
    fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let record = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let handler = Arc::clone(&handler);
                let record = Arc::clone(&record);
                std::thread::spawn(move || serve(stream, &*handler, &record));
            }
        });
        Self { port, seen }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

fn serve(stream: TcpStream, handler: &Handler, record: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or_default().to_owned(),
            parts.next().unwrap_or_default().to_owned(),
        );
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let len = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let seen = Seen {
            method,
            path,
            headers,
            body,
        };
        record.lock().expect("lock").push(seen.clone());
        match handler(&seen) {
            Reply::Send(status, headers, body) => {
                let mut head = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
                for (n, v) in headers {
                    head.push_str(&format!("{n}: {v}\r\n"));
                }
                head.push_str("\r\n");
                let mut all = head.into_bytes();
                if seen.method != "HEAD" {
                    all.extend_from_slice(&body);
                }
                if out.write_all(&all).is_err() {
                    return;
                }
            }
            Reply::Trickle(bytes, every) => {
                for b in bytes {
                    std::thread::sleep(every);
                    if out.write_all(&[b]).is_err() {
                        return;
                    }
                }
                return;
            }
            Reply::Endless(head) => {
                if out.write_all(&head).is_err() {
                    return;
                }
                let chunk = vec![b' '; 64 << 10];
                while out.write_all(&chunk).is_ok() {}
                return;
            }
        }
    }
}

fn send(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    Reply::Send(
        status,
        headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
        body.to_vec(),
    )
}

/// An unpacked bundle tree with one image whose manifest is `manifest` (written as given).
struct Tree {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    manifest: BundleManifest,
}

fn tree(manifest_of: impl FnOnce(&str, &str) -> Value) -> Tree {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("bundles/x");
    let blobs = dir.join("images/blobs/sha256");
    std::fs::create_dir_all(&blobs).expect("mkdir");
    let layer = b"layer".to_vec();
    let config = br#"{"architecture":"amd64","os":"linux"}"#.to_vec();
    for b in [&layer, &config] {
        std::fs::write(blobs.join(sha256(b)), b).expect("blob");
    }
    let manifest =
        serde_json::to_vec(&manifest_of(&sha256(&config), &sha256(&layer))).expect("manifest");
    std::fs::write(blobs.join(sha256(&manifest)), &manifest).expect("manifest blob");
    let bundle: BundleManifest = serde_json::from_value(json!({
        "formatVersion": 1,
        "toolVersion": "0.1.0",
        "cluster": "c",
        "kubernetesVersion": "v1.33.1",
        "zone": "default",
        "arches": ["amd64"],
        "created": 0,
        "files": [],
        "images": [{
            "reference": "registry.k8s.io/pause:3.10",
            "source": "registry.k8s.io/pause:3.10",
            "digest": format!("sha256:{}", sha256(&manifest)),
            "mediaType": MANIFEST,
            "size": manifest.len(),
            "platforms": ["linux/amd64"],
            "roles": ["master"],
        }],
    }))
    .expect("bundle.json");
    Tree {
        _tmp: tmp,
        dir,
        manifest: bundle,
    }
}

fn honest_manifest(config: &str, layer: &str) -> Value {
    json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{config}"), "size": 37},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": format!("sha256:{layer}"), "size": 5}],
    })
}

fn options(host: String, creds: Option<(&str, &str)>) -> SeedOptions {
    SeedOptions {
        target: RegistryTarget {
            host,
            plain_http: true,
            ca_pem: None,
            username: creds.map(|(u, _)| u.to_owned()),
            password: creds.map(|(_, p)| Secret::new(p)),
        },
        project: None,
        rewrite: RewriteMode::KeepPath,
        harbor: None,
        harbor_projects: Vec::new(),
        jobs: 1,
        attempts: 2,
        retry_delay: Duration::from_millis(50),
        chunk_size: 1 << 20,
    }
}

/// A registry that has nothing and accepts every upload.
fn accepting(seen: &Seen) -> Reply {
    match seen.method.as_str() {
        "HEAD" => send(404, &[], b""),
        "POST" => send(202, &[("location", "/v2/upload/1")], b""),
        "PUT" | "PATCH" => send(201, &[], b""),
        _ => send(404, &[], b""),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn attack_seed_reads_files_outside_the_bundle() {
    // A layer digest that walks out of the blob directory to /etc/hostname.
    let escape = format!("sha256:{}etc/hostname", "../".repeat(40));
    let tree = tree(|config, _| {
        json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{config}"), "size": 37},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": escape, "size": 1}],
        })
    });
    let registry = StandIn::start(accepting);
    let result = runtime().block_on(seed(
        &tree.dir,
        &tree.manifest,
        &options(registry.host(), None),
    ));
    let hostname = std::fs::read("/etc/hostname").unwrap_or_default();
    let leaked = registry
        .seen()
        .iter()
        .any(|s| !hostname.is_empty() && s.body == hostname);
    assert!(!leaked, "/etc/hostname was uploaded to the registry");
    let err = result.expect_err("a digest that is a path must be refused");
    let text = err.to_string();
    assert!(text.contains("not a manifest with valid digests"), "{text}");
    assert!(text.contains("64 lowercase hex"), "{text}");
    assert!(
        registry.seen().is_empty(),
        "refused before talking to the registry: {:?}",
        registry.seen()
    );
}

#[test]
fn attack_registry_realm_steals_the_password() {
    // The token realm is another origin, over plain http: the password must not go there.
    let thief = StandIn::start(|_| send(200, &[], br#"{"token":"t"}"#));
    let realm = format!("http://127.0.0.1:{}/token", thief.port);
    let registry = StandIn::start(move |seen| {
        if seen.header("authorization").is_some() {
            return accepting(seen);
        }
        let challenge = format!(r#"Bearer realm="{realm}",service="evil""#);
        send(401, &[("www-authenticate", challenge.as_str())], b"")
    });
    let tree = tree(honest_manifest);
    let result = runtime().block_on(seed(
        &tree.dir,
        &tree.manifest,
        &options(registry.host(), Some(("admin", "hunter2-secret"))),
    ));
    let stolen: Vec<Seen> = thief
        .seen()
        .into_iter()
        .filter(|s| s.header("authorization").is_some())
        .collect();
    assert!(
        stolen.is_empty(),
        "credentials sent to the realm: {stolen:?}"
    );
    let err = result.expect_err("the realm must be refused");
    let text = err.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{}/token", thief.port)),
        "names the realm: {text}"
    );
    assert!(!text.contains("hunter2"), "{text}");
}

/// A token realm over https on another origin than the registry's: before the rule was the
/// same origin, an https realm anywhere got the registry's credentials. Now nothing is sent
/// there (no connection is even opened) and the refusal names the realm; a realm on the
/// registry's own origin still gets them and the push goes through.
#[test]
fn attack_registry_https_realm_on_another_host_gets_no_credentials() {
    let thief = TcpListener::bind("127.0.0.1:0").expect("bind");
    let thief_port = thief.local_addr().expect("addr").port();
    thief.set_nonblocking(true).expect("nonblocking");
    let realm = format!("https://127.0.0.1:{thief_port}/token");
    let registry = StandIn::start(move |seen| {
        if seen.header("authorization").is_some() {
            return accepting(seen);
        }
        let challenge = format!(r#"Bearer realm="{realm}",service="evil""#);
        send(401, &[("www-authenticate", challenge.as_str())], b"")
    });
    let tree = tree(honest_manifest);
    let result = runtime().block_on(seed(
        &tree.dir,
        &tree.manifest,
        &options(registry.host(), Some(("admin", "hunter2-secret"))),
    ));
    let reached = thief.accept().is_ok();
    assert!(
        !reached,
        "a connection to the token service on another origin was opened"
    );
    let err = result.expect_err("the realm must be refused");
    let text = chain(&err);
    assert!(
        text.contains(&format!("127.0.0.1:{thief_port}/token"))
            && text.contains("not on the registry's own origin"),
        "names the realm and the rule: {text}"
    );
    assert!(!text.contains("hunter2"), "{text}");

    // The registry's own token service: the credentials go there, the token comes back and
    // is what the registry then sees.
    let port = Arc::new(Mutex::new(0u16));
    let own = Arc::clone(&port);
    let registry = StandIn::start(move |seen| {
        if seen.path.starts_with("/token") {
            return if seen
                .header("authorization")
                .is_some_and(|a| a.starts_with("Basic "))
            {
                send(200, &[], br#"{"token":"own-token"}"#)
            } else {
                send(401, &[], b"")
            };
        }
        if seen.header("authorization") == Some("Bearer own-token") {
            return accepting(seen);
        }
        let challenge = format!(
            r#"Bearer realm="http://127.0.0.1:{}/token",service="own""#,
            own.lock().expect("lock")
        );
        send(401, &[("www-authenticate", challenge.as_str())], b"")
    });
    *port.lock().expect("lock") = registry.port;
    runtime()
        .block_on(seed(
            &tree.dir,
            &tree.manifest,
            &options(registry.host(), Some(("admin", "hunter2-secret"))),
        ))
        .expect("a token service on the registry's own origin is used");
    assert!(registry
        .seen()
        .iter()
        .any(|s| s.path.starts_with("/token") && s.header("authorization").is_some()));
}

#[test]
fn attack_registry_error_body_fakes_success() {
    // The error body clears the line and prints a green success message.
    let fake = "\r\u{1b}[2K\u{1b}[32mseeded 1 images OK\u{1b}[0m\n";
    let registry = StandIn::start(move |seen| match seen.method.as_str() {
        "HEAD" => send(404, &[], b""),
        _ => send(400, &[], fake.as_bytes()),
    });
    let tree = tree(honest_manifest);
    let err = runtime()
        .block_on(seed(
            &tree.dir,
            &tree.manifest,
            &options(registry.host(), None),
        ))
        .expect_err("400 on upload");
    let text = format!("{err}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\r'),
        "raw control characters reach the terminal: {text:?}"
    );
    assert!(text.contains(r"\u{1b}[32mseeded 1 images OK"), "{text}");
}

/// Seeds the honest tree into `host` with a 1 s stall timeout, `base` per request and a retry
/// `budget`; returns the error and the time it took.
fn seed_held_to(
    host: String,
    attempts: u32,
    base: Duration,
    budget: Duration,
) -> (kubexm_install::seed::SeedError, Duration) {
    let tree = tree(honest_manifest);
    let deadlines = kubexm_install::seed::Deadlines {
        stall: Duration::from_secs(1),
        base,
        min_rate: 1 << 30,
        retry_budget: budget,
    };
    let started = Instant::now();
    let err = runtime()
        .block_on(kubexm_install::seed::seed_with(
            &tree.dir,
            &tree.manifest,
            &SeedOptions {
                attempts,
                ..options(host, None)
            },
            deadlines,
        ))
        .expect_err("a registry that never finishes an answer");
    (err, started.elapsed())
}

#[test]
fn attack_registry_trickles_forever() {
    // Every answer arrives one byte every 300 ms: no read ever stalls long enough for a
    // per-read timeout, so only a deadline per request ends it.
    let registry = StandIn::start(|seen| {
        if seen.method == "HEAD" && seen.path.contains("/manifests/") {
            return send(404, &[], b"");
        }
        Reply::Trickle(
            b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n".repeat(50),
            Duration::from_millis(300),
        )
    });
    let (err, took) = seed_held_to(
        registry.host(),
        10,
        Duration::from_secs(2),
        Duration::from_secs(5),
    );
    assert!(
        took < Duration::from_secs(15),
        "bounded by the retry budget, took {took:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&registry.host()),
        "names the registry: {text}"
    );
    assert!(
        text.contains("in repository pause"),
        "names the repository: {text}"
    );
    assert!(text.contains("blob sha256:"), "names the blob: {text}");
}

#[test]
fn attack_registry_hangs_after_accepting() {
    // Accepts the connection, reads nothing, never answers.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let host = format!("127.0.0.1:{}", listener.local_addr().expect("addr").port());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let (err, took) = seed_held_to(
        host.clone(),
        100,
        Duration::from_secs(30),
        Duration::from_secs(4),
    );
    assert!(took < Duration::from_secs(12), "{:?}", took);
    let text = err.to_string();
    assert!(
        text.contains(&host) && text.contains("in repository pause"),
        "{text}"
    );
    assert!(text.contains("manifest 3.10"), "names the manifest: {text}");
}

/// Root only: a tmpfs of `mib` MiB mounted on `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, mib: u32) -> Option<Self> {
        std::fs::create_dir_all(dir).expect("mkdir");
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={mib}m,mode=755"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A formatVersion 1 bundle (the old format, still read) holding `files` (path, content).
fn v1_bundle(files: &[(&str, &[u8])]) -> Vec<u8> {
    let json = serde_json::to_vec_pretty(&json!({
        "formatVersion": 1, "toolVersion": "0", "cluster": "c", "kubernetesVersion": "v1.33.1",
        "zone": "default", "arches": ["amd64"], "created": 0, "files": [], "images": [],
    }))
    .expect("json");
    let mut sums: Vec<(String, String)> = files
        .iter()
        .map(|(p, c)| ((*p).to_owned(), sha256(c)))
        .chain([("bundle.json".to_owned(), sha256(&json))])
        .collect();
    sums.sort();
    let sums: String = sums.iter().map(|(p, h)| format!("{h}  {p}\n")).collect();
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |path: &str, content: &[u8], mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_path(path).expect("path");
        h.set_size(content.len() as u64);
        h.set_mode(mode);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        builder.append(&h, content).expect("append");
    };
    add("bundle.json", &json, 0o644);
    add("SHA256SUMS", sums.as_bytes(), 0o644);
    for (p, c) in files {
        add(p, c, 0o644);
    }
    let tar = builder.into_inner().expect("tar");
    zstd::encode_all(tar.as_slice(), 3).expect("zstd")
}

#[test]
fn attack_decompression_bomb_fills_the_disk() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("attack_decompression_bomb_fills_the_disk needs root (a tmpfs); tests/run-all runs it as root");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let Some(disk) = Tmpfs::mount(&tmp.path().join("small"), 48) else {
        panic!("mount -t tmpfs failed as root");
    };
    // 128 MiB of zeros compresses to a few KiB: the old check asked for twice that.
    let zeros = vec![0u8; 128 << 20];
    let bundle = tmp.path().join("bomb.tar.zst");
    std::fs::write(&bundle, v1_bundle(&[("files/zeros", &zeros)])).expect("write");
    assert!(std::fs::metadata(&bundle).expect("meta").len() < 1 << 20);
    let work = disk.0.join("work");
    let err = kubexm_install::unpack::unpack(&bundle, &work).expect_err("a bomb");
    let text = chain(&err);
    assert!(text.contains("Not enough free space"), "{text}");
    assert!(
        !text.contains("No space left on device"),
        "the disk was filled: {text}"
    );
}

#[test]
fn attack_inline_password_world_readable_after_unpack() {
    let tmp = tempfile::tempdir().expect("tmp");
    let bundle = tmp.path().join("b.tar.zst");
    std::fs::write(
        &bundle,
        v1_bundle(&[("cluster.yaml", b"spec: {hosts: [{password: hunter2}]}\n")]),
    )
    .expect("write");
    let work = tmp.path().join("work");
    let unpacked = kubexm_install::unpack::unpack(&bundle, &work).expect("unpack");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&unpacked.dir), 0o700, "{}", unpacked.dir.display());
    assert_eq!(mode(&work.join("bundles")), 0o700);
    assert_eq!(
        mode(&work),
        0o700,
        "a work directory KubeXM creates is private"
    );
}

/// A registry that asks for Basic credentials, then answers every upload start with `location`.
fn basic_registry_sending_uploads_to(location: String) -> StandIn {
    StandIn::start(move |seen| {
        if seen.header("authorization").is_none() {
            return send(401, &[("www-authenticate", r#"Basic realm="r""#)], b"");
        }
        match seen.method.as_str() {
            "POST" => send(202, &[("location", location.as_str())], b""),
            _ => accepting(seen),
        }
    })
}

#[test]
fn attack_upload_location_takes_the_credentials_to_another_host() {
    // The registry sends the upload to another address over plain http: before the fix, the
    // PATCH/PUT carried the Basic `Authorization` there. Three spellings of another origin:
    // absolute, scheme-relative, and a relative one that the old concatenation
    // (`http://127.0.0.1:PORT` + `@127.0.0.1:THIEF/…`) turned into a URL whose host is the thief.
    let thief = StandIn::start(|_| send(201, &[], b""));
    for (location, refused) in [
        (format!("http://127.0.0.1:{}/upload/1", thief.port), true),
        (format!("//127.0.0.1:{}/upload/1", thief.port), true),
        (format!("@127.0.0.1:{}/upload/1", thief.port), false),
    ] {
        let registry = basic_registry_sending_uploads_to(location.clone());
        let tree = tree(honest_manifest);
        let result = runtime().block_on(seed(
            &tree.dir,
            &tree.manifest,
            &options(registry.host(), Some(("admin", "hunter2-secret"))),
        ));
        assert!(
            thief.seen().is_empty(),
            "{location}: a request reached the other host: {:?}",
            thief.seen()
        );
        if refused {
            let text = result.expect_err("another origin is refused").to_string();
            assert!(
                text.contains("not on the registry's own origin") && text.contains(&location),
                "{location}: {text}"
            );
            assert!(!text.contains("hunter2"), "{text}");
            assert!(
                !registry
                    .seen()
                    .iter()
                    .any(|s| s.method == "PATCH" || s.method == "PUT"),
                "nothing uploaded"
            );
        }
    }
}

/// A client for a Harbor stand-in at `host`, held to a 2 s deadline per call.
fn harbor_client(host: String) -> kubexm_install::seed::PushClient {
    let target = options(host, Some(("admin", "HarborTest1"))).target;
    kubexm_install::seed::PushClient::with_deadlines(
        &target,
        1,
        Duration::from_millis(10),
        kubexm_install::seed::CHUNK,
        kubexm_install::seed::Deadlines {
            stall: Duration::from_secs(30),
            base: Duration::from_secs(2),
            min_rate: 1 << 20,
            retry_budget: Duration::from_secs(10),
        },
    )
    .expect("client")
}

#[test]
fn attack_harbor_api_trickles_forever() {
    // One byte every 300 ms: never silent long enough for a stall timeout (30 s here), so
    // before the fix the project list was waited on for as long as Harbor kept sending.
    let harbor = StandIn::start(|_| {
        Reply::Trickle(
            b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n[".repeat(100),
            Duration::from_millis(300),
        )
    });
    let client = harbor_client(harbor.host());
    let started = Instant::now();
    let err = runtime()
        .block_on(kubexm_install::seed::harbor::ensure_projects(
            &client,
            &["kubexm".to_owned()],
            false,
        ))
        .expect_err("no complete answer");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "bounded by the deadline: {took:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&harbor.host()) && text.contains("GET /api/v2.0/projects"),
        "names the registry and the call: {text}"
    );
}

#[test]
fn attack_harbor_api_answer_without_end() {
    // An answer that never ends (with and without a Content-Length): before the fix,
    // `text()` kept all of it in memory (1.5 GiB took the process to 4.7 GB).
    for head in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 1610612736\r\n\r\n"[..],
        &b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n"[..],
    ] {
        let harbor = StandIn::start(move |_| Reply::Endless(head.to_vec()));
        let client = harbor_client(harbor.host());
        let err = runtime()
            .block_on(kubexm_install::seed::harbor::ensure_projects(
                &client,
                &["kubexm".to_owned()],
                false,
            ))
            .expect_err("too large");
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "larger than {} bytes",
                kubexm_install::seed::MAX_API_BODY
            )),
            "{text}"
        );
    }
}

#[test]
fn attack_harbor_error_body_drives_the_terminal() {
    let fake = "{\"errors\":[{\"code\":\"\u{1b}[2K\",\"message\":\"\rseeded OK\u{1b}[0m\"}]}";
    let harbor = StandIn::start(move |_| send(500, &[], fake.as_bytes()));
    let client = harbor_client(harbor.host());
    let err = runtime()
        .block_on(kubexm_install::seed::harbor::ensure_projects(
            &client,
            &["kubexm".to_owned()],
            false,
        ))
        .expect_err("500");
    let text = err.to_string();
    assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
    assert!(text.contains(r"\u{1b}[2K"), "{text}");
}

/// The workspace's Rust sources outside tests: `(path from the workspace root, text)`.
fn workspace_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned();
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = ["installer", "builder", "bundles", "manifests", "osrepo"]
        .iter()
        .map(|c| root.join(c).join("src"))
        .collect();
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("source");
                // Inline unit tests may do as they like.
                let code = text
                    .split("\n#[cfg(test)]")
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let rel = p
                    .strip_prefix(&root)
                    .expect("under root")
                    .display()
                    .to_string();
                out.push((rel, code));
            }
        }
    }
    assert!(out.len() > 50, "found the sources: {}", out.len());
    out
}

/// The places allowed to talk HTTP, each for a reason.
const HTTP_CLIENTS: &[(&str, &str)] = &[
    (
        "installer/src/seed/client.rs",
        "the installer's one client: origin-pinned credentials, deadlines, size limits",
    ),
    (
        "builder/src/fetch.rs",
        "the builder's downloader: no credentials, every file checked against its pinned sha256, documents capped",
    ),
    (
        "builder/src/credentials.rs",
        "the builder's registry credentials, in oci-client's type, for images.rs",
    ),
    (
        "builder/src/images.rs",
        "the builder's image puller (oci-client): upstream registries, every blob checked against its digest",
    ),
];

#[test]
fn http_and_untrusted_text_go_through_their_one_helper() {
    let sources = workspace_sources();
    let mut bypasses = Vec::new();
    let allowed = |file: &str| HTTP_CLIENTS.iter().any(|(f, _)| *f == file);
    for (file, code) in &sources {
        for (n, line) in code.lines().enumerate() {
            let at = format!("{file}:{}", n + 1);
            // 1. No HTTP client, request or raw response outside the clients.
            let client_use = [
                "reqwest::Client",
                "reqwest::ClientBuilder",
                "reqwest::get(",
                "reqwest::blocking",
                "reqwest::Response",
                "reqwest::RequestBuilder",
                "oci_client::",
                "hyper::",
                "ureq::",
            ];
            if !allowed(file) && client_use.iter().any(|p| line.contains(p)) {
                bypasses.push(format!(
                    "{at}: HTTP outside the one client: {}",
                    line.trim()
                ));
            }
            // 2. No answer read whole without a limit (`text()`, `bytes()`, `json()`).
            for read in [
                ".text().await",
                ".bytes().await",
                ".json().await",
                ".json::<",
            ] {
                if line.contains(read) {
                    bypasses.push(format!(
                        "{at}: an answer read without a size limit: {}",
                        line.trim()
                    ));
                }
            }
        }
    }
    // 3. Errors about what came from outside (registry answers, split indexes, deltas, bundle
    // manifests, backups, KubeKey files, trust checks) print it escaped: no `.display()` and no
    // raw `{name}` of a field that holds outside text, in their `#[error]` messages.
    const OUTSIDE: &[&str] = &[
        "installer/src/seed/mod.rs",
        "installer/src/seed/client.rs",
        "installer/src/seed/harbor.rs",
        "installer/src/intake/trust.rs",
        "installer/src/backup/mod.rs",
        "bundles/src/split.rs",
        "bundles/src/delta.rs",
        "bundles/src/check.rs",
        "bundles/src/regular.rs",
        "manifests/src/import/mod.rs",
    ];
    const RAW_FIELDS: &[&str] = &[
        "path",
        "name",
        "reason",
        "detail",
        "body",
        "url",
        "realm",
        "release",
        "version",
        "bundle",
        "repo",
        "reference",
        "value",
        "location",
        "cluster",
        "kind",
        "api_version",
        "signature",
        "from",
    ];
    for file in OUTSIDE {
        let code = &sources
            .iter()
            .find(|(f, _)| f == file)
            .unwrap_or_else(|| panic!("{file} is gone: update this list"))
            .1;
        for attr in code.split("#[error(").skip(1) {
            let attr = attr.split(")]\n").next().unwrap_or_default();
            if attr.trim_start().starts_with("transparent") {
                continue;
            }
            if attr.contains(".display()") {
                bypasses.push(format!("{file}: `.display()` in #[error({attr})]"));
            }
            let format = attr.split('"').nth(1).unwrap_or_default();
            for field in RAW_FIELDS {
                if format.contains(&format!("{{{field}}}")) {
                    bypasses.push(format!("{file}: raw `{{{field}}}` in #[error({attr})]"));
                }
            }
        }
    }
    // 4. The commands that print what a bundle, split index, delta or backup says print it
    // escaped: no raw path in the functions that do.
    for (file, function) in [
        ("builder/src/commands/verify.rs", "pub fn run("),
        ("installer/src/commands/backup.rs", "fn verify("),
        ("installer/src/commands/backup.rs", "fn verify_report("),
        ("installer/src/commands/mod.rs", "pub(crate) fn take_in("),
    ] {
        let code = &sources.iter().find(|(f, _)| f == file).expect("file").1;
        let body = code
            .split(function)
            .nth(1)
            .unwrap_or_else(|| panic!("{file}: `{function}` is gone: update this list"))
            .split("\n}\n")
            .next()
            .unwrap_or_default();
        for print in [
            "println!(",
            "eprintln!(",
            "print!(",
            "eprint!(",
            "writeln!(",
            "format!(",
        ] {
            for call in body.split(print).skip(1) {
                let call = call.split(");").next().unwrap_or_default();
                if call.contains(".display()") {
                    bypasses.push(format!(
                        "{file} {function}: `{print}` prints a path raw: {call}"
                    ));
                }
            }
        }
    }
    assert!(
        bypasses.is_empty(),
        "{} bypass(es) of the one client / the one printing helper:\n{}",
        bypasses.len(),
        bypasses.join("\n")
    );
}
