//! The KubeKey importer (`import::import_kubekey`, `kubexm-build import kubekey`): one v1alpha2
//! `Cluster`, or a v4 `Config` and `Inventory` (the input cut at its first NUL byte into two
//! files). Never panics; an accepted import is a cluster description whose names are path
//! components, whose secret files lie one plain name deep in the secrets directory, whose
//! report holds no control characters but newlines, and whose written text (the report as
//! comments, then the YAML) keeps the report inside comment lines and loads again; a refusal is
//! shown without a raw ESC.
#![no_main]

use std::sync::OnceLock;

use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::import::{import_kubekey, ImportOptions};
use kubexm_manifests::load::load_cluster_str;
use kubexm_manifests::name::PathComponent;
use libfuzzer_sys::fuzz_target;

const SECRETS: &str = "cluster.yaml.secrets";

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| Catalog::builtin().expect("built-in catalog"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let inputs: Vec<(&str, &str)> = match text.split_once('\0') {
        Some((config, inventory)) => vec![("config.yaml", config), ("inventory.yaml", inventory)],
        None => vec![("config-sample.yaml", text)],
    };
    let opts = ImportOptions::new(SECRETS);
    match import_kubekey(&inputs, &opts, catalog()) {
        Ok(imported) => {
            let file = &imported.cluster;
            assert!(
                PathComponent::new(&file.metadata.name).is_ok(),
                "{:?}",
                file.metadata.name
            );
            for h in &file.spec.hosts {
                assert!(PathComponent::new(&h.name).is_ok(), "{:?}", h.name);
            }
            for s in &imported.secret_files {
                let name = s
                    .path
                    .strip_prefix(SECRETS)
                    .and_then(|rest| rest.strip_prefix('/'))
                    .unwrap_or_else(|| panic!("{:?} outside {SECRETS}", s.path));
                assert!(PathComponent::new(name).is_ok(), "{:?}", s.path);
            }
            let report = imported.report.to_text();
            assert!(
                !report.chars().any(|c| c.is_control() && c != '\n'),
                "{report:?}"
            );
            let written = imported
                .render("config-sample.yaml")
                .expect("a validated import renders");
            let comments = imported.report.as_comments("config-sample.yaml");
            assert!(written.starts_with(&comments));
            for line in comments.lines() {
                assert!(line.starts_with('#'), "{line:?}");
            }
            if let Err(e) = load_cluster_str(&written, "imported.yaml", catalog()) {
                panic!("the written cluster.yaml does not load: {e}\n{written}");
            }
        }
        Err(e) => {
            let shown = e.to_string();
            assert!(!shown.contains('\u{1b}'), "raw ESC in {shown:?}");
        }
    }
});
