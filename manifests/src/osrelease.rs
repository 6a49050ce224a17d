//! OS releases (`spec.system.osReleases`): for each, the package family, how a node recognises
//! it (`/etc/os-release`), the repositories its packages come from and the archive keys their
//! indexes must be signed with. Built in from `manifests/catalog/os-releases.yaml`; a user catalog
//! (`--catalog FILE`, `osReleases:`) replaces a release by name or adds one (an internal mirror
//! with its own key, a keyring at another path).

use serde::{Deserialize, Serialize};

/// The built-in OS releases.
pub const BUILTIN_OS_RELEASES: &str = include_str!("../catalog/os-releases.yaml");

/// Package family of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// `.deb` packages, apt.
    Deb,
    /// `.rpm` packages, dnf/yum.
    Rpm,
}

impl Family {
    /// `deb` or `rpm`.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Deb => "deb",
            Family::Rpm => "rpm",
        }
    }
}

/// One repository of a release.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OsRepository {
    /// Base URL. Debian family: the archive root (`http://deb.debian.org/debian`). RPM family:
    /// the directory holding `repodata/`, where `{uname_arch}` (`x86_64`) or `{arch}`
    /// (`amd64`) is replaced. Rewritten by the zone's file rules like every other URL.
    pub url: String,
    /// Debian family: the suite (`bookworm`, `bookworm-security`).
    #[serde(default)]
    pub suite: Option<String>,
    /// Debian family: components (`main`).
    #[serde(default)]
    pub components: Vec<String>,
}

/// One OS release.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OsRelease {
    /// Name used in `spec.system.osReleases` (`debian-12`).
    pub name: String,
    /// Package family.
    pub family: Family,
    /// `ID` in the node's `/etc/os-release`.
    pub os_id: String,
    /// `VERSION_ID` in `/etc/os-release` (a node matches when it equals this or starts with
    /// this followed by `.`, so `9` covers `9.4`).
    pub version_id: String,
    /// The keyring (binary or armored OpenPGP keys) on the build host holding the archive keys.
    pub keyring: String,
    /// Fingerprints of the keys the indexes must be signed with (primary keys; their signing
    /// subkeys count). Only these keys of the keyring are trusted.
    pub signing_keys: Vec<String>,
    /// Where the packages come from, in order.
    pub repositories: Vec<OsRepository>,
}

impl OsRelease {
    /// Problems with this entry (each a sentence naming the field).
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let name = &self.name;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b".-".contains(&b))
        {
            problems.push(format!(
                "osReleases `{name}`: a name is lowercase letters, digits, `.` and `-` (it becomes a directory of the bundle)"
            ));
        }
        if self.signing_keys.is_empty() {
            problems.push(format!(
                "osReleases `{name}`: signingKeys is empty; pin the fingerprints of the archive keys"
            ));
        }
        for k in &self.signing_keys {
            let hex: String = k.chars().filter(|c| !c.is_whitespace()).collect();
            if !(matches!(hex.len(), 40 | 64) && hex.bytes().all(|b| b.is_ascii_hexdigit())) {
                problems.push(format!(
                    "osReleases `{name}`: signingKeys `{k}` is not a key fingerprint (40 or 64 hex digits)"
                ));
            }
        }
        if self.repositories.is_empty() {
            problems.push(format!("osReleases `{name}`: repositories is empty"));
        }
        for (i, r) in self.repositories.iter().enumerate() {
            if !(r.url.starts_with("http://") || r.url.starts_with("https://")) {
                problems.push(format!(
                    "osReleases `{name}`: repositories[{i}].url `{}` must be an http:// or https:// URL",
                    r.url
                ));
            }
            let safe = |s: &str| {
                !s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b".-_/".contains(&b))
                    && !s.split('/').any(|c| c.is_empty() || c == "." || c == "..")
            };
            match self.family {
                Family::Deb => {
                    if !r.suite.as_deref().is_some_and(safe) {
                        problems.push(format!(
                            "osReleases `{name}`: repositories[{i}].suite is required for a deb release (e.g. bookworm)"
                        ));
                    }
                    if r.components.is_empty() || !r.components.iter().all(|c| safe(c)) {
                        problems.push(format!(
                            "osReleases `{name}`: repositories[{i}].components must list components such as main"
                        ));
                    }
                }
                Family::Rpm => {
                    if r.suite.is_some() || !r.components.is_empty() {
                        problems.push(format!(
                            "osReleases `{name}`: repositories[{i}] of an rpm release takes only `url` (the directory holding repodata/)"
                        ));
                    }
                }
            }
        }
        problems
    }

    /// Whether a node whose `/etc/os-release` says `ID=id`, `VERSION_ID=version` runs this
    /// release.
    pub fn matches(&self, id: &str, version: &str) -> bool {
        id == self.os_id
            && (version == self.version_id
                || version
                    .strip_prefix(self.version_id.as_str())
                    .is_some_and(|rest| rest.starts_with('.')))
    }
}

#[cfg(test)]
mod tests {
    use crate::catalog::Catalog;

    #[test]
    fn builtin_releases_are_consistent() {
        let c = Catalog::builtin().expect("built-in catalog");
        let d = c.os_releases.get("debian-12").expect("debian-12");
        assert!(d.check().is_empty(), "{:?}", d.check());
        assert_eq!(d.repositories.len(), 3);
        assert!(
            d.matches("debian", "12") && !d.matches("debian", "11") && !d.matches("ubuntu", "12")
        );
        let r = c.os_releases.get("rocky-9").expect("rocky-9");
        assert!(r.matches("rocky", "9.4") && !r.matches("rocky", "90"));
    }
}
