//! Cross-checks between `bundle.json` and `SHA256SUMS`, run by `pack` before writing and by
//! `verify` as soon as both are read.

use thiserror::Error;

use kubexm_manifests::display::Untrusted;

use crate::manifest::{BundleManifest, IMAGES_DIR};
use crate::sums::Sums;

/// A way `bundle.json` disagrees with the bundle's contents.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ManifestProblem {
    /// `formatVersion` is not one this build reads.
    #[error("`bundle.json` has formatVersion {}; this build reads 1 to {expected}", Untrusted(.found))]
    FormatVersion {
        /// What the manifest says (as written, `missing` if absent).
        found: String,
        /// [`crate::FORMAT_VERSION`], the newest this build reads and the one it writes.
        expected: u32,
    },
    /// formatVersion 2: `sizes` lists a path `SHA256SUMS` does not.
    #[error("`bundle.json` pins the size of `{}`, which `SHA256SUMS` does not list", Untrusted(.path))]
    SizeUnlisted {
        /// The path.
        path: String,
    },
    /// formatVersion 2: a file of `SHA256SUMS` has no pinned size.
    #[error("`bundle.json` pins no size for `{}`, which `SHA256SUMS` lists", Untrusted(.path))]
    SizeMissing {
        /// The path.
        path: String,
    },
    /// formatVersion 1 carries no `sizes`.
    #[error("`bundle.json` has formatVersion 1 but pins sizes (a formatVersion 2 field)")]
    SizesInVersion1,
    /// `files[].size` differs from the pinned size.
    #[error("`bundle.json` gives `{}` size {manifest} in `files` but {pinned} in `sizes`", Untrusted(.path))]
    FileSize {
        /// The path.
        path: String,
        /// `files[].size`.
        manifest: u64,
        /// `sizes[path]`.
        pinned: u64,
    },
    /// `files[].path` is not in the bundle.
    #[error("`bundle.json` lists file `{}` but the bundle does not contain it", Untrusted(.path))]
    FileMissing {
        /// The path.
        path: String,
    },
    /// `files[].sha256` differs from `SHA256SUMS`.
    #[error("`bundle.json` gives `{}` sha256 {}, `SHA256SUMS` gives {sums}", Untrusted(.path), Untrusted(.manifest))]
    FileSum {
        /// The path.
        path: String,
        /// sha256 in `bundle.json`.
        manifest: String,
        /// sha256 in `SHA256SUMS`.
        sums: String,
    },
    /// A `files[]` name, version or arch that is not made of safe path components (they name
    /// directories on the nodes).
    #[error("`bundle.json` file `{}`: {field} {problem}", Untrusted(.path))]
    FileName {
        /// The file's path.
        path: String,
        /// `name`, `version` or `arch`.
        field: &'static str,
        /// Why.
        problem: kubexm_manifests::name::NameError,
    },
    /// An `upgradePath` entry that is not a further version with its cluster.yaml in the bundle.
    #[error("`bundle.json` upgradePath entry `{}`: {problem}", Untrusted(.version))]
    UpgradeStep {
        /// The entry's `kubernetesVersion`.
        version: String,
        /// Why.
        problem: String,
    },
    /// An `osRepos[]` entry whose names would leave its directory on the nodes or change the
    /// files written from them (`/var/lib/kubexm/repos/<release>`, `kubexm.sources`).
    #[error("`bundle.json` osRepos entry `{}`: {field} `{}` {problem}", Untrusted(.release), Untrusted(.value))]
    OsRepo {
        /// The entry's `release`, as written.
        release: String,
        /// The field (`release`, `path`, `family`, `packages[].path`, …).
        field: &'static str,
        /// Its value, as written.
        value: String,
        /// Why it is refused.
        problem: String,
    },
    /// `images` is not empty but the OCI layout is incomplete.
    #[error("`bundle.json` lists images but `{}` is missing", Untrusted(.path))]
    ImageLayout {
        /// The missing layout file.
        path: String,
    },
}

/// Checks the format version of a raw `bundle.json` value, before strict parsing.
pub(crate) fn format_version(found: Option<&serde_json::Value>) -> Result<(), ManifestProblem> {
    if found
        .and_then(serde_json::Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .is_some_and(|v| crate::READABLE_FORMAT_VERSIONS.contains(&v))
    {
        return Ok(());
    }
    Err(ManifestProblem::FormatVersion {
        found: found.map_or_else(|| "missing".to_owned(), ToString::to_string),
        expected: crate::FORMAT_VERSION,
    })
}

/// Checks `manifest` against the list of files (`SHA256SUMS`, which lists every file).
pub(crate) fn manifest(manifest: &BundleManifest, sums: &Sums) -> Result<(), ManifestProblem> {
    if !crate::READABLE_FORMAT_VERSIONS.contains(&manifest.format_version) {
        return Err(ManifestProblem::FormatVersion {
            found: manifest.format_version.to_string(),
            expected: crate::FORMAT_VERSION,
        });
    }
    for file in &manifest.files {
        let parts = file.name.split('/').map(|n| ("name", n)).chain([
            ("version", file.version.as_str()),
            ("arch", file.arch.as_str()),
        ]);
        for (field, value) in parts {
            if let Err(problem) = kubexm_manifests::name::check_component(value) {
                return Err(ManifestProblem::FileName {
                    path: file.path.clone(),
                    field,
                    problem,
                });
            }
        }
    }
    for repo in &manifest.os_repos {
        os_repo(repo)?;
    }
    let repo_files = manifest.os_repos.iter().flat_map(|r| {
        r.packages
            .iter()
            .map(|p| (p.path.as_str(), Some(p.sha256.as_str())))
            .chain([
                (r.signing_key.armored.as_str(), None),
                (r.signing_key.binary.as_str(), None),
            ])
    });
    for (path, sha256) in manifest
        .files
        .iter()
        .map(|f| (f.path.as_str(), Some(f.sha256.as_str())))
        .chain(repo_files)
    {
        match sums.get(path) {
            None => {
                return Err(ManifestProblem::FileMissing {
                    path: path.to_owned(),
                })
            }
            Some(sum) if sha256.is_some_and(|s| s != sum) => {
                return Err(ManifestProblem::FileSum {
                    path: path.to_owned(),
                    manifest: sha256.unwrap_or_default().to_owned(),
                    sums: sum.clone(),
                })
            }
            Some(_) => {}
        }
    }
    upgrade_path(manifest, sums)?;
    if !manifest.images.is_empty() {
        for name in ["oci-layout", "index.json"] {
            let path = format!("{IMAGES_DIR}/{name}");
            if !sums.contains_key(&path) {
                return Err(ManifestProblem::ImageLayout { path });
            }
        }
    }
    Ok(())
}

/// Longest `release`, `osId` or `versionId` of an OS repository.
const OS_NAME_MAX: usize = 64;

/// Whether `s` is a plain name: 1 to [`OS_NAME_MAX`] ASCII letters, digits, `.`, `_` and `-`,
/// not starting with `.` (what every catalog release, `/etc/os-release` `ID` and `VERSION_ID`
/// is made of: `debian-12`, `ubuntu-24.04`, `rocky`, `9.4`). Safe as a path component, in a
/// deb822 or INI value and in a shell word.
fn plain_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s.len() > OS_NAME_MAX {
        return Err(format!("is longer than {OS_NAME_MAX} bytes"));
    }
    if s.starts_with('.') {
        return Err("starts with `.`".into());
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err("may hold only ASCII letters, digits, `.`, `_` and `-`".into());
    }
    Ok(())
}

/// An OS repository's names: `release` (its directory on every node, named in `kubexm.sources`
/// and `kubexm.repo`) a plain name, `path` exactly `repos/<release>`, every package under it,
/// the keys under `repos/`, and no control character in what is shown of its packages. The
/// installer uploads to and deletes `/var/lib/kubexm/repos/<release>`: nothing else may be named.
fn os_repo(repo: &crate::manifest::OsRepoRecord) -> Result<(), ManifestProblem> {
    let refuse = |field: &'static str, value: &str, problem: String| ManifestProblem::OsRepo {
        release: repo.release.clone(),
        field,
        value: value.to_owned(),
        problem,
    };
    for (field, value) in [
        ("release", &repo.release),
        ("osId", &repo.os_id),
        ("versionId", &repo.version_id),
    ] {
        plain_name(value).map_err(|p| refuse(field, value, p))?;
    }
    if !matches!(repo.family.as_str(), "deb" | "rpm") {
        return Err(refuse(
            "family",
            &repo.family,
            "is neither `deb` nor `rpm`".into(),
        ));
    }
    let dir = format!("{}/{}", crate::manifest::REPOS_DIR, repo.release);
    if repo.path != dir {
        return Err(refuse("path", &repo.path, format!("is not `{dir}`")));
    }
    let under = |field: &'static str, path: &str, prefix: &str| {
        crate::path::check(path).map_err(|p| refuse(field, path, p.to_string()))?;
        if !path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
        {
            return Err(refuse(field, path, format!("is not under `{prefix}/`")));
        }
        Ok(())
    };
    for key in [&repo.signing_key.armored, &repo.signing_key.binary] {
        under("signingKey", key, crate::manifest::REPOS_DIR)?;
    }
    if !repo
        .signing_key
        .fingerprint
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        || repo.signing_key.fingerprint.is_empty()
    {
        return Err(refuse(
            "signingKey.fingerprint",
            &repo.signing_key.fingerprint,
            "is not hexadecimal".into(),
        ));
    }
    for p in &repo.packages {
        under("packages[].path", &p.path, &dir)?;
        for (field, value) in [
            ("packages[].name", &p.name),
            ("packages[].version", &p.version),
            ("packages[].arch", &p.arch),
            ("packages[].url", &p.url),
            ("packages[].reason", &p.reason),
        ] {
            if value.chars().any(kubexm_manifests::display::needs_escape) {
                return Err(refuse(field, value, "contains a control character".into()));
            }
        }
    }
    Ok(())
}

/// Each further version of `upgradePath`: a version name safe as a path component, unique and
/// not the bundle's own, with its cluster.yaml at the one place it may be, in the bundle.
fn upgrade_path(manifest: &BundleManifest, sums: &Sums) -> Result<(), ManifestProblem> {
    let mut seen = std::collections::BTreeSet::new();
    for step in &manifest.upgrade_path {
        let problem = |problem: String| ManifestProblem::UpgradeStep {
            version: step.kubernetes_version.clone(),
            problem,
        };
        kubexm_manifests::name::check_component(&step.kubernetes_version)
            .map_err(|e| problem(format!("the version {e}")))?;
        if step.kubernetes_version == manifest.kubernetes_version
            || !seen.insert(step.kubernetes_version.as_str())
        {
            return Err(problem("the version is listed twice".into()));
        }
        let want = crate::manifest::upgrade_cluster_path(&step.kubernetes_version);
        if step.cluster != want {
            return Err(problem(format!(
                "its cluster is `{}`, not `{want}`",
                Untrusted(&step.cluster)
            )));
        }
        if !sums.contains_key(&want) {
            return Err(problem(format!("`{want}` is not in the bundle")));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::manifest::{FileRecord, ImageRecord};

    const H: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    /// A valid manifest of one file (other modules' tests start from it).
    pub(crate) fn bundle() -> BundleManifest {
        BundleManifest {
            format_version: crate::FORMAT_VERSION,
            tool_version: "0.1.0".into(),
            cluster: "c".into(),
            kubernetes_version: "v1.33.1".into(),
            zone: "default".into(),
            arches: ["amd64".to_owned()].into(),
            created: 0,
            files: vec![FileRecord {
                name: "etcd".into(),
                version: "v3.5.16".into(),
                arch: "amd64".into(),
                path: "files/etcd/v3.5.16/amd64/etcd.tgz".into(),
                sha256: H.into(),
                size: 0,
                url: "https://example.invalid/etcd.tgz".into(),
                roles: ["etcd".to_owned()].into(),
            }],
            images: vec![],
            os_repos: vec![],
            upgrade_path: vec![],
            sizes: std::collections::BTreeMap::new(),
        }
    }

    #[test]
    fn cross_checks() {
        let m = bundle();
        let mut sums = Sums::new();
        assert!(matches!(
            manifest(&m, &sums),
            Err(ManifestProblem::FileMissing { .. })
        ));
        sums.insert(m.files[0].path.clone(), "0".repeat(64));
        assert!(matches!(
            manifest(&m, &sums),
            Err(ManifestProblem::FileSum { .. })
        ));
        sums.insert(m.files[0].path.clone(), H.into());
        assert_eq!(manifest(&m, &sums), Ok(()));

        let mut with_image = m.clone();
        with_image.images.push(ImageRecord {
            reference: "registry.k8s.io/pause:3.10".into(),
            source: "registry.k8s.io/pause:3.10".into(),
            digest: format!("sha256:{H}"),
            source_digest: None,
            layout_digest: None,
            media_type: "application/vnd.oci.image.index.v1+json".into(),
            size: 0,
            platforms: ["linux/amd64".to_owned()].into(),
            roles: ["master".to_owned()].into(),
        });
        assert_eq!(
            manifest(&with_image, &sums),
            Err(ManifestProblem::ImageLayout {
                path: "images/oci-layout".into()
            })
        );
        sums.insert("images/oci-layout".into(), H.into());
        sums.insert("images/index.json".into(), H.into());
        assert_eq!(manifest(&with_image, &sums), Ok(()));
    }

    #[test]
    fn upgrade_steps_name_a_cluster_yaml_in_the_bundle() {
        use crate::manifest::UpgradeStepRecord;
        let mut m = bundle();
        let mut sums = Sums::new();
        sums.insert(m.files[0].path.clone(), H.into());
        let step = |v: &str, c: &str| UpgradeStepRecord {
            kubernetes_version: v.into(),
            cluster: c.into(),
        };
        m.upgrade_path = vec![step("v1.32.4", "upgrade/v1.32.4/cluster.yaml")];
        assert_eq!(
            manifest(&m, &sums).map_err(|e| e.to_string()),
            Err("`bundle.json` upgradePath entry `v1.32.4`: `upgrade/v1.32.4/cluster.yaml` is not in the bundle".into())
        );
        sums.insert("upgrade/v1.32.4/cluster.yaml".into(), H.into());
        assert_eq!(manifest(&m, &sums), Ok(()));
        for (bad, why) in [
            (step("../x", "upgrade/../x/cluster.yaml"), "the version"),
            (
                step("v1.31.2", "cluster.yaml"),
                "its cluster is `cluster.yaml`",
            ),
            (
                step("v1.33.1", "upgrade/v1.33.1/cluster.yaml"),
                "listed twice",
            ),
        ] {
            let mut m = m.clone();
            m.upgrade_path.push(bad);
            let err = manifest(&m, &sums).expect_err(why).to_string();
            assert!(err.contains(why), "{err}");
        }
        m.upgrade_path
            .push(step("v1.32.4", "upgrade/v1.32.4/cluster.yaml"));
        assert!(manifest(&m, &sums)
            .expect_err("twice")
            .to_string()
            .contains("listed twice"));
    }

    /// A bundle with one Debian repository whose files are all in `SHA256SUMS`.
    fn with_repo(edit: impl FnOnce(&mut crate::manifest::OsRepoRecord)) -> (BundleManifest, Sums) {
        use crate::manifest::{OsPackageRecord, OsRepoRecord, SigningKeyRecord};
        let mut repo = OsRepoRecord {
            release: "debian-12".into(),
            family: "deb".into(),
            os_id: "debian".into(),
            version_id: "12".into(),
            path: "repos/debian-12".into(),
            signing_key: SigningKeyRecord {
                fingerprint: "0123456789ABCDEF".into(),
                armored: "repos/kubexm-repo-key.asc".into(),
                binary: "repos/kubexm-repo-key.gpg".into(),
            },
            sources: vec![],
            packages: vec![OsPackageRecord {
                name: "socat".into(),
                version: "1.7.4.4-2".into(),
                arch: "amd64".into(),
                path: "repos/debian-12/pool/socat.deb".into(),
                sha256: H.into(),
                size: 0,
                url: "https://deb.debian.org/pool/socat.deb".into(),
                reason: "requested by node preparation".into(),
            }],
        };
        edit(&mut repo);
        let mut m = bundle();
        let mut sums = Sums::new();
        sums.insert(m.files[0].path.clone(), H.into());
        for p in [&repo.signing_key.armored, &repo.signing_key.binary] {
            sums.insert(p.clone(), H.into());
        }
        for p in &repo.packages {
            sums.insert(p.path.clone(), H.into());
        }
        m.os_repos.push(repo);
        (m, sums)
    }

    #[test]
    fn os_repository_names_stay_in_their_directory() {
        let (m, sums) = with_repo(|_| {});
        assert_eq!(manifest(&m, &sums), Ok(()));
        let walk = "../../../../etc/cron.d";
        for (edit, field) in [
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| {
                    r.release = walk.into();
                    r.path = format!("repos/{walk}");
                }) as Box<dyn FnOnce(&mut crate::manifest::OsRepoRecord)>,
                "release",
            ),
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| {
                    r.release = "debian-12\nTrusted: yes".into();
                    r.path = format!("repos/{}", r.release);
                }),
                "release",
            ),
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| r.path = "repos/../etc".into()),
                "path",
            ),
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| r.path = "repos/debian-13".into()),
                "path",
            ),
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| r.os_id = "debian\n".into()),
                "osId",
            ),
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| r.family = "deb rpm".into()),
                "family",
            ),
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| {
                    r.packages[0].path = "repos/debian-12/../../files/x.deb".into();
                }),
                "packages[].path",
            ),
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| {
                    r.packages[0].path = "files/x.deb".into();
                }),
                "packages[].path",
            ),
            (
                Box::new(|r: &mut crate::manifest::OsRepoRecord| {
                    r.packages[0].reason = "\u{1b}[2Jok".into();
                }),
                "packages[].reason",
            ),
        ] {
            let (m, sums) = with_repo(edit);
            let err = manifest(&m, &sums).expect_err(field);
            assert!(
                matches!(&err, ManifestProblem::OsRepo { field: f, .. } if *f == field),
                "{field}: {err:?}"
            );
            let text = err.to_string();
            assert!(
                !text.contains('\n') && !text.contains('\u{1b}'),
                "escaped: {text:?}"
            );
            assert!(text.starts_with("`bundle.json` osRepos entry `"), "{text}");
        }
    }

    #[test]
    fn checks_format_version() {
        for ok in [1, 2] {
            assert_eq!(format_version(Some(&serde_json::json!(ok))), Ok(()));
        }
        let err = format_version(Some(&serde_json::json!(3))).expect_err("v3");
        assert_eq!(
            err.to_string(),
            "`bundle.json` has formatVersion 3; this build reads 1 to 2"
        );
        assert!(format_version(None).is_err());
        assert!(format_version(Some(&serde_json::json!(u64::MAX))).is_err());
    }
}
