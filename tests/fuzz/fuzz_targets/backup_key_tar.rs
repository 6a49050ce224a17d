//! A key tar inside a backup (`backup::fresh::read_tar`: `control/pki.tar` and the nodes' PKI
//! tars that `restore --fresh` merges into an empty key directory). Never panics; what it
//! accepts is at most `MAX_KEY_FILES` entries, each a relative name without `..`, root or
//! prefix components, each at most `MAX_KEY_FILE` bytes.
#![no_main]

use std::path::Component;

use kubexm_install::backup::fresh::{read_tar, MAX_KEY_FILE, MAX_KEY_FILES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else { return };
    let file = dir.path().join("keys.tar");
    if std::fs::write(&file, data).is_err() {
        return;
    }
    for what in ["control/pki.tar", "nodes/node1.tar"] {
        let Ok(files) = read_tar(&file, what, &|_| true) else {
            continue;
        };
        assert!(files.len() <= MAX_KEY_FILES);
        for (name, bytes) in &files {
            assert!(
                name.components().all(|c| matches!(c, Component::Normal(_))),
                "{name:?}"
            );
            assert!(name.components().next().is_some(), "an empty name");
            assert!(bytes.len() as u64 <= MAX_KEY_FILE, "{name:?}: {}", bytes.len());
        }
    }
});
