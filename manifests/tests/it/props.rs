//! Property tests of the rules every untrusted name and digest goes through.

use std::path::{Component, Path};

use kubexm_manifests::digest::Digest;
use kubexm_manifests::display::{Untrusted, MAX_SHOWN};
use kubexm_manifests::name::{PathComponent, RemotePath};
use proptest::prelude::*;

/// Strings mixing the characters that matter: separators, dots, controls, escapes.
fn nasty() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("/".to_owned()),
            Just("..".to_owned()),
            Just(".".to_owned()),
            Just("\\".to_owned()),
            Just("\0".to_owned()),
            Just("\u{1b}[2J".to_owned()),
            Just("\n".to_owned()),
            Just("sha256:".to_owned()),
            "[a-f0-9]{1,64}",
            any::<char>().prop_map(String::from),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_sha256_digest_round_trips(bytes in proptest::array::uniform32(any::<u8>())) {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("sha256:{hex}");
        let d = Digest::parse(&text).expect("a real digest parses");
        prop_assert_eq!(d.to_string(), text);
        prop_assert_eq!(d.hex(), hex.as_str());
    }

    #[test]
    fn a_parsed_digest_is_exactly_one_safe_file_under_the_blob_dir(s in nasty()) {
        if let Ok(d) = Digest::parse(&s) {
            prop_assert_eq!(&d.to_string(), &s, "parsing never normalizes");
            let dir = Path::new("/layout/blobs");
            let path = d.blob_path(dir);
            let sha_dir = dir.join("sha256");
            prop_assert_eq!(path.parent(), Some(sha_dir.as_path()));
            prop_assert!(path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))));
            prop_assert_eq!(d.hex().len(), 64);
        }
    }

    #[test]
    fn a_path_component_never_leaves_its_directory(s in nasty()) {
        match PathComponent::new(&s) {
            Ok(c) => {
                let base = RemotePath::base("/etc/kubexm").expect("base");
                let joined = base.join(&c);
                let path = Path::new(joined.as_str());
                prop_assert_eq!(path.parent(), Some(Path::new("/etc/kubexm")));
                prop_assert!(!s.contains('/') && s != ".." && s != "." && !s.is_empty());
                prop_assert!(!s.chars().any(char::is_control));
            }
            Err(_) => {
                let clean = !s.is_empty()
                    && s.len() <= 255
                    && s != "."
                    && s != ".."
                    && !s.contains(['/', '\\'])
                    && !s.chars().any(char::is_control);
                prop_assert!(!clean, "{:?} refused", s);
            }
        }
    }

    #[test]
    fn remote_path_bases_are_absolute_and_normal(s in nasty()) {
        if let Ok(base) = RemotePath::base(&s) {
            let path = Path::new(base.as_str());
            prop_assert!(path.is_absolute());
            prop_assert!(path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))));
            prop_assert!(!s.contains("//") && (s == "/" || !s.ends_with('/')));
        }
    }

    #[test]
    fn untrusted_text_shows_no_control_and_is_bounded(s in nasty(), repeat in 1usize..200) {
        let long = s.repeat(repeat);
        let shown = Untrusted(&long).to_string();
        prop_assert!(!shown.chars().any(|c| c.is_control()));
        prop_assert!(shown.chars().count() <= MAX_SHOWN * 12 + 32);
    }
}
