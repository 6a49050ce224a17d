//! The OCI layout closure check on layouts the harness builds: manifests, indexes and blobs
//! linked by their real sha256 (so graphs close), with defects the fuzzer chooses (a wrong size,
//! a missing or unkept blob, no or another media type, a bad or dangling digest, nesting, shared
//! children, `bundle.json` images that disagree with `index.json`) and free edits of the
//! `index.json` text.
//!
//! Besides "no panic, no hang, no unbounded recursion": a layout built without defects and
//! nested at most `MAX_DEPTH` deep closes, and a defect in a descriptor of `index.json` itself
//! (always checked) or an image `index.json` does not name is always refused.
//!
//! The input always holds a small valid layout (one image: a manifest, its config and a layer);
//! the fuzzer's nodes, descriptors and images come on top, so an empty input already reaches the
//! end of the check.
#![no_main]

use std::collections::BTreeSet;

use arbitrary::Arbitrary;
use kubexm_bundles::layout::{
    check, may_be_manifest, MemoryBlobs, INDEX_TYPES, MANIFEST_TYPES, MAX_DEPTH, REF_NAME,
};
use kubexm_bundles::manifest::ImageRecord;
use kubexm_manifests::digest::Digest;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use sha2::Digest as _;

/// Reference names the descriptors of `index.json` and the images choose from.
const NAMES: [&str; 4] = [
    "registry.k8s.io/pause:3.10",
    "docker.io/calico/node:v3.28.0",
    "a",
    "",
];
/// Media types a wrong-media-type defect chooses from.
const MEDIA: [&str; 7] = [
    MANIFEST_TYPES[0],
    MANIFEST_TYPES[1],
    INDEX_TYPES[0],
    INDEX_TYPES[1],
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "",
];
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";

#[derive(Arbitrary, Debug)]
enum Defect {
    Size(i8),
    NoMediaType,
    MediaType(u8),
    Digest(String),
    Dangling([u8; 32]),
}

/// A descriptor: of a later node (so the graph is acyclic, as content addressing forces).
#[derive(Arbitrary, Debug)]
struct Ref {
    target: u8,
    defect: Option<Defect>,
    name: Option<u8>,
}

#[derive(Arbitrary, Debug)]
enum Body {
    Manifest {
        config: Option<Ref>,
        layers: Vec<Ref>,
    },
    Index {
        manifests: Vec<Ref>,
    },
    Blob(Vec<u8>),
    Text(String),
}

#[derive(Arbitrary, Debug)]
struct Node {
    body: Body,
    /// Bits: 0-2 all set = absent from the layout, 3-5 all set = content not kept, 6 = Docker
    /// media types.
    flags: u8,
}

#[derive(Arbitrary, Debug)]
enum ImageDefect {
    Reference(String),
    Digest(String),
    LayoutDigest(String),
    Size(i8),
}

#[derive(Arbitrary, Debug)]
struct Image {
    /// Which name of `NAMES` (resolved to the last descriptor of `index.json` carrying it).
    name: u8,
    /// For an index: `bundle.json` names its manifest `[n]` and the index as `layoutDigest`.
    wrapped: Option<u8>,
    defect: Option<ImageDefect>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    nodes: Vec<Node>,
    top: Vec<Ref>,
    images: Vec<Image>,
    /// Bytes spliced into the `index.json` text at this offset.
    edit: Option<(u16, Vec<u8>)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Manifest,
    Index,
    Blob,
}

/// A node once built.
struct Built {
    content: Vec<u8>,
    digest: Digest,
    kind: Kind,
    docker: bool,
    absent: bool,
    /// Present, kept if nested, every descriptor below it without defect.
    clean: bool,
    /// Manifests and indexes on the longest path from here (0 for a plain blob).
    height: usize,
    /// For an index: the digests of its manifests.
    children: Vec<Digest>,
}

/// What a descriptor came to.
struct Desc {
    json: Value,
    /// The digest string it carries.
    digest: String,
    /// No defect, the target is present and clean.
    clean: bool,
    /// The defect makes the check fail whatever else holds (the walker checks digest, presence,
    /// size and media type of every descriptor of `index.json`).
    refused: bool,
    target: usize,
    name: Option<&'static str>,
}

fn sha256(bytes: &[u8]) -> Digest {
    let hex = hex::encode(sha2::Sha256::digest(bytes));
    Digest::from_hex(&hex).expect("a sha256 is 64 lowercase hex digits")
}

fn media_of(node: &Built) -> &'static str {
    let docker = usize::from(node.docker);
    match node.kind {
        Kind::Manifest => MANIFEST_TYPES[docker],
        Kind::Index => INDEX_TYPES[docker],
        Kind::Blob => LAYER,
    }
}

/// The descriptor of `nodes[target]` with `r`'s defect; `present` holds every digest inserted.
fn describe(r: &Ref, target: usize, nodes: &[Option<Built>], present: &BTreeSet<Digest>) -> Desc {
    let Some(node) = nodes[target].as_ref() else {
        unreachable!("descriptors only name nodes built before them");
    };
    let mut media = Some(media_of(node));
    let mut digest = node.digest.to_string();
    let mut size = node.content.len() as u64;
    let mut refused = false;
    match &r.defect {
        None => {}
        Some(Defect::Size(d)) => {
            size = size.wrapping_add_signed(i64::from(*d));
            refused = *d != 0;
        }
        Some(Defect::NoMediaType) => {
            media = None;
            refused = true;
        }
        Some(Defect::MediaType(m)) => media = Some(MEDIA[usize::from(*m) % MEDIA.len()]),
        Some(Defect::Digest(s)) => digest = s.chars().take(80).collect(),
        Some(Defect::Dangling(bytes)) => digest = format!("sha256:{}", hex::encode(bytes)),
    }
    // A digest that does not parse, or names no blob, is refused whatever else holds.
    refused |= Digest::parse(&digest).map_or(true, |d| !present.contains(&d));
    let mut json = json!({"digest": digest, "size": size});
    if let Some(m) = media {
        json["mediaType"] = json!(m);
    }
    let name = r.name.map(|n| NAMES[usize::from(n) % NAMES.len()]);
    if let Some(n) = name {
        json["annotations"] = json!({ REF_NAME: n });
    }
    Desc {
        json,
        digest,
        clean: r.defect.is_none() && !node.absent && node.clean,
        refused,
        target,
        name,
    }
}

/// The target of a descriptor of node `i` (a later node), or of `index.json` (any node).
fn resolve(target: u8, from: Option<usize>, len: usize) -> usize {
    match from {
        Some(i) => i + 1 + usize::from(target) % (len - i - 1),
        None => usize::from(target) % len,
    }
}

fn base_nodes() -> Vec<Node> {
    let manifest = Body::Manifest {
        config: Some(Ref {
            target: 0,
            defect: None,
            name: None,
        }),
        layers: vec![Ref {
            target: 1,
            defect: None,
            name: None,
        }],
    };
    vec![
        Node {
            body: manifest,
            flags: 0,
        },
        Node {
            body: Body::Blob(br#"{"architecture":"amd64","os":"linux"}"#.to_vec()),
            flags: 0,
        },
        Node {
            body: Body::Blob(b"layer bytes".to_vec()),
            flags: 0,
        },
    ]
}

fuzz_target!(|input: Input| {
    // The fuzzer's nodes first, the base image last: every node can point at the base.
    let mut specs: Vec<Node> = input.nodes.into_iter().take(24).collect();
    let base = specs.len();
    specs.extend(base_nodes());
    let len = specs.len();
    let mut nodes: Vec<Option<Built>> = (0..len).map(|_| None).collect();
    let mut present = BTreeSet::new();
    let mut blobs = MemoryBlobs::default();
    for i in (0..len).rev() {
        let spec = &specs[i];
        let absent = spec.flags & 0b111 == 0b111;
        let unkept = spec.flags & 0b11_1000 == 0b11_1000;
        let docker = spec.flags & 0x40 != 0;
        let (kind, refs): (Kind, Vec<(&Ref, bool)>) = match &spec.body {
            Body::Manifest { config, layers } => (
                Kind::Manifest,
                config
                    .iter()
                    .map(|r| (r, true))
                    .chain(layers.iter().take(8).map(|r| (r, false)))
                    .collect(),
            ),
            Body::Index { manifests } => (
                Kind::Index,
                manifests.iter().take(8).map(|r| (r, false)).collect(),
            ),
            Body::Blob(_) | Body::Text(_) => (Kind::Blob, Vec::new()),
        };
        let descs: Vec<Desc> = refs
            .iter()
            .map(|(r, _)| describe(r, resolve(r.target, Some(i), len), &nodes, &present))
            .collect();
        let content = match (&spec.body, kind) {
            (Body::Blob(b), _) => b.iter().copied().take(4096).collect(),
            (Body::Text(t), _) => t.as_bytes().iter().copied().take(4096).collect(),
            (_, Kind::Manifest) => {
                let mut doc = json!({
                    "schemaVersion": 2,
                    "mediaType": MANIFEST_TYPES[usize::from(docker)],
                    "layers": [],
                });
                let mut layers = Vec::new();
                for ((_, is_config), d) in refs.iter().zip(&descs) {
                    if *is_config {
                        let mut config = d.json.clone();
                        if config.get("mediaType").and_then(Value::as_str) == Some(LAYER) {
                            config["mediaType"] = json!(CONFIG);
                        }
                        doc["config"] = config;
                    } else {
                        layers.push(d.json.clone());
                    }
                }
                doc["layers"] = Value::Array(layers);
                serde_json::to_vec(&doc).expect("JSON values serialise")
            }
            (_, _) => {
                let manifests: Vec<Value> = descs.iter().map(|d| d.json.clone()).collect();
                let doc = json!({
                    "schemaVersion": 2,
                    "mediaType": INDEX_TYPES[usize::from(docker)],
                    "manifests": manifests,
                });
                serde_json::to_vec(&doc).expect("JSON values serialise")
            }
        };
        let digest = sha256(&content);
        let nested = kind != Kind::Blob;
        let height = if nested {
            1 + descs
                .iter()
                .filter_map(|d| nodes[d.target].as_ref())
                .map(|n| n.height)
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        let clean = !absent && (!nested || !unkept) && descs.iter().all(|d| d.clean);
        if !absent {
            let size = content.len() as u64;
            let keep = (!unkept && may_be_manifest(size, &content)).then(|| content.clone());
            blobs.insert(digest.clone(), size, keep);
            present.insert(digest.clone());
        }
        let children = if kind == Kind::Index {
            descs
                .iter()
                .filter_map(|d| nodes[d.target].as_ref())
                .map(|n| n.digest.clone())
                .collect()
        } else {
            Vec::new()
        };
        nodes[i] = Some(Built {
            content,
            digest,
            kind,
            docker,
            absent,
            clean,
            height,
            children,
        });
    }

    // index.json: the base image first, then the fuzzer's descriptors.
    let base_top = Ref {
        target: 0,
        defect: None,
        name: Some(0),
    };
    let mut tops = vec![describe(&base_top, base, &nodes, &present)];
    for r in input.top.iter().take(8) {
        tops.push(describe(r, resolve(r.target, None, len), &nodes, &present));
    }
    let manifests: Vec<Value> = tops.iter().map(|d| d.json.clone()).collect();
    let mut index = serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": manifests}))
        .expect("JSON values serialise");
    let edited = input.edit.is_some();
    if let Some((at, bytes)) = &input.edit {
        let at = usize::from(*at).min(index.len());
        index.splice(at..at, bytes.iter().copied().take(256));
    }

    // bundle.json's images: the base image, then the fuzzer's.
    let base_image = Image {
        name: 0,
        wrapped: None,
        defect: None,
    };
    let mut images = Vec::new();
    // Every image is clean (and no image names a reference index.json lacks) so far.
    let mut images_clean = true;
    let mut not_in_index = false;
    for image in std::iter::once(&base_image).chain(input.images.iter().take(8)) {
        let mut reference = NAMES[usize::from(image.name) % NAMES.len()].to_owned();
        let Some(top) = tops
            .iter()
            .rev()
            .find(|d| d.name == Some(reference.as_str()))
        else {
            not_in_index = true;
            images.push(ImageRecord {
                reference,
                source: String::new(),
                digest: String::new(),
                source_digest: None,
                layout_digest: None,
                media_type: String::new(),
                size: 0,
                platforms: BTreeSet::new(),
                roles: BTreeSet::new(),
            });
            continue;
        };
        let Some(node) = nodes[top.target].as_ref() else {
            unreachable!("every node is built");
        };
        let mut clean = top.clean;
        let (mut digest, mut size, mut layout_digest) =
            (top.digest.clone(), node.content.len() as u64, None);
        let mut media_type = media_of(node).to_owned();
        if let Some(w) = image.wrapped {
            let child = (node.kind == Kind::Index && !node.children.is_empty())
                .then(|| &node.children[usize::from(w) % node.children.len()]);
            match child.and_then(|c| nodes.iter().flatten().find(|n| &n.digest == c)) {
                Some(inner) => {
                    layout_digest = Some(top.digest.clone());
                    digest = inner.digest.to_string();
                    size = inner.content.len() as u64;
                    media_type = media_of(inner).to_owned();
                }
                None => clean = false,
            }
        }
        match &image.defect {
            None => {}
            Some(ImageDefect::Reference(r)) => {
                clean = false;
                reference = r.chars().take(80).collect();
                if !tops.iter().any(|d| d.name == Some(reference.as_str())) {
                    not_in_index = true;
                }
            }
            Some(ImageDefect::Digest(d)) => {
                clean = false;
                digest = d.chars().take(80).collect();
            }
            Some(ImageDefect::LayoutDigest(d)) => {
                clean = false;
                layout_digest = Some(d.chars().take(80).collect());
            }
            Some(ImageDefect::Size(d)) => {
                clean &= *d == 0;
                // The size is compared after the digests; only a wrong size alone is sure to
                // be the reason, so it is not counted as a certain refusal.
                size = size.wrapping_add_signed(i64::from(*d));
            }
        }
        images_clean &= clean;
        images.push(ImageRecord {
            reference,
            source: String::new(),
            digest,
            source_digest: None,
            layout_digest,
            media_type,
            size,
            platforms: BTreeSet::new(),
            roles: BTreeSet::new(),
        });
    }

    let result = check(&images, &index, &blobs);
    // Errors are shown to people: they must render.
    let shown = result.as_ref().map_err(ToString::to_string);
    if edited {
        return;
    }
    let top_refused = tops.iter().any(|d| d.refused);
    let fits = tops
        .iter()
        .filter_map(|d| nodes[d.target].as_ref())
        .all(|n| n.height <= MAX_DEPTH);
    if top_refused || not_in_index {
        assert!(
            shown.is_err(),
            "a defect in index.json or an unnamed image passed"
        );
    } else if tops.iter().all(|d| d.clean) && fits && images_clean {
        assert!(
            shown.is_ok(),
            "a layout built to close was refused: {shown:?}"
        );
    }
});
