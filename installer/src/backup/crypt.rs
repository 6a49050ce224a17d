//! Encryption of backup archives: AES-256-GCM (RustCrypto's `aes-gcm`) in fixed-size chunks, a
//! STREAM-style construction (Hoang, Reyhanitabar, Rogaway, Vizár: "Online
//! Authenticated-Encryption and its Nonce-Reuse Misuse-Resistance") so a multi-gigabyte etcd
//! snapshot is never held in memory twice and a truncated, reordered or edited file is refused.
//!
//! Layout of an encrypted file:
//!
//! | bytes | what |
//! |---|---|
//! | 16 | [`MAGIC`] |
//! | 7 | random nonce prefix, fresh per file |
//! | … | chunks: [`CHUNK`] plaintext bytes each (the last one shorter, possibly empty), each followed by its 16-byte tag |
//!
//! Chunk `i`'s nonce is `prefix ‖ i as u32 big-endian ‖ last` (`last` = 1 on the final chunk,
//! else 0), and the header (magic + prefix) is the associated data of every chunk. A file cut
//! at a chunk boundary fails because no chunk is marked last; swapped chunks fail their nonce.
//!
//! The key is 32 random bytes the operator keeps (`kubexm-install backup keygen`), stored as 64
//! hex characters in a file only its owner can read.

use std::io::{Read, Write};
use std::path::Path;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::Aes256Gcm;

/// First bytes of an encrypted backup.
pub const MAGIC: &[u8; 16] = b"KUBEXM-BACKUP-1\n";
/// Plaintext bytes per chunk.
pub const CHUNK: usize = 1 << 20;
const TAG: usize = 16;
const PREFIX: usize = 7;

/// What can go wrong reading a key or a backup.
#[derive(Debug, thiserror::Error)]
pub enum CryptError {
    /// The key file is unusable.
    #[error("key file {path}: {why}")]
    Key {
        /// The file.
        path: String,
        /// What is wrong and what to do.
        why: String,
    },
    /// Not a KubeXM backup (or an unknown version).
    #[error("not a KubeXM backup (no `KUBEXM-BACKUP-1` header): {0}")]
    NotABackup(String),
    /// Authentication failed: wrong key, or the file was changed or cut.
    #[error("the backup does not decrypt at chunk {chunk}: wrong key, or the file was changed or truncated")]
    Forged {
        /// The chunk that failed.
        chunk: u32,
    },
    /// More chunks than the counter can number.
    #[error("the backup is larger than this format allows (4 PiB)")]
    TooLarge,
    /// Reading or writing failed.
    #[error("{context}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

fn io(context: &str) -> impl FnOnce(std::io::Error) -> CryptError + '_ {
    move |source| CryptError::Io {
        context: context.to_string(),
        source,
    }
}

/// A backup key (32 bytes). Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct BackupKey([u8; 32]);

impl std::fmt::Debug for BackupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BackupKey(<redacted>)")
    }
}

impl BackupKey {
    /// A fresh random key (from the operating system's generator).
    pub fn generate() -> Result<Self, CryptError> {
        let mut k = [0u8; 32];
        random(&mut k)?;
        Ok(Self(k))
    }

    /// A key from its 32 bytes (tests and fuzzing; operators use [`BackupKey::load`]).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The key's text form: 64 lowercase hex characters and a newline.
    pub fn to_text(&self) -> String {
        format!("{}\n", hex::encode(self.0))
    }

    /// Reads a key file: 64 hex characters (surrounding whitespace ignored). Refuses a file
    /// others can read, like ssh does for private keys.
    pub fn load(path: &Path) -> Result<Self, CryptError> {
        let shown = path.display().to_string();
        let err = |why: String| CryptError::Key {
            path: shown.clone(),
            why,
        };
        let meta = std::fs::metadata(path).map_err(|e| {
            err(format!(
                "{e}; create one with `kubexm-install backup keygen --key-file {shown}` and keep a copy off the site"
            ))
        })?;
        if meta.len() > 1024 {
            return Err(err("larger than a key file (64 hex characters)".into()));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(err(format!(
                    "mode {mode:o} lets others read it; `chmod 600 {shown}`"
                )));
            }
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let bytes = hex::decode(text.trim())
            .ok()
            .filter(|b| b.len() == 32)
            .ok_or_else(|| err("does not hold 64 hex characters (a 256-bit key)".into()))?;
        let mut k = [0u8; 32];
        k.copy_from_slice(&bytes);
        Ok(Self(k))
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(&self.0.into())
    }
}

fn random(buf: &mut [u8]) -> Result<(), CryptError> {
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .map_err(io("reading /dev/urandom"))
}

fn nonce(prefix: &[u8; PREFIX], counter: u32, last: bool) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..PREFIX].copy_from_slice(prefix);
    n[PREFIX..PREFIX + 4].copy_from_slice(&counter.to_be_bytes());
    n[11] = u8::from(last);
    n
}

/// Reads up to `buf.len()` bytes, fewer only at the end of `r`.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Encrypts everything `input` yields into `out`; returns the plaintext length.
pub fn encrypt(
    key: &BackupKey,
    input: &mut impl Read,
    out: &mut impl Write,
) -> Result<u64, CryptError> {
    let mut prefix = [0u8; PREFIX];
    random(&mut prefix)?;
    let mut header = MAGIC.to_vec();
    header.extend_from_slice(&prefix);
    out.write_all(&header).map_err(io("writing the backup"))?;
    let cipher = key.cipher();
    let mut cur = vec![0u8; CHUNK];
    let mut next = vec![0u8; CHUNK];
    let mut len = fill(input, &mut cur).map_err(io("reading the archive"))?;
    let mut counter: u32 = 0;
    let mut total = 0u64;
    loop {
        // A full chunk is the last only when nothing follows it.
        let next_len = if len == CHUNK {
            fill(input, &mut next).map_err(io("reading the archive"))?
        } else {
            0
        };
        let last = len < CHUNK || next_len == 0;
        let n = nonce(&prefix, counter, last);
        let sealed = cipher
            .encrypt(
                (&n).into(),
                Payload {
                    msg: &cur[..len],
                    aad: &header,
                },
            )
            .map_err(|_| CryptError::Forged { chunk: counter })?;
        out.write_all(&sealed).map_err(io("writing the backup"))?;
        total += len as u64;
        if last {
            return Ok(total);
        }
        std::mem::swap(&mut cur, &mut next);
        len = next_len;
        counter = counter.checked_add(1).ok_or(CryptError::TooLarge)?;
    }
}

/// Decrypts a backup from `input` into `out`, chunk by chunk; nothing of a chunk reaches `out`
/// before its tag is checked. Returns the plaintext length. A caller writing to a file must
/// discard it on error (earlier chunks were authentic, the whole was not).
pub fn decrypt(
    key: &BackupKey,
    input: &mut impl Read,
    out: &mut impl Write,
) -> Result<u64, CryptError> {
    let mut header = vec![0u8; MAGIC.len() + PREFIX];
    let got = fill(input, &mut header).map_err(io("reading the backup"))?;
    if got < header.len() || &header[..MAGIC.len()] != MAGIC {
        return Err(CryptError::NotABackup(format!(
            "the file starts with {:?}",
            String::from_utf8_lossy(&header[..got.min(MAGIC.len())])
                .chars()
                .map(|c| if c.is_control() { '.' } else { c })
                .collect::<String>()
        )));
    }
    let mut prefix = [0u8; PREFIX];
    prefix.copy_from_slice(&header[MAGIC.len()..]);
    let cipher = key.cipher();
    let mut cur = vec![0u8; CHUNK + TAG];
    let mut next = vec![0u8; CHUNK + TAG];
    let mut len = fill(input, &mut cur).map_err(io("reading the backup"))?;
    let mut counter: u32 = 0;
    let mut total = 0u64;
    loop {
        let next_len = if len == CHUNK + TAG {
            fill(input, &mut next).map_err(io("reading the backup"))?
        } else {
            0
        };
        let last = next_len == 0;
        if len < TAG {
            return Err(CryptError::Forged { chunk: counter });
        }
        let n = nonce(&prefix, counter, last);
        let plain = cipher
            .decrypt(
                (&n).into(),
                Payload {
                    msg: &cur[..len],
                    aad: &header,
                },
            )
            .map_err(|_| CryptError::Forged { chunk: counter })?;
        out.write_all(&plain)
            .map_err(io("writing the decrypted archive"))?;
        total += plain.len() as u64;
        if last {
            return Ok(total);
        }
        std::mem::swap(&mut cur, &mut next);
        len = next_len;
        counter = counter.checked_add(1).ok_or(CryptError::TooLarge)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> BackupKey {
        BackupKey([7u8; 32])
    }

    fn roundtrip(len: usize) {
        let plain: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut sealed = Vec::new();
        assert_eq!(
            encrypt(&key(), &mut plain.as_slice(), &mut sealed).expect("encrypt"),
            len as u64
        );
        // Compared only where a chance match is impossible in practice (2^-128).
        if len >= 16 {
            assert_ne!(&sealed[23..23 + len.min(64)], &plain[..len.min(64)]);
        }
        assert_eq!(
            sealed.len(),
            23 + len + 16 * len.div_ceil(CHUNK).max(1),
            "one tag per chunk; an empty archive is one empty chunk"
        );
        let mut back = Vec::new();
        decrypt(&key(), &mut sealed.as_slice(), &mut back).expect("decrypt");
        assert_eq!(back, plain, "length {len}");
    }

    #[test]
    fn sizes_around_chunk_boundaries_round_trip() {
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 2 * CHUNK + 5] {
            roundtrip(len);
        }
    }

    #[test]
    fn a_wrong_key_a_cut_file_an_edit_and_swapped_chunks_are_refused() {
        let plain = vec![1u8; 3 * CHUNK + 10];
        let mut sealed = Vec::new();
        encrypt(&key(), &mut plain.as_slice(), &mut sealed).expect("encrypt");
        let fails =
            |bytes: &[u8], k: &BackupKey| decrypt(k, &mut &bytes[..], &mut Vec::new()).is_err();
        assert!(fails(&sealed, &BackupKey([8u8; 32])), "wrong key");
        let head = MAGIC.len() + PREFIX;
        let at_boundary = head + 2 * (CHUNK + TAG);
        assert!(
            fails(&sealed[..at_boundary], &key()),
            "cut at a chunk boundary"
        );
        assert!(
            fails(&sealed[..sealed.len() - 1], &key()),
            "cut inside the last chunk"
        );
        let mut edited = sealed.clone();
        edited[head + 5] ^= 1;
        assert!(fails(&edited, &key()), "one bit changed");
        let mut swapped = sealed[..head].to_vec();
        swapped.extend_from_slice(&sealed[head + CHUNK + TAG..head + 2 * (CHUNK + TAG)]);
        swapped.extend_from_slice(&sealed[head..head + CHUNK + TAG]);
        swapped.extend_from_slice(&sealed[head + 2 * (CHUNK + TAG)..]);
        assert!(fails(&swapped, &key()), "chunks swapped");
        let mut other_prefix = sealed.clone();
        other_prefix[MAGIC.len()] ^= 1;
        assert!(fails(&other_prefix, &key()), "header changed");
        assert!(matches!(
            decrypt(
                &key(),
                &mut &b"PK\x03\x04 not a backup at all"[..],
                &mut Vec::new()
            ),
            Err(CryptError::NotABackup(_))
        ));
    }

    #[test]
    fn two_encryptions_of_the_same_archive_differ() {
        let plain = b"same".to_vec();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encrypt(&key(), &mut plain.as_slice(), &mut a).expect("a");
        encrypt(&key(), &mut plain.as_slice(), &mut b).expect("b");
        assert_ne!(a, b, "fresh nonce prefix per file");
    }

    #[test]
    fn key_files_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("k");
        let k = BackupKey::generate().expect("key");
        std::fs::write(&p, k.to_text()).expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = BackupKey::load(&p).expect_err("world-readable");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(BackupKey::load(&p).expect("load").0, k.0);
        std::fs::write(&p, "abc").expect("write");
        assert!(BackupKey::load(&p).is_err());
        assert!(format!("{k:?}").contains("redacted"));
        assert!(!format!("{k:?}").contains(&hex::encode(k.0)));
    }
}
