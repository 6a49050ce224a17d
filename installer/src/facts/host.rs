//! What preflight learns about each node's operating system before deciding whether the
//! chosen Kubernetes version can run there: the kernel release and the cgroup hierarchy.
//!
//! The probe's output comes from the node and is hostile: it is read line by line into typed
//! values, bounded in size, and never quoted back unchecked.

use std::fmt;

use kubexm_manifests::kube_version::KernelVersion;

use super::parse::ParseError;
use crate::pipeline::Facts;

/// The probe preflight runs on every node (read-only). `stat -f` on `/sys/fs/cgroup` is the
/// kubelet's own test (runc's `IsCgroup2UnifiedMode`: the filesystem type is cgroup2).
pub const PROBE: &str = "printf 'kernel=%s\\n' \"$(uname -r)\"\n\
printf 'cgroupfs=%s\\n' \"$(stat -fc %T /sys/fs/cgroup 2>/dev/null)\"\n\
if [ -r /etc/os-release ]; then . /etc/os-release; printf 'os=%s %s\\n' \"$ID\" \"$VERSION_ID\"; fi";

/// At most this much probe output is read.
const MAX_OUTPUT: usize = 4096;
/// At most this long a value may be.
const MAX_VALUE: usize = 128;

/// The cgroup hierarchy a node booted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1 (also the "hybrid" layout: tmpfs at /sys/fs/cgroup, cgroup2 only beside it).
    V1,
    /// The unified hierarchy (cgroup2fs at /sys/fs/cgroup).
    V2,
}

impl CgroupVersion {
    fn as_str(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        }
    }
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "cgroup v1",
            CgroupVersion::V2 => "cgroup v2",
        })
    }
}

/// A node's kernel, cgroup hierarchy and operating system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// `uname -r`, checked (`[A-Za-z0-9._+~-]`, at most 128 characters).
    pub kernel_release: String,
    /// Its `major.minor`.
    pub kernel: KernelVersion,
    /// The cgroup hierarchy.
    pub cgroup: CgroupVersion,
    /// `ID VERSION_ID` of /etc/os-release, checked like the release; `None` when absent.
    pub os: Option<String>,
}

fn checked(what: &'static str, v: &str) -> Result<String, ParseError> {
    let ok = !v.is_empty()
        && v.len() <= MAX_VALUE
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '~' | '-' | ' '));
    if ok {
        Ok(v.to_string())
    } else {
        Err(ParseError::Invalid {
            what: "the host probe",
            message: format!("{what} is not a plain version string"),
        })
    }
}

/// Reads the probe's output.
pub fn parse(out: &str) -> Result<HostFacts, ParseError> {
    if out.len() > MAX_OUTPUT {
        return Err(ParseError::Invalid {
            what: "the host probe",
            message: format!(
                "{} bytes of output, at most {MAX_OUTPUT} expected",
                out.len()
            ),
        });
    }
    let (mut kernel, mut cgroupfs, mut os) = (None, None, None);
    for line in out.lines() {
        match line.split_once('=') {
            Some(("kernel", v)) => kernel = Some(checked("the kernel release", v.trim())?),
            Some(("cgroupfs", v)) => cgroupfs = Some(v.trim().to_string()),
            Some(("os", v)) => os = checked("the operating system", v.trim()).ok(),
            _ => {}
        }
    }
    let kernel_release = kernel.ok_or(ParseError::Invalid {
        what: "the host probe",
        message: "no kernel release (`uname -r`)".into(),
    })?;
    let kernel = KernelVersion::from_release(&kernel_release).ok_or(ParseError::Invalid {
        what: "the host probe",
        message: format!("kernel release {kernel_release} does not start with major.minor"),
    })?;
    let cgroup = match cgroupfs.as_deref() {
        Some("cgroup2fs") => CgroupVersion::V2,
        Some("tmpfs") => CgroupVersion::V1,
        _ => {
            return Err(ParseError::Invalid {
                what: "the host probe",
                message: "/sys/fs/cgroup is neither cgroup2fs nor tmpfs: is cgroupfs mounted?"
                    .into(),
            })
        }
    };
    Ok(HostFacts {
        kernel_release,
        kernel,
        cgroup,
        os,
    })
}

/// The prefix of `node`'s host facts in the pipeline's [`Facts`].
pub fn fact_prefix(node: &str) -> String {
    format!("host/{node}/")
}

fn key(node: &str, field: &str) -> String {
    format!("{}{field}", fact_prefix(node))
}

/// The [`crate::pipeline::ops::FactParser`] of the probe (keys under [`fact_prefix`]).
pub fn learn(out: &str) -> Result<Vec<(String, String)>, String> {
    parse(out).map(|h| h.to_facts()).map_err(|e| e.to_string())
}

impl HostFacts {
    /// The facts as the pipeline stores them, relative to the node's [`fact_prefix`].
    pub fn to_facts(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("kernel".to_string(), self.kernel_release.clone()),
            ("cgroup".to_string(), self.cgroup.as_str().to_string()),
        ];
        if let Some(os) = &self.os {
            v.push(("os".to_string(), os.clone()));
        }
        v
    }

    /// The facts learned for `node`; `None` when they were not gathered.
    pub fn from_facts(facts: &Facts, node: &str) -> Option<Self> {
        let kernel_release = facts.get(&key(node, "kernel"))?;
        let cgroup = match facts.get(&key(node, "cgroup"))?.as_str() {
            "v1" => CgroupVersion::V1,
            "v2" => CgroupVersion::V2,
            _ => return None,
        };
        Some(Self {
            kernel: KernelVersion::from_release(&kernel_release)?,
            kernel_release,
            cgroup,
            os: facts.get(&key(node, "os")),
        })
    }

    /// `kernel 4.18.0-553.el8_10.x86_64, cgroup v1, rocky 8.10`.
    pub fn summary(&self) -> String {
        let mut s = format!("kernel {}, {}", self.kernel_release, self.cgroup);
        if let Some(os) = &self.os {
            s.push_str(", ");
            s.push_str(os);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_output_of_real_hosts() {
        // Rocky Linux 8.10 (cgroup v1 by default) and Debian 12 (cgroup v2).
        let el8 =
            parse("kernel=4.18.0-553.el8_10.x86_64\ncgroupfs=tmpfs\nos=rocky 8.10\n").expect("el8");
        assert_eq!(el8.kernel, KernelVersion::new(4, 18));
        assert_eq!(el8.cgroup, CgroupVersion::V1);
        assert_eq!(el8.os.as_deref(), Some("rocky 8.10"));
        let deb = parse("kernel=6.1.0-26-amd64\ncgroupfs=cgroup2fs\nos=debian 12\n").expect("deb");
        assert_eq!(deb.cgroup, CgroupVersion::V2);
        let facts = Facts::default();
        for (k, v) in deb.to_facts() {
            facts.set(format!("{}{k}", fact_prefix("node1")), v);
        }
        assert_eq!(HostFacts::from_facts(&facts, "node1"), Some(deb));
        assert_eq!(HostFacts::from_facts(&facts, "node2"), None);
    }

    #[test]
    fn hostile_probe_output_is_refused_without_being_quoted() {
        let e = parse("kernel=6.1\u{1b}[31m\ncgroupfs=cgroup2fs\n")
            .expect_err("escape")
            .to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
        assert!(parse(&"x".repeat(MAX_OUTPUT + 1)).is_err());
        assert!(parse("kernel=6.1.0\ncgroupfs=ext4\n").is_err());
        assert!(parse("cgroupfs=cgroup2fs\n").is_err());
        // A hostile os-release is dropped, not an error.
        let h = parse("kernel=6.1.0\ncgroupfs=cgroup2fs\nos=$(reboot)\n").expect("os dropped");
        assert_eq!(h.os, None);
    }
}
