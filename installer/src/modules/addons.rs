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
use super::images::node_image;
use super::network::{rewrite_images, split_image};
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
                AddonType::Yaml => task.step(YamlAddon::new(ctx, a, files)?),
                AddonType::Helm => task.step(helm_addon(ctx, a, files)?),
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
    fn new(
        ctx: &InstallContext,
        a: &Addon,
        files: Vec<(PathBuf, FileRecord)>,
    ) -> Result<Self, StepError> {
        let mut out = Vec::new();
        for (path, rec) in files {
            let file = rec.path.rsplit('/').next().unwrap_or(&rec.path).to_string();
            let dest = crate::modules::remote_path::remote_path(
                MANIFESTS_DIR,
                &["addons", &a.name, &file],
            )?;
            // Planning without a bundle, the file is not here: the plan shows its upload.
            let upload = if !path.exists() {
                bundle_upload(path, &rec, dest)
            } else {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    StepError::Invalid(format!(
                        "addon {}: cannot read {}: {e}",
                        a.name,
                        path.display()
                    ))
                })?;
                let rendered = render_addon_file(a, &file, &text)?;
                // Every `image:` as nodes pull it (an image the bundle lacks is an error naming it).
                let rewritten = rewrite_images(ctx, &rendered).map_err(|e| {
                    StepError::Invalid(format!("addon {} file {file}: {e}", a.name))
                })?;
                UploadFile::bytes(rewritten.into_bytes(), dest, 0o600)
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

/// A YAML addon file with `values` in scope (`{{ values.KEY }}`); unchanged without values.
pub fn render_addon_file(a: &Addon, file: &str, text: &str) -> Result<String, StepError> {
    if a.values.is_empty() {
        return Ok(text.to_string());
    }
    let mut c = tera::Context::new();
    c.insert("values", &a.values);
    tera::Tera::default()
        .render_str(text, &c, false)
        .map_err(|e| StepError::Template {
            name: format!("addon {} file {file}", a.name),
            message: e.to_string(),
        })
}

/// A Helm addon's values with every image the bundle has as nodes pull it:
///
/// * a value that is a whole reference of a bundled image (`image: registry.k8s.io/x/y:v1`);
/// * a `*repository` / `*image` value naming the repository of a bundled image
///   (`image.repository: registry.k8s.io/metrics-server/metrics-server`, the usual chart layout,
///   tag kept in its own key).
///
/// Anything else is left as written; an image the chart names by default and the values do not
/// override is still pulled from the private registry through containerd's mirror for its
/// upstream registry ([`super::runtime::containerd::mirrored_registries`]).
pub fn node_values(
    ctx: &InstallContext,
    values: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, StepError> {
    use kubexm_manifests::image_ref::ImageRef;
    let bundled = ctx.image_references();
    let repository_of = |r: &ImageRef| format!("{}/{}", r.registry, r.repository);
    let mut out = BTreeMap::new();
    for (k, v) in values {
        let value = v.trim();
        let mut rewritten = None;
        if let Ok(parsed) = value.parse::<ImageRef>() {
            let whole = parsed.to_string();
            if bundled.contains(&whole) {
                rewritten = Some(node_image(ctx, &whole)?);
            }
        } else if k.ends_with("repository") || k.ends_with("image") {
            // A bare repository (`registry.k8s.io/x/y`, its tag in another key): parsed with a
            // placeholder tag, matched on registry and path.
            if let Ok(parsed) = format!("{value}:0").parse::<ImageRef>() {
                let repo = repository_of(&parsed);
                if let Some(image) = bundled.iter().find(|b| {
                    b.parse::<ImageRef>()
                        .is_ok_and(|b| repository_of(&b) == repo)
                }) {
                    rewritten = Some(split_image(ctx, image)?.repository());
                }
            }
        }
        out.insert(k.clone(), rewritten.unwrap_or_else(|| v.clone()));
    }
    Ok(out)
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

fn helm_addon(
    ctx: &InstallContext,
    a: &Addon,
    files: Vec<(PathBuf, FileRecord)>,
) -> Result<HelmRelease, StepError> {
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
        &serde_json::to_string_pretty(&nested_values(&node_values(ctx, &a.values)?))
            .unwrap_or_default(),
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
