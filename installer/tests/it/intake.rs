//! A bundle on its way in (`kubexm_install::intake`), on real bundles written by
//! `kubexm_bundles::pack`: signatures checked before unpacking, split bundles read as one
//! stream with a damaged part named, delta bundles refused without their base and completed
//! from the site — from unpacked bundles and from a real registry (Debian's `docker-registry`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kubexm_bundles::delta::{self, DeltaManifest, SiteInventory};
use kubexm_bundles::manifest::{BundleManifest, FileRecord};
use kubexm_bundles::pack::{pack, plan_bundle, Entry, PackOptions, Source, FILE_MODE};
use kubexm_bundles::sign::{bundle_statement, SecretKey, SIGNATURE_SUFFIX};
use kubexm_bundles::split;
use kubexm_install::intake::delta::{check_base, complete, read_delta};
use kubexm_install::intake::site::{inventory, registry_holdings, scan};
use kubexm_install::intake::source::{beside, BundleSource};
use kubexm_install::intake::trust::{TrustError, TrustPolicy};
use kubexm_install::unpack::{unpack, unpack_reader, BUNDLES_DIR};
use kubexm_testkit::{sha256_hex, Registry, RegistryOptions};

use super::seed::{options, tree};

/// Deterministic, incompressible bytes.
pub(crate) fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

pub(crate) fn manifest_with(files: &[(&str, &[u8])]) -> BundleManifest {
    BundleManifest {
        format_version: kubexm_bundles::FORMAT_VERSION,
        tool_version: "test".into(),
        cluster: "intake".into(),
        kubernetes_version: "v1.33.11".into(),
        zone: "default".into(),
        arches: ["amd64".to_owned()].into(),
        created: 1_700_000_000,
        sizes: BTreeMap::new(),
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        files: files
            .iter()
            .map(|(path, content)| {
                let parts: Vec<&str> = path.split('/').collect();
                FileRecord {
                    name: parts[1].into(),
                    version: parts[2].into(),
                    arch: parts[3].into(),
                    path: (*path).into(),
                    sha256: sha256_hex(content),
                    size: content.len() as u64,
                    url: format!("https://example.invalid/{path}"),
                    roles: BTreeSet::new(),
                }
            })
            .collect(),
        images: Vec::new(),
    }
}

fn entries_of(files: &[(&str, &[u8])]) -> Vec<Entry> {
    files
        .iter()
        .map(|(path, content)| Entry {
            path: (*path).into(),
            source: Source::Bytes(content.to_vec()),
            sha256: None,
            mode: FILE_MODE,
        })
        .collect()
}

/// Packs a bundle of files; returns its content digest.
fn pack_files(out: &Path, files: &[(&str, &[u8])]) -> String {
    let mut entries = entries_of(files);
    entries.push(Entry {
        path: "cluster.yaml".into(),
        source: Source::Bytes(b"kind: Cluster\n".to_vec()),
        sha256: None,
        mode: FILE_MODE,
    });
    pack(out, &manifest_with(files), entries, &PackOptions::default()).expect("pack");
    digest_of(out)
}

fn digest_of(bundle: &Path) -> String {
    let head = kubexm_bundles::head::read_head(std::fs::File::open(bundle).expect("open"), None)
        .expect("head");
    head.content_digest
}

fn sign_bundle(key: &SecretKey, bundle: &Path) {
    let digest = digest_of(bundle);
    let sig = key
        .sign(
            &bundle_statement(&digest),
            &format!("kubexm-bundle sha256:{digest}"),
            "test",
        )
        .expect("sign");
    std::fs::write(beside(bundle, SIGNATURE_SUFFIX), sig.to_file()).expect("write sig");
}

fn trust(dir: &Path, keys: &[&SecretKey]) -> TrustPolicy {
    let paths: Vec<PathBuf> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let p = dir.join(format!("trusted-{i}.pub"));
            std::fs::write(&p, k.public().to_file()).expect("write pub");
            p
        })
        .collect();
    TrustPolicy::load(&paths).expect("keys load")
}

fn unpacked_count(work: &Path) -> usize {
    std::fs::read_dir(work.join(BUNDLES_DIR))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().len() == 64)
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn signatures_are_checked_before_unpacking() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let key = SecretKey::generate().expect("key");
    let a = d.join("a.tar.zst");
    let payload = noise(100_000, 1);
    pack_files(&a, &[("files/etcd/v3.5.16/amd64/etcd", &payload)]);
    sign_bundle(&key, &a);

    // Trusted key: verified, then the unpacked tree must be what was verified.
    let policy = trust(d, &[&key]);
    let verified = policy
        .check(&BundleSource::open(&a).expect("source"))
        .expect("trusted")
        .expect("keys are configured");
    assert_eq!(verified.key, key.public().id().to_string());
    let work = d.join("work");
    let u = unpack(&a, &work).expect("unpack");
    verified.confirm(&u.digest).expect("same content");
    assert!(verified.confirm(&"0".repeat(64)).is_err());

    // Unknown key: refused, naming the signer.
    let other = SecretKey::generate().expect("key");
    let err = trust(d, &[&other])
        .check(&BundleSource::open(&a).expect("source"))
        .expect_err("unknown key");
    let chain = format!(
        "{err}: {}",
        std::error::Error::source(&err)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(
        chain.contains(&key.public().id().to_string()) && chain.contains("not a trusted key"),
        "{chain}"
    );

    // Another bundle carrying a's signature: refused.
    let b = d.join("b.tar.zst");
    pack_files(&b, &[("files/etcd/v3.5.16/amd64/etcd", &noise(100_000, 2))]);
    std::fs::copy(beside(&a, SIGNATURE_SUFFIX), beside(&b, SIGNATURE_SUFFIX)).expect("copy");
    let err = policy
        .check(&BundleSource::open(&b).expect("source"))
        .expect_err("tampered");
    assert!(matches!(err, TrustError::Refused { .. }), "{err}");

    // Unsigned with keys configured: refused; without keys: nothing to check.
    std::fs::remove_file(beside(&b, SIGNATURE_SUFFIX)).expect("rm");
    let err = policy
        .check(&BundleSource::open(&b).expect("source"))
        .expect_err("unsigned");
    assert!(err.to_string().contains("is not signed"), "{err}");
    assert!(TrustPolicy::default()
        .check(&BundleSource::open(&b).expect("source"))
        .expect("no keys")
        .is_none());
    assert_eq!(
        unpacked_count(&work),
        1,
        "only the verified bundle was unpacked"
    );
}

#[test]
fn split_bundle_unpacks_as_one_stream_and_names_a_damaged_part() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let key = SecretKey::generate().expect("key");
    let bundle = d.join("s.tar.zst");
    let big = noise(3 * (1 << 20) + 500_000, 3);
    let digest = pack_files(&bundle, &[("files/kubelet/v1.33.11/amd64/kubelet", &big)]);
    sign_bundle(&key, &bundle);
    let index = split::split(&bundle, split::MIN_PART_SIZE, &digest).expect("split");
    assert_eq!(index.parts.len(), 4);
    let index_path = split::index_path(&bundle);
    let sig = key
        .sign(
            &std::fs::read(&index_path).expect("index"),
            "kubexm-split",
            "test",
        )
        .expect("sign index");
    std::fs::write(beside(&index_path, SIGNATURE_SUFFIX), sig.to_file()).expect("write");

    let source = BundleSource::open(&index_path).expect("index loads");
    let verified = trust(d, &[&key])
        .check(&source)
        .expect("index and content signed")
        .expect("configured");
    let work = d.join("work");
    let (reader, _) = source.reader().expect("reader");
    let u = unpack_reader(reader, source.path(), source.size().expect("size"), &work)
        .expect("unpacks from the parts");
    verified.confirm(&u.digest).expect("same content");
    assert_eq!(u.digest, digest);
    assert_eq!(
        std::fs::read(u.dir.join("files/kubelet/v1.33.11/amd64/kubelet")).expect("file"),
        big
    );
    assert!(!bundle.exists(), "the parts were never joined on disk");

    // Part 3 damaged: the stream fails, the part is named, the others are not.
    let p3 = d.join("s.tar.zst.part003");
    let mut bytes = std::fs::read(&p3).expect("part");
    bytes[777] ^= 0x10;
    std::fs::write(&p3, &bytes).expect("write");
    let work2 = d.join("work2");
    let (reader, status) = source.reader().expect("reader");
    let err = unpack_reader(reader, source.path(), source.size().expect("size"), &work2)
        .expect_err("damaged part");
    let named = status.and_then(|s| s.problem()).unwrap_or_default();
    let damaged = source.damaged_parts();
    assert_eq!(damaged.len(), 1, "{err}: {named}");
    let msg = damaged[0].to_string();
    assert!(
        msg.contains("part 3 of 4") && msg.contains("s.tar.zst.part003"),
        "{msg}"
    );
    assert!(named.is_empty() || named.contains("part003"), "{named}");
    assert_eq!(unpacked_count(&work2), 0, "nothing published");
}

/// A delta for `target` against `inventory`, packed as the builder packs it.
pub(crate) fn pack_delta(
    out: &Path,
    target: &BundleManifest,
    target_entries: &[Entry],
    inventory: &SiteInventory,
) -> DeltaManifest {
    let planned = plan_bundle(target, target_entries.to_vec()).expect("plan");
    let mut content: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for e in target_entries {
        let bytes = match &e.source {
            Source::Bytes(b) => b.clone(),
            Source::File(p) | Source::Stored(p) => std::fs::read(p).expect("read"),
        };
        content.insert(sha256_hex(&bytes), bytes);
    }
    content.insert(
        sha256_hex(&planned.manifest_json),
        planned.manifest_json.clone(),
    );
    let inv_json = inventory.to_json();
    let (plan, carry) = delta::plan(&planned, inventory, &sha256_hex(&inv_json));
    let mut entries = vec![Entry {
        path: delta::DELTA_PATH.into(),
        source: Source::Bytes(plan.to_json()),
        sha256: None,
        mode: FILE_MODE,
    }];
    for sha in carry {
        entries.push(Entry {
            path: format!("{}/{sha}", delta::STORE_DIR),
            source: Source::Bytes(content[&sha].clone()),
            sha256: None,
            mode: FILE_MODE,
        });
    }
    let delta_manifest = BundleManifest {
        files: Vec::new(),
        images: Vec::new(),
        ..target.clone()
    };
    pack(out, &delta_manifest, entries, &PackOptions::default()).expect("pack delta");
    plan
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Runtime::new().expect("runtime").block_on(f)
}

#[test]
fn delta_is_refused_without_its_base_and_completed_with_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let work = d.join("work");
    let (f1, f2, f3, f3b, f4) = (
        noise(50_000, 11),
        noise(60_000, 12),
        noise(70_000, 13),
        noise(70_000, 14),
        noise(10_000, 15),
    );
    let base_files: Vec<(&str, &[u8])> = vec![
        ("files/etcd/v3.5.16/amd64/etcd", &f1),
        ("files/runc/v1.1.12/amd64/runc", &f2),
        ("files/kubelet/v1.33.10/amd64/kubelet", &f3),
    ];
    let next_files: Vec<(&str, &[u8])> = vec![
        ("files/etcd/v3.5.16/amd64/etcd", &f1),
        ("files/runc/v1.1.12/amd64/runc", &f2),
        ("files/kubelet/v1.33.11/amd64/kubelet", &f3b),
        ("files/kubectl/v1.33.11/amd64/kubectl", &f4),
    ];
    let base = d.join("base.tar.zst");
    pack_files(&base, &base_files);
    // The full next bundle, for its content digest.
    let full = d.join("full.tar.zst");
    let full_digest = pack_files(&full, &next_files);

    // The site's inventory once the base is unpacked.
    unpack(&base, &work).expect("base unpacks");
    let site = scan(&work).expect("scan");
    let inv = inventory(&site, None, 1_700_000_000);
    assert_eq!(inv.bundles.len(), 1);
    let mut target_entries = entries_of(&next_files);
    target_entries.push(Entry {
        path: "cluster.yaml".into(),
        source: Source::Bytes(b"kind: Cluster\n".to_vec()),
        sha256: None,
        mode: FILE_MODE,
    });
    let dpath = d.join("delta.tar.zst");
    let plan = pack_delta(&dpath, &manifest_with(&next_files), &target_entries, &inv);
    assert_eq!(plan.target_content_digest, full_digest);
    let (delta_size, full_size) = (
        std::fs::metadata(&dpath).expect("d").len(),
        std::fs::metadata(&full).expect("f").len(),
    );
    assert!(delta_size * 2 < full_size, "{delta_size} vs {full_size}");

    // A site without the base: refused before unpacking, naming what is missing.
    let source = BundleSource::open(&dpath).expect("source");
    let read = read_delta(&source).expect("head").expect("a delta");
    assert_eq!(read, plan);
    let empty = scan(&d.join("elsewhere")).expect("empty site");
    let err = check_base(&dpath, &read, &empty, false).expect_err("no base");
    let msg = format!(
        "{err}: {}",
        std::error::Error::source(&err)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    for want in [
        "files/etcd/v3.5.16/amd64/etcd",
        "files/runc/v1.1.12/amd64/runc",
        "the site does not hold",
    ] {
        assert!(msg.contains(want), "{want} not in {msg}");
    }
    // The site with its base: the delta unpacks and completes into the full bundle's tree.
    check_base(&dpath, &read, &site, false).expect("base present");
    let unpacked = unpack(&dpath, &work).expect("delta unpacks");
    let done = block_on(complete(&dpath, &read, &unpacked, &site, None, &work)).expect("completes");
    assert_eq!(done.digest, full_digest);
    assert_eq!(
        sha256_hex(&std::fs::read(done.dir.join("SHA256SUMS")).expect("sums")),
        full_digest
    );
    assert_eq!(
        std::fs::read(done.dir.join("files/kubectl/v1.33.11/amd64/kubectl")).expect("f4"),
        f4
    );
    assert_eq!(done.manifest.files.len(), 4);
    // Again: the completed tree is reused.
    let again = block_on(complete(&dpath, &read, &unpacked, &site, None, &work)).expect("again");
    assert!(again.reused);
}

/// Packs an unpacked image tree (`seed::tree`) with its OCI layout files as a bundle.
fn pack_tree(
    out: &Path,
    t: &super::seed::Tree,
    extra: &[(&str, &[u8])],
) -> (BundleManifest, Vec<Entry>) {
    let mut entries = entries_of(extra);
    let blobs = t.dir.join("images/blobs/sha256");
    for e in std::fs::read_dir(&blobs).expect("blobs").flatten() {
        entries.push(Entry {
            path: format!("images/blobs/sha256/{}", e.file_name().to_string_lossy()),
            source: Source::File(e.path()),
            sha256: None,
            mode: FILE_MODE,
        });
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": t.manifest.images.iter().map(|i| serde_json::json!({
            "mediaType": i.media_type, "digest": i.digest, "size": i.size,
            "annotations": {"org.opencontainers.image.ref.name": i.reference},
        })).collect::<Vec<_>>(),
    });
    entries.push(Entry {
        path: "images/index.json".into(),
        source: Source::Bytes(serde_json::to_vec_pretty(&index).expect("json")),
        sha256: None,
        mode: FILE_MODE,
    });
    entries.push(Entry {
        path: "images/oci-layout".into(),
        source: Source::Bytes(b"{\"imageLayoutVersion\":\"1.0.0\"}".to_vec()),
        sha256: None,
        mode: FILE_MODE,
    });
    let mut manifest = t.manifest.clone();
    manifest.files = manifest_with(extra).files;
    pack(out, &manifest, entries.clone(), &PackOptions::default()).expect("pack tree");
    (manifest, entries)
}

#[test]
fn inventory_lists_registry_blobs_and_a_delta_fetches_them_from_the_registry() {
    let source_registry = Registry::start(RegistryOptions::default());
    let site_registry = Registry::start(RegistryOptions::default());
    let t = tree(&source_registry, 1);
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let work = d.join("work");
    let base = d.join("base.tar.zst");
    let f1 = noise(40_000, 21);
    let (manifest, entries) = pack_tree(&base, &t, &[("files/etcd/v3.5.16/amd64/etcd", &f1)]);
    let u = unpack(&base, &work).expect("unpack");
    let opts = options(&site_registry, None, None);
    block_on(kubexm_install::seed::seed(&u.dir, &u.manifest, &opts)).expect("seed");

    // From the unpacked bundle: every config and layer, found in its seeded repository.
    let site = scan(&work).expect("scan");
    let holdings = block_on(registry_holdings(&site, &opts, false)).expect("holdings");
    let expected: BTreeSet<String> = kubexm_install::seed::image_blobs(&u.dir, &u.manifest, &opts)
        .expect("blobs")
        .into_iter()
        .flat_map(|(_, b)| b.into_keys().map(|d| d.to_string()))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(
        holdings.blobs.keys().cloned().collect::<BTreeSet<_>>(),
        expected
    );
    // From the catalog alone (the site's bundles gone): the same blobs.
    std::fs::remove_dir_all(work.join(BUNDLES_DIR)).expect("rm");
    let bare = scan(&work).expect("scan");
    assert!(bare.by_sha.is_empty());
    let from_catalog = block_on(registry_holdings(&bare, &opts, true)).expect("catalog");
    assert_eq!(
        from_catalog.blobs.keys().cloned().collect::<BTreeSet<_>>(),
        expected
    );
    for at in from_catalog.blobs.values() {
        assert!(at.repository.starts_with("kubexm/"), "{}", at.repository);
    }

    // A delta against a site that only has the registry: its layers come from there.
    let inv = inventory(&bare, Some(from_catalog), 1_700_000_000);
    let target = d.join("next.tar.zst");
    let f2 = noise(20_000, 22);
    let (next_manifest, next_entries) = pack_tree(
        &target,
        &t,
        &[
            ("files/etcd/v3.5.16/amd64/etcd", &f1),
            ("files/kubectl/v1.33.11/amd64/kubectl", &f2),
        ],
    );
    let full_digest = digest_of(&target);
    let _ = (manifest, entries);
    let dpath = d.join("delta.tar.zst");
    let plan = pack_delta(&dpath, &next_manifest, &next_entries, &inv);
    assert!(plan
        .entries
        .iter()
        .any(|e| e.source == delta::EntrySource::Registry));
    let source = BundleSource::open(&dpath).expect("source");
    let read = read_delta(&source).expect("head").expect("delta");
    // Without the registry, the registry-held entries are missing.
    let err = check_base(&dpath, &read, &bare, false).expect_err("no registry");
    assert!(
        format!("{:?}", err).contains("in registry repository kubexm/"),
        "{err:?}"
    );
    let unpacked = unpack(&dpath, &work).expect("delta unpacks");
    let done = block_on(complete(
        &dpath,
        &read,
        &unpacked,
        &bare,
        Some(&opts),
        &work,
    ))
    .expect("completes from the registry");
    assert_eq!(done.digest, full_digest);
    let gets = site_registry.count_requests("GET", "/blobs/sha256:");
    assert!(gets >= expected.len(), "{gets} blob downloads");
}
