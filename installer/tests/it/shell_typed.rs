//! Shell for the nodes is quoted by construction: [`RunCommand`] takes a
//! [`Script`](kubexm_install::runner::shell::Script), which has no `From<String>`, so a
//! `format!`ed string cannot reach a node's `sh` unquoted. This scan (over the token stream of
//! `installer/src`, comments and string literals blanked, as `imports.rs` reads it) keeps the
//! ways around the type from coming back:
//!
//! * no `format!` handed to `RunCommand::new`, `.unless`, `.verify` or `.undo`, and no
//!   `From<String>` (or `From<&String>`) for `Script`;
//! * `Script::__from_template` (what `script!` expands to) only in `runner/shell.rs`;
//! * `Script::trusted_shell`, the one escape hatch for text that is already shell, only where
//!   [`TRUSTED_SHELL`] counts it, each with a comment saying why. The list may only shrink: a
//!   file that uses fewer than its count fails too, so the count is lowered with the fix.
//!
//! [`RunCommand`]: kubexm_install::pipeline::ops::RunCommand

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::imports::tokens;

/// Files allowed to call `Script::trusted_shell`, with how many times (exactly).
const TRUSTED_SHELL: &[(&str, usize)] = &[
    // The revert scripts of `ManagedBlock` ops (chrony.conf, /etc/hosts), built with quote().
    ("modules/os.rs", 2),
    // The revert script of the `/etc/exports` ManagedBlock.
    ("modules/storage.rs", 1),
    // Its definition.
    ("runner/shell.rs", 1),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `installer/src` files (relative names) with their tokens.
fn scanned() -> Vec<(String, Vec<String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    assert!(
        files.len() > 100,
        "installer/src read: {} files",
        files.len()
    );
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&p).expect("read");
            (rel, tokens(&text))
        })
        .collect()
}

/// Where `pattern` (a token sequence) starts in `toks`.
fn find(toks: &[String], pattern: &[&str]) -> Vec<usize> {
    (0..toks.len().saturating_sub(pattern.len() - 1))
        .filter(|&i| pattern.iter().enumerate().all(|(k, p)| toks[i + k] == *p))
        .collect()
}

/// The bypasses found in one file's tokens, as text.
fn bypasses(toks: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let sinks: [&[&str]; 4] = [
        &["RunCommand", "::", "new", "("],
        &[".", "unless", "("],
        &[".", "verify", "("],
        &[".", "undo", "("],
    ];
    for sink in sinks {
        for at in find(toks, sink) {
            let arg = &toks[at + sink.len()..];
            if arg.len() >= 2 && (arg[0] == "format" && arg[1] == "!") {
                found.push(format!("{} format!(…)", sink.concat()));
            }
            if arg.len() >= 4 && arg[0] == "String" && arg[1] == "::" && arg[2] == "from" {
                found.push(format!("{} String::from(…)", sink.concat()));
            }
        }
    }
    for from in [
        &["From", "<", "String", ">", "for", "Script"][..],
        &["From", "<", "&", "String", ">", "for", "Script"][..],
        &[
            "From", "<", "std", "::", "string", "::", "String", ">", "for", "Script",
        ][..],
    ] {
        if !find(toks, from).is_empty() {
            found.push(format!("impl {}", from.join(" ")));
        }
    }
    found
}

#[test]
fn no_string_reaches_a_run_command_untyped() {
    let mut bad = Vec::new();
    for (rel, toks) in scanned() {
        for b in bypasses(&toks) {
            bad.push(format!("{rel}: {b}"));
        }
        if rel != "runner/shell.rs" && !find(&toks, &["__from_template"]).is_empty() {
            bad.push(format!(
                "{rel}: Script::__from_template outside the script! macro"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "shell text must be a Script built with script!/Script::arg (values quoted):\n{}",
        bad.join("\n")
    );
}

#[test]
fn trusted_shell_only_where_counted() {
    let allowed: BTreeMap<&str, usize> = TRUSTED_SHELL.iter().copied().collect();
    let mut got = BTreeMap::new();
    for (rel, toks) in scanned() {
        let n = find(&toks, &["trusted_shell"]).len();
        if n > 0 {
            got.insert(rel, n);
        }
    }
    let mut wrong = Vec::new();
    for (file, n) in &got {
        match allowed.get(file.as_str()) {
            None => wrong.push(format!("{file}: {n} new trusted_shell call(s)")),
            Some(a) if n > a => wrong.push(format!("{file}: {n} trusted_shell calls, {a} allowed")),
            Some(a) if n < a => wrong.push(format!(
                "{file}: {n} trusted_shell calls, {a} allowed: lower its count in TRUSTED_SHELL"
            )),
            _ => {}
        }
    }
    for file in allowed.keys() {
        if !got.contains_key(*file) {
            wrong.push(format!(
                "{file}: no trusted_shell call left: remove it from TRUSTED_SHELL"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The scan finds what it is for (so a change to the tokenizer cannot make it pass vacuously).
#[test]
fn the_scan_sees_a_bypass() {
    let src = r#"
        fn f(x: &str) -> Op {
            // RunCommand::new(format!("in a comment")) is fine
            let s = "RunCommand::new(format!(\"in a string\"))";
            Op::Run(RunCommand::new(format!("rm -rf {x}")).unless(format!("[ -e {x} ]")))
        }
        impl From<String> for Script { fn from(s: String) -> Self { Script(s) } }
    "#;
    let found = bypasses(&tokens(src));
    assert_eq!(
        found,
        [
            "RunCommand::new( format!(…)",
            ".unless( format!(…)",
            "impl From < String > for Script"
        ],
        "{found:?}"
    );
}
