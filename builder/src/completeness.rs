//! The completeness check: `kubexm-build` refuses a bundle whose addons would pull an image the
//! bundle does not carry (offline, such a pull fails on the nodes long after the build).
//!
//! * A `yaml` addon: every `image:` of every file, rendered with the addon's `values` exactly as
//!   `kubexm-install` renders it.
//! * A `helm` addon: every image the chart's `values.yaml` (and those of the subcharts it ships
//!   unpacked under `charts/`) names, with the addon's `values` applied: a map with a
//!   `repository` (plus optional `registry`, `tag`, `digest`) — the layout of most charts, e.g.
//!   metrics-server's `image: {repository: registry.k8s.io/metrics-server/metrics-server, tag: ""}`
//!   — or an `image` string with a tag or digest. An empty tag means the chart's `appVersion`
//!   (charts conventionally default to it, some with a `v` in front: either spelling in the
//!   bundle satisfies the check). Images a chart builds in its templates from other keys are not
//!   seen; list them in the addon's `images`.
//!
//! An image counts as carried when its canonical reference (`nginx:1` is
//! `docker.io/library/nginx:1`) is one of the bundle's images.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use kubexm_manifests::image_ref::ImageRef;
use kubexm_manifests::model::{Addon, AddonType};

use crate::addons::AddonFile;
use crate::exit::InvalidConfig;

/// The largest chart archive member read (a values.yaml or Chart.yaml).
pub const MAX_MEMBER_BYTES: u64 = 4 * 1024 * 1024;
/// The most archive members looked at in one chart.
pub const MAX_MEMBERS: usize = 10_000;

/// An image an addon will pull, and where it is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    /// The file and place (`demo.yaml line 12`, `chart values image`).
    pub at: String,
    /// The reference as written (or assembled from `repository` and `tag`).
    pub reference: String,
    /// Other spellings that satisfy the check (`v` + appVersion).
    pub alternatives: Vec<String>,
}

/// Refuses when an addon file pulls an image not in `bundled` (canonical references).
pub fn check(
    addons: &[Addon],
    files: &[AddonFile],
    bundled: &BTreeSet<String>,
) -> Result<(), InvalidConfig> {
    let mut problems = Vec::new();
    for a in addons {
        let record = crate::addons::record_name(&a.name);
        for f in files.iter().filter(|f| f.record.name == record) {
            let file = f
                .record
                .path
                .rsplit('/')
                .next()
                .unwrap_or(&f.record.path)
                .to_string();
            let bytes = std::fs::read(&f.blob).map_err(|e| {
                InvalidConfig(format!(
                    "spec.addons `{}`: cannot read {file} from the cache: {e}",
                    a.name
                ))
            })?;
            let pulls = match a.kind {
                AddonType::Yaml => yaml_pulls(a, &file, &bytes),
                AddonType::Helm => chart_pulls(&file, &bytes, &a.values),
            }
            .map_err(|e| InvalidConfig(format!("spec.addons `{}`: {e}", a.name)))?;
            for p in pulls {
                if !carried(&p, bundled) {
                    problems.push(format!(
                        "spec.addons `{}`: {} pulls {}, which the bundle does not contain",
                        a.name,
                        p.at,
                        kubexm_manifests::display::escape(&p.reference)
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(InvalidConfig(format!(
        "the bundle would be incomplete: {}\nhint: name each image as upstream publishes it (kubexm-install rewrites it to the private registry) and list it in that addon's `images` (or the catalog's addonImages), then build again; offline, the nodes cannot pull it",
        problems.join("\n  ")
    )))
}

fn carried(p: &Pull, bundled: &BTreeSet<String>) -> bool {
    std::iter::once(&p.reference)
        .chain(&p.alternatives)
        .filter_map(|r| r.parse::<ImageRef>().ok())
        .any(|r| bundled.contains(&r.to_string()))
}

/// The `image:` values of a YAML addon file, rendered with its values first.
pub fn yaml_pulls(a: &Addon, file: &str, bytes: &[u8]) -> Result<Vec<Pull>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{file} is not UTF-8 text"))?;
    let rendered = if a.values.is_empty() {
        text.to_string()
    } else {
        let mut c = tera::Context::new();
        c.insert("values", &a.values);
        tera::Tera::default()
            .render_str(text, &c, false)
            .map_err(|e| format!("{file} does not render with its values: {e}"))?
    };
    Ok(image_lines(&rendered)
        .into_iter()
        .map(|(line, reference)| Pull {
            at: format!("{file} line {line}"),
            reference,
            alternatives: Vec::new(),
        })
        .collect())
}

/// `(line number, value)` of every `image:` line (`- image:` too), quotes and comments off.
pub fn image_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let Some(rest) = t.strip_prefix("- ").unwrap_or(t).strip_prefix("image:") else {
            continue;
        };
        let value = rest.split(" #").next().unwrap_or(rest).trim();
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        if !value.is_empty() && !value.starts_with('#') && !value.starts_with('{') {
            out.push((i + 1, value.to_string()));
        }
    }
    out
}

/// The images a chart archive's values name, with `values` (dotted keys) applied to the
/// chart's own values.
pub fn chart_pulls(
    file: &str,
    tgz: &[u8],
    values: &BTreeMap<String, String>,
) -> Result<Vec<Pull>, String> {
    let not_chart = |e: &dyn std::fmt::Display| format!("{file} is not a Helm chart archive: {e}");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
    // chart directory (`metrics-server`, `metrics-server/charts/sub`) → values, appVersion.
    let mut charts: BTreeMap<String, (Option<serde_json::Value>, Option<String>)> = BTreeMap::new();
    for (n, entry) in archive.entries().map_err(|e| not_chart(&e))?.enumerate() {
        if n >= MAX_MEMBERS {
            return Err(format!("{file} has more than {MAX_MEMBERS} members"));
        }
        let mut entry = entry.map_err(|e| not_chart(&e))?;
        let path = entry
            .path()
            .map_err(|e| not_chart(&e))?
            .to_string_lossy()
            .to_string();
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", &path));
        let parts: Vec<&str> = dir.split('/').collect();
        let chart_dir = parts.len() == 1 || (parts.len() == 3 && parts[1] == "charts");
        if !chart_dir || !matches!(name, "values.yaml" | "Chart.yaml") {
            continue;
        }
        if entry.size() > MAX_MEMBER_BYTES {
            return Err(format!(
                "{file}: {path} is larger than {MAX_MEMBER_BYTES} bytes"
            ));
        }
        let mut text = String::new();
        entry
            .by_ref()
            .take(MAX_MEMBER_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| format!("{file}: {path} is not UTF-8 text: {e}"))?;
        let doc: serde_json::Value = if text.trim().is_empty() {
            serde_json::Value::Null
        } else {
            kubexm_manifests::yaml::from_str(&text, &format!("{file}: {path}"))
                .map_err(|e| format!("{file}: {path} is not YAML: {e}"))?
        };
        let slot = charts.entry(dir.to_string()).or_default();
        if name == "values.yaml" {
            slot.0 = Some(doc);
        } else {
            slot.1 = doc
                .get("appVersion")
                .and_then(scalar)
                .filter(|v| !v.is_empty());
        }
    }
    let Some(root) = charts.keys().find(|d| !d.contains('/')).cloned() else {
        return Err(format!(
            "{file} is not a Helm chart archive: it has no Chart.yaml"
        ));
    };
    let mut out = Vec::new();
    for (dir, (doc, app_version)) in &mut charts {
        let Some(doc) = doc else { continue };
        if *dir == root {
            for (k, v) in values {
                set(doc, &k.split('.').collect::<Vec<_>>(), v);
            }
        }
        let what = if *dir == root {
            "chart values".to_string()
        } else {
            format!("subchart {} values", dir.rsplit('/').next().unwrap_or(dir))
        };
        walk(
            doc,
            &mut Vec::new(),
            app_version.as_deref(),
            &format!("{file} ({what}"),
            &mut out,
        );
    }
    Ok(out)
}

fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.trim().to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn set(doc: &mut serde_json::Value, path: &[&str], v: &str) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if !doc.is_object() {
        *doc = serde_json::Value::Object(serde_json::Map::new());
    }
    let serde_json::Value::Object(m) = doc else {
        return;
    };
    if rest.is_empty() {
        m.insert(
            (*first).to_string(),
            serde_json::Value::String(v.to_string()),
        );
    } else {
        let child = m
            .entry((*first).to_string())
            .or_insert(serde_json::Value::Null);
        set(child, rest, v);
    }
}

fn walk(
    v: &serde_json::Value,
    path: &mut Vec<String>,
    app_version: Option<&str>,
    at: &str,
    out: &mut Vec<Pull>,
) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(repo) = m
                .get("repository")
                .and_then(scalar)
                .filter(|r| !r.is_empty())
            {
                let registry = m.get("registry").and_then(scalar).filter(|r| !r.is_empty());
                let base = match registry {
                    Some(r) => format!("{}/{repo}", r.trim_end_matches('/')),
                    None => repo,
                };
                let tag = m.get("tag").and_then(scalar).filter(|t| !t.is_empty());
                let digest = m.get("digest").and_then(scalar).filter(|d| !d.is_empty());
                let (reference, alternatives) = match (tag, digest, app_version) {
                    (_, Some(d), _) => (format!("{base}@{d}"), Vec::new()),
                    (Some(t), None, _) => (format!("{base}:{t}"), Vec::new()),
                    (None, None, Some(app)) => (
                        format!("{base}:{app}"),
                        vec![format!("{base}:v{}", app.trim_start_matches('v'))],
                    ),
                    // No tag and no appVersion: nothing to pin the check to.
                    (None, None, None) => (String::new(), Vec::new()),
                };
                if !reference.is_empty() {
                    out.push(Pull {
                        at: format!("{at} `{}`)", path.join(".")),
                        reference,
                        alternatives,
                    });
                }
                return;
            }
            for (k, child) in m {
                path.push(k.clone());
                walk(child, path, app_version, at, out);
                path.pop();
            }
        }
        serde_json::Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                path.push(i.to_string());
                walk(child, path, app_version, at, out);
                path.pop();
            }
        }
        serde_json::Value::String(s)
            if path.last().is_some_and(|k| k == "image") && s.parse::<ImageRef>().is_ok() =>
        {
            out.push(Pull {
                at: format!("{at} `{}`)", path.join(".")),
                reference: s.trim().to_string(),
                alternatives: Vec::new(),
            });
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real gzip'd tar chart: `(path, content)` members.
    fn chart(members: &[(&str, &str)]) -> Vec<u8> {
        kubexm_testkit::tgz(members)
    }

    /// metrics-server's chart layout (metrics-server README / chart values: `image.repository`
    /// `registry.k8s.io/metrics-server/metrics-server`, `tag: ""` meaning `v` + appVersion).
    fn metrics_server() -> Vec<u8> {
        chart(&[
            ("metrics-server/Chart.yaml", "apiVersion: v2\nname: metrics-server\nversion: 3.12.2\nappVersion: 0.7.2\n"),
            ("metrics-server/values.yaml", "image:\n  repository: registry.k8s.io/metrics-server/metrics-server\n  tag: \"\"\n  pullPolicy: IfNotPresent\naddonResizer:\n  enabled: false\n  image:\n    repository: registry.k8s.io/autoscaling/addon-resizer\n    tag: 1.8.21\nsidecar: {image: \"docker.io/library/busybox:1.36\"}\n"),
            ("metrics-server/templates/deployment.yaml", "kind: Deployment\n"),
            ("metrics-server/charts/sub/Chart.yaml", "name: sub\nversion: 1.0.0\n"),
            ("metrics-server/charts/sub/values.yaml", "image: {registry: quay.io, repository: sub/sub, tag: v1}\n"),
        ])
    }

    #[test]
    fn a_charts_images_come_from_its_values_with_the_addons_values_applied() {
        let pulls = chart_pulls("ms.tgz", &metrics_server(), &BTreeMap::new()).expect("chart");
        let refs: Vec<&str> = pulls.iter().map(|p| p.reference.as_str()).collect();
        assert_eq!(
            refs,
            [
                "registry.k8s.io/autoscaling/addon-resizer:1.8.21",
                "registry.k8s.io/metrics-server/metrics-server:0.7.2",
                "docker.io/library/busybox:1.36",
                "quay.io/sub/sub:v1",
            ]
        );
        assert_eq!(
            pulls[1].alternatives,
            ["registry.k8s.io/metrics-server/metrics-server:v0.7.2"]
        );
        assert_eq!(pulls[1].at, "ms.tgz (chart values `image`)");
        assert_eq!(pulls[3].at, "ms.tgz (subchart sub values `image`)");
        let values: BTreeMap<String, String> =
            [("image.tag".to_string(), "v0.8.0".to_string())].into();
        let pulls = chart_pulls("ms.tgz", &metrics_server(), &values).expect("chart");
        assert!(pulls
            .iter()
            .any(|p| p.reference == "registry.k8s.io/metrics-server/metrics-server:v0.8.0"));
        assert!(chart_pulls("x.tgz", b"not a chart", &BTreeMap::new())
            .expect_err("refused")
            .contains("x.tgz is not a Helm chart archive"));
    }

    fn addon(kind: AddonType, values: &[(&str, &str)]) -> Addon {
        Addon {
            name: "ms".into(),
            namespace: "kube-system".into(),
            kind,
            source: Default::default(),
            values: values
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            images: Vec::new(),
        }
    }

    #[test]
    fn the_check_names_the_addon_the_place_and_the_image_and_accepts_a_complete_bundle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blob = dir.path().join("ms.tgz");
        std::fs::write(&blob, metrics_server()).expect("write");
        let file = AddonFile {
            record: kubexm_bundles::manifest::FileRecord {
                name: "addon/ms".into(),
                version: "3.12.2".into(),
                arch: "all".into(),
                path: "files/addons/ms/ms.tgz".into(),
                sha256: String::new(),
                size: 0,
                url: String::new(),
                roles: Default::default(),
            },
            blob,
        };
        let mut bundled: BTreeSet<String> = [
            "registry.k8s.io/autoscaling/addon-resizer:1.8.21",
            "registry.k8s.io/metrics-server/metrics-server:v0.7.2",
            "quay.io/sub/sub:v1",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        let helm = [addon(AddonType::Helm, &[])];
        let err = check(&helm, std::slice::from_ref(&file), &bundled)
            .expect_err("busybox missing")
            .to_string();
        assert!(
            err.contains("spec.addons `ms`: ms.tgz (chart values `sidecar.image`) pulls docker.io/library/busybox:1.36, which the bundle does not contain")
                && err.contains("list it in that addon's `images`"),
            "{err}"
        );
        // `busybox:1.36` is the canonical docker.io/library/busybox:1.36.
        bundled.insert("docker.io/library/busybox:1.36".into());
        check(&helm, std::slice::from_ref(&file), &bundled).expect("complete");

        // A YAML addon, rendered with its values first.
        let yaml = dir.path().join("ms.yaml");
        std::fs::write(&yaml, "spec:\n  containers:\n    - name: a\n      image: \"{{ values.img }}\" # pinned\n    - image: nginx:1.27\n").expect("write");
        let file = AddonFile {
            record: kubexm_bundles::manifest::FileRecord {
                path: "files/addons/ms/ms.yaml".into(),
                ..file.record.clone()
            },
            blob: yaml,
        };
        let ya = [addon(AddonType::Yaml, &[("img", "quay.io/sub/sub:v1")])];
        let err = check(&ya, std::slice::from_ref(&file), &bundled)
            .expect_err("nginx missing")
            .to_string();
        assert!(
            err.contains("ms.yaml line 5 pulls nginx:1.27") && !err.contains("line 4"),
            "{err}"
        );
        bundled.insert("docker.io/library/nginx:1.27".into());
        check(&ya, &[file], &bundled).expect("complete");
    }
}
