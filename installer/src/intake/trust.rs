//! Signature checks before unpacking: with trusted keys configured, a bundle must carry a
//! signature (`<bundle>.minisig`, minisign format) over its content digest made by one of them,
//! and a split bundle's index must be signed too; without keys, the caller warns, and with
//! `--require-signature` (or [`REQUIRE_SIGNATURE_ENV`]) the bundle is refused.
//!
//! The content digest is read from the head of the stream (the sha256 of `SHA256SUMS`), so the
//! check costs two small entries, not a pass over the bundle. The unpack that follows re-reads
//! every byte against that `SHA256SUMS`; its content digest must be the one verified here
//! ([`Verified::confirm`]), so a file swapped between the check and the unpack is refused.

use std::path::{Path, PathBuf};

use kubexm_bundles::head::{read_head, HeadError};
use kubexm_bundles::sign::{self, PublicKey, SignError, Signature};

use super::source::{beside, BundleSource};

/// Environment variable listing trusted public key files (`:`-separated), besides
/// `--trusted-key`.
pub const TRUSTED_KEYS_ENV: &str = "KUBEXM_TRUSTED_KEYS";

/// Environment variable that makes a bundle without a trusted key a refusal, as
/// `--require-signature` does (`1`, `true` or `yes`): the site's setting, for hosts where every
/// operator must check signatures.
pub const REQUIRE_SIGNATURE_ENV: &str = "KUBEXM_REQUIRE_SIGNATURE";

/// Why a bundle is not trusted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// A trusted key file cannot be read or is not a minisign public key.
    #[error("cannot use trusted key `{}`", shown(path))]
    Key {
        /// The key file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A signature is required but no key is trusted to check it.
    #[error("`{}` is refused: a signature is required (--require-signature or {REQUIRE_SIGNATURE_ENV}) but no trusted key is configured to check it; pass --trusted-key KEY.pub (or set {TRUSTED_KEYS_ENV}) with the public key of whoever built the bundle", shown(bundle))]
    NoTrustedKey {
        /// The bundle.
        bundle: PathBuf,
    },
    /// Keys are configured but the bundle has no signature.
    #[error("`{}` is not signed: `{}` is missing, and trusted keys are configured, so unsigned bundles are refused", shown(bundle), shown(signature))]
    Unsigned {
        /// The bundle.
        bundle: PathBuf,
        /// The signature expected.
        signature: PathBuf,
    },
    /// The signature file cannot be read or parsed.
    #[error("cannot read the signature `{}`", shown(path))]
    BadSignatureFile {
        /// The signature.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The signature does not verify against the trusted keys.
    #[error("`{}` is refused", shown(what))]
    Refused {
        /// The bundle or index.
        what: PathBuf,
        /// Unknown key or mismatch.
        #[source]
        source: SignError,
    },
    /// The head of the bundle cannot be read.
    #[error("cannot read the head of `{}`", shown(bundle))]
    Head {
        /// The bundle.
        bundle: PathBuf,
        /// The cause.
        #[source]
        source: HeadError,
    },
    /// What was unpacked is not what was verified.
    #[error("`{}` changed after its signature was checked: content digest {}, signed {}", shown(bundle), .unpacked, .signed)]
    Changed {
        /// The bundle.
        bundle: PathBuf,
        /// Signed.
        signed: String,
        /// Unpacked.
        unpacked: String,
    },
}

/// A path for a message, escaped: a split bundle's name comes from its index.
fn shown(path: &Path) -> kubexm_manifests::display::UntrustedMax<std::borrow::Cow<'_, str>> {
    kubexm_manifests::display::UntrustedMax(path.to_string_lossy(), 1000)
}

/// The trusted keys.
#[derive(Debug, Clone, Default)]
pub struct TrustPolicy {
    keys: Vec<PublicKey>,
    require: bool,
}

/// A bundle whose signature verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The key that signed it.
    pub key: String,
    /// The signed comment (`kubexm-bundle sha256:… cluster:… kubernetes:…`).
    pub trusted_comment: String,
    /// The content digest signed.
    pub content_digest: String,
    /// The bundle.
    pub bundle: PathBuf,
}

impl Verified {
    /// Checks that the unpacked tree is the verified content.
    ///
    /// # Errors
    ///
    /// [`TrustError::Changed`] otherwise.
    pub fn confirm(&self, unpacked_digest: &str) -> Result<(), TrustError> {
        if unpacked_digest == self.content_digest {
            return Ok(());
        }
        Err(TrustError::Changed {
            bundle: self.bundle.clone(),
            signed: self.content_digest.clone(),
            unpacked: unpacked_digest.to_owned(),
        })
    }
}

impl TrustPolicy {
    /// Keys from `paths` and from [`TRUSTED_KEYS_ENV`].
    ///
    /// # Errors
    ///
    /// [`TrustError::Key`] naming a file that is not a minisign public key.
    pub fn load(paths: &[PathBuf]) -> Result<Self, TrustError> {
        let mut all: Vec<PathBuf> = paths.to_vec();
        if let Some(v) = std::env::var_os(TRUSTED_KEYS_ENV) {
            all.extend(std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()));
        }
        let keys = all
            .iter()
            .map(|path| {
                let key_err = |source: Box<dyn std::error::Error + Send + Sync>| TrustError::Key {
                    path: path.clone(),
                    source,
                };
                let text = sign::read_file(path).map_err(|e| key_err(Box::new(e)))?;
                PublicKey::parse(&text).map_err(|e| key_err(Box::new(e)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let require = std::env::var(REQUIRE_SIGNATURE_ENV)
            .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"));
        Ok(Self { keys, require })
    }

    /// The policy that also refuses any bundle when no key is trusted (`--require-signature`);
    /// `false` keeps what [`REQUIRE_SIGNATURE_ENV`] said.
    #[must_use]
    pub fn require_signature(mut self, require: bool) -> Self {
        self.require |= require;
        self
    }

    /// Whether a bundle is refused when no key is trusted.
    pub fn requires_signature(&self) -> bool {
        self.require
    }

    /// Whether any key is trusted (then unsigned bundles are refused).
    pub fn is_configured(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Checks `source` before it is unpacked: `None` when no key is configured.
    ///
    /// # Errors
    ///
    /// See [`TrustError`].
    pub fn check(&self, source: &BundleSource) -> Result<Option<Verified>, TrustError> {
        let bundle = source.bundle_path();
        if !self.is_configured() {
            if self.require {
                return Err(TrustError::NoTrustedKey { bundle });
            }
            return Ok(None);
        }
        if let BundleSource::Parts {
            index_path,
            index_bytes,
            ..
        } = source
        {
            let sig_path = beside(index_path, sign::SIGNATURE_SUFFIX);
            let sig = read_signature(&sig_path, index_path)?;
            sign::verify(&self.keys, index_bytes, &sig).map_err(|source| TrustError::Refused {
                what: index_path.clone(),
                source,
            })?;
        }
        let sig_path = source.signature_path();
        let sig = read_signature(&sig_path, &bundle)?;
        let head_err = |source| TrustError::Head {
            bundle: bundle.clone(),
            source,
        };
        let (reader, _) = source
            .reader()
            .map_err(|e| head_err(HeadError::Stream(e)))?;
        let head = read_head(reader, None).map_err(head_err)?;
        let key = sign::verify(
            &self.keys,
            &sign::bundle_statement(&head.content_digest),
            &sig,
        )
        .map_err(|source| TrustError::Refused {
            what: bundle.clone(),
            source,
        })?;
        Ok(Some(Verified {
            key: key.id().to_string(),
            trusted_comment: sig.trusted_comment().to_owned(),
            content_digest: head.content_digest,
            bundle,
        }))
    }
}

fn read_signature(sig_path: &Path, bundle: &Path) -> Result<Signature, TrustError> {
    let text = match sign::read_file(sig_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TrustError::Unsigned {
                bundle: bundle.to_owned(),
                signature: sig_path.to_owned(),
            })
        }
        Err(e) => {
            return Err(TrustError::BadSignatureFile {
                path: sig_path.to_owned(),
                source: Box::new(e),
            })
        }
    };
    Signature::parse(&text).map_err(|e| TrustError::BadSignatureFile {
        path: sig_path.to_owned(),
        source: Box::new(e),
    })
}
