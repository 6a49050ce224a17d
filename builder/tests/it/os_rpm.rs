//! The RPM family of `spec.system.osReleases`, proven on a repository built for the test: no RHEL-
//! family mirror is reachable here, so every package is a TEST STAND-IN RPM made with Debian's
//! `rpmbuild` (a tiny noarch or x86_64 package named like the RPM each KubeXM package set asks
//! for, plus helper packages that exercise file, versioned, virtual and rich dependencies), the
//! repository metadata is written by Debian's `createrepo_c`, and `repomd.xml` is signed by a
//! stand-in distribution key made with GnuPG. What is real: the formats, the signature chain
//! (repomd.xml.asc → sha256 of primary.xml → sha256 of each .rpm), and `dnf` (Debian's dnf 4)
//! installing from the bundle's re-signed repository with `repo_gpgcheck=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use kubexm_testkit::Fault;

use super::bundle_e2e::{bundle, extract, setup, text, Lab};

/// A test stand-in RPM: (name, version, arch, requires, provides, file).
type StandIn = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static str,
);

/// Test stand-in RPMs.
const RPMS: &[StandIn] = &[
    ("socat", "1.7.4", "x86_64", &[], &[], "/usr/bin/socat"),
    (
        "conntrack-tools",
        "1.4.7",
        "x86_64",
        &["kxt-lib >= 1.0"],
        &[],
        "/usr/sbin/conntrack",
    ),
    ("ipset", "7.11", "x86_64", &[], &[], "/usr/sbin/ipset"),
    ("ipvsadm", "1.31", "x86_64", &[], &[], "/usr/sbin/ipvsadm"),
    // On the etcd members, for preflight's etcd disk check.
    ("fio", "3.35", "x86_64", &[], &[], "/usr/bin/fio"),
    (
        "ebtables",
        "2.0.11",
        "noarch",
        &[],
        &[],
        "/usr/sbin/ebtables",
    ),
    // A file dependency, satisfied by a file another package lists in primary.xml.
    (
        "chrony",
        "4.3",
        "x86_64",
        &["/usr/bin/kxt-sh", "kxt-lib >= 1.0"],
        &[],
        "/usr/sbin/chronyd",
    ),
    // A rich dependency: the second alternative is the one that exists.
    (
        "curl",
        "7.76.1",
        "x86_64",
        &["(kxt-alt-a or kxt-alt-b)"],
        &[],
        "/usr/bin/curl",
    ),
    ("tar", "1.34", "x86_64", &[], &[], "/usr/bin/tar"),
    // A versioned dependency on a virtual capability.
    (
        "openssl",
        "3.0.7",
        "x86_64",
        &["kxt-capability >= 1.5"],
        &[],
        "/usr/bin/openssl",
    ),
    (
        "iptables",
        "1.8.8",
        "noarch",
        &[],
        &[],
        "/usr/sbin/iptables",
    ),
    ("kmod", "28", "x86_64", &[], &[], "/usr/bin/kmod"),
    ("procps-ng", "3.3.17", "x86_64", &[], &[], "/usr/bin/ps"),
    ("kxt-shell", "1.0", "noarch", &[], &[], "/usr/bin/kxt-sh"),
    ("kxt-lib", "0.9", "noarch", &[], &[], "/usr/share/kxt/lib"),
    (
        "kxt-lib",
        "1.1",
        "noarch",
        &[],
        &["kxt-capability = 2.0"],
        "/usr/share/kxt/lib",
    ),
    (
        "kxt-alt-b",
        "1.0",
        "noarch",
        &[],
        &[],
        "/usr/share/kxt/alt-b",
    ),
    // Another architecture: never chosen for x86_64 hosts.
    ("socat", "9.9", "aarch64", &[], &[], "/usr/bin/socat"),
    // Not needed by anything: stays out of the bundle.
    (
        "kxt-unused",
        "1.0",
        "noarch",
        &[],
        &[],
        "/usr/share/kxt/unused",
    ),
];

const REPO_PATH: &str = "rpm.example/kxtest/9/BaseOS/x86_64/os";

/// The stand-in repository and distribution key, built once per test run: (directory holding
/// `Packages/` and `repodata/`, armored public key, fingerprint).
fn stand_in_repo() -> &'static (PathBuf, PathBuf, String) {
    static REPO: OnceLock<(tempfile::TempDir, (PathBuf, PathBuf, String))> = OnceLock::new();
    &REPO
        .get_or_init(|| {
            let tmp = tempfile::tempdir().expect("temp dir");
            let built = build_stand_in_repo(tmp.path());
            (tmp, built)
        })
        .1
}

fn build_stand_in_repo(base: &Path) -> (PathBuf, PathBuf, String) {
    let work = base.join("rpmbuild");
    let repo = base.join("repo");
    std::fs::create_dir_all(repo.join("Packages")).expect("mkdir");
    std::fs::create_dir_all(work.join("SPECS")).expect("mkdir");
    for (name, version, arch, requires, provides, file) in RPMS {
        let mut spec = format!(
            "Name: {name}\nVersion: {version}\nRelease: 1\nSummary: KubeXM TEST STAND-IN for {name}\nLicense: Apache-2.0\n"
        );
        if *arch == "noarch" {
            spec.push_str("BuildArch: noarch\n");
        }
        for r in *requires {
            spec.push_str(&format!("Requires: {r}\n"));
        }
        for p in *provides {
            spec.push_str(&format!("Provides: {p}\n"));
        }
        let dir = Path::new(file).parent().expect("dir").display().to_string();
        spec.push_str(&format!(
            "%description\nA stand-in package built for a KubeXM test.\n%install\nmkdir -p %{{buildroot}}{dir}\necho {name}-{version} > %{{buildroot}}{file}\n%files\n{file}\n"
        ));
        let path = work.join(format!("SPECS/{name}-{version}-{arch}.spec"));
        std::fs::write(&path, spec).expect("spec");
        let out = Command::new("rpmbuild")
            .arg("-bb")
            .arg("--target")
            .arg(arch)
            .arg("--define")
            .arg(format!("_topdir {}", work.display()))
            .arg("--define")
            .arg(format!("_rpmdir {}", repo.join("Packages").display()))
            .arg("--define")
            .arg("_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm")
            .arg(&path)
            .output()
            .expect("rpmbuild runs (Debian's rpm package)");
        assert!(
            out.status.success(),
            "rpmbuild {name}: {}",
            text(&out.stderr)
        );
    }
    let out = Command::new("createrepo_c")
        .arg("-q")
        .arg(&repo)
        .output()
        .expect("createrepo_c runs (Debian's createrepo-c package)");
    assert!(out.status.success(), "createrepo_c: {}", text(&out.stderr));
    // The stand-in distribution key (GnuPG) signs repomd.xml as a distribution does.
    let gnupg = base.join("gnupg");
    std::fs::create_dir_all(&gnupg).expect("mkdir");
    let gpg = |args: &[&str]| {
        let out = Command::new("gpg")
            .env("GNUPGHOME", &gnupg)
            .args([
                "--batch",
                "--quiet",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ])
            .args(args)
            .output()
            .expect("gpg runs");
        assert!(out.status.success(), "gpg {args:?}: {}", text(&out.stderr));
        out
    };
    gpg(&[
        "--quick-gen-key",
        "KubeXM TEST STAND-IN distribution key",
        "ed25519",
        "sign",
        "1d",
    ]);
    let keyring = base.join("dist-key.asc");
    let exported = gpg(&["--armor", "--export"]);
    std::fs::write(&keyring, &exported.stdout).expect("key");
    let listing = text(&gpg(&["--list-keys", "--with-colons"]).stdout);
    let fpr = listing
        .lines()
        .find_map(|l| l.strip_prefix("fpr:::::::::"))
        .map(|l| l.trim_end_matches(':').to_owned())
        .expect("fingerprint");
    let repomd = repo.join("repodata/repomd.xml");
    gpg(&[
        "--detach-sign",
        "--armor",
        "-o",
        &format!("{}.asc", repomd.display()),
        &repomd.display().to_string(),
    ]);
    (repo, keyring, fpr)
}

/// The lab with the stand-in repository on its mirror, the catalog entry (`osReleases:
/// kxtest-9`) and the cluster. Returns the distribution key's fingerprint.
fn rpm_lab(extra: &str) -> (Lab, String) {
    let lab = setup();
    let (built, keyring, fpr) = stand_in_repo();
    let fpr = fpr.clone();
    let repo = lab.mirror.root().join(REPO_PATH);
    std::fs::create_dir_all(repo.parent().expect("parent")).expect("mkdir");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(built)
        .arg(&repo)
        .status()
        .expect("cp");
    assert!(cp.success());
    let catalog = format!(
        "{}osReleases:\n  - name: kxtest-9\n    family: rpm\n    osId: kxtest\n    versionId: \"9\"\n    keyring: {}\n    signingKeys: [{fpr}]\n    repositories:\n      - {{url: \"http://rpm.example/kxtest/9/BaseOS/{{uname_arch}}/os\"}}\n",
        std::fs::read_to_string(lab.path("catalog.yaml")).expect("catalog"),
        keyring.display()
    );
    std::fs::write(lab.path("catalog.yaml"), catalog).expect("catalog");
    let cluster = std::fs::read_to_string(lab.path("cluster.yaml"))
        .expect("cluster")
        .replace(", arch: arm64", "")
        .replace(
            "  addons:\n",
            &format!("  system:\n    osReleases: [kxtest-9]\n{extra}  addons:\n"),
        );
    std::fs::write(lab.path("cluster.yaml"), cluster).expect("cluster");
    let zone = std::fs::read_to_string(lab.path("zone.yaml"))
        .expect("zone")
        .replace(
            "files:\n",
            &format!(
                "files:\n  - {{from: 'http://rpm.example/', to: '{}/rpm.example/'}}\n",
                lab.mirror.base_url()
            ),
        );
    std::fs::write(lab.path("zone.yaml"), zone).expect("zone");
    (lab, fpr)
}

/// dnf with only `repo_dir` as repository (`repo_gpgcheck=1`, the bundle's key), installing
/// into a fresh root.
fn dnf_install(lab: &Lab, repo_dir: &Path, key: &Path, names: &[&str]) -> std::process::Output {
    let base = lab.path("dnf");
    let root: PathBuf = base.join("root");
    for d in ["root", "repos.d", "cache"] {
        std::fs::create_dir_all(base.join(d)).expect("mkdir");
    }
    // Package signatures are not part of this test's chain (the stand-ins are unsigned); the
    // metadata signature is, and dnf checks it (repo_gpgcheck=1) before trusting any sha256.
    std::fs::write(
        base.join("repos.d/kubexm.repo"),
        format!(
            "[kubexm]\nname=KubeXM bundle\nbaseurl=file://{}\nenabled=1\ngpgcheck=0\nrepo_gpgcheck=1\ngpgkey=file://{}\n",
            repo_dir.display(),
            key.display()
        ),
    )
    .expect("repo");
    Command::new("dnf")
        .args([
            "-y",
            "-q",
            "--releasever=9",
            "--nodocs",
            "--setopt=install_weak_deps=False",
        ])
        .arg(format!("--installroot={}", root.display()))
        .arg(format!(
            "--setopt=reposdir={}",
            base.join("repos.d").display()
        ))
        .arg(format!(
            "--setopt=cachedir={}",
            base.join("cache").display()
        ))
        .arg("install")
        .args(names)
        .output()
        .expect("dnf runs (Debian's dnf package)")
}

fn requested() -> Vec<&'static str> {
    let k = kubexm_manifests::ospackages::NODE_PREP.rpms.iter();
    k.chain(kubexm_manifests::ospackages::RUNTIME_DEPS.rpms)
        .copied()
        .collect()
}

#[test]
fn rpm_packages_are_bundled_with_signed_metadata_dnf_installs() {
    let (lab, dist_fpr) = rpm_lab("");
    let out = bundle(&lab, "b.tar.zst", "cache", &[]);
    assert!(
        out.status.success(),
        "bundle failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let x = lab.path("x");
    extract(&lab.path("b.tar.zst"), &x);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(x.join("bundle.json")).expect("bundle.json"))
            .expect("json");
    let repo = &manifest["osRepos"][0];
    assert_eq!(repo["release"], "kxtest-9");
    assert_eq!(repo["family"], "rpm");
    assert_eq!(repo["sources"][0]["signedBy"][0], dist_fpr.as_str());
    let mut names: Vec<(&str, &str, &str)> = repo["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default(),
                p["version"].as_str().unwrap_or_default(),
                p["arch"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    names.sort_unstable();
    // Every requested package, the dependencies (file, rich, versioned virtual), only the
    // candidate kxt-lib, no aarch64 socat, no unused package.
    let mut want: Vec<(&str, &str, &str)> = RPMS
        .iter()
        .filter(|r| r.2 != "aarch64" && r.0 != "kxt-unused" && !(r.0 == "kxt-lib" && r.1 == "0.9"))
        .map(|r| (r.0, r.1, r.2))
        .collect();
    want.sort_unstable();
    let names_v: Vec<(String, String)> = names
        .iter()
        .map(|(n, v, _)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    let want_v: Vec<(String, String)> = want
        .iter()
        .map(|(n, v, _)| ((*n).to_owned(), format!("{v}-1")))
        .collect();
    assert_eq!(names_v, want_v);
    let key_gpg = x.join("repos/kubexm-repo-key.gpg");
    let dir = x.join("repos/kxtest-9");
    let v = Command::new("gpgv")
        .arg("--keyring")
        .arg(&key_gpg)
        .arg(dir.join("repodata/repomd.xml.asc"))
        .arg(dir.join("repodata/repomd.xml"))
        .output()
        .expect("gpgv");
    assert!(v.status.success(), "gpgv: {}", text(&v.stderr));

    let out = dnf_install(
        &lab,
        &dir,
        &x.join("repos/kubexm-repo-key.asc"),
        &requested(),
    );
    assert!(
        out.status.success(),
        "dnf install from the bundle:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let root = lab.path("dnf/root");
    for f in [
        "usr/sbin/chronyd",
        "usr/bin/kxt-sh",
        "usr/share/kxt/alt-b",
        "usr/bin/ps",
    ] {
        assert!(root.join(f).is_file(), "{f} not installed");
    }
    assert_eq!(
        std::fs::read_to_string(root.join("usr/share/kxt/lib"))
            .expect("lib")
            .trim(),
        "kxt-lib-1.1"
    );

    // dnf refuses the same repository once its metadata no longer matches the signature.
    let repomd = dir.join("repodata/repomd.xml");
    let altered = std::fs::read_to_string(&repomd)
        .expect("repomd")
        .replace("<revision>", "<revision>1");
    std::fs::write(&repomd, altered).expect("write");
    std::fs::remove_dir_all(lab.path("dnf")).expect("fresh dnf state");
    let out = dnf_install(&lab, &dir, &x.join("repos/kubexm-repo-key.asc"), &["socat"]);
    assert!(
        !out.status.success(),
        "dnf accepted altered metadata:\n{}",
        text(&out.stdout)
    );
}

#[test]
fn rpm_metadata_with_a_bad_signature_a_corrupt_rpm_or_a_missing_package_is_refused() {
    // repomd.xml changed after signing: refused, naming the URL.
    let (lab, _) = rpm_lab("");
    let repomd = lab
        .mirror
        .root()
        .join(REPO_PATH)
        .join("repodata/repomd.xml");
    let altered = std::fs::read_to_string(&repomd)
        .expect("repomd")
        .replace("<revision>", "<revision>9");
    std::fs::write(&repomd, altered).expect("write");
    let out = bundle(&lab, "b.tar.zst", "cache", &[]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("kxtest-9: the signed index `")
            && err
                .contains("/rpm.example/kxtest/9/BaseOS/x86_64/os/repodata/repomd.xml` is refused")
            && err.contains("does not verify"),
        "{err}"
    );

    // A corrupt .rpm: refused naming the package.
    let (lab, _) = rpm_lab("");
    let path = format!("/{REPO_PATH}/Packages/chrony-4.3-1.x86_64.rpm");
    lab.mirror.inject(&path, Fault::Corrupt);
    let out = bundle(&lab, "b.tar.zst", "cache", &["--retries", "1"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("kxtest-9: cannot download package chrony=4.3-1 (x86_64) from `")
            && err.contains("sha256 mismatch"),
        "{err}"
    );

    // A package no repository has: refused before anything is downloaded.
    let (lab, _) = rpm_lab("    rpms: [kxt-missing]\n");
    let out = bundle(&lab, "b.tar.zst", "cache", &[]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("kxtest-9 (x86_64): 1 problem with the OS packages:")
            && err.contains("package `kxt-missing` (spec.system.rpms[0]) is not in the index"),
        "{err}"
    );
    assert_eq!(
        lab.mirror
            .request_log()
            .iter()
            .filter(|r| r.path.ends_with(".rpm"))
            .count(),
        0
    );
}
