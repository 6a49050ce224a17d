//! A bundle that does not carry what cluster.yaml needs (a file of the resolution, an OS
//! package of a release) is refused before any node is touched, naming each missing entry and
//! the `kubexm-build bundle` command that builds the right one (issue 33 item 11).

use std::collections::BTreeSet;
use std::sync::Arc;

use kubexm_bundles::manifest::{
    BundleManifest, FileRecord, OsPackageRecord, OsRepoRecord, SigningKeyRecord,
};
use kubexm_install::context::{BundleRef, InstallContext};
use kubexm_install::coverage::Missing;
use kubexm_manifests::osrelease::Family;

use crate::osrepo::lab_with_os_release;

/// A bundle made for the lab cluster with external load balancer `lb`: every file the resolver
/// lists, and a debian-12 repository with every package the install asks for.
fn bundle_for(lb: &str) -> BundleManifest {
    let (_dir, ctx) = lab_with_os_release(lb);
    let resolution = ctx.resolution.as_ref().expect("the lab cluster resolves");
    let mut manifest = crate::intake::manifest_with(&[]);
    manifest.files = resolution
        .binaries
        .iter()
        .map(|f| FileRecord {
            name: f.name.clone(),
            version: f.version.clone(),
            arch: f.arch.as_str().to_string(),
            path: f.path.clone(),
            sha256: "0".repeat(64),
            size: 1,
            url: f.url.clone(),
            roles: BTreeSet::new(),
        })
        .collect();
    let packages = kubexm_manifests::ospackages::for_cluster(&ctx.cluster, Family::Deb)
        .into_iter()
        .map(|n| OsPackageRecord {
            path: format!("repos/debian-12/pool/{}_1_amd64.deb", n.name),
            name: n.name,
            version: "1".into(),
            arch: "amd64".into(),
            sha256: "0".repeat(64),
            size: 1,
            url: "https://deb.example.invalid/".into(),
            reason: format!("requested by {}", n.reason),
        })
        .collect();
    manifest.os_repos = vec![OsRepoRecord {
        release: "debian-12".into(),
        family: "deb".into(),
        os_id: "debian".into(),
        version_id: "12".into(),
        path: "repos/debian-12".into(),
        signing_key: SigningKeyRecord {
            fingerprint: "00".repeat(20),
            armored: "repos/kubexm-repo-key.asc".into(),
            binary: "repos/kubexm-repo-key.gpg".into(),
        },
        sources: Vec::new(),
        packages,
    }];
    manifest
}

/// The lab cluster with load balancer `lb`, installing `bundle`.
fn installing(lb: &str, bundle: BundleManifest) -> (tempfile::TempDir, InstallContext) {
    let (dir, ctx) = lab_with_os_release(lb);
    let ctx = Arc::try_unwrap(ctx).expect("one owner");
    let ctx = InstallContext {
        bundle: Some(BundleRef {
            dir: dir.path().join("bundle"),
            manifest: bundle,
        }),
        ..ctx
    };
    (dir, ctx)
}

#[test]
fn a_bundle_for_the_configuration_is_accepted() {
    for lb in ["kubexm-kh", "kubexm-kn"] {
        let (_dir, ctx) = installing(lb, bundle_for(lb));
        ctx.check_bundle_coverage()
            .unwrap_or_else(|e| panic!("{lb}: {e}"));
    }
}

#[test]
fn a_bundle_for_haproxy_installed_with_nginx_is_refused_naming_the_packages() {
    let (_dir, ctx) = installing("kubexm-kn", bundle_for("kubexm-kh"));
    let err = ctx
        .check_bundle_coverage()
        .expect_err("a kubexm-kh bundle lacks nginx");
    let names: Vec<&str> = err
        .missing
        .iter()
        .filter_map(|m| match m {
            Missing::OsPackage { release, name, .. } if release == "debian-12" => {
                Some(name.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(names, ["nginx", "libnginx-mod-stream"], "{err}");
    let text = err.to_string();
    assert!(
        text.contains(
            "OS package nginx for debian-12 (external load balancer (keepalived + nginx))"
        ),
        "{text}"
    );
    assert!(
        text.contains("kubexm-build bundle -f cluster.yaml"),
        "names the command: {text}"
    );
}

#[test]
fn a_bundle_missing_a_file_is_refused_naming_it() {
    let mut bundle = bundle_for("kubexm-kh");
    let before = bundle.files.len();
    bundle.files.retain(|f| f.name != "kubeadm");
    assert!(bundle.files.len() < before, "the lab cluster needs kubeadm");
    let (_dir, ctx) = installing("kubexm-kh", bundle);
    let err = ctx.check_bundle_coverage().expect_err("kubeadm is missing");
    assert!(
        err.missing
            .iter()
            .all(|m| matches!(m, Missing::File { name, .. } if name == "kubeadm")),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("file kubeadm v1.33"), "{text}");
    assert!(text.contains("files/kubeadm/"), "{text}");
    assert!(
        text.contains("kubexm-build bundle -f cluster.yaml"),
        "{text}"
    );
}

#[test]
fn a_bundle_without_the_release_repository_is_refused_naming_it() {
    let mut bundle = bundle_for("kubexm-kh");
    bundle.os_repos.clear();
    let (_dir, ctx) = installing("kubexm-kh", bundle);
    let err = ctx.check_bundle_coverage().expect_err("no debian-12");
    assert_eq!(
        err.missing,
        [Missing::OsRelease {
            release: "debian-12".into()
        }]
    );
}
