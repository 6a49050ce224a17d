//! Cross-checks between `bundle.json` and `SHA256SUMS`, run by `pack` before writing and by
//! `verify` as soon as both are read.

use thiserror::Error;

use crate::manifest::{BundleManifest, IMAGES_DIR};
use crate::sums::Sums;

/// A way `bundle.json` disagrees with the bundle's contents.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ManifestProblem {
    /// `formatVersion` is not the one this build reads and writes.
    #[error("`bundle.json` has formatVersion {found}; this build supports {expected}")]
    FormatVersion {
        /// What the manifest says (as written, `missing` if absent).
        found: String,
        /// [`crate::FORMAT_VERSION`].
        expected: u32,
    },
    /// `files[].path` is not in the bundle.
    #[error("`bundle.json` lists file `{path}` but the bundle does not contain it")]
    FileMissing {
        /// The path.
        path: String,
    },
    /// `files[].sha256` differs from `SHA256SUMS`.
    #[error("`bundle.json` gives `{path}` sha256 {manifest}, `SHA256SUMS` gives {sums}")]
    FileSum {
        /// The path.
        path: String,
        /// sha256 in `bundle.json`.
        manifest: String,
        /// sha256 in `SHA256SUMS`.
        sums: String,
    },
    /// `images` is not empty but the OCI layout is incomplete.
    #[error("`bundle.json` lists images but `{path}` is missing")]
    ImageLayout {
        /// The missing layout file.
        path: String,
    },
}

/// Checks the format version of a raw `bundle.json` value, before strict parsing.
pub(crate) fn format_version(value: &serde_json::Value) -> Result<(), ManifestProblem> {
    let found = value.get("formatVersion");
    if found.and_then(serde_json::Value::as_u64) == Some(u64::from(crate::FORMAT_VERSION)) {
        return Ok(());
    }
    Err(ManifestProblem::FormatVersion {
        found: found.map_or_else(|| "missing".to_owned(), ToString::to_string),
        expected: crate::FORMAT_VERSION,
    })
}

/// Checks `manifest` against the list of files (`SHA256SUMS`, which lists every file).
pub(crate) fn manifest(manifest: &BundleManifest, sums: &Sums) -> Result<(), ManifestProblem> {
    if manifest.format_version != crate::FORMAT_VERSION {
        return Err(ManifestProblem::FormatVersion {
            found: manifest.format_version.to_string(),
            expected: crate::FORMAT_VERSION,
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{FileRecord, ImageRecord};

    const H: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn bundle() -> BundleManifest {
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
    fn checks_format_version() {
        assert_eq!(
            format_version(&serde_json::json!({"formatVersion": 1})),
            Ok(())
        );
        let err = format_version(&serde_json::json!({"formatVersion": 2})).expect_err("v2");
        assert_eq!(
            err.to_string(),
            "`bundle.json` has formatVersion 2; this build supports 1"
        );
        assert!(format_version(&serde_json::json!({})).is_err());
    }
}
