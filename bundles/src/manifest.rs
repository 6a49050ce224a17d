//! `bundle.json`: what a bundle holds. Written by `kubexm-build bundle`, read by `verify` and by
//! `kubexm-install`. Fields are only ever added within a `formatVersion`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Name of the manifest entry (always the first entry of the tar stream).
pub const MANIFEST_PATH: &str = "bundle.json";
/// Name of the checksum list (always the second entry): `sha256sum -c` format.
pub const SUMS_PATH: &str = "SHA256SUMS";
/// The cluster description the bundle was built from.
pub const CLUSTER_PATH: &str = "cluster.yaml";
/// The catalog override the bundle was built with (`--catalog`), when there was one; the
/// installer validates cluster.yaml against the built-in catalog merged with it.
pub const CATALOG_PATH: &str = "catalog.yaml";
/// Root of the OCI image layout.
pub const IMAGES_DIR: &str = "images";
/// Root of the further versions' cluster descriptions: `upgrade/<version>/cluster.yaml`.
pub const UPGRADE_DIR: &str = "upgrade";
/// Root of the OS package repositories: `repos/<release>/`.
pub const REPOS_DIR: &str = "repos";

/// The whole `bundle.json`: the first entry of every bundle. The bundle format (entry order,
/// tree, `SHA256SUMS`, reproducibility and verification rules) is specified in `bundles/README.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BundleManifest {
    /// [`crate::FORMAT_VERSION`].
    pub format_version: u32,
    /// Version of the tool that wrote the bundle.
    pub tool_version: String,
    /// Cluster name (`metadata.name`).
    pub cluster: String,
    /// Kubernetes version.
    pub kubernetes_version: String,
    /// Zone the sources were resolved for.
    pub zone: String,
    /// Architectures the bundle serves.
    pub arches: BTreeSet<String>,
    /// Creation time (seconds since the epoch; `SOURCE_DATE_EPOCH` when set).
    pub created: u64,
    /// Downloaded files.
    pub files: Vec<FileRecord>,
    /// Images in `images/` (an OCI image layout).
    pub images: Vec<ImageRecord>,
    /// formatVersion 2: the size in bytes of every file `SHA256SUMS` lists except `bundle.json`
    /// itself, by path. Pinned up front so that a reader refuses an entry whose tar header
    /// says otherwise before reading it, and knows the space the bundle takes on disk before
    /// writing a byte. Written by [`crate::pack()`] (whatever the caller put here); empty in
    /// formatVersion 1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sizes: BTreeMap<String, u64>,
    /// OS package repositories under `repos/`, one per release of `spec.system.osReleases`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub os_repos: Vec<OsRepoRecord>,
    /// Further Kubernetes versions the bundle holds, for an upgrade path (`kubexm-build bundle
    /// --upgrade-from`): each intermediate minor between a cluster's version and
    /// `kubernetesVersion`, oldest first, with its own cluster.yaml. Their files and images are
    /// in `files` and `images` with the others (a blob two versions share is stored once).
    /// Optional and absent when empty, so a bundle of one version reads as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrade_path: Vec<UpgradeStepRecord>,
}

/// One further version of a bundle built for an upgrade path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpgradeStepRecord {
    /// Kubernetes version (`v1.30.14`).
    pub kubernetes_version: String,
    /// Its cluster.yaml in the bundle: always [`upgrade_cluster_path`] of the version.
    pub cluster: String,
}

/// Where a bundle keeps the cluster.yaml of a further version of its upgrade path.
pub fn upgrade_cluster_path(version: &str) -> String {
    format!("{UPGRADE_DIR}/{version}/{CLUSTER_PATH}")
}

/// One OS package repository (`repos/<release>/`), signed with a key made for this bundle.
///
/// Debian family: a flat repository (`deb [signed-by=KEY] URL/repos/<release> ./`) with
/// `InRelease`, `Release`, `Release.gpg`, `Packages`, `Packages.gz` and `pool/*.deb`. RPM family:
/// `repodata/repomd.xml` (+ `.asc`), `repodata/<sha256>-primary.xml.gz` and `Packages/*.rpm`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OsRepoRecord {
    /// Release name (`debian-12`).
    pub release: String,
    /// `deb` or `rpm`.
    pub family: String,
    /// `ID` of `/etc/os-release` on the nodes it serves.
    pub os_id: String,
    /// `VERSION_ID` of `/etc/os-release` (or its major part) on the nodes it serves.
    pub version_id: String,
    /// The repository's directory in the bundle (`repos/debian-12`).
    pub path: String,
    /// The key the repository is signed with.
    pub signing_key: SigningKeyRecord,
    /// The distribution indexes the packages were taken from, each verified.
    pub sources: Vec<OsSourceRecord>,
    /// Every package file in the repository.
    pub packages: Vec<OsPackageRecord>,
}

/// The public half of the key a bundle's repositories are signed with (the secret half is never
/// stored anywhere).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SigningKeyRecord {
    /// OpenPGP fingerprint, upper-case hex.
    pub fingerprint: String,
    /// ASCII-armored public key in the bundle (dnf's `gpgkey=`).
    pub armored: String,
    /// Binary public key in the bundle (apt's `signed-by=`).
    pub binary: String,
}

/// A distribution index the repository was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OsSourceRecord {
    /// The signed index (`…/dists/bookworm/InRelease`, `…/repodata/repomd.xml`), after the
    /// zone's rewrites.
    pub url: String,
    /// sha256 of the signed index as fetched.
    pub sha256: String,
    /// Fingerprints of the pinned archive keys whose signatures verified.
    pub signed_by: Vec<String>,
}

/// One package file of an OS repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OsPackageRecord {
    /// Package name.
    pub name: String,
    /// Version as the distribution writes it.
    pub version: String,
    /// Architecture (`amd64`, `all`, `x86_64`, `noarch`).
    pub arch: String,
    /// Path in the bundle.
    pub path: String,
    /// sha256 (also in the distribution's signed index).
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Where it was downloaded from.
    pub url: String,
    /// Why it is there (`requested by node preparation`, `haproxy=… depends on libc6 (>= 2.34)`).
    pub reason: String,
}

/// One file under `files/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileRecord {
    /// Component name.
    pub name: String,
    /// Component version.
    pub version: String,
    /// Architecture.
    pub arch: String,
    /// Path inside the bundle (`files/<name>/<version>/<arch>/<file>`).
    pub path: String,
    /// sha256 hex of the content.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Where it was downloaded from.
    pub url: String,
    /// Roles that need it.
    pub roles: BTreeSet<String>,
}

/// One image in the OCI layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageRecord {
    /// Canonical reference; also the `org.opencontainers.image.ref.name` annotation in index.json.
    pub reference: String,
    /// Where it was pulled from.
    pub source: String,
    /// Digest of the top manifest or index stored in the layout (`sha256:…`).
    pub digest: String,
    /// Digest at the source registry when it differs (an index reduced to the needed platforms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_digest: Option<String>,
    /// When the top manifest is a Docker schema2 manifest, the one-entry OCI index that
    /// `images/index.json` points at instead (containers/image tools only resolve OCI media
    /// types there). The manifest itself keeps its digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout_digest: Option<String>,
    /// Media type of the top manifest or index.
    pub media_type: String,
    /// Size of the top manifest or index.
    pub size: u64,
    /// Platforms kept (`linux/amd64`).
    pub platforms: BTreeSet<String>,
    /// Roles that pull it.
    pub roles: BTreeSet<String>,
}
