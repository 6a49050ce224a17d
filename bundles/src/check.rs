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
    /// `images` is not empty but the OCI layout is incomplete.
    #[error("`bundle.json` lists images but `{path}` is missing")]
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
