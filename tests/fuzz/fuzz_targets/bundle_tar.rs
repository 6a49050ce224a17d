//! The bundle reader on tar bytes (compressed here, so the fuzzer works on the tar layer).
#![no_main]

use kubexm_bundles::verify::{verify_limited, Limits, NullSink};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(zst) = zstd::encode_all(data, 1) else {
        return;
    };
    let limits = Limits {
        max_bytes: Some(64 << 20),
    };
    if let Ok(report) = verify_limited(zst.as_slice(), &mut NullSink, limits) {
        assert!(report.bytes <= 64 << 20);
        assert!(report.entries >= 2);
    }
});
