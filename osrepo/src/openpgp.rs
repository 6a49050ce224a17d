//! OpenPGP for repositories, with rPGP (pure Rust): distribution indexes are verified against
//! archive keys pinned by fingerprint, and the bundle's repositories are signed with a key
//! generated for each bundle.
//!
//! Verification is apt's: a signed file is accepted when at least one signature made by a pinned
//! key (its primary key or a signing subkey whose binding verifies) checks out with a strong hash,
//! made while that key was valid; a signature by a pinned key that does not verify refuses the
//! file outright (it has been tampered with); signatures by other keys are ignored.

use std::io::Cursor;

use pgp::composed::{
    CleartextSignedMessage, Deserializable, DetachedSignature, KeyType, SecretKeyParamsBuilder,
    SignedPublicKey, SignedSecretKey,
};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{Signature, SignatureConfig, SignatureType, Subpacket, SubpacketData};
use pgp::ser::Serialize;
use pgp::types::{KeyDetails, Password, Timestamp};
use thiserror::Error;

/// A problem with a key, a keyring or a signature. `what` names the file concerned.
#[derive(Debug, Error)]
pub enum PgpError {
    /// A keyring that cannot be parsed.
    #[error("keyring `{origin}` cannot be read as OpenPGP keys")]
    Keyring {
        /// Its path or name.
        origin: String,
        /// Cause.
        #[source]
        source: Box<pgp::errors::Error>,
    },
    /// A pinned fingerprint is not in the keyring.
    #[error("keyring `{origin}` has no key with the pinned fingerprint {fingerprint}")]
    PinnedKeyMissing {
        /// Keyring.
        origin: String,
        /// The fingerprint.
        fingerprint: String,
    },
    /// A pinned key whose self-signatures do not verify.
    #[error("key {fingerprint} in `{origin}`: its self-signatures do not verify")]
    KeyInvalid {
        /// Keyring.
        origin: String,
        /// The key.
        fingerprint: String,
        /// Cause.
        #[source]
        source: Box<pgp::errors::Error>,
    },
    /// A pinned key without any self-certified user ID.
    #[error("key {fingerprint} in `{origin}` has no self-certified user ID")]
    NotSelfCertified {
        /// Keyring.
        origin: String,
        /// The key.
        fingerprint: String,
    },
    /// A signed file or signature that cannot be parsed.
    #[error("`{what}`: not a valid OpenPGP {kind}")]
    Malformed {
        /// The file.
        what: String,
        /// `clear-signed message` or `signature`.
        kind: &'static str,
        /// Cause.
        #[source]
        source: Box<pgp::errors::Error>,
    },
    /// No signature by a pinned key.
    #[error("`{what}` is not signed by any pinned key (signed by: {issuers}; pinned: {pinned})")]
    NoTrustedSignature {
        /// The file.
        what: String,
        /// Who signed it.
        issuers: String,
        /// Keys that are trusted.
        pinned: String,
    },
    /// A signature by a pinned key that does not verify: the file was changed.
    #[error("`{what}`: the signature by {fingerprint} does not verify (the file was altered or corrupted)")]
    BadSignature {
        /// The file.
        what: String,
        /// The signing key.
        fingerprint: String,
        /// Cause.
        #[source]
        source: Box<pgp::errors::Error>,
    },
    /// A signature with a hash too weak to trust.
    #[error("`{what}`: the signature by {fingerprint} uses {hash}, which is not accepted (SHA-256 or stronger)")]
    WeakHash {
        /// The file.
        what: String,
        /// The signing key.
        fingerprint: String,
        /// The hash.
        hash: String,
    },
    /// A signature made when the key was expired or revoked, or dated in the future.
    #[error("`{what}`: the signature by {fingerprint} {why}")]
    KeyNotValid {
        /// The file.
        what: String,
        /// The signing key.
        fingerprint: String,
        /// What is wrong.
        why: String,
    },
    /// The key parameters were refused (a bug).
    #[error("invalid key parameters: {0}")]
    KeyParams(String),
    /// Signing or generating a key failed.
    #[error("cannot {action}")]
    Sign {
        /// What was being done.
        action: &'static str,
        /// Cause.
        #[source]
        source: Box<pgp::errors::Error>,
    },
}

/// Upper-case hex fingerprint of a key.
pub fn fingerprint_hex(key: &impl KeyDetails) -> String {
    hex::encode_upper(key.fingerprint().as_bytes())
}

/// A fingerprint as written in a catalog: hex, spaces allowed, any case → upper-case hex.
pub fn normalize_fingerprint(s: &str) -> Option<String> {
    let hex: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (matches!(hex.len(), 40 | 64) && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.to_ascii_uppercase())
}

/// One key that may sign: a pinned primary key or one of its signing subkeys.
struct Signer {
    /// The pinned primary key's fingerprint.
    primary: String,
    /// This (sub)key's fingerprint.
    fingerprint: String,
    key_id: Vec<u8>,
    key: SignerKey,
    created: u32,
    /// Seconds since the epoch after which it is expired.
    expires: Option<u32>,
    revoked: bool,
}

/// A primary key or a subkey.
enum SignerKey {
    Primary(pgp::packet::PublicKey),
    Sub(pgp::packet::PublicSubkey),
}

impl SignerKey {
    fn verify(&self, sig: &Signature, data: &[u8]) -> Result<(), pgp::errors::Error> {
        match self {
            Self::Primary(k) => sig.verify(k, data),
            Self::Sub(k) => sig.verify(k, data),
        }
    }
}

/// The keys a distribution's indexes must be signed with: the keys of a keyring whose primary
/// fingerprint is pinned, with their self-signatures verified.
pub struct TrustedKeys {
    signers: Vec<Signer>,
    pinned: Vec<String>,
}

impl TrustedKeys {
    /// Reads `keyring` (binary or ASCII-armored; `origin` names it in errors) and keeps the keys
    /// whose primary fingerprint is in `pinned`. Every pinned fingerprint must be present.
    pub fn from_keyring(keyring: &[u8], origin: &str, pinned: &[String]) -> Result<Self, PgpError> {
        let kerr = |source| PgpError::Keyring {
            origin: origin.to_owned(),
            source: Box::new(source),
        };
        let certs: Vec<SignedPublicKey> = if keyring.starts_with(b"-----BEGIN") {
            SignedPublicKey::from_armor_many(Cursor::new(keyring))
                .map_err(kerr)?
                .0
                .collect::<Result<_, _>>()
                .map_err(kerr)?
        } else {
            SignedPublicKey::from_bytes_many(Cursor::new(keyring))
                .map_err(kerr)?
                .collect::<Result<_, _>>()
                .map_err(kerr)?
        };
        let mut signers = Vec::new();
        for want in pinned {
            let Some(cert) = certs
                .iter()
                .find(|c| &fingerprint_hex(&c.primary_key) == want)
            else {
                return Err(PgpError::PinnedKeyMissing {
                    origin: origin.to_owned(),
                    fingerprint: want.clone(),
                });
            };
            self_certified(cert).map_err(|e| match e {
                Some(source) => PgpError::KeyInvalid {
                    origin: origin.to_owned(),
                    fingerprint: want.clone(),
                    source: Box::new(source),
                },
                None => PgpError::NotSelfCertified {
                    origin: origin.to_owned(),
                    fingerprint: want.clone(),
                },
            })?;
            let primary_revoked = !cert.details.revocation_signatures.is_empty();
            let primary_created = cert.primary_key.created_at().as_secs();
            let primary_expiry = newest(
                cert.details
                    .users
                    .iter()
                    .flat_map(|u| u.signatures.iter())
                    .filter(|s| is_self(s, &cert.primary_key)),
            )
            .and_then(Signature::key_expiration_time)
            .filter(|d| d.as_secs() > 0)
            .map(|d| primary_created.saturating_add(d.as_secs()));
            signers.push(Signer {
                primary: want.clone(),
                fingerprint: want.clone(),
                key_id: cert.primary_key.legacy_key_id().as_ref().to_vec(),
                key: SignerKey::Primary(cert.primary_key.clone()),
                created: primary_created,
                expires: primary_expiry,
                revoked: primary_revoked,
            });
            for sub in &cert.public_subkeys {
                // A subkey whose binding does not verify (or that may not sign) is not a signer.
                if sub.verify_bindings(&cert.primary_key).is_err() {
                    continue;
                }
                let binding = newest(
                    sub.signatures
                        .iter()
                        .filter(|s| s.typ() == Some(SignatureType::SubkeyBinding)),
                );
                let Some(binding) = binding else { continue };
                if !binding.key_flags().sign() {
                    continue;
                }
                let created = sub.key.created_at().as_secs();
                let sub_expiry = binding
                    .key_expiration_time()
                    .filter(|d| d.as_secs() > 0)
                    .map(|d| created.saturating_add(d.as_secs()));
                signers.push(Signer {
                    primary: want.clone(),
                    fingerprint: fingerprint_hex(&sub.key),
                    key_id: sub.key.legacy_key_id().as_ref().to_vec(),
                    key: SignerKey::Sub(sub.key.clone()),
                    created,
                    expires: match (sub_expiry, primary_expiry) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                    revoked: primary_revoked
                        || sub
                            .signatures
                            .iter()
                            .any(|s| s.typ() == Some(SignatureType::SubkeyRevocation)),
                });
            }
        }
        Ok(Self {
            signers,
            pinned: pinned.to_vec(),
        })
    }

    fn find(&self, sig: &Signature) -> Option<&Signer> {
        let fprs: Vec<String> = sig
            .issuer_fingerprint()
            .iter()
            .map(|f| hex::encode_upper(f.as_bytes()))
            .collect();
        let key_ids = sig.issuer_key_id();
        let ids: Vec<&[u8]> = key_ids.iter().map(|k| k.as_ref()).collect();
        self.signers
            .iter()
            .find(|s| fprs.contains(&s.fingerprint) || ids.contains(&s.key_id.as_slice()))
    }

    fn issuer_text(sig: &Signature) -> String {
        sig.issuer_fingerprint()
            .first()
            .map(|f| hex::encode_upper(f.as_bytes()))
            .or_else(|| {
                sig.issuer_key_id()
                    .first()
                    .map(|k| hex::encode_upper(k.as_ref()))
            })
            .unwrap_or_else(|| "an unnamed key".to_owned())
    }

    /// Checks every signature: `check` verifies one signature against one key.
    fn accept(
        &self,
        what: &str,
        sigs: &[Signature],
        now: u32,
        data: &[u8],
    ) -> Result<Vec<String>, PgpError> {
        let mut good = Vec::new();
        let mut issuers = Vec::new();
        for sig in sigs {
            issuers.push(Self::issuer_text(sig));
            let Some(signer) = self.find(sig) else {
                continue;
            };
            let hash = sig.hash_alg();
            if !matches!(
                hash,
                Some(
                    HashAlgorithm::Sha256
                        | HashAlgorithm::Sha384
                        | HashAlgorithm::Sha512
                        | HashAlgorithm::Sha224
                        | HashAlgorithm::Sha3_256
                        | HashAlgorithm::Sha3_512
                )
            ) {
                return Err(PgpError::WeakHash {
                    what: what.to_owned(),
                    fingerprint: signer.fingerprint.clone(),
                    hash: hash.map_or_else(|| "an unknown hash".to_owned(), |h| format!("{h:?}")),
                });
            }
            signer
                .key
                .verify(sig, data)
                .map_err(|source| PgpError::BadSignature {
                    what: what.to_owned(),
                    fingerprint: signer.fingerprint.clone(),
                    source: Box::new(source),
                })?;
            let made = sig.created().map_or(0, Timestamp::as_secs);
            let not_valid = |why: String| PgpError::KeyNotValid {
                what: what.to_owned(),
                fingerprint: signer.fingerprint.clone(),
                why,
            };
            if signer.revoked {
                return Err(not_valid("is from a revoked key".into()));
            }
            if made < signer.created {
                return Err(not_valid("is older than the key".into()));
            }
            if let Some(exp) = signer.expires {
                if made > exp {
                    return Err(not_valid(format!(
                        "was made after the key expired ({})",
                        crate::deb::release::format_rfc2822(i64::from(exp))
                    )));
                }
            }
            if made > now.saturating_add(600) {
                return Err(not_valid(format!(
                    "is dated in the future ({})",
                    crate::deb::release::format_rfc2822(i64::from(made))
                )));
            }
            good.push(signer.primary.clone());
        }
        if good.is_empty() {
            return Err(PgpError::NoTrustedSignature {
                what: what.to_owned(),
                issuers: if issuers.is_empty() {
                    "nobody".into()
                } else {
                    issuers.join(", ")
                },
                pinned: self.pinned.join(", "),
            });
        }
        good.sort();
        good.dedup();
        Ok(good)
    }

    /// Verifies a clear-signed file (`InRelease`); returns the signed text (LF line endings) and
    /// the pinned keys that signed it. `now` is the current time (seconds since the epoch).
    pub fn verify_clearsigned(
        &self,
        what: &str,
        text: &str,
        now: u32,
    ) -> Result<Verified, PgpError> {
        let (msg, _) =
            CleartextSignedMessage::from_string(text).map_err(|source| PgpError::Malformed {
                what: what.to_owned(),
                kind: "clear-signed message",
                source: Box::new(source),
            })?;
        let signed = msg.signed_text();
        let signers = self.accept(what, msg.signatures(), now, signed.as_bytes())?;
        // `signed_text` is what was hashed (CRLF); the file's own lines are LF.
        Ok(Verified {
            text: signed.replace("\r\n", "\n"),
            signers,
        })
    }

    /// Verifies an ASCII-armored detached signature over `data` (`repomd.xml.asc`).
    pub fn verify_detached(
        &self,
        what: &str,
        data: &[u8],
        armored: &[u8],
        now: u32,
    ) -> Result<Vec<String>, PgpError> {
        let malformed = |source| PgpError::Malformed {
            what: what.to_owned(),
            kind: "signature",
            source: Box::new(source),
        };
        let sigs: Vec<Signature> = DetachedSignature::from_armor_many(Cursor::new(armored))
            .map_err(malformed)?
            .0
            .map(|s| s.map(|d| d.signature))
            .collect::<Result<_, _>>()
            .map_err(malformed)?;
        self.accept(what, &sigs, now, data)
    }
}

/// Whether `sig` was issued by `key` itself.
fn is_self(sig: &Signature, key: &pgp::packet::PublicKey) -> bool {
    let fpr = key.fingerprint();
    let id = key.legacy_key_id();
    sig.issuer_fingerprint().iter().any(|f| **f == fpr)
        || sig.issuer_key_id().iter().any(|k| **k == id)
}

/// At least one user ID carries a self-certification that verifies (third-party certifications,
/// which Debian's keys carry many of, are not the key's own statement and are not checked).
fn self_certified(cert: &SignedPublicKey) -> Result<(), Option<pgp::errors::Error>> {
    let mut last = None;
    for user in &cert.details.users {
        for sig in user
            .signatures
            .iter()
            .filter(|s| is_self(s, &cert.primary_key))
        {
            match sig.verify_certification(&cert.primary_key, pgp::types::Tag::UserId, &user.id) {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
    }
    Err(last)
}

/// The newest signature by creation time.
fn newest<'a>(sigs: impl Iterator<Item = &'a Signature>) -> Option<&'a Signature> {
    sigs.max_by_key(|s| s.created().map_or(0, Timestamp::as_secs))
}

/// A verified clear-signed file.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The text that was signed, LF line endings.
    pub text: String,
    /// Fingerprints of the pinned keys whose signatures verified.
    pub signers: Vec<String>,
}

/// The key that signs one bundle's repositories. Generated per bundle (Ed25519, an OpenPGP v4
/// key as gpgv 2.2 and apt read it), kept in memory only, never written to the bundle.
pub struct RepoSigningKey {
    secret: SignedSecretKey,
    public: SignedPublicKey,
    created: u32,
}

impl std::fmt::Debug for RepoSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepoSigningKey")
            .field("fingerprint", &self.fingerprint())
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl RepoSigningKey {
    /// A new key with user ID `uid`, created at `created` (seconds since the epoch).
    pub fn generate(uid: &str, created: u32) -> Result<Self, PgpError> {
        let sign_err = |source| PgpError::Sign {
            action: "generate the repository signing key",
            source: Box::new(source),
        };
        let params = SecretKeyParamsBuilder::default()
            .key_type(KeyType::Ed25519Legacy)
            .can_certify(true)
            .can_sign(true)
            .primary_user_id(uid.to_owned())
            .created_at(Timestamp::from_secs(created))
            .build()
            .map_err(|e| PgpError::KeyParams(e.to_string()))?;
        let secret = params.generate(rand::thread_rng()).map_err(sign_err)?;
        let public = SignedPublicKey::from(secret.clone());
        Ok(Self {
            secret,
            public,
            created,
        })
    }

    /// Upper-case hex fingerprint.
    pub fn fingerprint(&self) -> String {
        fingerprint_hex(&self.public.primary_key)
    }

    /// The public key, ASCII-armored (for `Signed-By`/`gpgkey=` and operators).
    pub fn public_armored(&self) -> Result<String, PgpError> {
        self.public
            .to_armored_string(Default::default())
            .map_err(|source| PgpError::Sign {
                action: "armor the public key",
                source: Box::new(source),
            })
    }

    /// The public key as a binary keyring (what apt's `signed-by` reads everywhere).
    pub fn public_binary(&self) -> Result<Vec<u8>, PgpError> {
        self.public.to_bytes().map_err(|source| PgpError::Sign {
            action: "serialize the public key",
            source: Box::new(source),
        })
    }

    fn config(&self, typ: SignatureType, at: u32) -> Result<SignatureConfig, PgpError> {
        let sub = |d| {
            Subpacket::regular(d).map_err(|source| PgpError::Sign {
                action: "build a signature",
                source: Box::new(source),
            })
        };
        let mut config = SignatureConfig::v4(
            typ,
            self.secret.primary_key.algorithm(),
            HashAlgorithm::Sha512,
        );
        config.hashed_subpackets = vec![
            sub(SubpacketData::SignatureCreationTime(Timestamp::from_secs(
                at.max(self.created),
            )))?,
            sub(SubpacketData::IssuerFingerprint(
                self.secret.primary_key.fingerprint(),
            ))?,
        ];
        config.unhashed_subpackets = vec![sub(SubpacketData::IssuerKeyId(
            self.secret.primary_key.legacy_key_id(),
        ))?];
        Ok(config)
    }

    /// `text` as a clear-signed message (an `InRelease` file), signed at `at`.
    pub fn clearsign(&self, text: &str, at: u32) -> Result<String, PgpError> {
        let config = self.config(SignatureType::Text, at)?;
        let msg =
            CleartextSignedMessage::new(text, config, &self.secret.primary_key, &Password::empty())
                .map_err(|source| PgpError::Sign {
                    action: "clear-sign",
                    source: Box::new(source),
                })?;
        msg.to_armored_string(Default::default())
            .map_err(|source| PgpError::Sign {
                action: "armor a clear-signed message",
                source: Box::new(source),
            })
    }

    /// An ASCII-armored detached signature over `data` (`Release.gpg`, `repomd.xml.asc`).
    pub fn detach_sign(&self, data: &[u8], at: u32) -> Result<String, PgpError> {
        let config = self.config(SignatureType::Binary, at)?;
        let sig = config
            .sign(&self.secret.primary_key, &Password::empty(), data)
            .map_err(|source| PgpError::Sign {
                action: "sign",
                source: Box::new(source),
            })?;
        DetachedSignature::new(sig)
            .to_armored_string(Default::default())
            .map_err(|source| PgpError::Sign {
                action: "armor a signature",
                source: Box::new(source),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::{PgpError, RepoSigningKey, TrustedKeys};

    /// Debian's archive keyring (debian-archive-keyring 2023.3+deb12u2) and the bookworm-updates
    /// `InRelease` as deb.debian.org served it on 2026-11-22: real keys, real signatures.
    const KEYRING: &[u8] = include_bytes!("../tests/data/debian-archive-keyring.gpg");
    const INRELEASE: &str = include_str!("../tests/data/bookworm-updates_InRelease");
    /// The `Date` of that InRelease plus a day.
    const NOW: u32 = 1_795_313_345 + 86_400;
    const BOOKWORM: &str = "B8B80B5B623EAB6AD8775C45B7C5D7D6350947F8";
    const TRIXIE: &str = "04B54C3CDCA79751B16BC6B5225629DF75B188BD";
    const SECURITY: &str = "05AB90340C0C5E797F44A8C8254CF3B5AEC0A8F0";

    fn keys(pinned: &[&str]) -> TrustedKeys {
        let pinned: Vec<String> = pinned.iter().map(|s| (*s).to_owned()).collect();
        TrustedKeys::from_keyring(KEYRING, "debian-archive-keyring.gpg", &pinned).expect("keyring")
    }

    #[test]
    fn debian_inrelease_verifies_with_its_subkeys() {
        let v = keys(&[BOOKWORM, TRIXIE, SECURITY])
            .verify_clearsigned("bookworm-updates/InRelease", INRELEASE, NOW)
            .expect("verifies");
        assert_eq!(v.signers, [TRIXIE, BOOKWORM]);
        assert!(
            v.text.starts_with("Origin: Debian\nLabel: Debian\n"),
            "{}",
            &v.text[..40]
        );
        assert!(v.text.contains("\nCodename: bookworm-updates\n"));
        assert!(!v.text.contains('\r'));
    }

    #[test]
    fn an_altered_index_is_refused_naming_the_key() {
        // One digit of a listed sha256 changed: the signatures no longer match.
        let line = INRELEASE
            .lines()
            .find(|l| l.ends_with(" main/binary-amd64/Packages"))
            .expect("listed");
        let mut altered_line = line.to_owned();
        let flip = altered_line
            .find(|c: char| c.is_ascii_hexdigit())
            .expect("hex");
        let c = altered_line.as_bytes()[flip];
        altered_line.replace_range(flip..=flip, if c == b'0' { "1" } else { "0" });
        let altered = INRELEASE.replace(line, &altered_line);
        assert_ne!(altered, INRELEASE);
        let e = keys(&[BOOKWORM])
            .verify_clearsigned(
                "http://deb.debian.org/debian/dists/bookworm-updates/InRelease",
                &altered,
                NOW,
            )
            .expect_err("altered");
        assert!(matches!(e, PgpError::BadSignature { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("`http://deb.debian.org/debian/dists/bookworm-updates/InRelease`")
                && msg.contains("4CB50190207B4758A3F73A796ED0E7B82643E131")
                && msg.contains("does not verify"),
            "{msg}"
        );
    }

    #[test]
    fn signatures_by_other_keys_are_not_enough() {
        let e = keys(&[SECURITY])
            .verify_clearsigned("InRelease", INRELEASE, NOW)
            .expect_err("wrong key");
        let msg = e.to_string();
        assert!(matches!(e, PgpError::NoTrustedSignature { .. }), "{msg}");
        assert!(
            msg.contains("4CB50190207B4758A3F73A796ED0E7B82643E131") && msg.contains(SECURITY),
            "{msg}"
        );
    }

    #[test]
    fn a_pinned_key_must_be_in_the_keyring() {
        let Err(e) = TrustedKeys::from_keyring(KEYRING, "ring.gpg", &["AB".repeat(20)]) else {
            panic!("a missing key must be refused");
        };
        assert!(
            e.to_string().contains(&"AB".repeat(20)) && e.to_string().contains("ring.gpg"),
            "{e}"
        );
    }

    #[test]
    fn signatures_from_the_future_are_refused() {
        let e = keys(&[BOOKWORM])
            .verify_clearsigned("InRelease", INRELEASE, 1_700_000_000)
            .expect_err("future");
        assert!(e.to_string().contains("dated in the future"), "{e}");
    }

    #[test]
    fn the_bundle_key_signs_what_gpgv_accepts() {
        let now = u32::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_secs(),
        )
        .expect("32-bit time");
        let key = RepoSigningKey::generate("KubeXM test", now - 60).expect("key");
        assert!(
            !format!("{key:?}").contains("secret: Signed"),
            "the secret is redacted"
        );
        let text = "Origin: KubeXM\nSHA256:\n abc 1 Packages\n";
        let signed = key.clearsign(text, now - 30).expect("clearsign");
        let fpr = key.fingerprint();
        for ring in [
            key.public_armored().expect("asc").into_bytes(),
            key.public_binary().expect("gpg"),
        ] {
            let trusted =
                TrustedKeys::from_keyring(&ring, "bundle key", std::slice::from_ref(&fpr))
                    .expect("ring");
            let v = trusted
                .verify_clearsigned("InRelease", &signed, now)
                .expect("verifies");
            assert_eq!(v.text, text);
            assert_eq!(v.signers, std::slice::from_ref(&fpr));
            let asc = key.detach_sign(b"<repomd/>", now - 30).expect("detached");
            trusted
                .verify_detached("repomd.xml", b"<repomd/>", asc.as_bytes(), now)
                .expect("detached verifies");
            let e = trusted
                .verify_detached("repomd.xml", b"<repomd >", asc.as_bytes(), now)
                .expect_err("other content");
            assert!(matches!(e, PgpError::BadSignature { .. }), "{e}");
        }
        // gpgv (GnuPG, what apt 2.6 runs) accepts the clear-signed file with the binary key.
        let dir = tempfile::tempdir().expect("tmp");
        let ring = dir.path().join("key.gpg");
        let file = dir.path().join("InRelease");
        std::fs::write(&ring, key.public_binary().expect("gpg")).expect("write");
        std::fs::write(&file, &signed).expect("write");
        let out = std::process::Command::new("gpgv")
            .arg("--keyring")
            .arg(&ring)
            .arg(&file)
            .output()
            .expect("gpgv runs (Debian's gpgv package)");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.contains("Good signature"),
            "{err}"
        );
        std::fs::write(&file, signed.replace("abc 1", "abd 1")).expect("write");
        let out = std::process::Command::new("gpgv")
            .arg("--keyring")
            .arg(&ring)
            .arg(&file)
            .output()
            .expect("gpgv runs");
        assert!(!out.status.success(), "gpgv must refuse an altered file");
    }
}
