//! The exit codes of `kubexm-install`, a stable contract for scripts (documented in
//! `installer/docs/guide.md`, "Exit codes"): one class per kind of failure, found by walking the
//! error's chain for the library's typed errors.

use std::process::ExitCode;

use kubexm_install::intake::IntakeError;
use kubexm_install::pipeline::executor::PipelineError;
use kubexm_install::run::InstallError;
use kubexm_install::unpack::UnpackError;

/// What a run ended with. The numbers never change meaning; new classes get new numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ExitStatus {
    /// Done.
    Success = 0,
    /// Any other failure (I/O on the control host, a bug).
    Failure = 1,
    /// The command line is wrong (clap's own usage errors exit 2 as well).
    Usage = 2,
    /// cluster.yaml or a catalog file cannot be read or breaks a rule.
    InvalidConfig = 3,
    /// The bundle was refused: damaged, truncated, unsigned or signed by an untrusted key, a
    /// delta without its base, parts missing.
    BundleRefused = 4,
    /// One or more nodes could not be reached over SSH (address, credentials, host key).
    CannotConnect = 5,
    /// The pipeline ran and a task failed (rolled back on its node; `--resume` continues).
    PipelineFailed = 6,
    /// The command finished, but not everywhere: `status` found nodes unreachable or
    /// something unhealthy.
    Partial = 7,
    /// `verify-cluster` (or `install --verify`) did not finish its checks: the time limit
    /// (`--timeout`) ran out or it was interrupted; the checks not run count as failed.
    Unverified = 8,
}

/// A usage mistake the parser cannot see (e.g. `install` without `--bundle`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

/// The command did its work but found part of the cluster unreachable or unhealthy.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PartialError(pub(crate) String);

/// `verify-cluster` stopped before its checks were done (time limit, interrupt).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UnverifiedError(pub(crate) String);

/// Nodes a day-2 command needs could not be reached over SSH.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UnreachableError(pub(crate) String);

impl ExitStatus {
    /// The class of `err`: the first typed error of its chain that has one.
    pub(crate) fn of(err: &anyhow::Error) -> Self {
        err.chain()
            .find_map(Self::class)
            .unwrap_or(ExitStatus::Failure)
    }

    fn class(e: &(dyn std::error::Error + 'static)) -> Option<Self> {
        if e.is::<UsageError>() {
            return Some(Self::Usage);
        }
        if e.is::<PartialError>() {
            return Some(Self::Partial);
        }
        if e.is::<UnverifiedError>() {
            return Some(Self::Unverified);
        }
        if e.is::<UnreachableError>() {
            return Some(Self::CannotConnect);
        }
        if e.is::<kubexm_manifests::load::LoadError>()
            || e.is::<kubexm_manifests::catalog::CatalogError>()
            || e.is::<kubexm_install::context::LoadError>()
        {
            return Some(Self::InvalidConfig);
        }
        if let Some(i) = e.downcast_ref::<InstallError>() {
            return match i {
                InstallError::Connect(_) => Some(Self::CannotConnect),
                InstallError::Pipeline(_) => Some(Self::PipelineFailed),
                _ => None,
            };
        }
        if e.is::<PipelineError>() {
            return Some(Self::PipelineFailed);
        }
        if let Some(i) = e.downcast_ref::<IntakeError>() {
            return match i {
                IntakeError::Unpack(u) => Self::unpack(u),
                IntakeError::Site(_) => None,
                _ => Some(Self::BundleRefused),
            };
        }
        if let Some(u) = e.downcast_ref::<UnpackError>() {
            return Self::unpack(u);
        }
        if e.is::<kubexm_bundles::verify::VerifyError>()
            || e.is::<kubexm_install::intake::trust::TrustError>()
            || e.is::<kubexm_install::coverage::CoverageError>()
        {
            return Some(Self::BundleRefused);
        }
        None
    }

    fn unpack(u: &UnpackError) -> Option<Self> {
        matches!(u, UnpackError::Verify { .. }).then_some(Self::BundleRefused)
    }

    /// The process exit code.
    pub(crate) fn code(self) -> ExitCode {
        ExitCode::from(self as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn a_failed_task_under_context_exits_6_and_a_connect_failure_5() {
        let failed = InstallError::Pipeline(PipelineError::UnknownNode {
            task: "t".into(),
            node: "n".into(),
        });
        let err = Err::<(), _>(failed)
            .context("Failed to install")
            .expect_err("an error");
        assert_eq!(ExitStatus::of(&err), ExitStatus::PipelineFailed);
        let err = anyhow::Error::new(InstallError::Connect(Vec::new())).context("outer");
        assert_eq!(ExitStatus::of(&err), ExitStatus::CannotConnect);
        assert_eq!(
            ExitStatus::of(&anyhow::anyhow!("something else")),
            ExitStatus::Failure
        );
    }

    #[test]
    fn verify_cluster_exits_7_when_a_check_fails_and_8_when_it_did_not_finish() {
        let err = anyhow::Error::new(PartialError("dns failed".into())).context("outer");
        assert_eq!(ExitStatus::of(&err), ExitStatus::Partial);
        let err = anyhow::Error::new(UnverifiedError("timed out".into())).context("outer");
        assert_eq!(ExitStatus::of(&err), ExitStatus::Unverified);
        assert_eq!(ExitStatus::Unverified as u8, 8);
    }
}
