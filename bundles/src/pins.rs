//! Sizes pinned before any content is read: every entry of a formatVersion 2 bundle (from
//! `bundle.json`'s `sizes`), the `files[]` of a formatVersion 1 bundle. A tar header that
//! declares another size is refused at once, and the total a bundle takes on disk is known
//! before the first byte is written.

use std::collections::BTreeMap;

use crate::check::ManifestProblem;
use crate::manifest::{BundleManifest, MANIFEST_PATH};
use crate::sums::Sums;

/// The sizes a reader holds entries to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pins {
    sizes: BTreeMap<String, u64>,
    /// Every file is pinned (formatVersion 2).
    complete: bool,
}

impl Pins {
    /// The pinned size of `path`, if any.
    pub(crate) fn size(&self, path: &str) -> Option<u64> {
        self.sizes.get(path).copied()
    }

    /// Content bytes of every file but `bundle.json` and `SHA256SUMS`, when all are pinned.
    pub(crate) fn total(&self) -> Option<u64> {
        self.complete
            .then(|| self.sizes.values().fold(0u64, |t, s| t.saturating_add(*s)))
    }
}

/// The pins of `manifest`, checked against `sums` (already cross-checked by
/// [`crate::check::manifest`]).
pub(crate) fn pins(manifest: &BundleManifest, sums: &Sums) -> Result<Pins, ManifestProblem> {
    if manifest.format_version < 2 {
        if !manifest.sizes.is_empty() {
            return Err(ManifestProblem::SizesInVersion1);
        }
        let sizes = manifest
            .files
            .iter()
            .map(|f| (f.path.clone(), f.size))
            .collect();
        return Ok(Pins {
            sizes,
            complete: false,
        });
    }
    if let Some(path) = manifest.sizes.keys().find(|p| !sums.contains_key(*p)) {
        return Err(ManifestProblem::SizeUnlisted { path: path.clone() });
    }
    if let Some(path) = manifest.sizes.keys().find(|p| *p == MANIFEST_PATH) {
        return Err(ManifestProblem::SizeUnlisted { path: path.clone() });
    }
    if let Some(path) = sums
        .keys()
        .find(|p| *p != MANIFEST_PATH && !manifest.sizes.contains_key(*p))
    {
        return Err(ManifestProblem::SizeMissing { path: path.clone() });
    }
    for file in &manifest.files {
        let pinned = manifest.sizes.get(&file.path).copied().unwrap_or_default();
        if pinned != file.size {
            return Err(ManifestProblem::FileSize {
                path: file.path.clone(),
                manifest: file.size,
                pinned,
            });
        }
    }
    Ok(Pins {
        sizes: manifest.sizes.clone(),
        complete: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::FileRecord;

    const H: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn manifest(version: u32, sizes: &[(&str, u64)]) -> BundleManifest {
        BundleManifest {
            format_version: version,
            tool_version: "0".into(),
            cluster: "c".into(),
            kubernetes_version: "v1.33.1".into(),
            zone: "default".into(),
            arches: ["amd64".to_owned()].into(),
            created: 0,
            files: vec![FileRecord {
                name: "etcd".into(),
                version: "v3.5.16".into(),
                arch: "amd64".into(),
                path: "files/e".into(),
                sha256: H.into(),
                size: 7,
                url: "https://example.invalid/e".into(),
                roles: ["etcd".to_owned()].into(),
            }],
            images: vec![],
            os_repos: vec![],
            upgrade_path: Vec::new(),
            sizes: sizes.iter().map(|(p, s)| ((*p).to_owned(), *s)).collect(),
        }
    }

    fn sums(paths: &[&str]) -> Sums {
        paths
            .iter()
            .map(|p| ((*p).to_owned(), H.to_owned()))
            .collect()
    }

    #[test]
    fn version_1_pins_files_only() {
        let p = pins(&manifest(1, &[]), &sums(&["bundle.json", "files/e", "x"])).expect("v1");
        assert_eq!(
            (p.size("files/e"), p.size("x"), p.total()),
            (Some(7), None, None)
        );
        assert_eq!(
            pins(&manifest(1, &[("x", 1)]), &sums(&["x"])),
            Err(ManifestProblem::SizesInVersion1)
        );
    }

    #[test]
    fn version_2_pins_everything() {
        let all = sums(&["bundle.json", "files/e", "x"]);
        let p = pins(&manifest(2, &[("files/e", 7), ("x", 3)]), &all).expect("v2");
        assert_eq!((p.size("x"), p.total()), (Some(3), Some(10)));
        assert!(matches!(
            pins(&manifest(2, &[("files/e", 7)]), &all),
            Err(ManifestProblem::SizeMissing { path }) if path == "x"
        ));
        assert!(matches!(
            pins(&manifest(2, &[("files/e", 7), ("x", 3), ("y", 1)]), &all),
            Err(ManifestProblem::SizeUnlisted { path }) if path == "y"
        ));
        assert!(matches!(
            pins(
                &manifest(2, &[("files/e", 7), ("x", 3), ("bundle.json", 1)]),
                &all
            ),
            Err(ManifestProblem::SizeUnlisted { .. })
        ));
        assert!(matches!(
            pins(&manifest(2, &[("files/e", 999_999_999), ("x", 3)]), &all),
            Err(ManifestProblem::FileSize {
                manifest: 7,
                pinned: 999_999_999,
                ..
            })
        ));
        assert_eq!(
            pins(&manifest(2, &[("files/e", u64::MAX), ("x", 3)]), &all).map(|p| p.total()),
            Err(ManifestProblem::FileSize {
                path: "files/e".into(),
                manifest: 7,
                pinned: u64::MAX
            })
        );
    }
}
