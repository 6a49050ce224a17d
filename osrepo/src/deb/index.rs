//! A `Packages` index: one paragraph per binary package, with the fields the dependency closure
//! and the bundle's repository need. Each record keeps its paragraph text, so the bundle's own
//! index repeats exactly what the distribution signed (only `Filename` changes).

use thiserror::Error;

use super::control::{paragraphs, truncate, ControlError};
use super::relation::{
    is_package_name, parse_groups, parse_relation, Group, Relation, RelationError,
};
use super::version::DebVersion;

/// A `Packages` index that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IndexError {
    /// Not a control file.
    #[error("malformed")]
    Control(#[source] ControlError),
    /// One paragraph is wrong.
    #[error("paragraph at line {line} (package `{package}`): field `{field}`: {why}")]
    Field {
        /// Line of the paragraph.
        line: usize,
        /// `Package` value (or `?`).
        package: String,
        /// Field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// `Priority` of a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    /// `required`: debootstrap's minbase installs them.
    Required,
    /// `important`
    Important,
    /// `standard`
    Standard,
    /// `optional`, `extra`, anything else or none.
    Optional,
}

/// One binary package of an index.
#[derive(Debug, Clone)]
pub struct DebPackage {
    /// `Package`.
    pub name: String,
    /// `Version`.
    pub version: DebVersion,
    /// `Architecture` (`amd64`, `all`, …).
    pub arch: String,
    /// `Pre-Depends` then `Depends` as written, joined by `, ` (parsed by [`Self::depends`] only
    /// for the packages a closure reaches).
    pub depends_text: String,
    /// `Provides`.
    pub provides: Vec<Relation>,
    /// `Filename`, relative to the archive root (`pool/main/h/haproxy/haproxy_…_amd64.deb`).
    pub filename: String,
    /// `Size`.
    pub size: u64,
    /// `SHA256`.
    pub sha256: String,
    /// `Essential: yes`.
    pub essential: bool,
    /// `Priority`.
    pub priority: Priority,
    /// The paragraph as the distribution wrote it (ends in `\n`).
    pub stanza: String,
    /// Which of the caller's indexes it came from (0 from the parser; callers that merge
    /// indexes set it to find the archive a package is downloaded from).
    pub source: usize,
}

impl DebPackage {
    /// `Pre-Depends` then `Depends`, parsed.
    pub fn depends(&self) -> Result<Vec<Group>, RelationError> {
        parse_groups(&self.depends_text)
    }

    /// `name=version (arch)`, for messages.
    pub fn label(&self) -> String {
        format!("{}={} ({})", self.name, self.version, self.arch)
    }

    /// The file's name in the pool, checked to be a plain file name that can become a path.
    pub fn basename(&self) -> &str {
        self.filename.rsplit('/').next().unwrap_or(&self.filename)
    }
}

/// Whether `path` is a relative pool path without surprises: `/`-separated components of
/// `[A-Za-z0-9.+~_-]`, none empty, `.` or `..`, ending in `.deb`.
fn safe_pool_path(path: &str) -> bool {
    path.len() <= 512
        && path.ends_with(".deb")
        && path.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".+~_-".contains(&b))
        })
}

/// Parses a `Packages` index.
pub fn parse_packages(text: &str) -> Result<Vec<DebPackage>, IndexError> {
    let mut out = Vec::new();
    for p in paragraphs(text).map_err(IndexError::Control)? {
        let name = p.get("Package").unwrap_or("?");
        let field_err = |field: &'static str, why: String| IndexError::Field {
            line: p.line,
            package: truncate(name),
            field,
            why,
        };
        let required = |field: &'static str| {
            p.get(field)
                .ok_or_else(|| field_err(field, "missing".into()))
        };
        if !is_package_name(name) {
            return Err(field_err(
                "Package",
                format!("`{}` is not a package name", truncate(name)),
            ));
        }
        let version = DebVersion::parse(required("Version")?)
            .map_err(|e| field_err("Version", e.to_string()))?;
        let arch = required("Architecture")?;
        if !arch.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(field_err("Architecture", format!("`{}`", truncate(arch))));
        }
        let depends_text = match (p.get("Pre-Depends"), p.get("Depends")) {
            (Some(a), Some(b)) => format!("{a}, {b}"),
            (Some(a), None) | (None, Some(a)) => a.to_owned(),
            (None, None) => String::new(),
        };
        let provides = p
            .get("Provides")
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(parse_relation)
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()
            .map_err(|e| field_err("Provides", e.to_string()))?
            .unwrap_or_default();
        let filename = required("Filename")?;
        if !safe_pool_path(filename) {
            return Err(field_err(
                "Filename",
                format!(
                    "`{}` is not a relative pool path of a .deb",
                    truncate(filename)
                ),
            ));
        }
        let size = required("Size")?
            .parse()
            .map_err(|_| field_err("Size", "not a number".into()))?;
        let sha256 = required("SHA256")?;
        if !crate::is_sha256_hex(sha256) {
            return Err(field_err(
                "SHA256",
                format!("`{}` is not a sha256", truncate(sha256)),
            ));
        }
        let priority = match p.get("Priority") {
            Some("required") => Priority::Required,
            Some("important") => Priority::Important,
            Some("standard") => Priority::Standard,
            _ => Priority::Optional,
        };
        out.push(DebPackage {
            name: name.to_owned(),
            version,
            arch: arch.to_owned(),
            depends_text,
            provides,
            filename: filename.to_owned(),
            size,
            sha256: sha256.to_owned(),
            essential: p.get("Essential").is_some_and(|v| v == "yes"),
            priority,
            stanza: p.raw.to_owned(),
            source: 0,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{parse_packages, Priority};

    const INDEX: &str = "Package: haproxy\nVersion: 2.6.12-1+deb12u2\nInstalled-Size: 4200\nMaintainer: Debian HAProxy Maintainers <team+haproxy@tracker.debian.org>\nArchitecture: amd64\nPre-Depends: dpkg (>= 1.17.14), init-system-helpers (>= 1.54~)\nDepends: libc6 (>= 2.34), libssl3 (>= 3.0.0), adduser\nDescription: fast and reliable load balancing reverse proxy\nSection: net\nPriority: optional\nFilename: pool/main/h/haproxy/haproxy_2.6.12-1+deb12u2_amd64.deb\nSize: 2112584\nSHA256: 5f0a8bd7e7d2c7e4c6a0d7df4a0d3d7f0a9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c\n\nPackage: dpkg\nEssential: yes\nPriority: required\nVersion: 1.21.22\nArchitecture: amd64\nProvides: dpkg-dev (= 1.21.22)\nFilename: pool/main/d/dpkg/dpkg_1.21.22_amd64.deb\nSize: 1\nSHA256: 0000000000000000000000000000000000000000000000000000000000000000\n";

    #[test]
    fn parses_records_and_keeps_stanzas() {
        let p = parse_packages(INDEX).expect("parses");
        assert_eq!(p.len(), 2);
        let deps = p[0].depends().expect("depends");
        assert_eq!(deps.len(), 5, "pre-depends first, then depends");
        assert_eq!(deps[0][0].name, "dpkg");
        assert_eq!(p[0].basename(), "haproxy_2.6.12-1+deb12u2_amd64.deb");
        assert!(p[0].stanza.starts_with("Package: haproxy\n") && p[0].stanza.ends_with("b5c\n"));
        assert!(p[1].essential);
        assert_eq!(p[1].priority, Priority::Required);
        assert_eq!(p[1].provides[0].name, "dpkg-dev");
    }

    #[test]
    fn hostile_filenames_are_refused() {
        for bad in [
            "../../etc/passwd.deb",
            "/abs/x.deb",
            "pool/x y.deb",
            "pool//x.deb",
            "pool/x.tar",
        ] {
            let text = INDEX.replace(
                "pool/main/h/haproxy/haproxy_2.6.12-1+deb12u2_amd64.deb",
                bad,
            );
            let e = parse_packages(&text).expect_err(bad);
            let msg = e.to_string();
            assert!(
                msg.contains("`haproxy`") && msg.contains("Filename"),
                "{bad}: {msg}"
            );
        }
    }
}
