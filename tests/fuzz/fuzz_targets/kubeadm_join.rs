//! The parser of `kubeadm init` / `kubeadm token create --print-join-command` output: never
//! panics; what it accepts is well-formed (no whitespace or control characters anywhere, a token
//! of the documented shape, sha256 hashes).
#![no_main]

use kubexm_install::modules::kubeadm::join::{learn, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = parse(text) {
        let clean =
            |s: &str| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control());
        assert!(clean(&c.endpoint), "{:?}", c.endpoint);
        assert!(clean(&c.token), "{:?}", c.token);
        assert!(c
            .ca_cert_hashes
            .iter()
            .all(|h| h.starts_with("sha256:") && h.len() == 71));
        if let Some(k) = &c.certificate_key {
            assert_eq!(k.len(), 64);
        }
    }
    let _ = learn(text);
});
