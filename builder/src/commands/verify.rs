//! `kubexm-build verify`: one streaming pass over a bundle, checking every entry; for a split
//! bundle every part's sha256 first; with `--trusted-key`, the signature before anything else.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kubexm_bundles::sign::{self, PublicKey, Signature};
use kubexm_bundles::split::{self, PartsReader, SplitIndex};
use kubexm_bundles::verify::{verify, NullSink};
use kubexm_manifests::display::Untrusted;

use super::bundle_extras::beside;
use crate::cli::VerifyArgs;

/// Where the bundle's bytes come from.
enum Input {
    File(PathBuf),
    Split {
        index: SplitIndex,
        index_path: PathBuf,
        bundle: PathBuf,
    },
}

impl Input {
    fn open(&self) -> Result<Box<dyn Read + Send>> {
        Ok(match self {
            Input::File(p) => Box::new(std::io::BufReader::with_capacity(
                1 << 20,
                fs_err::File::open(p)?,
            )),
            Input::Split {
                index, index_path, ..
            } => Box::new(PartsReader::new(index.clone(), index_path)),
        })
    }

    /// The bundle's name (the signature sits beside it).
    fn bundle(&self) -> &Path {
        match self {
            Input::File(p) | Input::Split { bundle: p, .. } => p,
        }
    }
}

/// Verifies and prints a summary.
pub fn run(args: &VerifyArgs, out: &mut dyn Write) -> Result<()> {
    let trusted = load_trusted(&args.trusted_keys)?;
    let shown = args.bundle.display();
    let input = if args.bundle.to_string_lossy().ends_with(split::INDEX_SUFFIX) {
        let (index, bytes) = SplitIndex::load(&args.bundle)?;
        if !trusted.is_empty() {
            let sig_path = beside(&args.bundle, sign::SIGNATURE_SUFFIX);
            let key = check_signature(&trusted, &bytes, &sig_path).with_context(|| {
                format!("The split index `{shown}` is not signed by a trusted key")
            })?;
            writeln!(out, "{shown}: index signed by trusted key {}", key.id())?;
        }
        let bad = index.check_parts(&args.bundle);
        if !bad.is_empty() {
            let list: Vec<String> = bad.iter().map(|e| format!("  - {e}")).collect();
            bail!(
                "{} of the {} parts of `{}` are damaged or missing:\n{}",
                bad.len(),
                index.parts.len(),
                index.bundle,
                list.join("\n")
            );
        }
        writeln!(
            out,
            "{shown}: all {} parts match their sha256",
            index.parts.len()
        )?;
        let bundle = args
            .bundle
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(&index.bundle);
        Input::Split {
            index,
            index_path: args.bundle.clone(),
            bundle,
        }
    } else {
        Input::File(args.bundle.clone())
    };
    if !trusted.is_empty() {
        let head = kubexm_bundles::head::read_head(input.open()?, None)
            .with_context(|| format!("Failed to read the head of `{shown}`"))?;
        let sig_path = beside(input.bundle(), sign::SIGNATURE_SUFFIX);
        let key = check_signature(
            &trusted,
            &sign::bundle_statement(&head.content_digest),
            &sig_path,
        )
        .with_context(|| format!("`{shown}` is not signed by a trusted key"))?;
        writeln!(
            out,
            "{shown}: content digest sha256:{} signed by trusted key {}",
            head.content_digest,
            key.id()
        )?;
    }
    let report = verify(input.open()?, &mut NullSink)
        .with_context(|| format!("`{shown}` failed verification"))?;
    let pinned = if report.pinned_bytes.is_some() {
        "sizes pinned"
    } else {
        "formatVersion 1: sizes not pinned"
    };
    // A bundle built for an upgrade path names its further versions too.
    let path: String = report
        .manifest
        .upgrade_path
        .iter()
        .map(|s| format!(" + {}", Untrusted(&s.kubernetes_version)))
        .collect();
    writeln!(
        out,
        "{}: OK ({} entries; takes {} bytes on disk unpacked, {pinned}; cluster {}, Kubernetes {}{path}, {} files, {} images)",
        shown,
        report.entries,
        report.bytes,
        Untrusted(&report.manifest.cluster),
        Untrusted(&report.manifest.kubernetes_version),
        report.manifest.files.len(),
        report.manifest.images.len()
    )?;
    Ok(())
}

fn load_trusted(paths: &[PathBuf]) -> Result<Vec<PublicKey>> {
    paths
        .iter()
        .map(|p| {
            let text =
                sign::read_file(p).with_context(|| format!("Failed to read `{}`", p.display()))?;
            PublicKey::parse(&text)
                .with_context(|| format!("`{}` is not a minisign public key", p.display()))
        })
        .collect()
}

fn check_signature(trusted: &[PublicKey], message: &[u8], sig_path: &Path) -> Result<PublicKey> {
    let text = sign::read_file(sig_path)
        .with_context(|| format!("no signature `{}`", sig_path.display()))?;
    let sig = Signature::parse(&text)?;
    Ok(sign::verify(trusted, message, &sig)?.clone())
}
