//! Image pulls over the OCI distribution API (oci-client) into the content-addressed cache.
//!
//! Phase 1 resolves every image's manifests (index → the platforms the cluster needs → image
//! manifests); phase 2 fetches the union of their blobs, deduplicated across images, in parallel.
//! A tag's resolution is remembered in the cache (`refs/`), so a warm rebuild makes no request.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures_util::{stream, StreamExt, TryStreamExt};
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::cache::Cache;
use crate::credentials::Credentials;
use crate::fetch::Retry;
use crate::progress::Progress;
use kubexm_bundles::hash::sha256_hex;

const ACCEPT: &[&str] = &[
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
];

/// Why an image could not be pulled.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Bad reference.
    #[error("`{reference}` is not a valid image reference: {reason}")]
    Reference {
        /// Reference.
        reference: String,
        /// Parser message.
        reason: String,
    },
    /// The registry refused our credentials (or wants some).
    #[error("{reference}: the registry refused access ({detail}); set credentials for `{registry}` in spec.registry.auths or in your docker config.json")]
    Unauthorized {
        /// Reference.
        reference: String,
        /// Registry host.
        registry: String,
        /// Registry's message.
        detail: String,
    },
    /// Image missing.
    #[error("{reference}: not found at the registry ({detail})")]
    NotFound {
        /// Reference.
        reference: String,
        /// Detail.
        detail: String,
    },
    /// A platform the cluster needs is missing.
    #[error("{reference}: no {missing} image (it has: {available}); hosts of that arch need it")]
    Platform {
        /// Reference.
        reference: String,
        /// Needed platform.
        missing: String,
        /// What the image offers.
        available: String,
    },
    /// Malformed manifest.
    #[error("{reference}: unexpected manifest: {detail}")]
    Manifest {
        /// Reference.
        reference: String,
        /// What was wrong.
        detail: String,
    },
    /// Content did not match its digest.
    #[error("{reference}: blob {digest} failed verification after {attempts} tries: {detail}")]
    Blob {
        /// Reference.
        reference: String,
        /// Digest.
        digest: String,
        /// Tries.
        attempts: u32,
        /// Last error.
        detail: String,
    },
    /// Transport errors on every try.
    #[error("{reference}: giving up after {attempts} tries: {last}")]
    Exhausted {
        /// Reference.
        reference: String,
        /// Tries.
        attempts: u32,
        /// Last error.
        last: String,
    },
    /// Client construction.
    #[error("cannot set up the registry client: {0}")]
    Client(String),
    /// Cache I/O.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
}

/// One image to pull.
#[derive(Debug, Clone)]
pub struct ImageRequest {
    /// Where to pull from.
    pub source: String,
    /// Platforms to keep (`linux/amd64`).
    pub platforms: BTreeSet<String>,
}

/// A resolved, fully cached image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PulledImage {
    /// Digest of the top manifest or index as stored.
    pub digest: String,
    /// Its media type.
    pub media_type: String,
    /// Its size.
    pub size: u64,
    /// The registry's digest when the stored index was reduced to the needed platforms or
    /// converted from a Docker manifest list.
    pub source_digest: Option<String>,
    /// The OCI index wrapping a single Docker schema2 manifest in the layout: (digest, size).
    pub layout_wrapper: Option<(String, u64)>,
    /// Platforms kept.
    pub platforms: BTreeSet<String>,
    /// Every blob of the image (manifests, configs, layers), as `sha256:…`.
    pub blobs: BTreeSet<String>,
}

/// Registry access settings.
#[derive(Debug, Clone, Default)]
pub struct RegistryAccess {
    /// Hosts spoken to over plain HTTP.
    pub plain_http: Vec<String>,
    /// Extra CA certificates (PEM).
    pub ca_pems: Vec<Vec<u8>>,
    /// Accept any certificate.
    pub insecure_skip_verify: bool,
}

/// Pulls images into the cache.
pub struct Puller {
    client: Client,
    cache: Cache,
    retry: Retry,
    progress: Progress,
    credentials: Arc<Credentials>,
    jobs: usize,
}

struct BlobJob {
    digest: String,
    size: u64,
    reference: Reference,
    label: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    digest: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    os: String,
    architecture: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestDoc {
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct ConfigDoc {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
}

impl Puller {
    /// A puller; `jobs` bounds parallel manifest resolutions and blob downloads.
    pub fn new(
        cache: Cache,
        retry: Retry,
        progress: Progress,
        credentials: Credentials,
        access: &RegistryAccess,
        jobs: usize,
    ) -> Result<Self, ImageError> {
        let config = ClientConfig {
            protocol: if access.plain_http.is_empty() {
                ClientProtocol::Https
            } else {
                ClientProtocol::HttpsExcept(access.plain_http.clone())
            },
            accept_invalid_certificates: access.insecure_skip_verify,
            extra_root_certificates: access
                .ca_pems
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            platform_resolver: None,
            connect_timeout: Some(std::time::Duration::from_secs(20)),
            read_timeout: Some(std::time::Duration::from_secs(120)),
            max_concurrent_download: jobs.max(1),
            ..ClientConfig::default()
        };
        let client = Client::try_from(config).map_err(|e| ImageError::Client(e.to_string()))?;
        Ok(Self {
            client,
            cache,
            retry,
            progress,
            credentials: Arc::new(credentials),
            jobs: jobs.max(1),
        })
    }

    /// Pulls every image; returns them in request order.
    pub async fn pull_all(
        &self,
        requests: &[ImageRequest],
    ) -> Result<Vec<PulledImage>, ImageError> {
        let planned: Vec<(PulledImage, Vec<BlobJob>)> = stream::iter(requests)
            .map(|r| self.plan(r))
            .buffered(self.jobs)
            .try_collect()
            .await?;
        let mut unique: BTreeMap<String, BlobJob> = BTreeMap::new();
        let mut images = Vec::with_capacity(planned.len());
        for (image, jobs) in planned {
            for job in jobs {
                unique.entry(job.digest.clone()).or_insert(job);
            }
            images.push(image);
        }
        stream::iter(unique.into_values())
            .map(|job| self.blob(job))
            .buffer_unordered(self.jobs)
            .try_collect::<Vec<()>>()
            .await?;
        for (request, image) in requests.iter().zip(&images) {
            let record = serde_json::to_vec_pretty(image).unwrap_or_default();
            Cache::write_atomic(&self.cache.ref_path(&record_key(request)), &record)?;
        }
        Ok(images)
    }

    /// Resolves manifests of one image; returns the blobs still missing from the cache.
    async fn plan(
        &self,
        request: &ImageRequest,
    ) -> Result<(PulledImage, Vec<BlobJob>), ImageError> {
        if let Some(done) = self.cached(request) {
            return Ok((done, Vec::new()));
        }
        let reference: Reference =
            request
                .source
                .parse()
                .map_err(|e: oci_client::ParseError| ImageError::Reference {
                    reference: request.source.clone(),
                    reason: e.to_string(),
                })?;
        let auth = self.credentials.for_registry(reference.registry());
        self.retrying(&request.source, || async {
            self.client
                .auth(&reference, &auth, RegistryOperation::Pull)
                .await
                .map(|_| ())
        })
        .await?;
        let (bytes, digest) = self.manifest(&reference, &auth, &request.source).await?;
        let doc = parse_manifest(&bytes, &request.source)?;
        let mut blobs = BTreeSet::new();
        let mut jobs = Vec::new();
        let (top, platforms) = if let Some(children) = doc.manifests {
            let wanted: Vec<&Descriptor> = children
                .iter()
                .filter(|d| {
                    d.platform
                        .as_ref()
                        .is_some_and(|p| request.platforms.contains(&platform_name(p)))
                })
                .collect();
            let offered: BTreeSet<String> = children
                .iter()
                .filter_map(|d| d.platform.as_ref())
                .map(platform_name)
                .collect();
            if let Some(missing) = request.platforms.iter().find(|p| !offered.contains(*p)) {
                return Err(ImageError::Platform {
                    reference: request.source.clone(),
                    missing: missing.clone(),
                    available: offered.into_iter().collect::<Vec<_>>().join(", "),
                });
            }
            let mut kept = BTreeSet::new();
            for child in &wanted {
                let child_ref = reference.clone_with_digest(child.digest.clone());
                let (child_bytes, child_digest) =
                    self.manifest(&child_ref, &auth, &request.source).await?;
                self.store_manifest(&child_digest, &child_bytes, &request.source)?;
                blobs.insert(child_digest.clone());
                let child_doc = parse_manifest(&child_bytes, &request.source)?;
                self.collect_blobs(
                    &child_doc,
                    &child_ref,
                    &request.source,
                    &mut blobs,
                    &mut jobs,
                )?;
                if let Some(p) = &child.platform {
                    kept.insert(platform_name(p));
                }
            }
            let top = if wanted.len() == children.len() {
                (digest, bytes.to_vec(), None)
            } else {
                let reduced = reduce_index(&bytes, &wanted, &request.source)?;
                let reduced_digest = format!("sha256:{}", sha256_hex(&reduced));
                (reduced_digest, reduced, Some(digest))
            };
            (top, kept)
        } else {
            self.collect_blobs(&doc, &reference, &request.source, &mut blobs, &mut jobs)?;
            let platform = self
                .single_platform(&doc, &reference, &request.source)
                .await?;
            if let Some(missing) = request.platforms.iter().find(|p| **p != platform) {
                return Err(ImageError::Platform {
                    reference: request.source.clone(),
                    missing: missing.clone(),
                    available: platform,
                });
            }
            ((digest, bytes.to_vec(), None), BTreeSet::from([platform]))
        };
        let (mut top_digest, mut top_bytes, mut source_digest) = top;
        let mut media_type = media_type_of(&top_bytes);
        if media_type == IMAGE_MANIFEST_LIST_MEDIA_TYPE {
            // OCI tools only resolve OCI media types in index.json: store the list as an OCI
            // index with the very same children.
            top_bytes = retype_index(&top_bytes, &request.source)?;
            source_digest = source_digest.or(Some(top_digest));
            top_digest = format!("sha256:{}", sha256_hex(&top_bytes));
            media_type = OCI_IMAGE_INDEX_MEDIA_TYPE.to_owned();
        }
        self.store_manifest(&top_digest, &top_bytes, &request.source)?;
        blobs.insert(top_digest.clone());
        let layout_wrapper = if media_type == IMAGE_MANIFEST_MEDIA_TYPE {
            let platform = platforms.iter().next().cloned().unwrap_or_default();
            let wrapper = wrapper_index(&top_digest, top_bytes.len() as u64, &platform);
            let digest = format!("sha256:{}", sha256_hex(&wrapper));
            self.store_manifest(&digest, &wrapper, &request.source)?;
            blobs.insert(digest.clone());
            Some((digest, wrapper.len() as u64))
        } else {
            None
        };
        Ok((
            PulledImage {
                digest: top_digest,
                media_type,
                size: top_bytes.len() as u64,
                source_digest,
                layout_wrapper,
                platforms,
                blobs,
            },
            jobs,
        ))
    }

    /// A previous resolution whose every blob is still cached.
    fn cached(&self, request: &ImageRequest) -> Option<PulledImage> {
        let bytes = std::fs::read(self.cache.ref_path(&record_key(request))).ok()?;
        let image: PulledImage = serde_json::from_slice(&bytes).ok()?;
        image
            .blobs
            .iter()
            .all(|d| {
                d.strip_prefix("sha256:")
                    .is_some_and(|h| self.cache.contains(h))
            })
            .then_some(image)
    }

    async fn manifest(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        label: &str,
    ) -> Result<(bytes::Bytes, String), ImageError> {
        self.retrying(label, || async {
            self.client.pull_manifest_raw(reference, auth, ACCEPT).await
        })
        .await
    }

    fn store_manifest(&self, digest: &str, bytes: &[u8], label: &str) -> Result<(), ImageError> {
        let actual = sha256_hex(bytes);
        match digest.strip_prefix("sha256:") {
            Some(hex) if hex == actual => {
                self.cache.put_bytes(hex, bytes)?;
                Ok(())
            }
            _ => Err(ImageError::Manifest {
                reference: label.to_owned(),
                detail: format!(
                    "manifest digest {digest} does not match its content (sha256:{actual})"
                ),
            }),
        }
    }

    fn collect_blobs(
        &self,
        doc: &ManifestDoc,
        reference: &Reference,
        label: &str,
        blobs: &mut BTreeSet<String>,
        jobs: &mut Vec<BlobJob>,
    ) -> Result<(), ImageError> {
        let config = doc.config.as_ref().ok_or_else(|| ImageError::Manifest {
            reference: label.to_owned(),
            detail: "image manifest without config".into(),
        })?;
        for d in std::iter::once(config).chain(&doc.layers) {
            let hex = blob_hex(&d.digest, label)?;
            let hex = hex.as_str();
            blobs.insert(d.digest.clone());
            if !self.cache.contains(hex) {
                jobs.push(BlobJob {
                    digest: d.digest.clone(),
                    size: d.size,
                    reference: reference.clone(),
                    label: format!("{label} {}", &hex[..12.min(hex.len())]),
                });
            }
        }
        Ok(())
    }

    /// The platform of a single-manifest image, from its config blob.
    async fn single_platform(
        &self,
        doc: &ManifestDoc,
        reference: &Reference,
        label: &str,
    ) -> Result<String, ImageError> {
        let Some(config) = &doc.config else {
            return Err(ImageError::Manifest {
                reference: label.to_owned(),
                detail: "image manifest without config".into(),
            });
        };
        self.blob(BlobJob {
            digest: config.digest.clone(),
            size: config.size,
            reference: reference.clone(),
            label: format!("{label} config"),
        })
        .await?;
        let hex = blob_hex(&config.digest, label)?;
        let bytes = std::fs::read(self.cache.blob_path(&hex)).unwrap_or_default();
        let cfg: ConfigDoc = serde_json::from_slice(&bytes).map_err(|e| ImageError::Manifest {
            reference: label.to_owned(),
            detail: format!("config blob is not JSON: {e}"),
        })?;
        Ok(format!("{}/{}", cfg.os, cfg.architecture))
    }

    /// Downloads one blob into the cache, verifying its digest; retried with backoff.
    async fn blob(&self, job: BlobJob) -> Result<(), ImageError> {
        let hex_digest = blob_hex(&job.digest, &job.label)?;
        if self.cache.contains(&hex_digest) {
            return Ok(());
        }
        // A temp name per download: two images may fetch the same blob (a shared config) at once.
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self
            .cache
            .root()
            .join("tmp")
            .join(format!("{hex_digest}.{}.{seq}.blob", std::process::id()));
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt)).await;
            }
            let mut item = self.progress.item(&job.label, job.size);
            match self.blob_once(&job, &tmp, &mut item).await {
                Ok(actual) if actual == hex_digest => {
                    self.cache.commit(&tmp, &hex_digest)?;
                    item.finish("pulled blob");
                    return Ok(());
                }
                Ok(actual) => last = format!("content has sha256:{actual}"),
                Err(e) if is_permanent(&e) => return Err(classify(&job.label, e)),
                Err(e) => last = e.to_string(),
            }
            let _ = tokio::fs::remove_file(&tmp).await;
            tracing::warn!(blob = %job.digest, attempt, error = %last, "blob pull failed; retrying");
        }
        Err(ImageError::Blob {
            reference: job.label,
            digest: job.digest,
            attempts: self.retry.attempts,
            detail: last,
        })
    }

    async fn blob_once(
        &self,
        job: &BlobJob,
        tmp: &std::path::Path,
        item: &mut crate::progress::Item,
    ) -> Result<String, OciDistributionError> {
        let desc = job.digest.as_str();
        let mut s = self.client.pull_blob_stream(&job.reference, desc).await?;
        let mut file = tokio::fs::File::create(tmp)
            .await
            .map_err(OciDistributionError::IoError)?;
        let mut h = Sha256::new();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(OciDistributionError::IoError)?;
            h.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(OciDistributionError::IoError)?;
            item.inc(chunk.len() as u64);
        }
        file.sync_all()
            .await
            .map_err(OciDistributionError::IoError)?;
        Ok(hex::encode(h.finalize()))
    }

    /// Runs `op` with retries on transient errors; permanent ones are classified at once.
    async fn retrying<T, F, Fut>(&self, label: &str, op: F) -> Result<T, ImageError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, OciDistributionError>>,
    {
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt)).await;
            }
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if is_permanent(&e) => return Err(classify(label, e)),
                Err(e) => {
                    tracing::warn!(image = %label, attempt, error = %e, "registry request failed; retrying");
                    last = e.to_string();
                }
            }
        }
        Err(ImageError::Exhausted {
            reference: label.to_owned(),
            attempts: self.retry.attempts,
            last,
        })
    }
}

fn record_key(r: &ImageRequest) -> String {
    let platforms: Vec<&str> = r.platforms.iter().map(String::as_str).collect();
    format!("{}@{}", r.source, platforms.join("+"))
}

fn platform_name(p: &Platform) -> String {
    format!("{}/{}", p.os, p.architecture)
}

fn parse_manifest(bytes: &[u8], label: &str) -> Result<ManifestDoc, ImageError> {
    serde_json::from_slice(bytes).map_err(|e| ImageError::Manifest {
        reference: label.to_owned(),
        detail: format!("not a JSON manifest: {e}"),
    })
}

fn media_type_of(bytes: &[u8]) -> String {
    let doc: Option<ManifestDoc> = serde_json::from_slice(bytes).ok();
    match doc {
        Some(ManifestDoc {
            media_type: Some(m),
            ..
        }) => m,
        Some(ManifestDoc {
            manifests: Some(_), ..
        }) => OCI_IMAGE_INDEX_MEDIA_TYPE.to_owned(),
        _ => OCI_IMAGE_MEDIA_TYPE.to_owned(),
    }
}

/// The index with only the wanted children; every other field kept as it was.
fn reduce_index(bytes: &[u8], wanted: &[&Descriptor], label: &str) -> Result<Vec<u8>, ImageError> {
    let mut value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ImageError::Manifest {
            reference: label.to_owned(),
            detail: e.to_string(),
        })?;
    let keep: BTreeSet<&str> = wanted.iter().map(|d| d.digest.as_str()).collect();
    if let Some(list) = value.get_mut("manifests").and_then(|m| m.as_array_mut()) {
        list.retain(|m| {
            m.get("digest")
                .and_then(|d| d.as_str())
                .is_some_and(|d| keep.contains(d))
        });
    }
    serde_json::to_vec(&value).map_err(|e| ImageError::Manifest {
        reference: label.to_owned(),
        detail: e.to_string(),
    })
}

/// A Docker manifest list re-typed as an OCI image index (children unchanged).
fn retype_index(bytes: &[u8], label: &str) -> Result<Vec<u8>, ImageError> {
    let mut value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ImageError::Manifest {
            reference: label.to_owned(),
            detail: e.to_string(),
        })?;
    value["mediaType"] = serde_json::Value::from(OCI_IMAGE_INDEX_MEDIA_TYPE);
    serde_json::to_vec(&value).map_err(|e| ImageError::Manifest {
        reference: label.to_owned(),
        detail: e.to_string(),
    })
}

/// A one-entry OCI index pointing at a Docker schema2 manifest, so OCI layout readers find it.
/// The hex of a digest a registry sent, validated (`sha256:` + 64 lowercase hex) before any
/// cache path is built from it: `sha256:../../etc/passwd` would otherwise name a file outside
/// the cache, which the bundle would then carry.
fn blob_hex(digest: &str, label: &str) -> Result<String, ImageError> {
    kubexm_manifests::digest::Digest::parse(digest)
        .map(|d| d.hex().to_owned())
        .map_err(|e| ImageError::Manifest {
            reference: label.to_owned(),
            detail: e.to_string(),
        })
}

fn wrapper_index(digest: &str, size: u64, platform: &str) -> Vec<u8> {
    let (os, arch) = platform.split_once('/').unwrap_or(("linux", platform));
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE,
        "manifests": [{
            "mediaType": IMAGE_MANIFEST_MEDIA_TYPE,
            "digest": digest,
            "size": size,
            "platform": {"os": os, "architecture": arch},
        }],
    });
    serde_json::to_vec(&index).unwrap_or_default()
}

fn is_permanent(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => true,
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                format!("{:?}", e.code).as_str(),
                "ManifestUnknown" | "NameUnknown" | "BlobUnknown" | "Unauthorized" | "Denied"
            )
        }),
        OciDistributionError::ServerError { code, .. } => *code < 500 && *code != 429,
        _ => false,
    }
}

fn classify(label: &str, e: OciDistributionError) -> ImageError {
    let registry = label.split('/').next().unwrap_or(label).to_owned();
    match e {
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => ImageError::Unauthorized {
            reference: label.to_owned(),
            registry,
            detail: e.to_string(),
        },
        OciDistributionError::RegistryError { ref envelope, .. }
            if envelope
                .errors
                .iter()
                .any(|x| matches!(format!("{:?}", x.code).as_str(), "Unauthorized" | "Denied")) =>
        {
            ImageError::Unauthorized {
                reference: label.to_owned(),
                registry,
                detail: e.to_string(),
            }
        }
        other => ImageError::NotFound {
            reference: label.to_owned(),
            detail: other.to_string(),
        },
    }
}
