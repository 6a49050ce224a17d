//! Modules `pre-install` and `post-install`: the operator's own shell scripts
//! (`spec.system.preInstall` / `postInstall`), on every node of the cluster.
//!
//! * **Where they come from**: `kubexm-build` bundles each listed script with its sha256
//!   (records `script/pre-install` / `script/post-install`, version = the script's two-digit
//!   position), so nothing is read from the control host's disk at install time.
//! * **Where they go**: `/etc/kubexm/scripts/pre_install_<host>.sh` (`post_install_<host>.sh`),
//!   mode 0755; with several scripts `pre_install_<host>-01.sh`, `-02.sh`, … in list order.
//! * **When they run**: `pre-install` right after preflight, before node preparation;
//!   `post-install` after the last module (addons), one script after the other in name (= list)
//!   order, every node in parallel. Each script gets `KUBEXM_CLUSTER`, `KUBEXM_NODE` (its name in
//!   cluster.yaml), `KUBEXM_ROLES` (comma-separated) and `KUBEXM_PHASE` in its environment.
//! * **Output**: the node's journal (`journalctl -t kubexm-pre-install` / `kubexm-post-install`)
//!   and `/var/log/kubexm/<script file name>.log` (root only, the last run).
//! * **Failure**: a non-zero exit stops the run; the error names the node (the engine adds it),
//!   the script (cluster.yaml entry and copy on the node) and the exit status, with the script's
//!   last output lines. The run can be repeated (`--resume`) once the script is fixed.
//! * **Re-runs**: a script runs again only when its content changed since it last succeeded on
//!   that node: `/etc/kubexm/scripts/.<file name>.sha256` holds the sum of the script that last
//!   exited 0. Scripts should still be written so that running them twice is harmless (a failed
//!   script runs again in full, and an edited script runs again on every node).
//! * **Removal**: the delete pipeline removes the copies, stamps and logs
//!   ([`ScriptsDeleteModule`]; `/etc/kubexm` goes with node preparation's delete anyway). What a
//!   script changed on a node is the script author's to undo.

use crate::script;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubexm_bundles::manifest::FileRecord;
use kubexm_manifests::resolve::ScriptPhase;

use super::delete::Ops;
use crate::context::InstallContext;
use crate::pipeline::ops::{CreateDir, Op, RunCommand, UploadFile};
use crate::pipeline::{Facts, Module, Node, Policy, Step, StepError, Task};
use crate::runner::{shell, UploadSource};

/// Where the scripts are copied on every node.
pub const SCRIPTS_DIR: &str = "/etc/kubexm/scripts";
/// Where each script's last output is kept on the node (root only).
pub const LOG_DIR: &str = "/var/log/kubexm";
/// The longest a script may run.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(1800);

/// `spec.system.preInstall`: before node preparation.
pub struct PreInstallModule(pub Arc<InstallContext>);

/// `spec.system.postInstall`: after the last module.
pub struct PostInstallModule(pub Arc<InstallContext>);

impl Module for PreInstallModule {
    fn name(&self) -> &str {
        "pre-install"
    }
    fn skip(&self) -> Option<String> {
        skip(&self.0, ScriptPhase::PreInstall)
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        tasks(&self.0, ScriptPhase::PreInstall)
    }
}

impl Module for PostInstallModule {
    fn name(&self) -> &str {
        "post-install"
    }
    fn skip(&self) -> Option<String> {
        skip(&self.0, ScriptPhase::PostInstall)
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        tasks(&self.0, ScriptPhase::PostInstall)
    }
}

fn listed(ctx: &InstallContext, phase: ScriptPhase) -> &[String] {
    let s = &ctx.cluster.file.spec.system;
    match phase {
        ScriptPhase::PreInstall => &s.pre_install,
        ScriptPhase::PostInstall => &s.post_install,
    }
}

fn skip(ctx: &InstallContext, phase: ScriptPhase) -> Option<String> {
    listed(ctx, phase)
        .is_empty()
        .then(|| format!("spec.system.{} is empty", phase.field()))
}

fn tasks(ctx: &Arc<InstallContext>, phase: ScriptPhase) -> Result<Vec<Task>, StepError> {
    let step = RunScripts::new(
        ctx.cluster.cluster_name(),
        phase,
        bundled_scripts(ctx, phase)?,
        ScriptDirs::default(),
    );
    Ok(vec![Task::new(phase.as_str(), ctx.all()).step(step)])
}

/// Where the scripts and their logs go on the nodes (tests point them at a temporary directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptDirs {
    /// The copies and their stamps ([`SCRIPTS_DIR`]).
    pub scripts: String,
    /// The last output of each ([`LOG_DIR`]).
    pub logs: String,
}

impl Default for ScriptDirs {
    fn default() -> Self {
        Self {
            scripts: SCRIPTS_DIR.to_string(),
            logs: LOG_DIR.to_string(),
        }
    }
}

/// One bundled script.
#[derive(Debug, Clone)]
pub struct Script {
    /// The cluster.yaml entry (`spec.system.postInstall[0]`) and its path there.
    pub entry: String,
    /// The bundle file on the control host.
    pub file: PathBuf,
    /// Its sha256.
    pub sha256: String,
}

/// The phase's scripts in run order: the bundle's records, or (planning without a bundle) the
/// resolver's entries, whose sums are not known yet. A listed script missing from the bundle is
/// an error naming it.
pub fn bundled_scripts(ctx: &InstallContext, phase: ScriptPhase) -> Result<Vec<Script>, StepError> {
    let listed = listed(ctx, phase);
    let entry = |i: usize| {
        format!(
            "spec.system.{}[{i}] `{}`",
            phase.field(),
            listed.get(i).map_or("", String::as_str)
        )
    };
    let Some(b) = &ctx.bundle else {
        let entries = ctx.resolution.as_ref().map_or(&[][..], |r| &r.scripts[..]);
        return Ok(entries
            .iter()
            .filter(|e| e.phase == phase)
            .map(|e| Script {
                entry: entry(e.position - 1),
                file: PathBuf::from(&e.path),
                sha256: String::new(),
            })
            .collect());
    };
    let name = phase.record_name();
    let mut records: Vec<&FileRecord> =
        b.manifest.files.iter().filter(|f| f.name == name).collect();
    records.sort_by(|a, b| a.version.cmp(&b.version));
    if records.len() != listed.len() {
        return Err(StepError::Invalid(format!(
            "cluster.yaml lists {} spec.system.{} scripts but the bundle has {}: rebuild the bundle with this cluster.yaml",
            listed.len(),
            phase.field(),
            records.len()
        )));
    }
    Ok(records
        .into_iter()
        .enumerate()
        .map(|(i, r)| Script {
            entry: entry(i),
            file: b.dir.join(&r.path),
            sha256: r.sha256.clone(),
        })
        .collect())
}

/// The file name of script `index` (from 0) of `count` on `node`: `post_install_<node>.sh`, or
/// `post_install_<node>-01.sh` … with several.
pub fn script_name(phase: ScriptPhase, node: &str, index: usize, count: usize) -> String {
    let stem = phase.as_str().replace('-', "_");
    if count == 1 {
        format!("{stem}_{node}.sh")
    } else {
        format!("{stem}_{node}-{:02}.sh", index + 1)
    }
}

/// Copies the phase's scripts to the node and runs them in order.
pub struct RunScripts {
    cluster: String,
    phase: ScriptPhase,
    scripts: Vec<Script>,
    dirs: ScriptDirs,
}

impl RunScripts {
    /// The step for `scripts` (in run order) of `phase`.
    pub fn new(cluster: &str, phase: ScriptPhase, scripts: Vec<Script>, dirs: ScriptDirs) -> Self {
        Self {
            cluster: cluster.to_string(),
            phase,
            scripts,
            dirs,
        }
    }

    /// The shell that runs one script copied to `path` and records its sum when it exits 0.
    fn runner(&self, node: &Node, script: &Script, path: &str, name: &str) -> shell::Script {
        let tag = format!("kubexm-{}", self.phase.as_str());
        let log_dir = shell::quoted(&self.dirs.logs);
        let log = shell::quoted(&format!("{}/{name}.log", self.dirs.logs));
        let stamp = shell::quoted(&format!("{}/.{name}.sha256", self.dirs.scripts));
        let path_q = shell::quoted(path);
        let what = shell::quoted(&format!(
            "{} (copied to {path})",
            script.entry.replace(['\n', '\r'], " ")
        ));
        crate::script!(
            "# {entry} on {name_of_node}\nmkdir -p {log_dir} && chmod 0700 {log_dir}\numask 077\nif KUBEXM_CLUSTER={cluster} KUBEXM_NODE={node} KUBEXM_ROLES={roles} KUBEXM_PHASE={phase} {path_q} </dev/null >{log} 2>&1; then rc=0; else rc=$?; fi\nif command -v systemd-cat >/dev/null 2>&1; then systemd-cat -t {tag} <{log} || true; fi\nif [ \"$rc\" -ne 0 ]; then\n  echo \"script \"{what}\" exited with status $rc; its last output lines (all of them: journalctl -t {tag}, or {log_dq}):\" >&2\n  tail -n 20 {log} >&2\n  exit \"$rc\"\nfi\necho {sum} >{stamp}",
            entry = shell::comment(&script.entry),
            name_of_node = shell::comment(&node.name),
            log_dir = log_dir,
            path_q = path_q,
            log = log,
            tag = shell::in_double_quotes(&tag),
            log_dq = shell::in_double_quotes(&format!("{}/{name}.log", self.dirs.logs)),
            what = what,
            stamp = stamp,
            cluster = shell::quoted(&self.cluster),
            node = shell::quoted(&node.name),
            roles = shell::quoted(
                &node
                    .roles
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            phase = self.phase.as_str(),
            sum = shell::quoted(&script.sha256),
        )
    }
}

impl Step for RunScripts {
    fn name(&self) -> &str {
        match self.phase {
            ScriptPhase::PreInstall => "run-pre-install-scripts",
            ScriptPhase::PostInstall => "run-post-install-scripts",
        }
    }
    fn ops(&self, node: &Node, _: &Facts) -> Result<Vec<Op>, StepError> {
        let mut ops = vec![Op::Mkdir(CreateDir {
            path: self.dirs.scripts.clone(),
            mode: 0o700,
        })];
        let count = self.scripts.len();
        for (i, s) in self.scripts.iter().enumerate() {
            let name = script_name(self.phase, &node.name, i, count);
            let path = format!("{}/{name}", self.dirs.scripts);
            let stamp = shell::quoted(&format!("{}/.{name}.sha256", self.dirs.scripts));
            ops.push(Op::Upload(UploadFile {
                source: UploadSource::File(s.file.clone()),
                sha256: s.sha256.clone(),
                dest: path.clone(),
                mode: 0o755,
            }));
            let done = crate::script!(
                "[ \"$(cat {stamp} 2>/dev/null)\" = {sum} ]",
                stamp = stamp,
                sum = s.sha256
            );
            ops.push(Op::Run(
                RunCommand::new(self.runner(node, s, &path, &name))
                    .unless(done.clone())
                    .verify(done)
                    .undo(script!("rm -f {stamp}", stamp = stamp))
                    .timeout(SCRIPT_TIMEOUT),
            ));
        }
        Ok(ops)
    }
    fn policy(&self) -> Policy {
        // A script is not retried: it may not be safe to run twice in a row after a failure.
        Policy {
            timeout: SCRIPT_TIMEOUT * 2,
            attempts: 1,
            retry_delay: Duration::from_secs(0),
        }
    }
}

/// The scripts' part of the `delete` pipeline on every node: the copies, their stamps and logs.
pub struct ScriptsDeleteModule(pub Arc<InstallContext>);

/// Done when the copies and `logs` are gone and the log directory too (or it holds files
/// that are not KubeXM's). (It once ended in `; true`, so a node that still had the copies
/// counted as done and kept its logs.)
pub fn removed_check(logs: &str) -> shell::Script {
    crate::script!(
        "[ ! -e {SCRIPTS_DIR} ] && [ -z \"$(ls -d {logs} 2>/dev/null)\" ] && {{ [ ! -d {LOG_DIR} ] || [ -n \"$(ls -A {LOG_DIR} 2>/dev/null)\" ]; }}",
        logs = shell::globs(logs)
    )
}

/// The scripts delete module.
pub fn delete_module(ctx: &Arc<InstallContext>) -> ScriptsDeleteModule {
    ScriptsDeleteModule(ctx.clone())
}

impl Module for ScriptsDeleteModule {
    fn name(&self) -> &str {
        "delete-scripts"
    }
    fn skip(&self) -> Option<String> {
        let s = &self.0.cluster.file.spec.system;
        (s.pre_install.is_empty() && s.post_install.is_empty())
            .then(|| "spec.system.preInstall and postInstall are empty".to_string())
    }
    fn tasks(&self) -> Result<Vec<Task>, StepError> {
        let logs = format!("{LOG_DIR}/pre_install_*.log {LOG_DIR}/post_install_*.log");
        Ok(vec![Task::new("delete-scripts", self.0.all()).step(Ops {
            name: "remove-scripts",
            ops: vec![Op::Run(
                RunCommand::new(script!(
                    "rm -rf -- {SCRIPTS_DIR}\nrm -f -- {logs}\nrmdir {LOG_DIR} 2>/dev/null || true",
                    logs = shell::globs(&logs)
                ))
                .unless(removed_check(&logs)),
            )],
        })])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The delete check, run with `sh` against a scratch directory standing for / .
    fn removed(root: &std::path::Path) -> bool {
        let r = root.to_str().expect("utf-8");
        let logs = format!("{LOG_DIR}/pre_install_*.log {LOG_DIR}/post_install_*.log");
        let check = removed_check(&logs)
            .replace(SCRIPTS_DIR, &format!("{r}{SCRIPTS_DIR}"))
            .replace(LOG_DIR, &format!("{r}{LOG_DIR}"));
        std::process::Command::new("sh")
            .args(["-c", &check])
            .status()
            .expect("sh")
            .success()
    }

    #[test]
    fn the_delete_check_sees_copies_logs_and_the_log_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        let scripts = r.join(SCRIPTS_DIR.trim_start_matches('/'));
        let logs = r.join(LOG_DIR.trim_start_matches('/'));
        std::fs::create_dir_all(&scripts).expect("mkdir");
        std::fs::create_dir_all(&logs).expect("mkdir");
        std::fs::write(logs.join("post_install_node2.sh.log"), "ok").expect("write");
        assert!(!removed(r), "copies and a log left");
        std::fs::remove_dir_all(&scripts).expect("rm");
        assert!(!removed(r), "a log left");
        std::fs::remove_file(logs.join("post_install_node2.sh.log")).expect("rm");
        assert!(!removed(r), "the empty log directory left");
        std::fs::write(logs.join("someone-else.log"), "x").expect("write");
        assert!(removed(r), "a log directory with other files stays");
        std::fs::remove_dir_all(&logs).expect("rm");
        assert!(removed(r), "all gone");
    }

    #[test]
    fn script_names_number_several_scripts_in_list_order() {
        assert_eq!(
            script_name(ScriptPhase::PostInstall, "node1", 0, 1),
            "post_install_node1.sh"
        );
        assert_eq!(
            script_name(ScriptPhase::PreInstall, "node2", 1, 3),
            "pre_install_node2-02.sh"
        );
    }
}
