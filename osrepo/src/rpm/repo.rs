//! The bundle's own RPM repository for one release: the closure's `.rpm` files under
//! `Packages/`, `repodata/primary.xml.gz` made of the distribution's own `<package>` elements
//! (only `location` points into `Packages/`), `repodata/repomd.xml` listing it by sha256, and
//! `repodata/repomd.xml.asc` signed with the bundle's key (dnf's `repo_gpgcheck=1`).

use std::io::Write as _;

use thiserror::Error;

use super::metadata::RpmPackage;
use crate::openpgp::{PgpError, RepoSigningKey};

/// Directory of the packages inside a repository.
pub const PACKAGES: &str = "Packages";

/// A repository that cannot be written.
#[derive(Debug, Error)]
pub enum RpmRepoError {
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
    /// Compression failed.
    #[error("cannot compress primary.xml")]
    Gzip(#[source] std::io::Error),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] PgpError),
}

/// Where a package's file goes in the repository.
pub fn package_path(p: &RpmPackage) -> String {
    format!("{PACKAGES}/{}", p.basename())
}

/// `repodata/primary.xml.gz`, `repodata/repomd.xml` and `repodata/repomd.xml.asc` for
/// `packages`, dated and signed at `at` with `key`.
pub fn repodata(
    packages: &[&RpmPackage],
    key: &RepoSigningKey,
    at: u32,
) -> Result<Vec<(String, Vec<u8>)>, RpmRepoError> {
    let mut sorted = packages.to_vec();
    sorted.sort_by_key(|p| p.label());
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<metadata xmlns=\"http://linux.duke.edu/metadata/common\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\" packages=\"{}\">\n",
        sorted.len()
    );
    let mut seen: Vec<&RpmPackage> = Vec::new();
    for p in &sorted {
        if let Some(other) = seen.iter().find(|o| o.basename() == p.basename()) {
            return Err(RpmRepoError::Collision {
                a: other.label(),
                b: p.label(),
                file: p.basename().to_owned(),
            });
        }
        seen.push(p);
        let (s, e) = p.location_span;
        xml.push_str(&p.xml[..s]);
        xml.push_str(&format!("<location href=\"{}\"/>", package_path(p)));
        xml.push_str(&p.xml[e..]);
        xml.push('\n');
    }
    xml.push_str("</metadata>\n");
    let open = xml.into_bytes();
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    gz.write_all(&open).map_err(RpmRepoError::Gzip)?;
    let primary = gz.finish().map_err(RpmRepoError::Gzip)?;
    let sum = crate::sha256_hex(&primary);
    let primary_name = format!("repodata/{sum}-primary.xml.gz");
    let repomd = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<repomd xmlns=\"http://linux.duke.edu/metadata/repo\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\">\n  <revision>{at}</revision>\n  <data type=\"primary\">\n    <checksum type=\"sha256\">{sum}</checksum>\n    <open-checksum type=\"sha256\">{}</open-checksum>\n    <location href=\"{primary_name}\"/>\n    <timestamp>{at}</timestamp>\n    <size>{}</size>\n    <open-size>{}</open-size>\n  </data>\n</repomd>\n",
        crate::sha256_hex(&open),
        primary.len(),
        open.len()
    );
    let asc = key.detach_sign(repomd.as_bytes(), at)?;
    Ok(vec![
        (primary_name, primary),
        ("repodata/repomd.xml".into(), repomd.into_bytes()),
        ("repodata/repomd.xml.asc".into(), asc.into_bytes()),
    ])
}
