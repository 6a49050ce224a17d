//! What preflight learns about the registry host before Harbor is installed there
//! (`registry.type: harbor`): what KubeXM cannot bring with the bundle. docker and docker
//! compose come from the bundle ([`crate::modules::registry::harbor`]), so the probe asks for the
//! rest: the machine's architecture (Harbor's offline installer holds amd64 images only), its
//! CPUs and memory, the free space on the filesystem that will hold Harbor's data directory,
//! who listens on the ports Harbor's nginx takes, and whether KubeXM's Harbor is installed
//! already (a re-run finds its own nginx on those ports).
//!
//! The output comes from the node and is hostile: it is read line by line into typed values
//! (numbers, a closed set of architectures, process names of a bounded alphabet), bounded in
//! size and count; lines that are not understood are skipped, and no error quotes the text.

use std::fmt;

use super::parse::ParseError;
use crate::pipeline::Facts;
use crate::runner::shell;

/// At most this much probe output is read.
pub const MAX_OUTPUT: usize = 16 * 1024;
/// At most this many listeners are kept.
pub const MAX_LISTENERS: usize = 16;
/// The longest process name kept (the kernel's `comm` is 15 bytes).
const MAX_PROCESS: usize = 32;

/// The probe for a Harbor host whose data directory is `data_dir`, with KubeXM's installation
/// stamp `stamp`, asking who listens on `ports` (read-only). The free space is that of the data
/// directory's nearest existing parent (the directory does not exist before the install).
pub fn probe(data_dir: &str, stamp: &str, ports: &[u16]) -> String {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!(
        "printf 'arch=%s\\n' \"$(uname -m)\"\n\
         printf 'cpus=%s\\n' \"$(nproc)\"\n\
         awk '/^MemTotal:/ {{print \"memkib=\" $2}}' /proc/meminfo\n\
         d={data}\nwhile [ ! -d \"$d\" ]; do d=$(dirname \"$d\"); done\n\
         df -Pk \"$d\" | awk 'NR==2 {{print \"availkib=\" $4}}'\n\
         if [ -e {stamp} ]; then echo installed=yes; else echo installed=no; fi\n\
         for port in {ports}; do\n  l=$(ss -Hltnp \"( sport = :$port )\" 2>/dev/null | head -n 1)\n  \
         if [ -n \"$l\" ]; then printf 'listen=%s %s\\n' \"$port\" \"$(printf '%s' \"$l\" | sed -n 's/.*users:((\"\\([^\"]*\\)\".*/\\1/p')\"; fi\ndone",
        data = shell::quote(data_dir),
        stamp = shell::quote(stamp),
        ports = ports.join(" "),
    )
}

/// A machine architecture as `uname -m` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineArch {
    /// `x86_64`.
    Amd64,
    /// `aarch64`.
    Arm64,
    /// Anything else (a checked token of at most 32 characters).
    Other(String),
}

impl MachineArch {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "x86_64" => Some(Self::Amd64),
            "aarch64" | "arm64" => Some(Self::Arm64),
            o if !o.is_empty()
                && o.len() <= 32
                && o.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                Some(Self::Other(o.to_string()))
            }
            _ => None,
        }
    }
}

impl fmt::Display for MachineArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Amd64 => f.write_str("x86_64"),
            Self::Arm64 => f.write_str("aarch64"),
            Self::Other(o) => f.write_str(o),
        }
    }
}

/// A listening TCP port and the process holding it (when `ss -p` could tell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// The port.
    pub port: u16,
    /// The process name (`[A-Za-z0-9._:+-]`, at most 32 characters).
    pub process: Option<String>,
}

/// What the registry host has for Harbor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarborHostFacts {
    /// `uname -m`.
    pub arch: MachineArch,
    /// `nproc`.
    pub cpus: u32,
    /// `MemTotal`, KiB.
    pub mem_kib: u64,
    /// Free space for the data directory, KiB (`df -Pk`, available to unprivileged users).
    pub avail_kib: u64,
    /// KubeXM's Harbor is installed (its stamp exists).
    pub installed: bool,
    /// Who listens on the ports asked about.
    pub listeners: Vec<Listener>,
}

fn invalid(message: impl Into<String>) -> ParseError {
    ParseError::Invalid {
        what: "the Harbor host probe",
        message: message.into(),
    }
}

fn process_name(s: &str) -> Option<String> {
    (!s.is_empty()
        && s.len() <= MAX_PROCESS
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:+-".contains(&b)))
    .then(|| s.to_string())
}

/// Reads the probe's output.
pub fn parse(out: &str) -> Result<HarborHostFacts, ParseError> {
    if out.len() > MAX_OUTPUT {
        return Err(invalid(format!(
            "{} bytes of output, at most {MAX_OUTPUT} expected",
            out.len()
        )));
    }
    let (mut arch, mut cpus, mut mem, mut avail, mut installed) = (None, None, None, None, None);
    let mut listeners = Vec::new();
    for line in out.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        match k {
            "arch" => arch = MachineArch::parse(v),
            "cpus" => cpus = v.parse::<u32>().ok(),
            "memkib" => mem = v.parse::<u64>().ok(),
            "availkib" => avail = v.parse::<u64>().ok(),
            "installed" => {
                installed = match v {
                    "yes" => Some(true),
                    "no" => Some(false),
                    _ => None,
                }
            }
            "listen" => {
                let (port, process) = v.split_once(' ').unwrap_or((v, ""));
                if let Ok(port) = port.parse::<u16>() {
                    if listeners.len() >= MAX_LISTENERS {
                        return Err(invalid(format!("more than {MAX_LISTENERS} listeners")));
                    }
                    listeners.push(Listener {
                        port,
                        process: process_name(process.trim()),
                    });
                }
            }
            _ => {}
        }
    }
    let missing = |what: &str| invalid(format!("no readable {what}"));
    Ok(HarborHostFacts {
        arch: arch.ok_or_else(|| missing("architecture (`uname -m`)"))?,
        cpus: cpus.ok_or_else(|| missing("CPU count (`nproc`)"))?,
        mem_kib: mem.ok_or_else(|| missing("MemTotal (/proc/meminfo)"))?,
        avail_kib: avail.ok_or_else(|| missing("free space (`df -Pk`)"))?,
        installed: installed.ok_or_else(|| missing("installation stamp answer"))?,
        listeners,
    })
}

impl HarborHostFacts {
    /// The facts as probe lines again (what the pipeline stores; [`Self::from_facts`] reads them
    /// back with [`parse`]).
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "arch={}\ncpus={}\nmemkib={}\navailkib={}\ninstalled={}\n",
            self.arch,
            self.cpus,
            self.mem_kib,
            self.avail_kib,
            if self.installed { "yes" } else { "no" }
        );
        for l in &self.listeners {
            s.push_str(&format!(
                "listen={} {}\n",
                l.port,
                l.process.as_deref().unwrap_or("")
            ));
        }
        s
    }

    /// The facts learned for `node`; `None` when they were not gathered.
    pub fn from_facts(facts: &Facts, node: &str) -> Option<Self> {
        parse(&facts.get(&fact_key(node))?).ok()
    }

    /// `x86_64, 4 CPU(s), 7812 MiB, 120 GiB free`.
    pub fn summary(&self) -> String {
        format!(
            "{}, {} CPU(s), {} MiB of memory, {} GiB free for the data directory",
            self.arch,
            self.cpus,
            self.mem_kib / 1024,
            self.avail_kib >> 20
        )
    }
}

/// The key of `node`'s Harbor host facts in the pipeline's [`Facts`].
pub fn fact_key(node: &str) -> String {
    format!("harbor/{node}/probe")
}

/// The prefix the [`learn`] parser's key goes under.
pub fn fact_prefix(node: &str) -> String {
    format!("harbor/{node}/")
}

/// The [`crate::pipeline::ops::FactParser`] of the probe (one key, `probe`, under
/// [`fact_prefix`]).
pub fn learn(out: &str) -> Result<Vec<(String, String)>, String> {
    parse(out)
        .map(|h| vec![("probe".to_string(), h.to_text())])
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the probe printed on a Debian 12 amd64 host with nginx on port 80.
    const HOST: &str =
        "arch=x86_64\ncpus=4\nmemkib=8005184\navailkib=104857600\ninstalled=no\nlisten=80 nginx\n";

    #[test]
    fn probe_output_is_read_into_typed_values_and_round_trips() {
        let h = parse(HOST).expect("probe");
        assert_eq!(h.arch, MachineArch::Amd64);
        assert_eq!(
            (h.cpus, h.mem_kib, h.avail_kib),
            (4, 8_005_184, 104_857_600)
        );
        assert!(!h.installed);
        assert_eq!(
            h.listeners,
            vec![Listener {
                port: 80,
                process: Some("nginx".into())
            }]
        );
        let facts = Facts::default();
        for (k, v) in learn(HOST).expect("learn") {
            facts.set(format!("{}{k}", fact_prefix("node1")), v);
        }
        assert_eq!(HarborHostFacts::from_facts(&facts, "node1"), Some(h));
        assert_eq!(HarborHostFacts::from_facts(&facts, "node2"), None);
        assert_eq!(
            parse("arch=aarch64\ncpus=2\nmemkib=1\navailkib=2\ninstalled=yes\nlisten=443 \n")
                .expect("arm")
                .listeners[0]
                .process,
            None
        );
    }

    #[test]
    fn the_probe_quotes_the_data_directory() {
        let p = probe(
            "/data/harbor $(reboot)",
            "/opt/kubexm-harbor/.kubexm-installed",
            &[80, 443],
        );
        assert!(p.contains("d='/data/harbor $(reboot)'\n"), "{p}");
        assert!(p.contains("for port in 80 443; do"), "{p}");
    }

    #[test]
    fn hostile_probe_output_is_refused_or_dropped_without_being_quoted() {
        assert!(parse(&"x".repeat(MAX_OUTPUT + 1)).is_err());
        // A value that is not a number is not read: the fact is missing, and the error names
        // the fact, not the text.
        let e = parse("arch=x86_64\ncpus=4\u{1b}[31m\nmemkib=1\navailkib=1\ninstalled=no\n")
            .expect_err("cpus")
            .to_string();
        assert!(e.contains("CPU count") && !e.contains('\u{1b}'), "{e}");
        // An architecture or process name outside the alphabet is dropped.
        assert!(parse("arch=$(reboot)\ncpus=1\nmemkib=1\navailkib=1\ninstalled=no\n").is_err());
        let h = parse("arch=x86_64\ncpus=1\nmemkib=1\navailkib=1\ninstalled=no\nlisten=80 evil\u{1b}name\nlisten=99999 x\n")
            .expect("dropped");
        assert_eq!(h.listeners.len(), 1, "port 99999 is not a port");
        assert_eq!(h.listeners[0].process, None);
        let many = format!(
            "arch=x86_64\ncpus=1\nmemkib=1\navailkib=1\ninstalled=no\n{}",
            "listen=80 nginx\n".repeat(MAX_LISTENERS + 1)
        );
        assert!(parse(&many).is_err());
        assert!(parse("arch=x86_64\ncpus=1\nmemkib=1\navailkib=1\ninstalled=maybe\n").is_err());
    }
}
