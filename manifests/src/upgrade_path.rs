//! The path of a Kubernetes upgrade (issue 17): from the installed version to the target, one
//! minor at a time, as kubeadm and the version-skew policy require (a control plane may not skip
//! a minor). The versions a path may use are those the bundle(s) hold; each intermediate minor
//! uses its newest patch there. Downgrades, other majors and gaps are refused with what to do.

use thiserror::Error;

use crate::version::KubeVersion;

/// Why no upgrade path exists.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PathError {
    /// The target is older than the installed version.
    #[error("{target} is older than the installed {installed}: KubeXM does not downgrade Kubernetes (restore a backup taken before the upgrade instead)")]
    Downgrade {
        /// Installed.
        installed: KubeVersion,
        /// Asked for.
        target: KubeVersion,
    },
    /// Another major version.
    #[error("{target} is not Kubernetes {}.x like the installed {installed}", installed.major)]
    OtherMajor {
        /// Installed.
        installed: KubeVersion,
        /// Asked for.
        target: KubeVersion,
    },
    /// The bundles lack versions the path needs.
    #[error("the upgrade from {installed} to {target} goes one minor at a time and the bundle(s) hold no {} (they hold: {}); build a bundle holding {} with kubexm-build and pass it too", missing.join(", "), if held.is_empty() { "none".to_string() } else { held.join(", ") }, missing.join(" and "))]
    Missing {
        /// Installed.
        installed: KubeVersion,
        /// Asked for.
        target: KubeVersion,
        /// What is missing: `v1.21.x` for a minor, or the exact target.
        missing: Vec<String>,
        /// The versions the bundles hold.
        held: Vec<String>,
    },
}

/// The versions to install in turn to go from `installed` to `target` with the versions in
/// `available` (any order, duplicates allowed): empty when `target` is installed already; else
/// ends with `target`, which must be available itself.
pub fn upgrade_path(
    installed: KubeVersion,
    target: KubeVersion,
    available: &[KubeVersion],
) -> Result<Vec<KubeVersion>, PathError> {
    if target.major != installed.major {
        return Err(PathError::OtherMajor { installed, target });
    }
    if target < installed {
        return Err(PathError::Downgrade { installed, target });
    }
    if target == installed {
        return Ok(Vec::new());
    }
    let mut path = Vec::new();
    let mut missing = Vec::new();
    for minor in installed.minor + 1..target.minor {
        match available
            .iter()
            .filter(|v| v.major == target.major && v.minor == minor)
            .max()
        {
            Some(v) => path.push(*v),
            None => missing.push(format!("v{}.{minor}.x", target.major)),
        }
    }
    if available.contains(&target) {
        path.push(target);
    } else {
        missing.push(target.to_string());
    }
    if !missing.is_empty() {
        let mut held: Vec<KubeVersion> = available.to_vec();
        held.sort();
        held.dedup();
        return Err(PathError::Missing {
            installed,
            target,
            missing,
            held: held.iter().map(ToString::to_string).collect(),
        });
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().expect("version")
    }

    fn vs(list: &[&str]) -> Vec<KubeVersion> {
        list.iter().map(|s| v(s)).collect()
    }

    #[test]
    fn one_minor_at_a_time_with_each_minors_newest_patch() {
        let held = vs(&["v1.23.17", "v1.21.14", "v1.22.3", "v1.21.2", "v1.22.17"]);
        assert_eq!(
            upgrade_path(v("v1.20.2"), v("v1.23.17"), &held),
            Ok(vs(&["v1.21.14", "v1.22.17", "v1.23.17"]))
        );
        // A patch upgrade, and the next minor: the target alone.
        assert_eq!(
            upgrade_path(v("v1.21.2"), v("v1.21.14"), &held),
            Ok(vs(&["v1.21.14"]))
        );
        assert_eq!(
            upgrade_path(v("v1.20.2"), v("v1.21.2"), &held),
            Ok(vs(&["v1.21.2"]))
        );
        // Installed already: nothing to do.
        assert_eq!(upgrade_path(v("v1.23.17"), v("v1.23.17"), &[]), Ok(vec![]));
    }

    #[test]
    fn gaps_downgrades_and_other_majors_are_refused_with_what_to_do() {
        let err = upgrade_path(v("v1.20.2"), v("v1.23.17"), &vs(&["v1.23.17", "v1.21.14"]))
            .expect_err("v1.22 missing");
        assert_eq!(
            err,
            PathError::Missing {
                installed: v("v1.20.2"),
                target: v("v1.23.17"),
                missing: vec!["v1.22.x".into()],
                held: vec!["v1.21.14".into(), "v1.23.17".into()],
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("no v1.22.x") && msg.contains("build a bundle holding v1.22.x"),
            "{msg}"
        );
        // The target itself must be in a bundle, exactly.
        let err = upgrade_path(v("v1.20.2"), v("v1.21.14"), &vs(&["v1.21.2"])).expect_err("target");
        assert!(err.to_string().contains("no v1.21.14"), "{err}");
        let err = upgrade_path(v("v1.20.2"), v("v1.21.14"), &[]).expect_err("nothing");
        assert!(err.to_string().contains("they hold: none"), "{err}");

        let err =
            upgrade_path(v("v1.23.17"), v("v1.22.17"), &vs(&["v1.22.17"])).expect_err("downgrade");
        assert!(matches!(err, PathError::Downgrade { .. }), "{err}");
        assert!(err.to_string().contains("does not downgrade"), "{err}");
        let err = upgrade_path(v("v1.20.2"), v("v1.20.1"), &vs(&["v1.20.1"])).expect_err("patch");
        assert!(matches!(err, PathError::Downgrade { .. }), "{err}");

        let err = upgrade_path(v("v1.20.2"), v("v2.0.0"), &vs(&["v2.0.0"])).expect_err("major");
        assert!(matches!(err, PathError::OtherMajor { .. }), "{err}");
    }
}
