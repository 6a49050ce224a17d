//! Facts read from a lab node, as values: units, packages, the managed `/etc/hosts` block,
//! addresses, the install/delete fingerprint.

use std::fmt;

use crate::json::JournalEntry;
use crate::Lab;

/// Where [`record_packages`] keeps the package list a node had before the install.
const PKGS_BEFORE: &str = "/var/tmp/kubexm-lab-packages-before";

impl Lab {
    /// `systemctl is-active` of `unit` on `node` is `active`.
    #[must_use]
    pub fn unit_active(&self, node: &str, unit: &str) -> bool {
        self.ssh_ok(node, &format!("systemctl is-active -q {unit}"))
    }

    /// The last `lines` entries of `unit`'s journal on `node` (`journalctl -o json`).
    #[must_use]
    pub fn unit_journal(&self, node: &str, unit: &str, lines: usize) -> UnitJournal {
        let out = self.ssh(
            node,
            &format!("journalctl -u {unit} -n {lines} -o json --no-pager"),
        );
        UnitJournal {
            node: node.to_string(),
            unit: unit.to_string(),
            entries: out
                .stdout
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
        }
    }

    /// Partial uploads (`*.kubexm-part`, what an upload writes before it is verified and renamed)
    /// left on `node` where KubeXM puts files.
    #[must_use]
    pub fn partial_uploads(&self, node: &str) -> Vec<String> {
        self.ssh(
            node,
            "find /var/lib/kubexm /usr/local /etc /opt /var/lib/etcd /var/lib/kubelet \\
             -name '*.kubexm-part' 2>/dev/null || true",
        )
        .stdout
        .lines()
        .map(str::to_string)
        .collect()
    }

    /// `systemctl is-enabled` of `unit` on `node` succeeds.
    #[must_use]
    pub fn unit_enabled(&self, node: &str, unit: &str) -> bool {
        self.ssh_ok(node, &format!("systemctl is-enabled -q {unit} 2>/dev/null"))
    }

    /// Whether dpkg has `package` installed on `node`.
    #[must_use]
    pub fn installed(&self, node: &str, package: &str) -> bool {
        self.ssh(
            node,
            &format!("dpkg-query -W -f='${{Status}}' {package} 2>/dev/null"),
        )
        .stdout
            == "install ok installed"
    }

    /// Whether `path` exists on `node`.
    #[must_use]
    pub fn exists(&self, node: &str, path: &str) -> bool {
        self.ssh_ok(node, &format!("test -e {path}"))
    }

    /// The IPv4 addresses on `node`'s `eth0`.
    #[must_use]
    pub fn addresses(&self, node: &str) -> Vec<String> {
        self.ssh(node, "ip -o -4 addr show dev eth0")
            .stdout
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                w.position(|x| x == "inet")?;
                Some(w.next()?.split('/').next()?.to_string())
            })
            .collect()
    }

    /// The nodes among `nodes` holding the VIP on `eth0`.
    #[must_use]
    pub fn vip_holders(&self, nodes: &[&str]) -> Vec<String> {
        nodes
            .iter()
            .filter(|n| self.addresses(n).iter().any(|a| a == self.vip()))
            .map(|n| (*n).to_string())
            .collect()
    }

    /// The `server` sources of `node`'s `/etc/chrony/chrony.conf`: each address with its options
    /// (e.g. `iburst`, `prefer`).
    #[must_use]
    pub fn chrony_servers(&self, node: &str) -> Vec<(String, Vec<String>)> {
        chrony_servers(&self.read(node, "/etc/chrony/chrony.conf"))
    }

    /// `node`'s chrony follows `address` (a `server ADDRESS iburst ...` line).
    #[must_use]
    pub fn chrony_follows(&self, node: &str, address: &str) -> bool {
        self.chrony_servers(node)
            .iter()
            .any(|(a, opts)| a == address && opts.iter().any(|o| o == "iburst"))
    }

    /// The host names in `node`'s KubeXM-managed `/etc/hosts` block (short names, sorted);
    /// `None` when it has no block.
    #[must_use]
    pub fn hosts_block(&self, node: &str) -> Option<Vec<String>> {
        hosts_block(&self.read(node, "/etc/hosts"))
    }

    /// Records the packages `node` has (before an install), for [`Lab::node_state`].
    ///
    /// # Panics
    /// When it cannot be written.
    pub fn record_packages(&self, node: &str) {
        let _ = self
            .ssh(
                node,
                &format!("dpkg-query -W -f='${{Package}}\\n' >{PKGS_BEFORE}"),
            )
            .ok("record the node's packages");
    }

    /// The fingerprint of what an install changes and a delete must put back (`node_state.sh`).
    ///
    /// # Panics
    /// When it cannot be taken.
    #[must_use]
    pub fn node_state(&self, node: &str) -> String {
        self.ssh(node, include_str!("node_state.sh"))
            .ok("the node's state fingerprint")
            .stdout
    }
}

/// A unit's journal on a node (see [`Lab::unit_journal`]); shown as evidence.
#[derive(Debug, Clone)]
pub struct UnitJournal {
    /// The node.
    pub node: String,
    /// The unit.
    pub unit: String,
    /// Its entries, oldest first.
    pub entries: Vec<JournalEntry>,
}

impl UnitJournal {
    /// Whether a message contains `text`.
    #[must_use]
    pub fn mentions(&self, text: &str) -> bool {
        self.entries.iter().any(|e| e.text().contains(text))
    }
}

impl fmt::Display for UnitJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "--- {}: journal of {} (last {} entries)",
            self.node,
            self.unit,
            self.entries.len()
        )?;
        for e in &self.entries {
            writeln!(f, "{}", e.text())?;
        }
        Ok(())
    }
}

/// The `server ADDRESS OPTIONS...` lines of a chrony.conf.
#[must_use]
pub fn chrony_servers(conf: &str) -> Vec<(String, Vec<String>)> {
    conf.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("server")).then_some(())?;
            Some((w.next()?.to_string(), w.map(str::to_string).collect()))
        })
        .collect()
}

/// The short host names of `/etc/hosts`'s `# BEGIN KubeXM Managed Block` (sorted); `None`
/// without one.
#[must_use]
pub fn hosts_block(hosts: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    let mut inside = false;
    let mut seen = false;
    for line in hosts.lines() {
        match line.trim_end() {
            "# BEGIN KubeXM Managed Block" => {
                inside = true;
                seen = true;
            }
            "# END KubeXM Managed Block" => inside = false,
            l if inside => {
                let w: Vec<&str> = l.split_whitespace().collect();
                if w.len() == 3 && !w[2].contains('.') {
                    names.push(w[2].to_string());
                }
            }
            _ => {}
        }
    }
    names.sort();
    seen.then_some(names)
}

#[cfg(test)]
mod tests {
    #[test]
    fn chrony_server_lines() {
        let c = "pool 2.debian.pool.ntp.org iburst\n# server 10.0.0.9 iburst\nserver 10.0.0.11 iburst prefer\n";
        assert_eq!(
            super::chrony_servers(c),
            vec![(
                "10.0.0.11".to_string(),
                vec!["iburst".into(), "prefer".into()]
            )]
        );
    }

    #[test]
    fn hosts_block_short_names() {
        let t = "127.0.0.1 localhost\n# BEGIN KubeXM Managed Block\n10.0.0.11 node1.cluster.local node1\n\
                 10.0.0.12 node2.cluster.local node2\n10.0.0.100 lb.kubexm.internal\n# END KubeXM Managed Block\n";
        assert_eq!(
            super::hosts_block(t),
            Some(vec!["node1".into(), "node2".into()])
        );
        assert_eq!(super::hosts_block("127.0.0.1 localhost\n"), None);
    }
}
