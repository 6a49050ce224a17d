//! [`StepError`]: why a step failed (the engine's error, used by every step and generic step).

use std::time::Duration;

use crate::runner::RunError;

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The node could not be reached or the command could not run.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A command exited non-zero.
    #[error("`{command}` exited with {}: {stderr}", code.map_or_else(|| "a signal".to_string(), |c| format!("status {c}")))]
    Command {
        /// First line of the command.
        command: String,
        /// Exit status.
        code: Option<i32>,
        /// Its stderr.
        stderr: String,
    },
    /// A check on the node failed (the message says what is wrong and what to do).
    #[error("{what}: {message}")]
    Check {
        /// What was checked.
        what: String,
        /// The check's message.
        message: String,
    },
    /// The action ran but its verification failed.
    #[error("verification failed: {0}")]
    Verify(String),
    /// The step ran longer than its policy allows.
    #[error("step timed out after {0:?}")]
    Timeout(Duration),
    /// A template failed to render.
    #[error("template {name}: {message}")]
    Template {
        /// Template name.
        name: String,
        /// Tera's explanation.
        message: String,
    },
    /// Seeding the registry failed.
    #[error("seeding the registry: {0}")]
    Seed(String),
    /// The step cannot be built for this node (bad input; names what to fix).
    #[error("{0}")]
    Invalid(String),
    /// Certificates or keys could not be made or read (the cause says which file and why).
    #[error("{what}")]
    Pki {
        /// Which certificates (e.g. "Kubernetes certificates").
        what: &'static str,
        /// Cause.
        #[source]
        source: crate::pki::PkiError,
    },
}

impl StepError {
    /// Worth another try (transient); bad input and templates are not.
    pub fn is_retryable(&self) -> bool {
        !matches!(
            self,
            StepError::Template { .. }
                | StepError::Invalid(_)
                | StepError::Pki { .. }
                | StepError::Check { .. }
                | StepError::Run(RunError::Auth { .. })
                | StepError::Run(RunError::HostKey { .. })
        )
    }
}
