//! Hostile `cluster.yaml` and catalog values (issue 15): names that become paths, and text that
//! reaches a terminal.

use kubexm_manifests::catalog::Catalog;
use kubexm_manifests::load::load_cluster_str;

use crate::common::{builtin, BASE};

fn error_text(text: &str) -> String {
    match load_cluster_str(text, "cluster.yaml", &builtin()) {
        Ok(_) => panic!("the hostile document was accepted"),
        Err(e) => e.to_string(),
    }
}

fn with_addon(name: &str) -> String {
    format!(
        "{BASE}  addons:\n    - name: {name:?}\n      type: yaml\n      source: {{path: addon.yaml}}\n"
    )
}

#[test]
fn attack_addon_name_path_traversal() {
    // The plan made and `chmod 700`-ed `/etc/cron.d` on the first master for this addon.
    let e = error_text(&with_addon("../../../../etc/cron.d"));
    assert!(e.contains("spec.addons[0].name"), "{e}");
    assert!(e.contains("not a valid addon name"), "{e}");
}

#[test]
fn attack_names_that_become_paths_are_checked_at_load() {
    for (doc, field) in [
        (
            BASE.replace("{name: t}", "{name: \"..\"}"),
            "metadata.name",
        ),
        (
            BASE.replace("registry: [r1]", "registry: [r1]\n  registry: {namespace: \"a/../b\"}"),
            "spec.registry.namespace",
        ),
        (
            format!("{BASE}  addons:\n    - name: ok\n      type: helm\n      source: {{chart: {{name: \"../x\", version: \"1\", repo: \"https://charts.example\"}}}}\n"),
            "spec.addons[0].source.chart.name",
        ),
        (
            format!("{BASE}  addons:\n    - name: ok\n      type: helm\n      source: {{chart: {{name: x, version: \"../../1\", repo: \"https://charts.example\"}}}}\n"),
            "spec.addons[0].source.chart.version",
        ),
    ] {
        let e = error_text(&doc);
        assert!(e.contains(field), "{field}: {e}");
    }
}

#[test]
fn attack_catalog_component_name_path_traversal() {
    let mut catalog = builtin();
    let doc = serde_saphyr::from_str(
        "components:\n  - name: ../../etc\n    archive: binary\n    url: https://example.invalid/{version}/x\n    versions: {\"v1\": {amd64: \"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"}}\n",
    )
    .expect("catalog document");
    let err = catalog
        .merge(doc, "evil.yaml")
        .expect_err("a component named ../../etc");
    assert!(err.to_string().contains("component name"), "{err}");
    let _ = Catalog::builtin().expect("the built-in catalog still loads");
}

#[test]
fn attack_terminal_escapes_in_yaml_value() {
    let evil = BASE.replace("{name: t}", "{name: \"\\e[2J\\e[32mvalid\\e[0m\"}");
    let e = error_text(&evil);
    assert!(!e.contains('\u{1b}'), "raw ESC in {e:?}");
    assert!(e.contains(r"\u{1b}[2J"), "{e}");
    // An unknown field name carrying escapes (reported by the parser with a snippet).
    let field = BASE.replace("kind: Cluster", "kind: Cluster\n\"\\e]0;pwned\\a\": 1");
    let e = error_text(&field);
    assert!(
        !e.contains('\u{1b}') && !e.contains('\u{7}'),
        "raw control in {e:?}"
    );
}

#[test]
fn attack_huge_metadata_name_is_not_echoed_whole() {
    // The issue's 50 MB `metadata.name` was echoed whole; anything over 1 MiB is refused
    // outright, and what is echoed is cut.
    let name = "a".repeat(900_000);
    let e = error_text(&BASE.replace("{name: t}", &format!("{{name: {name}}}")));
    assert!(e.contains("metadata.name"), "{}", &e[..200.min(e.len())]);
    assert!(e.len() < 10_000, "{} bytes of error", e.len());
    assert!(e.contains(" bytes)"), "says how long it was");
    let huge = BASE.replace("{name: t}", &format!("{{name: {}}}", "a".repeat(50 << 20)));
    let e = error_text(&huge);
    assert!(e.len() < 10_000, "{} bytes of error", e.len());
}

#[test]
fn attack_inline_password_carried_in_bundle() {
    // The builder copied cluster.yaml, inline passwords included, into the bundle.
    let text = BASE
        .replace(
            "{name: m1, address: 10.0.0.11}",
            "{name: m1, address: 10.0.0.11, password: hunter2-host}",
        )
        .replace(
            "{name: m2, address: 10.0.0.12}",
            "{name: m2, address: 10.0.0.12, passwordFile: /root/m2.pw}",
        )
        .replace(
            "registry: [r1]",
            "registry: [r1]\n  registry:\n    type: harbor\n    harborConfig: {adminPassword: hunter2-harbor}\n    auths: {\"reg.example:5000\": {username: u, password: hunter2-auth}}",
        );
    let (bundled, removed) =
        kubexm_manifests::load::without_inline_secrets(&text, "cluster.yaml").expect("strip");
    assert!(!bundled.contains("hunter2"), "{bundled}");
    assert_eq!(
        removed,
        [
            "spec.hosts[0].password",
            "spec.registry.auths[\"reg.example:5000\"].password",
            "spec.registry.harborConfig.adminPassword"
        ]
    );
    assert!(
        bundled.contains("/root/m2.pw"),
        "passwordFile references stay"
    );
    // What the bundle carries still parses, to the same cluster less the secrets.
    let original = kubexm_manifests::load::parse_cluster(&text, "a").expect("original");
    let again = kubexm_manifests::load::parse_cluster(&bundled, "b").expect("bundled parses");
    assert_eq!(again.spec.hosts.len(), original.spec.hosts.len());
    assert_eq!(
        again.spec.hosts[1].password_file.as_deref(),
        Some("/root/m2.pw")
    );
    assert!(again.spec.hosts[0].password.is_none());
    assert_eq!(
        serde_json::to_value(&again.spec.role_groups).expect("json"),
        serde_json::to_value(&original.spec.role_groups).expect("json")
    );
    // Without inline secrets the text is carried unchanged (comments and all).
    let (same, none) =
        kubexm_manifests::load::without_inline_secrets(BASE, "cluster.yaml").expect("plain");
    assert!(none.is_empty());
    assert_eq!(same, BASE);
}
