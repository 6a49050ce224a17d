//! Shared helpers: a valid base cluster and a catalog with test-only extra releases.

use kubexm_manifests::catalog::{Catalog, CatalogDoc};
use kubexm_manifests::load::parse_cluster;
use kubexm_manifests::model::ClusterFile;

/// A valid HA cluster: 3 masters (etcd), 1 worker, 1 registry host, internal haproxy.
pub const BASE: &str = r#"
apiVersion: kubexm.io/v1alpha1
kind: Cluster
metadata: {name: t}
spec:
  hosts:
    - {name: m1, address: 10.0.0.11}
    - {name: m2, address: 10.0.0.12}
    - {name: m3, address: 10.0.0.13}
    - {name: w1, address: 10.0.0.21}
    - {name: r1, address: 10.0.0.31}
  roleGroups:
    etcd: ["m[1:3]"]
    master: ["m[1:3]"]
    worker: [w1]
    registry: [r1]
  kubernetes: {version: v1.33.11}
  loadBalancer: {mode: internal}
"#;

pub fn base() -> ClusterFile {
    parse_cluster(BASE, "base.yaml").expect("the base cluster parses")
}

/// The built-in catalog, parsed once per test binary (it is ~10k lines of YAML) and cloned.
pub fn builtin() -> Catalog {
    static BUILTIN: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    BUILTIN
        .get_or_init(|| Catalog::builtin().expect("the built-in catalog loads"))
        .clone()
}

/// The built-in catalog plus an old release (v1.22.17, test-only: it exists so that rules about
/// versions older than the built-in catalog's can be exercised).
pub fn with_old_release() -> Catalog {
    let mut c = builtin();
    let doc: CatalogDoc = serde_saphyr::from_str(
        "kubernetes:\n  - {version: v1.22.17, pause: '3.5', coredns: v1.8.4, etcdImage: 3.5.0-0}\n",
    )
    .expect("override parses");
    c.merge(doc, "test override").expect("override merges");
    c
}
