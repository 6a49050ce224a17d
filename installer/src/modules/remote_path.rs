//! The one way modules build paths on the nodes from names: every part is a checked path
//! component (no `..`, no `/`, no absolute part, no control character), whatever checks the
//! names passed before (`cluster.yaml` names at load time, `bundle.json` records at verify time).

use kubexm_manifests::name::RemotePath;

use crate::pipeline::StepError;

/// `base/part/…`; `base` is one of KubeXM's own absolute directories.
///
/// # Errors
///
/// [`StepError::Invalid`] naming the part that is not a safe path component.
pub(crate) fn remote_path(base: &str, parts: &[&str]) -> Result<String, StepError> {
    let mut path =
        RemotePath::base(base).map_err(|e| StepError::Invalid(format!("{base}: {e}")))?;
    for part in parts {
        path = path
            .join_str(part)
            .map_err(|e| StepError::Invalid(format!("a path under {base}: the name {e}")))?;
    }
    Ok(path.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_only_below_the_base() {
        assert_eq!(
            remote_path("/etc/kubexm/addons", &["metrics-server", "a.yaml"]).expect("path"),
            "/etc/kubexm/addons/metrics-server/a.yaml"
        );
        for bad in [
            &["../../../../etc/cron.d"][..],
            &[".."],
            &["a/b"],
            &["/etc"],
            &[""],
        ] {
            assert!(remote_path("/etc/kubexm/addons", bad).is_err(), "{bad:?}");
        }
    }
}
