//! Module: the bundle's OS package repository on every node (`spec.system.osReleases`).
//!
//! Air-gapped nodes have no package mirror, so the bundle carries one signed repository per OS
//! release (`repos/<release>/`, see `bundles/README.md`). Before anything is installed:
//!
//! 1. `detect-os-release`: each node's `/etc/os-release` picks its repository; a node whose
//!    release the bundle has no repository for stops the install, naming both.
//! 2. `install-os-repository`: the repository is uploaded to [`REPO_ROOT`]`/<release>/` (each
//!    file sha256-checked), the bundle's public key beside it, and a source that names it with
//!    that key is written — apt: [`APT_SOURCES`] (`Signed-By`, never `trusted=yes`), dnf/yum:
//!    [`RPM_REPO_FILE`] (`repo_gpgcheck=1`).
//!
//! Every package KubeXM installs afterwards ([`package_source`]) comes from that repository ALONE:
//! apt runs with it as its only source list and its own lists directory ([`APT_STATE`]), dnf/yum
//! with every other repository disabled. The node's own sources are never read, moved or changed,
//! so there is nothing to restore and no moment where the node is left without them. Packages
//! already installed are not reinstalled. `kubexm-install delete` removes the repository, the
//! key, the source and the lists ([`delete_module`]); the packages stay installed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kubexm_bundles::manifest::OsRepoRecord;
use kubexm_manifests::osrelease::Family;

use super::delete::{Ops, WRITTEN_BY};
use crate::context::InstallContext;
use crate::pipeline::ops::{
    Check, LearnFacts, Op, PackageSource, RunCommand, TreeFile, UploadFile, UploadTree,
};
use crate::pipeline::{Facts, Module, Node, Step, StepError, Task};
use crate::runner::shell;

/// Where the repositories go on a node: `REPO_ROOT/<release>/`.
pub const REPO_ROOT: &str = "/var/lib/kubexm/repos";
/// The bundle's public key, binary (apt's `Signed-By`).
pub const KEY_GPG: &str = "/var/lib/kubexm/repos/kubexm-repo-key.gpg";
/// The bundle's public key, armored (dnf's `gpgkey=`).
pub const KEY_ASC: &str = "/var/lib/kubexm/repos/kubexm-repo-key.asc";
/// The apt source naming the repository.
pub const APT_SOURCES: &str = "/etc/apt/sources.list.d/kubexm.sources";
/// apt's lists and caches while KubeXM installs, apart from the node's own.
pub const APT_STATE: &str = "/var/lib/kubexm/apt";
/// The dnf/yum repository file.
pub const RPM_REPO_FILE: &str = "/etc/yum.repos.d/kubexm.repo";
/// The dnf/yum repository id.
pub const RPM_REPO_ID: &str = "kubexm-bundle";

/// Fact key of the release a node's repository is for.
fn fact_key(node: &str) -> String {
    format!("osrelease.{node}")
}

/// A repository as the install sees it: from `bundle.json`, or (planning without a bundle)
/// from the catalog with no files.
#[derive(Debug, Clone)]
struct Repo {
    release: String,
    family: Family,
    os_id: String,
    version_id: String,
    files: Vec<TreeFile>,
    key_asc: Option<TreeFile>,
    key_gpg: Option<TreeFile>,
}

fn family(s: &str) -> Family {
    if s == "rpm" {
        Family::Rpm
    } else {
        Family::Deb
    }
}

/// The repositories the install sets up (none when the cluster lists no `osReleases`).
fn repos(ctx: &InstallContext) -> Vec<Repo> {
    if let Some(b) = &ctx.bundle {
        return b
            .manifest
            .os_repos
            .iter()
            .map(|r| from_record(r, &b.dir))
            .collect();
    }
    ctx.os_releases
        .values()
        .map(|r| Repo {
            release: r.name.clone(),
            family: r.family,
            os_id: r.os_id.clone(),
            version_id: r.version_id.clone(),
            files: Vec::new(),
            key_asc: None,
            key_gpg: None,
        })
        .collect()
}

fn from_record(r: &OsRepoRecord, dir: &std::path::Path) -> Repo {
    let prefix = format!("{}/", r.path);
    // Every bundle file under the repository's directory: packages and its own index files
    // (sums from SHA256SUMS, which the unpack verified).
    let sums = manifest_sums(dir);
    let mut files: Vec<TreeFile> = sums
        .iter()
        .filter_map(|(path, sha)| {
            let rel = path.strip_prefix(&prefix)?;
            Some(TreeFile {
                source: dir.join(path),
                path: rel.to_string(),
                sha256: sha.clone(),
                size: r
                    .packages
                    .iter()
                    .find(|p| &p.path == path)
                    .map_or(0, |p| p.size),
            })
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let key = |path: &str| {
        sums.get(path).map(|sha| TreeFile {
            source: dir.join(path),
            path: path.to_string(),
            sha256: sha.clone(),
            size: 0,
        })
    };
    Repo {
        release: r.release.clone(),
        family: family(&r.family),
        os_id: r.os_id.clone(),
        version_id: r.version_id.clone(),
        files,
        key_asc: key(&r.signing_key.armored),
        key_gpg: key(&r.signing_key.binary),
    }
}

/// `SHA256SUMS` of the unpacked bundle (path → sha256); empty when unreadable (the unpack
/// verified it, so it is there for an unpacked bundle).
fn manifest_sums(dir: &std::path::Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(dir.join(kubexm_bundles::manifest::SUMS_PATH))
        .map(|text| {
            text.lines()
                .filter_map(|l| l.split_once("  "))
                .map(|(sha, path)| (path.to_string(), sha.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Where [`crate::pipeline::ops::Package`] installs from: the bundle's repository alone when the
/// cluster lists `osReleases`, else the node's own sources.
pub fn package_source(ctx: &InstallContext) -> PackageSource {
    let bundled = match &ctx.bundle {
        Some(b) => !b.manifest.os_repos.is_empty(),
        None => !ctx.cluster.file.spec.system.os_releases.is_empty(),
    };
    if bundled {
        PackageSource::Only {
            apt_sources: APT_SOURCES.to_string(),
            apt_state: APT_STATE.to_string(),
            rpm_repo: RPM_REPO_ID.to_string(),
        }
    } else {
        PackageSource::Node
    }
}

/// The OS repository module.
pub struct OsRepoModule(pub Arc<InstallContext>);

impl Module for OsRepoModule {
    fn name(&self) -> &str {
        "os-repository"
    }

    fn skip(&self) -> Option<String> {
        match &self.0.bundle {
            Some(b) if b.manifest.os_repos.is_empty() => Some(
                "the bundle has no OS package repository (spec.system.osReleases is empty): nodes install OS packages from their own sources".into(),
            ),
            None if self.0.cluster.file.spec.system.os_releases.is_empty() => Some(
                "spec.system.osReleases is empty: nodes install OS packages from their own sources".into(),
            ),
            _ => None,
        }
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let repos = Arc::new(repos(&self.0));
        let cluster = self.0.cluster.cluster_name().to_string();
        Ok(vec![
            Task::new("detect-os-release", self.0.all()).step(DetectOsRelease {
                repos: repos.clone(),
            }),
            Task::new("install-os-repository", self.0.all()).step(InstallOsRepo { repos, cluster }),
        ])
    }
}

/// Learns which of the bundle's repositories the node's `/etc/os-release` asks for.
struct DetectOsRelease {
    repos: Arc<Vec<Repo>>,
}

/// `osrelease.<node>=<release>` lines into facts.
fn parse_release(out: &str) -> Result<Vec<(String, String)>, String> {
    let found: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| l.trim().split_once('='))
        .filter(|(k, _)| k.starts_with("osrelease."))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if found.is_empty() {
        Err("no OS release was reported".to_string())
    } else {
        Ok(found)
    }
}

impl DetectOsRelease {
    fn script(&self, node: &Node) -> String {
        let mut cases = String::new();
        let mut offered = Vec::new();
        for r in self.repos.iter() {
            let (id, v, rel) = (
                shell::quote(&r.os_id),
                shell::quote(&r.version_id),
                shell::quote(&r.release),
            );
            cases.push_str(&format!(
                "if [ \"$ID\" = {id} ] && {{ [ \"$VERSION_ID\" = {v} ] || case \"$VERSION_ID\" in {v}.*) true;; *) false;; esac; }}; then r={rel}; fi\n"
            ));
            offered.push(format!("{} ({} {})", r.release, r.os_id, r.version_id));
        }
        format!(
            "[ -r /etc/os-release ] || {{ echo '/etc/os-release is missing: cannot tell which OS package repository this node needs' >&2; exit 1; }}\n\
             . /etc/os-release\nr=''\n{cases}\
             if [ -z \"$r\" ]; then echo \"this node runs $ID $VERSION_ID, and the bundle carries OS packages only for: {offered}; add the node's release to spec.system.osReleases and rebuild the bundle\" >&2; exit 1; fi\n\
             echo {key}=\"$r\"",
            offered = offered.join(", ").replace(['"', '`', '$', '\\'], ""),
            key = shell::quote(&fact_key(&node.name)),
        )
    }
}

impl Step for DetectOsRelease {
    fn name(&self) -> &str {
        "detect-os-release"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "OS release".into(),
            script: self.script(node),
            parse: parse_release,
            facts: facts.clone(),
            timeout: Duration::from_secs(30),
        })])
    }
}

/// Uploads the node's repository and key and writes the source naming them.
struct InstallOsRepo {
    repos: Arc<Vec<Repo>>,
    cluster: String,
}

impl InstallOsRepo {
    /// The node's repository: the learned release, else (planning) the only one.
    fn repo_for(&self, node: &Node, facts: &Facts) -> Result<Option<&Repo>, StepError> {
        match facts.get(&fact_key(&node.name)) {
            Some(name) => self
                .repos
                .iter()
                .find(|r| r.release == name)
                .map(Some)
                .ok_or_else(|| {
                    StepError::Invalid(format!(
                        "{}: the bundle has no repository for {name}",
                        node.name
                    ))
                }),
            None if facts.is_planning() && self.repos.len() == 1 => Ok(self.repos.first()),
            None if facts.is_planning() => Ok(None),
            None => Err(StepError::Invalid(format!(
                "{}: its OS release was not detected (the detect-os-release task must run first)",
                node.name
            ))),
        }
    }
}

/// The apt source (deb822) of a repository directory.
pub fn apt_sources(release: &str, cluster: &str) -> String {
    format!(
        "{WRITTEN_BY}: the OS packages of cluster {cluster}'s bundle ({release}); `kubexm-install delete` removes it.\n\
         Types: deb\nURIs: file://{REPO_ROOT}/{release}\nSuites: ./\nSigned-By: {KEY_GPG}\n"
    )
}

/// The dnf/yum repository file of a repository directory.
pub fn rpm_repo(release: &str, cluster: &str) -> String {
    format!(
        "{WRITTEN_BY}: the OS packages of cluster {cluster}'s bundle ({release}); `kubexm-install delete` removes it.\n\
         [{RPM_REPO_ID}]\nname=KubeXM bundle repository ({release})\nbaseurl=file://{REPO_ROOT}/{release}\nenabled=1\n\
         # The repository metadata is signed with the bundle's key and lists the sha256 of every package.\n\
         repo_gpgcheck=1\ngpgcheck=0\ngpgkey=file://{KEY_ASC}\n"
    )
}

impl Step for InstallOsRepo {
    fn name(&self) -> &str {
        "install-os-repository"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        let Some(repo) = self.repo_for(node, facts)? else {
            let names: Vec<&str> = self.repos.iter().map(|r| r.release.as_str()).collect();
            return Ok(vec![Op::Check(Check::new(
                "OS package repository",
                format!(
                    ": the repository of the release detect-os-release finds ({}) is uploaded to {REPO_ROOT}/<release>",
                    names.join(", ")
                ),
            ))]);
        };
        let mut ops = vec![Op::UploadTree(UploadTree {
            files: repo.files.clone(),
            dest: format!("{REPO_ROOT}/{}", repo.release),
        })];
        for (key, dest) in [(&repo.key_gpg, KEY_GPG), (&repo.key_asc, KEY_ASC)] {
            if let Some(k) = key {
                ops.push(Op::Upload(UploadFile {
                    source: crate::runner::UploadSource::File(k.source.clone()),
                    sha256: k.sha256.clone(),
                    dest: dest.to_string(),
                    mode: 0o644,
                }));
            }
        }
        let (text, dest) = match repo.family {
            Family::Deb => (apt_sources(&repo.release, &self.cluster), APT_SOURCES),
            Family::Rpm => (rpm_repo(&repo.release, &self.cluster), RPM_REPO_FILE),
        };
        ops.push(Op::Upload(UploadFile::bytes(
            text.into_bytes(),
            dest,
            0o644,
        )));
        Ok(ops)
    }
}

/// The delete side: the repository, the key, the source and KubeXM's apt lists are removed (the
/// packages installed from it stay).
pub struct OsRepoDeleteModule(pub Arc<InstallContext>);

/// The OS repository delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> OsRepoDeleteModule {
    OsRepoDeleteModule(ctx.clone())
}

impl Module for OsRepoDeleteModule {
    fn name(&self) -> &str {
        "delete-os-repository"
    }

    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let paths = [APT_SOURCES, RPM_REPO_FILE, REPO_ROOT, APT_STATE];
        let quoted: Vec<String> = paths.iter().map(|p| shell::quote(p)).collect();
        let exists: Vec<String> = quoted.iter().map(|p| format!("[ ! -e {p} ]")).collect();
        Ok(vec![Task::new("remove-os-repository", self.0.all()).step(
            Ops {
                name: "remove-os-repository",
                ops: vec![Op::Run(
                    RunCommand::new(format!(
                    "rm -rf -- {}\nrm -f -- {APT_SOURCES}.kubexm-orig {RPM_REPO_FILE}.kubexm-orig",
                    quoted.join(" ")
                ))
                    .unless(exists.join(" && ")),
                )],
            },
        )])
    }
}

#[cfg(test)]
mod tests {
    use super::{apt_sources, parse_release, rpm_repo};

    #[test]
    fn sources_name_the_key_and_never_trust_blindly() {
        let apt = apt_sources("debian-12", "lab");
        assert!(apt.starts_with("# Written by KubeXM"), "{apt}");
        assert!(apt.contains("URIs: file:///var/lib/kubexm/repos/debian-12\nSuites: ./\nSigned-By: /var/lib/kubexm/repos/kubexm-repo-key.gpg\n"));
        assert!(!apt.contains("trusted"));
        let rpm = rpm_repo("rocky-9", "lab");
        assert!(
            rpm.contains("repo_gpgcheck=1\n")
                && rpm.contains("gpgkey=file:///var/lib/kubexm/repos/kubexm-repo-key.asc")
        );
    }

    #[test]
    fn releases_are_learned_per_node() {
        assert_eq!(
            parse_release("osrelease.node1=debian-12\n").expect("parsed"),
            [("osrelease.node1".to_string(), "debian-12".to_string())]
        );
        assert!(parse_release("nothing\n").is_err());
    }
}
