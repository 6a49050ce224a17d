//! What the lab's STAND-IN kubeadm, kubelet and kubectl (`tests/lab/mirror/standins`) recorded on
//! a node: every call as `SECONDS.NANOS TOOL ARGS` in `/var/log/kubexm-standin/TOOL.log`, and a
//! copy of every file they were given under `files/NNN-TOOL-NAME`.

use std::fmt;

use crate::Lab;

/// Where the stand-ins keep their records on a node.
pub const DIR: &str = "/var/log/kubexm-standin";

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// When (seconds since the epoch, the node's clock: the host's).
    pub at: f64,
    /// `TOOL ARGS...` as the tool was called.
    pub line: String,
}

/// The calls of one tool on one node, in order.
#[derive(Debug, Clone, Default)]
pub struct Calls(pub Vec<Call>);

impl Calls {
    /// Reads `TOOL.log` on `node` (no calls when there is none).
    #[must_use]
    pub fn read(lab: &Lab, node: &str, tool: &str) -> Calls {
        Calls::parse(&lab.read(node, &format!("{DIR}/{tool}.log")))
    }

    /// Parses a `TOOL.log`.
    #[must_use]
    pub fn parse(text: &str) -> Calls {
        Calls(
            text.lines()
                .filter_map(|l| {
                    let (at, line) = l.split_once(' ')?;
                    Some(Call {
                        at: at.parse().ok()?,
                        line: line.to_string(),
                    })
                })
                .collect(),
        )
    }

    /// The call lines, without their time stamps.
    #[must_use]
    pub fn lines(&self) -> Vec<&str> {
        self.0.iter().map(|c| c.line.as_str()).collect()
    }

    /// The first call whose line contains `text`.
    #[must_use]
    pub fn first(&self, text: &str) -> Option<&Call> {
        self.0.iter().find(|c| c.line.contains(text))
    }

    /// The index of the first call containing `text`.
    #[must_use]
    pub fn position(&self, text: &str) -> Option<usize> {
        self.0.iter().position(|c| c.line.contains(text))
    }

    /// The calls whose line contains `text`.
    #[must_use]
    pub fn matching(&self, text: &str) -> Vec<&Call> {
        self.0.iter().filter(|c| c.line.contains(text)).collect()
    }
}

impl fmt::Display for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "(no calls)");
        }
        for c in &self.0 {
            writeln!(f, "{:.3} {}", c.at, c.line)?;
        }
        Ok(())
    }
}

/// The files named `*-NAME` the stand-ins were given on `node`, concatenated (e.g.
/// `kubeadm-init.yaml`, `kube-flannel.yml`).
#[must_use]
pub fn given(lab: &Lab, node: &str, name: &str) -> String {
    lab.read(node, &format!("{DIR}/files/*-{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_calls_with_their_stamps() {
        let c = Calls::parse(
            "1764000000.100 kubeadm init --config x\nbroken\n1764000001.5 kubeadm join --config y\n",
        );
        assert_eq!(
            c.lines(),
            ["kubeadm init --config x", "kubeadm join --config y"]
        );
        assert!(c.first("join").is_some_and(|j| j.at > 1_764_000_001.0));
        assert_eq!(c.position("init"), Some(0));
    }
}
