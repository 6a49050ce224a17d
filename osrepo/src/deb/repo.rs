//! The bundle's own Debian repository for one release: a flat repository (`deb [signed-by=KEY]
//! URL ./`) holding the closure's `.deb` files under `pool/`, a `Packages` index made of the
//! distribution's own paragraphs (only `Filename` points into `pool/`), its gzip, and a `Release`
//! listing both by sha256, signed by the bundle's key as `InRelease` and `Release.gpg`.

use std::collections::BTreeSet;
use std::io::Write as _;

use thiserror::Error;

use super::index::DebPackage;
use super::release::format_rfc2822;
use crate::openpgp::{PgpError, RepoSigningKey};

/// Directory of the packages inside a repository.
pub const POOL: &str = "pool";

/// A repository that cannot be written.
#[derive(Debug, Error)]
pub enum RepoError {
    /// Two packages would land on the same file.
    #[error("packages {a} and {b} have the same file name `{file}`")]
    Collision {
        /// First.
        a: String,
        /// Second.
        b: String,
        /// File name.
        file: String,
    },
    /// A paragraph without a `Filename` line (cannot happen for parsed indexes).
    #[error("package {0}: its paragraph has no `Filename:` line")]
    NoFilename(String),
    /// Compression failed.
    #[error("cannot compress the Packages index")]
    Gzip(#[source] std::io::Error),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] PgpError),
}

/// The index files of a repository: `(path relative to the repository, content)`.
#[derive(Debug, Clone)]
pub struct IndexFiles {
    /// `Packages`, `Packages.gz`, `Release`, `InRelease`, `Release.gpg`.
    pub files: Vec<(String, Vec<u8>)>,
}

/// Where a package's file goes in the repository.
pub fn pool_path(p: &DebPackage) -> String {
    format!("{POOL}/{}", p.basename())
}

/// Writes the index files for `packages` (each a distribution paragraph), labelled `label`,
/// dated and signed at `at` (seconds since the epoch) with `key`.
pub fn index_files(
    packages: &[&DebPackage],
    label: &str,
    key: &RepoSigningKey,
    at: u32,
) -> Result<IndexFiles, RepoError> {
    let mut sorted: Vec<&DebPackage> = packages.to_vec();
    sorted.sort_by(|a, b| {
        (a.name.as_str(), a.arch.as_str())
            .cmp(&(b.name.as_str(), b.arch.as_str()))
            .then_with(|| a.version.cmp(&b.version))
    });
    let mut seen: Vec<(&str, &DebPackage)> = Vec::new();
    let mut text = String::new();
    let mut arches = BTreeSet::new();
    for p in &sorted {
        if let Some((_, other)) = seen.iter().find(|(f, _)| *f == p.basename()) {
            if other.sha256 == p.sha256 {
                continue;
            }
            return Err(RepoError::Collision {
                a: other.label(),
                b: p.label(),
                file: p.basename().to_owned(),
            });
        }
        seen.push((p.basename(), p));
        arches.insert(p.arch.as_str());
        text.push_str(&rewrite_filename(p)?);
        text.push('\n');
    }
    let packages_bytes = text.into_bytes();
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    gz.write_all(&packages_bytes).map_err(RepoError::Gzip)?;
    let packages_gz = gz.finish().map_err(RepoError::Gzip)?;
    let arches: Vec<&str> = arches.into_iter().collect();
    let mut release = format!(
        "Origin: KubeXM\nLabel: {label}\nSuite: kubexm\nCodename: kubexm\nDate: {}\nArchitectures: {}\nDescription: OS packages bundled by KubeXM ({label}), re-signed with the bundle's key\nSHA256:\n",
        format_rfc2822(i64::from(at)),
        arches.join(" "),
    );
    for (name, bytes) in [("Packages", &packages_bytes), ("Packages.gz", &packages_gz)] {
        release.push_str(&format!(
            " {} {} {name}\n",
            crate::sha256_hex(bytes),
            bytes.len()
        ));
    }
    let inrelease = key.clearsign(&release, at)?;
    let release_gpg = key.detach_sign(release.as_bytes(), at)?;
    Ok(IndexFiles {
        files: vec![
            ("InRelease".into(), inrelease.into_bytes()),
            ("Packages".into(), packages_bytes),
            ("Packages.gz".into(), packages_gz),
            ("Release".into(), release.into_bytes()),
            ("Release.gpg".into(), release_gpg.into_bytes()),
        ],
    })
}

/// The package's paragraph with `Filename:` pointing into the pool.
fn rewrite_filename(p: &DebPackage) -> Result<String, RepoError> {
    let mut out = String::with_capacity(p.stanza.len());
    let mut found = false;
    for line in p.stanza.lines() {
        if line.starts_with("Filename:") {
            out.push_str(&format!("Filename: {}\n", pool_path(p)));
            found = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if found {
        Ok(out)
    } else {
        Err(RepoError::NoFilename(p.label()))
    }
}
