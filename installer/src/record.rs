//! The installed cluster: what KubeXM last applied to a cluster, kept in the work directory so
//! the day-2 commands (`add-node`, `delete-node`, `etcd add-member|remove-member`) can diff the
//! user's edited cluster.yaml against it and plan from it.
//!
//! Layout, `WORK/clusters/<cluster>/` (0700, like the PKI kept beside it in `WORK/pki/<cluster>`):
//!
//! * `installed.json` (0600): [`Installed`] — the cluster.yaml and bundle last applied, when,
//!   the nodes in the cluster with their roles, and the history of operations with their result.
//! * `cluster-yaml/<sha256>.yaml` (0600): every cluster.yaml text an operation applied, byte for
//!   byte, named by its sha256 (never overwritten, so each history entry keeps its file).
//! * `cluster.yaml` (0600): a copy of the one applied last, for people.
//!
//! Every file is written to a temporary file in the same directory, synced and renamed, and
//! `installed.json` last: a crash leaves the previous record whole.
//!
//! **The nodes map is authoritative for membership**: a node listed in cluster.yaml but not in
//! the map is not in the cluster (e.g. `delete-node` removed it while the file still names
//! it), and a node's roles are the map's (`etcd add-member` gives one the etcd role). cluster.yaml
//! provides the hosts' definitions and the rest of the spec.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use kubexm_manifests::validate::{Roles, ValidCluster};

/// `WORK/clusters`.
pub const CLUSTERS_DIR: &str = "clusters";
/// The record's file name.
pub const RECORD_FILE: &str = "installed.json";
/// The people's copy of the cluster.yaml applied last.
pub const CLUSTER_FILE: &str = "cluster.yaml";
/// Directory of every applied cluster.yaml, by sha256.
pub const APPLIED_DIR: &str = "cluster-yaml";
/// Entries of the history kept (oldest dropped first).
pub const HISTORY_LIMIT: usize = 200;
const FORMAT_VERSION: u32 = 1;

/// Role names a node can hold (as [`crate::pipeline::Node::roles`] spells them).
pub const ROLES: [&str; 6] = [
    "etcd",
    "master",
    "worker",
    "registry",
    "loadbalancer",
    "nfs",
];

/// The record of one installed cluster (`installed.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Installed {
    /// Always 1.
    pub format_version: u32,
    /// The cluster name (`spec.kubernetes.clusterName`, else `metadata.name`).
    pub cluster: String,
    /// Whether the cluster exists: false once `delete` removed it.
    pub present: bool,
    /// sha256 of the cluster.yaml text applied last (`cluster-yaml/<sha256>.yaml`).
    pub cluster_yaml_sha256: String,
    /// Directory relative `privateKeyPath`/`passwordFile` entries of that file resolve against
    /// (the directory the file was read from).
    pub base_dir: PathBuf,
    /// Content digest of the bundle it was applied with (`WORK/bundles/<digest>`).
    pub bundle_digest: Option<String>,
    /// When it was applied (RFC 3339, UTC).
    pub applied_at: String,
    /// Nodes in the cluster and their roles (sorted role names).
    pub nodes: BTreeMap<String, Vec<String>>,
    /// Operations, oldest first.
    pub history: Vec<Operation>,
}

/// One operation on the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Operation {
    /// `install`, `add-node`, `delete-node`, `etcd add-member`, `etcd remove-member`, `delete`.
    pub operation: String,
    /// The nodes it concerned (all of them for install and delete).
    pub nodes: Vec<String>,
    /// Start (RFC 3339, UTC).
    pub started_at: String,
    /// End (RFC 3339, UTC).
    pub finished_at: String,
    /// Seconds it took.
    pub seconds: f64,
    /// Whether it succeeded.
    pub result: Outcome,
    /// Why it failed (redacted by the journal before it gets here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Notes (e.g. a forced drain, an unreachable node left as it was).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The cluster.yaml it applied (sha256).
    pub cluster_yaml_sha256: String,
    /// The bundle it applied.
    pub bundle_digest: Option<String>,
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It finished.
    Succeeded,
    /// It stopped with an error; the cluster record is unchanged.
    Failed,
}

/// The record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Reading or writing a file failed.
    #[error("Failed to {action} `{}`", path.display())]
    Io {
        /// `read`, `write`, `create`.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `installed.json` is not a record this version understands.
    #[error("`{}` is not a KubeXM cluster record ({message})", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The cluster.yaml a record names is missing or altered.
    #[error("`{}` does not hold the cluster.yaml the record names (sha256 {expected}): the work directory was altered; run `kubexm-install install` again with the cluster.yaml the cluster was installed with to record it anew", path.display())]
    Applied {
        /// The file.
        path: PathBuf,
        /// sha256 the record names.
        expected: String,
    },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> RecordError + 'a {
    move |source| RecordError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Now, RFC 3339 UTC.
pub fn now() -> String {
    crate::pipeline::journal::rfc3339(SystemTime::now())
}

/// sha256 hex of `text`.
pub fn sha256_hex(text: &[u8]) -> String {
    hex::encode(Sha256::digest(text))
}

/// The nodes of `cluster` with their roles, as the record keeps them.
pub fn membership(cluster: &ValidCluster) -> BTreeMap<String, Vec<String>> {
    crate::inventory::nodes(cluster)
        .into_iter()
        .map(|n| {
            let mut roles: Vec<String> = n.roles.iter().map(|r| r.as_str().to_string()).collect();
            roles.sort();
            (n.name, roles)
        })
        .collect()
}

/// `cluster` restricted to `nodes`: hosts not in the map are dropped, and every node's roles
/// are the map's (see the module documentation). Role names other than [`ROLES`] are ignored.
pub fn restrict(mut cluster: ValidCluster, nodes: &BTreeMap<String, Vec<String>>) -> ValidCluster {
    cluster
        .file
        .spec
        .hosts
        .retain(|h| nodes.contains_key(&h.name));
    let order: Vec<String> = cluster
        .file
        .spec
        .hosts
        .iter()
        .map(|h| h.name.clone())
        .collect();
    // Keep each role group's order (the first master is where the cluster was initialised);
    // nodes that gained a role go at the end of its group.
    let regroup = |old: &[String], role: &str| -> Vec<String> {
        let has = |n: &String| nodes.get(n).is_some_and(|r| r.iter().any(|x| x == role));
        let mut v: Vec<String> = old.iter().filter(|n| has(n)).cloned().collect();
        for n in &order {
            if has(n) && !v.contains(n) {
                v.push(n.clone());
            }
        }
        v
    };
    let r = &cluster.roles;
    cluster.roles = Roles {
        etcd: regroup(&r.etcd, "etcd"),
        master: regroup(&r.master, "master"),
        worker: regroup(&r.worker, "worker"),
        registry: regroup(&r.registry, "registry"),
        loadbalancer: regroup(&r.loadbalancer, "loadbalancer"),
        nfs: regroup(&r.nfs, "nfs"),
    };
    cluster
}

/// The records of a work directory.
#[derive(Debug, Clone)]
pub struct Records {
    root: PathBuf,
}

/// A loaded record with the cluster.yaml text it names.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The record.
    pub installed: Installed,
    /// The cluster.yaml text applied last.
    pub cluster_yaml: String,
    /// Its path in the work directory.
    pub cluster_yaml_path: PathBuf,
}

impl Records {
    /// The records under `WORK/clusters`.
    pub fn new(work_dir: &Path) -> Self {
        Self {
            root: work_dir.join(CLUSTERS_DIR),
        }
    }

    /// `WORK/clusters/<cluster>`.
    pub fn dir(&self, cluster: &str) -> PathBuf {
        self.root.join(cluster)
    }

    /// Names of the clusters with a record.
    pub fn clusters(&self) -> Result<Vec<String>, RecordError> {
        let mut v = Vec::new();
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(v),
            Err(e) => return Err(io("read", &self.root)(e)),
        };
        for e in entries {
            let e = e.map_err(io("read", &self.root))?;
            if e.path().join(RECORD_FILE).is_file() {
                v.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        v.sort();
        Ok(v)
    }

    /// The record of `cluster`, `None` when there is none.
    pub fn load(&self, cluster: &str) -> Result<Option<Loaded>, RecordError> {
        let dir = self.dir(cluster);
        let path = dir.join(RECORD_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("read", &path)(e)),
        };
        let installed: Installed =
            serde_json::from_slice(&bytes).map_err(|e| RecordError::Corrupt {
                path: path.clone(),
                message: e.to_string(),
            })?;
        if installed.format_version != FORMAT_VERSION {
            return Err(RecordError::Corrupt {
                path,
                message: format!(
                    "formatVersion {} (this kubexm-install reads {FORMAT_VERSION})",
                    installed.format_version
                ),
            });
        }
        if !kubexm_manifests::catalog::is_sha256_hex(&installed.cluster_yaml_sha256) {
            return Err(RecordError::Corrupt {
                path,
                message: "clusterYamlSha256 is not 64 hex digits".into(),
            });
        }
        let yaml_path = dir
            .join(APPLIED_DIR)
            .join(format!("{}.yaml", installed.cluster_yaml_sha256));
        let text = std::fs::read(&yaml_path).map_err(|_| RecordError::Applied {
            path: yaml_path.clone(),
            expected: installed.cluster_yaml_sha256.clone(),
        })?;
        if sha256_hex(&text) != installed.cluster_yaml_sha256 {
            return Err(RecordError::Applied {
                path: yaml_path,
                expected: installed.cluster_yaml_sha256.clone(),
            });
        }
        let cluster_yaml = String::from_utf8(text).map_err(|_| RecordError::Applied {
            path: yaml_path.clone(),
            expected: installed.cluster_yaml_sha256.clone(),
        })?;
        Ok(Some(Loaded {
            installed,
            cluster_yaml,
            cluster_yaml_path: yaml_path,
        }))
    }

    /// Records a finished operation. On success the cluster becomes `applied` (its cluster.yaml
    /// text, nodes and bundle); on failure only the history grows. Creates the record on the
    /// first success.
    pub fn finish(
        &self,
        cluster: &str,
        op: Operation,
        applied: Option<Applied<'_>>,
    ) -> Result<Installed, RecordError> {
        let dir = self.dir(cluster);
        private_dir(&dir)?;
        let previous = self.load(cluster)?.map(|l| l.installed);
        let mut rec = match (previous, &applied) {
            (Some(p), _) => p,
            (None, Some(a)) => Installed {
                format_version: FORMAT_VERSION,
                cluster: cluster.to_string(),
                present: true,
                cluster_yaml_sha256: String::new(),
                base_dir: a.base_dir.to_path_buf(),
                bundle_digest: None,
                applied_at: String::new(),
                nodes: BTreeMap::new(),
                history: Vec::new(),
            },
            // A failure before anything was ever recorded: nothing to keep.
            (None, None) => {
                return Ok(Installed {
                    format_version: FORMAT_VERSION,
                    cluster: cluster.to_string(),
                    present: false,
                    cluster_yaml_sha256: op.cluster_yaml_sha256.clone(),
                    base_dir: PathBuf::new(),
                    bundle_digest: op.bundle_digest.clone(),
                    applied_at: String::new(),
                    nodes: BTreeMap::new(),
                    history: vec![op],
                })
            }
        };
        if let Some(a) = applied {
            let sha = sha256_hex(a.cluster_yaml.as_bytes());
            let applied_dir = dir.join(APPLIED_DIR);
            private_dir(&applied_dir)?;
            write_atomic(
                &applied_dir.join(format!("{sha}.yaml")),
                a.cluster_yaml.as_bytes(),
            )?;
            rec.cluster_yaml_sha256 = sha;
            rec.base_dir = a.base_dir.to_path_buf();
            rec.bundle_digest = a.bundle_digest.map(str::to_string);
            rec.applied_at = op.finished_at.clone();
            rec.nodes = a.nodes;
            rec.present = a.present;
        }
        rec.history.push(op);
        if rec.history.len() > HISTORY_LIMIT {
            let drop = rec.history.len() - HISTORY_LIMIT;
            rec.history.drain(..drop);
        }
        let json = serde_json::to_vec_pretty(&rec).map_err(|e| RecordError::Corrupt {
            path: dir.join(RECORD_FILE),
            message: e.to_string(),
        })?;
        write_atomic(&dir.join(RECORD_FILE), &json)?;
        if let Ok(Some(l)) = self.load(cluster) {
            // The people's copy; the record above is what counts.
            let _ = write_atomic(&dir.join(CLUSTER_FILE), l.cluster_yaml.as_bytes());
        }
        Ok(rec)
    }
}

/// What a successful operation leaves installed.
#[derive(Debug, Clone)]
pub struct Applied<'a> {
    /// The cluster.yaml text.
    pub cluster_yaml: &'a str,
    /// Where its relative paths resolve.
    pub base_dir: &'a Path,
    /// The bundle's content digest.
    pub bundle_digest: Option<&'a str>,
    /// The nodes now in the cluster, with their roles.
    pub nodes: BTreeMap<String, Vec<String>>,
    /// False after `delete`.
    pub present: bool,
}

fn private_dir(dir: &Path) -> Result<(), RecordError> {
    crate::private_dir::ensure_private_dir(dir).map_err(io("create", dir))
}

fn write_atomic(path: &Path, content: &[u8]) -> Result<(), RecordError> {
    crate::private_dir::write_private_file(path, content, 0o600).map_err(io("write", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, result: Outcome) -> Operation {
        Operation {
            operation: name.into(),
            nodes: vec!["node1".into()],
            started_at: now(),
            finished_at: now(),
            seconds: 1.0,
            result,
            error: (result == Outcome::Failed).then(|| "boom".into()),
            notes: Vec::new(),
            cluster_yaml_sha256: sha256_hex(b"a: 1\n"),
            bundle_digest: None,
        }
    }

    fn nodes(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        list.iter()
            .map(|(n, r)| (n.to_string(), r.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn finish_records_success_then_failure_without_losing_the_applied_state() {
        use std::os::unix::fs::PermissionsExt as _;
        let work = tempfile::tempdir().expect("tempdir");
        let r = Records::new(work.path());
        assert!(r.load("lab").expect("load").is_none());
        // A failure before any success leaves nothing behind.
        r.finish("lab", op("install", Outcome::Failed), None)
            .expect("finish");
        assert!(r.load("lab").expect("load").is_none());
        let applied = Applied {
            cluster_yaml: "a: 1\n",
            base_dir: Path::new("/srv"),
            bundle_digest: Some("ab"),
            nodes: nodes(&[("node1", &["master"])]),
            present: true,
        };
        r.finish("lab", op("install", Outcome::Succeeded), Some(applied))
            .expect("finish");
        r.finish("lab", op("add-node", Outcome::Failed), None)
            .expect("finish");
        let l = r.load("lab").expect("load").expect("a record");
        assert_eq!(l.cluster_yaml, "a: 1\n");
        assert_eq!(l.installed.nodes, nodes(&[("node1", &["master"])]));
        assert_eq!(l.installed.history.len(), 2);
        assert_eq!(l.installed.history[1].result, Outcome::Failed);
        assert_eq!(l.installed.bundle_digest.as_deref(), Some("ab"));
        let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&r.dir("lab")), 0o700);
        assert_eq!(mode(&r.dir("lab").join(RECORD_FILE)), 0o600);
        assert_eq!(mode(&l.cluster_yaml_path), 0o600);
        assert_eq!(
            std::fs::read_to_string(r.dir("lab").join(CLUSTER_FILE)).expect("copy"),
            "a: 1\n"
        );
        assert_eq!(r.clusters().expect("clusters"), vec!["lab".to_string()]);
    }

    #[test]
    fn an_altered_cluster_yaml_is_refused_by_name() {
        let work = tempfile::tempdir().expect("tempdir");
        let r = Records::new(work.path());
        let applied = Applied {
            cluster_yaml: "a: 1\n",
            base_dir: Path::new("/srv"),
            bundle_digest: None,
            nodes: BTreeMap::new(),
            present: true,
        };
        r.finish("lab", op("install", Outcome::Succeeded), Some(applied))
            .expect("finish");
        let l = r.load("lab").expect("load").expect("record");
        std::fs::write(&l.cluster_yaml_path, "a: 2\n").expect("alter");
        let err = r.load("lab").expect_err("altered").to_string();
        assert!(err.contains(&l.installed.cluster_yaml_sha256), "{err}");
        std::fs::write(r.dir("lab").join(RECORD_FILE), "{}").expect("alter");
        let err = r.load("lab").expect_err("corrupt").to_string();
        assert!(err.contains("is not a KubeXM cluster record"), "{err}");
    }

    #[test]
    fn history_is_bounded() {
        let work = tempfile::tempdir().expect("tempdir");
        let r = Records::new(work.path());
        let applied = || Applied {
            cluster_yaml: "a: 1\n",
            base_dir: Path::new("/srv"),
            bundle_digest: None,
            nodes: BTreeMap::new(),
            present: true,
        };
        for _ in 0..HISTORY_LIMIT + 5 {
            r.finish("lab", op("add-node", Outcome::Succeeded), Some(applied()))
                .expect("finish");
        }
        let l = r.load("lab").expect("load").expect("record");
        assert_eq!(l.installed.history.len(), HISTORY_LIMIT);
    }
}
