//! `kubexm-install` as an operator runs it on bundles that are signed, split or deltas:
//! `--trusted-key` refuses before unpacking, a split bundle with a damaged part is refused naming
//! it, a delta without its base is refused naming what is missing, and `inventory` lists what
//! the site holds.

use std::path::Path;
use std::process::{Command, Output};

use kubexm_bundles::pack::{pack, Entry, PackOptions, Source, FILE_MODE};
use kubexm_bundles::sign::{bundle_statement, SecretKey, SIGNATURE_SUFFIX};
use kubexm_bundles::split;
use kubexm_install::intake::source::beside;
use kubexm_install::unpack::BUNDLES_DIR;

use super::intake::{manifest_with, noise, pack_delta};

const BIN: &str = env!("CARGO_BIN_EXE_kubexm-install");

fn install(work: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--work-dir")
        .arg(work)
        .args(args)
        .env_remove("KUBEXM_TRUSTED_KEYS")
        .env_remove("KUBEXM_REQUIRE_SIGNATURE")
        .output()
        .expect("kubexm-install runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn trees(work: &Path) -> usize {
    std::fs::read_dir(work.join(BUNDLES_DIR))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().len() == 64)
                .count()
        })
        .unwrap_or(0)
}

fn pack_simple(out: &Path, files: &[(&str, &[u8])]) -> String {
    let mut entries: Vec<Entry> = files
        .iter()
        .map(|(p, c)| Entry {
            path: (*p).into(),
            source: Source::Bytes(c.to_vec()),
            sha256: None,
            mode: FILE_MODE,
        })
        .collect();
    entries.push(Entry {
        path: "cluster.yaml".into(),
        source: Source::Bytes(b"kind: Cluster\n".to_vec()),
        sha256: None,
        mode: FILE_MODE,
    });
    pack(out, &manifest_with(files), entries, &PackOptions::default()).expect("pack");
    kubexm_bundles::head::read_head(std::fs::File::open(out).expect("open"), None)
        .expect("head")
        .content_digest
}

fn sign(key: &SecretKey, bundle: &Path, digest: &str) {
    let sig = key
        .sign(
            &bundle_statement(digest),
            &format!("kubexm-bundle sha256:{digest}"),
            "test",
        )
        .expect("sign");
    std::fs::write(beside(bundle, SIGNATURE_SUFFIX), sig.to_file()).expect("write");
}

#[test]
fn trusted_keys_refuse_unsigned_and_foreign_bundles_before_unpacking() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let key = SecretKey::generate().expect("key");
    std::fs::write(d.join("k.pub"), key.public().to_file()).expect("pub");
    let payload = noise(200_000, 31);
    let good = d.join("good.tar.zst");
    let digest = pack_simple(&good, &[("files/etcd/v3.5.16/amd64/etcd", &payload)]);
    sign(&key, &good, &digest);
    let k = d.join("k.pub").display().to_string();
    let work = d.join("work");

    let out = install(
        &work,
        &[
            "--trusted-key",
            &k,
            "unpack",
            "--bundle",
            &good.display().to_string(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("signed by trusted key {}", key.public().id())),
        "{}",
        text(&out.stderr)
    );

    // Unsigned: refused, nothing unpacked.
    let other = d.join("other.tar.zst");
    pack_simple(
        &other,
        &[("files/etcd/v3.5.16/amd64/etcd", &noise(200_000, 32))],
    );
    let work2 = d.join("work2");
    let out = install(
        &work2,
        &[
            "--trusted-key",
            &k,
            "unpack",
            "--bundle",
            &other.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("is not signed"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(trees(&work2), 0, "refused before unpacking");

    // Signed by another key: refused, naming it.
    let stranger = SecretKey::generate().expect("key");
    let other_digest =
        kubexm_bundles::head::read_head(std::fs::File::open(&other).expect("o"), None)
            .expect("head")
            .content_digest;
    sign(&stranger, &other, &other_digest);
    let out = install(
        &work2,
        &[
            "--trusted-key",
            &k,
            "unpack",
            "--bundle",
            &other.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(4));
    let err = text(&out.stderr);
    assert!(
        err.contains("not a trusted key") && err.contains(&stranger.public().id().to_string()),
        "{err}"
    );
    assert_eq!(trees(&work2), 0);

    // The good signature on other content: refused.
    std::fs::copy(
        beside(&good, SIGNATURE_SUFFIX),
        beside(&other, SIGNATURE_SUFFIX),
    )
    .expect("copy");
    let out = install(
        &work2,
        &[
            "--trusted-key",
            &k,
            "unpack",
            "--bundle",
            &other.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("does not match"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(trees(&work2), 0);

    // No key configured: unpacked with a warning.
    let out = install(
        &work2,
        &["unpack", "--bundle", &other.display().to_string()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("warning: no trusted key is configured"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("--require-signature"),
        "the warning names the way to refuse: {}",
        text(&out.stderr)
    );

    // --require-signature, or the site's setting: no key is a refusal (exit 4), nothing read.
    let work3 = work2.with_file_name("work3");
    let bundle = other.display().to_string();
    let flag = install(
        &work3,
        &["--require-signature", "unpack", "--bundle", &bundle],
    );
    let setting = Command::new(BIN)
        .arg("--work-dir")
        .arg(&work3)
        .args(["unpack", "--bundle", &bundle])
        .env_remove("KUBEXM_TRUSTED_KEYS")
        .env("KUBEXM_REQUIRE_SIGNATURE", "1")
        .output()
        .expect("kubexm-install runs");
    for out in [flag, setting] {
        assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.contains("a signature is required") && err.contains("--trusted-key"),
            "{err}"
        );
        assert!(!err.contains("warning: no trusted key"), "{err}");
        assert_eq!(trees(&work3), 0);
    }
}

#[test]
fn a_split_bundle_is_unpacked_from_its_parts_and_a_damaged_part_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let bundle = d.join("s.tar.zst");
    let big = noise(2 * (1 << 20) + 300_000, 41);
    let digest = pack_simple(&bundle, &[("files/kubelet/v1.33.11/amd64/kubelet", &big)]);
    let index = split::split(&bundle, split::MIN_PART_SIZE, &digest).expect("split");
    assert!(index.parts.len() >= 3, "{}", index.parts.len());
    let idx = split::index_path(&bundle).display().to_string();
    let work = d.join("work");
    let out = install(&work, &["unpack", "--bundle", &idx]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(work
        .join(BUNDLES_DIR)
        .join(&digest)
        .join("files/kubelet/v1.33.11/amd64/kubelet")
        .is_file());

    let p2 = d.join("s.tar.zst.part002");
    let mut bytes = std::fs::read(&p2).expect("part");
    bytes[12_345] ^= 0x01;
    std::fs::write(&p2, &bytes).expect("write");
    let work2 = d.join("work2");
    let out = install(&work2, &["unpack", "--bundle", &idx]);
    assert_eq!(out.status.code(), Some(4));
    let err = text(&out.stderr);
    let n = index.parts.len();
    assert!(
        err.contains(&format!("1 of the {n} parts"))
            && err.contains(&format!("part 2 of {n}"))
            && err.contains("s.tar.zst.part002")
            && !err.contains("part003"),
        "{err}"
    );
    assert_eq!(trees(&work2), 0);
}

#[test]
fn a_delta_without_its_base_is_refused_and_inventory_lists_the_site() {
    let tmp = tempfile::tempdir().expect("tmp");
    let d = tmp.path();
    let (a, b, c) = (noise(80_000, 51), noise(80_000, 52), noise(80_000, 53));
    let base = d.join("base.tar.zst");
    let base_files: Vec<(&str, &[u8])> = vec![
        ("files/etcd/v3.5.16/amd64/etcd", &a),
        ("files/kubelet/v1.33.10/amd64/kubelet", &b),
    ];
    pack_simple(&base, &base_files);
    let work = d.join("work");
    let out = install(&work, &["unpack", "--bundle", &base.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // The site's inventory, by the CLI.
    let inv_path = d.join("site-inventory.json");
    let out = install(&work, &["inventory", "-o", &inv_path.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("1 unpacked bundle(s)"),
        "{}",
        text(&out.stdout)
    );
    let (inv, _) = kubexm_bundles::delta::SiteInventory::load(&inv_path).expect("inventory loads");
    assert!(inv.files.contains_key(&kubexm_testkit::sha256_hex(&a)));

    // The next bundle as a delta against it.
    let next: Vec<(&str, &[u8])> = vec![
        ("files/etcd/v3.5.16/amd64/etcd", &a),
        ("files/kubelet/v1.33.11/amd64/kubelet", &c),
    ];
    let full = d.join("full.tar.zst");
    let full_digest = pack_simple(&full, &next);
    let mut entries: Vec<Entry> = next
        .iter()
        .map(|(p, content)| Entry {
            path: (*p).into(),
            source: Source::Bytes(content.to_vec()),
            sha256: None,
            mode: FILE_MODE,
        })
        .collect();
    entries.push(Entry {
        path: "cluster.yaml".into(),
        source: Source::Bytes(b"kind: Cluster\n".to_vec()),
        sha256: None,
        mode: FILE_MODE,
    });
    let delta = d.join("delta.tar.zst");
    pack_delta(&delta, &manifest_with(&next), &entries, &inv);

    // Another site, without the base: refused, naming what is missing, nothing unpacked.
    let empty = d.join("empty-site");
    let out = install(
        &empty,
        &["unpack", "--bundle", &delta.display().to_string()],
    );
    assert_eq!(out.status.code(), Some(4));
    let err = text(&out.stderr);
    assert!(
        err.contains("the site does not hold") && err.contains("files/etcd/v3.5.16/amd64/etcd"),
        "{err}"
    );
    assert_eq!(trees(&empty), 0);

    // This site: completed into the full bundle's tree.
    let out = install(&work, &["unpack", "--bundle", &delta.display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("completed from the site"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains(&full_digest),
        "{}",
        text(&out.stdout)
    );
    let sums =
        std::fs::read(work.join(BUNDLES_DIR).join(&full_digest).join("SHA256SUMS")).expect("sums");
    assert_eq!(kubexm_testkit::sha256_hex(&sums), full_digest);
}
