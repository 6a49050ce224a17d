//! Facts read from a lab node, as values: units, packages, the managed `/etc/hosts` block,
//! addresses, the install/delete fingerprint.

use crate::Lab;

/// Where [`record_packages`] keeps the package list a node had before the install.
const PKGS_BEFORE: &str = "/var/tmp/kubexm-lab-packages-before";

impl Lab {
    /// `systemctl is-active` of `unit` on `node` is `active`.
    #[must_use]
    pub fn unit_active(&self, node: &str, unit: &str) -> bool {
        self.ssh_ok(node, &format!("systemctl is-active -q {unit}"))
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
