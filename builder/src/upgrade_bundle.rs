//! `kubexm-build bundle --upgrade-from VERSION`: one bundle for a whole upgrade path. Kubernetes
//! is upgraded one minor at a time, so a cluster at v1.28 going to cluster.yaml's v1.30 also
//! needs a v1.29. The bundle then holds, beside cluster.yaml's version, the newest patch the
//! catalog knows of every minor in between, each with its own cluster.yaml (the same document
//! with `spec.kubernetes.version` changed); the files and images of all versions are packed
//! once, so what two versions share (etcd, the runtime, a layer) is stored once.

use std::collections::BTreeMap;

use kubexm_bundles::manifest::{upgrade_cluster_path, UpgradeStepRecord};
use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::load::{at_kubernetes_version, load_cluster_str};
use kubexm_manifests::resolve::{resolve, Resolution};
use kubexm_manifests::upgrade_path::{upgrade_path, PathError};
use kubexm_manifests::version::KubeVersion;
use kubexm_manifests::zone::Zone;

use crate::exit::InvalidConfig;

/// A further version of the path, resolved.
pub struct PathVersion {
    /// Its Kubernetes version.
    pub version: KubeVersion,
    /// Its cluster.yaml, as the bundle carries it.
    pub cluster_yaml: String,
    /// What it needs.
    pub resolution: Resolution,
}

impl PathVersion {
    /// Its `upgradePath` entry in `bundle.json`.
    pub fn record(&self) -> UpgradeStepRecord {
        let v = self.version.to_string();
        UpgradeStepRecord {
            cluster: upgrade_cluster_path(&v),
            kubernetes_version: v,
        }
    }
}

/// The versions between `from` (the cluster's, not bundled) and `target` (cluster.yaml's), one
/// per minor, each the newest patch of its minor in the catalog.
pub fn between(
    from: KubeVersion,
    target: KubeVersion,
    catalog: &Catalog,
) -> Result<Vec<KubeVersion>, InvalidConfig> {
    let known: Vec<KubeVersion> = catalog.kubernetes.keys().copied().collect();
    match upgrade_path(from, target, &known) {
        Ok(mut path) => {
            path.pop(); // the target: cluster.yaml's own version
            Ok(path)
        }
        Err(PathError::Missing { missing, .. }) => Err(InvalidConfig(format!(
            "--upgrade-from {from}: the upgrade to {target} goes one minor at a time and the catalog knows no {}; add it to a catalog file passed with --catalog",
            missing.join(", ")
        ))),
        Err(e) => Err(InvalidConfig(format!("--upgrade-from {from}: {e}"))),
    }
}

/// Each version of `versions` resolved from `cluster_yaml` (the bundle's cluster.yaml, inline
/// secrets already removed) with only `spec.kubernetes.version` changed; `origin` names it in
/// errors.
pub fn resolve_each(
    versions: &[KubeVersion],
    cluster_yaml: &str,
    origin: &str,
    catalog: &Catalog,
    zone: &Zone,
) -> Result<Vec<PathVersion>, InvalidConfig> {
    let mut out = Vec::new();
    for v in versions {
        let invalid = |e: String| {
            InvalidConfig(format!(
                "{origin} at Kubernetes {v} (--upgrade-from needs it on the path): {e}"
            ))
        };
        let cluster_yaml = at_kubernetes_version(cluster_yaml, origin, &v.to_string())
            .map_err(|e| invalid(e.to_string()))?;
        let valid =
            load_cluster_str(&cluster_yaml, origin, catalog).map_err(|e| invalid(e.to_string()))?;
        let resolution = resolve(&valid, catalog, zone).map_err(|problems| {
            invalid(
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
        out.push(PathVersion {
            version: *v,
            cluster_yaml,
            resolution,
        });
    }
    Ok(out)
}

/// `lists` (cluster.yaml's version) with the files and images of `others` added: one entry per
/// bundle path and per image reference, their roles and platforms merged, sorted as the
/// resolver sorts them. Addons and scripts are cluster.yaml's alone (they do not depend on the
/// version).
pub fn merge(lists: &mut Resolution, others: &[PathVersion]) {
    let binaries = others.iter().flat_map(|o| o.resolution.binaries.clone());
    lists.binaries = union_by(
        lists.binaries.drain(..).chain(binaries),
        |b| b.path.clone(),
        |e, b| e.roles.extend(b.roles),
    );
    lists
        .binaries
        .sort_by(|a, b| (&a.name, &a.version, a.arch).cmp(&(&b.name, &b.version, b.arch)));
    let images = others.iter().flat_map(|o| o.resolution.images.clone());
    lists.images = union_by(
        lists.images.drain(..).chain(images),
        |i| i.reference.clone(),
        |e, i| {
            e.roles.extend(i.roles);
            e.platforms.extend(i.platforms);
        },
    );
}

/// One item per key, in key order: a later item with a key already seen is folded into the
/// first with `fold`.
fn union_by<T>(
    items: impl Iterator<Item = T>,
    key: impl Fn(&T) -> String,
    fold: impl Fn(&mut T, T),
) -> Vec<T> {
    let mut out: BTreeMap<String, T> = BTreeMap::new();
    for item in items {
        match out.entry(key(&item)) {
            std::collections::btree_map::Entry::Occupied(mut e) => fold(e.get_mut(), item),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(item);
            }
        }
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().expect("version")
    }

    #[test]
    fn the_minors_between_use_the_catalogs_newest_patch() {
        let catalog = Catalog::builtin().expect("catalog");
        let known: Vec<KubeVersion> = catalog.kubernetes.keys().copied().collect();
        let target = *known.last().expect("a version");
        let from = KubeVersion {
            minor: target.minor - 3,
            patch: 0,
            ..target
        };
        let path = between(from, target, &catalog).expect("path");
        assert_eq!(path.len(), 2, "{path:?}");
        for (i, p) in path.iter().enumerate() {
            assert_eq!(p.minor, from.minor + 1 + i as u32);
            let newest = known
                .iter()
                .filter(|k| k.minor == p.minor)
                .max()
                .expect("known");
            assert_eq!(p, newest);
        }
        // Same minor: nothing in between.
        let patch_only = KubeVersion { patch: 0, ..target };
        assert!(between(patch_only, target, &catalog)
            .expect("patch")
            .is_empty());
        // A downgrade, another major, a minor the catalog lacks.
        let err = between(target, patch_only, &catalog).expect_err("down");
        assert!(err.0.contains("does not downgrade"), "{}", err.0);
        let err = between(v("v0.9.0"), target, &catalog).expect_err("major");
        assert!(err.0.starts_with("--upgrade-from v0.9.0"), "{}", err.0);
        let err = between(v("v1.1.0"), target, &catalog).expect_err("gap");
        assert!(
            err.0.contains("the catalog knows no v1.2.x") && err.0.contains("--catalog"),
            "{}",
            err.0
        );
    }
}
