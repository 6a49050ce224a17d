//! `kubexm-build resolve`: the files and images a cluster needs, as a table or JSON.

use std::io::Write;

use anyhow::{Context, Result};
use kubexm_manifests::resolve::{resolve, Resolution, Role};

use super::{problems_error, Inputs};
use crate::cache::Cache;
use crate::cli::{Output, ResolveArgs};
use crate::fetch::{Fetcher, Retry};
use crate::osrepo::{resolve_all, IndexPolicy, ResolvedRepo};
use crate::progress::Progress;

/// Resolves and prints.
pub fn run(args: &ResolveArgs, out: &mut dyn Write) -> Result<()> {
    let inputs = Inputs::load(&args.source)?;
    let lists = resolve(&inputs.cluster, &inputs.catalog, &inputs.zone)
        .map_err(|p| problems_error(&args.source.file, &p))?;
    let repos = os_repos(args, &inputs)?;
    match args.output {
        Output::Json => {
            let mut value = serde_json::to_value(&lists)?;
            if let (Some(map), false) = (value.as_object_mut(), repos.is_empty()) {
                map.insert("osRepos".to_owned(), serde_json::to_value(&repos)?);
            }
            serde_json::to_writer_pretty(&mut *out, &value)?;
            writeln!(out)?;
        }
        Output::Table => {
            write_table(&lists, out)?;
            write_os_repos(&repos, out)?;
        }
    }
    Ok(())
}

/// The OS repositories' package lists (`spec.system.osReleases`): their signed indexes are
/// fetched and verified, nothing from the pools is downloaded.
fn os_repos(args: &ResolveArgs, inputs: &Inputs) -> Result<Vec<ResolvedRepo>> {
    if inputs.cluster.file.spec.system.os_releases.is_empty() {
        return Ok(Vec::new());
    }
    let cache_root = args.cache_dir.clone().unwrap_or_else(Cache::default_root);
    let cache = Cache::open(&cache_root).context("Failed to open the cache")?;
    let fetcher = Fetcher::new(cache.clone(), Retry::default(), Progress::auto())
        .context("Failed to set up the HTTP client")?;
    let policy = IndexPolicy::new(std::time::Duration::from_secs(args.os_index_max_age));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("Failed to start the async runtime")?;
    runtime
        .block_on(resolve_all(
            &inputs.cluster,
            &inputs.catalog,
            &inputs.zone,
            &fetcher,
            &cache,
            policy,
        ))
        .context("Failed to resolve the OS packages")
}

/// The OS packages section of the table.
fn write_os_repos(repos: &[ResolvedRepo], out: &mut dyn Write) -> std::io::Result<()> {
    for r in repos {
        writeln!(
            out,
            "\nOS PACKAGES {} ({} packages, {} bytes; indexes signed by {})",
            r.release,
            r.packages.len(),
            r.bytes(),
            r.sources
                .iter()
                .flat_map(|s| s.signed_by.iter().map(String::as_str))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", ")
        )?;
        let rows: Vec<[String; 5]> = r
            .packages
            .iter()
            .map(|p| {
                [
                    p.name.clone(),
                    p.version.clone(),
                    p.arch.clone(),
                    p.size.to_string(),
                    p.reason.clone(),
                ]
            })
            .collect();
        table(out, ["NAME", "VERSION", "ARCH", "SIZE", "WHY"], &rows)?;
    }
    Ok(())
}

fn roles(r: &std::collections::BTreeSet<Role>) -> String {
    r.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(",")
}

/// Writes the readable form.
pub fn write_table(l: &Resolution, out: &mut dyn Write) -> std::io::Result<()> {
    let arches: Vec<&str> = l.arches.iter().map(|a| a.as_str()).collect();
    let kind = match l.kubernetes_type {
        kubexm_manifests::model::KubernetesType::Kubeadm => "kubeadm",
        kubexm_manifests::model::KubernetesType::Kubexm => "kubexm",
    };
    writeln!(
        out,
        "cluster {} · Kubernetes {} ({kind}) · zone {} · arches {}",
        l.cluster,
        l.kubernetes_version,
        l.zone,
        arches.join(",")
    )?;
    writeln!(out, "\nFILES ({})", l.binaries.len())?;
    let rows: Vec<[String; 6]> = l
        .binaries
        .iter()
        .map(|b| {
            [
                b.name.clone(),
                b.version.clone(),
                b.arch.to_string(),
                roles(&b.roles),
                if b.unpinned {
                    "UNPINNED".to_owned()
                } else {
                    b.sha256[..12.min(b.sha256.len())].to_owned()
                },
                b.url.clone(),
            ]
        })
        .collect();
    table(
        out,
        ["NAME", "VERSION", "ARCH", "ROLES", "SHA256", "URL"],
        &rows,
    )?;
    if l.binaries.iter().any(|b| b.unpinned) {
        writeln!(
            out,
            "UNPINNED: no sha256 is known for these files; pin them with --catalog FILE before `bundle`, or pass `bundle --accept-unpinned`"
        )?;
    }
    if !l.addons.is_empty() {
        writeln!(out, "\nADDON SOURCES ({})", l.addons.len())?;
        let rows: Vec<[String; 3]> = l
            .addons
            .iter()
            .map(|a| {
                let from = match &a.source {
                    kubexm_manifests::resolve::AddonLocation::Path { path } => path.clone(),
                    kubexm_manifests::resolve::AddonLocation::Url { url } => url.clone(),
                    kubexm_manifests::resolve::AddonLocation::Chart {
                        repo,
                        name,
                        version,
                    } => format!("{name} {version} from {repo}"),
                };
                [
                    a.addon.clone(),
                    format!("{:?}", a.kind).to_lowercase(),
                    from,
                ]
            })
            .collect();
        table(out, ["ADDON", "TYPE", "SOURCE"], &rows)?;
    }
    writeln!(out, "\nIMAGES ({})", l.images.len())?;
    let rows: Vec<[String; 5]> = l
        .images
        .iter()
        .map(|i| {
            let source = if i.source == i.reference {
                "=".to_owned()
            } else {
                i.source.clone()
            };
            let platforms: Vec<&str> = i.platforms.iter().map(String::as_str).collect();
            [
                i.reference.clone(),
                i.group.clone(),
                platforms.join(","),
                roles(&i.roles),
                source,
            ]
        })
        .collect();
    table(
        out,
        ["REFERENCE", "GROUP", "PLATFORMS", "ROLES", "PULL FROM"],
        &rows,
    )
}

fn table<const N: usize>(
    out: &mut dyn Write,
    head: [&str; N],
    rows: &[[String; N]],
) -> std::io::Result<()> {
    let mut width = head.map(str::len);
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s
    };
    writeln!(out, "{}", line(head.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}
