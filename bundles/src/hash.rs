//! sha256 while streaming.

use std::io::{self, Read};

use sha2::{Digest, Sha256};

pub use kubexm_manifests::catalog::is_sha256_hex;

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hashes and counts what is read through it.
pub(crate) struct HashReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Hex digest and byte count.
    pub(crate) fn finish(self) -> (String, u64) {
        (hex::encode(self.hasher.finalize()), self.count)
    }
}

impl<R: Read> Read for HashReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn hashes_streams() {
        assert_eq!(sha256_hex(b""), EMPTY);
        let mut r = HashReader::new(&b"abc"[..]);
        io::copy(&mut r, &mut io::sink()).expect("copy");
        assert_eq!(r.finish(), (sha256_hex(b"abc"), 3));
    }

    #[test]
    fn checks_hex() {
        assert!(is_sha256_hex(EMPTY));
        assert!(!is_sha256_hex(&EMPTY.to_uppercase()));
        assert!(!is_sha256_hex(&EMPTY[1..]));
    }
}
