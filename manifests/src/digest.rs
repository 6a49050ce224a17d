//! [`Digest`]: a content digest parsed once into a validated value (`sha256:` + 64 lowercase hex).
//!
//! Every digest that comes from outside — `index.json`, a manifest, `bundle.json`, a registry
//! header — is parsed into this type before anything uses it, and paths are only ever built
//! from it ([`Digest::blob_path`]), never from the string it came from. A digest such as
//! `sha256:../../../etc/hostname` is refused at parse time.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use crate::display::Untrusted;

/// The only algorithm KubeXM reads and writes.
pub const SHA256: &str = "sha256";
/// Hex digits of a sha256 digest.
pub const SHA256_HEX_LEN: usize = 64;

/// A `sha256:<64 lowercase hex>` digest.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest {
    /// The 64 lowercase hex digits (the algorithm is always sha256).
    hex: String,
}

/// Why a string is not a [`Digest`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DigestError {
    /// No `algorithm:` prefix.
    #[error("`{}` is not a digest: expected `sha256:<64 lowercase hex digits>`", Untrusted(.0))]
    NoAlgorithm(String),
    /// An algorithm other than sha256.
    #[error("`{}` uses algorithm `{}`; only sha256 is supported", Untrusted(.digest), Untrusted(.algorithm))]
    Algorithm {
        /// The whole digest.
        digest: String,
        /// Its algorithm.
        algorithm: String,
    },
    /// The encoded part is not 64 lowercase hex digits.
    #[error("`{}` is not a sha256 digest: the part after `sha256:` must be 64 lowercase hex digits", Untrusted(.0))]
    Hex(String),
}

/// True when `s` is 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == SHA256_HEX_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Digest {
    /// Parses `sha256:<hex>`.
    ///
    /// # Errors
    ///
    /// [`DigestError`] naming the digest when it is not exactly that shape.
    pub fn parse(s: &str) -> Result<Self, DigestError> {
        let Some((algorithm, hex)) = s.split_once(':') else {
            return Err(DigestError::NoAlgorithm(s.to_owned()));
        };
        if algorithm != SHA256 {
            return Err(DigestError::Algorithm {
                digest: s.to_owned(),
                algorithm: algorithm.to_owned(),
            });
        }
        Self::from_hex(hex).map_err(|_| DigestError::Hex(s.to_owned()))
    }

    /// From the bare 64 lowercase hex digits of a sha256.
    ///
    /// # Errors
    ///
    /// [`DigestError::Hex`] when `hex` is not 64 lowercase hex digits.
    pub fn from_hex(hex: &str) -> Result<Self, DigestError> {
        if is_sha256_hex(hex) {
            Ok(Self {
                hex: hex.to_owned(),
            })
        } else {
            Err(DigestError::Hex(hex.to_owned()))
        }
    }

    /// The 64 lowercase hex digits.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// `sha256`.
    pub fn algorithm(&self) -> &'static str {
        SHA256
    }

    /// `<dir>/sha256/<hex>`: the blob's path under an OCI layout's `blobs` directory.
    pub fn blob_path(&self, blobs_dir: &Path) -> PathBuf {
        blobs_dir.join(SHA256).join(&self.hex)
    }

    /// `blobs/sha256/<hex>`: the blob's path relative to an OCI layout root.
    pub fn layout_path(&self) -> String {
        format!("blobs/{SHA256}/{}", self.hex)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SHA256}:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parses_and_prints() {
        let d: Digest = format!("sha256:{HEX}").parse().expect("digest");
        assert_eq!(d.hex(), HEX);
        assert_eq!(d.to_string(), format!("sha256:{HEX}"));
        assert_eq!(
            d.blob_path(Path::new("/l/blobs")),
            Path::new("/l/blobs/sha256").join(HEX)
        );
        assert_eq!(d.layout_path(), format!("blobs/sha256/{HEX}"));
        let json = serde_json::to_string(&d).expect("json");
        assert_eq!(json, format!("\"sha256:{HEX}\""));
        assert_eq!(serde_json::from_str::<Digest>(&json).expect("back"), d);
    }

    #[test]
    fn refuses_everything_else() {
        for bad in [
            "",
            HEX,
            "sha256:../../../etc/hostname",
            "sha256:",
            &format!("sha512:{HEX}"),
            &format!("sha256:{}", HEX.to_uppercase()),
            &format!("sha256:{HEX}0"),
            &format!("sha256:{}", &HEX[1..]),
            &format!("sha256:{}/", &HEX[1..]),
            &format!(" sha256:{HEX}"),
            &format!("sha256:{HEX}\n"),
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad:?} accepted");
        }
        let err =
            serde_json::from_str::<Digest>("\"sha256:../../etc/hostname\"").expect_err("traversal");
        assert!(err.to_string().contains("64 lowercase hex"), "{err}");
    }
}
