//! What `kubexm-build bundle` adds around the pack itself: the SBOM entry, a delta against a
//! site inventory (`--have`), the signature (`--sign`) and split volumes (`--split`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kubexm_bundles::delta::{self, SiteInventory};
use kubexm_bundles::hash::sha256_hex;
use kubexm_bundles::manifest::BundleManifest;
use kubexm_bundles::pack::{plan_bundle, Entry, Source, FILE_MODE};
use kubexm_bundles::{atomic, head, sign, split};

use crate::sbom;

/// Adds `sbom.cdx.json` to the entries; returns its bytes (also written beside the bundle).
pub fn add_sbom(
    manifest: &BundleManifest,
    entries: &mut Vec<Entry>,
    image_blobs: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Vec<u8>> {
    // The entries as pack writes them (sums of every source), bundle.json aside: it names the
    // SBOM's size and sum, so the SBOM cannot name its.
    let planned = plan_bundle(manifest, entries.clone())?;
    let sums: BTreeMap<String, String> = planned
        .files
        .into_iter()
        .filter(|f| f.path != kubexm_bundles::manifest::MANIFEST_PATH)
        .map(|f| (f.path, f.sha256))
        .collect();
    let bom = sbom::cyclonedx(manifest, &sums, image_blobs);
    entries.push(Entry {
        path: sbom::SBOM_PATH.to_owned(),
        source: Source::Bytes(bom.clone()),
        sha256: None,
        mode: FILE_MODE,
    });
    Ok(bom)
}

/// What a delta carries compared with the full bundle.
pub struct DeltaSummary {
    /// Entries of the target.
    pub entries: usize,
    /// Content bytes of the target.
    pub target_bytes: u64,
    /// Entries the delta carries.
    pub carried: usize,
    /// Content bytes it carries.
    pub carried_bytes: u64,
    /// The target's content digest.
    pub target_digest: String,
}

/// Turns the full bundle's manifest and entries into a delta bundle's against `inventory`.
pub fn make_delta(
    manifest: &BundleManifest,
    entries: Vec<Entry>,
    (site, inventory_sha): &(SiteInventory, String),
) -> Result<(BundleManifest, Vec<Entry>, DeltaSummary)> {
    // The full bundle exactly as pack would write it: its bundle.json and every sum.
    let planned = plan_bundle(manifest, entries.clone())?;
    let mut content: BTreeMap<String, Source> = BTreeMap::new();
    let sum_of: BTreeMap<&str, &str> = planned
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.sha256.as_str()))
        .collect();
    for e in entries {
        if let Some(sum) = sum_of.get(e.path.as_str()) {
            content.entry((*sum).to_owned()).or_insert(e.source);
        }
    }
    content.insert(
        sha256_hex(&planned.manifest_json),
        Source::Bytes(planned.manifest_json.clone()),
    );
    let (plan, carry) = delta::plan(&planned, site, inventory_sha);
    let carry: BTreeSet<String> = carry.into_iter().collect();
    let mut out = vec![Entry {
        path: delta::DELTA_PATH.to_owned(),
        source: Source::Bytes(plan.to_json()),
        sha256: None,
        mode: FILE_MODE,
    }];
    for sum in &carry {
        let Some(source) = content.remove(sum) else {
            bail!("no source for the entry with sha256 {sum}");
        };
        let known = matches!(source, Source::Stored(_)).then(|| sum.clone());
        out.push(Entry {
            path: format!("{}/{sum}", delta::STORE_DIR),
            source,
            sha256: known,
            mode: FILE_MODE,
        });
    }
    let carried: Vec<&delta::DeltaEntry> = plan
        .entries
        .iter()
        .filter(|e| e.source == delta::EntrySource::Delta)
        .collect();
    let summary = DeltaSummary {
        entries: plan.entries.len(),
        target_bytes: plan.entries.iter().map(|e| e.size).sum(),
        carried: carried.len(),
        carried_bytes: carried
            .iter()
            .map(|e| (e.sha256.as_str(), e.size))
            .collect::<BTreeMap<_, _>>()
            .values()
            .sum(),
        target_digest: plan.target_content_digest.clone(),
    };
    let delta_manifest = BundleManifest {
        files: Vec::new(),
        images: Vec::new(),
        // The OS repositories' files are entries like any other: the delta carries them (or
        // the site holds them) and the completed bundle's manifest lists them.
        os_repos: Vec::new(),
        upgrade_path: Vec::new(),
        ..manifest.clone()
    };
    Ok((delta_manifest, out, summary))
}

/// `<path><suffix>`.
pub fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// After the pack: signature, split, and the files beside the bundle.
pub struct Finish<'a> {
    /// The bundle written.
    pub output: &'a Path,
    /// Its manifest (cluster, version for the signature's trusted comment).
    pub manifest: &'a BundleManifest,
    /// The secret key to sign with.
    pub key: Option<&'a sign::SecretKey>,
    /// Part size.
    pub split: Option<u64>,
}

impl Finish<'_> {
    /// Signs and splits; prints what it wrote.
    pub fn run(&self, out: &mut dyn Write) -> Result<()> {
        let file = fs_err::File::open(self.output)?;
        let head = head::read_head(std::io::BufReader::new(file), None)
            .with_context(|| format!("Failed to read back `{}`", self.output.display()))?;
        let digest = head.content_digest;
        writeln!(out, "content digest sha256:{digest}")?;
        let key = self.key;
        let name = self
            .output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(key) = key {
            let trusted = format!(
                "kubexm-bundle sha256:{digest} cluster:{} kubernetes:{} file:{}",
                self.manifest.cluster,
                self.manifest.kubernetes_version,
                one_line(&name)
            );
            let sig = key.sign(
                &sign::bundle_statement(&digest),
                &trusted,
                "signature from kubexm-build (minisign format)",
            )?;
            let path = beside(self.output, sign::SIGNATURE_SUFFIX);
            atomic::write(&path, sig.to_file().as_bytes(), 0o644)
                .with_context(|| format!("Failed to write `{}`", path.display()))?;
            writeln!(
                out,
                "signed with key {}: {}",
                key.public().id(),
                path.display()
            )?;
        }
        if let Some(size) = self.split {
            let index = split::split(self.output, size, &digest)
                .with_context(|| format!("Failed to split `{}`", self.output.display()))?;
            let index_path = split::index_path(self.output);
            writeln!(
                out,
                "split into {} parts of at most {size} bytes: {} (index {})",
                index.parts.len(),
                index
                    .parts
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                index_path.display()
            )?;
            if let Some(key) = key {
                let bytes = fs_err::read(&index_path)?;
                let trusted = format!(
                    "kubexm-split {} sha256:{} parts:{}",
                    one_line(&index.bundle),
                    index.sha256,
                    index.parts.len()
                );
                let sig = key.sign(
                    &bytes,
                    &trusted,
                    "signature from kubexm-build (minisign format)",
                )?;
                let path = beside(&index_path, sign::SIGNATURE_SUFFIX);
                atomic::write(&path, sig.to_file().as_bytes(), 0o644)
                    .with_context(|| format!("Failed to write `{}`", path.display()))?;
                writeln!(out, "index signed: {}", path.display())?;
            }
        }
        Ok(())
    }
}

/// Reads a minisign secret key, refusing one others can read (as ssh refuses such keys).
pub fn load_secret_key(path: &Path) -> Result<sign::SecretKey> {
    use std::os::unix::fs::PermissionsExt;
    let meta = fs_err::metadata(path)?;
    if meta.permissions().mode() & 0o077 != 0 {
        bail!(
            "`{}` is readable by other users (mode {:o}); run `chmod 600 {}`",
            path.display(),
            meta.permissions().mode() & 0o777,
            path.display()
        );
    }
    let text =
        sign::read_file(path).with_context(|| format!("Failed to read `{}`", path.display()))?;
    sign::SecretKey::parse(&text).with_context(|| {
        format!(
            "`{}` is not a usable signing key (make one with `kubexm-build keygen`, or `minisign -G -W`)",
            path.display()
        )
    })
}

fn one_line(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}
