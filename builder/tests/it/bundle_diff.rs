//! `kubexm-build diff` on real bundles built from the `bundle_e2e` servers (files from the
//! testkit's loopback mirror, images from Debian's `docker-registry`): the cluster at the catalog's
//! newest v1.32 patch (OLD) and at v1.33.11 (NEW), a minor apart. The diff must list exactly what
//! the two resolves differ by — files, components, images — and nothing else, and say the same
//! of NEW whether it is read whole, split, as a delta against OLD, or against OLD installed
//! (the site's record).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use serde_json::Value;

use crate::bundle_delta::{content_digest, inventory_of};
use crate::bundle_e2e::{bundle, extract, setup, text, verify_cli, Lab};
use crate::bundle_path::{newest_v132, serve_version};

fn diff(args: &[&str], extra_env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubexm-build"));
    cmd.arg("diff").args(args).env_remove("KUBEXM_WORK_DIR");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.output().expect("kubexm-build diff runs")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "diff failed: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("diff -o json is JSON")
}

/// `resolve -o json` of `file` (in the lab's directory).
fn resolve(lab: &Lab, file: &str) -> Value {
    let d = lab.dir.path();
    let out = Command::new(env!("CARGO_BIN_EXE_kubexm-build"))
        .args(["resolve", "-o", "json", "-f"])
        .arg(d.join(file))
        .arg("--zone-file")
        .arg(d.join("zone.yaml"))
        .arg("--catalog")
        .arg(d.join("catalog.yaml"))
        .env_remove("KMZONE")
        .output()
        .expect("resolve runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

fn strings(v: &Value, list: &str, key: &str) -> BTreeSet<String> {
    v[list]
        .as_array()
        .unwrap_or_else(|| panic!("{list} is a list"))
        .iter()
        .map(|x| x[key].as_str().expect("string").to_owned())
        .collect()
}

/// `files.<kind>[].path`, or `files.changed[].<side>.path`.
fn paths(d: &Value, pointer: &str, key: &str) -> BTreeSet<String> {
    d.pointer(pointer)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{pointer} is a list"))
        .iter()
        .map(|x| {
            x.pointer(key)
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("{pointer} {key}"))
                .to_owned()
        })
        .collect()
}

/// name → versions of the resolve's binaries.
fn versions(r: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut by: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for b in r["binaries"].as_array().expect("binaries") {
        by.entry(b["name"].as_str().expect("name").to_owned())
            .or_default()
            .insert(b["version"].as_str().expect("version").to_owned());
    }
    by
}

/// The diff without what names the NEW input itself (its file, form, size on disk, notes).
fn changes(mut d: Value) -> Value {
    if let Some(new) = d.get_mut("new").and_then(Value::as_object_mut) {
        for k in ["source", "form", "fileBytes", "notes"] {
            new.remove(k);
        }
    }
    d
}

#[test]
fn diff_of_two_minors_lists_what_the_resolves_differ_by_from_every_form_of_the_bundle() {
    let lab = setup();
    let d = lab.dir.path();
    let v132 = newest_v132().to_string();
    serve_version(&lab, &v132);
    // NEW: the lab's cluster at v1.33.11; OLD: the same cluster at v1.32's newest patch.
    let out = bundle(&lab, "new.tar.zst", "cache", &[]);
    assert!(out.status.success(), "new: {}", text(&out.stderr));
    let new_yaml = std::fs::read_to_string(d.join("cluster.yaml")).expect("cluster.yaml");
    std::fs::copy(d.join("cluster-path.yaml"), d.join("cluster.yaml")).expect("copy");
    let out = bundle(&lab, "old.tar.zst", "cache", &[]);
    assert!(out.status.success(), "old: {}", text(&out.stderr));
    let r_old = resolve(&lab, "cluster-path.yaml");
    std::fs::write(d.join("cluster-new.yaml"), &new_yaml).expect("write");
    let r_new = resolve(&lab, "cluster-new.yaml");
    let (old, new) = (d.join("old.tar.zst"), d.join("new.tar.zst"));
    let (old_s, new_s) = (old.display().to_string(), new.display().to_string());

    let started = Instant::now();
    let out = diff(&[&old_s, &new_s, "-o", "json"], &[]);
    eprintln!(
        "measured: diff -o json of the two lab bundles ({} and {} bytes) in {:?}",
        std::fs::metadata(&old).expect("old").len(),
        std::fs::metadata(&new).expect("new").len(),
        started.elapsed()
    );
    let full = json(&out);
    assert_eq!(full["kubexmDiff"], 1);
    assert_eq!(full["identical"], false);
    assert_eq!(full["kubernetes"]["old"], v132.as_str());
    assert_eq!(full["kubernetes"]["new"], "v1.33.11");

    // Files: exactly the resolves' difference, by path, each change pairing one component+arch.
    let (p_old, p_new) = (
        strings(&r_old, "binaries", "path"),
        strings(&r_new, "binaries", "path"),
    );
    let only_new: BTreeSet<String> = p_new.difference(&p_old).cloned().collect();
    let only_old: BTreeSet<String> = p_old.difference(&p_new).cloned().collect();
    assert!(!only_new.is_empty() && !only_old.is_empty());
    let mut listed_new = paths(&full, "/files/added", "/path");
    listed_new.extend(paths(&full, "/files/changed", "/new/path"));
    let mut listed_old = paths(&full, "/files/removed", "/path");
    listed_old.extend(paths(&full, "/files/changed", "/old/path"));
    assert_eq!(listed_new, only_new, "files only in NEW");
    assert_eq!(listed_old, only_old, "files only in OLD");
    for c in full["files"]["changed"].as_array().expect("changed") {
        assert_eq!(c["old"]["name"], c["name"]);
        assert_eq!(c["new"]["name"], c["name"]);
        assert_eq!(c["old"]["arch"], c["new"]["arch"]);
    }
    // Every kube binary went from v1.32 to v1.33.11 as a change, not an add and a remove.
    let kubelet = full["files"]["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .find(|c| c["name"] == "kubelet" && c["arch"] == "amd64")
        .expect("kubelet amd64 changed");
    assert_eq!(kubelet["old"]["version"], v132.as_str());
    assert_eq!(kubelet["new"]["version"], "v1.33.11");

    // Components: the names whose versions differ between the resolves, with those versions.
    let (c_old, c_new) = (versions(&r_old), versions(&r_new));
    let mut expected = BTreeMap::new();
    for name in c_old.keys().chain(c_new.keys()) {
        let (o, n) = (
            c_old.get(name).cloned().unwrap_or_default(),
            c_new.get(name).cloned().unwrap_or_default(),
        );
        if o != n {
            expected.insert(name.clone(), (o, n));
        }
    }
    let listed: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = full["components"]
        .as_array()
        .expect("components")
        .iter()
        .map(|c| {
            let set = |k: &str| -> BTreeSet<String> {
                c[k].as_array()
                    .expect("versions")
                    .iter()
                    .map(|v| v.as_str().expect("version").to_owned())
                    .collect()
            };
            (
                c["name"].as_str().expect("name").to_owned(),
                (set("old"), set("new")),
            )
        })
        .collect();
    assert_eq!(listed, expected, "components");

    // Images: the resolves' references, added/removed or retagged; no reference changed digest
    // (both bundles pulled them from the same registry), every size known from the SBOM.
    let (i_old, i_new) = (
        strings(&r_old, "images", "reference"),
        strings(&r_new, "images", "reference"),
    );
    let mut listed_new = paths(&full, "/images/added", "/reference");
    listed_new.extend(paths(&full, "/images/retagged", "/new/reference"));
    let mut listed_old = paths(&full, "/images/removed", "/reference");
    listed_old.extend(paths(&full, "/images/retagged", "/old/reference"));
    assert_eq!(listed_new, i_new.difference(&i_old).cloned().collect());
    assert_eq!(listed_old, i_old.difference(&i_new).cloned().collect());
    assert_eq!(full["images"]["changed"], Value::Array(vec![]));
    assert!(!full["images"]["retagged"]
        .as_array()
        .expect("retagged")
        .is_empty());
    for i in full["images"]["retagged"].as_array().expect("retagged") {
        assert!(i["new"]["size"].as_u64().is_some_and(|s| s > 0), "{i}");
        assert!(i["old"]["digest"]
            .as_str()
            .expect("digest")
            .starts_with("sha256:"));
    }

    // Nothing else: no OS packages, no other entry; cluster.yaml differs by its version line.
    assert_eq!(full["osPackages"], Value::Array(vec![]));
    assert_eq!(
        full["otherEntries"],
        serde_json::json!({"added": [], "removed": [], "changed": []})
    );
    let yaml = full["clusterYaml"]["diff"]
        .as_str()
        .expect("a unified diff");
    let changed_lines: Vec<&str> = yaml
        .lines()
        .filter(|l| {
            (l.starts_with('-') || l.starts_with('+'))
                && !l.starts_with("---")
                && !l.starts_with("+++")
        })
        .collect();
    assert_eq!(changed_lines.len(), 2, "{yaml}");
    assert!(
        changed_lines[0].contains(&format!("version: {v132}")),
        "{yaml}"
    );
    assert!(changed_lines[1].contains("version: v1.33.11"), "{yaml}");

    // Sizes: NEW's unpacked size is what verify reports; the delta carries less than NEW.
    let v = verify_cli(&new);
    let said = text(&v.stdout);
    let takes: u64 = said
        .split("takes ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("verify says its size: {said}"));
    assert_eq!(full["size"]["newBytes"], takes);
    let delta_bytes = full["size"]["deltaBytes"].as_u64().expect("delta bytes");
    assert!(delta_bytes > 0 && delta_bytes < takes, "{}", full["size"]);

    // The text form: every change named, paths and digests filtered.
    let out = diff(&[&old_s, &new_s], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let shown = filter(
        &shown
            .replace(&d.display().to_string(), "[LAB]")
            .replace(&v132, "[V132]"),
    );
    insta::assert_snapshot!("diff_two_minors_text", shown);

    // The same bundle split into parts: the same diff.
    std::fs::write(d.join("cluster.yaml"), &new_yaml).expect("restore");
    let out = bundle(&lab, "split.tar.zst", "cache", &["--split", "1M"]);
    assert!(out.status.success(), "split: {}", text(&out.stderr));
    let index = d.join("split.tar.zst.parts.json");
    let split = json(&diff(
        &[&old_s, &index.display().to_string(), "-o", "json"],
        &[],
    ));
    assert_eq!(split["new"]["form"], "split");
    assert_eq!(changes(split), changes(full.clone()));

    // A delta against a site holding OLD: the same diff of the bundle it rebuilds, read from
    // what the delta carries.
    let old_digest = content_digest(&old);
    let site = d.join("site-tree");
    extract(&old, &site);
    let (inventory, _) = inventory_of(&site, &old_digest);
    std::fs::write(d.join("site-inventory.json"), inventory.to_json()).expect("write");
    let have = d.join("site-inventory.json").display().to_string();
    let out = bundle(&lab, "delta.tar.zst", "cache", &["--have", &have]);
    assert!(out.status.success(), "delta: {}", text(&out.stderr));
    let delta_path = d.join("delta.tar.zst");
    std::fs::remove_file(d.join("delta.tar.zst.cdx.json")).ok();
    let delta = json(&diff(
        &[&old_s, &delta_path.display().to_string(), "-o", "json"],
        &[],
    ));
    assert_eq!(delta["new"]["form"], "delta");
    assert_eq!(changes(delta), changes(full.clone()));

    // Against OLD as installed: the site's work directory as kubexm-install leaves it (OLD
    // unpacked under bundles/<digest>/, the record naming it and the cluster.yaml applied —
    // here with one comment more than the bundle's, which the diff must show).
    let work = d.join("work");
    let tree = work.join("bundles").join(&old_digest);
    std::fs::create_dir_all(tree.parent().expect("parent")).expect("mkdir");
    std::fs::rename(&site, &tree).expect("move the tree");
    std::fs::write(tree.join(".kubexm-unpacked"), format!("{old_digest}\n")).expect("marker");
    let applied = format!(
        "{}# applied by kubexm-install\n",
        std::fs::read_to_string(tree.join("cluster.yaml")).expect("yaml")
    );
    let applied_sha = kubexm_testkit::sha256_hex(applied.as_bytes());
    let rec = work.join("clusters").join("lab");
    std::fs::create_dir_all(rec.join("cluster-yaml")).expect("mkdir");
    std::fs::write(
        rec.join("cluster-yaml").join(format!("{applied_sha}.yaml")),
        &applied,
    )
    .expect("write");
    std::fs::write(
        rec.join("installed.json"),
        serde_json::to_vec_pretty(&serde_json::json!({
            "formatVersion": 1, "cluster": "lab", "present": true,
            "clusterYamlSha256": applied_sha, "baseDir": d, "bundleDigest": old_digest,
            "appliedAt": "2026-01-01T00:00:00Z", "nodes": {"m1": ["etcd", "master"], "w1": ["worker"]},
            "history": [],
        }))
        .expect("json"),
    )
    .expect("write record");
    let installed = json(&diff(
        &["--installed", &new_s, "-o", "json"],
        &[("KUBEXM_WORK_DIR", &work)],
    ));
    assert_eq!(installed["old"]["form"], "installed");
    for k in [
        "kubernetes",
        "components",
        "files",
        "images",
        "osPackages",
        "otherEntries",
        "size",
    ] {
        assert_eq!(installed[k], full[k], "{k}");
    }
    let yaml = installed["clusterYaml"]["diff"].as_str().expect("diff");
    assert!(yaml.contains("-# applied by kubexm-install"), "{yaml}");

    // Misuse and damage: usage errors exit 2, a damaged bundle 4, naming it.
    assert_eq!(diff(&[&new_s], &[]).status.code(), Some(2));
    assert_eq!(
        diff(&["--installed", &old_s, &new_s], &[]).status.code(),
        Some(2)
    );
    let bytes = std::fs::read(&new).expect("read");
    let cut = d.join("cut.tar.zst");
    std::fs::write(&cut, &bytes[..bytes.len().min(600)]).expect("write");
    let out = diff(&[&old_s, &cut.display().to_string()], &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cut.tar.zst"),
        "{}",
        text(&out.stderr)
    );
    let out = diff(
        &["--installed", &new_s],
        &[("KUBEXM_WORK_DIR", &d.join("nowhere"))],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no cluster is recorded"),
        "{}",
        text(&out.stderr)
    );
}

/// Short digests (12 hex digits) as `[HEX]`, sizes (`64.0 KiB`, `512 B`) as `[SIZE]`, counts of
/// delta entries as `[N]`: what the busybox images built at test time make vary.
fn filter(text: &str) -> String {
    let is_hex = |w: &str| {
        w.len() == 12
            && w.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let mut shown: Vec<String> = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let w = words[i];
            let open = w.strip_prefix('(');
            let digits = open.unwrap_or(w);
            let number = digits.bytes().next().is_some_and(|b| b.is_ascii_digit())
                && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            let unit = words
                .get(i + 1)
                .map(|u| u.trim_end_matches([',', ')', ';', ':']));
            if number && matches!(unit, Some("B" | "KiB" | "MiB")) {
                let rest = &words[i + 1][unit.map_or(0, str::len)..];
                let paren = if open.is_some() { "(" } else { "" };
                shown.push(format!("{paren}[SIZE]{rest}"));
                i += 2;
                continue;
            }
            if number && unit == Some("entries") {
                shown.push("[N]".to_owned());
                i += 1;
                continue;
            }
            // Digests sit inside punctuation: `sha256:abc…`, `(abc…,`.
            let mut w2 = String::new();
            for part in w.split_inclusive(|c: char| !c.is_ascii_alphanumeric()) {
                let core = part.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
                if is_hex(core) {
                    w2.push_str("[HEX]");
                    w2.push_str(&part[core.len()..]);
                } else {
                    w2.push_str(part);
                }
            }
            shown.push(w2);
            i += 1;
        }
        out.push_str(&shown.join(" "));
        out.push('\n');
    }
    out
}
