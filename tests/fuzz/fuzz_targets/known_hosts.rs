//! The known_hosts parser and host matcher: never panics, never takes exponential time on
//! wildcard patterns; an empty file knows no host, and whatever a file holds, a line recording
//! the key for the host appended to it makes the key known (or revoked, if a line revokes it).
#![no_main]

use kubexm_install::runner::ssh::known_hosts::{check_text, Verdict};
use libfuzzer_sys::fuzz_target;
use russh::keys::ssh_key::PublicKey;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let key = PublicKey::from_openssh(KEY).expect("test key");
    for (host, port) in [("10.0.0.1", 22u16), ("node1.example", 2222), ("", 0)] {
        let verdict = check_text(text, host, port, &key);
        if text.trim().is_empty() {
            assert_eq!(verdict, Verdict::Unknown);
        }
        if host.is_empty() {
            continue;
        }
        let name = if port == 22 {
            host.to_owned()
        } else {
            format!("[{host}]:{port}")
        };
        let learned = format!("{text}\n{name} {KEY}\n");
        let verdict = check_text(&learned, host, port, &key);
        assert!(
            matches!(verdict, Verdict::Known | Verdict::Revoked { .. }),
            "{verdict:?}"
        );
    }
});
