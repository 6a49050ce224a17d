//! The bundle reader on raw bytes (a `.tar.zst` as found on a disk): never panics, never
//! writes past the limit, never reads unbounded zeros.
#![no_main]

use kubexm_bundles::verify::{verify_limited, Limits, NullSink};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_bytes: Some(64 << 20),
    };
    if let Ok(report) = verify_limited(data, &mut NullSink, limits) {
        assert!(report.bytes <= 64 << 20);
    }
});
