//! Run a command; install OS packages.

use std::time::Duration;

use async_trait::async_trait;

use super::generic::{run_ok, run_test, GenericStep, OpPlan};
use crate::pipeline::error::StepError;
use crate::runner::shell::{self, Script};
use crate::runner::Runner;
use crate::script;

/// Runs a shell command as root. Every script is a [`Script`]: built from KubeXM's own text
/// with values quoted on the way in, never from a bare `String`.
#[derive(Debug, Clone)]
pub struct RunCommand {
    /// The command.
    pub command: Script,
    /// A check: when it exits 0 the command is not run (idempotence).
    pub unless: Option<Script>,
    /// A check after running (defaults to `unless`; none means the exit status is enough).
    pub verify: Option<Script>,
    /// Shell that undoes the command.
    pub undo: Option<Script>,
    /// Time limit.
    pub timeout: Duration,
    /// Run only when an earlier generic step of the same step changed something.
    pub when_changed: bool,
}

impl RunCommand {
    /// A command with no check, no undo and a 5-minute limit.
    pub fn new(command: impl Into<Script>) -> Self {
        Self {
            command: command.into(),
            unless: None,
            verify: None,
            undo: None,
            timeout: Duration::from_secs(300),
            when_changed: false,
        }
    }

    /// Run only when an earlier generic step of the same step changed something.
    #[must_use]
    pub fn when_changed(mut self) -> Self {
        self.when_changed = true;
        self
    }

    /// Skip when `check` exits 0.
    #[must_use]
    pub fn unless(mut self, check: impl Into<Script>) -> Self {
        self.unless = Some(check.into());
        self
    }

    /// After running, `check` must exit 0.
    #[must_use]
    pub fn verify(mut self, check: impl Into<Script>) -> Self {
        self.verify = Some(check.into());
        self
    }

    /// Rollback shell.
    #[must_use]
    pub fn undo(mut self, undo: impl Into<Script>) -> Self {
        self.undo = Some(undo.into());
        self
    }

    /// Another time limit.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

#[async_trait]
impl GenericStep for RunCommand {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "run",
            detail: if self.when_changed {
                format!("{} (when changed)", self.command)
            } else {
                self.command.to_string()
            },
            input: self.unless.as_ref().map(|u| format!("unless: {u}")),
        }
    }

    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        match &self.unless {
            Some(check) => run_test(runner, check).await,
            None => Ok(false),
        }
    }

    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        run_ok(runner, &self.command, self.timeout).await.map(drop)
    }

    async fn verify(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let Some(check) = self.verify.as_ref().or(self.unless.as_ref()) else {
            return Ok(());
        };
        if run_test(runner, check).await? {
            Ok(())
        } else {
            Err(StepError::Verify(format!(
                "after `{}`, the check `{}` still fails",
                crate::runner::summary(&self.command),
                crate::runner::summary(check)
            )))
        }
    }

    fn revert(&self) -> Option<String> {
        self.undo.as_ref().map(Script::to_string)
    }

    fn only_when_changed(&self) -> bool {
        self.when_changed
    }
}

/// Installs OS packages with the node's package manager (apt or yum/dnf), skipping installed ones.
/// Never reverted: removing OS packages could break what the operator had before.
#[derive(Debug, Clone)]
pub struct Package {
    /// Names on Debian-family systems.
    pub debs: Vec<String>,
    /// Names on RPM-family systems.
    pub rpms: Vec<String>,
    /// Where they come from.
    pub source: PackageSource,
}

/// Where [`Package`] installs from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackageSource {
    /// The node's own configured sources.
    Node,
    /// One repository only (the bundle's, set up on the node by an earlier step); the node's own
    /// sources are neither used nor changed.
    Only {
        /// apt: a deb822 sources file used as the only source list.
        apt_sources: String,
        /// apt: the directory for lists and caches, apart from the node's own.
        apt_state: String,
        /// dnf/yum: the repository id enabled alone.
        rpm_repo: String,
    },
}

/// Shell setting `$o` to apt's options for the source list `apt_sources` alone, with its own
/// lists and cache under `apt_state` (made here).
fn apt_setup(apt_sources: &str, apt_state: &str) -> Script {
    let (src, state) = (shell::quoted(apt_sources), shell::quoted(apt_state));
    script!(
        "o=\"-o Dir::Etc::SourceList={src} -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists={state}/lists -o Dir::Cache={state}/cache\"\n\
         mkdir -p {state}/lists/partial {state}/cache/archives/partial", src = src, state = state
    )
}

impl PackageSource {
    /// The install commands for `$missing`, per package manager.
    fn install_script(&self) -> String {
        match self {
            PackageSource::Node => "if command -v apt-get >/dev/null 2>&1; then\n  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing\nelif command -v dnf >/dev/null 2>&1; then\n  dnf install -y $missing\nelse\n  yum install -y $missing\nfi".to_string(),
            PackageSource::Only {
                apt_sources,
                apt_state,
                rpm_repo,
            } => {
                let (src, repo) = (shell::quoted(apt_sources), shell::quoted(rpm_repo));
                format!(
                    "if command -v apt-get >/dev/null 2>&1; then\n  \
                       {setup}\n  \
                       apt-get $o update -q >&2 || {{ echo \"apt-get update from {src} (the bundle's repository) failed\" >&2; exit 1; }}\n  \
                       DEBIAN_FRONTEND=noninteractive apt-get $o install -y --no-install-recommends $missing\n\
                     elif command -v dnf >/dev/null 2>&1; then\n  \
                       dnf --disablerepo='*' --enablerepo={repo} install -y $missing\n\
                     else\n  \
                       yum --disablerepo='*' --enablerepo={repo} install -y $missing\n\
                     fi",
                    setup = apt_setup(apt_sources, apt_state).replace('\n', "\n  "),
                )
            }
        }
    }
}

impl PackageSource {
    /// Shell setting `$o` (apt's options) and defining `pm` (dnf, else yum, with the
    /// repository options) for this source: the bundle's repository alone, or nothing (the
    /// node's own sources).
    fn options(&self) -> Script {
        match self {
            PackageSource::Node => Script::new("o=''\npm() { if command -v dnf >/dev/null 2>&1; then dnf \"$@\"; else yum \"$@\"; fi; }"),
            PackageSource::Only {
                apt_sources,
                apt_state,
                rpm_repo,
            } => {
                let repo = shell::quoted(rpm_repo);
                script!(
                    "{setup}\n\
                     pm() {{ if command -v dnf >/dev/null 2>&1; then dnf --disablerepo='*' --enablerepo={repo} \"$@\"; else yum --disablerepo='*' --enablerepo={repo} \"$@\"; fi; }}",
                    setup = apt_setup(apt_sources, apt_state), repo = repo
                )
            }
        }
    }

    /// Shell test: `package` is installed and the source offers no newer version (apt: the
    /// candidate is the installed version, as of the last `apt-get update`; dnf/yum:
    /// `check-update` lists nothing for it). `package` must be a checked package name.
    pub fn current_script(&self, package: &str) -> Script {
        let p = shell::quoted(package);
        script!(
            "{opts}\n\
             if command -v dpkg-query >/dev/null 2>&1; then\n  \
               dpkg-query -W -f='${{Status}}' {p} 2>/dev/null | grep -q 'install ok installed' || exit 1\n  \
               pol=$(LC_ALL=C apt-cache $o policy {p} 2>/dev/null)\n  \
               inst=$(printf '%s\\n' \"$pol\" | sed -n 's/^ *Installed: //p')\n  \
               cand=$(printf '%s\\n' \"$pol\" | sed -n 's/^ *Candidate: //p')\n  \
               [ -z \"$cand\" ] || [ \"$cand\" = '(none)' ] || [ \"$cand\" = \"$inst\" ]\n\
             else\n  \
               rpm -q {p} >/dev/null 2>&1 || exit 1\n  \
               rc=0; pm -q check-update {p} >/dev/null 2>&1 || rc=$?\n  \
               [ \"$rc\" != 100 ]\n\
             fi",
            opts = self.options(), p = p
        )
    }

    /// Installs `package`, or upgrades it to the newest version the source offers (apt-get
    /// install does both; dnf/yum: install when absent, upgrade when present, which for an
    /// install-only package such as `kernel` installs the newer one beside the running one).
    /// `package` must be a checked package name.
    pub fn upgrade_script(&self, package: &str) -> Script {
        let p = shell::quoted(package);
        let update = match self {
            PackageSource::Node => Script::new("apt-get update -q >&2 || echo \"warning: apt-get update failed; installing from the lists the node has\" >&2"),
            PackageSource::Only { apt_sources, .. } => script!(
                "apt-get $o update -q >&2 || {{ echo \"apt-get update from {} (the bundle's repository) failed\" >&2; exit 1; }}",
                apt_sources
            ),
        };
        script!(
            "set -e\n{opts}\n\
             if command -v apt-get >/dev/null 2>&1; then\n  \
               {update}\n  \
               DEBIAN_FRONTEND=noninteractive apt-get $o install -y --no-install-recommends -o Dpkg::Options::=--force-confold {p}\n\
             else\n  \
               if rpm -q {p} >/dev/null 2>&1; then pm upgrade -y {p}; else pm install -y {p}; fi\n\
             fi",
            opts = self.options(), update = update, p = p
        )
    }
}

impl Package {
    fn missing_script(&self) -> String {
        let q = |v: &[String]| {
            v.iter()
                .map(|n| shell::quote(n))
                .collect::<Vec<_>>()
                .join(" ")
        };
        format!(
            "if command -v dpkg-query >/dev/null 2>&1; then want=\"{}\"; else want=\"{}\"; fi\nmissing=''\nfor p in $want; do\n  if command -v dpkg-query >/dev/null 2>&1; then\n    dpkg-query -W -f='${{Status}}' \"$p\" 2>/dev/null | grep -q 'install ok installed' || missing=\"$missing $p\"\n  else\n    rpm -q \"$p\" >/dev/null 2>&1 || missing=\"$missing $p\"\n  fi\ndone\necho $missing",
            q(&self.debs),
            q(&self.rpms)
        )
    }
}

#[async_trait]
impl GenericStep for Package {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "package",
            detail: format!(
                "install deb: {} | rpm: {}{}",
                self.debs.join(" "),
                self.rpms.join(" "),
                match &self.source {
                    PackageSource::Node => String::new(),
                    PackageSource::Only {
                        apt_sources,
                        rpm_repo,
                        ..
                    } => format!(" (only from the bundle's repository: apt {apt_sources}, dnf/yum repo {rpm_repo})"),
                }
            ),
            input: None,
        }
    }

    async fn is_done(&self, runner: &dyn Runner) -> Result<bool, StepError> {
        let out = run_ok(runner, &self.missing_script(), Duration::from_secs(60)).await?;
        Ok(out.trim().is_empty())
    }

    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        let script = format!(
            "set -e\nmissing=$({})\n[ -z \"$missing\" ] && exit 0\n{}",
            self.missing_script(),
            self.source.install_script()
        );
        run_ok(runner, &script, Duration::from_secs(900))
            .await
            .map(drop)
    }

    fn revert(&self) -> Option<String> {
        None
    }
}

/// A check on the node: exit 0 passes (lines printed as `WARNING: …` become warnings for the
/// operator); any other status fails the step with what the script printed on stderr, which
/// must say what is wrong and what to do.
#[derive(Debug, Clone)]
pub struct Check {
    /// What is checked, e.g. "operating system".
    pub what: String,
    /// The script.
    pub script: String,
    /// Export `KUBEXM_CONTROL_TIME` (the control host's clock, Unix seconds with fraction) to the
    /// script when it runs, for clock-skew checks.
    pub control_time: bool,
}

impl Check {
    /// A check.
    pub fn new(what: impl Into<String>, script: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            script: script.into(),
            control_time: false,
        }
    }
}

#[async_trait]
impl GenericStep for Check {
    fn plan(&self) -> OpPlan {
        OpPlan {
            kind: "check",
            detail: format!("{}: {}", self.what, self.script),
            input: None,
        }
    }
    async fn is_done(&self, _runner: &dyn Runner) -> Result<bool, StepError> {
        Ok(false)
    }
    async fn apply(&self, runner: &dyn Runner) -> Result<(), StepError> {
        self.apply_noted(runner).await.map(drop)
    }
    async fn apply_noted(&self, runner: &dyn Runner) -> Result<super::generic::Applied, StepError> {
        let script = if self.control_time {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            format!(
                "KUBEXM_CONTROL_TIME={}.{:03}\n{}",
                now.as_secs(),
                now.subsec_millis(),
                self.script
            )
        } else {
            self.script.clone()
        };
        let out = runner
            .exec(&crate::runner::Exec::root(script).with_timeout(Duration::from_secs(120)))
            .await?;
        if out.success() {
            Ok(super::generic::Applied {
                notes: out
                    .stdout
                    .lines()
                    .filter_map(|l| l.strip_prefix("WARNING: "))
                    .map(|w| format!("{}: {w}", self.what))
                    .collect(),
                changed: false,
            })
        } else {
            let msg = if out.stderr.trim().is_empty() {
                out.stdout.trim()
            } else {
                out.stderr.trim()
            };
            Err(StepError::Check {
                what: self.what.clone(),
                message: msg.to_string(),
            })
        }
    }
    async fn verify(&self, _runner: &dyn Runner) -> Result<(), StepError> {
        Ok(())
    }
    fn revert(&self) -> Option<String> {
        None
    }
    fn mutates(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::PackageSource;

    #[test]
    fn the_bundle_source_is_the_only_one_apt_and_dnf_see() {
        let only = PackageSource::Only {
            apt_sources: "/etc/apt/sources.list.d/kubexm.sources".into(),
            apt_state: "/var/lib/kubexm/apt".into(),
            rpm_repo: "kubexm-bundle".into(),
        }
        .install_script();
        for want in [
            "-o Dir::Etc::SourceList=/etc/apt/sources.list.d/kubexm.sources -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=/var/lib/kubexm/apt/lists -o Dir::Cache=/var/lib/kubexm/apt/cache",
            "apt-get $o update -q",
            "apt-get $o install -y --no-install-recommends $missing",
            "dnf --disablerepo='*' --enablerepo=kubexm-bundle install -y $missing",
            "yum --disablerepo='*' --enablerepo=kubexm-bundle install -y $missing",
        ] {
            assert!(only.contains(want), "{want}:\n{only}");
        }
        assert!(
            !only.contains("trusted")
                && !only.contains("nogpgcheck")
                && !only.contains("allow-unauthenticated")
        );
        let current = PackageSource::Only {
            apt_sources: "/etc/apt/sources.list.d/kubexm.sources".into(),
            apt_state: "/var/lib/kubexm/apt".into(),
            rpm_repo: "kubexm-bundle".into(),
        };
        let up = current.upgrade_script("linux-image-amd64");
        for want in [
            "Dir::Etc::SourceList=/etc/apt/sources.list.d/kubexm.sources",
            "apt-get $o update -q",
            "apt-get $o install -y --no-install-recommends -o Dpkg::Options::=--force-confold linux-image-amd64",
            "dnf --disablerepo='*' --enablerepo=kubexm-bundle \"$@\"",
            "pm upgrade -y linux-image-amd64",
        ] {
            assert!(up.contains(want), "{want}:\n{up}");
        }
        let check = current.current_script("kernel");
        assert!(check.contains("pm -q check-update kernel"), "{check}");
        assert!(check.contains("apt-cache $o policy kernel"), "{check}");
        let node_up = PackageSource::Node.upgrade_script("linux-generic");
        assert!(
            node_up.contains("o=''")
                && !node_up.contains("SourceList")
                && !node_up.contains("disablerepo"),
            "{node_up}"
        );
        let node = PackageSource::Node.install_script();
        assert!(
            node.contains("apt-get install -y --no-install-recommends $missing")
                && !node.contains("SourceList")
        );
    }
}
