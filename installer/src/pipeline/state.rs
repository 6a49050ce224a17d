//! The resume state file: which task finished on which node, with a hash of its inputs.
//!
//! Written atomically (temp file + rename) after every task on every node. `--resume` skips an
//! entry only while its inputs hash matches, so a changed cluster.yaml, bundle or template re-runs
//! exactly the affected tasks.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ops::OpPlan;

/// Errors reading or writing the state file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing failed.
    #[error("state file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a state file this version understands.
    #[error(
        "state file {path} is unreadable ({message}); delete it to start over without --resume"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
}

/// One completed task on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    /// Hash of the task's inputs on that node.
    pub inputs: String,
    /// Unix seconds when it completed.
    pub at: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Document {
    #[serde(rename = "formatVersion")]
    format_version: u32,
    pipeline: String,
    /// `module/task` → node → entry.
    tasks: BTreeMap<String, BTreeMap<String, Done>>,
}

/// The state of one pipeline for one cluster.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    doc: Document,
}

impl StateFile {
    /// Opens (or starts) the state at `path`. Without `resume` the previous content is ignored
    /// (and overwritten as tasks complete).
    pub fn open(path: &Path, pipeline: &str, resume: bool) -> Result<Self, StateError> {
        let mut doc = Document {
            format_version: 1,
            pipeline: pipeline.to_string(),
            tasks: BTreeMap::new(),
        };
        if resume {
            match std::fs::read(path) {
                Ok(bytes) => {
                    let old: Document =
                        serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
                            path: path.to_path_buf(),
                            message: e.to_string(),
                        })?;
                    if old.format_version == 1 && old.pipeline == pipeline {
                        doc.tasks = old.tasks;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(StateError::Io {
                        path: path.to_path_buf(),
                        source,
                    })
                }
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            doc,
        })
    }

    /// Whether `task` completed on `node` with the same inputs.
    pub fn is_done(&self, task: &str, node: &str, inputs: &str) -> bool {
        self.doc
            .tasks
            .get(task)
            .and_then(|m| m.get(node))
            .is_some_and(|d| d.inputs == inputs)
    }

    /// Records a completion and writes the file.
    pub fn record(&mut self, task: &str, node: &str, inputs: &str) -> Result<(), StateError> {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.doc.tasks.entry(task.to_string()).or_default().insert(
            node.to_string(),
            Done {
                inputs: inputs.to_string(),
                at,
            },
        );
        self.save()
    }

    /// Forgets `task` on `node` (it failed or was rolled back).
    pub fn forget(&mut self, task: &str, node: &str) -> Result<(), StateError> {
        let removed = self
            .doc
            .tasks
            .get_mut(task)
            .and_then(|m| m.remove(node))
            .is_some();
        if removed {
            self.save()?;
        }
        Ok(())
    }

    /// Number of recorded (task, node) entries.
    pub fn len(&self) -> usize {
        self.doc.tasks.values().map(BTreeMap::len).sum()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn save(&self) -> Result<(), StateError> {
        let io = |source| StateError::Io {
            path: self.path.clone(),
            source,
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        let json =
            serde_json::to_vec_pretty(&self.doc).map_err(|e| io(std::io::Error::other(e)))?;
        tmp.write_all(&json).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&self.path).map_err(|e| io(e.error))?;
        Ok(())
    }
}

/// Hash of everything that decides what a task does on a node: its steps and their generic
/// steps' plan lines (commands, destinations, content digests).
pub fn inputs_hash(task: &str, steps: &[(String, Vec<OpPlan>)]) -> String {
    let mut h = Sha256::new();
    h.update(task.as_bytes());
    for (name, ops) in steps {
        h.update(b"\0step\0");
        h.update(name.as_bytes());
        for op in ops {
            h.update(b"\0");
            h.update(op.kind.as_bytes());
            h.update(b"\0");
            h.update(op.detail.as_bytes());
            h.update(b"\0");
            h.update(op.input.as_deref().unwrap_or("").as_bytes());
        }
    }
    hex::encode(h.finalize())
}
