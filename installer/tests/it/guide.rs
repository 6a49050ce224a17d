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

    let install = PathBuf::from(env!("CARGO_BIN_EXE_kubexm-install"));
    let bin_dir = install.parent().expect("target dir").to_path_buf();
    assert!(
        bin_dir.join("kubexm-build").exists(),
        "the guide test needs kubexm-build beside kubexm-install in {}: `cargo build -p kubexm-build` (the workspace test run builds it)",
        bin_dir.display()
    );
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
    for block in &runnable {
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
            "guide block failed ({:?}):\n{block}\n--- stdout\n{}\n--- stderr\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
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
