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

use crate::runner::shell::Script;
use crate::script;
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

/// Fact keys of a node's `/etc/os-release` `ID` and `VERSION_ID`.
fn fact_keys(node: &str) -> (String, String) {
    (format!("os.{node}.id"), format!("os.{node}.version"))
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
            Task::new("detect-os-release", self.0.all()).step(DetectOsRelease),
            Task::new("install-os-repository", self.0.all()).step(InstallOsRepo { repos, cluster }),
        ])
    }
}

/// Learns the node's `/etc/os-release` `ID` and `VERSION_ID` (the next step picks the
/// repository and refuses a release the bundle has none for).
struct DetectOsRelease;

/// Longest `ID` / `VERSION_ID` accepted from a node.
const MAX_OS_FIELD: usize = 64;

/// `os.<node>.id=<ID>` / `os.<node>.version=<VERSION_ID>` lines into facts. The node's output is
/// untrusted: only those two keys, each value short and of `[A-Za-z0-9._-]` (what os-release(5)
/// allows), else the node is refused without quoting what it printed.
fn parse_release(out: &str) -> Result<Vec<(String, String)>, String> {
    let mut found = Vec::new();
    for (k, v) in out.lines().filter_map(|l| l.trim().split_once('=')) {
        if !(k.starts_with("os.") && (k.ends_with(".id") || k.ends_with(".version"))) {
            continue;
        }
        if v.is_empty()
            || v.len() > MAX_OS_FIELD
            || !v
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(format!(
                "/etc/os-release has an ID or VERSION_ID that is empty, longer than {MAX_OS_FIELD} characters or not made of [A-Za-z0-9._-]"
            ));
        }
        found.push((k.to_string(), v.to_string()));
    }
    if found.len() == 2 {
        Ok(found)
    } else {
        Err("/etc/os-release did not give both ID and VERSION_ID".to_string())
    }
}

impl DetectOsRelease {
    fn script(node: &Node) -> String {
        let (id, version) = fact_keys(&node.name);
        format!(
            "[ -r /etc/os-release ] || {{ echo '/etc/os-release is missing: cannot tell which OS package repository this node needs' >&2; exit 1; }}\n\
             . /etc/os-release\n\
             printf '%s=%s\\n' {} \"${{ID:-}}\" {} \"${{VERSION_ID:-}}\"",
            shell::quoted(&id),
            shell::quoted(&version),
        )
    }
}

impl Step for DetectOsRelease {
    fn name(&self) -> &str {
        "detect-os-release"
    }
    fn ops(&self, node: &Node, facts: &Facts) -> Result<Vec<Op>, StepError> {
        Ok(vec![Op::Learn(LearnFacts {
            what: "OS release (/etc/os-release)".into(),
            script: Self::script(node),
            parse: parse_release,
            facts: facts.clone(),
            prefix: String::new(),
            timeout: Duration::from_secs(30),
        })])
    }
}

/// The repository of the bundle for a node running `id` `version` (`VERSION_ID` equal to the
/// release's, or a point release of it: `12.4` for `12`).
fn repo_matching<'a>(repos: &'a [Repo], id: &str, version: &str) -> Option<&'a Repo> {
    repos.iter().find(|r| {
        r.os_id == id
            && (r.version_id == version
                || version
                    .strip_prefix(r.version_id.as_str())
                    .is_some_and(|rest| rest.starts_with('.')))
    })
}

/// The error for a node whose release the bundle has no repository for.
fn no_repository(node: &str, id: &str, version: &str, repos: &[Repo]) -> StepError {
    let offered: Vec<String> = repos
        .iter()
        .map(|r| format!("{} ({} {})", r.release, r.os_id, r.version_id))
        .collect();
    StepError::Invalid(format!(
        "node {node} runs {id} {version}, and the bundle carries OS packages only for {}: add the node's release (the catalog's osReleases name for {id} {version}, e.g. `{id}-{major}`) to spec.system.osReleases in cluster.yaml and build the bundle again with `kubexm-build bundle`",
        if offered.is_empty() { "no release".to_string() } else { offered.join(", ") },
        major = version.split('.').next().unwrap_or(version),
    ))
}

/// Uploads the node's repository and key and writes the source naming them.
struct InstallOsRepo {
    repos: Arc<Vec<Repo>>,
    cluster: String,
}

impl InstallOsRepo {
    /// The node's repository: by its learned release, else (planning) the only one.
    fn repo_for(&self, node: &Node, facts: &Facts) -> Result<Option<&Repo>, StepError> {
        let (id_key, version_key) = fact_keys(&node.name);
        match (facts.get(&id_key), facts.get(&version_key)) {
            (Some(id), Some(version)) => repo_matching(&self.repos, &id, &version)
                .map(Some)
                .ok_or_else(|| no_repository(&node.name, &id, &version, &self.repos)),
            _ if facts.is_planning() && self.repos.len() == 1 => Ok(self.repos.first()),
            _ if facts.is_planning() => Ok(None),
            _ => Err(StepError::Invalid(format!(
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
        let exists = Script::join(paths.iter().map(|p| script!("[ ! -e {p} ]", p = p)), " && ");
        Ok(vec![Task::new("remove-os-repository", self.0.all()).step(
            Ops {
                name: "remove-os-repository",
                ops: vec![Op::Run(
                    RunCommand::new(script!("rm -rf -- {}", shell::words(paths))).unless(exists),
                )],
            },
        )])
    }
}

#[cfg(test)]
mod tests {
    use super::{apt_sources, no_repository, parse_release, repo_matching, rpm_repo, Repo};
    use kubexm_manifests::osrelease::Family;

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
    fn releases_are_learned_per_node_and_hostile_output_is_refused() {
        assert_eq!(
            parse_release("noise\nos.node1.id=debian\nos.node1.version=12\n").expect("parsed"),
            [
                ("os.node1.id".to_string(), "debian".to_string()),
                ("os.node1.version".to_string(), "12".to_string())
            ]
        );
        assert!(parse_release("nothing\n").is_err());
        assert!(parse_release("os.node1.id=debian\n").is_err());
        let hostile = parse_release("os.node1.id=deb\u{1b}[2Jian\nos.node1.version=12\n")
            .expect_err("refused");
        assert!(!hostile.contains('\u{1b}'), "{hostile}");
        assert!(parse_release(&format!(
            "os.n.id=debian\nos.n.version={}\n",
            "1".repeat(65)
        ))
        .is_err());
    }

    #[test]
    fn a_release_matches_its_point_releases_only() {
        let repo = |release: &str, id: &str, v: &str| Repo {
            release: release.into(),
            family: Family::Deb,
            os_id: id.into(),
            version_id: v.into(),
            files: Vec::new(),
            key_asc: None,
            key_gpg: None,
        };
        let repos = [
            repo("debian-12", "debian", "12"),
            repo("ubuntu-22.04", "ubuntu", "22.04"),
        ];
        let name = |id, v| repo_matching(&repos, id, v).map(|r| r.release.as_str());
        assert_eq!(name("debian", "12"), Some("debian-12"));
        assert_eq!(name("debian", "12.4"), Some("debian-12"));
        assert_eq!(name("debian", "120"), None);
        assert_eq!(name("debian", "11"), None);
        assert_eq!(name("ubuntu", "22.04"), Some("ubuntu-22.04"));
        let err = no_repository("node3", "debian", "11", &repos).to_string();
        for want in [
            "node3",
            "debian 11",
            "debian-12 (debian 12)",
            "spec.system.osReleases",
            "kubexm-build bundle",
            "`debian-11`",
        ] {
            assert!(err.contains(want), "{want}: {err}");
        }
    }
}
