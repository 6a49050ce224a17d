//! The bundle reader on structured mutations of a small valid bundle (formatVersion 2 with an
//! OCI layout): renamed, resized, dropped, duplicated, reordered and retyped entries, changed
//! `bundle.json` fields, pins and digests, with `SHA256SUMS` and `sizes` recomputed or not so that
//! the checks behind the sums are reached too.
#![no_main]

use arbitrary::Arbitrary;
use kubexm_bundles::verify::{verify_limited, Limits, NullSink};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

#[derive(Arbitrary, Debug)]
enum Mutation {
    Rename { entry: u8, name: String },
    Content { entry: u8, bytes: Vec<u8> },
    HeaderSize { entry: u8, size: u32 },
    Drop { entry: u8 },
    Duplicate { entry: u8 },
    Swap { a: u8, b: u8 },
    Kind { entry: u8, kind: u8 },
    Field { key: u8, value: String },
    Number { key: u8, value: u64 },
    Pin { entry: u8, size: u64 },
    Replace { from: String, to: String },
    Version { value: u8 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    mutations: Vec<Mutation>,
    resum: bool,
    repin: bool,
}

struct Item {
    path: String,
    content: Vec<u8>,
    declared: Option<u64>,
    kind: EntryType,
}

const KEYS: [&str; 8] = [
    "toolVersion",
    "cluster",
    "kubernetesVersion",
    "zone",
    "files",
    "images",
    "sizes",
    "arches",
];

fn base() -> (Vec<Item>, Value) {
    let layer = b"layer bytes".to_vec();
    let config = br#"{"architecture":"amd64","os":"linux"}"#.to_vec();
    let desc = |mt: &str, c: &[u8]| json!({"mediaType": mt, "digest": format!("sha256:{}", sha256(c)), "size": c.len()});
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": desc("application/vnd.oci.image.config.v1+json", &config),
        "layers": [desc("application/vnd.oci.image.layer.v1.tar+gzip", &layer)],
    }))
    .unwrap_or_default();
    let mut top = desc("application/vnd.oci.image.manifest.v1+json", &manifest);
    top["annotations"] = json!({"org.opencontainers.image.ref.name": "registry.k8s.io/pause:3.10"});
    let index =
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [top]})).unwrap_or_default();
    let etcd = b"etcd binary".to_vec();
    let mut items: Vec<Item> = vec![
        ("cluster.yaml", b"apiVersion: kubexm.io/v1alpha1\n".to_vec()),
        ("files/etcd/v3.5.16/amd64/etcd", etcd.clone()),
        (
            &*format!("images/blobs/sha256/{}", sha256(&config)),
            config.clone(),
        ),
        (
            &*format!("images/blobs/sha256/{}", sha256(&layer)),
            layer.clone(),
        ),
        (
            &*format!("images/blobs/sha256/{}", sha256(&manifest)),
            manifest.clone(),
        ),
        ("images/index.json", index),
        (
            "images/oci-layout",
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
    ]
    .into_iter()
    .map(|(p, c)| Item {
        path: p.to_owned(),
        content: c,
        declared: None,
        kind: EntryType::Regular,
    })
    .collect();
    items.sort_by(|a, b| a.path.cmp(&b.path));
    let doc = json!({
        "formatVersion": 2,
        "toolVersion": "0.1.0",
        "cluster": "c",
        "kubernetesVersion": "v1.33.1",
        "zone": "default",
        "arches": ["amd64"],
        "created": 0,
        "files": [{"name": "etcd", "version": "v3.5.16", "arch": "amd64",
                   "path": "files/etcd/v3.5.16/amd64/etcd", "sha256": sha256(&etcd), "size": etcd.len(),
                   "url": "https://example.invalid/etcd", "roles": ["etcd"]}],
        "images": [{"reference": "registry.k8s.io/pause:3.10", "source": "registry.k8s.io/pause:3.10",
                    "digest": format!("sha256:{}", sha256(&manifest)),
                    "mediaType": "application/vnd.oci.image.manifest.v1+json", "size": manifest.len(),
                    "platforms": ["linux/amd64"], "roles": ["master"]}],
    });
    (items, doc)
}

fn pick(len: usize, i: u8) -> Option<usize> {
    (len > 0).then(|| usize::from(i) % len)
}

fn build(items: &[Item], doc: &Value, sums: &str) -> Vec<u8> {
    let json = serde_json::to_vec_pretty(doc).unwrap_or_default();
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |path: &str, content: &[u8], declared: Option<u64>, kind: EntryType| {
        let mut h = Header::new_gnu();
        let bytes = path.as_bytes();
        if let Some(gnu) = h.as_gnu_mut() {
            let n = bytes.len().min(gnu.name.len());
            gnu.name[..n].copy_from_slice(&bytes[..n]);
        }
        h.set_entry_type(kind);
        h.set_size(declared.unwrap_or(content.len() as u64));
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_cksum();
        let _ = builder.append(&h, content);
    };
    add("bundle.json", &json, None, EntryType::Regular);
    add("SHA256SUMS", sums.as_bytes(), None, EntryType::Regular);
    for it in items {
        add(&it.path, &it.content, it.declared, it.kind);
    }
    let tar = builder.into_inner().unwrap_or_default();
    zstd::encode_all(tar.as_slice(), 1).unwrap_or_default()
}

fn sums_of(items: &[Item], json: &[u8]) -> String {
    let mut lines: Vec<(String, String)> = items
        .iter()
        .filter(|i| i.kind == EntryType::Regular)
        .map(|i| (i.path.clone(), sha256(&i.content)))
        .chain([("bundle.json".to_owned(), sha256(json))])
        .collect();
    lines.sort();
    lines.dedup_by(|a, b| a.0 == b.0);
    lines.iter().map(|(p, h)| format!("{h}  {p}\n")).collect()
}

fn pin(items: &[Item], doc: &mut Value) {
    let sizes: serde_json::Map<String, Value> = items
        .iter()
        .map(|i| (i.path.clone(), json!(i.content.len())))
        .collect();
    doc["sizes"] = Value::Object(sizes);
}

fuzz_target!(|input: Input| {
    let (mut items, mut doc) = base();
    let original_sums = {
        pin(&items, &mut doc);
        let json = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        sums_of(&items, &json)
    };
    let untouched = input.mutations.is_empty();
    for m in input.mutations.iter().take(16) {
        match m {
            Mutation::Rename { entry, name } => {
                if let Some(i) = pick(items.len(), *entry) {
                    items[i].path = name.chars().take(90).collect();
                }
            }
            Mutation::Content { entry, bytes } => {
                if let Some(i) = pick(items.len(), *entry) {
                    items[i].content = bytes.iter().copied().take(4096).collect();
                }
            }
            Mutation::HeaderSize { entry, size } => {
                if let Some(i) = pick(items.len(), *entry) {
                    items[i].declared = Some(u64::from(*size));
                }
            }
            Mutation::Drop { entry } => {
                if let Some(i) = pick(items.len(), *entry) {
                    items.remove(i);
                }
            }
            Mutation::Duplicate { entry } => {
                if let Some(i) = pick(items.len(), *entry) {
                    let copy = Item {
                        path: items[i].path.clone(),
                        content: items[i].content.clone(),
                        declared: items[i].declared,
                        kind: items[i].kind,
                    };
                    items.insert(i, copy);
                }
            }
            Mutation::Swap { a, b } => {
                if let (Some(a), Some(b)) = (pick(items.len(), *a), pick(items.len(), *b)) {
                    items.swap(a, b);
                }
            }
            Mutation::Kind { entry, kind } => {
                if let Some(i) = pick(items.len(), *entry) {
                    items[i].kind = EntryType::new(*kind);
                }
            }
            Mutation::Field { key, value } => {
                doc[KEYS[usize::from(*key) % KEYS.len()]] = json!(value);
            }
            Mutation::Number { key, value } => {
                doc[KEYS[usize::from(*key) % KEYS.len()]] = json!(value);
            }
            Mutation::Pin { entry, size } => {
                if let Some(i) = pick(items.len(), *entry) {
                    let path = items[i].path.clone();
                    if let Some(sizes) = doc["sizes"].as_object_mut() {
                        sizes.insert(path, json!(size));
                    }
                }
            }
            Mutation::Replace { from, to } => {
                if !from.is_empty() {
                    for it in &mut items {
                        if let Ok(text) = std::str::from_utf8(&it.content) {
                            it.content = text.replace(from.as_str(), to).into_bytes();
                        }
                    }
                }
            }
            Mutation::Version { value } => doc["formatVersion"] = json!(value),
        }
    }
    if input.repin {
        pin(&items, &mut doc);
    }
    let json = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    let sums = if input.resum {
        sums_of(&items, &json)
    } else {
        original_sums
    };
    let bundle = build(&items, &doc, &sums);
    let limits = Limits {
        max_bytes: Some(16 << 20),
    };
    let verified = verify_limited(bundle.as_slice(), &mut NullSink, limits);
    if untouched {
        assert!(verified.is_ok(), "the base bundle verifies: {verified:?}");
    }
});
