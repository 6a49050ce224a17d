//! The reader of the API server's `apiserver_requested_deprecated_apis` metric
//! (`facts::deprecated::parse`), whose text comes from the cluster: never panics, bounded; every
//! API it keeps is plain (no control characters, nothing a shell or a terminal would read as
//! more than a name), and the refusals it leads to are a subset of what it kept.
#![no_main]

use kubexm_install::facts::deprecated::{blocking, parse, Release, MAX_ENTRIES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let apis = parse(text);
    assert!(apis.len() <= MAX_ENTRIES);
    for a in &apis {
        assert!(!a.version.is_empty() && !a.resource.is_empty());
        for s in [&a.group, &a.version, &a.resource, &a.subresource] {
            assert!(
                s.len() <= 128
                    && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')),
                "{s:?}"
            );
        }
        let shown = a.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }
    let target = Release { major: 1, minor: 22 };
    for b in blocking(&apis, target) {
        assert!(apis.contains(b));
        assert!(b.removed.is_some_and(|r| r <= target));
    }
});
