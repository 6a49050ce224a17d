//! The OCI image layout of a bundle closes: every descriptor reachable from `images/index.json`
//! names a blob the bundle holds, with the descriptor's size (the blob's content already matched
//! its name, a sha256, when it was read), every manifest and index on the way parses, and
//! `bundle.json`'s images and `index.json` agree. `verify` (so `unpack`) runs [`check`] after the
//! last entry; a layout that does not close never reaches `seed` or a registry.
//!
//! Every digest is parsed into a [`Digest`] before it is looked up: nothing here, or in the
//! code that reads blobs by these digests, builds a path from an unvalidated string.

use std::collections::{BTreeMap, BTreeSet};

use kubexm_manifests::digest::{Digest, DigestError};
use kubexm_manifests::display::Untrusted;
use serde::Deserialize;
use thiserror::Error;

use crate::manifest::ImageRecord;

/// Annotation naming an image in `index.json`.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// Largest manifest or index read (the distribution spec lets registries refuse larger ones).
pub const MAX_MANIFEST_SIZE: u64 = 4 << 20;
/// Deepest nesting followed: index → index → manifest → blob is already more than registries
/// serve.
pub const MAX_DEPTH: usize = 4;

/// Media types whose blobs are manifests (config and layers below them).
pub const MANIFEST_TYPES: [&str; 2] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];
/// Media types whose blobs are indexes (manifests below them).
pub const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// A way the layout does not close. `at` says where the descriptor was found
/// (`index.json manifests[0]`, `sha256:… layers[2]`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LayoutProblem {
    /// `index.json` is not a JSON image index.
    #[error("`images/index.json` is not an OCI image index: {}", Untrusted(.0))]
    Index(String),
    /// A manifest or index blob does not parse.
    #[error("{at}: manifest {digest} is not a valid manifest or index: {}", Untrusted(.detail))]
    Manifest {
        /// Where it is referenced.
        at: String,
        /// Its digest.
        digest: Digest,
        /// The parser's message.
        detail: String,
    },
    /// A descriptor's digest is not `sha256:<64 hex>`.
    #[error("{at}: bad digest")]
    Digest {
        /// Where.
        at: String,
        /// Why.
        #[source]
        source: DigestError,
    },
    /// A descriptor has no media type.
    #[error("{at}: descriptor of {digest} has no mediaType")]
    NoMediaType {
        /// Where.
        at: String,
        /// The digest.
        digest: Digest,
    },
    /// The blob a descriptor names is not in the bundle.
    #[error("{at}: blob {digest} is not in the bundle")]
    Missing {
        /// Where.
        at: String,
        /// The digest.
        digest: Digest,
    },
    /// The blob is there with another size.
    #[error("{at}: descriptor of {digest} says {declared} bytes, the blob has {actual}")]
    Size {
        /// Where.
        at: String,
        /// The digest.
        digest: Digest,
        /// The descriptor's size.
        declared: u64,
        /// The blob's.
        actual: u64,
    },
    /// A manifest or index larger than [`MAX_MANIFEST_SIZE`], or not kept for reading.
    #[error("{at}: manifest {digest} is {size} bytes; at most {MAX_MANIFEST_SIZE} are read")]
    ManifestTooLarge {
        /// Where.
        at: String,
        /// The digest.
        digest: Digest,
        /// Its size.
        size: u64,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("{at}: manifests nest deeper than {MAX_DEPTH} levels")]
    TooDeep {
        /// Where.
        at: String,
    },
    /// An image of `bundle.json` that `index.json` does not name.
    #[error("`bundle.json` image `{}` is not in `images/index.json`", Untrusted(.reference))]
    NotInIndex {
        /// The reference.
        reference: String,
    },
    /// `bundle.json` and `index.json` name different manifests for an image.
    #[error("image `{}`: `bundle.json` says {bundle}, `images/index.json` {index}", Untrusted(.reference))]
    IndexDigest {
        /// The reference.
        reference: String,
        /// In `bundle.json` (`layoutDigest`, else `digest`).
        bundle: String,
        /// In `index.json`.
        index: Digest,
    },
    /// A digest or size of a `bundle.json` image that the layout does not back.
    #[error("image `{}`: {detail}", Untrusted(.reference))]
    Image {
        /// The reference.
        reference: String,
        /// What is wrong.
        detail: String,
    },
    /// A blob whose file name is not a sha256 hex digest.
    #[error("`{}` is not named by a sha256 digest", Untrusted(.path))]
    BlobName {
        /// The entry.
        path: String,
    },
    /// A blob whose content does not hash to its name.
    #[error("`{}` holds content with sha256 {actual}, not the digest it is named by", Untrusted(.path))]
    BlobContent {
        /// The entry.
        path: String,
        /// The content's sha256.
        actual: String,
    },
}

/// The blobs of a layout, looked up by validated digest.
pub trait Blobs {
    /// The blob's size, if the layout has it.
    fn size(&self, digest: &Digest) -> Option<u64>;
    /// The content of a blob of at most [`MAX_MANIFEST_SIZE`] bytes, if it was kept.
    fn content(&self, digest: &Digest) -> Option<&[u8]>;
}

/// Blobs held in memory: sizes of all, content of the small JSON ones (what [`crate::verify()`]
/// keeps while streaming).
#[derive(Debug, Clone, Default)]
pub struct MemoryBlobs {
    sizes: BTreeMap<Digest, u64>,
    content: BTreeMap<Digest, Vec<u8>>,
}

impl MemoryBlobs {
    /// Records a blob; `content` only for blobs that may be manifests.
    pub fn insert(&mut self, digest: Digest, size: u64, content: Option<Vec<u8>>) {
        self.sizes.insert(digest.clone(), size);
        if let Some(c) = content {
            self.content.insert(digest, c);
        }
    }

    /// Bytes of content kept.
    pub fn kept_bytes(&self) -> usize {
        self.content.values().map(Vec::len).sum()
    }
}

impl Blobs for MemoryBlobs {
    fn size(&self, digest: &Digest) -> Option<u64> {
        self.sizes.get(digest).copied()
    }

    fn content(&self, digest: &Digest) -> Option<&[u8]> {
        self.content.get(digest).map(Vec::as_slice)
    }
}

/// Whether a blob of `size` bytes starting with `head` may be a manifest or index worth keeping.
pub fn may_be_manifest(size: u64, head: &[u8]) -> bool {
    size <= MAX_MANIFEST_SIZE
        && head
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{')
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDescriptor {
    #[serde(default)]
    media_type: Option<String>,
    digest: String,
    size: u64,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDoc {
    #[serde(default)]
    manifests: Option<Vec<RawDescriptor>>,
    #[serde(default)]
    config: Option<RawDescriptor>,
    #[serde(default)]
    layers: Vec<RawDescriptor>,
}

struct Walker<'a> {
    blobs: &'a dyn Blobs,
    /// Manifests and indexes already followed.
    seen: BTreeSet<Digest>,
}

/// Checks that the layout closes and agrees with `images` (see the module docs).
///
/// # Errors
///
/// The first [`LayoutProblem`] found.
pub fn check(
    images: &[ImageRecord],
    index_json: &[u8],
    blobs: &dyn Blobs,
) -> Result<(), LayoutProblem> {
    let index: RawDoc =
        serde_json::from_slice(index_json).map_err(|e| LayoutProblem::Index(e.to_string()))?;
    let Some(top) = index.manifests else {
        return Err(LayoutProblem::Index("no `manifests` list".into()));
    };
    let mut walker = Walker {
        blobs,
        seen: BTreeSet::new(),
    };
    let mut by_name: BTreeMap<&str, Digest> = BTreeMap::new();
    for (i, d) in top.iter().enumerate() {
        let at = format!("`images/index.json` manifests[{i}]");
        let digest = walker.descriptor(&at, d, 1)?;
        if let Some(name) = d.annotations.get(REF_NAME) {
            by_name.insert(name, digest);
        }
    }
    for image in images {
        let reference = || image.reference.clone();
        let listed = image.layout_digest.as_ref().unwrap_or(&image.digest);
        let Some(in_index) = by_name.get(image.reference.as_str()) else {
            return Err(LayoutProblem::NotInIndex {
                reference: reference(),
            });
        };
        if in_index.to_string() != *listed {
            return Err(LayoutProblem::IndexDigest {
                reference: reference(),
                bundle: listed.clone(),
                index: in_index.clone(),
            });
        }
        let image_err = |detail: String| LayoutProblem::Image {
            reference: reference(),
            detail,
        };
        let digest = Digest::parse(&image.digest).map_err(|e| image_err(e.to_string()))?;
        match blobs.size(&digest) {
            None => return Err(image_err(format!("manifest {digest} is not in the layout"))),
            Some(size) if size != image.size => {
                return Err(image_err(format!(
                    "`bundle.json` gives manifest {digest} size {}, the blob has {size}",
                    image.size
                )))
            }
            Some(_) => {}
        }
        if image.layout_digest.is_some() {
            // The wrapping index must hold the manifest itself.
            let wrapper = blobs.content(in_index).unwrap_or_default();
            let doc: RawDoc = serde_json::from_slice(wrapper)
                .map_err(|e| image_err(format!("layout index {in_index} does not parse: {e}")))?;
            let holds = doc
                .manifests
                .unwrap_or_default()
                .iter()
                .any(|d| d.digest == image.digest);
            if !holds {
                return Err(image_err(format!(
                    "layout index {in_index} does not hold manifest {digest}"
                )));
            }
        }
    }
    Ok(())
}

impl Walker<'_> {
    /// Checks one descriptor and, for manifests and indexes, what it references.
    fn descriptor(
        &mut self,
        at: &str,
        d: &RawDescriptor,
        depth: usize,
    ) -> Result<Digest, LayoutProblem> {
        let digest = Digest::parse(&d.digest).map_err(|source| LayoutProblem::Digest {
            at: at.to_owned(),
            source,
        })?;
        let Some(actual) = self.blobs.size(&digest) else {
            return Err(LayoutProblem::Missing {
                at: at.to_owned(),
                digest,
            });
        };
        if actual != d.size {
            return Err(LayoutProblem::Size {
                at: at.to_owned(),
                digest,
                declared: d.size,
                actual,
            });
        }
        let Some(media_type) = d.media_type.as_deref() else {
            return Err(LayoutProblem::NoMediaType {
                at: at.to_owned(),
                digest,
            });
        };
        let nested = MANIFEST_TYPES.contains(&media_type) || INDEX_TYPES.contains(&media_type);
        if nested && self.seen.insert(digest.clone()) {
            if depth > MAX_DEPTH {
                return Err(LayoutProblem::TooDeep { at: at.to_owned() });
            }
            self.nested(at, &digest, actual, depth)?;
        }
        Ok(digest)
    }

    fn nested(
        &mut self,
        at: &str,
        digest: &Digest,
        size: u64,
        depth: usize,
    ) -> Result<(), LayoutProblem> {
        let Some(bytes) = self.blobs.content(digest) else {
            return Err(LayoutProblem::ManifestTooLarge {
                at: at.to_owned(),
                digest: digest.clone(),
                size,
            });
        };
        let doc: RawDoc = serde_json::from_slice(bytes).map_err(|e| LayoutProblem::Manifest {
            at: at.to_owned(),
            digest: digest.clone(),
            detail: e.to_string(),
        })?;
        for (i, child) in doc.manifests.iter().flatten().enumerate() {
            self.descriptor(&format!("{digest} manifests[{i}]"), child, depth + 1)?;
        }
        if let Some(config) = &doc.config {
            self.descriptor(&format!("{digest} config"), config, depth + 1)?;
        }
        for (i, layer) in doc.layers.iter().enumerate() {
            self.descriptor(&format!("{digest} layers[{i}]"), layer, depth + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::sha256_hex;

    fn digest(bytes: &[u8]) -> Digest {
        Digest::from_hex(&sha256_hex(bytes)).expect("hex")
    }

    fn desc(media_type: &str, bytes: &[u8]) -> String {
        format!(
            r#"{{"mediaType":"{media_type}","digest":"{}","size":{}}}"#,
            digest(bytes),
            bytes.len()
        )
    }

    struct Fixture {
        blobs: MemoryBlobs,
        index: Vec<u8>,
        images: Vec<ImageRecord>,
    }

    fn fixture() -> Fixture {
        let layer = b"layer bytes".to_vec();
        let config = br#"{"architecture":"amd64"}"#.to_vec();
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"{m}","config":{c},"layers":[{l}]}}"#,
            m = MANIFEST_TYPES[0],
            c = desc("application/vnd.oci.image.config.v1+json", &config),
            l = desc("application/vnd.oci.image.layer.v1.tar+gzip", &layer),
        )
        .into_bytes();
        let md = digest(&manifest);
        let index = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{m}","digest":"{md}","size":{s},"annotations":{{"{REF_NAME}":"registry.k8s.io/pause:3.10"}}}}]}}"#,
            m = MANIFEST_TYPES[0],
            s = manifest.len()
        )
        .into_bytes();
        let mut blobs = MemoryBlobs::default();
        blobs.insert(digest(&layer), layer.len() as u64, None);
        blobs.insert(digest(&config), config.len() as u64, Some(config.clone()));
        blobs.insert(md.clone(), manifest.len() as u64, Some(manifest.clone()));
        let images = vec![ImageRecord {
            reference: "registry.k8s.io/pause:3.10".into(),
            source: "registry.k8s.io/pause:3.10".into(),
            digest: md.to_string(),
            source_digest: None,
            layout_digest: None,
            media_type: MANIFEST_TYPES[0].into(),
            size: manifest.len() as u64,
            platforms: ["linux/amd64".to_owned()].into(),
            roles: ["master".to_owned()].into(),
        }];
        Fixture {
            blobs,
            index,
            images,
        }
    }

    #[test]
    fn a_closed_layout_passes() {
        let f = fixture();
        check(&f.images, &f.index, &f.blobs).expect("closes");
    }

    #[test]
    fn every_gap_is_found() {
        let f = fixture();
        let mut image = f.images.clone();
        image[0].reference = "other:1".into();
        assert!(matches!(
            check(&image, &f.index, &f.blobs),
            Err(LayoutProblem::NotInIndex { .. })
        ));
        let mut wrong = f.images.clone();
        wrong[0].size += 1;
        assert!(matches!(
            check(&wrong, &f.index, &f.blobs),
            Err(LayoutProblem::Image { .. })
        ));
        let traversal = String::from_utf8(f.index.clone())
            .expect("utf8")
            .replace(&f.images[0].digest, "sha256:../../../etc/hostname");
        assert!(matches!(
            check(&[], traversal.as_bytes(), &f.blobs),
            Err(LayoutProblem::Digest { .. })
        ));
        let empty = MemoryBlobs::default();
        assert!(matches!(
            check(&[], &f.index, &empty),
            Err(LayoutProblem::Missing { .. })
        ));
        assert!(matches!(
            check(&[], b"[]", &f.blobs),
            Err(LayoutProblem::Index(_))
        ));
    }

    #[test]
    fn keeps_only_small_json() {
        assert!(may_be_manifest(10, b"  {\"a\""));
        assert!(!may_be_manifest(10, b"\x1f\x8b"));
        assert!(!may_be_manifest(MAX_MANIFEST_SIZE + 1, b"{"));
    }
}
