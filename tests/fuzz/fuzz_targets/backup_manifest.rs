//! The manifest inside a backup (`backup::Manifest::parse`, which `backup::check_archive` calls
//! once the archive is decrypted; `backup_archive` reaches it only through a tar header and a
//! sealed layer, this target feeds it directly): never panics; an accepted manifest names its
//! cluster and etcd member with plain names (what the work directory and cluster.yaml allow),
//! `created` and `kubexmVersion` as short printable tokens, at most `MAX_ENTRIES` entries, each
//! a fixed entry shape listed once with a lowercase hex sha256 and a `what` without control
//! characters; a refusal is printed without control characters.
#![no_main]

use kubexm_install::backup::{
    entry_path_ok, is_plain_name, Manifest, MAX_ENTRIES, MAX_TOKEN, MAX_WHAT,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| match Manifest::parse(data) {
    Ok(m) => {
        for name in [&m.cluster, &m.etcd_member] {
            assert!(is_plain_name(name), "{name:?}");
            assert!(
                !name.contains(['/', '\0']) && name != "." && name != "..",
                "{name:?}"
            );
        }
        for token in [&m.created, &m.kubexm_version] {
            assert!(!token.is_empty() && token.len() <= MAX_TOKEN, "{token:?}");
            assert!(token.bytes().all(|b| b.is_ascii_graphic()), "{token:?}");
        }
        assert!(m.entries.len() <= MAX_ENTRIES);
        let mut seen = std::collections::BTreeSet::new();
        for e in &m.entries {
            assert!(entry_path_ok(&e.path), "{:?}", e.path);
            assert!(seen.insert(&e.path), "{:?} twice", e.path);
            assert!(!e.path.split('/').any(|c| c == ".." || c.is_empty()));
            assert!(
                e.sha256.len() == 64
                    && e.sha256
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
            assert!(
                e.what.len() <= MAX_WHAT && !e.what.chars().any(char::is_control),
                "{:?}",
                e.what
            );
        }
    }
    Err(e) => {
        let shown = e.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }
});
