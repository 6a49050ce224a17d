//! The bundle's `images/` directory: one standard OCI image layout holding every image, with an
//! `org.opencontainers.image.ref.name` annotation per image in `index.json`.

use serde_json::json;

use crate::images::PulledImage;

/// Content of `images/oci-layout`.
pub const LAYOUT_FILE: &str = "{\"imageLayoutVersion\":\"1.0.0\"}";
/// The annotation naming an image inside the layout.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// `index.json` for `(reference, image)` pairs, sorted by reference (deterministic bytes).
pub fn index_json(images: &[(&str, &PulledImage)]) -> Vec<u8> {
    let mut sorted: Vec<&(&str, &PulledImage)> = images.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let manifests: Vec<serde_json::Value> = sorted
        .iter()
        .map(|(reference, image)| {
            let (media_type, digest, size) = match &image.layout_wrapper {
                Some((digest, size)) => (
                    "application/vnd.oci.image.index.v1+json",
                    digest.as_str(),
                    *size,
                ),
                None => (image.media_type.as_str(), image.digest.as_str(), image.size),
            };
            json!({
                "mediaType": media_type,
                "digest": digest,
                "size": size,
                "annotations": { REF_NAME: reference },
            })
        })
        .collect();
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    });
    serde_json::to_vec_pretty(&index).unwrap_or_default()
}
