//! The product's binaries: built once ([`Tools`]), `kubexm-install` run in the lab's namespace
//! with the lab's work directory ([`Kubexm`]), its record and journal read as typed JSON.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::command::{check, describe, Output};
use crate::json::{Event, Installed, Status, VerifyReport};
use crate::Lab;

/// `kubexm-build` and `kubexm-install`, built from this repository.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The directory holding both binaries.
    pub bin: PathBuf,
}

impl Tools {
    /// `cargo build -p kubexm-build -p kubexm-install` (quick when they are up to date), or the
    /// binaries in `$KUBEXM_LAB_BIN` when set.
    ///
    /// # Panics
    /// When the build fails.
    #[must_use]
    pub fn build() -> Tools {
        if let Some(bin) = std::env::var_os("KUBEXM_LAB_BIN") {
            return Tools { bin: bin.into() };
        }
        let repo = crate::repo_root();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let _ = Output::run(Command::new(cargo).current_dir(&repo).args([
            "build",
            "-q",
            "-p",
            "kubexm-build",
            "-p",
            "kubexm-install",
        ]))
        .ok("cargo build kubexm-build and kubexm-install");
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo.join("target"), PathBuf::from);
        Tools {
            bin: target.join("debug"),
        }
    }

    /// `kubexm-build`.
    #[must_use]
    pub fn build_bin(&self) -> PathBuf {
        self.bin.join("kubexm-build")
    }

    /// `kubexm-install`.
    #[must_use]
    pub fn install_bin(&self) -> PathBuf {
        self.bin.join("kubexm-install")
    }
}

/// `kubexm-install` for one lab cluster: run in the lab's namespace, with the work directory,
/// the lab's `known_hosts` and the sudo user's password (`KUBEXM_LAB_PASSWORD`).
#[derive(Debug)]
pub struct Kubexm<'a> {
    lab: &'a Lab,
    bin: PathBuf,
    /// `--work-dir`.
    pub work: PathBuf,
    /// The bundle `install` and `delete` are given.
    pub bundle: PathBuf,
    /// The cluster.yaml `install` and `delete` are given.
    pub cluster: PathBuf,
}

/// A `kubexm-install` still running (see [`Kubexm::spawn`]).
#[derive(Debug)]
pub struct Running {
    command: String,
    child: Child,
}

impl Running {
    /// Its process id (`kubexm-install`'s own: `ip netns exec` and `env` exec it).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL (no chance to clean up, as a crash or a power cut) and returns what
    /// it printed until then.
    ///
    /// # Panics
    /// When the process is not `kubexm-install` (it ended already) or cannot be killed.
    #[must_use]
    pub fn kill(mut self) -> Output {
        let comm =
            fs_err::read_to_string(format!("/proc/{}/comm", self.child.id())).unwrap_or_default();
        check(
            comm.trim() == "kubexm-install",
            "the process to kill is kubexm-install, still running",
            &format!("/proc/{}/comm: {comm:?}", self.child.id()),
        );
        self.child
            .kill()
            .unwrap_or_else(|e| panic!("SIGKILL `{}`: {e}", self.command));
        self.finish()
    }

    /// Waits for its end.
    ///
    /// # Panics
    /// When it cannot be waited for.
    #[must_use]
    pub fn finish(self) -> Output {
        let out = self
            .child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("wait for `{}`: {e}", self.command));
        Output {
            command: self.command,
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl<'a> Kubexm<'a> {
    /// `kubexm-install` of `tools` for `lab`, its work directory `work`.
    #[must_use]
    pub fn new(lab: &'a Lab, tools: &Tools, work: &Path, bundle: &Path, cluster: &Path) -> Self {
        Kubexm {
            lab,
            bin: tools.install_bin(),
            work: work.to_path_buf(),
            bundle: bundle.to_path_buf(),
            cluster: cluster.to_path_buf(),
        }
    }

    /// The same runner with another cluster.yaml for `install` and `delete`.
    #[must_use]
    pub fn with_cluster(&self, cluster: &Path) -> Kubexm<'a> {
        Kubexm {
            lab: self.lab,
            bin: self.bin.clone(),
            work: self.work.clone(),
            bundle: self.bundle.clone(),
            cluster: cluster.to_path_buf(),
        }
    }

    /// `kubexm-install --work-dir WORK ARGS --known-hosts KNOWN_HOSTS` in the lab namespace.
    #[must_use]
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> Command {
        let mut c = self.lab.command("env");
        c.arg(format!(
            "KUBEXM_LAB_PASSWORD={}",
            self.lab.env().user_password
        ))
        .arg(&self.bin)
        .arg("--work-dir")
        .arg(&self.work)
        .args(args)
        .arg("--known-hosts")
        .arg(&self.lab.env().known_hosts);
        c
    }

    /// Runs `kubexm-install ARGS` (a verb and its flags) to its end.
    #[must_use]
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Output {
        Output::run(&mut self.command(args))
    }

    /// Starts `kubexm-install ARGS` and returns at once.
    ///
    /// # Panics
    /// When it cannot be started.
    #[must_use]
    pub fn spawn<S: AsRef<OsStr>>(&self, args: &[S]) -> Running {
        let mut c = self.command(args);
        let command = describe(&c);
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
        Running { command, child }
    }

    fn with_bundle(&self, verb: Option<&str>, extra: &[&str]) -> Vec<std::ffi::OsString> {
        let mut v: Vec<std::ffi::OsString> = verb.into_iter().map(Into::into).collect();
        v.extend([
            "--bundle".into(),
            self.bundle.clone().into_os_string(),
            "-f".into(),
            self.cluster.clone().into_os_string(),
        ]);
        v.extend(extra.iter().map(Into::into));
        v
    }

    /// `kubexm-install --bundle BUNDLE -f CLUSTER --no-verify EXTRA` (an install).
    ///
    /// `--no-verify`: an install ends with `verify-cluster`'s checks by default, and they cannot
    /// pass on a lab cluster with STAND-INs on their path (the stand-in kubelets and kubectl
    /// run no pod; the REAL labs' NodeLocal DNS and busybox probe image are stand-ins): every
    /// lab install skips them, and a lab that checks them runs `verify-cluster` itself or
    /// installs with [`Kubexm::install_verifying`].
    #[must_use]
    pub fn install(&self, extra: &[&str]) -> Output {
        self.run(&self.with_bundle(None, &no_verify(extra)))
    }

    /// The install as an operator runs it, ending with `verify-cluster`'s checks (no
    /// `--no-verify`): `kubexm-install --bundle BUNDLE -f CLUSTER EXTRA`.
    #[must_use]
    pub fn install_verifying(&self, extra: &[&str]) -> Output {
        self.run(&self.with_bundle(None, extra))
    }

    /// The install ([`Kubexm::install`], `--no-verify`), started in the background.
    #[must_use]
    pub fn spawn_install(&self, extra: &[&str]) -> Running {
        self.spawn(&self.with_bundle(None, &no_verify(extra)))
    }

    /// `kubexm-install delete --bundle BUNDLE -f CLUSTER EXTRA`.
    #[must_use]
    pub fn delete(&self, extra: &[&str]) -> Output {
        self.run(&self.with_bundle(Some("delete"), extra))
    }

    /// `kubexm-install status -o json`: the output and the parsed report.
    #[must_use]
    pub fn status_json(&self) -> (Output, Status) {
        let out = self.run(&["status", "-o", "json"]);
        let status = out.json();
        (out, status)
    }

    /// `WORK/clusters/NAME`.
    #[must_use]
    pub fn record_dir(&self) -> PathBuf {
        self.work.join("clusters").join(self.lab.name())
    }

    /// `WORK/pki/NAME`.
    #[must_use]
    pub fn pki(&self) -> PathBuf {
        self.work.join("pki").join(self.lab.name())
    }

    /// The installed-cluster record.
    ///
    /// # Panics
    /// When it cannot be read or parsed.
    #[must_use]
    pub fn record(&self) -> Installed {
        let path = self.record_dir().join("installed.json");
        let text = fs_err::read_to_string(&path).expect("read the installed-cluster record");
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a record ({e})\n{text}", path.display()))
    }

    /// The runs' directories (`WORK/runs/*`), oldest first.
    #[must_use]
    pub fn runs(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs_err::read_dir(self.work.join("runs"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The verification that ended the latest run (`WORK/runs/<id>/verify.json`, what
    /// `verify-cluster -o json` prints): `None` when that run did not verify (`--no-verify`, a
    /// failed pipeline) or there is no run.
    ///
    /// # Panics
    /// When the file is there but is not a report.
    #[must_use]
    pub fn last_verify(&self) -> Option<VerifyReport> {
        let path = self.runs().last()?.join("verify.json");
        let text = fs_err::read_to_string(&path).ok()?;
        Some(
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not a report ({e})\n{text}", path.display())),
        )
    }

    /// The events of the latest run (none when there is none or its journal is unreadable).
    #[must_use]
    pub fn last_events(&self) -> Vec<Event> {
        self.runs()
            .last()
            .map(|r| events(&r.join("events.jsonl")))
            .unwrap_or_default()
    }

    /// Waits until a run newer than the first `runs_before` has an event matching `pred`.
    #[must_use]
    pub fn wait_for_event(
        &self,
        runs_before: usize,
        timeout: Duration,
        pred: impl Fn(&Event) -> bool,
    ) -> bool {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if self.runs().len() > runs_before && self.last_events().iter().any(&pred) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// What the latest run did, counted from its journal.
    #[must_use]
    pub fn last_summary(&self) -> Summary {
        Summary::of(&self.last_events())
    }

    /// The journal's last `n` events, one line each (evidence for a failure).
    #[must_use]
    pub fn journal_tail(&self, n: usize) -> String {
        let ev = self.last_events();
        let mut s = format!("--- journal: last {n} events of the latest run\n");
        for e in ev.iter().skip(ev.len().saturating_sub(n)) {
            s.push_str(&format!(
                "{} {}/{}/{} {} {}\n",
                e.event,
                e.module.as_deref().unwrap_or("-"),
                e.task.as_deref().unwrap_or("-"),
                e.step.as_deref().unwrap_or("-"),
                e.node.as_deref().unwrap_or("-"),
                e.message
            ));
        }
        s
    }

    /// `out` when it succeeded; else fails with it and the journal's tail.
    ///
    /// # Panics
    /// When `out` failed.
    #[must_use]
    #[track_caller]
    pub fn ok(&self, out: Output, what: &str) -> Output {
        self.ok_with(out, what, &"")
    }

    /// As [`Kubexm::ok`], with more evidence shown after the journal's tail when it failed
    /// (e.g. a unit's journal on a node, [`crate::nodes::UnitJournal`]).
    ///
    /// # Panics
    /// When `out` failed.
    #[must_use]
    #[track_caller]
    pub fn ok_with(&self, out: Output, what: &str, more: &dyn std::fmt::Display) -> Output {
        if !out.success() {
            check(
                false,
                what,
                &format!("{out}{}{more}", self.journal_tail(25)),
            );
        }
        out
    }
}

impl Kubexm<'_> {
    /// Every file `kubexm-install` keeps in the work directory is whole: each `*.json` parses,
    /// each line of each `*.jsonl` (journals) parses, and no temporary or partial file is left
    /// (`.tmp*`, `*.tmp`, `*.kubexm-part`). The bundles' unpacked contents and the build cache
    /// are not walked. Returns how many files were read.
    ///
    /// # Panics
    /// With every file that is not whole.
    #[track_caller]
    pub fn check_work_dir_whole(&self) -> usize {
        let (read, bad) = work_dir_problems(&self.work);
        check(
            bad.is_empty(),
            "every journal, state and record file in the work directory is whole",
            &bad.join("\n"),
        );
        read
    }
}

/// `extra` with `--no-verify` in front (see [`Kubexm::install`]).
fn no_verify<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    std::iter::once("--no-verify")
        .chain(extra.iter().copied())
        .collect()
}

/// The files read and the problems found under `work` (see [`Kubexm::check_work_dir_whole`]).
#[must_use]
pub fn work_dir_problems(work: &Path) -> (usize, Vec<String>) {
    let mut bad = Vec::new();
    let mut read = 0;
    let mut stack = vec![work.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs_err::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp") || name.ends_with(".tmp") || name.ends_with(".kubexm-part")
            {
                bad.push(format!("{}: a temporary file left behind", path.display()));
                continue;
            }
            if path.is_dir() {
                // Not the build cache, nor a bundle's unpacked contents (bundles/DIGEST/).
                let in_bundles = dir.file_name().is_some_and(|d| d == "bundles");
                let cache = dir == work && name == "cache";
                if !(in_bundles || cache) {
                    stack.push(path);
                }
                continue;
            }
            let Some(kind) = path.extension().and_then(|x| x.to_str()) else {
                continue;
            };
            if kind != "json" && kind != "jsonl" {
                continue;
            }
            read += 1;
            let text = match fs_err::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    bad.push(format!("{e}"));
                    continue;
                }
            };
            if kind == "json" {
                if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
                    bad.push(format!("{}: not JSON ({e})", path.display()));
                }
            } else {
                if !text.is_empty() && !text.ends_with('\n') {
                    bad.push(format!("{}: the last line is cut short", path.display()));
                }
                for (i, l) in text.lines().enumerate() {
                    if let Err(e) = serde_json::from_str::<serde_json::Value>(l) {
                        bad.push(format!("{}:{}: not JSON ({e}): {l}", path.display(), i + 1));
                    }
                }
            }
        }
    }
    (read, bad)
}

/// What a run did, from its journal (the counts the run's summary line prints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Steps that changed something (`StepSucceeded` "changed").
    pub changed: usize,
    /// Tasks skipped as done in an earlier run (`--resume`).
    pub resumed: usize,
    /// Whether the pipeline succeeded.
    pub succeeded: bool,
}

impl Summary {
    /// Counts `events`.
    #[must_use]
    pub fn of(events: &[Event]) -> Summary {
        Summary {
            changed: events
                .iter()
                .filter(|e| e.event == "StepSucceeded" && e.message == "changed")
                .count(),
            resumed: events
                .iter()
                .filter(|e| e.event == "TaskSkipped" && e.message.contains("earlier run"))
                .count(),
            succeeded: events.iter().any(|e| e.event == "PipelineSucceeded"),
        }
    }
}

/// The events of one `events.jsonl` (unparsable lines skipped: a run may be writing it).
#[must_use]
pub fn events(path: &Path) -> Vec<Event> {
    fs_err::read_to_string(path)
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::work_dir_problems;

    #[test]
    fn work_dir_problems_finds_cut_files_and_leftovers() {
        let d = tempfile::tempdir().expect("tempdir");
        let w = d.path();
        let write = |p: &str, text: &str| {
            let path = w.join(p);
            fs_err::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs_err::write(path, text).expect("write");
        };
        write("clusters/c/installed.json", "{\"cluster\": \"c\"}");
        write(
            "runs/1/events.jsonl",
            "{\"event\":\"A\"}\n{\"event\":\"B\"}\n",
        );
        write("bundles/abc/files/x.json", "not json, not walked");
        write("cache/y.json", "not walked either");
        let (read, bad) = work_dir_problems(w);
        assert_eq!((read, bad.len()), (2, 0), "{bad:?}");

        write("state/c-install.json", "{\"tasks\": {");
        write("runs/2/events.jsonl", "{\"event\":\"A\"}\n{\"event\":\"B");
        write("clusters/c/.tmpAbC123", "");
        write("pki/c/ca.crt.kubexm-part", "");
        let (_, bad) = work_dir_problems(w);
        let has = |t: &str| bad.iter().any(|b| b.contains(t));
        assert!(has("c-install.json: not JSON"), "{bad:?}");
        assert!(has("events.jsonl: the last line is cut short"), "{bad:?}");
        assert!(has("events.jsonl:2: not JSON"), "{bad:?}");
        assert!(has(".tmpAbC123: a temporary file left behind"), "{bad:?}");
        assert!(has("ca.crt.kubexm-part: a temporary file"), "{bad:?}");
        assert_eq!(bad.len(), 5, "{bad:?}");
    }
}
