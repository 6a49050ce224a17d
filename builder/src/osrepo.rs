//! OS package repositories for `spec.system.osReleases`: for each release, the distribution's
//! signed indexes are fetched and verified against its pinned archive keys, the dependency
//! closure of the packages KubeXM installs ([`kubexm_manifests::ospackages`]) is computed, and
//! every package file is downloaded into the cache, verified by the sha256 the signed index
//! gives. Chain of trust: archive key (pinned fingerprint) → `InRelease` / `repomd.xml.asc` →
//! sha256 of `Packages` / `primary.xml` → sha256 of each `.deb` / `.rpm`.
//!
//! Signed indexes are kept in the cache (`refs/osindex-*.json` → a blob) and reused for
//! `--os-index-max-age`, so a rebuild with a warm cache makes no request; they are verified again
//! every time they are used (signature, suite, `Valid-Until`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{stream, StreamExt, TryStreamExt};
use kubexm_bundles::manifest::{
    OsPackageRecord, OsRepoRecord, OsSourceRecord, SigningKeyRecord, REPOS_DIR,
};
use kubexm_bundles::pack::{Entry, Source};
use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::model::Arch;
use kubexm_manifests::ospackages;
use kubexm_manifests::osrelease::{Family, OsRelease};
use kubexm_manifests::validate::ValidCluster;
use kubexm_manifests::zone::Zone;
use kubexm_osrepo::deb::closure::{closure as deb_closure, ClosureProblem, Request, Universe};
use kubexm_osrepo::deb::index::{parse_packages, DebPackage};
use kubexm_osrepo::deb::release::Release;
use kubexm_osrepo::openpgp::{normalize_fingerprint, PgpError, RepoSigningKey, TrustedKeys};
use kubexm_osrepo::rpm::closure::{closure as rpm_closure, RpmUniverse};
use kubexm_osrepo::rpm::metadata::{parse_primary, parse_repomd, RpmPackage};
use serde::{Deserialize, Serialize};

use crate::cache::{Cache, CacheError};
use crate::fetch::{FetchError, Fetcher};

/// Largest decompressed index KubeXM reads (Debian 12 main amd64 is about 45 MB).
pub const MAX_INDEX: u64 = 512 << 20;

/// A `Vec` writer that refuses to grow past [`MAX_INDEX`] (a decompression bomb).
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() as u64 + buf.len() as u64 > MAX_INDEX {
            return Err(std::io::Error::other(format!(
                "larger than {MAX_INDEX} bytes once decompressed"
            )));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Why a release's repository cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum OsRepoError {
    /// The keyring file is missing or unreadable.
    #[error("{release}: cannot read the archive keyring `{path}` (install the distribution's keyring package, e.g. debian-archive-keyring, or set osReleases[].keyring in a catalog passed with --catalog)")]
    Keyring {
        /// Release.
        release: String,
        /// Path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The pinned keys cannot be used.
    #[error("{release}: the pinned archive keys cannot be used")]
    Keys {
        /// Release.
        release: String,
        /// Cause.
        #[source]
        source: Box<PgpError>,
    },
    /// A signed index whose signature is refused.
    #[error("{release}: the signed index `{url}` is refused")]
    Signature {
        /// Release.
        release: String,
        /// The index.
        url: String,
        /// Cause.
        #[source]
        source: Box<PgpError>,
    },
    /// A signed index that says something unacceptable.
    #[error("{release}: `{url}`: {why}")]
    Index {
        /// Release.
        release: String,
        /// The index.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// A download failed (an index or a package).
    #[error("{release}: cannot download {what}")]
    Fetch {
        /// Release.
        release: String,
        /// What (`the package index …`, `package haproxy=… (amd64)`).
        what: String,
        /// Cause.
        #[source]
        source: Box<FetchError>,
    },
    /// The closure cannot be completed.
    #[error("{release} ({arch}): {} problem{} with the OS packages:\n{}\nhint: check each name in the release's archive (e.g. `apt-cache policy NAME` on a {release} host), fix or remove it in spec.system.debs/rpms, or describe a repository that has it under osReleases in a catalog passed with --catalog", .problems.len(), if .problems.len() == 1 { "" } else { "s" }, .problems.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n"))]
    Closure {
        /// Release.
        release: String,
        /// Architecture.
        arch: String,
        /// Every problem.
        problems: Vec<ClosureProblem>,
    },
    /// The cache failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// One package file of a resolved repository.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepoPackage {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Architecture.
    pub arch: String,
    /// Download URL (after the zone's rewrites).
    pub url: String,
    /// sha256 from the signed index.
    pub sha256: String,
    /// Size from the index.
    pub size: u64,
    /// Path inside the repository (`pool/…deb`, `Packages/…rpm`).
    pub path: String,
    /// Why it is included.
    pub reason: String,
}

/// A verified upstream index.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceIndex {
    /// URL of the signed index.
    pub url: String,
    /// Its sha256.
    pub sha256: String,
    /// Pinned keys whose signatures verified.
    pub signed_by: Vec<String>,
}

/// The package data a repository's own index is written from.
#[derive(Debug, Clone)]
pub enum RepoIndex {
    /// Debian paragraphs.
    Deb(Vec<DebPackage>),
    /// `primary.xml` elements.
    Rpm(Vec<RpmPackage>),
}

/// One release's resolved repository.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRepo {
    /// Release name.
    pub release: String,
    /// `deb` / `rpm`.
    pub family: Family,
    /// `/etc/os-release` `ID`.
    pub os_id: String,
    /// `/etc/os-release` `VERSION_ID`.
    pub version_id: String,
    /// Verified upstream indexes.
    pub sources: Vec<SourceIndex>,
    /// Package files, sorted by name, arch.
    pub packages: Vec<RepoPackage>,
    /// For writing the repository's index.
    #[serde(skip)]
    pub index: RepoIndex,
}

impl ResolvedRepo {
    /// Total size of the package files.
    pub fn bytes(&self) -> u64 {
        self.packages.iter().map(|p| p.size).sum()
    }
}

/// How indexes are fetched.
#[derive(Debug, Clone, Copy)]
pub struct IndexPolicy {
    /// Reuse a cached signed index fetched less than this long ago (0: always fetch).
    pub max_age: Duration,
    /// Now, seconds since the epoch (signatures dated later are refused; `Valid-Until`).
    pub now: u32,
}

impl IndexPolicy {
    /// With the current time.
    pub fn new(max_age: Duration) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX))
            .unwrap_or(0);
        Self { max_age, now }
    }
}

/// Resolves the repository of every release in `spec.system.osReleases` (indexes only; nothing
/// from the pool is downloaded).
pub async fn resolve_all(
    cluster: &ValidCluster,
    catalog: &Catalog,
    zone: &Zone,
    fetcher: &Fetcher,
    cache: &Cache,
    policy: IndexPolicy,
) -> Result<Vec<ResolvedRepo>, OsRepoError> {
    let arches: BTreeSet<Arch> = cluster.file.spec.hosts.iter().map(|h| h.arch).collect();
    let mut out = Vec::new();
    for name in &cluster.file.spec.system.os_releases {
        // Validation guarantees every name is in the catalog.
        let Some(release) = catalog.os_releases.get(name) else {
            continue;
        };
        let needs = ospackages::for_cluster(cluster, release.family);
        let requests: Vec<Request> = needs
            .iter()
            .map(|n| Request {
                name: n.name.clone(),
                reason: n.reason.clone(),
            })
            .collect();
        let r = Resolver {
            release,
            zone,
            fetcher,
            cache,
            policy,
        };
        out.push(match release.family {
            Family::Deb => r.deb(&arches, &requests).await?,
            Family::Rpm => r.rpm(&arches, &requests).await?,
        });
    }
    Ok(out)
}

/// Downloads every package of `repos` into the cache (verified by sha256), `jobs` at a time.
pub async fn download(
    repos: &[ResolvedRepo],
    fetcher: &Fetcher,
    jobs: usize,
) -> Result<(), OsRepoError> {
    let mut seen = BTreeSet::new();
    let work: Vec<(&str, &RepoPackage)> = repos
        .iter()
        .flat_map(|r| r.packages.iter().map(move |p| (r.release.as_str(), p)))
        .filter(|(_, p)| seen.insert(p.sha256.clone()))
        .collect();
    stream::iter(work)
        .map(|(release, p)| {
            let fetcher = fetcher.clone();
            let (url, sum) = (p.url.clone(), p.sha256.clone());
            let label = format!("{release} {}={} ({})", p.name, p.version, p.arch);
            async move {
                let what = format!("package {}={} ({}) from `{url}`", p.name, p.version, p.arch);
                tokio::spawn(async move { fetcher.fetch(&url, &sum, &label).await })
                    .await
                    .map_err(|e| OsRepoError::Fetch {
                        release: release.to_owned(),
                        what: what.clone(),
                        source: Box::new(FetchError::Exhausted {
                            url: p.url.clone(),
                            attempts: 1,
                            last: format!("download task failed: {e}"),
                        }),
                    })?
                    .map_err(|source| OsRepoError::Fetch {
                        release: release.to_owned(),
                        what,
                        source: Box::new(source),
                    })
            }
        })
        .buffer_unordered(jobs.max(1))
        .try_collect::<Vec<PathBuf>>()
        .await
        .map(drop)
}

struct Resolver<'a> {
    release: &'a OsRelease,
    zone: &'a Zone,
    fetcher: &'a Fetcher,
    cache: &'a Cache,
    policy: IndexPolicy,
}

#[derive(Serialize, Deserialize)]
struct IndexRef {
    sha256: String,
    fetched: u64,
}

impl Resolver<'_> {
    fn name(&self) -> String {
        self.release.name.clone()
    }

    fn keys(&self) -> Result<TrustedKeys, OsRepoError> {
        let path = &self.release.keyring;
        let bytes = std::fs::read(path).map_err(|source| OsRepoError::Keyring {
            release: self.name(),
            path: path.clone(),
            source,
        })?;
        let pinned: Vec<String> = self
            .release
            .signing_keys
            .iter()
            .filter_map(|k| normalize_fingerprint(k))
            .collect();
        TrustedKeys::from_keyring(&bytes, path, &pinned).map_err(|source| OsRepoError::Keys {
            release: self.name(),
            source: Box::new(source),
        })
    }

    /// A signed index (or its detached signature): from the cache while younger than the
    /// policy's `max_age`, else downloaded and cached.
    async fn document(&self, url: &str) -> Result<Vec<u8>, OsRepoError> {
        let key = format!("osindex-{url}");
        let ref_path = self.cache.ref_path(&key);
        if !self.policy.max_age.is_zero() {
            if let Some(r) = std::fs::read(&ref_path)
                .ok()
                .and_then(|b| serde_json::from_slice::<IndexRef>(&b).ok())
            {
                let age = u64::from(self.policy.now).saturating_sub(r.fetched);
                let blob = self.cache.blob_path(&r.sha256);
                if age < self.policy.max_age.as_secs() {
                    if let Ok(bytes) = std::fs::read(&blob) {
                        if kubexm_osrepo::sha256_hex(&bytes) == r.sha256 {
                            return Ok(bytes);
                        }
                    }
                }
            }
        }
        let bytes = self
            .fetcher
            .get_document(
                url,
                ": check the repository URL in osReleases or your zone's mirror",
            )
            .await
            .map_err(|source| OsRepoError::Fetch {
                release: self.name(),
                what: format!("the signed index `{url}`"),
                source: Box::new(source),
            })?;
        let sha = kubexm_osrepo::sha256_hex(&bytes);
        self.cache.put_bytes(&sha, &bytes)?;
        let record = serde_json::to_vec(&IndexRef {
            sha256: sha,
            fetched: u64::from(self.policy.now),
        })
        .unwrap_or_default();
        Cache::write_atomic(&ref_path, &record)?;
        Ok(bytes)
    }

    /// An index file whose sha256 a signed index gives: through the content-addressed cache,
    /// then decompressed as `name` says (`.gz`, `.zst` or plain) within [`MAX_INDEX`].
    async fn index_file(
        &self,
        url: &str,
        name: &str,
        sha256: &str,
        label: &str,
    ) -> Result<String, OsRepoError> {
        let bad = |why: String| OsRepoError::Index {
            release: self.name(),
            url: url.to_owned(),
            why,
        };
        let path = self
            .fetcher
            .fetch(url, sha256, label)
            .await
            .map_err(|source| OsRepoError::Fetch {
                release: self.name(),
                what: format!("the index `{url}`"),
                source: Box::new(source),
            })?;
        let file = std::fs::File::open(&path)
            .map_err(|e| bad(format!("cannot read the cached copy: {e}")))?;
        if name.ends_with(".xz") {
            let mut input = std::io::BufReader::new(file);
            let mut out = Bounded(Vec::new());
            lzma_rs::xz_decompress(&mut input, &mut out)
                .map_err(|e| bad(format!("cannot decompress: {e}")))?;
            return String::from_utf8(out.0).map_err(|_| bad("not UTF-8 text".into()));
        }
        let reader: Box<dyn std::io::Read> = if name.ends_with(".gz") {
            Box::new(flate2::read::GzDecoder::new(file))
        } else if name.ends_with(".zst") {
            Box::new(zstd::stream::read::Decoder::new(file).map_err(|e| bad(e.to_string()))?)
        } else if name.ends_with(".bz2") || name.ends_with(".lzma") {
            return Err(bad("bzip2 and lzma indexes are not read; the repository must offer a gzip, xz, zstd or plain index".into()));
        } else {
            Box::new(file)
        };
        let mut text = String::new();
        reader
            .take(MAX_INDEX + 1)
            .read_to_string(&mut text)
            .map_err(|e| bad(format!("cannot decompress: {e}")))?;
        if text.len() as u64 > MAX_INDEX {
            return Err(bad(format!(
                "larger than {MAX_INDEX} bytes once decompressed"
            )));
        }
        Ok(text)
    }

    async fn deb(
        &self,
        arches: &BTreeSet<Arch>,
        requests: &[Request],
    ) -> Result<ResolvedRepo, OsRepoError> {
        let keys = self.keys()?;
        let mut sources = Vec::new();
        let mut packages: Vec<DebPackage> = Vec::new();
        let mut bases: Vec<String> = Vec::new();
        for repo in &self.release.repositories {
            let base = repo.url.trim_end_matches('/').to_owned();
            let suite = repo.suite.clone().unwrap_or_default();
            let dists = format!("{base}/dists/{suite}");
            let url = self.zone.rewrite_url(&format!("{dists}/InRelease"));
            let bytes = self.document(&url).await?;
            let bad = |why: String| OsRepoError::Index {
                release: self.name(),
                url: url.clone(),
                why,
            };
            let text = std::str::from_utf8(&bytes).map_err(|_| bad("not UTF-8 text".into()))?;
            let verified = keys
                .verify_clearsigned(&url, text, self.policy.now)
                .map_err(|source| OsRepoError::Signature {
                    release: self.name(),
                    url: url.clone(),
                    source: Box::new(source),
                })?;
            let release = Release::parse(&verified.text).map_err(|e| bad(format!("{e}")))?;
            // The signed file must be the suite asked for: a replayed index of another suite
            // (an older release) is refused.
            if release.codename.as_deref() != Some(suite.as_str())
                && release.suite.as_deref() != Some(suite.as_str())
            {
                return Err(bad(format!(
                    "it is the index of `{}`, not of `{suite}`",
                    release
                        .codename
                        .or(release.suite)
                        .unwrap_or_else(|| "an unnamed suite".into())
                )));
            }
            if let Some(until) = release.valid_until {
                if until < i64::from(self.policy.now) {
                    return Err(bad(format!(
                        "it expired on {} (Valid-Until); the mirror serves a stale index",
                        kubexm_osrepo::deb::release::format_rfc2822(until)
                    )));
                }
            }
            sources.push(SourceIndex {
                url: url.clone(),
                sha256: kubexm_osrepo::sha256_hex(&bytes),
                signed_by: verified.signers.clone(),
            });
            let source_no = bases.len();
            bases.push(base.clone());
            for comp in &repo.components {
                for arch in arches {
                    let arch = arch.as_str();
                    // A mirror need not carry every compression the Release lists: take the
                    // first one listed that it serves (each is verified by its sha256).
                    let candidates = [
                        format!("{comp}/binary-{arch}/Packages.gz"),
                        format!("{comp}/binary-{arch}/Packages.xz"),
                        format!("{comp}/binary-{arch}/Packages"),
                    ];
                    let listed: Vec<_> =
                        candidates.iter().filter_map(|c| release.file(c)).collect();
                    if listed.is_empty() {
                        return Err(bad(format!(
                            "it lists no {comp}/binary-{arch}/Packages(.gz|.xz): the suite has no {arch} packages in {comp}"
                        )));
                    }
                    let mut text = None;
                    for (i, entry) in listed.iter().enumerate() {
                        if entry.size > MAX_INDEX {
                            return Err(bad(format!(
                                "{} is {} bytes, more than KubeXM reads",
                                entry.path, entry.size
                            )));
                        }
                        let dir = entry.path.rsplit_once('/').map_or("", |(d, _)| d);
                        let index_url = if release.acquire_by_hash {
                            format!("{dists}/{dir}/by-hash/SHA256/{}", entry.sha256)
                        } else {
                            format!("{dists}/{}", entry.path)
                        };
                        let fetch_url = self.zone.rewrite_url(&index_url);
                        let label = format!("{} {suite} {}", self.release.name, entry.path);
                        match self
                            .index_file(&fetch_url, &entry.path, &entry.sha256, &label)
                            .await
                        {
                            Ok(t) => {
                                text = Some((fetch_url, t));
                                break;
                            }
                            Err(OsRepoError::Fetch { source, .. })
                                if matches!(*source, FetchError::Status { status: 404, .. })
                                    && i + 1 < listed.len() => {}
                            Err(e) => return Err(e),
                        }
                    }
                    let Some((fetch_url, text)) = text else {
                        return Err(bad(format!(
                            "no {comp}/binary-{arch} index could be fetched"
                        )));
                    };
                    let mut parsed = parse_packages(&text).map_err(|e| OsRepoError::Index {
                        release: self.name(),
                        url: fetch_url.clone(),
                        why: e.to_string(),
                    })?;
                    for p in &mut parsed {
                        p.source = source_no;
                    }
                    packages.extend(parsed);
                }
            }
        }
        let mut chosen: BTreeMap<(String, String, String), RepoPackage> = BTreeMap::new();
        let mut index: Vec<DebPackage> = Vec::new();
        for arch in arches {
            let universe = Universe::new(arch.as_str(), &packages);
            let selected =
                deb_closure(&universe, requests).map_err(|problems| OsRepoError::Closure {
                    release: self.name(),
                    arch: arch.to_string(),
                    problems,
                })?;
            for s in selected {
                let p = s.package;
                let key = (p.name.clone(), p.version.to_string(), p.arch.clone());
                if chosen.contains_key(&key) {
                    continue;
                }
                chosen.insert(
                    key,
                    RepoPackage {
                        name: p.name.clone(),
                        version: p.version.to_string(),
                        arch: p.arch.clone(),
                        url: self
                            .zone
                            .rewrite_url(&format!("{}/{}", bases[p.source], p.filename)),
                        sha256: p.sha256.clone(),
                        size: p.size,
                        path: kubexm_osrepo::deb::repo::pool_path(p),
                        reason: s.reason.clone(),
                    },
                );
                index.push(p.clone());
            }
        }
        Ok(ResolvedRepo {
            release: self.name(),
            family: Family::Deb,
            os_id: self.release.os_id.clone(),
            version_id: self.release.version_id.clone(),
            sources,
            packages: chosen.into_values().collect(),
            index: RepoIndex::Deb(index),
        })
    }

    async fn rpm(
        &self,
        arches: &BTreeSet<Arch>,
        requests: &[Request],
    ) -> Result<ResolvedRepo, OsRepoError> {
        let keys = self.keys()?;
        let mut sources = Vec::new();
        let mut packages: Vec<RpmPackage> = Vec::new();
        let mut bases: Vec<String> = Vec::new();
        for repo in &self.release.repositories {
            for arch in arches {
                let base = repo
                    .url
                    .trim_end_matches('/')
                    .replace("{uname_arch}", arch.uname())
                    .replace("{arch}", arch.as_str());
                let url = self
                    .zone
                    .rewrite_url(&format!("{base}/repodata/repomd.xml"));
                let asc_url = format!("{url}.asc");
                let repomd = self.document(&url).await?;
                let asc = self.document(&asc_url).await?;
                let signed_by = keys
                    .verify_detached(&url, &repomd, &asc, self.policy.now)
                    .map_err(|source| OsRepoError::Signature {
                        release: self.name(),
                        url: url.clone(),
                        source: Box::new(source),
                    })?;
                let bad = |why: String| OsRepoError::Index {
                    release: self.name(),
                    url: url.clone(),
                    why,
                };
                let text =
                    std::str::from_utf8(&repomd).map_err(|_| bad("not UTF-8 text".into()))?;
                let data = parse_repomd(text).map_err(|e| bad(e.to_string()))?;
                let primary = data
                    .iter()
                    .find(|d| d.kind == "primary")
                    .ok_or_else(|| bad("it lists no primary metadata".into()))?;
                sources.push(SourceIndex {
                    url: url.clone(),
                    sha256: kubexm_osrepo::sha256_hex(&repomd),
                    signed_by,
                });
                let primary_url = self.zone.rewrite_url(&format!("{base}/{}", primary.href));
                let label = format!("{} {}", self.release.name, primary.href);
                let text = self
                    .index_file(&primary_url, &primary.href, &primary.sha256, &label)
                    .await?;
                let source_no = bases.len();
                bases.push(base.clone());
                let mut parsed = parse_primary(&text).map_err(|e| OsRepoError::Index {
                    release: self.name(),
                    url: primary_url.clone(),
                    why: e.to_string(),
                })?;
                for p in &mut parsed {
                    p.source = source_no;
                }
                packages.extend(parsed);
            }
        }
        let mut chosen: BTreeMap<(String, String, String), RepoPackage> = BTreeMap::new();
        let mut index = Vec::new();
        for arch in arches {
            let universe = RpmUniverse::new(arch.uname(), &packages);
            let selected =
                rpm_closure(&universe, requests).map_err(|problems| OsRepoError::Closure {
                    release: self.name(),
                    arch: arch.uname().to_owned(),
                    problems,
                })?;
            for (p, reason) in selected {
                let key = (p.name.clone(), p.evr.to_string(), p.arch.clone());
                if chosen.contains_key(&key) {
                    continue;
                }
                chosen.insert(
                    key,
                    RepoPackage {
                        name: p.name.clone(),
                        version: p.evr.to_string(),
                        arch: p.arch.clone(),
                        url: self
                            .zone
                            .rewrite_url(&format!("{}/{}", bases[p.source], p.location)),
                        sha256: p.sha256.clone(),
                        size: p.size,
                        path: kubexm_osrepo::rpm::repo::package_path(p),
                        reason,
                    },
                );
                index.push(p.clone());
            }
        }
        Ok(ResolvedRepo {
            release: self.name(),
            family: Family::Rpm,
            os_id: self.release.os_id.clone(),
            version_id: self.release.version_id.clone(),
            sources,
            packages: chosen.into_values().collect(),
            index: RepoIndex::Rpm(index),
        })
    }
}

/// Path of the bundle's repository key, ASCII-armored.
pub const KEY_ASC: &str = "repos/kubexm-repo-key.asc";
/// Path of the bundle's repository key, binary (apt's `signed-by`).
pub const KEY_GPG: &str = "repos/kubexm-repo-key.gpg";

/// The bundle entries and `bundle.json` records of `repos`: every package file from the cache,
/// each repository's own index signed with a key generated now (its secret half is dropped when
/// this returns), and the public key.
pub fn bundle_parts(
    repos: &[ResolvedRepo],
    cache: &Cache,
    cluster: &str,
    at: u32,
) -> Result<(Vec<Entry>, Vec<OsRepoRecord>), anyhow::Error> {
    use anyhow::Context as _;
    if repos.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let key = RepoSigningKey::generate(&format!("KubeXM bundle repository key ({cluster})"), at)
        .context("Failed to generate the bundle's repository signing key")?;
    let armored = key.public_armored()?;
    let binary = key.public_binary()?;
    let signing_key = SigningKeyRecord {
        fingerprint: key.fingerprint(),
        armored: KEY_ASC.to_owned(),
        binary: KEY_GPG.to_owned(),
    };
    let mut entries = vec![
        Entry {
            path: KEY_ASC.to_owned(),
            source: Source::Bytes(armored.into_bytes()),
            sha256: None,
            mode: 0o644,
        },
        Entry {
            path: KEY_GPG.to_owned(),
            source: Source::Bytes(binary),
            sha256: None,
            mode: 0o644,
        },
    ];
    let mut records = Vec::new();
    for r in repos {
        let dir = format!("{REPOS_DIR}/{}", r.release);
        let label = format!("KubeXM {} ({cluster})", r.release);
        let index_files = match &r.index {
            RepoIndex::Deb(pkgs) => {
                let refs: Vec<&DebPackage> = pkgs.iter().collect();
                kubexm_osrepo::deb::repo::index_files(&refs, &label, &key, at)
                    .with_context(|| format!("Failed to write the {} repository index", r.release))?
                    .files
            }
            RepoIndex::Rpm(pkgs) => {
                let refs: Vec<&RpmPackage> = pkgs.iter().collect();
                kubexm_osrepo::rpm::repo::repodata(&refs, &key, at).with_context(|| {
                    format!("Failed to write the {} repository metadata", r.release)
                })?
            }
        };
        for (path, bytes) in index_files {
            entries.push(Entry {
                path: format!("{dir}/{path}"),
                source: Source::Bytes(bytes),
                sha256: None,
                mode: 0o644,
            });
        }
        let mut seen = BTreeSet::new();
        let mut packages = Vec::new();
        for p in &r.packages {
            let path = format!("{dir}/{}", p.path);
            if !seen.insert(path.clone()) {
                continue;
            }
            entries.push(Entry {
                path: path.clone(),
                source: Source::Stored(cache.blob_path(&p.sha256)),
                sha256: Some(p.sha256.clone()),
                mode: 0o644,
            });
            packages.push(OsPackageRecord {
                name: p.name.clone(),
                version: p.version.clone(),
                arch: p.arch.clone(),
                path,
                sha256: p.sha256.clone(),
                size: p.size,
                url: p.url.clone(),
                reason: p.reason.clone(),
            });
        }
        records.push(OsRepoRecord {
            release: r.release.clone(),
            family: r.family.as_str().to_owned(),
            os_id: r.os_id.clone(),
            version_id: r.version_id.clone(),
            path: dir,
            signing_key: signing_key.clone(),
            sources: r
                .sources
                .iter()
                .map(|s| OsSourceRecord {
                    url: s.url.clone(),
                    sha256: s.sha256.clone(),
                    signed_by: s.signed_by.clone(),
                })
                .collect(),
            packages,
        });
    }
    Ok((entries, records))
}
