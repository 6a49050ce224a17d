use std::path::Path;

use kubexm_testkit::{
    http_status, images, skopeo_inspect_digest, Registry, RegistryOptions, TlsFiles,
};

fn auth_options() -> RegistryOptions {
    RegistryOptions::default().with_basic_auth("kubexm", "test-password")
}

#[test]
fn open_registry_answers_v2() {
    let registry = Registry::start(RegistryOptions::default());
    assert!(registry.host().starts_with("127.0.0.1:"));
    assert_eq!(registry.url(), format!("http://{}", registry.host()));
    let status = http_status(&format!("{}/v2/", registry.url()), None).expect("GET /v2/");
    assert_eq!(status, 200);
}

#[test]
fn basic_auth_rejects_anonymous_and_accepts_credentials() {
    let registry = Registry::start(auth_options());
    let v2 = format!("{}/v2/", registry.url());
    assert_eq!(http_status(&v2, None).expect("anonymous GET"), 401);
    assert_eq!(
        http_status(&v2, Some(("kubexm", "wrong"))).expect("wrong password GET"),
        401
    );
    assert_eq!(
        http_status(&v2, registry.creds()).expect("authenticated GET"),
        200
    );

    let work = tempfile::tempdir().expect("temp dir");
    let layout = images::busybox_layout(work.path(), "auth", "amd64");
    let digest = images::push(
        &layout,
        images::LAYOUT_TAG,
        &registry,
        registry.creds(),
        "auth/busybox:1",
    );
    let reference = registry.docker_ref("auth/busybox:1");
    let err = skopeo_inspect_digest(&reference, false, None)
        .expect_err("anonymous inspect must be refused");
    assert!(
        !err.to_string().contains("test-password"),
        "credentials are masked: {err}"
    );
    assert_eq!(
        skopeo_inspect_digest(&reference, false, registry.creds()).expect("inspect with creds"),
        digest
    );
}

#[test]
fn restart_keeps_port_and_content() {
    let mut registry = Registry::start(RegistryOptions::default());
    let work = tempfile::tempdir().expect("temp dir");
    let layout = images::busybox_layout(work.path(), "restart", "amd64");
    let digest = images::push(&layout, images::LAYOUT_TAG, &registry, None, "keep/me:1");
    let host = registry.host();
    let first_pid = registry.pid().expect("running");

    registry.stop();
    assert!(!registry.is_running());
    assert!(
        http_status(&format!("{}/v2/", registry.url()), None).is_err(),
        "a stopped registry refuses connections"
    );

    registry.restart();
    assert!(registry.is_running());
    assert_eq!(registry.host(), host);
    assert_ne!(registry.pid(), Some(first_pid));
    let reference = registry.docker_ref("keep/me:1");
    assert_eq!(
        skopeo_inspect_digest(&reference, false, None).expect("inspect after restart"),
        digest
    );
    assert!(registry.log_text().matches("listening on").count() >= 2);
}

#[test]
fn access_log_counts_the_requests_made() {
    let registry = Registry::start(RegistryOptions::default());
    let work = tempfile::tempdir().expect("temp dir");
    let layout = images::busybox_layout(work.path(), "count", "amd64");
    assert_eq!(registry.count_requests("PUT", "/manifests/"), 0);

    let _ = images::push(&layout, images::LAYOUT_TAG, &registry, None, "count/bb:1");
    // Layer and config: HEAD (absent), then POST + PATCH + PUT uploads; then the manifest.
    assert_eq!(
        registry.count_requests("PUT", "/v2/count/bb/manifests/1"),
        1
    );
    assert_eq!(
        registry.count_requests("PUT", "/v2/count/bb/blobs/uploads/"),
        2
    );
    let heads = registry.count_requests("HEAD", "/v2/count/bb/blobs/sha256:");
    assert!(heads >= 2, "HEAD blob checks: {heads}");

    let digest =
        skopeo_inspect_digest(&registry.docker_ref("count/bb:1"), false, None).expect("inspect");
    assert!(registry.count_requests("GET", "/v2/count/bb/manifests/1") >= 1);

    // Same image again: blobs exist, so no new uploads, only the manifest PUT.
    let again = images::push(&layout, images::LAYOUT_TAG, &registry, None, "count/bb:1");
    assert_eq!(again, digest);
    assert_eq!(
        registry.count_requests("PUT", "/v2/count/bb/blobs/uploads/"),
        2
    );
    assert_eq!(
        registry.count_requests("PUT", "/v2/count/bb/manifests/1"),
        2
    );
    assert!(registry
        .access_log()
        .iter()
        .all(|e| !e.uri.starts_with("/kubexm-testkit-sync/")));
}

#[test]
fn drop_kills_the_process_and_removes_its_files() {
    let registry = Registry::start(RegistryOptions::default());
    let pid = registry.pid().expect("running");
    let storage = registry.storage_dir();
    let proc_entry = format!("/proc/{pid}");
    assert!(Path::new(&proc_entry).exists());
    drop(registry);
    assert!(!Path::new(&proc_entry).exists(), "process {pid} reaped");
    assert!(!storage.exists(), "temp dir removed");
}

#[test]
fn tls_registry_with_auth() {
    let certs = tempfile::tempdir().expect("temp dir");
    let tls = TlsFiles::self_signed(certs.path());
    let registry = Registry::start(auth_options().with_tls(tls));
    assert!(registry.url().starts_with("https://"));
    let work = tempfile::tempdir().expect("temp dir");
    let layout = images::busybox_layout(work.path(), "tls", "amd64");
    let digest = images::push(
        &layout,
        images::LAYOUT_TAG,
        &registry,
        registry.creds(),
        "tls/bb:1",
    );
    assert_eq!(
        skopeo_inspect_digest(&registry.docker_ref("tls/bb:1"), false, registry.creds())
            .expect("inspect over TLS"),
        digest
    );
    assert_eq!(registry.count_requests("PUT", "/v2/tls/bb/manifests/1"), 1);
}

#[test]
fn start_failure_panics_with_the_registry_log() {
    let options = RegistryOptions::default().with_tls(TlsFiles {
        cert: "/nonexistent/kubexm.crt".into(),
        key: "/nonexistent/kubexm.key".into(),
    });
    let panic = std::panic::catch_unwind(|| Registry::start(options))
        .expect_err("a registry with missing TLS files must not start");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("exited early"), "{message}");
    assert!(
        message.contains("/nonexistent/kubexm.crt"),
        "log quoted: {message}"
    );
}
