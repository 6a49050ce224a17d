//! `spec.system.osReleases`: the OS packages of a Debian 12 cluster bundled as a signed repository,
//! from a local copy of Debian's archive (`tests/lab/mirror/build-debmirror`: Debian's real
//! InRelease files, package indexes and .debs, served on loopback by the testkit's HTTP mirror).
//!
//! Checked with independent tools: `gpgv` reads the bundle's InRelease with the bundle's key, and
//! apt itself (`apt-get update` + `apt-get install --simulate` with an empty dpkg status, the
//! bundle's repository as its only source, `signed-by` the bundle's key) must find every package
//! and every dependency in it. Refused, each naming what is wrong: an index whose signature does
//! not verify, a package whose sha256 differs from its index, a package no index has.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kubexm_testkit::{Fault, HttpMirror};

use super::bundle_e2e::{bundle, extract, setup, text, Lab};

/// The Debian mirror (built once per machine, cached by the script).
fn debmirror() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/lab/mirror/build-debmirror");
        let out = Command::new(&script)
            .output()
            .expect("build-debmirror runs");
        assert!(
            out.status.success(),
            "build-debmirror failed (root and Debian's archive needed the first time):\n{}",
            text(&out.stderr)
        );
        PathBuf::from(text(&out.stdout).trim())
    })
}

/// The bundle test lab (stand-in files and images), all hosts amd64, with `osReleases:
/// [debian-12]`, `extra` appended to `spec.system`, and Debian's archive on the lab's mirror
/// under `deb.debian.org/` (the zone maps `http://deb.debian.org/` there). `tamper` may replace
/// a file of the archive copy (the rest is linked to the real mirror).
fn os_lab(extra: &str, tamper: Option<(&str, String)>) -> Lab {
    let lab = setup();
    let root = lab.mirror.root().join("deb.debian.org");
    std::fs::create_dir_all(&root).expect("mkdir");
    let mirror = debmirror();
    match &tamper {
        None => {
            for d in ["debian", "debian-security"] {
                std::os::unix::fs::symlink(mirror.join(d), root.join(d)).expect("symlink");
            }
        }
        Some((path, content)) => link_tree_except(mirror, &root, Path::new(path), content),
    }
    let cluster = std::fs::read_to_string(lab.path("cluster.yaml"))
        .expect("cluster")
        .replace(", arch: arm64", "")
        .replace(
            "  addons:\n",
            &format!("  system:\n    osReleases: [debian-12]\n{extra}  addons:\n"),
        );
    assert!(cluster.contains("osReleases"), "{cluster}");
    std::fs::write(lab.path("cluster.yaml"), cluster).expect("write cluster");
    let zone = std::fs::read_to_string(lab.path("zone.yaml"))
        .expect("zone")
        .replace(
            "files:\n",
            &format!(
                "files:\n  - {{from: 'http://deb.debian.org/', to: '{}/deb.debian.org/'}}\n",
                lab.mirror.base_url()
            ),
        );
    std::fs::write(lab.path("zone.yaml"), zone).expect("write zone");
    lab
}

/// Mirrors `from` into `to` with symlinks, except `path` (relative), written with `content`:
/// only the directories on the way to it are real.
fn link_tree_except(from: &Path, to: &Path, path: &Path, content: &str) {
    let mut src = from.to_path_buf();
    let mut dst = to.to_path_buf();
    let parts: Vec<_> = path.components().collect();
    for (i, part) in parts.iter().enumerate() {
        for entry in std::fs::read_dir(&src).expect("read_dir") {
            let name = entry.expect("entry").file_name();
            if name.as_os_str() != part.as_os_str() {
                std::os::unix::fs::symlink(src.join(&name), dst.join(&name)).expect("symlink");
            }
        }
        src.push(part);
        dst.push(part);
        if i + 1 < parts.len() {
            std::fs::create_dir_all(&dst).expect("mkdir");
        }
    }
    std::fs::write(&dst, content).expect("write tampered file");
}

fn resolve(lab: &Lab, cache: &str) -> std::process::Output {
    let d = lab.dir.path();
    Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .arg("resolve")
        .arg("-f")
        .arg(d.join("cluster.yaml"))
        .arg("--zone-file")
        .arg(d.join("zone.yaml"))
        .arg("--catalog")
        .arg(d.join("catalog.yaml"))
        .arg("--cache-dir")
        .arg(d.join(cache))
        .args(["-o", "json"])
        .env_remove("KMZONE")
        .output()
        .expect("kubexm-build runs")
}

fn pool_requests(mirror: &HttpMirror) -> usize {
    mirror
        .request_log()
        .iter()
        .filter(|r| r.path.contains("/pool/"))
        .count()
}

#[test]
fn os_packages_are_bundled_as_a_signed_repository_apt_accepts() {
    let lab = os_lab("", None);
    let out = bundle(&lab, "b.tar.zst", "cache", &[]);
    assert!(
        out.status.success(),
        "bundle failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("OS repository repos/debian-12: "),
        "{}",
        text(&out.stdout)
    );
    let x = lab.path("x");
    extract(&lab.path("b.tar.zst"), &x);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(x.join("bundle.json")).expect("bundle.json"))
            .expect("json");
    let repo = &manifest["osRepos"][0];
    assert_eq!(repo["release"], "debian-12");
    assert_eq!(repo["family"], "deb");
    assert_eq!(repo["osId"], "debian");
    let fpr = repo["signingKey"]["fingerprint"]
        .as_str()
        .expect("fingerprint");
    assert_eq!(fpr.len(), 40, "{fpr}");
    // Three upstream indexes, each signed by a pinned Debian key.
    let sources = repo["sources"].as_array().expect("sources");
    assert_eq!(sources.len(), 3, "{sources:?}");
    for s in sources {
        let by: Vec<&str> = s["signedBy"]
            .as_array()
            .expect("signedBy")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        assert!(
            by.contains(&"B8B80B5B623EAB6AD8775C45B7C5D7D6350947F8")
                || by.contains(&"05AB90340C0C5E797F44A8C8254CF3B5AEC0A8F0"),
            "{s}"
        );
    }
    let packages = repo["packages"].as_array().expect("packages");
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    for want in kubexm_manifests::ospackages::NODE_PREP.debs {
        assert!(names.contains(want), "{want} missing from {names:?}");
    }
    // Dependencies came along, each with its reason.
    let libc = packages
        .iter()
        .find(|p| p["name"] == "libc6")
        .expect("libc6 in the closure");
    assert!(
        libc["reason"]
            .as_str()
            .is_some_and(|r| r.contains(" depends on libc6")),
        "{libc}"
    );
    // No private key anywhere in the bundle.
    let all = Command::new("grep")
        .args(["-rl", "PRIVATE KEY BLOCK"])
        .arg(&x)
        .output()
        .expect("grep");
    assert!(
        text(&all.stdout).trim().is_empty(),
        "a private key in: {}",
        text(&all.stdout)
    );

    // gpgv (GnuPG) accepts InRelease and Release.gpg with the shipped key.
    let dir = x.join("repos/debian-12");
    let key = x.join("repos/kubexm-repo-key.gpg");
    for args in [
        vec![dir.join("InRelease")],
        vec![dir.join("Release.gpg"), dir.join("Release")],
    ] {
        let v = Command::new("gpgv")
            .arg("--keyring")
            .arg(&key)
            .args(&args)
            .output()
            .expect("gpgv");
        assert!(v.status.success(), "gpgv {args:?}: {}", text(&v.stderr));
        assert!(text(&v.stderr).contains(&fpr[24..]), "{}", text(&v.stderr));
    }
    // Every .deb matches the sha256 of the Packages index the Release lists.
    let sums = Command::new("sh")
        .arg("-c")
        .arg("grep -E '^ [0-9a-f]{64} [0-9]+ Packages$' Release | awk '{print $1\"  \"$3}' | sha256sum -c --quiet && \
              awk '/^Filename:/{f=$2} /^SHA256:/{print $2\"  \"f}' Packages | sha256sum -c --quiet")
        .current_dir(&dir)
        .output()
        .expect("sha256sum");
    assert!(
        sums.status.success(),
        "{}{}",
        text(&sums.stdout),
        text(&sums.stderr)
    );

    // apt, with the bundle's repository as its only source and an empty dpkg status, resolves
    // every requested package to packages of this repository alone.
    let apt = lab.path("apt");
    for d in ["lists/partial", "cache/archives/partial", "etc"] {
        std::fs::create_dir_all(apt.join(d)).expect("mkdir");
    }
    std::fs::write(apt.join("status"), "").expect("status");
    std::fs::write(
        apt.join("etc/bundle.sources"),
        format!(
            "Types: deb\nURIs: file://{}\nSuites: ./\nSigned-By: {}\n",
            dir.display(),
            key.display()
        ),
    )
    .expect("sources");
    let aptopts = |cmd: &mut Command| {
        cmd.arg("-o")
            .arg(format!(
                "Dir::Etc::SourceList={}",
                apt.join("etc/bundle.sources").display()
            ))
            .arg("-o")
            .arg("Dir::Etc::SourceParts=/nonexistent")
            .arg("-o")
            .arg(format!("Dir::State::Lists={}", apt.join("lists").display()))
            .arg("-o")
            .arg(format!(
                "Dir::State::status={}",
                apt.join("status").display()
            ))
            .arg("-o")
            .arg(format!("Dir::Cache={}", apt.join("cache").display()))
            .arg("-o")
            .arg("APT::Architecture=amd64");
    };
    let mut update = Command::new("apt-get");
    aptopts(&mut update);
    let u = update.arg("update").output().expect("apt-get update");
    assert!(
        u.status.success()
            && !text(&u.stdout).contains("NO_PUBKEY")
            && !text(&u.stderr).contains("W:"),
        "apt-get update:\n{}\n{}",
        text(&u.stdout),
        text(&u.stderr)
    );
    let mut install = Command::new("apt-get");
    aptopts(&mut install);
    let i = install
        .args(["install", "--simulate", "--no-install-recommends", "-q"])
        .args(kubexm_manifests::ospackages::NODE_PREP.debs)
        .args(kubexm_manifests::ospackages::RUNTIME_DEPS.debs)
        .output()
        .expect("apt-get install --simulate");
    assert!(
        i.status.success(),
        "apt cannot install from the bundle alone:\n{}\n{}",
        text(&i.stdout),
        text(&i.stderr)
    );
    let insts = text(&i.stdout)
        .lines()
        .filter(|l| l.starts_with("Inst "))
        .count();
    assert!(
        insts >= names.len() / 2,
        "apt installs only {insts} packages:\n{}",
        text(&i.stdout)
    );
}

#[test]
fn an_index_with_a_wrong_signature_is_refused_naming_it() {
    let original =
        std::fs::read_to_string(debmirror().join("debian/dists/bookworm-updates/InRelease"))
            .expect("InRelease");
    // One hex digit of an index this cluster does not even use: the text stays well-formed, the
    // signatures no longer match it.
    let line = original
        .lines()
        .find(|l| l.ends_with(" main/binary-i386/Packages"))
        .expect("an i386 line");
    let mut altered = line.to_owned();
    let at = altered.find(|c: char| c.is_ascii_hexdigit()).expect("hex");
    let swapped = if altered.as_bytes()[at] == b'0' {
        "1"
    } else {
        "0"
    };
    altered.replace_range(at..=at, swapped);
    let lab = os_lab(
        "",
        Some((
            "debian/dists/bookworm-updates/InRelease",
            original.replace(line, &altered),
        )),
    );
    let out = resolve(&lab, "cache");
    let err = text(&out.stderr);
    assert!(!out.status.success(), "a tampered InRelease was accepted");
    assert!(
        err.contains("debian-12: the signed index `")
            && err.contains("/deb.debian.org/debian/dists/bookworm-updates/InRelease` is refused")
            && err.contains("does not verify"),
        "{err}"
    );
    let out = bundle(&lab, "b.tar.zst", "cache2", &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("bookworm-updates/InRelease` is refused"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        pool_requests(&lab.mirror),
        0,
        "packages were downloaded after the refusal"
    );
    assert!(!lab.path("b.tar.zst").exists());
}

#[test]
fn a_package_with_a_wrong_sha256_is_refused_naming_it() {
    let lab = os_lab("", None);
    let out = resolve(&lab, "cache");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let socat = json["osRepos"][0]["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "socat")
        .expect("socat")
        .clone();
    let url = socat["url"].as_str().expect("url");
    let path = url
        .strip_prefix(&lab.mirror.base_url())
        .expect("on the lab mirror");
    lab.mirror.inject(path, Fault::Corrupt);
    let out = bundle(&lab, "b.tar.zst", "cache", &["--retries", "1"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "a corrupted .deb was accepted");
    assert!(
        err.contains(&format!(
            "debian-12: cannot download package socat={} (amd64) from `{url}`",
            socat["version"].as_str().expect("version")
        )) && err.contains(&format!(
            "expected {}",
            socat["sha256"].as_str().expect("sha")
        )),
        "{err}"
    );
    assert!(!lab.path("b.tar.zst").exists());
}

#[test]
fn a_package_missing_from_the_index_fails_at_resolve_naming_it_and_the_release() {
    let lab = os_lab("    debs: [kubexm-no-such-package]\n", None);
    let out = resolve(&lab, "cache");
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("debian-12 (amd64): 1 problem with the OS packages:")
            && err.contains(
                "package `kubexm-no-such-package` (spec.system.debs[0]) is not in the index"
            )
            && err.contains("hint: "),
        "{err}"
    );
    let out = bundle(&lab, "b.tar.zst", "cache", &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("`kubexm-no-such-package`"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        pool_requests(&lab.mirror),
        0,
        "packages were downloaded before the refusal"
    );
}

#[test]
fn the_lab_mirror_lists_every_package_kubexm_installs() {
    let listed: std::collections::BTreeSet<String> = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/lab/mirror/os-packages.txt"),
    )
    .expect("os-packages.txt")
    .lines()
    .filter(|l| !l.starts_with('#'))
    .flat_map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
    .collect();
    let sets: std::collections::BTreeSet<String> = kubexm_manifests::ospackages::ALL
        .iter()
        .flat_map(|s| s.debs.iter().map(|d| (*d).to_owned()))
        .collect();
    assert_eq!(
        listed, sets,
        "tests/lab/mirror/os-packages.txt must list exactly the ospackages sets"
    );
}
