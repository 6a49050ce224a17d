//! Repository hygiene: every dependency a workspace member declares is used by it, and a
//! `[dependencies]` entry used only by tests is a dev-dependency (issue 35: `http` in the builder,
//! `serde` in osrepo and `zstd` in the installer were declared and not used by the library).
//!
//! "Used" means the crate's Rust name appears as a path (`name::`), in a `use`, or as
//! `extern crate` in the member's sources. A dependency declared only to turn on a feature of
//! another crate would be listed in `FEATURE_ONLY` with its reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Dependencies declared for a reason other than being named in code: (member, crate, why).
const FEATURE_ONLY: &[(&str, &str, &str)] = &[];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Normal,
    Dev,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `[workspace] members` of the root Cargo.toml.
fn members(root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).expect("root Cargo.toml");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line in the root Cargo.toml");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The names under `[dependencies]` and `[dev-dependencies]` of one manifest.
fn declared(manifest: &str) -> Vec<(String, Section)> {
    let mut out = Vec::new();
    let mut section = None;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = match line {
                "[dependencies]" => Some(Section::Normal),
                "[dev-dependencies]" => Some(Section::Dev),
                _ => None,
            };
            continue;
        }
        let Some(section) = section else { continue };
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line
            .split(['=', '.', ' '])
            .next()
            .unwrap_or_default()
            .trim();
        if !name.is_empty() {
            out.push((name.to_owned(), section));
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != "fuzz" {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn mentions(text: &str, ident: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(at) = text[from..].find(ident) {
        let start = from + at;
        let end = start + ident.len();
        from = end;
        if text[..start].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &text[end..];
        let before = text[..start].trim_end();
        if rest.starts_with("::")
            || rest.starts_with('!')
            || before.ends_with("use")
            || before.ends_with("extern crate")
        {
            return true;
        }
    }
    false
}

#[test]
fn every_declared_dependency_is_used_where_it_is_declared() {
    let root = workspace_root();
    let mut problems = Vec::new();
    let mut checked = 0;
    for member in members(&root) {
        let dir = root.join(&member);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("member manifest");
        let mut lib_files = Vec::new();
        rust_files(&dir.join("src"), &mut lib_files);
        if dir.join("build.rs").exists() {
            lib_files.push(dir.join("build.rs"));
        }
        let mut test_files = Vec::new();
        for sub in ["tests", "benches", "examples"] {
            rust_files(&dir.join(sub), &mut test_files);
        }
        let read = |files: &[PathBuf]| -> String {
            files
                .iter()
                .map(|f| std::fs::read_to_string(f).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n")
        };
        let lib_text = read(&lib_files);
        let test_text = read(&test_files);
        let mut sections: BTreeMap<String, Vec<Section>> = BTreeMap::new();
        for (name, section) in declared(&manifest) {
            sections.entry(name).or_default().push(section);
        }
        for (name, found_in) in sections {
            if FEATURE_ONLY
                .iter()
                .any(|(m, c, _)| *m == member && *c == name)
            {
                continue;
            }
            checked += 1;
            let ident = name.replace('-', "_");
            let in_lib = mentions(&lib_text, &ident);
            let in_tests = mentions(&test_text, &ident);
            let normal = found_in.contains(&Section::Normal);
            if normal && !in_lib && in_tests && !found_in.contains(&Section::Dev) {
                problems.push(format!(
                    "{member}: `{name}` is used only by tests: move it to [dev-dependencies]"
                ));
            } else if normal && !in_lib && !in_tests {
                problems.push(format!(
                    "{member}: `{name}` is declared and never used: remove it"
                ));
            } else if !normal && !in_tests && !in_lib {
                problems.push(format!(
                    "{member}: dev-dependency `{name}` is never used: remove it"
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} dependencies found: is the manifest parser broken?"
    );
    assert!(
        problems.is_empty(),
        "dependency hygiene:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_usage_check_tells_a_path_from_a_word() {
    assert!(mentions("use serde::Deserialize;", "serde"));
    assert!(mentions("let x = zstd::encode_all(r, 3);", "zstd"));
    assert!(mentions("use {sha2::Sha256};", "sha2"));
    assert!(mentions("extern crate tar;", "tar"));
    assert!(!mentions("// fetched over http://example", "http"));
    assert!(!mentions("let serde_json = 1; // serde", "serde"));
    assert!(!mentions("my_http::get()", "http"));
}

#[test]
fn manifest_sections_are_read_apart() {
    let m = "[package]\nname = \"x\"\n[dependencies]\nfoo.workspace = true\nbar-baz = { workspace = true }\n\
             # a comment\n[dev-dependencies]\nqux = \"1\"\n[lints]\nworkspace = true\n";
    assert_eq!(
        declared(m),
        vec![
            ("foo".to_owned(), Section::Normal),
            ("bar-baz".to_owned(), Section::Normal),
            ("qux".to_owned(), Section::Dev),
        ]
    );
}
