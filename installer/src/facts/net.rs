//! What preflight learns about each node's network before anything changes: the interfaces it
//! has and the addresses assigned to them (`/sys/class/net` and `ip -o addr show`), so the
//! configured internal addresses, the load balancer's interface and the VIP can be checked
//! against what is really there; and what a probe of the VIP found (ping, iputils arping).
//!
//! The output comes from the node and is hostile: it is read line by line into typed values
//! (an [`IfaceName`] is what the kernel accepts as a name and nothing else, an address is an
//! [`IpAddr`]), bounded in size and count; lines that are not understood are skipped, and no
//! error quotes the text.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use super::parse::ParseError;
use crate::pipeline::Facts;

/// The probe preflight runs on every node (read-only). Interfaces without an address (a VIP's
/// interface before keepalived starts may have none) appear only under `/sys/class/net`.
pub const PROBE: &str = "if ! command -v ip >/dev/null 2>&1; then echo 'ip (iproute2) is not installed: install it (kubeadm needs it too) and re-run' >&2; exit 1; fi\necho '#links'\nls -1 /sys/class/net\necho '#addrs'\nip -o addr show";

/// At most this much probe output is read.
pub const MAX_OUTPUT: usize = 256 * 1024;
/// At most this many interfaces are kept.
pub const MAX_INTERFACES: usize = 4096;
/// At most this many addresses are kept.
pub const MAX_ADDRESSES: usize = 8192;
/// The longest interface name.
pub const IFNAME_MAX: usize = kubexm_manifests::name::INTERFACE_NAME_MAX;

/// A network interface's name ([`kubexm_manifests::name::is_interface_name`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IfaceName(String);

impl IfaceName {
    /// The name when it is one.
    pub fn new(s: &str) -> Option<Self> {
        kubexm_manifests::name::is_interface_name(s).then(|| Self(s.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One address assigned to an interface.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IfaceAddr {
    /// The interface.
    pub iface: IfaceName,
    /// The address.
    pub addr: IpAddr,
}

impl fmt::Display for IfaceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.addr, self.iface)
    }
}

/// A node's interfaces and their addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetFacts {
    /// Every interface (`/sys/class/net`, plus any `ip -o addr` names).
    pub interfaces: BTreeSet<IfaceName>,
    /// Every address, with its interface.
    pub addresses: BTreeSet<IfaceAddr>,
}

fn invalid(message: impl Into<String>) -> ParseError {
    ParseError::Invalid {
        what: "the network probe",
        message: message.into(),
    }
}

/// One line of `ip -o addr show`: `2: eth0    inet 10.0.0.5/24 brd … scope global eth0\ …`.
/// The name may carry `@peer` (`eth0@if5`).
fn addr_line(line: &str) -> Option<IfaceAddr> {
    let mut words = line.split_whitespace();
    let index = words.next()?;
    index.strip_suffix(':')?.parse::<u32>().ok()?;
    let name = words.next()?;
    let name = name.split_once('@').map_or(name, |(n, _)| n);
    let iface = IfaceName::new(name)?;
    let family = words.next()?;
    if family != "inet" && family != "inet6" {
        return None;
    }
    let cidr = words.next()?;
    let addr_text = cidr.split_once('/').map_or(cidr, |(a, _)| a);
    // A link-local IPv6 address may carry its zone (`fe80::1%eth0`): not a cluster address.
    let addr: IpAddr = addr_text.parse().ok()?;
    if (family == "inet") != addr.is_ipv4() {
        return None;
    }
    Some(IfaceAddr { iface, addr })
}

/// Reads the probe's output.
pub fn parse(out: &str) -> Result<NetFacts, ParseError> {
    if out.len() > MAX_OUTPUT {
        return Err(invalid(format!(
            "{} bytes of output, at most {MAX_OUTPUT} expected",
            out.len()
        )));
    }
    #[derive(PartialEq)]
    enum Section {
        None,
        Links,
        Addrs,
    }
    let mut section = Section::None;
    let mut seen = (false, false);
    let mut f = NetFacts::default();
    for line in out.lines() {
        match line.trim() {
            "#links" => {
                section = Section::Links;
                seen.0 = true;
                continue;
            }
            "#addrs" => {
                section = Section::Addrs;
                seen.1 = true;
                continue;
            }
            _ => {}
        }
        match section {
            Section::None => {}
            Section::Links => {
                if let Some(name) = IfaceName::new(line.trim()) {
                    f.interfaces.insert(name);
                }
            }
            Section::Addrs => {
                if let Some(a) = addr_line(line) {
                    f.interfaces.insert(a.iface.clone());
                    f.addresses.insert(a);
                }
            }
        }
        if f.interfaces.len() > MAX_INTERFACES || f.addresses.len() > MAX_ADDRESSES {
            return Err(invalid(format!(
                "more than {MAX_INTERFACES} interfaces or {MAX_ADDRESSES} addresses"
            )));
        }
    }
    if !(seen.0 && seen.1) {
        return Err(invalid(
            "the interface and address lists are missing (are /sys/class/net and `ip` there?)",
        ));
    }
    Ok(f)
}

/// The prefix of `node`'s network facts in the pipeline's [`Facts`].
pub fn fact_prefix(node: &str) -> String {
    format!("net/{node}/")
}

/// The [`crate::pipeline::ops::FactParser`] of the probe (keys under [`fact_prefix`]).
pub fn learn(out: &str) -> Result<Vec<(String, String)>, String> {
    parse(out).map(|n| n.to_facts()).map_err(|e| e.to_string())
}

impl NetFacts {
    /// The facts as the pipeline stores them, relative to the node's [`fact_prefix`]:
    /// `interfaces` (names, space-separated) and `addresses` (`NAME=ADDRESS`, space-separated).
    pub fn to_facts(&self) -> Vec<(String, String)> {
        let names: Vec<&str> = self.interfaces.iter().map(IfaceName::as_str).collect();
        let addrs: Vec<String> = self
            .addresses
            .iter()
            .map(|a| format!("{}={}", a.iface, a.addr))
            .collect();
        vec![
            ("interfaces".to_string(), names.join(" ")),
            ("addresses".to_string(), addrs.join(" ")),
        ]
    }

    /// The facts learned for `node`; `None` when they were not gathered.
    pub fn from_facts(facts: &Facts, node: &str) -> Option<Self> {
        let p = fact_prefix(node);
        let names = facts.get(&format!("{p}interfaces"))?;
        let addrs = facts.get(&format!("{p}addresses"))?;
        let mut f = NetFacts::default();
        for n in names.split_whitespace() {
            f.interfaces.insert(IfaceName::new(n)?);
        }
        for a in addrs.split_whitespace() {
            let (n, ip) = a.split_once('=')?;
            f.addresses.insert(IfaceAddr {
                iface: IfaceName::new(n)?,
                addr: ip.parse().ok()?,
            });
        }
        Some(f)
    }

    /// Where `addr` is assigned on the node.
    pub fn holder_of(&self, addr: IpAddr) -> Option<&IfaceName> {
        self.addresses
            .iter()
            .find(|a| a.addr == addr)
            .map(|a| &a.iface)
    }

    /// The addresses of one family that are not loopback or link-local, for messages
    /// (`10.0.0.5 on eth0, 10.0.0.9 on eth1`; at most 8 shown).
    pub fn describe_family(&self, v4: bool) -> String {
        let list: Vec<String> = self
            .addresses
            .iter()
            .filter(|a| a.addr.is_ipv4() == v4 && !a.addr.is_loopback())
            .filter(|a| match a.addr {
                IpAddr::V4(ip) => !ip.is_link_local(),
                IpAddr::V6(ip) => (ip.segments()[0] & 0xffc0) != 0xfe80,
            })
            .map(ToString::to_string)
            .collect();
        if list.is_empty() {
            return format!("no {} address", if v4 { "IPv4" } else { "IPv6" });
        }
        let more = list.len().saturating_sub(8);
        let mut s = list.into_iter().take(8).collect::<Vec<_>>().join(", ");
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
        s
    }

    /// The interface names for messages (at most 16 shown).
    pub fn describe_interfaces(&self) -> String {
        let n = self.interfaces.len();
        let mut s = self
            .interfaces
            .iter()
            .take(16)
            .map(IfaceName::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        if n > 16 {
            s.push_str(&format!(" and {} more", n - 16));
        }
        if s.is_empty() {
            s.push_str("none");
        }
        s
    }
}

/// What a probe of an address found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// Something answered.
    Answered,
    /// Nothing answered in time.
    Silent,
    /// Not probed: the tool is not on the node, or it failed.
    Absent,
}

impl ProbeAnswer {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "answered" => Some(Self::Answered),
            "silent" => Some(Self::Silent),
            "absent" => Some(Self::Absent),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::Silent => "silent",
            Self::Absent => "absent",
        }
    }
}

/// What the VIP probe found from one node: ping (ICMP echo) and iputils arping (duplicate
/// address detection on the VIP's interface; ARP is answered even where ICMP is filtered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VipProbe {
    /// ping.
    pub ping: ProbeAnswer,
    /// arping.
    pub arping: ProbeAnswer,
}

impl VipProbe {
    /// Whether anything answered.
    pub fn answered(&self) -> bool {
        self.ping == ProbeAnswer::Answered || self.arping == ProbeAnswer::Answered
    }

    /// `ping answered, arping absent`.
    pub fn summary(&self) -> String {
        format!(
            "ping {}, arping {}",
            self.ping.as_str(),
            self.arping.as_str()
        )
    }
}

/// The probe of `vip` on `iface` (bounded: two tries of one second each, the whole under
/// `timeout 10`). Exit statuses as iputils documents them: ping 0 = a reply, 1 = none; arping
/// `-D` (duplicate address detection) 0 = no reply, 1 = a reply. Anything else (an error, the
/// timeout) counts as not probed, like a missing tool. Only iputils' arping is used: other
/// arpings take other flags.
pub fn vip_probe_script(vip: IpAddr, iface: &IfaceName) -> String {
    let arping = if vip.is_ipv4() {
        format!(
            "if command -v arping >/dev/null 2>&1 && arping -V 2>&1 | grep -q iputils; then\n  timeout 10 arping -D -q -c 2 -w 3 -I {iface} {vip} >/dev/null 2>&1\n  case $? in 0) echo arping=silent;; 1) echo arping=answered;; *) echo arping=absent;; esac\nelse echo arping=absent; fi"
        )
    } else {
        "echo arping=absent".to_string()
    };
    let ping = if vip.is_ipv4() { "ping" } else { "ping -6" };
    format!(
        "if command -v ping >/dev/null 2>&1; then\n  timeout 10 {ping} -n -c 2 -W 1 {vip} >/dev/null 2>&1\n  case $? in 0) echo ping=answered;; 1) echo ping=silent;; *) echo ping=absent;; esac\nelse echo ping=absent; fi\n{arping}"
    )
}

/// The prefix of the VIP probe's facts.
pub const VIP_PREFIX: &str = "vip/";

/// The [`crate::pipeline::ops::FactParser`] of [`vip_probe_script`] (keys under [`VIP_PREFIX`]).
pub fn learn_vip(out: &str) -> Result<Vec<(String, String)>, String> {
    let mut ping = None;
    let mut arping = None;
    for line in out.lines().take(64) {
        match line.trim().split_once('=') {
            Some(("ping", v)) => ping = ProbeAnswer::parse(v),
            Some(("arping", v)) => arping = ProbeAnswer::parse(v),
            _ => {}
        }
    }
    match (ping, arping) {
        (Some(p), Some(a)) => Ok(vec![
            ("ping".to_string(), p.as_str().to_string()),
            ("arping".to_string(), a.as_str().to_string()),
        ]),
        _ => Err("the VIP probe printed no ping= and arping= result".into()),
    }
}

impl VipProbe {
    /// The probe's result, once learned.
    pub fn from_facts(facts: &Facts) -> Option<Self> {
        Some(Self {
            ping: ProbeAnswer::parse(&facts.get(&format!("{VIP_PREFIX}ping"))?)?,
            arping: ProbeAnswer::parse(&facts.get(&format!("{VIP_PREFIX}arping"))?)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ip -o addr show` of a Debian 12 lab node (veth `eth0@if12`) and a host with a VIP.
    const NODE: &str = "#links\neth0\nlo\n#addrs\n1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n1: lo    inet6 ::1/128 scope host noprefixroute \\       valid_lft forever preferred_lft forever\n2: eth0@if12    inet 10.88.10.11/24 brd 10.88.10.255 scope global eth0\\       valid_lft forever preferred_lft forever\n2: eth0@if12    inet 10.88.10.100/32 scope global eth0\\       valid_lft forever preferred_lft forever\n2: eth0@if12    inet6 fd00:10::11/64 scope global \\       valid_lft forever preferred_lft forever\n2: eth0@if12    inet6 fe80::1c2f:aff:fe12:3456/64 scope link \\       valid_lft forever preferred_lft forever\n";

    #[test]
    fn reads_interfaces_and_addresses() {
        let n = parse(NODE).expect("node");
        let eth0 = IfaceName::new("eth0").expect("name");
        assert!(n.interfaces.contains(&eth0));
        assert_eq!(n.interfaces.len(), 2);
        assert_eq!(
            n.holder_of("10.88.10.100".parse().expect("ip")),
            Some(&eth0)
        );
        assert_eq!(n.holder_of("fd00:10::11".parse().expect("ip")), Some(&eth0));
        assert_eq!(n.holder_of("10.88.10.12".parse().expect("ip")), None);
        assert_eq!(
            n.describe_family(true),
            "10.88.10.11 on eth0, 10.88.10.100 on eth0"
        );
        assert_eq!(n.describe_family(false), "fd00:10::11 on eth0");
        // Round trip through the pipeline's facts.
        let facts = Facts::default();
        for (k, v) in n.to_facts() {
            facts.set(format!("{}{k}", fact_prefix("node1")), v);
        }
        assert_eq!(NetFacts::from_facts(&facts, "node1"), Some(n));
        assert_eq!(NetFacts::from_facts(&facts, "node2"), None);
        // An interface without an address (before keepalived puts the VIP on it).
        let bare = parse("#links\nlo\nens3\n#addrs\n").expect("bare");
        assert!(bare
            .interfaces
            .contains(&IfaceName::new("ens3").expect("n")));
        assert_eq!(bare.describe_family(true), "no IPv4 address");
    }

    #[test]
    fn hostile_output_is_bounded_and_never_quoted() {
        assert!(parse(&"x".repeat(MAX_OUTPUT + 1)).is_err());
        assert!(parse("eth0\n").is_err(), "no sections");
        let e = parse("\u{1b}[31mboom")
            .expect_err("no sections")
            .to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
        // Names the kernel refuses, addresses that are not addresses, families that lie.
        let n = parse(&format!(
            "#links\n../etc\n{}\na:b\nx y\n\u{1b}x\n.\n#addrs\n2: eth0 inet 999.1.1.1/24\n2: eth0 inet fd00::1/64\nx: eth0 inet 10.0.0.1/8\n3: $(reboot) inet 10.0.0.2/8\n3: ok inet6 10.0.0.3/8\n",
            "n".repeat(IFNAME_MAX + 1)
        ))
        .expect("parsed, junk skipped");
        assert!(n.interfaces.is_empty(), "{n:?}");
        assert!(n.addresses.is_empty(), "{n:?}");
        // Too many interfaces.
        let many: String = (0..=MAX_INTERFACES).map(|i| format!("if{i}\n")).collect();
        assert!(parse(&format!("#links\n{many}#addrs\n")).is_err());
        // Facts that were tampered with are not read.
        let facts = Facts::default();
        facts.set("net/n/interfaces", "eth0 a/b");
        facts.set("net/n/addresses", "");
        assert_eq!(NetFacts::from_facts(&facts, "n"), None);
    }

    #[test]
    fn vip_probe_results() {
        let f = learn_vip("ping=silent\narping=answered\n").expect("probe");
        let facts = Facts::default();
        for (k, v) in f {
            facts.set(format!("{VIP_PREFIX}{k}"), v);
        }
        let p = VipProbe::from_facts(&facts).expect("learned");
        assert!(p.answered());
        assert_eq!(p.summary(), "ping silent, arping answered");
        assert!(learn_vip("ping=maybe\narping=absent\n").is_err());
        assert!(learn_vip("").is_err());
        let s = vip_probe_script(
            "10.0.0.100".parse().expect("ip"),
            &IfaceName::new("eth0").expect("n"),
        );
        assert!(s.contains("timeout 10 ping -n -c 2 -W 1 10.0.0.100"), "{s}");
        assert!(
            s.contains("arping -D -q -c 2 -w 3 -I eth0 10.0.0.100"),
            "{s}"
        );
        let s6 = vip_probe_script(
            "fd00::64".parse().expect("ip"),
            &IfaceName::new("eth0").expect("n"),
        );
        assert!(
            s6.contains("ping -6") && s6.contains("echo arping=absent"),
            "{s6}"
        );
    }

    /// The probe script run against stand-in ping/arping exiting as iputils documents.
    #[test]
    fn vip_probe_reads_the_exit_statuses() {
        use std::os::unix::fs::PermissionsExt as _;
        let t = tempfile::tempdir().expect("tempdir");
        let tool = |name: &str, body: &str| {
            let p = t.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("shim");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        };
        tool("ping", "exit $PING_RC");
        tool(
            "arping",
            "if [ \"$1\" = -V ]; then echo \"$ARPING_VERSION\"; exit 0; fi\nexit $ARPING_RC",
        );
        let path = format!(
            "{}:{}",
            t.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let script = vip_probe_script(
            "10.0.0.100".parse().expect("ip"),
            &IfaceName::new("eth0").expect("n"),
        );
        let run = |ping: &str, arping: &str, version: &str| {
            let out = std::process::Command::new("sh")
                .args(["-c", &script])
                .env("PATH", &path)
                .env("PING_RC", ping)
                .env("ARPING_RC", arping)
                .env("ARPING_VERSION", version)
                .output()
                .expect("sh");
            let facts = Facts::default();
            for (k, v) in learn_vip(&String::from_utf8_lossy(&out.stdout)).expect("parsed") {
                facts.set(format!("{VIP_PREFIX}{k}"), v);
            }
            VipProbe::from_facts(&facts).expect("learned").summary()
        };
        let iputils = "arping from iputils 20221126";
        assert_eq!(run("0", "1", iputils), "ping answered, arping answered");
        assert_eq!(run("1", "0", iputils), "ping silent, arping silent");
        // Errors (2: e.g. no such device) and the timeout (124) probe nothing.
        assert_eq!(run("2", "2", iputils), "ping absent, arping absent");
        assert_eq!(run("124", "124", iputils), "ping absent, arping absent");
        // Another arping (Thomas Habets'): other flags, not used.
        assert_eq!(run("1", "1", "ARPing 2.21"), "ping silent, arping absent");
    }
}
