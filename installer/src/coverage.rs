//! Whether the bundle carries what the configuration needs, checked before any node is
//! touched: every file the resolver lists for cluster.yaml (name, version, architecture), and
//! for every release of `spec.system.osReleases` a repository holding every OS package the
//! install asks for ([`kubexm_manifests::ospackages::for_cluster`], the list `kubexm-build` bundles
//! from). Images are checked where they are named ([`crate::modules::images::node_image`]).
//!
//! A bundle built for another configuration (a `kubexm-kh` load balancer's haproxy, installed
//! with `kubexm-kn`'s nginx) is refused here, naming each missing entry and the command that
//! builds the right bundle, instead of failing on the nodes half-way through.

use std::collections::BTreeSet;
use std::fmt;

use kubexm_bundles::manifest::OsRepoRecord;
use kubexm_manifests::display::Untrusted;
use kubexm_manifests::ospackages::{for_cluster, Need};

use crate::context::InstallContext;

/// One thing the configuration needs that the bundle does not carry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A file of the resolution (`files/<name>/<version>/<arch>/…`).
    File {
        /// Component (`kubeadm`).
        name: String,
        /// Version (`v1.33.11`).
        version: String,
        /// Architecture (`amd64`).
        arch: String,
        /// Where the bundle would hold it.
        path: String,
    },
    /// A release of `spec.system.osReleases` the bundle has no repository for.
    OsRelease {
        /// Release name (`debian-12`).
        release: String,
    },
    /// An OS package the install asks for that the release's repository lacks.
    OsPackage {
        /// Release name (`debian-12`).
        release: String,
        /// Package name (`nginx`).
        name: String,
        /// Why the install asks for it (`external load balancer (keepalived + nginx)`,
        /// `spec.system.debs[0]`).
        reason: String,
    },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File {
                name,
                version,
                arch,
                path,
            } => write!(
                f,
                "file {} {} {} (`{}`)",
                Untrusted(name),
                Untrusted(version),
                Untrusted(arch),
                Untrusted(path)
            ),
            Self::OsRelease { release } => write!(
                f,
                "OS package repository for {} (spec.system.osReleases)",
                Untrusted(release)
            ),
            Self::OsPackage {
                release,
                name,
                reason,
            } => write!(
                f,
                "OS package {} for {} ({})",
                Untrusted(name),
                Untrusted(release),
                Untrusted(reason)
            ),
        }
    }
}

/// The bundle does not carry everything the configuration needs.
#[derive(Debug, thiserror::Error)]
#[error(
    "the bundle does not carry what cluster.yaml needs (it was built for another configuration); missing:{}\nhint: build the bundle from this cluster.yaml with `kubexm-build bundle -f cluster.yaml -o BUNDLE.tar.zst` and install that one",
    list(.missing)
)]
pub struct CoverageError {
    /// Every missing entry, files first, then OS repositories and packages by release.
    pub missing: Vec<Missing>,
}

fn list(missing: &[Missing]) -> String {
    missing.iter().map(|m| format!("\n  - {m}")).collect()
}

impl InstallContext {
    /// Checks that the bundle carries every file and OS package this cluster.yaml needs. Nothing
    /// to check without a bundle (a plan from `-f` alone); files are not checked when the
    /// configuration could not be resolved.
    ///
    /// # Errors
    ///
    /// [`CoverageError`] naming every missing entry.
    pub fn check_bundle_coverage(&self) -> Result<(), CoverageError> {
        let Some(bundle) = &self.bundle else {
            return Ok(());
        };
        let mut missing = Vec::new();
        if let Some(resolution) = &self.resolution {
            let have: BTreeSet<(&str, &str, &str)> = bundle
                .manifest
                .files
                .iter()
                .map(|f| (f.name.as_str(), f.version.as_str(), f.arch.as_str()))
                .collect();
            for b in &resolution.binaries {
                if !have.contains(&(b.name.as_str(), b.version.as_str(), b.arch.as_str())) {
                    missing.push(Missing::File {
                        name: b.name.clone(),
                        version: b.version.clone(),
                        arch: b.arch.as_str().to_string(),
                        path: b.path.clone(),
                    });
                }
            }
        }
        for name in &self.cluster.file.spec.system.os_releases {
            let Some(release) = self.os_releases.get(name) else {
                // Validation refuses a release the catalog does not know.
                continue;
            };
            let Some(repo) = bundle.manifest.os_repos.iter().find(|r| &r.release == name) else {
                missing.push(Missing::OsRelease {
                    release: name.clone(),
                });
                continue;
            };
            let needs = for_cluster(&self.cluster, release.family);
            for need in &needs {
                if !covered(repo, need, &needs) {
                    missing.push(Missing::OsPackage {
                        release: name.clone(),
                        name: need.name.clone(),
                        reason: need.reason.clone(),
                    });
                }
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(CoverageError { missing })
        }
    }
}

/// Whether `repo` holds `need`: a package of that name, or (a virtual name the build resolved
/// to its provider) a package the build recorded as requested for `need`'s reason when no other
/// need shares that reason.
fn covered(repo: &OsRepoRecord, need: &Need, needs: &[Need]) -> bool {
    if repo.packages.iter().any(|p| p.name == need.name) {
        return true;
    }
    let unique = needs.iter().filter(|n| n.reason == need.reason).count() == 1;
    let requested = format!("requested by {}", need.reason);
    unique && repo.packages.iter().any(|p| p.reason == requested)
}
