//! What nodes answer during `certs renew` for kubeadm workers' kubelet client certificates
//! (`modules::renew_kubelet`): a worker's certificate request (`learn_request`: one base64 line
//! or nothing) and the first master's signed certificates (`learn_certs`: `NAME BASE64` lines).
//! Never panics; every accepted value is one line of base64 no longer than `MAX_PEM_B64`, and
//! every accepted node name is plain (it becomes part of a fact key and of messages).
#![no_main]

use kubexm_install::modules::renew_kubelet::{learn_certs, learn_request, MAX_PEM_B64};
use libfuzzer_sys::fuzz_target;

fn base64_line(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_PEM_B64
        && v
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(facts) = learn_request(text) {
        assert!(facts.len() <= 1, "{facts:?}");
        for (k, v) in &facts {
            assert_eq!(k, "csr");
            assert!(base64_line(v), "{v:?}");
        }
    }
    if let Ok(facts) = learn_certs(text) {
        for (k, v) in &facts {
            let name = k
                .strip_prefix("kubelet-client-cert/")
                .unwrap_or_else(|| panic!("fact key {k:?} outside its prefix"));
            assert!(!name.is_empty() && name.len() <= 253, "{name:?}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_'),
                "{name:?}"
            );
            assert!(base64_line(v), "{v:?}");
        }
    }
});
