//! The certificate inventory's reader of what a node printed (`certs::parse::parse_answer`):
//! never panics, bounded; every certificate it accepts names a path under the roots it was
//! given, and its printed texts hold no control characters.
#![no_main]

use kubexm_install::certs::parse::{parse_answer, MAX_CERTS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let roots = vec!["/etc/kubernetes/".to_string(), "/etc/ssl/etcd/ssl/".to_string()];
    if let Ok(a) = parse_answer(text, &roots) {
        assert!(a.found.len() <= MAX_CERTS);
        for f in &a.found {
            assert!(roots.iter().any(|r| f.path.starts_with(r.as_str())), "{:?}", f.path);
            assert!(!f.path.split('/').any(|c| c == ".."));
            for s in [&f.subject, &f.issuer, &f.path].into_iter().chain(f.sans.iter()) {
                assert!(!s.chars().any(char::is_control), "{s:?}");
            }
        }
        for (p, _) in &a.problems {
            assert!(!p.chars().any(char::is_control), "{p:?}");
        }
    }
});
