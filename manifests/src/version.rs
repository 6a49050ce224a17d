//! Kubernetes versions (`v1.31.4`), compared numerically.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// A `vMAJOR.MINOR.PATCH` Kubernetes version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

/// A string that is not a `vX.Y.Z` version.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("`{0}` is not a Kubernetes version of the form vX.Y.Z (e.g. v1.31.4)")]
pub struct VersionError(pub String);

impl KubeVersion {
    /// A version from its parts.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Whether this is at least `major.minor`.
    pub fn at_least(self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl FromStr for KubeVersion {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || VersionError(s.to_owned());
        let rest = s.strip_prefix('v').ok_or_else(err)?;
        let mut parts = rest.split('.');
        let mut next = || -> Result<u32, VersionError> {
            let p = parts.next().ok_or_else(err)?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(err());
            }
            p.parse().map_err(|_| err())
        };
        let v = KubeVersion::new(next()?, next()?, next()?);
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(v)
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::KubeVersion;

    #[test]
    fn parses_and_orders() {
        let a: KubeVersion = "v1.9.0".parse().expect("v1.9.0");
        let b: KubeVersion = "v1.31.4".parse().expect("v1.31.4");
        assert!(a < b);
        assert!(b.at_least(1, 31) && !b.at_least(1, 32));
        assert_eq!(b.to_string(), "v1.31.4");
        for bad in [
            "1.31.4",
            "v1.31",
            "v1.31.4.1",
            "v1.x.4",
            "v1..4",
            "v1.31.4-rc.0",
        ] {
            assert!(bad.parse::<KubeVersion>().is_err(), "{bad}");
        }
    }
}
