//! The image reference parser: never panics; a parsed reference prints to a string that parses
//! back to the same reference, and rewriting it into a private registry keeps it parseable.
#![no_main]

use kubexm_manifests::image_ref::ImageRef;
use kubexm_manifests::model::RewriteMode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(r) = text.parse::<ImageRef>() else {
        return;
    };
    let printed = r.to_string();
    let again: ImageRef = printed.parse().expect("a printed reference parses");
    assert_eq!(again, r, "{text:?} -> {printed:?}");
    for mode in [RewriteMode::KeepPath, RewriteMode::Flatten] {
        let private = r.in_private_registry("registry.local:5000", Some("kubexm"), mode);
        let _: ImageRef = private
            .to_string()
            .parse()
            .expect("rewritten reference parses");
    }
});
