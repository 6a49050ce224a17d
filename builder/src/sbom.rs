//! The bundle's SBOM: a CycloneDX 1.5 JSON document (`sbom.cdx.json`, inside the bundle — so
//! `SHA256SUMS` and a bundle signature cover it — and beside it as `<bundle>.cdx.json`).
//!
//! It lists every entry of the bundle except `bundle.json`, `SHA256SUMS` and the SBOM itself
//! (those name the SBOM's size and sum):
//!
//! * each downloaded file (`bundle.json` `files[]`): a `file` component with its name, version,
//!   SHA-256, a `pkg:generic` purl with the download URL and checksum, the URL as a
//!   `distribution` reference, and the bundle path, arch and roles as properties;
//! * each image: a `container` component with the reference, tag, the manifest digest as its
//!   SHA-256, a `pkg:oci` purl, the source as a `distribution` reference and its platforms; the
//!   blobs it is made of are `dependencies` of it;
//! * each blob of the OCI layout (manifests, configs, layers), once, and the other files
//!   (`cluster.yaml`, the layout's `index.json`, …): `file` components.
//!
//! The document is a pure function of the bundle's inputs (the serial number is derived from
//! the entries' sums, the timestamp is `bundle.json`'s `created`), so reproducible bundles stay
//! byte-identical.

use std::collections::{BTreeMap, BTreeSet};

use kubexm_bundles::manifest::{BundleManifest, ImageRecord};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Path of the SBOM inside the bundle.
pub const SBOM_PATH: &str = "sbom.cdx.json";
/// Suffix of the copy written beside the bundle.
pub const SBOM_SUFFIX: &str = ".cdx.json";

/// The SBOM for a bundle: its manifest, the sums of its entries but `bundle.json` and
/// `SHA256SUMS` (path → sha256), and the blobs of each image (`sha256:…`).
pub fn cyclonedx(
    manifest: &BundleManifest,
    entries: &BTreeMap<String, String>,
    image_blobs: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<u8> {
    let mut components = Vec::new();
    let mut described: BTreeSet<&str> = BTreeSet::new();
    for f in &manifest.files {
        described.insert(&f.path);
        let mut purl = format!(
            "pkg:generic/{}@{}?checksum=sha256:{}&download_url={}",
            purl_escape(&f.name),
            purl_escape(&f.version),
            f.sha256,
            purl_escape(&f.url)
        );
        if f.arch != "all" {
            purl.push_str(&format!("&arch={}", purl_escape(&f.arch)));
        }
        components.push(json!({
            "type": "file",
            "bom-ref": format!("file:{}", f.path),
            "name": f.name,
            "version": f.version,
            "hashes": [{"alg": "SHA-256", "content": f.sha256}],
            "purl": purl,
            "externalReferences": [{"type": "distribution", "url": f.url}],
            "properties": properties(&[
                ("kubexm:path", f.path.clone()),
                ("kubexm:arch", f.arch.clone()),
                ("kubexm:roles", join(&f.roles)),
                ("kubexm:size", f.size.to_string()),
            ]),
        }));
    }
    let mut dependencies = Vec::new();
    for image in &manifest.images {
        components.push(image_component(image));
        let blobs = image_blobs
            .get(&image.reference)
            .cloned()
            .unwrap_or_default();
        dependencies.push(json!({
            "ref": format!("image:{}", image.reference),
            "dependsOn": blobs.iter().map(|b| format!("blob:{b}")).collect::<Vec<_>>(),
        }));
    }
    let mut blob_paths = BTreeSet::new();
    for (path, sum) in entries {
        if described.contains(path.as_str()) {
            continue;
        }
        let (bom_ref, name) = match path.strip_prefix("images/blobs/sha256/") {
            Some(hex) => {
                blob_paths.insert(format!("sha256:{hex}"));
                (format!("blob:sha256:{hex}"), format!("sha256:{hex}"))
            }
            None => (format!("file:{path}"), path.clone()),
        };
        components.push(json!({
            "type": "file",
            "bom-ref": bom_ref,
            "name": name,
            "hashes": [{"alg": "SHA-256", "content": sum}],
            "properties": properties(&[("kubexm:path", path.clone())]),
        }));
    }
    // A dependency may only name components of the document.
    for dep in &mut dependencies {
        if let Some(list) = dep.get_mut("dependsOn").and_then(Value::as_array_mut) {
            list.retain(|r| {
                r.as_str()
                    .and_then(|r| r.strip_prefix("blob:"))
                    .is_some_and(|d| blob_paths.contains(d))
            });
        }
    }
    let bom = json!({
        "$schema": "http://cyclonedx.org/schema/bom-1.5.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": serial_number(entries),
        "version": 1,
        "metadata": {
            "timestamp": rfc3339(manifest.created),
            "tools": {"components": [{
                "type": "application",
                "name": "kubexm-build",
                "version": manifest.tool_version,
            }]},
            "component": {
                "type": "platform",
                "bom-ref": "bundle",
                "name": format!("kubexm-bundle-{}", manifest.cluster),
                "version": manifest.kubernetes_version,
                "description": format!(
                    "KubeXM offline bundle for cluster {} (Kubernetes {}, zone {}, arches {})",
                    manifest.cluster,
                    manifest.kubernetes_version,
                    manifest.zone,
                    join(&manifest.arches)
                ),
            },
        },
        "components": components,
        "dependencies": dependencies,
    });
    let mut out = serde_json::to_vec_pretty(&bom).unwrap_or_default();
    out.push(b'\n');
    out
}

fn image_component(image: &ImageRecord) -> Value {
    let (name, tag) = split_reference(&image.reference);
    let hex = image.digest.trim_start_matches("sha256:");
    let last = name.rsplit('/').next().unwrap_or(&name);
    let mut purl = format!(
        "pkg:oci/{}@sha256%3A{hex}?repository_url={}",
        purl_escape(last),
        purl_escape(&name)
    );
    if let Some(t) = &tag {
        purl.push_str(&format!("&tag={}", purl_escape(t)));
    }
    let mut props = vec![
        ("kubexm:reference", image.reference.clone()),
        ("kubexm:mediaType", image.media_type.clone()),
        ("kubexm:platforms", join(&image.platforms)),
        ("kubexm:roles", join(&image.roles)),
    ];
    if let Some(s) = &image.source_digest {
        props.push(("kubexm:sourceDigest", s.clone()));
    }
    let mut c = json!({
        "type": "container",
        "bom-ref": format!("image:{}", image.reference),
        "name": name,
        "hashes": [{"alg": "SHA-256", "content": hex}],
        "purl": purl,
        "externalReferences": [{"type": "distribution", "url": format!("docker://{}", image.source)}],
        "properties": properties(&props),
    });
    if let Some(t) = tag {
        c["version"] = Value::String(t);
    }
    c
}

/// `registry/repo:tag` → (`registry/repo`, `tag`); a digest-only reference has no tag.
fn split_reference(reference: &str) -> (String, Option<String>) {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    match without_digest.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_owned(), Some(tag.to_owned())),
        _ => (without_digest.to_owned(), None),
    }
}

fn properties(items: &[(&str, String)]) -> Value {
    Value::Array(
        items
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect(),
    )
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(",")
}

/// Percent-encodes everything but unreserved characters (RFC 3986), as purl qualifiers need.
fn purl_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A UUID (version 5 layout) derived from the entries' sums: the same bundle, the same serial.
fn serial_number(entries: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    h.update(b"kubexm-sbom\0");
    for (path, sum) in entries {
        h.update(format!("{sum}  {path}\n").as_bytes());
    }
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x = hex::encode(b);
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    )
}

/// Seconds since the epoch as `YYYY-MM-DDThh:mm:ssZ` (proleptic Gregorian, UTC).
fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Days since 1970-01-01 → civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn references_split_into_name_and_tag() {
        assert_eq!(
            split_reference("registry.k8s.io/pause:3.10"),
            ("registry.k8s.io/pause".into(), Some("3.10".into()))
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/x/y:v1"),
            ("127.0.0.1:5000/x/y".into(), Some("v1".into()))
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/x/y"),
            ("127.0.0.1:5000/x/y".into(), None)
        );
    }

    #[test]
    fn serial_numbers_are_uuids() {
        let s = serial_number(&BTreeMap::from([("a".to_owned(), "0".repeat(64))]));
        let re = s.strip_prefix("urn:uuid:").expect("urn");
        let parts: Vec<&str> = re.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('5'));
        assert!("89ab".contains(&parts[3][..1]));
    }
}
