//! `kubexm-build bundle --upgrade-from`: one bundle for an upgrade path, against the same real
//! servers as `bundle_e2e` (files from the testkit's mirror, images from Debian's
//! `docker-registry`, `skopeo` reading the layout). The cluster is at v1.33.11; from v1.31.x the
//! path needs the catalog's newest v1.32 too. Its files are stand-ins pinned like the others;
//! its images that v1.33.11 does not use are small real busybox images.

use std::collections::BTreeSet;
use std::process::Command;

use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::version::KubeVersion;
use kubexm_testkit::{images, skopeo_inspect_digest};

use crate::bundle_e2e::{bundle, extract, setup, stand_in, text, verify_cli, Lab, FILES};

/// The catalog's newest v1.32 patch: what the path takes between v1.31 and v1.33.
pub(crate) fn newest_v132() -> KubeVersion {
    let catalog = Catalog::builtin().expect("built-in catalog");
    *catalog
        .kubernetes
        .keys()
        .filter(|v| v.major == 1 && v.minor == 32)
        .max()
        .expect("the catalog knows v1.32")
}

/// Serves what cluster.yaml at `version` needs beyond the lab's v1.33.11: each missing file a
/// stand-in on the mirror, pinned in the lab's catalog override, each missing image a busybox
/// index on the open registry. Returns the files' bundle paths and the images' references.
pub(crate) fn serve_version(lab: &Lab, version: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let d = lab.dir.path();
    let cluster = std::fs::read_to_string(d.join("cluster.yaml")).expect("cluster.yaml");
    let at = cluster.replace("version: v1.33.11", &format!("version: {version}"));
    assert_ne!(at, cluster, "the lab's cluster.yaml names v1.33.11");
    std::fs::write(d.join("cluster-path.yaml"), at).expect("write");
    // The server components the lab's catalog override pins for v1.33.11 alone: pinned for
    // `version` the same way first (then resolved like everything else).
    let mut pins = std::fs::read_to_string(d.join("catalog.yaml")).expect("catalog");
    let components = pins.find("addonImages:").expect("addonImages");
    let mut added = String::new();
    let mut pinned = BTreeSet::new();
    for (name, arch, _, path) in FILES
        .iter()
        .filter(|f| f.1 == "v1.33.11" && f.0.starts_with("kube-"))
        .map(|f| (f.0, f.2, f.1, f.3))
    {
        let rel = path.replace("v1.33.11", version);
        pin_stand_in(lab, &rel, name, version, arch, &mut added);
        pinned.insert((name.to_owned(), version.to_owned(), arch.to_owned()));
    }
    pins.insert_str(components, &added);
    std::fs::write(d.join("catalog.yaml"), pins).expect("write catalog");
    let out = Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .args(["resolve", "-o", "json", "-f"])
        .arg(d.join("cluster-path.yaml"))
        .arg("--zone-file")
        .arg(d.join("zone.yaml"))
        .arg("--catalog")
        .arg(d.join("catalog.yaml"))
        .env_remove("KMZONE")
        .output()
        .expect("resolve runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let have: BTreeSet<(&str, &str, &str)> = FILES.iter().map(|f| (f.0, f.1, f.2)).collect();
    let mut pins = std::fs::read_to_string(d.join("catalog.yaml")).expect("catalog");
    let components = pins.find("addonImages:").expect("addonImages");
    let mut added = String::new();
    let mut files = BTreeSet::new();
    for b in json["binaries"].as_array().expect("binaries") {
        let s = |k: &str| b[k].as_str().expect("string").to_owned();
        let (name, v, arch) = (s("name"), s("version"), s("arch"));
        files.insert(s("path"));
        if have.contains(&(name.as_str(), v.as_str(), arch.as_str()))
            || pinned.contains(&(name.clone(), v.clone(), arch.clone()))
        {
            continue;
        }
        let url = s("url");
        let rel = url
            .strip_prefix(&format!("{}/", lab.mirror.base_url()))
            .unwrap_or_else(|| panic!("{url} is not on the mirror"));
        pin_stand_in(lab, rel, &name, &v, &arch, &mut added);
    }
    pins.insert_str(components, &added);
    std::fs::write(d.join("catalog.yaml"), pins).expect("write catalog");
    let work = d.join("images-path");
    std::fs::create_dir_all(&work).expect("mkdir");
    let amd = images::busybox_layout(&work, "path", "amd64");
    let arm = images::busybox_layout(&work, "path-arm", "arm64");
    let mut refs = BTreeSet::new();
    for i in json["images"].as_array().expect("images") {
        let reference = i["reference"].as_str().expect("reference").to_owned();
        let source = i["source"].as_str().expect("source");
        let open = format!("{}/", lab.open.host());
        if let Some(repo_tag) = source.strip_prefix(&open) {
            if skopeo_inspect_digest(&format!("docker://{source}"), false, None).is_err() {
                let _ = images::push_index(
                    &lab.open,
                    repo_tag,
                    &[(&amd, "amd64"), (&arm, "arm64")],
                    None,
                );
            }
        }
        refs.insert(reference);
    }
    (files, refs)
}

/// A stand-in file at `rel` on the lab's mirror, its pin appended to `pins`.
fn pin_stand_in(lab: &Lab, rel: &str, name: &str, version: &str, arch: &str, pins: &mut String) {
    let content = stand_in(rel);
    let file = lab.dir.path().join("mirror").join(rel);
    std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
    std::fs::write(&file, &content).expect("write stand-in");
    pins.push_str(&format!(
        "  - name: {name}\n    versions:\n      \"{version}\": {{{arch}: \"{}\"}}\n",
        kubexm_testkit::sha256_hex(&content)
    ));
}

#[test]
fn one_bundle_holds_every_minor_of_the_path_and_shares_what_they_have_in_common() {
    let lab = setup();
    let v132 = newest_v132().to_string();
    let (files_132, images_132) = serve_version(&lab, &v132);

    // From v1.31.0: v1.32's newest patch, then cluster.yaml's v1.33.11.
    let out = bundle(
        &lab,
        "path.tar.zst",
        "cache",
        &["--upgrade-from", "v1.31.0"],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("upgrade path: v1.31.0 -> {v132} -> v1.33.11")),
        "{stdout}"
    );
    let b = lab.path("path.tar.zst");
    let v = verify_cli(&b);
    assert!(v.status.success(), "{}", text(&v.stderr));
    assert!(
        text(&v.stdout).contains(&format!("Kubernetes v1.33.11 + {v132},")),
        "{}",
        text(&v.stdout)
    );
    let x = lab.path("x");
    extract(&b, &x);
    let manifest: kubexm_bundles::manifest::BundleManifest =
        serde_json::from_slice(&std::fs::read(x.join("bundle.json")).expect("bundle.json"))
            .expect("manifest");
    assert_eq!(manifest.kubernetes_version, "v1.33.11");
    assert_eq!(
        manifest.upgrade_path.len(),
        1,
        "{:?}",
        manifest.upgrade_path
    );
    let step = &manifest.upgrade_path[0];
    assert_eq!(step.kubernetes_version, v132);
    assert_eq!(step.cluster, format!("upgrade/{v132}/cluster.yaml"));
    // Its cluster.yaml: the same cluster at the other version, which the loader accepts.
    let catalog = Catalog::builtin_with_override(Some(&lab.path("catalog.yaml"))).expect("cat");
    let step_cluster =
        kubexm_manifests::load::load_cluster(&x.join(&step.cluster), &catalog).expect("valid");
    assert_eq!(step_cluster.version.to_string(), v132);
    let main = kubexm_manifests::load::load_cluster(&x.join("cluster.yaml"), &catalog).expect("ok");
    assert_eq!(
        main.file.spec.hosts.len(),
        step_cluster.file.spec.hosts.len()
    );
    assert_eq!(main.version.to_string(), "v1.33.11");

    // Every file of both versions, each path once (the shared ones: etcd, containerd, runc…).
    let bundled: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    let unique: BTreeSet<&str> = bundled.iter().copied().collect();
    assert_eq!(bundled.len(), unique.len(), "a file bundled twice");
    for f in &files_132 {
        assert!(unique.contains(f.as_str()), "{f} missing");
        assert!(x.join(f).is_file(), "{f} not in the tree");
    }
    for (name, version, arch, _) in FILES.iter().filter(|f| !f.0.ends_with("-chart")) {
        assert!(
            manifest
                .files
                .iter()
                .any(|f| f.name == *name && f.version == *version && f.arch == *arch),
            "{name} {version} {arch} of v1.33.11 missing"
        );
    }
    let shared = files_132
        .iter()
        .filter(|f| {
            !f.contains(&format!("/{v132}/")) && manifest.files.iter().any(|m| &m.path == *f)
        })
        .count();
    assert!(shared > 0, "no file shared between the versions");
    let kubelets: BTreeSet<&str> = manifest
        .files
        .iter()
        .filter(|f| f.name == "kubelet" && f.arch == "amd64")
        .map(|f| f.version.as_str())
        .collect();
    assert_eq!(kubelets, BTreeSet::from([v132.as_str(), "v1.33.11"]));

    // Every image of both versions, readable by skopeo from the layout; each blob stored once.
    for r in &images_132 {
        assert!(
            manifest.images.iter().any(|i| &i.reference == r),
            "{r} missing"
        );
        let oci = format!("oci:{}:{r}", x.join("images").display());
        skopeo_inspect_digest(&oci, false, None)
            .unwrap_or_else(|e| panic!("skopeo cannot read {oci}: {e}"));
    }
    let sums = std::fs::read_to_string(x.join("SHA256SUMS")).expect("sums");
    let blobs: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_once("  ").map(|x| x.1))
        .filter(|p| p.starts_with("images/blobs/"))
        .collect();
    let distinct: BTreeSet<&&str> = blobs.iter().collect();
    assert_eq!(blobs.len(), distinct.len());

    // The same build without --upgrade-from has fewer files; the path adds only what differs.
    let single = bundle(&lab, "single.tar.zst", "cache", &[]);
    assert!(single.status.success(), "{}", text(&single.stderr));
    let y = lab.path("y");
    extract(&lab.path("single.tar.zst"), &y);
    let one: kubexm_bundles::manifest::BundleManifest =
        serde_json::from_slice(&std::fs::read(y.join("bundle.json")).expect("bundle.json"))
            .expect("manifest");
    assert!(one.upgrade_path.is_empty());
    assert!(!std::fs::read_to_string(y.join("bundle.json"))
        .expect("json")
        .contains("upgradePath"));
    let extra = manifest.files.len() - one.files.len();
    assert_eq!(
        extra,
        files_132
            .iter()
            .filter(|f| !one.files.iter().any(|o| &o.path == *f))
            .count()
    );
}

#[test]
fn an_upgrade_path_the_catalog_cannot_fill_is_refused_before_any_download() {
    let lab = setup();
    for (from, want) in [
        ("v1.1.0", "the catalog knows no v1.2.x"),
        ("v1.34.0", "does not downgrade"),
        ("v2.0.0", "is not Kubernetes"),
    ] {
        let out = bundle(&lab, "bad.tar.zst", "cache", &["--upgrade-from", from]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{from}: {err}");
        assert!(err.contains(want), "{from}: {err}");
        assert!(!lab.path("bad.tar.zst").exists());
    }
    assert_eq!(lab.mirror.requests(), 0, "something was downloaded");
    let out = bundle(&lab, "bad.tar.zst", "cache", &["--upgrade-from", "1.32"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--upgrade-from"));
}
