//! Signatures in the [minisign](https://jedisct1.github.io/minisign/) format (Ed25519), so that
//! `minisign -V` (or any minisign implementation) checks what KubeXM signs.
//!
//! ## Files
//!
//! Every file is two or four lines of text:
//!
//! ```text
//! public key (kubexm.pub)        untrusted comment: minisign public key <KEYID>
//!                                base64( "Ed" | key id (8) | Ed25519 public key (32) )
//!
//! secret key (kubexm.key, 0600)  untrusted comment: minisign secret key (unencrypted)
//!                                base64( "Ed" | kdf "\0\0" | "B2" | salt (32) | opslimit (8)
//!                                        | memlimit (8) | key id (8) | secret key (64)
//!                                        | BLAKE2b-256("Ed" | key id | secret key) (32) )
//!
//! signature (X.minisig)          untrusted comment: <text>
//!                                base64( "ED" | key id (8) | Ed25519(BLAKE2b-512(message)) (64) )
//!                                trusted comment: <text>
//!                                base64( Ed25519(signature (64) | trusted comment) (64) )
//! ```
//!
//! The key id is 8 random bytes, shown as the hex of their little-endian value (as minisign
//! prints it). The secret key is minisign's unencrypted form (`minisign -G -W` writes the same):
//! its protection is the file mode, 0600. Signatures are minisign's default, pre-hashed ("ED")
//! kind; legacy "Ed" signatures of the raw message are also verified. The trusted comment is
//! signed too (the global signature), so what it says — for a bundle, the content digest,
//! cluster and Kubernetes version — is authenticated along with the message.
//!
//! ## What a bundle signature signs
//!
//! [`bundle_statement`]: the line `kubexm-bundle sha256:<content digest>\n`, where the content
//! digest is the sha256 of the bundle's `SHA256SUMS` (which lists the sum of `bundle.json` and of
//! every file). Check one with the minisign tool:
//!
//! ```text
//! tar -I zstd -xOf demo.tar.zst SHA256SUMS | sha256sum     # → the content digest
//! printf 'kubexm-bundle sha256:%s\n' <digest> > statement
//! minisign -V -p kubexm.pub -m statement -x demo.tar.zst.minisig
//! ```

use base64::Engine as _;
use blake2::{Blake2b512, Digest as _};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use thiserror::Error;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

const ALG_ED25519: [u8; 2] = *b"Ed";
const ALG_PREHASHED: [u8; 2] = *b"ED";
const KDF_NONE: [u8; 2] = [0, 0];
const KDF_SCRYPT: [u8; 2] = *b"Sc";
const CHK_BLAKE2B: [u8; 2] = *b"B2";
const PUBLIC_LEN: usize = 2 + 8 + 32;
const SECRET_LEN: usize = 2 + 2 + 2 + 32 + 8 + 8 + 8 + 64 + 32;
const SIG_LEN: usize = 2 + 8 + 64;
/// Longest comment accepted (minisign's own limit is 1024 bytes).
pub const MAX_COMMENT: usize = 1024;
const UNTRUSTED: &str = "untrusted comment: ";
const TRUSTED: &str = "trusted comment: ";

/// File name suffix of a detached signature (`demo.tar.zst.minisig`).
pub const SIGNATURE_SUFFIX: &str = ".minisig";

/// Largest key or signature file read ([`read_file`]): two comment lines of at most
/// [`MAX_COMMENT`] bytes and two base64 lines make less than 2.5 KiB.
pub const MAX_FILE: u64 = 8 << 10;

/// Reads a minisign key or signature file, refusing one over [`MAX_FILE`] bytes (it comes from
/// the same untrusted media as the bundle) or not UTF-8 before parsing it.
///
/// # Errors
///
/// The I/O error (its kind kept: `NotFound` for an absent file); `InvalidData` for a file too
/// large or not text.
pub fn read_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_FILE} bytes: not a minisign key or signature"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not text: not a minisign key or signature",
        )
    })
}

/// A problem with a key or signature.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignError {
    /// The text is not a minisign file of the expected kind.
    #[error("not a minisign {what}: {reason}")]
    Format {
        /// `public key`, `secret key` or `signature`.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// An encrypted (password-protected) minisign secret key.
    #[error("the minisign secret key is encrypted with a password, which this tool cannot read")]
    Encrypted,
    /// The secret key's checksum does not match (damaged file).
    #[error("the minisign secret key is damaged: its checksum does not match")]
    Checksum,
    /// No random bytes for a new key.
    #[error("cannot read random bytes for a new key: {0}")]
    Random(String),
    /// The signature was made by a key that is not trusted.
    #[error("signed by key {signer}, which is not a trusted key (trusted: {trusted})")]
    UnknownKey {
        /// Key id of the signature.
        signer: String,
        /// Key ids trusted.
        trusted: String,
    },
    /// The signature does not match the message (or the trusted comment was altered).
    #[error(
        "the signature by key {key} does not match: {what} was altered or signed by another key"
    )]
    Mismatch {
        /// Key id.
        key: String,
        /// `the signed content` or `the trusted comment`.
        what: &'static str,
    },
}

/// Eight bytes naming a key pair.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; 8]);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016X}", u64::from_le_bytes(self.0))
    }
}

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// A public key: what an installer trusts.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    id: KeyId,
    key: VerifyingKey,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.id)
    }
}

impl PublicKey {
    /// The key id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    /// Reads a minisign public key file (or its base64 line alone).
    ///
    /// # Errors
    ///
    /// [`SignError::Format`] when it is not one.
    pub fn parse(text: &str) -> Result<Self, SignError> {
        let err = |reason: &str| SignError::Format {
            what: "public key",
            reason: reason.to_owned(),
        };
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with(UNTRUSTED))
            .ok_or_else(|| err("no key line"))?;
        let raw = B64
            .decode(line)
            .map_err(|_| err("the key line is not base64"))?;
        if raw.len() != PUBLIC_LEN {
            return Err(err("wrong length"));
        }
        if raw[..2] != ALG_ED25519 {
            return Err(err("not an Ed25519 key"));
        }
        let id = KeyId(take(&raw[2..10]));
        let key = VerifyingKey::from_bytes(&take(&raw[10..42]))
            .map_err(|_| err("not a valid Ed25519 point"))?;
        Ok(Self { id, key })
    }

    /// The public key file.
    pub fn to_file(&self) -> String {
        let mut raw = Vec::with_capacity(PUBLIC_LEN);
        raw.extend_from_slice(&ALG_ED25519);
        raw.extend_from_slice(&self.id.0);
        raw.extend_from_slice(self.key.as_bytes());
        format!(
            "{UNTRUSTED}minisign public key {}\n{}\n",
            self.id,
            B64.encode(raw)
        )
    }
}

/// A secret key. Its `Debug` shows the key id only.
pub struct SecretKey {
    id: KeyId,
    key: SigningKey,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey({}, <redacted>)", self.id)
    }
}

impl SecretKey {
    /// A new random key pair (from the operating system's random source).
    ///
    /// # Errors
    ///
    /// [`SignError::Random`] when no random bytes can be read.
    pub fn generate() -> Result<Self, SignError> {
        let mut seed = [0u8; 32];
        let mut id = [0u8; 8];
        getrandom::fill(&mut seed).map_err(|e| SignError::Random(e.to_string()))?;
        getrandom::fill(&mut id).map_err(|e| SignError::Random(e.to_string()))?;
        Ok(Self {
            id: KeyId(id),
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// The matching public key.
    pub fn public(&self) -> PublicKey {
        PublicKey {
            id: self.id,
            key: self.key.verifying_key(),
        }
    }

    /// Reads an unencrypted minisign secret key file.
    ///
    /// # Errors
    ///
    /// [`SignError::Format`], [`SignError::Encrypted`] or [`SignError::Checksum`].
    pub fn parse(text: &str) -> Result<Self, SignError> {
        let err = |reason: &str| SignError::Format {
            what: "secret key",
            reason: reason.to_owned(),
        };
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with(UNTRUSTED))
            .ok_or_else(|| err("no key line"))?;
        let raw = B64
            .decode(line)
            .map_err(|_| err("the key line is not base64"))?;
        if raw.len() != SECRET_LEN {
            return Err(err("wrong length"));
        }
        if raw[..2] != ALG_ED25519 || raw[4..6] != CHK_BLAKE2B {
            return Err(err("not an Ed25519 key with a BLAKE2b checksum"));
        }
        match take::<2>(&raw[2..4]) {
            KDF_NONE => {}
            KDF_SCRYPT => return Err(SignError::Encrypted),
            _ => return Err(err("unknown key derivation")),
        }
        let keynum = &raw[54..];
        let id = KeyId(take(&keynum[..8]));
        let sk: [u8; 64] = take(&keynum[8..72]);
        let chk: [u8; 32] = take(&keynum[72..104]);
        if checksum(id, &sk) != chk {
            return Err(SignError::Checksum);
        }
        let key = SigningKey::from_keypair_bytes(&sk)
            .map_err(|_| err("the secret and public halves do not match"))?;
        Ok(Self { id, key })
    }

    /// The secret key file (keep it private: mode 0600).
    pub fn to_file(&self) -> String {
        let mut sk = [0u8; 64];
        sk[..32].copy_from_slice(&self.key.to_bytes());
        sk[32..].copy_from_slice(self.key.verifying_key().as_bytes());
        let mut raw = Vec::with_capacity(SECRET_LEN);
        raw.extend_from_slice(&ALG_ED25519);
        raw.extend_from_slice(&KDF_NONE);
        raw.extend_from_slice(&CHK_BLAKE2B);
        raw.extend_from_slice(&[0u8; 32 + 8 + 8]);
        raw.extend_from_slice(&self.id.0);
        raw.extend_from_slice(&sk);
        raw.extend_from_slice(&checksum(self.id, &sk));
        let text = format!(
            "{UNTRUSTED}minisign secret key {} (unencrypted, made by KubeXM)\n{}\n",
            self.id,
            B64.encode(&raw)
        );
        sk.fill(0);
        raw.fill(0);
        text
    }

    /// Signs `message` (pre-hashed, minisign's default) with a trusted comment.
    ///
    /// # Errors
    ///
    /// [`SignError::Format`] when a comment is too long or spans lines.
    pub fn sign(
        &self,
        message: &[u8],
        trusted_comment: &str,
        untrusted_comment: &str,
    ) -> Result<Signature, SignError> {
        for c in [trusted_comment, untrusted_comment] {
            if c.len() > MAX_COMMENT || c.contains(['\n', '\r']) {
                return Err(SignError::Format {
                    what: "signature",
                    reason: "a comment is longer than 1024 bytes or spans lines".to_owned(),
                });
            }
        }
        let signature = self.key.sign(&Blake2b512::digest(message)).to_bytes();
        let mut global_input = signature.to_vec();
        global_input.extend_from_slice(trusted_comment.as_bytes());
        let global = self.key.sign(&global_input).to_bytes();
        Ok(Signature {
            prehashed: true,
            id: self.id,
            signature,
            trusted_comment: trusted_comment.to_owned(),
            untrusted_comment: untrusted_comment.to_owned(),
            global,
        })
    }
}

/// A detached minisign signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    prehashed: bool,
    id: KeyId,
    signature: [u8; 64],
    trusted_comment: String,
    untrusted_comment: String,
    global: [u8; 64],
}

impl Signature {
    /// Id of the key that made it.
    pub fn key_id(&self) -> KeyId {
        self.id
    }

    /// The signed comment (only trustworthy after [`verify`] returned `Ok`).
    pub fn trusted_comment(&self) -> &str {
        &self.trusted_comment
    }

    /// Reads a `.minisig` file.
    ///
    /// # Errors
    ///
    /// [`SignError::Format`] when it is not one.
    pub fn parse(text: &str) -> Result<Self, SignError> {
        let err = |reason: &str| SignError::Format {
            what: "signature",
            reason: reason.to_owned(),
        };
        let mut lines = text.lines();
        let untrusted = lines
            .next()
            .and_then(|l| l.strip_prefix(UNTRUSTED))
            .ok_or_else(|| err("the first line is not an untrusted comment"))?;
        let sig_line = lines.next().ok_or_else(|| err("no signature line"))?;
        let trusted = lines
            .next()
            .and_then(|l| l.strip_prefix(TRUSTED))
            .ok_or_else(|| err("the third line is not a trusted comment"))?;
        let global_line = lines
            .next()
            .ok_or_else(|| err("no global signature line"))?;
        if lines.any(|l| !l.trim().is_empty()) {
            return Err(err("text after the global signature"));
        }
        if trusted.len() > MAX_COMMENT || untrusted.len() > MAX_COMMENT {
            return Err(err("a comment is longer than 1024 bytes"));
        }
        let raw = B64
            .decode(sig_line.trim())
            .map_err(|_| err("the signature line is not base64"))?;
        if raw.len() != SIG_LEN {
            return Err(err("wrong signature length"));
        }
        let prehashed = match take::<2>(&raw[..2]) {
            ALG_PREHASHED => true,
            ALG_ED25519 => false,
            _ => return Err(err("unknown signature algorithm")),
        };
        let global: [u8; 64] = B64
            .decode(global_line.trim())
            .ok()
            .and_then(|g| g.try_into().ok())
            .ok_or_else(|| err("the global signature is not 64 bytes of base64"))?;
        Ok(Self {
            prehashed,
            id: KeyId(take(&raw[2..10])),
            signature: take(&raw[10..74]),
            trusted_comment: trusted.to_owned(),
            untrusted_comment: untrusted.to_owned(),
            global,
        })
    }

    /// The `.minisig` file.
    pub fn to_file(&self) -> String {
        let mut raw = Vec::with_capacity(SIG_LEN);
        raw.extend_from_slice(if self.prehashed {
            &ALG_PREHASHED
        } else {
            &ALG_ED25519
        });
        raw.extend_from_slice(&self.id.0);
        raw.extend_from_slice(&self.signature);
        format!(
            "{UNTRUSTED}{}\n{}\n{TRUSTED}{}\n{}\n",
            self.untrusted_comment,
            B64.encode(raw),
            self.trusted_comment,
            B64.encode(self.global)
        )
    }
}

/// Checks `signature` of `message` against the trusted keys; returns the key that made it.
///
/// # Errors
///
/// [`SignError::UnknownKey`] when no trusted key has the signature's key id,
/// [`SignError::Mismatch`] when the message or the trusted comment do not match.
pub fn verify<'k>(
    trusted: &'k [PublicKey],
    message: &[u8],
    signature: &Signature,
) -> Result<&'k PublicKey, SignError> {
    let key = trusted
        .iter()
        .find(|k| k.id == signature.id)
        .ok_or_else(|| SignError::UnknownKey {
            signer: signature.id.to_string(),
            trusted: if trusted.is_empty() {
                "none".to_owned()
            } else {
                trusted
                    .iter()
                    .map(|k| k.id.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })?;
    let sig = ed25519_dalek::Signature::from_bytes(&signature.signature);
    let ok = if signature.prehashed {
        key.key
            .verify_strict(&Blake2b512::digest(message), &sig)
            .is_ok()
    } else {
        key.key.verify_strict(message, &sig).is_ok()
    };
    if !ok {
        return Err(SignError::Mismatch {
            key: key.id.to_string(),
            what: "the signed content",
        });
    }
    let mut global_input = signature.signature.to_vec();
    global_input.extend_from_slice(signature.trusted_comment.as_bytes());
    let global = ed25519_dalek::Signature::from_bytes(&signature.global);
    key.key
        .verify_strict(&global_input, &global)
        .map_err(|_| SignError::Mismatch {
            key: key.id.to_string(),
            what: "the trusted comment",
        })?;
    Ok(key)
}

/// What a bundle signature signs: `kubexm-bundle sha256:<content digest>\n`.
pub fn bundle_statement(content_digest_hex: &str) -> Vec<u8> {
    format!("kubexm-bundle sha256:{content_digest_hex}\n").into_bytes()
}

fn checksum(id: KeyId, sk: &[u8; 64]) -> [u8; 32] {
    let mut h = blake2::Blake2b::<blake2::digest::consts::U32>::new();
    h.update(ALG_ED25519);
    h.update(id.0);
    h.update(sk);
    take(&h.finalize())
}

/// The first `N` bytes of `s` (callers check lengths first).
fn take<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&s[..N]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_verifies() {
        let sk = SecretKey::generate().expect("key");
        let pk = sk.public();
        let again = SecretKey::parse(&sk.to_file()).expect("secret parses");
        assert_eq!(again.public(), pk);
        assert_eq!(PublicKey::parse(&pk.to_file()).expect("public parses"), pk);
        let sig = sk
            .sign(b"hello", "kubexm-bundle test", "signature from KubeXM")
            .expect("sign");
        let parsed = Signature::parse(&sig.to_file()).expect("signature parses");
        assert_eq!(parsed, sig);
        assert_eq!(
            verify(std::slice::from_ref(&pk), b"hello", &parsed).expect("verifies"),
            &pk
        );
        assert!(format!("{sk:?}").contains("redacted"));
    }

    #[test]
    fn refuses_tampering_and_unknown_keys() {
        let sk = SecretKey::generate().expect("key");
        let other = SecretKey::generate().expect("key").public();
        let sig = sk.sign(b"hello", "c", "u").expect("sign");
        assert!(matches!(
            verify(&[sk.public()], b"hellO", &sig),
            Err(SignError::Mismatch {
                what: "the signed content",
                ..
            })
        ));
        let mut forged = sig.clone();
        forged.trusted_comment = "other".into();
        assert!(matches!(
            verify(&[sk.public()], b"hello", &forged),
            Err(SignError::Mismatch {
                what: "the trusted comment",
                ..
            })
        ));
        let err = verify(&[other], b"hello", &sig).expect_err("unknown key");
        assert!(matches!(err, SignError::UnknownKey { .. }));
        assert!(err.to_string().contains(&sk.public().id().to_string()));
    }

    #[test]
    fn damaged_secret_key_is_refused() {
        let sk = SecretKey::generate().expect("key");
        let text = sk.to_file();
        let line = text.lines().nth(1).expect("key line");
        let mut raw = B64.decode(line).expect("b64");
        raw[60] ^= 1;
        assert_eq!(
            SecretKey::parse(&B64.encode(&raw)).expect_err("damaged"),
            SignError::Checksum
        );
        raw[2..4].copy_from_slice(&KDF_SCRYPT);
        assert_eq!(
            SecretKey::parse(&B64.encode(&raw)).expect_err("encrypted"),
            SignError::Encrypted
        );
    }
}
