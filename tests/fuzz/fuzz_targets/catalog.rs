//! The catalog loader (`--catalog FILE` merged over the built-in one): never panics; whatever
//! merges has component names and versions that are safe path components.
#![no_main]

use std::sync::OnceLock;

use kubexm_manifests::catalog::{Catalog, CatalogDoc};
use kubexm_manifests::name::PathComponent;
use libfuzzer_sys::fuzz_target;

fn builtin() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| Catalog::builtin().expect("built-in catalog"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(doc) = kubexm_manifests::yaml::from_str::<CatalogDoc>(text, "fuzz.yaml") else {
        return;
    };
    let mut catalog = builtin().clone();
    match catalog.merge(doc, "fuzz.yaml") {
        Ok(()) => {
            for (name, c) in &catalog.components {
                assert!(PathComponent::new(name).is_ok(), "{name:?}");
                for version in c.versions.keys() {
                    assert!(PathComponent::new(version).is_ok(), "{version:?}");
                }
            }
        }
        Err(e) => assert!(!e.to_string().contains('\u{1b}')),
    }
});
