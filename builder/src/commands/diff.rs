//! `kubexm-build diff`: what changes if NEW replaces OLD, or replaces what the site's record says
//! the cluster runs (`--installed`), from the bundles' own metadata (see
//! [`crate::bundle_diff`]). Nothing is unpacked: each bundle is decompressed up to the last entry
//! needed (only `bundle.json`, `SHA256SUMS`, `cluster.yaml` and small addon YAML when the SBOM
//! sits beside it as `FILE.cdx.json`, as `bundle` writes it), into bounded memory.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::CommandFactory;
use kubexm_bundles::hash::{is_sha256_hex, sha256_hex};
use kubexm_bundles::peek::{self, Limits, Peeked};
use kubexm_bundles::split::{self, PartsReader, SplitIndex};
use kubexm_manifests::display::Untrusted;
use serde::Deserialize;

use crate::bundle_diff::{self, Input, SBOM_PATH};
use crate::cli::{DiffArgs, DiffFormat};

/// The SBOM is the largest entry read: one component per file and blob.
const LIMITS: Limits = Limits {
    per_entry: 64 << 20,
    total: 160 << 20,
};
/// Largest cluster record read (`installed.json`: at most 200 history entries).
const MAX_RECORD: u64 = 16 << 20;
/// Largest cluster.yaml read from a record.
const MAX_CLUSTER_YAML: u64 = 4 << 20;

/// Compares and prints.
pub fn run(args: &DiffArgs, out: &mut dyn Write) -> Result<()> {
    let (old, new) = match (args.installed, args.bundles.as_slice()) {
        (true, [new]) => (installed(&args.work_dir, args.cluster.as_deref())?, new),
        (false, [old, new]) => (open(old)?, new),
        (true, _) => {
            usage("with --installed, give only the new bundle: diff --installed NEW.tar.zst")
        }
        (false, _) => {
            usage("give two bundles: diff OLD.tar.zst NEW.tar.zst (or --installed NEW.tar.zst)")
        }
    };
    let new = open(new)?;
    let d = bundle_diff::diff(&old, &new);
    match args.output {
        DiffFormat::Json => {
            serde_json::to_writer_pretty(&mut *out, &d)?;
            writeln!(out)?;
        }
        DiffFormat::Text => out.write_all(bundle_diff::render_text(&d).as_bytes())?,
    }
    Ok(())
}

/// A usage error: clap's message with `diff`'s usage, and exit code 2.
fn usage(message: &str) -> ! {
    let top = crate::cli::Cli::command();
    let mut cmd = top
        .find_subcommand("diff")
        .cloned()
        .unwrap_or(top)
        .bin_name("kubexm-build diff");
    cmd.error(clap::error::ErrorKind::WrongNumberOfValues, message)
        .exit()
}

/// Where a bundle's bytes come from.
struct Opened {
    /// The bundle file (a split one's name, beside its index).
    bundle: PathBuf,
    split: Option<SplitIndex>,
    index_path: PathBuf,
    file_bytes: u64,
}

impl Opened {
    fn reader(&self) -> Result<Box<dyn Read>> {
        Ok(match &self.split {
            Some(index) => Box::new(PartsReader::new(index.clone(), &self.index_path)),
            None => Box::new(std::io::BufReader::with_capacity(
                1 << 20,
                fs_err::File::open(&self.bundle)?,
            )),
        })
    }

    fn peek(&self, sbom: bool) -> Result<Peeked> {
        let want = |path: &str, size: Option<u64>| bundle_diff::wanted(path, size, sbom);
        Ok(peek::peek_stream(self.reader()?, &want, LIMITS)?)
    }
}

/// Reads a bundle (a `.tar.zst`, a split bundle's index, a delta bundle).
fn open(path: &Path) -> Result<Input> {
    let shown = path.display().to_string();
    let opened = if path.to_string_lossy().ends_with(split::INDEX_SUFFIX) {
        let (index, _) = SplitIndex::load(path)?;
        let bundle = path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(&index.bundle);
        Opened {
            bundle,
            file_bytes: index.parts.iter().map(|p| p.size).sum(),
            split: Some(index),
            index_path: path.to_owned(),
        }
    } else {
        let meta = fs_err::metadata(path).with_context(|| format!("Failed to read `{shown}`"))?;
        Opened {
            bundle: path.to_owned(),
            split: None,
            index_path: path.to_owned(),
            file_bytes: meta.len(),
        }
    };
    // The SBOM `bundle` writes beside the bundle spares reading the stream to its end, when it
    // is the one the bundle holds (checked against `SHA256SUMS` below).
    let mut beside = opened.bundle.clone().into_os_string();
    beside.push(crate::sbom::SBOM_SUFFIX);
    let beside = PathBuf::from(beside);
    let has_beside = fs_err::symlink_metadata(&beside).is_ok_and(|m| m.is_file());
    let read = |sbom: bool| {
        opened
            .peek(sbom)
            .with_context(|| format!("Failed to read the metadata of `{shown}`"))
    };
    let mut peeked = read(!has_beside)?;
    let mut notes = Vec::new();
    let sbom = match peeked.sums.get(SBOM_PATH).cloned() {
        None => {
            notes.push("it holds no SBOM: image sizes are not shown".to_owned());
            None
        }
        Some(sum) if has_beside => match read_capped(&beside, LIMITS.per_entry) {
            Ok(bytes) if sha256_hex(&bytes) == sum => Some(bytes),
            _ => {
                // Not the bundle's own SBOM: read the one inside.
                peeked = read(true)?;
                peeked.entries.remove(SBOM_PATH)
            }
        },
        Some(_) => peeked.entries.remove(SBOM_PATH),
    };
    if sbom.is_none() && peeked.not_carried.iter().any(|p| p == SBOM_PATH) {
        notes.push("this delta does not carry its target's SBOM: image sizes are not shown".into());
    }
    if let Some(index) = &opened.split {
        if index.content_digest != peeked.content_digest {
            bail!(
                "`{shown}` names content digest sha256:{}, its parts hold sha256:{}: the index is not this bundle's",
                Untrusted(&index.content_digest),
                peeked.content_digest
            );
        }
    }
    let form = match (&opened.split, &peeked.delta) {
        (_, Some(d)) => {
            notes.push(format!(
                "a delta bundle: its target is compared; it carries {} of the target's entries, the site holds the other {}",
                d.entries, d.from_site
            ));
            "delta"
        }
        (Some(_), None) => "split",
        (None, None) => "bundle",
    };
    Ok(Input {
        peeked,
        source: shown,
        form,
        file_bytes: Some(opened.file_bytes),
        sbom,
        cluster_yaml: None,
        notes,
    })
}

/// What `kubexm-install` keeps of an installed cluster (`WORK/clusters/<cluster>/installed.json`,
/// `installer/src/record.rs`): the fields read here, the others ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    format_version: u32,
    present: bool,
    cluster_yaml_sha256: String,
    bundle_digest: Option<String>,
}

/// `WORK/clusters`, `installed.json`, `cluster-yaml/`, `WORK/bundles` (as `kubexm-install` names them).
const CLUSTERS_DIR: &str = "clusters";
const RECORD_FILE: &str = "installed.json";
const APPLIED_DIR: &str = "cluster-yaml";
const BUNDLES_DIR: &str = "bundles";

/// The bundle and cluster.yaml the record of `cluster` (the only one when `None`) names.
fn installed(work_dir: &Path, cluster: Option<&str>) -> Result<Input> {
    let clusters = work_dir.join(CLUSTERS_DIR);
    let name = match cluster {
        Some(c) => {
            let plain = !c.is_empty()
                && c != "."
                && c != ".."
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !plain {
                bail!("`{}` is not a cluster name", Untrusted(c));
            }
            c.to_owned()
        }
        None => {
            let mut found = Vec::new();
            if let Ok(entries) = fs_err::read_dir(&clusters) {
                for e in entries.flatten() {
                    if e.path().join(RECORD_FILE).is_file() {
                        found.push(e.file_name().to_string_lossy().into_owned());
                    }
                }
            }
            found.sort();
            match found.as_slice() {
                [one] => one.clone(),
                [] => bail!(
                    "no cluster is recorded in `{}`\nhint: run this on the control host, with --work-dir (or KUBEXM_WORK_DIR) naming kubexm-install's work directory",
                    clusters.display()
                ),
                many => bail!(
                    "{} clusters are recorded in `{}` ({}): name one with --cluster",
                    many.len(),
                    clusters.display(),
                    many.iter().map(|c| Untrusted(c).to_string()).collect::<Vec<_>>().join(", ")
                ),
            }
        }
    };
    let dir = clusters.join(&name);
    let path = dir.join(RECORD_FILE);
    let bytes = read_capped(&path, MAX_RECORD)
        .with_context(|| format!("Failed to read the record of cluster {}", Untrusted(&name)))?;
    let record: Record = serde_json::from_slice(&bytes)
        .with_context(|| format!("`{}` is not a KubeXM cluster record", path.display()))?;
    if record.format_version != 1 {
        bail!(
            "`{}` has formatVersion {}; this kubexm-build reads 1",
            path.display(),
            record.format_version
        );
    }
    if !record.present {
        bail!(
            "cluster {} was deleted (its record says so): there is nothing installed to compare with",
            Untrusted(&name)
        );
    }
    let Some(digest) = record.bundle_digest.filter(|d| is_sha256_hex(d)) else {
        bail!(
            "the record of cluster {} names no bundle: compare the bundle it was installed with instead (diff OLD.tar.zst NEW.tar.zst)",
            Untrusted(&name)
        );
    };
    if !is_sha256_hex(&record.cluster_yaml_sha256) {
        bail!(
            "`{}`: clusterYamlSha256 is not 64 hex digits",
            path.display()
        );
    }
    let yaml_path = dir
        .join(APPLIED_DIR)
        .join(format!("{}.yaml", record.cluster_yaml_sha256));
    let yaml = read_capped(&yaml_path, MAX_CLUSTER_YAML).with_context(|| {
        format!(
            "Failed to read the cluster.yaml the record of {} names",
            Untrusted(&name)
        )
    })?;
    if sha256_hex(&yaml) != record.cluster_yaml_sha256 {
        bail!(
            "`{}` is not the cluster.yaml the record names (sha256 {}): the work directory was altered",
            yaml_path.display(),
            record.cluster_yaml_sha256
        );
    }
    let tree = work_dir.join(BUNDLES_DIR).join(&digest);
    if !tree.is_dir() {
        bail!(
            "the bundle cluster {} was installed with (content sha256:{digest}) is no longer unpacked in `{}`\nhint: compare with that bundle's file instead: kubexm-build diff OLD.tar.zst NEW.tar.zst",
            Untrusted(&name),
            work_dir.join(BUNDLES_DIR).display()
        );
    }
    let want = |p: &str, size: Option<u64>| bundle_diff::wanted(p, size, true);
    let mut peeked = peek::peek_unpacked(&tree, &digest, &want, LIMITS).with_context(|| {
        format!(
            "Failed to read the bundle cluster {} was installed with",
            Untrusted(&name)
        )
    })?;
    let sbom = peeked.entries.remove(SBOM_PATH);
    let mut notes = vec![format!(
        "compared: the bundle the cluster runs and the cluster.yaml last applied (sha256 {})",
        &record.cluster_yaml_sha256[..12]
    )];
    if sbom.is_none() {
        notes.push("it holds no SBOM: image sizes are not shown".to_owned());
    }
    Ok(Input {
        peeked,
        source: format!(
            "cluster {} installed, recorded in {}",
            Untrusted(&name),
            work_dir.display()
        ),
        form: "installed",
        file_bytes: None,
        sbom,
        cluster_yaml: Some(yaml),
        notes,
    })
}

fn read_capped(path: &Path, max: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    fs_err::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        bail!("`{}` is larger than {max} bytes", path.display());
    }
    Ok(bytes)
}
