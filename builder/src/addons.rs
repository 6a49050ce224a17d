//! Addon sources (`spec.addons[].source`) bundled under `files/addons/<addon>/`, so the
//! installer applies YAML and installs charts with no repository access:
//!
//! * `path`: a file, or every regular file of a directory (not recursive, hidden files
//!   skipped), read on the build host (relative to cluster.yaml's directory) and hashed.
//! * `url`: downloaded and verified like any catalog file; `source.sha256` is required (a sum is
//!   never guessed).
//! * `chart` with `repo`: the repository's `index.yaml` names the archive's URL and its digest;
//!   the archive is verified against `source.sha256` when given (which must then equal the
//!   index's digest), else against the index's digest.
//!
//! Each file becomes a `bundle.json` record named `addon/<addon>`, arch `all`.
//!
//! The custom scripts (`spec.system.preInstall` / `postInstall`) are bundled the same way as a
//! local addon file ([`collect_scripts`]): read on the build host, hashed, one record each named
//! `script/pre-install` or `script/post-install` whose version is the script's two-digit
//! position, under `files/scripts/<phase>/<NN>-<file name>`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kubexm_bundles::manifest::FileRecord;
use kubexm_manifests::catalog::is_sha256_hex;
use kubexm_manifests::resolve::{AddonEntry, AddonLocation, ScriptEntry};
use serde::Deserialize;

use crate::cache::Cache;
use crate::fetch::Fetcher;

/// Name of an addon's file records in `bundle.json`.
pub fn record_name(addon: &str) -> String {
    format!("addon/{addon}")
}

/// One bundled addon file.
pub struct AddonFile {
    /// Its `bundle.json` record.
    pub record: FileRecord,
    /// The verified content in the cache.
    pub blob: PathBuf,
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    entries: BTreeMap<String, Vec<IndexEntry>>,
}

#[derive(Deserialize)]
struct IndexEntry {
    version: String,
    #[serde(default)]
    urls: Vec<String>,
    #[serde(default)]
    digest: Option<String>,
}

/// Fetches (or reads) every addon source into the cache.
pub async fn collect(
    entries: &[AddonEntry],
    base_dir: &Path,
    fetcher: &Fetcher,
    cache: &Cache,
) -> Result<Vec<AddonFile>> {
    let mut out = Vec::new();
    for e in entries {
        let at = format!("spec.addons `{}`", e.addon);
        match &e.source {
            AddonLocation::Path { path } => {
                for file in local_files(&base_dir.join(path))
                    .with_context(|| format!("{at}: source.path `{path}`"))?
                {
                    let bytes = std::fs::read(&file)
                        .with_context(|| format!("{at}: cannot read `{}`", file.display()))?;
                    let sum = kubexm_bundles::hash::sha256_hex(&bytes);
                    let blob = cache.put_bytes(&sum, &bytes)?;
                    let url = format!("file://{}", file.display());
                    out.push(file_of(e, &file_name(&file), "-", &sum, &url, &blob));
                }
            }
            AddonLocation::Url { url } => {
                let Some(sum) = e.sha256.as_deref() else {
                    return Err(crate::exit::InvalidConfig(format!("{at}: source.url `{url}` has no source.sha256; set it to the sha256sum of the file (sums are never guessed)")).into());
                };
                check_sum(&at, sum)?;
                let blob = fetcher
                    .fetch(url, sum, &format!("addon {}", e.addon))
                    .await?;
                let name = url.rsplit('/').next().unwrap_or("addon").to_owned();
                out.push(file_of(e, &name, "-", sum, url, &blob));
            }
            AddonLocation::Chart {
                repo,
                name,
                version,
            } => {
                // A chart version is immutable: what an earlier build learned from the index
                // (URL and sum) is reused while the archive is in the cache, so a warm build
                // makes no request.
                let key = format!(
                    "chart-{}",
                    kubexm_bundles::hash::sha256_hex(
                        format!("{repo}\0{name}\0{version}").as_bytes()
                    )
                );
                let known: Option<(String, String)> = std::fs::read(cache.ref_path(&key))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok());
                if let Some((url, sum)) = known.filter(|(_, sum)| {
                    cache.contains(sum) && e.sha256.as_deref().is_none_or(|s| s == sum)
                }) {
                    let file = format!("{name}-{version}.tgz");
                    out.push(file_of(
                        e,
                        &file,
                        version,
                        &sum,
                        &url,
                        &cache.blob_path(&sum),
                    ));
                    continue;
                }
                let index_url = format!("{}/index.yaml", repo.trim_end_matches('/'));
                let text = fetcher.get_text(&index_url).await?;
                let index: Index = kubexm_manifests::yaml::from_str(&text, &index_url)
                    .with_context(|| format!("{at}: {index_url} is not a Helm repository index"))?;
                let Some(entry) = index
                    .entries
                    .get(name)
                    .and_then(|v| v.iter().find(|c| &c.version == version))
                else {
                    bail!("{at}: {index_url} has no chart {name} version {version}");
                };
                let Some(chart_url) = entry.urls.first() else {
                    bail!("{at}: {index_url} lists no URL for {name} {version}");
                };
                let chart_url = absolute(repo, chart_url);
                let digest = entry
                    .digest
                    .as_deref()
                    .map(|d| d.trim_start_matches("sha256:"));
                let sum = match (e.sha256.as_deref(), digest) {
                    (Some(s), Some(d)) if s != d => bail!(
                        "{at}: source.sha256 {s} differs from the digest {d} that {index_url} gives for {name} {version}"
                    ),
                    (Some(s), _) => s,
                    (None, Some(d)) => d,
                    (None, None) => bail!(
                        "{at}: {index_url} gives no digest for {name} {version}; set source.sha256"
                    ),
                };
                check_sum(&at, sum)?;
                let blob = fetcher
                    .fetch(&chart_url, sum, &format!("addon {}", e.addon))
                    .await?;
                let record = serde_json::to_vec(&(&chart_url, sum)).unwrap_or_default();
                Cache::write_atomic(&cache.ref_path(&key), &record)?;
                let file = format!("{name}-{version}.tgz");
                out.push(file_of(e, &file, version, sum, &chart_url, &blob));
            }
        }
    }
    Ok(out)
}

/// The largest custom script `kubexm-build` bundles (a script, not a payload: ship data as an
/// addon or in the script's own directory on the nodes).
pub const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;

/// Reads every custom script (relative to cluster.yaml's directory) into the cache.
pub fn collect_scripts(
    entries: &[ScriptEntry],
    base_dir: &Path,
    cache: &Cache,
) -> Result<Vec<AddonFile>> {
    let mut out = Vec::new();
    for e in entries {
        let at = format!(
            "spec.system.{}[{}] `{}`",
            e.phase.field(),
            e.position - 1,
            e.source
        );
        let file = base_dir.join(&e.source);
        let meta = std::fs::metadata(&file)
            .with_context(|| format!("{at}: cannot read `{}`", file.display()))?;
        if !meta.is_file() {
            bail!("{at}: `{}` is not a regular file", file.display());
        }
        if meta.len() > MAX_SCRIPT_BYTES {
            bail!(
                "{at}: `{}` has {} bytes, more than the {MAX_SCRIPT_BYTES} a script may have",
                file.display(),
                meta.len()
            );
        }
        let bytes = std::fs::read(&file)
            .with_context(|| format!("{at}: cannot read `{}`", file.display()))?;
        let sum = kubexm_bundles::hash::sha256_hex(&bytes);
        let blob = cache.put_bytes(&sum, &bytes)?;
        out.push(AddonFile {
            record: FileRecord {
                name: e.phase.record_name(),
                version: e.version(),
                arch: "all".to_owned(),
                path: e.path.clone(),
                sha256: sum,
                size: meta.len(),
                url: format!("file://{}", file.display()),
                roles: ["master", "worker", "etcd", "registry", "loadbalancer"]
                    .map(str::to_owned)
                    .into(),
            },
            blob,
        });
    }
    Ok(out)
}

fn check_sum(at: &str, sum: &str) -> Result<()> {
    if !is_sha256_hex(sum) {
        bail!("{at}: `{sum}` is not a sha256 (64 lowercase hex digits)");
    }
    Ok(())
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "addon".to_owned())
}

fn file_of(
    e: &AddonEntry,
    file: &str,
    version: &str,
    sum: &str,
    url: &str,
    blob: &Path,
) -> AddonFile {
    AddonFile {
        record: FileRecord {
            name: record_name(&e.addon),
            version: version.to_owned(),
            arch: "all".to_owned(),
            path: format!("{}/{file}", e.dir),
            sha256: sum.to_owned(),
            size: std::fs::metadata(blob).map(|m| m.len()).unwrap_or(0),
            url: url.to_owned(),
            roles: ["master".to_owned()].into(),
        },
        blob: blob.to_path_buf(),
    }
}

/// The file itself, or a directory's regular non-hidden files in name order.
fn local_files(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).context("cannot be read")?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .context("cannot be listed")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && !file_name(p).starts_with('.'))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("holds no files");
    }
    Ok(files)
}

/// A chart URL from an index: absolute as is, else relative to the repository.
fn absolute(repo: &str, url: &str) -> String {
    if url.contains("://") {
        url.to_owned()
    } else {
        format!(
            "{}/{}",
            repo.trim_end_matches('/'),
            url.trim_start_matches('/')
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_chart_urls_resolve_against_the_repository() {
        assert_eq!(
            absolute("https://charts.example/x/", "charts/a-1.0.tgz"),
            "https://charts.example/x/charts/a-1.0.tgz"
        );
        assert_eq!(
            absolute("https://charts.example", "https://cdn.example/a-1.0.tgz"),
            "https://cdn.example/a-1.0.tgz"
        );
    }
}
