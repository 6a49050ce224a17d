//! The command line: the explicit `install` verb and the original `kubexm-install --bundle FILE`
//! form run the same install (shown with `--dry-run`, which connects nowhere), on a bundle
//! written by `kubexm_bundles::pack` with the lab's cluster.yaml and catalog (stand-in files and
//! image layout: the plan names them without running them).

use std::path::{Path, PathBuf};
use std::process::Command;

use kubexm_bundles::manifest::{
    BundleManifest, FileRecord, ImageRecord, CATALOG_PATH, CLUSTER_PATH,
};
use kubexm_bundles::pack::{pack, Entry, PackOptions, Source, FILE_MODE};
use kubexm_install::context::load_context;
use sha2::{Digest, Sha256};

use crate::plan_cli::{files_under, without_generated_keys};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn lab(file: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/lab")
        .join(file);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A bundle with the lab's cluster.yaml and catalog and, for every file the resolver lists, a
/// small stand-in (the plan names files, it does not run them).
pub(crate) fn lab_bundle(dir: &Path) -> PathBuf {
    let lab_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/lab");
    let ctx = load_context(
        &lab_dir.join("cluster.yaml"),
        Some(&lab_dir.join("mirror/catalog-lab.yaml")),
        None,
        dir,
    )
    .expect("lab context");
    let resolution = ctx.resolution.expect("the lab cluster resolves");
    let content = b"stand-in file: planned, never run\n".to_vec();
    let sha256 = hex::encode(Sha256::digest(&content));
    let flannel = lab("mirror/kube-flannel.yml");
    let flannel_sha256 = hex::encode(Sha256::digest(&flannel));
    let files: Vec<FileRecord> = resolution
        .binaries
        .iter()
        .map(|f| FileRecord {
            name: f.name.clone(),
            version: f.version.clone(),
            arch: f.arch.as_str().to_string(),
            path: f.path.clone(),
            sha256: if f.name == "flannel-manifest" {
                flannel_sha256.clone()
            } else {
                sha256.clone()
            },
            size: if f.name == "flannel-manifest" {
                flannel.len()
            } else {
                content.len()
            } as u64,
            url: f.url.clone(),
            roles: f.roles.iter().map(|r| r.as_str().to_string()).collect(),
        })
        .collect();
    // One stand-in image manifest (a config, no layers) behind every image: the layout closes,
    // as verify requires, and the plan never reads it.
    let image_config = br#"{"architecture":"amd64","os":"linux"}"#.to_vec();
    let config_digest = hex::encode(Sha256::digest(&image_config));
    let image_manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:{config_digest}","size":{}}},"layers":[]}}"#,
        image_config.len()
    )
    .into_bytes();
    let manifest_digest = hex::encode(Sha256::digest(&image_manifest));
    let manifest = BundleManifest {
        format_version: kubexm_bundles::FORMAT_VERSION,
        tool_version: "0.1.0".into(),
        cluster: "lab".into(),
        kubernetes_version: "v1.33.1".into(),
        zone: "default".into(),
        arches: ["amd64".to_owned()].into(),
        created: 1_700_000_000,
        files: files.clone(),
        images: resolution
            .images
            .iter()
            .map(|i| ImageRecord {
                reference: i.reference.clone(),
                source: i.source.clone(),
                digest: format!("sha256:{}", hex::encode(Sha256::digest(&image_manifest))),
                source_digest: None,
                layout_digest: None,
                media_type: OCI_MANIFEST.into(),
                size: image_manifest.len() as u64,
                platforms: i.platforms.clone(),
                roles: i.roles.iter().map(|r| r.as_str().to_string()).collect(),
            })
            .collect(),
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        sizes: Default::default(),
    };
    let entry = |path: &str, bytes: Vec<u8>| Entry {
        path: path.into(),
        source: Source::Bytes(bytes),
        sha256: None,
        mode: FILE_MODE,
    };
    let mut entries = vec![
        entry(CLUSTER_PATH, lab("cluster.yaml")),
        entry(CATALOG_PATH, lab("mirror/catalog-lab.yaml")),
    ];
    // The flannel manifest is rendered while planning: the lab mirror's stand-in has its shape.
    entries.extend(files.iter().map(|f| {
        let bytes = if f.name == "flannel-manifest" {
            flannel.clone()
        } else {
            content.clone()
        };
        entry(&f.path, bytes)
    }));
    // The layout's two top files; the plan seeds from the layout without reading it.
    entries.push(entry(
        "images/oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    ));
    let descriptors: Vec<serde_json::Value> = manifest
        .images
        .iter()
        .map(|i| {
            serde_json::json!({
                "mediaType": OCI_MANIFEST,
                "digest": i.digest,
                "size": i.size,
                "annotations": {"org.opencontainers.image.ref.name": i.reference},
            })
        })
        .collect();
    entries.push(entry(
        "images/index.json",
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": descriptors}))
            .expect("index.json"),
    ));
    entries.push(entry(
        &format!("images/blobs/sha256/{manifest_digest}"),
        image_manifest,
    ));
    entries.push(entry(
        &format!("images/blobs/sha256/{config_digest}"),
        image_config,
    ));
    let opts = PackOptions {
        level: 1,
        threads: 1,
        mtime: 1_700_000_000,
    };
    pack(&dir.join("lab.tar.zst"), &manifest, entries, &opts)
        .expect("pack")
        .path
}

/// `kubexm-install --work-dir <fresh> ARGS`: exit status, stdout and stderr with the work
/// directory replaced by `WORK`, and the files left under `WORK/pki`.
fn kubexm_install(args: &[&str]) -> (bool, String, String, Vec<PathBuf>) {
    let work = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_kubexm-install"))
        .arg("--work-dir")
        .arg(work.path())
        .args(args)
        .env("KUBEXM_LOG", "off")
        .output()
        .expect("run kubexm-install");
    let w = work.path().display().to_string();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).replace(&w, "WORK"),
        String::from_utf8_lossy(&out.stderr).replace(&w, "WORK"),
        files_under(&work.path().join("pki")),
    )
}

#[test]
fn install_verb_and_top_level_bundle_run_the_same_install() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bundle = lab_bundle(dir.path());
    let bundle = bundle.to_str().expect("utf-8");
    let verb = kubexm_install(&["install", "--bundle", bundle, "--dry-run"]);
    let old = kubexm_install(&["--bundle", bundle, "--dry-run"]);
    assert!(verb.0, "install --bundle --dry-run failed:\n{}", verb.2);
    assert!(old.0, "--bundle --dry-run failed:\n{}", old.2);
    assert!(verb.1.starts_with("pipeline install\n"), "{}", verb.1);
    assert!(verb.1.contains("module preflight"), "{}", verb.1);
    assert_eq!(
        without_generated_keys(&verb.1),
        without_generated_keys(&old.1)
    );
    // A dry run plans: it keeps no key or certificate.
    assert_eq!(verb.3, Vec::<PathBuf>::new());
    assert_eq!(old.3, Vec::<PathBuf>::new());
}

#[test]
fn install_without_a_bundle_says_what_is_missing() {
    let (ok, _, err, _) = kubexm_install(&["install", "--dry-run"]);
    assert!(!ok);
    assert!(err.contains("install needs --bundle FILE"), "{err}");
}

/// `--no-verify` (issue 37): a dry run plans and never verifies, so the flag changes nothing
/// there, in either place (`install --no-verify`, or `kubexm-install --no-verify install`,
/// which is the same install's); before any other verb it is refused (exit 2) rather than
/// silently ignored.
#[test]
fn no_verify_belongs_to_the_install_and_a_dry_run_never_verifies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bundle = lab_bundle(dir.path());
    let bundle = bundle.to_str().expect("utf-8");
    let default = kubexm_install(&["install", "--bundle", bundle, "--dry-run"]);
    assert!(default.0, "{}", default.2);
    assert!(!default.1.contains("verifying cluster"), "{}", default.1);
    for args in [
        &["install", "--bundle", bundle, "--dry-run", "--no-verify"][..],
        &["--no-verify", "install", "--bundle", bundle, "--dry-run"],
        &["--bundle", bundle, "--dry-run", "--no-verify"],
    ] {
        let skipped = kubexm_install(args);
        assert!(skipped.0, "{args:?}: {}", skipped.2);
        assert_eq!(
            without_generated_keys(&skipped.1),
            without_generated_keys(&default.1),
            "{args:?}"
        );
    }

    let work = tempfile::tempdir().expect("tempdir");
    for verb in [&["status"][..], &["upgrade", "--bundle", bundle, "--yes"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubexm-install"))
            .arg("--work-dir")
            .arg(work.path())
            .arg("--no-verify")
            .args(verb)
            .env("KUBEXM_LOG", "off")
            .output()
            .expect("run kubexm-install");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{verb:?}: {err}");
        assert!(err.contains("--no-verify goes after the verb"), "{err}");
    }
}
