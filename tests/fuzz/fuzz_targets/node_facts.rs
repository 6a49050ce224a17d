//! What nodes print about themselves: preflight's host facts (`facts::host::parse`: uname -r,
//! the cgroup filesystem, os-release) and `status`'s node facts (`facts::node::parse_node`:
//! versions, units, certificates). Never panics; accepted host facts are short and hold no
//! control characters; node facts hold no control characters in what is printed.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use kubexm_install::facts::{host, node};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(h) = host::parse(text) {
        assert!(h.kernel_release.len() <= 128, "{:?}", h.kernel_release);
        assert!(!h.kernel_release.chars().any(char::is_control));
        if let Some(os) = &h.os {
            assert!(!os.chars().any(char::is_control), "{os:?}");
        }
        let _ = h.summary();
    }
    let f = node::parse_node(text, UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    for c in &f.certificates {
        assert!(!c.path.chars().any(char::is_control), "{:?}", c.path);
        assert!(!c.subject.chars().any(char::is_control), "{:?}", c.subject);
    }
    for v in f.versions.values() {
        assert!(!v.chars().any(char::is_control), "{v:?}");
    }
});
