//! `kubexm-build verify`: one streaming pass over a bundle, checking every entry; for a split
//! bundle every part's sha256 first; with `--trusted-key`, the signature before anything else.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kubexm_bundles::delta::{DeltaManifest, DELTA_PATH};
use kubexm_bundles::sign::{self, PublicKey, Signature};
use kubexm_bundles::split::{self, PartsReader, SplitIndex};
use kubexm_bundles::verify::{verify, Sink};
use kubexm_manifests::display::{Untrusted, UntrustedMax};

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
                kubexm_bundles::regular::open(p)?,
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
    let shown = UntrustedMax(args.bundle.to_string_lossy(), 1000);
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
            let list: Vec<String> = bad
                .iter()
                .map(|e| {
                    // The cause says why (`it is a FIFO`, `No such file`): on the same line.
                    let mut line = format!("  - {e}");
                    let mut cause = std::error::Error::source(e);
                    while let Some(c) = cause {
                        line.push_str(&format!(": {}", UntrustedMax(c.to_string(), 1000)));
                        cause = c.source();
                    }
                    line
                })
                .collect();
            bail!(
                "{} of the {} parts of `{}` are damaged or missing:\n{}",
                bad.len(),
                index.parts.len(),
                Untrusted(&index.bundle),
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
    let mut sink = DeltaSink::default();
    let report = verify(input.open()?, &mut sink)
        .with_context(|| format!("`{shown}` failed verification"))?;
    // A delta bundle is an ordinary bundle plus `delta.json`, which says how to rebuild its
    // target: it must parse and be consistent, or the delta is useless at the site.
    let delta = match sink.delta {
        None => String::new(),
        Some(bytes) => {
            let delta = DeltaManifest::parse(&bytes).with_context(|| {
                format!("`{shown}` is a delta bundle whose `{DELTA_PATH}` is refused")
            })?;
            format!(
                "; delta bundle of {} entries towards content digest sha256:{}",
                delta.entries.len(),
                delta.target_content_digest
            )
        }
    };
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
        "{}: OK ({} entries; takes {} bytes on disk unpacked, {pinned}; cluster {}, Kubernetes {}{path}, {} files, {} images{delta})",
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

/// Largest `delta.json` kept (a delta of every entry of the largest bundle is far smaller).
const MAX_DELTA_JSON: u64 = 64 << 20;

/// A sink that keeps `delta.json` (at most [`MAX_DELTA_JSON`] bytes) and discards the rest.
#[derive(Default)]
struct DeltaSink {
    delta: Option<Vec<u8>>,
}

impl Sink for DeltaSink {
    fn dir(&mut self, _path: &str) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&mut self, path: &str, _mode: u32) -> std::io::Result<Box<dyn Write + '_>> {
        if path != DELTA_PATH {
            return Ok(Box::new(std::io::sink()));
        }
        Ok(Box::new(Capped(self.delta.insert(Vec::new()))))
    }

    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer into a vector that refuses more than [`MAX_DELTA_JSON`] bytes.
struct Capped<'a>(&'a mut Vec<u8>);

impl Write for Capped<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() as u64 + buf.len() as u64 > MAX_DELTA_JSON {
            return Err(std::io::Error::other(format!(
                "`{DELTA_PATH}` is larger than {MAX_DELTA_JSON} bytes"
            )));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
    let text = sign::read_file(sig_path).with_context(|| {
        format!(
            "no signature `{}`",
            UntrustedMax(sig_path.to_string_lossy(), 1000)
        )
    })?;
    let sig = Signature::parse(&text)?;
    Ok(sign::verify(trusted, message, &sig)?.clone())
}
