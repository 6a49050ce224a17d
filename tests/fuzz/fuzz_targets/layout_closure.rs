//! The OCI layout closure check: never panics, never recurses without bound; blobs are stored
//! by their real sha256 so that the fuzzer can build graphs that close.
#![no_main]

use arbitrary::Arbitrary;
use kubexm_bundles::layout::{check, MemoryBlobs};
use kubexm_bundles::manifest::ImageRecord;
use kubexm_manifests::digest::Digest;
use libfuzzer_sys::fuzz_target;
use sha2::Digest as _;

#[derive(Arbitrary, Debug)]
struct Image {
    reference: String,
    digest: String,
    layout_digest: Option<String>,
    size: u64,
}

#[derive(Arbitrary, Debug)]
struct Input {
    index: Vec<u8>,
    blobs: Vec<Vec<u8>>,
    images: Vec<Image>,
}

fuzz_target!(|input: Input| {
    let mut blobs = MemoryBlobs::default();
    for b in &input.blobs {
        let hex = hex::encode(sha2::Sha256::digest(b));
        let digest = Digest::from_hex(&hex).expect("sha256 hex");
        blobs.insert(digest, b.len() as u64, Some(b.clone()));
    }
    let images: Vec<ImageRecord> = input
        .images
        .into_iter()
        .map(|i| ImageRecord {
            reference: i.reference,
            source: String::new(),
            digest: i.digest,
            source_digest: None,
            layout_digest: i.layout_digest,
            media_type: String::new(),
            size: i.size,
            platforms: Default::default(),
            roles: Default::default(),
        })
        .collect();
    let _ = check(&images, &input.index, &blobs).map_err(|e| e.to_string());
});
