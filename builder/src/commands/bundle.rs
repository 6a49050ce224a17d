//! `kubexm-build bundle`: resolve, fetch every file and image into the cache, pack one bundle.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use futures_util::{stream, StreamExt, TryStreamExt};
use kubexm_bundles::manifest::{BundleManifest, FileRecord, ImageRecord, CLUSTER_PATH, IMAGES_DIR};
use kubexm_bundles::pack::{pack, Entry, PackOptions, Source};
use kubexm_manifests::resolve::{resolve, Resolution};

use super::{bundle_extras, problems_error, Inputs};
use crate::cache::Cache;
use crate::cli::BundleArgs;
use crate::credentials::Credentials;
use crate::fetch::{DownloadLimits, Fetcher, Retry};
use crate::images::{ImageRequest, PulledImage, Puller, RegistryAccess};
use crate::oci_layout;
use crate::osrepo;
use crate::progress::Progress;
use crate::upgrade_bundle;

/// Runs the whole build.
pub fn run(args: &BundleArgs, out: &mut dyn Write) -> Result<()> {
    let inputs = Inputs::load(&args.source)?;
    // The key and the site inventory are read first: a bad one stops the build before any
    // download.
    let key = args
        .sign
        .as_deref()
        .map(bundle_extras::load_secret_key)
        .transpose()?;
    let site = args
        .have
        .as_deref()
        .map(kubexm_bundles::delta::SiteInventory::load)
        .transpose()?;
    let mut lists = resolve(&inputs.cluster, &inputs.catalog, &inputs.zone)
        .map_err(|p| problems_error(&args.source.file, &p))?;
    let origin = args.source.file.display().to_string();
    let cluster_yaml = std::fs::read_to_string(&args.source.file)
        .with_context(|| format!("Failed to read `{origin}`"))?;
    // A bundle passes through many hands: it never carries an inline secret.
    let (cluster_yaml, removed) =
        kubexm_manifests::load::without_inline_secrets(&cluster_yaml, &origin)
            .with_context(|| format!("Failed to read `{origin}`"))?;
    for field in &removed {
        writeln!(
            out,
            "warning: {field} is an inline secret: left out of the bundle's cluster.yaml; at install time use passwordEnv/passwordFile or pass the original with -f"
        )?;
    }
    // An upgrade path: the versions between --upgrade-from and cluster.yaml's, bundled too.
    let path = match args.upgrade_from {
        Some(from) => {
            let versions = upgrade_bundle::between(from, inputs.cluster.version, &inputs.catalog)?;
            let path = upgrade_bundle::resolve_each(
                &versions,
                &cluster_yaml,
                &origin,
                &inputs.catalog,
                &inputs.zone,
            )?;
            upgrade_bundle::merge(&mut lists, &path);
            writeln!(
                out,
                "upgrade path: {from} -> {}",
                versions
                    .iter()
                    .chain(std::iter::once(&inputs.cluster.version))
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" -> ")
            )?;
            path
        }
        None => Vec::new(),
    };
    refuse_unsummed_addons(&lists)?;
    let cache_root = args.cache_dir.clone().unwrap_or_else(Cache::default_root);
    let cache = Cache::open(&cache_root).context("Failed to open the cache")?;
    let jobs = args.jobs.max(1);
    let retry = Retry {
        attempts: args.retries.max(1),
        base: std::time::Duration::from_millis(args.retry_delay_ms),
    };
    let progress = Progress::auto();
    if args.accept_unpinned {
        pin_on_first_use(&mut lists, &cache, retry, &progress, out)?;
    } else {
        refuse_unpinned(&lists)?;
    }
    let spec = &inputs.cluster.file.spec;
    let credentials = Credentials::load(&spec.registry.auths, args.docker_config.as_deref())?;
    let mut access = RegistryAccess {
        plain_http: inputs.zone.plain_http_registries(),
        ..RegistryAccess::default()
    };
    for (host, auth) in &spec.registry.auths {
        if auth.plain_http {
            access.plain_http.push(host.clone());
        }
        access.insecure_skip_verify |= auth.skip_tls_verify;
        if let Some(ca) = &auth.ca_file {
            access.ca_pems.push(std::fs::read(ca).with_context(|| {
                format!("Failed to read spec.registry.auths[\"{host}\"].caFile `{ca}`")
            })?);
        }
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(jobs.clamp(2, 8))
        .enable_all()
        .build()
        .context("Failed to start the async runtime")?;
    let policy = osrepo::IndexPolicy::new(std::time::Duration::from_secs(args.os_index_max_age));
    let (files, images, addon_files, repos) = runtime.block_on(async {
        let fetcher = Fetcher::new(cache.clone(), retry, progress.clone())
            .context("Failed to set up the HTTP client")?
            .with_limits(DownloadLimits::new(
                args.max_download_size,
                std::time::Duration::from_secs(args.download_deadline),
            ));
        // The OS repositories first: a package missing from a release fails the build before
        // anything large is downloaded.
        let repos = osrepo::resolve_all(
            &inputs.cluster,
            &inputs.catalog,
            &inputs.zone,
            &fetcher,
            &cache,
            policy,
        )
        .await
        .context("Failed to resolve the OS packages")?;
        // One download per distinct sha256 (identical files share one cache entry), each on
        // its own task so hashing spreads over the cores.
        let mut seen = BTreeSet::new();
        let unique: Vec<_> = lists
            .binaries
            .iter()
            .filter(|b| seen.insert(b.sha256.clone()))
            .collect();
        let downloads = stream::iter(unique)
            .map(|b| {
                let fetcher = fetcher.clone();
                let (url, sum) = (b.url.clone(), b.sha256.clone());
                let label = format!("{} {} {}", b.name, b.version, b.arch);
                async move {
                    tokio::spawn(async move { fetcher.fetch(&url, &sum, &label).await })
                        .await
                        .map_err(|e| anyhow::anyhow!("download task failed: {e}"))?
                        .map_err(anyhow::Error::from)
                }
            })
            .buffer_unordered(jobs)
            .try_collect::<Vec<PathBuf>>();
        // Addon sources first (small): what they pull is checked against the bundle's image
        // list before any image is pulled.
        let base_dir = args
            .source
            .file
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default();
        let mut addon_files = crate::addons::collect(&lists.addons, &base_dir, &fetcher, &cache)
            .await
            .context("Failed to fetch the addons' sources")?;
        let bundled: BTreeSet<String> = lists.images.iter().map(|i| i.reference.clone()).collect();
        crate::completeness::check(&spec.addons, &addon_files, &bundled)?;
        addon_files.extend(
            crate::addons::collect_scripts(&lists.scripts, &base_dir, &cache)
                .context("Failed to read the custom scripts")?,
        );
        let puller = Puller::new(
            cache.clone(),
            retry,
            progress.clone(),
            credentials,
            &access,
            jobs,
        )?;
        let requests: Vec<ImageRequest> = lists
            .images
            .iter()
            .map(|i| ImageRequest {
                source: i.source.clone(),
                platforms: i.platforms.clone(),
            })
            .collect();
        // Files and images at the same time: on a real network each connection is limited by
        // latency and its own bandwidth, so both kinds of transfer overlap (each side keeps at
        // most `jobs` transfers in flight).
        let (_, images, ()) = tokio::try_join!(
            async { downloads.await.context("Failed to download the files") },
            async {
                puller
                    .pull_all(&requests)
                    .await
                    .context("Failed to pull the images")
            },
            async {
                osrepo::download(&repos, &fetcher, jobs)
                    .await
                    .context("Failed to download the OS packages")
            },
        )?;
        let files: Vec<PathBuf> = lists
            .binaries
            .iter()
            .map(|b| cache.blob_path(&b.sha256))
            .collect();
        anyhow::Ok((files, images, addon_files, repos))
    })?;

    let cluster_yaml = cluster_yaml.into_bytes();
    let mtime = source_date_epoch()?;
    let mut manifest = bundle_manifest(&lists, &files, &images, mtime);
    manifest
        .files
        .extend(addon_files.iter().map(|a| a.record.clone()));
    let catalog_yaml = match &args.source.catalog {
        Some(p) => {
            Some(std::fs::read(p).with_context(|| format!("Failed to read `{}`", p.display()))?)
        }
        None => None,
    };
    let mut entries = bundle_entries(&cache, &lists, &images, cluster_yaml, catalog_yaml)?;
    manifest.upgrade_path = path
        .iter()
        .map(upgrade_bundle::PathVersion::record)
        .collect();
    entries.extend(path.iter().map(|p| Entry {
        path: p.record().cluster,
        source: Source::Bytes(p.cluster_yaml.clone().into_bytes()),
        sha256: None,
        mode: 0o644,
    }));
    // Signed at SOURCE_DATE_EPOCH when set; else now (the key is new for every bundle anyway).
    let sign_at = if mtime > 0 {
        u32::try_from(mtime).unwrap_or(u32::MAX)
    } else {
        policy.now
    };
    let (repo_entries, repo_records) =
        osrepo::bundle_parts(&repos, &cache, &lists.cluster, sign_at)?;
    entries.extend(repo_entries);
    manifest.os_repos = repo_records;
    entries.extend(addon_files.iter().map(|a| Entry {
        path: a.record.path.clone(),
        source: Source::Stored(a.blob.clone()),
        sha256: Some(a.record.sha256.clone()),
        mode: 0o644,
    }));
    let output = args.output.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "kubexm-{}-{}.tar.zst",
            lists.cluster, lists.kubernetes_version
        ))
    });
    let image_blobs: BTreeMap<String, BTreeSet<String>> = lists
        .images
        .iter()
        .zip(&images)
        .map(|(i, p)| (i.reference.clone(), p.blobs.clone()))
        .collect();
    let bom = bundle_extras::add_sbom(&manifest, &mut entries, &image_blobs)
        .context("Failed to write the SBOM")?;
    let (pack_manifest, pack_entries, delta) = match &site {
        Some(site) => {
            let (m, e, summary) = bundle_extras::make_delta(&manifest, entries, site)
                .context("Failed to plan the delta bundle")?;
            (m, e, Some(summary))
        }
        None => (manifest.clone(), entries, None),
    };
    let opts = PackOptions {
        level: args.level,
        threads: 0,
        mtime,
    };
    let report = pack(&output, &pack_manifest, pack_entries, &opts)
        .with_context(|| format!("Failed to write `{}`", output.display()))?;
    let sbom_path = bundle_extras::beside(&output, crate::sbom::SBOM_SUFFIX);
    kubexm_bundles::atomic::write(&sbom_path, &bom, 0o644)
        .with_context(|| format!("Failed to write `{}`", sbom_path.display()))?;
    for r in &manifest.os_repos {
        writeln!(
            out,
            "OS repository {}: {} packages, {} bytes, signed with key {}",
            r.path,
            r.packages.len(),
            r.packages.iter().map(|p| p.size).sum::<u64>(),
            r.signing_key.fingerprint
        )?;
    }
    writeln!(
        out,
        "wrote {} ({} files, {} images, {} entries, {} → {} bytes, sha256 {}); SBOM {}",
        output.display(),
        manifest.files.len(),
        manifest.images.len(),
        report.entries,
        report.bytes_in,
        report.bytes_out,
        report.sha256,
        sbom_path.display()
    )?;
    if let Some(d) = &delta {
        writeln!(
            out,
            "delta bundle: carries {} of the target's {} files ({} of {} content bytes); the site holds the rest; target content digest sha256:{}",
            d.carried, d.entries, d.carried_bytes, d.target_bytes, d.target_digest
        )?;
    }
    bundle_extras::Finish {
        output: &output,
        manifest: &manifest,
        key: key.as_ref(),
        split: args.split,
    }
    .run(out)?;
    Ok(())
}

/// An addon fetched from a URL needs `source.sha256`: the error says so.
fn refuse_unsummed_addons(lists: &Resolution) -> Result<()> {
    for a in &lists.addons {
        if let (kubexm_manifests::resolve::AddonLocation::Url { url }, None) =
            (&a.source, &a.sha256)
        {
            return Err(crate::exit::InvalidConfig(format!(
                "spec.addons `{}`: source.url `{url}` has no source.sha256; set it to the sha256sum of the file (sums are never guessed)",
                a.addon
            ))
            .into());
        }
    }
    Ok(())
}

/// `--accept-unpinned`: each unpinned file's sha256 is taken from one download now (the user
/// vouches for what the upstream host serves today); the bundle records it like any other and
/// the catalog entry that pins it is printed.
fn pin_on_first_use(
    lists: &mut Resolution,
    cache: &Cache,
    retry: Retry,
    progress: &Progress,
    out: &mut dyn Write,
) -> Result<()> {
    if !lists.binaries.iter().any(|b| b.unpinned) {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("Failed to start the async runtime")?;
    let fetcher = Fetcher::new(cache.clone(), retry, progress.clone())
        .context("Failed to set up the HTTP client")?;
    let mut snippet = String::from("components:\n");
    for b in lists.binaries.iter_mut().filter(|b| b.unpinned) {
        let sum = runtime
            .block_on(fetcher.sha256_of(&b.url))
            .with_context(|| {
                format!(
                    "Failed to pin {} {} ({}) on first use",
                    b.name, b.version, b.arch
                )
            })?;
        writeln!(
            out,
            "warning: {} {} ({}) pinned on first use (--accept-unpinned): sha256 {sum} of {}",
            b.name, b.version, b.arch, b.url
        )?;
        snippet.push_str(&format!(
            "  - name: {}\n    versions: {{\"{}\": {{{}: \"{sum}\"}}}}\n",
            b.name, b.version, b.arch
        ));
        b.sha256 = sum;
        b.unpinned = false;
    }
    writeln!(
        out,
        "to pin these files in later builds (after checking them), pass a catalog file with --catalog FILE:\n{}",
        snippet.trim_end()
    )?;
    Ok(())
}

/// Files the catalog cannot pin (`userPinned` components with no sum for the version) are never
/// downloaded unverified unless `--accept-unpinned`: the error says exactly what to pin.
fn refuse_unpinned(lists: &Resolution) -> Result<()> {
    let unpinned: Vec<_> = lists.binaries.iter().filter(|b| b.unpinned).collect();
    if unpinned.is_empty() {
        return Ok(());
    }
    let mut msg = format!(
        "{} file(s) have no pinned sha256, and KubeXM never downloads a file it cannot verify:\n",
        unpinned.len()
    );
    for b in &unpinned {
        msg.push_str(&format!(
            "  - {} {} ({}): {}\n",
            b.name, b.version, b.arch, b.url
        ));
    }
    msg.push_str("pin them in a catalog file passed with --catalog FILE, with the sha256sum of each file you checked (or pass --accept-unpinned to take the sums of what the hosts serve now):\ncomponents:\n");
    for b in &unpinned {
        msg.push_str(&format!(
            "  - name: {}\n    versions: {{\"{}\": {{{}: \"<sha256>\"}}}}\n",
            b.name, b.version, b.arch
        ));
    }
    Err(anyhow::anyhow!(msg.trim_end().to_owned()))
}

/// `SOURCE_DATE_EPOCH` when set (reproducible builds), else 0.
fn source_date_epoch() -> Result<u64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) if !v.is_empty() => v
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH `{v}` is not a number of seconds")),
        _ => Ok(0),
    }
}

fn bundle_manifest(
    lists: &Resolution,
    files: &[PathBuf],
    images: &[PulledImage],
    created: u64,
) -> BundleManifest {
    let roles = |r: &BTreeSet<kubexm_manifests::resolve::Role>| {
        r.iter().map(|x| x.as_str().to_owned()).collect()
    };
    BundleManifest {
        format_version: kubexm_bundles::FORMAT_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        cluster: lists.cluster.clone(),
        kubernetes_version: lists.kubernetes_version.clone(),
        zone: lists.zone.clone(),
        arches: lists.arches.iter().map(|a| a.to_string()).collect(),
        created,
        files: lists
            .binaries
            .iter()
            .zip(files)
            .map(|(b, path)| FileRecord {
                name: b.name.clone(),
                version: b.version.clone(),
                arch: b.arch.to_string(),
                path: b.path.clone(),
                sha256: b.sha256.clone(),
                size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
                url: b.url.clone(),
                roles: roles(&b.roles),
            })
            .collect(),
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        images: lists
            .images
            .iter()
            .zip(images)
            .map(|(i, p)| ImageRecord {
                reference: i.reference.clone(),
                source: i.source.clone(),
                digest: p.digest.clone(),
                source_digest: p.source_digest.clone(),
                layout_digest: p.layout_wrapper.as_ref().map(|w| w.0.clone()),
                media_type: p.media_type.clone(),
                size: p.size,
                platforms: p.platforms.clone(),
                roles: roles(&i.roles),
            })
            .collect(),
        // Filled by `pack` from the entries it writes.
        sizes: std::collections::BTreeMap::new(),
    }
}

fn bundle_entries(
    cache: &Cache,
    lists: &Resolution,
    images: &[PulledImage],
    cluster_yaml: Vec<u8>,
    catalog_yaml: Option<Vec<u8>>,
) -> Result<Vec<Entry>> {
    let mut entries = vec![Entry {
        path: CLUSTER_PATH.to_owned(),
        source: Source::Bytes(cluster_yaml),
        sha256: None,
        mode: 0o644,
    }];
    if let Some(catalog) = catalog_yaml {
        entries.push(Entry {
            path: kubexm_bundles::manifest::CATALOG_PATH.to_owned(),
            source: Source::Bytes(catalog),
            sha256: None,
            mode: 0o644,
        });
    }
    for b in &lists.binaries {
        let exec = matches!(b.archive, kubexm_manifests::catalog::Archive::Binary);
        entries.push(Entry {
            path: b.path.clone(),
            source: Source::Stored(cache.blob_path(&b.sha256)),
            sha256: Some(b.sha256.clone()),
            mode: if exec { 0o755 } else { 0o644 },
        });
    }
    if !images.is_empty() {
        let refs: Vec<(&str, &PulledImage)> = lists
            .images
            .iter()
            .map(|i| i.reference.as_str())
            .zip(images)
            .collect();
        entries.push(Entry {
            path: format!("{IMAGES_DIR}/oci-layout"),
            source: Source::Bytes(oci_layout::LAYOUT_FILE.as_bytes().to_vec()),
            sha256: None,
            mode: 0o644,
        });
        entries.push(Entry {
            path: format!("{IMAGES_DIR}/index.json"),
            source: Source::Bytes(oci_layout::index_json(&refs)),
            sha256: None,
            mode: 0o644,
        });
        let blobs: BTreeSet<&str> = images
            .iter()
            .flat_map(|i| i.blobs.iter().map(String::as_str))
            .collect();
        for digest in blobs {
            let hex = digest.trim_start_matches("sha256:");
            entries.push(Entry {
                path: format!("{IMAGES_DIR}/blobs/sha256/{hex}"),
                source: Source::Stored(cache.blob_path(hex)),
                sha256: Some(hex.to_owned()),
                mode: 0o644,
            });
        }
    }
    Ok(entries)
}
