//! Facts first for `kernel-upgrade`: on each node, which kernel package it gets (`--package`, or
//! its OS's default), whether that package is installed and current, the kernel it runs
//! (`uname -r`), the newest kernel installed in `/boot`, and whether an earlier run installed a
//! kernel the node has not booted yet ([`PENDING`]). A node already on the newest installed
//! kernel, with its package current and nothing pending, is left alone.
//!
//! Everything a node prints is untrusted: releases, package names and OS ids are checked into
//! [`KernelRelease`], [`KernelPackage`] and [`OsInfo`] before use, and a refused value is never
//! quoted back.

use std::fmt;
use std::time::Duration;

use crate::pipeline::ops::PackageSource;
use crate::runner::{Exec, RunError, Runner};

/// Written by the kernel install, in `/run` (a tmpfs): present until the node boots again, so
/// it says "a kernel was installed and the node has not rebooted since".
pub const PENDING: &str = "/run/kubexm/kernel-reboot-pending";

/// Prints the newest kernel release installed in `/boot` (by version order; rescue images
/// left out), or nothing.
pub const NEWEST_SCRIPT: &str =
    "ls -1 /boot 2>/dev/null | sed -n 's/^vmlinuz-//p' | grep -v -- '-rescue-' | sort -V | tail -n 1";

/// Longest kernel release accepted.
const MAX_RELEASE: usize = 64;
/// Longest package name accepted.
const MAX_PACKAGE: usize = 100;

/// What a node said that is not a fact (never quoted: it is untrusted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// Not a kernel release.
    #[error("{what} is not a kernel release (1 to {MAX_RELEASE} of [A-Za-z0-9._+~-], starting with a digit): {len} byte(s) of other output")]
    Release {
        /// Where it came from (`uname -r`, the newest /boot/vmlinuz-*).
        what: String,
        /// Its length.
        len: usize,
    },
    /// Not a package name (from `--package`).
    #[error("--package {name:?} is not a package name (lowercase letters, digits and `+ - .`, starting with a letter or digit, at most {MAX_PACKAGE})")]
    Package {
        /// The name, shown escaped.
        name: String,
    },
    /// No default kernel package for the node's OS.
    #[error("no default kernel package for OS `{id}` (ID_LIKE `{like}`)")]
    UnknownOs {
        /// `/etc/os-release` `ID`.
        id: String,
        /// Its `ID_LIKE`.
        like: String,
    },
    /// The probe's output is not what it prints.
    #[error("the kernel facts' output is not as expected: {0}")]
    Output(String),
}

/// A kernel release as `uname -r` prints it (`6.1.0-18-amd64`, `5.14.0-362.el9.x86_64`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelRelease(String);

impl KernelRelease {
    /// Checks `s` (`what` names where it came from, for the error).
    ///
    /// # Errors
    /// [`KernelError::Release`] for anything but 1 to 64 of `[A-Za-z0-9._+~-]` starting with a
    /// digit.
    pub fn parse(s: &str, what: &str) -> Result<Self, KernelError> {
        let ok = !s.is_empty()
            && s.len() <= MAX_RELEASE
            && s.as_bytes()[0].is_ascii_digit()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._+~-".contains(&b));
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(KernelError::Release {
                what: what.to_string(),
                len: s.len(),
            })
        }
    }

    /// The release.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KernelRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A package name as Debian and RPM both allow it (the kernel package installed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelPackage(String);

impl KernelPackage {
    /// Checks a package name.
    ///
    /// # Errors
    /// [`KernelError::Package`] for anything but a lowercase letter or digit followed by
    /// lowercase letters, digits, `+`, `-` and `.`, at most 100 in all.
    pub fn parse(s: &str) -> Result<Self, KernelError> {
        let ok = !s.is_empty()
            && s.len() <= MAX_PACKAGE
            && (s.as_bytes()[0].is_ascii_lowercase() || s.as_bytes()[0].is_ascii_digit())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b));
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(KernelError::Package {
                name: s.chars().take(MAX_PACKAGE + 20).collect(),
            })
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KernelPackage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A node's `/etc/os-release` `ID` and `ID_LIKE`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsInfo {
    /// `ID` (`debian`, `ubuntu`, `rocky`).
    pub id: String,
    /// `ID_LIKE`, split (`rhel centos fedora`).
    pub like: Vec<String>,
}

/// Prints `id=<ID>` and `like=<ID_LIKE>` from `/etc/os-release`.
pub const OS_SCRIPT: &str = "[ -r /etc/os-release ] || { echo '/etc/os-release is missing' >&2; exit 1; }\n. /etc/os-release\nprintf 'id=%s\\nlike=%s\\n' \"${ID:-}\" \"${ID_LIKE:-}\"";

fn os_word(w: &str) -> bool {
    !w.is_empty()
        && w.len() <= 64
        && w.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// Parses [`OS_SCRIPT`]'s output.
///
/// # Errors
/// [`KernelError::Output`] when `ID` is missing or either field holds anything but lowercase
/// words of `[a-z0-9._-]`.
pub fn parse_os(out: &str) -> Result<OsInfo, KernelError> {
    let mut id = None;
    let mut like = Vec::new();
    for line in out.lines() {
        match line.split_once('=') {
            Some(("id", v)) if os_word(v) => id = Some(v.to_string()),
            Some(("like", v)) if v.split_whitespace().all(os_word) => {
                like = v.split_whitespace().map(str::to_string).collect();
            }
            _ => {
                return Err(KernelError::Output(
                    "/etc/os-release's ID or ID_LIKE is not lowercase words of [a-z0-9._-]".into(),
                ))
            }
        }
    }
    id.map(|id| OsInfo { id, like })
        .ok_or_else(|| KernelError::Output("/etc/os-release has no ID".into()))
}

/// The kernel package of an OS when `--package` is not given: Debian `linux-image-<arch>`,
/// Ubuntu `linux-generic`, the RHEL family `kernel`.
///
/// # Errors
/// [`KernelError::UnknownOs`] for any other OS (pass `--package`).
pub fn default_package(os: &OsInfo, arch: &str) -> Result<KernelPackage, KernelError> {
    let is = |name: &str| os.id == name || os.like.iter().any(|l| l == name);
    let name = if os.id == "ubuntu" || (os.id != "debian" && is("ubuntu")) {
        "linux-generic".to_string()
    } else if is("debian") {
        format!(
            "linux-image-{}",
            if arch == "arm64" { "arm64" } else { "amd64" }
        )
    } else if is("rhel") || is("fedora") || is("centos") || os.id == "openEuler" {
        "kernel".to_string()
    } else {
        return Err(KernelError::UnknownOs {
            id: os.id.clone(),
            like: os.like.join(" "),
        });
    };
    KernelPackage::parse(&name)
}

/// A node's kernel, as gathered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelState {
    /// The package installed or upgraded.
    pub package: KernelPackage,
    /// It is installed and its source offers no newer version.
    pub current: bool,
    /// `uname -r`.
    pub running: KernelRelease,
    /// The newest kernel in `/boot` (none: no kernel image there).
    pub newest: Option<KernelRelease>,
    /// A kernel was installed and the node has not booted since ([`PENDING`]).
    pub pending: bool,
}

impl KernelState {
    /// Nothing to do: the package current, the node running the newest installed kernel,
    /// nothing pending.
    pub fn up_to_date(&self) -> bool {
        self.current && !self.pending && self.newest.as_ref() == Some(&self.running)
    }

    /// What is to do, or why nothing is (one line, for the plan).
    pub fn summary(&self) -> String {
        let newest = self
            .newest
            .as_ref()
            .map_or_else(|| "none".to_string(), ToString::to_string);
        if self.up_to_date() {
            return format!(
                "already on {} (the newest installed kernel), {} current: left alone",
                self.running, self.package
            );
        }
        let mut why = Vec::new();
        if !self.current {
            why.push(format!("{} not installed or not current", self.package));
        }
        if self.newest.as_ref() != Some(&self.running) {
            why.push(format!("runs {}, newest installed {newest}", self.running));
        }
        if self.pending {
            why.push("a kernel installed by an earlier run is not booted yet".to_string());
        }
        why.join("; ")
    }
}

/// Prints the kernel facts of a node for `package` from `source` (see [`parse_state`]).
pub fn state_script(source: &PackageSource, package: &KernelPackage) -> String {
    format!(
        "if ( {current} ) >/dev/null 2>&1; then echo current=yes; else echo current=no; fi\n\
         echo \"running=$(uname -r)\"\n\
         echo \"newest=$({NEWEST_SCRIPT})\"\n\
         if [ -e {PENDING} ]; then echo pending=yes; else echo pending=no; fi",
        current = source
            .current_script(package.as_str())
            .replace('\n', "\n  "),
    )
}

/// Parses [`state_script`]'s output: each of `current`, `running`, `newest` and `pending`
/// exactly once, every value checked.
///
/// # Errors
/// [`KernelError::Output`] for a missing, repeated or unknown line, [`KernelError::Release`]
/// for a release that is not one.
pub fn parse_state(out: &str, package: &KernelPackage) -> Result<KernelState, KernelError> {
    let (mut current, mut running, mut newest, mut pending) = (None, None, None, None);
    let yes_no = |v: &str, key: &str| match v {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(KernelError::Output(format!("`{key}` is not yes or no"))),
    };
    for line in out.lines() {
        let Some((k, v)) = line.split_once('=') else {
            return Err(KernelError::Output("a line without `=`".into()));
        };
        let seen = match k {
            "current" => current.replace(yes_no(v, k)?).is_some(),
            "pending" => pending.replace(yes_no(v, k)?).is_some(),
            "running" => running
                .replace(KernelRelease::parse(v, "`uname -r`")?)
                .is_some(),
            "newest" => newest
                .replace(if v.is_empty() {
                    None
                } else {
                    Some(KernelRelease::parse(v, "the newest /boot/vmlinuz-*")?)
                })
                .is_some(),
            _ => return Err(KernelError::Output("an unknown line".into())),
        };
        if seen {
            return Err(KernelError::Output(format!("`{k}` printed twice")));
        }
    }
    match (current, running, newest, pending) {
        (Some(current), Some(running), Some(newest), Some(pending)) => Ok(KernelState {
            package: package.clone(),
            current,
            running,
            newest,
            pending,
        }),
        _ => Err(KernelError::Output(
            "`current`, `running`, `newest` or `pending` is missing".into(),
        )),
    }
}

/// Why a node's kernel facts could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    /// The probe could not run.
    #[error("cannot read the kernel facts of {node}")]
    Run {
        /// Node.
        node: String,
        /// Cause.
        #[source]
        source: RunError,
    },
    /// The probe failed on the node (its stderr, trimmed and without control characters).
    #[error("reading the kernel facts of {node} failed: {stderr}")]
    Failed {
        /// Node.
        node: String,
        /// What it printed.
        stderr: String,
    },
    /// What the node printed is not a fact.
    #[error("{node}")]
    Invalid {
        /// Node.
        node: String,
        /// Why.
        #[source]
        source: KernelError,
    },
}

/// Printable form of a node's stderr: control characters dropped, at most 400 characters.
fn printable(s: &str) -> String {
    s.trim()
        .chars()
        .filter(|c| !c.is_control() || *c == '\n')
        .take(400)
        .collect()
}

async fn probe(runner: &dyn Runner, script: &str) -> Result<String, GatherError> {
    let out = runner
        .exec(&Exec::root(script).with_timeout(Duration::from_secs(120)))
        .await
        .map_err(|source| GatherError::Run {
            node: runner.node().to_string(),
            source,
        })?;
    if out.success() {
        Ok(out.stdout)
    } else {
        Err(GatherError::Failed {
            node: runner.node().to_string(),
            stderr: printable(&out.stderr),
        })
    }
}

/// Gathers one node's kernel facts: its OS (when `package` is not given), then the state of
/// the package it gets.
///
/// # Errors
/// [`GatherError`] naming the node.
pub async fn gather(
    runner: &dyn Runner,
    arch: &str,
    package: Option<&KernelPackage>,
    source: &PackageSource,
) -> Result<KernelState, GatherError> {
    let invalid = |source| GatherError::Invalid {
        node: runner.node().to_string(),
        source,
    };
    let package = match package {
        Some(p) => p.clone(),
        None => {
            let os = parse_os(&probe(runner, OS_SCRIPT).await?).map_err(invalid)?;
            default_package(&os, arch).map_err(invalid)?
        }
    };
    let out = probe(runner, &state_script(source, &package)).await?;
    parse_state(&out, &package).map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(id: &str, like: &str) -> OsInfo {
        parse_os(&format!("id={id}\nlike={like}\n")).expect("os")
    }

    #[test]
    fn the_default_package_per_os() {
        let pkg =
            |id, like, arch| default_package(&os(id, like), arch).map(|p| p.as_str().to_string());
        assert_eq!(
            pkg("debian", "", "amd64").as_deref(),
            Ok("linux-image-amd64")
        );
        assert_eq!(
            pkg("debian", "", "arm64").as_deref(),
            Ok("linux-image-arm64")
        );
        assert_eq!(
            pkg("ubuntu", "debian", "amd64").as_deref(),
            Ok("linux-generic")
        );
        assert_eq!(
            pkg("linuxmint", "ubuntu debian", "amd64").as_deref(),
            Ok("linux-generic")
        );
        assert_eq!(
            pkg("rocky", "rhel centos fedora", "amd64").as_deref(),
            Ok("kernel")
        );
        assert_eq!(
            pkg("almalinux", "rhel centos fedora", "arm64").as_deref(),
            Ok("kernel")
        );
        assert_eq!(pkg("rhel", "fedora", "amd64").as_deref(), Ok("kernel"));
        assert_eq!(
            pkg("centos", "rhel fedora", "amd64").as_deref(),
            Ok("kernel")
        );
        let e = pkg("alpine", "", "amd64").expect_err("unknown");
        assert_eq!(
            e.to_string(),
            "no default kernel package for OS `alpine` (ID_LIKE ``)"
        );
    }

    #[test]
    fn os_release_values_are_checked() {
        for bad in [
            "id=Debian\n",
            "id=debian; reboot\n",
            "like=debian\n",
            "id=debian\nlike=$(reboot)\n",
            "id=debian\nextra=1\n",
        ] {
            assert!(parse_os(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn package_names_are_checked() {
        for good in [
            "linux-image-6.1.0-18-amd64",
            "kernel",
            "linux-generic",
            "kernel-lt",
            "linux-image-5.10.0+1",
        ] {
            assert_eq!(KernelPackage::parse(good).expect("ok").as_str(), good);
        }
        for bad in [
            "",
            "Linux",
            "-kernel",
            "kernel;reboot",
            "kernel ",
            "a b",
            "kernel$(x)",
            &"k".repeat(101),
        ] {
            let e = KernelPackage::parse(bad).expect_err("refused").to_string();
            assert!(e.starts_with("--package \""), "{e}");
        }
        // Shown escaped.
        let e = KernelPackage::parse("k\u{1b}[2J")
            .expect_err("refused")
            .to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
    }

    #[test]
    fn releases_are_checked_and_hostile_output_refused() {
        for good in [
            "6.1.0-18-amd64",
            "5.14.0-362.8.1.el9_3.x86_64",
            "6.8.0-31-generic",
            "4.19.0+1~deb10u1",
        ] {
            assert_eq!(KernelRelease::parse(good, "x").expect("ok").as_str(), good);
        }
        for bad in [
            "",
            "linux-6.1",
            "6.1.0 amd64",
            "6.1.0;reboot",
            "6.1.0$(reboot)",
            "6.1.0\n",
            "6.1.0/../../etc",
            "6.1.0'",
            &format!("6{}", "1".repeat(64)),
        ] {
            let e = KernelRelease::parse(bad, "`uname -r`").expect_err("refused");
            assert_eq!(
                e,
                KernelError::Release {
                    what: "`uname -r`".into(),
                    len: bad.len()
                }
            );
            assert!(!e.to_string().contains("reboot"));
        }
    }

    fn pkg() -> KernelPackage {
        KernelPackage::parse("linux-image-amd64").expect("package")
    }

    #[test]
    fn state_parsing_and_the_up_to_date_decision() {
        let s = parse_state(
            "current=yes\nrunning=6.1.0-18-amd64\nnewest=6.1.0-18-amd64\npending=no\n",
            &pkg(),
        )
        .expect("state");
        assert!(s.up_to_date());
        assert!(s.summary().contains("left alone"), "{}", s.summary());
        // The package not installed (the lab's first run: no kernel image in /boot at all).
        let s = parse_state(
            "current=no\nrunning=6.1.0-18-amd64\nnewest=\npending=no\n",
            &pkg(),
        )
        .expect("state");
        assert!(!s.up_to_date());
        assert_eq!(s.newest, None);
        assert_eq!(
            s.summary(),
            "linux-image-amd64 not installed or not current; runs 6.1.0-18-amd64, newest installed none"
        );
        // A newer kernel installed, not booted; or installed by a run that stopped before the reboot.
        let s = parse_state(
            "current=yes\nrunning=6.1.0-17-amd64\nnewest=6.1.0-18-amd64\npending=no\n",
            &pkg(),
        )
        .expect("state");
        assert!(!s.up_to_date());
        let s = parse_state(
            "current=yes\nrunning=6.1.0-18-amd64\nnewest=6.1.0-18-amd64\npending=yes\n",
            &pkg(),
        )
        .expect("state");
        assert!(!s.up_to_date());
    }

    #[test]
    fn hostile_or_incomplete_state_output_is_refused() {
        for bad in [
            "",
            "current=yes\nrunning=6.1.0\nnewest=6.1.0\n",
            "current=maybe\nrunning=6.1.0\nnewest=6.1.0\npending=no\n",
            "current=yes\nrunning=6.1.0\nrunning=6.2.0\nnewest=6.1.0\npending=no\n",
            "current=yes\nrunning=$(reboot)\nnewest=6.1.0\npending=no\n",
            "current=yes\nrunning=6.1.0\nnewest=6.1.0;rm\npending=no\n",
            "current=yes\nrunning=6.1.0\nnewest=6.1.0\npending=no\nextra=1\n",
            "current=yes\nrunning=6.1.0\nnewest=6.1.0\npending=no\ngarbage\n",
        ] {
            let e = parse_state(bad, &pkg()).expect_err("refused").to_string();
            assert!(!e.contains("reboot") && !e.contains(";rm"), "{e}");
        }
    }

    #[test]
    fn the_state_script_checks_the_package_from_the_same_source_as_the_install() {
        use crate::modules::osrepo::{APT_SOURCES, APT_STATE, RPM_REPO_ID};
        let only = PackageSource::Only {
            apt_sources: APT_SOURCES.into(),
            apt_state: APT_STATE.into(),
            rpm_repo: RPM_REPO_ID.into(),
        };
        let s = state_script(&only, &pkg());
        assert!(
            s.contains("Dir::Etc::SourceList=/etc/apt/sources.list.d/kubexm.sources"),
            "{s}"
        );
        assert!(s.contains("apt-cache $o policy linux-image-amd64"), "{s}");
        assert!(
            s.contains(PENDING) && s.contains("uname -r") && s.contains("vmlinuz-"),
            "{s}"
        );
    }
}
