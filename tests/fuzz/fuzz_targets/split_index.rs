//! The index of a split bundle (`split::SplitIndex::parse`, what `verify`, `unpack` and
//! `kubexm-build diff` read from `<bundle>.parts.json` before any part): never panics; an
//! accepted index names a bundle that is one plain file name a file system can hold, parts
//! named `<bundle>.partNNN` beside the index (never elsewhere), 1 to `MAX_PARTS` of them, whose
//! sizes add up to the bundle's; a refusal is printed without control characters.
#![no_main]

use std::path::Path;

use kubexm_bundles::split::{part_name, SplitIndex, MAX_BUNDLE_NAME, MAX_PARTS};
use libfuzzer_sys::fuzz_target;

fn hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fuzz_target!(|data: &[u8]| {
    let at = Path::new("/media/disc1/demo.tar.zst.parts.json");
    match SplitIndex::parse(at, data) {
        Ok(index) => {
            let b = &index.bundle;
            assert!(!b.is_empty() && b.len() <= MAX_BUNDLE_NAME, "{b:?}");
            assert!(
                b != "." && b != ".." && !b.contains(['/', '\\', '\0']),
                "{b:?}"
            );
            assert!(!b.chars().any(char::is_control), "{b:?}");
            assert!(!index.parts.is_empty() && index.parts.len() <= MAX_PARTS);
            assert!(hex64(&index.sha256) && hex64(&index.content_digest));
            let mut total = 0u64;
            for (i, p) in index.parts.iter().enumerate() {
                assert_eq!(p.name, part_name(b, i, index.parts.len()));
                assert!(p.name.len() <= 255, "{:?}", p.name);
                assert!(hex64(&p.sha256));
                assert!(p.size > 0 && p.size <= index.part_size);
                let path = index.part_path(at, i);
                assert_eq!(path.parent(), at.parent(), "{path:?}");
                total = total
                    .checked_add(p.size)
                    .expect("sizes add up without overflow");
            }
            assert_eq!(total, index.size);
        }
        Err(e) => {
            let shown = e.to_string();
            assert!(!shown.chars().any(char::is_control), "{shown:?}");
        }
    }
});
