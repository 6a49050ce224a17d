use kubexm_testkit::images::{self, DOCKER_MANIFEST_V2, LAYOUT_TAG, OCI_INDEX, OCI_MANIFEST};
use kubexm_testkit::{skopeo_inspect_digest, skopeo_inspect_raw, Registry, RegistryOptions};
use serde_json::Value;

fn raw_json(registry: &Registry, reference: &str) -> Value {
    let raw = skopeo_inspect_raw(&registry.docker_ref(reference), false, registry.creds())
        .expect("skopeo inspect --raw");
    serde_json::from_slice(&raw).expect("manifest JSON")
}

#[test]
fn builds_are_small_reproducible_and_variants_differ() {
    let work = tempfile::tempdir().expect("temp dir");
    let a = images::busybox_layout(&work.path().join("a"), "one", "amd64");
    let b = images::busybox_layout(&work.path().join("b"), "one", "amd64");
    let two = images::busybox_layout(work.path(), "two", "amd64");
    let arm = images::busybox_layout(work.path(), "one", "arm64");
    let digest = |layout| images::layout_manifest_digest(layout, LAYOUT_TAG);
    assert_eq!(digest(&a), digest(&b), "same inputs, same digest");
    assert_ne!(digest(&a), digest(&two));
    assert_ne!(digest(&a), digest(&arm));
    assert_eq!(
        digest(&arm),
        images::layout_manifest_digest(&arm, "arm64"),
        "also tagged with its arch"
    );
    let size: u64 = fs_err::read_dir(a.join("blobs/sha256"))
        .expect("blobs")
        .map(|e| e.expect("entry").metadata().expect("metadata").len())
        .sum();
    assert!(size < 4 << 20, "image is small: {size} bytes");
}

#[test]
fn push_returns_the_digest_skopeo_sees() {
    let registry = Registry::start(RegistryOptions::default());
    let work = tempfile::tempdir().expect("temp dir");
    let layout = images::busybox_layout(work.path(), "push", "amd64");
    let digest = images::push(&layout, LAYOUT_TAG, &registry, None, "lib/bb:1.0");
    assert_eq!(digest, images::layout_manifest_digest(&layout, LAYOUT_TAG));
    let reference = registry.docker_ref("lib/bb:1.0");
    assert_eq!(
        skopeo_inspect_digest(&reference, false, None).expect("inspect"),
        digest
    );
    let manifest = raw_json(&registry, "lib/bb:1.0");
    // umoci 0.4.7 omits the optional `mediaType` in the manifest body; clients must go by
    // the descriptor or Content-Type. The config type tells it is an OCI image.
    assert!(manifest.get("mediaType").is_none() || manifest["mediaType"] == OCI_MANIFEST);
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1));
}

#[test]
fn push_index_makes_a_two_platform_oci_index() {
    let registry = Registry::start(RegistryOptions::default().with_basic_auth("u", "p"));
    let work = tempfile::tempdir().expect("temp dir");
    let amd64 = images::busybox_layout(work.path(), "multi", "amd64");
    let arm64 = images::busybox_layout(work.path(), "multi", "arm64");
    let pushed = images::push_index(
        &registry,
        "multi/bb:2",
        &[(&amd64, LAYOUT_TAG), (&arm64, "arm64")],
        registry.creds(),
    );
    assert_eq!(pushed.manifests.len(), 2);
    assert_eq!(pushed.manifests[0].architecture, "amd64");
    assert_eq!(pushed.manifests[1].architecture, "arm64");
    assert_eq!(
        pushed.manifests[0].digest,
        images::layout_manifest_digest(&amd64, LAYOUT_TAG)
    );

    let index = raw_json(&registry, "multi/bb:2");
    assert_eq!(index["mediaType"], OCI_INDEX);
    let entries = index["manifests"].as_array().expect("manifests array");
    assert_eq!(entries.len(), 2);
    for (entry, expected) in entries.iter().zip(&pushed.manifests) {
        assert_eq!(entry["digest"], expected.digest.as_str());
        assert_eq!(entry["platform"]["os"], "linux");
        assert_eq!(
            entry["platform"]["architecture"],
            expected.architecture.as_str()
        );
        assert_eq!(entry["mediaType"], OCI_MANIFEST);
    }
    assert_eq!(
        skopeo_inspect_digest(&registry.docker_ref("multi/bb:2"), false, registry.creds())
            .expect("inspect index"),
        pushed.index
    );
    assert_eq!(
        pushed.index,
        kubexm_testkit::sha256_digest(&pushed.index_json)
    );
    // Each platform manifest is in the repository, by digest.
    for platform in &pushed.manifests {
        let by_digest = format!("multi/bb@{}", platform.digest);
        assert_eq!(
            skopeo_inspect_digest(&registry.docker_ref(&by_digest), false, registry.creds())
                .expect("inspect platform manifest"),
            platform.digest
        );
    }
}

#[test]
fn push_docker_schema2_converts_the_manifest() {
    let registry = Registry::start(RegistryOptions::default());
    let work = tempfile::tempdir().expect("temp dir");
    let layout = images::busybox_layout(work.path(), "docker", "amd64");
    let oci = images::push(&layout, LAYOUT_TAG, &registry, None, "fmt/bb:oci");
    let docker = images::push_docker_schema2(&layout, LAYOUT_TAG, &registry, None, "fmt/bb:v2s2");
    assert_ne!(oci, docker);
    let manifest = raw_json(&registry, "fmt/bb:v2s2");
    assert_eq!(manifest["mediaType"], DOCKER_MANIFEST_V2);
    assert_eq!(
        skopeo_inspect_digest(&registry.docker_ref("fmt/bb:v2s2"), false, None).expect("inspect"),
        docker
    );
}
