//! `delta.json` of a delta bundle (`delta::DeltaManifest::parse`, read by `unpack` before it
//! rebuilds the target and by `kubexm-build diff`): never panics; an accepted manifest lists
//! exactly its `targetSums`, in order, every path a relative bundle path (no `..`, `.`, root,
//! backslash or control character), modes 0644 or 0755, registry entries naming a plain
//! repository and others none, and every digest 64 lowercase hex digits; the lines that name
//! what a site lacks, and every refusal, are printed without control characters.
#![no_main]

use kubexm_bundles::delta::{DeltaManifest, EntrySource, DELTA_VERSION};
use libfuzzer_sys::fuzz_target;

fn hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn plain_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains(['\\', '\0'])
        && !p.chars().any(char::is_control)
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

fuzz_target!(|data: &[u8]| {
    match DeltaManifest::parse(data) {
        Ok(m) => {
            assert_eq!(m.kubexm_delta, DELTA_VERSION);
            assert!(hex64(&m.target_content_digest) && hex64(&m.inventory_sha256));
            let lines: Vec<&str> = m.target_sums.lines().collect();
            assert_eq!(lines.len(), m.entries.len());
            for (e, line) in m.entries.iter().zip(&lines) {
                assert_eq!(*line, format!("{}  {}", e.sha256, e.path));
                assert!(
                    plain_path(&e.path) && e.path != "SHA256SUMS",
                    "{:?}",
                    e.path
                );
                assert!(hex64(&e.sha256));
                assert!(e.mode == 0o644 || e.mode == 0o755);
                match (e.source, &e.repository) {
                    (EntrySource::Registry, Some(r)) => assert!(
                        r.len() <= 255
                            && r.split('/').all(|c| {
                                !c.is_empty()
                                    && c != "."
                                    && c != ".."
                                    && c.bytes().all(|b| {
                                        b.is_ascii_lowercase()
                                            || b.is_ascii_digit()
                                            || matches!(b, b'.' | b'_' | b'-')
                                    })
                            }),
                        "{r:?}"
                    ),
                    (EntrySource::Registry, None) => {
                        panic!("a registry entry without a repository")
                    }
                    (_, r) => assert!(r.is_none()),
                }
            }
            for line in m.missing(|_| false) {
                assert!(!line.chars().any(char::is_control), "{line:?}");
            }
            assert!(m.from_site().count() <= m.entries.len());
        }
        Err(e) => {
            let shown = e.to_string();
            assert!(!shown.chars().any(char::is_control), "{shown:?}");
        }
    }
});
