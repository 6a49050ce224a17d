//! A backup file as the installer reads it (`kubexm-install backup verify` / `restore`): the
//! encrypted layer (`backup::crypt::decrypt`, with a fixed key: random bytes never
//! authenticate, so this covers the header and chunk framing) and the decrypted archive
//! (`backup::check_archive`: manifest first, every entry listed, sizes and sha256 checked).
//! Never panics; an accepted archive wrote exactly the entries its manifest lists, each a
//! fixed entry shape, inside the directory it was given.
#![no_main]

use kubexm_install::backup::{check_archive, crypt, entry_path_ok};
use libfuzzer_sys::fuzz_target;

fn files_under(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, base, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let key = crypt::BackupKey::from_bytes([42u8; 32]);
    let mut sink = Vec::new();
    let _ = crypt::decrypt(&key, &mut &data[..], &mut sink);

    let Ok(dir) = tempfile::tempdir() else { return };
    let plain = dir.path().join("archive.tar");
    if std::fs::write(&plain, data).is_err() {
        return;
    }
    let into = dir.path().join("out");
    if std::fs::create_dir(&into).is_err() {
        return;
    }
    if let Ok(m) = check_archive(&plain, &into) {
        let mut got = Vec::new();
        files_under(&into, &into, &mut got);
        got.sort();
        let mut want: Vec<String> = m.entries.iter().map(|e| e.path.clone()).collect();
        want.sort();
        assert_eq!(got, want);
        assert!(want.iter().all(|p| entry_path_ok(p)));
    }
});
