//! Kubernetes feature gates a version no longer lets be set: gates locked to their default once
//! they graduated, and gates removed later. Every component refuses to start with either (`cannot
//! set feature gate X to false, feature is locked to true`, `unrecognized feature gate: X`), so
//! `cluster.yaml` validation and the KubeKey importer both refuse them, from this ONE list.

use std::fmt;

use crate::version::KubeVersion;

/// One gate's life in Kubernetes 1.x. Source: the gate's page under kubernetes.io
/// `reference/command-line-tools-reference/feature-gates/` (its `stages` and `removed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateLife {
    /// The gate's name as components read it.
    pub name: &'static str,
    /// First minor release in which the gate is locked to [`Self::locked_to`] (it went GA).
    pub locked_from: u32,
    /// The value it is locked to.
    pub locked_to: bool,
    /// Last minor release that still reads the gate; later ones do not know it. `None`: not
    /// removed yet.
    pub last: Option<u32>,
}

/// The gates KubeXM knows to be locked or removed: the ones KubeKey's samples and defaults set
/// and those the kube-proxy modes and dual-stack needed. A gate not listed is passed through.
pub const GATES: &[GateLife] = &[
    // alpha 1.15–1.20, beta 1.21–1.22, stable 1.23–1.24, removed.
    GateLife {
        name: "IPv6DualStack",
        locked_from: 23,
        locked_to: true,
        last: Some(24),
    },
    // alpha 1.12–1.20, beta 1.21–1.22, stable 1.23–1.24, removed.
    GateLife {
        name: "TTLAfterFinished",
        locked_from: 23,
        locked_to: true,
        last: Some(24),
    },
    // alpha 1.14–1.15, beta 1.16–1.23, stable 1.24–1.26, removed.
    GateLife {
        name: "ExpandCSIVolumes",
        locked_from: 24,
        locked_to: true,
        last: Some(26),
    },
    // alpha 1.19–1.20, beta 1.21–1.23, stable 1.24–1.27, removed.
    GateLife {
        name: "CSIStorageCapacity",
        locked_from: 24,
        locked_to: true,
        last: Some(27),
    },
    // alpha 1.16–1.22, beta 1.23–1.24, stable 1.25–1.26, removed.
    GateLife {
        name: "EphemeralContainers",
        locked_from: 25,
        locked_to: true,
        last: Some(26),
    },
    // alpha 1.22–1.24, beta 1.25–1.26, stable 1.27–1.28, removed.
    GateLife {
        name: "SeccompDefault",
        locked_from: 27,
        locked_to: true,
        last: Some(28),
    },
    // alpha 1.29–1.30, beta 1.31–1.32, stable from 1.33.
    GateLife {
        name: "NFTablesProxyMode",
        locked_from: 33,
        locked_to: true,
        last: None,
    },
];

/// Why a version refuses a gate setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateRefusal {
    /// The version no longer knows the gate.
    Removed {
        /// The gate.
        gate: &'static GateLife,
        /// The version asked for.
        version: KubeVersion,
    },
    /// The version locks the gate to the other value.
    Locked {
        /// The gate.
        gate: &'static GateLife,
        /// The version asked for.
        version: KubeVersion,
    },
}

impl fmt::Display for GateRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Removed { gate, version } => write!(
                f,
                "the gate was removed after Kubernetes v1.{}; {version} refuses to start with it",
                gate.last.unwrap_or(0),
            ),
            Self::Locked { gate, version } => write!(
                f,
                "the gate is locked to {} from Kubernetes v1.{}; {version} refuses to start with {}: {}",
                gate.locked_to, gate.locked_from, gate.name, !gate.locked_to,
            ),
        }
    }
}

impl GateRefusal {
    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            Self::Removed { gate, .. } => format!("remove {} from featureGates", gate.name),
            Self::Locked { gate, .. } => format!(
                "remove {} from featureGates (or set it to {})",
                gate.name, gate.locked_to
            ),
        }
    }
}

/// Whether `version` refuses `name: value`; `None` when it accepts it (or the gate is not listed).
pub fn refusal(name: &str, value: bool, version: KubeVersion) -> Option<GateRefusal> {
    let gate = GATES.iter().find(|g| g.name == name)?;
    if version.major != 1 {
        return None;
    }
    match gate.last {
        Some(last) if version.minor > last => Some(GateRefusal::Removed { gate, version }),
        _ if version.minor >= gate.locked_from && value != gate.locked_to => {
            Some(GateRefusal::Locked { gate, version })
        }
        _ => None,
    }
}

/// Whether `name` is a feature gate name as components read it: ASCII letters and digits, a
/// letter first (the `--feature-gates=A=true,B=false` list and the YAML map key take it as is).
pub fn is_gate_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric())
        && name.len() <= 128
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> KubeVersion {
        KubeVersion::new(1, minor, 0)
    }

    #[test]
    fn locked_and_removed_gates_are_refused_per_version() {
        assert_eq!(refusal("NFTablesProxyMode", false, v(32)), None);
        assert_eq!(refusal("NFTablesProxyMode", true, v(33)), None);
        let locked = refusal("NFTablesProxyMode", false, v(33)).expect("locked on 1.33");
        assert!(matches!(locked, GateRefusal::Locked { .. }));
        assert!(
            locked.to_string().contains("NFTablesProxyMode: false")
                && locked.to_string().contains("v1.33.0"),
            "{locked}"
        );
        assert_eq!(refusal("TTLAfterFinished", true, v(24)), None);
        let removed = refusal("TTLAfterFinished", true, v(25)).expect("removed after 1.24");
        assert!(matches!(removed, GateRefusal::Removed { .. }));
        assert!(
            removed.to_string().contains("after Kubernetes v1.24"),
            "{removed}"
        );
        assert_eq!(refusal("SomeNewGate", false, v(36)), None);
    }

    #[test]
    fn gate_names_are_letters_and_digits() {
        assert!(is_gate_name("NFTablesProxyMode"));
        assert!(is_gate_name("IPv6DualStack"));
        for bad in ["", "A=true", "A,B", "A\nExecStart=/x", "1Gate", "A B", "A:"] {
            assert!(!is_gate_name(bad), "{bad:?}");
        }
    }
}
