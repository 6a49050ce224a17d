//! The operator guide (`installer/docs/guide.md`) cannot rot: every block marked
//! `<!-- guide-test: files -->` is run as written with bash (`-euo pipefail`), in a scratch
//! directory holding the example cluster.yaml, with both binaries on `PATH` and
//! `KUBEXM_WORK_DIR` set to a scratch work directory. Blocks marked `guide-test: cluster` (with
//! an optional ` prepare=NAME`) need real nodes and a mirror: `tests/lab/guide` runs every block
//! of the guide, as written and in order, on a lab. Every ```sh block carries one of the markers.

use std::path::PathBuf;
use std::process::Command;

const FILES: &str = "<!-- guide-test: files -->";
const CLUSTER: &str = "<!-- guide-test: cluster -->";

/// Whether `line` is a cluster marker: `<!-- guide-test: cluster -->` or, with what the lab
/// prepares first, `<!-- guide-test: cluster prepare=NAME -->`.
fn is_cluster_marker(line: &str) -> bool {
    let l = line.trim();
    l == CLUSTER
        || l.strip_prefix("<!-- guide-test: cluster prepare=")
            .and_then(|r| r.strip_suffix(" -->"))
            .is_some_and(|name| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            })
}

fn guide() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/guide.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The ```sh block right after each line `is_marker` accepts.
fn blocks(text: &str, is_marker: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if !is_marker(l) {
            continue;
        }
        assert_eq!(
            lines.next().map(str::trim),
            Some("```sh"),
            "{l} must be followed by a ```sh block"
        );
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        out.push(body.join("\n"));
    }
    out
}

/// The directory holding both binaries (`kubexm-build` is built beside `kubexm-install`).
fn bin_dir() -> PathBuf {
    let install = PathBuf::from(env!("CARGO_BIN_EXE_kubexm-install"));
    let bin_dir = install.parent().expect("target dir").to_path_buf();
    assert!(
        bin_dir.join("kubexm-build").exists(),
        "the guide test needs kubexm-build beside kubexm-install in {}: `cargo build -p kubexm-build` (the workspace test run builds it)",
        bin_dir.display()
    );
    bin_dir
}

/// Runs each block as written with bash (`-euo pipefail`) in a scratch directory holding the
/// example cluster.yaml, both binaries on `PATH`; returns the directory for what they left.
fn run_files_blocks(runnable: &[String]) -> tempfile::TempDir {
    let bin_dir = bin_dir();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples/cluster.yaml"),
        dir.path().join("cluster.yaml"),
    )
    .expect("copy the example cluster.yaml");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for block in runnable {
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", block])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("KUBEXM_WORK_DIR", dir.path().join("work"))
            .env("KUBEXM_LOG", "warn")
            .env_remove("KUBEXM_TRUSTED_KEYS")
            .env_remove("KUBEXM_LOG_FORMAT")
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "block failed ({:?}):\n{block}\n--- stdout\n{}\n--- stderr\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

#[test]
fn every_files_block_of_the_guide_runs() {
    let text = guide();
    let runnable = blocks(&text, |l| l.trim() == FILES);
    assert!(runnable.len() >= 5, "{} runnable blocks", runnable.len());
    let cluster = blocks(&text, is_cluster_marker);
    assert!(cluster.len() >= 6, "{} cluster blocks", cluster.len());
    // Every marker is one of the two, spelled right.
    for l in text.lines().filter(|l| l.contains("guide-test")) {
        assert!(
            l.contains("`") || l.trim() == FILES || is_cluster_marker(l),
            "unknown marker: {l}"
        );
    }
    // No command block escapes the tests: each ```sh block follows a marker (blank lines aside).
    let lines: Vec<&str> = text.lines().collect();
    for (i, _) in lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim() == "```sh")
    {
        let marker = lines[..i].iter().rev().find(|p| !p.trim().is_empty());
        assert!(
            marker.is_some_and(|m| m.trim() == FILES || is_cluster_marker(m)),
            "guide.md line {}: a ```sh block without a guide-test marker",
            i + 1
        );
    }

    let dir = run_files_blocks(&runnable);
    // What the blocks left behind is what the guide says they make.
    for f in [
        "needs.json",
        "plan.json",
        "site-inventory.json",
        "man1/kubexm-install.1",
    ] {
        assert!(dir.path().join(f).exists(), "{f} not written");
    }
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("plan.json")).expect("plan.json"))
            .expect("plan -o json is JSON");
    assert!(plan["modules"].as_array().is_some_and(|m| !m.is_empty()));
}

// The top-level README.md: short (at most 200 lines), and every ```sh block in it exercised.
// Besides the guide's two markers it knows three of its own, for blocks no scratch directory can
// run: `readme-test: upstream` (needs the internet: its flags are checked against kubexm-build's
// definitions and its cluster.yaml validated), `readme-test: ci` (the command `.ci/run` runs) and
// `readme-test: lab` (a root-only lab script: checked to exist and parse; run by hand).
const UPSTREAM: &str = "<!-- readme-test: upstream -->";
const CI: &str = "<!-- readme-test: ci -->";
const LAB: &str = "<!-- readme-test: lab -->";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let p = repo_root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The body of `pub struct NAME { … }` in `src`.
fn struct_body<'a>(src: &'a str, name: &str) -> &'a str {
    let start = src
        .find(&format!("pub struct {name} {{"))
        .unwrap_or_else(|| panic!("builder/src/cli.rs: no struct {name}"));
    let rest = &src[start..];
    &rest[..rest.find("\n}").expect("struct end")]
}

/// Whether `flag` (`-f` or `--accept-unpinned`) is declared in `body`: `short = 'f'`, or
/// `long = "name"`, or a field `pub name_with_underscores` whose own attribute says `long`.
fn declares(body: &str, flag: &str) -> bool {
    if let Some(long) = flag.strip_prefix("--") {
        if body.contains(&format!("long = \"{long}\"")) {
            return true;
        }
        let field = format!("pub {}:", long.replace('-', "_"));
        let lines: Vec<&str> = body.lines().map(str::trim).collect();
        return lines.iter().enumerate().any(|(i, l)| {
            l.starts_with(&field)
                && lines[..i]
                    .iter()
                    .rev()
                    .take_while(|a| {
                        a.starts_with("#[") || a.starts_with("///") || a.starts_with("long")
                    })
                    .any(|a| a.starts_with("#[arg(long") || *a == "long,")
        });
    }
    let short = flag.strip_prefix('-').expect("a flag");
    body.contains(&format!("short = '{short}'"))
}

#[test]
fn the_readme_is_short_and_every_block_in_it_is_exercised() {
    let text = read("README.md");
    let n = text.lines().count();
    assert!(
        n <= 200,
        "README.md has {n} lines; the limit is 200 (move detail to installer/docs/reference.md)"
    );

    // Every fenced block is a ```sh block right after a known marker.
    let lines: Vec<&str> = text.lines().collect();
    let mut fence_open = false;
    for (i, l) in lines.iter().enumerate() {
        if !l.trim_start().starts_with("```") {
            continue;
        }
        fence_open = !fence_open;
        if !fence_open {
            continue;
        }
        assert_eq!(
            l.trim(),
            "```sh",
            "README.md line {}: only ```sh blocks",
            i + 1
        );
        let marker = lines[..i].iter().rev().find(|p| !p.trim().is_empty());
        assert!(
            marker.is_some_and(|m| {
                let m = m.trim();
                m == FILES || is_cluster_marker(m) || [UPSTREAM, CI, LAB].contains(&m)
            }),
            "README.md line {}: a ```sh block without a guide-test/readme-test marker",
            i + 1
        );
    }

    // files: run as the guide's are.
    let files = blocks(&text, |l| l.trim() == FILES);
    assert!(!files.is_empty(), "no files block in README.md");
    let dir = run_files_blocks(&files);
    assert!(dir.path().join("plan.txt").exists(), "plan.txt not written");

    // cluster: each is, as written, a cluster block of the guide, which tests/lab/guide runs.
    let guide_cluster = blocks(&guide(), is_cluster_marker);
    let cluster = blocks(&text, is_cluster_marker);
    assert!(!cluster.is_empty(), "no cluster block in README.md");
    for b in &cluster {
        assert!(
            guide_cluster.contains(b),
            "README.md cluster block is not a guide cluster block (tests/lab/guide runs those):\n{b}"
        );
    }

    // upstream: the bundle command. It downloads, so it is not run; what can go wrong without the
    // internet is checked: the binary it runs, its verb and every flag exist, and its cluster.yaml
    // validates.
    let upstream = blocks(&text, |l| l.trim() == UPSTREAM);
    assert_eq!(upstream.len(), 1, "one upstream block");
    let line = upstream[0].trim();
    assert!(
        !line.contains('\n'),
        "the upstream block is one command line"
    );
    let args = line
        .strip_prefix("cargo run --release --bin kubexm-build -- ")
        .unwrap_or_else(|| panic!("not a kubexm-build command: {line}"));
    assert!(read("builder/Cargo.toml").contains("[[bin]]\nname = \"kubexm-build\""));
    let words: Vec<&str> = args.split_whitespace().collect();
    assert_eq!(words[0], "bundle");
    let cli = read("builder/src/cli.rs");
    assert!(
        cli.contains("Bundle(BundleArgs)"),
        "kubexm-build has no bundle verb"
    );
    let flags = format!(
        "{}\n{}",
        struct_body(&cli, "BundleArgs"),
        struct_body(&cli, "SourceArgs")
    );
    let mut cluster_yaml = None;
    let mut it = words[1..].iter().peekable();
    while let Some(w) = it.next() {
        assert!(w.starts_with('-'), "unexpected word {w:?} in: {line}");
        assert!(declares(&flags, w), "kubexm-build bundle has no flag {w}");
        if matches!(*w, "-f" | "-o") {
            let v = it.next().unwrap_or_else(|| panic!("{w} needs a value"));
            if *w == "-f" {
                cluster_yaml = Some(*v);
            }
        }
    }
    let cluster_yaml = cluster_yaml.expect("the bundle command names its cluster.yaml with -f");
    let out = Command::new(bin_dir().join("kubexm-build"))
        .args(["validate", "-f", cluster_yaml])
        .current_dir(repo_root())
        .env("KUBEXM_LOG", "warn")
        .env_remove("KUBEXM_CATALOG")
        .env_remove("KUBEXM_ZONE_FILE")
        .env_remove("KMZONE")
        .output()
        .expect("kubexm-build runs");
    assert!(
        out.status.success(),
        "kubexm-build validate -f {cluster_yaml} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // ci: the test command is what CI runs.
    let ci = blocks(&text, |l| l.trim() == CI);
    assert_eq!(ci, ["./tests/run-all"]);
    assert!(
        read(".ci/run")
            .lines()
            .any(|l| l.trim() == "exec ./tests/run-all"),
        ".ci/run does not run ./tests/run-all"
    );

    // lab: a root-only lab script, run by hand: it exists, is executable and parses.
    for b in blocks(&text, |l| l.trim() == LAB) {
        let script = repo_root().join(b.trim());
        let meta = std::fs::metadata(&script).unwrap_or_else(|e| panic!("{b}: {e}"));
        assert!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0,
            "{b} is not executable"
        );
        let out = Command::new("bash")
            .arg("-n")
            .arg(&script)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "bash -n {b}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The documents an operator reads, relative to the repository root.
const DOCS: [&str; 6] = [
    "README.md",
    "installer/docs/guide.md",
    "installer/docs/reference.md",
    "tests/lab/README.md",
    "bundles/README.md",
    "templates/README.md",
];

/// Every relative Markdown link `](target)` and every backticked `….md` path in the documents
/// names a file or directory that exists (relative to the document for links, to the
/// repository root or the document for backticked paths): no reference to a moved or
/// never-written document.
#[test]
fn every_document_link_and_md_path_exists() {
    let root = repo_root();
    let mut missing = Vec::new();
    let mut seen = 0;
    for doc in DOCS {
        let text = read(doc);
        let dir = root
            .join(doc)
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default();
        let mut targets: Vec<String> = Vec::new();
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            targets.push(rest[..end].to_string());
        }
        for part in text.split('`').skip(1).step_by(2) {
            if part.ends_with(".md") && !part.contains(char::is_whitespace) {
                targets.push(part.to_string());
            }
        }
        for t in targets {
            let t = t.split('#').next().unwrap_or_default();
            if t.is_empty() || t.contains("://") || t.starts_with("mailto:") {
                continue;
            }
            seen += 1;
            if !dir.join(t).exists() && !root.join(t).exists() {
                missing.push(format!("{doc}: {t}"));
            }
        }
    }
    assert!(seen > 10, "only {seen} links found: the scanner is broken");
    assert!(
        missing.is_empty(),
        "links to nothing:\n{}",
        missing.join("\n")
    );
}

/// The README's version matrix ("What ran for real", per Kubernetes minor and bootstrap path):
/// the table under that heading in the section "Supported operating systems and Kubernetes
/// versions".
fn version_matrix(readme: &str) -> (String, Vec<Vec<String>>) {
    let start = readme
        .find("## Supported operating systems and Kubernetes versions")
        .expect("README.md: the section on supported versions");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let lead = section
        .find("**What ran for real**")
        .expect("README.md: the version matrix's heading `**What ran for real**`");
    let rows = section[lead..]
        .lines()
        .skip_while(|l| !l.starts_with("| Kubernetes |"))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    (section.to_string(), rows)
}

/// Every `v1.N` / `v1.N.P` in `text`, as (minor, patch).
fn kube_versions(text: &str) -> Vec<(u32, Option<u32>)> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("v1.") {
        if text[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        {
            continue;
        }
        let rest: String = text[i + 3..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = rest.trim_end_matches('.').split('.');
        let minor = parts.next().and_then(|m| m.parse().ok());
        let patch = parts.next().and_then(|p| p.parse().ok());
        if let Some(minor) = minor {
            out.push((minor, patch));
        }
    }
    out
}

/// Issue 33, "Also": the README's version matrix says, per Kubernetes minor and bootstrap path,
/// what ran for real and what is rendered only. What can be checked mechanically: one row per
/// minor of the catalog (the built-in one with the lab's `tests/lab/mirror/catalog-lab.yaml`
/// over it, which pins v1.37.2), in order, none missing and none extra, all supported; every
/// Kubernetes release the section names is a release of that catalog; a minor said to have no
/// built-in catalog release has none, and every minor without one says so; the two bootstrap
/// paths are its columns; its date is there; every repository path it names exists.
#[test]
fn the_readme_version_matrix_matches_the_catalog() {
    use std::collections::BTreeSet;

    use kubexm_manifests::catalog::Catalog;
    use kubexm_manifests::kube_version::{NEWEST_SUPPORTED_MINOR, OLDEST_SUPPORTED};

    let readme = read("README.md");
    let (section, rows) = version_matrix(&readme);
    let builtin = Catalog::builtin().expect("the built-in catalog");
    let lab = Catalog::builtin_with_override(Some(
        &repo_root().join("tests/lab/mirror/catalog-lab.yaml"),
    ))
    .expect("the built-in catalog with the lab's");
    let minors_of = |c: &Catalog| -> BTreeSet<u32> {
        c.kubernetes
            .keys()
            .filter(|v| v.major == 1)
            .map(|v| v.minor)
            .collect()
    };
    let (builtin_minors, catalog_minors) = (minors_of(&builtin), minors_of(&lab));

    let (header, body) = rows.split_first().expect("the matrix has a header");
    assert_eq!(
        header,
        &["Kubernetes", "`kubeadm` path", "`kubexm` path"],
        "the matrix's columns"
    );
    let body = &body[1..]; // the |---| line
    let mut listed = Vec::new();
    for row in body {
        assert_eq!(row.len(), 3, "a matrix row has 3 cells: {row:?}");
        let label = kube_versions(&row[0]);
        let range = match label.as_slice() {
            [(m, None)] => *m..=*m,
            [(a, None), (b, None)] if a < b && row[0].contains('–') => *a..=*b,
            _ => panic!(
                "a matrix row starts with a minor (v1.N) or a range (v1.A–v1.B): {:?}",
                row[0]
            ),
        };
        listed.extend(range);
    }
    // Every release the section names (in the table or around it).
    for (minor, patch) in kube_versions(&section) {
        let Some(patch) = patch else { continue };
        assert!(
            lab.kubernetes
                .keys()
                .any(|v| (v.major, v.minor, v.patch) == (1, minor, patch)),
            "README.md's version matrix names v1.{minor}.{patch}, not a Kubernetes release of the catalog (built-in + tests/lab/mirror/catalog-lab.yaml)"
        );
    }
    assert!(
        listed.windows(2).all(|w| w[0] < w[1]),
        "the matrix's minors in order, each once: {listed:?}"
    );
    let listed: BTreeSet<u32> = listed.into_iter().collect();
    assert_eq!(
        listed, catalog_minors,
        "README.md's version matrix has a row for every minor of the catalog and no other"
    );
    let supported: BTreeSet<u32> = (OLDEST_SUPPORTED.minor..=NEWEST_SUPPORTED_MINOR.1).collect();
    assert!(
        listed.is_subset(&supported),
        "the matrix lists only supported minors (v1.{}–v1.{}): {listed:?}",
        OLDEST_SUPPORTED.minor,
        NEWEST_SUPPORTED_MINOR.1
    );
    for m in &listed {
        let said = section.contains(&format!("v1.{m} has no built-in catalog release"));
        assert_eq!(
            said,
            !builtin_minors.contains(m),
            "v1.{m}: the matrix must say \"v1.{m} has no built-in catalog release\" exactly when manifests/catalog/catalog.yaml has none"
        );
    }

    // Dated, and every repository path it names exists.
    let dated = section.split_whitespace().any(|w| {
        let w = w.trim_matches(|c: char| !c.is_ascii_digit());
        w.len() == 10 && w.as_bytes()[4] == b'-' && w.as_bytes()[7] == b'-'
    });
    assert!(
        dated,
        "the version matrix says when it was true (YYYY-MM-DD)"
    );
    let mut paths = 0;
    for code in section.split('`').skip(1).step_by(2) {
        let path = code.split_whitespace().next().unwrap_or_default();
        if path.starts_with("tests/") || path.starts_with("installer/") {
            paths += 1;
            assert!(
                repo_root().join(path).exists(),
                "README.md's version matrix names `{path}`, which does not exist"
            );
        }
    }
    assert!(
        paths >= 4,
        "only {paths} paths found: the scanner is broken"
    );
}
