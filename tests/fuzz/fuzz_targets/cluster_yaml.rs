//! cluster.yaml load + validate, and the builder's secret stripping: never panics; whatever is
//! accepted has names that are safe path components; errors are shown escaped and bounded.
#![no_main]

use std::sync::OnceLock;

use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::load::{load_cluster_str, without_inline_secrets};
use kubexm_manifests::name::PathComponent;
use libfuzzer_sys::fuzz_target;

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| Catalog::builtin().expect("built-in catalog"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match load_cluster_str(text, "fuzz.yaml", catalog()) {
        Ok(cluster) => {
            assert!(PathComponent::new(&cluster.file.metadata.name).is_ok());
            for h in &cluster.file.spec.hosts {
                assert!(PathComponent::new(&h.name).is_ok(), "{:?}", h.name);
            }
            for a in &cluster.file.spec.addons {
                assert!(PathComponent::new(&a.name).is_ok(), "{:?}", a.name);
                assert!(
                    PathComponent::new(&a.namespace).is_ok(),
                    "{:?}",
                    a.namespace
                );
            }
        }
        Err(e) => {
            let shown = e.to_string();
            assert!(!shown.contains('\u{1b}'), "raw ESC in {shown:?}");
        }
    }
    if let Ok((stripped, _)) = without_inline_secrets(text, "fuzz.yaml") {
        let again = kubexm_manifests::load::parse_cluster(&stripped, "stripped.yaml")
            .expect("what the builder writes parses again");
        assert!(again.spec.hosts.iter().all(|h| h.password.is_none()));
    }
});
