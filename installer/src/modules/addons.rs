//! Module: `spec.addons`, from the first master, for both installation paths. Every source was
//! bundled by `kubexm-build` (`files/addons/<addon>/`, records named `addon/<addon>`), so
//! nothing is fetched from a repository:
//!
//! * `yaml`: each file applied with `kubectl apply --server-side` in the addon's namespace
//!   (created when missing); with `values`, each file is first rendered as a template with
//!   `values` in scope (`{{ values.KEY }}`).
//! * `helm`: the chart archive installed with the bundle's helm as release `<addon>` in the
//!   namespace, with `values` as the values file (dotted keys nest: `a.b: x` is `{a: {b: x}}`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use kubexm_bundles::manifest::FileRecord;
use kubexm_manifests::model::{Addon, AddonType};
use kubexm_manifests::resolve::{network_file, AddonLocation, ADDONS_DIR};

use super::apply::{
    bundle_upload, values_file, ApplyManifest, HelmBinary, HelmRelease, MANIFESTS_DIR,
};
use crate::context::InstallContext;
use crate::pipeline::ops::{Op, UploadFile};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};

/// The addons module.
pub struct AddonsModule(pub Arc<InstallContext>);

impl Module for AddonsModule {
    fn name(&self) -> &str {
        "addons"
    }

    fn skip(&self) -> Option<String> {
        self.0
            .cluster
            .file
            .spec
            .addons
            .is_empty()
            .then(|| "spec.addons is empty".to_string())
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let ctx = &self.0;
        let first = ctx.first_master()?.name.clone();
        let mut task = Task::new("addons", [first]);
        let addons = &ctx.cluster.file.spec.addons;
        // The network module installs helm already for a chart-based plugin.
        let network_helm = network_file(ctx.cluster.file.spec.network.plugin)
            .is_some_and(|f| f.ends_with("-chart"));
        if !network_helm && addons.iter().any(|a| a.kind == AddonType::Helm) {
            task = task.step(HelmBinary { ctx: ctx.clone() });
        }
        for a in addons {
            let files = addon_files(ctx, a)?;
            task = match a.kind {
                AddonType::Yaml => task.step(YamlAddon::new(a, files)?),
                AddonType::Helm => task.step(helm_addon(a, files)?),
            };
        }
        Ok(vec![task])
    }
}

/// The bundle files of an addon: its records in bundle.json; planning without a bundle, the
/// file the resolver expects (a directory source is shown as the directory).
fn addon_files(ctx: &InstallContext, a: &Addon) -> Result<Vec<(PathBuf, FileRecord)>, StepError> {
    let name = format!("addon/{}", a.name);
    if let Some(b) = &ctx.bundle {
        let files: Vec<_> = b
            .manifest
            .files
            .iter()
            .filter(|f| f.name == name)
            .map(|f| (b.dir.join(&f.path), f.clone()))
            .collect();
        if files.is_empty() {
            return Err(StepError::Invalid(format!(
                "the bundle has no files of addon {}: rebuild the bundle with this cluster.yaml",
                a.name
            )));
        }
        return Ok(files);
    }
    let entry = ctx
        .resolution
        .as_ref()
        .and_then(|r| r.addons.iter().find(|e| e.addon == a.name));
    let file = match entry.map(|e| &e.source) {
        Some(AddonLocation::Path { path }) => path.rsplit('/').next().unwrap_or(path).to_string(),
        Some(AddonLocation::Url { url }) => url.rsplit('/').next().unwrap_or(url).to_string(),
        Some(AddonLocation::Chart { name, version, .. }) => format!("{name}-{version}.tgz"),
        None => format!("{}.yaml", a.name),
    };
    let path = format!("{ADDONS_DIR}/{}/{file}", a.name);
    Ok(vec![(
        PathBuf::from(&path),
        FileRecord {
            name,
            version: "-".into(),
            arch: "all".into(),
            path,
            sha256: "from-bundle".into(),
            size: 0,
            url: String::new(),
            roles: Default::default(),
        },
    )])
}

/// A YAML addon: every file applied in the namespace.
pub struct YamlAddon {
    name: String,
    files: Vec<ApplyManifest>,
}

impl YamlAddon {
    fn new(a: &Addon, files: Vec<(PathBuf, FileRecord)>) -> Result<Self, StepError> {
        let mut out = Vec::new();
        for (path, rec) in files {
            let file = rec.path.rsplit('/').next().unwrap_or(&rec.path).to_string();
            let dest = crate::modules::remote_path::remote_path(
                MANIFESTS_DIR,
                &["addons", &a.name, &file],
            )?;
            let upload = if a.values.is_empty() || !path.exists() {
                bundle_upload(path, &rec, dest)
            } else {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    StepError::Invalid(format!(
                        "addon {}: cannot read {}: {e}",
                        a.name,
                        path.display()
                    ))
                })?;
                let mut c = tera::Context::new();
                c.insert("values", &a.values);
                let t = tera::Tera::default();
                let rendered = t
                    .render_str(&text, &c, false)
                    .map_err(|e| StepError::Template {
                        name: format!("addon {} file {file}", a.name),
                        message: e.to_string(),
                    })?;
                UploadFile::bytes(rendered.into_bytes(), dest, 0o600)
            };
            out.push(ApplyManifest {
                name: format!("addon-{}", a.name),
                file: upload,
                namespace: Some(a.namespace.clone()),
            });
        }
        Ok(Self {
            name: format!("addon-{}", a.name),
            files: out,
        })
    }
}

impl Step for YamlAddon {
    fn name(&self) -> &str {
        &self.name
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = Vec::new();
        for f in &self.files {
            ops.extend(f.ops(node, facts)?);
        }
        Ok(ops)
    }
}

/// `a.b.c: v` keys as nested maps (JSON, which YAML reads).
pub fn nested_values(values: &BTreeMap<String, String>) -> serde_json::Value {
    fn insert(map: &mut serde_json::Map<String, serde_json::Value>, parts: &[&str], v: &str) {
        match parts {
            [] => {}
            [last] => {
                map.insert(
                    (*last).to_string(),
                    serde_json::Value::String(v.to_string()),
                );
            }
            [first, rest @ ..] => {
                let e = map
                    .entry((*first).to_string())
                    .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
                if !e.is_object() {
                    *e = serde_json::Value::Object(serde_json::Map::new());
                }
                if let serde_json::Value::Object(m) = e {
                    insert(m, rest, v);
                }
            }
        }
    }
    let mut root = serde_json::Map::new();
    for (k, v) in values {
        insert(&mut root, &k.split('.').collect::<Vec<_>>(), v);
    }
    serde_json::Value::Object(root)
}

fn helm_addon(a: &Addon, files: Vec<(PathBuf, FileRecord)>) -> Result<HelmRelease, StepError> {
    let Some((path, rec)) = files.into_iter().next() else {
        return Err(StepError::Invalid(format!(
            "the bundle has no chart of addon {}",
            a.name
        )));
    };
    let chart = rec
        .path
        .rsplit('/')
        .next()
        .unwrap_or("chart.tgz")
        .to_string();
    let mut c = tera::Context::new();
    c.insert("addon", &a.name);
    c.insert(
        "values",
        &serde_json::to_string_pretty(&nested_values(&a.values)).unwrap_or_default(),
    );
    Ok(HelmRelease {
        name: format!("addon-{}", a.name),
        release: a.name.clone(),
        namespace: a.namespace.clone(),
        chart: bundle_upload(
            path,
            &rec,
            crate::modules::remote_path::remote_path(MANIFESTS_DIR, &["addons", &a.name, &chart])?,
        ),
        values: values_file(
            "addons/values.yaml.tera",
            &c,
            &format!("addons/{}/values.yaml", a.name),
        )?,
    })
}
