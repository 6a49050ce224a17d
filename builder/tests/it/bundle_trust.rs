//! Signed bundles, their SBOM and split volumes, against the real servers of `bundle_e2e`.
//! Independent implementations check what we write: Debian's `minisign` verifies our
//! signatures (and reads our secret key), `sha256sum` the parts, Python's `jsonschema` the
//! SBOM against the official CycloneDX 1.5 schema.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use super::bundle_e2e::{bundle, setup, text, Lab};

fn build_cli(lab: &Lab, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .args(args)
        .current_dir(lab.dir.path())
        .output()
        .expect("kubexm-build runs")
}

fn sh(cmd: &str, dir: &Path) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .output()
        .expect("sh runs")
}

fn keygen(lab: &Lab, prefix: &str) -> String {
    let out = build_cli(lab, &["keygen", "-o", prefix]);
    assert!(out.status.success(), "keygen: {}", text(&out.stderr));
    // "key <ID>: …"
    text(&out.stdout)
        .split_whitespace()
        .nth(1)
        .map(|s| s.trim_end_matches(':').to_owned())
        .expect("key id")
}

#[test]
fn signed_split_bundle_with_sbom_verifies_and_refuses_tampering() {
    let lab = setup();
    let d = lab.dir.path();
    let key_id = keygen(&lab, "k");
    let key = lab.path("k.key").display().to_string();
    let out = bundle(
        &lab,
        "s.tar.zst",
        "cache",
        &["--sign", &key, "--split", "1M"],
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "bundle failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("signed with key {key_id}")),
        "{stdout}"
    );
    assert!(
        !lab.path("s.tar.zst").exists(),
        "the parts replace the whole file"
    );

    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(lab.path("s.tar.zst.parts.json")).expect("index"))
            .expect("json");
    let parts = index["parts"].as_array().expect("parts").clone();
    assert!(parts.len() >= 3, "at least three parts: {}", parts.len());
    let total: u64 = parts
        .iter()
        .map(|p| p["size"].as_u64().expect("size"))
        .sum();
    eprintln!(
        "measured: bundle {total} bytes in {} parts of at most 1 MiB",
        parts.len()
    );
    // sha256sum agrees with the index, part by part.
    for p in &parts {
        let name = p["name"].as_str().expect("name");
        let sum = sh(&format!("sha256sum {name}"), d);
        assert!(
            text(&sum.stdout).starts_with(p["sha256"].as_str().expect("sum")),
            "{name}"
        );
    }

    // Our verify: index signature, every part, the content signature, every entry.
    let v = build_cli(
        &lab,
        &["verify", "s.tar.zst.parts.json", "--trusted-key", "k.pub"],
    );
    let vout = text(&v.stdout);
    assert!(v.status.success(), "verify: {}\n{vout}", text(&v.stderr));
    assert!(
        vout.contains(&format!("signed by trusted key {key_id}")),
        "{vout}"
    );
    assert!(vout.contains(": OK ("), "{vout}");

    // minisign itself: the content digest, computed with standard tools, is what was signed.
    let digest = text(
        &sh(
            "cat s.tar.zst.part* | zstd -dc | tar -xO SHA256SUMS | sha256sum | cut -d' ' -f1",
            d,
        )
        .stdout,
    )
    .trim()
    .to_owned();
    assert_eq!(digest.len(), 64, "{digest}");
    std::fs::write(
        lab.path("statement"),
        format!("kubexm-bundle sha256:{digest}\n"),
    )
    .expect("write");
    let m = sh("minisign -V -p k.pub -m statement -x s.tar.zst.minisig", d);
    assert!(
        m.status.success(),
        "minisign: {}{}",
        text(&m.stdout),
        text(&m.stderr)
    );
    assert!(
        text(&m.stdout).contains(&format!(
            "kubexm-bundle sha256:{digest} cluster:lab kubernetes:v1.33.11"
        )),
        "the trusted comment is signed too: {}",
        text(&m.stdout)
    );
    let m = sh("minisign -V -p k.pub -m s.tar.zst.parts.json", d);
    assert!(
        m.status.success(),
        "minisign index: {}{}",
        text(&m.stdout),
        text(&m.stderr)
    );
    // …and refuses a statement for another digest.
    std::fs::write(
        lab.path("statement2"),
        format!("kubexm-bundle sha256:{}\n", "0".repeat(64)),
    )
    .expect("write");
    let m = sh("minisign -V -p k.pub -m statement2 -x s.tar.zst.minisig", d);
    assert!(!m.status.success(), "minisign accepted another digest");

    check_sbom(&lab, &digest);

    // An unknown key: refused, naming the signer.
    keygen(&lab, "other");
    let v = build_cli(
        &lab,
        &[
            "verify",
            "s.tar.zst.parts.json",
            "--trusted-key",
            "other.pub",
        ],
    );
    assert_eq!(v.status.code(), Some(4));
    let err = text(&v.stderr);
    assert!(
        err.contains("not a trusted key") && err.contains(&key_id),
        "{err}"
    );

    // A tampered index (one part's sum changed): its signature no longer matches.
    let index_text = std::fs::read_to_string(lab.path("s.tar.zst.parts.json")).expect("index");
    let first = parts[0]["sha256"].as_str().expect("sum");
    std::fs::write(
        lab.path("s.tar.zst.parts.json"),
        index_text.replace(first, &"0".repeat(64)),
    )
    .expect("write");
    let v = build_cli(
        &lab,
        &["verify", "s.tar.zst.parts.json", "--trusted-key", "k.pub"],
    );
    assert_eq!(v.status.code(), Some(4));
    assert!(
        text(&v.stderr).contains("does not match"),
        "{}",
        text(&v.stderr)
    );
    std::fs::write(lab.path("s.tar.zst.parts.json"), &index_text).expect("restore");

    // One damaged part: named, and only that one.
    let p2 = lab.path("s.tar.zst.part002");
    let mut bytes = std::fs::read(&p2).expect("part 2");
    bytes[4096] ^= 0x5a;
    std::fs::write(&p2, &bytes).expect("write");
    let v = build_cli(&lab, &["verify", "s.tar.zst.parts.json"]);
    assert_eq!(v.status.code(), Some(4));
    let err = text(&v.stderr);
    assert!(
        err.contains(&format!("1 of the {} parts", parts.len()))
            && err.contains(&format!("part 2 of {}", parts.len()))
            && err.contains("s.tar.zst.part002")
            && !err.contains("part001")
            && !err.contains("part003"),
        "{err}"
    );
}

/// The SBOM is valid CycloneDX 1.5 (official schema) and describes every entry of the bundle.
fn check_sbom(lab: &Lab, digest: &str) {
    let d = lab.dir.path();
    let inside = sh("cat s.tar.zst.part* | zstd -dc | tar -xO sbom.cdx.json", d).stdout;
    let beside = std::fs::read(lab.path("s.tar.zst.cdx.json")).expect("sbom beside");
    assert!(
        inside == beside,
        "the SBOM beside the bundle is the one inside"
    );
    let schema_check = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cyclonedx/validate.py"))
        .arg(lab.path("s.tar.zst.cdx.json"))
        .output()
        .expect("python3 runs");
    assert!(
        schema_check.status.success(),
        "CycloneDX 1.5 schema: {}{}",
        text(&schema_check.stdout),
        text(&schema_check.stderr)
    );
    let bom: serde_json::Value = serde_json::from_slice(&beside).expect("json");
    assert_eq!(bom["specVersion"], "1.5");
    let sums_text = text(&sh("cat s.tar.zst.part* | zstd -dc | tar -xO SHA256SUMS", d).stdout);
    assert_eq!(kubexm_testkit::sha256_hex(sums_text.as_bytes()), digest);
    let sums: BTreeMap<&str, &str> = sums_text
        .lines()
        .filter_map(|l| l.split_once("  "))
        .map(|(h, p)| (p, h))
        .collect();
    let components = bom["components"].as_array().expect("components");
    let by_path: BTreeMap<&str, &serde_json::Value> = components
        .iter()
        .filter_map(|c| {
            c["properties"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == "kubexm:path")
                .and_then(|p| p["value"].as_str())
                .map(|path| (path, c))
        })
        .collect();
    for (path, sum) in &sums {
        if *path == "sbom.cdx.json" || *path == "bundle.json" {
            // They name each other's sizes and sums.
            continue;
        }
        let c = by_path
            .get(path)
            .unwrap_or_else(|| panic!("{path} is not in the SBOM"));
        assert_eq!(c["hashes"][0]["content"], *sum, "{path}");
    }
    let manifest: serde_json::Value = serde_json::from_slice(
        &sh("cat s.tar.zst.part* | zstd -dc | tar -xO bundle.json", d).stdout,
    )
    .expect("bundle.json");
    for f in manifest["files"].as_array().expect("files") {
        let c = by_path[f["path"].as_str().expect("path")];
        assert_eq!(c["version"], f["version"]);
        assert_eq!(c["externalReferences"][0]["url"], f["url"]);
        assert!(c["purl"]
            .as_str()
            .expect("purl")
            .starts_with("pkg:generic/"));
    }
    for img in manifest["images"].as_array().expect("images") {
        let r = format!("image:{}", img["reference"].as_str().expect("ref"));
        let c = components
            .iter()
            .find(|c| c["bom-ref"] == r.as_str())
            .unwrap_or_else(|| panic!("{r} is not in the SBOM"));
        assert_eq!(c["type"], "container");
        assert_eq!(
            format!(
                "sha256:{}",
                c["hashes"][0]["content"].as_str().expect("hash")
            ),
            img["digest"].as_str().expect("digest")
        );
        let deps = bom["dependencies"]
            .as_array()
            .expect("deps")
            .iter()
            .find(|x| x["ref"] == r.as_str())
            .expect("image dependencies");
        assert!(
            !deps["dependsOn"].as_array().expect("list").is_empty(),
            "{r}: its blobs"
        );
    }
}

#[test]
fn a_signature_does_not_carry_over_to_another_bundle() {
    let lab = setup();
    keygen(&lab, "k");
    let key_arg = lab.path("k.key").display().to_string();
    let out = bundle(&lab, "a.tar.zst", "cache", &["--sign", &key_arg]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Another bundle (another cluster name → another content digest; a comment would not do:
    // the inline registry password makes the builder re-render cluster.yaml without comments),
    // with a's signature.
    let cluster = lab.path("cluster.yaml");
    let before = std::fs::read_to_string(&cluster).expect("cluster");
    let changed = before.replace("metadata: {name: lab}", "metadata: {name: lab2}");
    assert_ne!(before, changed, "the cluster name is in cluster.yaml");
    std::fs::write(&cluster, changed).expect("write");
    let out = bundle(&lab, "b.tar.zst", "cache", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::copy(lab.path("a.tar.zst.minisig"), lab.path("b.tar.zst.minisig")).expect("copy");
    let v = build_cli(&lab, &["verify", "b.tar.zst", "--trusted-key", "k.pub"]);
    assert_eq!(v.status.code(), Some(4));
    assert!(
        text(&v.stderr).contains("does not match"),
        "{}",
        text(&v.stderr)
    );
    let v = build_cli(&lab, &["verify", "a.tar.zst", "--trusted-key", "k.pub"]);
    assert!(v.status.success(), "{}", text(&v.stderr));
    // A world-readable secret key is refused before anything is built.
    let key = lab.path("k.key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let out = bundle(&lab, "c.tar.zst", "cache", &["--sign", &key_arg]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("chmod 600"),
        "{}",
        text(&out.stderr)
    );
}
