//! KubeXM OS package repositories.
//!
//! Air-gapped nodes have no package mirror, so `kubexm-build` bundles the OS packages KubeXM
//! installs as one repository per OS release. This crate holds the parts that need no network:
//!
//! - [`openpgp`]: the distribution's signed index verified against its archive keys, pinned by
//!   fingerprint; the bundle's repositories signed with a key generated per bundle.
//! - [`deb`]: `InRelease` → `Release` (sha256 of every index) → `Packages` (sha256 of every
//!   `.deb`), the dependency closure apt would install, and the bundle's flat repository.
//! - [`rpm`]: `repomd.xml` (+ `repomd.xml.asc`) → `primary.xml` (sha256 of every `.rpm`), the
//!   closure over `Requires`/`Provides`, and the bundle's `repodata/`.
//!
//! ```no_run
//! use kubexm_osrepo::deb::{closure, index, release::Release};
//! use kubexm_osrepo::openpgp::TrustedKeys;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let keyring = std::fs::read("/usr/share/keyrings/debian-archive-keyring.gpg")?;
//! let keys = TrustedKeys::from_keyring(&keyring, "debian-archive-keyring.gpg",
//!     &["B8B80B5B623EAB6AD8775C45B7C5D7D6350947F8".to_owned()])?;
//! let inrelease = std::fs::read_to_string("InRelease")?;
//! let verified = keys.verify_clearsigned("InRelease", &inrelease, 1_800_000_000)?;
//! let release = Release::parse(&verified.text)?;
//! let packages = index::parse_packages(&std::fs::read_to_string("Packages")?)?;
//! let universe = closure::Universe::new("amd64", &packages);
//! let wanted = [closure::Request { name: "haproxy".into(), reason: "example".into() }];
//! let chosen = closure::closure(&universe, &wanted).map_err(|p| format!("{p:?}"))?;
//! println!("{} packages; Packages index listed: {}", chosen.len(), release.sha256.len());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod deb;
pub mod openpgp;
pub mod rpm;

/// Whether `s` is 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}
