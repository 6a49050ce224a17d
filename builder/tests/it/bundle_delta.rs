//! Delta bundles on a patch upgrade (Kubernetes v1.33.10 → v1.33.11), against the real servers
//! of `bundle_e2e`. Stand-in files (64 KiB of random bytes each) play the binaries and busybox
//! images the images, so the sizes measured here are those of the stand-ins: they show which
//! entries a delta leaves out, not what a real Kubernetes patch release weighs.
//!
//! The site holds the v1.33.10 bundle, unpacked; its inventory lists the sha256 of every file.
//! The delta for v1.33.11 carries only what changed, and the tree rebuilt from it and the site
//! is byte for byte the full v1.33.11 bundle's (same content digest).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kubexm_bundles::delta::{self, DeltaManifest, SiteInventory};

use super::bundle_e2e::{bundle, extract, setup, stand_in, text, Lab, FILES};

/// The Kubernetes binaries of the cluster (kubernetes.type kubexm): the files a patch changes.
const KUBE: &[&str] = &[
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kube-proxy",
    "kubelet",
];

/// Stand-ins for the previous patch release's binaries, on the mirror and pinned.
fn add_previous_patch(lab: &Lab) {
    let mut pins = String::from("\n# v1.33.10 stand-ins\n");
    for (name, version, arch, path) in FILES {
        if *version != "v1.33.11" || !KUBE.contains(name) {
            continue;
        }
        let old = path.replace("v1.33.11", "v1.33.10");
        let content = stand_in(&old);
        let file = lab.path("mirror").join(&old);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, &content).expect("write");
        pins.push_str(&format!(
            "  - name: {name}\n    versions:\n      \"v1.33.10\": {{{arch}: \"{}\"}}\n",
            kubexm_testkit::sha256_hex(&content)
        ));
    }
    let catalog = lab.path("catalog.yaml");
    let text = std::fs::read_to_string(&catalog).expect("catalog");
    // The pins go into the `components:` list, before `addonImages:`.
    let (components, rest) = text.split_once("addonImages:").expect("addonImages");
    std::fs::write(
        &catalog,
        format!(
            "{components}{}addonImages:{rest}",
            pins.trim_start_matches('\n')
        ),
    )
    .expect("write catalog");
}

fn set_version(lab: &Lab, version: &str) {
    let cluster = lab.path("cluster.yaml");
    let text = std::fs::read_to_string(&cluster).expect("cluster");
    let text = text
        .replace("version: v1.33.10}", &format!("version: {version}}}"))
        .replace("version: v1.33.11}", &format!("version: {version}}}"));
    std::fs::write(&cluster, text).expect("write");
}

fn size(p: &Path) -> u64 {
    std::fs::metadata(p).expect("stat").len()
}

/// sha256 of the bundle's `SHA256SUMS`, read with standard tools.
pub(crate) fn content_digest(bundle: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "zstd -dc '{}' | tar -xO SHA256SUMS | sha256sum | cut -d' ' -f1",
            bundle.display()
        ))
        .output()
        .expect("sh");
    text(&out.stdout).trim().to_owned()
}

/// What `kubexm-install inventory` reports for a site holding the unpacked `tree`.
pub(crate) fn inventory_of(
    tree: &Path,
    digest: &str,
) -> (SiteInventory, BTreeMap<String, PathBuf>) {
    let sums = std::fs::read_to_string(tree.join("SHA256SUMS")).expect("sums");
    let mut inv = SiteInventory {
        kubexm_inventory: delta::INVENTORY_VERSION,
        created: 1_700_000_000,
        bundles: vec![digest.to_owned()],
        ..SiteInventory::default()
    };
    let mut paths = BTreeMap::new();
    for line in sums.lines() {
        let (sum, path) = line.split_once("  ").expect("sums line");
        inv.files.insert(sum.to_owned(), size(&tree.join(path)));
        paths.insert(sum.to_owned(), tree.join(path));
    }
    (inv, paths)
}

#[test]
fn delta_for_a_patch_upgrade_carries_only_what_changed_and_rebuilds_the_full_tree() {
    let lab = setup();
    add_previous_patch(&lab);

    // The site: the v1.33.10 bundle, unpacked.
    set_version(&lab, "v1.33.10");
    let out = bundle(&lab, "base.tar.zst", "cache", &[]);
    assert!(out.status.success(), "base bundle: {}", text(&out.stderr));
    let base_digest = content_digest(&lab.path("base.tar.zst"));
    let site = lab.path("site").join(&base_digest);
    extract(&lab.path("base.tar.zst"), &site);
    let (inventory, site_files) = inventory_of(&site, &base_digest);
    std::fs::write(lab.path("site-inventory.json"), inventory.to_json()).expect("write");

    // The next patch: full, and as a delta against the site.
    set_version(&lab, "v1.33.11");
    let out = bundle(&lab, "full.tar.zst", "cache", &[]);
    assert!(out.status.success(), "full bundle: {}", text(&out.stderr));
    let have = lab.path("site-inventory.json").display().to_string();
    let out = bundle(&lab, "delta.tar.zst", "cache", &["--have", &have]);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "delta bundle: {}\n{stdout}",
        text(&out.stderr)
    );
    let (full, partial) = (
        size(&lab.path("full.tar.zst")),
        size(&lab.path("delta.tar.zst")),
    );
    eprintln!(
        "measured (stand-ins): v1.33.10 → v1.33.11 full bundle {full} bytes, delta {partial} bytes ({:.1}% of full, {} bytes saved)",
        partial as f64 * 100.0 / full as f64,
        full - partial
    );
    assert!(
        partial * 2 < full,
        "the delta carries less than half: {partial} of {full}"
    );
    assert!(stdout.contains("delta bundle: carries"), "{stdout}");

    // The delta is an ordinary bundle: verify passes.
    let v = Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .arg("verify")
        .arg(lab.path("delta.tar.zst"))
        .output()
        .expect("verify");
    assert!(v.status.success(), "{}", text(&v.stderr));

    // What it carries: the changed kube binaries, the metadata — and none of what the site has.
    let x = lab.path("delta-x");
    extract(&lab.path("delta.tar.zst"), &x);
    let plan = DeltaManifest::parse(&std::fs::read(x.join(delta::DELTA_PATH)).expect("delta.json"))
        .expect("delta.json parses");
    let carried: Vec<&str> = plan
        .entries
        .iter()
        .filter(|e| e.source == delta::EntrySource::Delta)
        .map(|e| e.path.as_str())
        .collect();
    for path in &carried {
        let kube = KUBE
            .iter()
            .any(|k| path.starts_with(&format!("files/{k}/v1.33.11/")));
        let meta = [
            "bundle.json",
            "cluster.yaml",
            "catalog.yaml",
            "sbom.cdx.json",
        ]
        .contains(path);
        assert!(
            kube || meta,
            "`{path}` did not change but the delta carries it"
        );
    }
    assert_eq!(
        carried.iter().filter(|p| p.starts_with("files/")).count(),
        8,
        "the 8 kube binaries of v1.33.11: {carried:?}"
    );
    assert!(
        !carried.iter().any(|p| p.starts_with("images/blobs/")),
        "no image changed: {carried:?}"
    );

    // Rebuilt from the delta and the site: the full bundle's tree, byte for byte.
    let rebuilt = lab.path("rebuilt");
    let locate = |e: &delta::DeltaEntry| site_files.get(&e.sha256).cloned();
    delta::rebuild(&plan, &x, &rebuilt, &locate).expect("rebuilds");
    let full_digest = content_digest(&lab.path("full.tar.zst"));
    assert_eq!(plan.target_content_digest, full_digest);
    let sums = std::fs::read(rebuilt.join("SHA256SUMS")).expect("sums");
    assert_eq!(kubexm_testkit::sha256_hex(&sums), full_digest);
    let fx = lab.path("full-x");
    extract(&lab.path("full.tar.zst"), &fx);
    let diff = Command::new("diff")
        .arg("-r")
        .arg(&fx)
        .arg(&rebuilt)
        .output()
        .expect("diff");
    assert!(
        diff.status.success(),
        "rebuilt tree differs: {}",
        text(&diff.stdout)
    );

    // A site without the base: every missing entry named, nothing written.
    let err = delta::rebuild(&plan, &x, &lab.path("nothing"), &|_| None).expect_err("no base");
    let msg = err.to_string();
    assert!(msg.contains("the site does not hold"), "{msg}");
    assert!(msg.contains("files/etcd/"), "{msg}");
    assert!(!lab.path("nothing").exists());
}
