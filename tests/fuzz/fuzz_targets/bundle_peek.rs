//! `peek::peek_stream` (`kubexm-build diff`: a bundle's metadata without unpacking it) over
//! bundles the harness builds: a whole bundle or a delta bundle (its target described by
//! `delta.json`, content in `delta/sha256/<hex>`), with the fuzzer's files, choices of what is
//! read and limits, and defects (the fuzzer's own `bundle.json`, `SHA256SUMS` or `delta.json`
//! text, a stored blob left out or changed, a path of its own). Never panics; whatever is
//! returned matches its sum and fits the limits; a bundle built without defects, read with
//! limits that fit, is accepted and gives back exactly the entries asked for.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::Arbitrary;
use kubexm_bundles::delta::{DeltaEntry, DeltaManifest, EntrySource, STORE_DIR};
use kubexm_bundles::peek::{peek_stream, Limits};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

#[derive(Arbitrary, Debug)]
struct Input {
    files: Vec<(u8, Vec<u8>)>,
    want: u16,
    delta: Option<Delta>,
    raw_manifest: Option<String>,
    raw_sums: Option<String>,
    raw_path: Option<(String, Vec<u8>)>,
    per_entry: u16,
    total: u16,
    roomy: bool,
}

#[derive(Arbitrary, Debug)]
struct Delta {
    /// Per target entry: 0 the delta carries it, 1 the site's files, 2 its registry.
    sources: Vec<u8>,
    leave_out: Option<u8>,
    change: Option<u8>,
    raw_delta: Option<String>,
}

fn hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

const MANIFEST: &str = r#"{"formatVersion":2,"toolVersion":"0.1.0","cluster":"c","kubernetesVersion":"v1.33.1","zone":"default","arches":["amd64"],"created":0,"files":[],"images":[]}"#;

fn sums_of(files: &BTreeMap<String, Vec<u8>>) -> String {
    files
        .iter()
        .map(|(p, c)| format!("{}  {p}\n", hex(c)))
        .collect()
}

/// bundle.json, SHA256SUMS, then the other entries sorted by path.
fn tar_zst(manifest: &[u8], sums: &[u8], rest: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        let _ = b.append_data(&mut h, path, data);
    };
    add("bundle.json", manifest);
    add("SHA256SUMS", sums);
    for (p, c) in rest {
        add(p, c);
    }
    let tar = b.into_inner().unwrap_or_default();
    zstd::encode_all(tar.as_slice(), 1).unwrap_or_default()
}

fuzz_target!(|input: Input| {
    // The (target) bundle's files, at generated paths, at most 12.
    let mut files: BTreeMap<String, Vec<u8>> = input
        .files
        .iter()
        .take(12)
        .map(|(n, c)| (format!("files/f{n}"), c.clone()))
        .collect();
    let mut defect = input.raw_manifest.is_some() || input.raw_sums.is_some();
    if let Some((p, c)) = &input.raw_path {
        files.insert(p.clone(), c.clone());
        defect = true;
    }
    let paths: Vec<String> = files.keys().cloned().collect();
    let wanted: BTreeSet<String> = paths
        .iter()
        .enumerate()
        .filter(|(i, _)| input.want & (1 << (i % 16)) != 0)
        .map(|(_, p)| p.clone())
        .collect();
    let limits = if input.roomy {
        Limits {
            per_entry: 1 << 20,
            total: 1 << 24,
        }
    } else {
        Limits {
            per_entry: u64::from(input.per_entry),
            total: u64::from(input.total),
        }
    };
    let manifest = input
        .raw_manifest
        .clone()
        .unwrap_or_else(|| MANIFEST.to_owned())
        .into_bytes();

    let mut expect_carried: Option<(String, BTreeSet<String>)> = None;
    let bytes = match &input.delta {
        None => {
            let mut all = files.clone();
            all.insert("bundle.json".into(), manifest.clone());
            let sums = input.raw_sums.clone().unwrap_or_else(|| sums_of(&all));
            tar_zst(&manifest, sums.as_bytes(), &files)
        }
        Some(d) => {
            let mut target = files.clone();
            target.insert("bundle.json".into(), MANIFEST.as_bytes().to_vec());
            let target_sums = sums_of(&target);
            let mut store: BTreeMap<String, Vec<u8>> = BTreeMap::new();
            let mut not_carried = BTreeSet::new();
            let entries: Vec<DeltaEntry> = target
                .iter()
                .enumerate()
                .map(|(i, (p, c))| {
                    let pick = if p == "bundle.json" {
                        0
                    } else {
                        d.sources.get(i).copied().unwrap_or(0) % 3
                    };
                    let source = [EntrySource::Delta, EntrySource::Site, EntrySource::Registry]
                        [pick as usize];
                    if source == EntrySource::Delta {
                        store.insert(format!("{STORE_DIR}/{}", hex(c)), c.clone());
                    } else if wanted.contains(p) {
                        not_carried.insert(p.clone());
                    }
                    DeltaEntry {
                        path: p.clone(),
                        sha256: hex(c),
                        size: c.len() as u64,
                        mode: 0o644,
                        source,
                        repository: (source == EntrySource::Registry)
                            .then(|| "kubexm/blobs".to_owned()),
                    }
                })
                .collect();
            let plan = DeltaManifest {
                kubexm_delta: 1,
                target_content_digest: hex(target_sums.as_bytes()),
                target_sums,
                inventory_sha256: "0".repeat(64),
                entries,
            };
            let delta_json = match &d.raw_delta {
                Some(raw) => {
                    defect = true;
                    raw.clone().into_bytes()
                }
                None => plan.to_json(),
            };
            let mut outer = store.clone();
            outer.insert("delta.json".into(), delta_json);
            let mut listed = outer.clone();
            listed.insert("bundle.json".into(), manifest.clone());
            let sums = input.raw_sums.clone().unwrap_or_else(|| sums_of(&listed));
            let keys: Vec<String> = store.keys().cloned().collect();
            if !keys.is_empty() {
                if let Some(n) = d.leave_out {
                    outer.remove(&keys[n as usize % keys.len()]);
                    defect = true;
                }
                if let Some(n) = d.change {
                    if let Some(c) = outer.get_mut(&keys[n as usize % keys.len()]) {
                        c.push(b'!');
                    }
                    defect = true;
                }
            }
            expect_carried = Some((plan.target_content_digest.clone(), not_carried));
            tar_zst(&manifest, sums.as_bytes(), &outer)
        }
    };

    let want = |p: &str, _: Option<u64>| wanted.contains(p);
    match peek_stream(bytes.as_slice(), &want, limits) {
        Ok(peeked) => {
            let mut read = 0u64;
            for (p, c) in &peeked.entries {
                assert_eq!(
                    peeked.sums.get(p),
                    Some(&hex(c)),
                    "{p:?} does not match its sum"
                );
                assert!(
                    c.len() as u64 <= limits.per_entry,
                    "{p:?} over the per-entry limit"
                );
                read += c.len() as u64;
                assert!(wanted.contains(p), "{p:?} was not asked for");
            }
            if peeked.delta.is_none() {
                assert!(read <= limits.total, "{read} bytes over the total limit");
            }
            for p in &peeked.not_carried {
                assert!(peeked.sums.contains_key(p), "{p:?}");
            }
            assert_eq!(peeked.content_digest.len(), 64);
            if !defect {
                let mut all = files.clone();
                all.insert("bundle.json".into(), MANIFEST.as_bytes().to_vec());
                match &expect_carried {
                    None => {
                        assert_eq!(peeked.content_digest, hex(sums_of(&all).as_bytes()));
                        assert_eq!(
                            peeked.entries.keys().cloned().collect::<BTreeSet<_>>(),
                            wanted
                        );
                    }
                    Some((digest, not_carried)) => {
                        assert_eq!(&peeked.content_digest, digest);
                        assert_eq!(
                            &peeked.not_carried.iter().cloned().collect::<BTreeSet<_>>(),
                            not_carried
                        );
                        let got: BTreeSet<String> = peeked.entries.keys().cloned().collect();
                        let carried: BTreeSet<String> =
                            wanted.difference(not_carried).cloned().collect();
                        assert_eq!(got, carried);
                    }
                }
            }
        }
        Err(e) => {
            assert!(
                defect || !input.roomy,
                "a bundle built without defects, read with room, is refused: {e}"
            );
            let shown = e.to_string();
            assert!(!shown.contains('\u{1b}'), "{shown:?}");
        }
    }
});
