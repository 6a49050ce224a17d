//! `inventory`: what this site holds, for `kubexm-build bundle --have` (format:
//! `kubexm_bundles::delta::SiteInventory`).

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use kubexm_install::intake::site::{inventory, registry_holdings, scan};

use super::registry_options;
use crate::cli::InventoryArgs;

pub(crate) fn run(args: &InventoryArgs, work_dir: &std::path::Path) -> Result<()> {
    let files = scan(work_dir).with_context(|| {
        format!(
            "Failed to read the bundles unpacked in `{}`",
            work_dir.display()
        )
    })?;
    let registry =
        match registry_options(&args.registry, 8, 4, std::time::Duration::from_millis(500))? {
            Some(opts) => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .context("Failed to start the async runtime")?;
                let host = opts.target.host.clone();
                Some(
                    runtime
                        .block_on(registry_holdings(&files, &opts, !args.no_catalog))
                        .with_context(|| {
                            format!("Failed to list the blobs of registry `{host}`")
                        })?,
                )
            }
            None => None,
        };
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let inv = inventory(&files, registry, created);
    kubexm_bundles::atomic::write(&args.output, &inv.to_json(), 0o644)
        .with_context(|| format!("Failed to write `{}`", args.output.display()))?;
    let bytes: u64 = inv.files.values().sum();
    println!(
        "wrote {}: {} unpacked bundle(s), {} files ({bytes} bytes){}",
        args.output.display(),
        inv.bundles.len(),
        inv.files.len(),
        inv.registry
            .as_ref()
            .map(|r| format!(
                ", {} blobs in registry {} ({} bytes)",
                r.blobs.len(),
                r.host,
                r.blobs.values().map(|b| b.size).sum::<u64>()
            ))
            .unwrap_or_default()
    );
    Ok(())
}
